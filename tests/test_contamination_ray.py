"""The scan on datatrove's RayPipelineExecutor, in a local Ray instance (2 workers). Ray is in the
test extra, so CI runs this (and fails, not skips, without it); elsewhere it is skipped without Ray."""

import importlib.util
import json
import os
from pathlib import Path

import pytest

if importlib.util.find_spec("ray") is None:
    if os.environ.get("CI"):
        pytest.fail("ray is not installed, and .ci/run installs it (the test extra)")
    pytest.skip("ray is not installed", allow_module_level=True)
import ray  # noqa: E402

from base_bench.contamination.scanner import scan  # noqa: E402
from base_bench.items.dataset import bundled_path, load_dataset_file  # noqa: E402

pytestmark = pytest.mark.slow(reason="a real Ray cluster, started on this machine for the scan")

ROOT = Path(__file__).resolve().parents[1]


def test_scan_on_ray_local_finds_what_the_local_executor_finds(tmp_path):
    it = load_dataset_file(bundled_path()).items[120]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for n in range(3):
        text = f"Page {n}. " + (it.context + it.continuations[it.label] if n == 1 else "Nothing to see here.")
        (corpus / f"part-{n}.jsonl").write_text(json.dumps({"text": text}) + "\n")
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        rep = scan(
            [str(corpus)],
            tmp_path / "ray",
            data=str(ROOT),
            workers=2,
            executor="ray",
            executor_options={"cpus_per_task": 1, "mem_per_cpu_gb": 0.5},
        )
    finally:
        ray.shutdown()
    local = scan([str(corpus)], tmp_path / "local", data=str(ROOT), workers=1)
    assert rep["settings"]["executor"] == "ray" and rep["settings"]["tasks"] == 3
    assert [i["id"] for i in rep["items"] if i["dirty"]] == [it.id]
    assert rep["items"] == local["items"] and rep["totals"]["documents_scanned"] == 3

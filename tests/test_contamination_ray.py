"""The scan on datatrove's RayPipelineExecutor, in a local Ray instance (2 workers). Ray is not in the
test extra (a large install); this runs where it is installed and is skipped elsewhere."""

import json
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from base_bench.contamination.scanner import scan  # noqa: E402
from base_bench.items.dataset import bundled_path, load_dataset_file  # noqa: E402

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

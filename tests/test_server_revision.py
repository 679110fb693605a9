"""--revision with --backend server pins the served model's tokenizer: a run against a served model
(tests/hostileserver.py, honest, over real HTTP) whose tokenizer is a Hub id on the fake Hub
(tests/hubserver.py). The commit it resolved to is in the report (config.model.server.
tokenizer_revision) and in the resume signature, so a run is not continued under another tokenizer
revision; a run without --revision keeps the signature it had before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hostileserver import HostileServer

from hubserver import FakeHub
from tiny import tiny_tokenizer

pytestmark = pytest.mark.slow(reason="a subprocess per case: served runs, a few seconds each")

ROOT = Path(__file__).resolve().parents[1]


def cli(hub, tmp_path, srv, out_dir: Path, *extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"), PYTHONPATH=str(ROOT))
    argv = ["--backend", "server", "--model", "tiny", "--base-url", srv.url, "--tokenizer", "org/tiny"]
    argv += ["--data", "bundled", "--limit", "4", "--concurrency", "1", "--out-dir", str(out_dir), *extra]
    return subprocess.run(
        [sys.executable, "-m", "base_bench", *argv], env=env, capture_output=True, text=True, timeout=600
    )


def test_revision_pins_the_served_models_tokenizer_and_names_the_run(tmp_path):
    folder = tmp_path / "tok"
    tiny_tokenizer().save_pretrained(folder)
    from transformers import AutoTokenizer

    srv = HostileServer(AutoTokenizer.from_pretrained(folder)).start()
    try:
        with FakeHub() as hub:
            repo = hub.add_repo("org/tiny", {p.name: p.read_bytes() for p in folder.iterdir()})
            pinned, plain = tmp_path / "pinned", tmp_path / "plain"
            p = cli(hub, tmp_path, srv, pinned, "--revision", "main")
            assert p.returncode == 0, p.stderr[-3000:]
            server = json.loads((pinned / "report.json").read_text())["config"]["model"]["server"]
            assert server["tokenizer"] == "org/tiny"
            assert server["tokenizer_revision"] == {"requested": "main", "commit": repo.commit}
            signature = json.loads((pinned / "run_config.json").read_text())["signature"]
            assert signature["model"]["tokenizer_revision"] == repo.commit
            # continued with the commit itself: the same tokenizer, the same run
            p = cli(hub, tmp_path, srv, pinned, "--revision", repo.commit, "--limit", "8", "--resume")
            assert p.returncode == 0, p.stderr[-3000:]
            # continued without the pin: refused, naming the revision, the run's files untouched
            before = {f.name: f.read_bytes() for f in pinned.iterdir()}
            p = cli(hub, tmp_path, srv, pinned, "--limit", "8", "--resume")
            errors = [x for x in p.stderr.splitlines() if x.startswith("base-bench")]
            assert p.returncode == 2 and errors[0].startswith("base-bench: error: --resume refused"), p.stderr
            assert f"tokenizer_revision: run has '{repo.commit}', now None" in p.stderr
            assert {f.name: f.read_bytes() for f in pinned.iterdir()} == before
            # without --revision: no revision recorded, and the signature as it was before the flag
            p = cli(hub, tmp_path, srv, plain)
            assert p.returncode == 0, p.stderr[-3000:]
            server = json.loads((plain / "report.json").read_text())["config"]["model"]["server"]
            assert server["tokenizer_revision"] is None
            model = json.loads((plain / "run_config.json").read_text())["signature"]["model"]
            assert set(model) == {"kind", "served_model", "root", "server_version", "tokenizer"}
    finally:
        srv.close()

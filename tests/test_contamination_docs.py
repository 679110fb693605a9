"""docs/contamination.md, run as written: its ```python and ```bash blocks in page order, in a fresh
folder holding data/test.jsonl (so `--local-data .` is the bundled set). `base-bench` lines run in
this process. The fast test sets MODEL to a tiny GGUF instead of running the `export MODEL=...` line;
the integration test runs that line too, with SmolLM2."""

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

from base_bench.commands.cli import main
from base_bench.items.dataset import bundled_path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "contamination.md"


def blocks():
    return re.findall(r"```(python|bash)\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def section(title):
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    return text[start : text.find("\n## ", start + 1)]


def run_page(folder: Path, model: str | None, capsys) -> list[str]:
    (folder / "data").mkdir(parents=True)
    os.symlink(bundled_path(), folder / "data" / "test.jsonl")
    os.chdir(folder)
    env = dict(os.environ)
    if model:
        env["MODEL"] = model
    ns: dict = {}
    commands = []
    for lang, body in blocks():
        if lang == "python":
            exec(compile(body, str(PAGE), "exec"), ns)
            continue
        for line in body.splitlines():
            if line.startswith("export MODEL="):
                if model is None:
                    env["MODEL"] = subprocess.run(
                        ["bash", "-c", line + ' && printf %s "$MODEL"'], capture_output=True, text=True, check=True
                    ).stdout
            elif line.startswith("base-bench "):
                args = shlex.split(line.replace('"$MODEL"', shlex.quote(env["MODEL"])) if "$MODEL" in line else line)
                commands.append(line)
                assert main(args[1:]) == 0, (line, capsys.readouterr().err)
            elif line.strip():
                raise AssertionError(f"unexpected line in a bash block: {line}")
    return commands


def check(folder: Path, out: str):
    assert "dirty items: 1 of 350 (answer leaked in 1)" in out
    assert "documents holding benchmark text: 2; holding the canary: 1" in out
    scan = json.loads((folder / "scan" / "contamination.json").read_text())
    dirty = [i for i in scan["items"] if i["dirty"]]
    assert [i["id"] for i in dirty] == ["language_completion-011"] and dirty[0]["answer_leaked"]
    assert scan["canary"]["documents"][0]["file"] == "corpus/notes.txt"
    clean = (folder / "clean" / "web.jsonl").read_text().splitlines()
    assert clean == [(folder / "corpus" / "web.jsonl").read_text().splitlines()[1]]
    assert not (folder / "clean" / "notes.txt").exists()
    rep = json.loads((folder / "runs" / "demo" / "contamination" / "contamination_report.json").read_text())
    assert rep["n_items"] == 40 and rep["dirty"]["n"] == 1 and rep["clean"]["n"] == 39
    assert re.search(r"clean  Elo [\d.]+  95% CI \[\d+, \d+\]  \(39 items\)", out)
    assert re.search(r"rank \d+ of 200, empirical p-value [\d.]+", out)
    import gzip

    kept = gzip.decompress((folder / "filtered" / "00000.jsonl.gz").read_bytes()).decode().splitlines()
    assert [json.loads(x)["text"] for x in kept] == ["Bread needs flour, water, salt and time."]


def test_keeping_the_benchmark_out_of_training_data_runs_as_written(tmp_path, capsys):
    import torch

    from tiny_gguf import write_tiny_gguf

    old = torch.get_num_threads()  # tiny models on a shared 2-core machine: one thread is faster
    torch.set_num_threads(1)
    try:
        model = str(write_tiny_gguf(tmp_path / "tiny.gguf"))
        cwd = os.getcwd()
        try:
            commands = run_page(tmp_path / "demo", model, capsys)
        finally:
            os.chdir(cwd)
    finally:
        torch.set_num_threads(old)
    assert [c.split()[1] for c in commands] == ["contamination", "--model", "contamination", "contamination"]
    text = section("Keeping the benchmark out of training data")
    assert all(c in text for c in commands)  # the three commands are in that section
    check(tmp_path / "demo", capsys.readouterr().out)


# The page as written, with SmolLM2, runs in tests/test_readme.py (every docs page's examples).

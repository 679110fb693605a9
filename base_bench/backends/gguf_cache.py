"""A disk cache of converted GGUF models, so that a GGUF file loads in seconds the second time.

    tokenizer, model, record = load(gguf_path, fingerprint, dtype, convert, load_entry, use_cache=True)
    # convert() -> (tokenizer, model) from the GGUF file (slow: parse metadata, dequantise)
    # load_entry(dir) -> (tokenizer, model) from a cache entry (fast: from_pretrained on safetensors)
    # record: what report.json says about the cache, e.g. {"status": "hit", "path": ..., "bytes": ...}
    tokenizer, record = load_tokenizer(gguf_path, fingerprint, convert_into, load_dir)  # the tokenizer alone
    # convert_into(folder) writes the converted tokenizer's files; load_dir(folder) reads them back
    # (the llama.cpp backend runs the GGUF itself and needs only the ids; its entry has no weights)

Converting a GGUF file (reading its metadata, building the tokenizer, dequantising every tensor)
takes tens of seconds even for a 93 MB file. The result, in the run's dtype, is saved once as an
ordinary transformers export (`tokenizer.save_pretrained`, `model.save_pretrained` as safetensors
with its config) and read back from there afterwards.

Where: `$BASE_BENCH_CACHE`, else `$XDG_CACHE_HOME/base-bench`, else `~/.cache/base-bench`
(cachedir.py); entries live in its `gguf/` folder. Clearing the cache is deleting that folder.

The cache may sit on a disk that others share, so it never runs code and trusts only what this user
alone could have written. Entries are loaded with `trust_remote_code=False` whatever the run's
--trust-remote-code (a GGUF needs no remote code; an `auto_map` planted in an entry's config is
never imported). The root and gguf/ are created mode 0700, an entry's folders 0700 and its files
0600. An entry that another user owns or can write, a link, or a gguf/ folder or root that others
can write to (a root others may write needs the sticky bit, as /tmp has; cachedir.distrust) is
neither loaded nor deleted nor replaced: the run converts the GGUF file, the record says
"refused-untrusted" with the reason, and one note names the path and how to clear it.

Key: the GGUF file's content fingerprint (model.fingerprint), the dtype, the versions of
transformers, tokenizers, gguf and torch (which do the conversion), and FORMAT_VERSION (this
module's layout). The entry's folder name is a hash of the key; its manifest.json holds the key
in full, the source file, and every file's size and digest (identity.file_digest: the whole
content, remembered by the file's stat, so an entry is read whole once, not at every hit).

An entry is written into `gguf/.tmp-<key hash>-<host>-<pid>-<random>/`, manifest.json last, every
file fsynced, and renamed to `gguf/<key hash>/` only when complete; the rename is atomic, so an
entry under its final name is whole or absent. A process killed mid-write leaves a .tmp folder
that is never read, and is deleted by a later load once its process is gone (or after a day).
Before an entry is loaded its manifest is checked against the files: a missing or unreadable
manifest, another key, a missing, extra, shorter or changed file makes it incomplete, and it is
deleted and rebuilt, never loaded. Two processes filling the same entry at once each write their
own .tmp folder; the first rename wins and the other discards its copy.

Before writing, the free space under the cache root must hold the entry (its tensors' bytes in the
run's dtype plus TOKENIZER_MARGIN) plus KEEP_FREE; otherwise the entry is skipped with a one-line
note on stderr and the run carries on with the model it converted. A dequantised 70B model is about
140 GB in bfloat16.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ModelError
from ..results.reports_io import fsync_dir
from .cachedir import ENV, cache_root, distrust_chain, distrust_tree, private_dir
from .identity import file_digest, package_version

if TYPE_CHECKING:
    import torch

FORMAT_VERSION = 2  # 2: digests of whole files (identity.FINGERPRINT_SCHEME content/3), entries checked for ownership
MANIFEST = "manifest.json"
TOKENIZER_MARGIN = 64 << 20  # tokenizer files, configs and safetensors headers; SmolLM2's take 3.5 MB
KEEP_FREE = 1 << 30  # never fill the disk to the last byte
STALE_TMP_S = 24 * 3600

STATUSES = (
    "hit",
    "written",
    "disabled",
    "refused-untrusted",
    "skipped-no-space",
    "skipped-error",
    "not-cacheable",
    "not-gguf",
)


def entry_key(fingerprint: str, dtype: torch.dtype) -> dict:
    """Everything that can change the converted tokenizer or weights."""
    import torch  # here, not at the top: the llama.cpp backend reads tokenizer entries without torch

    return {
        "format": FORMAT_VERSION,
        "gguf_fingerprint": fingerprint,
        "dtype": str(dtype).removeprefix("torch."),
        "transformers": package_version("transformers"),
        "tokenizers": package_version("tokenizers"),
        "gguf": package_version("gguf"),
        "torch": torch.__version__,
    }


def key_hash(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


def entry_dir(root: Path, key: dict) -> Path:
    return root / "gguf" / key_hash(key)


def note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr)


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n < 10e9 else f"{n / 1e9:.0f} GB"


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------- checking


def problem(entry: Path, key: dict) -> str | None:
    """Why `entry` must not be loaded (None when it is complete and matches `key`)."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no manifest"
    except (OSError, ValueError) as exc:
        return f"unreadable manifest ({type(exc).__name__})"
    if not isinstance(manifest, dict) or manifest.get("key") != key or not isinstance(manifest.get("files"), dict):
        return "manifest for another key"
    files = manifest["files"]
    try:
        present = {p.relative_to(entry).as_posix() for p in entry.rglob("*") if p.is_file()} - {MANIFEST}
        if present != set(files):
            missing, extra = sorted(set(files) - present), sorted(present - set(files))
            return (
                f"files missing: {', '.join(missing)}" if missing else f"files not in the manifest: {', '.join(extra)}"
            )
        for name, meta in sorted(files.items()):
            size = (entry / name).stat().st_size
            if not isinstance(meta, dict) or size != meta.get("size"):
                return (
                    f"{name} has {size} bytes, the manifest says {meta.get('size') if isinstance(meta, dict) else '?'}"
                )
            if file_digest(entry / name) != meta.get("digest"):
                return f"{name} differs from its digest in the manifest"
    except OSError as exc:
        return f"unreadable ({exc.strerror or type(exc).__name__})"
    return None


def _discard(path: Path) -> None:
    """Remove a folder; renamed aside first, so that its final name is free at once."""
    trash = path.parent / f".trash-{uuid.uuid4().hex[:12]}"
    try:
        path.rename(trash)
    except OSError:
        return  # gone already, or not ours to delete; a later rename onto it fails and says so
    shutil.rmtree(trash, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_leftovers(gguf_dir: Path) -> list[Path]:
    """Delete .tmp folders of writers that died (same host, pid gone; or older than a day) and
    .trash folders. Returns what was deleted."""
    gone = []
    if not gguf_dir.is_dir():
        return gone
    host = socket.gethostname()
    for p in gguf_dir.iterdir():
        if p.name.startswith(".trash-"):
            shutil.rmtree(p, ignore_errors=True)
            gone.append(p)
        elif p.name.startswith(".tmp-"):
            parts = p.name.split("-")  # .tmp-<hash>-<host...>-<pid>-<random>
            try:
                pid, same_host = int(parts[-2]), "-".join(parts[2:-2]) == host
                old = time.time() - p.stat().st_mtime > STALE_TMP_S
            except (ValueError, IndexError, OSError):
                continue
            if old or (same_host and pid != os.getpid() and not _pid_alive(pid)):
                shutil.rmtree(p, ignore_errors=True)
                gone.append(p)
    return gone


# ----------------------------------------------------------------------------------------- writing


def _tensor_bytes(model) -> int:
    """Bytes of the model's state (tied tensors once), as save_pretrained will write them."""
    seen, total = set(), 0
    for t in model.state_dict().values():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.numel()) if t.device.type != "meta" else id(t)
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def cacheable(model, dtype: torch.dtype) -> bool:
    """True when the model holds plain (dequantised) tensors in `dtype`, as transformers loads a GGUF
    without GGUF matmul kernels. Weights kept packed for such kernels are not what the cache holds."""
    if any(type(m).__name__.lower().startswith("gguf") for m in model.modules()):
        return False
    return all(p.dtype == dtype for p in model.parameters())


@contextlib.contextmanager
def _as_plain_export(model):
    """Let save_pretrained write a GGUF-loaded model: transformers refuses to serialise a model
    that carries a GGUF quantizer, even when its weights were dequantised on load."""
    quantizer = getattr(model, "hf_quantizer", None)
    had_qc = hasattr(model.config, "quantization_config")
    qc = getattr(model.config, "quantization_config", None)
    model.hf_quantizer = None
    if had_qc:
        del model.config.quantization_config
    try:
        yield model
    finally:
        model.hf_quantizer = quantizer
        if had_qc:
            model.config.quantization_config = qc


def _fsync(path: Path) -> None:
    """Flush a file to disk (OSError if that fails), or a folder's entries (where the platform allows it)."""
    if path.is_dir():
        fsync_dir(path)
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _owner_only(folder: Path) -> None:
    """Folders 0700 and files 0600, whatever the umask: an entry others could write to is refused."""
    for dirpath, _, filenames in os.walk(folder):
        os.chmod(dirpath, 0o700)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o600)


def _manifest(tmp: Path, key: dict, source: Path) -> dict:
    files = {}
    for p in sorted(q for q in tmp.rglob("*") if q.is_file()):
        _fsync(p)
        # settled: written by us, done, in a folder only we can write (so no racy-mtime rule)
        files[p.relative_to(tmp).as_posix()] = {"size": p.stat().st_size, "digest": file_digest(p, settled=True)}
    return {
        "format": FORMAT_VERSION,
        "key": key,
        "source": {"name": source.name, "path": str(source)},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "files": files,
        "bytes": sum(f["size"] for f in files.values()),
    }


def write_entry(root: Path, key: dict, source: Path, tokenizer, model) -> dict:
    """Save tokenizer and model as the entry for `key`; return the cache record for the report."""

    def save(tmp: Path) -> None:
        tokenizer.save_pretrained(tmp)
        with _as_plain_export(model):
            model.save_pretrained(tmp)

    return _publish(root, key, source, _tensor_bytes(model) + TOKENIZER_MARGIN, save, "the converted GGUF model")


def _publish(root: Path, key: dict, source: Path, need: int, save: Callable[[Path], None], what: str) -> dict:
    """Fill a .tmp folder with `save(tmp)`, add the manifest, and rename it to the entry for `key`."""
    final = entry_dir(root, key)
    free = shutil.disk_usage(root).free
    if free < need + KEEP_FREE:
        note(
            f"not caching {what}: the entry needs {_gb(need)} (plus {_gb(KEEP_FREE)} kept "
            f"free), {_gb(free)} free in {root}"
        )
        return {"status": "skipped-no-space", "path": None, "bytes_needed": need, "bytes_free": free}
    tmp = final.parent / f".tmp-{final.name}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir(mode=0o700)
        save(tmp)
        _owner_only(tmp)
        manifest = _manifest(tmp, key, source)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        os.chmod(tmp / MANIFEST, 0o600)
        _fsync(tmp / MANIFEST)
        _fsync(tmp)
        try:
            os.rename(tmp, final)  # atomic; refused when another process published first
        except OSError:
            if problem(final, key) is not None:
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            return {
                "status": "written",
                "path": str(final),
                "bytes": dir_bytes(final),
                "note": "another process wrote the same entry first; its copy is kept",
            }
        _fsync(final.parent)
    except ModelError:  # `save` could not make what the entry holds: say so, do not try again uncached
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except Exception as exc:  # noqa: BLE001 - a cache that cannot be written must not stop the run
        shutil.rmtree(tmp, ignore_errors=True)
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        note(f"not caching {what}: {text}")
        return {"status": "skipped-error", "path": None, "error": text}
    size = dir_bytes(final)
    note(f"cached {what} ({_gb(size)}) in {final}; later loads read it from there")
    return {"status": "written", "path": str(final), "bytes": size}


# ----------------------------------------------------------------------------------------- loading


def untrusted(root: Path, final: Path) -> tuple[Path, str] | None:
    """(path, reason) when the entry `final`, or a folder above it, could have been written by another
    user, so that it must not be loaded: cachedir's rules for the root, gguf/ and the whole entry."""
    return distrust_chain(root, final.parent) or distrust_tree(final)


def refusal(what: str, root: Path, bad: tuple[Path, str]) -> str:
    """The one-line note for a cache that is not ours alone: what is wrong, and how to clear it."""
    path, why = bad
    fix = f"set {ENV} to a folder of your own" if path == root else f"remove it (`rm -rf {path}`, as its owner)"
    return (
        f"not using the cache for {what}: {path}: {why}, so it could hold another user's files; {fix}, "
        "or pass --no-cache"
    )


def _lookup(root: Path, key: dict, load_entry: Callable[[Path], object], what: str):
    """(loaded, record): the entry for `key` loaded; or (None, None) when there is none (a damaged one
    is deleted); or (None, refused record) when it, or a folder above it, could have been written by
    another user: then it is neither loaded nor replaced, with one note."""
    final = entry_dir(root, key)
    bad = untrusted(root, final) if os.path.lexists(final) else distrust_chain(root, final.parent)
    if bad:
        note(refusal(what, root, bad))
        return None, {"status": "refused-untrusted", "path": str(final), "reason": f"{bad[0]}: {bad[1]}"}
    if not os.path.lexists(final):
        return None, None
    why = problem(final, key)
    if why is None:
        try:
            return load_entry(final), {"status": "hit", "path": str(final), "bytes": dir_bytes(final)}
        except Exception as exc:  # noqa: BLE001 - a damaged entry is rebuilt, not fatal
            why = f"it does not load ({(str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]})"
    note(f"the GGUF cache entry {final} is incomplete or damaged ({why}); rebuilding it")
    _discard(final)
    return None, None


def _make_gguf_dir(root: Path, what: str) -> dict | None:
    """Create the cache's gguf/ folder, private (mode 0700, the root too when new), and delete the
    .tmp folders of dead writers; None, or the record when it cannot be created."""
    folder = root / "gguf"
    try:
        private_dir(folder)
    except OSError as exc:
        note(f"not caching {what}: cannot create {folder} ({exc.strerror})")
        return {"status": "skipped-error", "path": None, "error": str(exc)}
    clean_leftovers(folder)
    return None


def load(
    gguf_path: Path,
    fingerprint: str,
    dtype: torch.dtype,
    convert: Callable[[], tuple],
    load_entry: Callable[[Path], tuple],
    use_cache: bool = True,
    root: Path | None = None,
):
    """(tokenizer, model, record): from the cache entry when there is a complete one, else from
    `convert()`, and then written to the cache (unless `use_cache` is False: then the cache is
    neither read nor written, nor its folder created). An entry that another user could have
    written is neither loaded nor replaced: the record says "refused-untrusted", with one note.
    `load_entry(dir)` must load plain files only: never with trust_remote_code."""
    if not use_cache:
        tokenizer, model = convert()
        return tokenizer, model, {"status": "disabled", "path": None}
    root = cache_root() if root is None else root
    key = entry_key(fingerprint, dtype)
    what = "the converted GGUF model"
    loaded, record = _lookup(root, key, load_entry, what)
    if loaded is not None:
        return (*loaded, record)
    tokenizer, model = convert()
    if record is not None:
        return tokenizer, model, record
    if not cacheable(model, dtype):
        return tokenizer, model, {"status": "not-cacheable", "path": None}
    failed = _make_gguf_dir(root, what)
    if failed:
        return tokenizer, model, failed
    return tokenizer, model, write_entry(root, key, gguf_path, tokenizer, model)


def tokenizer_key(fingerprint: str) -> dict:
    """The key of a tokenizer-only entry (for backends that run the GGUF itself, such as llama.cpp)."""
    return {
        "format": FORMAT_VERSION,
        "gguf_fingerprint": fingerprint,
        "part": "tokenizer",
        "transformers": package_version("transformers"),
        "tokenizers": package_version("tokenizers"),
        "gguf": package_version("gguf"),
    }


def load_tokenizer(
    gguf_path: Path,
    fingerprint: str,
    convert_into: Callable[[Path], None],
    load_dir: Callable[[Path], object],
    use_cache: bool = True,
    root: Path | None = None,
):
    """(tokenizer, record): the tokenizer converted from the GGUF file, alone (the llama.cpp backend
    needs no converted weights, only the ids). `convert_into(folder)` writes the converted tokenizer's
    files into an empty folder (slow: Gemma 3's 262k-token vocabulary takes 16 s on 2 cores) and
    raises ModelError if it cannot; `load_dir(folder)` reads a tokenizer from such a folder (under a
    second). From the cache entry when there is a complete one; else converted into a new entry and
    read from there. Without the cache (`use_cache` False, an entry another user could have written,
    or one that cannot be written) the files go to a temporary folder, deleted once read. The same
    rules as `load` for entries another user could have written."""
    if not use_cache:
        return _convert_aside(convert_into, load_dir), {"status": "disabled", "path": None}
    root = cache_root() if root is None else root
    key = tokenizer_key(fingerprint)
    what = "the converted GGUF tokenizer"
    tokenizer, record = _lookup(root, key, load_dir, what)
    if tokenizer is not None:
        return tokenizer, record
    if record is not None:  # refused: neither read nor replaced
        return _convert_aside(convert_into, load_dir), record
    failed = _make_gguf_dir(root, what)
    if failed:
        return _convert_aside(convert_into, load_dir), failed
    record = _publish(root, key, gguf_path, TOKENIZER_MARGIN, convert_into, what)
    if record["path"] is None:  # not cached (no room, or the entry could not be written)
        return _convert_aside(convert_into, load_dir), record
    return load_dir(Path(record["path"])), record


def _convert_aside(convert_into: Callable[[Path], None], load_dir: Callable[[Path], object]):
    """Convert into a temporary folder, read the tokenizer from it, and delete the folder."""
    with tempfile.TemporaryDirectory(prefix="base-bench-tokenizer-") as tmp:
        convert_into(Path(tmp))
        return load_dir(Path(tmp))

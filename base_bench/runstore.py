"""The run directory: what is finished, what it was computed with, and writing it safely.

    store = RunStore(out_dir)
    store.check(signature, resume)       # read-only: may a run start (or resume) here? RunError if not
    done = store.begin(signature, settings, resume)   # the same check, then finished ItemResults
                                                      # (resume) or a new run_config.json
    store.append(result)                 # one line, flushed and fsynced, per finished item
    store.write_text("report.json", s)   # atomic replace

Finished work is keyed to a signature: a hash of everything that changes a score (model identity,
data checksum, add_bos, dtype, device type, runner scoring version). Batch size, threads and
--limit do not change any score, so a run may be resumed with other values for them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path

from .errors import RunError
from .records import ItemResult
from .reports_io import write_atomic

RUN_FILES = ("report.json", "predictions.md", "partial_results.jsonl", "run_config.json")
PARTIAL = "partial_results.jsonl"
CONFIG = "run_config.json"


def signature_hash(signature: dict) -> str:
    return hashlib.sha256(json.dumps(signature, sort_keys=True).encode()).hexdigest()


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def signature_differences(old: dict, new: dict) -> list[str]:
    a, b = _flatten(old), _flatten(new)
    return [f"{k}: run has {a.get(k)!r}, now {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


class RunStore:
    def __init__(self, out_dir: str | Path):
        self.dir = Path(out_dir)

    def path(self, name: str) -> Path:
        return self.dir / name

    def holds_run(self) -> bool:
        return any(self.path(n).exists() for n in RUN_FILES)

    def check(self, signature: dict, resume: bool) -> None:
        """Raise RunError unless a run with `signature` may start here (or, with `resume`, continue
        the one here). Reads only; call it before loading a model, to fail fast."""
        if self.dir.exists() and not self.dir.is_dir():
            raise RunError(f"out-dir {self.dir} is a file, not a directory")
        if not self.holds_run():
            return
        if not resume:
            raise RunError(f"{self.dir} already holds a run; continue it with --resume (resume=True in Python), "
                           "or pick another out-dir")
        self.check_signature(signature)

    def begin(self, signature: dict, settings: dict, resume: bool) -> dict[str, ItemResult]:
        """Check as `check` does, then return the finished results (resume) or start a new run."""
        self.check(signature, resume)
        done = self.load_partial() if resume else {}
        if self.read_config() is None:
            self.start(signature, settings)
        return done

    def read_config(self) -> dict | None:
        p = self.path(CONFIG)
        if not p.exists():
            return None
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise RunError(f"{p} is unreadable ({e}); not touching this run") from None

    def check_signature(self, signature: dict) -> None:
        cfg = self.read_config()
        if cfg is None:
            if self.path(PARTIAL).exists():
                raise RunError(f"{self.dir} has {PARTIAL} but no {CONFIG}; cannot tell what it was computed with")
            return
        old = cfg.get("signature", {})
        diffs = signature_differences(old, signature)
        if diffs:
            raise RunError(
                f"--resume refused: {self.dir} was run with a different configuration; it differs in\n  "
                + "\n  ".join(diffs)
                + "\nUse another --out-dir for this configuration."
            )

    def load_partial(self, repair: bool = True) -> dict[str, ItemResult]:
        """Finished results by id. A last line cut short by a crash is dropped (and, with
        `repair`, cut from the file so that appends continue on a clean line)."""
        p = self.path(PARTIAL)
        if not p.exists():
            return {}
        raw = p.read_bytes()
        # Every finished item ends with "\n"; bytes after the last newline are a torn write.
        keep = raw.rfind(b"\n") + 1
        done: dict[str, ItemResult] = {}
        for n, line in enumerate(raw[:keep].splitlines(), 1):
            if not line.strip():
                continue
            try:
                r = ItemResult.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError):
                raise RunError(f"{p}: line {n} is damaged; not touching this run") from None
            done.setdefault(r.id, r)
        if repair and keep < len(raw):
            with open(p, "r+b") as f:
                f.truncate(keep)
                f.flush()
                os.fsync(f.fileno())
        return done

    def start(self, signature: dict, settings: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = {"signature": signature, "signature_sha256": signature_hash(signature), "settings": settings}
        self.write_text(CONFIG, json.dumps(cfg, indent=2, sort_keys=True) + "\n")

    def append(self, result: ItemResult) -> None:
        self.append_many([result])

    def append_many(self, results) -> None:
        """Append one line per result in one write, flushed and fsynced. The file is locked while
        it is written, so ranks of one run that share the out-dir never interleave their lines."""
        data = "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in results).encode("utf-8")
        fd = os.open(self.path(PARTIAL), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)  # closing releases the lock

    def write_text(self, name: str, text: str) -> None:
        """Write via a temporary file and rename, so a crash never leaves half a file."""
        write_atomic(self.path(name), text)

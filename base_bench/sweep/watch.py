"""--watch: the new checkpoints of a training run that is still writing them, each once it is complete.

    watcher = Watcher(["ckpt/checkpoint-*"], None, settle=60)
    for spec in watcher.ready(known):      # (model, revision) pairs complete now and not yet known
        ...

A checkpoint is complete when:
* it is a folder holding the HF Trainer's `trainer_state.json` (the Trainer writes it after the
  weights), or
* its files (names, sizes and modification times; a folder's, or the file's own) have not changed
  for `settle` seconds since the watcher first saw them.
A Hub id is complete at once. Anything else that matches is looked at again at the next scan.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .members import TRAINER_STATE, expand

MAX_FILES = 10_000  # files of one checkpoint folder looked at; a folder with more is read as changing


def shape(path: str) -> tuple | None:
    """The (name, size, mtime) of the files of `path` (a file, or a folder's files), or None when it
    cannot be read (being written, deleted)."""
    p = Path(path)
    try:
        if p.is_file():
            st = p.stat()
            return ((p.name, st.st_size, st.st_mtime_ns),)
        out = []
        for root, dirs, files in os.walk(p):
            dirs.sort()
            for f in sorted(files):
                st = os.lstat(os.path.join(root, f))
                out.append((os.path.relpath(os.path.join(root, f), p), st.st_size, st.st_mtime_ns))
                if len(out) > MAX_FILES:
                    return None
        return tuple(out) if out else None
    except OSError:
        return None


class Watcher:
    def __init__(self, models: list[str], models_file: str | None, settle: float, clock=time.monotonic):
        self.models, self.models_file, self.settle, self.clock = models, models_file, settle, clock
        self.seen: dict[str, tuple[tuple, float]] = {}  # path -> (its files, when first seen like that)

    def ready(self, known: set) -> list[tuple[str, str | None]]:
        """The (model, revision) pairs that match, are complete now, and are not in `known`."""
        out = []
        for model, rev in expand(self.models, self.models_file, allow_empty=True):
            if (model, rev) in known:
                self.seen.pop(model, None)
                continue
            if not model.startswith("/"):
                out.append((model, rev))
                continue
            if Path(model).is_dir() and (Path(model) / TRAINER_STATE).is_file():
                out.append((model, rev))
                continue
            now, files = self.clock(), shape(model)
            if files is None:
                self.seen.pop(model, None)
                continue
            before = self.seen.get(model)
            if before is None or before[0] != files:
                self.seen[model] = (files, now)
            elif now - before[1] >= self.settle:
                out.append((model, rev))
        return out

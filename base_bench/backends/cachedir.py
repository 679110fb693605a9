"""Where base-bench keeps its caches, and whether a file or folder in them can be trusted.

    root = cache_root()                   # $BASE_BENCH_CACHE, else $XDG_CACHE_HOME/base-bench, else ~/.cache/base-bench
    gguf = private_dir(root / "gguf")     # created mode 0700 (the root too, when it is new)
    why = distrust(gguf / "ab12...")      # None, or why another user could have written it
    bad = distrust_tree(entry)            # (path, why) for a folder and everything in it, or None
    bad = distrust_chain(root, gguf)      # the same for the root (root's rules) and paths below it

The cache may sit on a disk other users can reach. What base-bench reads back from it (converted
models, the tokenizer, the file digests) is only trusted when no one else could have written it:
every file and folder must be ours (owned by this user), a plain file or folder (not a symbolic
link, which could point anywhere), and not writable by the group or others. The root itself may be
a shared folder only with the sticky bit set (like /tmp), so that no one else can rename what we
put in it; base-bench creates it, and its folders, with mode 0700. Where the platform has no user
ids (Windows), only the link and type checks apply.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

ENV = "BASE_BENCH_CACHE"


def cache_root() -> Path:
    """$BASE_BENCH_CACHE, else $XDG_CACHE_HOME/base-bench, else ~/.cache/base-bench."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "base-bench"


def _uid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None


def private_dir(path: Path) -> Path:
    """Create `path` (and its parents) if missing; the folders it creates get mode 0700. OSError if
    it cannot be created."""
    path = Path(path)
    if not path.is_dir():
        if not path.parent.is_dir():
            private_dir(path.parent)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            if not path.is_dir():
                raise
    return path


def distrust(path: Path, root: bool = False) -> str | None:
    """Why `path` (a file or folder in the cache) could have been written by someone else, or None.
    With `root`, the rules for the cache root: a folder others may write to must have the sticky bit,
    and one owned by root (uid 0) is accepted."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None  # absent: nothing to trust or distrust (creating it is another matter)
    except OSError as exc:
        return f"it cannot be examined ({exc.strerror or type(exc).__name__})"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return "it is not a plain file or folder"
    uid = _uid()
    if uid is not None and st.st_uid != uid and not (root and st.st_uid == 0):
        return f"it is owned by another user (uid {st.st_uid})"
    if st.st_mode & 0o022 and not (root and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        return f"others can write to it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def distrust_tree(folder: Path) -> tuple[Path, str] | None:
    """(path, reason) for the first of `folder` and everything under it (links not followed) that
    `distrust` refuses, or None."""
    why = distrust(folder)
    if why:
        return folder, why
    try:
        for dirpath, dirnames, filenames in os.walk(folder):
            for name in sorted(dirnames + filenames):
                p = Path(dirpath) / name
                why = distrust(p)
                if why:
                    return p, why
    except OSError as exc:
        return folder, f"it cannot be listed ({exc.strerror or type(exc).__name__})"
    return None


def distrust_chain(root: Path, *inner: Path) -> tuple[Path, str] | None:
    """(path, reason) for the first of the cache root (with the root's rules) and `inner` (paths
    below it, each checked alone) that `distrust` refuses, or None."""
    why = distrust(root, root=True)
    if why:
        return root, why
    for p in inner:
        why = distrust(p)
        if why:
            return p, why
    return None

"""The run directory: what is finished, what it was computed with, who is writing it, and writing it safely.

    store = RunStore(out_dir)
    store.check(signature, resume)       # read-only: may a run start (or resume) here? RunError if not
    with store.lock():                   # this process alone writes the out-dir (RunError if taken)
        done = store.begin(signature, settings, resume)   # the same check, then finished ItemResults
                                                          # (resume) or a new run_config.json
        store.append(result)             # one line, written and fsynced, per finished item
        store.write_text("report.json", s)   # atomic replace

Finished work is keyed to a signature: a hash of everything that changes a score (model identity,
data checksum, add_bos, dtype, device type, runner scoring version). Batch size, threads and
--limit do not change any score, so a run may be resumed with other values for them.

One writer per out-dir: `lock()` takes an exclusive `fcntl.flock` on the file `.lock` in the
out-dir, without waiting, and writes the holder's PID, host and start time into it, so that a second
process is refused with one line naming them. The kernel drops an flock when the holder's last file
descriptor closes, also when it is killed with SIGKILL, so the lock never goes stale. The file is
removed when the holder finishes; one left by a killed run is taken over by the next. flock is
advisory: it stops other base-bench processes, not other programs. `check` tests the lock too
(a shared lock, taken and dropped at once), so the command line refuses before it loads a model.

A write that fails (no space left, an I/O error) raises StorageError, and the files stay usable:
an append that fails is cut back to the last whole line, a report is replaced atomically or not at
all. `--resume` continues once the problem is fixed.

A run folder may come from someone else (a tarball, a shared disk), so nothing in it is trusted:
`check` refuses, with one line, a run file or `.lock` that is a symbolic link, a FIFO, a folder or
anything else that is not a regular file, and a `.lock` or partial file with a second hard link;
the files that are changed in place (`.lock`, the partial results) are opened with O_NOFOLLOW, and
every other file is replaced by a rename (reports_io.write_atomic), so no write lands outside the
out-dir. Files read back are bounded (untrusted.read_regular: 256 MiB, JSON 64 levels deep), and a
partial line that is not a whole, well-formed result is a damaged line. Temporary files that a
killed writer left are removed when the next run takes the lock.

A platform without what this needs (Windows has no O_NOFOLLOW, no flock, no pread/pwrite) cannot
keep a run folder: `check` and `lock` refuse there with one RunError line (`platform_problem`)
before anything is written. Importing this module works everywhere, so `evaluate()` without an
out-dir and the views (compare, leaderboard, explore) run there all the same.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import socket
import stat
import time
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; platform_problem() then refuses a run folder
    fcntl = None

from .. import untrusted
from ..errors import RunError, RunInUse, StorageError
from ..items.records import ItemResult
from ..redact import redact_bytes
from ..results.reports_io import fsync_dir, non_regular, temp_files, write_all, write_atomic

RUN_FILES = ("report.json", "predictions.md", "partial_results.jsonl", "run_config.json")
PARTIAL = "partial_results.jsonl"
CONFIG = "run_config.json"
LOCK = ".lock"
IN_PLACE = (PARTIAL, LOCK)  # files changed in place (not replaced by a rename): one link, never followed
# O_NOFOLLOW is always there where a run folder is kept (platform_problem refuses it elsewhere); the
# getattr only lets this module import on a platform without it.
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
# What keeping a run folder safe needs, and whether this platform has it.
NEEDED = {
    "os.O_NOFOLLOW": lambda: hasattr(os, "O_NOFOLLOW"),
    "fcntl.flock": lambda: fcntl is not None and hasattr(fcntl, "flock"),
    "os.pread": lambda: hasattr(os, "pread"),
    "os.pwrite": lambda: hasattr(os, "pwrite"),
}
NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)  # flock() on a file system without it
LOCK_GRACE_S = 0.25  # how long lock() retries a taken lock: another process's check() holds it for an instant
log = logging.getLogger("base_bench")


def platform_problem() -> str | None:
    """Why this platform cannot keep a run folder safe, in one line; None where it can (Linux, macOS)."""
    missing = [name for name, present in NEEDED.items() if not present()]
    if not missing:
        return None
    names = missing[0] if len(missing) == 1 else ", ".join(missing[:-1]) + " and " + missing[-1]
    return (
        f"this platform lacks {names}, which {'keeps' if len(missing) == 1 else 'keep'} a run folder safe; "
        "run under Linux, macOS, or Windows "
        "through WSL 2 (evaluate() without out_dir, compare, leaderboard and explore work without them)"
    )


def check_platform() -> None:
    """RunError (one line) where a run folder cannot be kept safe (`platform_problem`)."""
    problem = platform_problem()
    if problem:
        raise RunError(problem)


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
        self.saved: int | None = None  # finished items in PARTIAL, known once begin() has read it
        self._locked = False  # inside lock()

    def path(self, name: str) -> Path:
        return self.dir / name

    def holds_run(self) -> bool:
        return any(os.path.lexists(self.path(n)) for n in RUN_FILES)

    def check_files(self) -> None:
        """RunError if a run file or the lock file is there but is not a regular file (a symbolic
        link, a FIFO, a folder...), or if a file changed in place has another hard link: a write
        would then land outside the out-dir, or a read would block."""
        for name in (*RUN_FILES, LOCK):
            p = self.path(name)
            kind = non_regular(p)
            if kind:
                raise RunError(
                    f"{p} is {kind}, not a regular file; base-bench does not read or write through it "
                    "(remove it, or pick another out-dir)"
                )
            if name in IN_PLACE and os.path.lexists(p) and os.lstat(p).st_nlink > 1:
                raise RunError(
                    f"{p} has {os.lstat(p).st_nlink} hard links; base-bench does not change a file that is "
                    "also elsewhere (copy it, or pick another out-dir)"
                )

    def check(self, signature: dict, resume: bool) -> None:
        """Raise RunError unless a run with `signature` may start here (or, with `resume`, continue
        the one here): not a file, not in use by another process, no run to overwrite, the same
        signature, no damaged line. Changes nothing; call it before loading a model, to fail fast."""
        check_platform()
        if self.dir.exists() and not self.dir.is_dir():
            raise RunError(f"out-dir {self.dir} is a file, not a directory")
        if self.dir.is_dir():
            self.check_files()
        self.check_not_in_use()
        if not self.holds_run():
            return
        if not resume:
            raise RunError(
                f"{self.dir} already holds a run; continue it with --resume (resume=True in Python), "
                "or pick another out-dir"
            )
        self.check_signature(signature)
        self.load_partial(repair=False)  # a damaged line is refused now, not after the model has loaded

    def begin(self, signature: dict, settings: dict, resume: bool) -> dict[str, ItemResult]:
        """Check as `check` does, then return the finished results (resume) or start a new run."""
        self.check(signature, resume)
        self._remove_temp_files()
        done = self.load_partial() if resume else {}
        self.saved = len(done)
        if self.read_config() is None:
            self.start(signature, settings)
        return done

    def _remove_temp_files(self) -> None:
        """Temporary files of the run files that a killed writer left (only while we hold the lock:
        then no other base-bench process writes here)."""
        if not self._locked:
            return
        for name in RUN_FILES:
            for t in temp_files(self.dir, name):
                if non_regular(t) in (None, "a symbolic link"):
                    try:
                        os.unlink(t)
                    except OSError:
                        pass

    def read_config(self) -> dict | None:
        p = self.path(CONFIG)
        if not os.path.lexists(p):
            return None
        cfg = self._read(p, untrusted.load_json)
        if not isinstance(cfg, dict) or not isinstance(cfg.get("signature", {}), dict):
            raise RunError(f"{p} is not a base-bench run_config.json; not touching this run")
        return cfg

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
        if not os.path.lexists(p):
            return {}
        raw = self._read(p, untrusted.read_regular)
        # Every finished item ends with "\n"; bytes after the last newline are a torn write.
        keep = raw.rfind(b"\n") + 1
        done: dict[str, ItemResult] = {}
        for n, line in enumerate(raw[:keep].splitlines(), 1):
            if not line.strip():
                continue
            try:
                r = ItemResult.from_json(untrusted.loads(line))
            except (ValueError, KeyError, TypeError):
                raise RunError(f"{p}: line {n} is damaged; not touching this run") from None
            done.setdefault(r.id, r)
        if repair and keep < len(raw):
            fd = self._open_in_place(p, os.O_WRONLY)
            try:
                os.ftruncate(fd, keep)
                os.fsync(fd)
            finally:
                os.close(fd)
        return done

    @staticmethod
    def _read(p: Path, reader):
        """reader(p) of a run file, never through a link; RunError (one line) if it cannot be used."""
        try:
            return reader(p, follow=False)
        except (OSError, ValueError) as e:
            raise RunError(f"{p} is unreadable: {untrusted.problem(e)}; not touching this run") from None

    def _open_in_place(self, p: Path, flags: int, mode: int = 0o644) -> int:
        """A file descriptor of `p`, a file changed in place: never through a symbolic link, and
        RunError unless it is a regular file with one link (then nothing outside the out-dir changes)."""
        try:
            fd = os.open(p, flags | NOFOLLOW, mode)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise RunError(f"{p} is a symbolic link; base-bench does not write through it (remove it)") from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:  # 0: its holder just removed it; lock() retries
            os.close(fd)
            what = untrusted.kind_of(st.st_mode) if not stat.S_ISREG(st.st_mode) else f"has {st.st_nlink} hard links"
            raise RunError(f"{p} {'is ' if not stat.S_ISREG(st.st_mode) else ''}{what}; base-bench does not write it")
        return fd

    def start(self, signature: dict, settings: dict) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise self._write_failed(e, f"creating {self.dir}") from None
        cfg = {"signature": signature, "signature_sha256": signature_hash(signature), "settings": settings}
        self.write_text(CONFIG, json.dumps(cfg, indent=2, sort_keys=True, allow_nan=False) + "\n")

    def append(self, result: ItemResult) -> None:
        self.append_many([result])

    def append_many(self, results) -> None:
        """Add finished items, one line each, in one write, fsynced: all of them, or (StorageError)
        none. The file is flocked while it is written, so ranks of one run that share the out-dir
        never interleave their lines, and a failed write is cut back before anyone appends again.
        A signal (SIGINT, SIGTERM) that arrives once every line is written keeps them all: a crash at
        that moment would keep them too, and the items are finished."""
        results = list(results)
        if not results:
            return
        data = redact_bytes(
            "".join(json.dumps(r.to_json(), sort_keys=True, allow_nan=False) + "\n" for r in results).encode("utf-8")
        )
        path = self.path(PARTIAL)
        try:
            fd = self._open_in_place(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                _flock_wait(fd)
                start = os.fstat(fd).st_size
                written = False
                try:
                    write_all(fd, data)
                    written = True
                    os.fsync(fd)
                except BaseException as e:
                    if written and not isinstance(e, OSError):  # a signal after the write: the lines stay
                        if self.saved is not None:
                            self.saved += len(results)
                        raise
                    # A full disk can take part of the lines, a signal can stop the write between two
                    # of its parts, and a failed fsync leaves them undurable. Cut them, so that the file
                    # still ends on a whole line and a later append cannot leave a damaged line in the middle.
                    try:
                        os.ftruncate(fd, start)
                    except OSError:
                        pass  # then it is a torn last line, which load_partial drops
                    raise
            finally:
                os.close(fd)  # closing releases the flock
            if start == 0:
                fsync_dir(self.dir)
        except OSError as e:
            what = f"item {results[0].id}" if len(results) == 1 else f"{len(results)} items ({results[0].id}, ...)"
            raise self._write_failed(e, f"saving {what} to {path}") from None
        if self.saved is not None:
            self.saved += len(results)

    def write_text(self, name: str, text: str) -> None:
        """Write via a temporary file and rename, so a crash never leaves half a file."""
        try:
            write_atomic(self.path(name), text)
        except OSError as e:
            raise self._write_failed(e, f"writing {self.path(name)}") from None

    def _write_failed(self, e: OSError, doing: str) -> StorageError:
        name = errno.errorcode.get(e.errno or 0)
        what = f"{os.strerror(e.errno).lower()} ({name})" if name else str(e)
        fix = {
            errno.ENOSPC: "free some space",
            errno.EDQUOT: "free some space (disk quota)",
            errno.EIO: "check the disk",
        }.get(e.errno, "fix that")
        n = self.saved
        saved = (
            ""
            if n is None
            else "no item is saved yet; "
            if n == 0
            else f"{n} finished item{' is' if n == 1 else 's are'} saved in {self.path(PARTIAL)}; "
        )
        return StorageError(f"{what} while {doing}; {saved}{fix}, then continue with --resume")

    # ------------------------------------------------------------------ the out-dir lock

    @contextmanager
    def lock(self):
        """Hold the out-dir's lock for the block: RunError at once, naming the holder, if another
        process has it. Creates the out-dir (and removes it again if the block leaves it empty)."""
        created = not self.dir.exists()
        fd = self._acquire()
        self._locked = True
        try:
            yield self
        finally:
            self._locked = False
            if fd is not None:
                try:
                    os.unlink(self.path(LOCK))  # still held: whoever opened the old file sees it gone
                except OSError:
                    pass
                os.close(fd)  # the kernel drops the lock here (or when this process dies)
            if created:
                try:
                    self.dir.rmdir()  # only if nothing was written
                except OSError:
                    pass

    def check_not_in_use(self) -> None:
        """RunError if another process holds the lock. Changes nothing: takes a shared lock on the
        existing lock file (read-only) for an instant and drops it."""
        if self._locked:
            return
        try:
            fd = self._open_in_place(self.path(LOCK), os.O_RDONLY)
        except OSError:
            return  # no lock file (nobody holds it), or unreadable: lock() will find out
        try:
            got = _try_flock(fd, "shared")
            if got is False:
                raise RunInUse(self._in_use(fd))
            if got:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _acquire(self) -> int | None:
        """The locked file descriptor, with our PID, host and time written in the file; None if the
        file system has no flock (a warning then says that the out-dir is not protected)."""
        check_platform()
        path = self.path(LOCK)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise self._write_failed(e, f"creating {self.dir}") from None
        deadline = time.monotonic() + LOCK_GRACE_S
        while True:
            try:
                fd = self._open_in_place(path, os.O_RDWR | os.O_CREAT)
            except OSError as e:
                raise self._write_failed(e, f"creating the lock file {path}") from None
            try:
                got = _try_flock(fd, "exclusive")
            except OSError as e:
                os.close(fd)
                raise self._write_failed(e, f"locking {path}") from None
            if got is None:
                os.close(fd)
                log.warning(
                    f"warning: {self.dir} cannot be locked (its file system does not support flock); "
                    "nothing stops another process from writing it at the same time"
                )
                return None
            if got and _same_file(fd, path):
                break
            if not got and time.monotonic() >= deadline:
                try:
                    raise RunInUse(self._in_use(fd))
                finally:
                    os.close(fd)
            os.close(fd)  # taken for now, or a file that its last holder removed: try again
            if not got:
                time.sleep(0.02)
        holder = json.dumps(
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            }
        )
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (holder + "\n").encode("utf-8"), 0)
            os.fsync(fd)
        except OSError:
            pass  # the lock holds without it; a refused process then cannot name us
        return fd

    def _in_use(self, fd: int) -> str:
        holder = None
        for _ in range(5):  # the holder writes its name just after it takes the lock
            try:
                holder = untrusted.loads(os.pread(fd, 4096, 0))
                break
            except (OSError, ValueError):
                time.sleep(0.02)
        if isinstance(holder, dict) and {"pid", "host", "since"} <= set(holder):
            who = f"PID {holder['pid']} on host {holder['host']} since {holder['since']}"
        else:
            who = "another process (it has not written its PID and host)"
        return f"{self.dir} is in use by {who}; wait for it to finish, or stop it"


def _try_flock(fd: int, kind: str) -> bool | None:
    """True: locked; False: another process holds a conflicting lock; None: no flock here."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if kind == "exclusive" else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno in NO_FLOCK:
            return None
        raise


def _flock_wait(fd: int) -> None:
    """An exclusive flock, waiting for it (the partial file is held for one append at a time);
    nothing on a file system without flock."""
    if fcntl is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as e:
        if e.errno not in NO_FLOCK:
            raise


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(path))
    except FileNotFoundError:
        return False

"""Run the base-bench command line with faults injected, for tests/test_faults.py.

    python tests/faultrun.py FAULT [FAULT ...] -- --model M --local-data D --out-dir O ...

installs each FAULT, then calls `base_bench.commands.cli.main` with the arguments after `--` and exits with
its code. Nothing in base_bench knows about this script: the faults sit at the OS boundary (os.write,
os.fsync, os.replace on a file of the run, matched by its base name) or around named functions of
base_bench, so a fault that stops matching (a renamed function) fails loudly when it is installed.

    server = ForkServer(); pid = server.start(faults, cli_args, log_prefix); code = server.wait()

is the quick way to run many faulted processes: `python tests/faultrun.py --serve` imports torch,
transformers and base_bench once (no tensor is touched, as a DataLoader parent before it forks its
workers), then forks one process per request, which installs the faults and runs the command line
with its stdout and stderr in LOG.out and LOG.err. Each is a real process (killed by SIGKILL, its
lock dropped by the kernel); it is spared the ~5 s of imports that a fresh interpreter spends.
The forked processes die with the server.

    kill-after:FUNC[:N]       SIGKILL this process just after the N-th call (default 1) of FUNC
                              returns. FUNC: load (the model is loaded), lock (the out-dir lock is
                              taken), start (run_config.json is written), append (a scored batch is
                              saved: RunStore.append_many),
                              evaluate (every file is written; the summary is not printed yet)
    kill-mid-write:FILE[:N]   the N-th os.write to FILE writes half of its bytes, then SIGKILL
    kill-before-replace:FILE  SIGKILL once FILE's temporary file is written and fsynced, before the
                              rename that puts it in place
    kill-after-replace:FILE   SIGKILL just after that rename
    stall-after:append:N      after the N-th append (batch), print "stalled PID" on stdout and sleep until a
                              signal ends the run (for the signal and lock tests)
    error-write:FILE:N:ERR    the N-th os.write to FILE writes half of its bytes (a short write, as
                              on a nearly full disk), and every later one raises OSError(ERR); ERR is
                              ENOSPC or EIO
    error-fsync:FILE:N:ERR    the N-th os.fsync of FILE, and every later one, raises OSError(ERR)

FILE is a base name: partial_results.jsonl, report.json.tmp, run_config.json.tmp, predictions.md.tmp
(the temporary files are what the atomic writes write into: NAME.tmp stands for write_atomic's
NAME.<random>.tmp). Tests in the same process use `install(fault, setattr=monkeypatch.setattr)` for
the error faults.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FUNCS = {  # FUNC -> (module, attribute path) of what kill-after wraps
    "load": ("base_bench.backends.transformers", "load_located"),
    "lock": ("base_bench.engine.runstore", "RunStore._acquire"),
    "start": ("base_bench.engine.runstore", "RunStore.start"),
    "append": ("base_bench.engine.runstore", "RunStore.append_many"),
    "evaluate": ("base_bench.evaluation", "evaluate"),
}


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # never reached


def fd_name(fd: int) -> str:
    try:
        return os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return ""


def is_file(name: str, target: str) -> bool:
    """Whether base name `name` is FILE `target`: NAME.tmp stands for any NAME.<random>.tmp."""
    if name == target:
        return True
    stem, tmp, _ = target.rpartition(".tmp")
    return (
        bool(tmp) and name.startswith(stem + ".") and name.endswith(".tmp") and name.count(".") == stem.count(".") + 2
    )


def _wrap_function(func: str, after, setattr_):
    import importlib

    module, dotted = FUNCS[func]
    owner = importlib.import_module(module)
    *parents, name = dotted.split(".")
    for p in parents:
        owner = getattr(owner, p)
    original = getattr(owner, name)
    calls = [0]

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        calls[0] += 1
        after(calls[0])
        return result

    setattr_(owner, name, wrapper)


def _wrap_os(name: str, make, setattr_):
    original = getattr(os, name)
    setattr_(os, name, make(original))


def install(fault: str, setattr=setattr) -> None:
    kind, _, rest = fault.partition(":")
    parts = rest.split(":") if rest else []
    if kind == "kill-after":
        n = int(parts[1]) if len(parts) > 1 else 1
        _wrap_function(parts[0], lambda k: die() if k == n else None, setattr)
    elif kind == "stall-after":
        n = int(parts[1])

        def stall(k):
            if k == n:
                print(f"stalled {os.getpid()}", flush=True)
                while True:
                    time.sleep(0.05)

        _wrap_function(parts[0], stall, setattr)
    elif kind in ("kill-mid-write", "error-write"):
        target, n = parts[0], int(parts[1]) if len(parts) > 1 else 1
        err = getattr(errno, parts[2]) if kind == "error-write" else None
        seen = [0]

        def make(write):
            def faulty_write(fd, data):
                if not is_file(fd_name(fd), target):
                    return write(fd, data)
                seen[0] += 1
                if seen[0] < n:
                    return write(fd, data)
                if seen[0] == n:
                    half = write(fd, bytes(data[: max(1, len(data) // 2)]))
                    if err is None:
                        die()
                    return half
                raise OSError(err, os.strerror(err))

            return faulty_write

        _wrap_os("write", make, setattr)
    elif kind == "error-fsync":
        target, n, err = parts[0], int(parts[1]), getattr(errno, parts[2])
        seen = [0]

        def make(fsync):
            def faulty_fsync(fd):
                if is_file(fd_name(fd), target):
                    seen[0] += 1
                    if seen[0] >= n:
                        raise OSError(err, os.strerror(err))
                return fsync(fd)

            return faulty_fsync

        _wrap_os("fsync", make, setattr)
    elif kind in ("kill-before-replace", "kill-after-replace"):
        target = parts[0]

        def make(replace):
            def faulty_replace(src, dst, *a, **kw):
                hit = os.path.basename(os.fspath(dst)) == target
                if hit and kind == "kill-before-replace":
                    die()
                replace(src, dst, *a, **kw)
                if hit:
                    die()

            return faulty_replace

        _wrap_os("replace", make, setattr)
    else:
        raise SystemExit(f"faultrun: unknown fault {fault!r}")


def main(argv: list[str]) -> int:
    if argv == ["--serve"]:
        return serve()
    if "--" not in argv:
        raise SystemExit("usage: faultrun.py FAULT [FAULT ...] -- CLI-ARGS  |  faultrun.py --serve")
    cut = argv.index("--")
    for fault in argv[:cut]:
        install(fault)
    from base_bench.commands.cli import main as cli_main

    return cli_main(argv[cut + 1 :])


# ---------------------------------------------------------------- the fork server


def serve() -> int:
    """Read one request per stdin line; answer {"pid": ...} when its process starts and
    {"returncode": ...} (negative: killed by that signal) when it ends; one at a time."""
    import torch  # noqa: F401  everything the command line imports, and nothing run
    import transformers.models.llama.modeling_llama  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast  # noqa: F401

    import base_bench.backends.transformers  # noqa: F401
    import base_bench.commands.cli
    import base_bench.evaluation  # noqa: F401
    import base_bench.results.report  # noqa: F401

    for line in sys.stdin:
        job = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(job, base_bench.commands.cli.main)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
    return 0


def _child(job: dict, cli_main) -> None:
    code = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the server
        write = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        for fd, path, flags in (
            (0, os.devnull, os.O_RDONLY),
            (1, job["log"] + ".out", write),
            (2, job["log"] + ".err", write),
        ):
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        # A foreground process gets Ctrl-C; this one may have inherited SIGINT ignored (a shell starts
        # background jobs that way, and CI may run the tests as one), which the runner rightly keeps.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fault in job["faults"]:
            install(fault)
        code = cli_main(job["args"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class ForkServer:
    """The test's end of `faultrun.py --serve`."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        self.buf = b""
        self.pid = None

    def start(self, faults: list[str], args: list[str], log: str | Path) -> int:
        """Start one faulted run; its PID."""
        self.proc.stdin.write((json.dumps({"faults": faults, "args": args, "log": str(log)}) + "\n").encode())
        self.pid = self._reply(120)["pid"]
        return self.pid

    def wait(self, timeout: float = 300) -> int:
        """The run's exit code, as subprocess gives it (-9: SIGKILL). On timeout, it is killed."""
        try:
            return self._reply(timeout)["returncode"]
        except TimeoutError:
            os.kill(self.pid, signal.SIGKILL)
            self._reply(30)  # its exit, so that the next request and its answers stay in step
            raise

    def run(self, faults: list[str], args: list[str], log: str | Path, timeout: float = 300) -> int:
        self.start(faults, args, log)
        return self.wait(timeout)

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # and its process with it (PR_SET_PDEATHSIG)
            self.proc.wait()

    def _reply(self, timeout: float) -> dict:
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"faultrun server: no answer in {timeout} s")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise EOFError("faultrun server ended")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

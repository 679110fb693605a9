"""Running the command line and torchrun from a check: subprocesses with this checkout first on
PYTHONPATH and the Hub offline, with a time limit and the end of stderr in the error.

    proc, wall_s = run_subprocess([sys.executable, "benchmark.py", ...], timeout=300, what="benchmark.py")
    walls = run_together([(cmd_a, "run a"), (cmd_b, "run b")], timeout=300)   # at once (the dry run)
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from gpu.common import ROOT


def child_env() -> dict:
    """The environment for the subprocesses: this checkout first on PYTHONPATH, no network."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    return env


def run_subprocess(cmd: list[str], timeout: float, what: str) -> tuple[subprocess.CompletedProcess, float]:
    t = time.perf_counter()
    try:
        p = subprocess.run(
            cmd, capture_output=True, text=True, timeout=max(5.0, timeout), env=child_env(), cwd=str(ROOT)
        )
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-1500:]
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        raise RuntimeError(f"{what} did not finish within {timeout:.0f} s; stderr ends: {tail}") from None
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{what} exited with {p.returncode}; stderr ends: {p.stderr[-1500:]}")
    return p, wall


def run_together(jobs: list[tuple[list[str], str]], timeout: float) -> list[float]:
    """Several subprocesses at once (the dry run on a CPU, where their timings are not the point);
    the wall seconds of each, or RuntimeError naming the first that failed."""
    t = time.perf_counter()
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, (cmd, what) in enumerate(jobs):
            err = open(Path(tmp) / f"{k}.err", "w+")
            procs.append(
                (
                    subprocess.Popen(
                        cmd, stdout=subprocess.DEVNULL, stderr=err, text=True, env=child_env(), cwd=str(ROOT)
                    ),
                    err,
                    what,
                )
            )
        walls, failed = [], None
        for p, err, what in procs:
            try:
                rc = p.wait(timeout=max(5.0, timeout - (time.perf_counter() - t)))
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
            walls.append(time.perf_counter() - t)
            err.seek(0)
            if rc != 0 and failed is None:
                failed = f"{what} exited with {rc}; stderr ends: {err.read()[-1500:]}"
            err.close()
    if failed:
        raise RuntimeError(failed)
    return walls

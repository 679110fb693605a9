"""Helpers for the sweep tests: tiny checkpoints, the sweep command, ordinary runs to compare with.

ckpts = checkpoints(tmp_path / "ckpt", [100, 200, 300])      # tiny random models, one seed each
rc, out, err = sweep(tmp_path, "ckpt/checkpoint-*", "--out-dir", "out", *FAST)
assert_same_scores(member_report(tmp_path / "out", ckpts[0]), ordinary(ckpts[0], tmp_path / "plain"))
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from base_bench.sweep.members import member_name

ROOT = Path(__file__).resolve().parents[1]
FAST = ("--data", "bundled", "--limit-per-category", "2")


def checkpoints(root: Path, steps, seed0: int = 0) -> list[Path]:
    """A tiny llama at root/checkpoint-N for each step, each with its own weights."""
    from tiny import save_tiny  # torch: not imported by conftest.py, which registers this module's fixture

    out = []
    for i, n in enumerate(steps):
        out.append(Path(save_tiny(root / f"checkpoint-{n}", seed=seed0 + i)))
    return out


def command(*args) -> list[str]:
    return [sys.executable, "-m", "base_bench", "sweep", *map(str, args)]


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("OMP_NUM_THREADS", "1")
    return e


def sweep(cwd: Path, *args, timeout: float = 600) -> tuple[int, str, str]:
    p = subprocess.run(command(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env())
    return p.returncode, p.stdout, p.stderr


STARTED: list[subprocess.Popen] = []


def start(cwd: Path, *args) -> subprocess.Popen:
    """A sweep command in the background (`stop_all` ends those a failed test left running)."""
    p = subprocess.Popen(command(*args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    STARTED.append(p)
    return p


@pytest.fixture
def no_sweep_left_running():
    """Use it (autouse) in a module that starts sweeps: a test that fails leaves none running."""
    yield
    stop_all()


def stop_all() -> None:
    """SIGTERM to each sweep command still running (it stops its workers), SIGKILL after 60 s."""
    while STARTED:
        p = STARTED.pop()
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()


def ordinary(model: Path, out: Path, *flags) -> dict:
    """An ordinary `base-bench --model M` run of the same checkpoint, with the same run flags (FAST
    where none are given)."""
    p = subprocess.run(
        [sys.executable, "-m", "base_bench", "--model", str(model), "--out-dir", str(out), *map(str, flags or FAST)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env(),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads((out / "report.json").read_text())


def member_dir(out_dir: Path, model: Path, revision=None) -> Path:
    return out_dir / member_name(str(model.absolute()), revision)


def member_report(out_dir: Path, model: Path) -> dict:
    return json.loads((member_dir(out_dir, model) / "report.json").read_text())


def assert_same_scores(a: dict, b: dict, same_model: bool = True) -> None:
    """The same items, predictions, log-probs (max |delta| 0.0) and results; and with `same_model`,
    the same run signature (the same model files, data and settings)."""
    assert [i["id"] for i in a["items"]] == [i["id"] for i in b["items"]]
    worst = max(
        abs(x["logprob"] - y["logprob"])
        for i, j in zip(a["items"], b["items"])
        for x, y in zip(i["choices"], j["choices"])
    )
    assert worst == 0.0, worst
    assert [i["prediction"] for i in a["items"]] == [i["prediction"] for i in b["items"]]
    assert a["results"] == b["results"]
    if same_model:
        assert a["config"]["signature_sha256"] == b["config"]["signature_sha256"]


def jobs(db_path: Path) -> list[dict]:
    """The jobs table of a sweep's SQLite store, read directly."""
    con = sqlite3.connect(db_path)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute("SELECT * FROM jobs ORDER BY step")]
    except sqlite3.OperationalError as exc:  # the sweep has not made its tables yet
        if "no such table" not in str(exc):
            raise
        return []
    finally:
        con.close()


def wait_for(what, timeout: float = 300, every: float = 0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = what()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def lines(path: Path) -> int:
    try:
        return path.read_text().count("\n")
    except OSError:
        return 0


def kill(pid: int, sig=signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass

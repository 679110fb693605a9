"""Faults injected into real runs: SIGKILL at many moments, a full disk and I/O errors, SIGTERM and
SIGINT, a second process on the same out-dir, damaged and duplicated partial results.

Every faulted run is a real process (`tests/faultrun.py` runs the command line with the fault
installed) on a tiny model, 40 items, batch size 4 (ten batches; the runner saves each batch's four
lines in one write, so "the 4th append" is the 4th batch); it is then continued with `--resume` and must
give the results of one uninterrupted run (every choice within 1e-4, the same `results` block),
with each item saved exactly once. To keep the file quick, the faulted processes are forked by
faultrun's server, which has imported torch and transformers once; the lock test starts a fresh
interpreter.
"""

import contextlib
import errno
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from base_bench import RunError, StorageError, evaluate
from base_bench.commands.cli import main
from base_bench.engine.runstore import LOCK, PARTIAL, RunStore
from base_bench.items.records import ChoiceScore, ItemResult
from base_bench.results.report import render_markdown

import faultrun
from fixtures import write_dataset
from tiny import save_tiny, tiny_model, tiny_tokenizer

if sys.platform != "linux":
    pytest.skip("the faults find a file by /proc/self/fd (Linux)", allow_module_level=True)

HERE = Path(__file__).resolve().parent
N = 40
FOUR = ["partial_results.jsonl", "predictions.md", "report.json", "run_config.json"]


# ---------------------------------------------------------------- setup: one model, one reference run


@pytest.fixture(scope="module", autouse=True)
def keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    save_tiny(root / "tiny")
    write_dataset(root / "data")
    return root


def cli_args(base, out, *extra):
    return [
        "--model",
        str(base / "tiny"),
        "--local-data",
        str(base / "data"),
        "--device",
        "cpu",
        "--threads",
        "1",
        "--limit",
        str(N),
        "--batch-size",
        "4",
        "--out-dir",
        str(out),
        *map(str, extra),
    ]


@pytest.fixture(scope="module")
def reference(base):
    out = base / "reference"
    assert main(cli_args(base, out)) == 0
    return json.loads((out / "report.json").read_text())


def faultrun_cmd(base, out, faults, *extra):
    return [sys.executable, str(HERE / "faultrun.py"), *faults, "--", *cli_args(base, out, *extra)]


@pytest.fixture(scope="module")
def server():
    s = faultrun.ForkServer()
    yield s
    s.close()


def run_faulted(server, base, out, faults, *extra, send=None):
    """One faulted run, in a process forked by the server; with `send`, wait until it stalls and send
    it that signal. Returns (exit code, stdout, stderr); the process is gone when this returns."""
    log = out.parent / f"{out.name}.log"
    pid = server.start(faults, cli_args(base, out, *extra), log)
    try:
        if send is not None:
            deadline = time.monotonic() + 120
            while "stalled" not in read(Path(f"{log}.out")):
                assert time.monotonic() < deadline, read(Path(f"{log}.err"))[-2000:]
                time.sleep(0.05)
            os.kill(pid, send)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        server.wait()
        raise
    code = server.wait()
    return code, read(Path(f"{log}.out")), read(Path(f"{log}.err"))


def names(d: Path) -> list[str]:
    """The entries of `d`, sorted, with write_atomic's temporary NAME.<random>.tmp shown as NAME.tmp."""
    return sorted(re.sub(r"^(.+\.(?:json|md))\.[^.]+\.tmp$", r"\1.tmp", p.name) for p in d.iterdir())


def read(p: Path) -> str:
    return p.read_text(errors="replace") if p.exists() else ""


def snapshot(d: Path) -> dict:
    """Every entry's bytes and modification time, and the directory's: what 'untouched' means."""
    d = Path(d)
    snap = {".": d.stat().st_mtime_ns}
    for p in sorted(d.iterdir()):
        snap[p.name] = (p.read_bytes(), p.stat().st_mtime_ns)
    return snap


def saved_lines(out: Path) -> tuple[list[str], bytes]:
    """The whole lines of partial_results.jsonl, checked to parse as item results, and the torn tail."""
    raw = (out / PARTIAL).read_bytes() if (out / PARTIAL).exists() else b""
    keep = raw.rfind(b"\n") + 1
    lines = raw[:keep].decode().splitlines()
    for line in lines:
        ItemResult.from_json(json.loads(line))
    RunStore(out).load_partial(repair=False)  # and the runner reads it
    return lines, raw[keep:]


def check_consistent(out: Path) -> None:
    """What a crash may leave: whole JSON files only, predictions.md only with its report.json."""
    if (out / "report.json").exists():
        rep = json.loads((out / "report.json").read_text())
        if (out / "predictions.md").exists():
            assert (out / "predictions.md").read_text() == render_markdown(rep)
    else:
        assert not (out / "predictions.md").exists()
    if (out / "run_config.json").exists():
        json.loads((out / "run_config.json").read_text())


def assert_matches_reference(out: Path, reference: dict, saved_before: int) -> None:
    rep = json.loads((out / "report.json").read_text())
    assert rep["results"] == reference["results"]
    assert [i["id"] for i in rep["items"]] == [i["id"] for i in reference["items"]]
    assert [i["prediction"] for i in rep["items"]] == [i["prediction"] for i in reference["items"]]
    worst = max(
        abs(a["logprob"] - b["logprob"])
        for x, y in zip(rep["items"], reference["items"])
        for a, b in zip(x["choices"], y["choices"])
    )
    assert worst < 1e-4
    assert rep["timing"]["items_scored_this_session"] == N - saved_before
    lines, torn = saved_lines(out)
    ids = [json.loads(x)["id"] for x in lines]
    assert torn == b"" and len(ids) == N == len(set(ids))  # no item lost, none saved twice
    assert (out / "predictions.md").read_text() == render_markdown(rep)
    assert sorted(p.name for p in out.iterdir()) == FOUR  # no lock file, no temporary file left


def resume(base, out) -> int:
    return main(cli_args(base, out, "--resume"))


# ---------------------------------------------------------------- the faults

# name: (faults, what the out-dir holds after the kill: files, whole lines saved (or a range), torn tail?
# (None: either))
KILLS = {
    "model loaded": (["kill-after:load"], None, 0, False),
    "lock taken": (["kill-after:lock"], [LOCK], 0, False),
    "run_config.json half written": (["kill-mid-write:run_config.json.tmp"], [LOCK, "run_config.json.tmp"], 0, False),
    "run_config.json before rename": (["kill-before-replace:run_config.json"], [LOCK, "run_config.json.tmp"], 0, False),
    "run_config.json written": (["kill-after:start"], [LOCK, "run_config.json"], 0, False),
    "first batch saved": (["kill-after:append:1"], [LOCK, PARTIAL, "run_config.json"], 4, False),
    # half of the 4th batch's bytes: up to 3 of its lines whole, and (most likely) a torn one
    "4th batch half written": (
        ["kill-mid-write:partial_results.jsonl:4"],
        [LOCK, PARTIAL, "run_config.json"],
        (12, 15),
        None,
    ),
    "6th of 10 batches saved": (["kill-after:append:6"], [LOCK, PARTIAL, "run_config.json"], 24, False),
    "last batch saved": (["kill-after:append:10"], [LOCK, PARTIAL, "run_config.json"], 40, False),
    "report.json half written": (
        ["kill-mid-write:report.json.tmp"],
        [LOCK, PARTIAL, "report.json.tmp", "run_config.json"],
        40,
        False,
    ),
    "report.json before rename": (
        ["kill-before-replace:report.json"],
        [LOCK, PARTIAL, "report.json.tmp", "run_config.json"],
        40,
        False,
    ),
    "report.json written, predictions.md not": (
        ["kill-after-replace:report.json"],
        [LOCK, PARTIAL, "report.json", "run_config.json"],
        40,
        False,
    ),
    "predictions.md half written": (
        ["kill-mid-write:predictions.md.tmp"],
        [LOCK, PARTIAL, "predictions.md.tmp", "report.json", "run_config.json"],
        40,
        False,
    ),
    "every file written": (["kill-after:evaluate"], FOUR, 40, False),  # the lock is released already
}
SIGNALS = {
    "SIGTERM": (signal.SIGTERM, 143, "terminated by SIGTERM"),
    "SIGINT": (signal.SIGINT, 130, "interrupted by SIGINT"),
}
ERRORS = {
    "ENOSPC on the 4th append": (
        ["error-write:partial_results.jsonl:4:ENOSPC"],
        "no space left on device (ENOSPC) while saving 4 items",
        12,
    ),
    "EIO from fsync of report.json": (
        ["error-fsync:report.json.tmp:1:EIO"],
        "input/output error (EIO) while writing",
        40,
    ),
}


# ---------------------------------------------------------------- SIGKILL at 14 moments, then --resume


@pytest.mark.slow(
    reason="a subprocess per case: a CLI run SIGKILLed at a chosen moment, then resumed, against a reference run"
)
@pytest.mark.parametrize("name", list(KILLS))
def test_sigkill_then_resume_equals_uninterrupted(name, server, base, reference, tmp_path):
    faults, files, n_saved, torn = KILLS[name]
    out = tmp_path / "run"
    code, _, err = run_faulted(server, base, out, faults)
    assert code == -signal.SIGKILL, err[-2000:]
    # What the crash left: only complete files, and partial results that parse.
    if files is None:
        assert not out.exists()
    else:
        assert names(out) == sorted(files)
        lines, tail = saved_lines(out)
        low, high = n_saved if isinstance(n_saved, tuple) else (n_saved, n_saved)
        assert low <= len(lines) <= high and (torn is None or bool(tail) == torn)
        assert len(lines) > low or tail or low == high  # the write did begin
        n_saved = len(lines)
        check_consistent(out)
    assert resume(base, out) == 0
    assert_matches_reference(out, reference, n_saved)


@pytest.mark.slow(
    reason="a subprocess per case: a CLI run SIGKILLed at a chosen moment, then resumed, against a reference run"
)
def test_killed_again_while_resuming(server, base, reference, tmp_path):
    """A crash, a resume that crashes mid-write too, then a resume that finishes."""
    out = tmp_path / "twice"
    assert run_faulted(server, base, out, ["kill-after:append:3"])[0] == -signal.SIGKILL
    code, _, err = run_faulted(server, base, out, ["kill-mid-write:partial_results.jsonl:2"], "--resume")
    assert code == -signal.SIGKILL, err[-2000:]
    lines, tail = saved_lines(out)
    assert 16 <= len(lines) <= 19 and (len(lines) > 16 or tail)  # 3 + 1 batches, and part of the next
    assert resume(base, out) == 0
    assert_matches_reference(out, reference, len(lines))


# ---------------------------------------------------------------- SIGTERM and SIGINT


@pytest.mark.slow(reason="a subprocess per case: a CLI run stopped by a signal, then resumed, against a reference run")
@pytest.mark.parametrize("name", list(SIGNALS))
def test_signal_saves_finished_items_and_exits_conventionally(name, server, base, reference, tmp_path):
    signum, expected_code, words = SIGNALS[name]
    out = tmp_path / "run"
    code, _, err = run_faulted(server, base, out, ["stall-after:append:2"], send=signum)
    assert code == expected_code, err[-2000:]
    assert "Traceback" not in err
    assert err.rstrip("\n").splitlines()[-1] == (
        f"base-bench: {words}; 8 finished items are saved in {out}; continue with --resume"
    )
    lines, tail = saved_lines(out)
    assert len(lines) == 8 and tail == b""
    assert sorted(p.name for p in out.iterdir()) == [PARTIAL, "run_config.json"]  # the lock was released
    assert resume(base, out) == 0
    assert_matches_reference(out, reference, 8)


def test_signal_while_an_error_unwinds_reports_the_error(base, tmp_path, capsys, monkeypatch):
    """A SIGTERM that comes while the run is already failing (torchrun sends one to the ranks still
    shutting down) does not hide the error: its line and exit code, not the signal's."""

    def failing(*a, **k):
        try:
            raise RunError("the real problem")
        finally:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the handler runs here

    monkeypatch.setattr("base_bench.evaluation.evaluate", failing)
    assert main(cli_args(base, tmp_path / "run")) == 2
    err = capsys.readouterr().err
    assert one_error_line(err) == "base-bench: error: the real problem" and "SIGTERM" not in err


# ---------------------------------------------------------------- a full disk, an I/O error


def one_error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("base-bench:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    return lines[0]


@pytest.mark.slow(
    reason="a subprocess per case: a CLI run that meets a disk error, then resumed, against a reference run"
)
@pytest.mark.parametrize("name", list(ERRORS))
def test_disk_error_in_a_process_exits_74_and_resume_finishes(name, server, base, reference, tmp_path):
    faults, words, n_saved = ERRORS[name]
    out = tmp_path / "run"
    code, _, err = run_faulted(server, base, out, faults)
    assert code == 74, err[-2000:]
    line = one_error_line(err)
    assert line.startswith("base-bench: error: ") and words in line
    assert f"{n_saved} finished items are saved in {out / PARTIAL}" in line and "--resume" in line
    lines, tail = saved_lines(out)
    assert len(lines) == n_saved and tail == b""  # the half line of the failed append is gone
    assert sorted(p.name for p in out.iterdir()) == [PARTIAL, "run_config.json"]  # no temporary file, no lock
    assert resume(base, out) == 0
    assert_matches_reference(out, reference, n_saved)


@pytest.mark.parametrize(
    "fault, words, n_saved",
    [
        ("error-write:report.json.tmp:1:ENOSPC", "no space left on device (ENOSPC) while writing", 40),
        ("error-write:predictions.md.tmp:1:EIO", "input/output error (EIO) while writing", 40),
        ("error-fsync:partial_results.jsonl:5:EIO", "input/output error (EIO) while saving 4 items", 16),
        ("error-write:run_config.json.tmp:1:ENOSPC", "no space left on device (ENOSPC) while writing", 0),
    ],
)
def test_disk_error_in_process(fault, words, n_saved, base, reference, tmp_path, capsys, monkeypatch):
    out = tmp_path / "err"
    faultrun.install(fault, setattr=monkeypatch.setattr)
    assert main(cli_args(base, out)) == 74
    line = one_error_line(capsys.readouterr().err)
    assert words in line and "--resume" in line
    lines, tail = saved_lines(out)
    assert len(lines) == n_saved and tail == b""
    if out.exists():  # a run that failed before it saved anything leaves no out-dir
        check_consistent(out)
        assert not [p for p in out.iterdir() if p.name.endswith(".tmp") or p.name == LOCK]
    monkeypatch.undo()  # the disk is fine again
    assert resume(base, out) == 0
    assert_matches_reference(out, reference, n_saved)


@contextlib.contextmanager
def one_saved(folder: Path):
    """A run store under its lock, item x-0 saved, and the four items x-0 ... x-3."""
    store = RunStore(folder)
    r = [ItemResult(f"x-{i}", (ChoiceScore(-1.0, 2),), 0, 0) for i in range(4)]
    with store.lock():
        store.begin({"k": 1}, {}, resume=False)
        store.append(r[0])
        yield store, r


def test_failed_append_leaves_no_damaged_line_for_later_appends(tmp_path, monkeypatch):
    """A short write then ENOSPC: the half line is cut, so appends that succeed later follow whole lines."""
    with one_saved(tmp_path / "s") as (store, r):
        with monkeypatch.context() as m:
            faultrun.install("error-write:partial_results.jsonl:1:ENOSPC", setattr=m.setattr)
            with pytest.raises(StorageError, match=r"ENOSPC\) while saving item x-1 .* 1 finished item is saved"):
                store.append(r[1])
        store.append(r[2])
        store.append(r[3])
    assert list(store.load_partial(repair=False)) == ["x-0", "x-2", "x-3"]


def _half_then_signal(fd, data):
    os.write(fd, data[: len(data) // 2])
    raise KeyboardInterrupt  # SIGINT's exception between two parts of one write


def _signal_in_fsync(fd):
    raise KeyboardInterrupt  # the lines are written; SIGINT arrives before fsync returns


@pytest.mark.parametrize(
    "where, patch, kept",
    [
        ("write_all", _half_then_signal, ["x-0", "x-3"]),  # cut back: the file ends on a whole line
        ("fsync", _signal_in_fsync, ["x-0", "x-1", "x-2", "x-3"]),  # whole lines: finished items stay
    ],
)
def test_a_signal_during_a_save_keeps_whole_lines_and_cuts_a_half_written_save(
    tmp_path, monkeypatch, where, patch, kept
):
    from base_bench.engine import runstore

    with one_saved(tmp_path / "s") as (store, r):
        with monkeypatch.context() as m:
            m.setattr(runstore, "write_all", patch) if where == "write_all" else m.setattr(runstore.os, "fsync", patch)
            with pytest.raises(KeyboardInterrupt):
                store.append_many(r[1:3])
        assert store.saved == len(kept) - 1
        store.append(r[3])
    assert list(store.load_partial(repair=False)) == kept
    assert (tmp_path / "s" / PARTIAL).read_bytes().endswith(b"\n")


def mount_tmpfs(where: Path, size: str):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir()
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
    )
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")


def fill(disk: Path, leave_pages: int) -> None:
    """Grow or shrink disk/filler so that `leave_pages` pages of the file system stay free."""
    filler = disk / "filler"
    filler.touch()
    st = os.statvfs(disk)
    size = filler.stat().st_size + (st.f_bavail - leave_pages) * st.f_frsize
    with open(filler, "r+b") as f:
        f.truncate(0)
        f.write(b"\0" * size)


def test_real_full_disk_tmpfs(base, reference, tmp_path, capsys):
    """A real ENOSPC from the kernel: a full tmpfs, then less full, then free (root only; skipped elsewhere)."""
    disk = tmp_path / "disk"
    mount_tmpfs(disk, "2m")
    try:
        out = disk / "run"
        page = os.statvfs(disk).f_frsize
        fill(disk, 4)  # the lock, run_config.json and two pages of partial results
        assert main(cli_args(base, out)) == 74
        line = one_error_line(capsys.readouterr().err)
        assert "no space left on device (ENOSPC) while saving " in line
        lines, tail = saved_lines(out)
        assert 0 < len(lines) < N and tail == b""
        assert f" {len(lines)} finished items are saved" in line
        # Free enough for the remaining items, but not for report.json.
        ref_size = (base / "reference" / PARTIAL).stat().st_size
        missing = math.ceil(ref_size / page) - math.ceil((out / PARTIAL).stat().st_size / page)
        fill(disk, missing + 3)
        assert resume(base, out) == 74
        line = one_error_line(capsys.readouterr().err)
        assert f"no space left on device (ENOSPC) while writing {out / 'report.json'}" in line
        assert f"{N} finished items are saved" in line
        assert len(saved_lines(out)[0]) == N and not (out / "report.json").exists()
        (disk / "filler").unlink()
        assert resume(base, out) == 0
        assert_matches_reference(out, reference, N)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


# ---------------------------------------------------------------- damaged and duplicated lines


def interrupted_copy(base, dest: Path, lines: list[str]) -> Path:
    shutil.copytree(base / "reference", dest)
    (dest / "report.json").unlink()
    (dest / "predictions.md").unlink()
    (dest / PARTIAL).write_text("".join(lines))
    return dest


def test_damaged_middle_line_is_refused_before_the_model_loads(base, reference, tmp_path, capsys, monkeypatch):
    lines = (base / "reference" / PARTIAL).read_text().splitlines(keepends=True)[:20]
    lines[6] = lines[6][:30] + "\n"
    out = interrupted_copy(base, tmp_path / "damaged", lines)
    before = snapshot(out)

    def no_load(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("base_bench.backends.transformers.load_located", no_load)
    assert resume(base, out) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line == f"base-bench: error: {out / PARTIAL}: line 7 is damaged; not touching this run"
    assert snapshot(out) == before


def test_duplicated_line_is_tolerated_and_counted_once(base, reference, tmp_path):
    lines = (base / "reference" / PARTIAL).read_text().splitlines(keepends=True)[:20]
    lines.insert(11, lines[4])
    out = interrupted_copy(base, tmp_path / "dup", lines)
    assert resume(base, out) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["results"] == reference["results"] and len(rep["items"]) == N
    assert rep["timing"]["items_scored_this_session"] == N - 20
    ids = [json.loads(x)["id"] for x in (out / PARTIAL).read_text().splitlines()]
    assert len(ids) == N + 1 and len(set(ids)) == N


# ---------------------------------------------------------------- one process per out-dir


@pytest.mark.slow(reason="two CLI processes at once on one out-dir, one of them SIGKILLed")
def test_second_process_is_refused_while_a_run_works_and_sigkill_frees_it(
    base, reference, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "locked"
    p = subprocess.Popen(
        faultrun_cmd(base, out, ["stall-after:append:2"]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout.readline().startswith("stalled")
        holder = f"is in use by PID {p.pid} on host {socket.gethostname()} since "
        before = snapshot(out)

        with monkeypatch.context() as m:  # refused before the model loads
            m.setattr(
                "base_bench.backends.transformers.load_located", lambda *a, **k: pytest.fail("the model was loaded")
            )
            for extra in ([], ["--resume"]):
                assert main(cli_args(base, out, *extra)) == 2
                line = one_error_line(capsys.readouterr().err)
                assert line.startswith(f"base-bench: error: {out} {holder}") and "wait for it to finish" in line
                assert snapshot(out) == before

        tok = tiny_tokenizer()
        for resume_flag in (False, True):  # evaluate() takes the same lock
            with pytest.raises(RunError, match=holder):
                evaluate(
                    tiny_model("llama", tok),
                    tok,
                    base / "data",
                    limit=4,
                    out_dir=out,
                    resume=resume_flag,
                    progress=False,
                )
        with pytest.raises(RunError, match=holder):  # and so does the lock itself, past the early check
            with RunStore(out).lock():
                pass
        assert snapshot(out) == before
    finally:
        p.kill()
        p.communicate()
    assert p.returncode == -signal.SIGKILL
    assert resume(base, out) == 0  # at once: the kernel released the lock with the process
    assert_matches_reference(out, reference, 8)


def test_lock_in_one_process_refuses_another_holder_and_cleans_up(tmp_path):
    out = tmp_path / "new"
    with RunStore(out).lock():
        info = json.loads((out / LOCK).read_text())
        assert info["pid"] == os.getpid() and info["host"] == socket.gethostname() and info["since"]
        with pytest.raises(RunError, match=f"in use by PID {os.getpid()}"):
            RunStore(out).check({}, resume=True)
        with pytest.raises(RunError, match=f"in use by PID {os.getpid()}"):
            with RunStore(out).lock():
                pass
    assert not out.exists()  # created for the lock, and nothing written: removed again
    out.mkdir()
    (out / "keep").write_text("x")
    with RunStore(out).lock():
        pass
    assert sorted(p.name for p in out.iterdir()) == ["keep"]


def test_no_flock_on_this_file_system_warns_and_runs(tmp_path, monkeypatch):
    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    class Notes(logging.Handler):
        def emit(self, record):
            notes.append(record.getMessage())

    notes, handler = [], Notes()
    logging.getLogger("base_bench").addHandler(handler)
    monkeypatch.setattr("fcntl.flock", no_flock)
    try:
        with RunStore(tmp_path / "nfs").lock() as store:
            store.begin({"k": 1}, {}, resume=False)
    finally:
        logging.getLogger("base_bench").removeHandler(handler)
    assert any("cannot be locked" in n for n in notes)
    assert (tmp_path / "nfs" / "run_config.json").exists()

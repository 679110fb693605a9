"""`base-bench sweep` end to end on this machine (--engine local), with tiny random checkpoints: equal
to ordinary runs, resumable, faults contained (a killed worker, a corrupt checkpoint, two sweeps at
once, SIGTERM), --watch, status and retry, bad input, secrets."""

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sweeprun import (
    FAST,
    assert_same_scores,
    checkpoints,
    jobs,
    kill,
    lines,
    member_dir,
    member_report,
    ordinary,
    start,
    sweep,
    wait_for,
)
from sweeprun import env as sweep_env

from base_bench.sweep import queue
from base_bench.sweep.worker import Config, work

pytestmark = pytest.mark.slow(reason="sweeps start worker processes that load torch and score tiny models")


@pytest.fixture(autouse=True)
def _no_sweep_left_running(no_sweep_left_running):
    pass


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """Three checkpoints swept by two workers, and the ordinary run of each."""
    root = tmp_path_factory.mktemp("swept")
    ckpts = checkpoints(root / "ckpt", [100, 200, 300])
    rc, out, err = sweep(root, "ckpt/checkpoint-*", "--out-dir", "out", "--workers", "2", "--tag", "t1", *FAST)
    assert rc == 0, err[-3000:]
    plain = [ordinary(c, root / f"plain-{c.name}") for c in ckpts]
    return root, ckpts, plain, out


def test_each_member_equals_its_ordinary_run(swept):
    root, ckpts, plain, out = swept
    assert "3 members (3 new, 0 done, 0 failed)" in out and "3 of 3 members done" in out
    for c, rep in zip(ckpts, plain):
        got = member_report(root / "out", c)
        assert_same_scores(got, rep)
        assert (got["group"], got["training_step"], got["tags"]) == ("out", int(c.name.split("-")[1]), ["t1"])
        assert {p.name for p in member_dir(root / "out", c).iterdir()} >= {
            "report.json", "predictions.md", "run_config.json", "partial_results.jsonl"
        }  # fmt: skip


def test_a_worker_checks_the_packed_path_once_per_model_configuration(swept):
    root, ckpts, plain, _ = swept
    said = [member_report(root / "out", c)["config"]["packing_check"]["checked_on"] for c in ckpts]
    stats = [json.loads(p.read_text()) for p in (root / "out" / ".sweep" / "stats").iterdir()]
    working = sum(1 for s in stats if s["done"])
    assert said.count("this model") == working and len(said) - working == said.count(
        "an earlier model of this configuration in this process"
    )
    assert all(r["config"]["packing_check"]["checked_on"] == "this model" for r in plain)  # an ordinary run: its own


def test_the_pages_and_the_store_hold_one_point_per_step(swept):
    root, ckpts, _, _ = swept
    traj = (root / "out" / "trajectory.md").read_text()
    rows = [line for line in traj.splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    assert [int(r.split("|")[1]) for r in rows] == [100, 200, 300]
    for name in ("trajectory.png", "trajectory.html", "leaderboard.md", "leaderboard.html"):
        assert (root / "out" / name).stat().st_size > 0
    rows = jobs(root / "out" / "results.db")
    assert [(r["state"], r["attempts"], r["step"]) for r in rows] == [("done", 1, s) for s in (100, 200, 300)]
    from base_bench.store import run_key

    by_step = {r["step"]: r for r in rows}
    for c in ckpts:
        assert by_step[int(c.name.split("-")[1])]["run_key"] == run_key(member_report(root / "out", c))


def test_the_same_sweep_again_loads_no_model_and_ends_at_once(swept):
    root, ckpts, _, _ = swept
    stats = root / "out" / ".sweep" / "stats"
    before = sorted(p.name for p in stats.iterdir())
    rc, out, err = sweep(root, "ckpt/checkpoint-*", "--out-dir", "out", "--workers", "2", "--tag", "t1", *FAST)
    assert rc == 0, err
    assert "(0 new, 3 done, 0 failed)" in out and "started" not in out
    assert sorted(p.name for p in stats.iterdir()) == before  # no worker was started
    # a worker asked to work on the finished group: claims nothing, loads nothing (the load counter)
    from base_bench import loading

    n = loading.loads()
    got = work(Config(store=f"sqlite:///{root / 'out' / 'results.db'}", group="out", poll_s=0.1))
    assert (got.members, got.loads, loading.loads()) == (0, 0, n)


def test_status_shows_every_member_and_exits_0_when_all_are_done(swept, capsys):
    from base_bench.commands.sweep import main

    root = swept[0]
    assert main(["status", str(root / "out")]) == 0
    out = capsys.readouterr().out
    assert out.count(" done ") == 3 and "out: 3 done, 0 running, 0 waiting, 0 failed; all done" in out
    assert main(["status", str(root / "out"), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["step"] for r in rows] == [100, 200, 300] and all(r["elo"] for r in rows)


def test_a_corrupt_checkpoint_fails_alone_and_retry_puts_it_back(tmp_path, capsys):
    from base_bench.commands.sweep import main

    ckpts = checkpoints(tmp_path / "ckpt", [1, 2, 3])
    weights = ckpts[1] / "model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[: len(good) // 3])
    rc, out, err = sweep(tmp_path, "ckpt/checkpoint-*", "--out-dir", "out", "--max-attempts", "2", *FAST)
    assert rc == 3, (out, err)
    assert "2 of 3 members done, 1 failed" in out
    failed = [r for r in jobs(tmp_path / "out" / "results.db") if r["state"] == "failed"]
    assert [(r["step"], r["attempts"]) for r in failed] == [(2, 2)]
    assert failed[0]["error_class"] == "ModelError" and failed[0]["error"], failed[0]
    assert main(["status", str(tmp_path / "out")]) == 3
    assert "ModelError" in capsys.readouterr().out
    assert main(["retry", str(tmp_path / "out"), "--failed"]) == 0
    assert "1 failed member of out waits again" in capsys.readouterr().out
    weights.write_bytes(good)
    rc, out, err = sweep(tmp_path, "ckpt/checkpoint-*", "--out-dir", "out", "--max-attempts", "2", *FAST)
    assert rc == 0 and "(0 new, 2 done, 0 failed)" in out and "3 of 3 members done" in out, (out, err)
    assert_same_scores(member_report(tmp_path / "out", ckpts[1]), ordinary(ckpts[1], tmp_path / "plain"))


def _running_worker(db: Path) -> dict:
    rows = [r for r in jobs(db) if r["state"] == "running"] if db.exists() else []
    return rows[0] if rows else None


def test_a_worker_killed_mid_member_is_replaced_and_the_member_finishes_once(tmp_path):
    (ckpt,) = checkpoints(tmp_path / "ckpt", [7])
    p = start(tmp_path, "ckpt/checkpoint-*", "--out-dir", "out", "--data", "bundled", "--batch-size", "4")
    partial = member_dir(tmp_path / "out", ckpt) / "partial_results.jsonl"
    wait_for(lambda: lines(partial) >= 40)
    row = _running_worker(tmp_path / "out" / "results.db")
    kill(row["pid"])
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-3000:]
    assert "a worker ended with work left; started another" in out
    (done,) = jobs(tmp_path / "out" / "results.db")
    assert (done["state"], done["attempts"]) == ("done", 2) and done["pid"] != row["pid"]
    got = member_report(tmp_path / "out", ckpt)
    assert 0 < got["timing"]["items_scored_this_session"] < len(got["items"])  # it continued the partial results
    assert_same_scores(got, ordinary(ckpt, tmp_path / "plain", "--data", "bundled", "--batch-size", "4"))


def test_a_lapsed_lease_is_taken_over_by_another_worker(tmp_path):
    """A worker that stops answering (frozen with SIGSTOP: alive, so only its lease can tell) loses
    its member after --lease-timeout; the other worker takes it over and finishes it once."""
    (ckpt,) = checkpoints(tmp_path / "ckpt", [7])
    p = start(
        tmp_path, "ckpt/checkpoint-*", "--out-dir", "out", "--workers", "2", "--lease-timeout", "3",
        "--data", "bundled", "--batch-size", "4",
    )  # fmt: skip
    partial = member_dir(tmp_path / "out", ckpt) / "partial_results.jsonl"
    wait_for(lambda: lines(partial) >= 40)
    frozen = _running_worker(tmp_path / "out" / "results.db")
    kill(frozen["pid"], signal.SIGSTOP)
    try:
        taken = wait_for(
            lambda: (r := _running_worker(tmp_path / "out" / "results.db")) and r["pid"] != frozen["pid"] and r, 120
        )
        assert taken["attempts"] == 2
    finally:
        kill(frozen["pid"])  # the frozen one holds the out-dir's lock until it is gone
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, (out, err[-3000:])
    (done,) = jobs(tmp_path / "out" / "results.db")
    assert done["state"] == "done" and done["pid"] != frozen["pid"]
    assert_same_scores(
        member_report(tmp_path / "out", ckpt),
        ordinary(ckpt, tmp_path / "plain", "--data", "bundled", "--batch-size", "4"),
    )


def test_a_member_whose_folder_another_process_holds_waits_without_spending_an_attempt(tmp_path):
    """The member's folder is locked by a live process (a stuck worker whose lease lapsed, or a run
    started by hand): with --max-attempts 1 the member is not failed; it waits, `sweep status` names
    the holder, and once the holder is gone the same sweep scores it in its one attempt."""
    (ckpt,) = checkpoints(tmp_path / "ckpt", [9])
    folder = member_dir(tmp_path / "out", ckpt)
    hold = (
        "import sys, time\nfrom base_bench.engine.runstore import RunStore\n"
        "with RunStore(sys.argv[1]).lock():\n    print('held', flush=True)\n    time.sleep(600)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(folder)], stdout=subprocess.PIPE, text=True, env=sweep_env()
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        p = start(tmp_path, "ckpt/checkpoint-*", "--out-dir", "out", "--max-attempts", "1", *FAST)
        db = tmp_path / "out" / "results.db"
        row = wait_for(lambda: db.exists() and (r := jobs(db)) and r[0]["error_class"] == "RunInUse" and r[0], 300)
        assert row["attempts"] in (0, 1) and f"is in use by PID {holder.pid}" in row["error"]
        time.sleep(3)  # several tries later: still waiting, never failed
        (row,) = jobs(db)
        assert row["state"] in ("waiting", "running") and row["attempts"] <= 1 and p.poll() is None
        rc, out, err = sweep(tmp_path, "status", "out")
        assert rc == 3 and "RunInUse" in out and f"PID {holder.pid}" in out, (out, err)  # 3: members left
    finally:
        holder.kill()
        holder.wait()
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, (out, err[-3000:])
    (done,) = jobs(db)
    assert (done["state"], done["attempts"], done["error"]) == ("done", 1, None)
    assert_same_scores(member_report(tmp_path / "out", ckpt), ordinary(ckpt, tmp_path / "plain"))


def test_two_sweep_commands_on_one_store_score_each_member_once(tmp_path):
    checkpoints(tmp_path / "ckpt", [1, 2, 3, 4])
    a = start(tmp_path, "ckpt/checkpoint-*", "--out-dir", "out", *FAST)
    b = start(tmp_path, "ckpt/checkpoint-*", "--out-dir", "out", *FAST)
    for p in (a, b):
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    rows = jobs(tmp_path / "out" / "results.db")
    assert [(r["state"], r["attempts"]) for r in rows] == [("done", 1)] * 4
    for r in rows:
        rep = json.loads((Path(r["out_dir"]) / "report.json").read_text())
        assert rep["timing"]["items_scored_this_session"] == len(rep["items"])  # scored once, by one worker


def _sigterm_pending(pid: int) -> bool:
    """SIGTERM waits for the (stopped) process `pid`: /proc/PID/status's pending masks."""
    status = Path(f"/proc/{pid}/status").read_text()
    masks = [int(line.split()[1], 16) for line in status.splitlines() if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(m & (1 << (signal.SIGTERM - 1)) for m in masks)


def test_sigterm_stops_the_sweep_and_the_same_command_finishes_it(tmp_path):
    (ckpt,) = checkpoints(tmp_path / "ckpt", [5])
    args = ("ckpt/checkpoint-*", "--out-dir", "out", "--data", "bundled", "--batch-size", "4")
    p = start(tmp_path, *args)
    partial = member_dir(tmp_path / "out", ckpt) / "partial_results.jsonl"
    wait_for(lambda: lines(partial) >= 40)
    # The worker is frozen until the command has passed the signal on, so that the signal finds it
    # mid-member however fast the tiny model scores the rest
    worker = _running_worker(tmp_path / "out" / "results.db")["pid"]
    kill(worker, signal.SIGSTOP)
    p.send_signal(signal.SIGTERM)
    wait_for(lambda: _sigterm_pending(worker), 60)
    kill(worker, signal.SIGCONT)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 128 + signal.SIGTERM, (out, err)
    assert "SIGTERM: stopping the workers" in out
    (row,) = jobs(tmp_path / "out" / "results.db")
    assert (row["state"], row["attempts"]) == ("waiting", 0)  # released: the attempt is not counted
    saved = lines(partial)
    assert 40 <= saved < 350
    rc, out, err = sweep(tmp_path, *args)
    assert rc == 0, err[-3000:]
    got = member_report(tmp_path / "out", ckpt)
    assert got["timing"]["items_scored_this_session"] == len(got["items"]) - saved
    assert_same_scores(got, ordinary(ckpt, tmp_path / "plain", "--data", "bundled", "--batch-size", "4"))


def test_watch_scores_checkpoints_as_they_come_and_stops_at_until_step(tmp_path):
    src = checkpoints(tmp_path / "made", [100, 200, 300, 400])
    (tmp_path / "incoming").mkdir()
    p = start(
        tmp_path, "incoming/checkpoint-*", "--out-dir", "out", "--watch", "--settle", "1", "--until-step", "300",
        "--tokens-per-step", "1000", *FAST,
    )  # fmt: skip
    db = tmp_path / "out" / "results.db"
    wait_for(lambda: db.exists(), 120)
    # 100: a plain folder (complete once unchanged for --settle); 200: an HF checkpoint (trainer_state.json)
    shutil.copytree(src[0], tmp_path / "incoming" / "checkpoint-100")
    wait_for(lambda: [r for r in jobs(db) if r["state"] == "done"], 300)
    (src[1] / "trainer_state.json").write_text(json.dumps({"global_step": 200}))
    shutil.copytree(src[1], tmp_path / "incoming" / "checkpoint-200")
    wait_for(lambda: len([r for r in jobs(db) if r["state"] == "done"]) == 2, 300)
    assert p.poll() is None  # still watching
    shutil.copytree(src[2], tmp_path / "incoming" / "checkpoint-300")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
    assert "reached step 300: the watch ends" in out
    rows = jobs(db)
    assert [(r["step"], r["tokens"], r["state"]) for r in rows] == [(s, s * 1000, "done") for s in (100, 200, 300)]
    traj = (tmp_path / "out" / "trajectory.md").read_text()
    assert all(f"| {s} " in traj for s in (100, 200, 300))
    assert_same_scores(
        member_report(tmp_path / "out", tmp_path / "incoming" / "checkpoint-200"), ordinary(src[1], tmp_path / "plain")
    )


def test_a_checkpoint_deleted_before_it_is_scored_is_skipped_with_a_note(tmp_path, capsys):
    from base_bench.commands.sweep import main
    from base_bench.store import open_store
    from base_bench.sweep.members import member

    gone = tmp_path / "ckpt" / "checkpoint-9"
    gone.mkdir(parents=True)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    db = open_store(url)
    queue.open_sweep(db, "g", str(tmp_path), {"data_spec": "bundled"})
    queue.enqueue(db, "g", str(tmp_path), [member(str(gone))], {"data_spec": "bundled"})
    db.dispose()
    gone.rmdir()
    stats = work(Config(store=url, group="g", poll_s=0.1))
    assert (stats.skipped, stats.loads) == (1, 0)
    assert main(["status", "--store", url, "--group", "g"]) == 0
    assert (
        "skipped" in capsys.readouterr().out
        and "deleted before it was scored" in jobs(tmp_path / "results.db")[0]["note"]
    )


BAD = [  # (arguments, words of the one line)
    ([], "give the models"),
    (["ckpt/checkpoint-*", "--until-step", "5"], "--until-step goes with --watch"),
    (["ckpt/checkpoint-*", "--detach"], "--detach is for --engine slurm"),
    (["ckpt/checkpoint-*", "--slurm-partition", "x"], "--slurm-partition is for --engine slurm"),
    (["ckpt/checkpoint-*", "--engine", "slurm", "--slurm-time", "soon"], "--slurm-time soon"),
    (["nothing-here/*"], "no model matches"),
    (["ckpt/checkpoint-*", "--base-url", "http://u:pw-7f3@127.0.0.1:1/v1", "--backend", "server"], "--api-key-env"),
    (["ckpt/checkpoint-*", "--model", "x"], "unrecognized arguments: --model"),
    (["ckpt/checkpoint-*", "--resume"], "unrecognized arguments: --resume"),
    (["ckpt/checkpoint-*", "--limit", "3", "--data", "no/such/file.jsonl"], "no/such/file.jsonl"),
]


@pytest.mark.parametrize("args,words", BAD)
def test_bad_input_gets_one_line_and_exit_2(tmp_path, args, words):
    (tmp_path / "ckpt" / "checkpoint-1").mkdir(parents=True)
    rc, out, err = sweep(tmp_path, *args, "--out-dir", "out")
    assert rc == 2 and words in err and "Traceback" not in err, (rc, out, err)
    assert "pw-7f3" not in out + err
    assert len(err.strip().splitlines()) <= 2, err


def test_the_same_out_dir_with_other_run_flags_is_refused_and_left_as_it_was(swept):
    root = swept[0]
    before = {p: p.stat().st_mtime_ns for p in (root / "out").rglob("*") if p.is_file() and ".sweep" not in p.parts}
    rc, out, err = sweep(
        root, "ckpt/checkpoint-*", "--out-dir", "out", "--data", "bundled", "--limit-per-category", "3"
    )
    assert rc == 2 and "holds a sweep run with other run flags" in err and "limit-per-category 2 then, 3 now" in err
    after = {p: p.stat().st_mtime_ns for p in (root / "out").rglob("*") if p.is_file() and ".sweep" not in p.parts}
    assert after == before


def test_a_postgresql_password_is_in_no_file_and_on_no_command_line(tmp_path, postgres_url):
    from urllib.parse import urlsplit

    password = urlsplit(postgres_url).password
    checkpoints(tmp_path / "ckpt", [1])
    p = start(tmp_path, "ckpt/checkpoint-*", "--out-dir", "out", "--store", postgres_url, *FAST)
    seen = []
    mine = str(tmp_path).encode()
    while p.poll() is None:  # the workers' command lines, while they run
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    cmd = (proc / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"base_bench.sweep.worker" in cmd and mine in cmd:
                    seen.append(cmd)
        time.sleep(0.05)
    out, err = p.communicate()
    assert p.returncode == 0, err[-3000:]
    assert seen and not any(password.encode() in c for c in seen)
    assert password not in out + err
    for f in (tmp_path / "out").rglob("*"):
        if f.is_file():
            assert password.encode() not in f.read_bytes(), f


def test_hub_models_at_revisions_are_members_named_by_id_and_revision(tmp_path, monkeypatch):
    """Members given as org/name@REVISION and org/name, fetched over HTTP from a Hub (the fake one of
    tests/hubserver.py, found through HF_ENDPOINT as a mirror is)."""
    from hubserver import FakeHub, files_of

    ckpts = checkpoints(tmp_path / "made", [1, 2])
    with FakeHub() as hub:
        hub.add_repo("org/run-a", files_of(ckpts[0]))
        hub.add_repo("org/run-b", files_of(ckpts[1]))
        commit = hub.repos[("model", "org/run-a")].commit
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        rc, out, err = sweep(tmp_path, f"org/run-a@{commit}", "org/run-b", "--out-dir", "out", *FAST)
        assert rc == 0, err[-3000:]
        from base_bench.sweep.members import member_name

        a = json.loads((tmp_path / "out" / member_name("org/run-a", commit) / "report.json").read_text())
        b = json.loads((tmp_path / "out" / member_name("org/run-b") / "report.json").read_text())
        assert member_name("org/run-a", commit).startswith(f"org-run-a-{commit[:12]}")
        assert (a["config"]["model"]["revision"], a["config"]["model"]["revision_requested"]) == (commit, commit)
        assert b["config"]["model"]["revision_requested"] is None
        # the same weights as the local folders they were served from (another model identity: a Hub id)
        assert_same_scores(a, ordinary(ckpts[0], tmp_path / "plain-a"), same_model=False)
        assert_same_scores(b, ordinary(ckpts[1], tmp_path / "plain-b"), same_model=False)
        rows = jobs(tmp_path / "out" / "results.db")
        assert sorted((r["model"], r["revision"]) for r in rows) == [("org/run-a", commit), ("org/run-b", None)]

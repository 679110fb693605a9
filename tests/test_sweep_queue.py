"""The sweep's queue in the store (SQLite and PostgreSQL): claims, leases, heartbeats, attempts,
retries, and many processes claiming at once. No model: the queue alone."""

import multiprocessing as mp
import os
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

from base_bench.errors import UsageError
from base_bench.store import open_store
from base_bench.store import schema as store_schema
from base_bench.sweep import queue
from base_bench.sweep.members import member

FLAGS = {"limit": None, "limit_per_category": 2, "data_spec": "bundled"}


@pytest.fixture
def db(store_url):
    d = open_store(store_url)
    yield d
    d.dispose()


def members(n, root="/ckpt"):
    return [member(f"{root}/checkpoint-{(i + 1) * 100}") for i in range(n)]


def worker(name, host=None, pid=None):
    me = queue.Worker.here(name)
    return queue.Worker(name, host or me.host, pid or me.pid, me.started)


def fresh(db, n=3, group="g", flags=FLAGS):
    queue.open_sweep(db, group, "/sweeps/g", flags)
    assert queue.enqueue(db, group, "/sweeps/g", members(n), flags) == n


def test_enqueue_is_idempotent_and_claims_go_by_step(db):
    queue.open_sweep(db, "g", "/sweeps/g", FLAGS)
    ms = members(3)
    assert queue.enqueue(db, "g", "/sweeps/g", ms[::-1], FLAGS) == 3
    assert queue.enqueue(db, "g", "/sweeps/g", ms, FLAGS) == 0
    assert queue.enqueue(db, "g", "/sweeps/g", [*ms, member("/ckpt/checkpoint-50")], FLAGS) == 1
    a, b = worker("a"), worker("b")
    got = [queue.claim(db, "g", w, 60, 3) for w in (a, b, a, b)]
    assert [j.step for j in got] == [50, 100, 200, 300]
    assert queue.claim(db, "g", a, 60, 3) is None
    assert got[0].out_dir == f"/sweeps/g/{got[0].name}" and got[0].attempt == 1
    assert queue.counts(db, "g")["running"] == 4 and not queue.finished(db, "g")


def test_a_group_with_other_flags_or_another_out_dir_is_refused(db):
    assert queue.open_sweep(db, "g", "/sweeps/g", FLAGS) is True
    assert queue.open_sweep(db, "g", "/sweeps/g", dict(FLAGS)) is False
    with pytest.raises(UsageError, match="other run flags .*limit-per-category 2 then, 4 now"):
        queue.open_sweep(db, "g", "/sweeps/g", {**FLAGS, "limit_per_category": 4})
    with pytest.raises(UsageError, match="the group g is the sweep in /sweeps/g"):
        queue.open_sweep(db, "g", "/elsewhere", FLAGS)


def test_done_failed_retried_and_failed_for_good(db):
    fresh(db, 2)
    me = worker("a")
    j1 = queue.claim(db, "g", me, 60, 2)
    assert queue.done(db, j1, me, "k" * 64, "s" * 64)
    j2 = queue.claim(db, "g", me, 60, 2)
    assert queue.failed(db, j2, me, ValueError("bad\nsecond line"), 2) == "waiting"
    j2b = queue.claim(db, "g", me, 60, 2)
    assert (j2b.id, j2b.attempt) == (j2.id, 2)
    assert queue.failed(db, j2b, me, OSError("disk"), 2) == "failed"
    rows = {r["id"]: r for r in queue.table(db, "g")}
    assert rows[j1.id]["state"] == "done" and rows[j1.id]["run_key"] == "k" * 64
    assert (rows[j2.id]["state"], rows[j2.id]["error_class"], rows[j2.id]["error"]) == ("failed", "OSError", "disk")
    assert queue.finished(db, "g") and queue.counts(db, "g")["failed"] == 1
    assert queue.retry(db, "g") == 1 and queue.counts(db, "g")["waiting"] == 1
    assert queue.claim(db, "g", me, 60, 2).attempt == 1


def test_a_released_job_waits_again_with_its_attempt_not_counted(db):
    fresh(db, 1)
    me = worker("a")
    j = queue.claim(db, "g", me, 60, 3)
    queue.release(db, j, me)
    again = queue.claim(db, "g", me, 60, 3)
    assert (again.id, again.attempt) == (j.id, 1)


def test_a_lapsed_lease_is_taken_over_and_the_old_worker_loses_it(db):
    fresh(db, 1)
    old, new = worker("old", host="elsewhere:1"), worker("new")
    j = queue.claim(db, "g", old, 60, 3)
    assert queue.claim(db, "g", new, 60, 3) is None  # a live lease (another host: its heartbeat counts)
    assert queue.beat(db, j, old)
    time.sleep(1.2)
    assert queue.claim(db, "g", new, 60, 3) is None
    taken = queue.claim(db, "g", new, 1.0, 3)  # no heartbeat for over 1 s
    assert (taken.id, taken.attempt) == (j.id, 2)
    assert not queue.beat(db, j, old) and not queue.done(db, j, old, "k" * 64, None)
    assert queue.beat(db, taken, new) and queue.done(db, taken, new, "k" * 64, None)


def test_a_dead_process_on_this_host_loses_its_lease_at_once(db):
    fresh(db, 1)
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    dead = queue.Worker("dead", queue.host_id(), p.pid, "12345")
    j = queue.claim(db, "g", dead, 3600, 3)
    taken = queue.claim(db, "g", worker("alive"), 3600, 3)
    assert taken is not None and taken.id == j.id


def test_a_live_process_on_this_host_keeps_its_lease(db):
    fresh(db, 1)
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = queue.Worker("live", queue.host_id(), p.pid, queue.process_start(p.pid))
        queue.claim(db, "g", live, 3600, 3)
        assert queue.claim(db, "g", worker("other"), 3600, 3) is None
        reused = queue.Worker("reused", queue.host_id(), p.pid, "1")  # the same pid, another start time
        with store_schema.writing(db) as conn:
            conn.execute(sa.update(store_schema.jobs).values(worker="reused", pid_started="1"))
        assert queue.claim(db, "g", worker("other"), 3600, 3) is not None
        del reused
    finally:
        p.kill()
        p.wait()


def test_a_job_whose_workers_keep_dying_fails_after_max_attempts(db):
    fresh(db, 1)
    for n in range(2):
        j = queue.claim(db, "g", worker(f"w{n}", host="elsewhere:1"), 0.01, 2)
        assert j.attempt == n + 1
        time.sleep(0.05)
    assert queue.claim(db, "g", worker("w3"), 0.01, 2) is None
    (row,) = queue.table(db, "g")
    assert (row["state"], row["error_class"]) == ("failed", "WorkerLost")
    assert "stopped without a word, 2 times" in row["error"]


def test_until_step_is_reached_when_no_lower_member_is_left(db):
    fresh(db, 3)
    me = worker("a")
    assert not queue.reached(db, "g", 200)
    jobs = [queue.claim(db, "g", me, 60, 3) for _ in range(3)]
    queue.done(db, jobs[1], me, "k" * 64, None)  # step 200
    assert not queue.reached(db, "g", 200)  # step 100 is still running
    queue.done(db, jobs[0], me, "j" * 64, None)
    assert queue.reached(db, "g", 200) and not queue.reached(db, "g", 400)


def _claimer(url, n, out):
    db = open_store(url)
    me = queue.Worker.here(f"p{os.getpid()}")
    got = []
    while True:
        j = queue.claim(db, "g", me, 600, 3)
        if j is None:
            break
        got.append(j.id)
        queue.done(db, j, me, "k" * 64, None)
    db.dispose()
    out.put(got)


@pytest.mark.slow(reason="four processes claim forty jobs of one store at once")
def test_many_processes_claiming_at_once_take_each_job_once(db, store_url):
    fresh(db, 40)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claimer, args=(store_url, 40, out)) for _ in range(4)]
    for p in procs:
        p.start()
    got = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    claimed = sorted(i for g in got for i in g)
    assert len(claimed) == 40 and len(set(claimed)) == 40
    assert queue.counts(db, "g")["done"] == 40
    assert {r["attempts"] for r in queue.table(db, "g")} == {1}


def test_an_older_store_gets_the_sweep_tables_from_upgrade(store_url):
    db = open_store(store_url)
    try:
        with store_schema.writing(db) as conn:  # make it, then take it back to version 1
            conn.execute(sa.text("DROP TABLE jobs"))
            conn.execute(sa.text("DROP TABLE sweeps"))
            conn.execute(sa.text("UPDATE meta SET value = '1' WHERE name = 'schema_version'"))
        with pytest.raises(Exception, match="older than this base-bench"):
            queue.open_sweep(db, "g", "/x", FLAGS)
        assert store_schema.upgrade(db) == (1, 2)
        queue.open_sweep(db, "g", "/x", FLAGS)
        assert queue.enqueue(db, "g", "/x", members(1), FLAGS) == 1
    finally:
        db.dispose()

"""The sweep's queue, in the results store: jobs that workers claim with a lease and a heartbeat.

    open_sweep(db, "pretrain-7", out_dir, flags)        # the sweep's row; other flags for one group: refused
    enqueue(db, "pretrain-7", out_dir, members, flags)  # one job per member, kept if already there
    job = claim(db, "pretrain-7", me, lease_timeout=120, max_attempts=3)   # a Job, or None
    beat(db, job, me)                                   # the lease lives on; False once it was lost
    done(db, job, me, run_key, signature) | failed(db, job, me, exc, max_attempts) | release(db, job, me)

A job is keyed by what can be known before its weights are read: the group, the member's model
(its absolute path, or its Hub id) and revision, and the run flags; the run's signature and store
key are attached once it has run. Its states:

    waiting  -> running (claimed: attempts + 1, the worker's name, host, pid and a heartbeat)
    running  -> done (its run is in the store) | waiting (it failed or its worker was stopped, and
                may be tried again) | failed (it failed max_attempts times) | skipped (its checkpoint
                was deleted before it was scored)

A claim takes a waiting job, else a running one whose lease has lapsed: no heartbeat for
lease_timeout seconds, or, where the claiming worker runs on the same host, a worker process that
is gone (its pid is not running, or is running a later process). The new worker continues the
member's partial results (the run's --resume). A job whose lease lapsed max_attempts times is
failed rather than claimed again: a member that kills its worker each time stops there.

Every change is one write transaction that checks the job is still in the state (and held by the
worker) it was read in, so two workers never both take a job: on SQLite the transaction holds the
database's write lock (BEGIN IMMEDIATE), on PostgreSQL the row is locked (FOR UPDATE SKIP LOCKED:
other workers pass over it to the next job).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import and_, func, or_, select, update

from ..errors import UsageError
from ..store import schema
from ..store.ingest import now as iso_now
from .members import Member

STATES = ("waiting", "running", "done", "failed", "skipped")
FINISHED = ("done", "failed", "skipped")
MAX_ERROR = 500  # characters of an error line kept


@dataclass(frozen=True)
class Worker:
    """Who claims: a `name` for tables and logs, the `host` (hostname and boot id) and the process."""

    name: str
    host: str
    pid: int
    started: str | None

    @classmethod
    def here(cls, name: str | None = None) -> Worker:
        pid = os.getpid()
        return cls(name or f"{socket.gethostname()}:{pid}", host_id(), pid, process_start(pid))


@dataclass(frozen=True)
class Job:
    """A claimed job: the member to score, where, and the attempt it is."""

    id: int
    key: str
    group: str
    model: str
    revision: str | None
    name: str
    out_dir: str
    step: int | None
    tokens: int | None
    attempt: int


def host_id() -> str:
    """This host as the queue knows it: its name and, where it has one, its boot id (a rebooted host
    runs none of the processes it ran before)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}:{boot[:8]}" if boot else socket.gethostname()


def process_start(pid: int) -> str | None:
    """When process `pid` started (clock ticks after boot, from /proc), to tell it from a later
    process given the same pid; None where /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def process_gone(pid: int | None, started: str | None) -> bool:
    """True when the process (pid, start time), of this host, is certainly not running."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    now = process_start(pid)
    if now is not None and started is not None and now != started:
        return True
    try:  # a zombie (killed, not yet reaped by its parent) runs nothing
        state = Path(f"/proc/{pid}/stat").read_text()
        return state[state.rfind(")") + 2 :].startswith("Z")
    except OSError:
        return False


def flags_hash(flags: dict) -> str:
    return hashlib.sha256(json.dumps(flags, sort_keys=True).encode()).hexdigest()


def job_key(group: str, m: Member, flags: dict) -> str:
    text = json.dumps([group, m.model, m.revision, flags], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def open_sweep(
    db, group: str, out_dir: str, flags: dict, watching: bool = False, until_step: int | None = None
) -> bool:
    """Make (or find) the sweep's row; returns True where it is new. A group that another sweep
    already ran with other run flags, or from another out-dir, is refused in one line: its members'
    folders hold runs of those."""
    t = schema.sweeps
    digest = flags_hash(flags)
    with schema.writing(db) as conn:
        row = conn.execute(select(t).where(t.c.group_name == group)).first()
        if row is None:
            conn.execute(
                t.insert().values(
                    group_name=group,
                    out_dir=out_dir,
                    flags=json.dumps(flags, sort_keys=True),
                    flags_sha256=digest,
                    watching=watching,
                    until_step=until_step,
                    created_at=iso_now(),
                )
            )
            return True
        if row.out_dir != out_dir:
            raise UsageError(
                f"the group {group} is the sweep in {row.out_dir}; give that --out-dir, or another --group"
            )
        if row.flags_sha256 != digest:
            diff = _differences(json.loads(row.flags), flags)
            raise UsageError(
                f"{out_dir} holds a sweep run with other run flags ({diff}); give the same flags, or another "
                "--out-dir and --group"
            )
        conn.execute(update(t).where(t.c.group_name == group).values(watching=watching, until_step=until_step))
        return False


def _differences(old: dict, new: dict) -> str:
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return ", ".join(f"--{k.replace('_', '-')} {old.get(k)!r} then, {new.get(k)!r} now" for k in keys[:3])


def sweep_row(db, group: str):
    """The sweep's row (out_dir, flags, watching, until_step...), or None."""
    t = schema.sweeps
    with schema.reading(db) as conn:
        return conn.execute(select(t).where(t.c.group_name == group)).first()


def groups_in(db, out_dir: str) -> list[str]:
    t = schema.sweeps
    with schema.reading(db) as conn:
        return list(conn.execute(select(t.c.group_name).where(t.c.out_dir == out_dir)).scalars())


def set_watching(db, group: str, watching: bool) -> None:
    with schema.writing(db) as conn:
        conn.execute(update(schema.sweeps).where(schema.sweeps.c.group_name == group).values(watching=watching))


def enqueue(db, group: str, out_dir: str, members: list[Member], flags: dict) -> int:
    """A waiting job for each member that has none; returns how many were added."""
    if not members:
        return 0
    t = schema.jobs
    keys = {job_key(group, m, flags): m for m in members}
    added = 0
    with schema.writing(db) as conn:
        have = set()
        for chunk in _chunks(sorted(keys), 500):
            have |= set(conn.execute(select(t.c.key).where(t.c.key.in_(chunk))).scalars())
        stamp = time.time()
        rows = [
            dict(
                key=k,
                group_name=group,
                model=m.model,
                revision=m.revision,
                name=m.name,
                out_dir=str(Path(out_dir) / m.name),
                step=m.step,
                tokens=m.tokens,
                state="waiting",
                attempts=0,
                queued_at=stamp,
            )
            for k, m in keys.items()
            if k not in have
        ]
        if rows:
            conn.execute(t.insert(), rows)
            added = len(rows)
    return added


def _chunks(seq: list, n: int):
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


def _order():
    t = schema.jobs
    return (t.c.step.is_(None), t.c.step, t.c.id)  # by step (the curve grows left to right), then as queued


def claim(db, group: str, me: Worker, lease_timeout: float, max_attempts: int) -> Job | None:
    """Take the next job of `group` for `me`: a waiting one, else one whose lease lapsed. None when
    there is none to take now (all finished, or all held by live workers)."""
    t = schema.jobs
    with schema.writing(db) as conn:
        pg = db.dialect == "postgresql"
        q = select(t).where(t.c.group_name == group, t.c.state == "waiting").order_by(*_order()).limit(1)
        row = conn.execute(q.with_for_update(skip_locked=True) if pg else q).first()
        if row is None:
            lapsed = time.time() - lease_timeout
            q = select(t).where(t.c.group_name == group, t.c.state == "running").order_by(*_order())
            for r in conn.execute(q.with_for_update(skip_locked=True) if pg else q).all():
                gone = r.heartbeat is None or r.heartbeat < lapsed
                gone = gone or (r.host == me.host and r.pid != me.pid and process_gone(r.pid, r.pid_started))
                if not gone:
                    continue
                if r.attempts >= max_attempts:
                    conn.execute(
                        update(t)
                        .where(t.c.id == r.id, t.c.state == "running", t.c.worker == r.worker)
                        .values(
                            state="failed",
                            error_class="WorkerLost",
                            error=f"its worker {r.worker} stopped without a word, {r.attempts} times",
                            finished_at=time.time(),
                        )
                    )
                    continue
                row = r
                break
        if row is None:
            return None
        won = conn.execute(
            update(t)
            .where(t.c.id == row.id, t.c.state == row.state, _same(t.c.worker, row.worker))
            .values(
                state="running",
                attempts=row.attempts + 1,
                worker=me.name,
                host=me.host,
                pid=me.pid,
                pid_started=me.started,
                heartbeat=time.time(),
                started_at=time.time(),
                finished_at=None,
            )
        ).rowcount
        if won != 1:
            return None
        return Job(
            row.id, row.key, row.group_name, row.model, row.revision, row.name, row.out_dir, row.step, row.tokens,
            row.attempts + 1,
        )  # fmt: skip


def _same(col, value):
    return col.is_(None) if value is None else col == value


def _held(job: Job, me: Worker):
    t = schema.jobs
    return and_(t.c.id == job.id, t.c.state == "running", t.c.worker == me.name, t.c.pid == me.pid)


def beat(db, job: Job, me: Worker) -> bool:
    """Renew `me`'s lease on `job`; False when it is no longer `me`'s (another worker took it over)."""
    with schema.writing(db) as conn:
        return conn.execute(update(schema.jobs).where(_held(job, me)).values(heartbeat=time.time())).rowcount == 1


def done(db, job: Job, me: Worker, run_key: str, signature: str | None) -> bool:
    with schema.writing(db) as conn:
        return (
            conn.execute(
                update(schema.jobs)
                .where(_held(job, me))
                .values(
                    state="done",
                    run_key=run_key,
                    signature_sha256=signature,
                    finished_at=time.time(),
                    error=None,
                    error_class=None,
                )  # fmt: skip
            ).rowcount
            == 1
        )


def error_line(exc: BaseException) -> str:
    from ..redact import redact

    lines = str(exc).strip().splitlines()
    text = re.sub(r"\s+", " ", lines[0] if lines else type(exc).__name__)
    return redact(text)[:MAX_ERROR]


def failed(db, job: Job, me: Worker, exc: BaseException, max_attempts: int) -> str:
    """Record the attempt's error; the job waits for another attempt, or is failed after max_attempts.
    Returns the state it is left in."""
    state = "failed" if job.attempt >= max_attempts else "waiting"
    with schema.writing(db) as conn:
        conn.execute(
            update(schema.jobs)
            .where(_held(job, me))
            .values(
                state=state,
                error_class=type(exc).__name__[:64],
                error=error_line(exc),
                finished_at=time.time() if state == "failed" else None,
            )
        )
    return state


def skipped(db, job: Job, me: Worker, note: str) -> None:
    with schema.writing(db) as conn:
        conn.execute(
            update(schema.jobs).where(_held(job, me)).values(state="skipped", note=note, finished_at=time.time())
        )


def release(db, job: Job, me: Worker, why: BaseException | None = None) -> None:
    """`me` leaves `job` unfinished: the job waits again, this attempt not counted. Stopped (SIGTERM,
    SIGINT, preemption) mid-member, the next worker continues its partial results. With `why`, the
    member's out-dir was held by another live process (a worker whose lease lapsed while it was stuck,
    a run started by hand), and the job's error says who holds it: the member is not failing, it is
    being scored elsewhere."""
    said = {} if why is None else {"error_class": type(why).__name__[:64], "error": error_line(why)}
    with schema.writing(db) as conn:
        conn.execute(
            update(schema.jobs)
            .where(_held(job, me))
            .values(state="waiting", attempts=schema.jobs.c.attempts - 1, **said)
        )


def retry(db, group: str, states: tuple[str, ...] = ("failed",)) -> int:
    """Put the group's jobs in `states` back to waiting, their attempts reset; how many."""
    t = schema.jobs
    with schema.writing(db) as conn:
        return conn.execute(
            update(t)
            .where(t.c.group_name == group, t.c.state.in_(states))
            .values(state="waiting", attempts=0, finished_at=None, worker=None, pid=None)
        ).rowcount


def counts(db, group: str) -> dict[str, int]:
    """How many jobs of the group are in each state."""
    t = schema.jobs
    with schema.reading(db) as conn:
        rows = conn.execute(select(t.c.state, func.count()).where(t.c.group_name == group).group_by(t.c.state)).all()
    return {s: 0 for s in STATES} | {s: n for s, n in rows}


def finished(db, group: str) -> bool:
    """Nothing left to do: no job waiting or running, and no --watch adding more."""
    row = sweep_row(db, group)
    n = counts(db, group)
    return (row is None or not row.watching) and n["waiting"] == 0 and n["running"] == 0


def peek(db, group: str) -> tuple[str, str | None] | None:
    """The (model, revision) of the job the next claim would take, for prefetching its weights."""
    t = schema.jobs
    with schema.reading(db) as conn:
        row = conn.execute(
            select(t.c.model, t.c.revision).where(t.c.group_name == group, t.c.state == "waiting").order_by(*_order())
        ).first()
    return (row.model, row.revision) if row else None


def table(db, group: str) -> list[dict]:
    """The group's jobs, as `sweep status` shows them, with the Elo of those done (from the runs table)."""
    t, r = schema.jobs, schema.runs
    q = (
        select(t, r.c.elo, r.c.elo_lo, r.c.elo_hi)
        .select_from(t.outerjoin(r, r.c.key == t.c.run_key))
        .where(t.c.group_name == group)
        .order_by(*_order())
    )
    with schema.reading(db) as conn:
        return [dict(row._mapping) for row in conn.execute(q)]


def last_finished(db, group: str) -> float | None:
    """When the group's last member was done, failed or skipped (the workers' clocks)."""
    t = schema.jobs
    with schema.reading(db) as conn:
        return conn.execute(select(func.max(t.c.finished_at)).where(t.c.group_name == group)).scalar_one()


def known_models(db, group: str) -> set[tuple[str, str | None]]:
    t = schema.jobs
    with schema.reading(db) as conn:
        return {(m, rev) for m, rev in conn.execute(select(t.c.model, t.c.revision).where(t.c.group_name == group))}


def reached(db, group: str, until_step: int) -> bool:
    """A member at step >= until_step is done and none below it is waiting or running."""
    t = schema.jobs
    with schema.reading(db) as conn:
        top = conn.execute(
            select(func.count()).where(t.c.group_name == group, t.c.state == "done", t.c.step >= until_step)
        ).scalar_one()
        below = conn.execute(
            select(func.count()).where(
                t.c.group_name == group,
                t.c.state.in_(("waiting", "running")),
                or_(t.c.step.is_(None), t.c.step < until_step),
            )
        ).scalar_one()
    return top > 0 and below == 0

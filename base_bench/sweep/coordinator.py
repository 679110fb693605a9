"""One sweep from start to end: queue the members, start the workers on an engine, follow the queue.

    plan = Plan(out_dir=Path("sweep"), group="pretrain-7", store="sqlite:///sweep/results.db",
                flags=run_flags, models=["ckpt/checkpoint-*"])
    code = run(plan)                 # 0 when every member is done (or skipped), else EXIT_INCOMPLETE

The coordinator never loads a model: the workers do (worker.py), wherever the engine runs them. It

1. records the sweep in the store (refusing one with other run flags for the same group) and queues
   a job for each member that has none (with --watch, each member once it is complete: watch.py);
2. ends at once, loading nothing, when nothing is left to do (a sweep run again after it finished);
3. starts the workers (engines/), then follows the queue: a line for each member done or failed, a
   new scan for checkpoints every few seconds with --watch (until a member at or past --until-step
   is done and none below it is left), a local worker killed mid-member started again;
4. on SIGINT or SIGTERM stops the workers (each member being scored is left resumable, back in the
   queue) and the watch; with --detach (Slurm) it returns once the workers are submitted;
5. renders the pages (trajectory, leaderboard) from the store once more at the end.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import queue
from .members import expand, member
from .watch import Watcher

EXIT_INCOMPLETE = 3  # the sweep ended with members failed, waiting or running
SCAN_S = 5.0  # how often --watch looks for new checkpoints (more often with a shorter --settle)


@dataclass(frozen=True)
class Plan:
    out_dir: Path
    group: str
    store: str
    flags: dict
    models: list = field(default_factory=list)
    models_file: str | None = None
    tokens_per_step: int | None = None
    engine: str = "local"
    workers: int = 1
    lease_timeout: float = 120.0
    max_attempts: int = 3
    watch: bool = False
    settle: float = 60.0
    until_step: int | None = None
    detach: bool = False
    options: dict = field(default_factory=dict)  # the engine's own (devices, slurm_*, ray_*)
    pages: str | None = None  # "module:function" rendering the pages
    poll_s: float = 1.0


def _members(plan: Plan, specs) -> list:
    return [member(m, rev, plan.tokens_per_step) for m, rev in specs]


class _Stop:
    def __init__(self):
        self.signum = None
        self.old = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self.old[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.signum is not None:  # a second one: stop now
            raise KeyboardInterrupt
        self.signum = signum

    def __exit__(self, *exc):
        for s, h in self.old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def _line(row: dict) -> str:
    name = row["name"]
    if row["state"] == "done":
        elo = row.get("elo")
        lo, hi = row.get("elo_lo"), row.get("elo_hi")
        ci = f" [{lo:.0f}, {hi:.0f}]" if lo is not None and hi is not None else ""
        step = f"  step {row['step']}" if row.get("step") is not None else ""
        return f"done     {name}{step}  Elo {elo:.0f}{ci}" if elo is not None else f"done     {name}"
    if row["state"] == "skipped":
        return f"skipped  {name}: {row.get('note') or ''}"
    return f"failed   {name}: {row.get('error_class')}: {row.get('error')} (attempt {row['attempts']})"


def run(plan: Plan, password: str | None = None, say=print) -> int:
    from ..store import open_store
    from .engines import make_engine
    from .worker import Config, without_password

    db = open_store(plan.store)
    try:
        queue.open_sweep(db, plan.group, str(plan.out_dir), plan.flags, plan.watch, plan.until_step)
        watcher = Watcher(plan.models, plan.models_file, plan.settle) if plan.watch else None
        if watcher is None:
            added = queue.enqueue(
                db, plan.group, str(plan.out_dir), _members(plan, expand(plan.models, plan.models_file)), plan.flags
            )
        else:
            added = queue.enqueue(
                db,
                plan.group,
                str(plan.out_dir),
                _members(plan, watcher.ready(queue.known_models(db, plan.group))),
                plan.flags,
            )
        n = queue.counts(db, plan.group)
        total = sum(n.values())
        say(f"sweep {plan.group}: {total} member{'s' if total != 1 else ''} ({added} new, {n['done']} done, "
            f"{n['failed']} failed) in {db.shown}")  # fmt: skip
        if queue.finished(db, plan.group):
            _pages(plan, say, db)
            return _end(db, plan, say)
        config = Config(
            store=without_password(plan.store)[0],  # the password reaches the workers apart
            group=plan.group,
            lease_timeout=plan.lease_timeout,
            max_attempts=plan.max_attempts,
            poll_s=min(2.0, plan.lease_timeout / 4),
            pages=plan.pages,
            stats_dir=str(plan.out_dir / ".sweep" / "stats"),
        )
        engine = make_engine(plan.engine, config, plan.workers, password, plan.options)
        engine.start()
        say(f"started {engine.describe()}")
        if plan.detach:
            say(f"detached: follow it with `base-bench sweep status {plan.out_dir}`")
            return 0
        return _follow(db, plan, engine, watcher, say)
    finally:
        db.dispose()


def _follow(db, plan: Plan, engine, watcher, say) -> int:
    seen: dict[int, tuple] = {}
    last_scan = time.monotonic()
    with _Stop() as stop:
        try:
            while stop.signum is None:
                time.sleep(plan.poll_s)
                if watcher is not None and time.monotonic() - last_scan >= min(SCAN_S, plan.settle):
                    last_scan = time.monotonic()
                    ready = watcher.ready(queue.known_models(db, plan.group))
                    if ready:
                        queue.enqueue(db, plan.group, str(plan.out_dir), _members(plan, ready), plan.flags)
                        for m, rev in ready:
                            say(f"queued   {member(m, rev).name}")
                    if plan.until_step is not None and queue.reached(db, plan.group, plan.until_step):
                        say(f"reached step {plan.until_step}: the watch ends")
                        queue.set_watching(db, plan.group, False)
                        watcher = None
                _report(db, plan, seen, say)
                if queue.finished(db, plan.group):
                    if engine.running() == 0:
                        break
                    continue
                if engine.running() < plan.workers and engine.revive():
                    say("a worker ended with work left; started another")
                if engine.running() == 0:
                    say("every worker has ended, with work left (see the workers' logs)")
                    break
        except KeyboardInterrupt:
            stop.signum = signal.SIGINT
        if stop.signum is not None:
            name = signal.Signals(stop.signum).name
            say(f"{name}: stopping the workers; each member being scored stays resumable")
            if plan.watch:
                queue.set_watching(db, plan.group, False)
            engine.stop()
            engine.wait(120)
            _report(db, plan, seen, say)
            _pages(plan, say)
            _end(db, plan, say)
            return 128 + stop.signum
    engine.wait(120)
    _report(db, plan, seen, say)
    _pages(plan, say, db)
    return _end(db, plan, say)


def _report(db, plan: Plan, seen: dict, say) -> None:
    for row in queue.table(db, plan.group):
        mark = (row["state"], row["attempts"])
        if row["state"] in ("done", "failed", "skipped") and seen.get(row["id"]) != mark:
            say(_line(row))
        elif row["state"] == "waiting" and row["error"] and seen.get(row["id"]) != mark:
            say(f"retry    {row['name']}: {row['error_class']}: {row['error']} (attempt {row['attempts']} failed)")
        seen[row["id"]] = mark


def _pages(plan: Plan, say, db=None) -> None:
    """The pages once more, unless a worker's last rendering began after the last member finished."""
    if not plan.pages:
        return
    if db is not None:
        from .worker import pages_began

        began, last = pages_began(str(plan.out_dir)), queue.last_finished(db, plan.group)
        if began is not None and last is not None and began > last:
            return
    from importlib import import_module

    module, _, name = plan.pages.partition(":")
    try:
        getattr(import_module(module), name)(plan.store, plan.group, str(plan.out_dir))
    except Exception as exc:  # noqa: BLE001  (a view: never the sweep's outcome)
        say(f"the pages were not rendered: {queue.error_line(exc)}")


def _end(db, plan: Plan, say) -> int:
    n = queue.counts(db, plan.group)
    finished = n["done"] + n["skipped"]
    total = sum(n.values())
    say(
        f"{finished} of {total} member{'s' if total != 1 else ''} done"
        + (f", {n['failed']} failed" if n["failed"] else "")
        + (f", {n['waiting'] + n['running']} left" if n["waiting"] + n["running"] else "")
        + f"; pages in {plan.out_dir}"
    )
    return 0 if finished == total else EXIT_INCOMPLETE

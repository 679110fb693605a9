"""THE worker loop of a sweep, the same on every engine: claim a member, run it, record the outcome.

    stats = work(Config(store="sqlite:///sweep/results.db", group="pretrain-7"))
    python -m base_bench.sweep.worker '{"store": ..., "group": ...}'     # what --engine local starts

`work` runs until the group has nothing left (no member waiting or running, and no `--watch` adding
more), or until SIGTERM/SIGINT (or Slurm's preemption), which leave the member being scored
resumable and put it back in the queue. For each member it claims:

1. the member's run flags are the sweep's (stored with it) with the member's model, revision, folder,
   group, step and tokens, and --resume: a member whose worker died continues its partial results;
2. `loading.run` loads the model and scores it exactly as `base-bench --model ...` would, writing
   the four run files and the run's row in the store;
3. the job is marked done with its run key and signature; a failure is recorded with its error class
   and line and the member waits for another attempt (up to --max-attempts), while the others go on.
   A checkpoint that a training run deleted before it was scored is skipped with a note. A member
   whose folder another live process holds (a worker whose lease lapsed while it was stuck) waits
   again without spending an attempt, and the worker looks again after a pause.

While a member is scored, a thread renews the lease (a heartbeat every lease_timeout / 4 s), the
next member's weight files are read into the page cache (`loading.prefetch`), and the sweep's pages
(trajectory, leaderboard) are rendered from the store after each member by a process of the
worker's own at the lowest CPU priority, so the next member neither waits for them nor shares its
cores with them. The process keeps Python, torch and the tokenizer loaded for
all members (`loading` reuses a tokenizer whose files are byte-identical), and the transformers
backend checks its packed path once per model configuration, not once per member (the report's
config.packing_check.checked_on says which).

The store URL's password never appears in the config (which submitit writes to disk): it is read
from $BASE_BENCH_STORE_PASSWORD, which the engine sets in the worker's environment.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from importlib import import_module
from pathlib import Path

from ..errors import BaseBenchError, RunInUse
from . import queue

PASSWORD_ENV = "BASE_BENCH_STORE_PASSWORD"
log = logging.getLogger("base_bench.sweep")


@dataclass(frozen=True)
class Config:
    """What a worker needs: the store (without its password) and group; the lease and attempts; the
    page renderer ("module:function", called with (store URL, group, out-dir)); a --device for this
    worker's members in place of the sweep's; where to leave its stats; a name prefix."""

    store: str
    group: str
    lease_timeout: float = 120.0
    max_attempts: int = 3
    poll_s: float = 2.0
    pages: str | None = None
    device: str | None = None
    stats_dir: str | None = None
    name: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Config:
        return cls(**json.loads(text))


class Stopped(BaseException):
    """SIGTERM or SIGINT arrived: the member being scored is left resumable and waits again."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def with_password(url: str, password: str | None) -> str:
    if not password:
        return url
    from sqlalchemy.engine import make_url

    from ..redact import register

    register(password)
    return make_url(url).set(password=password).render_as_string(hide_password=False)


def without_password(url: str) -> tuple[str, str | None]:
    """(the URL with no password, its password or None): the password travels in the environment."""
    from ..store.connect import _POSTGRES

    if not _POSTGRES.match(url.strip()):
        return url, None
    from sqlalchemy.engine import make_url

    parsed = make_url(_POSTGRES.sub("postgresql+psycopg://", url.strip(), count=1))
    if not parsed.password:
        return url, None
    return parsed._replace(password=None).render_as_string(hide_password=False), parsed.password


@dataclass
class Stats:
    """What a worker did, written to its stats file at the end (bench/sweep.py reads it)."""

    worker: str
    members: int = 0
    done: int = 0
    failed: int = 0
    skipped: int = 0
    loads: int = 0
    tokenizer_loads: int = 0
    run_s: list = field(default_factory=list)  # each member's loading.run: load, scoring, run files, store row
    member_s: list = field(default_factory=list)  # each member from claim to recorded outcome
    load_s: list = field(default_factory=list)  # each member's model load (its report's timing.model_load_s)
    scoring_s: list = field(default_factory=list)  # and its scoring (timing.scoring_s)
    idle_s: float = 0.0
    busy: int = 0  # claims whose out-dir another live process held (the member waited again)

    def overhead_s(self) -> list:
        """Each member's time beyond its model load and scoring: the claim, the data, the checks,
        the report files, the store row, the queue's record (the pages render in another thread)."""
        return [round(m - a - b, 4) for m, a, b in zip(self.member_s, self.load_s, self.scoring_s)]


PAGES_MARK = "pages.json"  # under OUT_DIR/.sweep/: when the last complete rendering began


def render_loop(conn, pages: str, url: str, group: str, out_dir: str) -> None:
    """The page renderer's process: at the lowest CPU priority (nice 19), so that the pages never slow
    the scoring down; renders once for all the requests that came while it was busy, and once more
    on "close". A rendering that completes records when it began in OUT_DIR/.sweep/pages.json."""
    try:
        os.nice(19)
    except OSError:
        pass
    module, _, name = pages.partition(":")
    fn = getattr(import_module(module), name)
    closing = False
    while not closing:
        try:
            msg = conn.recv()
            while conn.poll():  # every request that came meanwhile: one rendering
                msg = conn.recv()
        except (EOFError, OSError):
            return
        closing = msg == "close"
        began = time.time()
        try:
            fn(url, group, out_dir)
            mark_pages(out_dir, began)
        except Exception as exc:  # noqa: BLE001  (pages are a view: a failure never stops the sweep)
            print(f"base-bench sweep: the pages were not rendered: {queue.error_line(exc)}", file=sys.stderr)


def mark_pages(out_dir: str, began: float) -> None:
    from ..results.reports_io import write_atomic

    d = Path(out_dir) / ".sweep"
    d.mkdir(parents=True, exist_ok=True)
    write_atomic(d / PAGES_MARK, json.dumps({"began": began}) + "\n")


def pages_began(out_dir: str) -> float | None:
    """When the last complete rendering of the sweep's pages began (None: never)."""
    try:
        began = json.loads((Path(out_dir) / ".sweep" / PAGES_MARK).read_text()).get("began")
    except (OSError, ValueError, AttributeError):
        return None
    return began if isinstance(began, (int, float)) else None


class Pages:
    """Renders the sweep's pages after each member, in a process of its own at the lowest CPU
    priority (no GIL shared with the scoring, and no core taken from it); `close()` renders a last
    time and waits for it. The store URL (with its password) goes to it through a pipe."""

    def __init__(self, config: Config, url: str, out_dir: str | None):
        self.proc = self.conn = None
        if not (config.pages and out_dir):
            return
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=render_loop, args=(child, config.pages, url, config.group, out_dir), daemon=True, name="sweep-pages"
        )
        self.proc.start()
        child.close()

    def want(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send("render")
            except OSError:
                pass

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.is_alive():
                self.conn.send("close")
                self.proc.join(timeout=300)
        except OSError:
            pass
        finally:
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()
            self.conn.close()


class Heartbeat:
    """Renews the lease on a job while it is scored."""

    def __init__(self, db, job: queue.Job, me: queue.Worker, every: float):
        self.db, self.job, self.me, self.every = db, job, me, every
        self.stop = threading.Event()
        self.lost = False
        self.thread = threading.Thread(target=self._loop, daemon=True, name="sweep-heartbeat")
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.wait(self.every):
            try:
                if not queue.beat(self.db, self.job, self.me):
                    self.lost = True
                    log.warning("%s: the lease was taken over by another worker", self.job.name)
                    return
            except BaseBenchError as exc:  # the store is briefly unreachable: try again next beat
                log.warning("heartbeat: %s", exc)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def member_args(flags: dict, job: queue.Job, url: str, device: str | None) -> argparse.Namespace:
    """The run flags of one member: the sweep's, with the member's model, revision, folder and labels."""
    args = argparse.Namespace(**flags)
    if args.data_spec not in ("bundled", "hub"):
        args.data_spec = Path(args.data_spec)  # a path, which JSON held as text
    args.model = job.model
    if job.revision:
        args.revision = job.revision
    args.out_dir = job.out_dir
    args.resume = True
    args.store = url
    args.group = job.group
    args.step = job.step
    args.tokens = job.tokens
    if device:
        args.device = device
    return args


def _deleted(job: queue.Job) -> bool:
    return job.model.startswith("/") and not os.path.lexists(job.model)


def _stop_on_signals() -> dict:
    def stop(signum, frame):
        raise Stopped(signum)

    old = {}
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(s) is not signal.SIG_IGN:
                old[s] = signal.signal(s, stop)
    return old


def work(config: Config, password: str | None = None, signals: bool = True) -> Stats:
    """Claim and run members of config.group until there is nothing left to do (or a signal). The
    store's password is `password`, else $BASE_BENCH_STORE_PASSWORD. With `signals`, SIGTERM and SIGINT
    stop it (the member being scored waits again, resumable); a Slurm task keeps submitit's own
    handlers instead (preemption requeues the task; SystemExit unwinds the member the same way)."""
    from .. import loading
    from ..store import open_store

    url = with_password(config.store, os.environ.get(PASSWORD_ENV) if password is None else password)
    db = open_store(url)
    me = queue.Worker.here(config.name)
    stats = Stats(me.name)
    row = queue.sweep_row(db, config.group)
    if row is None:
        raise BaseBenchError(f"no sweep {config.group} in {db.shown}")
    flags = json.loads(row.flags)
    pages = Pages(config, url, row.out_dir)
    if flags.get("backend", "transformers") == "transformers":
        _reuse_packing_checks()
    old = _stop_on_signals() if signals else {}
    idle_since = None
    loads0, tok0 = loading.loads(), loading.tokenizer_loads()
    try:
        while True:
            t0 = time.perf_counter()
            job = queue.claim(db, config.group, me, config.lease_timeout, config.max_attempts)
            if job is None:
                if queue.finished(db, config.group):
                    break
                idle_since = idle_since or time.perf_counter()
                time.sleep(config.poll_s)
                continue
            if idle_since is not None:
                stats.idle_s += time.perf_counter() - idle_since
                idle_since = None
            stats.members += 1
            if not _run_member(db, job, me, config, flags, url, stats, pages):
                stats.members -= 1
                stats.busy += 1  # scored elsewhere for now: look again after a pause
                t1 = time.perf_counter()
                time.sleep(config.poll_s)
                stats.idle_s += time.perf_counter() - t1
                continue
            stats.member_s.append(round(time.perf_counter() - t0, 4))
    finally:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        pages.close()
        stats.loads = loading.loads() - loads0
        stats.tokenizer_loads = loading.tokenizer_loads() - tok0
        _write_stats(config, stats)
        db.dispose()
    return stats


def _reuse_packing_checks() -> None:
    """The transformers backend checks its packed path once per model configuration in a worker."""
    try:
        from ..backends.transformers import reuse_packing_checks
    except ImportError:  # no torch here (a llama.cpp or server sweep): nothing to check
        return
    reuse_packing_checks()


def _run_member(db, job, me, config: Config, flags: dict, url: str, stats: Stats, pages: Pages) -> bool:
    """Score one claimed member and record its outcome; False when another live process holds its
    out-dir (the member waits again, the attempt not counted)."""
    from .. import loading
    from ..store.ingest import run_key

    log.info("%s: attempt %d of %s", me.name, job.attempt, job.name)
    if _deleted(job):
        queue.skipped(db, job, me, "its checkpoint was deleted before it was scored")
        stats.skipped += 1
        return True
    beat = Heartbeat(db, job, me, max(0.5, config.lease_timeout / 4))
    following = queue.peek(db, config.group)
    if following:
        loading.prefetch(*following)
    try:
        t = time.perf_counter()
        scored = loading.run(member_args(flags, job, url, config.device), speak=False)
        stats.run_s.append(round(time.perf_counter() - t, 4))
        timing = scored.report.get("timing") or {}
        stats.load_s.append(timing.get("model_load_s") or 0.0)
        stats.scoring_s.append(timing.get("scoring_s") or 0.0)
        signature = scored.report.get("config", {}).get("signature_sha256")
        if scored.store_error is not None:
            raise scored.store_error
        queue.done(db, job, me, run_key(scored.report), signature)
        stats.done += 1
        pages.want()
    except (Stopped, KeyboardInterrupt, SystemExit):
        queue.release(db, job, me)  # a signal or preemption: the member waits again, resumable
        raise
    except RunInUse as exc:  # another live process scores it: wait for it, without spending an attempt
        queue.release(db, job, me, why=exc)
        log.info("%s: %s; trying again in %.1f s", job.name, queue.error_line(exc), config.poll_s)
        return False
    except Exception as exc:  # noqa: BLE001  (a member that fails fails alone; its error is recorded)
        if _deleted(job):
            queue.skipped(db, job, me, "its checkpoint was deleted while it was scored")
            stats.skipped += 1
            return True
        if not isinstance(exc, BaseBenchError):
            log.exception("%s failed", job.name)
        state = queue.failed(db, job, me, exc, config.max_attempts)
        stats.failed += state == "failed"
        print(f"base-bench sweep: {job.name}: {type(exc).__name__}: {queue.error_line(exc)}", file=sys.stderr)
    finally:
        beat.close()
    return True


def _write_stats(config: Config, stats: Stats) -> None:
    if not config.stats_dir:
        return
    try:
        from ..results.reports_io import write_atomic

        d = Path(config.stats_dir)
        d.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in stats.worker)
        write_atomic(
            d / f"{safe}.json", json.dumps({**asdict(stats), "overhead_s": stats.overhead_s()}, indent=1) + "\n"
        )
    except OSError as exc:
        log.warning("the worker's stats were not written: %s", exc)


def main(argv: list[str] | None = None) -> int:
    """`python -m base_bench.sweep.worker CONFIG_JSON`: one worker process of `--engine local`."""
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        work(Config.from_json(argv[0]))
    except Stopped as exc:
        return 128 + exc.signum
    except BaseBenchError as exc:
        print(f"base-bench sweep worker: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

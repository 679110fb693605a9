"""Helpers for the results store's tests (tests/test_store.py, tests/test_store_concurrency.py):
made-up but valid reports of the bundled set, the rows a store holds counted with SQLAlchemy of the
test's own (not the store's code), and the body of one writer process for the concurrency tests.

    rep = made(seed=1, spec="org/a")                  # a fresh report dict (350 items), resamples=20
    rep = signed(rep)                                 # with config.signature_sha256, as a real run has
    rep = complete(rep)                               # with the scorer, batch size, version a run's config has
    run = write_scored(tmp_path / "a", rep)           # explorerun: a run folder with report.json
    counts(url)                                       # {"runs": 1, "items": 350, "choices": 1400, ...}
    with engine_for(url) as conn: ...                 # a connection of the test's own (committed at the end)
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import time
import traceback

import sqlalchemy as sa
from explorerun import scored_report

from storedb import sqlalchemy_url

TABLES = ("runs", "tags", "categories", "items", "choices", "reports", "meta")
N_ITEMS = 350  # the bundled set's items
N_CHOICES = 1400  # ... and their continuations (four each)


@functools.cache
def bundled():
    from base_bench.items.datasource import open_data

    return open_data("bundled")


@functools.lru_cache(maxsize=64)
def _made(seed: int, spec: str, kw: tuple) -> dict:
    return scored_report(bundled(), seed=seed, spec=spec, resamples=20, **dict(kw))


def made(seed: int, spec: str = "org/model", **kw) -> dict:
    """A made-up but valid report (explorerun.scored_report of the bundled set), a fresh copy."""
    return copy.deepcopy(_made(seed, spec, tuple(sorted(kw.items()))))


def signed(rep: dict) -> dict:
    """`rep` with the `config.signature_sha256` a real run of its configuration would have
    (evaluation.run_signature, hashed as the run store hashes it)."""
    from base_bench.engine.runstore import signature_hash
    from base_bench.evaluation import run_signature

    cfg = rep["config"]
    sig = run_signature(
        cfg["model"], rep["data"]["sha256"], cfg["add_bos"], cfg["dtype"], cfg["device"], cfg["backend"]
    )
    cfg["signature_sha256"] = signature_hash(sig)
    return rep


def complete(rep: dict) -> dict:
    """`rep` with the settings a real run's config holds besides those explorerun writes (the scorer,
    the batch size, the runner's version), which predictions.md shows."""
    from base_bench import __version__

    rep["config"].update(scorer="loglik", batch_size=8, batch_tokens=None, runner_version=__version__)
    return rep


@contextlib.contextmanager
def engine_for(url: str):
    """A connection to the store's database, of the test's own, in a transaction committed at the end."""
    engine = sa.create_engine(sqlalchemy_url(url))
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


def counts(url: str) -> dict[str, int]:
    """Rows in each of the store's tables (a table that is not there counts None)."""
    with engine_for(url) as conn:
        there = set(sa.inspect(conn).get_table_names())
        return {
            t: conn.execute(sa.text(f"SELECT COUNT(*) FROM {t}")).scalar_one() if t in there else None for t in TABLES
        }


def keys(url: str) -> list[str]:
    with engine_for(url) as conn:
        return sorted(r[0] for r in conn.execute(sa.text("SELECT key FROM runs")))


# ---------------------------------------------------------------- one writer process


def writer(url: str, folder: str, how: str, barrier, results) -> None:
    """One process of a concurrency test: everything loaded first, then wait at `barrier` for the
    others, then write the run of `folder` to the store at `url`, opened by this process alone:
    how="cli" through `base-bench store ingest FOLDER --store URL --jobs 1` (in this process),
    how="put" through base_bench.store.put (no schema made beforehand). Puts (exit code, stdout,
    stderr, start, end) on the `results` queue; a traceback in stderr and -1 for anything raised."""
    try:
        from base_bench.commands.store import main
        from base_bench.results.reports_io import load_report
        from base_bench.store import open_store, put

        rep = load_report(folder) if how == "put" else None
        out, err = io.StringIO(), io.StringIO()
        barrier.wait(timeout=120)
        start = time.time()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if how == "cli":
                rc = main(["ingest", folder, "--store", url, "--jobs", "1"])
            else:
                db = open_store(url)
                try:
                    put(db, rep, source=folder)
                finally:
                    db.dispose()
                rc = 0
        results.put((rc, out.getvalue(), err.getvalue(), start, time.time()))
    except BaseException:  # noqa: BLE001  (whatever it is, the test must see it)
        results.put((-1, "", traceback.format_exc(), 0.0, 0.0))

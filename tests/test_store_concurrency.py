"""Many processes writing one store at once, on a real SQLite file and a real PostgreSQL server (the
`store_url` fixture runs each test on both): 8 OS processes (multiprocessing, forked from a test
that holds no connection; each opens the store itself) wait at a Barrier and then write together, so their
transactions really overlap. Afterwards the rows are counted with SQLAlchemy of the test's own:
8 different runs are 8 rows with all their items and choices, the same run written 8 times is one,
and 8 first writes to an empty database make its schema once, without an error in any process."""

from __future__ import annotations

import gc
import multiprocessing as mp
import queue

import pytest
import sqlalchemy as sa
from explorerun import write_scored
from storerun import N_CHOICES, N_ITEMS, counts, engine_for, keys, made, writer

from base_bench.results.reports_io import load_report
from base_bench.store import open_store, schema
from base_bench.store.ingest import run_key

N = 8


def run_together(url: str, folders: list, how: str) -> list[tuple]:
    """One writer process per folder (storerun.writer), started together; their results, each
    checked: exit code 0, nothing on stderr, no process left behind. The processes are forked (as
    `store ingest --jobs` forks its own) from this one, which holds no connection to the store
    then: each child opens the store itself. Where fork is missing, they are spawned."""
    gc.collect()  # an engine an earlier test dropped is closed here, not by a child that inherited it
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    barrier, results = ctx.Barrier(len(folders)), ctx.Queue()
    procs = [ctx.Process(target=writer, args=(url, str(f), how, barrier, results)) for f in folders]
    for p in procs:
        p.start()
    got = []
    try:
        for _ in procs:
            got.append(results.get(timeout=120))
    except queue.Empty:
        pytest.fail(f"only {len(got)} of {len(procs)} writers answered: {got}")
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0] * len(procs)
    for rc, out, err, _, _ in got:
        assert rc == 0 and err == "", (rc, out, err)
        assert how == "put" or "stored 1 report(s) as 1 run(s)" in out, out
    # they overlapped: every writer had begun before the first one was done
    assert max(s for _, _, _, s, _ in got) < min(e for _, _, _, _, e in got), [g[3:] for g in got]
    return got


def make_store(url: str) -> None:
    """The store's schema made beforehand (`base-bench store upgrade`), its engine closed."""
    db = open_store(url)
    try:
        assert schema.upgrade(db) == (0, schema.SCHEMA_VERSION)
    finally:
        db.dispose()


def schema_made_once(url: str) -> None:
    with engine_for(url) as conn:
        rows = conn.execute(sa.text("SELECT name, value FROM meta")).all()
    assert [tuple(r) for r in rows] == [("schema_version", str(schema.SCHEMA_VERSION))]


@pytest.mark.parametrize("empty", [True, False], ids=["empty-database", "made-store"])
def test_eight_processes_ingest_eight_different_runs_at_once(store_url, tmp_path, empty):
    if not empty:
        make_store(store_url)
    reps = [made(100 + i, spec=f"org/model-{i}") for i in range(N)]
    folders = [write_scored(tmp_path / f"run{i}", r) for i, r in enumerate(reps)]
    run_together(store_url, folders, "cli")
    n = counts(store_url)
    assert (n["runs"], n["reports"], n["items"], n["choices"]) == (N, N, N * N_ITEMS, N * N_CHOICES)
    assert n["categories"] == N * len(reps[0]["results"]["categories"])
    assert keys(store_url) == sorted(run_key(load_report(f)) for f in folders)
    schema_made_once(store_url)
    with engine_for(store_url) as conn:
        elos = dict(conn.execute(sa.text("SELECT model, elo FROM runs")).all())
        per_run = conn.execute(sa.text("SELECT run, COUNT(*) FROM items GROUP BY run")).all()
    assert elos == {r["config"]["model"]["spec"]: r["results"]["overall"]["elo"] for r in reps}
    assert sorted(c for _, c in per_run) == [N_ITEMS] * N  # no run lost items to another's write


@pytest.mark.parametrize("empty", [True, False], ids=["empty-database", "made-store"])
def test_eight_processes_ingest_the_same_run_at_once(store_url, tmp_path, empty):
    if not empty:
        make_store(store_url)
    rep = made(200)
    # eight copies of one run in eight folders: one key, written by eight processes
    folders = [write_scored(tmp_path / f"copy{i}", rep) for i in range(N)]
    run_together(store_url, folders, "cli")
    n = counts(store_url)
    assert (n["runs"], n["reports"], n["items"], n["choices"]) == (1, 1, N_ITEMS, N_CHOICES)
    assert n["categories"] == len(rep["results"]["categories"])
    assert keys(store_url) == [run_key(rep)]
    schema_made_once(store_url)
    with engine_for(store_url) as conn:
        source = conn.execute(sa.text("SELECT source FROM runs")).scalar_one()
    assert source in {str(f.resolve()) for f in folders}  # one writer's row, whole


def test_eight_first_writes_to_an_empty_database_make_its_schema_once(store_url, tmp_path):
    """base_bench.store.put straight away, no `store ingest` making the schema first: eight
    processes each find no tables and race to make them."""
    assert counts(store_url)["meta"] is None  # no tables yet
    folders = [write_scored(tmp_path / f"run{i}", made(300 + i, spec=f"org/first-{i}")) for i in range(N)]
    folders[-1] = folders[0]  # two of them write the same run as well
    run_together(store_url, folders, "put")
    schema_made_once(store_url)
    n = counts(store_url)
    assert (n["runs"], n["reports"], n["items"], n["choices"]) == (N - 1, N - 1, (N - 1) * N_ITEMS, (N - 1) * N_CHOICES)
    assert keys(store_url) == sorted({run_key(load_report(f)) for f in folders})

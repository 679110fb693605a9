"""The results store's speed and size, SQLite and PostgreSQL side by side, in one run on one machine.

    python bench/store.py [--runs 200] [--board-runs 1000] [--pg postgresql://USER:PASSWORD@HOST/DB]

Makes made-up but valid reports of the bundled set's 350 items (the runner's own build_report, random
log-probs; four choices each), then for each database:

1. **ingest**: `base-bench store ingest`'s own path (commands/store.ingest_all: every report read with
   the checked reading, then written, 16 runs a transaction) over --runs run folders, with one
   process and with two (--jobs 2, the machine's two cores), in runs per second;
2. **again**: the same folders ingested a second time (every run replaced in place: still --runs rows);
3. **leaderboard**: with --board-runs runs stored, the leaderboard's table (store.summaries, then
   leaderboard.build_leaderboard: no report opened), the median of 5, in seconds;
4. **where the time goes**: each step of one process's ingest on SQLite, timed alone over 50 of the
   runs (the JSON's shape, its parse, which includes the shape, the checked reading, the rows, the
   compression, and the whole write, which includes those two), in milliseconds per run;
5. **size**: the database's bytes per stored run after the first ingest (SQLite: the file after a WAL
   checkpoint; PostgreSQL: pg_database_size less the empty database's).

The float32 GEMM rate (2 threads) is measured before and after, and plain Python's speed before and
after each database's measurements, as the machine's speed drifts (by half within minutes here).
PostgreSQL is a fresh database made through --pg (default $BASE_BENCH_TEST_PG, as .ci/run sets it)
and dropped afterwards. Writes bench/store.json and prints the table.

bench/RESULTS.md: "The results store".
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, cpu_name, gemm_rate, markdown_table

from base_bench.commands.store import ingest_all, report_files
from base_bench.items.datasource import open_data
from base_bench.items.records import ChoiceScore, ItemResult, pick
from base_bench.results.leaderboard import build_leaderboard
from base_bench.results.report import build_report, dumps
from base_bench.store import open_store, schema, summaries
from base_bench.store.ingest import put_many

OUT = ROOT / "bench" / "store.json"
DEFAULT_PG = "postgresql://base_bench:bb-pg-test-7c41e9@127.0.0.1:5432/base_bench_test"


def made_up(items, source, seed: int) -> dict:
    """A finished run's report on `items`: random log-probs, the card's rule, a fresh model each seed."""
    rng = random.Random(seed)
    results = {}
    for it in items:
        choices = tuple(ChoiceScore(-rng.uniform(0.5, 6.0) * (n := rng.randint(1, 8)), n) for _ in it.continuations)
        results[it.id] = ItemResult(it.id, choices, pick(choices), it.label)
    config = {
        "model": {"spec": f"ckpt/checkpoint-{seed * 1000}/hf"},
        "backend": "transformers",
        "dtype": "float32",
        "add_bos": False,
        "device": "cpu",
        "scoring_version": "mean_logprob/2",
        "signature_sha256": f"{seed:064x}",
    }
    rep = build_report(
        config=config, data=source.record, official=False, reasons=["made-up scores"], items=items, results=results
    )
    rep.update(group="bench", training_step=seed * 1000, scored_at="2026-12-07T12:00:00+00:00")
    return rep


def python_rate(n: int = 3_000_000) -> float:
    """Million loop steps per second of plain Python on one core: the speed that matters here (the
    checked reading and the rows are Python), beside the GEMM rate; both drift on these machines."""
    t = time.perf_counter()
    x = 0
    for i in range(n):
        x += i * i
    return n / (time.perf_counter() - t) / 1e6


def fresh_sqlite(folder: Path, name: str) -> str:
    return f"sqlite:///{folder / name}"


def fresh_pg(admin: str, name: str) -> str:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    return admin.rsplit("/", 1)[0] + "/" + name


def drop_pg(admin: str, name: str) -> None:
    """Drop a database this script made. Right after heavy writes the server's autovacuum may be in
    it (a process this role cannot end): try again for a while."""
    import psycopg
    from psycopg import sql

    for _ in range(30):
        try:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
            return
        except psycopg.errors.ObjectInUse:
            time.sleep(1)
    print(f"bench/store.py: note: database {name} is still in use; drop it by hand", file=sys.stderr)


def size_bytes(url: str) -> int:
    db = open_store(url)
    with db.engine.connect() as conn:
        if db.dialect == "sqlite":
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            size = db.path.stat().st_size
        else:
            size = conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar_one()
    db.dispose()
    return size


def ingest_rate(url: str, files: list[Path], jobs: int) -> float:
    t = time.perf_counter()
    done = ingest_all(url, files, None, jobs)
    seconds = time.perf_counter() - t
    refused = [why for _, _, why in done if why]
    if refused:
        raise SystemExit(f"bench/store.py: a made-up report was refused: {refused[0]}")
    return len(files) / seconds


def measure(kind: str, make_url, files: list[Path], reports: list[dict], board_runs: int) -> dict:
    out = {"database": kind, "python_mops_before": python_rate()}
    for jobs in (1, 2):
        url = make_url(f"ingest{jobs}")
        db = open_store(url)
        with schema.writing(db):
            pass  # made once, as `store ingest` does before its processes start
        empty = size_bytes(url)
        out[f"ingest_runs_per_s_{jobs}"] = ingest_rate(url, files, jobs)
        if jobs == 2:
            out["bytes_per_run"] = (size_bytes(url) - empty) / len(files)
            out["again_runs_per_s_2"] = ingest_rate(url, files, 2)
            out["runs_after_again"] = len(summaries(db))
        db.dispose()
    url = make_url("board")
    db = open_store(url)
    raws = [dumps(r).encode() for r in reports]
    for start in range(0, board_runs, 50):
        batch = []
        for n in range(start, min(start + 50, board_runs)):
            rep = dict(reports[n % len(reports)])
            rep["config"] = {**rep["config"], "signature_sha256": f"{n + 1:064x}"}  # a run of its own
            batch.append((rep, f"bench-{n}", raws[n % len(reports)], None))
        put_many(db, batch)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        board = build_leaderboard(summaries(db))
        times.append(time.perf_counter() - t)
    out["python_mops_after"] = python_rate()
    out["board_runs"] = board["n_runs"]
    out["leaderboard_table_s"] = statistics.median(times)
    db.dispose()
    return out


def breakdown(files: list[Path], url: str) -> dict:
    """Milliseconds per run of each step of one process's ingest, run alone over the same files: the
    JSON's shape and its parse (untrusted.loads), the checked reading, the rows, the report's
    compression, and the writes (rows and compression included, as put makes them)."""
    import zlib

    from base_bench import untrusted
    from base_bench.results import checked
    from base_bench.store.ingest import put, rows_of, run_key

    raws = [f.read_bytes() for f in files]
    out = {}

    def step(name, fn, xs):
        t = time.perf_counter()
        done = [fn(x) for x in xs]
        out[name] = (time.perf_counter() - t) / len(xs) * 1e3
        return done

    step("shape_ms", untrusted.json_shape, raws)
    reps = step("parse_ms", lambda r: untrusted.loads(r.decode(), max_values=4_000_000, strict=True), raws)
    step("check_ms", checked.report_problem, reps)
    step("rows_ms", lambda a: rows_of(a[0], run_key(a[0]), "bench", a[1]), list(zip(reps, raws)))
    step("compress_ms", lambda r: zlib.compress(r, 1), raws)
    db = open_store(url)
    step("put_ms", lambda a: put(db, a[0], "bench", a[1]), list(zip(reps, raws)))
    db.dispose()
    return out


def table(res: dict) -> list[str]:
    head = [
        "database",
        "Python speed before / after (M steps/s)",
        "ingest, 1 process (runs/s)",
        "ingest, 2 processes (runs/s)",
        "ingest again, 2 processes (runs/s)",
        f"leaderboard table over {res['board_runs']} runs (s)",
        "size per run (kB)",
    ]
    rows = [
        [
            r["database"],
            f"{r['python_mops_before']:.1f} / {r['python_mops_after']:.1f}",
            f"{r['ingest_runs_per_s_1']:.1f}",
            f"{r['ingest_runs_per_s_2']:.1f}",
            f"{r['again_runs_per_s_2']:.1f}",
            f"{r['leaderboard_table_s']:.3f}",
            f"{r['bytes_per_run'] / 1e3:.0f}",
        ]
        for r in res["databases"]
    ]
    return markdown_table(head, "lrrrrrr", rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--board-runs", type=int, default=1000)
    ap.add_argument("--pg", default=os.environ.get("BASE_BENCH_TEST_PG", DEFAULT_PG))
    args = ap.parse_args()
    source = open_data("bundled")
    items = list(source.dataset.items)
    gemm_before = gemm_rate(2)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        reports = [made_up(items, source, seed) for seed in range(args.runs)]
        for n, rep in enumerate(reports):
            (tmp / "runs" / f"step-{n}").mkdir(parents=True)
            (tmp / "runs" / f"step-{n}" / "report.json").write_text(dumps(rep), encoding="utf-8")
        files = report_files([str(tmp / "runs")])
        parts = breakdown(files[:50], fresh_sqlite(tmp, "breakdown.db"))
        results = [measure("SQLite", lambda name: fresh_sqlite(tmp, f"{name}.db"), files, reports, args.board_runs)]
        made = []

        def pg(name):
            made.append(f"base_bench_bench_{name}")
            return fresh_pg(args.pg, made[-1])

        try:
            results.append(measure("PostgreSQL", pg, files, reports, args.board_runs))
        finally:
            for name in made:
                drop_pg(args.pg, name)
    res = {
        "machine": {"cpu": cpu_name(), "cpus": os.cpu_count()},
        "gemm_tflops_2_threads": [gemm_before / 1e12, gemm_rate(2) / 1e12],
        "runs": args.runs,
        "items_per_run": len(items),
        "board_runs": args.board_runs,
        "databases": results,
        "sqlite_ms_per_run": parts,
    }
    OUT.write_text(json.dumps(res, indent=1) + "\n")
    print(f"{res['machine']['cpu']}, {res['machine']['cpus']} CPUs; GEMM {res['gemm_tflops_2_threads'][0]:.3f} "
          f"then {res['gemm_tflops_2_threads'][1]:.3f} TFLOP/s (2 threads); {args.runs} runs of {len(items)} items")  # fmt: skip
    print("\n".join(table(res)))
    print("one process on SQLite, ms per run: " + ", ".join(f"{k[:-3]} {v:.1f}" for k, v in parts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

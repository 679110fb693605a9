"""`base-bench store`: the results database that runs write to and views read (base_bench/store/).

    base-bench store ingest runs/a runs/b [--group G --step N --tokens N --tag T] [--store URL]
    base-bench store rebuild runs/ --store sqlite:///new.db    # a new store from run folders
    base-bench store list [--group G] [--tag T] [--json]       # one line per run, best Elo first
    base-bench store export KEY --out-dir DIR                  # the run's report.json back
    base-bench store upgrade                                   # bring an older store to this schema

--store defaults to $BASE_BENCH_STORE. A folder given to ingest or rebuild is a run folder (or a
report.json), or a folder searched for report.json files below it. Every report is read with the one
checked reading (results/checked.py) before a row is written: one whose numbers disagree with its
items is refused in one line naming the first field, and the others are still stored; the exit code
is then 2. Ingest is idempotent: a run already stored is replaced by the same row. Many folders are
read and checked by several processes at once (--jobs), each writing its own runs.

Labels given to ingest (--group, --step, --tokens, --tag) are the store's: they replace the report's
own in the row, and the stored report.json stays as it was. Exit codes: 0 done; 2 a user error (a
store that cannot be reached, a wrong password, a selection that matches nothing, a refused report).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from ..errors import BaseBenchError, ReportError, StorageError, StoreError, UsageError
from ..results.labels import Labels
from ..results.report import elo_cell
from .cliargs import (
    Parser,
    add_label_flags,
    add_out_dir,
    add_store_flag,
    fail,
    positive_int,
    printable,
)

MAX_JOBS = 8


def _open(args, create: bool):
    from ..store import open_store, store_url

    url = store_url(args.store)
    if url is None:
        raise UsageError(
            "no store: give --store URL (sqlite:///PATH, PATH.db or postgresql://...) or set BASE_BENCH_STORE"
        )
    return open_store(url, create=create)


# ---------------------------------------------------------------- ingest and rebuild


def report_files(paths: list[str]) -> list[Path]:
    """The report.json files that the folders given name, in order, each once: a run folder's, a file
    given, or every one found below a folder without its own (reports_io.find_named)."""
    from ..results.reports_io import find_named, report_path

    out: dict[str, Path] = {}
    for given in paths:
        p = Path(given).expanduser()
        if not p.exists():
            raise ReportError(f"{given}: no such run folder or file")
        direct = report_path(p)
        if direct.is_file():
            found = [direct]
        elif p.is_dir():
            found, deeper = find_named(p, "report.json")
            if deeper:
                print(
                    f"base-bench: note: {given}: {deeper} folder(s) below the search depth were not searched",
                    file=sys.stderr,
                )
            if not found:
                raise ReportError(f"{given}: no report.json in it or below it (are its runs finished?)")
        else:
            raise ReportError(f"{given}: not a run folder or a report.json")
        for f in found:
            out.setdefault(str(f.resolve()), f)
    return list(out.values())


def read_one(path: Path) -> tuple[dict, bytes]:
    """One report.json read and checked: (report, its bytes). ReportError (one line) when it is refused."""
    from ..results.reports_io import check_finished, read_report

    rep, raw = read_report(path)  # the bytes stored are the bytes checked: the file is read once
    check_finished(rep)
    return rep, raw


BATCH = 16  # runs written in one transaction by `store ingest`


def _ingest_chunk(url: str, paths: list[str], labels: Labels | None) -> list[tuple[str, str | None, str | None]]:
    """One process's share: [(path, key or None, refusal or None)], written BATCH runs per transaction.
    A store error stops the share (StoreError)."""
    from ..store import open_store
    from ..store.ingest import put_many

    db = open_store(url)
    out, batch = [], []

    def flush():
        with _WRITER if _WRITER is not None and db.dialect == "sqlite" else contextlib.nullcontext():
            keys = put_many(db, [(rep, source, raw, labels) for _, rep, source, raw in batch])
        out.extend((p, k, None) for (p, *_), k in zip(batch, keys))
        batch.clear()

    try:
        for p in paths:
            try:
                rep, raw = read_one(Path(p))
            except ReportError as exc:
                out.append((p, None, str(exc)))
                continue
            batch.append((p, rep, str(Path(p).parent.resolve()), raw))
            if len(batch) == BATCH:
                flush()
        if batch:
            flush()
    finally:
        db.dispose()
    return out


_WRITER = None  # in ingest_all's processes: the lock a SQLite writer holds (see _set_writer)


def _set_writer(lock) -> None:
    """ingest_all's processes take turns writing to a SQLite store under one lock of their own, which
    wakes the next writer the moment it is released: SQLite's own wait for its lock polls, sleeping
    up to 100 ms a time, and a process that slept through a free lock cost a third of the rate."""
    global _WRITER
    _WRITER = lock


def ingest_all(
    url: str, files: list[Path], labels: Labels | None, jobs: int
) -> list[tuple[str, str | None, str | None]]:
    """Every file, in `jobs` processes (each writes its own runs; the store takes them in turn)."""
    paths = [str(f) for f in files]
    jobs = max(1, min(jobs, len(paths)))
    if jobs == 1:
        return _ingest_chunk(url, paths, labels)
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else None)
    chunks = [paths[i::jobs] for i in range(jobs)]
    with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_set_writer, initargs=(ctx.Lock(),)) as pool:
        results = list(pool.map(_ingest_chunk, [url] * jobs, chunks, [labels] * jobs))
    by_path = {r[0]: r for part in results for r in part}  # the order the files were given in
    return [by_path[p] for p in paths]


def _labels(args) -> Labels | None:
    labels = Labels.make(args.group, args.step, args.tokens, args.tag)
    return labels or None


def cmd_ingest(args, rebuild: bool = False) -> int:
    from ..store import schema

    db = _open(args, create=True)
    labels = _labels(args)
    files = report_files(args.runs)
    if rebuild:
        from ..store.query import count_runs

        n = count_runs(db)
        if n:
            raise StoreError(
                f"{db.shown}: rebuild makes a new store, and this one holds {n} run(s); give a new --store "
                "(or add runs to it with `base-bench store ingest`)"
            )
    with schema.writing(db):
        pass  # the schema, made once here rather than by every process at once
    db.dispose()
    from ..store import store_url

    done = ingest_all(store_url(args.store), files, labels, args.jobs or min(os.cpu_count() or 1, MAX_JOBS))
    refused = [(p, why) for p, _, why in done if why]
    for _, why in refused:
        print(f"base-bench: refused: {printable(why)}", file=sys.stderr)
    stored = [(p, k) for p, k, _ in done if k]
    keys = {k for _, k in stored}
    print(
        f"stored {len(stored)} report(s) as {len(keys)} run(s) in {db.shown}"
        + (f"; refused {len(refused)}" if refused else "")
    )
    return 2 if refused else 0


# ---------------------------------------------------------------- list, export, upgrade


def list_lines(runs: list[dict]) -> list[str]:
    """One line per run: its key's start, its model (the shortest end of its spec that tells it apart:
    reports_io.run_names), group, step, Overall Elo with interval, items, official."""
    from ..results.reports_io import run_names

    unlabelled = [{k: v for k, v in r.items() if k not in ("group", "training_step", "tokens_seen")} for r in runs]
    lines = []
    for r, name in zip(runs, run_names(unlabelled)):  # the model column: group and step have their own
        o = r["results"]["overall"]
        ci = o.get("elo_ci95")
        interval = f"[{elo_cell(ci[0])}, {elo_cell(ci[1])}]" if ci else "[n/a]"
        step = r.get("training_step")
        lines.append(
            f"{r['_key'][:12]}  {name[:40]:<40}  {(r.get('group') or '-')[:20]:<20} "
            f"{'-' if step is None else step:>8}  {elo_cell(o['elo']):>11} {interval:<12} {r['n_items']:>5}  "
            f"{'yes' if r['official'] else 'no'}"
        )
    return lines


def cmd_list(args) -> int:
    from ..store import summaries

    db = _open(args, create=False)
    runs = summaries(db, group=args.group, tag=args.tag)
    if args.json:
        keep = ("_key", "_source", "config", "data", "official", "results", "n_items", "scored_at", "stored_at")
        labels = ("group", "training_step", "tokens_seen", "tags", "scoring")
        out = [{**{k.lstrip("_"): r[k] for k in keep}, **{k: r[k] for k in labels if k in r}} for r in runs]
        print(json.dumps({"store": db.shown, "runs": out}, indent=1))
        return 0
    if not runs:
        what = " ".join(
            f
            for f in (f"in group {args.group!r}" if args.group else "", f"tagged {args.tag!r}" if args.tag else "")
            if f
        )
        raise StoreError(f"{db.shown}: no runs" + (f" {what}" if what else " stored yet"))
    head = f"{'key':<12}  {'model':<40}  {'group':<20} {'step':>8}  {'Overall Elo':>11} {'95% CI':<12} {'items':>5}  official"
    print(printable("\n".join([head, *list_lines(runs)])))
    return 0


def cmd_export(args) -> int:
    from ..results.report import render_markdown
    from ..results.reports_io import check_outputs, report_from_bytes, write_atomic
    from ..store import report_bytes, resolve
    from ..store.query import KEY_SHOWN

    db = _open(args, create=False)
    (key,) = resolve(db, [args.key])
    out = Path(args.out_dir).expanduser()
    targets = [out / "report.json", out / "predictions.md"]
    check_outputs(targets, False, out_dir=out)
    raw = report_bytes(db, key)  # read once: the bytes written are the bytes checked
    rep = report_from_bytes(raw, f"store:{key[:KEY_SHOWN]}")  # checked, as a file would be, before anything is written
    try:  # predictions.md shows settings that the checked reading does not require (an older report lacks some)
        markdown = render_markdown(rep)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        markdown = None
        print(
            f"base-bench: note: predictions.md not written: the report lacks what it shows ({type(exc).__name__}: "
            f"{printable(str(exc))[:200]})",
            file=sys.stderr,
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        if markdown is not None:
            write_atomic(out / "predictions.md", markdown)
        write_atomic(out / "report.json", raw, redacted=False)  # the stored, checked bytes, as they are
    except OSError as e:
        raise StorageError(f"could not write to {out}: {e.strerror or e}") from None
    print(
        f"wrote {out}/report.json"
        + (f" and {out}/predictions.md" if markdown is not None else "")
        + f" (run {key[:12]})"
    )
    return 0


def cmd_upgrade(args) -> int:
    from ..store import upgrade

    db = _open(args, create=True)
    before, after = upgrade(db)
    if before == after:
        print(f"{db.shown}: the store is at schema version {after} already")
    elif before == 0:
        print(f"{db.shown}: made a store at schema version {after}")
    else:
        print(f"{db.shown}: upgraded the store from schema version {before} to {after}")
    return 0


# ---------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="base-bench store",
        description="The results store: one database (SQLite, or PostgreSQL for a team) that runs write to "
        "with --store and that leaderboard, trajectory, compare and explore read with --store.",
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=Parser)
    for name, helptext in (
        ("ingest", "add finished runs from their report.json (checked first; idempotent)"),
        ("rebuild", "make a new store from run folders (report.json stays the source of truth)"),
    ):
        s = sub.add_parser(name, help=helptext, description=helptext)
        s.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders, report.json files, or folders of runs")
        add_store_flag(s, "the store to write to")
        add_label_flags(s)
        s.add_argument(
            "--jobs",
            type=positive_int("--jobs"),
            metavar="N",
            help="processes reading reports at once (default: the CPUs, at most 8)",
        )
    s = sub.add_parser(
        "list",
        help="one line per stored run, best Overall Elo first",
        description="one line per stored run, best Overall Elo first",
    )
    add_store_flag(s, "the store to read")
    s.add_argument("--group", metavar="G", help="only the runs of this group")
    s.add_argument("--tag", metavar="T", help="only the runs with this tag")
    s.add_argument("--json", action="store_true", help="print the runs as JSON")
    s = sub.add_parser(
        "export",
        help="write a stored run's report.json (and predictions.md) back to a folder",
        description="write a stored run's report.json, exactly as it was stored, and its predictions.md",
    )
    s.add_argument(
        "key", metavar="KEY", help="the run's key, or a prefix of it (4 hex digits or more) that names one run"
    )
    add_store_flag(s, "the store to read")
    add_out_dir(s, "the folder to write (must not hold a report.json already)", required=True)
    s = sub.add_parser(
        "upgrade",
        help="bring a store made by an older base-bench to this schema version",
        description="bring a store made by an older base-bench to this schema version (or make an empty one)",
    )
    add_store_flag(s, "the store to upgrade")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.action == "ingest":
            return cmd_ingest(args)
        if args.action == "rebuild":
            return cmd_ingest(args, rebuild=True)
        return {"list": cmd_list, "export": cmd_export, "upgrade": cmd_upgrade}[args.action](args)
    except BaseBenchError as exc:
        return fail(exc)


if __name__ == "__main__":
    sys.exit(main())

"""`base-bench leaderboard RUN_DIR...`: rank finished runs by Overall Elo, with plots.

    base-bench leaderboard runs/a runs/b runs/c [--out-dir leaderboard] [--strict] [--force]
    base-bench leaderboard --store URL [--group G] [--tag T] [--out-dir leaderboard]   # the stored runs

With no RUN_DIR the runs are read from the results store (--store, else $BASE_BENCH_STORE), all of
them or those of a --group and/or with a --tag. The table is built from the store's summaries alone
(no report is opened, so a board of thousands of runs is quick); the plots open the reports of the
runs they draw (at most MAX_PLOT_RUNS per data file). The numbers are the same as from the folders.
Run folders given win over $BASE_BENCH_STORE; --store given together with folders is refused.

Writes, into --out-dir (default ./leaderboard; `--out` is the older spelling):

    leaderboard.md                 tables + links to the PNGs below
    leaderboard.html               the same, self-contained (PNGs inlined as base64 data URIs)
    category_elo-<sha12>.png       Overall and category Elo with 95% bars, one colour per run
    calibration-<sha12>.png        observed accuracy by item Elo against the fitted Elo curve

<sha12> is the first 12 hex digits of the data file's SHA-256, or more where two data files on one
board share their first 12 (`short_shas`), so that no group's plots overwrite another's.

Runs scored on different data files (different data SHA-256) are never ranked together. By default
each data file gets its own, labelled table and plots; with --strict such a mix is refused. Nothing
is recomputed: every number is read from report.json (or the store's row made from it), and values
that older reports lack (such as the Elo interval) show as "n/a". Each run is named by
`reports_io.run_names` (its group and step, else the shortest tail of its model spec that tells it
apart, ...), as in every view. The board, its tables, plots and pages are
base_bench/results/leaderboard.py's (imported from here too); this module holds the flags, the
choice of folders or store (`read_runs`) and `main`:

    reports, db = read_runs(build_parser().parse_args(["runs/a", "runs/b"]))   # db: None for folders
    board, names = write_pages(reports, Path("leaderboard"))
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

from ..errors import BaseBenchError, StoreError, UsageError
from ..results.leaderboard import (  # noqa: F401 - the leaderboard's code, imported from here too
    GROUPING_NOTE,
    LEADERBOARD_CSS,
    MAX_PLOT_RUNS,
    build_leaderboard,
    group_by_data,
    group_title,
    grouping_sentence,
    image_names,
    plot_note,
    render_html,
    render_markdown,
    run_labels,
    short_shas,
    summary_lines,
    table_cells,
    write_pages,
)
from ..results.reports_io import check_outputs, load_report
from .cliargs import Parser, add_out_dir, add_store_flag, fail, printable, reading_store


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="base-bench leaderboard",
        description="Rank finished runs by Overall Elo and write leaderboard.md, a self-contained leaderboard.html "
        "and PNG plots (category Elo with intervals; calibration by item Elo). The runs are run folders, or "
        "with no RUN_DIR the runs of a results store (--store). " + GROUPING_NOTE,
    )
    p.add_argument(
        "runs",
        nargs="*",
        metavar="RUN_DIR",
        help="run directories holding report.json (or report.json files); none: the runs of the store",
    )
    add_store_flag(p, "with no RUN_DIR: rank the runs of this store (sqlite:///PATH, PATH.db or postgresql://...)")
    p.add_argument("--group", metavar="G", help="with a store: only the runs of this group")
    p.add_argument("--tag", metavar="T", help="with a store: only the runs with this tag")
    add_out_dir(
        p, "output directory (default ./leaderboard); --out is the older spelling of the same flag", "leaderboard"
    )
    p.add_argument("--strict", action="store_true", help="refuse runs on different data files instead of grouping them")
    p.add_argument("--force", action="store_true", help="overwrite existing leaderboard files in --out-dir")
    return p


def read_runs(args) -> tuple[list[dict], object]:
    """(the runs to rank, the store they came from or None): the run folders' reports, each once; or,
    with no folder, the store's summaries (StoreError in one line when the selection is empty)."""
    db = reading_store(args.store, bool(args.runs))
    if db is None:
        if not args.runs:
            raise UsageError("give run folders (RUN_DIR...) or a store (--store URL, or set BASE_BENCH_STORE)")
        if args.group is not None or args.tag is not None:
            raise UsageError("--group and --tag select stored runs: give them with --store and no RUN_DIR")
        seen, reports = set(), []
        for run in args.runs:
            rep = load_report(run)
            key = str(Path(rep["_path"]).resolve())
            if key not in seen:
                seen.add(key)
                reports.append(rep)
        return reports, None
    from ..store import summaries

    try:
        runs = summaries(db, group=args.group, tag=args.tag)
        if not runs:
            what = " and ".join(
                x
                for x in (f"in group {args.group!r}" if args.group else "", f"tagged {args.tag!r}" if args.tag else "")
                if x
            )
            raise StoreError(f"{db.shown}: no runs " + (what or "stored yet"))
    except BaseException:
        db.dispose()
        raise
    return runs, db


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out_dir).expanduser()
    db = None
    try:
        check_outputs([], args.force, out_dir=out)
        reports, db = read_runs(args)
        full = None
        if db is not None:  # a store's summaries have no items: the plots read the reports they draw
            from ..store.query import reports_of

            full = partial(reports_of, db)
        board, names = write_pages(reports, out, args.force, args.strict, full)
    except BaseBenchError as exc:
        return fail(exc)
    finally:
        if db is not None:
            db.dispose()
    print(printable("\n".join(summary_lines(board))))
    print(f"wrote {out}/leaderboard.md, {out}/leaderboard.html and {2 * len(names)} PNG plot(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

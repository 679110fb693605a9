"""`base-bench trajectory DIR`: the Elo of one model over its training, from per-step reports.

    base-bench trajectory runs/train-bench [--out-dir OUT] [--x tokens] [--force]
    base-bench trajectory --store URL --group G [--x tokens] [--out-dir OUT]   # a group of stored runs

DIR holds the reports of one training run, one per scored step, as `BaseBenchCallback` writes them
(`DIR/step-<N>/report.json`, each carrying `training_step`). Every report.json under DIR with a
`training_step` is read; nothing is rescored. With no DIR, the runs are those of group G in the
results store (--store, else $BASE_BENCH_STORE; labelled by `store ingest --group G --step N` or by
the run's own --group/--step), each run's `training_step` from its row. `--x tokens` plots against
`tokens_seen` instead of the step: reports (or stored runs) without it are left out, and a note
on stderr says how many. Written into --out-dir (default: DIR itself, or ./trajectory for a store;
`--out` is the older spelling):

    trajectory.png    Overall Elo and each category's Elo against step (or tokens), with 95% bootstrap bands
    trajectory.md     a table per step: Overall Elo, its 95% CI and ±, accuracies, category Elo
    trajectory.html   the same table and the plot in one self-contained page

Refused, with one line and exit code 2: a DIR (or a group) with no such reports, reports on
different data files (their Elo is not comparable), two reports for the same step (or token count),
a store that cannot be read, --store or --group given with DIR, and existing output files unless
--force. A DIR given wins over $BASE_BENCH_STORE. The trajectory itself, its table, plot and pages
are base_bench/results/trajectory.py's (imported from here too); this module holds the flags, the
choice of folder or store (`read_runs`, `stored_runs`) and `main`:

    reports = read_runs(build_parser().parse_args(["runs/train-bench"]), "training_step")
    traj, paths = write_pages(reports, "training_step", Path("runs/train-bench"))
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import BaseBenchError, StoreError, UsageError
from ..results.reports_io import check_outputs
from ..results.trajectory import (  # noqa: F401 - the trajectory's code, imported from here too
    OUTPUTS,
    X_KEYS,
    X_NAMES,
    build_trajectory,
    find_reports,
    missing_note,
    render_html,
    render_markdown,
    summary_lines,
    table_cells,
    write_pages,
)
from .cliargs import Parser, add_out_dir, add_store_flag, fail, printable, reading_store

STORE_OUT_DIR = "trajectory"  # --out-dir's default when the runs come from a store


def _note(line: str) -> None:
    print(f"base-bench: note: {printable(line)}", file=sys.stderr)


def stored_runs(db, group: str, x: str = "training_step") -> list[dict]:
    """The runs of `group` in the store that carry `x`, as full reports (with the store's labels), in
    its order; StoreError in one line for a group without such runs, a note for runs without `x`."""
    from ..store import summaries

    runs = summaries(db, group=group)
    if not runs:
        raise StoreError(f"{db.shown}: no runs in group {group!r} (see `base-bench store list`)")
    keep = [r for r in runs if r.get(x) is not None]
    if not keep:
        how = "--step N" if x == "training_step" else "--tokens N"
        raise StoreError(
            f"{db.shown}: none of the {len(runs)} run(s) of group {group!r} has a {x} "
            f"(label them: base-bench store ingest ... --group {group} {how})"
        )
    if len(keep) < len(runs):
        _note(missing_note(len(runs) - len(keep), len(runs), x))
    from ..store.query import reports_of

    return sorted(reports_of(db, keep), key=lambda r: r[x])


# ---------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="base-bench trajectory",
        description="Plot a model's Overall and category Elo against training step (or tokens seen), from the "
        "step-<N>/report.json files BaseBenchCallback writes or from a group of runs in a results store, and "
        "write a Markdown table and a self-contained HTML page.",
    )
    p.add_argument(
        "run_dir",
        nargs="?",
        metavar="DIR",
        help="directory holding the per-step reports of one training run (none: --group G of the store)",
    )
    add_store_flag(p, "with no DIR: read the runs of --group G from this store")
    p.add_argument("--group", metavar="G", help="with a store (no DIR): the group whose runs make the trajectory")
    p.add_argument(
        "--x",
        choices=sorted(X_KEYS),
        default="step",
        help="what to plot Elo against: the runs' training step (default) or the tokens seen (runs without "
        "tokens_seen are left out)",
    )
    add_out_dir(
        p,
        f"where to write trajectory.png/.md/.html (default: DIR, or ./{STORE_OUT_DIR} for a store); "
        "--out is the older spelling",
    )
    p.add_argument("--force", action="store_true", help="overwrite existing trajectory files")
    return p


def read_runs(args, x: str) -> list[dict]:
    """The reports of the trajectory: DIR's, or with no DIR those of --group in the store."""
    db = reading_store(args.store, args.run_dir is not None)
    if db is None:
        if args.run_dir is None:
            raise UsageError("give DIR (a training run's per-step reports) or --store URL --group G")
        if args.group is not None:
            raise UsageError("--group selects stored runs: give it with --store and no DIR")
        return find_reports(args.run_dir, x, say=_note)
    try:
        if args.group is None:
            raise UsageError(f"{db.shown}: give --group G, the group of runs to plot (see `base-bench store list`)")
        return stored_runs(db, args.group, x)
    finally:
        db.dispose()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    x = X_KEYS[args.x]
    out = Path(args.out_dir or args.run_dir or STORE_OUT_DIR).expanduser()
    try:
        check_outputs([], args.force, out_dir=out)
        reports = read_runs(args, x)
        traj, targets = write_pages(reports, x, out, args.force)
    except BaseBenchError as exc:
        return fail(exc)
    print(printable("\n".join(summary_lines(traj))))
    print(f"wrote {targets['png']}, {targets['md']} and {targets['html']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`base-bench explore RUN_DIR...`: the runs side by side, item by item, in one self-contained page.

    base-bench explore runs/a runs/b [runs/c ...] --out-dir DIR [--data bundled|hub|PATH] [--redact] [--force]
    base-bench explore --store URL --group G --out-dir DIR        # a group of stored runs
    base-bench explore --store URL 3fa9c1 77d0e2 --out-dir DIR    # stored runs by key or key prefix

Writes DIR/explore.html: one row per item (category, difficulty, context, the continuations with
the correct one marked) and, for each run, the chosen continuation, right or wrong, each choice's
mean log-prob and the margin over the runner-up; filters by category, difficulty, runs that
disagree, items that flip between two runs (with the counts `compare` gives for that pair), items
every run misses, outcome and text; sorting by margin; paged. With two runs or more labelled with
a training step (the checkpoints of a training run: `--store URL --group G`), an item × step grid
too: one row per item, one column per checkpoint in step order, each cell right (green) or wrong
(red), darker the wider the margin; sorting by the step an item is learned at for good and by how
often it is forgotten (results/steps_grid.py). The page needs no network and opens from disk. In
code:

    from base_bench import explore
    path = explore(["runs/a", "runs/b"], "explore-out")              # Path of explore.html
    path = explore(reports, "out", data="my/test.jsonl", redact=True, force=True)

With --store the runs come from that results store: the runs of --group G, or those whose keys
(or key prefixes, 4 hex digits or more) are given, or both (the runs of G among them); a prefix that
names no run or more than one, and a selection that matches nothing, are refused in one line. With
$BASE_BENCH_STORE set and no --store, RUN_DIRs on disk are read as folders (folders win); --group,
or arguments none of which is on disk, read that store. The runs are named as every view names
them (`reports_io.run_names`).

The runs must have scored one data file (one SHA-256). The page needs that file's texts: the
bundled set is found by its SHA-256; any other file is given with --data (a path, or hub for the
gated official file), and is refused, in one line and before anything is written, when its SHA-256
is not the one the runs recorded. A path written in a report is never opened: a report may come
from someone else.

The page shows the benchmark's items and answers, which the card's terms require to be kept out
of training data: it carries the canary string, a noindex/noarchive robots meta and the terms,
and the command says that it must not be published. `--redact` writes the page without item texts
(ids, categories and scores only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..contamination.canary import canaries_of
from ..errors import BaseBenchError, StoreError, UsageError
from ..items.lookup import find_data
from ..results.explore import PAGE_FILE, PUBLISH_WARNING, REDACTED_WARNING, build_page, render_html
from ..results.reports_io import ReportError, as_report, check_outputs, write_outputs
from .cliargs import Parser, add_out_dir, add_store_flag, data_of, fail, printable, reading_store


def _dedupe(reports: list[dict]) -> list[dict]:
    seen, out = set(), []
    for r in reports:
        key = str(Path(r["_path"]).resolve()) if r.get("_path") else id(r)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def explore(
    reports,
    out_dir,
    *,
    data=None,
    redact: bool = False,
    force: bool = False,
    fetch=None,
) -> Path:
    """Write OUT_DIR/explore.html for `reports` (run directories, report.json paths, or report
    dicts) and return its path. `data`: "bundled", "hub" or a path to the file the runs scored
    (default: found by the runs' SHA-256; only the bundled set can be). ReportError / DataError
    (one line) when the runs or the data do not fit; nothing is written then. An existing
    explore.html is kept unless `force`."""
    out = Path(out_dir).expanduser()
    target = out / PAGE_FILE
    check_outputs([target], force, out_dir=out)
    reps = _dedupe([as_report(r) for r in reports])
    if not reps:
        raise ReportError("no runs to explore")
    source = find_data(reps, data, fetch)
    page = build_page(reps, source.dataset.items, source.record, redact=redact)
    canaries = [c.text for c in canaries_of(source.dataset.items)]
    write_outputs({target: render_html(page, canaries)})
    return target


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="base-bench explore",
        description="Write explore.html: the runs side by side, item by item (each choice's mean log-prob, "
        "the chosen continuation, the margin over the runner-up), with filters (category, difficulty, runs "
        "that disagree, flips between two runs, items every run misses, text) and sorting by margin; for the "
        "checkpoints of a training run (runs with a training step), an item × step grid, sortable by the step "
        "each item is learned at and by how often it is forgotten. One self-contained file that opens from "
        "disk and makes no request. It shows the benchmark's items: do not publish it.",
    )
    p.add_argument(
        "runs",
        nargs="*",
        metavar="RUN_DIR",
        help="run directories holding report.json (or report.json files); with --store, runs' keys or key prefixes",
    )
    add_store_flag(p, "read the runs from this store: those of --group, or those whose keys are given")
    p.add_argument("--group", metavar="G", help="with a store: the runs of this group")
    add_out_dir(p, "folder to write explore.html into", required=True)
    p.add_argument(
        "--data",
        metavar="bundled|hub|PATH",
        help="the data file the runs scored (default: the bundled set, found by the SHA-256 the runs "
        "recorded); hub: the gated official file; a JSONL file or a folder holding data/test.jsonl. "
        "Refused when its SHA-256 is not the runs'",
    )
    p.add_argument(
        "--redact",
        action="store_true",
        help="leave the item texts (contexts, continuations) out of the page: ids, categories and scores only",
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing explore.html")
    return p


def read_runs(args) -> list:
    """The runs to explore: the RUN_DIRs given, or the stored runs that --group and the keys select
    (full reports, read back and checked, with the store's labels)."""
    from ..store import store_url

    folders = (
        args.store is None
        and args.group is None
        and (store_url(None) is None or any(Path(x).expanduser().exists() for x in args.runs))
    )
    db = reading_store(args.store, folders and bool(args.runs))
    if db is None:
        if args.group is not None:
            raise UsageError("--group selects stored runs: give it with --store (or set BASE_BENCH_STORE)")
        if not args.runs:
            raise UsageError("give run folders (RUN_DIR...), or --store URL with --group G or run keys")
        return args.runs
    from ..store import resolve, summaries

    try:
        if args.group is None and not args.runs:
            raise UsageError(
                f"{db.shown}: give --group G or the keys of the runs to explore (see `base-bench store list`)"
            )
        keys = list(dict.fromkeys(resolve(db, args.runs))) if args.runs else None
        runs = summaries(db, group=args.group, keys=keys)
        if not runs:
            raise StoreError(f"{db.shown}: no runs in group {args.group!r}" + (" among the keys given" if keys else ""))
        if keys:  # in the order given
            runs.sort(key=lambda r: keys.index(r["_key"]))
        else:  # a group's runs in step order (then tokens), the unlabelled ones last
            runs.sort(
                key=lambda r: (r.get("training_step") is None, r.get("training_step") or 0, r.get("tokens_seen") or 0)
            )
        from ..store.query import reports_of

        return reports_of(db, runs)
    finally:
        db.dispose()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        out = Path(args.out_dir).expanduser()
        check_outputs([out / PAGE_FILE], args.force, out_dir=out)  # before any run is read
        runs = read_runs(args)
        path = explore(runs, args.out_dir, data=data_of(args.data), redact=args.redact, force=args.force)
    except BaseBenchError as exc:
        return fail(exc)
    print(printable(f"wrote {path}" + (" (item texts left out: --redact)" if args.redact else "")))
    print(f"note: {REDACTED_WARNING if args.redact else PUBLISH_WARNING}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

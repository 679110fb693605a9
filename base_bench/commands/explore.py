"""`base-bench explore RUN_DIR...`: the runs side by side, item by item, in one self-contained page.

    base-bench explore runs/a runs/b [runs/c ...] --out-dir DIR [--data bundled|hub|PATH] [--redact] [--force]

Writes DIR/explore.html: one row per item (category, difficulty, context, the continuations with
the correct one marked) and, for each run, the chosen continuation, right or wrong, each choice's
mean log-prob and the margin over the runner-up; filters by category, difficulty, runs that
disagree, items that flip between two runs (with the counts `compare` gives for that pair), items
every run misses, outcome and text; sorting by margin; paged. The page needs no network and opens
from disk. In code:

    from base_bench import explore
    path = explore(["runs/a", "runs/b"], "explore-out")              # Path of explore.html
    path = explore(reports, "out", data="my/test.jsonl", redact=True, force=True)

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
from ..errors import BaseBenchError
from ..items.lookup import find_data
from ..results.explore import PAGE_FILE, PUBLISH_WARNING, REDACTED_WARNING, build_page, render_html
from ..results.reports_io import ReportError, as_report, check_outputs, write_outputs
from .cliargs import Parser, add_out_dir, data_of, fail, printable


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
        "that disagree, flips between two runs, items every run misses, text) and sorting by margin. One "
        "self-contained file that opens from disk and makes no request. It shows the benchmark's items: "
        "do not publish it.",
    )
    p.add_argument(
        "runs", nargs="+", metavar="RUN_DIR", help="run directories holding report.json (or report.json files)"
    )
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        path = explore(args.runs, args.out_dir, data=data_of(args.data), redact=args.redact, force=args.force)
    except BaseBenchError as exc:
        return fail(exc)
    print(printable(f"wrote {path}" + (" (item texts left out: --redact)" if args.redact else "")))
    print(f"note: {REDACTED_WARNING if args.redact else PUBLISH_WARNING}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

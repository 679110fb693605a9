"""`base-bench rescore RUN_DIR...`: finished runs scored again under lm-eval's rules, with no model.

    base-bench rescore runs/a runs/b --rule mean,sum --rule per_char [--out-dir DIR] [--data PATH] [--force]

Rules: mean (the card's), sum (lm-eval's acc), per_char (acc_norm), per_byte (acc_bytes); all four
by default. Writes DIR/rescore.md, DIR/rescore.json and DIR/<run folder>/<rule>/report.json (a
report of a run's shape, its rule in `scoring.rule`, read by compare, leaderboard and explore as a
run's). The default DIR is ./rescore-<8 hex digits of the runs' paths>. Every check is made, and a
refusal said in one line with exit code 2, before anything is written; existing files need --force.
The work is `results/rescoring.py`'s (in code: `from base_bench import rescore`); this module only
parses, prints and sets the exit code.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import BaseBenchError
from ..results.rescore_view import summary_lines
from ..results.rescoring import DEFAULT_RULES, rescore
from ..results.rules import RULES
from .cliargs import Parser, add_out_dir, data_of, fail, printable


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="base-bench rescore",
        description="Score finished runs again under other selection rules from their stored log-probs, "
        "without loading a model: mean (the card's rule), sum (lm-eval's acc), per_char (acc_norm), "
        "per_byte (acc_bytes). Per run and rule a report.json; across the runs each run's Elo and rank "
        "under each rule, Kendall's tau-b between the rankings, and the items whose choice changes. "
        "Only mean can be official.",
    )
    p.add_argument(
        "runs", nargs="+", metavar="RUN_DIR", help="run directories holding report.json (or report.json files)"
    )
    p.add_argument(
        "--rule",
        action="append",
        metavar="RULE[,RULE...]",
        help=f"the rules to score under, a comma list or the flag repeated: {', '.join(RULES)} "
        "(default: all four). PMI-style rules need another forward pass of the model and are refused",
    )
    add_out_dir(p, "folder for rescore.md, rescore.json and a report.json per run and rule (default: "
                "./rescore-<8 hex digits of the runs' paths>)")  # fmt: skip
    p.add_argument(
        "--data",
        metavar="bundled|hub|PATH",
        help="the data file the runs scored, for the continuations' lengths (default: the bundled set, "
        "found by the SHA-256 the runs recorded); refused when its SHA-256 is not the runs'",
    )
    p.add_argument("--force", action="store_true", help="overwrite existing output files")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        table = rescore(args.runs, args.rule or DEFAULT_RULES, args.out_dir, data=data_of(args.data), force=args.force)
    except BaseBenchError as exc:
        return fail(exc)
    print(printable("\n".join(summary_lines(table))))
    print()
    print(printable("\n".join(f"wrote {p}" for p in table["files"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())

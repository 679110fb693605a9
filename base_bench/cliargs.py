"""What every `base-bench` subcommand shares on the command line: argument types and exit codes.

    p.add_argument("--limit", type=positive_int("--limit"))
    return EXIT_USAGE      # a user error, reported in one `base-bench: error: ...` line

The subcommands (`cli`, `compare`, `leaderboard`, `trajectory`) import from here, never from each
other.
"""

from __future__ import annotations

import argparse
import sys

EXIT_USAGE = 2


def positive_int(name: str):
    """An argparse type: a whole number of at least 1, with a message naming the flag."""

    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} takes a whole number, not {text!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be 1 or more, not {v}")
        return v

    return parse


def fail(exc: BaseException) -> int:
    """Print a user error as one `base-bench: error:` line on stderr; return the usage exit code."""
    print(f"base-bench: error: {exc}", file=sys.stderr)
    return EXIT_USAGE

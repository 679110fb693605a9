"""What every `base-bench` subcommand shares on the command line: argument types and exit codes.

    p.add_argument("--limit", type=positive_int("--limit"))
    p.add_argument("--max-line-bytes", type=byte_count("--max-line-bytes"))   # 67108864 or 64MiB
    return fail(exc)                 # a user error: one `base-bench: error: ...` line, EXIT_USAGE
    return fail(exc, EXIT_STORAGE)   # the same line for a run file that could not be written

The subcommands (`cli`, `compare`, `leaderboard`, `trajectory`) import from here, never from each
other.
"""

from __future__ import annotations

import argparse
import re
import sys

EXIT_USAGE = 2  # a user error: bad flag, data, model or out-dir (also one in use by another process)
EXIT_STORAGE = 74  # EX_IOERR of sysexits.h: a run file could not be written (disk full, I/O error)


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


_UNITS = {"": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def byte_count(name: str):
    """An argparse type: a number of bytes of at least 1, plain or with KiB, MiB or GiB (`64MiB`)."""

    def parse(text):
        m = re.fullmatch(r"\s*(\d+)\s*([kmg]ib)?\s*", text, re.IGNORECASE)
        if not m:
            raise argparse.ArgumentTypeError(f"{name} takes a number of bytes (e.g. 67108864 or 64MiB), not {text!r}")
        v = int(m.group(1)) * _UNITS[(m.group(2) or "").lower()]
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be 1 or more, not {text!r}")
        return v

    return parse


def fail(exc: BaseException, code: int = EXIT_USAGE) -> int:
    """Print a user error as one `base-bench: error:` line on stderr; return `code` (the usage exit code)."""
    print(f"base-bench: error: {exc}", file=sys.stderr)
    return code


DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def max_memory(text: str) -> dict:
    """`--max-memory cuda:0=70GiB,cuda:1=70GiB,cpu=200GiB` as accelerate's max_memory dict
    ({0: "70GiB", 1: "70GiB", "cpu": "200GiB"}); sizes keep accelerate's units (GiB, GB, MiB, ...)."""
    out: dict = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        device, sep, size = part.partition("=")
        device, size = device.strip(), size.strip()
        if not sep or not size or not re.fullmatch(r"\d+(\.\d+)?\s*([KMGT]i?B)?", size, flags=re.I):
            raise argparse.ArgumentTypeError(
                f"--max-memory takes DEVICE=SIZE,... (e.g. cuda:0=70GiB,cpu=200GiB), not {part!r}"
            )
        if device in ("cpu", "mps"):
            key = device
        elif re.fullmatch(r"(cuda:)?\d+", device):
            key = int(device.split(":")[-1])
        else:
            raise argparse.ArgumentTypeError(f"--max-memory: {device!r} is not cuda:N, N, cpu or mps")
        if key in out:
            raise argparse.ArgumentTypeError(f"--max-memory names {device} twice")
        out[key] = size if re.search(r"[A-Za-z]", size) else int(size)
    if not out:
        raise argparse.ArgumentTypeError("--max-memory is empty")
    return out


class Parser(argparse.ArgumentParser):
    """argparse, but a bad flag gets two lines (the error, and where help is), not the whole usage."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\nsee `{self.prog} --help`\n")

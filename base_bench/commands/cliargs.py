"""What every `base-bench` subcommand shares on the command line: argument types and exit codes.

    p.add_argument("--limit", type=positive_int("--limit"))
    add_out_dir(p, "where the files go")   # --out-dir DIR, and --out, its older spelling
    add_store_flag(p, "read the runs from this store")   # --store URL; store.store_url(args.store) adds $BASE_BENCH_STORE
    db = reading_store(args.store, folders_given=bool(args.runs))   # the store a view reads, or None
    add_label_flags(p)                     # --group G --step N --tokens N --tag T (results/labels.py)
    add_bootstrap(p, "paired bootstrap")     # --resamples N, --seed S
    return fail(exc)                 # one `base-bench: error: ...` line; EXIT_STORAGE for a StorageError,
                                     # else EXIT_USAGE
    print(printable(text))           # text from files others made: no terminal escape reaches the screen
    add_key_value_flag(p, "--model-arg", "passed to from_pretrained")   # repeatable KEY=VALUE
    key_values(args.model_arg, "--model-arg")    # {"attn_implementation": "eager"}; a repeated KEY, or
                                                 # lm-eval's comma list (a=1,b=2), refused
    add_data_flags(p, default="hub")             # --data bundled|hub|PATH, and --local-data DIR
    spec = data_choice(args, default="hub")      # "bundled", "hub" or a Path, as open_data takes it
    p.add_argument("--max-line-bytes", type=byte_count("--max-line-bytes"))   # 67108864 or 64MiB

The subcommands (`cli`, `compare`, `leaderboard`, `trajectory`) import from here, never from each
other.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError, StorageError, UsageError
from ..items.datasource import BUNDLED, HUB

EXIT_USAGE = 2  # a user error: bad flag, data, model or out-dir (also one in use by another process)
EXIT_STORAGE = 74  # EX_IOERR of sysexits.h: a run file could not be written (disk full, I/O error)
EXIT_STORE = 75  # EX_TEMPFAIL: the run's files were written, but not its row in the --store (`store ingest` adds it)


def positive_int(name: str, low: int = 1):
    """An argparse type: a whole number of at least `low` (1 unless given), with a message naming the flag."""

    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} takes a whole number, not {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"{name} must be {low} or more, not {v}")
        return v

    return parse


def positive_float(name: str):
    """An argparse type: a finite number above 0, with a message naming the flag."""

    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} takes a number, not {text!r}") from None
        if not 0 < v < float("inf"):
            raise argparse.ArgumentTypeError(f"{name} must be a number above 0, not {text}")
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


def fail(exc: BaseException, code: int | None = None) -> int:
    """Print a user error as one `base-bench: error:` line on stderr; return `code` (by default
    EXIT_STORAGE for a StorageError, else EXIT_USAGE)."""
    if code is None:
        code = EXIT_STORAGE if isinstance(exc, StorageError) else EXIT_USAGE
    from ..redact import redact

    print(f"base-bench: error: {redact(printable(str(exc)))}", file=sys.stderr)
    return code


_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` for the terminal: control characters other than newline and tab (an escape sequence
    that would move the cursor, recolour or retitle the terminal) and the bidirectional overrides
    are shown as escapes (\\x1b, \\u202e), since model names, item ids and paths in reports come from
    others."""
    return _UNPRINTABLE.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), text)


def add_out_dir(p: argparse.ArgumentParser, help: str, default: str | None = None, required: bool = False) -> None:
    """--out-dir DIR, with --out as its older spelling (both set `out_dir`)."""
    p.add_argument("--out-dir", "--out", dest="out_dir", default=default, required=required, metavar="DIR", help=help)


def add_store_flag(p: argparse.ArgumentParser, help: str) -> None:
    """--store URL (default: $BASE_BENCH_STORE): sqlite:///PATH, PATH.db or postgresql://USER:PASSWORD@HOST/DB."""
    p.add_argument("--store", metavar="URL", default=None, help=help + " (default: $BASE_BENCH_STORE)")


def add_label_flags(p: argparse.ArgumentParser) -> None:
    """--group G, --step N, --tokens N and --tag T (repeatable): the labels of a run (results/labels.py)."""
    p.add_argument("--group", metavar="G", help="label the run with a group: a training run, a sweep, an ablation")
    p.add_argument(
        "--step", type=positive_int("--step", low=0), metavar="N", help="label the run with its training step"
    )
    p.add_argument(
        "--tokens",
        type=positive_int("--tokens", low=0),
        metavar="N",
        help="label the run with the tokens seen in training",
    )
    p.add_argument("--tag", action="append", default=[], metavar="T", help="a free tag for the run (repeatable)")


def add_bootstrap(p: argparse.ArgumentParser, what: str = "bootstrap", resamples: int = 2000, seed: int = 1234) -> None:
    """--resamples N and --seed S of a bootstrap, both recorded in the output."""
    p.add_argument(
        "--resamples",
        type=positive_int("--resamples"),
        default=resamples,
        metavar="N",
        help=f"{what} resamples (default {resamples})",
    )
    p.add_argument("--seed", type=int, default=seed, help=f"{what} seed (default {seed}); recorded in the output")


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


KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _no_constant(name: str):
    raise ValueError(name)  # NaN, Infinity, -Infinity: not JSON, so kept as text


def key_value_arg(flag: str):
    """An argparse type for a repeatable `FLAG KEY=VALUE`: (KEY, VALUE). Declare such a flag with
    `add_key_value_flag(p, "--vllm-arg", help)` and read it with `key_values(args.vllm_arg, "--vllm-arg")`.

    KEY is what comes before the first "=", and must be a Python identifier (it becomes a keyword
    argument). VALUE, all that follows it, is read as JSON when it parses as JSON, else kept as the
    text it is: `true` is True, `2` is 2, `0.5` is 0.5, `null` is None, `[1, 2]` a list,
    `{"type": "linear", "factor": 2.0}` a dict, `'"2"'` (quoted for the shell) the string "2";
    `eager`, `04:00:00` and the empty text stay strings, as do NaN and Infinity (not JSON).
    A bad pair gets one line naming the flag, which shows the KEY but never the VALUE (it may be a
    secret). Repeated keys, and a text VALUE that holds ",KEY2=" (lm-eval's comma list,
    `attn_implementation=sdpa,max_length=2048`, kept as a `CommaList`), are for `key_values` to
    refuse; such commas inside a JSON string (`'KEY="a,b=c"'`) are the value's own."""

    def parse(text: str):
        key, sep, value = text.partition("=")
        if not sep or not KEY.fullmatch(key):
            shown = f"{key}=..." if sep else text  # never the value: it may be a secret
            raise argparse.ArgumentTypeError(
                f"{flag} takes KEY=VALUE with KEY a Python identifier (e.g. {flag} attn_implementation=sdpa), "
                f"not {shown!r}"
            )
        try:
            return key, json.loads(value, parse_constant=_no_constant)
        except ValueError:
            listed = tuple(_LISTED.findall(value))
            return key, (CommaList(listed) if listed else value)

    return parse


_LISTED = re.compile(r",\s*([A-Za-z_][A-Za-z0-9_]*)\s*=")  # ",max_length=" inside a VALUE


@dataclass(frozen=True)
class CommaList:
    """The VALUE of a `FLAG KEY=VALUE` that reads as lm-eval's comma list (`--model_args
    a=1,b=2`): text, not JSON, holding ",KEY2=" (the KEY2s in `keys`). `key_values` refuses it in
    one line naming the repeatable form; the value itself is not kept (it may hold a secret)."""

    keys: tuple[str, ...]


def add_key_value_flag(p: argparse.ArgumentParser, flag: str, help: str) -> None:
    """A repeatable `flag KEY=VALUE` (`key_value_arg`), read back as a dict with
    `key_values(args.<dest>, flag)`; `help` says what the pairs are for."""
    p.add_argument(
        flag,
        action="append",
        default=[],
        type=key_value_arg(flag),
        metavar="KEY=VALUE",
        help=f"{help}; repeat it for more. VALUE is read as JSON when it parses, else as text",
    )


def key_values(pairs, flag: str) -> dict:
    """The (KEY, VALUE) pairs of a repeated `key_value_arg` flag as a dict; UsageError for a KEY given
    twice. A value whose KEY names a secret (token=..., api_key=...) is registered with base_bench.redact."""
    from ..redact import names_secret, register

    out: dict = {}
    for key, value in pairs or []:
        if isinstance(value, CommaList):
            more = " ".join(f"{flag} {k}=VALUE" for k in value.keys)
            raise UsageError(
                f"{flag} {','.join(f'{k}=...' for k in (key, *value.keys))} is a comma list, as lm-eval's --model_args "
                f"takes; {flag} takes one KEY=VALUE, so repeat it: {flag} {key}=VALUE {more} (a VALUE whose "
                f"commas are its own goes in JSON quotes: {flag} '{key}=\"...\"')"
            )
        if names_secret(key):
            register(value if isinstance(value, str) else json.dumps(value))
        if key in out:
            raise UsageError(f"{flag} {key}=... is given twice; give it once")
        out[key] = value
    return out


def _data_arg(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("--data takes bundled, hub or a path, not an empty string")
    return text


def add_data_flags(p: argparse.ArgumentParser, default: str) -> None:
    """--data bundled|hub|PATH and its older spelling --local-data DIR, read back by `data_choice`.
    `default` ("hub" or "bundled") is what a command without either flag scores."""
    p.add_argument(
        "--data",
        type=_data_arg,
        metavar="bundled|hub|PATH",
        help=f"the data to score (default: {default}): bundled (the set shipped in the package; not "
        "official), hub (the gated official file, fetched with HF_TOKEN or the saved login), or a "
        "JSONL file or a directory holding data/test.jsonl (write ./hub for a folder named hub)",
    )
    p.add_argument(
        "--local-data",
        metavar="DIR",
        help="the card's spelling of --data DIR: read DIR/data/test.jsonl, or DIR itself if it is a "
        "JSONL file (--local-data . in a checkout is the bundled set)",
    )


def data_of(text: str | None) -> str | Path | None:
    """A reader's --data (explore, rescore) as open_data takes it: None when not given, "bundled",
    "hub", or a Path; DataError for an empty string."""
    if text is None:
        return None
    if not text.strip():
        raise DataError("--data takes bundled, hub or a path, not an empty string")
    return text if text in (BUNDLED, HUB) else Path(text)


def data_choice(args, default: str) -> str | Path:
    """What --data or --local-data asks for, as open_data takes it: "bundled", "hub" or a Path (so
    that --local-data hub is the folder named hub); `default` when neither is given. Both given:
    UsageError."""
    if args.data is not None and args.local_data is not None:
        raise UsageError("give --data or --local-data, not both (--local-data DIR is another spelling of --data DIR)")
    if args.local_data is not None:
        return Path(args.local_data)
    if args.data is None:
        return default
    return args.data if args.data in (BUNDLED, HUB) else Path(args.data)


class Parser(argparse.ArgumentParser):
    """argparse, but a bad flag gets two lines (the error, and where help is), not the whole usage."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\nsee `{self.prog} --help`\n")


def reading_store(flag: str | None, folders_given: bool):
    """The store a view reads (`store.Store`, opened for reading), or None where it reads folders:
    run folders given win over $BASE_BENCH_STORE, and a --store flag given with them is refused
    (UsageError); with no folders, the flag's store, else $BASE_BENCH_STORE's, else None."""
    if flag is not None and folders_given:
        raise UsageError("--store reads the runs from a store; give it or run folders, not both")
    if folders_given:
        return None  # (the store, and SQLAlchemy, are not even imported)
    from ..store import open_store, store_url

    url = store_url(flag)
    return None if url is None else open_store(url, create=False)

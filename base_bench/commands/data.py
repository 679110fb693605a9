"""`base-bench data download`: the official data file into the Hugging Face cache, without a model.

    base-bench data download                   # the dataset's main revision (what --data hub reads)
    base-bench data download --revision R      # a branch, tag or commit of the dataset

For machines without the network (compute nodes): download once where the Hub can be reached, with
the same HF_HOME (or copy its hub/ folder), then run there with HF_HUB_OFFLINE=1 and --data hub.
The file comes through `hub.fetch_official_data`, the download a run with --data hub makes (the
same token lookup: HF_TOKEN, the `hf auth login` token, a hidden prompt on a terminal; the same
cache; HF_ENDPOINT for a mirror), and its SHA-256 is computed from the bytes in the cache and
compared with the card's. Two lines on stdout say which file it is (SHA-256, revision, commit, path)
and what a run can do with it.

Exit status: 0 when the file is in the cache and is the official one; 0 too for a --revision whose
file is not the official one (the file asked for is kept, and the lines say it is not official and
how to score it: --data PATH, not official); 2 when the main revision's file is not the official
one (a run with --data hub would refuse it; the file is kept), and for every refusal: no token or
a refused one (401/403), an unreachable Hub, no such revision, --data other than hub. Each refusal
is one `base-bench: error:` line; no token is ever printed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..errors import BaseBenchError, DataError, UsageError
from ..items import card
from ..items.dataset import load_dataset_file, sha256_file
from ..items.datasource import BUNDLED, HUB
from ..redact import redact, register
from .cliargs import Parser, fail, printable


def _data_flag(text: str) -> str:
    """--data's argparse type: only `hub` has anything to download."""
    if text == HUB:
        return text
    if text == BUNDLED:
        raise argparse.ArgumentTypeError("--data bundled ships inside the package; there is nothing to download")
    raise argparse.ArgumentTypeError(
        f"--data {text!r}: only 'hub' (the official file on the Hugging Face Hub) is downloaded; "
        "a local file or folder is given to a run as it is"
    )


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="base-bench data",
        description="The benchmark's data without running a model.",
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=Parser)
    what = (
        f"download the official data file ({card.HUB_DATA_FILE} of the gated dataset {card.HUB_DATASET}) "
        "into the Hugging Face cache, check its SHA-256 against the card's, and say where it is"
    )
    s = sub.add_parser(
        "download",
        help=what,
        description=what + ". A run with --data hub then reads it from the cache, also offline (HF_HUB_OFFLINE=1). "
        "The token is HF_TOKEN, else the one `hf auth login` saved, else a hidden prompt on a terminal; "
        "HF_ENDPOINT names a mirror and HF_HOME the cache.",
        epilog="exit status: 0 when the official file is in the cache; 0 too with --revision R when R's file "
        "is not the official one (it is kept, and said to be not official: --data PATH scores it, "
        "not official); 2 when the main revision's file is not the official one (a run with --data hub "
        "would refuse it; the file is kept), and when the download is refused or fails (one line).",
    )
    s.add_argument(
        "--data",
        type=_data_flag,
        default=HUB,
        metavar="hub",
        help="where the data comes from: hub, the gated dataset on the Hugging Face Hub (the default and "
        "the only source to download from)",
    )
    s.add_argument(
        "--revision",
        metavar="R",
        help="a branch, tag or commit of the dataset (default: main, the revision a run with --data hub reads)",
    )
    return p


def _cached(revision: str | None) -> str | None:
    """The data file's path in the cache for `revision` before the download, or None."""
    import huggingface_hub

    try:
        found = huggingface_hub.try_to_load_from_cache(
            card.HUB_DATASET, card.HUB_DATA_FILE, revision=revision, repo_type="dataset"
        )
    except Exception:  # noqa: BLE001 - only tells "downloaded" from "already there"
        return None
    return found if isinstance(found, str) else None


def _usable(path: str) -> str | None:
    """Why the file at `path` is not usable data (its first problem, one phrase), or None."""
    try:
        ds = load_dataset_file(path)
    except DataError as e:
        return str(e).split(": ", 1)[-1]
    problems = ds.composition_problems()
    return "; ".join(problems[:3]) or None


def download(revision: str | None, say=print) -> tuple[str, bool]:
    """Fetch the data file of `revision` (None: main) into the Hugging Face cache, `say` two lines
    about it, and return (its path, whether it is the official file). HubError when it cannot be
    fetched; DataError for the main revision's file when it is not the official one (kept)."""
    from huggingface_hub import constants as hf_constants

    from ..items.hub import fetch_official_data

    before = _cached(revision)
    path, token = fetch_official_data(revision=revision)
    register(token)  # the token that worked: never printed from here on
    sha = sha256_file(path)
    commit = Path(path).parents[len(Path(card.HUB_DATA_FILE).parts) - 1].name  # .../snapshots/<commit>/data/test.jsonl
    main = revision in (None, "main")
    at = f"commit {commit}" if revision == commit else f"revision {revision or 'main'} (commit {commit})"
    state = "already in" if before == path else "downloaded into"
    cache = hf_constants.HF_HUB_CACHE
    official = sha == card.OFFICIAL_SHA256
    problem = _usable(path)
    if official and problem:  # the card's checksum, but not the card's data: cannot happen with the real file
        raise DataError(f"{path}: the card's SHA-256, but {problem}")
    if official:
        say(f"data: the official {card.HUB_DATASET} file, SHA-256 {sha} (the card's), {at}: {path}")
        if main:
            say(
                f"{state} the Hugging Face cache ({cache}): a run with --data hub reads it there, with the "
                "network or without it (HF_HUB_OFFLINE=1)"
            )
        else:
            say(
                f"{state} the Hugging Face cache ({cache}); a run with --data hub reads the main revision, so "
                f"score this file with --data {path} (official: its SHA-256 is the card's)"
            )
        return path, True
    say(
        f"data: not the official {card.HUB_DATASET} file: SHA-256 {sha} (the card's is {card.OFFICIAL_SHA256}), {at}: {path}"
    )
    scores = (
        f"--data {path} scores it, not official" if problem is None else f"it is not usable data either ({problem})"
    )
    if main:
        raise DataError(
            f"the main revision of {card.HUB_DATASET} holds a file that is not the official one; it is kept in "
            f"the Hugging Face cache, but a run with --data hub refuses it; {scores}"
        )
    say(f"{state} the Hugging Face cache ({cache}) and kept there; a run with --data hub refuses it; {scores}")
    return path, False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        register(os.environ.get(name))
    try:
        if args.data != HUB:  # (the flag's type refuses every other value)
            raise UsageError(f"--data {args.data}: only hub is downloaded")
        download(args.revision, say=lambda line: print(redact(printable(line))))
    except BaseBenchError as exc:
        return fail(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())

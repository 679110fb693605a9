"""Which files a scan reads: the corpus paths on the command line, walked and sorted into units.

    corpus = discover(["corpus/", "extra.parquet"])     # CorpusError (one line) for a missing path
    corpus.units      # one Unit per file (a datasets.save_to_disk folder is one unit)
    corpus.ignored    # files inside the folders that are no corpus format (listed in the report)

Formats, by name: JSONL (`.jsonl`, `.ndjson`, each also `.gz` or `.zst`), Parquet (`.parquet`),
plain text (`.txt`, one document per file), and a folder written by `datasets.save_to_disk` (it
holds `state.json` and `dataset_info.json`; a DatasetDict's `dataset_dict.json` makes each split a
unit). A folder is read recursively, in sorted order, so unit numbers do not depend on the file
system. A file named on the command line must be in one of these formats.

Each unit has a `rel` path: where `--write-clean` writes its clean copy. With one folder given, paths
are relative to that folder; otherwise to the deepest folder that holds every input.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BaseBenchError

JSONL_EXT = (".jsonl", ".ndjson")
MAX_LINE_BYTES = 64 << 20  # the default cap on one line (JSONL) or document (.txt, a Parquet or Arrow text value)
META_MAX_BYTES = 16 << 20  # a datasets folder's state.json, dataset_info.json or dataset_dict.json
COMPRESSED = {"": None, ".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
FORMATS_TEXT = ".jsonl, .jsonl.gz, .jsonl.zst, .parquet, .txt, or a datasets.save_to_disk folder"


class CorpusError(BaseBenchError):
    """A corpus path or file that cannot be scanned; the message names it in a line."""


@dataclass(frozen=True)
class Unit:
    index: int
    format: str  # jsonl | parquet | txt | hf
    path: str  # absolute
    display: str  # as the user would write it
    rel: str  # where its clean copy goes, relative to --write-clean
    size: int  # bytes on disk
    compression: str | None = None  # jsonl: gzip | zstd | None
    files: tuple[str, ...] = ()  # hf: its .arrow files, in order (absolute)

    def to_json(self) -> dict:
        d = {"unit": self.index, "format": self.format, "file": self.display, "rel": self.rel, "bytes": self.size}
        if self.compression:
            d["compression"] = self.compression
        return d


@dataclass(frozen=True)
class Corpus:
    units: tuple[Unit, ...]
    ignored: tuple[str, ...] = field(default=())

    @property
    def size(self) -> int:
        return sum(u.size for u in self.units)


def file_format(name: str) -> tuple[str, str | None] | None:
    """('jsonl', compression) / ('parquet', None) / ('txt', None) by file name, or None."""
    low = name.lower()
    for ext, comp in COMPRESSED.items():
        if ext and not low.endswith(ext):
            continue
        stem = low[: len(low) - len(ext)] if ext else low
        if stem.endswith(JSONL_EXT):
            return "jsonl", comp
    if low.endswith(".parquet"):
        return "parquet", None
    if low.endswith(".txt"):
        return "txt", None
    return None


def is_saved_dataset(folder: Path) -> bool:
    return (folder / "state.json").is_file() and (folder / "dataset_info.json").is_file()


def _read_json(f: Path, what: str):
    """A small JSON file of a datasets folder, read up to META_MAX_BYTES; CorpusError if it is more or
    cannot be read."""
    try:
        with open(f, "rb") as fh:
            raw = fh.read(META_MAX_BYTES + 1)
        if len(raw) > META_MAX_BYTES:
            raise CorpusError(f"{f}: over {META_MAX_BYTES >> 20} MiB, too big for {what}")
        return json.loads(raw)
    except (OSError, ValueError, RecursionError) as e:
        raise CorpusError(f"{f}: cannot be read as {what} ({type(e).__name__})") from None


def _plain_name(name, f: Path, what: str) -> str:
    """`name` from the file `f` if it is one plain file or folder name (not empty, '.', '..', a path, or
    absolute), else CorpusError: a name from a corpus file never leads out of its folder."""
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or any(c in name for c in "/\\\0")
        or os.path.isabs(name)
        or Path(name).name != name
    ):
        shown = repr(name)[:80]
        raise CorpusError(f"{f}: {what} {shown} is not a plain name in its folder; refusing a path that could leave it")
    return name


def _dataset_files(folder: Path) -> tuple[str, ...]:
    state = _read_json(folder / "state.json", "a datasets state.json")
    try:
        names = [f["filename"] for f in state["_data_files"]]
    except (KeyError, TypeError) as e:
        raise CorpusError(f"{folder}: a datasets folder whose state.json cannot be read ({type(e).__name__})") from None
    files = tuple(str(folder / _plain_name(n, folder / "state.json", "data file")) for n in names)
    for f in files:
        if not os.path.isfile(f):
            raise CorpusError(f"{folder}: state.json names {Path(f).name}, which is missing")
        _check_inside(Path(f), folder, f"{folder}: state.json names {Path(f).name}")
    return files


def _dataset_splits(folder: Path) -> list[Path] | None:
    """The split folders of a DatasetDict folder, or None if it is not one. A split must be a plain
    folder name inside it (CorpusError otherwise)."""
    f = folder / "dataset_dict.json"
    if not f.is_file():
        return None
    data = _read_json(f, "a datasets dataset_dict.json")
    splits = data.get("splits") if isinstance(data, dict) else None
    if not isinstance(splits, list):
        raise CorpusError(f"{f}: cannot be read (no list of splits)")
    out = [folder / _plain_name(s, f, "split") for s in splits]
    for p in out:
        _check_inside(p, folder, f"{f}: split {p.name!r}")
    return out


def _check_inside(p: Path, folder: Path, what: str) -> None:
    """CorpusError unless `p`, links resolved, is inside `folder` (links resolved too)."""
    real, top = os.path.realpath(p), os.path.realpath(folder)
    if real != top and not real.startswith(top.rstrip(os.sep) + os.sep):
        raise CorpusError(
            f"{what} leads to {real}, outside {folder}; a corpus is read only inside the paths given "
            "(name that path on the command line to scan it)"
        )


def _walk(folder: Path, top: Path | None = None, seen: set | None = None):
    """(path, kind) under folder, sorted: kind is 'file' or 'hf' (a saved dataset folder). Links are
    followed only where they lead inside `top` (the folder given; CorpusError otherwise), and a folder
    is walked once, so a link to a parent folder is no loop."""
    top = folder if top is None else top
    seen = set() if seen is None else seen
    seen.add(os.path.realpath(folder))
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as e:
        raise CorpusError(f"{folder}: cannot be listed ({e.strerror or e})") from None
    for e in entries:
        p = Path(e.path)
        if e.is_symlink():
            _check_inside(p, top, f"{p}: a link that")
        if e.is_dir(follow_symlinks=True):
            if os.path.realpath(p) in seen:
                continue
            splits = _dataset_splits(p)
            if splits is not None:
                for s in splits:
                    yield s, "hf"
            elif is_saved_dataset(p):
                yield p, "hf"
            else:
                yield from _walk(p, top, seen)
        elif e.is_file(follow_symlinks=True):
            yield p, "file"


def _base(args: list[Path]) -> Path:
    if len(args) == 1 and args[0].is_dir():
        return args[0]
    parents = [str(a.resolve() if a.is_dir() else a.resolve().parent) for a in args]
    common = Path(os.path.commonpath(parents))
    if len(args) > 1 and all(a.is_dir() for a in args) and any(str(common) == p for p in parents):
        common = common.parent  # `scan a/ a/b/`: keep a's own name in the paths
    return common


def discover(paths) -> Corpus:
    """Every unit under `paths` (files or folders), numbered in order. CorpusError if a path is missing,
    a named file is not a corpus format, or nothing is found."""
    if not paths:
        raise CorpusError("no corpus path given")
    args = [Path(p).expanduser() for p in paths]
    for a, raw in zip(args, paths):
        if not a.exists():
            raise CorpusError(f"{raw}: no such file or directory")
    base = _base(args).resolve()
    found: list[tuple[Path, str, str]] = []  # (path, kind, display)
    ignored: list[str] = []
    for a, raw in zip(args, paths):
        if a.is_dir():
            splits = _dataset_splits(a)
            if splits is not None:
                found += [(s, "hf", os.path.join(str(raw), s.name)) for s in splits]
            elif is_saved_dataset(a):
                found.append((a, "hf", str(raw)))
            else:
                for p, kind in _walk(a):
                    shown = os.path.join(str(raw), os.path.relpath(p, a))
                    if kind == "file" and file_format(p.name) is None:
                        ignored.append(shown)
                    else:
                        found.append((p, kind, shown))
        else:
            if file_format(a.name) is None:
                raise CorpusError(f"{raw}: not a corpus file (expected {FORMATS_TEXT})")
            found.append((a, "file", str(raw)))
    units: list[Unit] = []
    seen: set[str] = set()
    for p, kind, shown in found:
        real = os.path.realpath(p)
        if real in seen:
            continue
        seen.add(real)
        ab = str(p.resolve())
        rel = os.path.relpath(ab, base)
        if rel == "." or rel == ".." or rel.startswith(".." + os.sep):  # a folder given alone, or a link
            rel = p.resolve().name
        if kind == "hf":
            files = _dataset_files(p)
            size = sum(os.path.getsize(f) for f in files)
            units.append(Unit(len(units), "hf", ab, shown, rel, size, None, files))
        else:
            fmt, comp = file_format(p.name)
            units.append(Unit(len(units), fmt, ab, shown, rel, os.path.getsize(ab), comp))
    rels = {}
    for u in units:
        if u.rel in rels:
            raise CorpusError(
                f"{rels[u.rel]} and {u.display} would both be written to {u.rel} by --write-clean; scan them separately"
            )
        rels[u.rel] = u.display
    if not units:
        raise CorpusError(f"no corpus files in {', '.join(map(str, paths))} (expected {FORMATS_TEXT})")
    return Corpus(tuple(units), tuple(ignored))


def capped_lines(f, max_bytes: int, name: str):
    """(line number, line) of a binary stream, line numbers from 1, each line read with at most
    `max_bytes` bytes (after decompression) held in memory, its newline not counted. CorpusError,
    naming `name` and the line, for a longer one: the stream is not read further."""
    f = lines_of(f)
    li = 0
    while True:
        line = f.readline(max_bytes + 1)
        if not line:
            return
        li += 1
        if len(line) > max_bytes and not line.endswith(b"\n"):
            raise CorpusError(
                f"{name}: line {li} is longer than {max_bytes} bytes (--max-line-bytes); raise the cap "
                "if such lines are expected, or pass --skip-bad to note the file and go on"
            )
        yield li, line


def lines_of(f):
    """A binary stream that iterates by lines (zstandard's reader does not: it gets a buffer around it)."""
    import io

    try:
        f.readline  # noqa: B018
        if not type(f).__name__.startswith("ZstdDecompression"):
            return f
    except AttributeError:
        pass
    return io.BufferedReader(f, 1 << 20)

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


def _dataset_files(folder: Path) -> tuple[str, ...]:
    try:
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
        names = [f["filename"] for f in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CorpusError(f"{folder}: a datasets folder whose state.json cannot be read ({type(e).__name__})") from None
    files = tuple(str(folder / n) for n in names)
    for f in files:
        if not os.path.isfile(f):
            raise CorpusError(f"{folder}: state.json names {Path(f).name}, which is missing")
    return files


def _dataset_splits(folder: Path) -> list[Path] | None:
    """The split folders of a DatasetDict folder, or None if it is not one."""
    f = folder / "dataset_dict.json"
    if not f.is_file():
        return None
    try:
        splits = json.loads(f.read_text(encoding="utf-8"))["splits"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CorpusError(f"{f}: cannot be read ({type(e).__name__})") from None
    return [folder / s for s in splits]


def _walk(folder: Path):
    """(path, kind) under folder, sorted: kind is 'file' or 'hf' (a saved dataset folder)."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as e:
        raise CorpusError(f"{folder}: cannot be listed ({e.strerror or e})") from None
    for e in entries:
        p = Path(e.path)
        if e.is_dir(follow_symlinks=True):
            splits = _dataset_splits(p)
            if splits is not None:
                for s in splits:
                    yield s, "hf"
            elif is_saved_dataset(p):
                yield p, "hf"
            else:
                yield from _walk(p)
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
        if rel.startswith(".."):
            rel = p.name
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

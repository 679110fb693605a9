"""--write-clean: one corpus unit copied without the documents a scan flagged, in its own format.

    dropped = write_clean_unit(unit, flagged_positions, out_dir)

`unit` is a corpus unit as the scan plan stores it (format, path, rel, compression); `flagged` holds
the positions the scan's records name: JSONL line numbers (1-based), Parquet and datasets rows
(0-based), or anything for a .txt file (which is then left out). Kept JSONL lines are copied byte for
byte, compressed as the input was (gzip, zstd or not at all); Parquet keeps its schema (with its
metadata) and compression codec; a datasets folder is written with `save_to_disk` from `select` of
the kept rows (a DatasetDict's dataset_dict.json is copied beside its splits). A unit with nothing
flagged is copied as it is. Every output is written under a temporary name and renamed into place.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .corpus import MAX_LINE_BYTES, CorpusError


def _tmp(dst: Path) -> Path:
    return dst.with_name(f".{dst.name}.part")


def clean_path(out_dir: str, rel: str) -> Path:
    """Where the clean copy of a unit goes: `rel` below `out_dir`, or CorpusError when `rel` is not a
    plain relative path that stays inside it (empty, '.', absolute, or with a '..' part)."""
    parts = Path(rel).parts
    if not rel or Path(rel).is_absolute() or not parts or any(p in ("", ".", "..") for p in parts):
        raise CorpusError(f"--write-clean: {rel!r} is not a path inside {out_dir}; refusing to write there")
    return Path(out_dir) / rel


def write_clean_unit(unit: dict, flagged: set, out_dir: str, max_line_bytes: int | None = None) -> int:
    src, dst = Path(unit["path"]), clean_path(out_dir, unit["rel"])
    dst.parent.mkdir(parents=True, exist_ok=True)
    fmt = unit["format"]
    if fmt == "hf":
        _copy_dict_file(src, dst)
    if fmt == "txt" and flagged:
        return 1
    if not flagged:
        if fmt == "hf":
            shutil.copytree(src, _tmp(dst))
        else:
            shutil.copyfile(src, _tmp(dst))
        os.replace(_tmp(dst), dst)
        return 0
    if fmt == "jsonl":
        return _jsonl(src, dst, flagged, unit, max_line_bytes or MAX_LINE_BYTES)
    return {"parquet": _parquet, "hf": _dataset}[fmt](src, dst, flagged, unit)


def _jsonl(src: Path, dst: Path, flagged: set, unit: dict, max_line_bytes: int) -> int:
    import fsspec

    from .corpus import capped_lines

    comp = unit.get("compression")
    dropped = 0
    with fsspec.open(str(src), "rb", compression=comp) as fi, fsspec.open(str(_tmp(dst)), "wb", compression=comp) as fo:
        for li, line in capped_lines(fi, max_line_bytes, unit.get("file", str(src))):
            if li in flagged:
                dropped += 1
            else:
                fo.write(line)
    os.replace(_tmp(dst), dst)
    return dropped


def _parquet(src: Path, dst: Path, flagged: set, unit: dict) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(src)
    codec = "snappy"
    if pf.metadata.num_row_groups and pf.metadata.num_columns:
        codec = pf.metadata.row_group(0).column(0).compression.lower()
        codec = "none" if codec == "uncompressed" else codec
    row, dropped = 0, 0
    with pq.ParquetWriter(_tmp(dst), pf.schema_arrow, compression=codec) as w:
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g)
            keep = [row + i not in flagged for i in range(t.num_rows)]
            dropped += keep.count(False)
            w.write_table(t.filter(pa.array(keep, type=pa.bool_())))
            row += t.num_rows
    os.replace(_tmp(dst), dst)
    return dropped


def _dataset(src: Path, dst: Path, flagged: set, unit: dict) -> int:
    from datasets import load_from_disk
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()
    ds = load_from_disk(str(src))
    keep = [i for i in range(len(ds)) if i not in flagged]
    ds.select(keep).save_to_disk(str(_tmp(dst)))
    if dst.exists():
        shutil.rmtree(dst)
    os.replace(_tmp(dst), dst)
    return len(ds) - len(keep)


def _copy_dict_file(src: Path, dst: Path) -> None:
    """A split of a DatasetDict: its dataset_dict.json goes beside the split folders too."""
    f = src.parent / "dataset_dict.json"
    if f.is_file() and not (dst.parent / f.name).exists():
        tmp = dst.parent / f".{f.name}.{os.getpid()}.part"
        shutil.copyfile(f, tmp)
        os.replace(tmp, dst.parent / f.name)

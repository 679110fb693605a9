"""Reading finished runs back, and writing result files so that a crash never leaves half of one.

    rep = load_report("runs/my-run")          # or ".../report.json"; ReportError says why not
    refuse_existing([out / "x.md"], force)    # never overwrite without --force
    write_atomic(out / "x.md", text)          # temp file, fsync, rename (OSError if it fails)

`compare`, `leaderboard`, `trajectory` and the run store all read and write through here, and the
HTML pages share `html_page`.
"""

from __future__ import annotations

import errno
import html
import json
import os
from pathlib import Path

from ..errors import ReportError

ITEM_KEYS = ("id", "category", "item_elo", "point_weight", "correct")


def report_path(run: str | Path) -> Path:
    """RUN may be a run directory or a report.json file."""
    p = Path(run).expanduser()
    return p / "report.json" if p.is_dir() else p


def load_report(run: str | Path) -> dict:
    """Read and sanity-check one report.json; raise ReportError with a one-line reason."""
    path = report_path(run)
    if not path.exists():
        where = f"{run}: no report.json there" if Path(run).is_dir() else f"{run}: no such run directory or file"
        raise ReportError(where + " (is the run finished?)")
    try:
        rep = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: cannot be read ({e.__class__.__name__}: {e})") from None
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON ({e})") from None
    problem = _report_problem(rep)
    if problem:
        raise ReportError(f"{path}: not a usable base-bench report ({problem})")
    rep["_path"] = str(path)
    return rep


def _report_problem(rep) -> str | None:
    if not isinstance(rep, dict):
        return "top level is not an object"
    if not isinstance(rep.get("data"), dict) or not isinstance(rep["data"].get("sha256"), str):
        return "no data.sha256"
    items = rep.get("items")
    if not isinstance(items, list) or not items:
        return "no items"
    for n, it in enumerate(items):
        missing = [k for k in ITEM_KEYS if not isinstance(it, dict) or k not in it]
        if missing:
            return f"item {n} lacks {', '.join(missing)}"
    ids = [it["id"] for it in items]
    if len(set(ids)) != len(ids):
        return "duplicate item ids"
    return None


def display_name(spec: str) -> str:
    """A model spec as people read it: Hub ids stay, local paths become their last part."""
    s = str(spec).rstrip("/")
    if s.startswith(("/", "./", "../", "~")) or s.lower().endswith(".gguf") or "\\" in s or s.count("/") > 1:
        return Path(s).name or s
    return s


def refuse_existing(paths, force: bool) -> None:
    """ReportError if any output already exists (unless --force) or is a directory."""
    for p in paths:
        if p.is_dir():
            raise ReportError(f"{p} is a directory; give a file name")
        if p.exists() and not force:
            raise ReportError(f"{p} already exists; add --force to overwrite it, or pick another name")


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write `data` to a temporary file beside `path`, fsync it, and rename it over `path`.

    A reader (or a crash) sees the old file or the new one, never a part of either. If the write
    fails (a full disk, an I/O error), the OSError is raised and the temporary file is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    blob = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            write_all(fd, blob)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written (a write may take only part of them); OSError if not."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n == 0:
            raise OSError(errno.EIO, "write() wrote nothing")
        view = view[n:]


def fsync_dir(directory: str | Path) -> None:
    """Make a new name or a rename in `directory` durable. Best effort: a file system that cannot
    fsync a directory is left as it is (the files' own contents are fsynced by their writers)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


PAGE_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:14px}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
td:nth-child(2),th:nth-child(2){text-align:left}
th{background:#f3f3f3}
img{max-width:100%;display:block;margin:1em 0}
.note{color:#555}
code{font-size:12px}"""


def html_page(title: str, body: list[str]) -> str:
    """A self-contained HTML page (inline style; images are inlined by the caller) around `body`."""
    head = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{PAGE_CSS}</style></head><body>",
    ]
    return "\n".join(head + list(body) + ["</body></html>"]) + "\n"

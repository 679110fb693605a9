"""Reading finished runs back, and writing result files so that a crash never leaves half of one.

    rep = load_report("runs/my-run")          # or ".../report.json"; ReportError says why not
    paths = check_outputs([out / "x.md"], force)   # refuse what must not be written (before any work)
    write_outputs({out / "x.md": text})       # each one atomically; StorageError if it fails
    write_atomic(out / "x.md", text)          # temp file, fsync, rename (OSError if it fails)

    names = run_names(reports)                # what every view calls each run; no two alike
    names = run_names(reports, beside=("dtype", "backend", "add_bos"))   # ... where columns show those

`compare`, `leaderboard`, `trajectory`, `explore`, `contamination` and the run store all read and
write through here, and the HTML pages share `html_page`.

A report is a file that someone else may have made, so `load_report` reads it within bounds
(`untrusted.read_regular` and `loads`: a regular file of at most 256 MiB, JSON at most 64 levels deep and of at
most MAX_VALUES values, no NaN, no infinite or huge number) and then checks it with
`checked.report_problem`, the one checked reading every reader shares: every field of the type
it must have, and the report's claims (predictions, Elo, accuracies, official) recomputed.

A write never follows a symbolic link and never shares a temporary file: `write_atomic` writes a
new file made by `tempfile.mkstemp` (O_EXCL, a random name) beside the target and renames it over
the target, so a link planted at the target or at a temporary name is replaced or never met, and
two writers at once each publish a whole file of their own (the last rename wins).
`check_outputs` refuses a target that is a link, a folder or another non-regular file.
"""

from __future__ import annotations

import errno
import glob
import html
import os
import stat
import tempfile
from pathlib import Path

from .. import untrusted
from ..errors import ReportError, StorageError
from .checked import MAX_CATEGORIES, MAX_ITEMS, MAX_STEP, SHA256, report_problem  # noqa: F401 (read from here)

# JSON values in one report or scan: a report holds about 35 per item, so this is MAX_ITEMS items with
# room to spare. Parsed, each value costs tens of bytes, so this bounds the memory a file can claim.
MAX_VALUES = 4_000_000
TEMP_SUFFIX = ".tmp"  # write_atomic's temporary files: <name>.<random>.tmp beside <name>


def report_path(run: str | Path) -> Path:
    """RUN may be a run directory or a report.json file."""
    p = Path(run).expanduser()
    return p / "report.json" if p.is_dir() else p


def load_report(run: str | Path) -> dict:
    """Read and sanity-check one report.json; raise ReportError with a one-line reason."""
    return read_report(run)[0]


def read_report(run: str | Path) -> tuple[dict, bytes]:
    """`load_report`, and the bytes it was read from (`store ingest` keeps them), read once."""
    path = report_path(run)
    if not path.exists():
        where = f"{run}: no report.json there" if Path(run).is_dir() else f"{run}: no such run directory or file"
        raise ReportError(where + " (is the run finished?)")
    return read_checked(path, report_problem, REPORT)


def as_report(run) -> dict:
    """`run` as a checked report: a report dict (checked in place, as a file would be) or a run
    folder or report.json path (load_report); ReportError in one line if it cannot be used."""
    if isinstance(run, dict):
        problem = report_problem(run)
        if problem:
            raise ReportError(f"a report given as a dict is not a usable base-bench report ({problem})")
        return run
    return load_report(run)


REPORT = "a usable base-bench report"  # what a report read here must be (its refusals say so)


def report_from_bytes(raw: bytes, where: str) -> dict:
    """A report held as bytes (the store keeps report.json's), read as a file is: within bounds and
    checked; ReportError "WHERE: not a usable base-bench report (phrase)". `_path` is `where`."""
    if len(raw) > untrusted.MAX_BYTES:
        raise ReportError(f"{where}: not {REPORT} (larger than {untrusted.MAX_BYTES:,} bytes)")
    return checked_bytes(raw, where, report_problem, REPORT)


def load_checked(path: Path, problem_of, what: str) -> dict:
    """A JSON file made by others, read within bounds (untrusted.read_regular, then at most
    MAX_VALUES JSON values, numbers that arithmetic can use) and checked by `problem_of(obj) ->
    phrase or None`; ReportError "PATH: not WHAT (phrase)" if it cannot be used. The dict gets
    "_path", where it was read from."""
    return read_checked(path, problem_of, what)[0]


def read_checked(path: Path, problem_of, what: str) -> tuple[dict, bytes]:
    """`load_checked`, and the bytes it was read from."""
    try:
        raw = untrusted.read_regular(path)
    except OSError as e:
        raise ReportError(f"{path}: {untrusted.problem(e)}") from None
    except ValueError as e:
        raise ReportError(f"{path}: not {what} ({untrusted.problem(e)})") from None
    return checked_bytes(raw, str(path), problem_of, what), raw


def checked_bytes(raw: bytes, where: str, problem_of, what: str) -> dict:
    """JSON bytes parsed within bounds and checked by `problem_of`; ReportError "WHERE: not WHAT
    (phrase)" if they cannot be used. The dict gets "_path": `where`."""
    try:
        obj = untrusted.loads(raw.decode("utf-8"), max_values=MAX_VALUES, strict=True)
    except ValueError as e:  # UnicodeDecodeError is one: "not UTF-8"
        raise ReportError(f"{where}: not {what} ({untrusted.problem(e)})") from None
    problem = problem_of(obj)
    if problem:
        raise ReportError(f"{where}: not {what} ({problem})")
    obj["_path"] = where
    return obj


MAX_WALK_DEPTH = 32  # folder levels searched below a root for report.json files
MAX_WALK_ENTRIES = 1_000_000  # directory entries looked at in one search


def find_named(root: str | Path, name: str, max_depth: int = MAX_WALK_DEPTH) -> tuple[list[Path], int]:
    """(every regular file called `name` at most `max_depth` folders below `root`, sorted; how many
    folders lay deeper and were not searched). Without recursion (a chain of thousands of nested
    folders costs a list, not the stack), without following links to folders, and ReportError after
    MAX_WALK_ENTRIES entries."""
    root = Path(root)
    found, deeper, seen = [], 0, 0
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for e in entries:
            seen += 1
            if seen > MAX_WALK_ENTRIES:
                raise ReportError(f"{root}: more than {MAX_WALK_ENTRIES:,} files and folders; give a smaller folder")
            if e.is_dir(follow_symlinks=False):
                if depth < max_depth:
                    stack.append((Path(e.path), depth + 1))
                else:
                    deeper += 1
            elif e.name == name and e.is_file():
                found.append(Path(e.path))
    return sorted(found), deeper


def check_finished(rep: dict, need=("elo",)) -> None:
    """ReportError unless the report's results.overall holds each of `need` (a finished run's report
    does; one cut short has no results)."""
    o = (rep.get("results") or {}).get("overall") or {}
    missing = [k for k in need if o.get(k) is None]
    if missing:
        raise ReportError(f"{rep.get('_path')}: no results.overall.{missing[0]}; not a finished base-bench report")


def display_name(spec: str) -> str:
    """A model spec as people read it: Hub ids stay, local paths become their last part."""
    s = str(spec).rstrip("/")
    if s.startswith(("/", "./", "../", "~")) or s.lower().endswith(".gguf") or "\\" in s or s.count("/") > 1:
        return Path(s).name or s
    return s


LABEL_KEYS = ("group", "training_step", "tokens_seen", "tags")  # a run's labels (results/labels.py)


def _spec_of(rep: dict) -> str:
    return str(((rep.get("config") or {}).get("model") or {}).get("spec") or "unknown model").rstrip("/") or "/"


def _setting(rep: dict, key: str):
    return (rep.get("config") or {}).get(key)


def _label_name(rep: dict) -> str | None:
    """ "GROUP step N" (or "GROUP tokens N" without a step) for a run with those labels; else None."""
    group = rep.get("group")
    if not group:
        return None
    if rep.get("training_step") is not None:
        return f"{group} step {rep['training_step']}"
    if rep.get("tokens_seen") is not None:
        return f"{group} tokens {rep['tokens_seen']}"
    return None


def _folder_of(rep: dict) -> str | None:
    """The folder a run came from: its report.json's folder, or for a stored run the folder it was
    ingested from (`_source`)."""
    path = rep.get("_path")
    if path and not str(path).startswith("store:"):
        return str(Path(path).parent)
    return rep.get("_source") or None


def _shortest_tails(texts: list[str], start: list[int], who: list[int]) -> list[str]:
    """For the runs `who`, the shortest tail of each text (its last path parts, at least `start` of
    them) that no other run of `who` with a different text shares."""
    parts = {i: [p for p in texts[i].split("/") if p] or [texts[i]] for i in who}
    level = {i: min(max(1, start[i]), len(parts[i])) for i in who}

    def tail(i):
        return "/".join(parts[i][-level[i] :])

    while True:
        by: dict[str, list[int]] = {}
        for i in who:
            by.setdefault(tail(i), []).append(i)
        grew = False
        for same in by.values():
            if len(same) < 2 or len({texts[i] for i in same}) < 2:
                continue
            for i in same:
                if level[i] < len(parts[i]):
                    level[i] += 1
                    grew = True
        if not grew:
            return [tail(i) for i in who]


def _colliding(keys: list) -> list[int]:
    seen: dict = {}
    for k in keys:
        seen[k] = seen.get(k, 0) + 1
    return [i for i, k in enumerate(keys) if seen[k] > 1]


SETTINGS = ("dtype", "backend", "add_bos")  # what a view may show beside a run's name (run_names' `beside`)


def _settings(rep: dict) -> dict:
    return {
        "dtype": str(_setting(rep, "dtype")),
        "backend": backend_name(_setting(rep, "backend")),
        "add_bos": bool(_setting(rep, "add_bos")),
    }


def run_names(reports, beside=()) -> list[str]:
    """What every view (leaderboard, explore, compare, trajectory's title) calls each of `reports`, so
    that no two runs of the list look alike:

    1. a run labelled with a group and a training step is "GROUP step N" ("GROUP tokens N" with
       tokens seen and no step); any other run is named by the shortest tail of its model spec that
       tells it apart from every other run's spec: a Hub id stays whole, a local path starts at its
       last part ("hf"), and runs whose tails are alike take one more part at a time
       ("checkpoint-3000/hf"), so eight `ckpt/checkpoint-N/hf` are eight names;
    2. " (rescored: RULE)" for a report that `base-bench rescore` wrote, and " (DTYPE)" and
       " +BOS" / " no BOS" where runs in the list differ in them;
    3. where two runs are still alike (one model scored twice): " [FOLDER]", the shortest tail of the
       folder each came from that tells them apart, then " [KEY]", the run's store key (12 digits),
       and last " #K", its place in the list.

    `beside` names the settings ("dtype", "backend", "add_bos") that the view shows in columns of its
    own beside the name: they are not added to the names, and two runs that differ in one of them
    do not look alike."""
    reports = list(reports)
    n = len(reports)
    beside = tuple(beside)
    unknown = set(beside) - set(SETTINGS)
    if unknown:
        raise ValueError(f"run_names: beside takes {', '.join(SETTINGS)}, not {sorted(unknown)}")
    specs = [_spec_of(r) for r in reports]
    labelled = [_label_name(r) for r in reports]
    plain = [i for i in range(n) if labelled[i] is None]
    tails = _shortest_tails(specs, [len(display_name(s).split("/")) for s in specs], plain)
    names = list(labelled)
    for i, t in zip(plain, tails):
        names[i] = t
    for i, r in enumerate(reports):
        rule = (r.get("scoring") or {}).get("rule")
        if rule is not None:
            names[i] += f" (rescored: {rule})"
    settings = [_settings(r) for r in reports]
    if "dtype" not in beside and len({s["dtype"] for s in settings}) > 1:
        names = [f"{x} ({_setting(r, 'dtype') or 'dtype n/a'})" for x, r in zip(names, reports)]
    if "add_bos" not in beside and len({s["add_bos"] for s in settings}) > 1:
        names = [f"{x} {'+BOS' if s['add_bos'] else 'no BOS'}" for x, s in zip(names, settings)]

    def looks() -> list[tuple]:
        return [(x, *(s[k] for k in beside)) for x, s in zip(names, settings)]

    folders = [_folder_of(r) or "" for r in reports]
    alike: dict[tuple, list[int]] = {}
    look = looks()
    for i in _colliding(look):
        if folders[i]:
            alike.setdefault(look[i], []).append(i)
    for same in alike.values():
        for i, t in zip(same, _shortest_tails(folders, [1] * n, same)):
            names[i] += f" [{t}]"
    for i in _colliding(looks()):
        key = reports[i].get("_key")
        if key:
            names[i] += f" [{str(key)[:12]}]"
    for i in _colliding(looks()):
        names[i] += f" #{i + 1}"
    return names


BACKEND_NAMES = {"transformers": "transformers", "llama.cpp": "llama.cpp", "vllm": "vLLM", "server": "server"}


def backend_name(backend) -> str:
    """A report's config.backend as people write it (transformers, llama.cpp, vLLM, server); a report
    from before backends were recorded is a transformers run."""
    return "transformers" if backend is None else BACKEND_NAMES.get(str(backend), str(backend))


# ---------------------------------------------------------------- writing


def plain_name(name: str) -> str:
    """`name` if it is one plain file name (no folder part, not "." or "..", no NUL); else ReportError."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise ReportError(f"{name!r} is not a plain file name; refusing to write it")
    return name


def non_regular(path: str | Path) -> str | None:
    """What `path` is if it exists and is not a regular file ("a symbolic link", "a directory", ...), else None.
    Links are not followed: a link is reported as one, whatever it points to."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    return None if stat.S_ISREG(mode) else untrusted.kind_of(mode)


def check_outputs(paths, force: bool, out_dir: str | Path | None = None) -> list[Path]:
    """Refuse, with one line and before any work is done, to write `paths`: an `out_dir` that is a
    file, two paths naming one file, a path that is a directory, a symbolic link or any other
    non-regular file (even with --force), or one that exists (unless `force`). Returns the paths."""
    paths = [Path(p) for p in paths]
    if out_dir is not None:
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise ReportError(f"--out-dir {out_dir} is a file, not a directory")
    seen: dict[Path, Path] = {}
    for p in paths:
        key = p.resolve()
        if key in seen:
            raise ReportError(f"{seen[key]} and {p} name the same file")
        seen[key] = p
    for p in paths:
        kind = non_regular(p)
        if kind == "a directory":
            raise ReportError(f"{p} is a directory; give a file name")
        if kind:
            raise ReportError(f"{p} is {kind}, not a regular file; base-bench does not write through it (remove it)")
        if p.exists() and not force:
            raise ReportError(f"{p} already exists; add --force to overwrite it, or pick another name")
    return paths


def refuse_existing(paths, force: bool) -> None:
    """ReportError if any output already exists (unless --force), or is a directory or a link."""
    check_outputs(paths, force)


def write_outputs(files: dict, say=None) -> None:
    """Write each {path: str or bytes} atomically (its folder made first), in order; `say` (e.g.
    print) is told "wrote PATH" after each. StorageError (one line) if one cannot be written; the
    files written before it stay."""
    for path, data in files.items():
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data)
        except OSError as e:
            raise StorageError(f"could not write {path}: {e.strerror or e}") from None
        if say is not None:
            say(f"wrote {path}")


def write_atomic(path: str | Path, data: str | bytes, redacted: bool = True) -> None:
    """Write `data` to a new temporary file beside `path`, fsync it, and rename it over `path`.

    A reader (or a crash) sees the old file or the new one, never a part of either. The temporary
    file is made by mkstemp (O_EXCL, a random name, so no planted link is followed and no other
    writer shares it), with the mode a plain open would give (0666 less the umask; where there is
    no os.fchmod, as on Windows, the mode mkstemp gave). The folder must
    exist. If the write fails (a full disk, an I/O error), the OSError is raised and the temporary
    file is removed. Every secret registered with base_bench.redact is removed from `data` first,
    unless `redacted` is False: bytes that must be written as they are (`store export` writes back
    the report.json it stored and checked, which a process's secrets never were part of).
    """
    from ..redact import redact_bytes

    path = Path(path)
    blob = data.encode("utf-8") if isinstance(data, str) else data
    blob = redact_bytes(blob) if redacted else blob
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        try:
            if hasattr(os, "fchmod"):  # not on Windows, where a file's mode is only its read-only flag
                os.fchmod(fd, 0o666 & ~_umask())
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


def temp_files(folder: str | Path, name: str) -> list[Path]:
    """The temporary files that write_atomic (or an older base-bench, `<name>.tmp`) may have left
    beside `folder/name` when it was killed mid-write."""
    folder = Path(folder)
    found = list(folder.glob(f"{glob.escape(name)}.*{TEMP_SUFFIX}"))
    old = folder / (name + TEMP_SUFFIX)
    return found + ([old] if os.path.lexists(old) and old not in found else [])


def _umask() -> int:
    """The process's umask, read without changing it where /proc allows (os.umask would, for an instant)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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


def html_page(title: str, body: list[str], css: str = "") -> str:
    """A self-contained HTML page (inline style, PAGE_CSS and then `css`; images are inlined by the
    caller) around `body`."""
    style = PAGE_CSS + ("\n" + css if css else "")
    head = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{style}</style></head><body>",
    ]
    return "\n".join(head + list(body) + ["</body></html>"]) + "\n"

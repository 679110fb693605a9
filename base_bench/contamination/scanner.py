"""`contamination scan`: find the benchmark's items in a training corpus, on datatrove.

    rep = scan(["corpus/"], "scan-out", data=".", workers=2)              # local executor, 2 processes
    rep = scan(paths, out, write_clean="clean/", skip_bad=True)
    scan(paths, out, executor="slurm", executor_options={"partition": "cpu", "time": "04:00:00"})

It checks everything it can before any work starts (the out-dir is new, the data is the card's
schema, every path exists and is a corpus format), builds the item index, writes the plan to
OUT/work/plan.json, then runs up to three datatrove stages under one executor:

1. scan: the corpus readers and ItemNGramFilter (steps.py), `tasks` tasks over `workers` processes;
2. clean (with write_clean): CleanCopy writes every unit without its flagged documents;
3. report (one task): contamination.json, contamination.md and documents.jsonl.

`executor="local"` is datatrove's LocalPipelineExecutor (its own process pool); "slurm" and "ray"
are its SlurmPipelineExecutor and RayPipelineExecutor, with `executor_options` passed to them as
keyword arguments (e.g. partition, time, cpus_per_task, sbatch_args for Slurm). Locally and on Ray
the stages run one after the other and scan() returns the report; on Slurm they are submitted as
jobs that depend on each other, and scan() returns None at once (OUT/contamination.json appears
when the last job ends). OUT/index/base_bench.index.hashes holds the N-grams in datatrove's
NGramsDecontFilter format, for use in another datatrove pipeline (docs/contamination.md).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import time
from pathlib import Path

from ..errors import ReportError, UsageError
from ..version import __version__
from .canary import canaries_of
from .corpus import MAX_LINE_BYTES, CorpusError, discover
from .normalize import N_MAX, N_MIN, PERCENTILE
from .results import DIRTY_RULE

EXECUTORS = ("local", "slurm", "ray")
_SET_BY_US = {"self", "pipeline", "tasks", "workers", "logging_dir", "depends", "skip_completed"}
_DEVNULL = None
_INDEXES: dict = {}


def _executor_class(kind: str):
    if kind == "local":
        return _QuietLocalExecutor
    if kind == "slurm":
        from datatrove.executor.slurm import SlurmPipelineExecutor

        return SlurmPipelineExecutor
    if kind == "ray":
        from datatrove.executor.ray import RayPipelineExecutor

        return RayPipelineExecutor
    raise UsageError(f"--executor {kind!r}: choose local, slurm or ray")


def require_extra() -> None:
    """UsageError unless datatrove and the readers' libraries are installed (the `contamination` extra)."""
    import importlib.util

    missing = [
        m for m in ("datatrove", "regex", "orjson", "pyarrow", "zstandard") if importlib.util.find_spec(m) is None
    ]
    if missing:
        raise UsageError(f"the corpus scan needs {', '.join(missing)}: pip install 'base-bench[contamination]'")


def check_executor_options(kind: str, options: dict) -> None:
    """UsageError naming an option the executor does not take (or a Slurm run without partition/time)."""
    cls = _executor_class(kind)
    params = inspect.signature(cls.__init__).parameters
    allowed = sorted(set(params) - _SET_BY_US)
    for k in options:
        if k not in params or k in _SET_BY_US:
            raise UsageError(
                f"--executor-option {k}: {cls.__name__} takes none such "
                f"(it takes {', '.join(allowed)}; tasks and workers have their own flags)"
            )
    if kind == "slurm":
        missing = [k for k in ("partition", "time") if k not in options]
        if missing:
            raise UsageError("--executor slurm needs " + " and ".join(f"--executor-option {k}=..." for k in missing))


def _fresh_dir(path: Path, flag: str) -> None:
    from ..results.reports_io import refuse_existing

    if path.exists() and not path.is_dir():
        raise ReportError(f"{flag} {path}: a file is in the way; give a new directory")
    if flag == "--out-dir":
        refuse_existing([path / "contamination.json", path / "contamination.md"], force=False)
    if path.is_dir() and any(path.iterdir()):
        raise ReportError(f"{flag} {path} already holds files; give a new directory (nothing is overwritten)")


def _inside(a: Path, b: Path) -> bool:
    a, b = a.resolve(), b.resolve()
    return a == b or b in a.parents


def _check_overlaps(out: Path, clean: Path | None, corpus: list[Path]) -> None:
    """UsageError for folders that overlap where files would be lost or mixed: --out-dir and
    --write-clean (either inside, or equal to, the other: a corpus file named documents.jsonl would
    replace the report's, or the reverse), --write-clean and a corpus path (the clean copy would be
    written among the files being read, or a later scan would read it), and --out-dir inside a corpus
    folder (the flagged documents' excerpts in documents.jsonl would become part of the corpus)."""
    if clean is not None and (_inside(out, clean) or _inside(clean, out)):
        raise UsageError(
            f"--out-dir {out} and --write-clean {clean} overlap; give two separate folders (the clean copy "
            "and the report would be written over each other)"
        )
    for p in corpus:
        if clean is not None and ((p.is_dir() and _inside(clean, p)) or _inside(p, clean)):
            raise UsageError(f"--write-clean {clean} overlaps the corpus path {p}; write the clean copy elsewhere")
        if p.is_dir() and _inside(out, p):
            raise UsageError(
                f"--out-dir {out} is inside the corpus path {p}; write the report elsewhere (its excerpts of "
                "flagged documents would become part of the corpus)"
            )


def _item_rows(index, items) -> list[dict]:
    has = {g.item for g in index.grams if g.kind != "wrong"}
    return [
        {"id": it.id, "category": it.category, "difficulty": it.difficulty, "words": iw.length, "matchable": i in has}
        for i, (it, iw) in enumerate(zip(items, index.items))
    ]


def _arrow_rows(path: str) -> int:
    import pyarrow as pa

    with pa.memory_map(path) as src, pa.ipc.open_stream(src) as r:
        return sum(b.num_rows for b in r)


def _readers(corpus, work: Path, text_key: str, id_key: str, skip_bad: bool, skipped: list, max_line_bytes: int):
    """One strict datatrove reader per format, each over its files (listed in work/paths-<fmt>.txt)."""
    from . import steps

    by_fmt: dict[str, dict[str, dict]] = {}
    for u in corpus.units:
        if u.format == "hf":
            row = 0
            try:
                for f in u.files:
                    by_fmt.setdefault("hf", {})[f] = {"unit": u.index, "display": u.display, "first_row": row}
                    row += _arrow_rows(f)
            except Exception as e:  # noqa: BLE001 - a damaged .arrow file
                msg = f"{u.display}: {Path(f).name} is not a readable Arrow file ({steps._short(e)})"
                if not skip_bad:
                    raise CorpusError(msg) from None
                skipped.append({"unit": u.index, "file": u.display, "error": msg})
                for g in u.files:
                    by_fmt["hf"].pop(g, None)
        else:
            by_fmt.setdefault(u.format, {})[u.path] = {"unit": u.index, "display": u.display}
    classes = {
        "jsonl": steps.CorpusJsonlReader,
        "parquet": steps.CorpusParquetReader,
        "hf": steps.CorpusArrowReader,
        "txt": steps.TextFileReader,
    }
    readers, n_files = [], 0
    for fmt in ("jsonl", "parquet", "hf", "txt"):
        files = by_fmt.get(fmt)
        if not files:
            continue
        root = os.path.commonpath([os.path.dirname(p) for p in files])
        units = {os.path.relpath(p, root): v for p, v in files.items()}
        listing = work / f"paths-{fmt}.txt"
        listing.write_text("".join(r + "\n" for r in units), encoding="utf-8")
        kw = {} if fmt == "txt" else {"text_key": text_key, "id_key": id_key}
        kw["max_line_bytes"] = max_line_bytes
        readers.append(classes[fmt](root, str(listing), units, str(work), skip_bad, **kw))
        n_files += len(files)
    return readers, n_files


def scan(
    paths,
    out_dir,
    *,
    data=None,
    text_key: str = "text",
    id_key: str = "id",
    write_clean=None,
    skip_bad: bool = False,
    workers: int = 1,
    tasks: int | None = None,
    executor: str = "local",
    executor_options: dict | None = None,
    max_documents: int = 20,
    max_line_bytes: int = MAX_LINE_BYTES,
    verbose: bool = False,
    progress=None,
) -> dict | None:
    """Scan `paths` for the items of `data` ("bundled" or None: the bundled set, "hub": the official
    file, or a path, as --data takes them; its line goes to `progress` first). Returns the
    contamination.json dict (None on Slurm, which only submits)."""
    from ..items.datasource import open_data
    from .index import ItemIndex

    say = progress or (lambda s: None)
    require_extra()
    options = dict(executor_options or {})
    check_executor_options(executor, options)
    if workers < 1 or (tasks is not None and tasks < 1):
        raise UsageError("--workers and --tasks must be 1 or more")
    if max_line_bytes < 1:
        raise UsageError("--max-line-bytes must be 1 or more")
    out = Path(out_dir).expanduser()
    clean = Path(write_clean).expanduser() if write_clean else None
    _check_overlaps(out, clean, [Path(p).expanduser() for p in paths])
    _fresh_dir(out, "--out-dir")
    if clean is not None:
        _fresh_dir(clean, "--write-clean")
    source = open_data(data, say=say)
    corpus = discover([str(p) for p in paths])
    items = list(source.dataset.items)
    key = source.dataset.sha256
    if key not in _INDEXES:  # the same data file in one process (tests, notebooks) is indexed once
        _INDEXES.clear()
        _INDEXES[key] = ItemIndex.build(items)
    index = _INDEXES[key]
    canaries = canaries_of(items)

    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    skipped: list = []
    readers, n_files = _readers(corpus, work, text_key, id_key, skip_bad, skipped, max_line_bytes)
    tasks = tasks or max(1, min(n_files, 4 * workers))
    settings = {
        "n": index.n,
        "p5_words": index.p5,
        "n_rule": f"GPT-3's rule: the {PERCENTILE}th-percentile item length in words (context + correct continuation, "
        f"normalised; nearest rank) is {index.p5}, clamped to {N_MIN}..{N_MAX}",
        "min_gram_words": N_MIN,
        "normalisation": "lowercase; punctuation and symbols (Unicode P* and S*) deleted; split on whitespace",
        "dirty_rule": DIRTY_RULE,
        "llama2_rule": "Llama 2 (App. A.6) on words: clean < 20% of the item's words covered by matches, not clean "
        ">= 20%, not dirty < 80%, dirty >= 80%",
        "text_key": text_key,
        "id_key": id_key,
        "executor": executor,
        "executor_options": options,
        "workers": workers,
        "tasks": tasks,
        "skip_bad": skip_bad,
        "write_clean": str(clean) if clean else None,
        "max_documents_per_item": max_documents,
        "max_line_bytes": max_line_bytes,
        "n_grams": {k: sum(g.kind == k for g in index.grams) for k in ("context", "answer", "leak", "wrong")},
    }
    data_rec = {k: source.record[k] for k in ("source", "path", "sha256", "kind", "description")}
    data_rec["n_items"] = len(items)
    plan = {
        "base_bench_version": __version__,
        "data": data_rec,
        "settings": settings,
        "corpus": {
            "units": [dict(u.to_json(), path=u.path, files=list(u.files)) for u in corpus.units],
            "ignored": list(corpus.ignored),
        },
        "items": _item_rows(index, items),
        "canaries": [c.text for c in canaries],
        "skipped_at_plan": skipped,
    }
    (work / "plan.json").write_text(
        json.dumps(plan, indent=1, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8"
    )
    _write_datatrove_index(index, out / "index")

    from .steps import CleanCopy, ItemNGramFilter, ScanReport

    stages = [("scan", readers + [ItemNGramFilter(index, canaries, str(work))], tasks)]
    if clean is not None:
        units = [u for u in plan["corpus"]["units"]]
        clean_step = CleanCopy(units, str(work), str(clean), max_line_bytes)
        stages.append(("clean", [clean_step], max(1, min(len(units), tasks))))
    stages.append(("report", [ScanReport(str(out))], 1))
    say(
        f"scanning {len(corpus.units)} file(s), {corpus.size / 1e6:.1f} MB, for {len(items)} items (N = {index.n}) "
        f"with {executor} executor: {tasks} task(s), {workers} worker(s)"
    )
    return _run(stages, executor, options, workers, out, work, verbose)


def _write_datatrove_index(index, folder: Path) -> None:
    hashes = index.datatrove_hashes()
    folder.mkdir(parents=True, exist_ok=True)
    hashes.tofile(folder / "base_bench.index.hashes")


def _raise_task_errors(work: Path) -> None:
    errs = sorted((work / "errors").glob("*.json")) if (work / "errors").is_dir() else []
    if errs:
        raise CorpusError(json.loads(errs[0].read_text(encoding="utf-8"))["error"])


def _run(stages, kind, options, workers, out: Path, work: Path, verbose: bool):
    from datatrove.utils.logging import logger, setup_default_logger

    cls = _executor_class(kind)
    if not verbose:
        logger.remove()
        (out / "logs").mkdir(parents=True, exist_ok=True)
        logger.add(str(out / "logs" / "main.log"), level="DEBUG")
    try:
        prev = None
        executors = []
        for name, pipeline, tasks in stages:
            kw = dict(options)
            if kind == "slurm":
                kw.setdefault("job_name", f"base-bench-contamination-{name}")
                kw["depends"] = prev
            ex = cls(
                pipeline=pipeline,
                tasks=tasks,
                workers=workers if name != "report" else 1,
                logging_dir=str(out / "logs" / name),
                **kw,
            )
            if kind == "local":
                ex.quiet = not verbose
            executors.append(ex)
            prev = ex
        if kind == "slurm":
            executors[-1].run()  # submits every stage, each job depending on the one before
            return None
        for (name, _, _), ex in zip(stages, executors):
            t0 = time.perf_counter()
            try:
                ex.run()
            finally:
                _raise_task_errors(work)
            if name == "scan":
                (work / "timing.json").write_text(
                    json.dumps({"scan_wall_s": round(time.perf_counter() - t0, 3)}, allow_nan=False) + "\n"
                )
        return json.loads((out / "contamination.json").read_text(encoding="utf-8"))
    finally:
        if not verbose:
            setup_default_logger()


try:
    from datatrove.executor.local import LocalPipelineExecutor
except ImportError:  # the extra is not installed; scan() says so before it gets here
    LocalPipelineExecutor = object


class _QuietLocalExecutor(LocalPipelineExecutor):
    """datatrove's LocalPipelineExecutor; with `quiet`, a task's log goes to its log file only (datatrove
    also prints it, and any error's traceback, on stderr)."""

    quiet = False

    def _run_for_rank(self, rank: int, local_rank: int = 0, node_rank: int = -1):
        global _DEVNULL
        if not self.quiet:
            return super()._run_for_rank(rank, local_rank, node_rank)
        if _DEVNULL is None:
            _DEVNULL = open(os.devnull, "w")
        old, sys.stderr = sys.stderr, _DEVNULL
        try:
            return super()._run_for_rank(rank, local_rank, node_rank)
        finally:
            sys.stderr = old

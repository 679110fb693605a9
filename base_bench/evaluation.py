"""Score a model that is already loaded: the one orchestration behind the library and the CLI.

    from base_bench import evaluate
    report = evaluate(model, tokenizer)                          # bundled set ("bundled"); writes nothing
    report = evaluate(model, tokenizer, "hub", out_dir="runs/m")  # official data; the four run files
    report = evaluate(model, tokenizer, "my/dir", limit=16, out_dir="runs/m", resume=True)
    report = evaluate(model, tokenizer, limit_per_category=2)     # a smoke test of every category
    report = evaluate(model, tokenizer, out_dir="runs/m", store="sqlite:///runs/bench.db", step=4000)  # + a row

`evaluate` returns the dict that report.json holds. The command line (`cli.py`) only parses flags,
loads the model and calls this function, so both give the same report for the same model, data and
settings. The steps, each done in one place:

1. data: `datasource.open_data` loads and checks it (schema, composition, checksum), and the first
   line said (on stderr with `progress`, else as an INFO note) names it;
2. model and tokenizer: the model becomes a `Backend` (backends/: transformers or llama.cpp), which
   checks it and answers every question about it; the tokenizer's ids must fit its vocabulary;
3. run store (only with `out_dir`): refuses to overwrite a run, checks the `resume` signature, locks
   the out-dir against other processes, then saves each item's result the moment it is scored;
4. scoring: the packed scorer (after a start-up check against the plain one), length-sorted
   batches of `batch_size` items or of at most `batch_tokens` fed positions, several items packed
   into a row (engine/packing.py), halving the batch on out-of-memory;
5. report: `report.build_report`, the labels (`group`, `step`, `tokens`, `tags`) and `scored_at`,
   then report.json and predictions.md (only with `out_dir`);
6. results store (only with `store`): the run's row, written by rank 0 once the files are written.

Called on every rank of an initialised torch.distributed process group (torchrun, or a training
job's own), each rank with its model (a replica, or its FSDP shards), it shares the items out
between the ranks (see `distributed.py`), returns the full report on every rank, and only rank 0
writes out_dir. An error on any rank, before or during scoring, is raised on every rank, and the
ranks must agree on the data checksum, the model and the settings before anything is scored.

The model is left as it was found: the training flag of every module is restored (also after an
exception), nothing is computed with gradients, and no weight is copied, moved or cast. The extra
memory is one batch's activations. Bad input raises a `BaseBenchError` subclass before anything is
written.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import sys
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from .backends import Backend, as_backend
from .backends.adapters import base_model_note, same_base
from .backends.base import Device
from .backends.identity import tokenizer_fingerprint
from .backends.prompt_logprobs import loosened
from .engine.batching import attempt, auto_batching
from .engine.distributed import Ranks, error_class, share
from .engine.packing import Batching, batch_cost, longest_first
from .engine.runstore import RunStore, signature_hash
from .engine.scoring import Encoded, ScoringError, encode_item, set_row_length
from .errors import BaseBenchError, ModelError, StoreError, UsageError
from .items import card
from .items.datasource import DataSource, open_data
from .items.records import ChoiceScore, Item, ItemResult, pick
from .results.checked import MAX_ABS_LOGPROB
from .results.labels import Labels
from .results.report import build_report, dumps, render_markdown
from .version import __version__

SCORING_VERSION = "mean_logprob/2"  # bump when a change to the scoring code can change a score
# /2: the packed scorer cuts its 4D mask to a model's sliding window (before, items past the window
# were scored as if there were none); several items per row change no score beyond float rounding
DEFAULT_BATCH_SIZE = 8  # items per pass when neither batch_size nor batch_tokens is given
log = logging.getLogger("base_bench")


@dataclass(frozen=True)
class Selection:
    """Which items a run scores: all; the first `limit` in file order (which is category order, so a
    small limit is one category); or the first `per_category` of each category, in file order.
    Neither changes a score, so neither is in the resume signature."""

    limit: int | None = None
    per_category: int | None = None

    def of(self, items) -> list[Item]:
        if self.per_category is not None:
            seen: dict[str, int] = {}
            out = []
            for it in items:
                seen[it.category] = seen.get(it.category, 0) + 1
                if seen[it.category] <= self.per_category:
                    out.append(it)
            return out
        return list(items[: self.limit] if self.limit else items)

    def flag(self) -> str:
        """How the run's reasons name it: "--limit 8" or "--limit-per-category 2"."""
        return f"--limit-per-category {self.per_category}" if self.per_category is not None else f"--limit {self.limit}"


@dataclass(frozen=True)
class Setup:
    """What every rank works out on its own, before any collective and before anything is written."""

    source: DataSource
    items: list[Item]
    reasons: list[str]
    backend: Backend
    info: dict
    identity: dict
    load_s: float | None
    window: int | None
    encoded: list[Encoded]
    pad_id: int
    bos_note: str | None
    adapter_note: str | None
    chat_note: str | None


def evaluate(
    model,
    tokenizer,
    data=None,
    *,
    limit: int | None = None,
    limit_per_category: int | None = None,
    batch_size: int | str | None = None,
    batch_tokens: int | None = None,
    add_bos: bool = False,
    out_dir: str | Path | None = None,
    resume: bool = False,
    progress: bool = True,
    model_info: dict | None = None,
    store: str | None = None,
    group: str | None = None,
    step: int | None = None,
    tokens: int | None = None,
    tags=(),
) -> dict:
    """Score `model` on the benchmark and return the report (the dict report.json holds).

    model       a transformers causal LM, already loaded, on any device and in any dtype (it may be
                wrapped in DDP or FSDP, or be a peft PeftModel: scored with its adapter applied, as
                PEFT runs it, and named in config.model.adapter); or a `llama_cpp.Llama` (scored by
                llama.cpp itself); or any `base_bench.backends.Backend`. It is used as it is and
                left as it was found.
    tokenizer   its tokenizer.
    data        "bundled" or None: the bundled set shipped in the package (no network, no token);
                "hub": the official gated file, fetched with HF_TOKEN or the saved `hf auth login`
                token; any other string or a Path: a JSONL file, or a directory holding
                data/test.jsonl (the command line's --data takes the same three). The first line
                said names the data: on stderr when `progress` is on, else as an INFO note of the
                "base_bench" logger.
    limit       score only the first N items in file order, which is category order (the run is
                then not official).
    limit_per_category  instead of limit: score only the first N items of each category, in file
                order, a smoke test that touches every category (not official either).
    batch_size  items per forward pass (default 8), or "auto": on a GPU the largest token budget
                that fits, on a CPU 8 items. Scores do not depend on it.
    batch_tokens  instead of batch_size: at most this many positions fed per forward pass (rows
                times the longest row, padding included), with several items packed into a row.
                Give batch_size or batch_tokens, not both.
    add_bos     put the tokenizer's BOS before every context (diagnostic; not official).
    out_dir     write report.json, predictions.md, partial_results.jsonl and run_config.json there;
                None writes nothing at all. Under several ranks, rank 0 writes.
    resume      continue the run in out_dir, scoring only unfinished items; refused if the model,
                data or scoring settings differ.
    progress    show a progress bar on stderr (rank 0 only).
    model_info  what the report records about where the model came from (the CLI passes the file
                or Hub id it loaded, and its identity for `resume`); by default the model's
                `name_or_path` and a fingerprint of its weights and tokenizer.
    store       also write the run's result to this results store (base_bench/store):
                sqlite:///PATH, PATH.db or postgresql://USER:PASSWORD@HOST/DB. Its URL is checked
                before anything is scored (not its server), and written nowhere; the row is written
                by rank 0 once the run's files are, and replaces the same run's row.
    group, step, tokens, tags   label the run: a group name (a training run, a sweep), its training
                step and tokens seen, free tags. They go into the report (`group`, `training_step`,
                which `base-bench trajectory` reads, `tokens_seen`, `tags`) and so into the store.

    Raises a BaseBenchError subclass, with a one-line message, for data, a model, a tokenizer or an
    out-dir that cannot be used (or is in use by another process); nothing is written then. A run
    file that cannot be written (a full disk, an I/O error) raises StorageError; the items saved
    before it stay, and resume=True continues. A store that cannot be written at the end raises
    StoreError after the run's files are written (`base-bench store ingest OUT_DIR` adds the run
    later); the report is on the exception, as its `report`.
    """
    with ExitStack() as held:  # the out-dir lock (rank 0), from store.begin until this returns or raises
        return _evaluate(
            held,
            model,
            tokenizer,
            data,
            limit=limit,
            limit_per_category=limit_per_category,
            batch_size=batch_size,
            batch_tokens=batch_tokens,
            add_bos=add_bos,
            out_dir=out_dir,
            resume=resume,
            progress=progress,
            model_info=model_info,
            results_store=store,
            labels=(group, step, tokens, tags),
        )


def _evaluate(
    held: ExitStack,
    model,
    tokenizer,
    data,
    *,
    limit,
    limit_per_category,
    batch_size,
    batch_tokens,
    add_bos,
    out_dir,
    resume,
    progress,
    model_info,
    results_store,
    labels,
) -> dict:
    ranks = Ranks.current()
    with ranks.together():
        labels = Labels.make(*labels)  # UsageError before anything is read or written
        url = check_store_url(results_store)  # its URL read, nothing connected to
        setup = _setup(
            model,
            tokenizer,
            data,
            Selection(limit, limit_per_category),
            batch_size,
            batch_tokens,
            add_bos,
            model_info,
            _say(progress, ranks.is_main),
        )
    backend = setup.backend
    identity = _shared_identity(setup.identity, backend, ranks)
    signature = run_signature(
        identity,
        setup.source.dataset.sha256,
        add_bos,
        backend.dtype,
        backend.device,
        backend.name,
        getattr(backend, "signature_settings", None),
    )
    ranks.check_same(
        {
            "data SHA-256": setup.source.dataset.sha256,
            "model fingerprint": signature_hash(signature),
            "settings (limit, limit per category, batch size, batch tokens, add_bos, resume)": (
                limit,
                limit_per_category,
                batch_size,
                batch_tokens,
                bool(add_bos),
                resume,
            ),
            "number of items": len(setup.items),
        }
    )

    store = RunStore(Path(out_dir).expanduser()) if out_dir is not None and ranks.is_main else None
    done: dict[str, ItemResult] = {}
    with ranks.together():
        if store:
            store.check(signature, resume)  # read-only: a refused run must not even create the lock file
            held.enter_context(store.lock())  # one process per out-dir; RunError naming the holder if not
            done = store.begin(signature, {"model": setup.info.get("spec"), "out_dir": str(store.dir)}, resume)

    for note in (setup.bos_note, setup.chat_note, setup.adapter_note):
        if note and ranks.is_main:
            log.warning(note)
    items, encoded = setup.items, setup.encoded
    by_id = {it.id: it for it in items}
    enc_by_id = {e.id: e for e in encoded}
    with backend.held():
        done = {
            k: ItemResult.from_json(v) for k, v in ranks.broadcast({k: r.to_json() for k, r in done.items()}).items()
        }
        if done and ranks.is_main:
            log.info(
                f"resuming {store.dir}: {sum(1 for i in items if i.id in done)} of {len(items)} items already scored"
            )
        appenders = _appenders(store, out_dir, ranks)

        order = longest_first(encoded)
        scorer, packing = backend.pick_scorer(order, setup.pad_id, ranks)
        reasons = [*setup.reasons, *filter(None, [loosened(packing)])]  # --max-spread above the card's limit
        row_length = order[0].packed_length if order else 1  # the run's longest item: rows are packed up to it
        plan = _batching(batch_size, batch_tokens, scorer, order, row_length, backend.device, ranks)

        def record(results: list, own: bool) -> None:
            """Keep finished results; save them at once (rank 0 saves its own and, when the other
            ranks cannot reach its out-dir, theirs; a rank that shares it saves its own)."""
            rows = [
                ItemResult(
                    i,
                    tuple(ChoiceScore(lp, n) for lp, n in sc),
                    pick([ChoiceScore(lp, n) for lp, n in sc]),
                    by_id[i].label,
                    enc_by_id[i].truncated,
                )
                for i, sc in results
            ]
            if rows and appenders.get("own" if own else "others"):
                appenders["own" if own else "others"].append_many(rows)
            done.update((r.id, r) for r in rows)

        todo = [e for e in order if e.id not in done]
        t0 = time.perf_counter()
        plan, wait_s = _score_all(
            scorer, todo, plan, row_length, backend.device, ranks, record, done, progress and ranks.is_main, len(items)
        )
        score_s = time.perf_counter() - t0

    info = dict(setup.info)
    if identity.get("kind") == "in-memory":
        info["fingerprint"] = identity["fingerprint"]  # a sharded model's covers every rank's shard
    config = {
        "model": info,
        "backend": backend.name,
        "device": str(backend.device),
        "dtype": backend.dtype,
        "batch_size": DEFAULT_BATCH_SIZE if batch_size is None and batch_tokens is None else batch_size,
        "batch_tokens": batch_tokens,
        "batch_size_used": plan.items,
        "batch_tokens_used": plan.tokens,
        "row_length": getattr(scorer, "row_length", None),
        "add_bos": bool(add_bos),
        "threads": backend.threads,
        "world_size": ranks.world,
        "limit": limit,
        "limit_per_category": limit_per_category,
        "window": setup.window,
        "scorer": scorer.name,
        "packing_check": packing,
        "scoring_version": SCORING_VERSION,
        "runner": "base-bench",
        "runner_version": __version__,
        "signature_sha256": signature_hash(signature),
        "versions": backend.versions(),
        "bos_note": setup.bos_note,
        "chat_note": setup.chat_note,
        "adapter_note": setup.adapter_note,
    }
    timing = {
        "model_load_s": setup.load_s,
        "scoring_s": round(score_s, 3),
        "items_scored_this_session": len(todo),
        "items_per_s": round(len(todo) / score_s, 3) if todo and score_s > 0 else None,
        "rank_wait_s": round(wait_s, 3),
    }
    report = build_report(
        config=config,
        data=setup.source.record,
        official=not reasons,
        reasons=reasons,
        items=items,
        results=done,
        timing=timing,
        n_items_in_data=len(setup.source.dataset.items),
    )
    labels.apply(report)
    report["scored_at"] = _now()
    text = dumps(report)
    if store:
        store.write_text("report.json", text)
        store.write_text("predictions.md", render_markdown(report))
    if url is not None:
        write_row(url, report, text, out_dir, ranks)
    return report


def check_store_url(url) -> str | None:
    """The results store URL `url` (a str, a Path to a .db file, or None for no store), checked
    before anything is scored: UsageError for one that names no store, StoreError for a store that
    no run could write (PostgreSQL without psycopg). Nothing is connected to, and a SQLite file in a
    folder that is not there yet is let through (the run may make it: runs/bench.db beside
    runs/<model>); a store still out of reach at the end is the end's StoreError."""
    if url is None:
        return None
    if isinstance(url, Path):
        url = str(url)
    if not isinstance(url, str):
        raise UsageError(f"store must be a store URL (a str) or None, not {type(url).__name__}")
    from .store import open_store, shown_url

    try:
        open_store(url).dispose()
    except StoreError:
        if not shown_url(url).startswith("sqlite:"):
            raise
    return url


def _now() -> str:
    from .store.ingest import now

    return now()


def write_row(url: str, report: dict, text: str, out_dir, ranks: Ranks) -> None:
    """Write the run's row to the results store (rank 0; every rank calls it), with the bytes
    report.json holds (`text`, redacted as the file is), its source the folder `out_dir`; a store
    that cannot be written is a StoreError on every rank, raised after the run's files are written,
    with the report on it (`exc.report`) and the store's own one line (`exc.why`)."""
    from .redact import redact_bytes
    from .store import open_store, put

    where = Path(out_dir).expanduser().resolve() if out_dir is not None else None
    try:
        with ranks.together():
            if ranks.is_main:
                try:
                    db = open_store(url)
                    try:
                        put(db, report, source=str(where) if where else "evaluate()", raw=redact_bytes(text.encode()))
                    finally:
                        db.dispose()
                except StoreError as exc:
                    why = str(exc)
                    if where is not None:
                        then = f"the run's files are in {where}; `base-bench store ingest {where}` adds it later"
                    else:
                        then = "the run has no out_dir: write the report (the exception's `report`) to add it later"
                    err = StoreError(f"the run was not stored: {why}; {then}")
                    err.why = why
                    raise err from None
    except StoreError as exc:
        exc.report = report
        if not hasattr(exc, "why"):
            exc.why = str(exc)
        raise


def _say(progress: bool, is_main: bool):
    """Where the line naming the data goes: stderr beside the progress bar, else an INFO note (shown
    when the "base_bench" logger is at INFO, as the command line sets it); rank 0 only."""
    if not is_main:
        return None
    if progress:
        return lambda line: print(line, file=sys.stderr, flush=True)
    return log.info


def _setup(
    model, tokenizer, data, selection: Selection, batch_size, batch_tokens, add_bos, model_info, say=None
) -> Setup:
    """Every check that needs no other rank and writes nothing: arguments, data, model, tokenizer.
    Data opened here is named by a line through `say` (a DataSource was named by whoever opened it)."""
    check_arguments(selection.limit, batch_size, batch_tokens, selection.per_category)
    source = data if isinstance(data, DataSource) else open_data(data, say=say)
    _check_tokenizer(tokenizer)
    backend = as_backend(model, tokenizer)
    all_items = source.dataset.items
    items = selection.of(all_items)
    reasons = list(source.reasons)
    if len(items) < len(all_items):
        reasons.append(f"{selection.flag()} scored {len(items)} of {len(all_items)} items")
    elif selection.limit is not None or selection.per_category is not None:
        # every item scored, but a report with a limit is never read as official (results/checked.py)
        reasons.append(f"{selection.flag()} was given: an official run sets no limit")
    if add_bos:
        reasons.append("--add-bos changes the scoring configuration")
    info, identity, load_s = _model_record(backend, tokenizer, model_info)
    window = backend.window
    encoded = [encode_item(tokenizer, it, add_bos=add_bos, window=window) for it in items]
    pad_id = _check_vocabulary(encoded, tokenizer, backend.vocab_size)
    return Setup(
        source,
        items,
        reasons,
        backend,
        info,
        identity,
        load_s,
        window,
        encoded,
        pad_id,
        bos_note(backend, add_bos),
        _adapter_note(info),
        chat_note(tokenizer, backend, info),
    )


def _shared_identity(identity: dict, backend: Backend, ranks: Ranks) -> dict:
    """A sharded model's fingerprint covers every rank's shard, so it is the same on every rank;
    a replica's stays its own (and the ranks' replicas must then agree)."""
    if ranks.world == 1 or identity.get("kind") != "in-memory" or not backend.sharded:
        return identity
    shards = ranks.all_gather(identity["fingerprint"])
    return {
        **identity,
        "fingerprint": hashlib.sha256("+".join(shards).encode()).hexdigest()[:16],
        "shards": ranks.world,
    }


def _appenders(store: RunStore | None, out_dir, ranks: Ranks) -> dict:
    """Who saves which results. One process: it saves its own. Several: each rank saves its own
    results the moment it has them, if it sees rank 0's out-dir (checked with a marker file that
    rank 0 creates and removes); otherwise rank 0 saves every rank's results after each step."""
    if out_dir is None:
        return {}
    if ranks.world == 1:
        return {"own": store}
    marker = f".rank-check-{uuid.uuid4().hex}" if ranks.is_main else None
    if store:
        (store.dir / marker).touch()
    where, marker = ranks.broadcast((str(store.dir) if store else None, marker))
    sees = Path(where, marker).is_file()
    shared = ranks.agree(sees)
    if store:
        (store.dir / marker).unlink()
    if shared:
        return {"own": store or RunStore(where)}
    return {"own": store, "others": store} if store else {}


def run_signature(
    identity: dict,
    data_sha256: str,
    add_bos: bool,
    dtype: str,
    device,
    backend: str = "transformers",
    settings: dict | None = None,
) -> dict:
    """Everything that changes a score, as --resume checks it (batch size, threads, limit and
    limit_per_category do not).
    The backend is named for every backend but transformers, the first one, so that runs started
    before there were backends still resume. `settings`: a backend's settings that change its scores,
    given only where they differ from its defaults (llama.cpp's n_gpu_layers), for the same reason."""
    extra = {} if backend == "transformers" else {"backend": backend}
    extra.update(settings or {})
    return {
        "benchmark": f"BananaMind Base Bench {card.VERSION}",
        "scoring": SCORING_VERSION,
        "model": identity,
        "data_sha256": data_sha256,
        "add_bos": bool(add_bos),
        "dtype": dtype,
        "device_type": device_type(device),
        **extra,
    }


def device_type(device) -> str:
    """The kind of a device ("cpu", "cuda", "mps"), as torch.device(device).type gives it, of a
    torch.device, a backend's `Device` or a name such as "cuda:1", without importing torch."""
    kind = getattr(device, "type", None)
    return kind if isinstance(kind, str) else Device.parse(device).type


def check_arguments(limit, batch_size, batch_tokens=None, limit_per_category=None) -> None:
    """UsageError for a limit, batch size or token budget `evaluate` cannot take."""
    if limit is not None and not _whole(limit):
        raise UsageError(f"limit must be a whole number of 1 or more, or None; got {limit!r}")
    if limit_per_category is not None:
        if not _whole(limit_per_category):
            raise UsageError(
                f"limit_per_category must be a whole number of 1 or more, or None; got {limit_per_category!r}"
            )
        if limit is not None:
            raise UsageError(
                f"give limit (the first N items) or limit_per_category (the first N of each category), not both; "
                f"got limit={limit!r} and limit_per_category={limit_per_category!r}"
            )
    if batch_size not in (None, "auto") and not _whole(batch_size):
        raise UsageError(f"batch_size must be a whole number of 1 or more, or 'auto'; got {batch_size!r}")
    if batch_tokens is not None:
        if not _whole(batch_tokens):
            raise UsageError(f"batch_tokens must be a whole number of 1 or more, or None; got {batch_tokens!r}")
        if batch_size is not None:
            raise UsageError(
                f"give batch_size (items per pass) or batch_tokens (positions per pass), not both; got "
                f"batch_size={batch_size!r} and batch_tokens={batch_tokens!r}"
            )


def _whole(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1


def _batching(batch_size, batch_tokens, scorer, order, row_length: int, device, ranks: Ranks) -> Batching:
    """How the run is cut into passes: as asked, or for "auto" as `auto_batching` finds."""
    if batch_tokens is not None:
        return Batching(tokens=batch_tokens)
    if batch_size != "auto":
        return Batching(items=DEFAULT_BATCH_SIZE if batch_size is None else batch_size)
    set_row_length(scorer, row_length)
    plan = auto_batching(scorer, order, row_length, device, agree=ranks.agree)
    if plan is None:
        raise ScoringError(f"out of accelerator memory even for one row of at most {row_length} positions")
    if ranks.is_main:
        what = f"{plan.items} items" if plan.items is not None else f"{plan.tokens} tokens"
        log.info(f"--batch-size auto: {what} per pass on {device}")
    return plan


def bos_note(backend: Backend, add_bos: bool) -> str | None:
    """The note for a model whose tokenizer puts BOS first when the run follows the card (no BOS)."""
    if add_bos or not backend.expects_bos:
        return None
    return (
        "note: this model's tokenizer is set to put a BOS token first, and the card's rule scores "
        "without one, which can cost such a model a lot; to measure the gap, run again with --add-bos "
        "(a diagnostic, not official) and compare the two runs with `base-bench compare`"
    )


_TUNING_WORD = re.compile(r"(?<![A-Za-z0-9])(instruct|chat|it)(?![A-Za-z0-9])", re.IGNORECASE)


def tuning_word(name: str | None) -> str | None:
    """The word in a model's name that says it was instruction- or chat-tuned ("instruct", "chat",
    "it", as a word, any case), or None. Only the last part of a path or Hub id is read (a folder
    named it/ above the model says nothing), less a .gguf suffix: SmolLM2-135M-Instruct.Q4_1.gguf
    gives "instruct", gemma-3-1b-it "it", Llama-2-7b-chat-hf "chat", ChatGLM and instructive None."""
    if not isinstance(name, str) or not name.strip("/"):
        return None
    last = name.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1]
    last = last[:-5] if last.lower().endswith(".gguf") else last
    m = _TUNING_WORD.search(last)
    return m.group(1).lower() if m else None


def has_chat_template(tokenizer) -> bool:
    """The tokenizer carries a chat template (transformers' `chat_template`, a text or a dict of them)."""
    template = getattr(tokenizer, "chat_template", None)
    return bool(template) and isinstance(template, (str, dict))


def chat_note(tokenizer, backend: Backend, info: dict) -> str | None:
    """The note for a model that looks chat- or instruction-tuned: its tokenizer (or its GGUF file)
    carries a chat template, or its name says so (`tuning_word` of the --model value, of the name the
    weights were loaded from or the server reports, or of the GGUF file). Never a refusal: the card's
    scoring stands. A template alone is weaker evidence (some base models keep one), and says so."""
    template = has_chat_template(tokenizer) or bool(getattr(backend, "chat_template", False))
    names = (info.get("spec"), backend.model_name, (info.get("hub") or {}).get("file"), info.get("path"))
    word = next((w for w in map(tuning_word, names) if w), None)
    if not template and word is None:
        return None
    what = " and ".join(
        x
        for x in (
            "carries a chat template in its tokenizer" if template else None,
            word and f'has "{word}" in its name',
        )
        if x
    )
    though = ", though some base models keep a template too" if word is None else ""
    return (
        f"note: this model {what}, as chat- and instruction-tuned models do{though}; the card is for base "
        "models and scores the items as plain text, without a chat template, so such a model is measured "
        "outside the format it was tuned for (the run is scored and reported as usual)"
    )


def _check_tokenizer(tokenizer) -> None:
    if not callable(tokenizer) or not hasattr(tokenizer, "eos_token_id"):
        raise ModelError(f"tokenizer must be a transformers tokenizer, not {type(tokenizer).__name__}")


def _check_vocabulary(encoded, tokenizer, rows: int) -> int:
    """Raise ModelError if a token id does not fit the model's `rows` embeddings; return the id to pad with."""
    for e in encoded:
        top = max(max(e.context), *(max(c) for c in e.continuations))
        if top >= rows:
            raise ModelError(
                f"the tokenizer gives token id {top} (item {e.id}), but the model's vocabulary has "
                f"{rows} entries; is this the model's own tokenizer?"
            )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return pad if isinstance(pad, int) and 0 <= pad < rows else 0  # padding is masked: any valid id will do


def _model_record(backend: Backend, tokenizer, given: dict | None) -> tuple[dict, dict, float | None]:
    """(config.model for the report, identity for the resume signature, load seconds if known)."""
    info = dict(given or {})
    identity = info.pop("identity", None)
    load_s = info.pop("load_s", None)
    if identity is None:
        fp = f"{backend.fingerprint()}-{tokenizer_fingerprint(tokenizer)}"
        spec = backend.spec()
        info = {
            "spec": spec,
            "kind": "in-memory",
            "path": None,
            "revision": None,
            "fingerprint": fp,
            "revision_requested": None,
            "trust_remote_code": None,
            "model_args": None,
            "cache": {"status": "not-loaded", "path": None},
            **info,
        }  # base-bench loaded nothing
        identity = {"kind": "in-memory", "fingerprint": fp}
    info.update(backend.describe())
    if backend.adapter is not None or "adapter" in info:  # what the caller knows (where it came from) wins
        info["adapter"] = {**(backend.adapter or {}), **(info.get("adapter") or {})}
        base, name = info["adapter"].get("base_model_name_or_path"), _model_name(info, backend)
        info["adapter"]["base_model_matches"] = same_base(base, name) if base and name else None
    return info, identity, load_s


def _model_name(info: dict, backend: Backend) -> str | None:
    """The name the base model goes by: the spec given (the CLI's --model), else what the weights
    say they were loaded from (None when they do not say)."""
    spec = info.get("spec")
    return backend.model_name if spec == backend.spec() else spec


def _adapter_note(info: dict) -> str | None:
    a = info.get("adapter")
    if not a or a.get("base_model_matches") is not False:
        return None
    return base_model_note(a["base_model_name_or_path"], info.get("spec"), f"the adapter {a.get('spec')}")


STEPS_PER_EXCHANGE = 4  # batches each rank scores between two exchanges of results


def _score_all(
    scorer,
    todo: list[Encoded],
    plan: Batching,
    row_length: int,
    device,
    ranks: Ranks,
    record,
    done: dict,
    progress: bool,
    total: int,
) -> tuple[Batching, float]:
    """Score `todo` (longest first) in the passes `plan` cuts (rows packed up to `row_length`),
    shared out between the ranks.

    The ranks work in rounds of STEPS_PER_EXCHANGE batches each and swap their results after each
    round; in a round every rank calls the model the same number of times (a rank short of batches
    runs the dummy), because under FSDP each forward is a collective. Exchanging after every batch
    would make every rank wait for the slowest batch of each step (about 10% on the bundled set for 2
    ranks, where the longest batch is a third longer than the next); over a round those differences
    mostly cancel. When any rank runs out of memory, every rank halves the batch size (or the token
    budget) and the unfinished items are shared out again; it stops at one item per pass. Returns
    the batching last used and the seconds this rank spent in the exchanges (waiting for slower
    ranks included; 0 for one process)."""
    from tqdm import tqdm

    dummy = [todo[-1]] if todo and ranks.world > 1 else None  # keeps forward counts equal
    remaining, wait_s = list(todo), 0.0
    with tqdm(
        total=total,
        initial=total - len(todo),
        unit="item",
        file=sys.stderr,
        desc="scoring",
        dynamic_ncols=True,
        disable=not progress,
    ) as bar:
        while remaining:
            set_row_length(scorer, plan.row_capacity(row_length))
            rows = getattr(scorer, "row_length", None)
            shares = share(plan.cut(remaining, row_length), ranks.world, lambda b, rows=rows: batch_cost(b, rows))
            mine, steps = shares[ranks.rank], max(len(x) for x in shares)
            for start in range(0, steps, STEPS_PER_EXCHANGE):
                status, message, results = "ok", "", []
                for k in range(start, min(start + STEPS_PER_EXCHANGE, steps)):
                    batch = mine[k] if k < len(mine) and status == "ok" else None
                    if batch is None and dummy is None:
                        break  # one process: nothing left to do in this round, or it failed
                    st, msg, res = _step(scorer, batch, dummy, device, ranks)
                    try:
                        record(res, own=True)
                    except BaseBenchError as exc:  # this rank could not save its results (a full disk)
                        if ranks.world == 1:
                            raise
                        st, msg, res = f"error:{type(exc).__name__}", str(exc), []
                    if status == "ok" and st != "ok":
                        status, message = st, msg
                    results += res
                    bar.update(len(res))
                t = time.perf_counter()
                everyone = ranks.all_gather((status, message, results))
                wait_s += time.perf_counter() - t if ranks.world > 1 else 0.0
                for r, (_, _, theirs) in enumerate(everyone):
                    if r != ranks.rank:
                        record(theirs, own=False)
                        bar.update(len(theirs))
                failed = [(r, st, m) for r, (st, m, _) in enumerate(everyone) if st.startswith("error")]
                if failed:
                    r, st, m = failed[0]
                    exc = error_class(st.partition(":")[2])(f"rank {r}: {m}" if ranks.world > 1 else m)
                    exc.shared = not ranks.is_main
                    raise exc
                if any(st == "oom" for st, _, _ in everyone):
                    where = (
                        ""
                        if ranks.world == 1
                        else f" on rank {next(r for r, x in enumerate(everyone) if x[0] == 'oom')}"
                    )
                    alone = any(st == "oom" and m == "1" for st, m, _ in everyone)  # a pass of one item
                    if plan.items == 1 or (plan.tokens is not None and (alone or plan.tokens == 1)):
                        least = "batch size 1" if plan.items is not None else "one item per pass"
                        exc = ScoringError(f"out of accelerator memory{where} even at {least}")
                        exc.shared = not ranks.is_main
                        raise exc
                    plan = plan.halved()
                    if ranks.is_main:
                        lowered = (
                            f"batch size lowered to {plan.items}"
                            if plan.items is not None
                            else f"tokens per pass lowered to {plan.tokens}"
                        )
                        log.warning(f"out of accelerator memory{where}; {lowered}")
                    break
            remaining = [e for e in remaining if e.id not in done]
    return plan, wait_s


def _step(scorer, batch, dummy, device, ranks: Ranks) -> tuple[str, str, list]:
    """Score one batch: ("ok", "", [(id, [(logprob, n_tokens), ...]), ...]), ("oom", ...) or
    ("error:<base-bench exception class>", message, []); "oom" comes with the number of items that ran
    out of memory ("0" for the dummy). With no batch, run `dummy` (if given) and keep nothing."""
    try:
        scores = attempt(lambda: scorer(batch or dummy), device) if (batch or dummy) else []
    except BaseBenchError as exc:
        return f"error:{type(exc).__name__}", str(exc), []
    except Exception as exc:  # noqa: BLE001 - under several ranks, tell the others instead of leaving them waiting
        if ranks.world == 1:
            raise
        log.exception("scoring failed on this rank")
        return "error:ScoringError", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", []
    if scores is None:
        return "oom", str(len(batch)) if batch else "0", []  # how many items ran out of memory
    if not batch:
        return "ok", "", []
    for e, sc in zip(batch, scores):  # no JSON file holds a NaN or an infinity, and no reader takes a huge score
        if any(not (math.isfinite(c.logprob) and abs(c.logprob) <= MAX_ABS_LOGPROB) for c in sc):
            return (
                "error:ScoringError",
                f"item {e.id}: the model gave a log-prob that is not a finite number within ±{MAX_ABS_LOGPROB:g} "
                "nats (try float32)",
                [],
            )
    return "ok", "", [(e.id, [(c.logprob, c.n_tokens) for c in sc]) for e, sc in zip(batch, scores)]

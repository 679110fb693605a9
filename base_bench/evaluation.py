"""Score a model that is already loaded: the one orchestration behind the library and the CLI.

    from base_bench import evaluate
    report = evaluate(model, tokenizer)                          # bundled set; writes nothing
    report = evaluate(model, tokenizer, "hub", out_dir="runs/m")  # official data; the four run files
    report = evaluate(model, tokenizer, "my/dir", limit=16, out_dir="runs/m", resume=True)

`evaluate` returns the dict that report.json holds. The command line (`cli.py`) only parses flags,
loads the model and calls this function, so both give the same report for the same model, data and
settings. The steps, each done in one place:

1. data: `datasource.open_data` loads and checks it (schema, composition, checksum);
2. model and tokenizer: checked to be a causal LM and a tokenizer whose ids fit its vocabulary;
3. run store (only with `out_dir`): refuses to overwrite a run, checks the `resume` signature, locks
   the out-dir against other processes, then saves each item's result the moment it is scored;
4. scoring: the packed scorer (after a start-up check against the plain one), length-sorted
   batches, halving the batch on out-of-memory;
5. report: `report.build_report`, then report.json and predictions.md (only with `out_dir`).

The model is left as it was found: the training flag of every module is restored (also after an
exception), nothing is computed with gradients, and no weight is copied, moved or cast. The extra
memory is one batch's activations. Bad input raises a `BaseBenchError` subclass before anything is
written.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import torch

from . import __version__, card
from .batching import attempt, auto_batch_size
from .datasource import DataSource, open_data
from .errors import UsageError
from .model import (
    ModelError, check_causal_lm, dtype_name, model_dtype, model_size, tokenizer_fingerprint, unwrap,
    weights_fingerprint,
)
from .records import ItemResult, pick
from .report import build_report, dumps, render_markdown
from .runstore import RunStore, signature_hash
from .scoring import (
    PackedScorer, PlainScorer, ScoringError, check_packing, encode_item, length_order, model_window, packing_probe,
)

SCORING_VERSION = "mean_logprob/1"  # bump when a change to the scoring code can change a score
log = logging.getLogger("base_bench")


def evaluate(model, tokenizer, data=None, *, limit: int | None = None, batch_size: int | str = 8,
             add_bos: bool = False, out_dir: str | Path | None = None, resume: bool = False,
             progress: bool = True, model_info: dict | None = None) -> dict:
    """Score `model` on the benchmark and return the report (the dict report.json holds).

    model       a transformers causal LM, already loaded, on any device and in any dtype (it may be
                wrapped in DDP or FSDP); it is used as it is and left as it was found.
    tokenizer   its tokenizer.
    data        None: the bundled set shipped in the package; a path to a JSONL file, or to a
                directory holding data/test.jsonl; "hub": the official gated file, fetched with
                HF_TOKEN or the saved `hf auth login` token.
    limit       score only the first N items (the run is then not official).
    batch_size  items per forward pass, or "auto"; scores do not depend on it.
    add_bos     put the tokenizer's BOS before every context (diagnostic; not official).
    out_dir     write report.json, predictions.md, partial_results.jsonl and run_config.json there;
                None writes nothing at all.
    resume      continue the run in out_dir, scoring only unfinished items; refused if the model,
                data or scoring settings differ.
    progress    show a progress bar on stderr.
    model_info  what the report records about where the model came from (the CLI passes the file
                or Hub id it loaded, and its identity for `resume`); by default the model's
                `name_or_path` and a fingerprint of its weights and tokenizer.

    Raises a BaseBenchError subclass, with a one-line message, for data, a model, a tokenizer or an
    out-dir that cannot be used (or is in use by another process); nothing is written then. A run
    file that cannot be written (a full disk, an I/O error) raises StorageError; the items saved
    before it stay, and resume=True continues.
    """
    with ExitStack() as held:  # the out-dir lock, from store.begin until this returns or raises
        return _evaluate(held, model, tokenizer, data, limit=limit, batch_size=batch_size, add_bos=add_bos,
                         out_dir=out_dir, resume=resume, progress=progress, model_info=model_info)


def _evaluate(held: ExitStack, model, tokenizer, data, *, limit, batch_size, add_bos, out_dir, resume, progress,
              model_info) -> dict:
    _check_arguments(limit, batch_size)
    source = data if isinstance(data, DataSource) else open_data(data)
    inner = unwrap(model)
    check_causal_lm(inner)
    _check_tokenizer(tokenizer)
    all_items = source.dataset.items
    items = list(all_items[:limit] if limit else all_items)
    reasons = list(source.reasons)
    if limit and limit < len(all_items):
        reasons.append(f"--limit {limit} scored {len(items)} of {len(all_items)} items")
    if add_bos:
        reasons.append("--add-bos changes the scoring configuration")

    device, dtype = next(inner.parameters()).device, model_dtype(inner)
    info, identity, load_s = _model_record(inner, tokenizer, model_info)
    signature = run_signature(identity, source.dataset.sha256, add_bos, dtype, device)
    store = RunStore(Path(out_dir).expanduser()) if out_dir is not None else None
    if store:
        store.check(signature, resume)

    window = model_window(inner, tokenizer)
    encoded = [encode_item(tokenizer, it, add_bos=add_bos, window=window) for it in items]
    pad_id = _check_vocabulary(encoded, tokenizer, inner)
    by_id = {it.id: it for it in items}

    with _eval_mode(model), torch.no_grad():
        done: dict[str, ItemResult] = {}
        if store:
            held.enter_context(store.lock())  # one process per out-dir; RunError naming the holder if not
            done = store.begin(signature, {"model": info.get("spec"), "out_dir": str(store.dir)}, resume)
            if done:
                log.info(f"resuming {store.dir}: {sum(1 for i in items if i.id in done)} of {len(items)} items "
                         "already scored")
        order = [encoded[i] for i in length_order(encoded)]
        scorer, packing = _pick_scorer(model, order, pad_id, device)
        bs = batch_size
        if bs == "auto":
            bs = auto_batch_size(scorer, order, device)
            if bs == 0:
                raise ScoringError("out of accelerator memory even at batch size 1")
            log.info(f"--batch-size auto: {bs} items per pass on {device}")

        def finished(e, scores):
            if any(not math.isfinite(c.logprob) for c in scores):
                raise ScoringError(f"item {e.id}: the model gave a non-finite log-prob (try float32)")
            r = ItemResult(e.id, tuple(scores), pick(scores), by_id[e.id].label, e.truncated)
            if store:
                store.append(r)
            done[e.id] = r

        todo = [e for e in order if e.id not in done]
        t0 = time.perf_counter()
        bs = _score_all(scorer, todo, bs, device, finished, progress, total=len(items))
        score_s = time.perf_counter() - t0

    config = {
        "model": info,
        "device": str(device),
        "dtype": dtype_name(dtype),
        "batch_size": batch_size,
        "batch_size_used": bs,
        "add_bos": bool(add_bos),
        "threads": torch.get_num_threads(),
        "limit": limit,
        "window": window,
        "scorer": scorer.name,
        "packing_check": packing,
        "scoring_version": SCORING_VERSION,
        "runner": "base-bench",
        "runner_version": __version__,
        "signature_sha256": signature_hash(signature),
        "versions": {"torch": torch.__version__, "transformers": _version("transformers")},
    }
    timing = {"model_load_s": load_s, "scoring_s": round(score_s, 3), "items_scored_this_session": len(todo),
              "items_per_s": round(len(todo) / score_s, 3) if todo and score_s > 0 else None}
    report = build_report(config=config, data=source.record, official=not reasons, reasons=reasons, items=items,
                          results=done, timing=timing, n_items_in_data=len(all_items))
    if store:
        store.write_text("report.json", dumps(report))
        store.write_text("predictions.md", render_markdown(report))
    return report


def run_signature(identity: dict, data_sha256: str, add_bos: bool, dtype, device) -> dict:
    """Everything that changes a score, as --resume checks it (batch size, threads and limit do not)."""
    return {
        "benchmark": f"BananaMind Base Bench {card.VERSION}",
        "scoring": SCORING_VERSION,
        "model": identity,
        "data_sha256": data_sha256,
        "add_bos": bool(add_bos),
        "dtype": dtype if isinstance(dtype, str) else dtype_name(dtype),
        "device_type": torch.device(device).type,
    }


def _check_arguments(limit, batch_size) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise UsageError(f"limit must be a whole number of 1 or more, or None; got {limit!r}")
    if batch_size != "auto" and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise UsageError(f"batch_size must be a whole number of 1 or more, or 'auto'; got {batch_size!r}")


def _check_tokenizer(tokenizer) -> None:
    if not callable(tokenizer) or not hasattr(tokenizer, "eos_token_id"):
        raise ModelError(f"tokenizer must be a transformers tokenizer, not {type(tokenizer).__name__}")


def _check_vocabulary(encoded, tokenizer, model) -> int:
    """Raise ModelError if a token id does not fit the model's embedding; return the id to pad with."""
    rows = model.get_input_embeddings().num_embeddings
    for e in encoded:
        top = max(max(e.context), *(max(c) for c in e.continuations))
        if top >= rows:
            raise ModelError(f"the tokenizer gives token id {top} (item {e.id}), but the model's vocabulary has "
                             f"{rows} entries; is this the model's own tokenizer?")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return pad if isinstance(pad, int) and 0 <= pad < rows else 0  # padding is masked: any valid id will do


def _model_record(model, tokenizer, given: dict | None) -> tuple[dict, dict, float | None]:
    """(config.model for the report, identity for the resume signature, load seconds if known)."""
    info = dict(given or {})
    identity = info.pop("identity", None)
    load_s = info.pop("load_s", None)
    if identity is None:
        fp = f"{weights_fingerprint(model)}-{tokenizer_fingerprint(tokenizer)}"
        spec = getattr(model, "name_or_path", None) or type(model).__name__
        info = {"spec": spec, "kind": "in-memory", "path": None, "revision": None, "fingerprint": fp,
                "revision_requested": None, "trust_remote_code": None, **info}
        identity = {"kind": "in-memory", "fingerprint": fp}
    info["model_type"] = getattr(model.config, "model_type", None)
    info.update(model_size(model))
    return info, identity, load_s


@contextmanager
def _eval_mode(model):
    """model.eval() for the block, then every module's own training flag back, whatever happens."""
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, training in flags:
            m.training = training


def _pick_scorer(model, order, pad_id, device):
    """The packed scorer if it reproduces the plain one on a real batch, else the plain scorer."""
    probe = packing_probe(order)
    checked = attempt(lambda: check_packing(model, probe, pad_id), device)
    if checked is None:
        raise ScoringError(f"out of accelerator memory while checking packing on {len(probe)} items; "
                           "try a smaller dtype or another device")
    ok, diff = checked
    if not ok:
        log.warning("note: this model does not reproduce the plain path with a packed 4D mask; "
                    "using the plain path (one row per choice)")
    packing = {"ok": ok, "max_abs_diff_vs_plain": diff if math.isfinite(diff) else None,
               "checked_items": [e.id for e in probe]}
    return (PackedScorer if ok else PlainScorer)(model, pad_id), packing


def _score_all(scorer, todo, bs: int, device, finished, progress: bool, total: int) -> int:
    """Score `todo` in batches of `bs`, halving it on out-of-memory; return the size last used."""
    from tqdm import tqdm

    with tqdm(total=total, initial=total - len(todo), unit="item", file=sys.stderr, desc="scoring",
              dynamic_ncols=True, disable=not progress) as bar:
        i = 0
        while i < len(todo):
            batch = todo[i:i + bs]
            scores = attempt(lambda: scorer(batch), device)
            if scores is None:
                if bs == 1:
                    raise ScoringError("out of accelerator memory even at batch size 1")
                bs = max(1, bs // 2)
                log.warning(f"out of accelerator memory; batch size lowered to {bs}")
                continue
            for e, sc in zip(batch, scores):
                finished(e, sc)
            bar.update(len(batch))
            i += len(batch)
    return bs


def _version(pkg: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(pkg)
    except PackageNotFoundError:
        return None

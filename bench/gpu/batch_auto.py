"""Check `batch_auto`: what `--batch-size auto` picks, and the out-of-memory back-off.

What it checks: `batching.auto_batch_size` with the real packed scorer on the big model, in
bfloat16 and in float32, noting every batch size it tried and whether it fit. Then, on a GPU only,
a forced out-of-memory error: the process's CUDA memory is capped
(`torch.cuda.set_per_process_memory_fraction`) at what it holds plus 55% of what batch 256 needs,
and `evaluate()` is asked for batch 256 in float32. Target: it halves the batch (and logs each
halving), and its scores stay within 1e-4 of the card-literal loop with no prediction different.
On a CPU (the dry run) auto is `batching.CPU_AUTO` without a search, and the cap is skipped.

What it records: per dtype the size picked, the seconds the search took, the probes and the
search's upper bound; for the forced error, the memory batch 256 needs, the cap, the size auto
picks under it, the size evaluate() ended at, the halvings logged, and its scores against the
uncapped scorer at that size and against the loop.

How long: estimated 40 s on an H200 (a guess until the first GPU run), 2 s in the dry run.
"""

from __future__ import annotations

import gc
import logging
import time
import traceback

from gpu.common import FP32_TARGET, Check, compare, one_line, report_scores, sync
from gpu.context import Ctx

log = logging.getLogger("base_bench")


class Probe:
    """The real scorer, noting the size of every batch it is given and whether it ran out of memory."""

    def __init__(self, scorer):
        self.scorer, self.tried = scorer, []

    def __call__(self, batch):
        from base_bench.engine.batching import is_oom

        try:
            out = self.scorer(batch)
        except Exception as exc:
            self.tried.append([len(batch), "out of memory" if is_oom(exc) else one_line(exc)])
            raise
        self.tried.append([len(batch), "fits"])
        return out


class _Notes(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _auto(ctx: Ctx, key: str, dtype: str) -> dict:
    from base_bench.backends.transformers_scorers import PackedScorer
    from base_bench.engine.batching import GPU_UPPER, auto_batch_size
    from base_bench.engine.scoring import length_order

    model, encs = ctx.model(key, dtype), ctx.encoded(key)
    order = [encs[i] for i in length_order(encs)]
    probe = Probe(PackedScorer(model, ctx.pad_id))
    sync(ctx.device)
    t = time.perf_counter()
    bs = auto_batch_size(probe, order, ctx.device)
    sync(ctx.device)
    return {
        "dtype": dtype,
        "batch_size": bs,
        "seconds": round(time.perf_counter() - t, 3),
        "probes": probe.tried,
        "upper": min(len(order), GPU_UPPER) if ctx.device.type == "cuda" else None,
    }


def _forced_oom(ctx: Ctx, key: str) -> dict:
    """Cap this process's CUDA memory below what a big batch needs, then run evaluate() with that
    batch size: it must halve the batch (base_bench logs each halving) and keep the scores."""
    import torch

    from base_bench import evaluate
    from base_bench.backends.transformers_scorers import PackedScorer
    from base_bench.engine.scoring import length_order

    dtype = "float32"  # scores across batch sizes agree to ~1e-5 in float32, so "the same scores" is testable
    model, encs = ctx.model(key, dtype), ctx.encoded(key)
    order = [encs[i] for i in length_order(encs)]
    asked = min(256, len(order))
    gc.collect()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    PackedScorer(model, ctx.pad_id)(order[:asked])
    sync(ctx.device)
    need = torch.cuda.max_memory_allocated() - base
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(ctx.device).total_memory
    held = torch.cuda.memory_reserved()  # the weights of every model the run holds
    cap = held + int(0.55 * need)
    notes = _Notes()
    log.addHandler(notes)
    old_level = log.level
    log.setLevel(logging.INFO)
    capped_auto = None
    try:
        torch.cuda.set_per_process_memory_fraction(cap / total, ctx.device)
        capped_auto = _auto(ctx, key, dtype)
        t = time.perf_counter()
        report = evaluate(model, ctx.tok, None, limit=ctx.limit, batch_size=asked, progress=False)
        eval_s = time.perf_counter() - t
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, ctx.device)
        torch.cuda.empty_cache()
        log.removeHandler(notes)
        log.setLevel(old_level)
    used = report["config"]["batch_size_used"]
    got = report_scores(report, ctx.ids)
    same_bs, _ = ctx.scores(key, dtype, "packed", used)
    ref, _ = ctx.reference(key, dtype)
    vs_same, vs_loop = compare(got, same_bs, ctx.ids), compare(got, ref, ctx.ids)
    halvings = [line for line in notes.lines if "batch size lowered" in line]
    halved = used < asked and any(used == asked >> k for k in range(1, 12)) and bool(halvings)
    met = halved and vs_loop["max_abs_delta"] <= FP32_TARGET and vs_loop["predictions_differ"] == 0
    return {
        "dtype": dtype,
        "batch_size_asked": asked,
        "memory_for_that_batch_gib": round(need / 2**30, 3),
        "cap_gib": round(cap / 2**30, 3),
        "headroom_gib": round((cap - held) / 2**30, 3),
        "cap_fraction": round(cap / total, 5),
        "auto_under_the_cap": capped_auto,
        "batch_size_used": used,
        "halvings_logged": halvings,
        "evaluate_s": round(eval_s, 3),
        "vs_uncapped_same_batch_size": vs_same,
        "vs_reference_loop": vs_loop,
        "met": met,
    }


def check_batch_auto(ctx: Ctx) -> dict:
    """--batch-size auto: the size it picks; a forced out-of-memory error halves the batch."""
    key = ctx.big
    out: dict = {"model": key, "auto": [_auto(ctx, key, d) for d in ("bfloat16", "float32")]}
    if ctx.device.type != "cuda":
        out["forced_oom"] = {
            "skipped": "CUDA only: the memory cap is torch.cuda.set_per_process_memory_fraction; "
            "on a CPU --batch-size auto is batching.CPU_AUTO without a search"
        }
        out["met"] = None
        picks = ", ".join(f"{a['dtype']} {a['batch_size']}" for a in out["auto"])
        out["summary"] = f"auto on the CPU: {picks} (CPU_AUTO); forced OOM skipped (CUDA only)"
    else:
        try:
            oom = _forced_oom(ctx, key)
        except Exception as exc:  # noqa: BLE001 - keep the auto picks measured above
            oom = {"error": one_line(exc), "traceback": traceback.format_exc(limit=6).splitlines()[-8:], "met": False}
        out["forced_oom"] = oom
        out["met"] = oom.get("met", False)
        picks = ", ".join(f"{a['dtype']} {a['batch_size']} (of at most {a['upper']})" for a in out["auto"])
        if "error" in oom:
            out["summary"] = f"auto picks {picks}; forced OOM failed: {oom['error']}"
        else:
            out["summary"] = (
                f"auto picks {picks}; under a {oom['cap_gib']:.2f} GiB cap, batch {oom['batch_size_asked']} "
                f"ran at {oom['batch_size_used']} after {len(oom['halvings_logged'])} halvings, "
                f"largest |Δ| vs the loop {oom['vs_reference_loop']['max_abs_delta']:.2e}"
            )
    out["target"] = "a forced out-of-memory error halves the batch and the scores stay within 1e-4 of the loop"
    return out


CHECK = Check("batch_auto", "--batch-size auto and the out-of-memory back-off", check_batch_auto, 40, 2)

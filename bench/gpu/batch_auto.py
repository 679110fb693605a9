"""Check `batch_auto`: what `--batch-size auto` picks, and the out-of-memory back-off.

What it checks: the two searches with the real packed scorer on the big model, in bfloat16 and in
float32, noting every pass tried and whether it fit. `auto_batching`, what evaluate() runs for
`auto`: on a GPU the largest token budget whose pass of the fullest rows fits (rows packed
first-fit-decreasing up to the longest item); and `auto_batch_size`, the same search over a number
of items. Then, on a GPU only, forced out-of-memory errors: the process's CUDA memory is capped
(`torch.cuda.set_per_process_memory_fraction`) at what it holds plus 55% of what the smaller of
two passes needs, 256 items and a token budget of the same positions, and evaluate() is asked for
each in float32. Target: it halves the batch (or the budget) and logs each halving, and its
scores stay within 1e-4 of the card-literal loop with no prediction different. On a CPU (the dry
run) auto is `batching.CPU_AUTO` items without a search, and the cap is skipped.

What it records: per dtype the size and the budget picked, the seconds each search took, its
probes (items, and positions for the token search) and its upper bound; for each forced error,
the memory the pass needs, the cap, what auto picks under it, where evaluate() ended, the halvings
logged, and its scores against the uncapped scorer at that setting and against the loop.

How long: estimated 60 s on an H200 (a guess until the first GPU run: two searches per dtype and
two capped evaluate() runs on the 1B-shaped model in float32), 3 s in the dry run.
"""

from __future__ import annotations

import gc
import logging
import time
import traceback

from gpu.common import FP32_TARGET, compare, one_line, report_scores, sync
from gpu.context import Check, Ctx

log = logging.getLogger("base_bench")


class Probe:
    """The real scorer, noting the size of every batch it is given and whether it ran out of memory:
    [items, verdict], or with `row_length` (a token search) [items, positions fed, verdict]."""

    def __init__(self, scorer, row_length: int | None = None):
        self.scorer, self.row_length, self.tried = scorer, row_length, []

    def __call__(self, batch):
        from base_bench.engine.batching import is_oom
        from base_bench.engine.packing import batch_cost

        size = [len(batch)] if self.row_length is None else [len(batch), batch_cost(batch, self.row_length)]
        try:
            out = self.scorer(batch)
        except Exception as exc:
            self.tried.append([*size, "out of memory" if is_oom(exc) else one_line(exc)])
            raise
        self.tried.append([*size, "fits"])
        return out


class _Notes(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _longest_first(ctx: Ctx, key: str, dtype: str):
    from base_bench.engine.packing import longest_first

    model, encs = ctx.model(key, dtype), ctx.encoded(key)
    return model, longest_first(encs)


def _auto(ctx: Ctx, key: str, dtype: str) -> dict:
    """The search over a number of items (`auto_batch_size`, one item per row)."""
    from base_bench.backends.transformers_scorers import PackedScorer
    from base_bench.engine.batching import GPU_UPPER, auto_batch_size

    model, order = _longest_first(ctx, key, dtype)
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


def search_tokens(model, order, row_length: int, ctx: Ctx) -> dict:
    """The search `evaluate(batch_size="auto")` runs (`auto_batching`): on a GPU the largest token
    budget whose pass of the fullest rows fits, on a CPU batching.CPU_AUTO items without a search;
    with the real packed scorer, rows packed up to `row_length`, every probe noted."""
    from base_bench.backends.transformers_scorers import PackedScorer
    from base_bench.engine.batching import auto_batching

    probe = Probe(PackedScorer(model, ctx.pad_id, row_length=row_length), row_length)
    sync(ctx.device)
    t = time.perf_counter()
    plan = auto_batching(probe, order, row_length, ctx.device)
    sync(ctx.device)
    return {
        "batch_size": plan.items if plan else None,
        "batch_tokens": plan.tokens if plan else None,
        "seconds": round(time.perf_counter() - t, 4),
        "probes": probe.tried,
    }


def _auto_tokens(ctx: Ctx, key: str, dtype: str) -> dict:
    from base_bench.engine.batching import GPU_UPPER
    from base_bench.engine.packing import pack_rows

    model, order = _longest_first(ctx, key, dtype)
    row = order[0].packed_length
    rows = len(pack_rows(order, row))
    return {
        "dtype": dtype,
        **search_tokens(model, order, row, ctx),
        "row_length": row,
        "rows": rows,
        "all_items_tokens": rows * row,
        "upper": min(rows, GPU_UPPER) if ctx.device.type == "cuda" else None,
    }


def _need(ctx: Ctx, model, batch, row_length: int) -> int:
    """Bytes of CUDA memory one pass of `batch` takes above what is allocated, rows packed up to
    `row_length` as the runner packs them."""
    import torch

    from base_bench.backends.transformers_scorers import PackedScorer

    gc.collect()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    PackedScorer(model, ctx.pad_id, row_length=row_length)(batch)
    sync(ctx.device)
    need = torch.cuda.max_memory_allocated() - base
    torch.cuda.empty_cache()
    return need


def _forced_oom(ctx: Ctx, key: str) -> tuple[dict, dict]:
    """Cap this process's CUDA memory below what a big pass needs, then run evaluate() asking for
    that pass: once as 256 items (`batch_size`), once as the same positions (`batch_tokens`). Each
    must halve (base_bench logs each halving) and keep the scores. Returns (items, tokens)."""
    import torch

    from base_bench import evaluate
    from base_bench.engine.packing import Batching, batch_cost

    dtype = "float32"  # scores across batch sizes agree to ~1e-5 in float32, so "the same scores" is testable
    model, order = _longest_first(ctx, key, dtype)
    row = order[0].packed_length
    asked = min(256, len(order))
    asked_tokens = batch_cost(order[:asked], row)  # the positions that pass feeds
    need = _need(ctx, model, order[:asked], row)
    first = Batching(tokens=asked_tokens).cut(order, row)[0]
    need_tokens = _need(ctx, model, first, row)
    total = torch.cuda.get_device_properties(ctx.device).total_memory
    held = torch.cuda.memory_reserved()  # the weights of every model the run holds
    cap = held + int(0.55 * min(need, need_tokens))
    notes = _Notes()
    log.addHandler(notes)
    old_level = log.level
    log.setLevel(logging.INFO)
    runs = {}
    try:
        torch.cuda.set_per_process_memory_fraction(cap / total, ctx.device)
        for name, kw, auto in (
            ("items", {"batch_size": asked}, _auto),
            ("tokens", {"batch_tokens": asked_tokens}, _auto_tokens),
        ):
            capped_auto = auto(ctx, key, dtype)
            start = len(notes.lines)
            t = time.perf_counter()
            report = evaluate(model, ctx.tok, None, limit=ctx.limit, progress=False, **kw)
            runs[name] = (report, time.perf_counter() - t, notes.lines[start:], capped_auto)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, ctx.device)
        torch.cuda.empty_cache()
        log.removeHandler(notes)
        log.setLevel(old_level)
    ref, _ = ctx.reference(key, dtype)
    common = {
        "dtype": dtype,
        "cap_gib": round(cap / 2**30, 3),
        "headroom_gib": round((cap - held) / 2**30, 3),
        "cap_fraction": round(cap / total, 5),
    }
    out = []
    for name, want, lowered, mem in (
        ("items", asked, "batch size lowered", need),
        ("tokens", asked_tokens, "tokens per pass lowered", need_tokens),
    ):
        report, eval_s, lines, capped_auto = runs[name]
        used = report["config"]["batch_size_used" if name == "items" else "batch_tokens_used"]
        got = report_scores(report, ctx.ids)
        same, _ = ctx.scores(key, dtype, "packed", *((used, None) if name == "items" else (None, used)))
        vs_same, vs_loop = compare(got, same, ctx.ids), compare(got, ref, ctx.ids)
        halvings = [line for line in lines if lowered in line]
        halved = used < want and any(used == want >> k for k in range(1, 20)) and bool(halvings)
        met = halved and vs_loop["max_abs_delta"] <= FP32_TARGET and vs_loop["predictions_differ"] == 0
        unit = "batch_size" if name == "items" else "batch_tokens"
        out.append(
            {
                **common,
                f"{unit}_asked": want,
                "memory_for_that_batch_gib": round(mem / 2**30, 3),
                "auto_under_the_cap": capped_auto,
                f"{unit}_used": used,
                "halvings_logged": halvings,
                "evaluate_s": round(eval_s, 3),
                f"vs_uncapped_same_{'batch_size' if name == 'items' else 'budget'}": vs_same,
                "vs_reference_loop": vs_loop,
                "met": met,
            }
        )
    return out[0], out[1]


def check_batch_auto(ctx: Ctx) -> dict:
    """--batch-size auto: the size and the token budget it picks; a forced out-of-memory error
    halves the batch and the budget."""
    key = ctx.big
    out: dict = {
        "model": key,
        "auto": [_auto(ctx, key, d) for d in ("bfloat16", "float32")],
        "auto_tokens": [_auto_tokens(ctx, key, d) for d in ("bfloat16", "float32")],
    }
    if ctx.device.type != "cuda":
        skipped = {
            "skipped": "CUDA only: the memory cap is torch.cuda.set_per_process_memory_fraction; "
            "on a CPU --batch-size auto is batching.CPU_AUTO without a search"
        }
        out["forced_oom"], out["forced_oom_tokens"] = skipped, dict(skipped)
        out["met"] = None
        picks = ", ".join(f"{a['dtype']} {a['batch_size']}" for a in out["auto"])
        out["summary"] = f"auto on the CPU: {picks} (CPU_AUTO, no token search); forced OOM skipped (CUDA only)"
    else:
        try:
            oom, oom_tokens = _forced_oom(ctx, key)
        except Exception as exc:  # noqa: BLE001 - keep the auto picks measured above
            oom = {"error": one_line(exc), "traceback": traceback.format_exc(limit=6).splitlines()[-8:], "met": False}
            oom_tokens = {"error": oom["error"], "met": False}
        out["forced_oom"], out["forced_oom_tokens"] = oom, oom_tokens
        out["met"] = oom.get("met", False) and oom_tokens.get("met", False)
        picks = ", ".join(
            f"{a['dtype']} {a['batch_tokens']} tokens ({b['batch_size']} items of at most {b['upper']})"
            for a, b in zip(out["auto_tokens"], out["auto"])
        )
        if "error" in oom:
            out["summary"] = f"auto picks {picks}; forced OOM failed: {oom['error']}"
        else:
            out["summary"] = (
                f"auto picks {picks}; under a {oom['cap_gib']:.2f} GiB cap, batch {oom['batch_size_asked']} "
                f"ran at {oom['batch_size_used']} after {len(oom['halvings_logged'])} halvings, "
                f"{oom_tokens['batch_tokens_asked']} tokens at {oom_tokens['batch_tokens_used']} after "
                f"{len(oom_tokens['halvings_logged'])}; largest |Δ| vs the loop "
                f"{max(oom['vs_reference_loop']['max_abs_delta'], oom_tokens['vs_reference_loop']['max_abs_delta']):.2e}"
            )
    out["target"] = (
        "a forced out-of-memory error halves the batch (items and tokens) and the scores stay within 1e-4 of the loop"
    )
    return out


CHECK = Check("batch_auto", "--batch-size auto and the out-of-memory back-off", check_batch_auto, 60, 3)

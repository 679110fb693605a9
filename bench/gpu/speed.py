"""Check `speed`: how fast does `base-bench` score the bundled items on the GPU, and where does the
time go?

What it checks: the 1B-shaped model in bfloat16 (the tiny one in the dry run), saved as a local
export, loaded with `load_model` and scored by `evaluate()` with `batch_size="auto"`, as a user's
run would be: on a GPU that searches a token budget (rows packed with several items, up to the
longest item), on a CPU it is 8 items per pass. Target: at most 1 s of scoring for the 350 items on
the GPU. Then each piece of that run measured on its own: tokenizing, the packing check, the auto
search, a second scoring pass (its scores must equal evaluate()'s), the same pass cut other ways
(batch 8, 32, 64, 128 and all items; token budgets 1,024 to 16,384, one holding every item, and
auto's), a pass timed in phases and a profiled pass (gpu/profiling.py).

What it records: load seconds, evaluate()'s wall and scoring seconds, the batch size or token
budget used, the row length and the LM-head mode; the GPU's peak memory above what the process
held before (weights included); the positions fed with and without padding and through the LM
head; the FLOPs of what is fed (padding included) against each context once with no padding, the
TFLOP/s reached and its fraction of the H200's 790 TFLOP/s bfloat16 peak; for every other cut its
seconds, passes, positions fed against held, padding fraction and the FLOPs of both (counted as
bench/speed.py counts them); and the breakdown above, with the bytes copied to the device per pass.

How long: estimated 70 s on an H200 (a guess until the first GPU run: saving and loading the 2 GB
model is most of it; the 45 TFLOP of one scoring of the 350 items take about 0.06 s at the peak,
the 44 passes of batch 8 longer), 10 s in the dry run.
"""

from __future__ import annotations

import gc
import time

from gpu.batch_auto import search_tokens
from gpu.common import LM_HEAD_MODES, PEAK_BF16, SPEED_TARGET_S, compare, one_line, report_scores, sync
from gpu.context import Check, Ctx
from gpu.profiling import profiled_pass, timed_phases


def fed_flops(model, batches, row_length: int | None = None) -> dict:
    """FLOPs of what the packed scorer really feeds, counted by bench/speed.py's `fed_flops`: each
    batch laid out in rows as the scorer lays it out (engine/packing.row_layout under `row_length`;
    None: one item per row), linear layers on every position of every [rows, width] pass, padding
    included, attention over the dense width² a 4D mask asks for, the LM head on the kept
    positions only."""
    from speed import fed_flops as counted
    from speed import flop_count, packed_passes

    passes = packed_passes(batches, row_length)
    f = counted(model, passes)
    return {
        "flops": f["flops"],
        "positions": f["positions"],
        "kept_positions": sum(p["head"] for p in passes),
        "linear_params": flop_count(model, [])["linear_params"],
    }


def h2d_bytes(batches, mask_itemsize: int, row_length: int | None = None) -> int:
    """Bytes the packed scorer copies to the device per pass: ids, positions (int64), the 4D mask
    (model dtype) and the keep mask (bool), each [rows, width] (rows laid out as `fed_flops` does),
    from the code in transformers_scorers.PackedScorer."""
    from speed import packed_passes

    return sum(
        p["rows"] * p["width"] * (8 * 2 + p["width"] * mask_itemsize + 1) for p in packed_passes(batches, row_length)
    )


def setting_row(model, scorer, encs, order, row_length: int, plan, device) -> dict:
    """One more scoring pass over `encs` cut by `plan` (a packing.Batching) as the runner cuts it:
    its seconds, passes, the positions it feeds against those the items hold, and the FLOPs of
    both (`flop_count`'s "once": each context once, no padding)."""
    from speed import flop_count

    from base_bench.engine.scoring import score_in_batches

    sync(device)
    t = time.perf_counter()
    score_in_batches(scorer, encs, plan.items, batch_tokens=plan.tokens)
    sync(device)
    seconds = time.perf_counter() - t
    passes = plan.cut(order, row_length)
    f = fed_flops(model, passes, plan.row_capacity(row_length))
    held = sum(e.packed_length for e in encs)
    return {
        "batch_size": plan.items,
        "batch_tokens": plan.tokens,
        "passes": len(passes),
        "seconds": round(seconds, 4),
        "positions_with_padding": f["positions"],
        "positions_held": held,
        "padding_fraction": round(1 - held / f["positions"], 4),
        "tflop_fed": round(f["flops"] / 1e12, 3),
        "tflop_held": round(flop_count(model, encs)["once"] / 1e12, 3),
    }


def check_speed(ctx: Ctx) -> dict:
    """The bundled items on the 1B-shaped model in bfloat16 with batch size auto, through
    load_model and evaluate(), then a breakdown from passes of the same scorer."""
    import torch
    from speed import flop_count

    from base_bench import evaluate
    from base_bench.backends.transformers import load_model
    from base_bench.backends.transformers_scorers import PackedScorer, check_packing, model_window
    from base_bench.engine.packing import Batching, longest_first, pack_rows
    from base_bench.engine.scoring import encode_item, packing_probe, score_in_batches, set_row_length

    key, cuda = ctx.big, ctx.device.type == "cuda"
    where = ctx.saved_dir(key)
    gc.collect()
    if cuda:  # the other checks' models stay on the GPU; the memory below is counted above them
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        alloc0, reserved0 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    sync(ctx.device)
    t = time.perf_counter()
    loaded = load_model(str(where), ctx.device, torch.bfloat16)
    sync(ctx.device)
    load_s = time.perf_counter() - t
    model, tok = loaded.model, loaded.tokenizer
    weights = torch.cuda.memory_allocated() - alloc0 if cuda else None
    t = time.perf_counter()
    report = evaluate(model, tok, None, limit=ctx.limit, batch_size="auto", progress=False)
    sync(ctx.device)
    eval_s = time.perf_counter() - t
    peak = (
        {
            "peak_allocated_gib": round((torch.cuda.max_memory_allocated() - alloc0) / 2**30, 3),
            "peak_reserved_gib": round((torch.cuda.max_memory_reserved() - reserved0) / 2**30, 3),
            "weights_gib": round(weights / 2**30, 3),
            "counted": "from load_model to the end of evaluate(), above what the process held before "
            "(the other checks' models); the CUDA context is not included",
        }
        if cuda
        else None
    )
    cfg = report["config"]
    bs, budget = cfg["batch_size_used"], cfg["batch_tokens_used"]  # auto: tokens on a GPU, items on a CPU
    plan = Batching(items=bs, tokens=budget)
    scoring_s = report["timing"]["scoring_s"]

    # the breakdown: each piece of evaluate() measured on its own
    window = model_window(model, tok)
    t = time.perf_counter()
    encs = [encode_item(tok, it, window=window) for it in ctx.items]
    tokenize_s = time.perf_counter() - t
    order = longest_first(encs)
    row = order[0].packed_length  # the run's row length: its longest item
    sync(ctx.device)
    t = time.perf_counter()
    check_packing(model, packing_probe(order), ctx.pad_id)
    sync(ctx.device)
    packing_s = time.perf_counter() - t
    auto = search_tokens(model, order, row, ctx)
    scorer = PackedScorer(model, ctx.pad_id)
    sync(ctx.device)
    t = time.perf_counter()
    again = score_in_batches(scorer, encs, bs, batch_tokens=budget)
    sync(ctx.device)
    again_s = time.perf_counter() - t
    head_mode = scorer.keep_mode
    # padding against launches: the same pass at other item counts, then at other token budgets
    n = len(encs)
    everything = len(pack_rows(order, row)) * row  # a budget that holds every item in one pass
    item_settings = sorted({s for s in (8, 32, 64, 128) if s < n} | {n} | ({min(bs, n)} if bs else set()))
    token_settings = sorted(
        set([s for s in (1024, 2048, 4096, 8192, 16384) if s < everything] or [everything // 4])
        | {everything, budget or everything}
    )
    sizes = [setting_row(model, scorer, encs, order, row, Batching(items=s), ctx.device) for s in item_settings]
    budgets = [setting_row(model, scorer, encs, order, row, Batching(tokens=s), ctx.device) for s in token_settings]
    batches = plan.cut(order, row)
    set_row_length(scorer, plan.row_capacity(row))
    timed = timed_phases(model, scorer, batches, ctx.device)
    try:
        prof = profiled_pass(scorer, encs, ctx.device, bs, budget)
    except Exception as exc:  # noqa: BLE001 - the profiler is a diagnosis; its failure must not lose the timings
        prof = {"error": one_line(exc)}
    fed = fed_flops(model, batches, plan.row_capacity(row))
    useful = flop_count(model, encs)["once"]
    tokens_fed = sum(e.packed_length for e in encs)
    pair_tokens = sum(len(e.context) * len(e.continuations) + sum(map(len, e.continuations)) for e in encs)
    same = compare(report_scores(report, ctx.ids), again, ctx.ids)
    out = {
        "model": key,
        "dtype": "bfloat16",
        "items": len(ctx.items),
        "batch_size_used": bs,
        "batch_tokens_used": budget,
        "row_length": cfg["row_length"],
        "lm_head_mode": head_mode,
        "lm_head_modes": LM_HEAD_MODES,
        "model_dir_save_s": ctx.memo.get(("save_s", key)),
        "load_s": round(load_s, 3),
        "load_what": "base_bench.backends.transformers.load_model on the saved export: fingerprint, tokenizer, from_pretrained, "
        ".to(device); the page cache is warm (the export was written just before)",
        "evaluate_wall_s": round(eval_s, 3),
        "scoring_s": scoring_s,
        "report_timing": report["timing"],
        "packing_check": cfg["packing_check"],
        "memory": peak,
        "tokens": {
            "fed_without_padding": tokens_fed,
            "fed_with_padding": fed["positions"],
            "padding_fraction": round(1 - tokens_fed / fed["positions"], 4),
            "kept_for_the_lm_head": fed["kept_positions"],
            "pair_tokens": pair_tokens,
        },
        "tokens_per_s": {
            "fed": round(tokens_fed / scoring_s, 1) if scoring_s else None,
            "pair": round(pair_tokens / scoring_s, 1) if scoring_s else None,
        },
        "flops": {
            "fed_with_padding_tflop": round(fed["flops"] / 1e12, 3),
            "each_context_once_no_padding_tflop": round(useful / 1e12, 3),
            "achieved_tflop_per_s": round(fed["flops"] / scoring_s / 1e12, 3) if scoring_s else None,
            "fraction_of_790_tflops_peak": (
                round(fed["flops"] / scoring_s / PEAK_BF16, 4) if cuda and scoring_s else None
            ),
            "seconds_at_peak": round(fed["flops"] / PEAK_BF16, 4),
        },
        "breakdown": {
            "tokenize_s": round(tokenize_s, 4),
            "packing_check_s": round(packing_s, 4),
            "auto_search_s": auto["seconds"],
            "auto_probes": auto["probes"],
            "second_scoring_pass_s": round(again_s, 4),
            "second_pass_vs_evaluate": same,
            "by_batch_size": sizes,
            "by_batch_tokens": budgets,
            "phases": timed,
            "profile": prof,
            "host_to_device_bytes_per_pass": h2d_bytes(
                batches, torch.finfo(torch.bfloat16).bits // 8, plan.row_capacity(row)
            ),
        },
    }
    out["met"] = bool(cuda and scoring_s <= SPEED_TARGET_S) if cuda else None
    out["target"] = f"≤ {SPEED_TARGET_S:g} s of scoring (350 items, 1B-shaped, bfloat16, batch auto, on the GPU)"
    frac = out["flops"]["fraction_of_790_tflops_peak"]
    out["summary"] = (
        f"{len(ctx.items)} items in {scoring_s:.3f} s of scoring with {plan.describe()}, LM head mode {head_mode} "
        f"({out['tokens_per_s']['fed']:.0f} fed tokens/s, {100 * out['tokens']['padding_fraction']:.1f}% padding); "
        f"load {load_s:.1f} s"
        + (
            f"; peak {peak['peak_allocated_gib']:.2f} GiB; {100 * frac:.2f}% of the bf16 peak"
            if cuda
            else "; on a CPU (dry run): no GPU memory, no peak fraction"
        )
    )
    del model, loaded, scorer
    ctx.free(keep=tuple(ctx.models))
    return out


CHECK = Check("speed", "Speed: 350 items, 1B-shaped, bfloat16, batch auto", check_speed, 70, 10)

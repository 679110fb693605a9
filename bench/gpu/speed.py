"""Check `speed`: how fast does `base-bench` score the bundled items on the GPU, and where does the
time go?

What it checks: the 1B-shaped model in bfloat16 (the tiny one in the dry run), saved as a local
export, loaded with `load_model` and scored by `evaluate()` with `batch_size="auto"`, as a user's
run would be. Target: at most 1 s of scoring for the 350 items on the GPU. Then each piece of
that run measured on its own: tokenizing, the packing check, the auto search, a second scoring
pass (its scores must equal evaluate()'s), the same pass at batch 8, 32, 64, 128 and the auto
size (padding against launches), a pass timed in phases and a profiled pass (gpu/profiling.py).

What it records: load seconds, evaluate()'s wall and scoring seconds, the batch size used and the
LM-head mode; the GPU's peak memory above what the process held before (weights included); the
tokens fed with and without padding and through the LM head; the FLOPs of what is fed (padding
included) against each context once with no padding, the TFLOP/s reached and its fraction of the
H200's 790 TFLOP/s bfloat16 peak; and the breakdown above, with the bytes copied to the device
per pass.

How long: estimated 60 s on an H200 (a guess until the first GPU run: saving and loading the 2 GB
model is most of it, each scoring pass should take about a second), 8 s in the dry run.
"""

from __future__ import annotations

import gc
import time

from gpu.batch_auto import Probe
from gpu.common import LM_HEAD_MODES, PEAK_BF16, SPEED_TARGET_S, Check, compare, one_line, report_scores, sync
from gpu.context import Ctx
from gpu.profiling import profiled_pass, timed_phases


def fed_flops(model, batches) -> dict:
    """FLOPs of what the packed scorer really feeds: every position of every [B, T] batch, padding
    included (linear layers on all B*T positions, attention over the dense T*T a 4D mask asks
    for), the LM head on the kept positions only."""
    import torch

    cfg = model.config
    head = model.get_output_embeddings().weight
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) and m.weight is not head)
    qk = cfg.num_attention_heads * getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
    flops = positions = kept = 0
    for batch in batches:
        B, T = len(batch), max(e.packed_length for e in batch)
        k = sum(1 + sum(len(c) - 1 for c in e.continuations) for e in batch)
        flops += 2.0 * linear * B * T + 4.0 * cfg.num_hidden_layers * qk * B * T * T + 2.0 * head.numel() * k
        positions += B * T
        kept += k
    return {"flops": flops, "positions": positions, "kept_positions": kept, "linear_params": linear}


def h2d_bytes(batches, mask_itemsize: int) -> int:
    """Bytes the packed scorer copies to the device per pass: ids, positions (int64), the 4D mask
    (model dtype) and the keep mask (bool), from the code in scoring.PackedScorer."""
    total = 0
    for batch in batches:
        B, T = len(batch), max(e.packed_length for e in batch)
        total += B * T * 8 * 2 + B * T * T * mask_itemsize + B * T
    return total


def check_speed(ctx: Ctx) -> dict:
    """The bundled items on the 1B-shaped model in bfloat16 with batch size auto, through
    load_model and evaluate(), then a breakdown from passes of the same scorer."""
    import torch
    from speed import flop_count

    from base_bench import evaluate
    from base_bench.backends.transformers import load_model
    from base_bench.backends.transformers_scorers import PackedScorer, check_packing, model_window
    from base_bench.engine.distributed import make_batches
    from base_bench.engine.scoring import encode_item, length_order, packing_probe, score_in_batches

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
    bs = report["config"]["batch_size_used"]
    scoring_s = report["timing"]["scoring_s"]

    # the breakdown: each piece of evaluate() measured on its own
    window = model_window(model, tok)
    t = time.perf_counter()
    encs = [encode_item(tok, it, window=window) for it in ctx.items]
    tokenize_s = time.perf_counter() - t
    order = [encs[i] for i in length_order(encs)]
    sync(ctx.device)
    t = time.perf_counter()
    check_packing(model, packing_probe(order), ctx.pad_id)
    sync(ctx.device)
    packing_s = time.perf_counter() - t
    auto = _auto_on(model, order, ctx)
    scorer = PackedScorer(model, ctx.pad_id)
    sync(ctx.device)
    t = time.perf_counter()
    again = score_in_batches(scorer, encs, bs)
    sync(ctx.device)
    again_s = time.perf_counter() - t
    head_mode = scorer.keep_mode
    sizes = []  # padding against launches: the same pass at other batch sizes
    for other in sorted({8, 32, 64, 128, bs} & set(range(1, len(encs) + 1)) | {min(bs, len(encs))}):
        sync(ctx.device)
        t = time.perf_counter()
        score_in_batches(scorer, encs, other)
        sync(ctx.device)
        f = fed_flops(model, make_batches(order, other))
        sizes.append(
            {
                "batch_size": other,
                "seconds": round(time.perf_counter() - t, 4),
                "positions_with_padding": f["positions"],
                "tflop_fed": round(f["flops"] / 1e12, 3),
            }
        )
    timed = timed_phases(model, scorer, order, bs, ctx.device)
    try:
        prof = profiled_pass(scorer, encs, bs, ctx.device)
    except Exception as exc:  # noqa: BLE001 - the profiler is a diagnosis; its failure must not lose the timings
        prof = {"error": one_line(exc)}
    batches = make_batches(order, bs)
    fed = fed_flops(model, batches)
    useful = flop_count(model, encs)["once"]
    tokens_fed = sum(e.packed_length for e in encs)
    pair_tokens = sum(len(e.context) * len(e.continuations) + sum(map(len, e.continuations)) for e in encs)
    same = compare(report_scores(report, ctx.ids), again, ctx.ids)
    out = {
        "model": key,
        "dtype": "bfloat16",
        "items": len(ctx.items),
        "batch_size_used": bs,
        "lm_head_mode": head_mode,
        "lm_head_modes": LM_HEAD_MODES,
        "model_dir_save_s": ctx.memo.get(("save_s", key)),
        "load_s": round(load_s, 3),
        "load_what": "base_bench.backends.transformers.load_model on the saved export: fingerprint, tokenizer, from_pretrained, "
        ".to(device); the page cache is warm (the export was written just before)",
        "evaluate_wall_s": round(eval_s, 3),
        "scoring_s": scoring_s,
        "report_timing": report["timing"],
        "packing_check": report["config"]["packing_check"],
        "memory": peak,
        "tokens": {
            "fed_without_padding": tokens_fed,
            "fed_with_padding": fed["positions"],
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
            "phases": timed,
            "profile": prof,
            "host_to_device_bytes_per_pass": h2d_bytes(batches, torch.finfo(torch.bfloat16).bits // 8),
        },
    }
    out["met"] = bool(cuda and scoring_s <= SPEED_TARGET_S) if cuda else None
    out["target"] = f"≤ {SPEED_TARGET_S:g} s of scoring (350 items, 1B-shaped, bfloat16, batch auto, on the GPU)"
    frac = out["flops"]["fraction_of_790_tflops_peak"]
    out["summary"] = (
        f"{len(ctx.items)} items in {scoring_s:.3f} s of scoring at batch {bs}, LM head mode {head_mode} "
        f"({out['tokens_per_s']['fed']:.0f} fed tokens/s); load {load_s:.1f} s"
        + (
            f"; peak {peak['peak_allocated_gib']:.2f} GiB; {100 * frac:.2f}% of the bf16 peak"
            if cuda
            else "; on a CPU (dry run): no GPU memory, no peak fraction"
        )
    )
    del model, loaded, scorer
    ctx.free(keep=tuple(ctx.models))
    return out


def _auto_on(model, order, ctx) -> dict:
    from base_bench.backends.transformers_scorers import PackedScorer
    from base_bench.engine.batching import auto_batch_size

    probe = Probe(PackedScorer(model, ctx.pad_id))
    sync(ctx.device)
    t = time.perf_counter()
    bs = auto_batch_size(probe, order, ctx.device)
    sync(ctx.device)
    return {"batch_size": bs, "seconds": round(time.perf_counter() - t, 4), "probes": probe.tried}


CHECK = Check("speed", "Speed: 350 items, 1B-shaped, bfloat16, batch auto", check_speed, 60, 8)

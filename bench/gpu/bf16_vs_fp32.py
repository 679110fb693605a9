"""Check `bf16_vs_fp32`: what does bfloat16 cost against float32, on the same weights?

What it checks: the big model (1B-shaped on a GPU, tiny in the dry run) in float32 and in
bfloat16, scored by the card-literal loop and by the packed scorer at batch 8; and the model cast
with `model.to(torch.bfloat16)`, which also casts the rotary inv_freq buffer that
from_pretrained(dtype=torch.bfloat16) keeps in float32. No target: the spread is reported.

What it records: four comparisons (loop bf16 vs loop fp32, packed bf16 vs loop fp32, packed bf16
vs packed fp32, the fully cast model vs loop fp32), each with the largest, median and
99th-percentile per-choice |Δ|, the predictions that flip, and the largest float32 margin (best
minus second-best mean log-prob) of a flipped item; the median float32 margin of all items.

How long: estimated 20 s on an H200 (a guess until the first GPU run; it reuses the exactness
check's loops and scores when that ran first), 2 s in the dry run.
"""

from __future__ import annotations

import statistics

from gpu.common import EVAL_BATCH, compare, margin
from gpu.context import Check, Ctx


def check_bf16_vs_fp32(ctx: Ctx) -> dict:
    """The same weights in bfloat16 and float32: per-choice |delta| and flipped predictions."""
    key = ctx.big
    ref32, _ = ctx.reference(key, "float32")
    ref16, _ = ctx.reference(key, "bfloat16")
    p32, _ = ctx.scores(key, "float32", "packed", EVAL_BATCH)
    p16, _ = ctx.scores(key, "bfloat16", "packed", EVAL_BATCH)
    cast, _ = ctx.scores(key, "bfloat16-cast", "packed", EVAL_BATCH)
    ctx.free(keep=tuple(k for k in ctx.models if k[1] != "bfloat16-cast"))
    rows = []
    for name, a, b in (
        ("loop bfloat16 vs loop float32", ref16, ref32),
        (f"packed bfloat16 vs loop float32 (batch {EVAL_BATCH})", p16, ref32),
        (f"packed bfloat16 vs packed float32 (batch {EVAL_BATCH})", p16, p32),
        (f"packed, model.to(bfloat16), rotary buffer cast too, vs loop float32 (batch {EVAL_BATCH})", cast, ref32),
    ):
        c = compare(a, b, ctx.ids)
        flipped = set(c["differing_items"])
        margins = [margin(s) for i, s in zip(ctx.ids, b) if i in flipped]
        c["largest_float32_margin_of_a_flipped_item"] = max(margins) if margins else None
        rows.append({"comparison": name, **c})
    margins32 = [margin(s) for s in ref32]
    main = rows[1]
    return {
        "target": "none: reported",
        "met": None,
        "model": key,
        "items": len(ctx.items),
        "rows": rows,
        "bfloat16_model": "the float32 weights cast, float32 buffers kept (the rotary inv_freq), as "
        "from_pretrained(dtype=torch.bfloat16) gives; the last row casts the buffers too",
        "float32_margin_median": statistics.median(margins32),
        "summary": f"{main['comparison']}: largest |Δ| {main['max_abs_delta']:.3g}, median "
        f"{main['median_abs_delta']:.3g}; {main['predictions_differ']} of {len(ctx.items)} "
        f"predictions flip",
    }


CHECK = Check("bf16_vs_fp32", "bfloat16 against float32, same weights", check_bf16_vs_fp32, 20, 2)

"""Check `exactness`: are the runner's scorers the card's scoring, at every batch size?

What it checks: the packed scorer (the one `base-bench` runs), the plain one and the kv-cache one,
each at batch 1, 8 and 32, and the packed one at two token budgets (1,024 positions per pass, and
one holding every item in a single pass; rows hold several items), against `score_reference`,
the card read literally (one unpadded forward pass per context and continuation), in float32 and
in bfloat16. On a GPU on the tiny Llama and the 1B-shaped model, all 350 bundled items; in the dry
run on the tiny model, 20 items (a quarter of all instead of 1,024). Target: in float32 every
per-choice |Δ| ≤ 1e-4 and no prediction differs; bfloat16's spread is reported, with no target.

What it records: one row per (model, dtype, scorer, batch size or token budget) with its seconds,
the LM-head mode transformers ran (`lm_head_modes` says what each means), the largest, median and
99th-percentile |Δ| and the predictions that differ (token budgets in `token_rows`); the loop's
seconds per model and dtype; the rows it skipped at its deadline.

How long: estimated 120 s on an H200 (a guess until the first GPU run; the 22 runs on the
1B-shaped model and its two reference loops, 1,400 forward passes each, are most of it), 10 s in
the dry run. Runs past the check's deadline are skipped and named, never half-measured.
"""

from __future__ import annotations

import statistics

from gpu.common import BATCH_SIZES, FP32_TARGET, LM_HEAD_MODES, SCORER_NAMES, compare, one_line
from gpu.context import Check, Ctx
from gpu.models import BIG, TINY

TOKEN_BUDGET = 1024  # the packed scorer's token budgets: this one (a quarter of all if that is less), and all


def _measure(ctx: Ctx, row: dict, key: str, dtype: str, scorer: str, bs, tokens, ref_rows: list) -> None:
    """Score one setting against the loop into `row` (or note its error there)."""
    try:
        ref, ref_s = ctx.reference(key, dtype)
        if not any(r["model"] == key and r["dtype"] == dtype for r in ref_rows):
            ref_rows.append({"model": key, "dtype": dtype, "seconds": round(ref_s, 3)})
        got, s = ctx.scores(key, dtype, scorer, bs, tokens)
        setting = bs if tokens is None else ("tokens", tokens)
        row.update(
            seconds=round(s, 3),
            lm_head_mode=ctx.memo[("keep_mode", key, dtype, scorer, setting)],
            **compare(got, ref, ctx.ids),
        )
    except Exception as exc:  # noqa: BLE001 - one failing scorer must not hide the others
        row["error"] = one_line(exc)


def token_budgets(encs) -> list[tuple[int, bool]]:
    """(budget, holds every item) for the token-budget rows: TOKEN_BUDGET (or a quarter of all, on a
    set too small for it to cut), and a budget that holds every item in one pass (the rows
    first-fit-decreasing packs, times the longest item)."""
    from base_bench.engine.packing import longest_first, pack_rows

    order = longest_first(encs)
    everything = len(pack_rows(order, order[0].packed_length)) * order[0].packed_length
    return [(min(TOKEN_BUDGET, everything // 4), False), (everything, True)]


def check_exactness(ctx: Ctx) -> dict:
    """Packed, plain and kv-cache scorers against score_reference, batch 1/8/32, and the packed one
    at token budgets, float32 and bfloat16."""
    rows, token_rows, skipped, ref_rows = [], [], [], []
    models = [TINY] if ctx.dry else [TINY, BIG]
    for key in models:
        for dtype in ("float32", "bfloat16"):
            for scorer in SCORER_NAMES:
                for bs in BATCH_SIZES:
                    row = {"model": key, "dtype": dtype, "scorer": scorer, "batch_size": bs}
                    if ctx.out_of_time():
                        skipped.append(row)
                        continue
                    _measure(ctx, row, key, dtype, scorer, bs, None, ref_rows)
                    rows.append(row)
            for n, whole in token_budgets(ctx.encoded(key)):
                row = {"model": key, "dtype": dtype, "scorer": "packed", "batch_tokens": n, "all_items": whole}
                if ctx.out_of_time():
                    skipped.append(row)
                    continue
                _measure(ctx, row, key, dtype, "packed", None, n, ref_rows)
                token_rows.append(row)
    everything = rows + token_rows
    fp32 = [r for r in rows if r["dtype"] == "float32"]
    ok32 = [r for r in fp32 if "error" not in r]
    tok32 = [r for r in token_rows if r["dtype"] == "float32" and "error" not in r]
    ok16 = [r for r in everything if r["dtype"] == "bfloat16" and "error" not in r]
    worst32 = max((r["max_abs_delta"] for r in ok32), default=None)
    worst32_tokens = max((r["max_abs_delta"] for r in tok32), default=None)
    flips32 = sum(r["predictions_differ"] for r in ok32 + tok32)
    worst16 = max((r["max_abs_delta"] for r in ok16), default=None)
    errors = [r for r in everything if "error" in r]
    met = (
        bool(ok32)
        and bool(tok32)
        and not errors
        and not any(r["dtype"] == "float32" for r in skipped)
        and max(worst32, worst32_tokens) <= FP32_TARGET
        and flips32 == 0
    )
    summary = (
        f"float32: largest per-choice |Δ| vs the loop {worst32:.2e} by batch size, "
        + (f"{worst32_tokens:.2e} by token budget" if tok32 else "no token budget measured")
        + f", {flips32} predictions differ ({len(ok32) + len(tok32)} runs)"
        if ok32
        else "float32: nothing measured"
    )
    if ok16:
        summary += (
            f"; bfloat16: largest |Δ| {worst16:.2e} (median of the runs' largest "
            f"{statistics.median(r['max_abs_delta'] for r in ok16):.2e}), "
            f"{sum(r['predictions_differ'] for r in ok16)} predictions differ over {len(ok16)} runs"
        )
    if errors:
        summary += f"; {len(errors)} runs failed"
    if skipped:
        summary += f"; {len(skipped)} runs skipped at the time limit"
    return {
        "target": f"float32: every per-choice |Δ| ≤ {FP32_TARGET:g} and no prediction differs, at every batch "
        "size and token budget; bfloat16: the spread is reported, no target",
        "met": met,
        "summary": summary,
        "items": len(ctx.items),
        "reference_loop": ref_rows,
        "rows": rows,
        "token_rows": token_rows,
        "lm_head_modes": LM_HEAD_MODES,
        "skipped_at_time_limit": skipped,
        "float32_worst": worst32,
        "float32_worst_token_budgets": worst32_tokens,
        "bfloat16_worst": worst16,
    }


CHECK = Check("exactness", "Exactness against the card-literal loop", check_exactness, 120, 10)

"""Check `evaluate`: does `base_bench.evaluate()` work on a model in GPU memory, as a training job
would call it?

What it checks: evaluate() on the in-memory bfloat16 big model (1B-shaped on a GPU, tiny in the
dry run), batch 8, with an out-dir. Target: a full report on the model's device and dtype, the
packed scorer with its packing check passed, the run files written (report.json, predictions.md,
partial_results.jsonl, run_config.json), the model left as found (mode, dtype, device,
requires_grad), and scores equal to the packed scorer's at the same batch size (≤ 1e-4).

What it records: the seconds, the run's facts (device, dtype, scorer, batch sizes, files), its
scores against the packed scorer and against the bfloat16 card-literal loop, and any problem.

How long: estimated 15 s on an H200 (a guess until the first GPU run), 2 s in the dry run.
"""

from __future__ import annotations

from gpu.common import EVAL_BATCH, SAME_TARGET, compare, report_scores, run_facts
from gpu.context import Check, Ctx


def check_evaluate(ctx: Ctx) -> dict:
    """base_bench.evaluate on the in-memory bfloat16 model, with an out-dir."""
    key = ctx.big
    model = ctx.model(key, "bfloat16")
    before = (
        model.training,
        next(model.parameters()).dtype,
        str(next(model.parameters()).device),
        sum(p.requires_grad for p in model.parameters()),
    )
    report, secs, out = ctx.evaluate_report(key)
    after = (
        model.training,
        next(model.parameters()).dtype,
        str(next(model.parameters()).device),
        sum(p.requires_grad for p in model.parameters()),
    )
    got = report_scores(report, ctx.ids)
    packed, _ = ctx.scores(key, "bfloat16", "packed", EVAL_BATCH)
    ref, _ = ctx.reference(key, "bfloat16")
    facts = run_facts(report, out)
    want_files = {"report.json", "predictions.md", "partial_results.jsonl", "run_config.json"}
    vs_packed = compare(got, packed, ctx.ids)
    problems = []
    if facts["items"] != len(ctx.items):
        problems.append(f"{facts['items']} items in the report, {len(ctx.items)} asked")
    if facts["device"] != str(ctx.device) or facts["dtype"] != "bfloat16":
        problems.append(f"report says {facts['device']} {facts['dtype']}")
    if not facts["packing_check_ok"] or facts["scorer"] != "packed":
        problems.append(f"scorer {facts['scorer']}, packing check ok={facts['packing_check_ok']}")
    if not want_files <= set(facts["files"]):
        problems.append(f"run files {facts['files']}")
    if before != after:
        problems.append(f"model changed: {before} -> {after}")
    if vs_packed["max_abs_delta"] > SAME_TARGET or vs_packed["predictions_differ"]:
        problems.append("scores differ from the packed scorer's at the same batch size")
    return {
        "target": f"a full report on {ctx.device}, the run files written, the model left as found, scores as "
        f"the packed scorer's at batch {EVAL_BATCH} (≤ {SAME_TARGET:g})",
        "met": not problems,
        "problems": problems,
        "model": key,
        "seconds": round(secs, 3),
        "run": facts,
        "vs_packed_scorer_same_batch": vs_packed,
        "vs_reference_loop_bfloat16": compare(got, ref, ctx.ids),
        "summary": (
            f"evaluate() on {ctx.device}: {facts['items']} items, scorer {facts['scorer']}, "
            f"|Δ| vs the packed scorer {vs_packed['max_abs_delta']:.2e}"
            + (f"; problems: {'; '.join(problems)}" if problems else "")
        ),
    }


CHECK = Check("evaluate", "evaluate() on the model", check_evaluate, 15, 2)

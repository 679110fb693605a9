"""What the GPU checks share besides the models: the constants and targets, and the small pure
helpers (comparing two score lists, JSON-safe values). Imports no model library at import time, and
no other module of the package: every other module imports this one (the `Check` record the runner
lists is in gpu/context.py, beside the `Ctx` its function takes).

    from gpu.common import compare, FP32_TARGET
    c = compare(got, ref, ids)          # per-choice |delta| and the items whose prediction differs
    c["max_abs_delta"] <= FP32_TARGET
"""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path

import benchlib

ROOT = benchlib.ROOT  # this checkout, which importing benchlib put first on sys.path
SCHEMA = "base-bench-gpu-check/1"

BATCH_SIZES = (1, 8, 32)
SCORER_NAMES = ("packed", "plain", "kv-cache")
FP32_TARGET = 1e-4  # largest per-choice |delta| against the card-literal loop, float32
SAME_TARGET = 1e-4  # two runs of the same weights on the same device that should agree
SPEED_TARGET_S = 1.0  # scoring seconds, 350 items, 1B-shaped model, bfloat16, batch auto
PEAK_BF16 = 790e12  # the H200's dense bfloat16 rate in FLOP/s
EVAL_BATCH = 8  # the CLI's default batch size, used where two runs must cut the same batches
DRY_ITEMS = 20
DEFAULT_BUDGET_S = 450.0  # the whole run in at most 8 minutes
LM_HEAD_MODES = (
    "scoring._BatchScorer.keep_mode: 'mask' = transformers took a boolean logits_to_keep and ran the LM "
    "head at the scored positions only; 'slice' = it takes an int only (transformers 5.17 does), so "
    "the head ran from the first scored column of the batch on, and the first batch was run twice "
    "(the boolean attempt fails at the head); 'full' = no logits_to_keep at all"
)


class UsageError(Exception):
    """Bad flags or a missing file: one line on stderr, exit 2."""


# ------------------------------------------------------------------------------------ small helpers


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:600]


def clean(obj):
    """JSON-safe: non-finite floats as strings, paths and dtypes as text, tuples as lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    return str(obj)


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))
    return s[k]


def compare(got, ref, ids) -> dict:
    """Per-choice |delta| of summed log-probs between two score lists (same items, same order),
    and the items whose prediction (the card's rule: highest mean log-prob) differs."""
    from base_bench.items.records import pick

    deltas = [abs(x.logprob - y.logprob) for a, b in zip(got, ref) for x, y in zip(a, b)]
    differ = [i for i, a, b in zip(ids, got, ref) if pick(a) != pick(b)]
    return {
        "max_abs_delta": max(deltas) if deltas else None,
        "median_abs_delta": statistics.median(deltas) if deltas else None,
        "p99_abs_delta": percentile(deltas, 0.99) if deltas else None,
        "choices": len(deltas),
        "predictions_differ": len(differ),
        "differing_items": differ[:20],
    }


def margin(scores) -> float:
    """The gap between the best and second-best mean log-prob of one item."""
    means = sorted((c.mean for c in scores), reverse=True)
    return means[0] - means[1] if len(means) > 1 else float("inf")


def report_scores(report: dict, ids: list[str]):
    """A report's per-choice scores in the order of `ids`."""
    from base_bench.items.records import ChoiceScore

    by_id = {it["id"]: it for it in report["items"]}
    return [[ChoiceScore(c["logprob"], c["n_tokens"]) for c in by_id[i]["choices"]] for i in ids]


def run_facts(report: dict, out_dir: Path | None) -> dict:
    """What a run's report.json says about how it ran, and the files its folder holds."""
    cfg = report["config"]
    facts = {k: cfg.get(k) for k in ("device", "dtype", "scorer", "batch_size", "batch_size_used", "world_size")}
    facts["packing_check_ok"] = cfg["packing_check"]["ok"]
    facts["items"] = len(report["items"])
    facts["scoring_s"] = report["timing"]["scoring_s"]
    if out_dir is not None:
        facts["files"] = sorted(p.name for p in Path(out_dir).iterdir()) if Path(out_dir).is_dir() else []
    return facts

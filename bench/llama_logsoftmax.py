"""How far the llama.cpp backend's float32 log_softmax is from float64, and what each costs, on a real GGUF.

    python bench/llama_logsoftmax.py --model M.gguf --threads 2 --json /tmp/gemma-lsm.json
    python bench/llama_logsoftmax.py --model M.gguf --limit 20     # a quick look

One scoring pass over the bundled items with the backend's shared-context scorer (batches of 8,
longest first, as a run goes). At every llama_decode the logits llama.cpp returns go through each
method below, on the same bits; each token's log-probs are carried as a vector (one entry per
method), so every choice's score is summed per method in the scorer's own order. Reported per
method: max |delta| of the per-choice scores (the sum of log-probs) and of the means against
`float64` (every step in float64: the backend's log_softmax before float32 exp), predictions that
differ, and the seconds spent in it (process CPU time, the same logits for each). Also the
smallest gap between an item's best and second-best mean under float64, for scale.

Methods: `float64` (astype float64, max, subtract, exp, sum, log); `backend` (the backend's
`log_probs`: exp in float32 after the max is subtracted, the terms summed with a float64
accumulator, the rest in float64); `f32-exp-blocks-of-8` (the same, but the terms added 8 at a
time in float32 and only those partial sums in float64: cheaper, less exact).

bench/RESULTS.md: "log_softmax in float32: how far the scores move" (from its --json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from benchlib import ROOT, markdown_table, timed_call

from base_bench.backends import llama_cpp
from base_bench.backends.llama_cpp import LlamaCppBackend, SharedContextScorer, load_tokenizer
from base_bench.engine.scoring import encode_item, score_in_batches
from base_bench.items.dataset import load_dataset_file

CHUNK = 1 << 22


def _rows(targets):
    rows = np.repeat(np.arange(len(targets)), [len(t) for t in targets])
    toks = np.fromiter((t for tt in targets for t in tt), dtype=np.int64, count=len(rows))
    return rows, toks


def float64(logits, targets):
    """The backend's log_softmax before float32 exp: every step in float64."""
    step = max(1, CHUNK // logits.shape[1])
    out = []
    for a in range(0, len(targets), step):
        x = logits[a : a + step].astype(np.float64)
        rows, toks = _rows(targets[a : a + step])
        m = x.max(axis=1)
        picked = x[rows, toks]
        x -= m[:, None]
        np.exp(x, out=x)
        lse = m + np.log(x.sum(axis=1))
        out += (picked - lse[rows]).tolist()
    return out


def f32_exp_blocks_of_8(logits, targets):
    """exp in float32 after the max is taken out; the terms added 8 at a time in float32, and those
    partial sums in float64 (cheaper than a float64 accumulator over every term)."""
    step = max(1, CHUNK // logits.shape[1])
    cut = logits.shape[1] - logits.shape[1] % 8
    out = []
    for a in range(0, len(targets), step):
        x = logits[a : a + step]
        rows, toks = _rows(targets[a : a + step])
        m = x.max(axis=1, keepdims=True)
        e = np.subtract(x, m, dtype=np.float32)
        np.exp(e, out=e)
        partial = e[:, :cut].reshape(len(x), 8, cut // 8).sum(axis=1)
        total = partial.sum(axis=1, dtype=np.float64) + e[:, cut:].sum(axis=1, dtype=np.float64)
        lse = m[:, 0].astype(np.float64) + np.log(total)
        out += (x[rows, toks].astype(np.float64) - lse[rows]).tolist()
    return out


METHODS = {"float64": float64, "backend": llama_cpp.log_probs, "f32-exp-blocks-of-8": f32_exp_blocks_of_8}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a GGUF file")
    ap.add_argument("--data", default=str(ROOT / "data" / "test.jsonl"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, help="only the first N items (a quick look)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)

    items = list(load_dataset_file(args.data).items)[: args.limit]
    backend = LlamaCppBackend.load(args.model, device="cpu", threads=args.threads)
    tokenizer, _ = load_tokenizer(args.model)
    encs = [encode_item(tokenizer, it, window=backend.window) for it in items]
    names = list(METHODS)
    cpu = dict.fromkeys(names, 0.0)
    calls = {"rows": 0, "calls": 0}

    def every_method(logits, targets):
        got = []
        for name in names:
            t = time.process_time()
            got.append(METHODS[name](logits, targets))
            cpu[name] += time.process_time() - t
        calls["rows"] += len(targets)
        calls["calls"] += 1
        return [np.array(v) for v in zip(*got)]  # one vector per token: the scorer sums them per method

    llama_cpp.log_probs = every_method  # what _Context.feed calls
    scorer = SharedContextScorer(backend, max(e.packed_length for e in encs), max(len(e.continuations) for e in encs))
    scores, wall = timed_call(score_in_batches, scorer, encs, 8)

    sums = {n: [[float(c.logprob[i]) for c in s] for s in scores] for i, n in enumerate(names)}
    counts = [[c.n_tokens for c in s] for s in scores]
    means = {n: [[v / k for v, k in zip(r, c)] for r, c in zip(sums[n], counts)] for n in names}
    picks = {n: [int(np.argmax(r)) for r in means[n]] for n in names}
    ref_means = means["float64"]
    gaps = [sorted(r)[-1] - sorted(r)[-2] for r in ref_means if len(r) > 1]
    out = {
        "model": Path(args.model).name,
        "items": len(items),
        "choices": sum(len(s) for s in scores),
        "logit_rows": calls["rows"],
        "vocab": backend.vocab_size,
        "threads": args.threads,
        "scoring_wall_s": round(wall, 1),
        "smallest_top2_gap_float64": min(gaps) if gaps else None,
        "methods": {},
    }
    for n in names:
        d_sum = max(abs(a - b) for r, q in zip(sums[n], sums["float64"]) for a, b in zip(r, q))
        d_mean = max(abs(a - b) for r, q in zip(means[n], ref_means) for a, b in zip(r, q))
        out["methods"][n] = {
            "max_abs_delta_sum": d_sum,
            "max_abs_delta_mean": d_mean,
            "predictions_differ": sum(a != b for a, b in zip(picks[n], picks["float64"])),
            "cpu_s": round(cpu[n], 2),
            "ms_per_row": round(1e3 * cpu[n] / max(1, calls["rows"]), 3),
        }
    print(f"{out['model']}: {out['items']} items, {out['choices']} choices, {out['logit_rows']} logit rows")
    head = ["method", "max abs delta, choice sum", "max abs delta, choice mean", "predictions differ", "CPU s"]
    cells = [
        [n, f"{r['max_abs_delta_sum']:.1e}", f"{r['max_abs_delta_mean']:.1e}", r["predictions_differ"]]
        + [f"{r['cpu_s']:.2f}", f"{r['ms_per_row']:.3f}"]
        for n, r in out["methods"].items()
    ]
    print("\n".join(markdown_table([*head, "ms a row"], "lrrrrr", cells)))
    print(f"smallest gap between the best and second-best mean (float64): {out['smallest_top2_gap_float64']:.2e}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

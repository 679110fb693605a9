"""Do the batched scorers reproduce the card-literal unbatched loop on the whole set?

    python bench/exactness.py --model PATH_OR_GGUF [--data data/test.jsonl] [--batch-sizes 1 32]

Scores every item with `score_reference` (one unpadded forward pass per choice), then with the
packed and plain scorers at each batch size, and prints the largest |delta summed log-prob| against
the loop, how many predictions differ, and the seconds each took (all in this one run).
"""

from __future__ import annotations

import argparse
import time

import torch

from base_bench.backends.transformers import load_model
from base_bench.backends.transformers_scorers import PackedScorer, PlainScorer, model_window, score_reference
from base_bench.engine.scoring import encode_item, max_abs_diff, score_in_batches
from base_bench.items.dataset import load_dataset_file
from base_bench.items.records import pick


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", default="data/test.jsonl")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(args.model, torch.device("cpu"), torch.float32)
    model, tok = loaded.model, loaded.tokenizer
    window = model_window(model, tok)
    encs = [encode_item(tok, it, window=window) for it in load_dataset_file(args.data).items]
    t = time.perf_counter()
    ref = [score_reference(model, e) for e in encs]
    rows = [("reference loop", "-", time.perf_counter() - t, 0.0, 0)]
    for cls in (PackedScorer, PlainScorer):
        for bs in args.batch_sizes:
            t = time.perf_counter()
            got = score_in_batches(cls(model, 0), encs, bs)
            dt = time.perf_counter() - t
            flips = sum(pick(a) != pick(b) for a, b in zip(got, ref))
            rows.append((cls.name, bs, dt, max_abs_diff(got, ref), flips))
    print(f"{len(encs)} items, {args.model}, float32, {args.threads} threads")
    print("| scorer | batch size | seconds | max abs delta vs loop | predictions changed |")
    print("|---|---:|---:|---:|---:|")
    for name, bs, dt, d, flips in rows:
        print(f"| {name} | {bs} | {dt:.1f} | {d:.2e} | {flips} |")


if __name__ == "__main__":
    main()

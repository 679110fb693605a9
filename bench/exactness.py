"""Do the batched scorers give the scores of one item at a time, at every batch setting, on the whole set?

    python bench/exactness.py --model PATH_OR_GGUF [--data data/test.jsonl] [--dtype float32]
        [--batch-sizes 8 32 350] [--batch-tokens 1024 4096 all] [--one-item-per-row 8]
        [--plain-batch-sizes 8] [--loop]

Loads the model in float32 on the CPU (a .gguf through base-bench's transformers path, dequantized),
then scores every item with the packed scorer one item per pass (the baseline: a row of its own, no
padding), and again at each `--batch-sizes` N (N items per pass, several per row where that feeds
fewer positions) and each `--batch-tokens` N (rows packed first-fit-decreasing up to the longest item,
passes of at most N positions; "all" is a budget that holds every item in one pass), exactly as the
runner cuts them (engine/packing.py). `--one-item-per-row` adds batch sizes with each item in a row
of its own (the layout before rows held several items), `--plain-batch-sizes` the plain
one-row-per-choice scorer, `--loop` the card-literal loop (one unpadded forward per choice; slow).
For each: the passes, the positions fed against those the items hold, seconds, the largest |delta
summed log-prob| against the baseline (and the loop) and of the mean log-prob per token (what the
card ranks by), the choice it is on, and how many predictions
differ, all in this one run. `--dtype float64` casts the float32 weights to float64 (exactly), which
separates float32 rounding from a layout that is wrong: the log-softmax is float32 either way.

bench/RESULTS.md: "Scores at every batch setting against one item at a time (measured)" (the table it prints).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from benchlib import load_cpu_model, table_row, table_rule, timed_call

from base_bench.backends.transformers_scorers import (
    PackedScorer,
    PlainScorer,
    model_window,
    score_reference,
    sliding_window,
)
from base_bench.engine.packing import Batching, batch_cost, longest_first, pack_rows
from base_bench.engine.scoring import encode_item, length_order, max_abs_diff, score_in_batches
from base_bench.items.dataset import load_dataset_file
from base_bench.items.records import pick


def feed(encs, plan: Batching, rows: bool = True) -> tuple[int, int]:
    """(passes, positions fed) as the packed scorer lays the passes of `plan` out (`rows` False:
    one item per row)."""
    order = longest_first(encs)
    row = order[0].packed_length
    passes = plan.cut(order, row)
    return len(passes), sum(batch_cost(b, plan.row_capacity(row) if rows else None) for b in passes)


def worst(a, b) -> str:
    """The choice where `a` and `b` differ most, and its summed log-prob in `b`."""
    d, i, k = max(
        (abs(x.logprob - y.logprob), i, k) for i, (p, q) in enumerate(zip(a, b)) for k, (x, y) in enumerate(zip(p, q))
    )
    return f"item {i} choice {k} ({b[i][k].logprob:.1f} over {b[i][k].n_tokens} tokens)" if d else "-"


def max_mean_diff(a, b) -> float:
    """The largest |delta| of a choice's mean log-prob per token, the number the card ranks by."""
    return max(abs(x.mean - y.mean) for p, q in zip(a, b) for x, y in zip(p, q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", default="data/test.jsonl")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32, 350])
    ap.add_argument("--batch-tokens", nargs="+", default=["1024", "4096", "all"])
    ap.add_argument("--one-item-per-row", type=int, nargs="*", default=[], metavar="N")
    ap.add_argument("--plain-batch-sizes", type=int, nargs="*", default=[])
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--loop", action="store_true", help="also run the card-literal loop (slow)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    loaded, load_s = load_cpu_model(args.model)
    model, tok = loaded.model, loaded.tokenizer
    if args.dtype == "float64":
        model.to(torch.float64)  # every float32 weight is a float64 exactly
    window = model_window(model, tok)
    encs = [encode_item(tok, it, window=window) for it in load_dataset_file(args.data).items]
    held = sum(e.packed_length for e in encs)
    longest = max(e.packed_length for e in encs)
    all_at_once = len(pack_rows(encs, longest)) * longest

    table = []

    def one_item_per_row(scorer, batch_size):  # the same passes, each item in a row of its own
        order = length_order(encs)
        got = [None] * len(encs)
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            for i, sc in zip(idx, scorer([encs[i] for i in idx])):
                got[i] = sc
        return got

    def run(name, setting, plan, scorer, rows=True, **how):
        if rows:
            got, seconds = timed_call(score_in_batches, scorer, encs, **how)
        else:
            got, seconds = timed_call(one_item_per_row, scorer, how["batch_size"])
        passes, fed = feed(encs, plan, rows) if plan is not None else ("-", None)
        table.append(dict(name=name, setting=setting, passes=passes, fed=fed, seconds=seconds, scores=got))
        print(f"{name} {setting}: {seconds:.1f} s", flush=True)
        return got

    base = run("packed", "batch size 1", Batching(items=1), PackedScorer(model, 0), batch_size=1)
    for bs in args.batch_sizes:
        run("packed", f"batch size {bs}", Batching(items=bs), PackedScorer(model, 0), batch_size=bs)
    for text in args.batch_tokens:
        n = all_at_once if text == "all" else int(text)
        setting = f"batch tokens {n}" + (" (all items in one pass)" if text == "all" else "")
        run("packed", setting, Batching(tokens=n), PackedScorer(model, 0), batch_tokens=n)
    for bs in args.one_item_per_row:
        run(
            "packed, one item per row",
            f"batch size {bs}",
            Batching(items=bs),
            PackedScorer(model, 0),
            False,
            batch_size=bs,
        )
    for bs in args.plain_batch_sizes:
        run("plain", f"batch size {bs}", None, PlainScorer(model, 0), batch_size=bs)
    loop = None
    if args.loop:
        loop, seconds = timed_call(lambda: [score_reference(model, e) for e in encs])
        table.append(dict(name="card-literal loop", setting="-", passes="-", fed=None, seconds=seconds, scores=loop))

    win, kinds = sliding_window(model)
    print(
        f"{len(encs)} items, {Path(args.model).name}, {args.dtype} on the CPU, {args.threads} threads (loaded in {load_s:.0f} s); "
        f"positions held {held}, longest item {longest}; sliding window: "
        + (f"{win} ({', '.join(kinds) if kinds else 'every layer'})" if win else "none")
        + f"; the furthest an item reaches: {max(len(e.context) + max(len(c) for c in e.continuations) - 1 for e in encs)}"
    )
    print()
    head = ["scorer", "setting", "passes", "positions fed", "padding", "seconds", "max abs delta vs batch size 1"]
    head += ["of the mean", *(["max abs delta vs loop"] if loop else []), "where (vs batch size 1)"]
    print(table_row([*head, "predictions ≠ batch size 1"]))
    print(table_rule("llrrrrrr" + ("r" if loop else "") + "lr"))
    for r in table:
        fed = f"{r['fed']}" if r["fed"] is not None else "n/a"
        pad = f"{100 * (1 - held / r['fed']):.1f}%" if r["fed"] else "n/a"
        flips = sum(pick(a) != pick(b) for a, b in zip(r["scores"], base))
        cells = [r["name"], r["setting"], str(r["passes"]), fed, pad, f"{r['seconds']:.1f}"]
        cells += [f"{max_abs_diff(r['scores'], base):.2e}", f"{max_mean_diff(r['scores'], base):.2e}"]
        if loop:
            cells.append(f"{max_abs_diff(r['scores'], loop):.2e}")
        cells += [worst(r["scores"], base), str(flips)]
        print(table_row(cells))


if __name__ == "__main__":
    main()

"""How many positions each batch setting feeds, against what the items hold, and the FLOPs of both.

    python bench/padding.py [--batch-sizes 8 32 350] [--batch-tokens 1024 2048 4096 8192 all]

Computed, not timed: the bundled set tokenized with SmolLM2's tokenizer (the copy bench/gpu_check.py
carries in bench/assets/), cut into passes and rows by the runner's own code (engine/packing.py),
and counted with bench/speed.py's `fed_flops` on the 1B-shaped model bench/gpu_check.py times on a
GPU (built on the meta device: no weights, no memory). Each `--batch-sizes` N appears twice: with
one item per row, the layout before rows held several items, and as the runner cuts it now.

bench/RESULTS.md: "Positions fed against positions held, and the FLOPs of both (computed)" (the table it prints).
"""

from __future__ import annotations

import argparse
import sys

import torch
from benchlib import ROOT, table_row, table_rule
from gpu.models import BIG, load_tokenizer, model_config
from speed import fed_flops, flop_count, packed_passes

from base_bench.engine.packing import Batching, longest_first, pack_rows
from base_bench.engine.scoring import encode_item
from base_bench.items.dataset import load_dataset_file


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / "data" / "test.jsonl"))
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32, 350])
    ap.add_argument("--batch-tokens", nargs="+", default=["1024", "2048", "4096", "8192", "all"])
    args = ap.parse_args(argv)
    from transformers import AutoModelForCausalLM

    tok = load_tokenizer()
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config(BIG, tok))
    encs = [encode_item(tok, it) for it in load_dataset_file(args.data).items]
    order = longest_first(encs)
    row = order[0].packed_length
    held = sum(e.packed_length for e in encs)
    once = flop_count(model, encs)["once"]
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"{len(encs)} items, {held} positions held (each context once, each continuation but its last "
        f"token), the longest item {row}; the 1B-shaped model ({n_params / 1e9:.2f}B parameters): "
        f"{once / 1e12:.1f} TFLOP with each context once and no padding"
    )
    print()
    print(table_row(["setting", "rows", "passes", "positions fed", "padding", "TFLOP fed", "× each context once"]))
    print(table_rule("llrrrrr"))

    def line(setting, layout, plan, row_length):
        passes = plan.cut(order, row)
        f = fed_flops(model, packed_passes(passes, row_length))
        pad = f"{100 * (1 - held / f['positions']):.1f}%"
        print(
            table_row(
                [
                    setting,
                    layout,
                    len(passes),
                    f"{f['positions']:,}",
                    pad,
                    f"{f['flops'] / 1e12:.1f}",
                    f"{f['flops'] / once:.2f}",
                ]
            )
        )

    for n in args.batch_sizes:
        line(f"--batch-size {n}", "one item per row (before)", Batching(items=n), None)
        line(f"--batch-size {n}", "several items per row", Batching(items=n), row)
    for text in args.batch_tokens:
        n = len(pack_rows(order, row)) * row if text == "all" else int(text)
        plan = Batching(tokens=n)
        what = f"--batch-tokens {n}" + (" (all items in one pass)" if text == "all" else "")
        line(what, "several items per row", plan, plan.row_capacity(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())

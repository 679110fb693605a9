"""Is a LoRA scored applied (through the PeftModel) the same as the model merged with it?

    python bench/peft_merge.py --model PATH_OR_GGUF [--limit 100] [--steps 3] [--threads 1]

Trains a rank-8 LoRA on q_proj and v_proj for a few AdamW steps (lr 1e-3, eight short sentences,
seeded), then scores the first --limit bundled items three ways with `evaluate()`: the PeftModel
(the adapter applied, as `--peft` scores it), the base model, and the merged model
(merge_and_unload). It prints the median and largest |delta summed log-prob| per choice and the
predictions that flip, LoRA against base and LoRA against merged, and the packing check. Nothing
is timed. One run, one machine.

bench/RESULTS.md: none. docs/backends.md quotes its numbers (LoRA adapters).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys

import torch
from benchlib import ROOT, load_cpu_model

sys.path.insert(0, str(ROOT / "tests"))

from base_bench import evaluate

from tiny import CORPUS


def logprobs(report: dict) -> list[float]:
    return [c["logprob"] for it in report["items"] for c in it["choices"]]


def against(a: dict, b: dict) -> str:
    d = [abs(x - y) for x, y in zip(logprobs(a), logprobs(b))]
    flips = sum(x["prediction"] != y["prediction"] for x, y in zip(a["items"], b["items"]))
    return f"median |delta| {statistics.median(d):.3g}, max {max(d):.3g} nats; {flips} predictions flip"


def main() -> None:
    from peft import LoraConfig, get_peft_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    loaded, _ = load_cpu_model(args.model)
    tok = loaded.tokenizer
    base = evaluate(loaded.model, tok, limit=args.limit, progress=False)
    torch.manual_seed(0)
    pm = get_peft_model(
        loaded.model,
        LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM"),
    )
    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=1e-3)
    batch = [torch.tensor([tok(s)["input_ids"]]) for s in CORPUS[:8]]
    pm.train()
    for _ in range(args.steps):
        loss = sum(pm(input_ids=x, labels=x).loss for x in batch) / len(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    lora = evaluate(pm, tok, limit=args.limit, progress=False)
    merged = evaluate(copy.deepcopy(pm).merge_and_unload(), tok, limit=args.limit, progress=False)
    print(f"{args.model}: {args.limit} items, LoRA r=8 on q_proj/v_proj, {args.steps} steps")
    print(f"LoRA vs base:   {against(lora, base)}")
    print(f"LoRA vs merged: {against(lora, merged)}")
    print(f"scorer {lora['config']['scorer']}, packing check {lora['config']['packing_check']}")
    print(
        f"Elo: LoRA {lora['results']['overall']['elo']:.1f}, base {base['results']['overall']['elo']:.1f}, "
        f"merged {merged['results']['overall']['elo']:.1f}"
    )


if __name__ == "__main__":
    main()

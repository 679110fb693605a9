"""How much a served model's prompt log-probs move with what else the server computes: the numbers
behind the server check's threshold (prompt_logprobs.SPREAD_MAX).

    python bench/server_spread.py --base-url http://127.0.0.1:8000/v1 --model smollm2 \
        --seeds 10 --limit 40 --out bench/results/spread-fp32.json

For each seed, the server check (`check_engine`) on its synthetic prompts: the spread between the
same prompt scored alone, inside a batch and after prompts sharing its prefix. Then `--limit` items
of the bundled set scored at concurrency 1, 4 and 16 (so 1 to 16 prompts share the server's batch):
the largest difference per choice between those runs, and per token (choice difference / tokens).
One line of JSON per measurement is printed, and the whole record written to --out.

bench/RESULTS.md: "The server check's threshold" (from its --out JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

from benchlib import ROOT, timed_call

from base_bench.backends.prompt_logprobs import SPREAD_MAX, PromptScorer, check_engine
from base_bench.backends.server import ServerBackend
from base_bench.engine.scoring import encode_item, score_in_batches
from base_bench.items.dataset import bundled_path, load_dataset_file


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--limit", type=int, default=40)
    ap.add_argument("--label", default="", help="what the server runs (dtype, flags), for the record")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    record = {"label": args.label, "load_average": os.getloadavg(), "threshold": SPREAD_MAX, "checks": []}
    backend = ServerBackend(args.base_url, args.model, concurrency=16)
    backend.open()
    backend._probe()
    avoid = sorted(set(backend.tokenizer.all_special_ids))
    for seed in range(args.seeds):
        r = check_engine(backend.logprobs, backend.vocab_size, avoid=avoid, seed=seed, label=backend.where)
        row = {
            "seed": seed,
            **r["invariance"],
            "copy_gain": r["copy"]["gain"],
            "min_drop": min(r["alignment"]["drops"]),
        }
        record["checks"].append(row)
        print(json.dumps(row), flush=True)
    items = load_dataset_file(bundled_path()).items[: args.limit]
    encoded = [encode_item(backend.tokenizer, it, window=backend.window) for it in items]
    runs = {}
    for c in (1, 4, 16):
        backend.concurrency = c
        runs[c], seconds = timed_call(score_in_batches, PromptScorer(backend.logprobs), encoded, batch_size=8)
        print(json.dumps({"concurrency": c, "seconds": round(seconds, 2)}), flush=True)
    per_choice, per_token = 0.0, 0.0
    for c in (4, 16):
        for ra, rb in zip(runs[1], runs[c]):
            for a, b in zip(ra, rb):
                per_choice = max(per_choice, abs(a.logprob - b.logprob))
                per_token = max(per_token, abs(a.logprob - b.logprob) / a.n_tokens)
    record["items"] = {"n": len(items), "max_abs_diff_per_choice": per_choice, "max_abs_diff_per_token": per_token}
    record["max_check_spread"] = max(r["spread"] for r in record["checks"])
    record["versions"] = backend.versions()
    record["git"] = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    print(json.dumps({k: record[k] for k in ("label", "items", "max_check_spread")}), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    backend.close()


if __name__ == "__main__":
    main()

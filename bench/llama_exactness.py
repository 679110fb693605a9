"""Is the llama.cpp backend exact and batch-invariant on the whole bundled set, for a real GGUF?

    python bench/llama_exactness.py --model M.gguf --threads 2 --json /tmp/smollm2.json
    python bench/llama_exactness.py --model M.gguf --batch-sizes 1 8 32 --limit 40   # a quick look

One process, one GGUF, the bundled items:
  1. tokenizer: llama.cpp's own tokenizer (`LlamaCppBackend.tokenizer_differences`) against the
     ids `encode_item` makes with the HF tokenizer converted from the same file, for every context and
     continuation; every item where they differ is listed;
  2. plain: every item scored one sequence per choice (context + continuation), the yardstick;
  3. for each batch size: `evaluate()` on the backend, exactly as a run does (start-up check, scorer
     choice, batching), and its per-choice scores against the plain path: max and median |delta|,
     choices over 1e-5, predictions that differ.
Prints a markdown table and writes everything to --json (bench/RESULTS.md quotes it).

bench/RESULTS.md: "Exact and batch-invariant on both models" (from its --json and the table it prints).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from benchlib import ROOT, markdown_table, timed_call

from base_bench import evaluate
from base_bench.backends.llama_cpp import EXACT_TOL, LlamaCppBackend, PlainScorer, load_tokenizer
from base_bench.engine.scoring import encode_item, score_in_batches
from base_bench.items.dataset import load_dataset_file
from base_bench.items.records import ChoiceScore, pick


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a GGUF file")
    ap.add_argument("--data", default=str(ROOT / "data" / "test.jsonl"))
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, help="only the first N items (a quick look)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)

    data = load_dataset_file(args.data)
    items = list(data.items)[: args.limit]
    backend = LlamaCppBackend.load(args.model, device="cpu", threads=args.threads)
    tokenizer, _ = load_tokenizer(args.model)
    out = {
        "model": Path(args.model).name,
        "gguf_file_type": backend.dtype,
        "items": len(items),
        "threads": args.threads,
        "versions": backend.versions(),
        "system_info": backend.describe()["llama_cpp"]["system_info"],
    }

    differ, seconds = timed_call(backend.tokenizer_differences, tokenizer, items)
    out["tokenizer"] = {"texts": len(items) * 5, "differ": differ, "seconds": seconds}
    print(f"tokenizer: {len(differ)} of {len(items) * 5} texts differ", flush=True)

    encs = [encode_item(tokenizer, it, window=backend.window) for it in items]
    plain_scorer = PlainScorer(backend, 64)
    plain, seconds = timed_call(score_in_batches, plain_scorer, encs, 8)
    out["plain"] = {"seconds": seconds, "tokens_fed": plain_scorer.counts["tokens"]}
    plain_scorer.close()
    print(f"plain path: {out['plain']['seconds']:.1f} s", flush=True)
    by_id = {e.id: s for e, s in zip(encs, plain)}

    limited = args.limit is not None
    if limited:  # evaluate() reads a file: write the first N items to a temporary data folder
        import tempfile

        tmp = tempfile.TemporaryDirectory()
        ids = {it.id for it in items}
        lines = Path(args.data).read_text().splitlines()
        (Path(tmp.name) / "data").mkdir()
        (Path(tmp.name) / "data" / "test.jsonl").write_text(
            "\n".join(ln for ln in lines if ln.strip() and json.loads(ln)["id"] in ids) + "\n"
        )
        source = tmp.name
    else:
        source = args.data

    out["runs"] = []
    for bs in args.batch_sizes:
        rep, seconds = timed_call(evaluate, backend, tokenizer, source, batch_size=bs, progress=False)
        deltas, flips, over = [], 0, 0
        for it in rep["items"]:
            got = [ChoiceScore(c["logprob"], c["n_tokens"]) for c in it["choices"]]
            ref = by_id[it["id"]]
            d = [abs(a.logprob - b.logprob) for a, b in zip(got, ref)]
            deltas += d
            over += sum(x > EXACT_TOL for x in d)
            flips += pick(got) != pick(ref)
        row = {
            "batch_size": bs,
            "scorer": rep["config"]["scorer"],
            "seconds": seconds,
            "max_abs_delta": max(deltas),
            "median_abs_delta": statistics.median(deltas),
            "choices_over_1e-5": over,
            "choices": len(deltas),
            "predictions_differ": flips,
            "overall_elo": rep["results"]["overall"]["elo"],
        }
        out["runs"].append(row)
        print(
            f"batch {bs}: {row['scorer']}, {seconds:.1f} s, max |delta| {row['max_abs_delta']:.1e}, "
            f"{over} choices over 1e-5, {flips} predictions differ",
            flush=True,
        )

    print()
    print(
        f"{out['model']} ({out['gguf_file_type']}), {len(items)} items, llama-cpp-python "
        f"{out['versions']['llama-cpp-python']}, {args.threads} threads; plain path {out['plain']['seconds']:.1f} s; "
        f"tokenizer: {len(differ)} of {len(items) * 5} texts differ"
    )
    head = ["batch size", "scorer", "seconds", "max abs delta vs plain", "median", "choices > 1e-5"]
    cells = [
        [
            r["batch_size"],
            r["scorer"],
            f"{r['seconds']:.1f}",
            f"{r['max_abs_delta']:.1e}",
            f"{r['median_abs_delta']:.1e}",
        ]
        + [f"{r['choices_over_1e-5']} of {r['choices']}", f"{r['predictions_differ']} of {len(items)}"]
        for r in out["runs"]
    ]
    print("\n".join(markdown_table([*head, "predictions ≠ plain"], "rlrrrrr", cells)))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

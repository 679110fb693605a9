"""Measure the bundled set against the quality bar of data/README.md.

    python tools/data_quality.py data/test.jsonl --model PATH_OR_GGUF [--report RUN/report.json]
                                 [--review-dir DIR] [--json OUT.json]

Prints a Markdown summary of:
* length bias: how often the correct continuation is the longest / shortest of the four, by
  characters and by the model tokenizer's token count (ties count as longest/shortest);
* near-duplicate contexts (difflib ratio > 0.8);
* the context-free baseline: the model scores each continuation after the BOS token alone;
* with --review-dir, blind-review agreement (files <category>.answers.jsonl with "id" and "answer");
* with --report, the model's accuracy by difficulty and category from a real runner report.
"""

from __future__ import annotations

import argparse
import difflib
import json
from collections import defaultdict
from pathlib import Path

from base_bench.items.dataset import load_dataset_file


def length_bias(items, measure) -> dict:
    longest = shortest = 0
    for it in items:
        lens = [measure(c) for c in it.continuations]
        mine = lens[it.label]
        longest += mine >= max(lens)
        shortest += mine <= min(lens)
    n = len(items)
    return {
        "longest": longest,
        "shortest": shortest,
        "n": n,
        "longest_pct": 100 * longest / n,
        "shortest_pct": 100 * shortest / n,
    }


def near_duplicates(items, threshold=0.8) -> list[tuple[str, str, float]]:
    out = []
    ctx = [(it.id, it.context) for it in items]
    for i in range(len(ctx)):
        for j in range(i + 1, len(ctx)):
            sm = difflib.SequenceMatcher(None, ctx[i][1], ctx[j][1], autojunk=False)
            if sm.real_quick_ratio() > threshold and sm.quick_ratio() > threshold and sm.ratio() > threshold:
                out.append((ctx[i][0], ctx[j][0], sm.ratio()))
    return out


def context_free(items, model, tok, batch_size=16) -> dict:
    from base_bench.backends.transformers_scorers import PackedScorer
    from base_bench.engine.scoring import Encoded, score_in_batches
    from base_bench.items.records import pick

    if tok.bos_token_id is None:
        raise SystemExit("the tokenizer has no BOS token; the context-free baseline needs one")
    encs = [
        Encoded(
            it.id,
            (tok.bos_token_id,),
            tuple(tuple(tok(c, add_special_tokens=False)["input_ids"]) for c in it.continuations),
        )
        for it in items
    ]
    scores = score_in_batches(PackedScorer(model, 0), encs, batch_size)
    preds = {e.id: pick(sc) for e, sc in zip(encs, scores)}
    by_cat = defaultdict(lambda: [0, 0])
    for it in items:
        by_cat[it.category][0] += preds[it.id] == it.label
        by_cat[it.category][1] += 1
    right = sum(v[0] for v in by_cat.values())
    return {"accuracy": right / len(items), "n": len(items), "by_category": {c: v[0] / v[1] for c, v in by_cat.items()}}


def review(items, review_dir: Path) -> dict:
    answers = {}
    for f in sorted(review_dir.glob("*.answers.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                d = json.loads(line)
                answers[d["id"]] = d
    missing = [it.id for it in items if it.id not in answers]
    disagree = [it.id for it in items if it.id in answers and answers[it.id]["answer"] != it.label]
    flagged = [it.id for it in items if it.id in answers and answers[it.id].get("problem")]
    n = len(items) - len(missing)
    return {
        "answered": n,
        "missing": missing,
        "agree": n - len(disagree),
        "agreement_pct": 100 * (n - len(disagree)) / n if n else 0.0,
        "disagree": disagree,
        "flagged": flagged,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--model", help="model for token counts and the context-free baseline (dir, .gguf or Hub id)")
    ap.add_argument("--report", type=Path, help="a runner report.json on this data, for the model check")
    ap.add_argument("--review-dir", type=Path)
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args()

    ds = load_dataset_file(args.data)
    items = list(ds.items)
    out: dict = {"sha256": ds.sha256, "n_items": len(items)}
    out["length_bias_chars"] = length_bias(items, len)
    dups = near_duplicates(items)
    out["near_duplicate_contexts"] = dups
    if args.model:
        import torch

        from base_bench.backends.transformers import load_model

        loaded = load_model(args.model, torch.device("cpu"), torch.float32)
        tok = loaded.tokenizer
        out["length_bias_tokens"] = length_bias(items, lambda s: len(tok(s, add_special_tokens=False)["input_ids"]))
        out["context_free"] = context_free(items, loaded.model, tok)
    if args.review_dir:
        out["review"] = review(items, args.review_dir)
    if args.report:
        rep = json.loads(args.report.read_text(encoding="utf-8"))
        res = rep["results"]
        out["model_check"] = {
            "model": rep["config"]["model"]["spec"],
            "overall_raw_accuracy": res["overall"]["raw_accuracy"],
            "overall_elo": res["overall"]["elo"],
            "by_difficulty": {k: v["raw_accuracy"] for k, v in res["difficulties"].items()},
            "by_category": {k: v["raw_accuracy"] for k, v in res["categories"].items()},
        }

    print(f"# Quality of {args.data} (SHA-256 {ds.sha256})\n")
    for key, label in (("length_bias_chars", "characters"), ("length_bias_tokens", "tokens")):
        if key in out:
            b = out[key]
            print(
                f"- Length bias ({label}): correct is longest in {b['longest']}/{b['n']} ({b['longest_pct']:.1f}%), "
                f"shortest in {b['shortest']}/{b['n']} ({b['shortest_pct']:.1f}%); ties count."
            )
    print(f"- Near-duplicate contexts (ratio > 0.8): {len(dups)}" + (f" {dups}" if dups else ""))
    if "context_free" in out:
        cf = out["context_free"]
        cats = ", ".join(f"{c} {100 * a:.0f}%" for c, a in cf["by_category"].items())
        print(f"- Context-free baseline ({args.model}, BOS only): {100 * cf['accuracy']:.1f}% ({cats})")
    if "review" in out:
        r = out["review"]
        print(
            f"- Blind review: {r['agree']}/{r['answered']} agree ({r['agreement_pct']:.1f}%); "
            f"disagree: {r['disagree']}; flagged: {r['flagged']}; missing: {len(r['missing'])}"
        )
    if "model_check" in out:
        m = out["model_check"]
        diffs = ", ".join(f"{k} {100 * v:.1f}%" for k, v in m["by_difficulty"].items())
        cats = ", ".join(f"{k} {100 * v:.0f}%" for k, v in m["by_category"].items())
        print(
            f"- Model check ({m['model']}): overall {100 * m['overall_raw_accuracy']:.1f}%, Elo {m['overall_elo']:.0f}; "
            f"by difficulty: {diffs}; by category: {cats}"
        )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

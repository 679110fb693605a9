"""base-bench's prediction rule next to lm-evaluation-harness's `acc` and `acc_norm`, item by item.

    python bench/lm_eval_side.py --report runs/smollm2-fp32/report.json [--batch-size 16]
    python bench/lm_eval_side.py --report ... --limit 8    # a check of the script; writes under runs/
    python bench/lm_eval_side.py --report ... --samples runs/lm-eval-side/output/.../samples_*.jsonl
                                                 # the comparison again from an lm-eval run already made

Takes one finished base-bench run of a GGUF model (the README's command 1) and makes one
lm-evaluation-harness run of the same file on the same items, then compares them item by item:

1. writes a multiple_choice task over the run's data file (`task_yaml`): the fields `context` as
   the text, `continuations` as the choices and `label` as the target, taken as they are (no
   template), `target_delimiter: ""` (the
   continuations already start with their space), metrics `acc`, `acc_norm` and `acc_bytes`;
2. runs `lm-eval run --model hf --model_args pretrained=DIR,gguf_file=NAME,dtype=float32` on it
   with `--log_samples`, offline (HF_HUB_OFFLINE=1, HF_DATASETS_OFFLINE=1) and with the run's thread
   count: transformers dequantizes the GGUF file to float32 exactly as base-bench's transformers
   backend does, so both score the same weights;
3. reads lm-eval's per-item log-likelihoods from its samples file and base-bench's per-choice
   summed log-probs and token counts from report.json, and counts, over the items: the accuracy of
   each prediction rule, how often each pair of rules picks the same continuation, the Overall Elo
   each rule's outcomes would get (the card's fit), and how many continuations lm-eval tokenizes
   differently from base-bench (it tokenizes context + continuation together and takes the tokens
   after the context's; base-bench tokenizes them apart, as the card says).

Writes bench/lm_eval_side.json (every number, per item too) and prints the table of docs/lm-eval.md
(`render_table`); tests/test_docs.py checks the page against the JSON. lm-eval 0.4.13's `acc_norm`
divides by the continuation's length in characters (`len(str)`), `acc_bytes` by its UTF-8 bytes.

bench/RESULTS.md: none. docs/lm-eval.md, "Measured side by side", holds its two tables.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchlib import ROOT, markdown_table, timed_call

TASK = "base_bench_bundled"
OUT = ROOT / "bench" / "lm_eval_side.json"
WORK = ROOT / "runs" / "lm-eval-side"

# the rules compared: name -> what the docs call it
RULES = {
    "base_bench": "base-bench (mean log-prob per token; report.json)",
    "sum": "summed log-prob, base-bench's tokens",
    "lm_eval_acc": "lm-eval `acc` (summed log-prob)",
    "lm_eval_acc_norm": "lm-eval `acc_norm` (log-prob per character)",
    "lm_eval_acc_bytes": "lm-eval `acc_bytes` (log-prob per UTF-8 byte)",
}
PAIRS = [
    ("base_bench", "lm_eval_acc"),
    ("base_bench", "lm_eval_acc_norm"),
    ("lm_eval_acc", "lm_eval_acc_norm"),
    ("base_bench", "sum"),
    ("sum", "lm_eval_acc"),
]


def task_yaml(data_file: Path) -> str:
    """An lm-eval task over a base-bench data file (the card's record format)."""
    return f"""task: {TASK}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {json.dumps(str(data_file))}
test_split: test
output_type: multiple_choice
doc_to_text: context
doc_to_choice: continuations
doc_to_target: label
target_delimiter: ""
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
  - metric: acc_bytes
    aggregation: mean
    higher_is_better: true
"""


def argmax(xs) -> int:
    """The first index of the largest value: ties go to the lowest index, as in base-bench and numpy."""
    best = 0
    for i, x in enumerate(xs):
        if x > xs[best]:
            best = i
    return best


def run_lm_eval(gguf: Path, data_file: Path, threads: int, batch_size: int, limit: int | None) -> tuple[Path, float]:
    tasks = WORK / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    (tasks / f"{TASK}.yaml").write_text(task_yaml(data_file))
    out = WORK / "output"
    cmd = ["lm-eval", "run", "--model", "hf"]
    cmd += ["--model_args", f"pretrained={gguf.parent},gguf_file={gguf.name},dtype=float32"]
    cmd += ["--tasks", TASK, "--include_path", str(tasks), "--device", "cpu", "--batch_size", str(batch_size)]
    cmd += ["--log_samples", "--output_path", str(out), *(["--limit", str(limit)] if limit else [])]
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_DATASETS_CACHE=str(WORK / "datasets-cache"),
        OMP_NUM_THREADS=str(threads),
        TOKENIZERS_PARALLELISM="false",
    )
    p, seconds = timed_call(subprocess.run, cmd, env=env, cwd=WORK)
    if p.returncode != 0:
        raise SystemExit(f"lm_eval_side: lm-eval failed (exit {p.returncode})")
    found = sorted(glob.glob(str(out / "**" / f"samples_{TASK}_*.jsonl"), recursive=True))
    if not found:
        raise SystemExit(f"lm_eval_side: no samples file under {out}")
    return Path(found[-1]), seconds


def tokenization(gguf: Path, items: list[dict]) -> dict:
    """How lm-eval's continuation tokens compare with base-bench's for every (context, choice)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    bos_first = tok.bos_token_id is not None and tok.encode("a")[:1] == [tok.bos_token_id]
    differ, shifted = [], 0
    for it in items:
        ctx = it["context"]
        apart_ctx = tok.encode(ctx, add_special_tokens=False)
        for k, cont in enumerate(it["continuations"]):
            apart = tok.encode(cont, add_special_tokens=False)
            whole = tok.encode(ctx + cont)  # what lm-eval's tok_encode does: the tokenizer's own special tokens
            lm_ctx = tok.encode(ctx)
            lm_cont = whole[len(lm_ctx) :]
            if lm_cont != apart:
                differ.append(f"{it['id']}#{k}")
            if whole[: len(lm_ctx)] != lm_ctx or lm_ctx[-len(apart_ctx) :] != apart_ctx:
                shifted += 1
    return {
        "tokenizer_adds_bos": bool(bos_first),
        "continuations": 4 * len(items),
        "continuations_tokenized_differently": len(differ),
        "contexts_tokenized_differently": shifted,
        "examples": differ[:10],
    }


def compare(report: dict, samples: list[dict], tokens: dict, limit: int | None = None) -> dict:
    from base_bench.results.elo import fit_elo

    by_id = {it["id"]: it for it in report["items"]}
    rows = []
    for s in samples:
        doc = s["doc"]
        it = by_id[doc["id"]]
        lls = [float(r[0]) for r in s["filtered_resps"]]
        chars = [len(c) for c in doc["continuations"]]
        shortest = {k for k, n in enumerate(chars) if n == min(chars)}
        nbytes = [len(c.encode("utf-8")) for c in doc["continuations"]]
        sums = [float(c["logprob"]) for c in it["choices"]]
        pred = {
            "base_bench": int(it["prediction"]),
            "sum": argmax(sums),
            "lm_eval_acc": argmax(lls),
            "lm_eval_acc_norm": argmax([ll / n for ll, n in zip(lls, chars)]),
            "lm_eval_acc_bytes": argmax([ll / n for ll, n in zip(lls, nbytes)]),
        }
        # lm-eval's own verdicts must be what its log-likelihoods give
        for rule, metric in (
            ("lm_eval_acc", "acc"),
            ("lm_eval_acc_norm", "acc_norm"),
            ("lm_eval_acc_bytes", "acc_bytes"),
        ):
            if float(s[metric]) != float(pred[rule] == doc["label"]):
                raise SystemExit(f"lm_eval_side: {doc['id']}: lm-eval's {metric} is not what its log-likelihoods give")
        rows.append(
            {
                "id": doc["id"],
                "label": int(doc["label"]),
                "item_elo": float(it["item_elo"]),
                "point_weight": float(it["point_weight"]),
                "pred": pred,
                "shortest": sorted(shortest),
                "lm_eval_ll": lls,
                "base_bench_sum": sums,
            }
        )
    if len(rows) != (limit or len(report["items"])):
        raise SystemExit(f"lm_eval_side: lm-eval scored {len(rows)} items, the report has {len(report['items'])}")
    n = len(rows)
    rules = {}
    for rule, label in RULES.items():
        right = [r["pred"][rule] == r["label"] for r in rows]
        elo = fit_elo((r["item_elo"], r["point_weight"], 1.0 if y else 0.0) for r, y in zip(rows, right))
        rules[rule] = {
            "label": label,
            "correct": sum(right),
            "accuracy": sum(right) / n,
            "overall_elo": round(elo, 1),
            "picks_shortest": sum(r["pred"][rule] in r["shortest"] for r in rows),
        }
    same = {f"{a}|{b}": sum(r["pred"][a] == r["pred"][b] for r in rows) for a, b in PAIRS}
    deltas = sorted(abs(x - y) for r in rows for x, y in zip(r["lm_eval_ll"], r["base_bench_sum"]))
    return {
        "n_items": n,
        "label_is_shortest": sum(r["label"] in r["shortest"] for r in rows),
        "rules": rules,
        "same_choice": same,
        "ll_vs_base_bench_sum": {
            "median_abs": deltas[len(deltas) // 2],
            "max_abs": deltas[-1],
            "over_1e-3": sum(d > 1e-3 for d in deltas),
            "n": len(deltas),
        },
        "tokenization": tokens,
        "items": rows,
    }


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render_table(data: dict) -> str:
    """The two tables of docs/lm-eval.md, from bench/lm_eval_side.json."""
    c, n = data["comparison"], data["comparison"]["n_items"]
    head = [
        "prediction rule",
        "correct",
        "accuracy",
        "Overall Elo of these outcomes",
        "picks the shortest continuation",
    ]
    rules = [
        [
            r["label"],
            f"{r['correct']} / {n}",
            pct(r["accuracy"]),
            f"{r['overall_elo']:.0f}",
            f"{r['picks_shortest']} of {n}",
        ]
        for r in c["rules"].values()
    ]
    same = []
    for key, k in c["same_choice"].items():
        a, b = key.split("|")
        same.append([f"{c['rules'][a]['label']} and {c['rules'][b]['label']}", f"{k} of {n} ({pct(k / n)})"])
    out = markdown_table(head, "lrrrr", rules) + [""]
    out += markdown_table(["these two rules", "pick the same continuation"], "lr", same)
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--report", required=True, help="report.json of a finished base-bench run of a .gguf model")
    p.add_argument("--batch-size", type=int, default=16, help="lm-eval's batch size (16 was its fastest on 2 cores)")
    p.add_argument("--limit", type=int, help="the first N items only, written to runs/lm-eval-side/ (a check)")
    p.add_argument("--samples", help="an lm-eval samples file of this task and model: compare it, run nothing")
    args = p.parse_args(argv)
    report = json.loads(Path(args.report).read_text())
    cfg = report["config"]
    gguf = Path(cfg["model"]["path"])
    if gguf.suffix != ".gguf" or cfg["dtype"] != "float32" or cfg["add_bos"] or len(report["items"]) != 350:
        raise SystemExit("lm_eval_side: needs a full float32 run of a .gguf model, without --add-bos")
    data_file = Path(report["data"]["path"]).resolve()
    if hashlib.sha256(data_file.read_bytes()).hexdigest() != report["data"]["sha256"]:
        raise SystemExit(f"lm_eval_side: {data_file} is no longer the file the run scored")
    threads = int(cfg.get("threads") or 2)
    if args.samples:
        samples_file, seconds = Path(args.samples), None
    else:
        samples_file, seconds = run_lm_eval(gguf, data_file, threads, args.batch_size, args.limit)
    samples = [json.loads(line) for line in samples_file.read_text().splitlines() if line.strip()]
    items = [json.loads(line) for line in data_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    import lm_eval

    data = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "base_bench_report": os.path.relpath(args.report, ROOT),
        "model": gguf.name,
        "data_sha256": report["data"]["sha256"],
        "lm_eval_version": lm_eval.__version__ if hasattr(lm_eval, "__version__") else None,
        "lm_eval_command": f"lm-eval run --model hf --model_args pretrained=DIR,gguf_file={gguf.name},dtype=float32 "
        f"--tasks {TASK} --include_path TASKS --device cpu --batch_size {args.batch_size} --log_samples",
        "lm_eval_seconds": round(seconds, 1) if seconds is not None else None,
        "threads": threads,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "task_yaml": task_yaml(Path("data/test.jsonl")),
        "limit": args.limit,
        "comparison": compare(report, samples, tokenization(gguf, items[: args.limit or None]), args.limit),
    }
    (WORK / "lm_eval_side.json" if args.limit else OUT).write_text(
        json.dumps(data, indent=1, ensure_ascii=False) + "\n"
    )
    print(render_table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())

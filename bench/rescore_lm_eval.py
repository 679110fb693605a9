"""`base-bench rescore` against lm-evaluation-harness's own choices, item by item, and across runs.

    python bench/rescore_lm_eval.py --report runs/smollm2-fp32/report.json \
        [--runs runs/smollm2-fp32 runs/smollm2-addbos runs/gemma3-270m]

Takes a finished base-bench run of SmolLM2-135M on the bundled set (the README's command 1: a float32
transformers run of the GGUF) and the per-item choices that lm-eval 0.4.13 made on the same items
and model, stored by bench/lm_eval_side.py in bench/lm_eval_side.json (its log-likelihoods and its
`acc`, `acc_norm`, `acc_bytes` choices: lm-eval is not run again). It calls `rescore()` on the run
(no model is loaded) and counts, over the 350 items:

1. how far `mean` is from the run's own report (`reproduces_run`: the same choices, and the largest
   difference over every result and expected p; 0.0 means the run exactly);
2. how often `sum` picks what lm-eval's `acc` picked, `per_char` what `acc_norm` picked, `per_byte`
   what `acc_bytes` picked, and, for every item where they differ, why: the two continuations'
   scores under the rule from base-bench's log-probs and from lm-eval's, the margin each side has,
   the difference between the two runs' log-probs of those continuations, and whether lm-eval
   tokenized them differently (it tokenizes context and continuation together, base-bench apart;
   lm_eval_side.json records which continuations came out different);
3. with --runs, the cross-run table `rescore` writes for those runs: each run's Elo and rank under
   each rule, and Kendall's tau-b between the rules' rankings.

Writes bench/rescore_lm_eval.json and prints the tables of RESULTS.md.

bench/RESULTS.md: "base-bench rescore against lm-evaluation-harness's choices".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, markdown_table

from base_bench.results import rules
from base_bench.results.rescoring import rescore

SIDE = ROOT / "bench" / "lm_eval_side.json"
OUT = ROOT / "bench" / "rescore_lm_eval.json"
PAIRS = {"sum": "lm_eval_acc", "per_char": "lm_eval_acc_norm", "per_byte": "lm_eval_acc_bytes"}
ROUNDING = 1e-3  # nats: two float32 runs of one model on the same tokens differ by less (lm_eval_side.json)
METRIC = {"lm_eval_acc": "acc", "lm_eval_acc_norm": "acc_norm", "lm_eval_acc_bytes": "acc_bytes"}


def explain(rule: str, ours: list[rules.Choice], lls: list[float], mine: int, theirs: int, retokenized: set) -> dict:
    """Why `rule` on base-bench's log-probs picks `mine` where lm-eval, on its own, picked `theirs`."""
    theirs_choices = [rules.Choice(ll, c.n_tokens, c.n_chars, c.n_bytes) for ll, c in zip(lls, ours)]
    margin_ours = rules.score(rule, ours[mine]) - rules.score(rule, ours[theirs])
    margin_theirs = rules.score(rule, theirs_choices[theirs]) - rules.score(rule, theirs_choices[mine])
    moved = max(abs(ours[k].logprob - lls[k]) for k in (mine, theirs))
    if mine in retokenized or theirs in retokenized:
        why = "lm-eval tokenized one of the two continuations differently (context and continuation together)"
    elif moved <= ROUNDING:
        why = (
            "a near tie: the same tokens, and log-probs that differ by float32 rounding only (at most "
            f"{ROUNDING:g} nats), enough to reverse which of the two scores higher"
        )
    else:
        why = "not explained by rounding or tokenization"
    return {
        "base_bench_pick": mine,
        "lm_eval_pick": theirs,
        "margin_base_bench": margin_ours,
        "margin_lm_eval": margin_theirs,
        "max_logprob_difference": moved,
        "why": why,
    }


def agreement(rescored: dict[str, dict], side: dict) -> dict:
    """Per rule of PAIRS: the items where the rescored report's choice is lm-eval's, and every other
    item explained. `rescored[rule]` is the report rescore wrote; `side` is lm_eval_side.json."""
    rows = {r["id"]: r for r in side["comparison"]["items"]}
    retok: dict[str, set] = {}
    for ex in side["comparison"]["tokenization"].get("examples", []):
        item_id, k = ex.rsplit("#", 1)
        retok.setdefault(item_id, set()).add(int(k))
    if side["comparison"]["tokenization"]["continuations_tokenized_differently"] > len(
        side["comparison"]["tokenization"].get("examples", [])
    ):
        raise SystemExit("rescore_lm_eval: lm_eval_side.json lists only some retokenized continuations")
    out = {}
    for rule, lm in PAIRS.items():
        same, differ, closest = 0, [], (float("inf"), None)
        for it in rescored[rule]["items"]:
            r = rows[it["id"]]
            ours = [rules.Choice(c["logprob"], c.get("n_tokens"), c["n_chars"], c["n_bytes"]) for c in it["choices"]]
            top = sorted((rules.score(rule, c) for c in ours), reverse=True)
            closest = min(closest, (top[0] - top[1], it["id"]))
            if it["prediction"] == r["pred"][lm]:
                same += 1
                continue
            differ.append(
                {
                    "id": it["id"],
                    **explain(rule, ours, r["lm_eval_ll"], it["prediction"], r["pred"][lm], retok.get(it["id"], set())),
                }
            )
        out[rule] = {
            "lm_eval": METRIC[lm],
            "n_items": len(rescored[rule]["items"]),
            "same": same,
            "differ": differ,
            "closest_item": closest[1],
            "closest_margin": closest[0],  # the smallest lead of a pick over its runner-up, under the rule
        }
    return out


def logprob_gap(report: dict, side: dict) -> dict:
    """|base-bench's summed log-prob - lm-eval's| over every choice of the run."""
    rows = {r["id"]: r for r in side["comparison"]["items"]}
    gaps = sorted(
        abs(c["logprob"] - ll) for it in report["items"] for c, ll in zip(it["choices"], rows[it["id"]]["lm_eval_ll"])
    )
    return {"n": len(gaps), "median_abs": gaps[len(gaps) // 2], "max_abs": gaps[-1]}


def render_tables(data: dict) -> str:
    rep = data["mean_reproduces_run"]
    out = markdown_table(
        ["rule", "lm-eval", "same choice", "share", "items that differ", "closest call (lead of the pick)"],
        "llrrlr",
        [
            [
                f"`{rule}`",
                f"`{a['lm_eval']}`",
                f"{a['same']} of {a['n_items']}",
                f"{100 * a['same'] / a['n_items']:.1f}%",
                ", ".join(f"{d['id']} ({d['why'].split(':')[0]})" for d in a["differ"]) or "none",
                f"{a['closest_margin']:.2g} ({a['closest_item']})",
            ]
            for rule, a in data["agreement"].items()
        ],
    )
    out += [
        "",
        f"`mean` against the run itself: the same choice on {rep['same_choice']} of {rep['n_items']} items, largest "
        f"difference in any result or expected p {rep['max_abs_diff']}.",
    ]
    if data.get("cross_runs"):
        t = data["cross_runs"]
        rule_names = list(t["rules"])
        out += [""] + markdown_table(
            ["run", *[f"{r} Elo (rank)" for r in rule_names], "mean against the run: same choice, max difference"],
            "l" + "r" * len(rule_names) + "r",
            [
                [
                    row["name"],
                    *[f"{row['rules'][r]['elo']:.1f} ({row['rules'][r]['rank']})" for r in rule_names],
                    f"{row['mean_reproduces_run']['same_choice']} of {row['mean_reproduces_run']['n_items']}, "
                    f"{row['mean_reproduces_run']['max_abs_diff']}",
                ]
                for row in t["runs"]
            ],
        )
        out += [""] + markdown_table(
            ["rules", "Kendall's tau-b"],
            "lr",
            [[f"{x['a']} – {x['b']}", "n/a" if x["tau_b"] is None else f"{x['tau_b']:.2f}"] for x in t["tau_b"]],
        )
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--report",
        default="runs/smollm2-fp32/report.json",
        help="the run of SmolLM2 that lm-eval's choices are compared with",
    )
    p.add_argument(
        "--side", default=str(SIDE), help="lm_eval_side.json (lm-eval's per-item log-likelihoods and choices)"
    )
    p.add_argument("--runs", nargs="*", default=[], help="runs for the cross-run table (the --report run among them)")
    args = p.parse_args(argv)
    side = json.loads(Path(args.side).read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        table = rescore([args.report], list(rules.RULES), Path(tmp) / "one")
        seconds = time.perf_counter() - start
        (row,) = table["runs"]
        rescored = {r: json.loads(Path(row["rules"][r]["report_written"]).read_text()) for r in rules.RULES}
        cross = rescore(args.runs, list(rules.RULES), Path(tmp) / "many") if len(args.runs) > 1 else None
    report = json.loads(Path(args.report).read_text(encoding="utf-8"))
    if report["data"]["sha256"] != side["data_sha256"] or len(report["items"]) != side["comparison"]["n_items"]:
        raise SystemExit("rescore_lm_eval: the run is not on the items lm_eval_side.json compared")
    data = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "report": os.path.relpath(args.report, ROOT),
        "model": Path(report["config"]["model"]["spec"]).name,
        "lm_eval_side": os.path.relpath(args.side, ROOT),
        "lm_eval_version": side.get("lm_eval_version"),
        "rescore_seconds": round(seconds, 2),
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "logprob_gap": logprob_gap(report, side),
        "mean_reproduces_run": row["rules"]["mean"]["reproduces_run"],
        "agreement": agreement(rescored, side),
        "cross_runs": None
        if cross is None
        else {
            "rules": cross["rules"],
            "runs": [
                {
                    "name": r["name"],
                    "report": r["report"],
                    "mean_reproduces_run": r["rules"]["mean"]["reproduces_run"],
                    "rules": {k: {"elo": v["elo"], "rank": v["rank"]} for k, v in r["rules"].items()},
                }
                for r in cross["runs"]
            ],
            "tau_b": cross["tau_b"],
        },
    }
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(render_tables(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())

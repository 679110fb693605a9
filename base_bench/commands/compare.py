"""`base-bench compare RUN_A RUN_B`: is run B really better (or worse) than run A?

    base-bench compare runs/model-a runs/model-b [--json cmp.json] [--markdown cmp.md]
                       [--resamples 2000] [--seed 1234] [--force]
    base-bench compare runs/model-a runs/model-b --out-dir DIR     # DIR/compare.json and DIR/compare.md
    base-bench compare --store URL 3fa9c1 77d0e2 [...]             # two stored runs, by key or key prefix

RUN_A and RUN_B are run directories holding report.json, or paths to report.json files. With
--store they are the keys of two runs in that results store, or prefixes of them (4 hex digits or
more, as `base-bench store list` shows them); a prefix that names no run or more than one is refused.
With $BASE_BENCH_STORE set and no --store, they are read as folders where one of them is on disk
(folders win), else as keys of that store. The stored reports are read back and checked as files
are, so the numbers are the same as from the folders. The two runs must have scored the same items
of the same data file (same SHA-256, same item ids); any other pair is refused with one line on
stderr and exit code 2. A and B are named as every view names runs (`reports_io.run_names`: group
and step, else the shortest tail of the model spec that tells them apart). In code:

    rep_a, rep_b = load_report(path_a), load_report(path_b)
    cmp = build_comparison(rep_a, rep_b, resamples=2000, seed=1234)   # plain JSON-able dict
    print("\\n".join(summary_lines(cmp)));  text = render_markdown(cmp)

`build_comparison` computes every number; `summary_lines` and `render_markdown` only format the
dict, so the terminal, the --json file and the --markdown file always agree. The statistics (paired
bootstrap of the Elo difference, exact McNemar test) are in `paired.py`; its within-category draws
and refits are the report's own (`stats.resample_counts`, `elo.fit_elo_many`). Which items pair up
and which flipped is `pairing.py`'s, shared with `explore`'s page.

Reading reports and writing files safely are `reports_io`'s job.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ..errors import BaseBenchError
from ..items import card
from ..results.markdown import md_cell, md_code, md_text
from ..results.paired import mcnemar_exact, paired_differences
from ..results.pairing import flips, pair_items, run_info
from ..results.report import pct
from ..results.reports_io import check_outputs, load_report, run_names, write_outputs
from ..results.stats import CONFIDENCE, block_rows, resample_count_blocks
from .cliargs import Parser, add_bootstrap, add_store_flag, fail, printable, reading_store

ALPHA = 0.05
OUT_DIR_FILES = ("compare.json", "compare.md")  # what --out-dir DIR writes
TERMINAL_FLIPS = 10  # flipped items listed per direction on the terminal; the files list them all


# ---------------------------------------------------------------- settings (pairing: results/pairing.py)


def setting_notes(info_a: dict, info_b: dict) -> list[str]:
    """Settings that differ between the runs and so are part of what is being compared."""
    notes = []
    for key in ("backend", "dtype", "add_bos", "scoring_version", "rule"):
        if info_a[key] != info_b[key]:
            notes.append(f"{key} differs: A {info_a[key]}, B {info_b[key]}")
    if info_a["official"] != info_b["official"]:
        notes.append(f"official differs: A {info_a['official']}, B {info_b['official']}")
    return notes


def score_agreement(pairs) -> dict:
    """How close the two runs' scores are, choice by choice: |delta| of each choice's summed log-prob
    (nats; the same tokens in both runs when the tokenizer is the same), over the items whose choices
    pair up, and the items whose predicted choice differs (right or wrong), e.g. two backends or two
    dtypes of one model."""
    deltas, worst, changed = [], (0.0, None), []
    for a, b in pairs:
        ca, cb = a.get("choices") or [], b.get("choices") or []
        if len(ca) != len(cb) or not ca:
            continue
        for x, y in zip(ca, cb):
            d = abs(float(x["logprob"]) - float(y["logprob"]))
            deltas.append(d)
            if d > worst[0]:
                worst = (d, a["id"])
        if a.get("prediction") != b.get("prediction"):
            changed.append(a["id"])
    return {
        "n_choices": len(deltas),
        "median_abs_logprob_diff": float(np.median(deltas)) if deltas else None,
        "max_abs_logprob_diff": float(max(deltas)) if deltas else None,
        "max_item": worst[1],
        "predictions_differ": len(changed),
        "items_predicted_differently": changed,
    }


# ---------------------------------------------------------------- the comparison


def _categories(pairs) -> list[str]:
    present = list(dict.fromkeys(a["category"] for a, _ in pairs))
    return [c for c in card.CATEGORIES if c in present] + [c for c in present if c not in card.CATEGORIES]


def _accuracy(y: np.ndarray, w: np.ndarray) -> dict:
    return {
        "n_correct": int(y.sum()),
        "raw_accuracy": float(y.mean()),
        "weighted_accuracy": float((w * y).sum() / w.sum()),
    }


def build_comparison(rep_a: dict, rep_b: dict, resamples: int = 2000, seed: int = 1234) -> dict:
    """Every number of the comparison of B against A, as a JSON-able dict."""
    pairs = pair_items(rep_a, rep_b)
    info_a, info_b = run_info(rep_a), run_info(rep_b)
    # named as every view names runs; the run lines show dtype and add_bos beside the name
    info_a["name"], info_b["name"] = run_names([rep_a, rep_b], beside=("dtype", "add_bos"))
    cats = [a["category"] for a, _ in pairs]
    e = np.array([float(a["item_elo"]) for a, _ in pairs])
    w = np.array([float(a["point_weight"]) for a, _ in pairs])
    ya = np.array([1.0 if a["correct"] else 0.0 for a, _ in pairs])
    yb = np.array([1.0 if b["correct"] else 0.0 for _, b in pairs])
    # One set of draws for every block, a block of resamples at a time (stats.resample_count_blocks):
    # the same numbers as the whole (resamples x items) matrix, in memory of one block. Key None: all items.
    masks = {None: np.ones(len(pairs), dtype=bool)} | {c: np.array([x == c for x in cats]) for c in _categories(pairs)}
    blocks = resample_count_blocks(cats, resamples, seed, block_rows(len(cats), resamples))
    diffs = dict(zip(masks, paired_differences(e, w, ya, yb, list(masks.values()), blocks, CONFIDENCE)))

    def block(key):
        mask, d = masks[key], diffs[key]
        acc_a, acc_b = _accuracy(ya[mask], w[mask]), _accuracy(yb[mask], w[mask])
        b_only = int(((ya == 1) & (yb == 0))[mask].sum())
        c_only = int(((ya == 0) & (yb == 1))[mask].sum())
        d.update(
            n=int(mask.sum()),
            n_correct_a=acc_a["n_correct"],
            n_correct_b=acc_b["n_correct"],
            raw_accuracy_a=acc_a["raw_accuracy"],
            raw_accuracy_b=acc_b["raw_accuracy"],
            weighted_accuracy_a=acc_a["weighted_accuracy"],
            weighted_accuracy_b=acc_b["weighted_accuracy"],
            a_right_b_wrong=b_only,
            a_wrong_b_right=c_only,
        )
        return d

    overall = block(None)
    categories = {c: block(c) for c in _categories(pairs)}
    flipped = flips(pairs)  # the McNemar counts are these lists' lengths (results/pairing.py)
    b_count, c_count = len(flipped["a_right_b_wrong"]), len(flipped["a_wrong_b_right"])
    mcnemar = {
        "a_right_b_wrong": b_count,
        "a_wrong_b_right": c_count,
        "discordant": b_count + c_count,
        "p": mcnemar_exact(b_count, c_count),
        "test": "exact two-sided binomial on the discordant items",
    }
    return {
        "comparison": "base-bench compare",
        "benchmark": rep_a.get("benchmark") or f"BananaMind Base Bench {card.VERSION}",
        "a": info_a,
        "b": info_b,
        "data_sha256": info_a["data_sha256"],
        "n_items": len(pairs),
        "settings_notes": setting_notes(info_a, info_b),
        "bootstrap": {
            "method": "paired: items resampled with replacement within each category, the same "
            "draws for both runs; both ratings refitted; percentile interval of B - A",
            "resamples": resamples,
            "seed": seed,
            "confidence": CONFIDENCE,
        },
        "overall": overall,
        "mcnemar": mcnemar,
        "scores": score_agreement(pairs),
        "categories": categories,
        "flipped": flipped,
        "verdict": verdict(overall["diff"], overall["ci95"], mcnemar["p"], len(pairs)),
    }


def _num(x: float, digits: int = 0) -> str:
    """A number with a real minus sign, as printed in sentences and tables."""
    s = f"{x:.{digits}f}"
    if s.startswith("-") and float(s) == 0:
        s = s[1:]
    return s.replace("-", "−")


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"= {p:.2g}"


def verdict(diff: float, ci: list[float], p: float, n: int) -> dict:
    """Plain words for the Overall Elo difference B - A, its interval (of B - A, whichever run is
    higher) and the McNemar p."""
    lo, hi = ci
    excludes_zero = lo > 0 or hi < 0
    significant = p < ALPHA
    # The interval is always the one of B − A, as every table of the comparison gives it: turning it
    # round to A − B when A is higher would read as the opposite sign of the line just above it.
    stated = f"(B − A = {_num(diff, 1)}, 95% CI {_num(lo)} to {_num(hi)})"
    if round(diff) == 0:
        head = f"A and B have the same Overall Elo to the nearest point {stated}"
    elif diff > 0:
        head = f"B is higher by {_num(diff)} Elo {stated}"
    else:
        head = f"A is higher by {_num(-diff)} Elo {stated}"
    if excludes_zero and significant:
        level, why = "decisive", f"the interval excludes 0 and McNemar p {_p(p)}, so this difference is decisive"
    elif not excludes_zero and not significant:
        level, why = (
            "not decisive",
            f"the interval includes 0 and McNemar p {_p(p)}, so this difference is not decisive",
        )
    elif excludes_zero:
        level, why = (
            "borderline",
            (
                f"the interval excludes 0 but McNemar p {_p(p)} (it counts right/wrong items "
                "without weights), so this difference is borderline"
            ),
        )
    else:
        level, why = (
            "borderline",
            (f"McNemar p {_p(p)} but the weighted Elo interval includes 0, so this difference is borderline"),
        )
    return {"level": level, "decisive": level == "decisive", "text": f"{head}; {why} on {n} items."}


# ---------------------------------------------------------------- rendering (formatting only)


def _ci(ci: list[float]) -> str:
    return f"[{_num(ci[0])}, {_num(ci[1])}]"


def _run_line(tag: str, info: dict) -> str:
    extra = f", dtype {info['dtype']}, add_bos {info['add_bos']}, {'official' if info['official'] else 'not official'}"
    return f"{tag}: {info['name']}{extra}  ({info['report']})"


def _scores_line(cmp: dict, head: str, text=str) -> list[str]:
    """The score agreement line; `text` formats the item id (md_text for Markdown)."""
    sc = cmp.get("scores") or {}
    if not sc.get("n_choices"):
        return []
    return [
        f"{head}per-choice |log-prob B − A| median {sc['median_abs_logprob_diff']:.3g}, max "
        f"{sc['max_abs_logprob_diff']:.3g} nats (item {text(sc['max_item'])}); predicted choice differs on "
        f"{sc['predictions_differ']} of {cmp['n_items']} items"
    ]


def summary_lines(cmp: dict) -> list[str]:
    o, m = cmp["overall"], cmp["mcnemar"]
    bs = cmp["bootstrap"]
    lines = [
        _run_line("A", cmp["a"]),
        _run_line("B", cmp["b"]),
        f"{cmp['n_items']} paired items, data SHA-256 {cmp['data_sha256'][:12]}…",
        *[f"note: {n}" for n in cmp["settings_notes"]],
        "",
        f"Overall Elo  A {_num(o['elo_a'], 1)}  B {_num(o['elo_b'], 1)}  B − A {_num(o['diff'], 1)}  "
        f"95% CI {_ci(o['ci95'])}  ({bs['resamples']} paired resamples, seed {bs['seed']})",
        f"Accuracy     A {pct(o['raw_accuracy_a'])}  B {pct(o['raw_accuracy_b'])}  "
        f"(weighted A {pct(o['weighted_accuracy_a'])}, B {pct(o['weighted_accuracy_b'])})",
        f"McNemar      {m['a_right_b_wrong']} items only A got right, {m['a_wrong_b_right']} only B; "
        f"exact p {_p(m['p'])}",
        *_scores_line(cmp, "Scores       "),
        "",
        f"  {'category':<20} {'Elo A':>7} {'Elo B':>7} {'B − A':>7}  {'95% CI':<14} {'acc A':>6} {'acc B':>6}",
    ]
    for cat, c in cmp["categories"].items():
        lines.append(
            f"  {cat:<20} {_num(c['elo_a']):>7} {_num(c['elo_b']):>7} {_num(c['diff']):>7}  "
            f"{_ci(c['ci95']):<14} {pct(c['raw_accuracy_a']):>6} {pct(c['raw_accuracy_b']):>6}"
        )
    for key, title in (("a_right_b_wrong", "A right, B wrong"), ("a_wrong_b_right", "A wrong, B right")):
        flips = cmp["flipped"][key]
        lines += ["", f"{title}: {len(flips)} item(s)"]
        for f in flips[:TERMINAL_FLIPS]:
            lines.append(
                f"  {f['id']} ({f['difficulty']}): A {f['selected_a']!r}, B {f['selected_b']!r}, "
                f"correct {f['correct']!r}"
            )
        if len(flips) > TERMINAL_FLIPS:
            lines.append(f"  … and {len(flips) - TERMINAL_FLIPS} more (all are in --json / --markdown)")
    lines += ["", "Verdict: " + cmp["verdict"]["text"]]
    return lines


def render_markdown(cmp: dict) -> str:
    """Markdown rendering of a comparison dict; reads nothing but `cmp`."""
    o, m, bs = cmp["overall"], cmp["mcnemar"], cmp["bootstrap"]
    out = [
        f"# {md_text(cmp['benchmark'])}: B vs A",
        "",
        f"**Verdict:** {cmp['verdict']['text']}",  # our own words and numbers
        "",
        "| run | model | dtype | add_bos | official | report |",
        "|---|---|---|---|---|---|",
    ]
    for tag in ("a", "b"):
        i = cmp[tag]
        out.append(
            f"| {tag.upper()} | {md_code(i['model'], cell=True)} | {md_cell(i['dtype'])} | {md_cell(i['add_bos'])} | "
            f"{'yes' if i['official'] else 'no'} | {md_code(i['report'], cell=True)} |"
        )
    out += ["", f"{cmp['n_items']} paired items; data SHA-256 {md_code(cmp['data_sha256'])}."]
    out += [f"Note: {md_text(n)}." for n in cmp["settings_notes"]]
    out += [
        "",
        "## Overall",
        "",
        "| | A | B | B − A | 95% CI of B − A |",
        "|---|---:|---:|---:|---|",
        f"| Elo | {_num(o['elo_a'], 1)} | {_num(o['elo_b'], 1)} | {_num(o['diff'], 1)} | {_ci(o['ci95'])} |",
        f"| raw accuracy | {pct(o['raw_accuracy_a'])} | {pct(o['raw_accuracy_b'])} | | |",
        f"| weighted accuracy | {pct(o['weighted_accuracy_a'])} | {pct(o['weighted_accuracy_b'])} | | |",
        "",
        f"Paired bootstrap: {bs['resamples']} resamples, seed {bs['seed']}; {md_text(bs['method'])}.",
        "",
        f"McNemar ({m['test']}): {m['a_right_b_wrong']} items only A got right, {m['a_wrong_b_right']} only B "
        f"got right; p {_p(m['p'])}.",
        "",
        *[line + "." for line in _scores_line(cmp, "Scores: ", md_text)],
        "",
        "## Categories",
        "",
        "| category | items | Elo A | Elo B | B − A | 95% CI | accuracy A | accuracy B | only A right | only B right |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for cat, c in cmp["categories"].items():
        out.append(
            f"| {md_cell(cat)} | {c['n']} | {_num(c['elo_a'], 1)} | {_num(c['elo_b'], 1)} | {_num(c['diff'], 1)} | "
            f"{_ci(c['ci95'])} | {pct(c['raw_accuracy_a'])} | {pct(c['raw_accuracy_b'])} | "
            f"{c['a_right_b_wrong']} | {c['a_wrong_b_right']} |"
        )
    for key, title in (("a_right_b_wrong", "A right, B wrong"), ("a_wrong_b_right", "A wrong, B right")):
        flips = cmp["flipped"][key]
        out += ["", f"## {title} ({len(flips)})", ""]
        if not flips:
            out.append("None.")
            continue
        out += ["| id | category | difficulty | A selected | B selected | correct |", "|---|---|---|---|---|---|"]
        for f in flips:
            out.append(
                f"| {md_cell(f['id'])} | {md_cell(f['category'])} | {md_cell(f['difficulty'])} | "
                f"{md_cell(f['selected_a'])} | {md_cell(f['selected_b'])} | {md_cell(f['correct'])} |"
            )
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="base-bench compare",
        description="Compare two runs on the same items: Overall and category Elo differences (B − A) with a "
        "paired bootstrap interval, an exact McNemar test, the items that flipped, and a verdict.",
    )
    p.add_argument(
        "run_a",
        metavar="RUN_A",
        help="run directory (holding report.json) or a report.json file; with --store, a run's key or key prefix",
    )
    p.add_argument("run_b", metavar="RUN_B", help="the run to compare against RUN_A (differences are B − A)")
    add_store_flag(
        p,
        "read RUN_A and RUN_B from this store: they are then run keys or key prefixes, as `base-bench store list` shows",
    )
    p.add_argument("--json", metavar="FILE", help="write the full comparison as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the comparison as Markdown (rendered from the JSON)")
    add_bootstrap(p, "paired bootstrap")
    p.add_argument(
        "--out-dir",
        metavar="DIR",
        help=f"write both files into DIR, as {OUT_DIR_FILES[0]} and {OUT_DIR_FILES[1]} "
        "(instead of --json / --markdown)",
    )
    p.add_argument("--force", action="store_true", help="overwrite existing output files")
    return p


def read_pair(args) -> tuple[dict, dict]:
    """The reports of RUN_A and RUN_B: from their folders, or from the store by key (prefix)."""
    from ..store import store_url

    given = (args.run_a, args.run_b)
    # with $BASE_BENCH_STORE alone, arguments on disk are folders (they win); --store makes them keys
    folders = args.store is None and (store_url(None) is None or any(Path(x).expanduser().exists() for x in given))
    db = reading_store(args.store, folders)
    if db is None:
        return load_report(args.run_a), load_report(args.run_b)
    from ..store import resolve, summaries

    try:
        keys = resolve(db, given)
        by_key = {r["_key"]: r for r in summaries(db, keys=keys)}
        from ..store.query import reports_of

        rep_a, rep_b = reports_of(db, [by_key[k] for k in keys])
    finally:
        db.dispose()
    return rep_a, rep_b


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.out_dir is not None:
        if args.json or args.markdown:
            parser.error("--out-dir names both output files; give either it or --json / --markdown")
        args.json, args.markdown = (str(Path(args.out_dir) / name) for name in OUT_DIR_FILES)
    out_dir = Path(args.out_dir).expanduser() if args.out_dir is not None else None
    try:
        check_outputs([Path(x).expanduser() for x in (args.json, args.markdown) if x], args.force, out_dir)
        rep_a, rep_b = read_pair(args)
        cmp = build_comparison(rep_a, rep_b, resamples=args.resamples, seed=args.seed)
        print(printable("\n".join(summary_lines(cmp))))
        files = {}
        if args.json:
            files[Path(args.json).expanduser()] = json.dumps(cmp, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
        if args.markdown:
            files[Path(args.markdown).expanduser()] = render_markdown(cmp)
        write_outputs(files, say=print)
    except BaseBenchError as exc:
        return fail(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())

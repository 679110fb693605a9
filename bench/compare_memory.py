"""Peak memory of `base-bench compare`'s numbers (build_comparison) on synthetic reports, before and now.

    python bench/compare_memory.py                                  # 350, 5,000 and 20,000 items
    python bench/compare_memory.py --items 350 20000 --resamples 2000 --distinct-elo --json out.json

Two reports on the same N items (the card's categories and weights, difficulties cycling; with
`--distinct-elo` every item has an item Elo of its own, as a stranger's report may) are compared
with `build_comparison(a, b, resamples, seed)`, each case in a child process of its own, twice:

- before: all resamples in one block (stats.BLOCK_ELEMENTS set above resamples x items) and the
  items x Elos one-hot at any size (elo.ONEHOT_MAX_ELEMENTS likewise), which is the arithmetic and
  the arrays of compare before the bootstrap went in blocks: the whole (resamples x items) counts
  matrix, its weights and their copies, and a one-hot of 3.2 GB for 20,000 items at 20,000 Elos;
- now: blocks of stats.block_rows(items, resamples) resamples, as compare runs.

Each is measured twice, in separate children: the traced peak (tracemalloc: Python's and numpy's
allocations during the call, over what was held before it) and, without tracemalloc, the child's
peak RSS (getrusage) over its RSS just before the call, and the call's wall seconds. The output
digest (SHA-256 of the comparison's JSON) says whether before and now gave the same numbers.

bench/RESULTS.md: "Memory of compare's paired bootstrap" (the table it prints).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import resource
import sys
import time
import tracemalloc
from pathlib import Path

from benchlib import child_json, cpu_name, markdown_table

from base_bench.commands.compare import build_comparison
from base_bench.items import card
from base_bench.results import elo, stats


def synthetic_pair(n_items: int, distinct_elo: bool = False, seed: int = 0) -> tuple[dict, dict]:
    """Two report dicts on the same `n_items` items, A of skill 950 and B of skill 990 against the
    items' Elo (right or wrong drawn with the card's expected score)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    cats, diffs = list(card.CATEGORIES), ("easy", "medium", "hard")
    meta = []
    for i in range(n_items):
        cat, d = cats[i % len(cats)], diffs[(i // len(cats)) % 3]
        meta.append(
            {
                "id": f"{cat}-{i:06d}",
                "category": cat,
                "difficulty": d,
                "item_elo": float(card.item_elo(cat, d)) + (i * 0.01 if distinct_elo else 0.0),
                "point_weight": card.category_weight(cat) * card.DIFFICULTY_WEIGHTS[d],
                "label": i % 4,
            }
        )
    reports = []
    for k, skill in enumerate((950.0, 990.0)):
        items = []
        for m in meta:
            ok = bool(rng.random() < elo.expected(skill, m["item_elo"]))
            pred = m["label"] if ok else (m["label"] + 1) % 4
            choices = [{"logprob": -1.0 - j - 0.01 * k, "n_tokens": 1, "mean_logprob": -1.0 - j} for j in range(4)]
            items.append(dict(m, correct=ok, prediction=pred, selected_text=f" choice {pred}", choices=choices))
        config = {"model": {"spec": f"org/model-{'ab'[k]}"}, "dtype": "float32", "add_bos": False}
        reports.append({"config": config, "data": {"sha256": "5" * 64}, "official": False, "items": items})
    return reports[0], reports[1]


def rss_bytes() -> int:
    """This process's resident memory now (/proc/self/statm)."""
    import os

    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(items: int, way: str, resamples: int, seed: int, distinct_elo: bool, trace: bool) -> dict:
    """One case in this process: build the reports, then time (and trace, or not) build_comparison."""
    if way == "before":
        stats.BLOCK_ELEMENTS = resamples * items + 1  # one block of all resamples
        elo.ONEHOT_MAX_ELEMENTS = items * items  # the one-hot, however large
    rep_a, rep_b = synthetic_pair(items, distinct_elo)
    before = rss_bytes()
    if trace:
        tracemalloc.start()
        held = tracemalloc.get_traced_memory()[0]
    t = time.perf_counter()
    cmp = build_comparison(rep_a, rep_b, resamples=resamples, seed=seed)
    seconds = time.perf_counter() - t
    out = {"items": items, "way": way, "seconds": seconds}
    if trace:
        out["traced_peak_bytes"] = tracemalloc.get_traced_memory()[1] - held
        tracemalloc.stop()
    else:
        out["rss_before_bytes"] = before
        out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    out["blocks"] = -(-resamples // stats.block_rows(items, resamples))
    out["digest"] = hashlib.sha256(json.dumps(cmp, sort_keys=True).encode()).hexdigest()
    return out


def mb(x: float) -> str:
    return f"{x / 1e6:,.0f} MB"


def render_rows(results: list[dict]) -> list[list[str]]:
    """One table row per number of items from the four measurements of it (before/now, traced/RSS)."""
    rows = []
    for n in dict.fromkeys(r["items"] for r in results):
        got = {(r["way"], "traced_peak_bytes" in r): r for r in results if r["items"] == n}
        old_t, new_t, old_r, new_r = got["before", True], got["now", True], got["before", False], got["now", False]
        same = len({old_t["digest"], new_t["digest"], old_r["digest"], new_r["digest"]}) == 1
        rows.append(
            [
                f"{n:,}",
                f"{new_r['blocks']}",
                mb(old_t["traced_peak_bytes"]),
                mb(new_t["traced_peak_bytes"]),
                mb(old_r["peak_rss_bytes"] - old_r["rss_before_bytes"]),
                mb(new_r["peak_rss_bytes"] - new_r["rss_before_bytes"]),
                f"{old_r['seconds']:.1f} / {new_r['seconds']:.1f}",
                "yes" if same else "NO",
            ]
        )
    return rows


HEAD = [
    "items",
    "blocks now",
    "traced peak before",
    "traced peak now",
    "peak RSS added before",
    "peak RSS added now",
    "seconds before / now",
    "same output",
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, nargs="+", default=[350, 5000, 20000])
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--distinct-elo", action="store_true", help="one item Elo per item")
    ap.add_argument("--json", help="also write the measurements here")
    ap.add_argument("--child", nargs=3, metavar=("ITEMS", "WAY", "TRACE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        n, way, trace = args.child
        print(json.dumps(measure(int(n), way, args.resamples, args.seed, args.distinct_elo, trace == "1")))
        return 0
    results = []
    for n in args.items:
        for way in ("before", "now"):
            for trace in ("0", "1"):
                cmd = [sys.executable, __file__, "--resamples", str(args.resamples), "--seed", str(args.seed)]
                cmd += ["--distinct-elo"] * args.distinct_elo + ["--child", str(n), way, trace]
                results.append(child_json(cmd, f"{n} items, {way}"))
                print(f"  {n} items, {way}, {'traced' if trace == '1' else 'RSS'}: done", file=sys.stderr)
    elos = "one item Elo per item" if args.distinct_elo else "the card's 21 item Elos"
    print(
        f"build_comparison on two synthetic reports ({elos}), {args.resamples} resamples, seed {args.seed}; "
        f"{cpu_name()}, Python {platform.python_version()}"
    )
    print()
    print("\n".join(markdown_table(HEAD, "rrrrrrrl", render_rows(results))))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(r[-1] == "yes" for r in render_rows(results)) else 1


if __name__ == "__main__":
    sys.exit(main())

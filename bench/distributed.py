"""What data parallelism costs on a CPU: 2 ranks x 1 thread against 1 process x 2 threads.

    python bench/distributed.py --model PATH.gguf [--limit N] [--rounds 2]

Both use the same two cores, so any difference is what sharing the items and swapping results
costs (or saves). Each round runs, in turn, `python benchmark.py --threads 2` and
`torchrun --nproc_per_node 2 benchmark.py --threads 1` on the bundled set, each in a fresh process
with a fresh out-dir, and reads `timing` from their report.json: `scoring_s` (rank 0's scoring
wall time, lockstep waits included) and `rank_wait_s` (rank 0's time in the result exchange,
waiting for the slower rank included). Right before each run it measures the float32 GEMM rate on
2 threads with SmolLM2-sized projections, because this machine's speed drifts. It also checks that
the two reports agree (every choice, every prediction, the results block).

Prints a Markdown table and the overhead: the 2-rank scoring time over the 1-process one, minus 1,
per round and as the median, also normalised by the GEMM rate measured before each run.

bench/RESULTS.md: "Data parallel on a CPU: 2 ranks × 1 thread against 1 process × 2 threads".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import ROOT, gemm_rate, markdown_table, timed_call, torchrun_cmd
from speed import machine


def run(kind: str, model: str, out: Path, limit: int | None) -> dict:
    flags = ["--model", model, "--local-data", str(ROOT), "--device", "cpu", "--out-dir", str(out)]
    flags += ["--limit", str(limit)] if limit else []
    if kind == "1x2":
        cmd = [sys.executable, str(ROOT / "benchmark.py"), *flags, "--threads", "2"]
    else:
        cmd = torchrun_cmd(2, ROOT / "benchmark.py", *flags, "--threads", "1")
    p, wall = timed_call(
        subprocess.run, cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    if p.returncode != 0:
        raise SystemExit(f"{kind} run failed:\n{p.stderr[-3000:]}")
    rep = json.loads((out / "report.json").read_text())
    return {"kind": kind, "wall_s": wall, "report": rep, **rep["timing"]}


def agree(a: dict, b: dict) -> tuple[float, int, bool]:
    worst = max(
        abs(x["logprob"] - y["logprob"])
        for i, j in zip(a["items"], b["items"])
        for x, y in zip(i["choices"], j["choices"])
    )
    differ = sum(i["prediction"] != j["prediction"] for i, j in zip(a["items"], b["items"]))
    return worst, differ, a["results"] == b["results"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--limit", type=int)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    rows, overheads, normalised = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            pair = {}
            for kind in ("1x2", "2x1"):
                rate = gemm_rate(2)
                res = run(kind, args.model, Path(tmp) / f"{kind}-{r}", args.limit)
                res["gemm_tflops"] = rate / 1e12
                pair[kind] = res
                rows.append((r + 1, res))
            worst, differ, same = agree(pair["1x2"]["report"], pair["2x1"]["report"])
            ratio = pair["2x1"]["scoring_s"] / pair["1x2"]["scoring_s"]
            overheads.append(ratio - 1)
            normalised.append(ratio * pair["2x1"]["gemm_tflops"] / pair["1x2"]["gemm_tflops"] - 1)
            print(
                f"round {r + 1}: 2x1 / 1x2 scoring time {ratio:.3f}; max |Δ logprob| {worst:.1e}, "
                f"{differ} predictions differ, results identical: {same}",
                file=sys.stderr,
            )
    n = len(rows[0][1]["report"]["items"])
    print(f"Machine: {machine()}\n")
    print(f"Model: `{Path(args.model).name}`, float32, {n} items of the bundled set, batch 8.\n")
    head = ["round", "ranks × threads", "wall s (whole command)", "model load s", "scoring s"]
    head += ["rank 0 waiting in the exchange s", "items/s", "GEMM TFLOP/s (2 threads) just before"]
    cells = [
        [r, res["kind"].replace("x", " × "), f"{res['wall_s']:.1f}", f"{res['model_load_s']:.1f}"]
        + [f"{res['scoring_s']:.1f}", f"{res.get('rank_wait_s', 0):.1f}", f"{res['items_per_s']:.2f}"]
        + [f"{res['gemm_tflops']:.3f}"]
        for r, res in rows
    ]
    print("\n".join(markdown_table(head, "rlrrrrrr", cells)))
    med, med_n = statistics.median(overheads), statistics.median(normalised)
    print(
        f"\nOverhead of 2 ranks × 1 thread over 1 process × 2 threads (scoring time): "
        f"{', '.join(f'{o:+.1%}' for o in overheads)}; median {med:+.1%} "
        f"(normalised by the GEMM rate before each run: median {med_n:+.1%}). Target ≤ +10%: "
        f"{'met' if med <= 0.10 else 'MISSED'}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

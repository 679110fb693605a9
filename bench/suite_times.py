"""How long the test suite takes: each tier on one process and on worker processes, one after another.

    python bench/suite_times.py                                  # fast and full, 1 and 2 workers
    python bench/suite_times.py --tier fast --workers 1,2 --json suite.json

Runs `python -m pytest -q -p no:cacheprovider [-m "not slow"] [-n N]` from the checkout's root with
CI=1 (a component that is missing fails instead of skipping, as in `.ci/run`) and times each whole
command. Before and after each, it takes the load average and the rate of SmolLM2-sized matrix
products on 2 threads: the machine's speed drifts, and a run beside other work is not comparable.
Prints one Markdown row a run, and the ratio of one process to the most workers for each tier.
Exits 1 if a run has a failing test: its time is not the suite's.

bench/RESULTS.md: "The test suite: the fast tier and the full suite".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

from benchlib import ROOT, cpu_name, gemm_rate, markdown_table

TIERS = {"fast": ["-m", "not slow"], "full": []}
# pytest's last line: "2 failed, 2002 passed, 1 skipped in 2063.45s (0:34:23)" (-q), or between "="s
SUMMARY = re.compile(r"^=*\s*(\d+ \w+(?:, \d+ \w+)*) in ([\d.]+)s\b", re.M)


def command(tier: str, workers: int) -> list[str]:
    """The pytest command for a tier on `workers` processes (1: no xdist worker at all)."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TIERS[tier]] + (
        ["-n", str(workers)] if workers > 1 else []
    )


def counts(summary: str) -> dict[str, int]:
    """pytest's last line as counts: '3 failed, 1990 passed, 1 skipped' -> {'failed': 3, ...}."""
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}


def parse(output: str) -> tuple[dict[str, int], float]:
    """The counts and pytest's own seconds from the last summary line of a run's output (a test's
    own output may hold another pytest's summary before it)."""
    found = SUMMARY.findall(output)
    if not found:
        raise ValueError("no pytest summary line in the output")
    summary, seconds = found[-1]
    return counts(summary), float(seconds)


def measure(tier: str, workers: int) -> dict:
    before = os.getloadavg()[0], gemm_rate(2)
    t = time.perf_counter()
    proc = subprocess.run(
        command(tier, workers), cwd=ROOT, env={**os.environ, "CI": "1"}, capture_output=True, text=True
    )
    wall = time.perf_counter() - t
    after = os.getloadavg()[0], gemm_rate(2)
    got, pytest_s = parse(proc.stdout)
    return {"tier": tier, "workers": workers, "wall_s": wall, "pytest_s": pytest_s, "counts": got,
            "returncode": proc.returncode, "load": [before[0], after[0]],
            "gemm_gflops": [before[1] / 1e9, after[1] / 1e9], "tail": proc.stdout[-3000:]}  # fmt: skip


def rows(results: list[dict]) -> list[str]:
    def tests(c):
        return ", ".join(f"{n:,} {w}" for w, n in c.items())

    table = markdown_table(
        ["tier", "workers", "tests", "seconds", "load average before → after", "GEMM GFLOP/s before → after"],
        "lrlrll",
        [
            [r["tier"], r["workers"], tests(r["counts"]), f"{r['wall_s']:.0f} s",
             f"{r['load'][0]:.2f} → {r['load'][1]:.2f}", f"{r['gemm_gflops'][0]:.0f} → {r['gemm_gflops'][1]:.0f}"]
            for r in results
        ],
    )  # fmt: skip
    return table


def ratios(results: list[dict]) -> list[str]:
    """For each tier run on several worker counts: how many times faster the most workers were."""
    lines = []
    for tier in TIERS:
        runs = sorted((r for r in results if r["tier"] == tier), key=lambda r: r["workers"])
        if len(runs) > 1:
            one, most = runs[0], runs[-1]
            lines.append(
                f"{tier}: {one['wall_s'] / most['wall_s']:.2f}× as fast on {most['workers']} workers as on {one['workers']}"
            )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--tier", action="append", choices=sorted(TIERS), help="fast or full (repeat for both; default both)"
    )
    ap.add_argument("--workers", default="1,2", help="worker counts, comma-separated (1: a plain pytest run)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    results = []
    print(f"{cpu_name()}, {os.cpu_count()} logical CPUs", file=sys.stderr)
    for tier in args.tier or ["fast", "full"]:
        for n in workers:
            print("running:", " ".join(command(tier, n)[1:]), file=sys.stderr)
            results.append(measure(tier, n))
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"cpu": cpu_name(), "logical_cpus": os.cpu_count(), "runs": results}, f, indent=1)
    print("\n".join(rows(results) + [""] + ratios(results)))
    bad = [r for r in results if r["returncode"] != 0 or {"failed", "error", "errors"} & set(r["counts"])]
    for r in bad:
        print(f"\n{r['tier']} on {r['workers']}: exit {r['returncode']}\n{r['tail']}", file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

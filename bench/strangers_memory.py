"""Peak memory of the report readers on reports crafted to make them grow: the table "Reports from
strangers: peak memory of the readers" in RESULTS.md.

    python bench/strangers_memory.py                       # this checkout
    python bench/strangers_memory.py --checkout /tmp/old   # another checkout's base_bench, same inputs

Each case runs one command in a fresh process (`python -c`, the checkout first on sys.path) and
reads that process's peak resident memory (getrusage's ru_maxrss) and its exit code:

* honest: `compare` of two honest 350-item reports (the baseline: Python, numpy, matplotlib);
* padded: `compare` of a report padded to 32 MiB with an ignored array of empty arrays;
* categories: `leaderboard` of 8 reports whose items and results carry 100 made-up categories each;
* many runs: `leaderboard` of 60 honest runs (the plots grow with the runs they draw).

The reports are made here from the bundled set with made-up scores (results.report.build_report),
so the same files go to every checkout. Prints a Markdown table.

bench/RESULTS.md: "Reports from strangers: peak memory of the readers".
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib

CASES = ("honest", "padded", "categories", "many runs")


def honest_report(seed: int, spec: str) -> dict:
    from base_bench.items.datasource import open_data
    from base_bench.items.records import ChoiceScore, ItemResult, pick
    from base_bench.results.report import build_report

    source = open_data("bundled")
    rng = random.Random(seed)
    results = {}
    for it in source.dataset.items:
        choices = tuple(ChoiceScore(-rng.uniform(1, 20), rng.randint(1, 8)) for _ in it.continuations)
        results[it.id] = ItemResult(it.id, choices, pick(choices), it.label)
    config = {"model": {"spec": spec}, "backend": "transformers", "dtype": "float32", "add_bos": False}
    return build_report(
        config=config,
        data=source.record,
        official=False,
        reasons=["made-up scores"],
        items=source.dataset.items,
        results=results,
        bootstrap_resamples=20,
    )


def write(folder: Path, rep: dict | str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(rep if isinstance(rep, str) else json.dumps(rep), encoding="utf-8")
    return folder


def padded(rep: dict, size: int = 32 * 2**20) -> str:
    head = json.dumps(rep)[:-1] + ', "padding": ['
    n = (size - len(head)) // 3
    return head + ",".join(["[]"] * n) + "]}"


def make_inputs(root: Path) -> dict[str, list[str]]:
    """The command line of each case, over files written under `root`."""
    a, b = honest_report(1, "org/a"), honest_report(2, "org/b")
    ra, rb = write(root / "a", a), write(root / "b", b)
    pad = write(root / "padded", padded(a))
    cats = []
    for k in range(8):
        rep = copy.deepcopy(a)
        names = [f"made_up_{k}_{c}" for c in range(100)]
        for n, it in enumerate(rep["items"]):
            it["category"] = names[n % 100]
        block = rep["results"]["overall"]
        rep["results"]["categories"] = {c: dict(block) for c in names}  # what the plot draws
        cats.append(write(root / f"cat{k}", rep))
    many = [write(root / f"m{k}", honest_report(100 + k, f"org/m{k}")) for k in range(60)]
    return {
        "honest": ["compare", str(ra), str(rb)],
        "padded": ["compare", str(pad), str(rb)],
        "categories": ["leaderboard", *map(str, cats), "--out-dir", str(root / "lb-cats")],
        "many runs": ["leaderboard", *map(str, many), "--out-dir", str(root / "lb-many")],
    }


CHILD = """
import resource, sys
sys.path.insert(0, {checkout!r})
from base_bench.commands.cli import main
try:
    code = main({argv!r})
except BaseException as e:  # a traceback is a result here
    code = "traceback: " + type(e).__name__
print("@@", code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def measure(checkout: Path, argv: list[str]) -> tuple[str, float]:
    """(exit code or the exception's name, peak RSS in MiB) of one command in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(checkout=str(checkout), argv=argv)],
        capture_output=True,
        text=True,
        cwd=checkout,
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("@@")), None)
    if line is None:
        return f"died ({out.returncode})", float("nan")
    _, code, kib = line.split(" ", 2)
    return code, int(kib) / 1024


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkout", type=Path, default=benchlib.ROOT, help="the checkout whose base_bench reads")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cases = make_inputs(Path(tmp))
        rows = []
        for name in CASES:
            code, mib = measure(args.checkout.resolve(), cases[name])
            rows.append([name, cases[name][0], code, f"{mib:.0f}"])
    print(f"checkout {args.checkout}; {benchlib.cpu_name()}")
    print("\n".join(benchlib.markdown_table(["case", "command", "exit", "peak RSS (MiB)"], "lllr", rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

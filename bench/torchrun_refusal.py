"""How a refused torchrun run ends, many times over: every rank must exit 2, never by a signal.

    python bench/torchrun_refusal.py --runs 200 --parallel 2 [--load 2] [--teardown-sigterm] [--log F]

Each run is `torchrun --nproc_per_node 2 tests/rankrun.py` on a tiny random model (tests/tiny.py)
and a small generated data set, with rank 1 given a data file that differs by one word, so the
ranks disagree on the data SHA-256 and the run is refused before scoring, as in
tests/test_distributed.py. `--parallel` runs that many jobs at once, and `--load N` adds N busy
loops for the whole time, so the ranks leave under CPU load, where the teardown race showed.
`--teardown-sigterm` also sends rank 1 a SIGTERM as it starts destroying its process group (the
signal torchrun sends once the other rank has exited), every time instead of by chance.

Counts the exit codes that torchrun's failure summary gives for the ranks, and the runs where a
rank ended otherwise than with 2 (SIGTERM -15, SIGABRT -6, a missing rank), printing the first
such summary whole. Prints one Markdown row.

bench/RESULTS.md: "A refused torchrun run: how the ranks exit".
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchlib import ROOT, markdown_table, torchrun_cmd

sys.path.insert(0, str(ROOT / "tests"))

from fixtures import write_dataset  # noqa: E402
from tiny import save_tiny  # noqa: E402


def busy() -> None:
    while True:
        pass


def exit_codes(stderr: str) -> list[int]:
    """Every failed rank's exit code, from torchrun's failure summary."""
    return sorted(int(x.split(":")[1].split()[0]) for x in stderr.splitlines() if x.strip().startswith("exitcode"))


def one_run(root: Path, n: int, teardown_sigterm: bool, log: Path | None = None) -> tuple[list[int], str]:
    env = {**os.environ, "RANKRUN_FAULT": f"arg:--local-data={root / 'other'}", "OMP_NUM_THREADS": "1"}
    if teardown_sigterm:
        env.update(RANKRUN_TEARDOWN="term", RANKRUN_LOG=str(root / f"teardown-{n}"))
    flags = ["--model", str(root / "tiny"), "--local-data", str(root / "data"), "--device", "cpu"]
    flags += ["--out-dir", str(root / f"out-{n}"), "--dist-timeout", "60"]
    cmd = torchrun_cmd(2, ROOT / "tests" / "rankrun.py", *flags)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    codes = exit_codes(p.stderr)
    if log is not None:  # one line a run as it ends, so a long series stopped early still counts
        with log.open("a") as f:
            f.write(json.dumps({"run": n, "codes": codes, "load": round(os.getloadavg()[0], 2)}) + "\n")
    return codes, p.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--load", type=int, default=0, help="busy-loop processes beside the runs")
    ap.add_argument("--teardown-sigterm", action="store_true")
    ap.add_argument("--log", type=Path, help="append each run's exit codes to this file as a JSON line")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="refusal.") as tmp:
        root = Path(tmp)
        write_dataset(root / "data")
        other = write_dataset(root / "other")
        other.write_text(other.read_text().replace("she looked at", "he looked at"))
        save_tiny(root / "tiny")
        loops = [multiprocessing.Process(target=busy, daemon=True) for _ in range(args.load)]
        for p in loops:
            p.start()
        t0 = time.time()
        load_before = os.getloadavg()[0]
        try:
            with ThreadPoolExecutor(args.parallel) as pool:
                results = list(pool.map(lambda n: one_run(root, n, args.teardown_sigterm, args.log), range(args.runs)))
        finally:
            load_after = os.getloadavg()[0]
            for p in loops:
                p.terminate()
    codes = collections.Counter(c for got, _ in results for c in got)
    bad = [(got, err) for got, err in results if got != [2, 2]]
    if bad:
        print(f"first run that ended otherwise ({bad[0][0]}):\n{bad[0][1][-4000:]}", file=sys.stderr)
    row = [
        args.runs,
        args.parallel,
        args.load,
        "yes" if args.teardown_sigterm else "no",
        f"{load_before:.1f} to {load_after:.1f}",
        ", ".join(f"{c}: {k}" for c, k in sorted(codes.items())),
        len(bad),
        f"{time.time() - t0:.0f}",
    ]
    heads = [
        "runs",
        "at once",
        "busy loops",
        "SIGTERM in teardown",
        "load average",
        "rank exit codes",
        "runs not [2, 2]",
        "s",
    ]
    print("\n".join(markdown_table(heads, "rrrllrrr", [row])))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Peak resident memory of a real base-bench run, against the size of the model it loaded.

    python bench/memory.py --model PATH.gguf [--out-dir runs/memory] [-- extra base-bench flags]

Runs `python benchmark.py --local-data . --device cpu --model MODEL ...` as a child process, so the
measurement covers everything a user's run does (imports, model load, tokenization, scoring,
reports), and reads the child's peak RSS from getrusage. The model's size is the bytes of its
parameters and buffers as loaded (`config.model.bytes_in_memory` in report.json; for a GGUF file
that is the dequantized model, larger than the file). Prints one line and exits 1 if the peak is
above model size + 1.5 GB, the budget the speed issue sets.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET_OVER_MODEL = 1.5e9


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--out-dir", default=str(ROOT / "runs" / f"memory-{time.strftime('%Y%m%d-%H%M%S')}"))
    p.add_argument("extra", nargs="*", help="more base-bench flags, after --")
    args = p.parse_args(argv)
    cmd = [sys.executable, str(ROOT / "benchmark.py"), "--local-data", str(ROOT), "--device", "cpu",
           "--model", args.model, "--out-dir", args.out_dir, *args.extra]
    t = time.perf_counter()
    rc = subprocess.call(cmd, cwd=ROOT)
    wall = time.perf_counter() - t
    if rc != 0:
        print(f"memory: the run failed with exit code {rc}", file=sys.stderr)
        return rc
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux reports KiB
    model_bytes = json.loads((Path(args.out_dir) / "report.json").read_text())["config"]["model"]["bytes_in_memory"]
    ok = peak <= model_bytes + BUDGET_OVER_MODEL
    print(f"memory: peak RSS {peak / 1e9:.2f} GB; model in memory {model_bytes / 1e9:.2f} GB; "
          f"peak - model = {(peak - model_bytes) / 1e9:.2f} GB (budget 1.50 GB): {'within' if ok else 'OVER'}; "
          f"run took {wall:.0f} s, out-dir {args.out_dir}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

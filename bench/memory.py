"""Peak resident memory of a real base-bench run, against the size of the model it loaded.

    python bench/memory.py --model PATH.gguf [--out-dir runs/memory] [-- extra base-bench flags]
    python bench/memory.py --model PATH.gguf --api [--threads 2] [--batch-size 8]
    python bench/memory.py --model PATH.gguf -- --backend llama.cpp --threads 2   # llama.cpp's budget

Runs `python benchmark.py --local-data . --device cpu --model MODEL ...` as a child process, so the
measurement covers everything a user's run does (imports, model load, tokenization, scoring,
reports), and reads the child's peak RSS from wait4 (`run_measured`, which bench/readme_runs.py
uses too). The model's size is the bytes of its parameters and buffers as loaded (`config.model.bytes_in_memory` in report.json; for a GGUF file
that is the dequantized model, larger than the file). Prints one line and exits 1 if the peak is
above model size + 1.5 GB, the project's memory budget for the torch path. With `--backend llama.cpp`
the model is the GGUF file as llama.cpp maps it, and the budget is the file's size + 600 MB.

With --api it measures what `base_bench.evaluate` adds to a process that already holds the model,
as in a training job: the model is loaded in this process, the peak-RSS mark is reset
(/proc/self/clear_refs), `evaluate` scores the whole bundled set, and the new peak minus the RSS
before the call is the extra memory. For scale it also measures, the same way, one forward pass of
the first (longest) batch alone: "about one batch's activations" means the two are close. Linux only.

bench/RESULTS.md: "Memory" (with -- --backend llama.cpp) and, with --api, "evaluate() in a training
process: memory it adds".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchlib import ROOT, load_cpu_model, timed_call

BUDGET_OVER_MODEL = 1.5e9
BUDGET_OVER_GGUF = 0.6e9  # --backend llama.cpp: the file, its KV cache and compute buffers, torch's import


@dataclass(frozen=True)
class Measured:
    returncode: int
    wall_s: float
    peak_rss_bytes: int  # the child's own peak (wait4), not the largest of every child so far
    cpu_s: float  # user + system CPU seconds of the child and its children: less sensitive to other jobs


def run_measured(cmd: list[str], **popen) -> Measured:
    """Run `cmd` as a child process (Popen keyword arguments pass through) and measure it: wall
    time, CPU time, and its peak resident memory from wait4, so each of several runs gets its own
    peak. Linux carries a process's peak across fork and exec, so the child's peak is at least the
    RSS this process had when it started it: measure from a small process (this script and
    bench/readme_runs.py import no model library before their runs)."""
    t = time.perf_counter()
    child = subprocess.Popen(cmd, **popen)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    return Measured(child.returncode, wall, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime)  # KiB on Linux


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _extra_peak(fn) -> tuple[float, object]:
    """(peak RSS during fn() minus RSS before it, in bytes; fn's result)."""
    import gc

    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM (peak RSS) to the current RSS
    before = _status_kb("VmRSS")
    out = fn()
    return (_status_kb("VmHWM") - before) * 1024, out


def api(args) -> int:
    import torch

    from base_bench import evaluate
    from base_bench.backends.transformers import model_size
    from base_bench.backends.transformers_scorers import PackedScorer, model_window
    from base_bench.engine.packing import longest_first
    from base_bench.engine.scoring import encode_item
    from base_bench.items.datasource import open_data

    torch.set_num_threads(args.threads)
    loaded, _ = load_cpu_model(args.model)
    model, tok = loaded.model, loaded.tokenizer
    items = open_data(None).dataset.items
    encs = [encode_item(tok, it, window=model_window(model, tok)) for it in items]
    first = longest_first(encs)[: args.batch_size]
    one_batch, _ = _extra_peak(lambda: PackedScorer(model, tok.pad_token_id or 0)(first))
    (extra, rep), wall = timed_call(
        _extra_peak, lambda: evaluate(model, tok, batch_size=args.batch_size, progress=False)
    )
    size = model_size(model)["bytes_in_memory"]
    print(
        f"memory --api: evaluate() on {len(rep['items'])} items, batch {args.batch_size}, {args.threads} threads, "
        f"{wall:.0f} s; model {size / 1e9:.2f} GB in memory"
    )
    print(f"  extra peak RSS during evaluate(): {extra / 1e6:.0f} MB")
    print(
        f"  extra peak RSS of one forward of the longest batch ({len(first)} items, "
        f"{max(e.packed_length for e in first)} tokens per row): {one_batch / 1e6:.0f} MB"
    )
    print(f"  ratio: {extra / max(one_batch, 1):.2f}; extra as a share of the model: {extra / size:.1%}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--api", action="store_true", help="measure evaluate() in this process instead of a CLI run")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--out-dir", default=str(ROOT / "runs" / f"memory-{time.strftime('%Y%m%d-%H%M%S')}"))
    p.add_argument("extra", nargs="*", help="more base-bench flags, after --")
    args = p.parse_args(argv)
    if args.api:
        return api(args)
    cmd = [
        sys.executable,
        str(ROOT / "benchmark.py"),
        "--local-data",
        str(ROOT),
        "--device",
        "cpu",
        "--model",
        args.model,
        "--out-dir",
        args.out_dir,
        *args.extra,
    ]
    run = run_measured(cmd, cwd=ROOT)
    wall, peak = run.wall_s, run.peak_rss_bytes
    if run.returncode != 0:
        print(f"memory: the run failed with exit code {run.returncode}", file=sys.stderr)
        return run.returncode
    config = json.loads((Path(args.out_dir) / "report.json").read_text())["config"]
    if config.get("backend") == "llama.cpp":
        what, model_bytes, budget = "GGUF file", Path(args.model).stat().st_size, BUDGET_OVER_GGUF
    else:
        what, model_bytes, budget = "model in memory", config["model"]["bytes_in_memory"], BUDGET_OVER_MODEL
    ok = peak <= model_bytes + budget
    print(
        f"memory: peak RSS {peak / 1e9:.2f} GB; {what} {model_bytes / 1e9:.2f} GB; "
        f"peak - model = {(peak - model_bytes) / 1e9:.2f} GB (budget {budget / 1e9:.2f} GB): "
        f"{'within' if ok else 'OVER'}; backend {config.get('backend', 'transformers')}; "
        f"run took {wall:.0f} s, out-dir {args.out_dir}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

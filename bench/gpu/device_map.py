"""Check `device_map`: does `--device-map auto --max-memory` split the model and keep its scores?

What it checks: `benchmark.py` twice in subprocesses on the saved bfloat16 export (1B-shaped on a
GPU), batch 8: once with `--device cuda`, once with `--device-map auto --max-memory
cuda:0=1GiB,cpu=...` (half the machine's RAM, at least 8 GiB), so accelerate must put most layers
on the CPU. Target: the placement really has both the GPU and the CPU, the scores agree with the
one-device run (≤ 1e-4, no prediction different) and the results blocks are equal. The dry run
uses the same flags with CPU and disk offload (room on the "CPU" for the embedding and a layer and
a half), the two commands started at once.

What it records: per run its flags, wall, load and scoring seconds and where the modules went
(counted by device); whether the placement really split; the scores against the one-device run.

How long: estimated 90 s on an H200 (a guess until the first GPU run: two command-line runs,
each importing torch and loading the 2 GB export, one of them with most layers on the CPU),
20 s in the dry run.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from gpu.common import EVAL_BATCH, ROOT, SAME_TARGET, compare, report_scores
from gpu.context import Check, Ctx
from gpu.procs import run_subprocess, run_together


def check_device_map(ctx: Ctx) -> dict:
    """benchmark.py --device-map auto with a small --max-memory for the GPU, against the model on one device."""
    from base_bench.items.dataset import bundled_path

    key = ctx.big
    where = ctx.saved_dir(key)
    common = [
        "--model",
        str(where),
        "--dtype",
        "bfloat16",
        "--local-data",
        str(bundled_path()),
        "--batch-size",
        str(EVAL_BATCH),
    ] + (["--limit", str(ctx.limit)] if ctx.limit else [])
    if ctx.threads:
        common += ["--threads", str(ctx.threads)]
    if ctx.device.type == "cuda":
        cpu_gib = max(8, int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 * 0.5))
        spread = ["--device-map", "auto", "--max-memory", f"cuda:0=1GiB,cpu={cpu_gib}GiB"]
        one = ["--device", "cuda"]
    else:  # the dry run: the same flags with CPU and disk offload (as tests/test_device_map.py does): room
        # on the "CPU" for the embedding and a layer and a half, so the layers go to the disk
        model = ctx.model(key, "bfloat16")
        layer = sum(p.numel() * p.element_size() for p in model.model.layers[0].parameters())
        emb = model.get_input_embeddings().weight
        cpu = emb.numel() * emb.element_size() + int(1.5 * layer)
        spread = ["--device-map", "auto", "--max-memory", f"cpu={cpu}", "--offload-folder", str(ctx.work / "offload")]
        one = ["--device", "cpu"]
    runs = {}
    jobs = {
        name: (
            [
                sys.executable,
                str(ROOT / "benchmark.py"),
                *common,
                *flags,
                "--out-dir",
                str(ctx.work / f"cli-{name.replace(' ', '-')}"),
            ],
            f"benchmark.py {' '.join(flags)}",
        )
        for name, flags in (("one device", one), ("device map", spread))
    }
    timeout = min(300.0, max(30.0, ctx.left()))
    if ctx.device.type == "cuda":  # one after the other: the timings and the GPU's memory are measured
        walls = [run_subprocess(cmd, timeout, what)[1] for cmd, what in jobs.values()]
    else:  # the dry run starts both at once: on a small CPU, the two imports and loads are its longest wait
        walls = run_together(list(jobs.values()), timeout)
    for (name, (cmd, _)), wall, flags in zip(jobs.items(), walls, (one, spread)):
        report = json.loads((Path(cmd[-1]) / "report.json").read_text())
        placed = report["config"]["model"].get("device_map") or {}
        counts: dict = {}
        for v in placed.values():
            counts[v] = counts.get(v, 0) + 1
        runs[name] = {
            "flags": " ".join(flags),
            "wall_s": round(wall, 3),
            "load_s": report["timing"]["model_load_s"],
            "scoring_s": report["timing"]["scoring_s"],
            "placement": counts,
            "report": report,
        }
    a, b = runs["one device"].pop("report"), runs["device map"].pop("report")
    vs = compare(report_scores(b, ctx.ids), report_scores(a, ctx.ids), ctx.ids)
    places = set(runs["device map"]["placement"])
    gpu_and_cpu = {"0", "cpu"} <= places or {"cuda:0", "cpu"} <= places
    split = gpu_and_cpu if ctx.device.type == "cuda" else ({"cpu", "disk"} <= places)
    ok = split and vs["max_abs_delta"] <= SAME_TARGET and vs["predictions_differ"] == 0 and a["results"] == b["results"]
    return {
        "target": f"--device-map auto with the GPU capped at 1 GiB scores as the model on one device "
        f"(≤ {SAME_TARGET:g}, same predictions and results)",
        "met": ok if ctx.device.type == "cuda" else None,
        "ran_ok": ok,
        "model": key,
        "runs": runs,
        "really_split": split,
        "vs_one_device": vs,
        "same_results_block": a["results"] == b["results"],
        "summary": (
            f"placement {runs['device map']['placement']}; |Δ| vs one device {vs['max_abs_delta']:.2e}, "
            f"{vs['predictions_differ']} predictions differ; scoring {runs['device map']['scoring_s']:.2f} s "
            f"vs {runs['one device']['scoring_s']:.2f} s"
            + ("" if ctx.device.type == "cuda" else " (dry run: CPU and disk offload; the GPU cap is CUDA only)")
        ),
    }


CHECK = Check("device_map", "--device-map auto with --max-memory cuda:0=1GiB", check_device_map, 90, 20)

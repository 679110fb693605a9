"""Check `torchrun`: does evaluate() run inside a torchrun job with its own process group?

What it checks: `torchrun --nproc_per_node 1` starts bench/gpu_check.py's child mode
(`torchrun_child` below), which does what a training job does: creates its process group (nccl on
a GPU, gloo in the dry run), loads the saved bfloat16 export with `load_model`, runs evaluate()
at batch 8 with an out-dir, and calls the object collectives that `Ranks` uses with more ranks
(all_gather_object, broadcast_object_list) and an all_reduce. Target (nccl only): the scores equal
the in-process evaluate()'s (≤ 1e-4) and every collective returns what was sent. With one rank
evaluate() skips its own exchanges; nccl between ranks needs two GPUs.

What it records: the command, its wall seconds, the child's backend, world size, ranks, device,
NCCL version, threads, attention implementation, init / load / evaluate seconds and whether the
collectives agreed; the run's facts; its scores against the in-process evaluate().

How long: estimated 60 s on an H200 (a guess until the first GPU run: mostly the child importing
torch and transformers and loading the 2 GB export), 15 s in the dry run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from benchlib import free_port

from gpu.common import EVAL_BATCH, ROOT, SAME_TARGET, clean, compare, report_scores, run_facts
from gpu.context import Check, Ctx
from gpu.procs import run_subprocess

ENTRY = ROOT / "bench" / "gpu_check.py"  # the command the child runs: gpu_check.py --torchrun-child SPEC


def check_torchrun(ctx: Ctx) -> dict:
    """`torchrun --nproc_per_node 1` running evaluate() in a process group of its own (nccl on a GPU)."""
    key = ctx.big
    where = ctx.saved_dir(key)
    backend = "gloo" if ctx.device.type != "cuda" else "nccl"
    spec = {
        "model_dir": str(where),
        "out_dir": str(ctx.work / "torchrun-run"),
        "result": str(ctx.work / "torchrun.json"),
        "batch_size": EVAL_BATCH,
        "limit": ctx.limit,
        "backend": backend,
        "device": ctx.device.type,
        "threads": ctx.threads,
    }
    spec_path = ctx.work / "torchrun-spec.json"
    spec_path.write_text(json.dumps(spec))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        "1",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(ENTRY),
        "--torchrun-child",
        str(spec_path),
    ]
    _, wall = run_subprocess(cmd, min(240.0, max(30.0, ctx.left())), "torchrun")
    child = json.loads(Path(spec["result"]).read_text())
    report = child.pop("report")
    mine, _, _ = ctx.evaluate_report(key)
    vs = compare(report_scores(report, ctx.ids), report_scores(mine, ctx.ids), ctx.ids)
    facts = run_facts(report, Path(spec["out_dir"]))
    ok = (
        child["backend"] == backend
        and child["collectives_ok"]
        and facts["items"] == len(ctx.items)
        and vs["max_abs_delta"] <= SAME_TARGET
        and vs["predictions_differ"] == 0
    )
    out = {
        "target": f"evaluate() under torchrun ({backend}, one rank) gives the in-process scores (≤ {SAME_TARGET:g})",
        "met": ok if backend == "nccl" else None,
        "ran_ok": ok,
        "command": " ".join(cmd[:9]) + " gpu_check.py ...",
        "wall_s": round(wall, 3),
        "child": child,
        "run": facts,
        "vs_in_process_evaluate": vs,
        "what_ran_over_the_backend": "init_process_group, the object collectives that base_bench's Ranks uses "
        "when world > 1 (all_gather_object, broadcast_object_list) and an all_reduce, "
        "called by this check, then destroy_process_group. With one rank "
        "evaluate()'s own exchanges are skipped (Ranks returns at world 1), and "
        "benchmark.py under torchrun with WORLD_SIZE=1 does not create a process "
        "group at all (distributed.init_from_env): nccl between ranks needs 2 GPUs",
    }
    if backend != "nccl":
        out["nccl_skipped"] = "CUDA only: nccl needs a GPU; the dry run uses gloo to exercise the same subprocess"
    out["summary"] = (
        f"torchrun, 1 rank, {child['backend']}: {facts['items']} items, |Δ| vs in-process "
        f"evaluate() {vs['max_abs_delta']:.2e}, collectives ok={child['collectives_ok']}"
        + ("" if backend == "nccl" else " (dry run: gloo; nccl is CUDA only)")
    )
    return out


def torchrun_child(spec_path: str) -> int:
    """Inside torchrun: what a training job does (its own process group), then evaluate()."""
    import torch
    import torch.distributed as dist
    from transformers.utils import logging as hf_logging

    from base_bench import evaluate
    from base_bench.backends.transformers import load_model
    from base_bench.engine.distributed import Ranks

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    spec = json.loads(Path(spec_path).read_text())
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if spec["device"] == "cuda":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    t = time.perf_counter()
    dist.init_process_group(spec["backend"])
    init_s = time.perf_counter() - t
    try:
        t = time.perf_counter()
        loaded = load_model(spec["model_dir"], device, torch.bfloat16)
        load_s = time.perf_counter() - t
        ranks = Ranks.current()
        t = time.perf_counter()
        report = evaluate(
            loaded.model,
            loaded.tokenizer,
            None,
            limit=spec["limit"],
            batch_size=spec["batch_size"],
            out_dir=spec["out_dir"],
            progress=False,
        )
        eval_s = time.perf_counter() - t
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, {"rank": dist.get_rank(), "items": len(report["items"])})
        box = [{"from": "rank 0"} if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(box, src=0)
        x = torch.ones(4, device=device)
        dist.all_reduce(x)
        collectives_ok = (
            gathered[0] == {"rank": 0, "items": len(report["items"])}
            and box[0] == {"from": "rank 0"}
            and float(x.sum()) == 4.0 * dist.get_world_size()
        )
        nccl = None
        if spec["backend"] == "nccl":
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        result = {
            "backend": dist.get_backend(),
            "world_size": dist.get_world_size(),
            "rank": dist.get_rank(),
            "local_rank": local,
            "device": str(device),
            "nccl_version": nccl,
            "threads": torch.get_num_threads(),
            "attn_implementation": getattr(loaded.model.config, "_attn_implementation", None),
            "ranks_seen_by_evaluate": [ranks.rank, ranks.world],
            "init_s": round(init_s, 3),
            "load_s": round(load_s, 3),
            "evaluate_s": round(eval_s, 3),
            "collectives_ok": collectives_ok,
            "report": report,
        }
        Path(spec["result"]).write_text(json.dumps(clean(result)))
    finally:
        dist.destroy_process_group()
    return 0


CHECK = Check("torchrun", "torchrun, one rank, nccl", check_torchrun, 60, 15)

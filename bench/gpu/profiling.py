"""Where a scoring pass spends its time on the device: a pass timed in three phases with hooks on
the model, and a pass under torch.profiler summarised by kind. Used by the speed check.

    timed_phases(model, scorer, passes, device)     # host prep and copies / forward / after, in seconds
    profiled_pass(scorer, encs, device, 8)          # kernels by kind, device busy time, launches, copies
    profiled_pass(scorer, encs, device, None, 4096) # the same, passes of at most 4,096 fed positions
    summarize_profile([(True, "nvjet_gemm", 0.0, 100.0), ...])   # the pure part, tested by hand

Both run one more pass than the speed check's timed ones: about one scoring time each (the
profiler slows the host side, so its shares are read, not its absolute times).
"""

from __future__ import annotations

import time

from gpu.common import sync


def timed_phases(model, scorer, passes, device) -> dict:
    """One more scoring pass over `passes` (lists of items, as packing.Batching cuts them), timed in
    three parts per pass with hooks on the model (the GPU is synchronised at each mark): before the
    forward (building ids, positions and the 4D mask on the host, and copying them to the device),
    the forward (GPU work plus kernel launches), after it (log_softmax, gathering, .tolist())."""
    marks: dict = {}

    def pre(mod, args, kwargs):
        sync(device)
        marks["in"] = time.perf_counter()

    def post(mod, args, kwargs, out):
        sync(device)
        marks["out"] = time.perf_counter()

    h1 = model.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = model.register_forward_hook(post, with_kwargs=True)
    prep = fwd = after = 0.0
    try:
        for batch in passes:
            sync(device)
            t0 = time.perf_counter()
            scorer(batch)
            t3 = time.perf_counter()
            prep += marks["in"] - t0
            fwd += marks["out"] - marks["in"]
            after += t3 - marks["out"]
    finally:
        h1.remove()
        h2.remove()
    return {
        "host_prep_and_copy_s": round(prep, 4),
        "forward_s": round(fwd, 4),
        "after_forward_s": round(after, 4),
        "total_s": round(prep + fwd + after, 4),
    }


def profiled_pass(scorer, encs, device, batch_size: int | None, batch_tokens: int | None = None) -> dict:
    """One more scoring pass (`batch_size` items or at most `batch_tokens` positions per pass) under
    torch.profiler: GPU kernels (count, busy time, by kind), host-to-
    device copies, and the launch calls on the host."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from base_bench.engine.scoring import score_in_batches

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    t = time.perf_counter()
    with profile(activities=acts) as prof:
        score_in_batches(scorer, encs, batch_size, batch_tokens=batch_tokens)
        sync(device)
    wall = time.perf_counter() - t
    rows = [(e.device_type != DeviceType.CPU, e.name, e.time_range.start, e.time_range.end) for e in prof.events()]
    return {
        "wall_s": round(wall, 4),
        **summarize_profile(rows),
        "note": "profiled pass; the profiler slows the host side, so read shares, not absolute times",
    }


def kernel_kind(name: str) -> str:
    n = name.lower()
    if "memcpy htod" in n:
        return "memcpy HtoD"
    if "memcpy dtoh" in n:
        return "memcpy DtoH"
    if "memcpy" in n or "memset" in n:
        return "memcpy/memset other"
    if any(w in n for w in ("fmha", "flash", "attention", "efficient")):
        return "attention"
    if any(w in n for w in ("gemm", "nvjet", "cutlass", "xmma", "sm90", "matmul")):
        return "GEMM"
    return "other kernels"


def summarize_profile(rows) -> dict:
    """From (on_device, name, start_us, end_us) rows: device events by kind (count, seconds), the
    device's busy time (the union of its intervals), and the host's launch, copy and sync calls."""
    kinds: dict = {}
    spans = []
    host = {"launch_calls": 0, "launch_s": 0.0, "memcpy_calls": 0, "memcpy_s": 0.0, "sync_s": 0.0, "aten_ops": 0}
    for on_device, name, start, stop in rows:
        dur = (stop - start) / 1e6
        if on_device:
            k = kinds.setdefault(kernel_kind(name), {"count": 0, "s": 0.0})
            k["count"] += 1
            k["s"] += dur
            spans.append((start, stop))
        elif name.startswith(("cudaLaunchKernel", "cuLaunchKernel")):
            host["launch_calls"] += 1
            host["launch_s"] += dur
        elif name.startswith(("cudaMemcpy", "cuMemcpy")):
            host["memcpy_calls"] += 1
            host["memcpy_s"] += dur
        elif "Synchronize" in name:
            host["sync_s"] += dur
        elif name.startswith("aten::"):
            host["aten_ops"] += 1
    busy, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            busy += (b - max(a, end)) / 1e6
            end = b
    for k in kinds.values():
        k["s"] = round(k["s"], 6)
    return {
        "device_busy_s": round(busy, 6),
        "device_events": kinds,
        "host": {k: round(v, 6) if isinstance(v, float) else v for k, v in host.items()},
    }

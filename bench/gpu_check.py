"""Every GPU check in one run: speed, exactness, bfloat16, --batch-size auto, evaluate(), torchrun
with nccl, --device-map. Writes gpu_check.json (the source of truth) and gpu_check.md.

    python bench/gpu_check.py --out DIR                  # on a CUDA GPU (DIR defaults to $OUT)
    python bench/gpu_check.py --dry-run --out DIR        # on a CPU: tiny model, 20 items, ~30 s of CPU
    python bench/gpu_check.py --only speed,device_map --out DIR    # a subset, e.g. to rerun what failed
    python bench/gpu_check.py --render DIR/gpu_check.json          # rewrite gpu_check.md from the JSON
    python bench/gpu_check.py --make-tokenizer [PATH.gguf]         # rebuild bench/assets/ from SmolLM2's GGUF

The checks live in bench/gpu/, one module each, every one opening with what it checks, what it
records and how long it takes:

    gpu/run.py          the runner: the checks in order with their time budgets, the flags, the JSON
    gpu/speed.py        (+ gpu/profiling.py) scoring speed, memory, FLOPs, where the time goes
    gpu/exactness.py    every scorer at batch 1/8/32 against the card-literal loop, float32 and bfloat16
    gpu/bf16_vs_fp32.py the same weights in bfloat16 and float32
    gpu/batch_auto.py   --batch-size auto, and a forced out-of-memory error that must halve the batch
    gpu/evaluate.py     evaluate() on a model in GPU memory
    gpu/torchrun.py     evaluate() under torchrun with an nccl process group
    gpu/device_map.py   --device-map auto --max-memory cuda:0=1GiB against one device
    gpu/report.py       gpu_check.md from gpu_check.json
    gpu/context.py      Ctx: each model, encoding and score built once and shared; Check, one check
    gpu/models.py       the carried tokenizer and the two random-weight Llamas
    gpu/common.py, gpu/procs.py, gpu/machine.py    targets and comparisons, subprocesses, the machine

`--dry-run` runs every check that can run on a CPU, on the tiny model and the first 20 items (the
torchrun check with gloo instead of nccl, the device-map check with CPU and disk offload instead of
GPU and CPU), and records why the CUDA-only parts are skipped. tests/test_gpu_check.py runs it.

On the GPU machine (bench/RESULTS.md, "GPU check", says how): the script needs torch,
transformers, accelerate, tokenizers, huggingface_hub (base_bench.backends.transformers imports
it), tqdm and numpy (evaluate's progress bar and report), safetensors (save_pretrained); not gguf,
matplotlib or lm-eval. In the JSON, `environment.project_dependencies` records which were there,
and `imported_project_dependencies` which the run imported.

bench/RESULTS.md: "GPU check: prepared, not yet run on a GPU" (from gpu_check.md, once run on a GPU).
"""

from __future__ import annotations

import sys

from gpu.run import main  # gpu.common imports benchlib, which puts this checkout first on sys.path

if __name__ == "__main__":
    sys.exit(main())

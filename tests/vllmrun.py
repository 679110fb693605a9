"""Run by tests/test_vllm_engine.py with vLLM's own Python (BASE_BENCH_VLLM_PYTHON): one vLLM engine,
started by the CLI, then kept to ask it more. Writes what it saw as JSON.

    python tests/vllmrun.py MODEL_DIR DATA.jsonl OUT_DIR RESULT.json

1. `base-bench --backend vllm` on DATA (batch size 2), through cli.main, as a user runs it;
2. --resume with another dtype, and a --vllm-arg vLLM does not take: refused before any engine starts;
3. on the same engine (its close deferred to the end): the raw `generate` output for
   prompt_logprobs=0, the `prompt_logprobs` engine function, and `evaluate` at batch size 1 and 8;
4. the threads still alive once the engine is closed (vLLM's output thread must be gone: see close()).

On a shared machine it holds $BASE_BENCH_VLLM_LOCK (default /tmp/vllm.lock, the lock tests/vllmserver.py
and `flock` take) while an engine may run, so that two vLLM engines never run at once. Not under CI=1,
nor where the test process's own vLLM server (a session fixture) holds that lock until the session
ends (BASE_BENCH_VLLM_LOCK_HELD): this engine then runs beside it.
"""

import fcntl
import json
import os
import sys
import threading
from pathlib import Path

from vllmserver import lock_already_held  # this script's folder (tests/) is first on sys.path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    model, data, out_dir, result = sys.argv[1:5]
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from base_bench import evaluate
    from base_bench.backends import vllm as vb
    from base_bench.commands.cli import main as cli

    kept = []
    real_close = vb.VllmBackend.close
    vb.VllmBackend.close = lambda self: kept.append(self)  # keep the CLI's engine for step 3

    argv = ["--backend", "vllm", "--model", model, "--dtype", "float32", "--local-data", data, "--out-dir", out_dir]
    argv += ["--vllm-arg", "max_model_len=2048", "--vllm-arg", "enforce_eager=true", "--batch-size", "2"]
    got: dict = {}
    with open(os.environ.get("BASE_BENCH_VLLM_LOCK", "/tmp/vllm.lock"), "w") as lock:
        if not lock_already_held():
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            got["rc"] = cli(argv)
            got["resume_other_dtype_rc"] = cli([*argv, "--resume", "--dtype", "bfloat16"])
            got["unknown_arg_rc"] = cli([*argv, "--vllm-arg", "max_modl_len=1"])  # refused before any engine
            backend = kept[0]
            from vllm.inputs import TokensPrompt

            prompt = [504, 3575, 282, 4649, 314, 7042, 28]
            raw = backend.llm.generate([TokensPrompt(prompt_token_ids=prompt)], vb.sampling_params(), use_tqdm=False)
            got["raw_keys"] = [None if e is None else sorted(e) for e in raw[0].prompt_logprobs]
            got["raw_values"] = [None if e is None else e[t].logprob for t, e in zip(prompt, raw[0].prompt_logprobs)]
            got["prompt"] = prompt
            got["engine"] = vb.prompt_logprobs(backend.llm, [prompt, prompt[:3]])
            longest = (prompt * 400)[: backend.window]  # vLLM refuses a prompt of max_model_len tokens
            values = vb.prompt_logprobs(backend.llm, [longest])[0]
            got["window"], got["longest"] = backend.window, [len(values), values[0]]
            for bs in (1, 8):
                rep = evaluate(backend, backend.tokenizer, data, batch_size=bs, progress=False)
                got[f"scores_bs{bs}"] = {i["id"]: [c["logprob"] for c in i["choices"]] for i in rep["items"]}
        finally:
            for b in kept:
                real_close(b)
    got["threads_after_close"] = sorted(t.name for t in threading.enumerate() if t is not threading.current_thread())
    Path(result).write_text(json.dumps(got))
    return 0


if __name__ == "__main__":
    sys.exit(main())

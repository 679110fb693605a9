"""llama.cpp's own prompt-processing rate on given tokens, the way llama-bench measures pp: plain
prompts of --prompt tokens in one sequence, decoded in micro-batches of --ubatch, logits for the
last token only, the KV memory cleared between prompts. Prints one JSON line.

    python bench/llama_pp.py --model M.gguf --tokens tokens.json --threads 2              # llama.cpp's defaults
    python bench/llama_pp.py --model M.gguf --tokens tokens.json --threads 2 --pinned     # base-bench's kernels
    python bench/llama_pp.py ... --pinned --want want.json    # logits at the rows the card needs, too

--want (a JSON list, one 0/1 per token) asks for logits wherever it has a 1 instead: the rows the
backend needs, those that predict a continuation token. llama-bench asks for one row per prompt, so
it never runs the output layer (hidden size × vocabulary per row) on the other rows; for a model with
a large vocabulary (Gemma's 262,144 tokens) that layer is much of the work, and only this variant
compares like with like.

Defaults are llama.cpp's: 512-token prompts, n_ubatch 512, flash attention auto, repack buffers on,
the tiled K-quant matmul on. With --pinned: what the llama.cpp backend runs with (48-token
micro-batches, no repack buffers, GGML_CPU_TILED_MM=0, flash attention on). The tiled-matmul switch is
read once per process, which is why bench/speed.py runs this as a child process.

bench/RESULTS.md: the llama.cpp pp rows of "Speed against llama.cpp's own prompt processing" (bench/speed.py
--methods runner,llama.cpp runs it).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--tokens", required=True, help="a JSON list of token ids")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--ubatch", type=int, default=512)
    p.add_argument("--pinned", action="store_true")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument(
        "--want", help="a JSON list of 0/1, one per token: ask for logits where 1 (default: each prompt's last)"
    )
    args = p.parse_args(argv)
    if args.pinned:
        os.environ["GGML_CPU_TILED_MM"] = "0"
        args.ubatch = min(args.ubatch, 48)
    import llama_cpp.llama_cpp as L

    quiet = L.llama_log_callback(lambda level, text, data: None)
    L.llama_log_set(quiet, ctypes.c_void_p(0))
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    mp.use_extra_bufts = not args.pinned
    model = L.llama_model_load_from_file(args.model.encode(), mp)
    cp = L.llama_context_default_params()
    cp.n_ctx = cp.n_batch = args.prompt
    cp.n_ubatch = args.ubatch
    cp.n_threads = cp.n_threads_batch = args.threads
    cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if args.pinned else L.LLAMA_FLASH_ATTN_TYPE_AUTO
    cp.no_perf = True
    ctx = L.llama_init_from_model(model, cp)
    mem = L.llama_get_memory(ctx)
    tokens = json.load(open(args.tokens))
    want = json.load(open(args.want)) if args.want else None
    if want is not None and len(want) != len(tokens):
        raise SystemExit(f"--want has {len(want)} entries for {len(tokens)} tokens")
    batch = L.llama_batch_init(args.prompt, 0, 1)

    def once() -> float:
        t = time.perf_counter()
        for s in range(0, len(tokens), args.prompt):
            chunk = tokens[s : s + args.prompt]
            L.llama_memory_clear(mem, False)
            n = len(chunk)
            batch.n_tokens = n
            for i, tok in enumerate(chunk):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, i, 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = bool(want[s + i]) if want is not None else i == n - 1
            if L.llama_decode(ctx, batch) != 0:
                raise SystemExit("llama_decode failed")
        return time.perf_counter() - t

    once()  # warm-up: page the weights in
    best = min(once() for _ in range(args.repeat))
    print(
        json.dumps(
            {
                "tokens": len(tokens),
                "seconds": best,
                "tokens_per_s": len(tokens) / best,
                "prompt": args.prompt,
                "ubatch": args.ubatch,
                "pinned": args.pinned,
                "logit_rows": sum(want) if want is not None else -(-len(tokens) // args.prompt),
                "threads": args.threads,
            }
        )
    )
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    return 0


if __name__ == "__main__":
    sys.exit(main())

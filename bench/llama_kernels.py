"""Why llama.cpp scores move with the batch, and what pins them: one kernel setting at a time.

    python bench/llama_kernels.py --model M.gguf --limit 60 --out bench/llama_kernels.json

For each configuration (each in its own child process, since GGML_CPU_TILED_MM is read once per
process), the bundled items are scored three ways on llama-cpp-python's low-level API:
  plain   one sequence per choice (context + continuation), the yardstick;
  1/dec   each item alone in its llama_decode calls: the context once under all four sequence ids,
          each continuation under its own (what the llama.cpp backend does);
  8/dec, 32/dec  that many items packed into the same llama_decode calls (sequence ids 4i..4i+3,
          each item from position 0), as a batched scorer would.
and each way is compared with plain: max and median |delta| per choice, and items off by > 1e-5.

Configurations: `default` (llama.cpp's: one decode call per group, n_ubatch = the call, repack
buffers, tiled K-quant matmul, flash attention auto); `pinned` (the backend's: calls of at most
48 tokens and never 1 token or 1 output, no repack buffers, GGML_CPU_TILED_MM=0, flash attention
on); and `pinned` minus one of its parts: `no-chunks` (one call per group), `repack`, `tiled-mm`,
`no-pad`. Writes JSON (the source; bench/RESULTS.md quotes it) and prints a markdown table.

bench/RESULTS.md: none. Its JSON and table are the evidence for the kernel pinning that the module
docstring of base_bench/backends/llama_cpp.py describes.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from benchlib import ROOT, child_json, markdown_table

CONFIGS = {  # name: (chunk tokens or 0 for one call, repack buffers, tiled matmul, pad guard, flash attention)
    "default": (0, True, True, False, -1),
    "pinned": (48, False, False, True, 1),
    "no-chunks": (0, False, False, True, 1),
    "repack": (48, True, False, True, 1),
    "tiled-mm": (48, False, True, True, 1),
    "no-pad": (48, False, False, False, 1),
}


def child(args) -> dict:
    chunk, repack, tiled, guard, flash = CONFIGS[args.config]
    os.environ["GGML_CPU_TILED_MM"] = "1" if tiled else "0"
    import llama_cpp.llama_cpp as L

    quiet = L.llama_log_callback(lambda level, text, data: None)
    L.llama_log_set(quiet, ctypes.c_void_p(0))
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    mp.use_extra_bufts = repack
    model = L.llama_model_load_from_file(args.model.encode(), mp)
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    items = json.loads(Path(args.items).read_text())

    def context(n_seq: int, cells: int):
        cp = L.llama_context_default_params()
        cp.n_ctx = cp.n_batch = cells
        cp.n_ubatch = (chunk + 1) if chunk else cells
        cp.n_seq_max, cp.kv_unified = n_seq, True
        cp.n_threads = cp.n_threads_batch = args.threads
        cp.flash_attn_type, cp.no_perf = flash, True
        ctx = L.llama_init_from_model(model, cp)
        return ctx, L.llama_get_memory(ctx), L.llama_batch_init(cells, 0, n_seq)

    def decode(c, rows, pad_seq):
        """rows: (token, pos, seq ids, targets); returns log-probs of the targets in order."""
        ctx, mem, batch = c
        n = len(rows)
        k = max(1, -(-n // chunk)) if chunk else 1
        cuts = [round(i * n / k) for i in range(k + 1)]
        out = []
        for a, z in zip(cuts, cuts[1:]):
            part = list(rows[a:z])
            n_want = sum(1 for r in part if r[3])
            padded = guard and (len(part) < 2 or n_want == 1)
            if padded:
                part.append((part[0][0], 0, (pad_seq,), (0,) if n_want == 1 else ()))
            batch.n_tokens = len(part)
            for i, (tok, pos, seqs, tg) in enumerate(part):
                batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = tok, pos, len(seqs), bool(tg)
                for j, s in enumerate(seqs):
                    batch.seq_id[i][j] = s
            assert L.llama_decode(ctx, batch) == 0
            wanted = [r[3] for r in part if r[3]]
            if wanted:
                x = np.ctypeslib.as_array(L.llama_get_logits(ctx), shape=(len(wanted), n_vocab)).astype(np.float64)
                lse = x.max(1) + np.log(np.exp(x - x.max(1)[:, None]).sum(1))
                got = [x[i, t] - lse[i] for i, ts in enumerate(wanted) for t in ts]
                out += got[: sum(len(t) for t in wanted[:n_want])] if padded and n_want == 1 else got
            if padded:
                L.llama_memory_seq_rm(mem, pad_seq, -1, -1)
        return out

    def shared_rows(it, base):
        ctx_ids, conts = it["context"], it["continuations"]
        n = len(ctx_ids)
        rows = [(t, i, tuple(range(base, base + len(conts))), ()) for i, t in enumerate(ctx_ids)]
        rows[-1] = rows[-1][:3] + (tuple(c[0] for c in conts),)
        owner = [(base, k) for k in range(len(conts))]
        for k, c in enumerate(conts):
            rows += [(t, n + j, (base + k,), (c[j + 1],)) for j, t in enumerate(c[:-1])]
            owner += [(base, k)] * (len(c) - 1)
        return rows, owner

    cells = max(len(it["context"]) + sum(len(c) - 1 for c in it["continuations"]) for it in items) + 2
    out = {}
    c = context(2, cells)
    plain = []
    for it in items:
        row = []
        for cont in it["continuations"]:
            L.llama_memory_clear(c[1], False)
            rows = [(t, i, (0,), ()) for i, t in enumerate(it["context"] + cont[:-1])]
            n = len(it["context"])
            full = it["context"] + cont
            rows = [r if i < n - 1 else r[:3] + ((full[i + 1],),) for i, r in enumerate(rows)]
            row.append(float(sum(decode(c, rows, 1))))
        plain.append(row)
    out["plain"] = plain
    for per in (1, 8, 32):
        c = context(4 * per + 1, cells * per + 2)
        got, t = [], time.perf_counter()
        for s in range(0, len(items), per):
            group = items[s : s + per]
            rows, owner = [], []
            for g, it in enumerate(group):
                r, o = shared_rows(it, 4 * g)
                rows += r
                owner += o
            L.llama_memory_clear(c[1], False)
            lp = decode(c, rows, 4 * per)
            sums = {}
            for key, v in zip(owner, lp):
                sums[key] = sums.get(key, 0.0) + v
            got += [[sums[(4 * g, k)] for k in range(len(it["continuations"]))] for g, it in enumerate(group)]
        d = np.abs(np.array([x for r in got for x in r]) - np.array([x for r in plain for x in r]))
        off = sum(1 for a, b in zip(got, plain) if max(abs(x - y) for x, y in zip(a, b)) > 1e-5)
        out[f"{per}/dec"] = {
            "max": float(d.max()),
            "median": float(np.median(d)),
            "items_off": off,
            "seconds": time.perf_counter() - t,
        }
    out.pop("plain")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--limit", type=int, default=60)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--out", help="write the results here as JSON")
    p.add_argument("--config", help=argparse.SUPPRESS)  # a child process: one configuration
    p.add_argument("--items", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.config:
        print(json.dumps(child(args)))
        return 0
    from base_bench.backends.llama_cpp import load_tokenizer
    from base_bench.engine.scoring import encode_item
    from base_bench.items.dataset import load_dataset_file

    tok, _ = load_tokenizer(args.model)
    items = load_dataset_file(ROOT / "data" / "test.jsonl").items[: args.limit]
    encs = [encode_item(tok, it) for it in items]
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"llama-kernels-{os.getpid()}.json"
    tmp.write_text(
        json.dumps([{"context": list(e.context), "continuations": [list(c) for c in e.continuations]} for e in encs])
    )
    results = {}
    try:
        for name in args.configs.split(","):
            cmd = [sys.executable, __file__, "--model", args.model, "--config", name, "--items", str(tmp)]
            results[name] = child_json([*cmd, "--threads", str(args.threads)], name)
            print(name, json.dumps(results[name]), flush=True)
    finally:
        tmp.unlink(missing_ok=True)
    doc = {
        "model": Path(args.model).name,
        "items": len(items),
        "threads": args.threads,
        "date": time.strftime("%Y-%m-%d"),
        "configs": {k: CONFIGS[k] for k in results},
        "results": results,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(render(doc))
    return 0


def render(doc: dict) -> str:
    head = ["kernels", "1 item per decode: max / median / items off", "8 per decode", "32 per decode"]
    cells = [
        [
            name,
            *(f"{r[k]['max']:.2g} / {r[k]['median']:.2g} / {r[k]['items_off']}" for k in ("1/dec", "8/dec", "32/dec")),
        ]
        for name, r in doc["results"].items()
    ]
    lines = [
        f"{doc['model']}, first {doc['items']} bundled items, {doc['threads']} thread(s); |delta| per choice "
        "against one sequence per choice (nats), and items off by more than 1e-5:",
        "",
        *markdown_table(head, "llll", cells),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

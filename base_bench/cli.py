"""The command line: `python benchmark.py --model M ...` or `base-bench --model M ...`.

`main(argv)` parses flags, checks the data before any model is loaded, scores what is not yet
finished (saving each item as it completes), and writes report.json and predictions.md. Every
expected failure (bad flag, bad data, missing model, a run that would be overwritten) ends with a
one- or two-line message on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from pathlib import Path

from . import __version__, card
from .batching import CPU_AUTO, GPU_UPPER, attempt, largest_fitting
from .dataset import BUNDLED_NAME, DataError, load_dataset_file
from .hub import HubError, fetch_official_data
from .records import ItemResult, pick
from .report import build_report, dumps, render_markdown, summary_lines
from .runstore import RunError, RunStore
from .scoring import ScoringError

SCORING_VERSION = "mean_logprob/1"  # bump when a change to the scoring code can change a score
EXIT_USAGE = 2


class CliError(Exception):
    pass


def positive_int(name):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} takes a whole number, not {text!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be 1 or more, not {v}")
        return v

    return parse


def _batch_size(text):
    return "auto" if text == "auto" else positive_int("--batch-size")(text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="base-bench",
        description=f"Score a base causal LM on {card.HUB_DATASET.split('/')[1].replace('-', ' ')}: each item's four\n"
        "continuations are ranked by mean token log-probability, and the outcomes are\n"
        "fitted to one Overall Elo.",
        epilog="other commands (each has its own --help):\n"
               "  base-bench compare RUN_A RUN_B      is B really better than A (same items)?\n"
               "  base-bench leaderboard RUN_DIR...   rank finished runs, with tables and plots",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, metavar="MODEL",
                   help="what to evaluate: a Hugging Face model id (org/name), a local directory holding a "
                        "transformers export, or a path to a .gguf file")
    p.add_argument("--device", default="auto", metavar="DEV",
                   help="where to run: cpu, cuda, cuda:N, mps, or auto (first of cuda, mps, cpu; default)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="weight precision; auto is float32 on cpu, bfloat16 (or float16) on cuda, float16 on mps. "
                        "Log-softmax is always taken in float32")
    p.add_argument("--threads", type=positive_int("--threads"), metavar="N",
                   help="CPU threads for torch (default: torch's own choice)")
    p.add_argument("--batch-size", type=_batch_size, default=8, metavar="N",
                   help="items per forward pass (default 8, i.e. up to 32 continuations); 'auto' searches for the "
                        "largest that fits on a GPU and uses 8 on a CPU. Scores do not depend on it")
    p.add_argument("--out-dir", metavar="DIR",
                   help="where the run's files go (default: runs/<model name>-base-bench-1.1). An existing run "
                        "there is never overwritten; continue it with --resume")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out-dir, scoring only unfinished items; refused if the model, "
                        "data or scoring settings differ from the ones it was started with")
    p.add_argument("--local-data", metavar="DIR",
                   help="read DIR/data/test.jsonl instead of downloading the gated Hub dataset; a file that "
                        "differs from the card's official checksum or counts makes the run non-official")
    p.add_argument("--limit", type=positive_int("--limit"), metavar="N",
                   help="score only the first N items, for smoke tests (the run is then non-official)")
    p.add_argument("--add-bos", action="store_true",
                   help="put the tokenizer's BOS token before every context (diagnostic; non-official)")
    p.add_argument("--revision", metavar="REV",
                   help="model branch, tag or commit on the Hub (default: main); the resolved commit is recorded")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow model repositories to run their own Python code (off by default)")
    p.add_argument("--no-cache", action="store_true",
                   help="for a .gguf model, neither read nor write the cache of converted models "
                        "(default: $BASE_BENCH_CACHE, else ~/.cache/base-bench)")
    p.add_argument("--version", action="version", version=f"base-bench {__version__}")
    return p


def default_out_dir(model: str) -> Path:
    name = Path(model.rstrip("/")).name
    if name.lower().endswith(".gguf"):
        name = name[:-5]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-").lower() or "model"
    return Path("runs") / f"{name}-base-bench-{card.VERSION}"


def _load_data(args):
    """Return (dataset, data record for the report, reasons it is not official, hub token)."""
    token = None
    if args.local_data:
        base = Path(args.local_data).expanduser()
        if not base.is_dir():
            raise CliError(f"--local-data {args.local_data}: no such directory")
        path, source = base / "data" / "test.jsonl", "local"
        if not path.is_file():
            raise CliError(f"--local-data {args.local_data}: expected the data file at {path}")
    else:
        hub_path, token = fetch_official_data()
        path, source = Path(hub_path), "hub"
    ds = load_dataset_file(path)
    problems = ds.composition_problems()
    kind = ds.source_kind()
    if source == "hub" and (problems or kind != "official"):
        raise CliError(
            f"the data downloaded from {card.HUB_DATASET} does not match the card "
            f"({'; '.join(problems) or 'SHA-256 ' + ds.sha256}); refusing to score it as official"
        )
    reasons = []
    if kind == "bundled":
        reasons.append(f"data is the {BUNDLED_NAME}")
    elif kind == "modified":
        reasons.append(f"data SHA-256 {ds.sha256[:12]}… is not the card's official {card.OFFICIAL_SHA256[:12]}…")
    reasons += problems
    description = {"official": f"official {card.HUB_DATASET}", "bundled": BUNDLED_NAME,
                   "modified": "modified or unknown data (matches neither the official nor the bundled checksum)"}[kind]
    record = {"source": source, "path": str(path), "sha256": ds.sha256, "kind": kind, "description": description,
              "official_sha256": card.OFFICIAL_SHA256, "n_items_in_file": len(ds.items), "composition_problems": problems}
    return ds, record, reasons, token


def run(args) -> int:
    import torch
    from tqdm import tqdm

    from .model import dtype_name, load_located, locate_model, resolve_device, resolve_dtype
    from .scoring import (
        PackedScorer, PlainScorer, check_packing, encode_item, length_order, model_window, packing_probe,
    )

    out_dir = Path(args.out_dir).expanduser() if args.out_dir else default_out_dir(args.model)
    store = RunStore(out_dir)
    if store.holds_run() and not args.resume:
        raise CliError(f"{out_dir} already holds a run; add --resume to continue it, or pick another --out-dir")
    if out_dir.exists() and not out_dir.is_dir():
        raise CliError(f"--out-dir {out_dir} is a file, not a directory")

    ds, data_record, reasons, token = _load_data(args)
    items = list(ds.items[: args.limit] if args.limit else ds.items)
    if args.limit and args.limit < len(ds.items):
        reasons.append(f"--limit {args.limit} scored {len(items)} of {len(ds.items)} items")
    if args.add_bos:
        reasons.append("--add-bos changes the scoring configuration")

    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    if args.threads:
        torch.set_num_threads(args.threads)
    located = locate_model(args.model, revision=args.revision, token=token, trust_remote_code=args.trust_remote_code)
    signature = {
        "benchmark": f"BananaMind Base Bench {card.VERSION}",
        "scoring": SCORING_VERSION,
        "model": located.identity(),
        "data_sha256": ds.sha256,
        "add_bos": bool(args.add_bos),
        "dtype": dtype_name(dtype),
        "device_type": device.type,
    }
    done: dict[str, ItemResult] = {}
    if args.resume and store.holds_run():
        store.check_signature(signature)
        done = store.load_partial()
        print(f"resuming {out_dir}: {sum(1 for i in items if i.id in done)} of {len(items)} items already scored",
              file=sys.stderr)

    t0 = time.perf_counter()
    loaded = load_located(located, device, dtype, use_cache=not args.no_cache)
    load_s = time.perf_counter() - t0
    model, tok = loaded.model, loaded.tokenizer
    window = model_window(model, tok)
    by_id = {it.id: it for it in items}
    encoded = [encode_item(tok, it, add_bos=args.add_bos, window=window) for it in items]
    if store.read_config() is None:
        store.start(signature, {"model": args.model, "out_dir": str(out_dir)})

    pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    order = [encoded[i] for i in length_order(encoded)]
    probe = packing_probe(order)
    checked = attempt(lambda: check_packing(model, probe, pad_id), device)
    if checked is None:
        raise CliError(f"out of accelerator memory while checking packing on {len(probe)} items; "
                       "try a smaller --dtype or another --device")
    ok, diff = checked
    scorer = (PackedScorer if ok else PlainScorer)(model, pad_id)
    packing = {"ok": ok, "max_abs_diff_vs_plain": diff if math.isfinite(diff) else None,
               "checked_items": [e.id for e in probe]}
    if not ok:
        print("note: this model does not reproduce the plain path with a packed 4D mask; "
              "using the plain path (one row per choice)", file=sys.stderr)
    bs = args.batch_size if args.batch_size != "auto" else _auto_batch_size(scorer, order, device)

    todo = [e for e in order if e.id not in done]
    t1 = time.perf_counter()
    with tqdm(total=len(items), initial=len(items) - len(todo), unit="item", file=sys.stderr,
              desc="scoring", dynamic_ncols=True) as bar:
        i = 0
        while i < len(todo):
            batch = todo[i:i + bs]
            scores = attempt(lambda: scorer(batch), device)
            if scores is None:
                if bs == 1:
                    raise CliError("out of accelerator memory even at batch size 1")
                bs = max(1, bs // 2)
                bar.write(f"out of accelerator memory; batch size lowered to {bs}", file=sys.stderr)
                continue
            for e, sc in zip(batch, scores):
                if any(not math.isfinite(c.logprob) for c in sc):
                    raise CliError(f"item {e.id}: the model gave a non-finite log-prob (try --dtype float32)")
                r = ItemResult(e.id, tuple(sc), pick(sc), by_id[e.id].label, e.truncated)
                store.append(r)
                done[e.id] = r
            bar.update(len(batch))
            i += len(batch)
    score_s = time.perf_counter() - t1

    config = {
        "model": loaded.info,
        "revision_requested": args.revision,
        "trust_remote_code": bool(args.trust_remote_code),
        "device": str(device),
        "dtype": dtype_name(dtype),
        "batch_size": args.batch_size,
        "batch_size_used": bs,
        "add_bos": bool(args.add_bos),
        "threads": torch.get_num_threads(),
        "limit": args.limit,
        "window": window,
        "scorer": scorer.name,
        "packing_check": packing,
        "scoring_version": SCORING_VERSION,
        "runner": "base-bench",
        "runner_version": __version__,
        "signature_sha256": store.read_config()["signature_sha256"],
        "versions": {"torch": torch.__version__, "transformers": _version("transformers")},
    }
    timing = {"model_load_s": round(load_s, 3), "scoring_s": round(score_s, 3), "items_scored_this_session": len(todo),
              "items_per_s": round(len(todo) / score_s, 3) if todo and score_s > 0 else None}
    report = build_report(config=config, data=data_record, official=not reasons, reasons=reasons, items=items,
                          results=done, timing=timing, n_items_in_data=len(ds.items))
    store.write_text("report.json", dumps(report))
    store.write_text("predictions.md", render_markdown(report))
    print("\n".join(summary_lines(report)))
    print(f"wrote {out_dir}/report.json and {out_dir}/predictions.md")
    return 0


def _auto_batch_size(scorer, order, device) -> int:
    """`--batch-size auto`: see base_bench.batching. Probes use the longest items, so later batches fit."""
    if device.type not in ("cuda", "mps"):
        return CPU_AUTO
    bs = largest_fitting(lambda n: attempt(lambda: scorer(order[:n]), device) is not None,
                         min(len(order), GPU_UPPER))
    if bs == 0:
        raise CliError("out of accelerator memory even at batch size 1")
    print(f"--batch-size auto: {bs} items per pass fit on {device}", file=sys.stderr)
    return bs


def _version(pkg: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "compare":
        from . import compare

        return compare.main(argv[1:])
    if argv and argv[0] == "leaderboard":
        from . import leaderboard

        return leaderboard.main(argv[1:])
    from .model import ModelError

    known = (CliError, DataError, HubError, ModelError, RunError, ScoringError)
    try:
        if argv and argv[0] == "run":
            argv = argv[1:]
        args = build_parser().parse_args(argv)
        return run(args)
    except known as exc:
        print(f"base-bench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("base-bench: interrupted; finished items are saved, continue with --resume", file=sys.stderr)
        return 130

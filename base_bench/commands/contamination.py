"""`base-bench contamination scan|probe|report`: the command line of this package.

    base-bench contamination scan PATH... --out-dir DIR [--data bundled] [--write-clean DIR2] [--workers N]
    base-bench contamination probe --model M [--out-dir DIR] [--candidates 999]
    base-bench contamination report RUN --scan DIR [--out-dir DIR]

Every expected failure is one `base-bench: error: ...` line and exit code 2; nothing that exists is
overwritten (--out-dir and --write-clean must be new or empty).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import BaseBenchError
from ..items.datasource import HUB
from ..results.reports_io import check_outputs, write_outputs
from .cliargs import (
    EXIT_USAGE,
    Parser,
    add_bootstrap,
    add_data_flags,
    add_key_value_flag,
    add_out_dir,
    byte_count,
    data_choice,
    fail,
    key_values,
    positive_int,
    printable,
)

COMMANDS = ("scan", "probe", "report")


def _out_dir(p, required: bool, what: str):
    add_out_dir(p, f"where {what} go (a new or empty directory; nothing is overwritten)", required=required)


def scan_parser() -> argparse.ArgumentParser:
    from ..contamination.corpus import MAX_LINE_BYTES

    p = Parser(
        prog="base-bench contamination scan",
        description="Find the benchmark's items in a training corpus (datatrove readers, an n-gram filter built "
        "from the items, datatrove executors). Writes DIR/contamination.json (the source of "
        "truth), contamination.md and documents.jsonl (every flagged document).",
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="corpus files or folders (read recursively): .jsonl, .jsonl.gz, .jsonl.zst, .parquet, .txt "
        "(one document per file), or a datasets.save_to_disk folder",
    )
    _out_dir(p, True, "contamination.json, contamination.md, documents.jsonl and the logs")
    add_data_flags(p, default=HUB)  # the items to look for, as a run takes them
    p.add_argument("--text-key", default="text", metavar="KEY", help="the field holding the text (default text)")
    p.add_argument("--id-key", default="id", metavar="KEY", help="the field holding a document id, if any (default id)")
    p.add_argument(
        "--write-clean",
        metavar="DIR2",
        help="also write the corpus without the flagged documents, each file in its own format at its "
        "relative path, records with all their fields",
    )
    p.add_argument(
        "--skip-bad",
        action="store_true",
        help="note an unreadable file (or one with a bad line) in the report and go on, instead of stopping",
    )
    p.add_argument(
        "--max-line-bytes",
        type=byte_count("--max-line-bytes"),
        default=MAX_LINE_BYTES,
        metavar="N",
        help="the longest line read from a JSONL file (counted after decompression), .txt file, or Parquet or "
        "datasets text value, in bytes (or KiB, MiB, GiB: 64MiB); a longer one makes its file bad "
        f"(stop, or note it and go on with --skip-bad); default {MAX_LINE_BYTES >> 20}MiB",
    )
    p.add_argument(
        "--workers",
        type=positive_int("--workers"),
        default=1,
        metavar="N",
        help="processes working at once (local executor; a concurrency cap on Slurm and Ray); default 1",
    )
    p.add_argument(
        "--tasks",
        type=positive_int("--tasks"),
        metavar="N",
        help="tasks the files are split into (default: the number of files, at most 4 per worker)",
    )
    p.add_argument(
        "--executor",
        choices=("local", "slurm", "ray"),
        default="local",
        help="datatrove's LocalPipelineExecutor (default), SlurmPipelineExecutor or RayPipelineExecutor",
    )
    add_key_value_flag(
        p,
        "--executor-option",
        "passed to the executor as a keyword argument, e.g. partition=cpu time=04:00:00 cpus_per_task=2 for Slurm",
    )
    p.add_argument(
        "--max-documents",
        type=positive_int("--max-documents"),
        default=20,
        metavar="K",
        help="documents listed per item in contamination.json (all are in documents.jsonl); default 20",
    )
    p.add_argument("--verbose", action="store_true", help="show datatrove's own log on stderr")
    return p


def probe_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="base-bench contamination probe",
        description="Ask a model whether it has seen the bundled set's canary: the canary text and the first "
        "half of its GUID, then the true second half ranked among random GUIDs by log-probability.",
    )
    p.add_argument(
        "--model",
        required=True,
        metavar="MODEL",
        help="a Hugging Face model id, a local transformers directory, or a .gguf file (as a run takes it)",
    )
    p.add_argument("--device", default="auto", metavar="DEV", help="cpu, cuda, cuda:N, mps or auto (default)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--threads", type=positive_int("--threads"), metavar="N")
    p.add_argument("--revision", metavar="REV")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument(
        "--no-cache", action="store_true", help="bypass the cache folder (converted .gguf models, file digests)"
    )
    p.add_argument("--canary", metavar="TEXT", help="another canary string holding a GUID (default: the bundled set's)")
    p.add_argument(
        "--candidates",
        type=positive_int("--candidates"),
        default=999,
        metavar="N",
        help="random GUIDs to rank the true one among (default 999, so p >= 0.001)",
    )
    p.add_argument("--seed", type=int, default=1234, help="seed of the random GUIDs (default 1234)")
    p.add_argument(
        "--batch-size",
        type=positive_int("--batch-size"),
        default=64,
        metavar="N",
        help="candidates per forward pass (default 64)",
    )
    _out_dir(p, False, "canary_probe.json and canary_probe.md")
    return p


def report_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="base-bench contamination report",
        description="Re-score a finished run on the scan's clean and dirty items: Overall Elo of each with "
        "bootstrap intervals, and the paired difference against the full-set Elo.",
    )
    p.add_argument("run", metavar="RUN", help="run directory (holding report.json) or a report.json file")
    p.add_argument(
        "--scan", required=True, metavar="DIR", help="a finished scan's --out-dir (or its contamination.json)"
    )
    add_bootstrap(p)
    _out_dir(p, False, "contamination_report.json and contamination_report.md")
    return p


def _new_outputs(out_dir: str | None, names: list[str]) -> list[Path]:
    """Where --out-dir's files go, refused now (before the model loads) if any is there already."""
    if not out_dir:
        return []
    out = Path(out_dir).expanduser()
    return check_outputs([out / n for n in names], force=False, out_dir=out)


def _write(paths: list[Path], texts: list[str]) -> None:
    write_outputs(dict(zip(paths, texts)), say=print)


def run_scan(args) -> int:
    from ..contamination import scanner as scan_mod
    from ..contamination.render import summary_lines

    rep = scan_mod.scan(
        args.paths,
        args.out_dir,
        data=data_choice(args, HUB),
        text_key=args.text_key,
        id_key=args.id_key,
        write_clean=args.write_clean,
        skip_bad=args.skip_bad,
        workers=args.workers,
        tasks=args.tasks,
        executor=args.executor,
        executor_options=key_values(args.executor_option, "--executor-option"),
        max_documents=args.max_documents,
        max_line_bytes=args.max_line_bytes,
        verbose=args.verbose,
        progress=print,
    )
    if rep is None:
        print(
            f"submitted to Slurm; {args.out_dir}/contamination.json appears when the last job ends "
            f"(logs in {args.out_dir}/logs)"
        )
        return 0
    print(printable("\n".join(summary_lines(rep))))
    print(f"wrote {args.out_dir}/contamination.json, contamination.md and documents.jsonl")
    if args.write_clean:
        print(f"wrote the clean corpus to {args.write_clean}")
    return 0


def run_probe(args) -> int:
    import time

    import torch

    from ..backends.transformers import load_located, locate_model, resolve_device, resolve_dtype
    from ..contamination import canary as canary_mod
    from ..contamination.probing import probe_canary, render_markdown, transformers_backend
    from ..items.dataset import BUNDLED_CANARY

    c = canary_mod.parse(args.canary or BUNDLED_CANARY)
    if c is None:
        raise BaseBenchError(f"--canary {args.canary!r} holds no GUID (8-4-4-4-12 hex digits)")
    outputs = _new_outputs(args.out_dir, ["canary_probe.json", "canary_probe.md"])
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    if args.threads:
        torch.set_num_threads(args.threads)
    located = locate_model(
        args.model, revision=args.revision, trust_remote_code=args.trust_remote_code, use_cache=not args.no_cache
    )
    t0 = time.perf_counter()
    loaded = load_located(located, device, dtype, use_cache=not args.no_cache)
    res = probe_canary(
        transformers_backend(loaded.model, loaded.tokenizer, args.batch_size),
        c,
        candidates=args.candidates,
        seed=args.seed,
    )
    res.update(
        model=args.model,
        model_identity=located.identity(),
        device=str(device),
        dtype=str(dtype).split(".")[-1],
        seconds=round(time.perf_counter() - t0, 2),
    )
    print(printable(f"canary: {c.text}"))
    print(
        printable(
            f"prompt {res['prompt']!r}; true second half {res['true_second_half']!r}: summed log-prob "
            f"{res['true_logprob']:.2f}; best of {res['candidates']} random: {res['random_logprob']['max']:.2f}"
        )
    )
    print(f"rank {res['rank']} of {res['candidates'] + 1}, empirical p-value {res['p_value']:.3g}")
    print("Verdict: " + res["verdict"])
    _write(outputs, [json.dumps(res, indent=2, allow_nan=False) + "\n", render_markdown(res, args.model)])
    return 0


def run_report(args) -> int:
    from ..contamination.rescore import load_scan, render_markdown, rescore, summary_lines
    from ..results.reports_io import load_report

    outputs = _new_outputs(args.out_dir, ["contamination_report.json", "contamination_report.md"])
    res = rescore(load_report(args.run), load_scan(args.scan), resamples=args.resamples, seed=args.seed)
    print(printable("\n".join(summary_lines(res))))
    _write(outputs, [json.dumps(res, indent=2, ensure_ascii=False, allow_nan=False) + "\n", render_markdown(res)])
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        if argv and argv[0] in ("-h", "--help"):
            print(__doc__.split("\n\n")[0] + "\n" + __doc__.split("\n\n")[1])
            return 0
        print("base-bench contamination: error: give one of scan, probe, report (each has --help)", file=sys.stderr)
        return EXIT_USAGE
    cmd, rest = argv[0], argv[1:]
    parser = {"scan": scan_parser, "probe": probe_parser, "report": report_parser}[cmd]()
    args = parser.parse_args(rest)
    try:
        return {"scan": run_scan, "probe": run_probe, "report": run_report}[cmd](args)
    except BaseBenchError as exc:
        return fail(exc)
    except KeyboardInterrupt:
        print("base-bench: interrupted", file=sys.stderr)
        return 130

"""The command line: `python benchmark.py --model M ...` or `base-bench --model M ...`.

A thin shell over `evaluation.evaluate`: `main(argv)` parses flags, checks the data and the out-dir
before any model is loaded, loads the model, and hands both to `evaluate`, which scores what is not
yet finished (saving each item as it completes) and writes the run files. Then it prints the
summary. Every expected failure (bad flag, bad data, missing model, a run that would be overwritten,
an out-dir in use by another process) ends with a one- or two-line message on stderr and a non-zero
exit code, never a traceback. Exit codes: 0 done; 2 a user error; 74 a run file could not be
written (disk full, I/O error); 75 the run finished and its files were written, but its row could
not be written to the --store (`base-bench store ingest OUT_DIR` adds it later); 130 SIGINT
(Ctrl-C) and 143 SIGTERM, which stop the run cleanly: the finished items stay saved, the out-dir
lock is released, and a line says how many are saved.

With --store URL (or $BASE_BENCH_STORE) the run's result is also written to that results store
(SQLite or PostgreSQL) once its files are; --group, --step, --tokens and --tag label the run, in
report.json and in the store. The store URL and the labels are checked before any model is loaded.
Subcommands (`compare`, `leaderboard`, `explore`, `rescore`, `trajectory`, `contamination`, `store`) are routed to their own modules.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from ..backends.server import DEFAULT_CONCURRENCY, DEFAULT_MAX_RETRIES, DEFAULT_REQUEST_TIMEOUT
from ..engine.distributed import rank_from_env
from ..errors import BaseBenchError, StorageError
from ..items import card
from ..items.datasource import HUB
from ..version import __version__
from .cliargs import (
    DEVICE_MAPS,
    EXIT_STORAGE,
    EXIT_STORE,
    EXIT_USAGE,
    Parser,
    add_data_flags,
    add_key_value_flag,
    add_label_flags,
    add_store_flag,
    data_choice,
    fail,
    key_values,
    max_memory,
    positive_float,
    positive_int,
)

SUBCOMMANDS = ("compare", "leaderboard", "explore", "rescore", "trajectory", "contamination", "store")
SERVER_FLAGS = ("base_url", "tokenizer", "api_key_env", "concurrency", "request_timeout", "max_retries")
VLLM_FLAGS = ("--tensor-parallel-size", "--pipeline-parallel-size", "--vllm-arg")
# flags that say where and how torch places the model: --device first (llama.cpp takes that one)
PLACEMENT_FLAGS = (
    "--device", "--dtype", "--device-map", "--max-memory", "--offload-folder", "--revision", "--trust-remote-code",
)  # fmt: skip


def _batch_size(text):
    return "auto" if text == "auto" else positive_int("--batch-size")(text)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="base-bench",
        description=f"Score a base causal LM on {card.HUB_DATASET.split('/')[1].replace('-', ' ')}: each item's four\n"
        "continuations are ranked by mean token log-probability, and the outcomes are\n"
        "fitted to one Overall Elo.",
        epilog="other commands (each has its own --help):\n"
        "  base-bench compare RUN_A RUN_B      is B really better than A (same items)?\n"
        "  base-bench leaderboard RUN_DIR...   rank finished runs, with tables and plots\n"
        "  base-bench explore RUN_DIR...       the runs side by side, item by item, in one HTML page\n"
        "  base-bench rescore RUN_DIR...       the runs under lm-eval's rules (sum, per_char, per_byte), no model\n"
        "  base-bench trajectory DIR           Elo over training, from BaseBenchCallback's reports\n"
        "  base-bench contamination scan|probe|report   find the items in a corpus, probe a model, clean Elo\n"
        "  base-bench store ingest|list|export|rebuild|upgrade   the results store (SQLite or PostgreSQL);\n"
        "      compare, leaderboard, explore and trajectory read it with --store URL in place of folders",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        required=True,
        metavar="MODEL",
        help="what to evaluate: a Hugging Face model id (org/name), a local directory holding a "
        "transformers export, or a path to a .gguf file",
    )
    p.add_argument(
        "--backend",
        default="transformers",
        choices=["transformers", "llama.cpp", "server", "vllm"],
        help="what computes the scores: transformers (torch; a .gguf is dequantized, the default), "
        "llama.cpp (a .gguf run by llama.cpp's own quantized kernels; needs pip install -e '.[llama]'), "
        "server (a model behind an OpenAI-compatible /v1/completions server such as vLLM, at --base-url; "
        "--model is then its served name), or vllm (a Hub id or a model directory run by vLLM in this "
        "process; needs vLLM in its own venv)",
    )
    p.add_argument(
        "--base-url",
        metavar="URL",
        help="with --backend server: the server's OpenAI-compatible root, e.g. http://127.0.0.1:8000/v1",
    )
    p.add_argument(
        "--tokenizer",
        metavar="DIR|HUB_ID|FILE.gguf",
        help="with --backend server: the served model's tokenizer (default: the model root the server "
        "reports in /v1/models, where that is a folder here or a Hub id)",
    )
    p.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="with --backend server: the environment variable that holds the server's API key (sent as a "
        "bearer token; never printed or written)",
    )
    p.add_argument(
        "--concurrency",
        type=positive_int("--concurrency"),
        metavar="N",
        help=f"with --backend server: requests in flight at once (default {DEFAULT_CONCURRENCY}); scores do not "
        "depend on it",
    )
    p.add_argument(
        "--request-timeout",
        type=positive_float("--request-timeout"),
        metavar="S",
        help="with --backend server: seconds one request may take before it is tried again (default "
        f"{DEFAULT_REQUEST_TIMEOUT:g})",
    )
    p.add_argument(
        "--max-retries",
        type=positive_int("--max-retries", low=0),
        metavar="N",
        help="with --backend server: how many times a request that failed (no connection, a timeout, HTTP 429 "
        f"or 5xx) is tried again, waiting twice as long each time (default {DEFAULT_MAX_RETRIES})",
    )
    p.add_argument(
        "--device",
        default="auto",
        metavar="DEV",
        help="where to run: cpu, cuda, cuda:N, mps, or auto (first of cuda, mps, cpu; default)",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16", "float16"],
        help="weight precision; auto is float32 on cpu, bfloat16 (or float16) on cuda, float16 on mps. "
        "Log-softmax is always taken in float32",
    )
    p.add_argument(
        "--threads",
        type=positive_int("--threads"),
        metavar="N",
        help="CPU threads for torch, or for llama.cpp with --backend llama.cpp (default: torch's own "
        "choice, the physical cores)",
    )
    per_pass = p.add_mutually_exclusive_group()
    per_pass.add_argument(
        "--batch-size",
        type=_batch_size,
        metavar="N",
        help="items per forward pass (default 8, i.e. up to 32 continuations); 'auto' searches for the "
        "largest token budget that fits on a GPU and uses 8 items on a CPU. Scores do not depend on it",
    )
    per_pass.add_argument(
        "--batch-tokens",
        type=positive_int("--batch-tokens"),
        metavar="N",
        help="instead of --batch-size: at most N positions fed per forward pass (rows times the longest "
        "row, padding included), with several items packed into each row. Scores do not depend on it",
    )
    p.add_argument(
        "--out-dir",
        metavar="DIR",
        help="where the run's files go (default: runs/<model name>-base-bench-1.1). An existing run "
        "there is never overwritten; continue it with --resume",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out-dir, scoring only unfinished items; refused if the model, "
        "data or scoring settings differ from the ones it was started with",
    )
    add_data_flags(p, default=HUB)
    p.add_argument(
        "--limit",
        type=positive_int("--limit"),
        metavar="N",
        help="score only the first N items in file order, which is category order (--limit 50 is all "
        "language_completion), for smoke tests (the run is then non-official)",
    )
    p.add_argument(
        "--limit-per-category",
        type=positive_int("--limit-per-category"),
        metavar="N",
        help="instead of --limit: score only the first N items of each category (in file order), a smoke "
        "test that touches every category (non-official)",
    )
    p.add_argument(
        "--add-bos",
        action="store_true",
        help="put the tokenizer's BOS token before every context (diagnostic; non-official)",
    )
    p.add_argument(
        "--revision",
        metavar="REV",
        help="model branch, tag or commit on the Hub (default: main); the resolved commit is recorded. With "
        "--backend server: the revision of the tokenizer (--tokenizer, or the root the server reports) when it "
        "is a Hub id",
    )
    p.add_argument(
        "--gguf-file",
        metavar="NAME",
        help="with a Hub id as --model: score the GGUF file NAME of that repo (model.Q4_K_M.gguf, or "
        "sub/model.gguf), fetched alone into the Hugging Face cache; either backend",
    )
    add_key_value_flag(
        p,
        "--model-arg",
        "a keyword argument for the model's from_pretrained, e.g. attn_implementation=sdpa, or with "
        "--backend vllm for vllm.LLM (recorded in the report and checked by --resume)",
    )
    p.add_argument(
        "--peft",
        metavar="ADAPTER",
        help="apply a PEFT adapter (LoRA and the like) to the model before scoring: a local directory "
        "holding adapter_config.json, or a Hub id. Transformers backend only; nothing is merged",
    )
    p.add_argument(
        "--peft-revision",
        metavar="REV",
        help="with --peft and a Hub id: the adapter's branch, tag or commit (default: main)",
    )
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow model repositories to run their own Python code (off by default)",
    )
    p.add_argument(
        "--device-map",
        choices=DEVICE_MAPS,
        metavar="MAP",
        help="spread a model too big for one device over the visible GPUs, then the CPU, then the disk "
        "(accelerate's big-model loading): auto, balanced, balanced_low_0 or sequential. Not with "
        "--device, nor under torchrun",
    )
    p.add_argument(
        "--max-memory",
        type=max_memory,
        metavar="SPEC",
        help="with --device-map: the most each device may hold, e.g. cuda:0=70GiB,cuda:1=70GiB,cpu=200GiB",
    )
    p.add_argument(
        "--offload-folder", metavar="DIR", help="with --device-map: where layers that fit no device are kept on disk"
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="neither read nor write the cache folder: converted .gguf models, and the remembered digests "
        "of model files (default: $BASE_BENCH_CACHE, else ~/.cache/base-bench)",
    )
    p.add_argument(
        "--dist-timeout",
        type=positive_int("--dist-timeout"),
        default=600,
        metavar="S",
        help="under torchrun: seconds to wait for the other ranks at the rendezvous and at each "
        "collective before giving up (default 600)",
    )
    p.add_argument(
        "--tensor-parallel-size",
        type=positive_int("--tensor-parallel-size"),
        metavar="N",
        help="with --backend vllm: split each layer over N GPUs (vLLM's tensor parallelism; default 1)",
    )
    p.add_argument(
        "--pipeline-parallel-size",
        type=positive_int("--pipeline-parallel-size"),
        metavar="N",
        help="with --backend vllm: split the layers into N stages (vLLM's pipeline parallelism; default 1)",
    )
    p.add_argument(
        "--max-spread",
        type=positive_float("--max-spread"),
        metavar="X",
        help="with --backend server or vllm: accept an engine whose log-probs vary by up to X nats per token "
        "with batching and cached prefixes, where the start-up check allows 1e-3; the limit is recorded "
        "and a run above 1e-3 is non-official (bfloat16 on a GPU: score in float32 instead where you can)",
    )
    add_key_value_flag(
        p,
        "--vllm-arg",
        "with --backend vllm: a keyword argument for vllm.LLM, e.g. max_model_len=4096 or "
        "gpu_memory_utilization=0.8 (--model-arg does the same there)",
    )
    add_store_flag(p, "also write the run's result to this results store")
    add_label_flags(p)
    p.add_argument("--version", action="version", version=f"base-bench {__version__}")
    return p


def default_out_dir(model: str, peft: str | None = None, gguf_file: str | None = None) -> Path:
    """runs/<model name>[-<adapter name>]-base-bench-1.1: an adapter's run does not land on its base
    model's. With --gguf-file the model name is the file's, so two quantisations of a repo do not collide."""

    def short(spec: str) -> str:
        name = Path(spec.rstrip("/")).name
        if name.lower().endswith(".gguf"):
            name = name[:-5]
        return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-").lower() or "model"

    name = short(gguf_file or model) + (f"-{short(peft)}" if peft else "")
    return Path("runs") / f"{name}-base-bench-{card.VERSION}"


def resolve_out_dir(args) -> Path:
    if args.out_dir:
        return Path(args.out_dir).expanduser()
    return default_out_dir(args.model, getattr(args, "peft", None), getattr(args, "gguf_file", None))


def run(args) -> int:
    """Check the flags, name the data (the first line a run says), load the model, score, report."""
    from ..backends.locate import check_request
    from ..errors import UsageError

    _check_store_and_labels(args)
    _check_peft(args)
    if args.limit is not None and args.limit_per_category is not None:
        raise UsageError(
            "give --limit (the first N items, in category order) or --limit-per-category (the first N of each "
            "category), not both"
        )
    if args.max_spread is not None and args.backend not in ("server", "vllm"):
        raise UsageError(
            f"--max-spread is the start-up check's limit for --backend server and --backend vllm; --backend "
            f"{args.backend} has no such check"
        )
    model_args = key_values(args.model_arg, "--model-arg")
    _check_server_flags(args, model_args)
    _check_vllm_flags(args)
    if args.backend == "llama.cpp":
        return run_llama_cpp(args, model_args)
    if args.backend == "server":
        return run_server(args)
    if args.backend == "vllm":
        return run_vllm(args, model_args)
    check_request(args.gguf_file, model_args)
    import torch

    from ..backends.adapters import apply_adapter, locate_adapter
    from ..backends.transformers import dtype_name, load_located, locate_model, resolve_device, resolve_dtype
    from ..engine.distributed import init_from_env, world_from_env
    from ..engine.runstore import RunStore
    from ..evaluation import run_signature

    out_dir = resolve_out_dir(args)
    placement = _placement(args, world_from_env())
    device = _rank_device(resolve_device(args.device), args.device, world_from_env())
    ranks, owned = init_from_env(device.type, args.dist_timeout)
    try:
        with ranks.together():  # everything that can fail before minutes of model loading
            source = _open_data(args)
            dtype = resolve_dtype(args.dtype, device)
            if args.threads:
                torch.set_num_threads(args.threads)
            located = locate_model(
                args.model,
                revision=args.revision,
                token=source.token,
                trust_remote_code=args.trust_remote_code,
                gguf_file=args.gguf_file,
                model_args=model_args,
                use_cache=not args.no_cache,
            )
            adapter = (
                locate_adapter(args.peft, args.peft_revision, source.token, use_cache=not args.no_cache)
                if args.peft
                else None
            )
            identity = located.identity() if adapter is None else {**located.identity(), "adapter": adapter.identity()}
            if ranks.is_main:  # the same check evaluate() makes, before the model is loaded
                RunStore(out_dir).check(
                    run_signature(identity, source.dataset.sha256, args.add_bos, dtype_name(dtype), device), args.resume
                )
        t0 = time.perf_counter()
        with ranks.together():
            loaded = load_located(located, device, dtype, use_cache=not args.no_cache, placement=placement)
            model = apply_adapter(loaded.model, adapter, args.model) if adapter else loaded.model
        info = {
            **loaded.info,
            "revision_requested": args.revision,
            "trust_remote_code": bool(args.trust_remote_code),
            "identity": identity,
            "load_s": round(time.perf_counter() - t0, 3),
            **({"adapter": adapter.info} if adapter else {}),
        }
        return _score(args, model, loaded.tokenizer, source, out_dir, info, speak=ranks.is_main)
    finally:
        if owned:
            from ..engine.distributed import leave

            failing = sys.exc_info()[0] is not None
            held = leave(failed=failing)
            if failing:
                _ENDING.set()  # the run ends on its error: a signal from now on changes nothing
            elif held:
                raise Stopped(held[0])


def _open_data(args):
    """The data that --data (or --local-data) names, the card's Hub file without either; the line
    naming it is the first a run says (rank 0's notes)."""
    from ..items.datasource import open_data

    return open_data(data_choice(args, HUB), say=logging.getLogger("base_bench").info)


def _check_store_and_labels(args) -> None:
    """--store (else $BASE_BENCH_STORE) and the label flags, checked before anything is loaded: the
    URL is read (its password registered as a secret), not connected to (evaluation.check_store_url).
    Sets args.store_url and args.labels, which `_score` passes to evaluate()."""
    from ..evaluation import check_store_url
    from ..results.labels import Labels
    from ..store import store_url

    args.labels = Labels.make(args.group, args.step, args.tokens, args.tag)
    args.store_url = check_store_url(store_url(args.store))


def _score(args, model, tokenizer, source, out_dir: Path, info: dict, speak: bool = True) -> int:
    """evaluate() with the run's flags, then the summary and where the files went (by rank 0). A run
    whose row could not be written to the --store still has its files: the summary, then one error
    line, and EXIT_STORE."""
    from ..errors import StoreError
    from ..evaluation import evaluate
    from ..results.labels import Labels
    from ..results.report import summary_lines

    labels = getattr(args, "labels", None) or Labels()
    url = getattr(args, "store_url", None)
    failed = None
    try:
        report = evaluate(
            model,
            tokenizer,
            source,
            limit=args.limit,
            limit_per_category=args.limit_per_category,
            batch_size=args.batch_size,
            batch_tokens=args.batch_tokens,
            add_bos=args.add_bos,
            out_dir=out_dir,
            resume=args.resume,
            progress=True,
            model_info=info,
            store=url,
            group=labels.group,
            step=labels.step,
            tokens=labels.tokens,
            tags=labels.tags,
        )
    except StoreError as exc:
        if getattr(exc, "report", None) is None:
            raise
        failed, report = exc, exc.report
    if speak:
        from ..redact import redact

        print(redact("\n".join(summary_lines(report))))
        print(f"wrote {out_dir}/report.json and {out_dir}/predictions.md")
        if url is not None and failed is None:
            from ..store import run_key, shown_url

            print(redact(f"stored the run in {shown_url(url)} (key {run_key(report)[:12]})"))
    if failed is not None:
        return fail(failed, EXIT_STORE) if speak and not getattr(failed, "shared", False) else EXIT_STORE
    return 0


def _check_peft(args) -> None:
    """--peft adapts a transformers model; --peft-revision needs --peft."""
    from ..errors import UsageError

    if args.peft_revision and not args.peft:
        raise UsageError("--peft-revision only works with --peft")
    backend = getattr(args, "backend", "transformers")
    if args.peft and backend != "transformers":
        raise UsageError(
            f"--peft applies a PEFT adapter to a transformers model, and --backend {backend} does not "
            "run one; use --backend transformers (or merge the adapter and convert the result)"
        )


def run_llama_cpp(args, model_args: dict) -> int:
    """--backend llama.cpp: the GGUF file (a local one, or --gguf-file of a Hub repo) run by
    llama.cpp, scored by the same evaluate(); neither torch nor transformers is imported
    (tests/test_no_torch.py)."""
    from ..backends.gguf_file import read_header
    from ..backends.llama_cpp import LlamaCppBackend, gpu_offload, load_tokenizer
    from ..backends.locate import check_request, locate_model
    from ..engine.distributed import world_from_env
    from ..engine.runstore import RunStore
    from ..errors import ModelError, UsageError
    from ..evaluation import run_signature

    _refuse_flags(
        args,
        tuple(f for f in PLACEMENT_FLAGS[1:] if not (f == "--revision" and args.gguf_file)),
        ", which runs the GGUF file as it is quantized, on --device",
    )
    if model_args:
        raise UsageError(
            "--model-arg passes keyword arguments to transformers' from_pretrained; --backend llama.cpp "
            "loads the GGUF with fixed settings that keep its scores exact, and takes none"
        )
    if world_from_env() > 1:
        raise UsageError(
            "--backend llama.cpp runs in one process; torchrun is for the transformers backend "
            "(give llama.cpp more cores with --threads)"
        )
    check_request(args.gguf_file)
    out_dir = resolve_out_dir(args)
    source = _open_data(args)
    if not args.gguf_file and not args.model.lower().endswith(".gguf"):
        raise UsageError(
            f"--backend llama.cpp scores a .gguf file; --model {args.model} is not one (give a Hub repo's "
            "file with --gguf-file NAME, or use --backend transformers for a Hub id or a model directory)"
        )
    located = locate_model(
        args.model, revision=args.revision, token=source.token, gguf_file=args.gguf_file, use_cache=not args.no_cache
    )
    header = read_header(Path(located.info["path"]))  # not a GGUF, truncated: one line, before loading
    device = gpu_offload(args.device)[2]
    RunStore(out_dir).check(
        run_signature(
            located.identity(), source.dataset.sha256, args.add_bos, header.file_type or "unknown", device, "llama.cpp"
        ),
        args.resume,
    )
    t0 = time.perf_counter()
    # The tokenizer before the model: reading it takes a passing 0.35 GB for Gemma 3's vocabulary,
    # which then does not come on top of the model's pages (the run's peak drops by about as much).
    path, threads, use_cache = located.info["path"], args.threads, not args.no_cache
    try:
        tokenizer, cache = load_tokenizer(path, use_cache=use_cache)
    except ModelError:
        LlamaCppBackend.load(path, device=args.device, threads=threads, use_cache=use_cache)  # llama.cpp's reason first
        raise
    backend = LlamaCppBackend.load(path, device=args.device, threads=threads, use_cache=use_cache)
    info = {
        **located.info,
        "cache": cache,
        "revision_requested": args.revision,
        "trust_remote_code": False,
        "identity": located.identity(),
        "load_s": round(time.perf_counter() - t0, 3),
    }
    return _score(args, backend, tokenizer, source, out_dir, info)


def _check_server_flags(args, model_args: dict) -> None:
    """The server flags go with --backend server, which needs --base-url and computes nothing here
    (so it takes none of the flags that say how to load or place a model)."""
    from ..errors import UsageError

    given = [f"--{f.replace('_', '-')}" for f in SERVER_FLAGS if getattr(args, f, None) is not None]
    if args.backend != "server":
        if given:
            raise UsageError(f"{', '.join(given)} only work{'s' if len(given) == 1 else ''} with --backend server")
        return
    if not args.base_url:
        raise UsageError("--backend server needs --base-url, the server's /v1 root (e.g. http://127.0.0.1:8000/v1)")
    placement = tuple(f for f in PLACEMENT_FLAGS if f != "--revision")  # --revision pins the tokenizer here
    _refuse_flags(args, (*placement, "--threads", "--gguf-file"), ": the server runs the model as it was started")
    if model_args:
        raise UsageError(
            "--model-arg does not apply to --backend server: the server loaded the model as it was started"
        )


def _refuse_flags(args, flags: tuple[str, ...], why: str) -> None:
    """UsageError naming those of `flags` that were given, which do not apply to args.backend (`why`)."""
    from ..errors import UsageError

    defaults = {"--device": "auto", "--dtype": "auto"}
    given = [f for f in flags if getattr(args, f[2:].replace("-", "_")) not in (None, False, [], defaults.get(f))]
    if given:
        raise UsageError(
            f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --backend {args.backend}{why}"
        )


def server_options(args) -> dict:
    """ServerBackend's keyword arguments for the server flags given; a flag not given is left out, so
    that ServerBackend's own default applies (the one default the help text states too)."""
    given = {
        "api_key_env": args.api_key_env,
        "concurrency": args.concurrency,
        "request_timeout": args.request_timeout,
        "max_retries": args.max_retries,
    }
    return {k: v for k, v in given.items() if v is not None}


def run_server(args) -> int:
    """--backend server: a model behind an OpenAI-compatible server, scored by the same evaluate().
    Everything that can refuse the run (the server, its model, the tokenizer, --resume, the server
    check) is done before evaluate() writes anything."""
    from ..backends.server import ServerBackend
    from ..engine.distributed import world_from_env
    from ..engine.runstore import RunStore
    from ..errors import UsageError
    from ..evaluation import Selection, run_signature

    if world_from_env() > 1:
        raise UsageError("--backend server runs in one process; give the server more work with --concurrency")
    out_dir = resolve_out_dir(args)
    t0 = time.perf_counter()
    backend = ServerBackend(
        args.base_url,
        args.model,
        args.tokenizer,
        **server_options(args),
        max_spread=args.max_spread,
        revision=args.revision,
    )
    try:
        source = _open_data(args)
        backend.open()
        signature = run_signature(
            backend.identity(), source.dataset.sha256, args.add_bos, backend.dtype, backend.device, backend.name
        )
        RunStore(out_dir).check(signature, args.resume)
        items = Selection(args.limit, args.limit_per_category).of(source.dataset.items)
        tokenize = backend.check_tokenizer(items)
        backend.check()
        info = {**backend.info(), "tokenizer_check": tokenize, "load_s": round(time.perf_counter() - t0, 3)}
        return _score(args, backend, backend.tokenizer, source, out_dir, info)
    finally:
        backend.close()


def _check_vllm_flags(args) -> None:
    """--tensor-parallel-size, --pipeline-parallel-size and --vllm-arg belong to --backend vllm."""
    if getattr(args, "backend", "transformers") == "vllm":
        return
    _refuse_flags(args, VLLM_FLAGS, "; they are for --backend vllm")


def run_vllm(args, model_args: dict) -> int:
    """--backend vllm: a Hub id or a model directory run by vllm.LLM in this process, scored by the
    same evaluate(). Everything that can be refused is checked before the engine starts (minutes)."""
    import torch

    from ..backends import vllm as vb
    from ..backends.prompt_logprobs import check_spread_max
    from ..backends.transformers import classify, dtype_name, locate_model, resolve_dtype
    from ..engine.distributed import world_from_env
    from ..engine.runstore import RunStore
    from ..errors import ModelError, UsageError
    from ..evaluation import run_signature

    _refuse_flags(
        args,
        ("--threads", "--device-map", "--max-memory", "--offload-folder", "--gguf-file"),
        ", which places the model and sets its threads itself (see --tensor-parallel-size, "
        "--pipeline-parallel-size and --vllm-arg)",
    )
    if world_from_env() > 1:
        raise UsageError(
            "--backend vllm runs in one process and spreads the model itself: use --tensor-parallel-size "
            "and --pipeline-parallel-size, not torchrun"
        )
    vllm_args = key_values(args.vllm_arg, "--vllm-arg")
    both = sorted(set(model_args) & set(vllm_args))
    if both:
        raise UsageError(f"{both[0]} is given by both --model-arg and --vllm-arg; give it once")
    vllm_args = vb.check_vllm_args({**model_args, **vllm_args})
    vb.check_model_kind(classify(args.model), args.model)  # a GGUF: one line, before vLLM is imported
    vb.check_vllm_args(vllm_args, vb.engine_arg_names(vb.import_vllm()))
    device = vb.device_type()
    if args.device not in ("auto", device):
        raise UsageError(
            f"--device {args.device}: this vLLM ({vb.vllm_version()}) computes on {device}; drop --device "
            "(pick GPUs with CUDA_VISIBLE_DEVICES)"
        )
    out_dir = resolve_out_dir(args)
    source = _open_data(args)
    located = locate_model(
        args.model,
        revision=args.revision,
        token=source.token,
        trust_remote_code=args.trust_remote_code,
        use_cache=not args.no_cache,
    )
    dtype = dtype_name(resolve_dtype(args.dtype, torch.device(device)))
    tokenizer = vb.load_tokenizer(located.where, args.trust_remote_code)
    max_spread = check_spread_max(args.max_spread)
    identity = vb.run_identity(located.identity(), tokenizer, vllm_args, max_spread)
    RunStore(out_dir).check(
        run_signature(identity, source.dataset.sha256, args.add_bos, dtype, device, "vllm"), args.resume
    )
    t0 = time.perf_counter()
    backend = vb.VllmBackend.load(
        located.where,
        tokenizer,
        spec=args.model,
        dtype=dtype,
        tensor_parallel_size=args.tensor_parallel_size or 1,
        pipeline_parallel_size=args.pipeline_parallel_size or 1,
        vllm_args=vllm_args,
        trust_remote_code=args.trust_remote_code,
        max_spread=max_spread,
    )
    try:
        if backend.dtype != dtype:
            raise ModelError(
                f"vLLM runs {args.model} in {backend.dtype}, not the {dtype} asked for; pass --dtype {backend.dtype}"
            )
        info = {
            **located.info,
            "cache": {"status": "not-gguf", "path": None},
            "revision_requested": args.revision,
            "trust_remote_code": bool(args.trust_remote_code),
            "identity": identity,
            "load_s": round(time.perf_counter() - t0, 3),
        }
        return _score(args, backend, tokenizer, source, out_dir, info)
    finally:
        backend.close()


def _placement(args, world: int):
    """--device-map and its options, checked against the flags they cannot go with."""
    from ..backends.transformers import Placement
    from ..errors import UsageError

    if not args.device_map:
        extra = [f for f, v in (("--max-memory", args.max_memory), ("--offload-folder", args.offload_folder)) if v]
        if extra:
            raise UsageError(f"{' and '.join(extra)} only work with --device-map (add --device-map auto)")
        return None
    if args.device != "auto":
        raise UsageError(
            f"--device-map places the layers itself (GPUs, then CPU, then disk); drop --device "
            f"{args.device}, or drop --device-map to put the whole model on {args.device}"
        )
    if world > 1:
        raise UsageError(
            "--device-map splits one model over this machine's devices in one process, while torchrun "
            "runs one process with a whole model per GPU: use one or the other"
        )
    return Placement(args.device_map, args.max_memory, args.offload_folder)


def _rank_device(device, asked: str, world: int):
    """Under torchrun each rank takes the GPU of its LOCAL_RANK; an explicit cuda:N cannot be shared."""
    import os

    import torch

    if world <= 1 or device.type != "cuda":
        return device
    if ":" in asked:
        from ..errors import DistributedError

        raise DistributedError(
            f"--device {asked} names one GPU, but under torchrun each of the {world} ranks uses "
            "the GPU of its LOCAL_RANK: pass --device cuda (or auto)"
        )
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


class _TqdmHandler(logging.Handler):
    """Notes from the library on stderr, written around the progress bar rather than through it."""

    def emit(self, record):
        from tqdm import tqdm

        from ..redact import redact

        tqdm.write(redact(self.format(record)), file=sys.stderr)


def _show_notes() -> None:
    """Notes on rank 0; the other ranks of a torchrun job print errors only (no notes, no bars)."""
    logger = logging.getLogger("base_bench")
    if not any(isinstance(h, _TqdmHandler) for h in logger.handlers):
        logger.addHandler(_TqdmHandler())
    logger.setLevel(logging.INFO if rank_from_env() == 0 else logging.ERROR)
    logger.propagate = False
    if rank_from_env() != 0:
        from huggingface_hub.utils import disable_progress_bars
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        disable_progress_bars()


# Set once a torchrun rank has left its process group on an error: from then on SIGINT and SIGTERM
# are ignored, so the rank exits with the error's code (2) rather than by torchrun's SIGTERM.
_ENDING = threading.Event()


class Stopped(BaseException):
    """SIGINT or SIGTERM arrived. Raised by the signal handler, it unwinds the run as Ctrl-C does:
    the out-dir lock is released, and the finished items (each fsynced as it finished) stay."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def _stop_on_signals():
    """SIGINT and SIGTERM raise Stopped in the block; a second one ends the process at once."""

    def stop(signum, frame):
        for s in old:
            signal.signal(s, signal.SIG_DFL)
        raise Stopped(signum)

    old = {}
    try:
        for s in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(s) is not signal.SIG_IGN:  # nohup and background jobs ignore SIGINT: keep that
                old[s] = signal.signal(s, stop)
    except ValueError:  # not the main thread, where Python cannot catch signals
        pass
    try:
        yield
    finally:
        for s, handler in old.items():
            if _ENDING.is_set():  # torchrun's SIGTERM to a rank leaving on an error: exit with the error's code
                signal.signal(s, signal.SIG_IGN)
            else:
                signal.signal(s, handler if handler is not None else signal.SIG_DFL)


def _stopped_line(signum: int, args) -> str:
    what = "interrupted by SIGINT" if signum == signal.SIGINT else f"terminated by {signal.Signals(signum).name}"
    if args is None:
        return what
    from ..engine.runstore import RunStore

    out_dir = resolve_out_dir(args)
    store = RunStore(out_dir)
    try:
        n = len(store.load_partial(repair=False))
    except (BaseBenchError, OSError):
        return f"{what}; the finished items are saved in {out_dir}; continue with --resume"
    if n == 0 and not store.holds_run():
        return f"{what} before the run started; nothing was written to {out_dir}"
    return f"{what}; {n} finished item{' is' if n == 1 else 's are'} saved in {out_dir}; continue with --resume"


def _error_exit(exc: BaseBenchError) -> int:
    code = EXIT_STORAGE if isinstance(exc, StorageError) else EXIT_USAGE
    if getattr(exc, "shared", False) or (rank_from_env() != 0 and not getattr(exc, "local", False)):
        return code  # the same error on every rank: rank 0 says it once
    return fail(exc, code)


def _register_env_secrets() -> None:
    """HF_TOKEN (and its older name) are secrets of every run: never printed or written."""
    import os

    from ..redact import register

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        register(os.environ.get(name))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        from importlib import import_module

        return import_module(f".{argv[0]}", __package__).main(argv[1:])
    args = None
    _ENDING.clear()
    _register_env_secrets()
    try:
        if argv and argv[0] == "run":
            argv = argv[1:]
        args = build_parser().parse_args(argv)
        _show_notes()
        with _stop_on_signals():
            return run(args)
    except BaseBenchError as exc:
        return _error_exit(exc)
    except (Stopped, KeyboardInterrupt) as exc:
        if isinstance(exc.__context__, BaseBenchError):
            # The run was already ending on an error (torchrun, for one, sends SIGTERM to the ranks
            # still shutting down once one has exited): say that error, not the signal.
            return _error_exit(exc.__context__)
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        if rank_from_env() == 0:  # torchrun passes the signal to every rank; rank 0 speaks for them
            print(f"base-bench: {_stopped_line(signum, args)}", file=sys.stderr)
        return 128 + signum

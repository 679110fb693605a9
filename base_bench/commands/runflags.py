"""The flags of a run (`base-bench --model M ...`): `build_parser()`, the run's argparse parser.

    args = build_parser().parse_args(["--model", "org/name", "--limit", "50"])
    flags = [a.dest for a in build_parser()._actions]   # every run flag, as `base-bench sweep` takes them

Used by the run itself (cli.py parses its command line with it) and by `base-bench sweep`, which
takes every run flag and applies it to every member (less the flags it sets per member). Only
argparse code lives here, as in cliargs.py: no command imports another command.
"""

from __future__ import annotations

import argparse

from ..backends.server import DEFAULT_CONCURRENCY, DEFAULT_MAX_RETRIES, DEFAULT_REQUEST_TIMEOUT
from ..items import card
from ..items.datasource import HUB
from ..version import __version__
from .cliargs import (
    DEVICE_MAPS,
    Parser,
    add_data_flags,
    add_key_value_flag,
    add_label_flags,
    add_store_flag,
    max_memory,
    positive_float,
    positive_int,
)


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
        "      compare, leaderboard, explore and trajectory read it with --store URL in place of folders\n"
        "  base-bench sweep MODEL... --out-dir DIR   many models (every checkpoint of a training run), each\n"
        "      an ordinary run, queued in the store, here, on Slurm or on Ray; sweep status|retry DIR\n"
        "  base-bench data download [--revision R]   the official data into the Hugging Face cache, no model:\n"
        "      then runs with --data hub work offline (HF_HUB_OFFLINE=1)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        required=True,
        metavar="MODEL",
        help="what to evaluate: a Hugging Face model id (org/name), a local directory holding a "
        "transformers export, a path to a GGUF file (.gguf, or an Ollama blob), or ollama:NAME[:TAG], a "
        "model in Ollama's store ($OLLAMA_MODELS, else ~/.ollama/models)",
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
    p.add_argument(
        "--n-gpu-layers",
        type=positive_int("--n-gpu-layers", 0),
        metavar="N",
        help="with --backend llama.cpp and a GPU --device: offload N layers to the GPU and run the rest on the "
        "CPU (llama.cpp's -ngl), for a model larger than the GPU's memory (default: every layer); recorded, "
        "and in the resume signature when not the default",
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
        "--force-load",
        action="store_true",
        help="load a .gguf with the transformers backend even where the memory check finds that its float "
        "weights will not fit in memory (or its cache entry on disk)",
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

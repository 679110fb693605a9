"""The transformers backend: resolve --device/--dtype, load a causal LM with its tokenizer, and
score it (`TransformersBackend`, with the torch scorers of transformers_scorers.py).

    device, dtype = resolve_device("auto"), resolve_dtype("auto", device)
    loaded = load_model("path/or/id/or/file.gguf", device, dtype, revision=None, token=None)
    loaded.model, loaded.tokenizer, loaded.info   # info: what report.json records about the model
    located = locate_model("org/name-GGUF", gguf_file="model.Q4_K_M.gguf")      # one GGUF of a Hub repo
    located = locate_model("org/name", model_args={"attn_implementation": "eager"})  # --model-arg
    loaded = load_located(located, device, dtype, tokenizer=load_tokenizer(located))  # the tokenizer read apart

A `.gguf` path is loaded by transformers through the `gguf` package (dequantized to `dtype`), and
the converted tokenizer and weights are kept in a disk cache for the next load (gguf_cache.py;
`use_cache=False` bypasses it); a directory is loaded as a local export; anything else is taken
as a Hub id and fetched with huggingface_hub (see hub.py), so the resolved commit is known and
recorded. With `gguf_file`, only that file of the Hub repo is fetched, and from then on it is a
local .gguf (its content fingerprint names it). `fingerprint` names a local file or directory by
its content (for --resume and the cache). `model_args` go to the model's `from_pretrained` (not the
tokenizer's), but for the keys base-bench sets itself (`RESERVED`, each refused naming its flag).

    backend = TransformersBackend(loaded.model, loaded.tokenizer)   # what evaluate() asks
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import ModelError, ScoringError
from .base import Backend
from .identity import package_version, weights_fingerprint
from .locate import RESERVED, Located, check_request, classify, locate_model  # noqa: F401 - where callers have found them

log = logging.getLogger("base_bench")
# The packing check's outcome, by _packing_key, in a process that asked for it (a sweep's worker,
# which loads many checkpoints of one model from their folders): the packed path is checked once per
# configuration. The check is about the model's code (its masks and position ids), which checkpoints
# of one configuration share; the report says where its numbers came from (packing_check.checked_on).
# Off elsewhere: a model in memory may have had its code changed since (a patched forward).
_PACKING_CHECKED: dict[str, tuple] = {}
_PACKING_REUSE = False


def reuse_packing_checks(on: bool = True) -> None:
    """Check the packed path once per model configuration in this process, not once per model
    (`base-bench sweep`'s workers turn it on)."""
    global _PACKING_REUSE
    _PACKING_REUSE = on
    _PACKING_CHECKED.clear()


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ModelError("--device mps was asked for, but MPS is not available on this machine")
        return torch.device("mps")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ModelError(f"--device {name} was asked for, but no CUDA GPU is available (try --device cpu)")
        idx = name.partition(":")[2]
        if idx:
            if not idx.isdigit() or int(idx) >= torch.cuda.device_count():
                raise ModelError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        return torch.device(name)
    raise ModelError(f"--device {name!r} is not one of cpu, cuda, cuda:N, mps, auto")


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name != "auto":
        return DTYPES[name]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def dtype_name(dtype: torch.dtype) -> str:
    """'float32', 'bfloat16', ... as the flags and report.json spell them."""
    return str(dtype).removeprefix("torch.")


@dataclass
class Loaded:
    model: object
    tokenizer: object
    info: dict = field(default_factory=dict)


def _from_pretrained(
    where: str, dtype, placement: dict | None = None, model_args: dict | None = None, tokenizer=None, **kwargs
):
    """Tokenizer and model from `where` (the tokenizer only when none is given); `model_args` go to
    the model only (tokenizer options would change the token ids, which the card fixes)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(
        where, dtype=dtype, **kwargs, **(placement or {}), **(model_args or {})
    )
    return tokenizer, model


@dataclass(frozen=True)
class Placement:
    """`--device-map` and its options: accelerate's big-model loading puts the layers on the visible
    GPUs first, then the CPU, then the disk, each within its `max_memory` budget."""

    device_map: str = "auto"
    max_memory: dict | None = None
    offload_folder: str | None = None

    def kwargs(self) -> dict:
        out = {"device_map": self.device_map}
        if self.max_memory:
            out["max_memory"] = self.max_memory
        if self.offload_folder:
            out["offload_folder"] = self.offload_folder
        return out


def _dispatch(model, placement: Placement):
    """Place a model that is already in memory (a GGUF conversion) the way from_pretrained would."""
    from accelerate import dispatch_model, infer_auto_device_map

    device_map = infer_auto_device_map(
        model, max_memory=placement.max_memory, no_split_module_classes=getattr(model, "_no_split_modules", None)
    )
    if set(device_map) == {""}:  # the whole model on one device: name its parts (accelerate's disk
        device_map = {name: device_map[""] for name, _ in model.named_children()}  # offload needs names)
    return dispatch_model(model, device_map=device_map, offload_dir=placement.offload_folder)


def _load_failed(located: Located, exc: Exception) -> ModelError:
    """The one line for a model (or its tokenizer) that transformers could not load."""
    text = str(exc).strip()
    msg = (text.splitlines()[0] if text else type(exc).__name__)[:300]
    if located.info.get("ollama"):
        msg = msg.rstrip(".") + "; --backend llama.cpp runs an Ollama model's GGUF as it is"
    return ModelError(f"could not load model {located.spec}: {msg}")


def load_tokenizer(located: Located):
    """The tokenizer of a located model folder or Hub snapshot, read as `load_located` reads it
    (which then takes it as its `tokenizer`); a GGUF's comes with its conversion (`load_located`)."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    if located.kind == "gguf":
        raise ValueError("a GGUF's tokenizer is converted with its weights: load_located loads both")
    hf_logging.set_verbosity_error()
    try:
        return AutoTokenizer.from_pretrained(located.where, **located.kwargs)
    except Exception as exc:  # noqa: BLE001 - one line for the user, not a traceback
        raise _load_failed(located, exc) from None


def load_located(
    located: Located,
    device,
    dtype,
    use_cache: bool = True,
    placement: Placement | None = None,
    tokenizer=None,
) -> Loaded:
    """Load tokenizer and model; a GGUF file goes through the converted-model cache (gguf_cache)
    unless `use_cache` is False. info["cache"] records what the cache did. With a `placement`
    (`--device-map`), the layers are spread over the devices instead of moved to `device`, and
    info["device_map"] records where each went. A `tokenizer` given (`load_tokenizer`'s, for a
    folder or a Hub snapshot, not a GGUF) is taken as it is, and only the model is loaded."""
    from transformers.utils import logging as hf_logging

    if tokenizer is not None and located.kind == "gguf":
        raise ValueError("a GGUF's tokenizer is converted with its weights: give no tokenizer")
    hf_logging.set_verbosity_error()
    place = placement.kwargs() if placement else None
    args = located.model_args
    try:
        if located.kind == "gguf":
            from . import gguf_cache

            def from_entry(entry):  # an entry never runs code, whatever --trust-remote-code says: it may
                # sit on a shared disk, and a GGUF needs no remote code
                return _from_pretrained(str(entry), dtype, placement=place, model_args=args, trust_remote_code=False)

            def convert(model_args=None):
                return _from_pretrained(located.where, dtype, model_args=model_args, **located.kwargs)

            # The cache holds the plain conversion, made whole on the CPU (so its key needs no model
            # arguments); the model is then read from the entry, placed and with the model
            # arguments, or, with no entry, converted with them (and dispatched from memory).
            tokenizer, model, cache = gguf_cache.load(
                Path(located.info["path"]),
                located.info["fingerprint"],
                dtype,
                convert=lambda: convert(None if use_cache else args),
                load_entry=from_entry,
                use_cache=use_cache,
            )
            if cache["status"] == "written" and (placement or args):
                del model
                tokenizer, model = from_entry(cache["path"])
            elif cache["status"] not in ("hit", "disabled", "written") and args:  # converted, not cached
                del model
                tokenizer, model = convert(args)
            if placement and cache["status"] not in ("hit", "written"):
                model = _dispatch(model, placement)
        else:
            tokenizer, model = _from_pretrained(
                located.where, dtype, placement=place, model_args=args, tokenizer=tokenizer, **located.kwargs
            )
            cache = {"status": "not-gguf", "path": None}
    except Exception as exc:  # noqa: BLE001 - one line for the user, not a traceback
        raise _load_failed(located, exc) from None
    info = {**located.info, "cache": cache}
    if located.kind == "gguf":  # not the cache entry or the GGUF's folder: what an adapter trained on it records
        model.name_or_path = located.info["path"]
    if placement:
        info["device_map"] = {k or "(whole model)": str(v) for k, v in getattr(model, "hf_device_map", {}).items()}
        model.eval()
    else:
        model.to(device).eval()
    return Loaded(model, tokenizer, info)


def load_model(spec, device, dtype, use_cache: bool = True, **where) -> Loaded:
    """locate_model(spec, **where) (revision, token, trust_remote_code, gguf_file, model_args), then load_located."""
    located = locate_model(spec, use_cache=use_cache, **where)
    return load_located(located, device, dtype, use_cache=use_cache)


# ---------------------------------------------------------------- a model already in memory


def check_causal_lm(model) -> None:
    """Raise ModelError unless `model` (unwrapped) is a decoder-only transformers LM with its head."""
    if not isinstance(model, torch.nn.Module):
        raise ModelError(
            f"model must be a loaded transformers causal LM (a torch.nn.Module), not {type(model).__name__}"
        )
    name = type(model).__name__
    cfg = getattr(model, "config", None)
    if cfg is None or not hasattr(model, "get_output_embeddings"):
        raise ModelError(f"{name} is not a transformers model; load one with AutoModelForCausalLM.from_pretrained")
    if getattr(cfg, "is_encoder_decoder", False):
        raise ModelError(f"{name} is an encoder-decoder model; the benchmark scores decoder-only causal LMs")
    if model.get_output_embeddings() is None:
        raise ModelError(f"{name} has no language-model head; load it with AutoModelForCausalLM, not AutoModel")
    causal = name.endswith(("ForCausalLM", "LMHeadModel")) or name in _causal_lm_classes()
    if not causal and not (hasattr(model, "can_generate") and model.can_generate()):
        raise ModelError(
            f"{name} is not a causal LM (it cannot score continuations left to right); "
            "load the model with AutoModelForCausalLM"
        )


def _causal_lm_classes() -> set[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return {v for v in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values() if isinstance(v, str)}


def model_dtype(model) -> torch.dtype:
    """The dtype the weights are in: that of the input embeddings (the first floating tensor otherwise)."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if emb is not None and getattr(emb, "weight", None) is not None:
        return emb.weight.dtype
    return next(p.dtype for p in model.parameters() if p.is_floating_point())


def model_size(model) -> dict:
    """Parameter count and the bytes of parameters and buffers, each tensor counted once (tied weights)."""
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    return {
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "bytes_in_memory": sum(t.numel() * t.element_size() for t in tensors.values()),
    }


# ---------------------------------------------------------------- the backend evaluate() asks


class TransformersBackend(Backend):
    """A transformers causal LM already in memory (maybe wrapped in DDP or FSDP, maybe a peft
    PeftModel), as a Backend.

    Checks, on construction, that the unwrapped model is a decoder-only LM with its head. Forward
    passes go through the wrapper (which gathers FSDP shards, or applies the adapter); checks and
    fingerprints read the inner model, which holds an adapter's injected layers and weights.
    Nothing is copied, moved, cast or merged."""

    name = "transformers"

    def __init__(self, model, tokenizer):
        from .adapters import check_adapter, describe_adapter
        from .transformers_scorers import input_device, model_window, unwrap

        self.model = model
        self.inner = unwrap(model)
        check_causal_lm(self.inner)
        peft_holder = next(
            (
                m
                for m in (model, getattr(model, "module", None), self.inner)
                if m is not None and getattr(m, "peft_config", None)
            ),
            None,
        )
        if peft_holder is not None:
            check_adapter(peft_holder)
        self._peft = peft_holder
        self.adapter = describe_adapter(peft_holder) if peft_holder is not None else None
        self.model_name = getattr(self.inner, "name_or_path", None) or None
        self.device = input_device(self.inner)
        self.dtype = dtype_name(model_dtype(self.inner))
        self.window = model_window(self.inner, tokenizer)
        self.vocab_size = self.inner.get_input_embeddings().num_embeddings
        self.expects_bos = tokenizer_adds_bos(tokenizer)
        self.sharded = type(model).__name__ == "FullyShardedDataParallel" or any(
            hasattr(p, "to_local") for p in self.inner.parameters()
        )
        self.threads = torch.get_num_threads()
        self._tokenizer = tokenizer

    def describe(self) -> dict:
        config = self.inner.config
        return {
            "model_type": getattr(config, "model_type", None),
            "attn_implementation": getattr(config, "_attn_implementation", None),
            **model_size(self.inner),
        }

    def fingerprint(self) -> str:
        """weights_fingerprint of the inner model (an adapter's weights included); with an adapter,
        its configuration too (alpha and the like scale the weights without being weights)."""
        from .adapters import config_digest

        fp = weights_fingerprint(self.inner)
        digest = config_digest(self._peft) if self._peft is not None else None
        return hashlib.sha256(f"{fp}-{digest}".encode()).hexdigest()[:16] if digest else fp

    def spec(self) -> str:
        return getattr(self.inner, "name_or_path", None) or type(self.inner).__name__

    def versions(self) -> dict:
        out = {"torch": torch.__version__, "transformers": package_version("transformers")}
        if self.adapter is not None:
            out["peft"] = package_version("peft")
        return out

    @contextmanager
    def held(self):
        """model.eval() and torch.no_grad() for the block, then every module's own training flag
        back, whatever happens."""
        flags = [(m, m.training) for m in self.model.modules()]
        self.model.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            for m, training in flags:
                m.training = training

    def pick_scorer(self, longest_first, pad_id, ranks):
        """The packed scorer if it reproduces the plain one on a real batch (on every rank), else the
        plain scorer. On a model with sliding-window layers the batch also holds the item that reaches
        furthest, when it reaches past the window, so that the mask's cut to the window is checked too."""
        from ..engine.batching import attempt
        from ..engine.scoring import packing_probe
        from .transformers_scorers import PackedScorer, PlainScorer, check_packing, sliding_window

        def reach(e) -> int:  # the largest position id the item is fed at
            return len(e.context) + max(len(c) for c in e.continuations) - 1

        probe = packing_probe(longest_first)
        window = sliding_window(self.model)[0]
        far = max(longest_first, key=reach, default=None)
        if window is not None and far is not None and reach(far) >= window and far not in probe:
            probe.append(far)
        key = self._packing_key(probe, pad_id) if _PACKING_REUSE else None
        earlier = _PACKING_CHECKED.get(key) if key else None
        checked = earlier or attempt(lambda: check_packing(self.model, probe, pad_id), self.device)
        if key and checked is not None and earlier is None:
            _PACKING_CHECKED[key] = checked
        if not ranks.agree(checked is not None):
            raise ScoringError(
                f"out of accelerator memory while checking packing on {len(probe)} items; "
                "try a smaller dtype or another device"
            )
        ok, diff = checked
        ok = ranks.agree(ok)
        if not ok and ranks.is_main:
            log.warning(
                "note: this model does not reproduce the plain path with a packed 4D mask; "
                "using the plain path (one row per choice)"
            )
        packing = {
            "ok": ok,
            "max_abs_diff_vs_plain": diff if math.isfinite(diff) else None,
            "checked_items": [e.id for e in probe],
            "checked_on": "an earlier model of this configuration in this process" if earlier else "this model",
        }
        return (PackedScorer if ok else PlainScorer)(self.model, pad_id), packing

    def _packing_key(self, probe, pad_id: int) -> str | None:
        """What the packing check's outcome depends on: the model's class and configuration (not its
        weights' values), its dtype and device, the attention implementation, the probe's items
        (their ids and tokens) and the pad id. None for a model whose configuration cannot be read."""
        config = getattr(self.model, "config", None)
        try:
            cfg = {k: v for k, v in config.to_dict().items() if k not in ("_name_or_path", "transformers_version")}
            text = json.dumps(
                [
                    type(self.model).__qualname__,
                    cfg,
                    str(next(self.model.parameters()).dtype),
                    str(self.device),
                    getattr(config, "_attn_implementation", None),
                    [(e.id, list(e.context), [list(c) for c in e.continuations]) for e in probe],
                    pad_id,
                ],
                sort_keys=True,
                default=str,
            )
        except Exception:  # noqa: BLE001  (an exotic config: check this model, as always)
            return None
        return hashlib.sha256(text.encode()).hexdigest()


def tokenizer_adds_bos(tokenizer) -> bool:
    """True when the tokenizer, asked for its special tokens, puts its BOS id first (the model was
    trained that way: Gemma, Llama, ...). Asked of the tokenizer itself, so it covers `add_bos_token`,
    a post-processor template, and a GGUF's tokenizer.ggml.add_bos_token as transformers converts it."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    try:
        ids = tokenizer("a", add_special_tokens=True)["input_ids"]
    except Exception:  # noqa: BLE001 - a tokenizer that cannot say is taken not to add one
        return False
    return bool(ids) and ids[0] == bos

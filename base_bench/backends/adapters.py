"""PEFT adapters (LoRA and the like) on the transformers backend: find one, apply it, name it.

    located = locate_adapter("out/lora" or "org/lora", revision=None, token=None)   # checked, downloaded
    located.identity()           # for the resume signature: content fingerprint, or Hub id + commit
    model = apply_adapter(base_model, located, model_spec="org/base")   # a peft PeftModel, in eval mode
    describe_adapter(model)      # the in-memory record: name, peft_type, base_model_name_or_path, ...
    base_model_note(adapter_base, "org/base")   # a warning line when the names disagree, else None

An adapter is scored as PEFT runs it: the LoRA layers PEFT injects into the base model compute the
adapted model, and forward passes go through the PeftModel (see `transformers_scorers.unwrap`, which reads
checks, window and logits_to_keep support off the base model inside it). Nothing is merged.

A local adapter is named by the content of the files PEFT loads (adapter_config.json and the
adapter weights), not by its path or by the other files a training run leaves beside them (README,
checkpoints, optimizer state): a moved adapter still resumes, an edited or retrained one does not.
A Hub adapter is fetched as a model is (items/hub.py: the same tokens, the same one-line errors),
and named by its id and resolved commit. Prompt-learning adapters (prompt tuning, prefix tuning,
P-tuning) add virtual tokens in front of the input, which the card's scoring has no place for, so
they are refused.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelError
from ..items.hub import download_model
from .identity import FINGERPRINT_SCHEME, file_digest, tensors_fingerprint

CONFIG_FILE = "adapter_config.json"
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")  # what PEFT loads, in its order
NOT_IN_IDENTITY = ("base_model_name_or_path", "revision", "inference_mode")  # where it came from, not what it computes


@dataclass(frozen=True)
class LocatedAdapter:
    """An adapter found (and, for a Hub id, downloaded) and checked, not applied yet."""

    spec: str
    kind: str  # "dir" or "hub"
    where: str  # the local directory PEFT reads
    info: dict  # config.model.adapter in the report: spec, kind, path, revision, fingerprint, base model

    def identity(self) -> dict:
        if self.kind == "hub":
            return {"kind": "hub", "id": self.spec, "revision": self.info["revision"]}
        return {"kind": "dir", "fingerprint": self.info["fingerprint"], "fingerprint_scheme": FINGERPRINT_SCHEME}


def adapter_fingerprint(folder: Path, remember: bool = True) -> str:
    """The content fingerprint (32 hex digits) of the files PEFT loads from an adapter directory
    (`remember` as identity.file_digest takes it)."""
    h = hashlib.sha256(f"{FINGERPRINT_SCHEME} adapter\n".encode())
    for name in (CONFIG_FILE, *WEIGHT_FILES):
        if (folder / name).is_file():
            h.update(f"{name}:{file_digest(folder / name, remember)}\n".encode())
    return h.hexdigest()[:32]


def _looks_like_path(spec: str) -> bool:
    return spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec


def _read_config(folder: Path, what: str) -> dict:
    """adapter_config.json of `folder`, checked: a JSON object, with weights beside it."""
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise ModelError(
            f"{what}: the directory has no {CONFIG_FILE}, so it is not a PEFT adapter "
            "(PEFT's save_pretrained writes one)"
        )
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{what}: {CONFIG_FILE} is not readable JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(cfg, dict) or "peft_type" not in cfg:
        raise ModelError(f"{what}: {CONFIG_FILE} has no peft_type, so it is not a PEFT adapter config")
    if not any((folder / w).is_file() for w in WEIGHT_FILES):
        raise ModelError(f"{what}: no adapter weights ({' or '.join(WEIGHT_FILES)}) beside {CONFIG_FILE}")
    return cfg


def locate_adapter(
    spec: str, revision: str | None = None, token: str | None = None, use_cache: bool = True
) -> LocatedAdapter:
    """Check a --peft value and, for a Hub id, download it; ModelError or HubError (one line) if it
    cannot be used. Reads adapter_config.json (its base model is recorded) but loads no weights. With
    `use_cache` False (--no-cache) its fingerprint is not remembered in the cache folder."""
    what = f"--peft {spec}"
    p = Path(spec).expanduser()
    if p.is_dir():
        if revision:
            raise ModelError("--peft-revision applies to Hub adapters only, not to a local directory")
        kind, folder, commit = "dir", p.resolve(), None
    elif p.exists():
        raise ModelError(f"{what}: a file, not an adapter directory; give the directory that holds {CONFIG_FILE}")
    elif _looks_like_path(spec):
        raise ModelError(f"{what}: no such directory")
    else:
        local, commit = download_model(
            spec, revision=revision, token=token, what="adapter", only=[CONFIG_FILE, *WEIGHT_FILES]
        )
        kind, folder = "hub", Path(local)
        what = f"--peft {spec} (on the Hub)"
    cfg = _read_config(folder, what)
    info = {
        "spec": spec,
        "kind": kind,
        "path": str(folder) if kind == "dir" else None,
        "revision": commit,
        "revision_requested": revision,
        "fingerprint": adapter_fingerprint(folder, remember=use_cache),
        "peft_type": cfg.get("peft_type"),
        "base_model_name_or_path": cfg.get("base_model_name_or_path"),
    }
    return LocatedAdapter(spec, kind, str(folder), info)


def _mismatch_line(text: str) -> str:
    """The informative line of a load error: torch puts 'size mismatch for ...' after a header line."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in lines:
        if "size mismatch" in ln:
            return ln
    return lines[0] if lines else ""


def apply_adapter(model, located: LocatedAdapter, model_spec: str):
    """The base `model` with the adapter applied (a PeftModel, eval mode, not trainable). ModelError,
    one line, if PEFT is missing or the adapter does not fit the model (other shapes, target modules
    the model lacks, weights the model has no place for)."""
    try:
        from peft import PeftModel
    except ImportError:
        raise ModelError("--peft needs the peft package: pip install 'base-bench[peft]'") from None
    what = f"could not apply adapter {located.spec} to model {model_spec}"
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            peft_model = PeftModel.from_pretrained(model, located.where, is_trainable=False)
    except Exception as exc:  # noqa: BLE001 - one line for the user, not a traceback
        msg = _mismatch_line(str(exc)) or type(exc).__name__
        raise ModelError(f"{what}: {msg[:300]}") from None
    missing = [str(w.message) for w in caught if "missing adapter keys" in str(w.message)]
    if missing:  # PEFT only warns; the adapter would be scored half-applied
        raise ModelError(f"{what}: the model has adapter layers that the file has no weights for ({missing[0][:200]})")
    return peft_model.eval()


# ---------------------------------------------------------------- an adapter in memory


def is_peft_model(model) -> bool:
    """A peft PeftModel (any task class), told by its shape, so that peft need not be imported."""
    return (
        hasattr(model, "get_base_model")
        and isinstance(getattr(model, "peft_config", None), dict)
        and type(model).__module__.startswith("peft")
    )


def _configs(model) -> tuple[dict, list[str]] | None:
    """(adapter configs by name, active adapter names) for a PeftModel, or for a transformers model
    with adapters loaded through its own PEFT integration (model.load_adapter); None otherwise."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or not configs:
        return None
    if is_peft_model(model):
        active = model.active_adapters
    else:  # a transformers model with adapters loaded, or the base model out of a PeftModel
        # (get_base_model()): ask an injected layer (transformers' own active_adapters() refuses
        # to answer under some peft versions)
        layer = next(
            (
                m
                for m in model.modules()
                if type(m).__module__.startswith("peft.tuners") and hasattr(m, "active_adapters")
            ),
            None,
        )
        if layer is None:
            return None
        active = layer.active_adapters
    return configs, [active] if isinstance(active, str) else list(active)


def check_adapter(model) -> None:
    """Raise ModelError for an adapter the card's scoring cannot take (prompt learning)."""
    found = _configs(model)
    if found is None:
        return
    configs, active = found
    for name in active:
        cfg = configs[name]
        if getattr(cfg, "is_prompt_learning", False):
            raise ModelError(
                f"adapter {name!r} is {_peft_type(cfg)}, a prompt-learning method: it puts virtual "
                "tokens before the input, which the card's scoring has no place for; only adapters "
                "that change the weights (LoRA, DoRA, IA3, ...) can be scored"
            )


def _peft_type(cfg) -> str:
    t = getattr(cfg, "peft_type", None)
    return str(getattr(t, "value", t))


def _config_dict(cfg) -> dict:
    d = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(vars(cfg))
    return {k: v for k, v in d.items() if k not in NOT_IN_IDENTITY}


def _jsonable(x):
    if isinstance(x, (set, frozenset)):
        return sorted(map(str, x))
    return getattr(x, "value", None) or str(x)


def config_digest(model) -> str | None:
    """A short hash of the active adapters' configurations (rank, alpha, targets, ...: what changes
    the scores besides the weights), or None for a model without adapters."""
    found = _configs(model)
    if found is None:
        return None
    configs, active = found
    text = json.dumps({n: _config_dict(configs[n]) for n in active}, sort_keys=True, default=_jsonable)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def describe_adapter(model) -> dict | None:
    """What the report records about the adapters of a model in memory (None without adapters):
    the active adapter's name and method, the base model it says it was trained on, and a
    fingerprint of its own weights and configuration."""
    found = _configs(model)
    if found is None:
        return None
    configs, active = found
    base = model.get_base_model() if is_peft_model(model) else model
    # the adapter's own tensors: PEFT names them by the adapter ("...q_proj.lora_A.default.weight",
    # "...k_proj.ia3_l.default"); read in place, without a state dict or a look-up on the Hub
    tensors = {n: p for n, p in base.named_parameters() if set(n.split(".")) & set(active)}
    cfg = configs[active[0]] if active else next(iter(configs.values()))
    bases = {getattr(configs[n], "base_model_name_or_path", None) for n in active}
    return {
        "spec": "+".join(active),
        "kind": "in-memory",
        "path": None,
        "revision": None,
        "fingerprint": hashlib.sha256(f"{tensors_fingerprint(tensors)}-{config_digest(model)}".encode()).hexdigest()[
            :16
        ],
        "peft_type": _peft_type(cfg),
        "base_model_name_or_path": next(iter(bases)) if len(bases) == 1 else None,
        "active_adapters": active,
    }


# ---------------------------------------------------------------- which base model


QUANT_SUFFIX = re.compile(r"[.\-_](i?q\d\w*|f16|f32|bf16|fp16|fp32)$", re.IGNORECASE)  # SmolLM2-135M.Q4_1, gemma-f16


@dataclass(frozen=True)
class _Name:
    org: str | None
    name: str
    path: Path | None  # a local path that exists here


def _parse(name: str) -> _Name | None:
    s = str(name).strip().replace("\\", "/").rstrip("/")
    if not s:
        return None
    p = Path(s).expanduser()
    local = p.resolve() if p.exists() else None
    cached = re.search(r"(?:^|/)models--([^/]+?)--([^/]+)(?:/snapshots/[^/]+)?$", s)  # huggingface_hub's cache
    if cached:
        return _Name(cached.group(1).lower(), cached.group(2).lower(), local)
    parts = [x for x in s.split("/") if x not in ("", ".")]
    last = parts[-1]
    if last.lower().endswith(".gguf"):
        last = QUANT_SUFFIX.sub("", last[:-5])
    hub_id = local is None and not _looks_like_path(s) and len(parts) <= 2
    org = parts[0].lower() if hub_id and len(parts) == 2 else None
    return _Name(org, last.lower(), local)


def same_base(a: str, b: str) -> bool:
    """Do two names (Hub ids, local paths, cache snapshots, GGUF files) plausibly name one base model?

    Two paths that both exist here are the same when they are one place. Otherwise the last
    component decides, case-blind, with a GGUF file's extension and quantisation tag dropped; two
    Hub ids (or cache snapshots) must also share the organisation. So "org/m", "org/m/", "/models/m",
    ".../models--org--m/snapshots/abc" and "m.Q4_K_M.gguf" all name "org/m"; "other/m" does not."""
    x, y = _parse(a), _parse(b)
    if x is None or y is None:
        return True
    if x.path and y.path:
        return x.path == y.path
    if x.name != y.name:
        return False
    return x.org is None or y.org is None or x.org == y.org


def base_model_note(adapter_base: str | None, model_name: str | None, adapter: str = "the adapter") -> str | None:
    """The one-line warning for an adapter applied to another base model than the one it names."""
    if not adapter_base or not model_name or same_base(adapter_base, model_name):
        return None
    return (
        f"warning: {adapter} was trained on {adapter_base} (base_model_name_or_path in its {CONFIG_FILE}), "
        f"but it is applied to {model_name}; the scores are those of this combination"
    )

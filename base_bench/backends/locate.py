"""Where a --model value points, found (and, for a Hub id, downloaded) but not loaded: no model library needed.

    located = locate_model("path/or/id/or/file.gguf", revision=None, token=None)
    located = locate_model("ollama:smollm2:135m")   # a model in Ollama's store (ollama.py): its GGUF blob
    located.kind        # "gguf", "dir" or "hub" (`classify`)
    located.identity()  # what names the weights in the resume signature
    located.info        # spec, kind, path, revision, fingerprint: what report.json records

Both backends start here: the transformers backend loads `located` (transformers.py), the llama.cpp
one opens the GGUF file itself, so finding a model imports neither torch nor transformers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ModelError, UsageError
from ..items.hub import download_model, download_model_file, gguf_name_problem
from . import ollama
from .identity import FINGERPRINT_SCHEME, file_fingerprint, fingerprint


def starts_as_gguf(path: Path) -> bool:
    """The file begins with the GGUF magic (an Ollama blob is a GGUF file without the suffix)."""
    from .gguf_file import MAGIC

    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def names_gguf(spec: str) -> bool:
    """The --model value names a GGUF file: a `.gguf` path, an Ollama model (`ollama:NAME[:TAG]`), or
    an existing file that starts with the GGUF magic; no file is looked up but that one."""
    if spec.lower().endswith(".gguf") or ollama.is_ollama(spec):
        return True
    p = Path(spec).expanduser()
    return p.is_file() and starts_as_gguf(p)


def classify(spec: str) -> str:
    """'gguf', 'dir' or 'hub' for a --model value; raise ModelError for a path that is not there."""
    if ollama.is_ollama(spec):
        return "gguf"  # the store is read by locate_model
    p = Path(spec).expanduser()
    if spec.lower().endswith(".gguf"):
        if not p.is_file():
            raise ModelError(f"--model {spec}: no such GGUF file")
        return "gguf"
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ModelError(f"--model {spec}: the directory has no config.json, so it is not a model export")
        return "dir"
    if p.is_file() and starts_as_gguf(p):
        return "gguf"  # a GGUF file without the suffix, such as an Ollama blob
    if p.exists():
        raise ModelError(
            f"--model {spec}: a file that is neither a .gguf nor a GGUF file (it does not start with the GGUF "
            "magic); give a model directory, a GGUF file, ollama:NAME[:TAG] or a Hub id"
        )
    # A Hub id is "name" or "org/name"; anything else that does not exist is a mistyped path.
    looks_like_path = spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec
    if looks_like_path:
        raise ModelError(f"--model {spec}: no such directory or file")
    return "hub"


# Keyword arguments of from_pretrained that base-bench sets itself, with what to use instead.
RESERVED = {
    "dtype": "--dtype",
    "torch_dtype": "--dtype",
    "device_map": "--device-map (or --device)",
    "max_memory": "--max-memory",
    "offload_folder": "--offload-folder",
    "revision": "--revision",
    "trust_remote_code": "--trust-remote-code",
    "gguf_file": "--gguf-file",
    "token": "HF_TOKEN or `hf auth login`",
    "use_auth_token": "HF_TOKEN or `hf auth login`",
    "cache_dir": "HF_HUB_CACHE",
    "local_files_only": "HF_HUB_OFFLINE=1",
    "pretrained_model_name_or_path": "--model",
    "pretrained": "--model",  # lm-eval's --model_args pretrained=ORG/NAME
}


def check_request(gguf_file: str | None = None, model_args: dict | None = None) -> None:
    """The checks of a model request that need no file and no network (the command line makes them
    before anything else): UsageError for a --model-arg KEY that base-bench sets itself, naming the
    flag to use instead, for one that names a secret (a token, a key), for use_safetensors other than true, or for a --gguf-file NAME that is not a .gguf path inside a repo."""
    from ..redact import names_secret

    for key, value in (model_args or {}).items():
        if key in RESERVED:
            raise UsageError(f"--model-arg {key}: base-bench sets {key} itself; use {RESERVED[key]} instead")
        if names_secret(key):
            raise UsageError(
                f"--model-arg {key}=... holds a secret, which base-bench never records or passes on; set "
                "HF_TOKEN in the environment (or `hf auth login`) instead"
            )
        if key == "use_safetensors" and value is not True:
            raise UsageError(
                "--model-arg use_safetensors: only true is taken; base-bench never asks for pickled weights "
                "(.bin) where a model has safetensors"
            )
    why = gguf_name_problem(gguf_file) if gguf_file is not None else None
    if why:
        raise UsageError(why)


@dataclass
class Located:
    """A model found (and, for a Hub id, downloaded) but not loaded yet. `model_args` go to the
    model's from_pretrained (--model-arg)."""

    spec: str
    kind: str
    where: str
    kwargs: dict
    info: dict
    model_args: dict = field(default_factory=dict)

    def identity(self) -> dict:
        """What names these weights for --resume: the content fingerprint of a local file or
        directory (not its path, so a moved model still resumes), or the Hub id and commit. The
        scheme is named too: a run started under another scheme is refused with that reason. Model
        arguments are part of it when there are any (and only then, so older runs still resume)."""
        if self.kind == "hub":
            out = {"kind": "hub", "id": self.spec, "revision": self.info["revision"]}
        else:
            out = {"kind": self.kind, "fingerprint": self.info["fingerprint"], "fingerprint_scheme": FINGERPRINT_SCHEME}
        return {**out, "model_args": self.model_args} if self.model_args else out


def locate_model(
    spec, revision=None, token=None, trust_remote_code=False, gguf_file=None, model_args=None, use_cache=True
) -> Located:
    """Find (for a Hub id, download) the model `spec` names; `gguf_file` picks one GGUF of a Hub repo.
    A local one is fingerprinted by its content, remembered in the cache folder unless `use_cache`
    is False (--no-cache)."""
    model_args = dict(model_args or {})
    check_request(gguf_file, model_args)
    kind = classify(spec)
    if gguf_file is not None and kind != "hub":
        raise UsageError(
            f"--gguf-file picks a file inside a Hub repo, so --model must be the repo's id (ORG/NAME), "
            f"not {spec}; for a local GGUF, give its path to --model"
        )
    info = {"spec": spec, "kind": kind}
    kwargs = dict(trust_remote_code=trust_remote_code)
    if kind == "hub" and not gguf_file:
        where, commit = download_model(spec, revision=revision, token=token)
        info.update(path=None, revision=commit, fingerprint=None)
    else:
        digest = None  # identity.file_digest of the file, when it is known already
        if gguf_file:  # only that file, into the Hugging Face cache; then a local .gguf like any other
            local, commit = download_model_file(spec, gguf_file, revision=revision, token=token)
            p, kind = Path(local), "gguf"  # the snapshot's path, which keeps the file's name (not the blob's)
            info.update(kind=kind, hub={"id": spec, "file": gguf_file, "revision": commit})
        elif ollama.is_ollama(spec):  # the blob, checked against its digest: then a GGUF file like any other
            if revision:
                raise ModelError("--revision applies to Hub models only; an Ollama model is named by its tag")
            found = ollama.find(spec, remember=use_cache)
            p, commit, digest = found.blob, None, found.file_digest
            info["ollama"] = found.info
        else:
            p, commit = Path(spec).expanduser().resolve(), None
            if revision:
                raise ModelError("--revision applies to Hub models only, not to a local directory or file")
        if kind == "gguf":
            from .gguf_file import read_header

            read_header(p)  # not a GGUF, or truncated: one line now, not the gguf reader's struct error later
            where, kwargs["gguf_file"] = str(p.parent), p.name
        else:
            where = str(p)
        fp = file_fingerprint(digest) if digest else fingerprint(p, remember=use_cache)
        info.update(path=str(p), revision=commit, fingerprint=fp)
    info["model_args"] = model_args
    return Located(spec, kind, where, kwargs, info, model_args)

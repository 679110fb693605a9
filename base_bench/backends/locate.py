"""Where a --model value points, found (and, for a Hub id, downloaded) but not loaded: no model library needed.

    located = locate_model("path/or/id/or/file.gguf", revision=None, token=None)
    located.kind        # "gguf", "dir" or "hub" (`classify`)
    located.identity()  # what names the weights in the resume signature
    located.info        # spec, kind, path, revision, fingerprint: what report.json records

Both backends start here: the transformers backend loads `located` (transformers.py), the llama.cpp
one opens the GGUF file itself, so finding a model imports neither torch nor transformers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelError
from ..items.hub import download_model
from .identity import FINGERPRINT_SCHEME, fingerprint


def classify(spec: str) -> str:
    """'gguf', 'dir' or 'hub' for a --model value; raise ModelError for a path that is not there."""
    p = Path(spec).expanduser()
    if spec.lower().endswith(".gguf"):
        if not p.is_file():
            raise ModelError(f"--model {spec}: no such GGUF file")
        return "gguf"
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ModelError(f"--model {spec}: the directory has no config.json, so it is not a model export")
        return "dir"
    if p.exists():
        raise ModelError(
            f"--model {spec}: a file that is not a .gguf; give a model directory, a .gguf file or a Hub id"
        )
    # A Hub id is "name" or "org/name"; anything else that does not exist is a mistyped path.
    looks_like_path = spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec
    if looks_like_path:
        raise ModelError(f"--model {spec}: no such directory or file")
    return "hub"


@dataclass
class Located:
    """A model found (and, for a Hub id, downloaded) but not loaded yet."""

    spec: str
    kind: str
    where: str
    kwargs: dict
    info: dict

    def identity(self) -> dict:
        """What names these weights for --resume: the content fingerprint of a local file or
        directory (not its path, so a moved model still resumes), or the Hub id and commit. The
        scheme is named too: a run started under another scheme is refused with that reason."""
        if self.kind == "hub":
            return {"kind": "hub", "id": self.spec, "revision": self.info["revision"]}
        return {"kind": self.kind, "fingerprint": self.info["fingerprint"], "fingerprint_scheme": FINGERPRINT_SCHEME}


def locate_model(spec, revision=None, token=None, trust_remote_code=False) -> Located:
    kind = classify(spec)
    info = {"spec": spec, "kind": kind}
    kwargs = dict(trust_remote_code=trust_remote_code)
    if kind == "hub":
        where, commit = download_model(spec, revision=revision, token=token)
        info.update(path=None, revision=commit, fingerprint=None)
    else:
        p = Path(spec).expanduser().resolve()
        if kind == "gguf":
            from .gguf_file import read_header

            read_header(p)  # not a GGUF, or truncated: one line now, not the gguf reader's struct error later
            where, kwargs["gguf_file"] = str(p.parent), p.name
        else:
            where = str(p)
        if revision:
            raise ModelError("--revision applies to Hub models only, not to a local directory or file")
        info.update(path=str(p), revision=None, fingerprint=fingerprint(p))
    return Located(spec, kind, where, kwargs, info)

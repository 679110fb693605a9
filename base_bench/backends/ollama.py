"""Models in Ollama's own store: `--model ollama:NAME[:TAG]`, found, checked, and run as the GGUF file it is.

    from base_bench.backends import ollama
    ollama.is_ollama("ollama:smollm2:135m")          # True: the --model value names an Ollama model
    name = ollama.parse("ollama:smollm2:135m")       # Name(host, namespace, model, tag), Ollama's defaults
    name.shortest                                    # "smollm2:135m", as `ollama list` shows it
    found = ollama.find("ollama:smollm2:135m")       # the manifest read, the blob checked
    found.blob, found.file_digest, found.info        # the GGUF file, identity.file_digest, what the report records

locate.py calls `find` for a `--model ollama:...`; from there the blob is a local GGUF file like
any other, on both backends, named by its content fingerprint (so a run on the blob's path, or on a
copy of the file, resumes from an Ollama run and the other way round).

The store is the folder `$OLLAMA_MODELS` (stripped of spaces and quotes, as Ollama reads it), else
`~/.ollama/models`. As Ollama lays it out (its manifest/paths.go, manifest/manifest.go,
types/model/name.go): a name `[HOST/][NAMESPACE/]MODEL[:TAG]` (defaults `registry.ollama.ai`,
`library`, `latest`) has its manifest at `manifests/HOST/NAMESPACE/MODEL/TAG`, a JSON document
(schemaVersion 2) whose `layers` each give a `mediaType`, a `digest` (`sha256:<64 hex>`) and a
`size`; a layer's content is the file `blobs/sha256-<hex>`. The model is the one layer of media type
`application/vnd.ollama.image.model`, a GGUF file.

The manifest and the blob come from a registry, so they are read as untrusted: every part of the
name is checked as Ollama checks it (letters, digits, `_`, `-`, and `.` where Ollama allows one, so
no part is `..` or holds a path separator, and the manifest path stays inside the store); the
manifest must be a regular file of at most MAX_MANIFEST bytes, valid JSON of the expected shape; a
digest must be `sha256:` and 64 hex digits. The blob's size is checked against the manifest's
first, then its SHA-256 against the digest: read in the same pass as the content fingerprint
(identity.file_digest with `plain`), and remembered as that is, by the file's stat, so a blob is
read whole once, not at every run (with `remember` False, --no-cache, at every run).

Refused, each in one line saying what to do: no store folder, a name the store does not have (naming
a few it has), a manifest with no model layer (a cloud model, or one stored as tensors) or with
several, a manifest with an adapter layer (`application/vnd.ollama.image.adapter`: scoring the base
model without its adapter would score another model), a missing blob, a size or digest that does
not match. The template, parameters, system prompt, license and other layers are ignored: the card
scores items as plain text, without a chat template.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelError

PREFIX = "ollama:"
ENV = "OLLAMA_MODELS"
DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG = "registry.ollama.ai", "library", "latest"
MODEL = "application/vnd.ollama.image.model"
ADAPTER = "application/vnd.ollama.image.adapter"
MAX_MANIFEST = 4 << 20  # bytes; Ollama writes about 1 KB for a GGUF model
MAX_LISTED = 10_000  # manifests looked at when naming what the store has
SHOWN = 6  # names shown in the message for an unknown name
DIGEST = re.compile(r"sha256[:-]([0-9a-fA-F]{64})")  # as Ollama's manifest.BlobsPath accepts it
_PART_LEN = {"host": 350, "namespace": 80, "model": 80, "tag": 80}


def is_ollama(spec) -> bool:
    """The --model value names a model in Ollama's store (`ollama:NAME[:TAG]`)."""
    return isinstance(spec, str) and spec.startswith(PREFIX)


@dataclass(frozen=True)
class Name:
    """A model name as Ollama reads it, each part filled in and checked."""

    host: str
    namespace: str
    model: str
    tag: str

    @property
    def parts(self) -> tuple[str, str, str, str]:
        return (self.host, self.namespace, self.model, self.tag)

    @property
    def full(self) -> str:
        """`registry.ollama.ai/library/smollm2:135m`."""
        return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"

    @property
    def shortest(self) -> str:
        """The name as `ollama list` shows it (Ollama's DisplayShortest): `smollm2:135m`,
        `NAMESPACE/MODEL:TAG` off the default namespace, `HOST/NAMESPACE/MODEL:TAG` off the default host."""
        if self.host.lower() != DEFAULT_HOST:
            return self.full
        if self.namespace.lower() != DEFAULT_NAMESPACE:
            return f"{self.namespace}/{self.model}:{self.tag}"
        return f"{self.model}:{self.tag}"


def _valid_part(kind: str, s: str) -> bool:
    """Ollama's isValidPart: 1 to 80 characters (350 for a host), the first a letter, digit or `_`,
    the rest also `-`, `.` (not in a namespace) and `:` (in a host only, for a port)."""
    if not 1 <= len(s) <= _PART_LEN[kind] or not s.isascii():
        return False
    if not (s[0].isalnum() or s[0] == "_"):
        return False
    for c in s[1:]:
        if c.isalnum() or c in "_-":
            continue
        if c == "." and kind != "namespace":
            continue
        if c == ":" and kind == "host":
            continue
        return False
    return True


def _cut_last(s: str, sep: str) -> tuple[str, str, bool]:
    """Ollama's cutPromised: split at the last `sep`; an empty side is a part that is missing."""
    i = s.rfind(sep)
    if i < 0:
        return s, "", False
    return s[:i] or "\0", s[i + len(sep) :] or "\0", True


def parse(spec: str) -> Name:
    """The Name that `ollama:NAME[:TAG]` gives (Ollama's ParseName: the tag after the last `:` that
    comes after the last `/`; then MODEL, NAMESPACE and HOST from the right, split at `/`; the
    defaults for what is not given). ModelError naming the part that Ollama would refuse."""
    text = spec[len(PREFIX) :] if is_ollama(spec) else spec
    s, tag, host, namespace = text, "", "", ""
    if s.rfind(":") > s.rfind("/"):
        s, tag, _ = _cut_last(s, ":")
    s, model, promised = _cut_last(s, "/")
    if not promised:
        model = s
    else:
        s, namespace, promised = _cut_last(s, "/")
        if not promised:
            namespace = s
        else:
            scheme, sep, rest = s.partition("://")
            host = rest if sep else scheme
    name = Name(host or DEFAULT_HOST, namespace or DEFAULT_NAMESPACE, model, tag or DEFAULT_TAG)
    for kind, part in zip(("host", "namespace", "model", "tag"), name.parts):
        if not _valid_part(kind, part):
            shown = "missing" if part in ("", "\0") else repr(part)[:90]
            raise ModelError(
                f"--model {spec}: not an Ollama model name (its {kind} is {shown}); give ollama:NAME or "
                "ollama:NAME:TAG, as `ollama list` shows them (letters, digits, _, - and .)"
            )
    return name


def store_dir() -> Path:
    """Ollama's model store: $OLLAMA_MODELS (as Ollama reads it), else ~/.ollama/models."""
    given = os.environ.get(ENV, "").strip().strip("\"'")
    return Path(given).expanduser() if given else Path.home() / ".ollama" / "models"


def _where_from() -> str:
    return f"{ENV}={os.environ[ENV]}" if os.environ.get(ENV, "").strip() else f"{ENV} is not set"


def store_names(store: Path) -> list[Name]:
    """The models the store holds (manifests under manifests/HOST/NAMESPACE/MODEL/TAG with valid
    parts), sorted; at most MAX_LISTED manifests are looked at."""
    found: list[Name] = []
    seen = 0

    def subdirs(p: Path) -> list[Path]:
        try:
            return sorted(q for q in p.iterdir() if q.is_dir())
        except OSError:
            return []

    for host in subdirs(store / "manifests"):
        for ns in subdirs(host):
            for model in subdirs(ns):
                try:
                    tags = sorted(model.iterdir())
                except OSError:
                    continue
                for tag in tags:
                    seen += 1
                    if seen > MAX_LISTED:
                        return sorted(found, key=lambda n: n.shortest)
                    name = Name(host.name, ns.name, model.name, tag.name)
                    kinds = ("host", "namespace", "model", "tag")
                    if tag.is_file() and all(_valid_part(k, v) for k, v in zip(kinds, name.parts)):
                        found.append(name)
    return sorted(found, key=lambda n: n.shortest)


def _unknown(spec: str, name: Name, store: Path) -> ModelError:
    have = store_names(store)
    if not have:
        what = "holds no models"
    else:
        more = len(have) - SHOWN
        what = "has " + ", ".join(n.shortest for n in have[:SHOWN]) + (f" and {more} more" if more > 0 else "")
    return ModelError(
        f"--model {spec}: Ollama's store {store} has no model {name.shortest} (it {what}); "
        f"`ollama pull {name.shortest}` fetches it, or set {ENV} to the store that has it"
    )


def read_manifest(path: Path, spec: str) -> tuple[dict, str]:
    """(the manifest at `path`, the SHA-256 of its bytes: the ID `ollama list` shows the first 12 hex
    digits of); a regular file of at most MAX_MANIFEST bytes holding the JSON object Ollama writes
    (schemaVersion 2, a list of layers), else ModelError."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise ModelError(f"--model {spec}: cannot read the manifest {path} ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ModelError(f"--model {spec}: the manifest {path} is not a file")
        if st.st_size > MAX_MANIFEST:
            raise ModelError(
                f"--model {spec}: the manifest {path} has {st.st_size} bytes, over the {MAX_MANIFEST >> 20} MiB "
                "an Ollama manifest can have; it is not one"
            )
        with os.fdopen(os.dup(fd), "rb") as f:
            raw = f.read(MAX_MANIFEST + 1)
    except OSError as exc:
        raise ModelError(f"--model {spec}: cannot read the manifest {path} ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_MANIFEST:
        raise ModelError(f"--model {spec}: the manifest {path} is over {MAX_MANIFEST >> 20} MiB; it is not one")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ModelError(f"--model {spec}: the manifest {path} is not JSON; `ollama pull` the model again") from None
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("schemaVersion") != 2 or not isinstance(layers, list):
        raise ModelError(
            f"--model {spec}: the manifest {path} is not an Ollama manifest (schemaVersion 2 with a list "
            "of layers); `ollama pull` the model again"
        )
    for layer in layers:
        if not (
            isinstance(layer, dict)
            and isinstance(layer.get("mediaType"), str)
            and isinstance(layer.get("digest"), str)
            and isinstance(layer.get("size"), int)
            and not isinstance(layer.get("size"), bool)
            and layer["size"] >= 0
        ):
            raise ModelError(
                f"--model {spec}: the manifest {path} has a layer without a media type, digest and size; "
                "`ollama pull` the model again"
            )
    return doc, hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True)
class Found:
    """An Ollama model found and checked: its GGUF `blob`, the blob's `file_digest` (identity's, for
    the fingerprint) and what the report records (`info`)."""

    name: Name
    blob: Path
    file_digest: str
    info: dict


def find(spec: str, remember: bool = True) -> Found:
    """The model `ollama:NAME[:TAG]` names, in `store_dir()`: its manifest read, its one model layer
    taken, the blob's size and SHA-256 checked against the layer's; ModelError (one line) for what
    is refused (see the module's docstring). `remember` as identity.file_digest's."""
    from .identity import file_digest

    name = parse(spec)
    store = store_dir()
    if not store.is_dir():
        raise ModelError(
            f"--model {spec}: no Ollama model store at {store} ({_where_from()}); set {ENV} to the folder "
            "Ollama keeps its models in (`ollama pull NAME` fills it; Ollama's Linux service uses "
            "/usr/share/ollama/.ollama/models)"
        )
    manifest = store.joinpath("manifests", *name.parts)
    if not manifest.is_file():
        raise _unknown(spec, name, store)
    doc, manifest_digest = read_manifest(manifest, spec)
    layers = doc["layers"]
    if any(layer["mediaType"] == ADAPTER for layer in layers):
        raise ModelError(
            f"--model {spec}: this Ollama model carries an adapter layer ({ADAPTER}), which base-bench cannot "
            "apply to a GGUF, and scoring the base model without it would score another model; merge the "
            "adapter into the weights, or score the base model by its own name"
        )
    models = [layer for layer in layers if layer["mediaType"] == MODEL]
    if len(models) != 1:
        why = (
            "has no model layer (a cloud model, or one stored as tensors rather than one GGUF file)"
            if not models
            else f"has {len(models)} model layers, where base-bench reads a model stored as one GGUF file"
        )
        raise ModelError(f"--model {spec}: the manifest {manifest} {why}; give a GGUF file's path instead")
    layer = models[0]
    m = DIGEST.fullmatch(layer["digest"])
    if not m:
        raise ModelError(
            f"--model {spec}: the manifest {manifest} gives the model layer the digest {layer['digest'][:80]!r}, "
            "not sha256: and 64 hex digits; `ollama pull` the model again"
        )
    hexdigest = m.group(1).lower()
    blob = store / "blobs" / f"sha256-{m.group(1)}"
    try:
        st = blob.stat()
    except OSError:
        raise ModelError(
            f"--model {spec}: the model's blob {blob} is missing from the store; `ollama pull {name.shortest}` "
            "fetches it again"
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise ModelError(f"--model {spec}: the model's blob {blob} is not a file")
    if st.st_size != layer["size"]:
        raise ModelError(
            f"--model {spec}: the model's blob {blob} has {st.st_size} bytes, the manifest says {layer['size']}: "
            f"it is incomplete or damaged; `ollama pull {name.shortest}` fetches it again"
        )
    try:
        digest, sha256 = file_digest(blob, remember=remember, plain=True)
    except OSError as exc:
        raise ModelError(f"--model {spec}: cannot read the model's blob {blob} ({exc.strerror})") from None
    if sha256 != hexdigest:
        raise ModelError(
            f"--model {spec}: the model's blob {blob} does not match its digest (its SHA-256 is sha256:{sha256}, "
            f"the manifest says sha256:{hexdigest}): it is damaged; `ollama rm {name.shortest}` and "
            f"`ollama pull {name.shortest}` fetch it again"
        )
    info = {
        "name": name.shortest,
        "host": name.host,
        "namespace": name.namespace,
        "model": name.model,
        "tag": name.tag,
        "digest": f"sha256:{hexdigest}",  # the model layer's, checked against the blob
        "size": st.st_size,
        "manifest": str(manifest),
        "manifest_digest": f"sha256:{manifest_digest}",  # `ollama list` shows its first 12 hex digits as ID
        "store": str(store),
    }
    return Found(name, blob, digest, info)


def blob_of(spec: str) -> Path | None:
    """The blob a `ollama:NAME[:TAG]` names, without reading or checking it (for a prefetch); None
    when there is none to name."""
    try:
        name = parse(spec)
        doc, _ = read_manifest(store_dir().joinpath("manifests", *name.parts), spec)
        models = [layer for layer in doc["layers"] if layer["mediaType"] == MODEL]
        m = DIGEST.fullmatch(models[0]["digest"]) if len(models) == 1 else None
        return store_dir() / "blobs" / f"sha256-{m.group(1)}" if m else None
    except (ModelError, OSError):
        return None

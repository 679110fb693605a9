"""What a sweep scores: MODEL arguments -> members, each with its own folder name, step and tokens.

    specs = expand(["ckpt/checkpoint-*", "org/model@step1000", "base.gguf"], models_file=None)
    members = [member(spec, out_dir, tokens_per_step=4096 * 512) for spec in specs]
    members[0].name, members[0].step        # "ckpt-checkpoint-1000-3fa9c1d2", 1000

A MODEL is anything `base-bench --model` takes (a Hub id, a local folder, a GGUF file, an Ollama
model `ollama:NAME[:TAG]`, kept as `ollama:` and the name `ollama list` shows), a Hub id with a revision (`org/name@step1000`), or a quoted glob (`'ckpt/checkpoint-*'`), which matches
local paths only and is expanded in sorted order; `--models-file FILE` gives one MODEL a line (`#`
starts a comment). A local path is kept absolute, so the same checkpoint is the same member
whichever folder the sweep is started from.

A member's folder name comes from its own path or id and revision alone, never from which other
members exist: a sweep that is resumed or that watches a training run keeps its names. It is the
last two parts of the path (or the Hub id's name and revision), made safe for a file name, and 8 hex
digits of the SHA-256 of the whole absolute path (or id@revision), so that two members never share
a folder: `ckpt/run1/checkpoint-500` -> `run1-checkpoint-500-1c9e2f07`. An Ollama model's is
`ollama-` and its name and tag: `ollama:smollm2:135m` -> `ollama-smollm2-135m-` and 8 hex digits.

A member's step comes from the last of its path's last three parts (or its revision) named `checkpoint-N`,
`step-N`, `stepN`, `step_N`, `global_step_N`, `global_stepN`, `iter_N` or `iter-N` (a Megatron
`iter_0001000` included; a `.gguf` suffix is ignored), else from the `global_step` of the HF Trainer's
`trainer_state.json` in its folder; a member with neither has no step. With `tokens_per_step`, its
tokens seen are step * tokens_per_step.
"""

from __future__ import annotations

import glob
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelError, UsageError

STEP = re.compile(r"^(?:checkpoint|global[-_]?step|step|iter|iteration)[-_]?(\d{1,15})$", re.IGNORECASE)
GLOB = re.compile(r"[*?\[]")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_MODELS_FILE = 1 << 20  # bytes: a models file is a list of paths, not a corpus
TRAINER_STATE = "trainer_state.json"
MAX_TRAINER_STATE = 64 << 20


@dataclass(frozen=True)
class Member:
    """One model of a sweep: `model` as the run's --model takes it, its `revision`, the folder `name`
    under the sweep's out-dir, and its `step` and `tokens` (None where not known)."""

    model: str
    revision: str | None
    name: str
    step: int | None
    tokens: int | None

    @property
    def local(self) -> bool:
        return self.model.startswith("/")

    @property
    def shown(self) -> str:
        return self.model + (f"@{self.revision}" if self.revision else "")


def _split_revision(spec: str) -> tuple[str, str | None]:
    """`org/name@rev` -> (org/name, rev); a local path with an @ in it stays whole."""
    if "@" in spec and not Path(spec).exists():
        model, _, rev = spec.rpartition("@")
        if HUB_ID.match(model) and rev and not GLOB.search(rev) and "/" not in rev.strip("/"):
            return model, rev
        if HUB_ID.match(model):
            raise UsageError(f"{spec}: the revision after @ is empty or not a branch, tag or commit name")
    return spec, None


def read_models_file(path: str | Path) -> list[str]:
    """The MODELs of a --models-file: one a line, blank lines and `#` comments left out."""
    p = Path(path).expanduser()
    try:
        if not p.is_file():
            raise UsageError(f"--models-file {path}: not a file")
        if p.stat().st_size > MAX_MODELS_FILE:
            raise UsageError(
                f"--models-file {path}: over {MAX_MODELS_FILE >> 20} MiB; it should list models, one a line"
            )
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"--models-file {path}: not UTF-8 text") from None
    except OSError as exc:
        raise UsageError(f"--models-file {path}: {exc.strerror or exc}") from None
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return [line for line in lines if line]


def expand(
    models: list[str], models_file: str | Path | None = None, allow_empty: bool = False
) -> list[tuple[str, str | None]]:
    """(model, revision) for each MODEL given and each line of the models file, globs expanded (sorted),
    local paths made absolute, duplicates dropped (first kept). A glob that matches nothing is fine
    with `allow_empty` (a `--watch` waits for it); a plain path that is not there and is not a Hub id
    is refused in one line."""
    specs = list(models) + (read_models_file(models_file) if models_file else [])
    if not specs and not allow_empty:
        raise UsageError("give the models to score: MODEL arguments (paths, globs, Hub ids) or --models-file FILE")
    out: list[tuple[str, str | None]] = []
    for spec in specs:
        spec = spec.strip()
        if not spec:
            raise UsageError("an empty MODEL was given")
        if GLOB.search(spec):
            found = sorted(glob.glob(str(Path(spec).expanduser())))
            out.extend((str(Path(f).absolute()), None) for f in found)
            continue
        model, rev = _split_revision(spec)
        path = Path(model).expanduser()
        if model.startswith("ollama:"):
            out.append((ollama_model(model), None))
        elif path.exists():
            out.append((str(path.absolute()), rev))
        elif HUB_ID.match(model) and not model.startswith((".", "/", "~")):
            out.append((model, rev))
        elif not allow_empty:
            raise UsageError(f"{spec}: no such file or folder, and not a Hub id (org/name)")
    seen: set[tuple[str, str | None]] = set()
    unique = [s for s in out if not (s in seen or seen.add(s))]
    if not unique and not allow_empty:
        raise UsageError(f"no model matches {' '.join(specs)}")
    return unique


def ollama_model(spec: str) -> str:
    """`ollama:` and the name as `ollama list` shows it (the tag filled in), so that `ollama:smollm2`
    and `ollama:smollm2:latest` are one member; UsageError for a name Ollama would refuse."""
    from ..backends.ollama import parse

    try:
        return "ollama:" + parse(spec).shortest
    except ModelError:
        raise UsageError(
            f"{spec}: not an Ollama model name; give ollama:NAME or ollama:NAME:TAG, as `ollama list` shows them"
        ) from None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-.").lower()


def member_name(model: str, revision: str | None = None) -> str:
    """The member's folder name: readable, from its own path or id and revision alone, and unique."""
    ident = model + (f"@{revision}" if revision else "")
    digest = hashlib.sha256(ident.encode("utf-8")).hexdigest()[:8]
    parts = [p for p in Path(model).parts if p not in ("/", "")]
    if model.startswith("ollama:"):  # ollama:[HOST/][NAMESPACE/]MODEL:TAG, whole
        parts = [model.replace("/", "-")]
    if parts and parts[-1].lower().endswith(".gguf"):
        parts[-1] = parts[-1][:-5]
    readable = _slug("-".join(parts[-2:] + ([revision] if revision else [])))[-60:].strip("-.")
    return f"{readable or 'model'}-{digest}"


def step_of_name(model: str, revision: str | None = None) -> int | None:
    """The step a checkpoint's path or revision names (the last part that names one), else None."""
    parts = [p[:-5] if p.lower().endswith(".gguf") else p for p in Path(model).parts[-3:]]
    for part in ([revision] if revision else []) + parts[::-1]:
        m = STEP.match(part or "")
        if m:
            return int(m.group(1))
    return None


def trainer_step(folder: str | Path) -> int | None:
    """`global_step` of the HF Trainer's trainer_state.json in `folder`, if it holds a sane one."""
    p = Path(folder) / TRAINER_STATE
    try:
        if not p.is_file() or p.is_symlink() or p.stat().st_size > MAX_TRAINER_STATE:
            return None
        step = json.loads(p.read_text(encoding="utf-8")).get("global_step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) and 0 <= step < 1 << 62 else None


def member(model: str, revision: str | None = None, tokens_per_step: int | None = None) -> Member:
    """The Member for one expanded (model, revision)."""
    step = step_of_name(model, revision)
    if step is None and model.startswith("/") and Path(model).is_dir():
        step = trainer_step(model)
    tokens = step * tokens_per_step if step is not None and tokens_per_step else None
    return Member(model, revision, member_name(model, revision), step, tokens)

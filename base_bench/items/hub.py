"""Everything that talks to the Hugging Face Hub: tokens, the gated data file, model snapshots.

    path, token = fetch_official_data()            # data/test.jsonl of the gated dataset
    local_dir, commit = download_model("org/name", revision=None, token=token)   # also a PEFT adapter
    local_file, commit = download_model_file("org/name-GGUF", "model.Q4_K_M.gguf", revision=None)

All three go through huggingface_hub and its cache (HF_HOME, HF_HUB_CACHE), so HF_ENDPOINT points
them at a mirror, and HF_HUB_OFFLINE=1 serves them from the cache without a request; what is not
cached then is one line saying so.

Tokens are tried in the card's order: the HF_TOKEN variable, then the token saved by
`hf auth login` (read through huggingface_hub), then, only when stdin is a terminal, a prompt that
does not echo. A token lives in memory only: it is never printed, logged or written to a file, and
error messages are built without it.
"""

from __future__ import annotations

import getpass
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

import huggingface_hub
from huggingface_hub import constants as hf_constants
from huggingface_hub import errors as hf_errors

from ..errors import HubError, UsageError
from . import card

LOCAL_HINT = (
    "To run without the Hub, pass --data bundled (the set shipped in the package; not official), or "
    "--data DIR where DIR/data/test.jsonl is a copy of the data."
)


def saved_token() -> str | None:
    """The token stored by `hf auth login`, ignoring HF_TOKEN (huggingface_hub reads the file)."""
    try:
        from huggingface_hub.utils import _auth

        reader = getattr(_auth, "_get_token_from_file", None)
    except ImportError:
        reader = None
    if reader is not None:
        return reader()
    # Older/newer huggingface_hub: hide HF_TOKEN for the length of one get_token() call.
    hidden = {k: os.environ.pop(k) for k in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN") if k in os.environ}
    try:
        return huggingface_hub.get_token()
    finally:
        os.environ.update(hidden)


def token_candidates(
    prompt: Callable[[str], str] = getpass.getpass, isatty: Callable[[], bool] = lambda: sys.stdin.isatty()
) -> Iterator[tuple[str, str | None]]:
    """Yield (where it came from, token) in the card's order; None means anonymous access."""
    env = os.environ.get("HF_TOKEN") or None
    if env:
        yield "HF_TOKEN", env
    saved = saved_token()
    if saved and saved != env:
        yield "saved login", saved
    if not env and not saved:
        yield "anonymous", None
    if isatty():
        typed = prompt("Hugging Face token with access to the dataset (input hidden): ").strip()
        if typed:
            yield "prompt", typed


def _names(exc: BaseException) -> set[str]:
    # By class name, so that the checks hold whichever HTTP library huggingface_hub uses (httpx2, requests).
    return {c.__name__ for c in type(exc).__mro__}


def _cut_short(exc: BaseException) -> bool:
    """The connection dropped in the middle of a file (huggingface_hub retries this itself first)."""
    if _names(exc) & {"RemoteProtocolError", "ReadError", "ChunkedEncodingError", "IncompleteRead"}:
        return True
    return isinstance(exc, OSError) and "Consistency check failed" in str(exc)


def offline() -> bool:
    """HF_HUB_OFFLINE is set: huggingface_hub answers from its cache and sends no request."""
    return bool(hf_constants.is_offline_mode())


def _not_cached(what: str) -> str:
    return (
        f"HF_HUB_OFFLINE is set and {what} is not in the Hugging Face cache "
        f"({hf_constants.HF_HUB_CACHE}); run once with the network to fill the cache, "
        "or unset HF_HUB_OFFLINE"
    )


def _unreachable(exc: BaseException) -> bool:
    if isinstance(
        exc, (hf_errors.OfflineModeIsEnabled, hf_errors.LocalEntryNotFoundError, ConnectionError, TimeoutError)
    ):
        return True
    return bool(_names(exc) & {"ConnectError", "ConnectTimeout", "ReadTimeout", "NetworkError", "ProxyError"})


def _status(exc: BaseException) -> int | None:
    return getattr(getattr(exc, "response", None), "status_code", None)


def _refused(exc: BaseException) -> bool:
    if isinstance(exc, (hf_errors.GatedRepoError, hf_errors.RepositoryNotFoundError)):
        return True
    return _status(exc) in (401, 403)


def _why_refused(source: str, exc: BaseException) -> str:
    """One short reason per token tried; built from the source's name and the status, never the token."""
    status = _status(exc)
    if source == "anonymous":
        return "no token: HF_TOKEN is not set and no `hf auth login` token is saved"
    if status == 403:
        return f"{source}: its account has not been granted access (403)"
    if status == 401:
        return f"{source}: the Hub does not accept this token (401: invalid or expired)"
    return f"{source}: refused ({status or type(exc).__name__})"


def _cut_message(what: str, exc: BaseException) -> str:
    return (
        f"the download of {what} was cut off before the end of the file, also on huggingface_hub's retries "
        f"({type(exc).__name__}); nothing incomplete was kept in the cache, so running again starts afresh"
    )


def fetch_official_data(
    revision: str | None = None,
    prompt: Callable[[str], str] = getpass.getpass,
    isatty: Callable[[], bool] = lambda: sys.stdin.isatty(),
) -> tuple[str, str | None]:
    """Download the card's data file; return (local path, the token that worked)."""
    reasons = []
    for source, token in token_candidates(prompt, isatty):
        try:
            path = huggingface_hub.hf_hub_download(
                repo_id=card.HUB_DATASET,
                filename=card.HUB_DATA_FILE,
                repo_type="dataset",
                revision=revision,
                token=token if token is not None else False,
            )
            return path, token
        except Exception as exc:  # noqa: BLE001 - sorted into clear messages below
            if _cut_short(exc):
                raise HubError(
                    f"{_cut_message(f'{card.HUB_DATA_FILE} from {card.HUB_DATASET}', exc)}. {LOCAL_HINT}"
                ) from None
            if _unreachable(exc):
                if offline():
                    raise HubError(
                        f"{_not_cached(f'{card.HUB_DATA_FILE} of {card.HUB_DATASET}')}. {LOCAL_HINT}"
                    ) from None
                raise HubError(f"cannot reach the Hugging Face Hub to fetch {card.HUB_DATASET}. {LOCAL_HINT}") from None
            if isinstance(exc, hf_errors.RevisionNotFoundError):
                raise HubError(f"dataset {card.HUB_DATASET} has no revision {revision or 'main'!r}") from None
            if isinstance(exc, hf_errors.EntryNotFoundError):
                raise HubError(
                    f"dataset {card.HUB_DATASET} has no file {card.HUB_DATA_FILE} at revision {revision or 'main'}"
                ) from None
            if _refused(exc):
                reasons.append(_why_refused(source, exc))
                continue
            raise HubError(f"fetching {card.HUB_DATASET} failed ({type(exc).__name__}). {LOCAL_HINT}") from None
    raise HubError(
        f"access to the gated dataset {card.HUB_DATASET} was refused ({'; '.join(reasons) or 'no token tried'}). "
        f"Log in with `hf auth login` or set HF_TOKEN, with an account that has accepted the dataset's terms at "
        f"https://huggingface.co/datasets/{card.HUB_DATASET}. {LOCAL_HINT}"
    )


WEIGHT_IGNORE = ["*.msgpack", "*.h5", "*.ot", "*.onnx", "*.gguf", "*.pth", "original/*", "*.tflite", "*.mlmodel"]


def download_model(
    repo_id: str,
    revision: str | None = None,
    token: str | None = None,
    what: str = "model",
    only: list[str] | None = None,
) -> tuple[str, str]:
    """Fetch a model repo snapshot (safetensors preferred); return (local dir, commit sha).
    `what` names the repo in errors: "model", or "adapter" for a PEFT adapter (--peft); `only`,
    if given, is the file patterns to fetch (an adapter's two files, not a training run's leftovers).
    Under HF_HUB_OFFLINE the snapshot comes from the cache: the repo cannot be listed then, so *.bin
    is left out of the completeness check, which holds for a snapshot cached either way."""
    try:
        ignore = list(WEIGHT_IGNORE)
        if offline() or any(
            f.endswith(".safetensors") for f in huggingface_hub.list_repo_files(repo_id, revision=revision, token=token)
        ):
            ignore.append("*.bin")
        local = huggingface_hub.snapshot_download(
            repo_id, revision=revision, token=token, ignore_patterns=ignore, allow_patterns=only
        )
    except Exception as exc:  # noqa: BLE001
        raise _model_error(exc, what, repo_id, revision) from None
    return local, Path(local).name


def gguf_name_problem(name: str) -> str | None:
    """Why `name` cannot be a --gguf-file (one line), or None: it must be a relative path inside the
    repo, made of plain names (a subfolder is fine: sub/model.gguf), ending in .gguf."""
    if not name or name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in name.split("/")):
        why = "a path inside the repo, such as model.gguf or sub/model.gguf, without '..', '.', '\\' or a leading '/'"
    elif not name.lower().endswith(".gguf"):
        why = "a .gguf file of the repo"
    else:
        return None
    return f"--gguf-file {name!r}: give {why}"


def download_model_file(repo_id: str, filename: str, revision: str | None = None, token: str | None = None):
    """Fetch one file of a model repo into the Hugging Face cache (a GGUF inside a Hub repo: only that
    file, not the other quantisations beside it); return (its path in the cache's snapshot, commit).
    HubError (one line) when the repo has no such file, listing the .gguf files it has."""
    why = gguf_name_problem(filename)
    if why:
        raise UsageError(why)
    try:
        local = huggingface_hub.hf_hub_download(repo_id, filename, revision=revision, token=token)
    except Exception as exc:  # noqa: BLE001
        if isinstance(exc, hf_errors.EntryNotFoundError) and not isinstance(exc, hf_errors.LocalEntryNotFoundError):
            at = f" at revision {revision}" if revision else ""
            raise HubError(
                f"model {repo_id} has no file {filename}{at}{_gguf_files(repo_id, revision, token)}"
            ) from None
        raise _model_error(exc, "model", repo_id, revision, f"{filename} of model {repo_id}") from None
    path = Path(local)
    snapshot = path.parents[len(PurePosixPath(filename).parts) - 1]
    return str(path), snapshot.name


def _gguf_files(repo_id: str, revision: str | None, token: str | None, most: int = 12) -> str:
    """'; its .gguf files: a.gguf, b.gguf' (or that it has none), for the error about a missing file."""
    try:
        files = [
            f for f in huggingface_hub.list_repo_files(repo_id, revision=revision, token=token) if f.endswith(".gguf")
        ]
    except Exception:  # noqa: BLE001 - the listing is a hint; the error stands without it
        return ""
    if not files:
        return "; it has no .gguf file"
    more = f" and {len(files) - most} more" if len(files) > most else ""
    return f"; its .gguf files: {', '.join(sorted(files)[:most])}{more}"


def _model_error(
    exc: BaseException, what: str, repo_id: str, revision: str | None, item: str | None = None
) -> HubError:
    """One line for a failed download of a model (or an adapter) repo, or of `item` (one of its files)."""
    item = item or f"{what} {repo_id}"
    instead = "a local directory or .gguf file" if what == "model" else f"a local {what} directory"
    if _cut_short(exc):
        return HubError(_cut_message(item, exc))
    if _unreachable(exc):
        if offline():
            return HubError(_not_cached(item + (f" (revision {revision})" if revision else "")))
        return HubError(f"cannot reach the Hugging Face Hub to download {item}; pass {instead} instead")
    if isinstance(exc, hf_errors.RevisionNotFoundError):
        return HubError(f"{what} {repo_id} has no revision {revision!r}")
    if isinstance(exc, hf_errors.GatedRepoError):
        return HubError(
            f"access to the gated {what} {repo_id} was refused ({_status(exc)}); accept its terms at "
            f"https://huggingface.co/{repo_id}, then set HF_TOKEN or run `hf auth login`"
        )
    if _refused(exc):
        return HubError(
            f"{what} {repo_id} was not found on the Hub, or access to it was refused (is it gated? set HF_TOKEN)"
        )
    return HubError(f"downloading {item} failed ({type(exc).__name__})")

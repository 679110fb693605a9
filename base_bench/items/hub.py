"""Everything that talks to the Hugging Face Hub: tokens, the gated data file, model snapshots.

    path, token = fetch_official_data()            # data/test.jsonl of the gated dataset
    local_dir, commit = download_model("org/name", revision=None, token=token)   # also a PEFT adapter

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
from pathlib import Path

import huggingface_hub
from huggingface_hub import errors as hf_errors

from ..errors import HubError
from . import card

LOCAL_HINT = (
    "To run without the Hub, pass --local-data DIR where DIR/data/test.jsonl is a copy of the data "
    "(for this repository's own bundled set: --local-data .)."
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
                raise HubError(f"cannot reach the Hugging Face Hub to fetch {card.HUB_DATASET}. {LOCAL_HINT}") from None
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
    if given, is the file patterns to fetch (an adapter's two files, not a training run's leftovers)."""
    instead = "a local directory or .gguf file" if what == "model" else f"a local {what} directory"
    try:
        files = huggingface_hub.list_repo_files(repo_id, revision=revision, token=token)
        ignore = list(WEIGHT_IGNORE)
        if any(f.endswith(".safetensors") for f in files):
            ignore.append("*.bin")
        local = huggingface_hub.snapshot_download(
            repo_id, revision=revision, token=token, ignore_patterns=ignore, allow_patterns=only
        )
    except Exception as exc:  # noqa: BLE001
        if _cut_short(exc):
            raise HubError(_cut_message(f"{what} {repo_id}", exc)) from None
        if _unreachable(exc):
            raise HubError(
                f"cannot reach the Hugging Face Hub to download {what} {repo_id}; pass {instead} instead"
            ) from None
        if isinstance(exc, hf_errors.RevisionNotFoundError):
            raise HubError(f"{what} {repo_id} has no revision {revision!r}") from None
        if isinstance(exc, hf_errors.GatedRepoError):
            raise HubError(
                f"access to the gated {what} {repo_id} was refused ({_status(exc)}); accept its terms at "
                f"https://huggingface.co/{repo_id}, then set HF_TOKEN or run `hf auth login`"
            ) from None
        if _refused(exc):
            raise HubError(
                f"{what} {repo_id} was not found on the Hub, or access to it was refused (is it gated? set HF_TOKEN)"
            ) from None
        raise HubError(f"downloading {what} {repo_id} failed ({type(exc).__name__})") from None
    return local, Path(local).name

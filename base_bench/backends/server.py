"""The server backend: a model behind an OpenAI-compatible `/v1/completions` server (vLLM, SGLang,
a hosted completions API), scored through its prompt log-probs.

    backend = ServerBackend.connect("http://127.0.0.1:8000/v1", "smollm2", api_key_env="MY_KEY",
                                    concurrency=16)   # /v1/models, the tokenizer, the server check
    report = evaluate(backend, backend.tokenizer)
    backend.close()

What is sent: the token ids `encode_item` makes with the model's own tokenizer (context and
continuation tokenized apart, as the card says), one prompt per choice, several prompts per request,
`max_tokens: 1`, and either vLLM's `prompt_logprobs: 0` (where the server offers it and it equals
the echoed values exactly) or `echo: true, logprobs: 0`. The tokenizer is `--tokenizer` (a folder,
a Hub id or a .gguf file), by default the model root that `/v1/models` reports, where that is a
folder here or a Hub id.

Before any item is scored (and before anything is written), `connect` (or `open` then `check`):
- reads `/v1/models` (the served name, its root, its max_model_len) and `/version` where offered;
  a server recognised as llama.cpp's own llama-server (its `/v1/models` entries are `owned_by:
  "llamacpp"` with llama.cpp's `meta`, or, where no entry names a root, its `/props` has llama.cpp's
  `model_path` or `default_generation_settings`) is refused here in one line naming `--backend
  llama.cpp --model` and the GGUF path it reports: it ignores `echo` and returns no prompt log-probs;
- probes one request for the protocol (prompt_logprobs or echo), refusing a server that will not
  take token-id prompts (llama-cpp-python's answers HTTP 500);
- runs the server check (`prompt_logprobs.check_engine`): one log-prob per prompt token, the copy
  and alignment tests, and invariance to batching and cached prefixes;
and `check_tokenizer(items)` compares the tokenizer with the server's `/tokenize` on every text
(where offered). The text goes in both dialects: as `prompt` (vLLM's field, with
`add_special_tokens: false`) and as `content` (llama.cpp's, with `add_special: false`); each server
ignores the other's fields. An empty list of ids for a text that has tokens here is a request the
server did not understand, said in one line, never read as a tokenizer mismatch. While scoring, the
token strings the server echoes are compared with the tokenizer's too. A mismatch is refused,
naming the item.

Faults: connection errors, timeouts (`request_timeout` seconds per request, all of it), HTTP 429
and 5xx are retried up to `max_retries` times, with exponential backoff (BACKOFF_BASE doubling, at
most BACKOFF_CAP, honouring Retry-After) and jitter; then one line names the server and the last
status. Other statuses fail at once. Requests run concurrently on one asyncio loop; SIGINT and
SIGTERM cancel the requests in flight (their connections are closed) before the CLI's handler
stops the run. The API key is read from the environment variable `api_key_env` names (visible
ASCII only, else UsageError before any request); it is sent as a bearer token, registered with
base_bench.redact, and never printed, logged or written. So is every secret --base-url carries: its
password (as given, percent-decoded, and as the Basic credential httpx sends), its user name where it
has no password, and every value of its query (sent with every request); the server's own messages
are cleaned of each of them whatever its length, as of the key. The URL is shown as scheme, host,
port and path only (`public_url`), and a URL that cannot be parsed is refused in one line that shows
none of it (a password holding an unencoded '/' would otherwise be read as the host and the port).

Every answer is untrusted (docs/operations.md, "Served answers"): JSON through untrusted.loads;
`Accept-Encoding: identity` asked, gzip/deflate decoded here within a cap in proportion to the
prompt tokens sent (a body that does not decode is retried as a transport failure); a 3xx is
refused, never followed; every field's type is checked and every number converted with overflow
caught; the strings a report keeps (root, version, system_fingerprint) pass redact.stored. The
check's invariants hold for every answer while scoring: the value count the probe established,
every log-prob finite and at most MAX_LOGPROB, choice indices 0..n-1 once each; a violation is a
ModelError naming the item (the finished items stay saved for --resume).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import os
import random
import re
import signal
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, unquote_plus, urlsplit, urlunsplit

from .. import untrusted
from ..errors import BaseBenchError, ModelError, ServerError, UsageError
from ..redact import REDACTED, redact, register, stored
from .base import Backend
from .identity import package_version, tokenizer_fingerprint
from .prompt_logprobs import (
    KNOWN,
    MAX_LOGPROB,
    SPREAD_MAX,
    EngineCheckError,
    PromptScorer,
    check_engine,
    check_spread_max,
)

log = logging.getLogger("base_bench")

BACKOFF_BASE = 0.5  # seconds before the first retry; doubled for each next one
BACKOFF_CAP = 30.0  # the longest wait between two tries (Retry-After included)
RETRY_STATUS = {408, 409, 425, 429}  # plus every 5xx
MAX_PROMPTS_PER_REQUEST = 16
MAX_RESPONSE_BYTES = 256 << 20  # an answer larger than this is refused, not read
ANSWER_BASE_BYTES = 4 << 20  # an answer's decoded size: at most this ...
ANSWER_BYTES_PER_TOKEN = 2048  # ... plus this per prompt token sent (vLLM's echo takes about 100)
MAX_MODEL_LEN = 1 << 24  # a max_model_len above this is not believed
PROPS_BYTES = 1 << 20  # the most a /props answer (llama.cpp's server: settings and chat templates) may decode to
# The defaults of ServerBackend and of the command line's --concurrency, --request-timeout and
# --max-retries: one set, declared here and nowhere else.
DEFAULT_CONCURRENCY = 8  # requests in flight at once
DEFAULT_REQUEST_TIMEOUT = 300.0  # seconds one request may take, all of it
DEFAULT_MAX_RETRIES = 5  # tries after the first for a connection error, a timeout, HTTP 429 or 5xx


@dataclass(frozen=True)
class ServedDevice:
    """Where a served model computes, for evaluate(): not a torch device, so no out-of-memory
    handling applies, `--batch-size auto` takes the CPU value, and the report says "server"."""

    type: str = "server"

    def __str__(self) -> str:
        return self.type


_URL_UNSAFE = re.compile(r"[\x00-\x20\x7f-\x9f]")  # controls, space: urllib drops some, httpx refuses others


def public_url(url: str) -> str:
    """`url` as scheme, host, port and path (no user, password, query or fragment): what messages and
    the report show. Never raises: a URL that cannot be parsed is "(a URL that cannot be read)"."""
    if not isinstance(url, str) or _URL_UNSAFE.search(url):
        return "(a URL that cannot be read)"
    try:
        p = urlsplit(url)
        host, port = p.hostname or "", p.port
    except (ValueError, TypeError):
        return "(a URL that cannot be read)"
    if _at_after_host(url, p):
        return "(a URL that cannot be read)"
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{port}" if port else "")
    return urlunsplit((p.scheme, netloc, p.path.rstrip("/"), "", ""))


UNREADABLE_URL = (
    "--base-url cannot be parsed as a URL (a port that is not a number from 1 to 65535, an unclosed '[', "
    "a host name that is not valid); it is not shown, as it may hold a password, and a user name or "
    "password holding '/', '?', '#', '@' or ':' must be percent-encoded (%2F, %3F, %23, %40, %3A)"
)


def _at_after_host(url: str, p) -> bool:
    """Whether an '@' follows the host: in "http://user:12/x@host/v1" urllib and httpx2 read the host
    "user", the port 12 and a path holding the rest of the password."""
    return "@" in (url[url.index("//") + 2 + len(p.netloc) :] if p.netloc else url)


def _split_url(url) -> tuple:
    """`url` split by urllib, checked as httpx2 will send it: UsageError in one line that shows none
    of it where it cannot be parsed, or where urllib and httpx2 could read its host apart."""
    if not isinstance(url, str) or not url.strip():
        raise UsageError("--base-url is empty; give the server's /v1 root (e.g. http://127.0.0.1:8000/v1)")
    if _URL_UNSAFE.search(url):
        raise UsageError(
            "--base-url holds a space, a line break or a control character; give the URL alone (it is not "
            "shown, as it may hold a password)"
        )
    try:
        p = urlsplit(url)
        host, port, _, _ = p.hostname, p.port, p.username, p.password
    except ValueError:
        raise UsageError(UNREADABLE_URL) from None
    if p.scheme not in ("http", "https") or not host:
        shown = f"{public_url(url)!r} " if p.netloc and "@" not in url else ""
        raise UsageError(f"--base-url {shown}is not an http:// or https:// URL (e.g. http://127.0.0.1:8000/v1)")
    if _at_after_host(url, p):
        raise UsageError(
            "--base-url holds an '@' after its host: a user name or password holding '/', '?' or '#' must be "
            "percent-encoded (%2F, %3F, %23), and an '@' elsewhere as %40; it is not shown, as it may hold a password"
        )
    import httpx2

    default = {"http": 80, "https": 443}[p.scheme]
    try:
        sent = httpx2.URL(url)
        same = sent.host.lower().strip("[]") == host.strip("[]") or sent.raw_host.decode("ascii").lower() == host
        same = same and (sent.port or default) == (port or default)
    except (httpx2.InvalidURL, ValueError, TypeError, UnicodeError):
        raise UsageError(UNREADABLE_URL) from None
    if not same:  # the host urllib shows would not be the one httpx2 connects to
        raise UsageError(UNREADABLE_URL)
    return p


def _url_secrets(p) -> list[str]:
    """The secrets a split URL carries: its password (as given, percent-decoded), the Basic credential
    httpx2 makes of it, its user name where it has no password (then the user name is the credential),
    and every value of its query (a part without '=' is a value). Longest first, none empty."""
    out = []
    if p.username is not None or p.password is not None:
        user, password = unquote(p.username or ""), unquote(p.password or "")
        out += [p.password or "", password] if p.password is not None else [p.username or "", user]
        out.append(base64.b64encode(f"{user}:{password}".encode()).decode("ascii"))
    for part in re.split("[&;]", p.query):
        name, eq, value = part.partition("=")
        v = value if eq else name
        out += [v, unquote(v), unquote_plus(v)]
    return sorted({s for s in out if s.strip()}, key=len, reverse=True)


class _TokenMismatch(Exception):
    """The server's string for a prompt token is not the tokenizer's (prompt index, position, ours, theirs)."""

    def __init__(self, prompt: int, pos: int, token: int, ours: str, theirs: str):
        super().__init__(prompt, pos, token, ours, theirs)
        self.prompt, self.pos, self.token, self.ours, self.theirs = prompt, pos, token, ours, theirs

    def line(self, where: str) -> str:
        return (
            f"the tokenizer does not match the server's: token {self.pos} of the prompt, id {self.token}, "
            f"is {self.ours!r} in the tokenizer and {_shown(self.theirs)} on the server; pass the served model's "
            "own tokenizer with --tokenizer"
        )


class _BadAnswer(Exception):
    """An answer for prompt `prompt` (its index in the request's list) that breaks what the server
    check established; `what` says how, with what the server sent shown redacted and clipped."""

    def __init__(self, prompt: int, what: str):
        super().__init__(prompt, what)
        self.prompt, self.what = prompt, what


class ServerBackend(Backend):
    """A model served over HTTP, as the Backend `evaluate()` asks (see backends/base.py)."""

    name = "server"
    device = ServedDevice()
    dtype = "served"

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer=None,
        *,
        api_key_env: str | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff: tuple[float, float] = (BACKOFF_BASE, BACKOFF_CAP),
        max_spread: float | None = None,
        revision: str | None = None,
    ):
        """`tokenizer`: a transformers tokenizer, or where to load one (a folder, a Hub id, a .gguf
        file); None takes the model root the server reports. `revision`: the branch, tag or commit
        of that tokenizer on the Hub (--revision), for a Hub id only; its commit names the run.
        `max_spread`: the server check's limit on the invariance spread, nats per token (None:
        SPREAD_MAX; a larger one makes the run non-official, and is part of the run's identity).
        Nothing is sent until `open`."""
        p = _split_url(base_url)
        for name, v, low in (("--concurrency", concurrency, 1), ("--max-retries", max_retries, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise UsageError(f"{name} must be a whole number of {low} or more, not {v!r}")
        if not (isinstance(request_timeout, (int, float)) and 0 < request_timeout < math.inf):
            raise UsageError(f"--request-timeout must be a number of seconds above 0, not {request_timeout!r}")
        self._url_secrets = _url_secrets(p)
        for secret in self._url_secrets:
            register(secret)
        # the parts requests are made of: the path without its trailing "/", the query sent with every request
        self._parts = (p.scheme, p.netloc, p.path.rstrip("/"), p.query)
        self.url = public_url(base_url)
        self.where = f"the server at {self.url}"
        self.served_model = model
        self.concurrency = concurrency
        self.request_timeout = float(request_timeout)
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_spread = check_spread_max(max_spread)
        self._key = _read_key(api_key_env)
        own = [(s, REDACTED) for s in self._url_secrets] + ([(self._key, "<api key>")] if self._key else [])
        self._own = sorted(own, key=lambda x: len(x[0]), reverse=True)  # what _scrub removes, whatever its length
        self.api_key_env = api_key_env
        self._tokenizer_spec = tokenizer if isinstance(tokenizer, (str, Path)) or tokenizer is None else None
        self.tokenizer = None if self._tokenizer_spec is not None or tokenizer is None else tokenizer
        if revision is not None and self.tokenizer is not None:
            raise UsageError("--revision pins a tokenizer loaded from the Hub, not one handed in")
        self.revision = revision
        self.tokenizer_commit: str | None = None  # the commit --revision resolved to
        self.root: str | None = None
        self.server_version: str | None = None
        self.system_fingerprint: str | None = None
        self.protocol: str | None = None  # "prompt_logprobs" or "echo", found by the probe
        self.echo_extra: int | None = (
            None  # echoed values past the prompt's (1: the generated token's), found by the probe
        )
        self.check_record: dict | None = None
        self.tokenizer_source: str | None = None
        self.tokenize_offered: bool | None = None
        self.counts = {"requests": 0, "retries": 0, "prompts": 0}
        self._loop = asyncio.new_event_loop()
        self._http = None
        self._strings: dict[int, tuple[str, ...]] = {}

    # ------------------------------------------------------------------ connecting

    @classmethod
    def connect(cls, base_url: str, model: str, tokenizer=None, **kwargs) -> ServerBackend:
        """`open` and `check`: a backend whose server passed the server check."""
        backend = cls(base_url, model, tokenizer, **kwargs)
        try:
            backend.open()
            backend.check()
        except BaseException:
            backend.close()
            raise
        return backend

    def open(self) -> None:
        """Read /v1/models (and /version where offered) and load the tokenizer. No scoring request."""
        models = self._run(self._get_json(self._endpoint("/models"), "/v1/models"))
        entries = models.get("data") if isinstance(models, dict) else None
        if not isinstance(entries, list):
            raise ServerError(
                f"{self.where} answered /v1/models without a model list; is it an OpenAI-compatible /v1 root?"
            )
        self._refuse_llama_cpp(entries)
        entry = next((e for e in entries if isinstance(e, dict) and e.get("id") == self.served_model), None)
        if entry is None:
            names = [_shown_id(e.get("id")) for e in entries[:10] if isinstance(e, dict)]
            raise UsageError(
                f"{self.where} does not serve {self.served_model!r}; it serves {', '.join(names) or 'nothing'} "
                "(pass one of those with --model)"
            )
        root = entry.get("root")
        self.root = stored(root, "model root (/v1/models)") if isinstance(root, str) and root else None
        max_len = entry.get("max_model_len")
        if isinstance(max_len, int) and not isinstance(max_len, bool) and 1 < max_len <= MAX_MODEL_LEN:
            self.window = max_len - 1  # room for the one generated token every request asks for
        self.server_version = self._run(self._version())
        if self.tokenizer is None:
            root = None if (self.root or "").startswith("(withheld") else self.root
            self.tokenizer, self.tokenizer_source, self.tokenizer_commit = _load_tokenizer(
                self._tokenizer_spec, root, self.where, self.revision
            )
        else:
            self.tokenizer_source = "given"
        self.vocab_size = len(self.tokenizer)
        from .transformers import tokenizer_adds_bos

        self.expects_bos = tokenizer_adds_bos(self.tokenizer)
        self.model_name = self.root

    def _refuse_llama_cpp(self, entries: list) -> None:
        """EngineCheckError (one line) where the server is llama.cpp's own llama-server, which ignores
        `echo` and so returns no prompt log-probs: its /v1/models entries say `owned_by: "llamacpp"`
        or carry its `meta`; where no entry names a root (vLLM and SGLang name one), /props is asked
        too. The line names the GGUF file the server reports (/props `model_path`), for --backend
        llama.cpp."""
        dicts = [e for e in entries[:100] if isinstance(e, dict)]
        marked = any(e.get("owned_by") == "llamacpp" or _llama_cpp_meta(e.get("meta")) for e in dicts)
        if not marked and any(isinstance(e.get("root"), str) and e.get("root") for e in dicts):
            return
        props = self._run(self._props())
        if not (marked or _llama_cpp_props(props)):
            return
        path = props.get("model_path") if isinstance(props, dict) else None
        model = _shown_path(path)
        raise EngineCheckError(
            f"{self.where} is llama.cpp's llama-server, which returns no prompt log-probs (it ignores `echo`), so "
            f"--backend server cannot score it; score the GGUF file it serves with --backend llama.cpp --model {model}"
        )

    async def _props(self):
        """llama.cpp's /props (at the server's root), read within PROPS_BYTES; None where the server
        has none or answers it with an error."""
        try:
            url = self._endpoint("/props", root=True)
            return await self._request("GET", url, None, "/props", optional=True, retry=False, limit=PROPS_BYTES)
        except ServerError:
            return None

    def check(self) -> dict:
        """The protocol probe, then the server check (prompt_logprobs.check_engine); the record the
        report keeps. EngineCheckError (one line) when the server fails it."""
        if self.check_record is not None:
            return self.check_record
        if self.tokenizer is None:
            self.open()
        probe = self._probe()
        avoid = sorted(set(self.tokenizer.all_special_ids) | set(getattr(self.tokenizer, "added_tokens_decoder", {})))
        try:
            record = check_engine(
                self.logprobs,
                self.vocab_size,
                avoid=avoid,
                label=self.where,
                spread_max=SPREAD_MAX if self.max_spread is None else self.max_spread,
            )
        except _TokenMismatch as m:
            raise ModelError(f"{self.where}: {m.line(self.where)}") from None
        except _BadAnswer as b:
            raise EngineCheckError(f"{self.where} failed the server check: {b.what}; {KNOWN}") from None
        self.check_record = {**record, "protocol": probe}
        return self.check_record

    def _probe(self) -> dict:
        """One request that finds how to read prompt log-probs: vLLM's prompt_logprobs where the server
        offers them and they equal the echoed values exactly, else the echoed ones. A server that
        will not take a token-id prompt is refused here."""
        ids = _probe_ids(self.tokenizer)
        body = {**self._body([ids]), "echo": True, "logprobs": 0}
        note = None
        try:
            try:
                reply = self._run(self._post("/completions", {**body, "prompt_logprobs": 0}))
            except ServerError as exc:
                if exc.status not in (400, 422):
                    raise
                note = f"refused (HTTP {exc.status})"  # a strict server that does not know the field
                reply = self._run(self._post("/completions", body))
        except ServerError as exc:
            if exc.status not in (400, 422, 500):
                raise
            raise EngineCheckError(
                f"{self.where} refused a prompt given as token ids ({_clip(exc.detail, 160)}); base-bench sends the token "
                f"ids of the card's tokenization, so the server must take them; {KNOWN}"
            ) from None
        choice = _choices(reply, 1, self.where)[0]
        self.system_fingerprint = stored(reply.get("system_fingerprint"), "system_fingerprint")
        echoed = _probe_echo(choice, len(ids), self.where)
        self.echo_extra = len(echoed) - len(ids) if len(echoed) in (len(ids), len(ids) + 1) else None
        echoed = echoed[: len(ids)]
        offered = choice.get("prompt_logprobs")
        self.protocol = "echo"
        if note is None and not isinstance(offered, list):
            note = "not offered"
        elif note is None:
            try:
                values = _prompt_logprob_values(offered, ids, self.where)
            except (EngineCheckError, _BadAnswer) as exc:
                values, note = None, f"not usable: {exc if isinstance(exc, EngineCheckError) else exc.what}"
            if values is not None and values != echoed:
                note = "differs from the echoed log-probs"
            elif values is not None:
                self.protocol, note = "prompt_logprobs", "offered, equal to the echoed log-probs"
        return {"protocol": self.protocol, "prompt_logprobs": note}

    def check_tokenizer(self, items) -> dict:
        """Compare the tokenizer with the server's /tokenize on every text of `items` (context and
        each continuation, no special tokens added); ModelError naming the first item that differs.
        A server without /tokenize is checked through the token strings it echoes, while scoring."""
        texts = [(it.id, what, text) for it in items for what, text in _texts(it)]
        if not texts:
            return {"tokenize": "no items"}
        first = self._run(self._tokenize(texts[0][2], optional=True))
        if first is None:
            self.tokenize_offered = False
            return {"tokenize": "not offered; the echoed token strings are compared instead"}
        self.tokenize_offered = True
        diffs = [self._token_diff(texts[0][2], first)]
        del first

        async def compared(text: str):  # each answer compared as it arrives, then dropped: memory stays bounded
            return self._token_diff(text, await self._tokenize(text))

        diffs += self._run(self._gather([compared(t) for _, _, t in texts[1:]]))
        for (item, what, _), diff in zip(texts, diffs):
            if diff is not None:
                ours, theirs, at = diff
                if theirs == 0:  # the text has tokens: an empty list is a request the server did not read
                    raise ServerError(
                        f"{self.where} answered /tokenize with no token ids for item {item}'s {what} ({ours} ids "
                        "here): it did not understand the request, which gives the text as `prompt` (vLLM's "
                        "field) and as `content` (llama.cpp's); a server that reads /tokenize otherwise cannot be "
                        "checked, so the run stops"
                    )
                raise ModelError(
                    f"item {item}: the tokenizer does not match the server's: its {what} tokenizes to "
                    f"{ours} ids here and {theirs} on the server, first differing at token {at}; pass "
                    "the served model's own tokenizer with --tokenizer"
                )
        return {"tokenize": f"compared on {len(texts)} texts, all equal"}

    def _token_diff(self, text: str, theirs: list[int]) -> tuple[int, int, int] | None:
        """None where the server's ids for `text` are the tokenizer's; else (how many ids here, how many
        there, the first position where they differ)."""
        ours = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if theirs == ours:
            return None
        at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        return len(ours), len(theirs), at

    # ------------------------------------------------------------------ what evaluate() asks

    def identity(self) -> dict:
        """What --resume checks: the server's model name, root and version, and the tokenizer (with
        the commit --revision pinned it to, where given); the server check's spread limit where one
        other than SPREAD_MAX was given. The last two only when given, so older runs still resume."""
        out = {
            "kind": "server",
            "served_model": self.served_model,
            "root": self.root,
            "server_version": self.server_version,
            "tokenizer": tokenizer_fingerprint(self.tokenizer),
        }
        if self.tokenizer_commit is not None:
            out["tokenizer_revision"] = self.tokenizer_commit
        return {**out, "max_spread": self.max_spread} if self.max_spread is not None else out

    def info(self) -> dict:
        """config.model for the report (the CLI's model_info)."""
        return {
            "spec": self.served_model,
            "kind": "server",
            "path": None,
            "revision": None,
            "fingerprint": None,
            "cache": {"status": "not-loaded", "path": None},
            "identity": self.identity(),
        }

    def describe(self) -> dict:
        return {
            "server": {
                "base_url": self.url,
                "served_model": self.served_model,
                "root": self.root,
                "window": self.window,
                "server_version": self.server_version,
                "protocol": self.protocol,
                "tokenizer": self.tokenizer_source if self.tokenizer is not None else None,
                "tokenizer_revision": (
                    {"requested": self.revision, "commit": self.tokenizer_commit} if self.revision is not None else None
                ),
                "tokenize_checked": self.tokenize_offered,
                "concurrency": self.concurrency,
                "request_timeout_s": self.request_timeout,
                "max_retries": self.max_retries,
                "api_key_env": self.api_key_env,
            }
        }

    def fingerprint(self) -> str:
        import hashlib

        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:16]

    def spec(self) -> str:
        return self.served_model

    def versions(self) -> dict:
        return {
            "server": self.server_version,
            "system_fingerprint": self.system_fingerprint,
            "httpx2": package_version("httpx2"),
            "transformers": package_version("transformers"),
            "tokenizers": package_version("tokenizers"),
        }

    def pick_scorer(self, longest_first, pad_id, ranks):
        """The prompt-log-prob scorer, and the server check's record (run now if `check` was not)."""
        if ranks.world > 1:
            raise UsageError("--backend server runs in one process; give the server more work with --concurrency")
        record = self.check()
        return _ServerScorer(self), record

    def close(self) -> None:
        if self._loop.is_closed():
            return
        if self._http is not None:
            self._loop.run_until_complete(self._http.aclose())
            self._http = None
        self._loop.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # ------------------------------------------------------------------ the engine

    def logprobs(self, prompts: list[list[int]]) -> list[list[float | None]]:
        """The `PromptLogprobs` of this server: for each prompt, None then log p(token_i | tokens_<i).
        Raises _TokenMismatch (prompt index) when an echoed token string is not the tokenizer's."""
        if not prompts:
            return []
        per = min(MAX_PROMPTS_PER_REQUEST, max(1, math.ceil(len(prompts) / self.concurrency)))
        starts = list(range(0, len(prompts), per))
        replies = self._run(self._gather([self._score(prompts[s : s + per], s) for s in starts]))
        return [v for r in replies for v in r]

    async def _score(self, prompts: list[list[int]], offset: int) -> list[list[float | None]]:
        body = self._body(prompts)
        if self.protocol == "prompt_logprobs":
            body["prompt_logprobs"] = 0
        else:
            body.update(echo=True, logprobs=0)
        reply = await self._post("/completions", body, tokens=sum(map(len, prompts)))
        out = []
        strict = self.check_record is not None  # during the check, check_engine says what is wrong with a shape
        for k, (choice, ids) in enumerate(zip(_choices(reply, len(prompts), self.where), prompts)):
            try:
                if self.protocol == "prompt_logprobs":
                    entries = choice.get("prompt_logprobs")
                    if not isinstance(entries, list):
                        raise _BadAnswer(k, f"it stopped returning prompt_logprobs (sent {_shown(entries)})")
                    if strict and len(entries) != len(ids):
                        raise _BadAnswer(
                            k, f"it returned {len(entries)} prompt_logprobs for a prompt of {len(ids)} tokens"
                        )
                    values = _prompt_logprob_values(entries, ids, self.where)
                    strings = [_decoded(e, t) for e, t in zip(entries, ids)]
                else:
                    values, strings = _echo_answer(choice, len(ids), self.echo_extra if strict else -1)
                if strict:
                    _check_values(values, len(ids))
            except _BadAnswer as b:
                raise _BadAnswer(offset + k, b.what) from None
            self._compare_strings(offset + k, ids, strings)
            out.append(values)
        self.counts["prompts"] += len(prompts)
        return out

    def _compare_strings(self, index: int, ids: list[int], strings: list) -> None:
        for pos, (t, s) in enumerate(zip(ids, strings)):
            if not isinstance(s, str) or s == f"token_id:{t}" or "\ufffd" in s:
                continue
            ours = self._token_strings(t)
            if any("\ufffd" in o for o in ours):
                continue
            if not any(s == o or s.strip(" ▁Ġ") == o.strip(" ▁Ġ") for o in ours):
                raise _TokenMismatch(index, pos, t, ours[0], s[:40])

    def _token_strings(self, t: int) -> tuple[str, ...]:
        """The ways a server may spell token `t`: decoded alone, or as the raw vocabulary entry."""
        if t not in self._strings:
            raw = self.tokenizer.convert_ids_to_tokens(t) or ""
            self._strings[t] = (
                self.tokenizer.decode([t]),
                raw,
                self.tokenizer.convert_tokens_to_string([raw]) if raw else "",
            )
        return self._strings[t]

    def _body(self, prompts: list[list[int]]) -> dict:
        return {
            "model": self.served_model,
            "prompt": prompts[0] if len(prompts) == 1 else prompts,
            "max_tokens": 1,
            "temperature": 0,
        }

    # ------------------------------------------------------------------ HTTP

    def _client(self):
        if self._http is None:
            import httpx2

            headers = {"Accept-Encoding": "identity"}
            if self._key:
                headers["Authorization"] = f"Bearer {self._key}"
            self._http = httpx2.AsyncClient(
                headers=headers,
                timeout=httpx2.Timeout(self.request_timeout),
                limits=httpx2.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency),
                follow_redirects=False,
                trust_env=False,
            )
        return self._http

    async def _get_json(self, url: str, what: str, optional: bool = False):
        return await self._request("GET", url, None, what, optional=optional)

    async def _post(self, path: str, body: dict, tokens: int | None = None):
        if tokens is None:
            prompt = body.get("prompt") or []
            tokens = sum(len(p) for p in prompt) if prompt and isinstance(prompt[0], list) else len(prompt)
        limit = ANSWER_BASE_BYTES + ANSWER_BYTES_PER_TOKEN * tokens
        return await self._request("POST", self._endpoint(path), body, f"/v1{path}", limit=limit)

    def _endpoint(self, path: str, root: bool = False) -> str:
        """The URL of `path` under --base-url (under the server's root, its path less "/v1", with
        `root`), its user, password and query kept: the query goes with every request."""
        scheme, netloc, base, query = self._parts
        if root and base.endswith("/v1"):
            base = base[: -len("/v1")]
        return urlunsplit((scheme, netloc, base + path, query, ""))

    async def _version(self) -> str | None:
        try:
            got = await self._request(
                "GET", self._endpoint("/version", root=True), None, "/version", optional=True, retry=False
            )
        except ServerError:
            return None
        return stored(got.get("version"), "version (/version)") if isinstance(got, dict) else None

    async def _tokenize(self, text: str, optional: bool = False):
        # both dialects: vLLM reads `prompt` and `add_special_tokens`, llama.cpp's server `content` and
        # `add_special`; each ignores the other's fields
        body = {
            "model": self.served_model,
            "prompt": text,
            "add_special_tokens": False,
            "content": text,
            "add_special": False,
        }
        got = await self._request("POST", self._endpoint("/tokenize", root=True), body, "/tokenize", optional=optional)
        if got is None:
            return None
        tokens = got.get("tokens") if isinstance(got, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            if optional:
                return None
            raise ServerError(f"{self.where} answered /tokenize without a list of token ids")
        return tokens

    async def _request(self, method, url, body, what, *, optional=False, retry=True, limit=ANSWER_BASE_BYTES):
        """JSON from one request, retried as the module docstring says. `optional`: None for a 404
        or 405 (an endpoint the server does not have). `limit`: the most bytes the answer may
        decode to. An answer that cannot be decoded is retried as a connection failure is."""
        import httpx2

        last, wait, raw = "no answer", None, b""
        tries = self.max_retries + 1 if retry else 1
        for attempt in range(tries):
            if attempt:
                self.counts["retries"] += 1
                await asyncio.sleep(self._delay(attempt, wait))
                wait = None
            self.counts["requests"] += 1
            try:
                status, headers, raw = await asyncio.wait_for(
                    self._send(method, url, body, limit), self.request_timeout
                )
            except (asyncio.TimeoutError, httpx2.TimeoutException):
                last = f"no answer within {self.request_timeout:g} s"
                continue
            except _Undecodable as exc:
                last = str(exc)
                continue
            except httpx2.TransportError as exc:
                last = f"{_transport_reason(exc)} ({type(exc).__name__})"
                continue
            if status in RETRY_STATUS or 500 <= status < 600:
                last, wait = f"HTTP {status} {_reason(status)}", _retry_after(headers)
                if status == 500 and not retry:
                    break
                if status == 500 and attempt == 0 and _is_validation_error(raw):
                    break  # a validation error answered as 500 (llama-cpp-python): trying again will not help
                continue
            if optional and status in (404, 405):
                return None
            if 300 <= status < 400 or status < 200:
                raise ServerError(
                    f"{self.where} answered {what} with HTTP {status} {_reason(status)}, which base-bench does not "
                    "follow or read (a redirect is never followed); pass the URL that answers with --base-url",
                    status=status,
                    detail=f"HTTP {status}",
                )
            if status >= 400:
                raise ServerError(
                    f"{self.where} answered {what} with HTTP {status} {_reason(status)}: "
                    f"{self._scrub(_message(raw))}{_hint(status, self.api_key_env)}",
                    status=status,
                    detail=f"HTTP {status}: {self._scrub(_message(raw))}",
                )
            try:
                return untrusted.loads(raw)
            except ValueError as exc:
                raise ServerError(
                    f"{self.where} answered {what} with something that is not JSON ({_clip(untrusted.problem(exc), 100)})"
                ) from None
        else:
            raise ServerError(
                f"{self.where} did not answer {what} after {tries} tr{'y' if tries == 1 else 'ies'}; the last: "
                f"{self._scrub(last)}",
                status=None,
            )
        raise ServerError(
            f"{self.where} answered {what} with {last}: {self._scrub(_message(raw))}",
            status=500,
            detail=f"HTTP 500: {self._scrub(_message(raw))}",
        )

    async def _send(self, method, url, body, limit: int = ANSWER_BASE_BYTES) -> tuple[int, dict, bytes]:
        """(status, headers, body) of one request. The body is read as sent (identity is asked for;
        gzip and deflate are decoded here, bounded): at most `limit` bytes sent and at most `limit`
        decoded, else ServerError; a body that does not decode is _Undecodable (retried)."""
        limit = min(limit, MAX_RESPONSE_BYTES)
        async with self._client().stream(method, url, json=body) as r:
            try:
                size = int(r.headers.get("content-length") or 0)
            except ValueError:
                size = 0
            if size > limit:
                raise ServerError(
                    f"{self.where} sent an answer of {size} bytes; the most base-bench reads here is {limit}"
                )
            encoding = (r.headers.get("content-encoding") or "identity").strip().lower()
            if encoding not in ("identity", "gzip", "x-gzip", "deflate"):
                raise _Undecodable(f"an answer in an encoding base-bench does not read ({_clip(encoding, 20)!r})")
            decoder = None if encoding == "identity" else _Decoder(encoding, limit, self.where)
            chunks, size = [], 0
            async for chunk in r.aiter_raw():
                size += len(chunk)
                if size > limit:
                    raise ServerError(f"{self.where} sent an answer of over {limit} bytes; refused")
                chunks.append(decoder.feed(chunk) if decoder else chunk)
            if decoder:
                chunks.append(decoder.end())
            return r.status_code, dict(r.headers), b"".join(chunks)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        base, cap = self.backoff
        d = min(cap, base * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
        return max(d, min(cap, retry_after)) if retry_after else d

    def _scrub(self, text: str) -> str:
        """`text` (from the server) as one short line, the API key and the URL's secrets removed,
        whatever their length (one shorter than redact.MIN_SECRET is not registered)."""
        text = str(text)
        for secret, shown in self._own:
            text = text.replace(secret, shown)
        return redact(" ".join(text.split())[:300])

    # ------------------------------------------------------------------ the event loop

    async def _gather(self, coros: list):
        """Run `coros` concurrently (at most `concurrency` at once); the first error cancels the rest."""
        sem = asyncio.Semaphore(self.concurrency)

        async def one(c):
            async with sem:
                return await c

        tasks = [asyncio.ensure_future(one(c)) for c in coros]
        try:
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                if t.exception() is not None:
                    raise t.exception()
            return [t.result() for t in tasks]
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _run(self, coro):
        """Run `coro` on this backend's loop. SIGINT and SIGTERM cancel it (closing the connections in
        flight), then go on to the handler that was there before (the CLI's, which stops the run)."""
        task = self._loop.create_task(coro)
        got: list[int] = []
        installed = []
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                old = signal.getsignal(sig)
                if old in (signal.SIG_IGN, None):
                    continue
                self._loop.add_signal_handler(sig, _cancel, task, got, sig)
                installed.append((sig, old))
        try:
            return self._loop.run_until_complete(task)
        except asyncio.CancelledError:
            if not got:
                raise
        finally:
            for sig, old in installed:
                self._loop.remove_signal_handler(sig)
                signal.signal(sig, old)
            if got:
                _deliver(got[0], dict(installed)[got[0]])
        raise AssertionError("unreachable")  # pragma: no cover


def _cancel(task, got: list, sig: int) -> None:
    if not got:
        got.append(sig)
    task.cancel()


def _deliver(sig: int, handler) -> None:
    """Hand a signal caught while requests were in flight to the handler that was there before."""
    if callable(handler):
        handler(sig, None)
    elif sig == signal.SIGINT:
        raise KeyboardInterrupt
    signal.raise_signal(sig)


def _read_key(env: str | None) -> str | None:
    if env is None:
        return None
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env or ""):
        raise UsageError(f"--api-key-env takes the name of an environment variable, not {env[:40]!r}")
    key = os.environ.get(env, "")
    register(key)
    if not key.strip():
        raise UsageError(f"--api-key-env {env}: the environment variable {env} is not set or is empty")
    if not re.fullmatch(r"[\x21-\x7e]+", key.strip()):
        raise UsageError(
            f"--api-key-env {env}: the key in {env} holds a character other than visible ASCII (a line break, "
            "a space, a control character or a non-ASCII letter), which an HTTP header cannot carry; set it "
            "to the key alone"
        )
    return key.strip()


TOKENIZER_FILES = [  # what --revision fetches of a Hub repo: the tokenizer, never the weights
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab*",
    "merges.txt",
    "*.model",
    "*.tiktoken",
    "chat_template*",
    "config.json",
]


def _load_tokenizer(spec, root: str | None, where: str, revision: str | None = None):
    """(tokenizer, where it came from, commit): `spec` (a folder, a .gguf file or a Hub id), else the
    model root the server reports, where that is a folder here or a Hub id. With `revision` (a Hub
    id's branch, tag or commit) only the tokenizer's files of that revision are fetched, and the
    commit it resolved to is returned (else None); a local tokenizer with a revision is refused."""
    if spec is None:
        if not root:
            raise UsageError(f"{where} does not say where its model comes from; pass --tokenizer DIR|HUB_ID|FILE.gguf")
        p = Path(root).expanduser()
        if not (p.is_dir() or p.is_file() or _looks_like_hub_id(root)):
            raise UsageError(
                f"{where} names its model {root[:200]!r}, which is neither a folder here nor a Hub id; pass the "
                "model's tokenizer with --tokenizer DIR|HUB_ID|FILE.gguf"
            )
        spec = root
    spec = str(spec)
    p = Path(spec).expanduser()
    if revision is not None and (spec.lower().endswith(".gguf") or p.exists()):
        raise UsageError(
            f"--revision {revision} pins a tokenizer on the Hub, and the tokenizer {spec[:200]!r} is a local "
            f"{'folder' if p.is_dir() else 'file'}, which has no revisions; drop --revision"
        )
    if revision is not None and not _looks_like_hub_id(spec):
        raise UsageError(f"--revision {revision}: the tokenizer {spec[:200]!r} is not a Hub id")
    try:
        if spec.lower().endswith(".gguf"):
            from .llama_cpp import load_tokenizer

            if not p.is_file():
                raise UsageError(f"--tokenizer {spec}: no such GGUF file")
            return load_tokenizer(p)[0], spec, None
        if not p.exists() and not _looks_like_hub_id(spec):
            raise UsageError(f"--tokenizer {spec}: no such folder or file, and not a Hub id")
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        if revision is not None:
            from ..items.hub import download_model

            local, commit = download_model(spec, revision=revision, what="tokenizer", only=TOKENIZER_FILES)
            return AutoTokenizer.from_pretrained(local), spec, commit
        return AutoTokenizer.from_pretrained(str(p) if p.exists() else spec), spec, None
    except BaseBenchError:  # a usage, model or Hub error: already one line
        raise
    except Exception as exc:  # noqa: BLE001 - one line for the user
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ModelError(f"could not load the tokenizer {spec[:200]!r}: {first}") from None


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _shown(v) -> str:
    """A value a server sent, for a message: its repr, clipped to 60 characters, redacted."""
    try:
        text = repr(v) if not isinstance(v, (dict, list)) else json.dumps(v)[:200]
    except (ValueError, RecursionError):
        text = type(v).__name__
    return redact(_clip(text, 60))


def _shown_path(v) -> str:
    """A file path a server reports, for a message: shell-quoted where it is a printable string of at
    most 1000 characters that holds no secret, else a placeholder."""
    import shlex

    if isinstance(v, str) and re.fullmatch(r"[^\x00-\x1f\x7f-\x9f]{1,1000}", v) and redact(v) == v:
        return shlex.quote(v)
    return "FILE.gguf (the file the server was started with; it does not say which)"


def _llama_cpp_meta(meta) -> bool:
    """Whether a /v1/models entry's `meta` is llama.cpp's (its vocabulary and training context)."""
    return isinstance(meta, dict) and "n_vocab" in meta and "n_ctx_train" in meta


def _llama_cpp_props(props) -> bool:
    """Whether a /props answer is llama.cpp's server's."""
    if not isinstance(props, dict):
        return False
    path = props.get("model_path")
    return isinstance(props.get("default_generation_settings"), dict) or (
        isinstance(path, str) and path.lower().endswith(".gguf")
    )


def _shown_id(v) -> str:
    """A served model id for a message: itself where it is printable ASCII of at most 100
    characters and holds no secret, else a placeholder."""
    if isinstance(v, str) and re.fullmatch(r"[\x20-\x7e]{1,100}", v) and redact(v) == v:
        return repr(v)
    return "(an id withheld)"


class _Undecodable(Exception):
    """An answer whose Content-Encoding cannot be read (bad gzip, an unknown encoding)."""


class _Decoder:
    """Bounded gzip/deflate decoding: _Undecodable for bad data, ServerError past `limit` bytes."""

    def __init__(self, encoding: str, limit: int, where: str):
        wbits = 16 + zlib.MAX_WBITS if "gzip" in encoding else zlib.MAX_WBITS
        self.z, self.limit, self.where, self.size = zlib.decompressobj(wbits), limit, where, 0

    def feed(self, chunk: bytes) -> bytes:
        try:
            out = self.z.decompress(chunk, self.limit + 1 - self.size)
        except zlib.error:
            raise _Undecodable("an answer that is not the gzip or deflate it says it is") from None
        self.size += len(out)
        if self.size > self.limit or self.z.unconsumed_tail:
            raise ServerError(f"{self.where} sent an answer that decodes to over {self.limit} bytes; refused")
        return out

    def end(self) -> bytes:
        try:
            out = self.z.flush()
        except zlib.error:
            raise _Undecodable("an answer that is not the gzip or deflate it says it is") from None
        if not self.z.eof:
            raise _Undecodable("an answer whose gzip or deflate stream is cut short")
        self.size += len(out)
        if self.size > self.limit:
            raise ServerError(f"{self.where} sent an answer that decodes to over {self.limit} bytes; refused")
        return out


def _number(v, what: str, prompt: int = 0) -> float | None:
    """A log-prob the server sent as a float (None stays None); _BadAnswer for anything that is not
    a finite number (a string, a bool, NaN, an integer too large for a float)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _BadAnswer(prompt, f"it returned {_shown(v)} as the log-prob of {what}")
    try:
        f = float(v)
    except OverflowError:
        raise _BadAnswer(prompt, f"it returned a number of {len(str(v))} digits as the log-prob of {what}") from None
    if not math.isfinite(f):
        raise _BadAnswer(prompt, f"it returned {f!r} as the log-prob of {what}")
    return f


def _check_values(values: list, n: int) -> None:
    """The server check's invariants on one answer: n values, the first None or a number, every
    other a finite number of at most MAX_LOGPROB."""
    if len(values) != n:
        raise _BadAnswer(0, f"it returned {len(values)} log-probs for a prompt of {n} tokens")
    for i, v in enumerate(values[1:], start=1):
        if v is None or v > MAX_LOGPROB:
            raise _BadAnswer(0, f"it returned {_shown(v)} as the log-prob of prompt token {i}")


def _decoded(entry, t: int):
    v = entry.get(str(t)) if isinstance(entry, dict) else None
    return v.get("decoded_token") if isinstance(v, dict) else None


def _looks_like_hub_id(text: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", text)) and not text.startswith(("/", ".", "~"))


def _probe_ids(tokenizer) -> list[int]:
    return list(tokenizer("The quick brown fox jumps over the lazy dog.", add_special_tokens=False)["input_ids"])


def _texts(item):
    yield "context", item.context
    for k, c in enumerate(item.continuations):
        yield f"continuation {k}", c


def _choices(reply, n: int, where: str) -> list[dict]:
    """The n choices of an answer, in prompt order: each a dict; their indices, where any is given,
    exactly 0..n-1 once each (a repeated or missing index is refused, not sorted away)."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or len(choices) != n or not all(isinstance(c, dict) for c in choices):
        got = len(choices) if isinstance(choices, list) else "no"
        raise EngineCheckError(f"{where} answered {got} choices for {n} prompts; {KNOWN}")
    indices = [c.get("index") for c in choices]
    if all(i is None for i in indices):
        return choices
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in indices) or sorted(indices) != list(range(n)):
        raise EngineCheckError(
            f"{where} answered {n} prompts with choice indices {_shown(indices)}, not 0 to {n - 1} once each; {KNOWN}"
        )
    return sorted(choices, key=lambda c: c["index"])


def _probe_echo(choice: dict, n: int, where: str) -> list:
    """The probe's echoed token_logprobs as numbers, all of them (the check refuses a wrong count)."""
    lp = choice.get("logprobs")
    values = lp.get("token_logprobs") if isinstance(lp, dict) else None
    if not isinstance(values, list):
        return []
    try:
        return [_number(v, f"prompt token {i}") for i, v in enumerate(values)]
    except _BadAnswer as b:
        raise EngineCheckError(f"{where} failed the server check: {b.what}; {KNOWN}") from None


def _echo_answer(choice: dict, n: int, extra: int | None) -> tuple[list, list]:
    """(values, token strings) of one echoed answer for a prompt of n tokens: exactly n + `extra`
    token_logprobs (what the probe established), as numbers; the strings where given as a list.
    `extra` -1 (during the start-up check): the values as given, less the generated token's, for
    the check to judge."""
    lp = choice.get("logprobs")
    values = lp.get("token_logprobs") if isinstance(lp, dict) else None
    if not isinstance(values, list):
        if extra == -1:
            return [], []
        raise _BadAnswer(0, f"it returned no echoed token_logprobs (sent {_shown(values)})")
    if extra == -1:
        values = values[:n] if len(values) == n + 1 else values
        tokens = lp.get("tokens")
        strings = tokens[:n] if isinstance(tokens, list) and len(tokens) >= n else []
        return [_number(v, f"prompt token {i}") for i, v in enumerate(values)], strings
    if extra is None or len(values) != n + extra:
        want = "" if extra is None else f", not the {n + extra} the start-up check established"
        raise _BadAnswer(0, f"it returned {len(values)} echoed log-probs for a prompt of {n} tokens{want}")
    out = [_number(v, f"prompt token {i}") for i, v in enumerate(values[:n])]
    tokens = lp.get("tokens")
    strings = tokens[:n] if isinstance(tokens, list) and len(tokens) >= n else []
    return out, strings


def _prompt_logprob_values(entries: list, ids: list[int], where: str) -> list:
    """vLLM's prompt_logprobs (None, then {token id: {"logprob": ...}} per position) as values,
    refusing an entry that is not for the prompt's token at that position."""
    if len(entries) != len(ids):
        return [None] * len(entries)  # the check says what is wrong with the length
    out: list = [None]
    for i, (e, t) in enumerate(zip(entries[1:], ids[1:]), start=1):
        v = e.get(str(t)) if isinstance(e, dict) else None
        if not isinstance(v, dict):
            other = _shown(list(e)[:1] if isinstance(e, dict) else e)
            raise EngineCheckError(
                f"{where}'s prompt_logprobs at position {i} are for token {other}, not the prompt's token {t}: "
                f"its log-probs are not aligned with the prompt; {KNOWN}"
            )
        out.append(_number(v.get("logprob"), f"prompt token {i}"))
    return out


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return f"({HTTPStatus(status).phrase})"
    except ValueError:
        return ""


def _message(raw: bytes) -> str:
    """The server's own error text: the JSON error message, else the body's start."""
    try:
        d = untrusted.loads(raw)  # bounded: an error body of 100,000 "[" is text, not a RecursionError
    except ValueError:
        return raw[:300].decode("utf-8", errors="replace")
    if isinstance(d, dict):
        err = d.get("error", d.get("detail", d.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        return str(err)[:300]
    return str(d)[:300]


def _is_validation_error(raw: bytes) -> bool:
    return bool(re.search(rb"validation error|valid string|Input should be", raw[:4000], flags=re.I))


def _hint(status: int, env: str | None) -> str:
    if status in (401, 403):
        return f" (the key comes from ${env})" if env else " (pass the key's environment variable with --api-key-env)"
    if status == 404:
        return " (is --base-url the server's /v1 root, and --model its served name?)"
    return ""


def _retry_after(headers: dict) -> float | None:
    v = {k.lower(): x for k, x in headers.items()}.get("retry-after")
    try:
        return max(0.0, float(v)) if v is not None else None
    except ValueError:
        return None


def _transport_reason(exc) -> str:
    """A few words on why a connection failed, from the exception and the errors it wraps."""
    import httpx2

    seen, e = [], exc
    while e is not None and len(seen) < 8:
        seen.append(e)
        e = e.__cause__ or e.__context__
    if any(isinstance(x, ConnectionRefusedError) for x in seen):
        return "connection refused"
    if isinstance(exc, httpx2.ConnectError):
        return "could not connect"
    if any(isinstance(x, ConnectionResetError) for x in seen):
        return "connection reset"
    if isinstance(exc, (httpx2.ReadError, httpx2.RemoteProtocolError, httpx2.WriteError)):
        return "connection closed by the server"
    return "connection failed"


class _ServerScorer(PromptScorer):
    """PromptScorer on the server, naming the item when a token string the server echoes is not the tokenizer's."""

    def __init__(self, backend: ServerBackend):
        super().__init__(backend.logprobs, label=backend.where)
        self.backend = backend

    def __call__(self, batch):
        try:
            return super().__call__(batch)
        except (_TokenMismatch, _BadAnswer) as m:
            line = m.line(self.backend.where) if isinstance(m, _TokenMismatch) else self._bad(m)
            k = m.prompt
            for e in batch:
                if k < len(e.continuations):
                    raise ModelError(f"item {e.id}, choice {k}: {line}") from None
                k -= len(e.continuations)
            raise ModelError(line) from None

    def _bad(self, b: _BadAnswer) -> str:
        return (
            f"{self.backend.where} broke what its start-up check established: {b.what}; the run stops here, "
            "the finished items are kept (continue with --resume once the server is fixed)"
        )

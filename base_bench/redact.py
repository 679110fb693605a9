"""The one rule for secrets: every secret base-bench holds is registered here once, and every
message, note, report field and run file passes through `redact` last, after any cut.

    register(os.environ.get("HF_TOKEN"))      # the API key, HF_TOKEN, a --model-arg token=... value
    print(redact(line))                       # the secret, or any piece of it of 8+ characters, removed
    safe = stored(server_text, "root")        # a server-given string to keep, or "(withheld: ...)"

What is registered: the key of `--backend server` (read from `--api-key-env`), `HF_TOKEN` (and
`HUGGING_FACE_HUB_TOKEN`) from the environment, and every `--model-arg`/`--vllm-arg` value whose
key names a token or a secret (`SECRET_KEY`). `redact` replaces each whole secret with REDACTED,
and also every run of SPAN or more characters that is a piece of one (pieces of VARIED distinct
characters or more, not all digits, so that "0000..." in a number is left alone): a message cut to a length,
or a report field cut by a writer, cannot leave a prefix of a key behind. A value shorter than
MIN_SECRET characters is not registered (vLLM's servers are often given the key "EMPTY"; the
server backend still removes its own key from the server's text whatever its length).

Where it runs: the CLI's error line (cliargs.fail), every record of the "base_bench" logger (a
filter installed by `register`), the run summary, and every file the run store and
reports_io.write_atomic write. Nothing here is printed; registering a secret only makes it unprintable.
"""

from __future__ import annotations

import json
import logging
import re
import threading

REDACTED = "<redacted>"
SPAN = 12  # a piece of a secret this long or longer is redacted wherever it appears ...
VARIED = 5  # ... when it holds this many distinct characters (not a run of zeros that a number may share)
MIN_SECRET = 8  # a shorter value ("EMPTY", true, 1) is no secret worth the name, and replacing it everywhere would damage the files
MAX_STORED = 200  # the longest server-given string a report keeps
# keys of --model-arg / --vllm-arg whose value is a secret: token, hf_token, use_auth_token,
# api_key, secret, password... (not max_num_batched_tokens or tokenizer_mode)
SECRET_KEY = re.compile(r"(^|_)(token|secret|password|passwd|api_?key|credentials?|auth)$", re.IGNORECASE)
_SAFE = re.compile(f"[\\x20-\\x7e]{{1,{MAX_STORED}}}")

_secrets: list[str] = []
_grams: dict[str, None] = {}
_pattern: list = [None]  # a compiled alternation of _grams, rebuilt by register
_lock = threading.Lock()


def names_secret(key: str) -> bool:
    """Whether a keyword argument's name says that its value is a secret (a token, a key, a password)."""
    return bool(SECRET_KEY.search(key))


def register(secret) -> None:
    """Make `secret` (a str of MIN_SECRET characters or more; anything else is ignored) unprintable from now on. Its
    JSON-escaped spelling is registered too, so a file cannot hold it either."""
    if not isinstance(secret, str) or len(secret.strip()) < MIN_SECRET:
        return
    with _lock:
        for s in {secret, secret.strip(), json.dumps(secret)[1:-1]}:
            if s and s not in _secrets:
                _secrets.append(s)
                for i in range(len(s) - SPAN + 1):
                    gram = s[i : i + SPAN]
                    if len(set(gram)) >= VARIED and not gram.isdigit():
                        _grams[gram] = None
        _secrets.sort(key=len, reverse=True)
        _pattern[0] = re.compile("|".join(map(re.escape, _grams))) if _grams else None
    _install_log_filter()


def forget_all() -> None:
    """Clear the registry (for tests that run several commands in one process)."""
    with _lock:
        _secrets.clear()
        _grams.clear()
        _pattern[0] = None


def secrets() -> tuple[str, ...]:
    return tuple(_secrets)


def redact(text):
    """`text` with every registered secret, and every (varied) piece of one of SPAN or more characters,
    replaced by REDACTED. Non-strings are returned as they are."""
    if not isinstance(text, str) or not _secrets:
        return text
    for s in _secrets:
        if s in text:
            text = text.replace(s, REDACTED)
    pattern = _pattern[0]
    if pattern is None or len(text) < SPAN:
        return text
    spans, n = [], len(text)
    m = pattern.search(text)
    while m is not None:
        i, j = m.start(), m.end()
        while j < n and text[j - SPAN + 1 : j + 1] in _grams:
            j += 1
        spans.append((i, j))
        m = pattern.search(text, j)
    if not spans:
        return text
    out, last = [], 0
    for a, b in spans:
        out += [text[last:a], REDACTED]
        last = b
    return "".join(out + [text[last:]])


def redact_bytes(data: bytes) -> bytes:
    """`redact` for the UTF-8 bytes of a file about to be written."""
    if not _secrets:
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    red = redact(text)
    return data if red is text else red.encode("utf-8")


def contains_secret(text) -> bool:
    return isinstance(text, str) and redact(text) != text


def stored(value, what: str, log: logging.Logger | None = None) -> str | None:
    """A server-given string that a report keeps (a model root, a version, a fingerprint, a model id):
    the value itself when it is printable ASCII of at most MAX_STORED characters and holds no
    secret; None for None; else "(withheld: ...)", saying so in a note on `log`."""
    if value is None:
        return None
    if not isinstance(value, str):
        why = f"a {type(value).__name__}, not a string"
    elif contains_secret(value):
        why = "it holds the API key or a token"
    elif not _SAFE.fullmatch(value):
        why = f"not printable ASCII of at most {MAX_STORED} characters"
    else:
        return value
    (log or logging.getLogger("base_bench")).warning(f"note: the server's {what} is withheld from the report ({why})")
    return f"(withheld: {why})"


class _RedactFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        red = redact(msg)
        if red is not msg:
            record.msg, record.args = red, ()
        return True


_FILTER = _RedactFilter()


def _install_log_filter() -> None:
    for name in ("base_bench",):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)

"""A fake OpenAI-compatible completions server that passes base-bench's start-up check and then
misbehaves as an attacker controlling the server would, for tests/test_server_hostile.py.

    srv = HostileServer(tokenizer).start()        # honest: a copy model, vLLM's answer format
    srv.mode = "positive"                           # after `srv.honest` completion requests: +50.0 log-probs
    srv.url                                         # http://127.0.0.1:PORT/v1, for --base-url
    srv.seen                                        # requests, completions, auth (the last Authorization
                                                    # header), path (the last request's, with its query)
    srv.close()

The "model" is a pure function of the prompt: a token whose bigram (previous token, token) already
appeared earlier in the prompt gets -0.5, any other -8 less a little per id. It copies from its
context, so the copy and alignment tests pass, and it is the same in any batch, so invariance
holds. Answers carry both vLLM's `prompt_logprobs` (when asked for; "no_plp" leaves them out, so
base-bench reads the echo; so do the other ECHO modes) and the echoed `logprobs`, with the tokenizer's own token strings.
/tokenize answers with the tokenizer's ids, /version with a version string.

Modes named in MODES change the answers: those in STARTUP from the first request (the stored
strings, the model list, an error body, values that move with the batch), the others only once
`honest` completion requests were answered as they should be (the start-up check takes 5 with
--concurrency 1). Everything is real HTTP on 127.0.0.1 (http.server); nothing in base-bench is mocked.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "tiny"
# modes that change the answers from the first request on
# modes of the echo protocol: the server never offers prompt_logprobs, so base-bench reads the echo
ECHO = {"short_echo", "logprobs_list", "no_plp"}
STARTUP = {
    "root_key",
    "version_key",
    "fingerprint_key",
    "models_key",
    "straddle",
    "escape",
    "redirect_models",
    "batch_jitter",
    "root_password",
    "models_401_password",
    "path_404",
    "tokenize_huge",
    "overflow_check",
    "deep_error",
}
JITTER = 0.004  # "batch_jitter": nats per token taken off every value for each other prompt in the request
HUGE_IDS = 1 << 18  # "tokenize_huge": token ids in every /tokenize answer (512 KiB of JSON, 2 MiB as a Python list)
CHECK_REQUESTS = 5  # "overflow_check": the completion requests of the probe and the start-up check (--concurrency 1)
_BOMB: list[bytes] = []
_HUGE: list[bytes] = []


def bomb() -> bytes:
    """64 MiB of JSON (a list of spaces) gzipped to about 64 kB."""
    if not _BOMB:
        _BOMB.append(gzip.compress(b"[" + b" " * (64 << 20) + b"]", 9))
    return _BOMB[0]


def huge_tokens() -> bytes:
    """A /tokenize answer of HUGE_IDS token ids (all 0): 512 KiB sent, 2 MiB as a Python list."""
    if not _HUGE:
        _HUGE.append(b'{"tokens": [' + b",".join([b"0"] * HUGE_IDS) + b'], "count": %d}' % HUGE_IDS)
    return _HUGE[0]


def basic_password(auth: str | None) -> str:
    """The password of an `Authorization: Basic ...` header ("no-password" for none)."""
    if not auth or not auth.startswith("Basic "):
        return "no-password"
    try:
        return base64.b64decode(auth[6:]).decode("utf-8").partition(":")[2]
    except ValueError:
        return "no-password"


class HostileServer:
    def __init__(self, tokenizer, honest: int = 7):
        self.tok = tokenizer
        self.mode: str | None = None
        self.honest = honest
        self.redirect_to: str | None = None
        self.seen = {"requests": 0, "completions": 0, "auth": None, "path": None}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> HostileServer:
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                srv._handle(self, None)

            def do_POST(self):
                n = int(self.headers.get("content-length") or 0)
                srv._handle(self, json.loads(self.rfile.read(n) or b"null"))

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # a client that hung up mid-answer: not base-bench's traceback, so none on stderr

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # ------------------------------------------------------------------ answers

    def _handle(self, h: BaseHTTPRequestHandler, body) -> None:
        auth = h.headers.get("authorization")
        with self._lock:
            self.seen["requests"] += 1
            self.seen["auth"] = auth
            self.seen["path"] = h.path
            path = h.path.partition("?")[0]  # routed without the query; "path_404" echoes it whole
            completion = path.endswith("/completions")
            if completion:
                self.seen["completions"] += 1
            late = completion and self.seen["completions"] > self.honest
            checking = completion and self.seen["completions"] <= CHECK_REQUESTS
        mode = self.mode if (self.mode in STARTUP or late) else None
        echo = auth or "no-auth"
        password = basic_password(auth)
        if mode == "path_404":  # as a server that names the path it does not know, query and all
            return self._send(h, 404, {"error": {"message": f"no route for {h.path}"}})
        if path == "/v1/models":
            if mode == "deep_error":  # an error body nested 100,000 deep
                return self._raw(h, 400, b"[" * 100_000)
            if mode == "models_401_password":
                return self._send(h, 401, {"error": {"message": f"wrong password {password!r} for this server"}})
            if mode == "redirect_models":
                return self._send(h, 302, {"data": []}, headers={"Location": self.redirect_to or "/"})
            if mode == "straddle":  # the key across the 300th character of an error body
                return self._send(h, 400, {"error": {"message": "x" * 280 + echo}})
            if mode == "escape":
                return self._send(h, 400, {"error": {"message": "\x1b]0;owned\x07\x1b[2J bad " + echo}})
            ids = [echo, "\x1b[31mred"] if mode == "models_key" else [MODEL]
            root = echo if mode == "root_key" else password if mode == "root_password" else "fake/tiny"
            data = [{"id": i, "object": "model", "root": root, "max_model_len": 4096} for i in ids]
            return self._send(h, 200, {"object": "list", "data": data})
        if path == "/version":
            return self._send(h, 200, {"version": echo if mode == "version_key" else "0.0.fake"})
        if path == "/tokenize":
            if mode == "tokenize_huge":
                return self._raw(h, 200, huge_tokens())
            ids = list(self.tok(body["prompt"], add_special_tokens=False)["input_ids"])
            return self._send(h, 200, {"tokens": ids, "count": len(ids)})
        if path == "/v1/completions":
            return self._completion(h, body, "overflow" if mode == "overflow_check" and checking else mode, echo)
        return self._send(h, 404, {"error": "not found"})

    def _completion(self, h, body, mode, echo) -> None:
        if mode == "deep_json":
            return self._raw(h, 200, b"[" * 200_000 + b"]" * 200_000)
        if mode == "bad_gzip":
            return self._raw(h, 200, b"this is not gzip at all", {"Content-Encoding": "gzip"})
        if mode == "gzip_bomb":
            return self._raw(h, 200, bomb(), {"Content-Encoding": "gzip"})
        if mode == "redirect_body":
            loc = {"Location": self.redirect_to or "/"}
            return self._send(h, 302, self._answer(body, None, echo), headers=loc)
        if mode == "drip":
            return self._drip(h, json.dumps(self._answer(body, None, echo)).encode())
        if mode == "error_key":
            return self._send(h, 400, {"error": {"message": f"bad request from {echo}"}})
        return self._send(h, 200, self._answer(body, mode, echo))

    def _answer(self, body: dict, mode: str | None, echo: str) -> dict:
        prompts = body["prompt"] if isinstance(body["prompt"][0], list) else [body["prompt"]]
        want_plp = body.get("prompt_logprobs") is not None and self.mode not in ECHO
        choices = []
        for k, p in enumerate(prompts):
            values = logprobs(p)
            strings = [self.tok.convert_ids_to_tokens(t) for t in p]
            decoded = [self.tok.decode([t]) for t in p]
            if mode == "overflow":  # finite, each alone; 31 of them sum past the largest float
                values = [None] + [v if v > -1 else -1e308 for v in values[1:]]
            if mode == "batch_jitter":  # as a bfloat16 kernel may: the values move with the batch they ran in
                values = [None] + [v - JITTER * (len(prompts) - 1) for v in values[1:]]
            if mode == "positive":
                values = values[:-1] + [50.0]
            elif mode == "nan":
                values = values[:-1] + [float("nan")]
            elif mode == "big_int":
                values = values[:-1] + [10**400]
            elif mode == "logprob_key":
                values = values[:-1] + [f"oops {echo}"]
            elif mode == "token_key":
                strings = strings[:-1] + [f"tok {echo}"]
                decoded = decoded[:-1] + [f"tok {echo}"]
            lp = {
                "tokens": strings + ["Ġthe"],
                "token_logprobs": values + [-1.0],
                "top_logprobs": [None] + [{s: v} for s, v in zip(strings[1:], values[1:])] + [{"Ġthe": -1.0}],
                "text_offset": list(range(len(p) + 1)),
            }
            if mode == "short_echo":  # one value fewer: read as the prompt's, the values would shift
                lp["token_logprobs"] = values
                lp["tokens"] = strings
            if mode == "logprobs_list":
                lp = [lp]
            choice = {"index": k, "text": " the", "logprobs": lp, "finish_reason": "length"}
            if mode == "dup_index":
                choice["index"] = 0
            if want_plp:
                plp = [None] + [
                    {str(t): {"logprob": v, "rank": 1, "decoded_token": d}}
                    for t, v, d in zip(p[1:], values[1:], decoded[1:])
                ]
                if mode == "plp_first_entry":
                    plp[0] = {str(p[0]): "not a dict"}
                if mode == "plp_not_dict":
                    plp = [None] + ["not a dict"] * (len(p) - 1)
                if mode == "short_plp":
                    plp = plp[:-1]
                choice["prompt_logprobs"] = plp
            choices.append(choice)
        out = {"id": "cmpl-1", "object": "text_completion", "model": MODEL, "choices": choices}
        out["system_fingerprint"] = echo if self.mode == "fingerprint_key" else "fp-fake"
        return out

    # ------------------------------------------------------------------ sending

    def _send(self, h, status: int, obj, headers: dict | None = None) -> None:
        self._raw(h, status, json.dumps(obj).encode(), headers)

    def _raw(self, h, status: int, data: bytes, headers: dict | None = None) -> None:
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _drip(self, h, data: bytes) -> None:
        try:
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            for b in data:
                h.wfile.write(bytes([b]))
                h.wfile.flush()
                time.sleep(0.2)
        except (BrokenPipeError, ConnectionResetError):
            pass


def logprobs(prompt: list[int]) -> list:
    """The fake model: None, then -0.5 for a token whose bigram appeared before, else -8 - id/1000."""
    seen, out = set(), [None]
    for i in range(1, len(prompt)):
        pair = (prompt[i - 1], prompt[i])
        out.append(-0.5 if pair in seen else -8.0 - prompt[i] / 1000)
        seen.add(pair)
    return out

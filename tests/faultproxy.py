"""A small HTTP proxy that sits in front of a real server and breaks it on purpose, for the tests.

    proxy = FaultProxy("http://127.0.0.1:8000").start()   # forwards every request to that server
    proxy.url                        # http://127.0.0.1:PORT (add /v1 for --base-url)
    proxy.mode = "shift"             # rewrite answers: log-probs one position early
    proxy.fail(3, status=503)        # the next 3 completion requests get HTTP 503
    proxy.stall(1)                   # the next completion request is held until its client hangs up
    proxy.after(5, status=503)       # let 5 completion requests through, then fail every one
    proxy.seen                       # counters: requests, completions, failed, held, hung_up, ...
    proxy.close()

Modes (rewrites of /v1/completions answers; the server computes as usual):
- "shift": the prompt log-probs one position early (each token gets the next token's value, the
  last one the generated token's), in both the echoed token_logprobs and vLLM's prompt_logprobs
  (whose token-id keys stay, so only the values are wrong, as a buggy server's would be);
- "generated_only": the echoed log-probs cut to the generated token's, prompt_logprobs dropped (what
  llama.cpp's server returns);
- "no_prompt_logprobs": prompt_logprobs dropped from requests and answers (a server without them);
- "hide_tokenize": /tokenize answers 404 (a server without it);
- "echo_auth": every failure's body quotes the request's Authorization header (a careless server).
`require_key` set: a request without `Authorization: Bearer <require_key>` gets HTTP 401.
Everything is real HTTP on 127.0.0.1 (http.server and http.client); nothing is mocked.
"""

from __future__ import annotations

import http.client
import json
import select
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class FaultProxy:
    def __init__(self, upstream: str):
        u = urlsplit(upstream)
        self.upstream = (u.hostname, u.port)
        self.modes: set[str] = set()
        self.require_key: str | None = None
        self.auth_seen: list[str | None] = []
        self.seen = {"requests": 0, "completions": 0, "failed": 0, "held": 0, "hung_up": 0}
        self._fail = (0, 503)  # (how many, status)
        self._after: tuple[int, int] | None = None  # (let through, then this status for every one)
        self._stall = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def mode(self) -> str | None:
        return next(iter(self.modes), None)

    @mode.setter
    def mode(self, value: str | None) -> None:
        self.modes = {value} if value else set()

    def fail(self, n: int, status: int = 503) -> None:
        with self._lock:
            self._fail = (n, status)

    def after(self, n: int | None, status: int = 503) -> None:
        with self._lock:
            self._after = None if n is None else (self.seen["completions"] + n, status)

    def stall(self, n: int) -> None:
        with self._lock:
            self._stall = n

    def heal(self) -> None:
        with self._lock:
            self.modes, self._fail, self._after, self._stall = set(), (0, 503), None, 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                proxy._handle(self)

            def do_POST(self):
                proxy._handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ------------------------------------------------------------------ one request

    def _decide(self, completions: bool) -> tuple[str, int]:
        with self._lock:
            self.seen["requests"] += 1
            if not completions:
                return "pass", 0
            self.seen["completions"] += 1
            n, status = self._fail
            if n > 0:
                self._fail = (n - 1, status)
                return "fail", status
            if self._after is not None and self.seen["completions"] > self._after[0]:
                return "fail", self._after[1]
            if self._stall > 0:
                self._stall -= 1
                return "stall", 0
            return "pass", 0

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        auth = h.headers.get("Authorization")
        self.auth_seen.append(auth)
        if self.require_key is not None and auth != f"Bearer {self.require_key}":
            quoted = f" (you sent {auth})" if "echo_auth" in self.modes else ""
            return self._send(h, 401, {"error": {"message": "missing or wrong API key" + quoted}})
        path = h.path.split("?")[0]
        if path.endswith("/tokenize") and "hide_tokenize" in self.modes:
            return self._send(h, 404, {"detail": "Not Found"})
        completions = path.endswith("/completions") and h.command == "POST"
        action, status = self._decide(completions)
        if action == "fail":
            with self._lock:
                self.seen["failed"] += 1
            message = "overloaded" + (f" (you sent {auth})" if "echo_auth" in self.modes else "")
            return self._send(h, status, {"error": {"message": message}})
        if action == "stall":
            with self._lock:
                self.seen["held"] += 1
            if self._wait_for_hang_up(h):
                with self._lock:
                    self.seen["hung_up"] += 1
                return
        if completions and "no_prompt_logprobs" in self.modes:
            req = json.loads(body)
            req.pop("prompt_logprobs", None)
            body = json.dumps(req).encode()
        headers = {k: v for k, v in h.headers.items() if k.lower() not in ("host", "content-length", "connection")}
        conn = http.client.HTTPConnection(*self.upstream, timeout=900)
        try:
            conn.request(h.command, h.path, body=body if h.command == "POST" else None, headers=headers)
            resp = conn.getresponse()
            data, code = resp.read(), resp.status
        except OSError:
            return self._send(h, 502, {"error": {"message": "the server behind the proxy did not answer"}})
        finally:
            conn.close()
        if completions and code == 200 and self.modes & {"shift", "generated_only", "no_prompt_logprobs"}:
            data = json.dumps(self._rewrite(json.loads(data))).encode()
        self._send_raw(h, code, data)

    def _wait_for_hang_up(self, h: BaseHTTPRequestHandler, limit: float = 600.0) -> bool:
        """Hold the request until the client closes its connection (True), or `limit` seconds."""
        end = time.monotonic() + limit
        sock = h.connection
        while time.monotonic() < end:
            r, _, _ = select.select([sock], [], [], 0.1)
            if r:
                try:
                    if sock.recv(1, 2) == b"":  # MSG_PEEK: end of stream means the client hung up
                        return True
                except OSError:
                    return True
        return False

    def _rewrite(self, reply: dict) -> dict:
        for c in reply.get("choices", []):
            lp = c.get("logprobs") or None
            pl = c.get("prompt_logprobs")
            if "no_prompt_logprobs" in self.modes or "generated_only" in self.modes:
                c.pop("prompt_logprobs", None)
            if "generated_only" in self.modes and lp:
                for k in ("token_logprobs", "tokens", "top_logprobs", "text_offset"):
                    if isinstance(lp.get(k), list):
                        lp[k] = lp[k][-1:]
            if "shift" in self.modes:
                gen = lp["token_logprobs"][-1] if lp and lp.get("token_logprobs") else -1.0
                if lp and isinstance(lp.get("token_logprobs"), list):
                    tl = lp["token_logprobs"]
                    lp["token_logprobs"] = [None] + tl[2:] + [tl[-1]]
                if isinstance(pl, list) and len(pl) > 1:
                    values = [next(iter(e.values()))["logprob"] for e in pl[1:]] + [gen]
                    for e, v in zip(pl[1:], values[1:]):
                        for entry in e.values():
                            entry["logprob"] = v
        return reply

    def _send(self, h, status: int, payload: dict) -> None:
        self._send_raw(h, status, json.dumps(payload).encode())

    def _send_raw(self, h, status: int, data: bytes) -> None:
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except OSError:
            with self._lock:
                self.seen["hung_up"] += 1

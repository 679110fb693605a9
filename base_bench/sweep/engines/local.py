"""--engine local: `workers` processes on this machine, each running the worker loop.

    engine = LocalEngine(config, 2, password, {"devices": ["cuda:0", "cuda:1"], "log_dir": "DIR/.sweep/logs"})

Each worker is `python -m base_bench.sweep.worker CONFIG` with its output in log_dir/worker-K.log,
and the store's password (if any) in its environment, never on its command line. A worker that
ends while the sweep still has work (it was killed) is started again by `revive`, at most
`max_restarts` times in all; the member it held is taken over at once (its process is gone).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from ..worker import PASSWORD_ENV


class LocalEngine:
    def __init__(self, config, workers: int, password: str | None, options: dict):
        self.config, self.n, self.password = config, workers, password
        self.devices = options.get("devices") or [None] * workers
        self.log_dir = Path(options["log_dir"])
        self.max_restarts = options.get("max_restarts", 3 * workers)
        self.procs: list[subprocess.Popen | None] = [None] * workers
        self.restarts = 0

    def _spawn(self, k: int) -> subprocess.Popen:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        cfg = replace(self.config, device=self.devices[k % len(self.devices)] or self.config.device)
        env = dict(os.environ)
        env.pop(PASSWORD_ENV, None)
        if self.password:
            env[PASSWORD_ENV] = self.password
        log = open(self.log_dir / f"worker-{k}.log", "ab")  # noqa: SIM115  (the child holds it)
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "base_bench.sweep.worker", cfg.to_json()],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # Ctrl-C at the terminal reaches the sweep, which stops them
            )
        finally:
            log.close()

    def start(self) -> None:
        for k in range(self.n):
            self.procs[k] = self._spawn(k)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None and p.poll() is None]

    def running(self) -> int:
        return len(self.pids())

    def revive(self) -> int:
        """Start again the workers that ended (the sweep has work left); how many were started."""
        n = 0
        for k, p in enumerate(self.procs):
            if p is not None and p.poll() is not None and self.restarts < self.max_restarts:
                self.restarts += 1
                self.procs[k] = self._spawn(k)
                n += 1
        return n

    def stop(self) -> None:
        for p in self.procs:
            if p is not None and p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def wait(self, timeout: float | None = None) -> None:
        for p in self.procs:
            if p is not None:
                try:
                    p.wait(timeout)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def describe(self) -> str:
        return f"{self.n} local worker process{'es' if self.n != 1 else ''} (logs in {self.log_dir})"

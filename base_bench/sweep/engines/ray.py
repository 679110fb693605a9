"""--engine ray: workers as Ray tasks on a Ray cluster (--ray-address, `auto` by default: the cluster
this machine belongs to, else a local Ray started for the sweep).

    engine = RayEngine(config, 4, password, {"address": "auto", "gpus_per_worker": 1})

Each task runs the worker loop. The store's password goes to the tasks as an argument (Ray's object
store, in memory), not in their environment or on disk. The nodes need base-bench installed.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from ...errors import UsageError
from ..worker import Config, work


def ray_worker(config_json: str, password: str | None) -> dict:
    import os
    import socket

    cfg = Config.from_json(config_json)
    return asdict(
        work(replace(cfg, name=f"ray-{socket.gethostname()}:{os.getpid()}"), password=password, signals=False)
    )


def _answers(address: str, timeout: float = 10.0) -> None:
    """UsageError in one line unless something listens at HOST:PORT (ray.init would retry for minutes)."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return
    except (OSError, ValueError):
        raise UsageError(f"no Ray cluster answers at --ray-address {address}") from None


class RayEngine:
    def __init__(self, config: Config, workers: int, password: str | None, options: dict):
        try:
            import ray
        except ImportError:
            raise UsageError("--engine ray needs Ray: pip install -e '.[sweep]'") from None
        self.ray = ray
        self.config, self.n, self.password, self.options = config, workers, password, options
        self.refs: list = []
        self.owned = False

    def start(self) -> None:
        ray, address = self.ray, self.options.get("address") or "auto"
        if address != "auto" and not address.startswith("ray://"):
            _answers(address)
        if not ray.is_initialized():
            try:
                ray.init(address=address, log_to_driver=False, logging_level="ERROR")
            except ConnectionError:
                if address != "auto":
                    raise UsageError(f"no Ray cluster answers at --ray-address {address}") from None
                ray.init(log_to_driver=False, logging_level="ERROR", include_dashboard=False)
                self.owned = True
        task = ray.remote(num_cpus=1, num_gpus=self.options.get("gpus_per_worker") or 0, max_retries=3)(ray_worker)
        self.refs = [task.remote(self.config.to_json(), self.password) for _ in range(self.n)]

    def running(self) -> int:
        if not self.refs:
            return 0
        _, pending = self.ray.wait(self.refs, num_returns=len(self.refs), timeout=0)
        return len(pending)

    def revive(self) -> int:
        return 0  # Ray retries a task whose worker process died (max_retries)

    def stop(self) -> None:
        for r in self.refs:
            try:
                self.ray.cancel(r)
            except Exception:  # noqa: BLE001, S110  (already finished)
                pass

    def wait(self, timeout: float | None = None) -> None:
        if self.refs:
            self.ray.wait(self.refs, num_returns=len(self.refs), timeout=timeout)
        if self.owned:
            self.ray.shutdown()

    def describe(self) -> str:
        where = " (on a local Ray started for the sweep: no cluster answered at auto)" if self.owned else ""
        return f"{self.n} Ray task{'s' if self.n != 1 else ''}{where}"

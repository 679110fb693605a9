"""--engine slurm: one submitit job array of workers on a Slurm cluster.

    engine = SlurmEngine(config, 4, password, {"folder": "DIR/.sweep/slurm", "partition": "gpu",
                                               "gpus_per_worker": 1, "time_min": 240, "mem_gb": 32})

Each array task runs the worker loop (`SlurmWorker`, a submitit Checkpointable): on preemption or
timeout submitit requeues the task; on SIGTERM (scancel, `scontrol requeue`) the worker stops. Either
way the member it was scoring waits again in the queue, resumable (a task killed outright is taken
over once its process is gone or its lease lapses). Whether workers are still running is asked of
Slurm (sacct, through submitit's job state), not read from submitit's result files: a requeued
task has written one before it runs again. The store's
password is never in the pickles submitit writes to `folder`: it reaches the tasks in the
environment that sbatch passes on. The nodes need this base-bench in the same Python environment
at the same path (a shared file system), as submitit runs them with this Python.
"""

from __future__ import annotations

import os
from dataclasses import asdict, replace

from ...errors import UsageError
from ..worker import PASSWORD_ENV, Config, Stopped, work

try:
    from submitit.helpers import Checkpointable
except ImportError:  # the engine says so in one line when it is asked for
    Checkpointable = object


FINAL = {
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
}


class SlurmWorker(Checkpointable):
    """The worker loop as a Slurm array task; submitit requeues it (with the same config) when the
    task is preempted or runs out of time."""

    def __call__(self, config_json: str) -> dict:
        cfg = Config.from_json(config_json)
        array = os.environ.get("SLURM_ARRAY_JOB_ID")
        job = f"{array}_{os.environ.get('SLURM_ARRAY_TASK_ID', '0')}" if array else os.environ.get("SLURM_JOB_ID", "?")
        restart = os.environ.get("SLURM_RESTART_COUNT", "0")
        try:
            return asdict(work(replace(cfg, name=f"slurm-{job}.{restart}")))  # slurm-JOB[_TASK].RESTARTS
        except Stopped:  # SIGTERM (scancel, scontrol requeue, the time limit): the member waits again
            return {"stopped": True}


class SlurmEngine:
    def __init__(self, config: Config, workers: int, password: str | None, options: dict):
        try:
            import submitit
        except ImportError:
            raise UsageError("--engine slurm needs submitit: pip install -e '.[sweep]'") from None
        self.submitit = submitit
        self.config, self.n, self.password, self.options = config, workers, password, options
        self.jobs: list = []

    def start(self) -> None:
        ex = self.submitit.AutoExecutor(folder=str(self.options["folder"]), cluster="slurm")
        params = {"slurm_array_parallelism": self.n, "name": f"base-bench-sweep-{self.config.group}"[:60]}
        o = self.options
        if o.get("partition"):
            params["slurm_partition"] = o["partition"]
        if o.get("gpus_per_worker"):
            params["gpus_per_node"] = o["gpus_per_worker"]
        if o.get("time_min"):
            params["timeout_min"] = o["time_min"]
        if o.get("mem_gb"):
            params["mem_gb"] = o["mem_gb"]
        params["cpus_per_task"] = o.get("cpus_per_worker") or 1
        ex.update_parameters(**params)
        before = os.environ.get(PASSWORD_ENV)
        if self.password:
            os.environ[PASSWORD_ENV] = self.password  # sbatch passes the environment on to the tasks
        try:
            self.jobs = ex.map_array(SlurmWorker(), [self.config.to_json()] * self.n)
        except Exception as exc:  # noqa: BLE001  (sbatch refused: a bad partition, no Slurm here...)
            first = str(exc).strip().splitlines()
            raise UsageError(f"Slurm refused the workers: {first[-1] if first else type(exc).__name__}") from None
        finally:
            if before is None:
                os.environ.pop(PASSWORD_ENV, None)
            else:
                os.environ[PASSWORD_ENV] = before

    def job_ids(self) -> list[str]:
        return [j.job_id for j in self.jobs]

    def running(self) -> int:
        """Tasks pending, running or requeued (Slurm's word; UNKNOWN until sacct knows the job)."""
        return sum(1 for j in self.jobs if j.state.split()[0] not in FINAL)

    def revive(self) -> int:
        return 0  # Slurm requeues its tasks itself

    def stop(self) -> None:
        for j in self.jobs:
            try:
                j.cancel(check=False)
            except Exception:  # noqa: BLE001, S110  (already gone)
                pass

    def wait(self, timeout: float | None = None) -> None:
        return None

    def describe(self) -> str:
        ids = self.job_ids()
        return f"{self.n} Slurm worker{'s' if self.n != 1 else ''} (job array {ids[0].split('_')[0] if ids else '?'})"

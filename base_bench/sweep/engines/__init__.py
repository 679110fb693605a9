"""Where the worker loop runs: only that differs between engines (worker.py is the loop).

    engine = make_engine("local", config, workers=2, ...)   # or "slurm" (submitit), "ray"
    engine.start()            # the workers are running (or queued on the cluster)
    engine.running()          # how many are still running or waiting to run
    engine.stop()             # SIGTERM / cancel: each member being scored is left resumable

local.py: processes on this machine (one per GPU with --device cuda:K each); slurm.py: one submitit
job array of workers, requeued on preemption or timeout; ray.py: Ray tasks on a cluster.
"""

from __future__ import annotations

ENGINES = ("local", "slurm", "ray")


def make_engine(name: str, config, workers: int, password: str | None, options: dict):
    """The engine `name` for `workers` workers of `config` (worker.Config); `options` holds the
    engine's own flags (slurm_*, ray_*, devices, log_dir)."""
    if name == "local":
        from .local import LocalEngine

        return LocalEngine(config, workers, password, options)
    if name == "slurm":
        from .slurm import SlurmEngine

        return SlurmEngine(config, workers, password, options)
    if name == "ray":
        from .ray import RayEngine

        return RayEngine(config, workers, password, options)
    raise ValueError(name)

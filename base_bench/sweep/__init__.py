"""Sweeps: many models (every checkpoint of a training run, baselines) scored as one group.

    from base_bench.sweep.coordinator import Plan, run      # what `base-bench sweep` calls
    code = run(Plan(out_dir=Path("sweeps/p7"), group="p7", store="sqlite:///sweeps/p7/results.db",
                    flags=run_flags, models=["ckpt/checkpoint-*"]))

The modules, from the outside in: coordinator.py (queue the members, start the workers, follow the
queue), members.py (MODEL arguments -> members: globs, Hub id@revision, names, steps), watch.py (new
checkpoints of a live training run), queue.py (claim, lease, heartbeat, attempts; tables in the
results store), worker.py (THE worker loop: claim -> run -> record, the same on every engine), and
engines/ (local processes, a Slurm job array through submitit, Ray tasks: only where the loop runs).
"""

"""The real engines that base-bench sweep runs its workers on (tests/clusters.py): submitit on the
machine's Slurm cluster (.ci/slurm-up), a job, a job array, a job that Slurm requeues and one it
cancels, and a task on a Ray head. Each job imports this checkout's base_bench on the node. The
functions are nested in the tests: cloudpickle sends them by value (this module is not importable
on the node nor in a Ray worker)."""

import os
import subprocess
import time

import pytest

from base_bench.results.elo import fit_elo
from base_bench.version import __version__

OUTCOMES = [(900.0, 1.0, 1.0), (1100.0, 2.0, 0.0), (1300.0, 1.0, 1.0)]


def finished(job, timeout: float = 60):
    """The job's result, or the test fails (the job cancelled) if it is not done in `timeout` s:
    submitit's own result() waits as long as Slurm says the job may still run."""
    deadline = time.monotonic() + timeout
    while not job.done():
        if time.monotonic() > deadline:
            job.cancel(check=False)
            pytest.fail(f"Slurm job {job.job_id} not done in {timeout:.0f} s (state {job.state})")
        time.sleep(0.5)
    return job.result()


@pytest.mark.slow(reason="Slurm jobs, each a Python process on the node (2-5 s)")
def test_submitit_runs_a_function_and_an_array_on_slurm(slurm_cluster, tmp_path):
    def fit(outcomes):
        import os

        from base_bench.results.elo import fit_elo

        return fit_elo(outcomes), os.environ["SLURM_JOB_ID"], os.environ.get("SLURM_ARRAY_TASK_ID")

    executor = slurm_cluster.executor(tmp_path)
    job = executor.submit(fit, OUTCOMES)
    assert finished(job) == (fit_elo(OUTCOMES), job.job_id, None)

    parts = [OUTCOMES[:1], OUTCOMES[1:], []]
    jobs = executor.map_array(fit, parts)
    results = [finished(j) for j in jobs]
    assert [r[0] for r in results] == [fit_elo(p) for p in parts]
    assert [r[2] for r in results] == ["0", "1", "2"] and len({r[1] for r in results}) == 3


@pytest.mark.slow(reason="a Slurm job requeued while it runs: Slurm starts it again 10 s later (about 15 s)")
def test_a_requeued_job_runs_again_and_submitit_returns_its_result(slurm_cluster, tmp_path):
    def twice(marks):
        import os
        import time

        from base_bench.version import __version__

        restart = os.environ.get("SLURM_RESTART_COUNT", "0")
        with open(marks, "a") as f:
            f.write(restart + "\n")
        if restart == "0":
            time.sleep(600)  # requeued meanwhile: Slurm kills this run
        return restart, __version__

    marks = tmp_path / "marks"
    job = slurm_cluster.executor(tmp_path / "jobs").submit(twice, str(marks))
    deadline = time.monotonic() + 60
    while not (marks.exists() and marks.read_text()):
        assert time.monotonic() < deadline, f"job {job.job_id} did not start in 60 s (state {job.state})"
        time.sleep(0.2)
    subprocess.run(["scontrol", "requeue", job.job_id], check=True, timeout=30)
    assert finished(job, 90) == ("1", __version__)
    assert marks.read_text().split() == ["0", "1"]


def test_submitit_sees_a_cancelled_job_end_through_sacct(slurm_cluster, tmp_path):
    job = slurm_cluster.executor(tmp_path).submit(time.sleep, 600)
    subprocess.run(["scancel", job.job_id], check=True, timeout=30)
    deadline = time.monotonic() + 30  # without accounting, done() would stay False: no result will come
    while not job.done():
        assert time.monotonic() < deadline, f"submitit still waits for cancelled job {job.job_id} ({job.state})"
        time.sleep(0.5)
    assert job.state.startswith("CANCELLED")


@pytest.mark.slow(reason="a Ray head started for the session, and a worker process in it (5-10 s)")
def test_a_ray_task_computes_with_base_bench(ray_cluster):
    import ray

    def fit(outcomes):
        import os

        from base_bench.results.elo import fit_elo

        return fit_elo(outcomes), os.getpid()

    ray.init(address=ray_cluster, log_to_driver=False, logging_level="ERROR")
    try:
        assert ray.cluster_resources()["CPU"] == 2
        rating, pid = ray.get(ray.remote(fit).remote(OUTCOMES), timeout=120)
    finally:
        ray.shutdown()
    assert rating == fit_elo(OUTCOMES) and pid != os.getpid()

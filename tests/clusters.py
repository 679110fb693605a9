"""Real clusters for the tests of work that runs elsewhere (base-bench sweep's engines): a one-node
Slurm cluster that submitit submits to, and a Ray head on this machine. No mocks. The fixtures,
which tests/conftest.py registers:

    def test_on_slurm(slurm_cluster, tmp_path):   # the cluster .ci/slurm-up started, checked once a session
        executor = slurm_cluster.executor(tmp_path)   # submitit's AutoExecutor on its default partition
        assert executor.submit(pow, 2, 5).result() == 32
    def test_on_ray(ray_cluster):                 # "IP:PORT" of a Ray head this pytest process started
        ray.init(address=ray_cluster)

Slurm: the cluster is the machine's own (sinfo, srun, sbatch, sacct on PATH), started as root by
.ci/slurm-up: one node, partition `debug`, accounting in slurmdbd (submitit polls `sacct` for its
jobs' states: without it, a job that ends without a result leaves result() waiting forever), and a
requeued job starts again about 10 s later. A job runs this Python (sys.executable) on the node, this
machine, so it imports this checkout's base_bench; submitit pickles the function with cloudpickle,
which pickles a test's nested function by value (a test module is not importable on the node).

Ray: each pytest process (each pytest-xdist worker that asks) starts a head of its own, `ray start
--head --block --port=0` (a free port, read back from the head's address file) with a temp dir of its
own under /tmp (short: Ray's socket paths must fit in 107 bytes) and 2 logical CPUs, in a process
group of its own: stopped at the end of the session by SIGTERM to that process (then SIGKILL to the
group), never by `ray stop`, which would stop every Ray instance on the machine. About 5 s to start
(6 s with two at once on two cores), 2 s to stop, 0.6 GB of memory with no task running (gcs_server,
raylet, the autoscaler's monitor, the log monitor, the minimal dashboard and its two agents), and
about 0.12 GB more per worker process. Its token authentication is off (RAY_AUTH_MODE=disabled): a
client needs only the address, whatever token a local `ray.init()` of another test left cached in
this process. The address is the machine's IP, not 127.0.0.1 (Ray replaces a loopback address), and
`ray.init()` or `address="auto"` never finds this head: its address file is in its own temp dir, not
/tmp/ray. Pass the address.

Where a cluster cannot be used the fixtures skip, saying how to get one, except with
BASE_BENCH_TEST_SLURM (or BASE_BENCH_TEST_RAY) set, where they fail: .ci/run sets both, so a broken
install must not pass as a skip.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SLURM_ENV = "BASE_BENCH_TEST_SLURM"
RAY_ENV = "BASE_BENCH_TEST_RAY"
SLURM_HOW_TO_START = (
    "start one as root with .ci/slurm-up (on Debian, after apt-get install slurm-wlm munge slurmdbd mariadb-server)"
)
RAY_HOW_TO_START = "install Ray: pip install -e '.[test]' (or '.[sweep]')"
UP = ("idle", "mixed", "allocated", "completing")  # node states (sinfo %T) that take jobs


@dataclass(frozen=True)
class SlurmCluster:
    """The machine's Slurm cluster as sinfo shows it: its default partition, a node up in it."""

    partition: str
    node: str
    cpus: int

    def executor(self, folder, **params):
        """A submitit AutoExecutor on this cluster (never the local fallback) writing to `folder`:
        the default partition, one CPU a task, 10 minutes; `params` add to or replace these."""
        import submitit

        executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
        executor.update_parameters(
            **{"slurm_partition": self.partition, "cpus_per_task": 1, "timeout_min": 10, **params}
        )
        return executor


def _run(args, timeout: float) -> tuple[int, str]:
    """Run a Slurm command: its exit status and output (stderr after stdout), or 124 on timeout."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return 124, f"no answer in {timeout:.0f} s"
    return done.returncode, (done.stdout + done.stderr).strip()


def _first(text: str) -> str:
    return (text.splitlines() or ["(no output)"])[0]


@functools.cache
def find_slurm() -> SlurmCluster | str:
    """The cluster, or why it cannot be used (one line). Asked once per process: submitit is
    installed, sinfo lists a partition with a node up, a job step runs there within 30 s, sacct answers."""
    if importlib.util.find_spec("submitit") is None:
        return "submitit is not installed (pip install -e '.[test]')"
    missing = [cmd for cmd in ("sinfo", "srun", "sbatch", "sacct", "scontrol") if shutil.which(cmd) is None]
    if missing:
        return f"Slurm's commands are not installed ({', '.join(missing)} missing)"
    rc, out = _run(["sinfo", "-h", "-o", "%P|%T|%N|%c"], 15)
    if rc != 0:
        return f"sinfo fails: {_first(out)}"
    rows = [line.split("|") for line in out.splitlines() if line.count("|") == 3]
    up = [row for row in rows if row[1] in UP]  # "idle*" (not responding), "drained"... take none
    if not up:
        return f"no Slurm node takes jobs (sinfo: {'; '.join(' '.join(r) for r in rows) or 'no partition'})"
    default = [row for row in up if row[0].endswith("*")]
    partition, _, node, cpus = (default or up)[0]
    partition = partition.rstrip("*")
    rc, out = _run(["srun", "-N1", "-p", partition, "--immediate=25", "-J", "base-bench-test", "true"], 30)
    if rc != 0:
        return f"a job step on partition {partition} did not run: {_first(out)}"
    rc, out = _run(["sacct", "-n", "-X", "-P", "-S", "now-1hours", "-o", "JobID"], 15)
    if rc != 0:
        return f"sacct fails ({_first(out)}): submitit needs Slurm's accounting (slurmdbd)"
    return SlurmCluster(partition=partition, node=node.split(",")[0], cpus=int(cpus.rstrip("+") or 1))


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    """The machine's Slurm cluster (find_slurm), checked once per session. Skipped where there is
    none, with how to start one; a failure with BASE_BENCH_TEST_SLURM set (.ci/run sets it)."""
    found = find_slurm()
    if isinstance(found, str):
        (pytest.fail if os.environ.get(SLURM_ENV) else pytest.skip)(f"{found}; {SLURM_HOW_TO_START}")
    return found


class RayHead:
    """A Ray head that this process started (`ray start --head --block`), with its temp dir."""

    def __init__(self, num_cpus: int = 2, timeout: float = 60):
        base = "/tmp" if os.access("/tmp", os.W_OK) else None  # short: $TMPDIR may be long
        self.temp_dir = Path(tempfile.mkdtemp(prefix="bb-ray-", dir=base))
        self.log = self.temp_dir / "start.log"
        # token authentication off: clients need only the address (see the module's note)
        env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
        env.pop("RAY_ADDRESS", None)
        args = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--port=0"]
        args += [f"--num-cpus={num_cpus}", "--num-gpus=0", "--object-store-memory=300000000"]
        args += ["--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={self.temp_dir}"]
        self.started, self.stopped = time.monotonic(), False
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        atexit.register(self.stop)  # a worker that dies without its session's teardown still stops it
        try:
            self.address = self._wait(timeout)
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - self.started

    def _wait(self, timeout: float) -> str:
        """The head's address (IP:PORT), once `ray start` says it started and wrote its address file."""
        address_file = self.temp_dir / "ray_current_cluster"
        while time.monotonic() - self.started < timeout:
            if self._exited():
                raise RuntimeError(f"ray start exited with status {self.process.poll()}:\n{self.log_tail()}")
            if "Ray runtime started" in self.log.read_text(errors="replace") and address_file.is_file():
                address = address_file.read_text().strip()
                if address:
                    return address
            time.sleep(0.2)
        raise RuntimeError(f"ray start did not start a head in {timeout:.0f} s:\n{self.log_tail()}")

    def _exited(self) -> bool:
        """Whether `ray start` has ended, without reaping it where the OS allows (waitid WNOWAIT): while
        it is not reaped, its process id, the id of its process group, cannot name another group."""
        if self.process.returncode is not None or not hasattr(os, "waitid"):
            return self.process.poll() is not None
        return os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None

    def log_tail(self, lines: int = 20) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def memory_mb(self) -> float:
        """Resident memory of the head's processes (its process group), in MB."""
        out = subprocess.run(["ps", "-o", "rss=", "-g", str(self.process.pid)], capture_output=True, text=True).stdout
        return sum(int(n) for n in out.split()) / 1024

    def stop(self) -> None:
        """SIGTERM to `ray start --block` (it drains the node and stops what it started), SIGKILL to
        its process group after 15 s or for anything left, then the temp dir removed. Once only."""
        if self.stopped:
            return
        self.stopped = True
        if not self._exited():
            self.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 15
            while not self._exited() and time.monotonic() < deadline:
                time.sleep(0.1)
        if self.process.returncode is None:  # not reaped yet: the group is still this head's
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.process.wait()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_cluster():
    """The address (IP:PORT) of a Ray head with 2 CPUs that this pytest process starts on first use
    and stops at the end of the session (RayHead): each xdist worker that asks has its own. Skipped
    where Ray is not installed or the head does not start; a failure with BASE_BENCH_TEST_RAY set."""
    fail = pytest.fail if os.environ.get(RAY_ENV) else pytest.skip
    if importlib.util.find_spec("ray") is None:
        fail(f"Ray is not installed; {RAY_HOW_TO_START}")
    try:
        head = RayHead()
    except RuntimeError as e:
        fail(f"a Ray head did not start: {e}")
    yield head.address
    head.stop()

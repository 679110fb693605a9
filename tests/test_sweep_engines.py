"""The sweep's engines on real clusters: a one-node Slurm cluster through submitit, and a Ray head
(tests/clusters.py). The same worker loop as --engine local, so the same reports; a Slurm task
requeued mid-member finishes the member once. Tiny random checkpoints."""

import json
import subprocess

import pytest
from sweeprun import (
    FAST,
    assert_same_scores,
    checkpoints,
    jobs,
    lines,
    member_dir,
    member_report,
    ordinary,
    start,
    sweep,
    wait_for,
)

pytestmark = pytest.mark.slow(reason="workers on a real Slurm cluster or a real Ray cluster, scoring tiny models")


@pytest.fixture(autouse=True)
def _no_sweep_left_running(no_sweep_left_running):
    pass


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    root = tmp_path_factory.mktemp("engines")
    ckpts = checkpoints(root / "ckpt", [10, 20, 30])
    return root, ckpts, [ordinary(c, root / f"plain-{c.name}") for c in ckpts]


def test_a_slurm_sweep_equals_ordinary_runs(three, slurm_cluster):
    root, ckpts, plain = three
    rc, out, err = sweep(
        root, "ckpt/checkpoint-*", "--out-dir", "slurm", "--engine", "slurm", "--workers", "2",
        "--slurm-partition", slurm_cluster.partition, "--slurm-time", "10", *FAST,
    )  # fmt: skip
    assert rc == 0, (out, err[-3000:])
    assert "started 2 Slurm workers (job array" in out and "3 of 3 members done" in out
    assert "a SQLite store is for workers on one machine" in err
    for c, rep in zip(ckpts, plain):
        assert_same_scores(member_report(root / "slurm", c), rep)
    workers = {r["worker"] for r in jobs(root / "slurm" / "results.db")}
    assert all(w.startswith("slurm-") for w in workers), workers
    # submitit's own files are under the sweep's folder; the second sweep submits nothing
    assert list((root / "slurm" / ".sweep" / "slurm").iterdir())
    rc, out, err = sweep(
        root, "ckpt/checkpoint-*", "--out-dir", "slurm", "--engine", "slurm", "--workers", "2",
        "--slurm-partition", slurm_cluster.partition, "--slurm-time", "10", *FAST,
    )  # fmt: skip
    assert rc == 0 and "(0 new, 3 done, 0 failed)" in out and "started" not in out, (out, err)


def test_a_slurm_task_requeued_mid_member_finishes_it_once(tmp_path, slurm_cluster):
    (ckpt,) = checkpoints(tmp_path / "ckpt", [5])
    flags = ("--data", "bundled", "--batch-size", "4")
    p = start(
        tmp_path, "ckpt/checkpoint-*", "--out-dir", "out", "--engine", "slurm",
        "--slurm-partition", slurm_cluster.partition, *flags,
    )  # fmt: skip
    partial = member_dir(tmp_path / "out", ckpt) / "partial_results.jsonl"
    wait_for(lambda: lines(partial) >= 40, 300)
    (row,) = [r for r in jobs(tmp_path / "out" / "results.db") if r["state"] == "running"]
    task = row["worker"].removeprefix("slurm-").split(".")[0]  # JOBID or JOBID_TASK
    subprocess.run(["scontrol", "requeue", task], check=True, capture_output=True, timeout=60)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, (out, err[-3000:])
    (done,) = jobs(tmp_path / "out" / "results.db")
    # the first run released it on Slurm's SIGTERM (its attempt not counted); the requeued run of
    # the same task (SLURM_RESTART_COUNT 1) finished it
    assert (done["state"], done["attempts"]) == ("done", 1) and done["worker"] == f"slurm-{task}.1", done
    got = member_report(tmp_path / "out", ckpt)
    assert 0 < got["timing"]["items_scored_this_session"] < len(got["items"])
    assert_same_scores(got, ordinary(ckpt, tmp_path / "plain", *flags))


def test_a_ray_sweep_equals_ordinary_runs(three, ray_cluster):
    root, ckpts, plain = three
    rc, out, err = sweep(
        root, "ckpt/checkpoint-*", "--out-dir", "ray", "--engine", "ray", "--workers", "2",
        "--ray-address", ray_cluster, *FAST,
    )  # fmt: skip
    assert rc == 0, (out, err[-3000:])
    assert "started 2 Ray tasks" in out and "3 of 3 members done" in out
    for c, rep in zip(ckpts, plain):
        assert_same_scores(member_report(root / "ray", c), rep)
    assert all(r["worker"].startswith("ray-") for r in jobs(root / "ray" / "results.db"))
    stats = [json.loads(p.read_text()) for p in (root / "ray" / ".sweep" / "stats").iterdir()]
    assert sum(s["done"] for s in stats) == 3


def test_an_engine_that_cannot_start_says_so_in_one_line(tmp_path):
    (tmp_path / "ckpt" / "checkpoint-1").mkdir(parents=True)
    rc, out, err = sweep(
        tmp_path, "ckpt/checkpoint-*", "--out-dir", "out", "--engine", "ray", "--ray-address", "127.0.0.1:9", *FAST,
        timeout=300,
    )  # fmt: skip
    assert rc == 2 and "no Ray cluster answers at --ray-address 127.0.0.1:9" in err and "Traceback" not in err, err

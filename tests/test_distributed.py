"""Several ranks on CPU: torchrun with the gloo backend, 2 or 3 ranks, tiny random models.

Every multi-rank report must equal the single-process one (every choice within 1e-4, the same
predictions, the same Elo and intervals); runs resume across world sizes; a killed rank loses no
item it saved; bad setups end on every rank with one line on rank 0 and no hang.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from base_bench.engine.distributed import Ranks, batch_cost, make_batches, share
from base_bench.engine.scoring import Encoded

from fixtures import write_dataset
from tiny import save_tiny

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
TIMEOUT = 300


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("dist")
    write_dataset(d / "data")
    save_tiny(d / "tiny")
    save_tiny(d / "other", seed=1)
    return d


def flags(setup, out, *extra):
    return [
        "--model",
        str(setup / "tiny"),
        "--local-data",
        str(setup / "data"),
        "--device",
        "cpu",
        "--out-dir",
        str(out),
        "--dist-timeout",
        "60",
        *map(str, extra),
    ]


def torchrun(n, args, env=None, script=None):
    """`torchrun --nproc_per_node n` on benchmark.py (or tests/rankrun.py); returns the CompletedProcess."""
    cmd = [
        *TORCHRUN,
        "--nproc_per_node",
        str(n),
        "--master_port",
        str(free_port()),
        str(script or ROOT / "benchmark.py"),
        *args,
    ]
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def single(args):
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmark.py"), *args], capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report(out) -> dict:
    return json.loads((Path(out) / "report.json").read_text())


def assert_same(a: dict, b: dict):
    assert [i["id"] for i in a["items"]] == [i["id"] for i in b["items"]]
    worst = max(
        abs(x["logprob"] - y["logprob"])
        for i, j in zip(a["items"], b["items"])
        for x, y in zip(i["choices"], j["choices"])
    )
    assert worst < 1e-4
    assert [i["prediction"] for i in a["items"]] == [i["prediction"] for i in b["items"]]
    assert a["results"] == b["results"]  # the same Elo, intervals and accuracies, to the bit


def partial_ids(out) -> list[str]:
    return [json.loads(x)["id"] for x in (Path(out) / "partial_results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(setup):
    """One process, the whole generated set."""
    out = setup / "single"
    p = single(flags(setup, out))
    assert p.returncode == 0, p.stderr[-2000:]
    return report(out)


# ---------------------------------------------------------------- sharing (pure)


def enc(i, n):
    return Encoded(f"x{i}", tuple(range(n)), ((1, 2), (3,), (4, 5, 6), (7,)))


def test_share_balances_packed_tokens_not_item_counts():
    lengths = [300, 280, 90, 80, 70, 60, 50, 40, 30, 20, 12, 10, 9, 8]
    batches = make_batches([enc(i, n) for i, n in enumerate(lengths)], 2)
    shares = share(batches, 2)
    assert sorted(b[0].id for s in shares for b in s) == sorted(b[0].id for b in batches)  # disjoint, complete
    loads = [sum(batch_cost(b) for b in s) for s in shares]
    assert max(loads) - min(loads) <= max(batch_cost(b) for b in batches)
    assert len(shares[0]) != len(shares[1])  # balanced by tokens, so the counts differ
    assert share(batches, 1) == [batches]
    assert share(batches[:1], 3)[1:] == [[], []]


def test_one_process_is_rank_0_of_1():
    d = Ranks.current()
    assert (d.rank, d.world, d.is_main) == (0, 1, True)
    assert d.all_gather("x") == ["x"] and d.broadcast(5) == 5 and d.agree(True) and not d.agree(False)
    d.check_same({"a": 1})


# ---------------------------------------------------------------- data parallel through the CLI


@pytest.mark.slow(reason="torchrun: 2 or 3 rank processes per case, each loading a model")
def test_two_ranks_equal_one_process(setup, reference):
    out = setup / "two"
    p = torchrun(2, flags(setup, out))
    assert p.returncode == 0, p.stderr[-3000:]
    rep = report(out)
    assert_same(reference, rep)
    assert rep["config"]["world_size"] == 2 and reference["config"]["world_size"] == 1
    assert rep["config"]["threads"] == 1
    ids = partial_ids(out)
    assert len(ids) == 350 == len(set(ids))
    # only rank 0 talks: one summary, one progress bar
    assert p.stdout.count("Overall Elo") == 1 and p.stdout.count("wrote ") == 1
    assert p.stderr.count("scoring:") >= 1 and "rank 1" not in p.stderr


@pytest.mark.slow(reason="torchrun: 2 or 3 rank processes per case, each loading a model")
def test_three_ranks_with_python_m_base_bench(setup, reference):
    out = setup / "three"
    cmd = [
        *TORCHRUN,
        "--nproc_per_node",
        "3",
        "--master_port",
        str(free_port()),
        "-m",
        "base_bench",
        *flags(setup, out, "--batch-size", 5),
    ]
    p = subprocess.run(
        cmd, capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert p.returncode == 0, p.stderr[-3000:]
    rep = report(out)
    assert_same(reference, rep)
    assert rep["config"]["world_size"] == 3


@pytest.mark.slow(reason="torchrun: 2 or 3 rank processes per case, each loading a model")
def test_resume_across_world_sizes(setup, reference):
    a = setup / "grow-2-to-1"
    p = torchrun(2, flags(setup, a, "--limit", 40))
    assert p.returncode == 0, p.stderr[-3000:]
    p = single(flags(setup, a, "--resume"))
    assert p.returncode == 0, p.stderr[-3000:]
    rep = report(a)
    assert rep["timing"]["items_scored_this_session"] == 310 and rep["config"]["world_size"] == 1
    assert_same(reference, rep)
    b = setup / "grow-1-to-3"
    p = single(flags(setup, b, "--limit", 40))
    assert p.returncode == 0, p.stderr[-3000:]
    p = torchrun(3, flags(setup, b, "--resume"))
    assert p.returncode == 0, p.stderr[-3000:]
    rep = report(b)
    assert rep["timing"]["items_scored_this_session"] == 310 and rep["config"]["world_size"] == 3
    assert_same(reference, rep)
    for out in (a, b):
        ids = partial_ids(out)
        assert len(ids) == 350 == len(set(ids))  # no item scored twice
        assert json.loads((out / "run_config.json").read_text())["signature"].get("world_size") is None


@pytest.mark.slow(reason="torchrun: 2 or 3 rank processes per case, each loading a model")
@pytest.mark.parametrize("victim", ["0", "1"])
def test_sigkill_of_one_rank_keeps_what_it_saved(setup, reference, tmp_path, victim):
    out = tmp_path / "killed"
    log = tmp_path / "victim-saved.json"
    p = torchrun(
        2,
        flags(setup, out, "--batch-size", 4),
        script=ROOT / "tests" / "rankrun.py",
        env={"RANKRUN_FAULT": "kill-after:5", "RANKRUN_RANK": victim, "RANKRUN_LOG": str(log)},
    )
    assert p.returncode != 0
    saved_by_victim = json.loads(log.read_text())
    ids = set(partial_ids(out))
    assert len(saved_by_victim) == 20 and set(saved_by_victim) <= ids  # every item the killed rank had saved
    assert len(ids) > 20  # and the other rank's
    assert not (out / "report.json").exists()
    p = single(flags(setup, out, "--resume"))
    assert p.returncode == 0, p.stderr[-3000:]
    rep = report(out)
    assert rep["timing"]["items_scored_this_session"] == 350 - len(ids)
    assert_same(reference, rep)
    assert sorted(set(partial_ids(out))) == sorted(i["id"] for i in rep["items"])


@pytest.mark.slow(reason="torchrun: 2 or 3 rank processes per case, each loading a model")
def test_two_nodes_without_a_shared_disk(setup, reference, tmp_path):
    """Two torchrun agents, one per "node", meeting through the c10d rendezvous; the second node's
    rank does not see rank 0's out-dir, so rank 0 saves that rank's results after each exchange."""
    port = free_port()
    out = tmp_path / "nodes"
    procs = [
        subprocess.Popen(
            [
                *TORCHRUN,
                "--nnodes",
                "2",
                "--node_rank",
                str(n),
                "--nproc_per_node",
                "1",
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                f"127.0.0.1:{port}",
                "--rdzv-id",
                "bb",
                str(ROOT / "tests" / "rankrun.py"),
                *flags(setup, out),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "OMP_NUM_THREADS": "1", "RANKRUN_FAULT": "own-disk"},
        )
        for n in (0, 1)
    ]
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    rep = report(out)
    assert rep["config"]["world_size"] == 2
    assert_same(reference, rep)
    ids = partial_ids(out)
    assert len(ids) == 350 == len(set(ids))
    assert "Overall Elo" in outs[0][0] and "Overall Elo" not in outs[1][0]  # rank 0 (node 0) speaks


def run_with_fault(setup, out, extra, env) -> tuple[subprocess.CompletedProcess, dict]:
    """2 ranks of tests/rankrun.py with `extra` flags and a fault; it must finish. (process, report)"""
    p = torchrun(2, flags(setup, out, *extra), script=ROOT / "tests" / "rankrun.py", env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return p, report(out)


@pytest.mark.slow(reason="torchrun: 2 or 3 rank processes per case, each loading a model")
def test_oom_on_one_rank_halves_the_batch_on_every_rank(setup, reference, tmp_path):
    # more than 3 items: the start-up check (3 items) fits, batches of 8 and 4 do not
    p, rep = run_with_fault(setup, tmp_path / "oom-some", ["--batch-size", 8], {"RANKRUN_FAULT": "oom-above:3"})
    assert "on rank 1; batch size lowered to 4" in p.stderr and "batch size lowered to 2" in p.stderr
    assert rep["config"]["batch_size_used"] == 2
    assert_same(reference, rep)


@pytest.mark.slow(reason="torchrun: 2 or 3 rank processes per case, each loading a model")
def test_token_budget_search_and_back_off_agree_on_every_rank(setup, reference, tmp_path):
    """`--batch-size auto` on a GPU searches the token budget; rank 1 has less memory than rank 0,
    so every rank takes the budget rank 1 allows. Then `--batch-tokens` larger than rank 1 allows:
    every rank halves the budget until rank 1's passes fit."""
    fault = {"RANKRUN_FAULT": "oom-fed-above:900"}
    p, rep = run_with_fault(setup, tmp_path / "auto", ["--batch-size", "auto"], {**fault, "RANKRUN_AS_GPU": "1"})
    cfg = rep["config"]
    assert cfg["batch_size"] == "auto" and cfg["batch_size_used"] is None
    assert 0 < cfg["batch_tokens_used"] <= 900 < cfg["batch_tokens_used"] + cfg["row_length"]
    assert f"--batch-size auto: {cfg['batch_tokens_used']} tokens per pass" in p.stderr
    assert "lowered" not in p.stderr  # the search found what fits on both ranks
    assert_same(reference, rep)

    p, rep = run_with_fault(setup, tmp_path / "halved", ["--batch-tokens", 3000], fault)
    assert "on rank 1; tokens per pass lowered to 1500" in p.stderr and "lowered to 750" in p.stderr
    assert rep["config"]["batch_tokens"] == 3000 and rep["config"]["batch_tokens_used"] == 750
    assert_same(reference, rep)


# ---------------------------------------------------------------- bad setups: one line on rank 0, no hang


def error_lines(p) -> list[str]:
    return [x for x in p.stderr.splitlines() if x.startswith("base-bench: error:")]


def exit_codes(p) -> list[int]:
    """Every failed rank's exit code, from torchrun's failure summary."""
    return sorted(int(x.split(":")[1].split()[0]) for x in p.stderr.splitlines() if x.strip().startswith("exitcode"))


def stopped_both(p) -> bool:
    """Both ranks exited with the usage code 2. torchrun sends SIGTERM to a rank still leaving once
    another has exited; a rank holds it while it destroys its process group and ignores it after
    (base_bench/engine/distributed.py `leave`), so it is neither -15 nor an abort (-6)."""
    return exit_codes(p) == [2, 2]


def ours_in_traceback(p) -> bool:
    """A Python traceback through base-bench's code (torchrun prints its own ChildFailedError one)."""
    return f'File "{ROOT / "base_bench"}' in p.stderr


@pytest.mark.slow(reason="torchrun: 2 or 3 rank processes per case, each loading a model")
@pytest.mark.parametrize(
    "fault, message",
    [
        ("oom-after:1", "out of accelerator memory on rank 1 even at batch size 1"),
        ("oom", "out of accelerator memory while checking packing on 3 items; try a smaller dtype or another device"),
    ],
)
def test_oom_at_batch_size_1_stops_every_rank(setup, tmp_path, fault, message):
    out = tmp_path / "oom-all"
    p = torchrun(
        2, flags(setup, out, "--batch-size", 2), script=ROOT / "tests" / "rankrun.py", env={"RANKRUN_FAULT": fault}
    )
    assert p.returncode != 0 and stopped_both(p), p.stderr[-4000:]
    assert error_lines(p) == [f"base-bench: error: {message}"]  # said once, by rank 0
    assert not ours_in_traceback(p)


@pytest.mark.slow(reason="torchrun: 2 or 3 rank processes per case, each loading a model")
@pytest.mark.parametrize(
    "swap, fragment",
    [
        ("--local-data", "the ranks disagree on the data SHA-256"),
        ("--model", "the ranks disagree on the model fingerprint"),
    ],
)
def test_ranks_that_disagree_are_refused_before_scoring(setup, tmp_path, swap, fragment):
    other = tmp_path / "otherdata"
    recs_path = write_dataset(other)
    recs_path.write_text(recs_path.read_text().replace("she looked at", "he looked at"))
    new = str(other) if swap == "--local-data" else str(setup / "other")
    out = tmp_path / "disagree"
    p = torchrun(2, flags(setup, out), script=ROOT / "tests" / "rankrun.py", env={"RANKRUN_FAULT": f"arg:{swap}={new}"})
    assert p.returncode != 0 and stopped_both(p), p.stderr[-4000:]
    lines = error_lines(p)
    assert len(lines) == 1 and fragment in lines[0], p.stderr[-2000:]
    assert not ours_in_traceback(p)
    assert not (out / "partial_results.jsonl").exists()  # nothing was scored


@pytest.mark.slow(reason="torchrun: 2 rank processes, each loading a model")
def test_a_sigterm_while_a_refused_rank_leaves_changes_nothing(setup, tmp_path):
    """torchrun's SIGTERM arriving while a refused rank destroys its process group: the group is
    still destroyed (nothing of gloo's is left for the interpreter's shutdown, which could abort
    the rank), and both ranks exit 2 with one error line."""
    other = tmp_path / "otherdata"
    write_dataset(other).write_text(write_dataset(other).read_text().replace("she looked at", "he looked at"))
    log = tmp_path / "teardown"
    env = {"RANKRUN_FAULT": f"arg:--local-data={other}", "RANKRUN_TEARDOWN": "term", "RANKRUN_LOG": str(log)}
    p = torchrun(2, flags(setup, tmp_path / "out"), script=ROOT / "tests" / "rankrun.py", env=env)
    assert stopped_both(p), p.stderr[-4000:]
    assert Path(f"{log}.1").read_text() == "destroyed"
    lines = error_lines(p)
    assert len(lines) == 1 and "the ranks disagree on the data SHA-256" in lines[0], p.stderr[-2000:]


@pytest.mark.slow(
    reason="a subprocess per case: benchmark.py started as a lone rank, one of them waiting out a rendezvous timeout"
)
def test_world_size_without_rendezvous_is_one_line(setup, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    p = subprocess.run(
        [sys.executable, str(ROOT / "benchmark.py"), *flags(setup, tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "WORLD_SIZE": "2", "RANK": "0"},
    )
    assert p.returncode == 2 and error_lines(p) and "MASTER_ADDR, MASTER_PORT is not set" in p.stderr
    # an address where nobody answers: rank 1 gives up after --dist-timeout
    port = free_port()
    args = flags(setup, tmp_path / "y")
    args[args.index("--dist-timeout") + 1] = "3"
    p = subprocess.run(
        [sys.executable, str(ROOT / "benchmark.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
    )
    assert p.returncode == 2, p.stderr[-2000:]
    lines = error_lines(p)
    assert len(lines) == 1 and "could not join the rendezvous at 127.0.0.1" in lines[0]
    assert "Traceback" not in p.stderr and not (tmp_path / "y").exists()


def test_each_rank_takes_its_local_gpu_and_cuda_n_is_refused(monkeypatch):
    import torch

    from base_bench.commands.cli import _rank_device
    from base_bench.errors import DistributedError

    monkeypatch.setenv("LOCAL_RANK", "3")
    assert _rank_device(torch.device("cuda"), "cuda", 4) == torch.device("cuda", 3)
    assert _rank_device(torch.device("cuda"), "auto", 4) == torch.device("cuda", 3)
    assert _rank_device(torch.device("cpu"), "cpu", 4) == torch.device("cpu")
    assert _rank_device(torch.device("cuda", 1), "cuda:1", 1) == torch.device("cuda", 1)
    with pytest.raises(DistributedError, match="--device cuda:1 names one GPU.*pass --device cuda"):
        _rank_device(torch.device("cuda", 1), "cuda:1", 4)


# ---------------------------------------------------------------- evaluate() on every rank (API)


@pytest.mark.slow(reason="torchrun: 2 or 3 rank processes per case, each loading a model")
@pytest.mark.parametrize("wrap", ["replica", "fsdp2", "fsdp1"])
def test_evaluate_on_every_rank(setup, tmp_path, wrap):
    from base_bench import evaluate

    from tiny import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    want = evaluate(tiny_model("llama", tok), tok, str(setup / "data"), limit=45, batch_size=4, progress=False)
    cmd = [
        *TORCHRUN,
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        str(ROOT / "tests" / "rankeval.py"),
        str(tmp_path),
        str(setup / "data"),
        "tiny",
        wrap,
        "45",
        "4",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for g in got:  # the full report on every rank
        assert_same(want, g["report"])
        assert g["report"]["config"]["world_size"] == 2
    assert got[0]["report"]["config"]["model"]["fingerprint"] == got[1]["report"]["config"]["model"]["fingerprint"]
    # 45 items in batches of 4 is 12 batches, shared unevenly by tokens: every rank still calls the
    # model equally often (dummy batches), as FSDP's collective forwards need
    assert got[0]["forward_calls"] == got[1]["forward_calls"]
    assert (tmp_path / "run-rank0" / "report.json").exists() and not (tmp_path / "run-rank1").exists()
    assert json.loads((tmp_path / "run-rank0" / "report.json").read_text())["results"] == want["results"]

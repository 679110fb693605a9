"""--backend server against a server that misbehaves on purpose (tests/hostileserver.py): it passes
the start-up check and then sends what an attacker controlling it would. Every case runs the CLI
in this process (cli.main) and asserts: no traceback (main returns), exit 0 or 2, one
`base-bench: error:` line for a refusal, and the API key (random, chosen here) in no output line
and no file under the out-dir, not even a 12-character piece of it. Every mode that would change a
score is refused.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest
from hostileserver import HostileServer

from base_bench import redact
from base_bench.commands.cli import main
from base_bench.engine.runstore import PARTIAL
from base_bench.items.dataset import bundled_path

# slow: each case is a whole served run over real HTTP (the start-up check, the /tokenize check of
# every text, 16 items): 3 to 12 s apiece, about 3 minutes for the module
pytestmark = pytest.mark.slow(reason="a real server: each case is a served run over HTTP, 3 to 12 s")

LIMIT = "16"  # two batches of 8 items: the first is saved before a mid-run fault


@pytest.fixture
def key(monkeypatch):
    k = "sk-" + secrets.token_urlsafe(24)
    monkeypatch.setenv("BB_HOSTILE_KEY", k)
    yield k
    redact.forget_all()


def run(capsys, srv, out_dir: Path, tok_dir, *extra, tokenizer=True):
    argv = ["--backend", "server", "--model", "tiny", "--base-url", srv.url, "--api-key-env", "BB_HOSTILE_KEY"]
    argv += ["--tokenizer", str(tok_dir)] if tokenizer else []
    argv += ["--data", str(bundled_path()), "--limit", LIMIT, "--batch-size", "8", "--concurrency", "1"]
    argv += ["--max-retries", "1", "--request-timeout", "20", "--out-dir", str(out_dir), *extra]
    code = main(argv)  # a traceback would raise here
    out, err = capsys.readouterr()
    return code, out, err


def key_nowhere(key: str, out_dir: Path, *texts: str) -> None:
    pieces = [key] + [key[i : i + 12] for i in range(0, len(key) - 11, 4)]
    for t in texts:
        assert not any(p in t for p in pieces), t[-2000:]
    for f in out_dir.rglob("*") if out_dir.exists() else []:
        if f.is_file():
            data = f.read_text(errors="replace")
            assert not any(p in data for p in pieces), f


def error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("base-bench")]
    assert len(lines) == 1 and lines[0].startswith("base-bench: error: "), err[-3000:]
    assert "Traceback" not in err
    return lines[0]


def report(out_dir: Path) -> dict:
    return json.loads((out_dir / "report.json").read_text())


def partial_items(out_dir: Path) -> int:
    p = out_dir / PARTIAL
    return len(p.read_text().splitlines()) if p.exists() else 0


def test_the_honest_fake_server_is_scored(capsys, server, tok_dir, tmp_path, key):
    code, out, err = run(capsys, server, tmp_path / "run", tok_dir)
    assert code == 0, err[-3000:]
    rep = report(tmp_path / "run")
    assert len(rep["items"]) == int(LIMIT) and "fake/tiny" in json.dumps(rep)
    assert server.seen["auth"] == f"Bearer {key}"
    key_nowhere(key, tmp_path / "run", out, err)


@pytest.mark.parametrize("mode", ["root_key", "version_key", "fingerprint_key"])
def test_a_server_string_holding_the_key_is_withheld_from_every_file(capsys, server, tok_dir, tmp_path, key, mode):
    server.mode = mode
    code, out, err = run(capsys, server, tmp_path / "run", tok_dir)
    assert code == 0, err[-3000:]
    assert "(withheld: it holds the API key or a token)" in json.dumps(report(tmp_path / "run"))
    assert "is withheld from the report" in err
    key_nowhere(key, tmp_path / "run", out, err)


# mode -> words of the one error line; each would otherwise crash the run, print the key or change a score
REFUSED = {
    "models_key": "does not serve 'tiny'; it serves (an id withheld), (an id withheld)",
    "straddle": "answered /v1/models with HTTP 400",
    "error_key": "answered /v1/completions with HTTP 400",
    "token_key": "the tokenizer does not match the server's",
    "logprob_key": "as the log-prob of prompt token",
    "deep_json": "with something that is not JSON (nested",
    "bad_gzip": "not the gzip or deflate it says it is",
    "gzip_bomb": "sent an answer that decodes to over",
    "big_int": "a number of 401 digits as the log-prob",
    "plp_not_dict": "prompt_logprobs at position 1 are for token",
    "short_plp": "prompt_logprobs for a prompt of",
    "logprobs_list": "no echoed token_logprobs",
    "positive": "returned 50.0 as the log-prob of prompt token",
    "nan": "returned nan as the log-prob",
    "short_echo": "echoed log-probs for a prompt of",
    "dup_index": "choice indices",
    "redirect_body": "with HTTP 302 (Found), which base-bench does not follow",
    "escape": "answered /v1/models with HTTP 400",
}


@pytest.mark.parametrize("mode", sorted(REFUSED))
def test_a_hostile_answer_ends_the_run_in_one_line_with_the_key_nowhere(capsys, server, tok_dir, tmp_path, key, mode):
    server.mode = mode
    code, out, err = run(capsys, server, tmp_path / "run", tok_dir)
    line = error_line(err)
    assert code == 2 and REFUSED[mode] in line, line
    assert "\x1b" not in out + err and "\x07" not in out + err
    key_nowhere(key, tmp_path / "run", out, err)
    if mode not in {"models_key", "straddle", "escape"}:
        assert not (tmp_path / "run" / "report.json").exists()


@pytest.mark.parametrize("mode", ["positive", "short_echo", "dup_index"])
def test_a_mid_run_violation_keeps_the_finished_items_for_resume(capsys, server, tok_dir, tmp_path, key, mode):
    """The first batch of 8 is scored honestly and saved; the second breaks an invariant: the run
    stops naming the item, and --resume against the mended server finishes with the same scores
    as a run that was honest throughout."""
    server.mode = mode
    code, out, err = run(capsys, server, tmp_path / "run", tok_dir)
    line = error_line(err)
    assert code == 2 and "item " in line and "the finished items are kept" in line or mode == "dup_index", line
    assert partial_items(tmp_path / "run") == 8
    key_nowhere(key, tmp_path / "run", out, err)
    server.mode = "no_plp" if mode == "short_echo" else None  # the same protocol as the run began with
    code, out, err = run(capsys, server, tmp_path / "run", tok_dir, "--resume")
    assert code == 0, err[-3000:]
    code, _, err = run(capsys, server, tmp_path / "fresh", tok_dir)
    assert code == 0, err[-3000:]
    assert report(tmp_path / "run")["items"] == report(tmp_path / "fresh")["items"]


@pytest.mark.parametrize("mode", ["plp_first_entry", "no_plp"])
def test_answers_that_change_no_score_are_read(capsys, server, tok_dir, tmp_path, key, mode):
    """A first prompt_logprobs entry that is not vLLM's None is not a value (no traceback either),
    and the echo protocol scores as prompt_logprobs does."""
    code, _, err = run(capsys, server, tmp_path / "honest", tok_dir)
    assert code == 0, err[-3000:]
    server.mode = mode
    code, out, err = run(capsys, server, tmp_path / "run", tok_dir)
    assert code == 0, err[-3000:]
    assert report(tmp_path / "run")["items"] == report(tmp_path / "honest")["items"]
    key_nowhere(key, tmp_path / "run", out, err)


def test_redirects_are_never_followed(capsys, server, tok_dir, tmp_path, key):
    second = HostileServer(server.tok).start()
    try:
        server.mode, server.redirect_to = "redirect_models", second.url + "/models"
        code, out, err = run(capsys, server, tmp_path / "run", tok_dir)
        assert code == 2 and "HTTP 302" in error_line(err)
        assert second.seen["requests"] == 0
        key_nowhere(key, tmp_path / "run", out, err)
    finally:
        second.close()


def test_a_slow_drip_ends_at_the_request_timeout(capsys, server, tok_dir, tmp_path, key):
    server.mode = "drip"
    code, out, err = run(capsys, server, tmp_path / "run", tok_dir, "--request-timeout", "1", "--max-retries", "0")
    assert code == 2 and "no answer within 1 s" in error_line(err)
    key_nowhere(key, tmp_path / "run", out, err)


def test_no_tokenizer_is_loaded_from_a_withheld_root(capsys, server, tok_dir, tmp_path, key):
    """Without --tokenizer the server's root names the tokenizer; a root holding the key is withheld
    and so names none."""
    server.mode = "root_key"
    code, out, err = run(capsys, server, tmp_path / "run", tok_dir, tokenizer=False)
    assert code == 2 and "does not say where its model comes from" in error_line(err)
    key_nowhere(key, tmp_path / "run", out, err)


@pytest.mark.parametrize("bad", ["sk-line\nbreak", "sk-sp ace", "sk-caf\u00e9", "sk-tab\tx"])
def test_a_key_that_is_not_visible_ascii_is_refused_before_any_request(capsys, server, tok_dir, tmp_path, bad):
    os.environ["BB_HOSTILE_KEY"] = bad
    try:
        code, out, err = run(capsys, server, tmp_path / "run", tok_dir)
    finally:
        del os.environ["BB_HOSTILE_KEY"]
        redact.forget_all()
    assert code == 2 and "holds a character other than visible ASCII" in error_line(err)
    assert server.seen["requests"] == 0
    assert bad.strip() not in out + err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--backend", "vllm", "--vllm-arg", "hf_token={k}"], "--vllm-arg hf_token=... holds a secret"),
        (["--backend", "vllm", "--model-arg", "hf_token={k}"], "--vllm-arg hf_token=... holds a secret"),
        (["--model-arg", "hf_token={k}"], "--model-arg hf_token=... holds a secret"),
        (["--model-arg", "api_key={k}"], "--model-arg api_key=... holds a secret"),
        (["--model-arg", "use_safetensors=false"], "--model-arg use_safetensors: only true is taken"),
    ],
)
def test_secrets_and_pickle_are_refused_as_model_arguments(capsys, tmp_path, key, argv, words):
    argv = [a.format(k=key) for a in argv]
    code = main(["--model", str(tmp_path / "no-model"), *argv, "--out-dir", str(tmp_path / "run")])
    out, err = capsys.readouterr()
    assert code == 2 and words in error_line(err)
    key_nowhere(key, tmp_path / "run", out, err)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("data", ["/dev/zero", "fifo", "deep", "bad_utf8"])
def test_bad_data_files_give_one_line_before_the_server_is_asked(capsys, server, tok_dir, tmp_path, key, data):
    path = tmp_path / "data.jsonl"
    if data == "/dev/zero":
        path = Path("/dev/zero")
    elif data == "fifo":
        os.mkfifo(path)
    elif data == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    else:
        path.write_bytes(b'{"id": "\xff\xfe"}\n')
    argv = ["--backend", "server", "--model", "tiny", "--base-url", server.url, "--api-key-env", "BB_HOSTILE_KEY"]
    code = main([*argv, "--tokenizer", str(tok_dir), "--data", str(path), "--out-dir", str(tmp_path / "run")])
    out, err = capsys.readouterr()
    assert code == 2, err
    error_line(err)
    key_nowhere(key, tmp_path / "run", out, err)
    assert server.seen["completions"] == 0

"""--backend server given what a stranger controls: a --base-url that carries a password or a key in
its query, a --base-url that cannot be parsed, and a server (tests/hostileserver.py, real HTTP on
127.0.0.1) that echoes the password, answers an error with JSON nested 100,000 deep, answers
/tokenize with 262,144 ids per text, or sends log-probs whose sum overflows a float.

What must hold: one `base-bench: error:` line and exit 2, never a traceback; the password, the
query's values and the Basic credential in no output line and no file, not even a piece of them;
memory bounded whatever the server sends; no Infinity in any number the check or the scoring makes.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hostileserver import HUGE_IDS, huge_tokens

from base_bench import redact, untrusted
from base_bench.backends.prompt_logprobs import EngineCheckError, PromptScorer, check_engine
from base_bench.backends.server import ServerBackend, _message, public_url
from base_bench.commands.cli import main
from base_bench.engine.scoring import Encoded
from base_bench.errors import ModelError, ScoringError, UsageError
from base_bench.items.dataset import bundled_path, load_dataset_file

SLOW = pytest.mark.slow(reason="a real server: a served run over HTTP to tests/hostileserver.py, 3 to 10 s")
ROOT = Path(__file__).parents[1]


@pytest.fixture(autouse=True)
def forget():
    yield
    redact.forget_all()


def pieces(secret: str, n: int) -> list[str]:
    return [secret[i : i + n] for i in range(len(secret) - n + 1)]


def nowhere(secret: str, out_dir: Path | None, *texts: str, n: int = 4) -> None:
    """No piece of `secret` of `n` characters in `texts` or in any file under `out_dir`."""
    bits = pieces(secret, min(n, len(secret)))
    for t in texts:
        assert not any(b in t for b in bits), t[-2000:]
    for f in out_dir.rglob("*") if out_dir is not None and out_dir.exists() else []:
        if f.is_file():
            data = f.read_text(errors="replace")
            assert not any(b in data for b in bits), f


def error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("data: ")]
    assert len(lines) == 1 and lines[0].startswith("base-bench: error: "), err[-3000:]
    assert "Traceback" not in err
    return lines[0]


def served(capsys, url: str, out_dir: Path, tok_dir, *extra):
    argv = ["--backend", "server", "--model", "tiny", "--base-url", url, "--tokenizer", str(tok_dir)]
    argv += ["--data", str(bundled_path()), "--limit", "8", "--batch-size", "8", "--concurrency", "1"]
    argv += ["--max-retries", "0", "--request-timeout", "20", "--out-dir", str(out_dir), *extra]
    code = main(argv)  # a traceback would raise here
    out, err = capsys.readouterr()
    return code, out, err


def with_password(url: str, password: str, user: str = "alice") -> str:
    return url.replace("http://", f"http://{user}:{password}@", 1)


# ---------------------------------------------------------------- 7: a --base-url that cannot be parsed

PASSWORD = "Qz7/Vw2Xk9Lm-Qj4Zr8"  # holds a '/': where it is not encoded, urllib reads "Qz7" as a port
MALFORMED = {
    "port 99999": "http://alice:Vw2Xk9Lm-Qj4Zr8@127.0.0.1:99999/v1",
    "a port with a letter": "http://alice:Vw2Xk9Lm-Qj4Zr8@127.0.0.1:80a/v1",
    "an unclosed [": "http://alice:Vw2Xk9Lm-Qj4Zr8@[::1/v1",
    "a control character": "http://alice:Vw2Xk9Lm-Qj4Zr8@127.0.0.1\x01:8000/v1",
    "a bad IDNA host": "http://alice:Vw2Xk9Lm-Qj4Zr8@\u2603.example/v1",
    "a password with an unencoded /": f"http://alice:{PASSWORD}@127.0.0.1:8000/v1",
    "a password with an unencoded / and digits": "http://alice:8000/Vw2Xk9Lm-Qj4Zr8@127.0.0.1:8000/v1",
}


@pytest.mark.parametrize("what", sorted(MALFORMED))
def test_a_malformed_base_url_is_one_line_with_no_piece_of_the_password(capsys, tmp_path, what):
    url = MALFORMED[what]
    password = url.split("@")[0].split(":", 2)[2]
    argv = ["--backend", "server", "--model", "x", "--base-url", url, "--max-retries", "0"]
    code = main([*argv, "--data", str(bundled_path()), "--out-dir", str(tmp_path / "run")])  # no traceback
    out, err = capsys.readouterr()
    line = error_line(err)
    assert code == 2 and line.startswith("base-bench: error: --base-url "), line
    assert url not in out + err
    nowhere(password, tmp_path / "run", out, err, n=3)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("what", sorted(MALFORMED))
def test_the_backend_refuses_a_malformed_url_as_a_usage_error(what):
    with pytest.raises(UsageError, match="^--base-url ") as e:
        ServerBackend(MALFORMED[what], "x")
    assert "\n" not in str(e.value) and "Vw2" not in str(e.value) and "Qz7" not in str(e.value)


@pytest.mark.slow(reason="a subprocess: the real command line, python benchmark.py (about 5 s)")
def test_the_command_line_refuses_a_password_with_a_slash_without_a_traceback(tmp_path):
    url = MALFORMED["a password with an unencoded /"]
    cmd = [sys.executable, str(ROOT / "benchmark.py"), "--backend", "server", "--base-url", url, "--model", "x"]
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    error_line(p.stderr)
    nowhere(PASSWORD, None, p.stdout, p.stderr, n=3)


def test_public_url_shows_scheme_host_port_and_path_and_never_raises():
    assert public_url("http://u:pw@127.0.0.1:8000/v1/?api_key=k#f") == "http://127.0.0.1:8000/v1"
    for url in MALFORMED.values():
        shown = public_url(url)  # no ValueError
        assert "Vw2" not in shown and "Qz7" not in shown and "\x01" not in shown


# ---------------------------------------------------------------- 6: a password or a key in --base-url


def test_every_secret_of_the_url_is_registered_when_the_backend_is_made():
    key, pw = "q-" + secrets.token_hex(12), "pw-" + secrets.token_hex(12)
    b = ServerBackend(f"http://alice:{pw}@127.0.0.1:1/v1?api_key={key}&org=team-{pw[3:11]}", "m")
    try:
        import base64

        basic = base64.b64encode(f"alice:{pw}".encode()).decode()
        for s in (pw, key, f"team-{pw[3:11]}", basic):
            assert redact.redact(f"an answer holding {s}.") == "an answer holding <redacted>.", s
        assert b.url == "http://127.0.0.1:1/v1" and pw not in b.where and key not in b.where
        assert pw not in json.dumps(b.describe()) and key not in json.dumps(b.describe())
    finally:
        b.close()


def test_a_short_password_or_query_value_is_removed_from_the_servers_own_messages():
    """Shorter than redact.MIN_SECRET, they are not registered (they would damage every file), but
    the server's own text is cleaned of them as it is of a short API key."""
    b = ServerBackend("http://bob:Zq5@127.0.0.1:1/v1?key=Xy9w", "m")
    try:
        assert "Zq5" not in redact.secrets()
        scrubbed = b._scrub("wrong password 'Zq5' or key Xy9w for bob")
        assert "Zq5" not in scrubbed and "Xy9w" not in scrubbed and "bob" in scrubbed
    finally:
        b.close()


@pytest.fixture
def password():
    return "pw-" + secrets.token_urlsafe(18)


@SLOW
def test_a_password_echoed_as_the_model_root_is_withheld_from_every_file(capsys, server, tok_dir, tmp_path, password):
    server.mode = "root_password"
    code, out, err = served(capsys, with_password(server.url, password), tmp_path / "run", tok_dir)
    assert code == 0, err[-3000:]
    assert server.seen["auth"].startswith("Basic ")  # the password went to the server, as Basic auth
    rep = json.loads((tmp_path / "run" / "report.json").read_text())
    assert "(withheld: it holds the API key or a token)" in json.dumps(rep)
    nowhere(password, tmp_path / "run", out, err, n=12)
    nowhere(server.seen["auth"][6:], tmp_path / "run", out, err, n=12)  # nor the Basic credential


@SLOW
@pytest.mark.parametrize("short", [False, True], ids=["long", "short"])
def test_a_password_echoed_in_a_401_is_not_printed(capsys, server, tok_dir, tmp_path, password, short):
    pw = "Zq5k" if short else password
    server.mode = "models_401_password"
    code, out, err = served(capsys, with_password(server.url, pw), tmp_path / "run", tok_dir)
    line = error_line(err)
    assert code == 2 and "answered /v1/models with HTTP 401" in line, line
    assert "for this server" in line  # the server's message is shown, less the password
    nowhere(pw, tmp_path / "run", out, err, n=4 if short else 12)


@SLOW
def test_a_key_in_the_query_is_not_printed_when_the_server_echoes_it(capsys, server, tok_dir, tmp_path, password):
    server.mode = "path_404"
    code, out, err = served(capsys, f"{server.url}?api_key={password}", tmp_path / "run", tok_dir)
    line = error_line(err)
    assert code == 2 and "with HTTP 404" in line and "no route for" in line, line
    nowhere(password, tmp_path / "run", out, err, n=12)


@SLOW
def test_a_key_in_the_query_is_sent_with_every_request_and_written_nowhere(capsys, server, tok_dir, tmp_path, password):
    code, out, err = served(capsys, f"{server.url}/?api_key={password}", tmp_path / "run", tok_dir)
    assert code == 0, err[-3000:]
    assert server.seen["path"] == f"/v1/completions?api_key={password}"
    assert f'"base_url": "{server.url}"' in (tmp_path / "run" / "report.json").read_text()  # shown without its query
    nowhere(password, tmp_path / "run", out, err, n=12)


# ---------------------------------------------------------------- 8: an error body nested 100,000 deep


def test_an_error_body_nested_deeply_is_read_as_text():
    assert _message(b"[" * 100_000).startswith("[[[")
    assert _message(b'{"error": {"message": "no such model"}}') == "no such model"


@SLOW
def test_a_deeply_nested_error_body_is_one_line(capsys, server, tok_dir, tmp_path):
    server.mode = "deep_error"
    code, out, err = served(capsys, server.url, tmp_path / "run", tok_dir)
    assert code == 2 and "answered /v1/models with HTTP 400" in error_line(err)


# ---------------------------------------------------------------- 9: /tokenize answers of a million ids


@SLOW
def test_tokenize_answers_are_compared_as_they_arrive_in_bounded_memory(server, tok_dir):
    """40 texts, each answered with HUGE_IDS ids (512 KiB of JSON, 2 MiB as a list; a real server
    may send 4 MiB). All held at once, the peak grows with the number of texts (97 MiB here);
    compared one by one as they arrive, at most `concurrency` answers are alive (10 MiB). `one` is
    what reading one answer takes: its bytes, and the peak of parsing them (about 9 MiB)."""
    items = load_dataset_file(bundled_path()).items[:8]
    raw = huge_tokens()  # made before tracing: the server's bytes are not ours
    tracemalloc.start()
    try:
        assert len(untrusted.loads(raw)["tokens"]) == HUGE_IDS
        one = len(raw) + tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    server.mode = "tokenize_huge"
    b = ServerBackend(server.url, "tiny", str(tok_dir), concurrency=2, max_retries=0)
    try:
        b.open()
        tracemalloc.start()
        try:
            with pytest.raises(ModelError) as e:
                b.check_tokenizer(items)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        b.close()
    assert str(e.value).startswith(
        f"item {items[0].id}: the tokenizer does not match the server's: its context tokenizes to "
    ) and f"ids here and {HUGE_IDS} on the server, first differing at token 0" in str(e.value)
    assert server.seen["requests"] >= 2 + 5 * len(items)  # every text was asked
    assert peak < (b.concurrency + 1) * one, f"peak {peak >> 20} MiB, one answer {one >> 20} MiB"


# ---------------------------------------------------------------- 10: Infinity from finite log-probs

V = 500


def overflowing(prompts):
    """A correct copying engine whose unlikely tokens get -1e308: finite, but 31 of them overflow."""
    from hostileserver import logprobs

    return [[None] + [v if v > -1 else -1e308 for v in logprobs(p)[1:]] for p in prompts]


def test_the_check_refuses_log_probs_whose_mean_is_not_finite():
    with pytest.raises(EngineCheckError) as e:
        check_engine(overflowing, V, label="the server at http://127.0.0.1:1/v1")
    msg = str(e.value)
    assert "not a finite number" in msg and "\n" not in msg, msg


def test_the_scorer_refuses_a_continuation_whose_sum_is_not_finite():
    batch = [Encoded("it-1", (5, 6, 7), ((8, 9, 10),))]
    with pytest.raises(ScoringError) as e:
        PromptScorer(lambda prompts: [[None] + [-1e308] * 5 for _ in prompts], label="the server")(batch)
    assert str(e.value).startswith("item it-1, choice 0: ") and "not a finite number" in str(e.value)
    ok = PromptScorer(lambda prompts: [[None, -1.0, -1.0, -1e308, -1.0, -1.0] for _ in prompts])(batch)
    assert ok[0][0].logprob == -1e308 - 2.0  # finite, each value and the sum: taken


@SLOW
def test_a_check_whose_mean_overflows_is_refused_and_no_report_holds_infinity(capsys, server, tok_dir, tmp_path):
    server.mode = "overflow_check"  # -1e308 for the unlikely tokens, during the check only
    code, out, err = served(capsys, server.url, tmp_path / "run", tok_dir)
    written = [f for f in (tmp_path / "run").rglob("*.json")] if (tmp_path / "run").exists() else []
    assert not any("Infinity" in f.read_text() for f in written), [f.name for f in written]
    line = error_line(err)
    assert code == 2 and "failed the server check" in line and "not a finite number" in line, line
    assert not (tmp_path / "run" / "report.json").exists()

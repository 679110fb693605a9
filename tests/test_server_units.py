"""--backend server without a model server: its flags, a server that is not there, the URL and the
key kept out of every message, and the retry schedule. (The real vLLM server: tests/test_server.py.)"""

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from base_bench.backends.server import BACKOFF_CAP, ServerBackend, public_url
from base_bench.commands.cli import build_parser, main, server_options
from base_bench.errors import UsageError

from vllmserver import free_port


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = [
        x for x in err.splitlines() if x.strip() and not x.startswith("data: ")
    ]  # the run's first line names its data
    assert len(lines) == 1 and lines[0].startswith("base-bench: error: "), err
    return lines[0]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--backend", "server", "--model", "m"], "--backend server needs --base-url"),
        (["--model", "m", "--base-url", "http://x/v1"], "--base-url only works with --backend server"),
        (
            ["--model", "m", "--backend", "llama.cpp", "--concurrency", "2", "--api-key-env", "K"],
            "--api-key-env, --concurrency only work with --backend server",
        ),
        (
            [
                "--backend",
                "server",
                "--model",
                "m",
                "--base-url",
                "http://x/v1",
                "--device",
                "cpu",
                "--dtype",
                "float32",
            ],
            "--device, --dtype do not apply to --backend server",
        ),
        (["--backend", "server", "--model", "m", "--base-url", "ftp://x/v1"], "is not an http:// or https:// URL"),
        (
            ["--backend", "server", "--model", "m", "--base-url", "http://x/v1", "--api-key-env", "BB_SURELY_UNSET"],
            "--api-key-env BB_SURELY_UNSET: the environment variable BB_SURELY_UNSET is not set or is empty",
        ),
    ],
)
def test_server_flags_are_checked_before_anything_is_sent(capsys, tmp_path, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BB_SURELY_UNSET", raising=False)
    code, _, err = run(capsys, *argv, "--local-data", str(tmp_path / "nowhere"), "--out-dir", str(tmp_path / "run"))
    assert code == 2 and words in one_line(err)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flag, value", [("--request-timeout", "0"), ("--concurrency", "0"), ("--max-retries", "-1")])
def test_server_numbers_out_of_range_are_refused(capsys, flag, value):
    with pytest.raises(SystemExit) as e:
        main(["--backend", "server", "--model", "m", "--base-url", "http://x/v1", flag, value])
    assert e.value.code == 2 and flag in capsys.readouterr().err


def test_a_server_that_is_not_there_ends_with_one_line_naming_it_and_nothing_written(capsys, tmp_path, monkeypatch):
    from base_bench.items.dataset import bundled_path

    port = free_port()  # nothing listens there
    monkeypatch.setenv("BB_KEY", "sk-secret-in-env")
    url = f"http://alice:pw-in-url@127.0.0.1:{port}/v1?api-key=key-in-query"
    code, out, err = run(
        capsys,
        *("--backend", "server", "--model", "m", "--base-url", url, "--api-key-env", "BB_KEY"),
        *("--max-retries", "1", "--local-data", str(bundled_path()), "--out-dir", str(tmp_path / "run")),
    )
    line = one_line(err)
    assert code == 2
    assert line == (
        f"base-bench: error: the server at http://127.0.0.1:{port}/v1 did not answer /v1/models after 2 tries; "
        "the last: connection refused (ConnectError)"
    )
    assert not any(s in out + err for s in ("sk-secret-in-env", "pw-in-url", "alice", "key-in-query"))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "url, shown",
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("https://user:secret@api.example.com/v1/?key=abc#x", "https://api.example.com/v1"),
        ("http://[::1]:9000/v1", "http://[::1]:9000/v1"),
    ],
)
def test_urls_are_shown_without_credentials_or_query(url, shown):
    assert public_url(url) == shown


def test_retries_wait_exponentially_longer_with_jitter_up_to_the_cap():
    b = ServerBackend("http://127.0.0.1:1/v1", "m", backoff=(0.5, 30.0))
    random.seed(0)
    for attempt, full in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (8, 30.0), (20, 30.0)]:
        waits = [b._delay(attempt, None) for _ in range(200)]
        assert full / 2 <= min(waits) and max(waits) <= full  # jitter: between half and all of it
        assert max(waits) - min(waits) > full / 10
    assert b._delay(1, 12.0) == 12.0  # Retry-After is honoured ...
    assert b._delay(1, 3600.0) == BACKOFF_CAP  # ... up to the cap
    b.close()


def test_the_api_and_the_command_line_share_one_set_of_defaults():
    """ServerBackend(...) and `base-bench --backend server` without --concurrency, --request-timeout
    or --max-retries run with the same settings, and the help states those numbers."""
    url = "http://127.0.0.1:1/v1"
    parser = build_parser()
    args = parser.parse_args(["--backend", "server", "--model", "m", "--base-url", url])
    api, cli = ServerBackend(url, "m"), ServerBackend(url, "m", **server_options(args))
    settings = [(b.concurrency, b.request_timeout, b.max_retries) for b in (api, cli)]
    assert settings[0] == settings[1]
    text = " ".join(parser.format_help().split())
    assert f"requests in flight at once (default {api.concurrency})" in text
    assert f"tried again (default {api.request_timeout:g})" in text
    assert f"each time (default {api.max_retries})" in text
    given = parser.parse_args(
        ["--backend", "server", "--model", "m", "--base-url", url, "--concurrency", "3", "--max-retries", "0"]
    )
    chosen = ServerBackend(url, "m", **server_options(given))
    assert (chosen.concurrency, chosen.request_timeout, chosen.max_retries) == (3, api.request_timeout, 0)
    for b in (api, cli, chosen):
        b.close()


def test_the_backend_refuses_bad_settings_in_one_line():
    with pytest.raises(UsageError, match="--concurrency must be a whole number of 1 or more"):
        ServerBackend("http://127.0.0.1:1/v1", "m", concurrency=0)
    with pytest.raises(UsageError, match="--request-timeout"):
        ServerBackend("http://127.0.0.1:1/v1", "m", request_timeout=float("inf"))
    with pytest.raises(UsageError, match="--api-key-env takes the name of an environment variable"):
        ServerBackend("http://127.0.0.1:1/v1", "m", api_key_env="not a name")


@pytest.mark.slow(
    reason="a real HTTP server (the fake Hub) and a subprocess loading the tokenizer from it (about 17 s)"
)
def test_the_default_tokenizer_is_the_reported_root_a_folder_here_or_a_hub_id(tmp_path):
    """The root /v1/models reports: a folder on this machine is loaded from there, a Hub id from the
    Hub (the fake one, tests/hubserver.py, in a subprocess with its own HF_HOME), anything else refused."""
    import os
    import subprocess
    import sys

    from base_bench.backends.identity import tokenizer_fingerprint
    from base_bench.backends.server import _load_tokenizer

    from hubserver import FakeHub
    from tiny import tiny_tokenizer

    folder = tmp_path / "tok"
    tiny_tokenizer().save_pretrained(folder)
    tok, source, commit = _load_tokenizer(None, str(folder), "the server")
    fp = tokenizer_fingerprint(tok)
    assert (source, commit) == (str(folder), None)
    with FakeHub() as hub:
        hub.add_repo("org/tiny", {p.name: p.read_bytes() for p in folder.iterdir()})
        code = (
            "from base_bench.backends.server import _load_tokenizer\n"
            "from base_bench.backends.identity import tokenizer_fingerprint\n"
            "t, source, commit = _load_tokenizer(None, 'org/tiny', 'the server')\n"
            "print(source, tokenizer_fingerprint(t), commit)\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
        env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"), PYTHONPATH=str(Path(__file__).parents[1]))
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["org/tiny", fp, "None"]
    assert any("/org/tiny/resolve/" in r.path for r in hub.requests)
    with pytest.raises(
        UsageError, match="neither a folder here nor a Hub id; pass the model's tokenizer with --tokenizer"
    ):
        _load_tokenizer(None, "/srv/models/llama-70b", "the server")
    with pytest.raises(UsageError, match="does not say where its model comes from"):
        _load_tokenizer(None, None, "the server")


def hub_python(hub, tmp_path, code: str) -> subprocess.CompletedProcess:
    """`code` run by Python against the fake Hub, with an HF_HOME of its own and no token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"), PYTHONPATH=str(Path(__file__).parents[1]))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def test_revision_pins_a_hub_tokenizer_to_a_commit_and_fetches_only_the_tokenizer(tmp_path):
    """--revision with --backend server: the tokenizer's files of that revision (not the weights),
    and the commit it resolved to; an unknown revision is one line; a local tokenizer has none."""
    from base_bench.backends.identity import tokenizer_fingerprint
    from base_bench.backends.server import _load_tokenizer

    from hubserver import FakeHub
    from tiny import tiny_tokenizer

    folder = tmp_path / "tok"
    tiny_tokenizer().save_pretrained(folder)
    fp = tokenizer_fingerprint(tiny_tokenizer())
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    with FakeHub() as hub:
        repo = hub.add_repo("org/tiny", {**files, "model.safetensors": b"weights, never fetched"})
        code = (
            "import sys\n"
            "from base_bench.backends.server import _load_tokenizer\n"
            "from base_bench.backends.identity import tokenizer_fingerprint\n"
            "from base_bench.errors import BaseBenchError\n"
            "try:\n"
            "    t, source, commit = _load_tokenizer(sys.argv[1], None, 'the server', sys.argv[2])\n"
            "except BaseBenchError as e:\n"
            "    print('error:', e); sys.exit(2)\n"
            "print(source, tokenizer_fingerprint(t), commit)\n"
        )
        for rev in ("main", repo.commit):
            p = hub_python(hub, tmp_path, code.replace("sys.argv[1]", "'org/tiny'").replace("sys.argv[2]", repr(rev)))
            assert p.returncode == 0, p.stderr[-2000:]
            assert p.stdout.split() == ["org/tiny", fp, repo.commit]
        bad = hub_python(hub, tmp_path, code.replace("sys.argv[1]", "'org/tiny'").replace("sys.argv[2]", "'nope'"))
    assert bad.returncode == 2 and bad.stdout.startswith("error: ") and bad.stdout.count("\n") == 1, bad.stdout
    assert "org/tiny" in bad.stdout and "nope" in bad.stdout
    assert not any("model.safetensors" in r.path for r in hub.requests)
    assert any(f"/org/tiny/resolve/{repo.commit}/" in r.path for r in hub.requests)
    with pytest.raises(UsageError, match="pins a tokenizer on the Hub, and the tokenizer .* is a local folder"):
        _load_tokenizer(str(folder), None, "the server", "main")
    with pytest.raises(UsageError, match="pins a tokenizer on the Hub, and the tokenizer .* is a local folder"):
        _load_tokenizer(None, str(folder), "the server", "main")  # the root the server reports
    with pytest.raises(UsageError, match="pins a tokenizer loaded from the Hub, not one handed in"):
        ServerBackend("http://127.0.0.1:1/v1", "m", tiny_tokenizer(), revision="main")


def test_revision_is_taken_with_the_server_backend_and_trust_remote_code_still_refused(capsys, tmp_path):
    base = ["--backend", "server", "--model", "m", "--base-url", f"http://127.0.0.1:{free_port()}/v1"]
    base += ["--tokenizer", "org/x", "--data", "bundled", "--max-retries", "0", "--out-dir", str(tmp_path / "run")]
    code, _, err = run(capsys, *base, "--revision", "abc", "--trust-remote-code")
    assert code == 2 and one_line(err).endswith(
        "--trust-remote-code does not apply to --backend server: the server runs the model as it was started"
    )
    code, _, err = run(capsys, *base, "--revision", "abc")  # taken: the run goes on to ask the server
    assert code == 2 and "did not answer /v1/models" in one_line(err)
    assert not (tmp_path / "run").exists()

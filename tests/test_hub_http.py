"""The gated download and model snapshots over real HTTP, against the fake Hub in hubserver.py.

Nothing in huggingface_hub is replaced here: its real client sends real requests to a server on
127.0.0.1, found the way a user points it at a mirror (HF_ENDPOINT). Covered: the bearer token on
every request, no token (401), a token without access (403) or unknown to the Hub (401), a
download cut mid-file (once: retried and complete; every time: one clear line, nothing corrupt in
the cache), a served file whose SHA-256 is not the card's (refused), and a whole official run (gated
data + model snapshot -> report.json) through `python benchmark.py`. The token must never appear in
output, logs or files. test_hub.py keeps what HTTP cannot show (the prompt, offline mode).

In-process tests set HF_ENDPOINT too, but huggingface_hub read it at import time, so the fixture
also repoints the copies it made: constants.ENDPOINT, constants.HUGGINGFACE_CO_URL_TEMPLATE and the
default HfApi behind huggingface_hub.list_repo_files. Subprocess tests use HF_ENDPOINT alone.
"""

import hashlib
import importlib.util
import io
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
from huggingface_hub import constants, file_download, hf_api

from base_bench.commands import cli
from base_bench.items import card, hub

from fixtures import write_dataset
from hubserver import THREAD_PREFIX, FakeHub, files_of, git_blob_id
from tiny import save_tiny

ROOT = Path(__file__).resolve().parents[1]
MODEL = "org/tiny"
GRANTED = "hf_GRANTEDsecret0000000000000000000"  # its account accepted the dataset's terms
NO_ACCESS = "hf_NOACCESSsecret000000000000000000"  # a valid token whose account did not
UNKNOWN = "hf_UNKNOWNsecret00000000000000000000"  # not a token the Hub knows
SECRETS = (GRANTED, NO_ACCESS, UNKNOWN)
REGISTRY = "/api/agent-harnesses"  # fetched by huggingface_hub itself, never with a token


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> bytes:
    """The data file the fake Hub serves: the card's composition, but not the official checksum."""
    return write_dataset(tmp_path_factory.mktemp("served")).read_bytes()


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[str, bytes]:
    files = files_of(save_tiny(tmp_path_factory.mktemp("tiny")))
    files["pytorch_model.bin"] = b"a duplicate of the weights that the runner must not fetch"
    return files


@pytest.fixture
def hf_home(monkeypatch, tmp_path) -> Path:
    """huggingface_hub with its home (cache, saved token, registry cache) in tmp_path/hf, no token
    in the environment and stdin not a terminal: the developer's own login is never read or written."""
    home = tmp_path / "hf"
    for name, rel in {
        "HF_HOME": "",
        "HF_HUB_CACHE": "hub",
        "HUGGINGFACE_HUB_CACHE": "hub",
        "HF_ASSETS_CACHE": "assets",
        "HF_TOKEN_PATH": "token",
        "HF_STORED_TOKENS_PATH": "stored_tokens",
        "HF_XET_CACHE": "xet",
        "AGENT_HARNESSES_PATH": ".agent_harnesses.json",
    }.items():
        monkeypatch.setattr(constants, name, str(home / rel))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    return home


@pytest.fixture
def fake_hub(hf_home, monkeypatch, served, model_files):
    """The fake Hub with the gated dataset and a gated model (both granted to GRANTED only), with
    huggingface_hub pointed at it. On exit the server is stopped and all its threads joined."""
    with FakeHub() as server:
        server.add_repo(card.HUB_DATASET, {card.HUB_DATA_FILE: served}, kind="dataset", gated=True)
        server.add_repo(MODEL, model_files, gated=True)
        server.grant(GRANTED, card.HUB_DATASET)
        server.grant(GRANTED, MODEL)
        server.add_user(NO_ACCESS)
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setattr(constants, "ENDPOINT", server.url)
        monkeypatch.setattr(
            constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}"
        )
        monkeypatch.setattr(hf_api.api, "endpoint", server.url)
        try:
            yield server
        finally:
            huggingface_hub.close_session()  # drop kept-alive connections, so their threads end now
    assert not [t.name for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


@pytest.fixture
def retry_waits(monkeypatch) -> list[float]:
    """huggingface_hub waits 1 s before each retry of a cut download (its file_download module uses
    `time` for that sleep only): record the waits instead of sleeping them, to keep the tests fast."""
    waits = []
    monkeypatch.setattr(file_download, "time", SimpleNamespace(**{**vars(time), "sleep": waits.append}))
    return waits


# -- helpers ----------------------------------------------------------------------------------------


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def repo_requests(server: FakeHub) -> list:
    return [r for r in server.requests if r.path != REGISTRY]


def data_requests(server: FakeHub, method: str | None = None) -> list:
    return [
        r for r in server.requests if f"/resolve/main/{card.HUB_DATA_FILE}" in r.path and method in (None, r.method)
    ]


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("base-bench: error:")]


def assert_secrets_kept(root: Path, *texts: str) -> None:
    """No token in any of `texts` nor in any file under `root` (but the login a test saved itself)."""
    files = [p for p in root.rglob("*") if p.is_file() and p != root / "hf" / "token"]
    for secret in SECRETS:
        assert not [t for t in texts if secret in t]
        assert not [p for p in files if secret.encode() in p.read_bytes()]


def corrupt_in_cache(cache: Path) -> list[str]:
    """Partial downloads, and blobs whose bytes do not match their name (sha256 or git blob id)."""
    bad = [str(p) for p in cache.rglob("*.incomplete")]
    for blob in cache.glob("*/blobs/*"):
        data = blob.read_bytes()
        if not blob.name.endswith(".incomplete") and blob.name not in (sha256(data), git_blob_id(data)):
            bad.append(str(blob))
    return bad


def run_cli(tmp_path, endpoint, token, args, prefix=("benchmark.py",), extra_env=None) -> subprocess.CompletedProcess:
    """A fresh process with HF_ENDPOINT, HF_HOME and HF_TOKEN set as a user would, no other HF_
    setting but `extra_env`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE_", "TRANSFORMERS_"))}
    env.update(
        HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf"), HF_TOKEN=token, HF_HUB_VERBOSITY="debug"
    )  # huggingface_hub's debug log goes to stderr, checked for the token
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, *prefix, *map(str, args)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


# -- tokens -----------------------------------------------------------------------------------------


def test_no_token_says_how_to_log_in_and_to_accept_the_terms(fake_hub, tmp_path, capsys):
    assert cli.main(["--model", MODEL, "--out-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    [line] = error_lines(err)
    assert "access to the gated dataset BananaMind/BananaMind-Base-Bench-1.1 was refused (no token" in line
    assert (
        "Log in with `hf auth login` or set HF_TOKEN, with an account that has accepted the dataset's terms "
        "at https://huggingface.co/datasets/BananaMind/BananaMind-Base-Bench-1.1" in line
    )
    assert "Traceback" not in err
    assert [(r.method, r.authorization, r.status) for r in repo_requests(fake_hub)] == [("HEAD", None, 401)]


@pytest.mark.parametrize(
    "token,status,reason",
    [
        (NO_ACCESS, 403, "HF_TOKEN: its account has not been granted access (403)"),
        (UNKNOWN, 401, "HF_TOKEN: the Hub does not accept this token (401: invalid or expired)"),
    ],
    ids=["403-no-access", "401-unknown-token"],
)
def test_refused_token_is_one_clear_line_and_never_shown(
    fake_hub, monkeypatch, tmp_path, capsys, caplog, token, status, reason
):
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="huggingface_hub")
    monkeypatch.setenv("HF_TOKEN", token)
    assert cli.main(["--model", MODEL, "--out-dir", str(tmp_path / "run")]) == 2
    out = capsys.readouterr()
    [line] = error_lines(out.err)
    assert f"was refused ({reason})" in line and "Traceback" not in out.err
    # The token was really sent, as a bearer token, and nothing went out anonymously instead.
    assert [(r.authorization, r.status) for r in repo_requests(fake_hub)] == [(f"Bearer {token}", status)]
    assert any(r.name.startswith("huggingface_hub") for r in caplog.records)  # its debug log was captured
    assert_secrets_kept(tmp_path, out.out, out.err, caplog.text)


def test_saved_login_is_tried_after_a_refused_hf_token(fake_hub, hf_home, monkeypatch, served):
    monkeypatch.setenv("HF_TOKEN", NO_ACCESS)
    hf_home.mkdir(exist_ok=True)
    (hf_home / "token").write_text(GRANTED + "\n")  # what `hf auth login` saves
    path, token = hub.fetch_official_data()
    assert token == GRANTED and Path(path).read_bytes() == served
    assert [(r.method, r.authorization, r.status) for r in data_requests(fake_hub)] == [
        ("HEAD", f"Bearer {NO_ACCESS}", 403),
        ("HEAD", f"Bearer {GRANTED}", 200),
        ("GET", f"Bearer {GRANTED}", 200),
    ]


def test_hf_token_alone_when_it_works(fake_hub, hf_home, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", GRANTED)
    hf_home.mkdir(exist_ok=True)
    (hf_home / "token").write_text(NO_ACCESS + "\n")
    assert hub.fetch_official_data()[1] == GRANTED
    assert {r.authorization for r in repo_requests(fake_hub)} == {f"Bearer {GRANTED}"}


# -- a download cut mid-file ------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [None, 16 << 10], ids=["default-chunk-restart", "small-chunk-range-resume"])
def test_a_cut_once_is_retried_and_the_file_is_complete(fake_hub, hf_home, monkeypatch, retry_waits, served, chunk):
    """huggingface_hub writes a download in DOWNLOAD_CHUNK_SIZE (10 MB) pieces and resumes from the
    last piece written: a data file (the card's is 187 kB) cut halfway is fetched again from byte 0;
    with 16 kB pieces (as for any file over 10 MB) the retry asks for the rest with a Range header."""
    if chunk:
        monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", chunk)
    monkeypatch.setenv("HF_TOKEN", GRANTED)
    half = len(served) // 2
    fake_hub.cut(card.HUB_DATA_FILE, at=half, times=1)
    path, _ = hub.fetch_official_data()
    assert sha256(Path(path).read_bytes()) == sha256(served)
    first, second = data_requests(fake_hub, "GET")
    assert retry_waits == [1]
    assert first.range is None and first.authorization == second.authorization == f"Bearer {GRANTED}"
    if chunk:
        assert (second.range, second.status) == (f"bytes={half // chunk * chunk}-", 206)
    else:
        assert (second.range, second.status) == (None, 200)
    assert corrupt_in_cache(hf_home / "hub") == []


def test_a_cut_every_time_is_one_clear_line_and_leaves_nothing_corrupt(
    fake_hub, hf_home, monkeypatch, retry_waits, tmp_path, capsys, served
):
    """The server never sends past the middle of the file. huggingface_hub (2.4) retries 5 times,
    1 s apart, then gives up; its temporary file is deleted, and no blob or snapshot entry is left."""
    monkeypatch.setenv("HF_TOKEN", GRANTED)
    fake_hub.cut(card.HUB_DATA_FILE, at=len(served) // 2, times=None)
    assert cli.main(["--model", MODEL, "--out-dir", str(tmp_path / "run")]) == 2
    out = capsys.readouterr()
    [line] = error_lines(out.err)
    assert "the download of data/test.jsonl from BananaMind/BananaMind-Base-Bench-1.1 was cut off" in line
    assert "Traceback" not in out.err
    assert len(data_requests(fake_hub, "GET")) == len(retry_waits) + 1 > 2  # it retried, waiting each time
    cache = hf_home / "hub"
    assert corrupt_in_cache(cache) == []
    assert not list(cache.glob(f"datasets--*/snapshots/*/{card.HUB_DATA_FILE}"))
    assert_secrets_kept(tmp_path, out.out, out.err)
    # Once the connection holds again, the next run gets the whole file.
    fake_hub.cuts.clear()
    assert Path(hub.fetch_official_data()[0]).read_bytes() == served


def test_a_model_file_cut_every_time_is_a_clear_error(fake_hub, hf_home, retry_waits, model_files):
    fake_hub.cut("model.safetensors", at=len(model_files["model.safetensors"]) // 2, times=None)
    with pytest.raises(hub.HubError, match=f"the download of model {MODEL} was cut off"):
        hub.download_model(MODEL, token=GRANTED)
    assert corrupt_in_cache(hf_home / "hub") == []
    assert not list((hf_home / "hub").glob("models--*/snapshots/*/model.safetensors"))


# -- models -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model,revision,token,message",
    [
        ("org/missing", None, GRANTED, "model org/missing was not found on the Hub"),
        (MODEL, "v9", GRANTED, "model org/tiny has no revision 'v9'"),
        (MODEL, None, NO_ACCESS, "access to the gated model org/tiny was refused (403)"),
    ],
    ids=["missing", "no-such-revision", "gated-403"],
)
def test_model_errors_are_one_line(fake_hub, monkeypatch, tmp_path, capsys, served, model, revision, token, message):
    monkeypatch.setenv("HF_TOKEN", token)  # huggingface_hub's own lookup: no data token with --local-data
    data = tmp_path / "local"
    (data / "data").mkdir(parents=True)
    (data / "data" / "test.jsonl").write_bytes(served)
    args = ["--model", model, "--local-data", str(data), "--out-dir", str(tmp_path / "run")]
    assert cli.main(args + (["--revision", revision] if revision else [])) == 2
    out = capsys.readouterr()
    [line] = error_lines(out.err)
    assert message in line and "Traceback" not in out.err
    assert {r.authorization for r in repo_requests(fake_hub)} == {f"Bearer {token}"}
    assert_secrets_kept(tmp_path, out.out, out.err)


# -- the real command line, through HF_ENDPOINT ---------------------------------------------------------


@pytest.mark.slow(reason="a real HTTP hub server and whole CLI runs in subprocesses (25 to 60 s)")
def test_benchmark_py_refuses_hub_data_that_is_not_the_official_file(fake_hub, tmp_path, served):
    """`python benchmark.py` with HF_ENDPOINT: the served file has the card's composition but not its
    SHA-256 (the card's checksum is left as it is), so the run is refused, in one line, exit code 2."""
    res = run_cli(tmp_path, fake_hub.url, GRANTED, ["--model", MODEL, "--out-dir", tmp_path / "run"])
    assert res.returncode == 2, res.stderr
    [line] = error_lines(res.stderr)
    assert f"does not match the card (SHA-256 {sha256(served)}); refusing to score it as official" in line
    assert "Traceback" not in res.stderr and not (tmp_path / "run" / "report.json").exists()
    assert [r.authorization for r in data_requests(fake_hub)] == [f"Bearer {GRANTED}"] * 2
    assert_secrets_kept(tmp_path, res.stdout, res.stderr)


# Test only: the card's checksum is replaced by the served file's, which stands in for the official
# data (the real file is gated and not in this repository); then benchmark.py runs unchanged.
OFFICIAL_IS_SERVED = (
    "import runpy, sys, base_bench.items.card as card; card.OFFICIAL_SHA256 = sys.argv.pop(1); "
    "sys.argv[0] = 'benchmark.py'; runpy.run_path('benchmark.py', run_name='__main__')"
)


@pytest.mark.slow(reason="a real HTTP hub server and whole CLI runs in subprocesses (25 to 60 s)")
def test_official_run_over_http_when_served_bytes_match_the_patched_card_checksum(fake_hub, tmp_path, served):
    """Gated data and a model snapshot over HTTP -> report.json marked official. The card's checksum
    is patched to the served file's SHA-256 (see OFFICIAL_IS_SERVED)."""
    out = tmp_path / "run"
    args = ["--model", MODEL, "--out-dir", out, "--device", "cpu", "--revision", "main"]
    res = run_cli(tmp_path, fake_hub.url, GRANTED, args, prefix=("-c", OFFICIAL_IS_SERVED, sha256(served)))
    assert res.returncode == 0, res.stderr[-3000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["official"] is True and rep["non_official_reasons"] == []
    assert (rep["data"]["source"], rep["data"]["kind"], rep["data"]["sha256"]) == ("hub", "official", sha256(served))
    assert rep["data"]["path"].startswith(str(tmp_path / "hf" / "hub"))  # the isolated cache, not the user's
    assert rep["config"]["model"]["revision"] == fake_hub.repos[("model", MODEL)].commit
    assert "Official BananaMind Base Bench 1.1 result" in res.stdout
    # Every Hub request carried the token; the model came as a snapshot, without the duplicate .bin.
    assert {r.authorization for r in repo_requests(fake_hub)} == {f"Bearer {GRANTED}"}
    fetched = {r.path.rsplit("/", 1)[1] for r in repo_requests(fake_hub) if r.method == "GET" and "/resolve/" in r.path}
    assert fetched == {"test.jsonl"} | (set(fake_hub.repos[("model", MODEL)].files) - {"pytorch_model.bin"})
    assert_secrets_kept(tmp_path, res.stdout, res.stderr)


@pytest.mark.slow(reason="a real HTTP hub server and a whole CLI run in a subprocess (25 to 60 s)")
def test_a_limit_that_leaves_no_item_out_still_makes_a_run_unofficial(fake_hub, tmp_path, served):
    """The official file, every item scored, but --limit-per-category given: the report says it is
    not official, as every reader of reports (results/checked.py) holds a report with a limit to be."""
    out = tmp_path / "run"
    args = ["--model", MODEL, "--out-dir", out, "--device", "cpu", "--revision", "main", "--limit-per-category", "1000"]
    res = run_cli(tmp_path, fake_hub.url, GRANTED, args, prefix=("-c", OFFICIAL_IS_SERVED, sha256(served)))
    assert res.returncode == 0, res.stderr[-3000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["data"]["kind"] == "official" and len(rep["items"]) == rep["data"]["n_items_in_file"]
    assert rep["official"] is False
    assert rep["non_official_reasons"] == ["--limit-per-category 1000 was given: an official run sets no limit"]


# -- a GGUF inside a Hub repo: --gguf-file ----------------------------------------------------------

GGUF_REPO = "org/tiny-GGUF"


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory) -> dict[str, bytes]:
    """A repo holding several quantisations, as GGUF repos do: the runner must fetch only the one asked."""
    from tiny_gguf import write_tiny_gguf

    d = tmp_path_factory.mktemp("gguf")
    return {
        "tiny.Q8_0.gguf": write_tiny_gguf(d / "a.gguf", seed=0, file_type=7).read_bytes(),
        "tiny-other.Q8_0.gguf": write_tiny_gguf(d / "b.gguf", seed=1, file_type=7).read_bytes(),
        "sub/tiny.F32.gguf": write_tiny_gguf(d / "c.gguf", seed=2, quantized=False, file_type=0).read_bytes(),
        "README.md": b"# tiny GGUF\n",
    }


@pytest.fixture
def gguf_hub(fake_hub, gguf_files):
    fake_hub.add_repo(GGUF_REPO, gguf_files)
    return fake_hub


def gguf_gets(server: FakeHub) -> list[str]:
    """The files of GGUF_REPO fetched with GET."""
    prefix = f"/{GGUF_REPO}/resolve/"
    return [r.path.split("/", 5)[5] for r in server.requests if r.method == "GET" and r.path.startswith(prefix)]


def test_gguf_file_of_a_hub_repo_is_fetched_alone_and_named_by_its_content(gguf_hub, hf_home, tmp_path, gguf_files):
    """transformers backend: only that file is downloaded, into the Hugging Face cache; it is then a
    local .gguf (converted-model cache, content fingerprint), and the report records where it came from."""
    from base_bench.backends.identity import fingerprint

    local = tmp_path / "copy.gguf"
    local.write_bytes(gguf_files["tiny.Q8_0.gguf"])
    out = tmp_path / "run"
    common = ["--data", "bundled", "--device", "cpu", "--out-dir", str(out)]
    # the same file, local: 4 items ...
    assert cli.main(["--model", str(local), "--limit", "4", *common]) == 0
    # ... continued from the Hub repo: the same weights, so --resume accepts it
    args = ["--model", GGUF_REPO, "--gguf-file", "tiny.Q8_0.gguf", "--limit", "8", "--resume", *common]
    assert cli.main(args) == 0
    assert gguf_gets(gguf_hub) == ["tiny.Q8_0.gguf"]
    rep = json.loads((out / "report.json").read_text())
    model, commit = rep["config"]["model"], gguf_hub.repos[("model", GGUF_REPO)].commit
    assert model["hub"] == {"id": GGUF_REPO, "file": "tiny.Q8_0.gguf", "revision": commit}
    assert (model["kind"], model["revision"], model["spec"]) == ("gguf", commit, GGUF_REPO)
    assert model["path"] == str(hf_home / "hub" / "models--org--tiny-GGUF" / "snapshots" / commit / "tiny.Q8_0.gguf")
    assert model["fingerprint"] == fingerprint(local) and model["cache"]["status"] == "hit"  # the local run's entry
    assert rep["timing"]["items_scored_this_session"] == 4 and len(rep["items"]) == 8
    # the default out-dir is named after the file, so two quantisations of one repo do not collide
    assert cli.default_out_dir(GGUF_REPO, gguf_file="tiny.Q8_0.gguf") == Path("runs/tiny.q8_0-base-bench-1.1")


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed")
def test_gguf_file_of_a_hub_repo_under_llama_cpp_with_a_revision_and_a_subfolder(gguf_hub, tmp_path, capsys):
    commit = gguf_hub.repos[("model", GGUF_REPO)].commit
    out = tmp_path / "run"
    args = ["--backend", "llama.cpp", "--model", GGUF_REPO, "--gguf-file", "sub/tiny.F32.gguf", "--revision", commit]
    assert cli.main([*args, "--data", "bundled", "--limit", "4", "--out-dir", str(out)]) == 0
    assert gguf_gets(gguf_hub) == ["sub/tiny.F32.gguf"]
    rep = json.loads((out / "report.json").read_text())
    assert rep["config"]["backend"] == "llama.cpp" and rep["config"]["dtype"] == "F32"
    assert rep["config"]["model"]["hub"] == {"id": GGUF_REPO, "file": "sub/tiny.F32.gguf", "revision": commit}
    assert rep["config"]["model"]["revision_requested"] == commit
    sig = json.loads((out / "run_config.json").read_text())["signature"]
    assert sig["model"]["kind"] == "gguf" and sig["backend"] == "llama.cpp"


@pytest.mark.parametrize(
    "model, name, extra, message",
    [
        (
            GGUF_REPO,
            "tiny.Q4_K_M.gguf",
            [],
            f"model {GGUF_REPO} has no file tiny.Q4_K_M.gguf; its .gguf files: sub/tiny.F32.gguf, "
            "tiny-other.Q8_0.gguf, tiny.Q8_0.gguf",
        ),
        (GGUF_REPO, "tiny.Q8_0.gguf", ["--revision", "v9"], f"model {GGUF_REPO} has no revision 'v9'"),
        (GGUF_REPO, "README.md", [], "--gguf-file 'README.md': give a .gguf file of the repo"),
        (GGUF_REPO, "../tiny.Q8_0.gguf", [], "--gguf-file '../tiny.Q8_0.gguf': give a path inside the repo"),
        (GGUF_REPO, "/tiny.Q8_0.gguf", [], "--gguf-file '/tiny.Q8_0.gguf': give a path inside the repo"),
        (GGUF_REPO, "sub//tiny.F32.gguf", [], "give a path inside the repo"),
        ("LOCAL_DIR", "tiny.Q8_0.gguf", [], "--gguf-file picks a file inside a Hub repo, so --model must be"),
        ("LOCAL_GGUF", "tiny.Q8_0.gguf", [], "--gguf-file picks a file inside a Hub repo, so --model must be"),
        ("LOCAL_GGUF", "tiny.Q8_0.gguf", ["--backend", "llama.cpp"], "--gguf-file picks a file inside a Hub repo"),
        ("org/missing", "x.gguf", [], "model org/missing was not found on the Hub"),
    ],
    ids=["no-such-file", "no-such-revision", "not-gguf", "dotdot", "absolute", "empty-part", "local-dir"]
    + ["local-gguf", "local-gguf-llama", "no-such-repo"],
)
def test_gguf_file_errors_are_one_line(gguf_hub, tmp_path, capsys, gguf_files, model, name, extra, message):
    if model == "LOCAL_DIR":
        model = str(save_tiny(tmp_path / "dir"))
    elif model == "LOCAL_GGUF":
        model = str(tmp_path / "m.gguf")
        Path(model).write_bytes(gguf_files["tiny.Q8_0.gguf"])
    capsys.readouterr()
    out = tmp_path / "run"
    args = ["--model", model, "--gguf-file", name, "--data", "bundled", "--out-dir", str(out), *extra]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    [line] = error_lines(err)
    assert message in line and [x for x in err.splitlines() if not x.startswith("data: ")] == [line]
    assert not out.exists() and gguf_gets(gguf_hub) == []


# -- offline: HF_HUB_OFFLINE=1 with what is in the cache ----------------------------------------------


@pytest.mark.slow(reason="a real HTTP hub server and whole CLI runs in subprocesses (25 to 60 s)")
def test_offline_runs_from_the_cache_and_says_what_is_not_cached(tmp_path, served, model_files, gguf_files):
    """Fill the Hugging Face cache from the fake Hub (the gated data, a model snapshot, one GGUF of a
    repo), stop the server, and run again with HF_HUB_OFFLINE=1 (HF_ENDPOINT still names the stopped
    server): the same results, all from the cache. What is not in the cache is one line naming
    HF_HUB_OFFLINE."""
    with FakeHub() as server:
        server.add_repo(card.HUB_DATASET, {card.HUB_DATA_FILE: served}, kind="dataset", gated=True)
        server.add_repo(MODEL, model_files, gated=True)
        server.add_repo(GGUF_REPO, gguf_files)
        server.grant(GRANTED, card.HUB_DATASET)
        server.grant(GRANTED, MODEL)
        url = server.url
        official = ("-c", OFFICIAL_IS_SERVED, sha256(served))
        snap = ["--model", MODEL, "--device", "cpu", "--limit", "6"]
        gguf = ["--model", GGUF_REPO, "--gguf-file", "tiny.Q8_0.gguf", "--data", "bundled", "--device", "cpu"]
        gguf += ["--limit", "6"]
        for args, prefix in ((snap, official), (gguf, ("benchmark.py",))):
            res = run_cli(tmp_path, url, GRANTED, [*args, "--out-dir", tmp_path / f"online-{args[1][4:]}"], prefix)
            assert res.returncode == 0, res.stderr[-3000:]
        huggingface_hub.close_session()
    offline = {"HF_HUB_OFFLINE": "1"}
    for args, prefix in ((snap, official), (gguf, ("benchmark.py",))):
        out = tmp_path / f"offline-{args[1][4:]}"
        res = run_cli(tmp_path, url, GRANTED, [*args, "--out-dir", out], prefix, extra_env=offline)
        assert res.returncode == 0, res.stderr[-3000:]
        a = json.loads((tmp_path / f"online-{args[1][4:]}" / "report.json").read_text())
        b = json.loads((out / "report.json").read_text())
        assert (a["results"], a["data"], a["config"]["model"]["revision"]) == (
            b["results"],
            b["data"],
            b["config"]["model"]["revision"],
        )
        sigs = [
            json.loads((d / "run_config.json").read_text())["signature"]
            for d in (out.parent / f"online-{args[1][4:]}", out)
        ]
        assert sigs[0] == sigs[1]  # so --resume continues either with the other
    # not in the cache: another file of the repo, another model, and the data (in a fresh cache)
    cases = [
        (
            ["--model", GGUF_REPO, "--gguf-file", "tiny-other.Q8_0.gguf", "--data", "bundled"],
            tmp_path,
            f"HF_HUB_OFFLINE is set and tiny-other.Q8_0.gguf of model {GGUF_REPO} is not in the Hugging Face cache",
        ),
        (
            ["--model", "org/other", "--data", "bundled"],
            tmp_path,
            "HF_HUB_OFFLINE is set and model org/other is not in the Hugging Face cache",
        ),
        (
            ["--model", MODEL],
            tmp_path / "fresh",
            f"HF_HUB_OFFLINE is set and {card.HUB_DATA_FILE} of {card.HUB_DATASET} is not in the Hugging Face cache",
        ),
    ]
    for args, home, message in cases:
        out = tmp_path / "refused"
        res = run_cli(home, url, GRANTED, [*args, "--out-dir", out], extra_env=offline)
        assert res.returncode == 2, res.stderr[-3000:]
        [line] = error_lines(res.stderr)
        assert message in line and "run once with the network to fill the cache, or unset HF_HUB_OFFLINE" in line
        assert "Traceback" not in res.stderr and not out.exists()
        assert_secrets_kept(tmp_path, res.stdout, res.stderr)

"""`base-bench data download` against the fake Hub (tests/hubserver.py) over real HTTP: the gated file
into the Hugging Face cache, its SHA-256 checked, a second download answered from the cache, a run
with HF_HUB_OFFLINE=1 and --data hub finding it, a revision whose file is not the official one kept
and said to be so, and every refusal (no token, a refused token, no such revision, an unreachable
Hub, --data other than hub) in one line, exit code 2, with no token printed.

The official file is gated and not in this repository: as in test_hub_http.py, the card's checksum
is set to the served file's SHA-256 where a case needs the served file to be the official one
(monkeypatch in this process, OFFICIAL_IS_SERVED in a subprocess).
"""

import json
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
import test_hub_http as hub_http
from huggingface_hub import constants, hf_api
from huggingface_hub.utils import _http as hf_http
from test_hub_http import (
    GRANTED,
    NO_ACCESS,
    OFFICIAL_IS_SERVED,
    UNKNOWN,
    assert_secrets_kept,
    error_lines,
    run_cli,
    sha256,
)

from base_bench import evaluate
from base_bench.commands.cli import main
from base_bench.items import card
from base_bench.items.datasource import open_data

from hubserver import FakeHub
from tiny import save_tiny, tiny_model, tiny_tokenizer

hf_home = hub_http.hf_home  # fixtures: huggingface_hub's home in tmp_path, no token, no terminal
served = hub_http.served  # ... and the data file the fake Hub serves (the card's composition)
SERVED_LINE = "data: the official BananaMind/BananaMind-Base-Bench-1.1 file, SHA-256 {sha} (the card's), {at}: {path}"


def point_at(monkeypatch, url: str) -> None:
    """huggingface_hub in this process pointed at `url` (it copied HF_ENDPOINT at import time)."""
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(hf_api.api, "endpoint", url)


@pytest.fixture
def data_hub(hf_home, monkeypatch, served):
    """The fake Hub with the gated dataset alone, granted to GRANTED; NO_ACCESS is a valid token without access."""
    with FakeHub() as server:
        server.add_repo(card.HUB_DATASET, {card.HUB_DATA_FILE: served}, kind="dataset", gated=True)
        server.grant(GRANTED, card.HUB_DATASET)
        server.add_user(NO_ACCESS)
        point_at(monkeypatch, server.url)
        try:
            yield server
        finally:
            huggingface_hub.close_session()


@pytest.fixture
def served_is_official(monkeypatch, served):
    monkeypatch.setattr(card, "OFFICIAL_SHA256", sha256(served))


def commit(server: FakeHub) -> str:
    return server.repos[("dataset", card.HUB_DATASET)].commit


def data_gets(server: FakeHub) -> list:
    return [r for r in server.requests if r.method == "GET" and r.path.endswith(f"/{card.HUB_DATA_FILE}")]


def download(capsys, *args) -> tuple[int, str, str]:
    code = main(["data", "download", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_download_fills_the_cache_checks_the_sha256_and_then_reads_the_cache(
    data_hub, hf_home, served_is_official, served, monkeypatch, capsys, tmp_path
):
    monkeypatch.setenv("HF_TOKEN", GRANTED)
    code, out, err = download(capsys)
    assert code == 0, err
    first, second = out.splitlines()
    path = Path(first.rsplit(": ", 1)[1])
    assert path.read_bytes() == served and path.is_relative_to(hf_home / "hub")
    at = f"revision main (commit {commit(data_hub)})"
    assert first == SERVED_LINE.format(sha=sha256(served), at=at, path=path)
    assert second.startswith(f"downloaded into the Hugging Face cache ({hf_home / 'hub'}): a run with --data hub")
    assert [r.authorization for r in data_gets(data_hub)] == [f"Bearer {GRANTED}"]
    # the same cache a run reads: --data hub finds the file there (this process asks the Hub only for
    # its metadata, and fetches no byte of it again)
    source = open_data("hub")
    assert (source.record["path"], source.record["kind"], source.reasons) == (str(path), "official", ())
    # again: from the cache, nothing downloaded
    t0 = time.perf_counter()
    code, again, err2 = download(capsys)
    took = time.perf_counter() - t0
    assert code == 0, err2
    assert again.splitlines()[0] == first and again.splitlines()[1].startswith("already in the Hugging Face cache")
    assert len(data_gets(data_hub)) == 1 and took < 5
    assert_secrets_kept(tmp_path, out, err, again, err2)


def test_a_pinned_official_revision_is_scored_from_its_path_as_official(
    data_hub, served_is_official, monkeypatch, capsys
):
    """A local copy whose SHA-256 is the card's counts as official: nothing makes a run on it unofficial."""
    monkeypatch.setenv("HF_TOKEN", GRANTED)
    code, out, err = download(capsys, "--revision", commit(data_hub))
    assert code == 0, err
    first, second = out.splitlines()
    path = first.rsplit(": ", 1)[1]
    assert f"(the card's), commit {commit(data_hub)}: " in first
    assert f"a run with --data hub reads the main revision, so score this file with --data {path} (official" in second
    source = open_data(path)
    assert (source.record["source"], source.record["kind"], source.reasons) == ("local", "official", ())


@pytest.mark.slow(reason="a whole run of 350 items (about 25 s on two cores)")
def test_a_local_copy_of_the_official_file_makes_an_official_run(served_is_official, served, tmp_path):
    copy = tmp_path / "data" / "test.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(served)
    tok = tiny_tokenizer()
    rep = evaluate(tiny_model("llama", tok), tok, data=tmp_path, progress=False)
    assert (rep["official"], rep["non_official_reasons"], rep["data"]["source"]) == (True, [], "local")


def test_a_revision_that_is_not_the_official_file_is_kept_and_said_so(data_hub, served, monkeypatch, capsys):
    """The card's checksum is left as it is: the served file is not the official one."""
    monkeypatch.setenv("HF_TOKEN", GRANTED)
    code, out, err = download(capsys, "--revision", commit(data_hub))
    assert code == 0 and err == ""
    first, second = out.splitlines()
    path = Path(first.rsplit(": ", 1)[1])
    assert first.startswith(
        f"data: not the official {card.HUB_DATASET} file: SHA-256 {sha256(served)} (the card's is {card.OFFICIAL_SHA256})"
    )
    assert second.endswith(f"and kept there; a run with --data hub refuses it; --data {path} scores it, not official")
    assert path.read_bytes() == served
    assert open_data(str(path)).record["kind"] == "modified"
    # the main revision holding it: exit 2, since a run with --data hub would refuse it; the file stays
    code, out, err = download(capsys)
    assert code == 2 and out.splitlines()[0] == first.replace(
        f"commit {commit(data_hub)}:", f"revision main (commit {commit(data_hub)}):"
    )
    [line] = err.splitlines()
    assert line == (
        f"base-bench: error: the main revision of {card.HUB_DATASET} holds a file that is not the official one; it is "
        f"kept in the Hugging Face cache, but a run with --data hub refuses it; --data {path} scores it, not official"
    )
    assert path.read_bytes() == served


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there now


@pytest.mark.parametrize(
    "token, args, message",
    [
        (None, [], "access to the gated dataset BananaMind/BananaMind-Base-Bench-1.1 was refused (no token: HF_TOKEN"),
        (NO_ACCESS, [], "refused (HF_TOKEN: its account has not been granted access (403))"),
        (UNKNOWN, [], "refused (HF_TOKEN: the Hub does not accept this token (401: invalid or expired))"),
        (GRANTED, ["--revision", "v9"], f"dataset {card.HUB_DATASET} has no revision 'v9'"),
        (GRANTED, ["unreachable"], f"cannot reach the Hugging Face Hub to fetch {card.HUB_DATASET}"),
    ],
    ids=["no-token", "no-access", "unknown-token", "no-such-revision", "unreachable"],
)
def test_refusals_are_one_line_and_never_show_the_token(
    data_hub, hf_home, served_is_official, monkeypatch, capsys, tmp_path, token, args, message
):
    if token:
        monkeypatch.setenv("HF_TOKEN", token)
    waits = []
    if args == ["unreachable"]:
        point_at(monkeypatch, closed_port_url())
        # huggingface_hub retries a refused connection 5 times, waiting 1+2+4+8+8 s: record the waits
        monkeypatch.setattr(hf_http, "time", SimpleNamespace(**{**vars(time), "sleep": waits.append}))
        args = []
    t0 = time.perf_counter()
    code, out, err = download(capsys, *args)
    assert code == 2 and out == "" and time.perf_counter() - t0 < 30
    [line] = err.splitlines()
    assert line.startswith("base-bench: error: ") and message in line, line
    assert "Traceback" not in err and not list((hf_home / "hub").rglob("test.jsonl"))
    assert len(waits) == (5 if message.startswith("cannot reach") else 0)
    assert_secrets_kept(tmp_path, out, err)


@pytest.mark.parametrize("data", ["bundled", "./data", "official"])
def test_data_other_than_hub_is_refused(capsys, data):
    with pytest.raises(SystemExit) as exit_:
        main(["data", "download", "--data", data])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("base-bench data download: error: argument --data: --data ")
    assert ("nothing to download" if data == "bundled" else "only 'hub'") in err[0]


def test_help_says_what_it_does_and_the_exit_status(capsys):
    with pytest.raises(SystemExit):
        main(["data", "download", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for phrase in ("--revision R", "HF_HUB_OFFLINE=1", "exit status: 0 when the official file is in the cache",
                   "2 when the main revision's file is not the official one"):  # fmt: skip
        assert phrase in out, phrase


@pytest.mark.slow(reason="a real HTTP hub server and two CLI processes (20 to 40 s)")
def test_an_offline_run_with_data_hub_finds_the_downloaded_file(tmp_path, served):
    """`data download` in one process (the Hub reachable), the server stopped, then a run with
    HF_HUB_OFFLINE=1 and --data hub in another: the file comes from the cache, and the run scores the
    official data."""
    model = save_tiny(tmp_path / "tiny-llama")
    official = ("-c", OFFICIAL_IS_SERVED, sha256(served))
    with FakeHub() as server:
        server.add_repo(card.HUB_DATASET, {card.HUB_DATA_FILE: served}, kind="dataset", gated=True)
        server.grant(GRANTED, card.HUB_DATASET)
        url = server.url
        res = run_cli(tmp_path, url, GRANTED, ["data", "download"], prefix=official)
        assert res.returncode == 0, res.stderr[-3000:]
        path = res.stdout.splitlines()[0].rsplit(": ", 1)[1]
        assert Path(path).read_bytes() == served
        huggingface_hub.close_session()
    out = tmp_path / "offline"
    args = ["--model", model, "--data", "hub", "--device", "cpu", "--limit", "7", "--out-dir", out]
    res2 = run_cli(tmp_path, url, GRANTED, args, prefix=official, extra_env={"HF_HUB_OFFLINE": "1"})
    assert res2.returncode == 0, res2.stderr[-3000:]
    rep = json.loads((out / "report.json").read_text())
    assert (rep["data"]["source"], rep["data"]["kind"], rep["data"]["path"]) == ("hub", "official", path)
    assert not error_lines(res2.stderr)
    assert_secrets_kept(tmp_path, res.stdout, res.stderr, res2.stdout, res2.stderr)

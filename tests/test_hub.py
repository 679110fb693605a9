"""Token lookup, the gated download and model snapshots, with the Hub faked (no network)."""

import logging
from pathlib import Path

from types import SimpleNamespace
import pytest
from huggingface_hub import errors as hf_errors

from base_bench import cli, hub
from fixtures import write_dataset

SECRET_ENV = "hf_ENVsecret0000000000000000000000"
SECRET_SAVED = "hf_SAVEDsecret00000000000000000000"
SECRET_TYPED = "hf_TYPEDsecret00000000000000000000"


def refused(msg="403 gated"):
    return hf_errors.GatedRepoError(msg, response=fake_response(403))


def fake_response(status):
    return SimpleNamespace(status_code=status, headers={}, request=None, url="https://huggingface.co/x")


class FakeHub:
    """hf_hub_download that accepts only `good` tokens and records what it was given."""

    def __init__(self, tmp_path, good=(), offline=False):
        self.calls, self.good, self.offline = [], set(good), offline
        self.file = write_dataset(tmp_path)

    def __call__(self, repo_id, filename, repo_type, revision=None, token=None):
        self.calls.append(token)
        assert (repo_id, filename, repo_type) == ("BananaMind/BananaMind-Base-Bench-1.1", "data/test.jsonl", "dataset")
        if self.offline:
            raise hf_errors.LocalEntryNotFoundError("cannot find the requested files in the local cache")
        if token in self.good:
            return str(self.file)
        raise refused()


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(hub, "saved_token", lambda: None)
    return monkeypatch


def no_tty():
    return False


def test_env_token_first(env, tmp_path):
    env.setenv("HF_TOKEN", SECRET_ENV)
    env.setattr(hub, "saved_token", lambda: SECRET_SAVED)
    fake = FakeHub(tmp_path, good={SECRET_ENV})
    env.setattr(hub.huggingface_hub, "hf_hub_download", fake)
    path, token = hub.fetch_official_data(isatty=no_tty)
    assert fake.calls == [SECRET_ENV] and token == SECRET_ENV and Path(path).is_file()


def test_saved_token_after_refused_env_token(env, tmp_path):
    env.setenv("HF_TOKEN", SECRET_ENV)
    env.setattr(hub, "saved_token", lambda: SECRET_SAVED)
    fake = FakeHub(tmp_path, good={SECRET_SAVED})
    env.setattr(hub.huggingface_hub, "hf_hub_download", fake)
    assert hub.fetch_official_data(isatty=no_tty)[1] == SECRET_SAVED
    assert fake.calls == [SECRET_ENV, SECRET_SAVED]


def test_prompt_only_on_a_terminal_and_last(env, tmp_path):
    env.setattr(hub, "saved_token", lambda: SECRET_SAVED)
    fake = FakeHub(tmp_path, good={SECRET_TYPED})
    env.setattr(hub.huggingface_hub, "hf_hub_download", fake)
    prompts = []

    def prompt(text):
        prompts.append(text)
        return SECRET_TYPED

    assert hub.fetch_official_data(prompt=prompt, isatty=lambda: True)[1] == SECRET_TYPED
    assert fake.calls == [SECRET_SAVED, SECRET_TYPED] and len(prompts) == 1
    fake.calls.clear()
    with pytest.raises(hub.HubError) as ei:
        hub.fetch_official_data(prompt=prompt, isatty=no_tty)
    assert len(prompts) == 1  # no prompt without a terminal
    assert "refused" in str(ei.value) and "--local-data" in str(ei.value)


def test_anonymous_when_no_token(env, tmp_path):
    fake = FakeHub(tmp_path, good={False})
    env.setattr(hub.huggingface_hub, "hf_hub_download", fake)
    assert hub.fetch_official_data(isatty=no_tty)[1] is None
    assert fake.calls == [False]  # False: huggingface_hub sends no token at all


def test_saved_token_uses_huggingface_hub_lookup(monkeypatch, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(SECRET_SAVED + "\n")
    monkeypatch.setattr(hub.huggingface_hub.constants, "HF_TOKEN_PATH", str(token_file))
    monkeypatch.setenv("HF_TOKEN", SECRET_ENV)
    assert hub.saved_token() == SECRET_SAVED


def test_unreachable_hub_says_how_to_run_locally(env, tmp_path):
    env.setenv("HF_TOKEN", SECRET_ENV)
    env.setattr(hub.huggingface_hub, "hf_hub_download", FakeHub(tmp_path, offline=True))
    with pytest.raises(hub.HubError) as ei:
        hub.fetch_official_data(isatty=no_tty)
    assert "cannot reach" in str(ei.value) and "--local-data" in str(ei.value)


def test_token_never_printed_logged_or_written(env, tmp_path, capsys, caplog):
    """A whole CLI run whose data access is refused: the token appears nowhere."""
    caplog.set_level(logging.DEBUG)
    env.setenv("HF_TOKEN", SECRET_ENV)
    env.setattr(hub, "saved_token", lambda: SECRET_SAVED)
    env.setattr(hub.huggingface_hub, "hf_hub_download", FakeHub(tmp_path, good=()))
    env.chdir(tmp_path)
    assert cli.main(["--model", "org/model", "--out-dir", str(tmp_path / "out")]) == 2
    out = capsys.readouterr()
    assert "refused" in out.err
    for secret in (SECRET_ENV, SECRET_SAVED):
        assert secret not in out.out + out.err + caplog.text
        for p in tmp_path.rglob("*"):
            if p.is_file():
                assert secret.encode() not in p.read_bytes()


def test_gated_data_then_model_download_records_commit(env, tmp_path, capsys):
    """Data from the (fake) Hub with the official checksum, model from a (fake) snapshot."""
    from base_bench import card, model as model_mod
    from tiny import save_tiny

    env.setenv("HF_TOKEN", SECRET_ENV)
    fake = FakeHub(tmp_path, good={SECRET_ENV})
    env.setattr(hub.huggingface_hub, "hf_hub_download", fake)
    from base_bench.dataset import sha256_file
    env.setattr(card, "OFFICIAL_SHA256", sha256_file(fake.file))
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = save_tiny(tmp_path / "snapshots" / commit)
    seen = {}

    def list_repo_files(repo_id, revision=None, token=None):
        seen["list"] = (repo_id, revision, token)
        return ["config.json", "model.safetensors", "pytorch_model.bin"]

    def snapshot_download(repo_id, revision=None, token=None, ignore_patterns=()):
        seen["snap"] = (repo_id, revision, token, tuple(ignore_patterns))
        return str(snap)

    env.setattr(hub.huggingface_hub, "list_repo_files", list_repo_files)
    env.setattr(hub.huggingface_hub, "snapshot_download", snapshot_download)
    out = tmp_path / "run"
    assert cli.main(["--model", "org/tiny", "--out-dir", str(out), "--revision", "main"]) == 0
    import json
    rep = json.loads((out / "report.json").read_text())
    assert rep["official"] is True and rep["non_official_reasons"] == []
    assert rep["config"]["model"]["revision"] == commit
    assert seen["snap"][:3] == ("org/tiny", "main", SECRET_ENV) and "*.bin" in seen["snap"][3]
    assert SECRET_ENV not in (out / "report.json").read_text() + (out / "run_config.json").read_text()
    assert "Official BananaMind Base Bench 1.1 result" in capsys.readouterr().out


def test_missing_hub_model_is_one_line(env, tmp_path, capsys):
    def list_repo_files(repo_id, revision=None, token=None):
        raise hf_errors.RepositoryNotFoundError("404", response=fake_response(404))

    env.setattr(hub.huggingface_hub, "list_repo_files", list_repo_files)
    write_dataset(tmp_path)
    assert cli.main(["--model", "org/missing", "--local-data", str(tmp_path), "--out-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "org/missing was not found" in err and err.count("\n") == 1

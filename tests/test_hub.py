"""Token order with the hidden prompt, and offline mode, with hf_hub_download replaced by a fake.

What these add to test_hub_http.py (which runs the real client against a fake Hub over HTTP): the
prompt (asked last, once, and only when stdin is a terminal) and the offline path, where no request
is made at all. Everything that can be seen on the wire (tokens sent, 401/403, cut downloads,
checksums, model snapshots, the token kept out of output and files) is tested there.
"""

from pathlib import Path
from types import SimpleNamespace

import pytest
from huggingface_hub import errors as hf_errors

from base_bench.items import hub

from fixtures import write_dataset

SECRET_SAVED = "hf_SAVEDsecret00000000000000000000"
SECRET_TYPED = "hf_TYPEDsecret00000000000000000000"


def refused():
    response = SimpleNamespace(status_code=403, headers={}, request=None, url="https://huggingface.co/x")
    return hf_errors.GatedRepoError("403 gated", response=response)


class FakeDownload:
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
def env(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(hub, "saved_token", lambda: None)
    return monkeypatch


def no_tty():
    return False


def test_prompt_only_on_a_terminal_and_last(env, tmp_path):
    env.setattr(hub, "saved_token", lambda: SECRET_SAVED)
    fake = FakeDownload(tmp_path, good={SECRET_TYPED})
    env.setattr(hub.huggingface_hub, "hf_hub_download", fake)
    prompts = []

    def prompt(text):
        prompts.append(text)
        return SECRET_TYPED

    path, token = hub.fetch_official_data(prompt=prompt, isatty=lambda: True)
    assert token == SECRET_TYPED and Path(path).is_file()
    assert fake.calls == [SECRET_SAVED, SECRET_TYPED] and len(prompts) == 1
    fake.calls.clear()
    with pytest.raises(hub.HubError) as ei:
        hub.fetch_official_data(prompt=prompt, isatty=no_tty)
    assert len(prompts) == 1  # no prompt without a terminal
    assert fake.calls == [SECRET_SAVED]
    assert "refused (saved login: its account has not been granted access (403))" in str(ei.value)
    assert "--data bundled" in str(ei.value)


def test_unreachable_hub_says_how_to_run_locally(env, tmp_path):
    env.setenv("HF_TOKEN", "hf_ENVsecret0000000000000000000000")
    env.setattr(hub.huggingface_hub, "hf_hub_download", FakeDownload(tmp_path, offline=True))
    with pytest.raises(hub.HubError) as ei:
        hub.fetch_official_data(isatty=no_tty)
    assert "cannot reach" in str(ei.value) and "--data bundled" in str(ei.value)

"""`contamination probe`: a tiny model taught the canary ranks its true GUID first (p = 1/(M+1)); the
same model untaught does not; the CLI loads a model directory as a run does and writes its files."""

import json

import pytest
import torch

from base_bench.commands.cli import main
from base_bench.contamination import probe
from base_bench.contamination.canary import parse
from base_bench.contamination.probing import ProbeBackend, probe_canary, transformers_backend
from base_bench.items.dataset import BUNDLED_CANARY

from tiny import tiny_model, tiny_tokenizer


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models on a shared 2-core machine: one thread is many times faster than two fighting."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def canary_model():
    return taught()


def taught(steps: int = 40):
    """A tiny llama that has seen the canary string (and nothing else) `steps` times."""
    tok = tiny_tokenizer()
    model = tiny_model("llama", tok, seed=1)
    ids = torch.tensor([tok(BUNDLED_CANARY, add_special_tokens=False)["input_ids"]])
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval(), tok


def test_a_model_that_saw_the_canary_ranks_it_first_and_an_unseen_one_does_not(canary_model):
    model, tok = canary_model
    res = probe(model, tok, candidates=199, seed=3)
    assert res["rank"] == 1 and res["p_value"] == 1 / 200 and res["seen"]
    assert res["true_logprob"] > res["random_logprob"]["max"]
    fresh = probe(tiny_model("llama", tiny_tokenizer(), seed=1), tiny_tokenizer(), candidates=199, seed=3)
    assert fresh["rank"] > 2 and fresh["p_value"] > 0.01 and not fresh["seen"]
    assert "no sign" in fresh["verdict"]


def test_the_backend_scores_are_the_summed_log_probs_of_the_runner_scorer():
    model, tok = taught(steps=5)
    backend = transformers_backend(model, tok, batch_size=3)
    ctx = backend.tokenize("BASE-BENCH-BUNDLED-CANARY 395bed8f-52cb-47dc")
    conts = [backend.tokenize(h) for h in ("-a967-31acfca315c0", "-b000-000000000000", "-8abc-123456789abc", "-9fff-f")]
    got = backend.score(ctx, conts)
    for c, s in zip(conts, got):  # against a plain forward pass over context + continuation
        ids = torch.tensor([ctx + c])
        logp = model(input_ids=ids).logits[0].float().log_softmax(-1)
        ref = sum(logp[len(ctx) + j - 1, t].item() for j, t in enumerate(c))
        assert abs(ref - s) < 1e-4


def test_any_backend_plugs_in():
    c = parse(BUNDLED_CANARY)
    # a backend that knows the GUID: the true half scores 0, every other -1
    backend = ProbeBackend(
        tokenize=lambda text: [ord(x) for x in text],
        score=lambda ctx, conts: [
            0.0 if bytes(conts[i]) == c.second_half.encode() else -1.0 for i in range(len(conts))
        ],
        name="fake",
    )
    res = probe_canary(backend, c, candidates=49, seed=0)
    assert (res["rank"], res["p_value"], res["backend"]) == (1, 1 / 50, "fake")


def test_cli_probe_loads_the_model_as_a_run_does_and_writes_its_files(tmp_path, capsys, canary_model):
    model, tok = canary_model
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    code = main(
        [
            "contamination",
            "probe",
            "--model",
            str(tmp_path / "m"),
            "--device",
            "cpu",
            "--threads",
            "1",
            "--candidates",
            "99",
            "--out-dir",
            str(tmp_path / "probe"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "rank 1 of 100, empirical p-value 0.01" in out
    res = json.loads((tmp_path / "probe" / "canary_probe.json").read_text())
    assert res["rank"] == 1 and res["model_identity"]["kind"] == "dir"
    assert "Rank **1** of 100" in (tmp_path / "probe" / "canary_probe.md").read_text()
    code = main(["contamination", "probe", "--model", str(tmp_path / "m"), "--out-dir", str(tmp_path / "probe")])
    assert code == 2 and "already exists" in capsys.readouterr().err

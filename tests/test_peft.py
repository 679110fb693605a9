"""PEFT adapters: `--peft DIR|HUB_ID` on the command line and a PeftModel handed to evaluate().

A tiny LoRA is trained here (a few AdamW steps on the tiny llama of tiny.py) and saved with
save_pretrained. Its scores must differ from the base model's and equal those of the merged model
(merge_and_unload) within 1e-4, by the CLI and by evaluate(). Also: the packed scorer (4D mask,
logits_to_keep) works through the PeftModel; the fingerprints and the resume signature cover the
adapter (its weights and its configuration) but not where it lies; the report names it and its
base model; a base model other than the adapter's gets a warning; bad adapters get one line and
exit 2 with nothing written; a Hub adapter comes through the fake Hub with the token.
"""

import argparse
import copy
import io
import json
import shutil
import sys
import threading
from pathlib import Path

import huggingface_hub
import pytest
import torch
from huggingface_hub import constants, hf_api
from peft import IA3Config, LoraConfig, PeftModel, PromptTuningConfig, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig

from base_bench import evaluate
from base_bench.backends.adapters import adapter_fingerprint, base_model_note, same_base
from base_bench.backends.identity import weights_fingerprint
from base_bench.backends.transformers import TransformersBackend, load_model
from base_bench.backends.transformers_scorers import PackedScorer, unwrap
from base_bench.commands import cli
from base_bench.engine.scoring import encode_item
from base_bench.errors import ModelError, RunError, UsageError
from base_bench.items.datasource import open_data

from fixtures import write_dataset
from hubserver import THREAD_PREFIX, FakeHub, files_of
from tiny import CORPUS, save_tiny, tiny_tokenizer
from tiny_gguf import write_tiny_gguf

LIMIT = 16
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tiny models here run several times faster on one torch thread than on two busy shared
    cores (measured 7x for 16 items under load); scores do not depend on it. Restored afterwards."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def load(path):
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()


def train_lora(base_dir, out, steps=5, seed=0, alpha=16):
    """A few AdamW steps of a rank-4 LoRA on every projection; saved with save_pretrained. Returns the
    trained PeftModel (left in training mode, as a training loop leaves it)."""
    torch.manual_seed(seed)
    tok = tiny_tokenizer()
    pm = get_peft_model(
        load(base_dir),
        LoraConfig(r=4, lora_alpha=alpha, target_modules=TARGETS, lora_dropout=0.0, task_type="CAUSAL_LM"),
    )
    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=2e-2)
    batch = [torch.tensor([tok(s)["input_ids"]]) for s in CORPUS[seed : seed + 4]]
    pm.train()
    for _ in range(steps):
        loss = sum(pm(input_ids=x, labels=x).loss for x in batch) / len(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    pm.save_pretrained(out)
    return pm


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("base") / "tiny-llama")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    write_dataset(d)
    return d


@pytest.fixture(scope="module")
def trained(base_dir, tmp_path_factory):
    """(the trained PeftModel, the directory it was saved to)."""
    out = tmp_path_factory.mktemp("lora") / "tiny-lora"
    return train_lora(base_dir, out), out


@pytest.fixture(scope="module")
def lora_dir(trained):
    return trained[1]


@pytest.fixture(scope="module")
def other_lora_dir(base_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("lora2") / "other-lora"
    train_lora(base_dir, out, steps=3, seed=1)
    return out


@pytest.fixture(scope="module")
def merged_dir(base_dir, lora_dir, tok, tmp_path_factory):
    out = tmp_path_factory.mktemp("merged") / "tiny-merged"
    PeftModel.from_pretrained(load(base_dir), str(lora_dir)).merge_and_unload().save_pretrained(out)
    tok.save_pretrained(out)
    return out


def scores(report):
    return [c["logprob"] for it in report["items"] for c in it["choices"]]


def max_diff(a, b):
    sa, sb = scores(a), scores(b)
    assert len(sa) == len(sb) == LIMIT * 4
    return max(abs(x - y) for x, y in zip(sa, sb))


def error_lines(err: str) -> list[str]:
    """The lines base-bench itself wrote to stderr (not transformers' loading bar)."""
    return [ln for ln in err.splitlines() if ln.startswith("base-bench:")]


def run_cli(*args):
    return cli.main([*map(str, args)])


def cli_report(out, base_dir, data_dir, *extra):
    assert (
        run_cli(
            "--model", base_dir, "--local-data", data_dir, "--out-dir", out, "--limit", LIMIT, "--device", "cpu", *extra
        )
        == 0
    )
    return json.loads((out / "report.json").read_text())


def edited_copy(src, dst, **changes):
    """A copy of an adapter directory with adapter_config.json fields changed."""
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "adapter_config.json").read_text())
    cfg.update(changes)
    (dst / "adapter_config.json").write_text(json.dumps(cfg))
    return dst


# -- scores: adapter applied, equal to the merged model ------------------------------------------------


def test_evaluate_scores_a_peft_model_with_its_adapter_applied(trained, base_dir, merged_dir, tok):
    pm = trained[0]
    flags = [m.training for m in pm.modules()]
    rep = evaluate(pm, tok, limit=LIMIT, progress=False)
    assert [m.training for m in pm.modules()] == flags  # left in training mode, as it was found
    base = evaluate(load(base_dir), tok, limit=LIMIT, progress=False)
    merged = evaluate(load(merged_dir), tok, limit=LIMIT, progress=False)
    assert max_diff(rep, base) > 0.05
    assert max_diff(rep, merged) < 1e-4
    cfg = rep["config"]
    assert cfg["scorer"] == "packed" and cfg["packing_check"]["ok"] is True
    assert cfg["model"]["spec"] == str(base_dir)  # the base model's name, not PeftModelForCausalLM
    ad = cfg["model"]["adapter"]
    assert (ad["kind"], ad["spec"], ad["peft_type"], ad["active_adapters"]) == (
        "in-memory",
        "default",
        "LORA",
        ["default"],
    )
    assert ad["base_model_name_or_path"] == str(base_dir) and ad["base_model_matches"] is True
    assert cfg["adapter_note"] is None and cfg["versions"]["peft"]


def test_packed_scorer_keeps_logits_to_keep_and_the_4d_mask_through_the_peft_model(lora_dir, base_dir, tok):
    """unwrap() reads the base model inside the PeftModel, so the scorer sees that its forward takes a
    logits_to_keep mask (PeftModel.forward passes it on) instead of computing the full LM head."""
    pm = PeftModel.from_pretrained(load(base_dir), str(lora_dir)).eval()
    assert unwrap(pm) is pm.get_base_model()
    items = open_data(None).dataset.items[:3]
    batch = [encode_item(tok, it) for it in items]
    scorer = PackedScorer(pm)
    got = scorer(batch)
    assert scorer.keep_mode == "mask"
    merged = PeftModel.from_pretrained(load(base_dir), str(lora_dir)).merge_and_unload().eval()
    want = PackedScorer(merged)(batch)
    assert max(abs(a.logprob - b.logprob) for x, y in zip(got, want) for a, b in zip(x, y)) < 1e-4


def test_cli_peft_dir_scores_differ_from_base_and_equal_merged(
    base_dir, lora_dir, merged_dir, data_dir, trained, tok, tmp_path
):
    rep = cli_report(tmp_path / "lora", base_dir, data_dir, "--peft", lora_dir)
    base = cli_report(tmp_path / "base", base_dir, data_dir)
    merged = cli_report(tmp_path / "merged", merged_dir, data_dir)
    assert max_diff(rep, base) > 0.05
    assert max_diff(rep, merged) < 1e-4
    in_memory = evaluate(trained[0], tok, data_dir, limit=LIMIT, progress=False)
    assert max_diff(rep, in_memory) < 1e-5  # the saved adapter is the one trained
    ad = rep["config"]["model"]["adapter"]
    assert (ad["spec"], ad["kind"], ad["path"], ad["revision"]) == (str(lora_dir), "dir", str(lora_dir), None)
    assert ad["fingerprint"] == adapter_fingerprint(lora_dir) and len(ad["fingerprint"]) == 32
    assert ad["base_model_name_or_path"] == str(base_dir) and ad["base_model_matches"] is True
    assert ad["peft_type"] == "LORA"
    assert rep["config"]["model"]["spec"] == str(base_dir) and rep["config"]["adapter_note"] is None
    md = (tmp_path / "lora" / "predictions.md").read_text()
    assert f"Adapter: `{lora_dir}` (LORA, fingerprint {ad['fingerprint']}), trained on `{base_dir}`." in md


def test_a_transformers_model_with_an_adapter_loaded_is_named_too(base_dir, lora_dir, tok):
    """transformers' own PEFT integration (model.load_adapter) injects the same layers in place."""
    model = load(base_dir)
    model.load_adapter(str(lora_dir))
    pm = PeftModel.from_pretrained(load(base_dir), str(lora_dir))
    a, b = (evaluate(m, tok, limit=LIMIT, progress=False) for m in (model, pm))
    assert max_diff(a, b) < 1e-6
    assert a["config"]["model"]["fingerprint"] == b["config"]["model"]["fingerprint"]
    assert a["config"]["model"]["adapter"] == b["config"]["model"]["adapter"]
    assert a["config"]["model"]["adapter"]["peft_type"] == "LORA"


@pytest.mark.parametrize(
    "config",
    [
        LoraConfig(
            r=4,
            target_modules=["q_proj", "v_proj", "down_proj"],
            use_dora=True,
            init_lora_weights=False,
            task_type="CAUSAL_LM",
        ),
        IA3Config(
            target_modules=["k_proj", "v_proj", "down_proj"],
            feedforward_modules=["down_proj"],
            init_ia3_weights=False,
            task_type="CAUSAL_LM",
        ),
    ],
    ids=["dora", "ia3"],
)
def test_other_methods_that_change_the_weights_equal_their_merge(config, base_dir, tok):
    """Untrained but not identity (random initial weights, IA3's scales widened): applied, not merged."""
    torch.manual_seed(0)
    pm = get_peft_model(load(base_dir), config).eval()
    with torch.no_grad():
        for name, p in pm.named_parameters():
            if "ia3_l" in name:
                p.mul_(3.0)
    rep = evaluate(pm, tok, limit=LIMIT, progress=False)
    merged = evaluate(copy.deepcopy(pm).merge_and_unload(), tok, limit=LIMIT, progress=False)
    base = evaluate(load(base_dir), tok, limit=LIMIT, progress=False)
    assert max_diff(rep, base) > 0.05 and max_diff(rep, merged) < 1e-4
    assert rep["config"]["packing_check"]["ok"] is True
    assert rep["config"]["model"]["adapter"]["peft_type"] == str(config.peft_type.value)


def test_default_out_dir_names_the_adapter():
    assert cli.default_out_dir("org/Base-7B") == Path("runs/base-7b-base-bench-1.1")
    assert cli.default_out_dir("org/Base-7B", "out/my_lora/") == Path("runs/base-7b-my_lora-base-bench-1.1")


# -- identity: fingerprints and resume -----------------------------------------------------------------


def test_in_memory_fingerprint_covers_lora_weights_and_configuration(base_dir, lora_dir, tmp_path, tok):
    pm = PeftModel.from_pretrained(load(base_dir), str(lora_dir), is_trainable=True)
    backend = TransformersBackend(pm, tok)
    before, weights_before, adapter_before = (
        backend.fingerprint(),
        weights_fingerprint(pm.get_base_model()),
        backend.adapter["fingerprint"],
    )
    assert before == TransformersBackend(PeftModel.from_pretrained(load(base_dir), str(lora_dir)), tok).fingerprint()
    lora_params = [p for n, p in pm.named_parameters() if "lora_" in n]
    with torch.no_grad():
        lora_params[0][0, 0] += 1e-3  # one LoRA weight, nothing else
    assert weights_fingerprint(pm.get_base_model()) != weights_before
    backend = TransformersBackend(pm, tok)
    assert backend.fingerprint() != before and backend.adapter["fingerprint"] != adapter_before
    # a base weight changes the model's fingerprint, not the adapter's own
    mid, adapter_mid = backend.fingerprint(), backend.adapter["fingerprint"]
    with torch.no_grad():
        pm.get_base_model().model.norm.weight[0] += 1e-3
    backend = TransformersBackend(pm, tok)
    assert backend.fingerprint() != mid and backend.adapter["fingerprint"] == adapter_mid
    # the same weights with another lora_alpha scale differently: another fingerprint, other scores
    alpha = edited_copy(lora_dir, tmp_path / "alpha", lora_alpha=64)
    a = PeftModel.from_pretrained(load(base_dir), str(lora_dir))
    b = PeftModel.from_pretrained(load(base_dir), str(alpha))
    assert weights_fingerprint(a.get_base_model()) == weights_fingerprint(b.get_base_model())
    assert TransformersBackend(a, tok).fingerprint() != TransformersBackend(b, tok).fingerprint()
    ra, rb = (evaluate(m, tok, limit=LIMIT, progress=False) for m in (a, b))
    assert max_diff(ra, rb) > 0.01
    assert ra["config"]["model"]["adapter"]["fingerprint"] != rb["config"]["model"]["adapter"]["fingerprint"]


def test_cli_resume_follows_the_adapter_content_not_its_place(
    base_dir, lora_dir, other_lora_dir, data_dir, tmp_path, capsys
):
    out = tmp_path / "run"
    assert (
        run_cli("--model", base_dir, "--local-data", data_dir, "--out-dir", out, "--limit", 8, "--peft", lora_dir) == 0
    )
    (out / "report.json").unlink()
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def resume(*extra):
        return run_cli(
            "--model", base_dir, "--local-data", data_dir, "--out-dir", out, "--limit", LIMIT, "--resume", *extra
        )

    edited = edited_copy(lora_dir, tmp_path / "edited", lora_alpha=32)
    for extra, why in [
        (("--peft", other_lora_dir), "model.adapter.fingerprint"),
        (("--peft", edited), "model.adapter.fingerprint"),
        ((), "model.adapter.kind: run has 'dir', now None"),
    ]:
        assert resume(*extra) == 2
        err = capsys.readouterr().err
        assert "--resume refused" in err and why in err
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    moved = tmp_path / "elsewhere" / "renamed-lora"
    shutil.copytree(lora_dir, moved)
    (moved / "README.md").write_text("notes a training run leaves beside the adapter\n")
    assert resume("--peft", moved) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["timing"]["items_scored_this_session"] == LIMIT - 8
    assert rep["config"]["model"]["adapter"]["path"] == str(moved)


def test_evaluate_resume_refuses_another_adapter(base_dir, lora_dir, other_lora_dir, tok, tmp_path):
    out = tmp_path / "run"
    pm = PeftModel.from_pretrained(load(base_dir), str(lora_dir))
    evaluate(pm, tok, limit=8, out_dir=out, progress=False)
    other = PeftModel.from_pretrained(load(base_dir), str(other_lora_dir))
    with pytest.raises(RunError, match="model.fingerprint"):
        evaluate(other, tok, limit=LIMIT, out_dir=out, resume=True, progress=False)
    rep = evaluate(
        PeftModel.from_pretrained(load(base_dir), str(lora_dir)),
        tok,
        limit=LIMIT,
        out_dir=out,
        resume=True,
        progress=False,
    )
    assert rep["timing"]["items_scored_this_session"] == LIMIT - 8


# -- the base model warning ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a,b,same",
    [
        ("org/m", "org/m", True),
        ("org/m", "org/m/", True),
        ("Org/M", "org/m", True),
        ("org/m", "/models/m", True),
        ("org/m", "/data/org/m/", True),
        ("org/m", "/cache/hub/models--org--m/snapshots/0123abcd", True),
        ("/cache/hub/models--org--m/snapshots/0123abcd", "org/m", True),
        ("org/m", "/models/m.Q4_K_M.gguf", True),
        ("org/m-Instruct", "m-instruct-f16.gguf", True),
        ("org/m", "org/other", False),
        ("org/m", "someone/m", False),
        ("org/m", "/cache/hub/models--someone--m/snapshots/0123abcd", False),
        ("org/m", "/models/m-instruct", False),
    ],
    ids=lambda x: str(x),
)
def test_same_base(a, b, same):
    assert same_base(a, b) is same
    assert same_base(b, a) is same


def test_same_base_compares_two_local_paths_by_place(tmp_path):
    (tmp_path / "a" / "m").mkdir(parents=True)
    (tmp_path / "b" / "m").mkdir(parents=True)
    assert same_base(str(tmp_path / "a" / "m"), str(tmp_path / "a" / "." / "m") + "/")
    assert not same_base(str(tmp_path / "a" / "m"), str(tmp_path / "b" / "m"))
    assert base_model_note("org/m", "/models/m") is None
    note = base_model_note("org/m", "org/other", "the adapter x")
    assert note.startswith("warning: the adapter x was trained on org/m ") and "applied to org/other" in note
    assert "\n" not in note


def test_another_base_model_is_warned_once_and_reported(base_dir, lora_dir, data_dir, tmp_path, capsys):
    foreign = edited_copy(lora_dir, tmp_path / "foreign-lora", base_model_name_or_path="someone/other-model")
    out = tmp_path / "run"
    rep = cli_report(out, base_dir, data_dir, "--peft", foreign)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "was trained on someone/other-model" in ln]
    assert len(lines) == 1 and f"applied to {base_dir}" in lines[0]
    ad = rep["config"]["model"]["adapter"]
    assert ad["base_model_matches"] is False and ad["base_model_name_or_path"] == "someone/other-model"
    assert rep["config"]["adapter_note"] == lines[0].strip()
    assert "> Warning: the adapter" in (out / "predictions.md").read_text()
    # in memory: the adapter's base against the name the base model was loaded under
    pm = PeftModel.from_pretrained(load(base_dir), str(foreign))
    mem = evaluate(pm, tiny_tokenizer(), limit=2, progress=False)
    assert "was trained on someone/other-model" in mem["config"]["adapter_note"]


def test_an_adapter_trained_on_a_gguf_names_the_gguf_file(data_dir, tmp_path, capsys):
    """A GGUF model loaded by base-bench goes by its file (not the GGUF cache entry it was read
    from), so an adapter trained on it records the file and matches --model FILE.gguf."""
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    for _ in range(2):  # the conversion, then the cache entry
        loaded = load_model(str(gguf), torch.device("cpu"), torch.float32)
        assert loaded.model.name_or_path == str(gguf)
    pm = get_peft_model(loaded.model, LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False))
    pm.save_pretrained(tmp_path / "gguf-lora")
    rep = cli_report(tmp_path / "run", gguf, data_dir, "--peft", tmp_path / "gguf-lora")
    ad = rep["config"]["model"]["adapter"]
    assert ad["base_model_name_or_path"] == str(gguf) and ad["base_model_matches"] is True
    assert rep["config"]["adapter_note"] is None and "was trained on" not in capsys.readouterr().err


# -- bad input: one line, exit 2, nothing written ------------------------------------------------------


def tiny_other_shape_lora(out):
    """A LoRA made for a llama of another width (hidden 48): its shapes do not fit the tiny llama."""
    cfg = LlamaConfig(
        vocab_size=300,
        hidden_size=48,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    model = AutoModelForCausalLM.from_config(cfg)
    get_peft_model(model, LoraConfig(r=4, target_modules=TARGETS, task_type="CAUSAL_LM")).save_pretrained(out)
    return out


def without_key(src, dst):
    shutil.copytree(src, dst)
    weights = load_file(dst / "adapter_model.safetensors")
    weights.pop(min(weights))
    save_file(weights, dst / "adapter_model.safetensors")
    return dst


def bad_json(src, dst):
    shutil.copytree(src, dst)
    (dst / "adapter_config.json").write_text("{not json")
    return dst


def no_weights(src, dst):
    shutil.copytree(src, dst)
    (dst / "adapter_model.safetensors").unlink()
    return dst


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda src, tmp: tmp / "nope" / "lora", "no such directory"),
        (
            lambda src, tmp: (tmp / "empty").mkdir() or tmp / "empty",
            "has no adapter_config.json, so it is not a PEFT adapter",
        ),
        (lambda src, tmp: tiny_other_shape_lora(tmp / "wide"), "size mismatch for"),
        (
            lambda src, tmp: edited_copy(src, tmp / "targets", target_modules=["no_such_proj"]),
            "could not apply adapter",
        ),
        (lambda src, tmp: without_key(src, tmp / "partial"), "the file has no weights for"),
        (lambda src, tmp: bad_json(src, tmp / "json"), "adapter_config.json is not readable JSON"),
        (lambda src, tmp: no_weights(src, tmp / "noweights"), "no adapter weights (adapter_model.safetensors or"),
        (lambda src, tmp: (tmp / "file.txt").write_text("x") and tmp / "file.txt", "a file, not an adapter directory"),
    ],
    ids=["missing", "no-config", "shapes", "targets", "missing-key", "bad-json", "no-weights", "a-file"],
)
def test_bad_adapter_is_one_line_exit_2_nothing_written(make, message, base_dir, lora_dir, data_dir, tmp_path, capsys):
    adapter = make(lora_dir, tmp_path)
    out = tmp_path / "run"
    assert run_cli("--model", base_dir, "--local-data", data_dir, "--out-dir", out, "--peft", adapter) == 2
    err = capsys.readouterr().err
    lines = error_lines(err)
    assert len(lines) == 1 and message in lines[0], err
    assert "Traceback" not in err and not out.exists()


def test_peft_flags_that_do_not_go_together(base_dir, data_dir, lora_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli("--model", base_dir, "--local-data", data_dir, "--out-dir", out, "--peft-revision", "main") == 2
    assert "--peft-revision only works with --peft" in capsys.readouterr().err
    assert (
        run_cli(
            "--model",
            base_dir,
            "--local-data",
            data_dir,
            "--out-dir",
            out,
            "--peft",
            lora_dir,
            "--peft-revision",
            "main",
        )
        == 2
    )
    assert "--peft-revision applies to Hub adapters only" in capsys.readouterr().err
    assert not out.exists()
    # --backend llama.cpp runs no transformers model: the same check whatever the parser offers
    args = argparse.Namespace(peft=str(lora_dir), peft_revision=None, backend="llama.cpp")
    with pytest.raises(
        UsageError, match="--peft applies a PEFT adapter to a transformers model, and --backend llama.cpp"
    ):
        cli._check_peft(args)
    gguf = write_tiny_gguf(tmp_path / "m.gguf")  # a GGUF llama.cpp could run: the adapter must still be refused
    assert (
        run_cli(
            "--model", gguf, "--local-data", data_dir, "--out-dir", out, "--peft", lora_dir, "--backend", "llama.cpp"
        )
        == 2
    )
    assert "--peft applies a PEFT adapter to a transformers model" in capsys.readouterr().err and not out.exists()


def test_prompt_learning_adapter_is_refused(base_dir, tok):
    pm = get_peft_model(load(base_dir), PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4))
    with pytest.raises(ModelError, match="PROMPT_TUNING, a prompt-learning method"):
        evaluate(pm, tok, limit=2, progress=False)


# -- a Hub adapter, through the fake Hub ---------------------------------------------------------------

TOKEN = "hf_PEFTsecret000000000000000000000000"
ADAPTER = "org/tiny-lora"


@pytest.fixture
def peft_hub(monkeypatch, tmp_path, lora_dir):
    """The fake Hub serving the adapter (gated, granted to TOKEN) with a training run's leftovers
    beside it; huggingface_hub pointed at it, with its home in tmp_path and HF_TOKEN set."""
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
    for var in ("HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    files = files_of(lora_dir)
    cfg = json.loads(files["adapter_config.json"])
    cfg["base_model_name_or_path"] = "org/tiny-llama"
    files["adapter_config.json"] = json.dumps(cfg).encode()
    files["README.md"] = b"# a LoRA\n"
    files["checkpoint-5/optimizer.pt"] = b"optimizer state that scoring never needs"
    with FakeHub() as server:
        server.add_repo(ADAPTER, files, gated=True)
        server.grant(TOKEN, ADAPTER)
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setattr(constants, "ENDPOINT", server.url)
        monkeypatch.setattr(
            constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}"
        )
        monkeypatch.setattr(hf_api.api, "endpoint", server.url)
        try:
            yield server
        finally:
            huggingface_hub.close_session()
    assert not [t.name for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


def test_hub_adapter_is_downloaded_with_the_token_and_named_by_commit(
    peft_hub, base_dir, lora_dir, data_dir, tmp_path, capsys
):
    local = tmp_path / "run-local"
    want = cli_report(local, base_dir, data_dir, "--peft", lora_dir)
    out = tmp_path / "run"
    rep = cli_report(out, base_dir, data_dir, "--peft", ADAPTER, "--peft-revision", "main")
    assert max_diff(rep, want) < 1e-6
    commit = peft_hub.repos[("model", ADAPTER)].commit
    ad = rep["config"]["model"]["adapter"]
    assert (ad["spec"], ad["kind"], ad["path"], ad["revision"], ad["revision_requested"]) == (
        ADAPTER,
        "hub",
        None,
        commit,
        "main",
    )
    assert ad["base_model_name_or_path"] == "org/tiny-llama" and ad["base_model_matches"] is True  # ".../tiny-llama"
    sig = json.loads((out / "run_config.json").read_text())["signature"]["model"]["adapter"]
    assert sig == {"kind": "hub", "id": ADAPTER, "revision": commit}
    fetched = {
        r.path.split("/resolve/", 1)[1].split("/", 1)[1]
        for r in peft_hub.requests
        if r.method == "GET" and "/resolve/" in r.path
    }
    assert fetched == {"adapter_config.json", "adapter_model.safetensors"}  # not the README, nor the optimizer state
    assert {r.authorization for r in peft_hub.requests if ADAPTER in r.path} == {f"Bearer {TOKEN}"}
    assert TOKEN not in capsys.readouterr().err + (out / "report.json").read_text()


@pytest.mark.parametrize(
    "adapter,revision,message",
    [
        ("org/missing-lora", None, "adapter org/missing-lora was not found on the Hub"),
        (ADAPTER, "v9", "adapter org/tiny-lora has no revision 'v9'"),
    ],
    ids=["missing", "no-such-revision"],
)
def test_hub_adapter_errors_are_one_line(peft_hub, base_dir, data_dir, tmp_path, capsys, adapter, revision, message):
    out = tmp_path / "run"
    args = ["--model", base_dir, "--local-data", data_dir, "--out-dir", out, "--peft", adapter]
    assert run_cli(*args, *(["--peft-revision", revision] if revision else [])) == 2
    err = capsys.readouterr().err
    lines = error_lines(err)
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in err and not out.exists()

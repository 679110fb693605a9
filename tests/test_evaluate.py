"""`base_bench.evaluate` on a model already in memory: same report as the CLI, the model left as it
was found, nothing written without an out-dir, and one-line errors before anything is written."""

import json
import os
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    BertConfig,
    BertForMaskedLM,
    T5Config,
    T5ForConditionalGeneration,
)

import base_bench
from base_bench import BaseBenchError, DataError, ModelError, RunError, UsageError, evaluate
from base_bench.backends import transformers_scorers as scoring
from base_bench.commands.cli import main
from base_bench.items import hub
from base_bench.items.dataset import BUNDLED_SHA256

from fixtures import records, write_dataset
from tiny import save_tiny, tiny_config, tiny_model, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[1]
RUN_FILES = ["partial_results.jsonl", "predictions.md", "report.json", "run_config.json"]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    write_dataset(d)
    return d


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny") / "tiny-llama")


def max_choice_delta(a: dict, b: dict) -> float:
    assert [i["id"] for i in a["items"]] == [i["id"] for i in b["items"]]
    return max(
        abs(x["logprob"] - y["logprob"])
        for i, j in zip(a["items"], b["items"])
        for x, y in zip(i["choices"], j["choices"])
    )


def keys(d, prefix=""):
    """Every key path of a nested dict (list entries: the first element's keys)."""
    out = set()
    for k, v in d.items():
        out.add(prefix + k)
        if isinstance(v, dict):
            out |= keys(v, prefix + k + ".")
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            out |= keys(v[0], prefix + k + "[].")
    return out


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_api_equals_cli_on_a_tiny_model(kind, data_dir, tmp_path):
    path = save_tiny(tmp_path / f"tiny-{kind}", kind)
    assert (
        main(
            [
                "--model",
                str(path),
                "--local-data",
                str(data_dir),
                "--out-dir",
                str(tmp_path / "cli"),
                "--device",
                "cpu",
                "--limit",
                "60",
            ]
        )
        == 0
    )
    cli = json.loads((tmp_path / "cli" / "report.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(path)
    from transformers import AutoTokenizer

    api = evaluate(model, AutoTokenizer.from_pretrained(path), data_dir, limit=60, progress=False)
    assert max_choice_delta(api, cli) < 1e-4
    assert abs(api["results"]["overall"]["elo"] - cli["results"]["overall"]["elo"]) < 0.01
    assert [i["prediction"] for i in api["items"]] == [i["prediction"] for i in cli["items"]]
    assert api["results"] == cli["results"]
    assert keys(api) == keys(cli)  # the same schema, to the last key
    assert api["data"] == cli["data"] and api["official"] is cli["official"] is False
    assert cli["config"]["model"]["kind"] == "dir" and api["config"]["model"]["kind"] == "in-memory"


def test_bundled_set_is_the_default_and_ships_in_the_package(tok):
    rep = evaluate(tiny_model("llama", tok), tok, limit=5, progress=False)
    assert rep["data"]["source"] == "bundled" and rep["data"]["sha256"] == BUNDLED_SHA256
    assert Path(rep["data"]["path"]).is_relative_to(Path(base_bench.__file__).parent)
    assert "bundled set" in rep["non_official_reasons"][0]
    assert any("--limit 5" in r for r in rep["non_official_reasons"])
    assert len(rep["items"]) == 5 and rep["results"]["uncertainty"]["n_items_in_data"] == 350


def test_bundled_is_the_word_for_the_default_and_a_path_is_never_a_word(tok, tmp_path, monkeypatch):
    model = tiny_model("llama", tok)
    a = evaluate(model, tok, limit=3, progress=False)
    b = evaluate(model, tok, "bundled", limit=3, progress=False)
    assert a["data"] == b["data"] and a["items"] == b["items"] and b["data"]["source"] == "bundled"
    # a folder that is named like a word is a path when it is given as a Path
    write_dataset(tmp_path / "bundled")
    monkeypatch.chdir(tmp_path)
    c = evaluate(model, tok, Path("bundled"), limit=3, progress=False)
    assert c["data"]["source"] == "local" and c["data"]["path"] == str(Path("bundled") / "data" / "test.jsonl")


def test_the_first_line_names_the_data(tok, data_dir, capsys, caplog):
    from base_bench.items.dataset import bundled_path

    model = tiny_model("llama", tok)
    # with progress: on stderr, before the bar
    evaluate(model, tok, "bundled", limit=2)
    err = capsys.readouterr().err
    assert err.splitlines()[0] == (
        "data: the bundled set (base-bench's own items; its Elo is not comparable with official results): "
        f"{bundled_path()}, SHA-256 {BUNDLED_SHA256[:12]}…"
    )
    # without: a note of the base_bench logger (INFO), shown where notes are on (as the command line
    # sets them, which an earlier test in this process may have done); said once either way
    caplog.set_level("INFO", logger="base_bench")
    rep = evaluate(model, tok, data_dir, limit=2, progress=False)
    assert capsys.readouterr().err.count("data: ") <= 1
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("data: ")]
    assert line == (
        "data: modified or unknown data (neither the official nor the bundled checksum; not official): "
        f"{data_dir / 'data' / 'test.jsonl'}, SHA-256 {rep['data']['sha256'][:12]}…"
    )


def test_data_file_and_directory_and_hub(tok, data_dir, monkeypatch):
    model = tiny_model("llama", tok)
    a = evaluate(model, tok, data_dir, limit=4, progress=False)
    b = evaluate(model, tok, str(data_dir / "data" / "test.jsonl"), limit=4, progress=False)
    assert a["items"] == b["items"] and a["data"]["source"] == "local"
    # "hub" goes through the CLI's own download function (faked here; tests/test_hub*.py cover it)
    monkeypatch.setattr(hub, "fetch_official_data", lambda: (str(data_dir / "data" / "test.jsonl"), None))
    with pytest.raises(DataError, match="does not match the card"):
        evaluate(model, tok, "hub", limit=4, progress=False)
    monkeypatch.setattr("base_bench.items.card.OFFICIAL_SHA256", a["data"]["sha256"])  # pretend it is official
    c = evaluate(model, tok, "hub", progress=False)
    assert c["data"]["source"] == "hub" and c["data"]["kind"] == "official" and c["official"] is True


def snapshot_model(model):
    return {
        "training": [m.training for m in model.modules()],
        "requires_grad": [p.requires_grad for p in model.parameters()],
        "grad": [p.grad for p in model.parameters()],
        "ptr": [p.data_ptr() for p in model.parameters()],
        "dtype": [p.dtype for p in model.parameters()],
        "device": [p.device for p in model.parameters()],
        "values": [p.detach().clone() for p in model.parameters()],
    }


def assert_same_model(before, model):
    after = snapshot_model(model)
    for key in ("training", "requires_grad", "ptr", "dtype", "device"):
        assert after[key] == before[key], key
    assert all(a is None for a in after["grad"])
    assert all(torch.equal(a, b) for a, b in zip(after["values"], before["values"]))


def test_model_is_left_as_found(tok):
    model = tiny_model("llama", tok)
    model.train()
    model.model.layers[1].eval()  # a mixed state must come back exactly
    model.lm_head.weight.requires_grad_(False)
    before = snapshot_model(model)
    seen = []
    real = scoring.PackedScorer.__call__

    def spy(self, batch):
        seen.append((self.model.training, torch.is_grad_enabled()))
        return real(self, batch)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scoring.PackedScorer, "__call__", spy)
        evaluate(model, tok, limit=12, batch_size=4, progress=False)
    assert seen and all(t == (False, False) for t in seen)  # eval mode, no autograd while scoring
    assert_same_model(before, model)


def test_model_is_restored_after_an_exception(tok):
    model = tiny_model("llama", tok).train()
    before = snapshot_model(model)

    def boom(self, batch):
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scoring.PackedScorer, "__call__", boom)
        with pytest.raises(KeyboardInterrupt):
            evaluate(model, tok, limit=8, progress=False)
    assert_same_model(before, model)


def test_existing_gradients_are_kept(tok):
    model = tiny_model("llama", tok).train()
    ids = torch.tensor([[5, 6, 7, 8]])
    model(input_ids=ids, labels=ids).loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    evaluate(model, tok, limit=4, progress=False)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))


def test_no_out_dir_writes_nothing_anywhere(tok, tmp_path, monkeypatch):
    for d in ("cwd", "home", "cache", "tmp"):
        (tmp_path / d).mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    model = tiny_model("llama", tok)
    evaluate(model, tok, limit=6, progress=False)
    assert sorted(p for p in tmp_path.rglob("*")) == sorted(tmp_path / d for d in ("cwd", "home", "cache", "tmp"))


def test_out_dir_writes_the_four_files_and_resumes(tok, tmp_path):
    model = tiny_model("llama", tok)
    out = tmp_path / "run"
    first = evaluate(model, tok, limit=8, out_dir=out, progress=False)
    assert sorted(p.name for p in out.iterdir()) == RUN_FILES
    assert json.loads((out / "report.json").read_text()) == first
    with pytest.raises(RunError, match="already holds a run"):
        evaluate(model, tok, out_dir=out, progress=False)
    full = evaluate(model, tok, out_dir=out, resume=True, progress=False)
    assert full["timing"]["items_scored_this_session"] == 342 and len(full["items"]) == 350
    lines = (out / "partial_results.jsonl").read_text().splitlines()
    assert len(lines) == 350 == len({json.loads(x)["id"] for x in lines})
    whole = evaluate(model, tok, progress=False)
    assert max_choice_delta(whole, full) < 1e-4 and whole["results"] == full["results"]
    other = tiny_model("llama", tok, seed=1)
    with pytest.raises(RunError, match="model.fingerprint"):
        evaluate(other, tok, out_dir=out, resume=True, progress=False)


@pytest.mark.slow(reason="eleven whole evaluate() runs of the tiny model, one per batch setting (about 18 s)")
def test_same_numbers_at_every_batch_size(tok):
    model = tiny_model("gpt2", tok)
    base = evaluate(model, tok, limit=40, batch_size=1, progress=False)
    assert base["config"]["row_length"] > 0
    for setting in ({"batch_size": bs} for bs in (3, 8, 64, "auto")):
        rep = evaluate(model, tok, limit=40, progress=False, **setting)
        assert max_choice_delta(base, rep) < 1e-4 and rep["results"] == base["results"]
    row = base["config"]["row_length"]  # the longest item's packed length
    for tokens in (1, row, 3 * row + 1, 100_000):
        rep = evaluate(model, tok, limit=40, batch_tokens=tokens, progress=False)
        cfg = rep["config"]
        assert (cfg["batch_size"], cfg["batch_tokens"], cfg["batch_tokens_used"]) == (None, tokens, tokens)
        assert cfg["row_length"] == min(row, tokens)
        assert max_choice_delta(base, rep) < 1e-4 and rep["results"] == base["results"]
    default = evaluate(model, tok, limit=4, progress=False)["config"]
    assert (default["batch_size"], default["batch_size_used"], default["batch_tokens"]) == (8, 8, None)


def test_a_model_that_fails_the_packing_check_is_scored_plainly_with_a_note(tok, caplog):
    """The check puts two items in one row: a model that gets one item a row right but not two
    (it reads each later item's positions from its columns) falls back to the plain path."""
    from test_scoring import ColumnPositions

    bent = ColumnPositions(tiny_config("gpt2", len(tok)))
    straight = tiny_model("gpt2", tok)
    bent.load_state_dict(straight.state_dict())
    bent.eval()
    with caplog.at_level("WARNING", logger="base_bench"):
        rep = evaluate(bent, tok, limit=12, batch_tokens=500, progress=False)
    assert "does not reproduce the plain path with a packed 4D mask" in caplog.text
    cfg = rep["config"]
    assert cfg["scorer"] == "plain" and cfg["packing_check"]["ok"] is False
    assert cfg["packing_check"]["max_abs_diff_vs_plain"] > 1e-3 and len(cfg["packing_check"]["checked_items"]) == 3
    assert cfg["row_length"] is None  # the plain scorer packs no rows
    ref = evaluate(straight, tok, limit=12, progress=False)
    assert ref["config"]["scorer"] == "packed" and ref["config"]["packing_check"]["ok"] is True
    assert max_choice_delta(ref, rep) < 1e-4 and rep["results"] == ref["results"]


def test_any_dtype_is_scored_as_it_is(tok):
    model = tiny_model("llama", tok, dtype=torch.bfloat16)
    before = snapshot_model(model)
    rep = evaluate(model, tok, limit=16, progress=False)
    assert rep["config"]["dtype"] == "bfloat16"
    assert_same_model(before, model)  # not cast to float32 for scoring
    ref = evaluate(tiny_model("llama", tok), tok, limit=16, progress=False)
    worst = max(
        abs(x["logprob"] - y["logprob"])
        for i, j in zip(ref["items"], rep["items"])
        for x, y in zip(i["choices"], j["choices"])
    )
    assert 0 < worst < 1.0  # bfloat16 weights: close to float32, not equal


def test_training_step_fingerprints_differ(tok):
    model = tiny_model("llama", tok)
    a = evaluate(model, tok, limit=2, progress=False)["config"]["model"]["fingerprint"]
    with torch.no_grad():
        model.model.norm.weight[0] += 1e-3
    b = evaluate(model, tok, limit=2, progress=False)["config"]["model"]["fingerprint"]
    assert a != b


# ---------------------------------------------------------------- bad input: one line, nothing written


def bad_vocab_model(tok):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(tiny_config("llama", 100)).eval()  # the tokenizer has 300 ids


def not_causal(kind, tok):
    if kind == "base":
        return AutoModel.from_config(tiny_config("llama", len(tok)))
    if kind == "masked":
        return BertForMaskedLM(
            BertConfig(
                vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
            )
        )
    if kind == "seq2seq":
        return T5ForConditionalGeneration(
            T5Config(vocab_size=len(tok), d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16)
        )
    return "gpt2"


@pytest.mark.parametrize(
    "case, error, fragment",
    [
        ("missing data", DataError, "no such directory or data file"),
        ("schema", DataError, "field 'label' has type bool"),
        ("not data", DataError, "data must be 'bundled' (or None), 'hub', or a path; got int"),
        ("vocab", ModelError, "vocabulary has 100 entries; is this the model's own tokenizer?"),
        ("base", ModelError, "no language-model head; load it with AutoModelForCausalLM"),
        ("masked", ModelError, "is not a causal LM"),
        ("seq2seq", ModelError, "encoder-decoder"),
        ("string", ModelError, "must be a loaded transformers causal LM"),
        ("tokenizer", ModelError, "tokenizer must be a transformers tokenizer"),
        ("limit", UsageError, "limit must be a whole number"),
        ("batch", UsageError, "batch_size must be"),
        ("tokens", UsageError, "batch_tokens must be a whole number of 1 or more"),
        ("both", UsageError, "give batch_size (items per pass) or batch_tokens (positions per pass), not both"),
    ],
)
def test_bad_input_raises_one_line_and_writes_nothing(case, error, fragment, tok, tmp_path):
    model, tokenizer, data, kw = tiny_model("llama", tok), tok, None, {}
    if case == "missing data":
        data = tmp_path / "nowhere"
    elif case == "schema":
        recs = records()
        recs[3]["label"] = True
        write_dataset(tmp_path / "bad", recs)
        data = tmp_path / "bad"
    elif case == "not data":
        data = 42
    elif case == "vocab":
        model = bad_vocab_model(tok)
    elif case in ("base", "masked", "seq2seq", "string"):
        model = not_causal(case, tok)
    elif case == "tokenizer":
        tokenizer = "gpt2"
    elif case == "limit":
        kw = {"limit": 0}
    elif case == "batch":
        kw = {"batch_size": "big"}
    elif case == "tokens":
        kw = {"batch_tokens": 0}
    elif case == "both":
        kw = {"batch_size": 8, "batch_tokens": 4096}
    out = tmp_path / "out"
    with pytest.raises(error) as ei:
        evaluate(model, tokenizer, data, out_dir=out, progress=False, **kw)
    assert isinstance(ei.value, BaseBenchError)
    msg = str(ei.value)
    assert fragment in msg and "\n" not in msg
    assert ei.value.__cause__ is None and ei.value.__suppress_context__ or ei.value.__context__ is None
    assert not out.exists()


def test_errors_are_exported_from_the_package():
    names = [
        "BaseBenchError",
        "DataError",
        "HubError",
        "ModelError",
        "ReportError",
        "RunError",
        "ScoringError",
        "UsageError",
    ]
    for name in names:
        cls = getattr(base_bench, name)
        assert issubclass(cls, base_bench.BaseBenchError) and name in base_bench.__all__


def test_model_info_from_the_cli_is_recorded(tok, model_dir, data_dir, tmp_path):
    assert (
        main(
            ["--model", str(model_dir), "--local-data", str(data_dir), "--out-dir", str(tmp_path / "r"), "--limit", "3"]
        )
        == 0
    )
    cfg = json.loads((tmp_path / "r" / "report.json").read_text())["config"]
    assert cfg["model"]["kind"] == "dir" and cfg["model"]["spec"] == str(model_dir)
    assert cfg["model"]["n_parameters"] > 0 and "identity" not in cfg["model"] and "load_s" not in cfg["model"]
    assert os.path.isabs(cfg["model"]["path"])

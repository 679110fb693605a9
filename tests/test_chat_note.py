"""The chat-model note: a model whose tokenizer (or GGUF file) carries a chat template, or whose
name says it was instruction- or chat-tuned (-Instruct, -Chat, -it, as a word), gets one note on the
terminal and in the report (config.chat_note, and predictions.md), as the BOS note does. Never a
refusal: the same ids are scored, and the run stays as official as it was."""

import json
import logging

import pytest
import torch

from base_bench import evaluate
from base_bench.commands.cli import main
from base_bench.evaluation import tuning_word
from base_bench.results.markdown import md_text

from fixtures import write_dataset
from tiny import tiny_model, tiny_tokenizer
from tiny_gguf import write_tiny_gguf

NOTE = "as chat- and instruction-tuned models do"  # in every chat note, and in no other
TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.mark.parametrize(
    "name, word",
    [
        ("HuggingFaceTB/SmolLM2-135M-Instruct", "instruct"),
        ("/models/SmolLM2-135M-Instruct.Q4_1.gguf", "instruct"),
        ("google/gemma-3-1b-it", "it"),
        ("meta-llama/Llama-2-7b-chat-hf", "chat"),
        ("org/Model_CHAT_v2/", "chat"),
        ("google/gemma-3-270m", None),
        ("THUDM/ChatGLM-6B", None),  # not a word of its own
        ("org/instructive-lm", None),
        ("/data/it/chat/base-model", None),  # only the model's own name counts, not the folders above it
        ("gemma-3-270m-it-qat-Q4_0.gguf", "it"),
        ("", None),
        (None, None),
    ],
)
def test_tuning_word_reads_the_models_own_name(name, word):
    assert tuning_word(name) == word


def template_tokenizer():
    tok = tiny_tokenizer()
    tok.chat_template = TEMPLATE
    return tok


def test_evaluate_notes_a_chat_template_once_and_keeps_the_scores(caplog):
    model = tiny_model("llama", tiny_tokenizer())
    with caplog.at_level(logging.INFO, logger="base_bench"):
        noted = evaluate(model, template_tokenizer(), limit=4, progress=False)
    notes = [r for r in caplog.records if NOTE in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.WARNING
    assert noted["config"]["chat_note"] == notes[0].getMessage()
    assert noted["config"]["chat_note"].startswith(
        f"note: this model carries a chat template in its tokenizer, {NOTE}, though some base models keep a "
        "template too; the card is for base models"
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="base_bench"):
        plain = evaluate(model, tiny_tokenizer(), limit=4, progress=False)
    assert not [r for r in caplog.records if NOTE in r.getMessage()] and plain["config"]["chat_note"] is None
    assert [i["choices"] for i in noted["items"]] == [i["choices"] for i in plain["items"]]
    assert (noted["official"], noted["non_official_reasons"]) == (plain["official"], plain["non_official_reasons"])


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    write_dataset(d)
    return d


def export(path, tok):
    tiny_model("llama", tiny_tokenizer()).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def cli(model, data_dir, out, *extra):
    argv = ["--model", str(model), "--local-data", str(data_dir), "--out-dir", str(out), "--limit", "4"]
    assert main([*argv, "--device", "cpu", *extra]) == 0
    return json.loads((out / "report.json").read_text()), (out / "predictions.md").read_text()


def test_cli_notes_a_name_that_says_instruct_once_in_the_terminal_and_predictions_md(data_dir, tmp_path, capsys):
    rep, md = cli(export(tmp_path / "tiny-Instruct", tiny_tokenizer()), data_dir, tmp_path / "run")
    assert capsys.readouterr().err.count(NOTE) == 1
    note = rep["config"]["chat_note"]
    assert note.startswith(f'note: this model has "instruct" in its name, {NOTE}; the card is for base models')
    assert "without a chat template" in note and "reported as usual" in note
    assert f"> {md_text('N' + note[1:])}" in md
    rep, md = cli(export(tmp_path / "tiny-chat-it", template_tokenizer()), data_dir, tmp_path / "both")
    assert capsys.readouterr().err.count(NOTE) == 1
    assert rep["config"]["chat_note"].startswith(
        f'note: this model carries a chat template in its tokenizer and has "chat" in its name, {NOTE};'
    )
    rep, md = cli(export(tmp_path / "tiny-base", tiny_tokenizer()), data_dir, tmp_path / "plain")
    assert NOTE not in capsys.readouterr().err and rep["config"]["chat_note"] is None and NOTE not in md


def test_cli_notes_the_chat_template_of_a_gguf_file(data_dir, tmp_path, capsys):
    gguf = write_tiny_gguf(tmp_path / "tiny-templated.gguf", chat_template=TEMPLATE)
    rep, _ = cli(gguf, data_dir, tmp_path / "run")
    assert capsys.readouterr().err.count(NOTE) == 1
    assert rep["config"]["chat_note"].startswith(f"note: this model carries a chat template in its tokenizer, {NOTE}")
    rep, _ = cli(write_tiny_gguf(tmp_path / "tiny.gguf"), data_dir, tmp_path / "plain")
    assert NOTE not in capsys.readouterr().err and rep["config"]["chat_note"] is None


def test_llama_cpp_reads_the_chat_template_from_the_gguf_header(tmp_path):
    pytest.importorskip("llama_cpp")
    from base_bench.backends.llama_cpp import LlamaCppBackend

    templated = LlamaCppBackend.load(write_tiny_gguf(tmp_path / "a.gguf", chat_template=TEMPLATE))
    plain = LlamaCppBackend.load(write_tiny_gguf(tmp_path / "b.gguf"))
    try:
        assert (templated.chat_template, plain.chat_template) == (True, False)
    finally:
        templated.close()
        plain.close()

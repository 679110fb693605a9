"""The BOS note: a model whose tokenizer puts BOS first, scored under the card's no-BOS rule, gets
one note on the terminal and in the report (config.bos_note, and predictions.md), saying that a
diagnostic --add-bos run plus `base-bench compare` measures the gap. The rule itself is unchanged:
the same ids are scored, and the run stays as official as it was.

Tokenizers that add BOS: a tokenizers post-processor template ("<s> $A"), transformers'
add_bos_token, and a GGUF's tokenizer.ggml.add_bos_token as transformers converts it (also when
the converted tokenizer comes back from the GGUF cache). The tiny tokenizer of tiny.py adds none.
"""

import json
import logging

import pytest
import torch
from tokenizers import Tokenizer, processors
from transformers import PreTrainedTokenizerFast

from base_bench import evaluate
from base_bench.backends.transformers import tokenizer_adds_bos
from base_bench.commands.cli import main
from base_bench.results.markdown import md_text

from fixtures import write_dataset
from tiny import tiny_model, tiny_tokenizer
from tiny_gguf import write_tiny_gguf

NOTE = "note: this model's tokenizer is set to put a BOS token first"


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run several times faster on one torch thread than on busy shared cores."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def template_tokenizer():
    """The tiny tokenizer with a post-processor that puts <s> first, as Llama's and Gemma's do."""
    tk = Tokenizer.from_str(tiny_tokenizer().backend_tokenizer.to_str())
    tk.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 0)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>")


def flag_tokenizer():
    tk = Tokenizer.from_str(tiny_tokenizer().backend_tokenizer.to_str())
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", add_bos_token=True)


def no_bos_token():
    tok = tiny_tokenizer()
    tok.bos_token = None
    return tok


def gguf_tokenizer(tmp_path, add_bos):
    from transformers import AutoTokenizer

    path = write_tiny_gguf(tmp_path / f"tiny-{add_bos}.gguf", add_bos=add_bos)
    return AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)


@pytest.mark.parametrize(
    "make,adds",
    [
        (lambda tmp: tiny_tokenizer(), False),
        (lambda tmp: template_tokenizer(), True),
        (lambda tmp: flag_tokenizer(), True),
        (lambda tmp: no_bos_token(), False),
        (lambda tmp: gguf_tokenizer(tmp, add_bos=True), True),
        (lambda tmp: gguf_tokenizer(tmp, add_bos=False), False),
    ],
    ids=["plain", "template", "add_bos_token", "no-bos-token", "gguf-add-bos", "gguf-no-bos"],
)
def test_tokenizer_adds_bos(make, adds, tmp_path):
    assert tokenizer_adds_bos(make(tmp_path)) is adds


def test_evaluate_notes_it_once_and_keeps_the_rule(caplog):
    model = tiny_model("llama", tiny_tokenizer())
    with caplog.at_level(logging.INFO, logger="base_bench"):
        noted = evaluate(model, template_tokenizer(), limit=4, progress=False)
    notes = [r for r in caplog.records if r.getMessage().startswith(NOTE)]
    assert len(notes) == 1 and notes[0].levelno == logging.WARNING
    text = noted["config"]["bos_note"]
    assert text == notes[0].getMessage() and "--add-bos" in text and "base-bench compare" in text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="base_bench"):
        plain = evaluate(model, tiny_tokenizer(), limit=4, progress=False)
        silenced = evaluate(model, template_tokenizer(), limit=4, add_bos=True, progress=False)
    assert not [r for r in caplog.records if NOTE in r.getMessage()]
    assert plain["config"]["bos_note"] is None and silenced["config"]["bos_note"] is None
    # the official rule is unchanged: the same ids scored, the same official status and reasons
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
    assert (
        main(
            [
                "--model",
                str(model),
                "--local-data",
                str(data_dir),
                "--out-dir",
                str(out),
                "--limit",
                "4",
                "--device",
                "cpu",
                *extra,
            ]
        )
        == 0
    )
    return json.loads((out / "report.json").read_text()), (out / "predictions.md").read_text()


def test_cli_prints_it_once_and_predictions_md_shows_it(data_dir, tmp_path, capsys):
    model = export(tmp_path / "bos-model", template_tokenizer())
    rep, md = cli(model, data_dir, tmp_path / "run")
    err = capsys.readouterr().err
    assert err.count(NOTE) == 1
    assert rep["config"]["bos_note"].startswith(NOTE)
    assert f"> {md_text('N' + rep['config']['bos_note'][1:])}" in md  # escaped as every field is
    rep, md = cli(model, data_dir, tmp_path / "with-bos", "--add-bos")
    assert NOTE not in capsys.readouterr().err and rep["config"]["bos_note"] is None and "> Note" not in md
    rep, md = cli(export(tmp_path / "plain-model", tiny_tokenizer()), data_dir, tmp_path / "plain")
    assert NOTE not in capsys.readouterr().err and rep["config"]["bos_note"] is None and "> Note" not in md


def test_cli_notes_a_gguf_that_adds_bos_also_from_the_cache(data_dir, tmp_path, capsys):
    gguf = write_tiny_gguf(tmp_path / "bos-tiny.gguf", add_bos=True)
    first, _ = cli(gguf, data_dir, tmp_path / "first")
    again, _ = cli(gguf, data_dir, tmp_path / "again")
    assert (first["config"]["model"]["cache"]["status"], again["config"]["model"]["cache"]["status"]) == (
        "written",
        "hit",
    )
    assert capsys.readouterr().err.count(NOTE) == 2
    assert first["config"]["bos_note"] == again["config"]["bos_note"] and first["config"]["bos_note"].startswith(NOTE)
    plain, _ = cli(write_tiny_gguf(tmp_path / "tiny.gguf"), data_dir, tmp_path / "plain")
    assert NOTE not in capsys.readouterr().err and plain["config"]["bos_note"] is None

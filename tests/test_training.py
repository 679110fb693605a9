"""base-bench inside training: BaseBenchCallback in a real Trainer run (tiny model), and
`base-bench trajectory` over the per-step reports it writes."""

import json
import shutil

import pytest
import torch
from transformers import Trainer, TrainerCallback, TrainingArguments, default_data_collator

from base_bench import UsageError
from base_bench.commands.cli import main
from base_bench.integrations import BaseBenchCallback
from base_bench.integrations.hf import metrics
from base_bench.results.trajectory import build_trajectory, find_reports

from tiny import CORPUS, tiny_model, tiny_tokenizer


class Sentences(torch.utils.data.Dataset):
    """A few sentences as causal-LM examples (labels = input ids)."""

    def __init__(self, tok, texts):
        self.rows = [tok(t, add_special_tokens=False)["input_ids"][:8] for t in texts]
        assert all(len(r) == 8 for r in self.rows)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        ids = torch.tensor(self.rows[i])
        return {"input_ids": ids, "labels": ids.clone()}


class ModeRecorder(TrainerCallback):
    """Runs after BaseBenchCallback at each step end: is the model still in training mode?"""

    def __init__(self):
        self.modes = []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.modes.append(model.training)


def train_with_callback(tmp_path, model, tok, steps=2, **cb):
    args = TrainingArguments(
        output_dir=str(tmp_path / "trainer"),
        max_steps=steps,
        per_device_train_batch_size=1,
        learning_rate=5e-2,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=steps,
        per_device_eval_batch_size=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    data = Sentences(tok, CORPUS[:4])
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=data,
        eval_dataset=data,
        processing_class=tok,
        data_collator=default_data_collator,
    )
    callback = BaseBenchCallback(trainer, out_dir=tmp_path / "bench", **cb)
    trainer.add_callback(callback)
    trainer.add_callback(ModeRecorder())
    trainer.train()
    return trainer, callback


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train")
    tok = tiny_tokenizer()
    model = tiny_model("llama", tok)
    trainer, cb = train_with_callback(tmp, model, tok, steps=3, every_n_steps=1, limit=20, batch_tokens=400)
    return tmp, trainer, cb, model


def test_callback_scores_each_step_once_and_logs_to_the_trainer(trained):
    tmp, trainer, cb, model = trained
    assert trainer.state.global_step == 3
    assert cb.scored_steps == [1, 2, 3]  # step 3 is both an every-step and an evaluation point: scored once
    logged = [h for h in trainer.state.log_history if "base_bench/overall_elo" in h]
    assert [h["step"] for h in logged] == [1, 2, 3]
    expected = {
        "base_bench/overall_elo",
        "base_bench/overall_elo_se",
        "base_bench/overall_elo_ci95_lo",
        "base_bench/overall_elo_ci95_hi",
        "base_bench/raw_accuracy",
        "base_bench/weighted_accuracy",
        "base_bench/language_completion_elo",
    }  # --limit 20 takes the first 20 items: one category
    assert set(logged[0]) - {"epoch", "step"} == expected
    assert any("loss" in h for h in trainer.state.log_history)  # training itself went on
    recorder = next(c for c in trainer.callback_handler.callbacks if isinstance(c, ModeRecorder))
    assert recorder.modes == [True, True, True]  # scoring left the Trainer's training mode in place


def test_callback_writes_full_reports_per_step_that_match_the_logs(trained):
    tmp, trainer, cb, model = trained
    steps = sorted((tmp / "bench").glob("step-*/report.json"))
    assert [p.parent.name for p in steps] == ["step-1", "step-2", "step-3"]
    reports = [json.loads(p.read_text()) for p in steps]
    assert [r["training_step"] for r in reports] == [1, 2, 3]
    assert all(r["config"]["batch_tokens"] == 400 and r["config"]["batch_size"] is None for r in reports)
    assert all(not r["official"] and any("--limit 20" in x for x in r["non_official_reasons"]) for r in reports)
    logged = [h for h in trainer.state.log_history if "base_bench/overall_elo" in h]
    for rep, log in zip(reports, logged):
        for k, v in metrics(rep).items():
            assert log[k] == pytest.approx(v)
    # the live weights were scored: they change with every optimizer step
    fps = [r["config"]["model"]["fingerprint"] for r in reports]
    assert len(set(fps)) == 3
    assert "Training step 2." in (tmp / "bench" / "step-2" / "predictions.md").read_text()


def test_trajectory_writes_png_markdown_and_html(trained, tmp_path, capsys):
    src, _, _, _ = trained
    out = tmp_path / "traj"
    assert main(["trajectory", str(src / "bench"), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["trajectory.html", "trajectory.md", "trajectory.png"]
    png = (out / "trajectory.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "trajectory.md").read_text()
    assert md.count("\n| 1 |") == 1 and "\n| 3 |" in md and "![Overall and category Elo" in md
    html = (out / "trajectory.html").read_text()
    assert "data:image/png;base64," in html and "<td>2</td>" in html
    printed = capsys.readouterr().out
    assert "step       1" in printed and "wrote" in printed
    # existing outputs are not overwritten without --force
    before = (out / "trajectory.md").read_bytes()
    assert main(["trajectory", str(src / "bench"), "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err and (out / "trajectory.md").read_bytes() == before
    assert main(["trajectory", str(src / "bench"), "--out", str(out), "--force"]) == 0


def test_trajectory_table_numbers_come_from_the_reports(trained):
    src, _, _, _ = trained
    reports = find_reports(src / "bench")
    traj = build_trajectory(reports)
    assert [r["step"] for r in traj["rows"]] == [1, 2, 3]
    for row, rep in zip(traj["rows"], reports):
        assert row["elo"] == rep["results"]["overall"]["elo"]
        assert row["elo_ci95"] == rep["results"]["overall"]["elo_ci95"]
        assert row["categories"]["language_completion"] == rep["results"]["categories"]["language_completion"]["elo"]


def test_trajectory_refusals(trained, tmp_path, capsys):
    src, _, _, _ = trained
    assert main(["trajectory", str(tmp_path / "none")]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["trajectory", str(tmp_path / "empty")]) == 2
    assert "no report.json with a training_step" in capsys.readouterr().err
    twice = tmp_path / "twice"
    shutil.copytree(src / "bench", twice)
    shutil.copytree(twice / "step-2", twice / "again-2")
    assert main(["trajectory", str(twice)]) == 2
    assert "step 2 has two reports" in capsys.readouterr().err
    mixed = tmp_path / "mixed"
    shutil.copytree(src / "bench", mixed)
    rep = json.loads((mixed / "step-3" / "report.json").read_text())
    rep["data"].update(sha256="f" * 64, kind="modified")
    (mixed / "step-3" / "report.json").write_text(json.dumps(rep))
    assert main(["trajectory", str(mixed)]) == 2
    assert "2 different data files" in capsys.readouterr().err
    assert not (mixed / "trajectory.png").exists() and not (twice / "trajectory.png").exists()


def test_callback_does_not_overwrite_an_existing_step_report(tmp_path):
    tok = tiny_tokenizer()
    model = tiny_model("llama", tok)
    (tmp_path / "bench" / "step-1").mkdir(parents=True)
    (tmp_path / "bench" / "step-1" / "report.json").write_text("{}")
    trainer, cb = train_with_callback(tmp_path, model, tok, steps=1, every_n_steps=1, limit=4)
    assert (tmp_path / "bench" / "step-1" / "report.json").read_text() == "{}"
    assert cb.scored_steps == [1]


def test_every_n_steps_must_be_positive():
    with pytest.raises(ValueError, match="every_n_steps"):
        BaseBenchCallback(None, every_n_steps=0)


def test_batch_settings_are_checked_when_the_callback_is_made():
    """Not at the first evaluation, possibly hours into training."""
    with pytest.raises(UsageError, match="not both"):
        BaseBenchCallback(None, batch_size=8, batch_tokens=4096)
    with pytest.raises(UsageError, match="batch_tokens must be"):
        BaseBenchCallback(None, batch_tokens=0)
    assert BaseBenchCallback(None, batch_tokens=4096).options["batch_tokens"] == 4096
    with pytest.raises(UsageError, match="give limit .* or limit_per_category .*, not both"):
        BaseBenchCallback(None, limit=8, limit_per_category=2)


def test_callback_scores_the_first_items_of_each_category(tmp_path):
    tok = tiny_tokenizer()
    train_with_callback(tmp_path, tiny_model("llama", tok), tok, steps=1, data="bundled", limit_per_category=1)
    rep = json.loads((tmp_path / "bench" / "step-1" / "report.json").read_text())
    assert rep["config"]["limit_per_category"] == 1 and len(rep["items"]) == len(rep["results"]["categories"]) == 7


def test_callback_takes_the_data_words(tmp_path):
    """data="bundled" is the default's name; "hub" and a path as evaluate() takes them."""
    tok = tiny_tokenizer()
    trainer, cb = train_with_callback(tmp_path, tiny_model("llama", tok), tok, steps=1, data="bundled", limit=4)
    rep = json.loads((tmp_path / "bench" / "step-1" / "report.json").read_text())
    assert rep["data"]["source"] == "bundled" and cb.scored_steps == [1]

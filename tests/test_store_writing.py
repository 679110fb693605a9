"""Runs that write their result to the results store (base_bench/store) as they finish: the command
line's --store, `evaluate(store=)` and `BaseBenchCallback(store=)`, with their labels (--group, --step,
--tokens, --tag) in the row and in report.json; and a store that cannot be reached at the end, which
leaves the run's files, says so in one line (the command line exits 75), and never shows its password.
Each store test runs on SQLite and on a real PostgreSQL server (the `store_url` fixture)."""

import json
import logging
import re

import pytest
from test_training import Sentences
from transformers import Trainer, TrainingArguments, default_data_collator

from base_bench import StoreError, UsageError, evaluate, redact, store
from base_bench.commands.cli import main
from base_bench.commands.cliargs import EXIT_STORE, EXIT_USAGE
from base_bench.commands.store import main as store_main
from base_bench.integrations import BaseBenchCallback
from base_bench.results.report import dumps
from base_bench.store.ingest import report_bytes as bytes_of

from tiny import CORPUS, save_tiny, tiny_model, tiny_tokenizer

PASSWORD = "secretpassword123"
UNREACHABLE = f"postgresql://u:{PASSWORD}@127.0.0.1:1/db"  # nothing listens on port 1
ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00")
RUN_FILES = ["partial_results.jsonl", "predictions.md", "report.json", "run_config.json"]


@pytest.fixture(autouse=True)
def no_secrets_left():
    """Opening a store registers its password as a secret for the whole process (the test server's is
    `base_bench`, which is in every path of the package): forget them after each test, so that no other
    test on this worker finds its files redacted."""
    yield
    redact.forget_all()


def as_written(rep: dict) -> bytes:
    """The bytes report.json holds for `rep`: its JSON, less every registered secret."""
    return redact.redact_bytes(dumps(rep).encode())


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return tiny_model("llama", tok)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny(tmp_path_factory.mktemp("tiny") / "tiny-llama"))


def score(model, tok, **kw):
    """The tiny model on one item of each category of the bundled set (7 items)."""
    return evaluate(model, tok, "bundled", limit_per_category=1, progress=False, **kw)


def rows(url: str) -> list[dict]:
    db = store.open_store(url, create=False)
    try:
        return store.summaries(db)
    finally:
        db.dispose()


def stored_bytes(url: str, key: str) -> bytes:
    db = store.open_store(url, create=False)
    try:
        return store.report_bytes(db, key)
    finally:
        db.dispose()


def cli(*args) -> int:
    return main([str(a) for a in args])


def cli_run(model_dir, out, *more) -> int:
    return cli(
        "--model", model_dir, "--data", "bundled", "--limit-per-category", 1, "--device", "cpu", "--out-dir", out, *more
    )


def files_hold(folder, text: str) -> list[str]:
    return [p.name for p in sorted(folder.rglob("*")) if p.is_file() and text.encode() in p.read_bytes()]


# ---------------------------------------------------------------- evaluate(store=)


def test_evaluate_writes_one_row_and_the_labels_into_report_json(model, tok, store_url, tmp_path):
    out = tmp_path / "run"
    rep = score(
        model,
        tok,
        out_dir=out,
        store=store_url,
        group="pretrain-7",
        step=4000,
        tokens=8_000_000,
        tags=["ablation", "lr"],
    )
    on_disk = json.loads((out / "report.json").read_text())
    assert (out / "report.json").read_bytes() == as_written(rep)
    labels = {"group": "pretrain-7", "training_step": 4000, "tokens_seen": 8_000_000, "tags": ["ablation", "lr"]}
    assert {k: on_disk[k] for k in labels} == labels
    assert ISO_UTC.fullmatch(on_disk["scored_at"])
    [row] = rows(store_url)
    assert row["_key"] == store.run_key(rep) and row["_source"] == str(out.resolve())
    assert {k: row.get(k) for k in labels} == labels
    assert row["scored_at"] == rep["scored_at"]
    assert row["results"]["overall"]["elo"] == pytest.approx(rep["results"]["overall"]["elo"])
    assert stored_bytes(store_url, row["_key"]) == (out / "report.json").read_bytes()  # the exact file
    # the store's URL (and its password) is written nowhere in the run's files
    assert files_hold(out, store_url) == [] and files_hold(out, "postgresql") == files_hold(out, "sqlite") == []


def test_evaluate_without_out_dir_stores_a_run_that_can_be_exported(model, tok, store_url, tmp_path):
    rep = score(model, tok, store=store_url, step=12)
    assert [p for p in tmp_path.iterdir() if not p.name.startswith("store.db")] == []  # nothing but the store
    [row] = rows(store_url)
    assert row["_source"] == "evaluate()" and row["training_step"] == 12
    assert stored_bytes(store_url, row["_key"]) == as_written(rep)
    if not redact.secrets():  # SQLite: no password, so the bytes are the report's own
        assert as_written(rep) == bytes_of(rep)
    out = tmp_path / "exported"
    out.mkdir()  # `store export` does not make its --out-dir (a FileNotFoundError when it is missing)
    assert store_main(["export", row["_key"][:12], "--store", store_url, "--out-dir", str(out)]) == 0
    assert (out / "report.json").read_bytes() == as_written(rep)
    assert (out / "predictions.md").is_file()


def test_the_same_run_twice_is_one_row_with_the_last_labels(model, tok, store_url, tmp_path):
    first = score(model, tok, store=store_url, group="a", tags=["x"])
    second = score(model, tok, out_dir=tmp_path / "again", store=store_url, group="b", step=3)
    assert store.run_key(first) == store.run_key(second)
    [row] = rows(store_url)
    assert row.get("group") == "b" and row.get("training_step") == 3 and not row.get("tags")
    assert row["_source"] == str((tmp_path / "again").resolve())


def test_evaluate_with_an_unreachable_store_raises_after_writing_its_files(model, tok, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(StoreError) as err:
        score(model, tok, out_dir=out, store=UNREACHABLE, group="g")
    exc = err.value
    assert sorted(p.name for p in out.iterdir()) == RUN_FILES
    assert (out / "report.json").read_bytes() == as_written(exc.report) and exc.report["group"] == "g"
    message = str(exc)
    assert "\n" not in message and PASSWORD not in message and "postgresql://u:***@127.0.0.1:1/db" in message
    assert f"base-bench store ingest {out.resolve()}" in message
    assert files_hold(out, PASSWORD) == [] and files_hold(out, "postgresql") == []


def test_evaluate_refuses_bad_labels_and_store_urls_before_writing_anything(model, tok, tmp_path):
    out = tmp_path / "run"
    for kw, fragment in (
        ({"step": -1}, "step must be a whole number"),
        ({"tokens": 1.5}, "tokens must be a whole number"),
        ({"tags": ["a\nb"]}, "tags must be"),
        ({"group": " padded"}, "group must be"),
        ({"store": "mysql://u:p@h/db"}, "not a store URL"),
        ({"store": 42}, "store must be a store URL"),
    ):
        with pytest.raises(UsageError, match=fragment) as err:
            score(model, tok, out_dir=out, **kw)
        assert "\n" not in str(err.value)
        assert not out.exists()


def test_a_sqlite_store_in_a_folder_still_missing_at_the_end_is_the_end_s_error(model, tok, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(StoreError, match="does not exist") as err:
        score(model, tok, out_dir=out, store=tmp_path / "no-such-folder" / "s.db")
    assert (out / "report.json").read_bytes() == as_written(err.value.report)


# ---------------------------------------------------------------- the command line


def test_cli_run_with_store_writes_a_row_and_says_so(model_dir, store_url, tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        cli_run(model_dir, out, "--store", store_url, "--group", "sweep-1", "--step", 7, "--tokens", 0, "--tag", "t")
        == 0
    )
    printed = capsys.readouterr().out
    rep = json.loads((out / "report.json").read_text())
    assert rep["group"] == "sweep-1" and rep["training_step"] == 7 and rep["tokens_seen"] == 0 and rep["tags"] == ["t"]
    assert ISO_UTC.fullmatch(rep["scored_at"])
    [row] = rows(store_url)
    assert row["_key"] == store.run_key(rep) and row["_source"] == str(out.resolve())
    assert row["group"] == "sweep-1" and row["training_step"] == 7 and row["tags"] == ["t"]
    assert f"(key {row['_key'][:12]})" in printed and "stored the run in" in printed
    assert files_hold(out, store_url.split("://", 1)[1]) == []
    if store_url.startswith("postgresql"):
        password = re.match(r"postgresql://[^:]+:([^@]+)@", store_url)[1]
        assert password not in printed and files_hold(out, password) == []


def test_cli_store_defaults_to_the_environment(model_dir, tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path}/env.db"
    monkeypatch.setenv("BASE_BENCH_STORE", url)
    assert cli_run(model_dir, tmp_path / "run") == 0
    assert len(rows(url)) == 1


def test_cli_sqlite_store_beside_the_run_in_a_folder_the_run_makes(model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # runs/ is not there yet: the run makes it, and the store goes in it
    assert cli_run(model_dir, "runs/tiny", "--store", "sqlite:///runs/bench.db") == 0
    assert len(rows(f"sqlite:///{tmp_path}/runs/bench.db")) == 1


def test_cli_unreachable_store_keeps_the_run_exits_75_and_ingest_adds_it_later(model_dir, store_url, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_run(model_dir, out, "--store", UNREACHABLE, "--step", 5) == EXIT_STORE == 75
    captured = capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == RUN_FILES
    assert "Overall Elo" in captured.out and f"wrote {out}/report.json" in captured.out  # the summary, as usual
    [line] = [x for x in captured.err.splitlines() if x.startswith("base-bench:")]  # the notes aside
    assert captured.err.splitlines()[-1] == line
    assert line.startswith("base-bench: error: the run was not stored: postgresql://u:***@127.0.0.1:1/db")
    assert f"base-bench store ingest {out.resolve()}" in line
    assert PASSWORD not in captured.out + captured.err and files_hold(out, PASSWORD) == []
    # later, `store ingest` adds the run, with the labels its report.json holds
    assert store_main(["ingest", str(out), "--store", store_url, "--jobs", "1"]) == 0
    [row] = rows(store_url)
    assert row["training_step"] == 5 and row["_source"] == str(out.resolve())
    assert stored_bytes(store_url, row["_key"]) == (out / "report.json").read_bytes()


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--tag", "two\nlines"], "tags must be"),
        (["--group", ""], "group must be"),
        (["--store", "mysql://u:p@h/db"], "not a store URL"),
        (["--store", f"postgresql://u:{PASSWORD}@h:5432"], "names no database"),
    ],
)
def test_cli_refuses_bad_labels_and_store_urls_in_one_line_before_loading(flags, fragment, tmp_path, capsys):
    out = tmp_path / "run"
    # a model that does not exist: refused for the label or the URL first, so before any model is looked for
    assert cli("--model", tmp_path / "no-such-model", "--data", "bundled", "--out-dir", out, *flags) == EXIT_USAGE
    [line] = capsys.readouterr().err.splitlines()  # not even the line naming the data
    assert line.startswith("base-bench: error:") and fragment in line and PASSWORD not in line
    assert not out.exists()


def test_cli_refuses_a_negative_step_before_loading(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        cli("--model", tmp_path / "no-such-model", "--data", "bundled", "--out-dir", tmp_path / "run", "--step", -1)
    assert exited.value.code == EXIT_USAGE
    first = capsys.readouterr().err.splitlines()[0]
    assert first == "base-bench: error: argument --step: --step must be 0 or more, not -1"
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- BaseBenchCallback(store=)


def train(tmp_path, tok, steps=2, **cb):
    """A tiny Trainer run that counts input tokens, with the callback scoring every step."""
    args = TrainingArguments(
        output_dir=str(tmp_path / "trainer"),
        max_steps=steps,
        per_device_train_batch_size=1,
        learning_rate=5e-2,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        include_num_input_tokens_seen=True,
    )
    trainer = Trainer(
        model=tiny_model("llama", tok),
        args=args,
        train_dataset=Sentences(tok, CORPUS[:4]),
        processing_class=tok,
        data_collator=default_data_collator,
    )
    callback = BaseBenchCallback(trainer, out_dir=tmp_path / "bench", every_n_steps=1, limit=20, **cb)
    trainer.add_callback(callback)
    trainer.train()
    return trainer, callback


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def warnings_said():
    handler = Records()
    logger = logging.getLogger("base_bench")
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)


def test_callback_writes_a_row_per_step_with_step_tokens_group_and_tags(tok, store_url, tmp_path):
    trainer, cb = train(tmp_path, tok, store=store_url, group="run-9", tags=["cb"])
    assert cb.scored_steps == [1, 2]
    found = sorted(rows(store_url), key=lambda r: r["training_step"])
    assert [r["training_step"] for r in found] == [1, 2]
    assert all(r["group"] == "run-9" and r["tags"] == ["cb"] for r in found)
    assert all(r["tokens_seen"] > 0 for r in found) and found[0]["tokens_seen"] < found[1]["tokens_seen"]
    for r in found:  # each step's report.json is the report stored for it, byte for byte
        path = tmp_path / "bench" / f"step-{r['training_step']}" / "report.json"
        assert stored_bytes(store_url, r["_key"]) == path.read_bytes()
        assert r["_source"] == str(path.parent.resolve())  # where `store rebuild` would find it
        rep = json.loads(path.read_text())
        assert rep["training_step"] == r["training_step"] and rep["tokens_seen"] == r["tokens_seen"]
        assert ISO_UTC.fullmatch(rep["scored_at"])


def test_callback_with_an_unreachable_store_warns_and_training_goes_on(tok, tmp_path, warnings_said):
    trainer, cb = train(tmp_path, tok, store=UNREACHABLE)
    assert trainer.state.global_step == 2 and cb.scored_steps == [1, 2]
    assert any("loss" in h for h in trainer.state.log_history)
    assert sum("base_bench/overall_elo" in h for h in trainer.state.log_history) == 2  # still logged
    steps = sorted(p.parent.name for p in (tmp_path / "bench").glob("step-*/report.json"))
    assert steps == ["step-1", "step-2"]
    said = [w for w in warnings_said if "not stored" in w]
    assert len(said) == 2 and all("\n" not in w and PASSWORD not in w for w in said)
    assert "postgresql://u:***@127.0.0.1:1/db" in said[0] and "training goes on" in said[0]
    assert f"base-bench store ingest {tmp_path / 'bench' / 'step-1'}" in said[0]


def test_callback_refuses_bad_labels_and_store_urls_at_once(tok):
    trainer = object()  # never reached: the arguments are refused first
    for kw in ({"group": "a\tb"}, {"tags": [""]}, {"store": "not a url"}):
        with pytest.raises(UsageError):
            BaseBenchCallback(trainer, **kw)

"""The command line end to end on a tiny local model and generated data."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from base_bench.commands.cli import default_out_dir, main

from fixtures import records, write_dataset
from tiny import save_tiny

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny(tmp_path_factory.mktemp("tiny") / "tiny-llama"))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    write_dataset(d)
    return str(d)


def run(*args):
    return main([*map(str, args)])


def snapshot(d: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(Path(d).iterdir())}


def without_timing(report: dict) -> dict:
    return {k: v for k, v in report.items() if k != "timing"}


@pytest.fixture(scope="module")
def full_run(model_dir, data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "full"
    assert run("--model", model_dir, "--local-data", data_dir, "--out-dir", out, "--device", "cpu") == 0
    return out


def test_full_run_writes_all_four_files(full_run):
    assert sorted(p.name for p in full_run.iterdir()) == [
        "partial_results.jsonl",
        "predictions.md",
        "report.json",
        "run_config.json",
    ]
    rep = json.loads((full_run / "report.json").read_text())
    assert len(rep["items"]) == 350 and rep["results"]["overall"]["n"] == 350
    assert rep["official"] is False and "not the card's official" in rep["non_official_reasons"][0]
    assert rep["data"]["kind"] == "modified" and len(rep["data"]["sha256"]) == 64
    cfg = rep["config"]
    for key in ("model", "device", "dtype", "batch_size", "add_bos", "threads", "runner_version", "scorer"):
        assert key in cfg
    it = rep["items"][0]
    assert len(it["choices"]) == 4 and {"logprob", "n_tokens", "mean_logprob"} <= set(it["choices"][0])
    assert it["correct"] == (it["prediction"] == it["label"])
    assert set(rep["results"]["categories"]) == {
        "language_completion",
        "commonsense",
        "world_knowledge",
        "context_tracking",
        "quantitative",
        "logical_reasoning",
        "code_completion",
    }
    assert set(rep["results"]["difficulties"]) == {"easy", "medium", "hard"}
    md = (full_run / "predictions.md").read_text()
    assert f"Overall Elo {rep['results']['overall']['elo']:.1f}" in md
    assert md.count("\n| language_completion-") == 50
    assert len((full_run / "partial_results.jsonl").read_text().splitlines()) == 350


def test_same_scores_at_other_batch_sizes(full_run, model_dir, data_dir, tmp_path):
    base = json.loads((full_run / "report.json").read_text())
    for bs in (1, 32):
        out = tmp_path / f"bs{bs}"
        assert run("--model", model_dir, "--local-data", data_dir, "--out-dir", out, "--batch-size", bs) == 0
        rep = json.loads((out / "report.json").read_text())
        worst = max(
            abs(a["logprob"] - b["logprob"])
            for x, y in zip(base["items"], rep["items"])
            for a, b in zip(x["choices"], y["choices"])
        )
        assert worst < 1e-4
        assert [i["prediction"] for i in rep["items"]] == [i["prediction"] for i in base["items"]]
        assert rep["results"] == base["results"]


def test_existing_run_is_never_overwritten(full_run, model_dir, data_dir, capsys):
    before = snapshot(full_run)
    assert run("--model", model_dir, "--local-data", data_dir, "--out-dir", full_run) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert snapshot(full_run) == before


def test_resume_after_torn_write_gives_same_report(full_run, model_dir, data_dir, tmp_path):
    out = tmp_path / "crashed"
    shutil.copytree(full_run, out)
    (out / "report.json").unlink()
    (out / "predictions.md").unlink()
    lines = (out / "partial_results.jsonl").read_text().splitlines(keepends=True)
    (out / "partial_results.jsonl").write_text("".join(lines[:123]) + lines[123][:40])  # torn line, no newline
    assert run("--model", model_dir, "--local-data", data_dir, "--out-dir", out, "--resume") == 0
    a = json.loads((full_run / "report.json").read_text())
    b = json.loads((out / "report.json").read_text())
    assert b["timing"]["items_scored_this_session"] == 350 - 123
    assert [i["prediction"] for i in a["items"]] == [i["prediction"] for i in b["items"]]
    assert a["results"] == b["results"]
    ids = [json.loads(x)["id"] for x in (out / "partial_results.jsonl").read_text().splitlines()]
    assert len(ids) == 350 == len(set(ids))


def test_resume_refuses_other_configuration_and_leaves_files(full_run, model_dir, data_dir, tmp_path, capsys):
    out = tmp_path / "other"
    shutil.copytree(full_run, out)
    lines = (out / "partial_results.jsonl").read_text().splitlines(keepends=True)
    (out / "partial_results.jsonl").write_text("".join(lines[:10]) + lines[10][:7])
    (out / "report.json").unlink()
    before = snapshot(out)
    assert run("--model", model_dir, "--local-data", data_dir, "--out-dir", out, "--resume", "--add-bos") == 2
    err = capsys.readouterr().err
    assert "--resume refused" in err and "add_bos: run has False, now True" in err
    other = save_tiny(tmp_path / "other-model", seed=1)
    assert run("--model", other, "--local-data", data_dir, "--out-dir", out, "--resume") == 2
    assert "model.fingerprint" in capsys.readouterr().err
    assert snapshot(out) == before


def test_resume_with_limit_then_full(model_dir, data_dir, tmp_path):
    out = tmp_path / "grow"
    assert run("--model", model_dir, "--local-data", data_dir, "--out-dir", out, "--limit", "8") == 0
    rep = json.loads((out / "report.json").read_text())
    assert len(rep["items"]) == 8 and any("--limit 8" in r for r in rep["non_official_reasons"])
    assert run("--model", model_dir, "--local-data", data_dir, "--out-dir", out, "--resume") == 0
    rep = json.loads((out / "report.json").read_text())
    assert len(rep["items"]) == 350 and rep["timing"]["items_scored_this_session"] == 342


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--batch-size", "0"], "--batch-size must be 1 or more"),
        (["--limit", "-3"], "--limit must be 1 or more"),
        (["--limit", "two"], "--limit takes a whole number"),
        (["--threads", "0"], "--threads must be 1 or more"),
        (["--dtype", "int8"], "invalid choice"),
    ],
)
def test_bad_flags_exit_2_with_one_message(model_dir, data_dir, tmp_path, capsys, args, fragment):
    with pytest.raises(SystemExit) as ei:
        run("--model", model_dir, "--local-data", data_dir, "--out-dir", tmp_path / "x", *args)
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "model, extra, fragment",
    [
        ("./no/such/model", [], "no such directory or file"),
        ("missing.gguf", [], "no such GGUF file"),
        (None, ["--device", "cuda"], "no CUDA GPU is available"),
        (None, ["--device", "tpu"], "is not one of"),
        (None, ["--local-data", "/nonexistent-dir"], "no such directory"),
        (None, ["--revision", "v1"], "--revision applies to Hub models only"),
    ],
)
def test_bad_paths_and_devices(model_dir, data_dir, tmp_path, capsys, model, extra, fragment):
    if "--device" in extra and "cuda" in extra:
        pytest.importorskip("torch")
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    args = ["--model", model or model_dir, "--out-dir", tmp_path / "x"]
    if "--local-data" not in extra:
        args += ["--local-data", data_dir]
    assert run(*args, *extra) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") <= 2 and "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_schema_errors_refuse_before_model_load(data_dir, tmp_path, capsys):
    recs = records()
    recs[5]["label"] = True
    write_dataset(tmp_path, recs)
    # the model path is bogus too: the data error must come first
    assert run("--model", tmp_path / "nothing-here", "--local-data", tmp_path, "--out-dir", tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert "schema error" in err and "field 'label' has type bool" in err


def test_composition_deviation_allowed_locally_but_not_official(model_dir, tmp_path):
    recs = records()[:-1]
    write_dataset(tmp_path, recs)
    assert run("--model", model_dir, "--local-data", tmp_path, "--out-dir", tmp_path / "o", "--limit", "4") == 0
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert not rep["official"]
    assert any("code_completion has 49 items" in r for r in rep["non_official_reasons"])


def test_default_out_dir_names():
    assert default_out_dir("BananaMind/BananaMind-2-Medium") == Path("runs/bananamind-2-medium-base-bench-1.1")
    assert default_out_dir("/x/SmolLM2-135M-Instruct.Q4_1.gguf") == Path(
        "runs/smollm2-135m-instruct.q4_1-base-bench-1.1"
    )
    assert default_out_dir("./my model/") == Path("runs/my-model-base-bench-1.1")


def test_benchmark_py_help_and_console_script(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmark.py"), "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for flag in (
        "--model",
        "--device",
        "--dtype",
        "--threads",
        "--batch-size",
        "--out-dir",
        "--resume",
        "--local-data",
        "--limit",
        "--add-bos",
        "--revision",
        "--trust-remote-code",
    ):
        assert flag in out.stdout
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmark.py"), "--model", "x/y/z", "--local-data", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr and out.stderr.startswith("base-bench: error:")

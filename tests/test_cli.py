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


@pytest.mark.slow(
    reason="whole CLI runs of the tiny model on 45 items (module fixture, about 20 s, and more runs per test)"
)
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


@pytest.mark.slow(
    reason="whole CLI runs of the tiny model on 45 items (module fixture, about 20 s, and more runs per test)"
)
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


@pytest.mark.slow(
    reason="whole CLI runs of the tiny model on 45 items (module fixture, about 20 s, and more runs per test)"
)
def test_existing_run_is_never_overwritten(full_run, model_dir, data_dir, capsys):
    before = snapshot(full_run)
    assert run("--model", model_dir, "--local-data", data_dir, "--out-dir", full_run) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert snapshot(full_run) == before


@pytest.mark.slow(
    reason="whole CLI runs of the tiny model on 45 items (module fixture, about 20 s, and more runs per test)"
)
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


@pytest.mark.slow(
    reason="whole CLI runs of the tiny model on 45 items (module fixture, about 20 s, and more runs per test)"
)
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


@pytest.mark.slow(
    reason="whole CLI runs of the tiny model on 45 items (module fixture, about 20 s, and more runs per test)"
)
def test_resume_with_limit_then_full(model_dir, data_dir, tmp_path):
    out = tmp_path / "grow"
    assert run("--model", model_dir, "--local-data", data_dir, "--out-dir", out, "--limit", "8") == 0
    rep = json.loads((out / "report.json").read_text())
    assert len(rep["items"]) == 8 and any("--limit 8" in r for r in rep["non_official_reasons"])
    assert run("--model", model_dir, "--local-data", data_dir, "--out-dir", out, "--resume") == 0
    rep = json.loads((out / "report.json").read_text())
    assert len(rep["items"]) == 350 and rep["timing"]["items_scored_this_session"] == 342


def first_of_each_category(n: int) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for r in records():  # file order
        seen[r["category"]] = seen.get(r["category"], 0) + 1
        if seen[r["category"]] <= n:
            out.append(r["id"])
    return out


def test_limit_per_category_scores_the_first_n_of_every_category_and_resumes_as_limit_does(
    full_run, model_dir, data_dir, tmp_path, capsys
):
    out, n_all = tmp_path / "each", len(records())
    assert run("--model", model_dir, "--local-data", data_dir, "--out-dir", out, "--limit-per-category", "2") == 0
    rep, two = json.loads((out / "report.json").read_text()), first_of_each_category(2)
    categories = {r["category"] for r in records()}
    assert [i["id"] for i in rep["items"]] == two and len(two) == 2 * len(categories) < n_all
    assert {c: b["n"] for c, b in rep["results"]["categories"].items()} == dict.fromkeys(categories, 2)
    assert (rep["config"]["limit"], rep["config"]["limit_per_category"]) == (None, 2)
    assert (
        not rep["official"]
        and f"--limit-per-category 2 scored {len(two)} of {n_all} items" in rep["non_official_reasons"]
    )
    printed = capsys.readouterr().out
    assert f"Note: intervals computed on {len(two)} of {n_all} items." in printed
    assert f"Note: intervals computed on {len(two)} of {n_all} items." in (out / "predictions.md").read_text()
    # not in the signature, as --limit is not: the same run_config.json as the full run's
    signature = [json.loads((d / "run_config.json").read_text())["signature"] for d in (out, full_run)]
    assert signature[0] == signature[1]
    assert (
        run("--model", model_dir, "--local-data", data_dir, "--out-dir", out, "--limit-per-category", 3, "--resume")
        == 0
    )
    rep = json.loads((out / "report.json").read_text())
    assert [i["id"] for i in rep["items"]] == first_of_each_category(3)
    assert rep["timing"]["items_scored_this_session"] == len(categories)
    assert run("--model", model_dir, "--local-data", data_dir, "--out-dir", out, "--resume") == 0
    rep, base = (json.loads((d / "report.json").read_text()) for d in (out, full_run))
    assert len(rep["items"]) == n_all and rep["official"] == base["official"]
    worst = max(
        abs(a["logprob"] - b["logprob"])
        for x, y in zip(base["items"], rep["items"])
        for a, b in zip(x["choices"], y["choices"])
    )
    assert worst < 1e-4  # other batches, so float rounding only


def test_limit_and_limit_per_category_together_are_refused_in_one_line(model_dir, data_dir, tmp_path, capsys):
    argv = ["--model", model_dir, "--local-data", data_dir, "--out-dir", tmp_path / "x", "--limit", 8]
    assert run(*argv, "--limit-per-category", 2) == 2
    assert capsys.readouterr().err == (
        "base-bench: error: give --limit (the first N items, in category order) or --limit-per-category (the first "
        "N of each category), not both\n"
    )
    assert not (tmp_path / "x").exists()


def test_evaluate_takes_limit_per_category_and_checks_it():
    from base_bench.errors import UsageError
    from base_bench.evaluation import Selection, check_arguments

    items = [type("I", (), {"category": c, "id": f"{c}{k}"})() for k, c in enumerate("aabacbbc")]
    assert [i.id for i in Selection(per_category=2).of(items)] == ["a0", "a1", "b2", "c4", "b5", "c7"]
    assert [i.id for i in Selection(limit=3).of(items)] == ["a0", "a1", "b2"]
    assert len(Selection().of(items)) == 8
    with pytest.raises(UsageError, match="give limit .* or limit_per_category .*, not both"):
        check_arguments(4, None, None, 2)
    with pytest.raises(UsageError, match="limit_per_category must be a whole number of 1 or more"):
        check_arguments(None, None, None, 0)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--batch-size", "0"], "--batch-size must be 1 or more"),
        (["--limit-per-category", "0"], "--limit-per-category must be 1 or more"),
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


@pytest.mark.slow(reason="a subprocess per case: benchmark.py and the console script started as a user starts them")
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


# -- --data bundled|hub|PATH: one data selector ------------------------------------------------------


@pytest.mark.parametrize(
    "flags, choice",
    [
        ([], "hub"),  # the card's command line: the official file
        (["--data", "bundled"], "bundled"),
        (["--data", "hub"], "hub"),
        (["--data", "./hub"], Path("hub")),  # a folder named hub
        (["--data", "my/test.jsonl"], Path("my/test.jsonl")),
        (["--local-data", "."], Path(".")),  # the card's spelling of --data DIR
        (["--local-data", "hub"], Path("hub")),  # a path, always
    ],
)
def test_data_flags_name_one_choice(flags, choice):
    from base_bench.commands.cli import build_parser
    from base_bench.commands.cliargs import data_choice

    got = data_choice(build_parser().parse_args(["--model", "m", *flags]), "hub")
    assert got == choice and type(got) is type(choice)


def test_data_and_local_data_together_are_refused_in_one_line(model_dir, data_dir, tmp_path, capsys):
    assert run("--model", model_dir, "--data", data_dir, "--local-data", data_dir, "--out-dir", tmp_path / "x") == 2
    err = capsys.readouterr().err
    assert err == (
        "base-bench: error: give --data or --local-data, not both (--local-data DIR is another spelling of --data DIR)\n"
    )
    assert not (tmp_path / "x").exists()


def test_data_bundled_is_scored_and_named_on_the_first_line(model_dir, tmp_path, capsys):
    from base_bench.items.dataset import BUNDLED_SHA256, bundled_path

    out = tmp_path / "b"
    assert run("--model", model_dir, "--data", "bundled", "--limit", 4, "--out-dir", out, "--device", "cpu") == 0
    first = capsys.readouterr().err.splitlines()[0]
    assert first == (
        "data: the bundled set (base-bench's own items; its Elo is not comparable with official results): "
        f"{bundled_path()}, SHA-256 {BUNDLED_SHA256[:12]}…"
    )
    rep = json.loads((out / "report.json").read_text())
    assert (rep["data"]["source"], rep["data"]["kind"], rep["data"]["sha256"]) == ("bundled", "bundled", BUNDLED_SHA256)


def test_data_path_is_what_local_data_reads(model_dir, data_dir, tmp_path, capsys):
    reps = []
    for flag in ("--data", "--local-data"):
        out = tmp_path / flag.strip("-")
        assert run("--model", model_dir, flag, data_dir, "--limit", 4, "--out-dir", out, "--device", "cpu") == 0
        assert capsys.readouterr().err.splitlines()[0].startswith("data: modified or unknown data (")
        reps.append(json.loads((out / "report.json").read_text()))
    assert reps[0]["data"] == reps[1]["data"] and reps[0]["data"]["source"] == "local"
    assert reps[0]["results"] == reps[1]["results"]


@pytest.mark.slow(reason="a subprocess per case: benchmark.py and the console script started as a user starts them")
def test_the_first_line_of_a_run_names_its_data(model_dir, tmp_path):
    """stdout and stderr together, as a terminal shows them: the data line comes before anything else."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmark.py"), "--model", model_dir, "--data", "bundled", "--limit", "2"]
        + ["--device", "cpu", "--out-dir", str(tmp_path / "r")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-2000:]
    assert out.stdout.splitlines()[0].startswith("data: the bundled set ("), out.stdout[:500]


# -- --model-arg KEY=VALUE ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, pair",
    [
        ("attn_implementation=eager", ("attn_implementation", "eager")),
        ("low_cpu_mem_usage=true", ("low_cpu_mem_usage", True)),
        ("n=2", ("n", 2)),
        ("x=0.5", ("x", 0.5)),
        ("x=null", ("x", None)),
        ("x=[1, 2]", ("x", [1, 2])),
        ('rope_scaling={"type": "linear", "factor": 2.0}', ("rope_scaling", {"type": "linear", "factor": 2.0})),
        ('x="2"', ("x", "2")),  # quoted JSON: the string, not the number
        ("x=", ("x", "")),
        ("x=a=b", ("x", "a=b")),  # the first "=" splits
        ("time=04:00:00", ("time", "04:00:00")),
        ("x=NaN", ("x", "NaN")),  # not JSON: text
        ("x=Infinity", ("x", "Infinity")),
    ],
)
def test_key_value_arg_reads_json_else_text(text, pair):
    from base_bench.commands.cliargs import key_value_arg

    assert key_value_arg("--model-arg")(text) == pair


@pytest.mark.parametrize("text", ["attn_implementation", "=eager", "1x=2", "a-b=1", " a=1", "a.b=1"])
def test_key_value_arg_refuses_what_is_not_key_value(text):
    import argparse

    from base_bench.commands.cliargs import key_value_arg

    with pytest.raises(argparse.ArgumentTypeError, match="^--vllm-arg takes KEY=VALUE with KEY a Python identifier"):
        key_value_arg("--vllm-arg")(text)


def test_key_values_refuses_a_key_given_twice_without_showing_the_values():
    from base_bench.commands.cliargs import key_values
    from base_bench.errors import UsageError

    assert key_values([("a", 1), ("b", "x")], "--model-arg") == {"a": 1, "b": "x"}
    with pytest.raises(UsageError) as ei:
        key_values([("quantization_config", {"secret": 1}), ("quantization_config", "s3cr3t")], "--model-arg")
    assert str(ei.value) == "--model-arg quantization_config=... is given twice; give it once"


@pytest.mark.parametrize(
    "text, keys",
    [
        ("attn_implementation=sdpa,max_length=2048", ("max_length",)),
        ("a=1, b=2,c_3 =x", ("b", "c_3")),
    ],
)
def test_key_value_arg_marks_lm_evals_comma_list(text, keys):
    from base_bench.commands.cliargs import CommaList, key_value_arg

    assert key_value_arg("--model-arg")(text)[1] == CommaList(keys)


@pytest.mark.parametrize("text", ['x="a,b=c"', 'rope_scaling={"type": "linear", "factor": 2.0}', "x=a,b", "x=a=b,c"])
def test_commas_that_are_the_values_own_are_kept(text):
    from base_bench.commands.cliargs import CommaList, key_value_arg

    assert not isinstance(key_value_arg("--model-arg")(text)[1], CommaList)


@pytest.mark.parametrize("flag", ["--model-arg", "--vllm-arg"])
def test_a_comma_list_is_refused_in_one_line_naming_the_repeatable_form(model_dir, data_dir, tmp_path, capsys, flag):
    arg = f"attn_implementation=sdpa,max_length=2048,token={SECRET}"
    argv = ["--model", model_dir, "--local-data", data_dir, "--out-dir", tmp_path / "x", flag, arg]
    if flag == "--vllm-arg":
        argv += ["--backend", "vllm"]
    assert run(*argv) == 2
    err = capsys.readouterr().err
    assert err == (
        f"base-bench: error: {flag} attn_implementation=...,max_length=...,token=... is a comma list, as lm-eval's "
        f"--model_args takes; {flag} takes one KEY=VALUE, so repeat it: {flag} attn_implementation=VALUE "
        f"{flag} max_length=VALUE {flag} token=VALUE (a VALUE whose commas are its own goes in JSON quotes: "
        f"""{flag} 'attn_implementation="..."')\n"""
    )
    assert "sdpa" not in err and "2048" not in err and not (tmp_path / "x").exists()


SECRET = "hf_MODELARGsecret0000000000000000000"


@pytest.mark.parametrize(
    "arg, instead",
    [
        ("dtype=float16", "--dtype"),
        ("torch_dtype=bfloat16", "--dtype"),
        ("device_map=auto", "--device-map (or --device)"),
        ("max_memory={}", "--max-memory"),
        ("offload_folder=/tmp/x", "--offload-folder"),
        ("revision=main", "--revision"),
        ("trust_remote_code=true", "--trust-remote-code"),
        ("gguf_file=x.gguf", "--gguf-file"),
        (f"token={SECRET}", "HF_TOKEN or `hf auth login`"),
        ("local_files_only=true", "HF_HUB_OFFLINE=1"),
        ("pretrained=org/name", "--model"),  # lm-eval's --model_args pretrained=...
    ],
)
def test_a_model_arg_base_bench_sets_itself_is_refused_naming_the_flag(
    model_dir, data_dir, tmp_path, capsys, arg, instead
):
    key = arg.partition("=")[0]
    assert run("--model", model_dir, "--local-data", data_dir, "--out-dir", tmp_path / "x", "--model-arg", arg) == 2
    err = capsys.readouterr().err
    assert err == f"base-bench: error: --model-arg {key}: base-bench sets {key} itself; use {instead} instead\n"
    assert SECRET not in err and not (tmp_path / "x").exists()


def test_model_arg_is_refused_by_the_llama_cpp_backend(data_dir, tmp_path, capsys):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")  # never read: the flags are refused first
    args = ["--backend", "llama.cpp", "--model", gguf, "--local-data", data_dir, "--out-dir", tmp_path / "x"]
    assert run(*args, "--model-arg", "n_ctx=4096") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--model-arg passes keyword arguments to transformers' from_pretrained" in err
    assert "--backend llama.cpp loads the GGUF with fixed settings" in err and not (tmp_path / "x").exists()


@pytest.mark.slow(
    reason="whole CLI runs of the tiny model on 45 items (module fixture, about 20 s, and more runs per test)"
)
def test_model_arg_attn_implementation_reaches_the_model_and_eager_equals_sdpa(model_dir, data_dir, tmp_path):
    """The plumbing on CPU: the attention kernel changes, the scores (mean token log-probs, what the
    card ranks by) do not, within 1e-5 nats; the summed log-probs (some 170 nats) differ by float32
    rounding, up to about 1.2e-5."""
    reps = {}
    for impl in ("eager", "sdpa"):
        out = tmp_path / impl
        flags = ["--local-data", data_dir, "--out-dir", out, "--device", "cpu", "--limit", 40]
        assert run("--model", model_dir, *flags, "--model-arg", f"attn_implementation={impl}") == 0
        reps[impl] = rep = json.loads((out / "report.json").read_text())
        model = rep["config"]["model"]
        assert model["model_args"] == {"attn_implementation": impl} and model["attn_implementation"] == impl
        sig = json.loads((out / "run_config.json").read_text())["signature"]
        assert sig["model"]["model_args"] == {"attn_implementation": impl}
    pairs = [
        (a["mean_logprob"], b["mean_logprob"])
        for x, y in zip(reps["eager"]["items"], reps["sdpa"]["items"])
        for a, b in zip(x["choices"], y["choices"])
    ]
    assert len(pairs) == 160 and max(abs(a - b) for a, b in pairs) < 1e-5
    assert [i["prediction"] for i in reps["eager"]["items"]] == [i["prediction"] for i in reps["sdpa"]["items"]]


def test_resume_is_refused_when_the_model_args_differ(model_dir, data_dir, tmp_path, capsys):
    out = tmp_path / "r"
    flags = ["--model", model_dir, "--local-data", data_dir, "--out-dir", out, "--device", "cpu"]
    assert run(*flags, "--limit", 4, "--model-arg", "attn_implementation=eager") == 0
    before = snapshot(out)
    capsys.readouterr()
    assert run(*flags, "--resume", "--model-arg", "attn_implementation=sdpa") == 2
    assert "model.model_args.attn_implementation: run has 'eager', now 'sdpa'" in capsys.readouterr().err
    assert run(*flags, "--resume") == 2
    assert "model.model_args.attn_implementation: run has 'eager', now None" in capsys.readouterr().err
    assert snapshot(out) == before
    assert run(*flags, "--resume", "--limit", 8, "--model-arg", "attn_implementation=eager") == 0


@pytest.mark.slow(
    reason="whole CLI runs of the tiny model on 45 items (module fixture, about 20 s, and more runs per test)"
)
def test_no_model_arg_leaves_the_signature_as_older_runs_have_it(full_run):
    """Runs started before --model-arg existed resume: without it the model's identity is unchanged."""
    sig = json.loads((full_run / "run_config.json").read_text())["signature"]
    assert set(sig["model"]) == {"kind", "fingerprint", "fingerprint_scheme"}
    rep = json.loads((full_run / "report.json").read_text())
    assert rep["config"]["model"]["model_args"] == {}

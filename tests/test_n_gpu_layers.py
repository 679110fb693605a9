"""`--n-gpu-layers N`: llama.cpp's layers offloaded to the GPU, for --backend llama.cpp only.

The flag's parsing (the run's and the sweep's), its refusals (another backend, --device cpu with
N > 0, a llama-cpp-python without GPU support), the resume signature (the default adds nothing, so
runs written before the flag still resume; any other N changes it), and real CPU runs with
`--n-gpu-layers 0`: a new one, recorded in report.json, and an old run (tests/old_runs) resumed.
"""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from base_bench.commands.cli import main
from base_bench.commands.runflags import build_parser
from base_bench.errors import RunError, UsageError

from fixtures import write_dataset
from tiny_gguf import write_tiny_gguf

HERE = Path(__file__).resolve().parent
OLD = HERE / "old_runs" / "llama_cpp_torch_tokenizer"
needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None and not os.environ.get("CI"),
    reason="llama-cpp-python is not installed (pip install -e '.[llama]')",
)


def cli(*args):
    return main([*map(str, args)])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("ngl")
    write_dataset(root / "data")
    return write_tiny_gguf(root / "tiny.gguf", file_type=7), root / "data"


# ------------------------------------------------------------------------------ parsing


@pytest.mark.parametrize("text, value", [(None, None), ("0", 0), ("12", 12), ("999", 999)])
def test_parsed_as_a_whole_number_of_0_or_more(text, value):
    extra = [] if text is None else ["--n-gpu-layers", text]
    assert build_parser().parse_args(["--model", "m.gguf", *extra]).n_gpu_layers == value


@pytest.mark.parametrize("text, says", [("-1", "must be 0 or more, not -1"), ("all", "whole number, not 'all'")])
def test_bad_values_refused_by_the_parser(text, says, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--model", "m.gguf", "--n-gpu-layers", text])
    assert exc.value.code == 2 and says in capsys.readouterr().err


def test_a_sweep_takes_it_and_stores_it_with_its_run_flags(tmp_path):
    from base_bench.commands.sweep import build_parser as sweep_parser
    from base_bench.commands.sweep import run_flags

    args = sweep_parser().parse_args(
        ["a.gguf", "--out-dir", str(tmp_path), "--backend", "llama.cpp", "--n-gpu-layers", "20"]
    )
    assert args.n_gpu_layers == 20 and run_flags(args)["n_gpu_layers"] == 20


# ------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize("backend", ["transformers", "vllm", "server"])
def test_refused_with_another_backend(backend, files, tmp_path, capsys):
    gguf, data = files
    extra = ["--base-url", "http://127.0.0.1:9/v1"] if backend == "server" else []
    out = tmp_path / "o"
    args = ["--backend", backend, "--model", gguf, "--local-data", data, "--out-dir", out, *extra]
    assert cli(*args, "--n-gpu-layers", 4) == 2
    err = capsys.readouterr().err.strip()
    assert "--n-gpu-layers" in err and "--backend llama.cpp only" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_refused_with_device_cpu_above_0(files, tmp_path, capsys):
    gguf, data = files
    out = tmp_path / "o"
    args = ["--backend", "llama.cpp", "--model", gguf, "--local-data", data, "--out-dir", out, "--device", "cpu"]
    assert cli(*args, "--n-gpu-layers", 8) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--n-gpu-layers 8 offloads layers to a GPU, and --device cpu" in err
    assert not out.exists()


@needs_llama
def test_refused_where_llama_cpp_has_no_gpu(files, tmp_path, capsys):
    from base_bench.backends.llama_cpp import lib

    if lib().llama_supports_gpu_offload():
        pytest.skip("this llama-cpp-python offloads to a GPU")
    gguf, data = files
    out = tmp_path / "o"
    assert (
        cli("--backend", "llama.cpp", "--model", gguf, "--local-data", data, "--out-dir", out, "--n-gpu-layers", 8) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--n-gpu-layers 8: this llama-cpp-python was built without GPU support" in err
    assert not out.exists()


@pytest.mark.parametrize("value", [-1, 2.5, True, "3"])
def test_the_python_api_refuses_what_the_flag_cannot_be(value):
    from base_bench.backends.llama_cpp import check_layers

    with pytest.raises(UsageError, match="whole number of 0 or more"):
        check_layers("cuda", value)


# ------------------------------------------------------------------------------ the resume signature

BEFORE = {  # run_signature of a llama.cpp run as it was before --n-gpu-layers, written out by hand
    "benchmark": "BananaMind Base Bench 1.1",
    "scoring": "mean_logprob/2",
    "model": {"kind": "gguf", "fingerprint": "f" * 32, "fingerprint_scheme": "content/3"},
    "data_sha256": "d" * 64,
    "add_bos": False,
    "dtype": "Q4_K_M",
    "backend": "llama.cpp",
}


@pytest.mark.parametrize(
    "layers, device, blocks, added",
    [
        (0, "cpu", None, None),  # the default on the CPU
        (0, "cpu", 30, None),
        (999, "cuda", None, None),  # the default on a GPU: every layer
        (999, "cuda:1", 30, None),
        (999, "mps", None, None),
        (20, "cuda", None, 20),
        (20, "cuda", 30, 20),
        (0, "cuda", 30, 0),  # nothing offloaded, on a GPU build: not the default
        (998, "cuda:0", None, 998),  # the block count unknown: only 999 is the default
        (5, "mps", 30, 5),
        (30, "cuda", 30, 30),  # every block, but not the output layer
        (31, "cuda", 30, None),  # every block and the output layer: every layer
        (99, "cuda", 30, None),
    ],
)
def test_signature_changes_only_off_the_default(layers, device, blocks, added):
    from base_bench.backends.llama_cpp import offload_setting
    from base_bench.engine.runstore import signature_hash
    from base_bench.evaluation import device_type, run_signature

    settings = offload_setting(layers, device, blocks)
    sig = run_signature(BEFORE["model"], "d" * 64, False, "Q4_K_M", device, "llama.cpp", settings)
    before = {**BEFORE, "device_type": device_type(device)}
    if added is None:
        assert sig == before and signature_hash(sig) == signature_hash(before)
    else:
        assert sig == {**before, "n_gpu_layers": added} and signature_hash(sig) != signature_hash(before)


def test_block_count_is_the_files(files, tmp_path):
    from base_bench.backends.gguf_file import read_header
    from base_bench.backends.llama_cpp import block_count

    from tiny_gguf import LAYERS, write_bare_gguf

    assert block_count(read_header(files[0])) == LAYERS
    assert block_count(read_header(write_bare_gguf(tmp_path / "bare.gguf"))) is None


def test_a_run_with_another_n_does_not_resume_one_with_the_default(tmp_path):
    from base_bench.backends.llama_cpp import offload_setting
    from base_bench.engine.runstore import RunStore
    from base_bench.evaluation import run_signature

    def sig(layers):
        return run_signature(
            BEFORE["model"], "d" * 64, False, "Q4_K_M", "cuda", "llama.cpp", offload_setting(layers, "cuda")
        )

    store = RunStore(tmp_path / "run")
    store.start(sig(999), {"model": "m.gguf"})
    store.check(sig(999), resume=True)  # the default resumes the default
    with pytest.raises(RunError, match=r"n_gpu_layers: run has None, now 20"):
        store.check(sig(20), resume=True)
    other = RunStore(tmp_path / "run20")
    other.start(sig(20), {"model": "m.gguf"})
    with pytest.raises(RunError, match=r"n_gpu_layers: run has 20, now None"):
        other.check(sig(999), resume=True)
    other.check(sig(20), resume=True)


# ------------------------------------------------------------------------------ real runs on the CPU


@needs_llama
def test_cpu_run_with_0_records_it_and_resumes_a_run_without_it(files, tmp_path):
    gguf, data = files
    out = tmp_path / "run"
    base = ["--backend", "llama.cpp", "--model", gguf, "--local-data", data, "--out-dir", out, "--threads", 1]
    assert cli(*base, "--device", "cpu", "--n-gpu-layers", 0, "--limit", 2) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["model"]["llama_cpp"]["n_gpu_layers"] == 0
    assert "n_gpu_layers" not in json.loads((out / "run_config.json").read_text())["signature"]
    # the same run without the flag is the same computation: it resumes
    assert cli(*base, "--resume", "--limit", 4) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["timing"]["items_scored_this_session"] == 2 and len(report["items"]) == 4


@needs_llama
def test_an_old_run_resumes_with_n_gpu_layers_0(tmp_path):
    """tests/old_runs/llama_cpp_torch_tokenizer/cli-run was written before --n-gpu-layers existed."""
    gguf = shutil.copy(OLD / "tiny.gguf", tmp_path / "tiny.gguf")
    folder = shutil.copytree(OLD / "cli-run", tmp_path / "run")
    args = ["--backend", "llama.cpp", "--model", gguf, "--local-data", OLD, "--out-dir", folder, "--resume"]
    assert cli(*args, "--threads", 1, "--device", "cpu", "--n-gpu-layers", 0) == 0
    report = json.loads((folder / "report.json").read_text())
    assert report["timing"]["items_scored_this_session"] == 4 and len(report["items"]) == 7
    assert report["config"]["model"]["llama_cpp"]["n_gpu_layers"] == 0

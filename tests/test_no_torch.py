"""A `--backend llama.cpp` run needs neither torch nor transformers (nor accelerate, nor peft).

Each run goes in a child process (tests/torchless.py): with those libraries made unimportable, from
the command line and from `evaluate(llama_cpp.Llama(...), tokenizer)`, once converting the tokenizer
(the conversion is transformers', in a process of its own) and once from the GGUF cache; and with
them importable, where the run must not load them. Runs written before the tokenizer was read
without transformers (tests/old_runs/llama_cpp_torch_tokenizer: a command-line run and an
`evaluate()` run of 3 of 7 items, and all 7 scored in one go) still resume, with the same scores.
The same on the real SmolLM2 file is in tests/test_llama_cpp_smollm2.py.
"""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from fixtures import records, write_dataset
from tiny_gguf import write_tiny_gguf
from torchless import run

HERE = Path(__file__).resolve().parent
OLD = HERE / "old_runs" / "llama_cpp_torch_tokenizer"
Q8_0 = 7
pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None and not os.environ.get("CI"),
        reason="llama-cpp-python is not installed (pip install -e '.[llama]')",
    ),
    pytest.mark.slow(reason="a subprocess per case: each run in a child process without torch (tests/torchless.py)"),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("torchless")
    write_dataset(root, records()[::25])  # 14 items, two per category
    return write_tiny_gguf(root / "tiny.gguf", file_type=Q8_0), root


def cli_args(gguf, data, out, *extra):
    return ["cli", "--backend", "llama.cpp", "--model", gguf, "--local-data", data, "--out-dir", out, *extra]


def test_command_line_run_with_torch_and_transformers_unimportable(files, tmp_path):
    gguf, data = files
    cache = tmp_path / "cache"
    first = run(*cli_args(gguf, data, tmp_path / "a", "--threads", 1), block=True, cache=cache)
    assert first["rc"] == 0 and first["loaded"] == []
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report["config"]["model"]["cache"]["status"] == "written" and len(report["items"]) == 14
    # the second run reads the converted tokenizer from the cache, and scores the same
    again = run(*cli_args(gguf, data, tmp_path / "b", "--threads", 1), block=True, cache=cache)
    assert again["rc"] == 0 and again["loaded"] == []
    second = json.loads((tmp_path / "b" / "report.json").read_text())
    assert second["config"]["model"]["cache"]["status"] == "hit"
    assert second["items"] == report["items"]
    for key in ("device", "dtype", "threads", "scorer", "backend", "signature_sha256"):
        assert second["config"][key] == report["config"][key], key


def test_evaluate_on_a_llama_object_with_torch_and_transformers_unimportable(files, tmp_path):
    gguf, data = files
    got = run("api", gguf, data, tmp_path / "run", '{"limit": 5}', block=True, cache=tmp_path / "cache")
    assert got["rc"] == 0 and got["loaded"] == []
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert (report["config"]["backend"], report["config"]["device"], len(report["items"])) == ("llama.cpp", "cpu", 5)


def test_a_run_loads_none_of_them_when_they_are_installed(files, tmp_path):
    gguf, data = files
    cache = tmp_path / "cache"
    cold = run(*cli_args(gguf, data, tmp_path / "a", "--limit", 3), block=False, cache=cache)
    warm = run("api", gguf, data, tmp_path / "b", '{"limit": 3}', block=False, cache=cache)
    assert (cold["loaded"], warm["loaded"]) == ([], [])


def _scores(folder: Path) -> dict:
    return {
        i["id"]: [c["logprob"] for c in i["choices"]] for i in json.loads((folder / "report.json").read_text())["items"]
    }


def _kernels(folder: Path) -> str:
    """What llama.cpp says of the CPU kernels a run used (its system_info)."""
    return json.loads((folder / "report.json").read_text())["config"]["model"]["llama_cpp"]["system_info"]


@pytest.fixture(scope="module")
def fresh_full_run(tmp_path_factory):
    """All 7 old items scored from scratch by today's code on this machine's llama.cpp build."""
    root = tmp_path_factory.mktemp("fresh")
    gguf = shutil.copy(OLD / "tiny.gguf", root / "tiny.gguf")
    got = run(*cli_args(gguf, OLD, root / "run", "--threads", 1), block=True, cache=root / "cache")
    assert got["rc"] == 0, got["stderr"][-2000:]
    return root / "run"


@pytest.mark.parametrize("kind", ["cli", "api"])
def test_runs_written_before_resume(kind, tmp_path, fresh_full_run):
    """A run of 3 of 7 items written when the tokenizer came through transformers continues: the same
    signature (device type, fingerprints), the 3 old items kept as they were, and the 4 new ones
    within 1e-6 of a whole run from scratch. llama.cpp's CPU kernels differ by SIMD level (the
    AVX-512 VNNI build that wrote these runs and an AVX2 build differ by up to 2.4e-3 on this Q8_0
    model), so the new scores are held to the scores the old code wrote (full-run/) only where
    this machine's build reports the same kernels; elsewhere to today's whole run on this build."""
    gguf = shutil.copy(OLD / "tiny.gguf", tmp_path / "tiny.gguf")
    folder = shutil.copytree(OLD / f"{kind}-run", tmp_path / "run")
    old = _scores(folder)
    if kind == "cli":
        args = cli_args(gguf, OLD, folder, "--resume", "--threads", 1)
    else:
        args = ["api", gguf, OLD, folder, '{"resume": true}']
    got = run(*args, block=True, cache=tmp_path / "cache")
    assert got["rc"] == 0, got["stderr"][-2000:]
    report = json.loads((folder / "report.json").read_text())
    assert report["timing"]["items_scored_this_session"] == 4 and len(report["items"]) == 7
    new = _scores(folder)
    assert {k: new[k] for k in old} == old
    same_kernels = _kernels(fresh_full_run) == _kernels(OLD / "full-run")
    reference = _scores(OLD / "full-run" if same_kernels else fresh_full_run)
    assert new.keys() == reference.keys() == _scores(OLD / "full-run").keys()
    fresh = [k for k in new if k not in old]
    assert len(fresh) == 4
    assert max(abs(a - b) for k in fresh for a, b in zip(new[k], reference[k])) <= 1e-6

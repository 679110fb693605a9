"""`--device-map`: a model spread over devices by accelerate (here: CPU and disk, forced with a small
`--max-memory`) scores exactly as the same model on one device; the flags it cannot go with are
refused with one line."""

import json
from pathlib import Path

import pytest

from base_bench.commands.cli import main

from fixtures import write_dataset
from tiny import save_tiny
from tiny_gguf import write_tiny_gguf


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("dm")
    write_dataset(d / "data")
    save_tiny(d / "tiny")
    write_tiny_gguf(d / "tiny.gguf")
    return d


def run(setup, model, out, *extra):
    return main(
        [
            "--model",
            str(model),
            "--local-data",
            str(setup / "data"),
            "--out-dir",
            str(out),
            "--limit",
            "40",
            *map(str, extra),
        ]
    )


def report(out) -> dict:
    return json.loads((Path(out) / "report.json").read_text())


def assert_same_scores(a, b):
    worst = max(
        abs(x["logprob"] - y["logprob"])
        for i, j in zip(a["items"], b["items"])
        for x, y in zip(i["choices"], j["choices"])
    )
    assert worst < 1e-4
    assert [i["prediction"] for i in a["items"]] == [i["prediction"] for i in b["items"]]
    assert a["results"] == b["results"]


def test_cpu_and_disk_offload_scores_as_one_device(setup, tmp_path):
    assert run(setup, setup / "tiny", tmp_path / "plain", "--device", "cpu") == 0
    off = tmp_path / "offload"
    assert (
        run(
            setup,
            setup / "tiny",
            tmp_path / "placed",
            "--device-map",
            "auto",
            "--max-memory",
            "cpu=90KB",
            "--offload-folder",
            off,
        )
        == 0
    )
    plain, placed = report(tmp_path / "plain"), report(tmp_path / "placed")
    where = placed["config"]["model"]["device_map"]
    assert "disk" in where.values() and "cpu" in where.values(), where  # really split between CPU and disk
    assert "device_map" not in plain["config"]["model"]
    assert_same_scores(plain, placed)


@pytest.mark.slow(
    reason="whole CLI runs of a GGUF model converted by transformers, with and without the cache, placed by a device map"
)
@pytest.mark.parametrize("cache", ["written", "hit", "disabled"])
def test_gguf_with_a_device_map(setup, tmp_path, monkeypatch, cache):
    """A GGUF file is converted whole on the CPU, then placed: read back from the cache entry, or
    dispatched from memory when the cache is off."""
    root = setup / "cache"  # shared across the parametrized runs: written, then hit
    monkeypatch.setenv("BASE_BENCH_CACHE", str(root))
    extra = ["--no-cache"] if cache == "disabled" else []
    assert run(setup, setup / "tiny.gguf", tmp_path / "plain", "--device", "cpu", "--no-cache") == 0
    assert (
        run(
            setup,
            setup / "tiny.gguf",
            tmp_path / "placed",
            "--device-map",
            "auto",
            "--max-memory",
            "cpu=20KB",
            "--offload-folder",
            tmp_path / "off",
            *extra,
        )
        == 0
    )
    placed = report(tmp_path / "placed")
    assert placed["config"]["model"]["cache"]["status"] == cache
    assert "disk" in placed["config"]["model"]["device_map"].values()
    assert_same_scores(report(tmp_path / "plain"), placed)


@pytest.mark.parametrize(
    "extra, env, fragment",
    [
        (["--device-map", "auto", "--device", "cpu"], {}, "--device-map places the layers itself"),
        (["--max-memory", "cpu=1GB"], {}, "--max-memory only work with --device-map"),
        (["--offload-folder", "x"], {}, "--offload-folder only work with --device-map"),
        (["--device-map", "auto", "--max-memory", "cpu:lots"], {}, "--max-memory takes DEVICE=SIZE"),
        (["--device-map", "everywhere"], {}, "invalid choice"),
        (["--device-map", "auto"], {"WORLD_SIZE": "2", "RANK": "0"}, "use one or the other"),
    ],
)
def test_refused_combinations(setup, tmp_path, monkeypatch, capsys, extra, env, fragment):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    try:
        code = run(setup, setup / "tiny", tmp_path / "x", *extra)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") <= 3 and "Traceback" not in err
    assert not (tmp_path / "x").exists()

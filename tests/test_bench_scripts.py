"""The parts of bench/readme_runs.py and bench/lm_eval_side.py that make the docs' numbers, on
hand-made inputs: each child's own peak memory, the table the docs hold, and the item-by-item
comparison of prediction rules (hand-computed). The scripts' real runs are minutes of model time;
tests/test_docs.py checks the pages against the files they wrote."""

import importlib.util
import json
import subprocess
import sys

import pytest

from docpages import ROOT, bench_script


def test_run_measured_gives_each_child_its_own_peak():
    # from a small process, as the bench scripts measure (a child's peak starts at its parent's RSS)
    script = f"""
import json, sys
sys.path.insert(0, {str(ROOT / "bench")!r})
from memory import run_measured
big = run_measured([sys.executable, "-c", "b = bytearray(300_000_000); b[::4096] = b'x' * len(b[::4096])"])
small = run_measured([sys.executable, "-c", "pass"])
failed = run_measured([sys.executable, "-c", "raise SystemExit(3)"])
print(json.dumps([big.__dict__, small.__dict__, failed.returncode]))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    big, small, failed = json.loads(out.stdout)
    assert big["returncode"] == small["returncode"] == 0 and failed == 3
    # getrusage(RUSAGE_CHILDREN) would give the largest child so far: 300 MB for the small one too
    assert big["peak_rss_bytes"] > 300e6 > small["peak_rss_bytes"]
    assert big["wall_s"] > 0 and big["cpu_s"] > 0


def test_the_results_table_is_rendered_from_the_measurements():
    readme_runs = bench_script("readme_runs")
    run = {
        "label": "command 1",
        "model_load_s": 49.12,
        "scoring_s": 846.0,
        "wall_s": 918.8,
        "cpu_s": 306.4,
        "peak_rss_gb": 1.26,
        "model_in_memory_gb": 0.54,
        "cache": "written",
        "load_average_before": [6.8, 2, 1],
        "load_average_after": [10.7, 3, 1],
    }
    machine = {"date": "2026-12-04", "cpu": "AMD EPYC", "logical_cpus": 2, "memory_gib": 23.5}
    machine |= {"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "5.25.0"}
    table = readme_runs.render_table({"machine": machine, "gemma": False, "limit": None, "runs": [run]})
    assert "| command 1 | 49.1 | 846.0 | 918.8 | 306 | 1.26 GB | 0.54 GB | written | 6.80 → 10.70 |" in table
    assert "`python bench/readme_runs.py` on AMD EPYC, 2 logical CPUs" in table and "all 350 bundled items" in table


def sample(doc_id, label, lls, continuations, acc, acc_norm, acc_bytes):
    doc = {"id": doc_id, "label": label, "continuations": continuations}
    return {
        "doc": doc,
        "filtered_resps": [[ll, False] for ll in lls],
        "acc": acc,
        "acc_norm": acc_norm,
        "acc_bytes": acc_bytes,
    }


def item(doc_id, prediction, sums, n_tokens, label):
    choices = [{"logprob": s, "n_tokens": n, "mean_logprob": s / n} for s, n in zip(sums, n_tokens)]
    return {
        "id": doc_id,
        "prediction": prediction,
        "label": label,
        "choices": choices,
        "item_elo": 900,
        "point_weight": 1.5,
    }


def test_the_rules_are_compared_item_by_item():
    side = bench_script("lm_eval_side")
    conts = [" a", " bbbbbbbb", " cc", " ddd"]  # 2, 9, 3, 4 characters
    # summed: -2.0 -4.0 -3.0 -5.0 -> acc picks 0 (also the shortest); per character: -1.0 -0.44 -1.0 -1.25
    # -> acc_norm picks 1; per token with 1, 4, 1, 2 tokens: -2.0 -1.0 -3.0 -2.5 -> base-bench picks 1
    lls = [-2.0, -4.0, -3.0, -5.0]
    rep = {
        "items": [item("x-001", 1, lls, [1, 4, 1, 2], 1), item("x-002", 2, [-1.0, -9.0, -0.5, -7.0], [1, 1, 1, 1], 3)]
    }
    samples = [
        sample("x-001", 1, lls, conts, 0.0, 1.0, 1.0),
        sample("x-002", 3, [-1.0, -9.0, -0.5, -7.0], conts, 0.0, 0.0, 0.0),
    ]
    tokens = {"tokenizer_adds_bos": False, "continuations_tokenized_differently": 0}
    c = side.compare(rep, samples, tokens)
    assert c["n_items"] == 2 and c["label_is_shortest"] == 0
    assert [r["pred"] for r in c["items"]] == [
        {"base_bench": 1, "sum": 0, "lm_eval_acc": 0, "lm_eval_acc_norm": 1, "lm_eval_acc_bytes": 1},
        {"base_bench": 2, "sum": 2, "lm_eval_acc": 2, "lm_eval_acc_norm": 2, "lm_eval_acc_bytes": 2},
    ]
    assert {k: r["correct"] for k, r in c["rules"].items()} == {
        "base_bench": 1,
        "sum": 0,
        "lm_eval_acc": 0,
        "lm_eval_acc_norm": 1,
        "lm_eval_acc_bytes": 1,
    }
    assert c["rules"]["lm_eval_acc"]["picks_shortest"] == 1 and c["rules"]["base_bench"]["picks_shortest"] == 0
    assert c["same_choice"] == {
        "base_bench|lm_eval_acc": 1,
        "base_bench|lm_eval_acc_norm": 2,
        "lm_eval_acc|lm_eval_acc_norm": 1,
        "base_bench|sum": 1,
        "sum|lm_eval_acc": 2,
    }
    assert c["ll_vs_base_bench_sum"]["max_abs"] == 0.0
    assert "| lm-eval `acc` (summed log-prob) | 0 / 2 | 0.0% |" in side.render_table({"comparison": c})
    # lm-eval's own verdict must be what its log-likelihoods give, or the comparison stops
    samples[0]["acc"] = 1.0
    with pytest.raises(SystemExit, match="acc is not what its log-likelihoods give"):
        side.compare(rep, samples, tokens)


def _rescored(picks, sums, n_tokens, n_chars, n_bytes):
    return {
        "items": [
            {
                "id": f"x-{i:03d}",
                "prediction": p,
                "choices": [
                    {"logprob": s, "n_tokens": t, "n_chars": c, "n_bytes": b}
                    for s, t, c, b in zip(sums[i], n_tokens[i], n_chars[i], n_bytes[i])
                ],
            }
            for i, p in enumerate(picks)
        ]
    }


def test_rescore_is_checked_against_lm_evals_choices_and_each_difference_explained():
    bench = bench_script("rescore_lm_eval")
    # item 0: per char -2/2 = -1.0 against -2.00002/2 = -1.00001: base-bench picks 0 by 1e-5; lm-eval's
    # log-likelihoods (-2.00003, -2.0) pick 1 by 1.5e-5: both leads are within the runs' log-prob
    # difference (3e-5), a near tie. Item 1: the same choice. Item 2: continuation 1 retokenized.
    sums = [[-2.0, -2.00002], [-1.0, -3.0], [-4.0, -1.0]]
    lengths = [[2, 2], [2, 4], [2, 2]]
    rescored = {r: _rescored([0, 0, 1], sums, lengths, lengths, lengths) for r in ("sum", "per_char", "per_byte")}
    side = {
        "comparison": {
            "items": [
                {"id": "x-000", "lm_eval_ll": [-2.00003, -2.0], "pred": dict.fromkeys(bench.PAIRS.values(), 1)},
                {"id": "x-001", "lm_eval_ll": [-1.0, -3.0], "pred": dict.fromkeys(bench.PAIRS.values(), 0)},
                {"id": "x-002", "lm_eval_ll": [-1.0, -2.0], "pred": dict.fromkeys(bench.PAIRS.values(), 0)},
            ],
            "tokenization": {"continuations_tokenized_differently": 1, "examples": ["x-002#1"]},
        }
    }
    a = bench.agreement(rescored, side)
    assert a["per_char"]["same"] == 1 and [d["id"] for d in a["per_char"]["differ"]] == ["x-000", "x-002"]
    near, retok = a["per_char"]["differ"]
    assert near["margin_base_bench"] == pytest.approx(1e-5) and near["margin_lm_eval"] == pytest.approx(1.5e-5)
    assert near["max_logprob_difference"] == pytest.approx(3e-5) and near["why"].startswith("a near tie")
    assert retok["why"].startswith("lm-eval tokenized") and (retok["base_bench_pick"], retok["lm_eval_pick"]) == (1, 0)
    assert a["per_char"]["closest_item"] == "x-000" and a["per_char"]["closest_margin"] == pytest.approx(1e-5)
    # a difference that rounding cannot explain is said to be one
    side["comparison"]["items"][0]["lm_eval_ll"] = [-1.0, -2.00002]
    assert bench.agreement(rescored, side)["sum"]["differ"][0]["why"] == "not explained by rounding or tokenization"


def test_ties_go_to_the_lowest_index_as_in_the_card():
    side = bench_script("lm_eval_side")
    assert side.argmax([-1.0, -0.5, -0.5, -2.0]) == 1 and side.argmax([0.0, 0.0]) == 0


def test_the_task_file_reads_the_record_format_as_it_is():
    side = bench_script("lm_eval_side")
    text = side.task_yaml(ROOT / "data" / "test.jsonl")
    lines = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line and not line.startswith(" "))
    assert lines["output_type"] == "multiple_choice" and lines["target_delimiter"] == '""'
    assert (lines["doc_to_text"], lines["doc_to_choice"], lines["doc_to_target"]) == (
        "context",
        "continuations",
        "label",
    )
    assert f"test: {str(ROOT / 'data' / 'test.jsonl')!r}".replace("'", '"') in text


def test_every_bench_script_imports():
    """Each script's imports still resolve (one moved helper broke bench/padding.py once, and its
    real run is minutes away from any test); imported in a process of their own, from the repo root."""
    names = sorted(p.stem for p in (ROOT / "bench").glob("*.py"))
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
    env_path = [str(ROOT), str(ROOT / "bench")]
    p = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path[:0] = {env_path!r}\n" + code, *names],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert {"padding", "speed", "exactness", "gpu_check", "served"} <= set(names)


# ---------------------------------------------------------------- what every script says, and bench/README.md


def script_docs() -> dict[str, str]:
    import ast

    scripts = sorted(p for p in (ROOT / "bench").glob("*.py") if p.stem != "benchlib")
    return {p.stem: ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or "" for p in scripts}


def results_headings() -> set[str]:
    lines = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8").splitlines()
    return {line.lstrip("#").strip() for line in lines if line.startswith("#")}


def named_tables(doc: str) -> list[str] | None:
    """The headings of bench/RESULTS.md a script's docstring says it writes (its paragraph opening
    `bench/RESULTS.md: `, the headings in double quotes); [] for `none.`, None without the paragraph."""
    import re

    at = doc.find("\nbench/RESULTS.md: ")
    if at < 0:
        return None
    para = doc[at + 1 :].split("\n\n")[0].replace("\n", " ")
    return [] if para.startswith("bench/RESULTS.md: none.") else re.findall(r'"([^"]+)"', para)


def test_every_script_says_what_it_measures_how_to_run_it_and_which_table_it_writes():
    headings, docs = results_headings(), script_docs()
    assert {"speed", "padding", "readme_runs", "gpu_check"} <= set(docs)
    for name, doc in docs.items():
        assert len(doc.splitlines()[0]) > 20, f"bench/{name}.py: no opening line saying what it measures"
        assert f"python bench/{name}.py" in doc, f"bench/{name}.py: its docstring does not say how to run it"
        tables = named_tables(doc)
        assert tables is not None, f"bench/{name}.py: no `bench/RESULTS.md: ` paragraph naming its table"
        assert set(tables) <= headings, f"bench/{name}.py names {set(tables) - headings}, not headings of RESULTS.md"
        assert tables or "none." in doc, name


def test_a_table_name_that_is_no_heading_is_caught():
    doc = 'Measures x.\n\n    python bench/x.py\n\nbench/RESULTS.md: "GGUF load time" and\n"Memory".\n\nMore.'
    assert named_tables(doc) == ["GGUF load time", "Memory"]
    assert "Memory" in results_headings() and "GGUF load time" not in results_headings()
    assert named_tables("Measures x.\n\nbench/RESULTS.md: none. docs/x.md holds it.") == []
    assert named_tables("Measures x, writes nothing said.") is None


def test_bench_readme_lists_every_script():
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    names = [p.name for p in (ROOT / "bench").glob("*.py")] + [p.name for p in (ROOT / "bench").glob("*.sh")]
    assert "speed.py" in names and "gpu_prepare.sh" in names
    missing = [n for n in names if f"`{n}`" not in text]
    assert not missing, f"bench/README.md does not list {missing}"
    assert "`gpu/`" in text


# ---------------------------------------------------------------- bench/benchlib.py, what the scripts share


def test_markdown_table_is_a_head_a_rule_and_a_line_a_row():
    lib = bench_script("benchlib")
    assert lib.markdown_table(["method", "seconds", "≠"], "lrr", [["loop", "1.0", 3], ["runner", 0.5, "n/a"]]) == [
        "| method | seconds | ≠ |",
        "|---|---:|---:|",
        "| loop | 1.0 | 3 |",
        "| runner | 0.5 | n/a |",
    ]
    assert lib.table_rule("rl") == "|---:|---|"
    with pytest.raises(ValueError, match="2 columns but 3"):
        lib.markdown_table(["a", "b"], "lrr", [])
    with pytest.raises(ValueError, match="l and r"):
        lib.table_rule("lc")


def test_timed_call_returns_the_result_and_its_seconds():
    lib = bench_script("benchlib")
    (result, seconds) = lib.timed_call(sorted, [3, 1, 2], reverse=True)
    assert result == [3, 2, 1] and isinstance(seconds, float) and seconds >= 0
    calls = []
    assert lib.timed(lambda: calls.append(1), repeat=3) >= 0 and len(calls) == 4  # one warm-up call, then 3


def test_child_json_reads_the_last_line_and_stops_on_a_failed_child():
    lib = bench_script("benchlib")
    ok = [sys.executable, "-c", "print('loading'); print('{\"tokens_per_s\": 12.5}')"]
    assert lib.child_json(ok, "pp") == {"tokens_per_s": 12.5}
    bad = [sys.executable, "-c", "import sys; sys.exit('no such kernel setting')"]
    with pytest.raises(SystemExit, match="pinned: no such kernel setting"):
        lib.child_json(bad, "pinned")


def test_the_machine_and_the_model_locations(monkeypatch):
    import socket

    lib = bench_script("benchlib")
    assert lib.cpu_name().strip() and (lib.memory_gib() is None or lib.memory_gib() > 0)
    port = lib.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free: nothing listens on it
    found = lib.smollm2_gguf()
    assert found is None or found.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert lib.smollm2_gguf() is None


# ---------------------------------------------------------------- bench/suite_times.py


@pytest.mark.parametrize(
    "tail, want",
    [
        ("..s.\n==== 1990 passed, 1 skipped in 4797.12s (1:19:57) ====\n", ({"passed": 1990, "skipped": 1}, 4797.12)),
        ("= 5 failed, 1991 passed, 1 skipped, 2 warnings in 12.50s =", ({"failed": 5, "passed": 1991, "skipped": 1, "warnings": 2}, 12.5)),
        ("== 3 passed in 1.00s ==\n== 1 error in 2.00s ==", ({"error": 1}, 2.0)),  # the last summary counts
        ("=== 2 passed in 0.02s ===\n...\n2 failed, 2002 passed in 2063.45s (0:34:23)\n", ({"failed": 2, "passed": 2002}, 2063.45)),
    ],
)  # fmt: skip
def test_suite_times_reads_pytests_summary(tail, want):
    assert bench_script("suite_times").parse(tail) == want


def test_suite_times_commands_and_ratio():
    st = bench_script("suite_times")
    assert st.command("fast", 1)[1:] == ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow"]
    assert st.command("full", 2)[-2:] == ["-n", "2"] and "not slow" not in st.command("full", 2)
    run = {"counts": {"passed": 10}, "load": [0.5, 1.5], "gemm_gflops": [100.0, 98.0], "returncode": 0}
    results = [
        run | {"tier": "full", "workers": 1, "wall_s": 300.0},
        run | {"tier": "full", "workers": 2, "wall_s": 200.0},
    ]
    assert st.ratios(results) == ["full: 1.50× as fast on 2 workers as on 1"]
    assert "| full | 2 | 10 passed | 200 s | 0.50 → 1.50 | 100 → 98 |" in st.rows(results)
    with pytest.raises(ValueError):
        st.parse("no summary")


# ---------------------------------------------------------------- bench/sweep.py


def _sweep_round(order, sweep_s, separate_s, lm_eval_s=None):
    stats = {
        "member_s": [9.0, 4.0, 5.0],
        "load_s": [3.0, 0.5, 0.5],
        "scoring_s": [4.0, 3.0, 3.5],
        "overhead_s": [2.0, 0.5, 1.0],
    }
    cmd = {"wall_s": 20.0, "load_s": 4.0, "scoring_s": 10.0}
    rnd = {
        "order": order,
        "sweep": {"wall_s": sweep_s, "stats": stats, "gemm_gflops": [100.0, 90.0], "load_average": [1.0, 1.5]}
        | {"others_cpu_share": 0.05},
        "separate": {"wall_s": separate_s, "runs": [cmd] * 3, "gemm_gflops": [90.0, 80.0], "load_average": [1.5, 2.0]},
        "pages_alone_s": [1.25, 0.5],
    }
    if lm_eval_s is not None:
        lm = {"wall_s": lm_eval_s, "runs": [{"wall_s": lm_eval_s / 3}] * 3, "gemm_gflops": [80.0, 70.0]}
        rnd["lm_eval"] = lm | {"load_average": [2.0, 2.5]}
    return rnd


def test_the_sweep_table_is_rendered_from_the_measurements():
    bench = bench_script("sweep")
    rounds = [
        _sweep_round(["sweep", "separate", "lm_eval"], 30.0, 60.0, 120.0),
        _sweep_round(["separate", "sweep"], 33.0, 55.0),
    ]
    s = bench.summary(rounds[0])
    assert s["sweep_over_separate"] == 0.5 and s["sweep_over_lm_eval"] == 0.25
    assert (s["overhead_s_median"], s["overhead_s_max"], s["overhead_s_max_after_first"]) == (1.0, 2.0, 1.0)
    assert s["outside_members_s"] == 12.0 and s["command_rest_s_median"] == 6.0 and s["lm_eval_run_s_median"] == 40.0
    assert s["gemm_gflops"] == [100.0, 90.0, 90.0, 80.0, 80.0, 70.0] and s["others_cpu_share"] == [0.05, None, None]
    lines = bench.table({"k": 3, "rounds": rounds})
    assert lines[0] == "| measure | round 1 | round 2 |" and lines[1] == "|---|---:|---:|"
    text = "\n".join(lines)
    assert "| order | sweep → separate → lm-eval | separate → sweep |" in text
    assert "| `base-bench sweep`, 3 checkpoints, 1 worker (s) | 30.0 | 33.0 |" in text
    assert "| 3 `lm-eval run` commands (s) | 120.0 | not run |" in text
    assert "| sweep / separate commands | 0.50 | 0.60 |" in text and "| sweep / lm-eval | 0.25 | not run |" in text
    assert "| sweep, per member: model load, median (first member) (s) | 0.5 (3.0) | 0.5 (3.0) |" in text
    assert "| sweep, per member: the rest (`overhead_s`), max (without the first member) (s) | 2.000 (1.000) |" in text
    assert "| the sweep's pages rendered alone: with imports / again (s) | 1.25 / 0.50 |" in text
    assert "| other processes' share of the cores during each measure, in order | 5% / ? / ? | ? / 5% |" in text
    assert (
        "| GEMM before → after each measure, in order (GFLOP/s) | 100 → 90 / 90 → 80 / 80 → 70 | 90 → 80 / 100 → 90 |"
        in text
    )


def test_the_sweep_breakdown_splits_the_rest_of_each_member():
    bench = bench_script("sweep")
    parts = {
        "member_s": [9.0, 4.0, 5.0],
        "load_s": [3.0, 0.5, 0.5],
        "scoring_s": [4.0, 3.0, 3.5],
        "overhead_s": [2.0, 0.5, 1.0],
        "packing_check_s": [1.5, 0.25, 0.75],
        "rest_s": [0.5, 0.25, 0.25],
    }
    text = "\n".join(bench.breakdown_table(parts))
    assert "| per member (s) | median | first member | max of the others |" in text
    assert "| the rest (`overhead_s`) | 1.000 | 2.000 | 1.000 |" in text
    assert (
        "| of which: the packing check (packed and plain path on 3 items; once a configuration) | 0.750 | 1.500 | 0.750 |"
        in text
    )


def test_the_sweep_tables_in_results_are_what_sweep_json_holds():
    bench = bench_script("sweep")
    res = json.loads((ROOT / "bench" / "sweep.json").read_text(encoding="utf-8"))
    results = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    assert "\n".join(bench.table(res)) in results
    assert "\n".join(bench.breakdown_table(res["breakdown"])) in results

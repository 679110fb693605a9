"""report.json's uncertainty keys, and their rendering in predictions.md and the terminal summary."""

import json
import time

import pytest

from base_bench.items.records import ChoiceScore, Item, ItemResult
from base_bench.results import elo, stats
from base_bench.results.report import build_report, dumps, render_markdown, summary_lines

from fixtures import records

CONFIG = {
    "model": {"spec": "tiny/test"},
    "device": "cpu",
    "dtype": "float32",
    "add_bos": False,
    "batch_size": 8,
    "scorer": "packed",
    "runner_version": "test",
}
DATA = {"description": "generated", "path": "data/test.jsonl", "sha256": "0" * 64}


def make_items():
    return [
        Item(
            id=r["id"],
            category=r["category"],
            difficulty=r["difficulty"],
            category_weight=r["category_weight"],
            difficulty_weight=r["difficulty_weight"],
            item_elo=float(r["item_elo"]),
            context=r["context"],
            continuations=tuple(r["continuations"]),
            label=r["label"],
            tags=tuple(r["tags"]),
        )
        for r in records()
    ]


def make_results(items):
    """Right on 3 of every 5 items, wrong (choice label+1) on the rest; fixed log-probs."""
    out = {}
    for n, it in enumerate(items):
        pred = it.label if n % 5 < 3 else (it.label + 1) % 4
        choices = tuple(ChoiceScore(-1.0 - (0 if k == pred else 1 + k), 4) for k in range(4))
        out[it.id] = ItemResult(it.id, choices, pred, it.label)
    return out


def make_report(items, **kw):
    return build_report(
        config=CONFIG, data=DATA, official=False, reasons=["test data"], items=items, results=make_results(items), **kw
    )


@pytest.fixture(scope="module")
def full():
    return make_report(make_items())


@pytest.fixture(scope="module")
def limited():
    items = make_items()
    return make_report(items[:8], n_items_in_data=len(items))


def test_every_block_has_the_new_keys(full):
    res = full["results"]
    for block in [res["overall"], *res["categories"].values()]:
        assert isinstance(block["elo_se"], float) and block["elo_se"] > 0
        lo, hi = block["elo_ci95"]
        assert lo < block["elo"] < hi
        lo, hi = block["raw_accuracy_ci95"]
        assert 0 <= lo < block["raw_accuracy"] < hi <= 1
    assert set(res["difficulties"]) == {"easy", "medium", "hard"}
    for d in res["difficulties"].values():
        lo, hi = d["raw_accuracy_ci95"]
        assert 0 <= lo < d["raw_accuracy"] < hi <= 1
    assert res["uncertainty"] == {
        "confidence": 0.95,
        "bootstrap_resamples": 1000,
        "bootstrap_seed": 1234,
        "bootstrap_scheme": "items resampled with replacement within each category",
        "accuracy_interval": "wilson",
        "n_items_scored": 350,
        "n_items_in_data": 350,
    }
    json.loads(dumps(full))  # plain JSON: lists, floats


def test_new_values_match_the_pure_functions(full):
    res = full["results"]
    o = res["overall"]
    rows = [(it["item_elo"], it["point_weight"], 1.0 if it["correct"] else 0.0) for it in full["items"]]
    assert o["elo_se"] == pytest.approx(elo.elo_standard_error(o["elo"], rows))
    assert o["raw_accuracy_ci95"] == pytest.approx(list(stats.wilson_interval(o["n_correct"], o["n"])))
    boot = stats.bootstrap_intervals(
        [r[0] for r in rows],
        [r[1] for r in rows],
        [r[2] for r in rows],
        [it["category"] for it in full["items"]],
        resamples=1000,
        seed=1234,
    )
    assert o["elo_ci95"] == boot["overall"]["elo_ci95"]
    assert res["categories"]["quantitative"]["elo_ci95"] == boot["strata"]["quantitative"]["elo_ci95"]
    for it in full["items"]:
        assert it["expected_p"] == pytest.approx(elo.expected(o["elo"], it["item_elo"]))


def test_report_is_deterministic_and_seed_is_recorded():
    items = make_items()
    assert make_report(items)["results"] == make_report(items)["results"]
    other = make_report(items, bootstrap_seed=7, bootstrap_resamples=1200)
    assert other["results"]["uncertainty"]["bootstrap_seed"] == 7
    assert other["results"]["uncertainty"]["bootstrap_resamples"] == 1200
    assert other["results"]["overall"]["elo_ci95"] != make_report(items)["results"]["overall"]["elo_ci95"]


def test_full_report_builds_well_under_two_seconds():
    items = make_items()
    results = make_results(items)
    t = time.perf_counter()
    build_report(config=CONFIG, data=DATA, official=False, reasons=[], items=items, results=results)
    assert time.perf_counter() - t < 2.0


def test_limited_report_records_and_says_scope(limited, full):
    u = limited["results"]["uncertainty"]
    assert u["n_items_scored"] == 8 < u["n_items_in_data"] == 350
    assert "intervals computed on 8 of 350 items" in render_markdown(limited)
    assert any("intervals computed on 8 of 350 items" in line for line in summary_lines(limited))
    assert "intervals computed on" not in render_markdown(full)
    assert not any("intervals computed on" in line for line in summary_lines(full))


def test_n_items_in_data_defaults_to_items(limited):
    rep = make_report(make_items()[:8])
    assert rep["results"]["uncertainty"]["n_items_in_data"] == 8


def test_markdown_shows_intervals(full):
    md = render_markdown(full)
    o = full["results"]["overall"]
    lo, hi = o["elo_ci95"]
    assert f"## Overall Elo {o['elo']:.1f} ± {o['elo_se']:.1f} (95% CI {lo:.1f}–{hi:.1f})" in md
    assert "seed 1234" in md and "Wilson" in md
    qa = full["results"]["categories"]["quantitative"]
    assert f"| quantitative | 50 | {qa['n_correct']} |" in md
    assert f"{qa['elo']:.1f} ± {qa['elo_se']:.1f} | {qa['elo_ci95'][0]:.1f}–{qa['elo_ci95'][1]:.1f} |" in md
    alo, ahi = qa["raw_accuracy_ci95"]
    assert f"(95% CI {100 * alo:.1f}%–{100 * ahi:.1f}%)" in md
    for d in full["results"]["difficulties"].values():
        assert f"{100 * d['raw_accuracy_ci95'][0]:.1f}%–{100 * d['raw_accuracy_ci95'][1]:.1f}%" in md
    assert md.count("\n| language_completion-") == 50  # item table only, misses use a rank column


def test_summary_lines_show_intervals(full):
    lines = summary_lines(full)
    o = full["results"]["overall"]
    lo, hi = o["elo_ci95"]
    assert lines[0].startswith(f"Overall Elo {o['elo']:.0f} ± {o['elo_se']:.0f} (95% CI {lo:.0f}–{hi:.0f})")
    for cat, c in full["results"]["categories"].items():
        lo, hi = c["elo_ci95"]
        want = f"  {cat:<20} Elo {c['elo']:.0f} ± {c['elo_se']:.0f} (95% CI {lo:.0f}–{hi:.0f})"
        assert sum(line.startswith(want) for line in lines) == 1
    assert "seed 1234" in "\n".join(lines)


def test_most_surprising_misses_sorted_by_expected_p(full):
    md = render_markdown(full)
    section = md.split("## Most surprising misses")[1].split("## Items")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 10
    misses = sorted((it for it in full["items"] if not it["correct"]), key=lambda it: -it["expected_p"])[:10]
    for rank, (line, it) in enumerate(zip(rows, misses), 1):
        assert line.startswith(f"| {rank} | {it['id']} | {it['category']} | {it['difficulty']} |")
        assert f"| {it['expected_p']:.2f} |" in line
    ps = [float(line.split("|")[6]) for line in rows]
    assert ps == sorted(ps, reverse=True)


def test_no_misses_says_so():
    items = make_items()[:5]
    results = {
        it.id: ItemResult(it.id, tuple(ChoiceScore(-1.0 - (k != it.label), 2) for k in range(4)), it.label, it.label)
        for it in items
    }
    rep = build_report(config=CONFIG, data=DATA, official=False, reasons=["x"], items=items, results=results)
    assert "No misses." in render_markdown(rep)


def test_item_table_has_expected_p(full):
    md = render_markdown(full)
    assert "| id | difficulty | item Elo | expected p |" in md
    it = full["items"][0]
    assert f"| {it['id']} | {it['difficulty']} | {it['item_elo']:g} | {it['expected_p']:.2f} |" in md


def test_renderers_read_only_the_report(full):
    # a report that went through JSON renders the same: nothing is recomputed from live objects
    again = json.loads(dumps(full))
    assert render_markdown(again) == render_markdown(full)
    assert summary_lines(again) == summary_lines(full)

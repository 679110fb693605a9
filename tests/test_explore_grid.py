"""The item × step grid of `base-bench explore` without a browser: learned at and forgotten on
hand-worked outcomes, the cell codes, the sorts, the grid's data against the reports (for runs with
a training step, none without), --redact, and a training run read back from a results store.
tests/test_browser.py draws it in Chromium."""

import base64
import hashlib
import html
import json
import re

import pytest
from explorerun import checkpoint_reports, scored_report, write_scored

from base_bench import explore
from base_bench.commands.cli import main
from base_bench.commands.store import main as store_main
from base_bench.items.datasource import open_data
from base_bench.results.explore import build_page, render_html
from base_bench.results.explore_assets import LIST_RUNS, SCRIPT
from base_bench.results.steps_grid import build_grid, cell_code, forgotten, learned_at, sort_rows, stepped_runs

T, F, N = True, False, None


def page_data(text: str) -> dict:
    m = re.search(r'<script type="application/json" id="bb-data">(.*?)</script>', text, re.S)
    return json.loads(m.group(1))


@pytest.mark.parametrize(
    "outcomes, learned, forgot",
    [
        ([F, T, F, T, T], 3, 1),  # right at 1, lost at 2, right from 3 to the end
        ([T, T, T], 0, 0),
        ([F, F], None, 0),
        ([], None, 0),
        ([T], 0, 0),
        ([F], None, 0),
        ([T, F], None, 1),  # right, then wrong at the last: forgotten, never learned for good
        ([F, T], 1, 0),
        ([T, F, T, F], None, 2),
        ([T, F, T, F, T], 4, 2),
        ([T, T, F, F, T, T], 4, 1),
        ([F, F, F, T, T, T], 3, 0),
        ([T, T, T, T, F], None, 1),
        # a checkpoint that did not score the item (None) is skipped
        ([N, T, T], 1, 0),
        ([F, N, T], 2, 0),
        ([F, T, N], 1, 0),
        ([T, N, F], None, 1),
        ([T, N, F, N, T], 4, 1),
        ([N, N], None, 0),
        ([N, F, N], None, 0),
    ],
)
def test_learned_at_and_forgotten(outcomes, learned, forgot):
    assert learned_at(outcomes) == learned
    assert forgotten(outcomes) == forgot


@pytest.mark.parametrize(
    "correct, margin, code",
    [
        (None, None, "0"),
        (True, 0.0, "1"),
        (True, 0.0999, "1"),
        (True, 0.1, "2"),
        (True, 0.29, "2"),
        (True, 0.3, "3"),
        (True, 0.99, "3"),
        (True, 1.0, "4"),
        (True, 7.5, "4"),
        (False, 0.0, "5"),
        (False, 0.2, "6"),
        (False, 0.5, "7"),
        (False, 3.0, "8"),
        (True, None, "9"),
        (False, None, "9"),
    ],
)
def test_cell_codes(correct, margin, code):
    assert cell_code(correct, margin) == code


def test_sorts_put_the_earliest_learned_and_the_most_forgotten_first():
    grid = {
        "steps": [10, 20, 30],
        "cells": ["", "", "", "", ""],
        "learned": [2, None, 0, 2, None],
        "forgotten": [0, 3, 1, 1, 0],
    }
    assert sort_rows(grid, "learned") == [2, 0, 3, 1, 4]  # never learned last; ties in file order
    assert sort_rows(grid, "forgotten") == [1, 2, 3, 0, 4]
    assert sort_rows(grid, "learned", rows=[4, 3, 1]) == [3, 1, 4]
    with pytest.raises(ValueError, match="learned, forgotten"):
        sort_rows(grid, "margin")


def test_stepped_runs_are_in_step_order():
    reps = [
        {"training_step": 300},
        {},
        {"training_step": 100, "tokens_seen": 9},
        {"training_step": 100, "tokens_seen": 5},
        {"training_step": None},
        {"training_step": 0},
    ]
    assert stepped_runs(reps) == ([5, 3, 2, 0], [1, 4])


def test_build_grid_on_hand_made_runs():
    """Two checkpoints given last step first, of two groups, and a run without a step; three items."""
    reports = [{"training_step": 20, "group": "b"}, {"group": "a"}, {"training_step": 10, "group": "a"}]
    runs = [
        {"correct": [False, True, None], "margin": [0.05, 2.0, None]},
        {"correct": [True, True, True], "margin": [1.0, 1.0, 1.0]},
        {"correct": [True, True, False], "margin": [0.5, None, 0.2]},
    ]
    grid = build_grid(reports, runs)
    assert grid["cols"] == [2, 0] and grid["steps"] == [10, 20] and grid["left_out"] == [1]
    assert grid["cells"] == ["35", "94", "60"]
    assert grid["learned"] == [None, 0, None] and grid["forgotten"] == [1, 0, 0]
    assert grid["groups"] == ["a", "b"] and grid["margin_edges"] == [0.1, 0.3, 1.0]
    assert build_grid(reports[:2], runs[:2]) is None  # one checkpoint: no grid


# ---------------------------------------------------------------- the page's grid


@pytest.fixture(scope="module")
def bundled():
    return open_data("bundled")


OUTCOMES_ROWS = {  # item row -> right or wrong at the four steps (in step order)
    0: [F, T, F, T],
    1: [T, T, T, T],
    2: [F, F, F, F],
    3: [T, F, T, F],
    4: [F, F, T, T],
}
STEPS = [0, 500, 1000, 2000]


@pytest.fixture(scope="module")
def checkpoints(bundled):
    """Four checkpoints of one training run, given out of step order, the first five items right
    and wrong as OUTCOMES_ROWS says; and a run of another model without a step."""
    ids = [it.id for it in bundled.dataset.items]
    reps = checkpoint_reports(bundled, STEPS, {ids[r]: o for r, o in OUTCOMES_ROWS.items()}, seed=3)
    other = scored_report(bundled, 99, "org/other", resamples=10)
    return [reps[2], reps[0], other, reps[3], reps[1]]


def test_the_grid_follows_the_reports(bundled, checkpoints):
    page = build_page(checkpoints, bundled.dataset.items, bundled.record)
    grid = page["grid"]
    assert grid["cols"] == [1, 4, 0, 3] and grid["steps"] == STEPS and grid["left_out"] == [2]
    assert grid["groups"] == ["pretrain"]
    ordered = [checkpoints[k] for k in grid["cols"]]
    by = [{it["id"]: it for it in rep["items"]} for rep in ordered]
    for row, item_id in enumerate(page["items"]["id"]):
        outcomes = [b[item_id]["correct"] for b in by]
        if row in OUTCOMES_ROWS:
            assert outcomes == OUTCOMES_ROWS[row]
        assert grid["learned"][row] == learned_at(outcomes)
        assert grid["forgotten"][row] == forgotten(outcomes)
        for k, b in enumerate(by):
            it = b[item_id]
            means = [c["mean_logprob"] for c in it["choices"]]
            m = means[it["prediction"]] - max(x for j, x in enumerate(means) if j != it["prediction"])
            assert grid["cells"][row][k] == cell_code(it["correct"], m)
    assert grid["learned"][:5] == [3, 0, None, None, 2]
    assert grid["forgotten"][:5] == [1, 0, 0, 2, 0]
    assert sort_rows(grid, "learned")[0] == 1  # learned at step 0, the first such row
    assert len(set("".join(grid["cells"]))) > 4  # right and wrong, in several shades


def test_no_grid_without_two_stepped_runs(bundled, checkpoints):
    unstepped = [scored_report(bundled, k, f"org/m{k}", limit=30, resamples=10) for k in range(3)]
    for reps in (unstepped, [checkpoints[0], *unstepped]):
        page = build_page(reps, bundled.dataset.items, bundled.record)
        assert page["grid"] is None
        text = render_html(page, ["CANARY"])
        assert 'id="grid"' not in text and '"grid":null' in text
    page = build_page(checkpoints, bundled.dataset.items, bundled.record)
    text = render_html(page, ["CANARY"])
    assert '<section id="grid"' in text and page_data(text)["grid"] == page["grid"]
    assert build_grid(checkpoints[:2], page["runs"][:2])["cols"] == [1, 0]


def test_a_redacted_grid_has_no_item_text(bundled, checkpoints, tmp_path, capsys):
    runs = [write_scored(tmp_path / f"c{k}", rep) for k, rep in enumerate(checkpoints)]
    assert main(["explore", *map(str, runs), "--out-dir", str(tmp_path / "out"), "--redact"]) == 0
    capsys.readouterr()
    text = (tmp_path / "out" / "explore.html").read_text()
    d = page_data(text)
    assert d["redacted"] and not {"context", "continuations", "tags"} & set(d["items"])
    assert d["grid"]["steps"] == STEPS and len(d["grid"]["cells"]) == 350
    plain = html.unescape(text)
    for it in bundled.dataset.items:
        assert it.context not in plain and json.dumps(it.context)[1:-1] not in text
        for c in it.continuations:
            if len(c.strip()) >= 12:
                assert c not in plain and json.dumps(c)[1:-1] not in text, (it.id, c)
    assert "noindex, noarchive" in text and '<section id="grid"' in text


def test_a_stored_training_run(bundled, checkpoints, tmp_path, capsys, monkeypatch):
    """`explore --store URL --group G`: the group's checkpoints in step order; a run of the group
    without a step is left out of the grid and named in the page's data."""
    monkeypatch.delenv("BASE_BENCH_STORE", raising=False)
    no_step = scored_report(bundled, 77, "org/pretrain-final", resamples=10)
    no_step["group"] = "pretrain"
    folders = [write_scored(tmp_path / f"c{k}", rep) for k, rep in enumerate([*checkpoints, no_step])]
    url = f"sqlite:///{tmp_path}/store.db"
    assert store_main(["ingest", *map(str, folders), "--store", url, "--jobs", "1"]) == 0
    capsys.readouterr()
    assert main(["explore", "--store", url, "--group", "pretrain", "--out-dir", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    d = page_data((tmp_path / "out" / "explore.html").read_text())
    assert [r["name"] for r in d["runs"]] == [*(f"pretrain step {s}" for s in STEPS), "org/pretrain-final"]
    assert d["grid"]["cols"] == [0, 1, 2, 3] and d["grid"]["left_out"] == [4]
    assert d["grid"]["learned"][:5] == [3, 0, None, None, 2]


def test_explore_of_report_dicts_has_the_grid(bundled, checkpoints, tmp_path):
    path = explore(checkpoints, tmp_path / "out")
    assert page_data(path.read_text())["grid"]["forgotten"][:5] == [1, 0, 0, 2, 0]


def test_the_policy_allows_the_script_that_draws_the_grid(bundled, checkpoints):
    """The page's Content-Security-Policy names the hash of the inline script as the page holds it
    (the grid's drawing included), and the script's LIST_RUNS is the one render_html folds by."""
    text = render_html(build_page(checkpoints, bundled.dataset.items, bundled.record), ["CANARY"])
    script = re.findall(r"<script>(.*?)</script>", text, re.S)
    assert script == [SCRIPT] and 'getContext("2d")' in SCRIPT
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii")
    csp = html.unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', text)[1])
    assert f"script-src 'sha256-{digest}';" in csp and "img-src 'none'" in csp and "connect-src 'none'" in csp
    assert f"var LIST_RUNS = {LIST_RUNS}," in SCRIPT

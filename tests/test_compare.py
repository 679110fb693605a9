"""`base-bench compare` on small hand-made reports (no model is loaded).

`make_report` / `write_run` build report.json files in the runner's format from a list of
right/wrong outcomes; test_leaderboard.py uses them too.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from base_bench.commands.cli import main
from base_bench.commands.compare import build_comparison, load_report, render_markdown, summary_lines, verdict
from base_bench.items import card
from base_bench.results import elo
from base_bench.results.checked import SHA256, data_kind

ROOT = Path(__file__).resolve().parents[1]
SHA = card.OFFICIAL_SHA256  # the card's data: a report may then be official (make_report's official=True)
OTHER_SHA = "6" * 64
DIFFS = ("easy", "medium", "hard")


def item_meta(per_category: int = 50) -> list[dict]:
    """Items in the card's categories, difficulties cycling easy/medium/hard."""
    out = []
    for cat in card.CATEGORIES:
        for n in range(per_category):
            d = DIFFS[n % 3]
            out.append(
                {
                    "id": f"{cat}-{n + 1:03d}",
                    "category": cat,
                    "difficulty": d,
                    "item_elo": float(card.item_elo(cat, d)),
                    "point_weight": card.category_weight(cat) * card.DIFFICULTY_WEIGHTS[d],
                    "label": n % 4,
                }
            )
    return out


def make_report(
    correct,
    *,
    sha=SHA,
    spec="org/model-a",
    dtype="float32",
    add_bos=False,
    official=False,
    per_category=50,
    ids=None,
    ci=False,
    tag="x",
) -> dict:
    """A report.json dict, consistent with itself as the checked reading requires: `correct` is one
    bool per item (or a set of correct ids); each item's choices score its prediction highest."""
    meta = item_meta(per_category)
    if ids is not None:
        meta = [m for m in meta if m["id"] in ids]
    if isinstance(correct, (set, frozenset)):
        correct = [m["id"] in correct for m in meta]
    items = []
    for m, ok in zip(meta, correct):
        pred = m["label"] if ok else (m["label"] + 1) % 4
        lps = [-0.5 if k == pred else -1.0 - k for k in range(4)]
        choices = [{"logprob": lp, "n_tokens": 1, "mean_logprob": lp} for lp in lps]
        items.append(
            dict(
                m,
                correct=bool(ok),
                prediction=pred,
                truncated=False,
                tags=[],
                choices=choices,
                selected_text=f" {tag} choice {pred}",
                label_text=f" right answer {m['label']}",
                expected_p=0.5,
            )
        )
    results = elo.summarize(
        [(i["category"], i["difficulty"], i["item_elo"], i["point_weight"], i["correct"]) for i in items]
    )
    for it in items:
        it["expected_p"] = elo.expected(results["overall"]["elo"], it["item_elo"])
    if ci:
        blocks = [
            (results["overall"], items),
            *((b, [i for i in items if i["category"] == c]) for c, b in results["categories"].items()),
        ]
        for b, sub in blocks:
            b["elo_se"] = elo.elo_standard_error(
                b["elo"], [(i["item_elo"], i["point_weight"], float(i["correct"])) for i in sub]
            )
            b["elo_ci95"] = [b["elo"] - 55.0, b["elo"] + 65.0]
    return {
        "benchmark": f"BananaMind Base Bench {card.VERSION}",
        "config": {
            "model": {"spec": spec},
            "dtype": dtype,
            "add_bos": add_bos,
            "device": "cpu",
            "scoring_version": "mean_logprob/1",
        },
        "data": {
            "sha256": sha,
            "description": "test data",
            "kind": data_kind(sha) if SHA256.fullmatch(sha) else "modified",
        },
        "official": official,
        "non_official_reasons": [] if official else ["test data"],
        "results": results,
        "items": items,
        "timing": {},
    }


def write_run(root: Path, name: str, report: dict) -> Path:
    d = Path(root) / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "report.json").write_text(json.dumps(report), encoding="utf-8")
    return d


def ids_where(pred) -> set:
    return {m["id"] for i, m in enumerate(item_meta()) if pred(i)}


A_RIGHT = ids_where(lambda i: i % 2 == 0)  # 175 right
B_RIGHT = (A_RIGHT - {"commonsense-001", "quantitative-003"}) | {
    "language_completion-002",
    "code_completion-050",
    "logical_reasoning-010",
}


@pytest.fixture
def pair(tmp_path):
    a = write_run(tmp_path, "a", make_report(A_RIGHT, spec="org/model-a", tag="a"))
    b = write_run(tmp_path, "b", make_report(B_RIGHT, spec="org/model-b", tag="b"))
    return a, b


def run_cli(*args):
    return main(["compare", *map(str, args)])


def test_compare_writes_json_and_markdown_with_flips(pair, tmp_path, capsys):
    a, b = pair
    js, md = tmp_path / "out" / "cmp.json", tmp_path / "cmp.md"
    assert run_cli(a, b, "--json", js, "--markdown", md, "--resamples", 300, "--seed", 7) == 0
    out = capsys.readouterr().out
    cmp = json.loads(js.read_text())
    for key in (
        "a",
        "b",
        "data_sha256",
        "n_items",
        "bootstrap",
        "overall",
        "mcnemar",
        "categories",
        "flipped",
        "verdict",
        "settings_notes",
    ):
        assert key in cmp
    assert cmp["bootstrap"]["resamples"] == 300 and cmp["bootstrap"]["seed"] == 7
    assert cmp["n_items"] == 350 and cmp["data_sha256"] == SHA
    assert [f["id"] for f in cmp["flipped"]["a_right_b_wrong"]] == ["commonsense-001", "quantitative-003"]
    assert [f["id"] for f in cmp["flipped"]["a_wrong_b_right"]] == [
        "language_completion-002",
        "logical_reasoning-010",
        "code_completion-050",
    ]
    flip = cmp["flipped"]["a_right_b_wrong"][0]
    assert flip["category"] == "commonsense" and flip["difficulty"] == "easy"
    assert flip["selected_a"] == " a choice 0" and flip["selected_b"] == " b choice 1"
    assert flip["correct"] == " right answer 0"
    assert cmp["mcnemar"]["a_right_b_wrong"] == 2 and cmp["mcnemar"]["a_wrong_b_right"] == 3
    assert cmp["mcnemar"]["p"] == pytest.approx(1.0)
    o = cmp["overall"]
    assert o["elo_a"] == pytest.approx(make_report(A_RIGHT)["results"]["overall"]["elo"], abs=1e-6)
    assert o["elo_b"] == pytest.approx(make_report(B_RIGHT)["results"]["overall"]["elo"], abs=1e-6)
    assert o["diff"] == pytest.approx(o["elo_b"] - o["elo_a"])
    assert o["ci95"][0] <= 0 <= o["ci95"][1]
    assert set(cmp["categories"]) == set(card.CATEGORIES)
    cs = cmp["categories"]["commonsense"]
    assert cs["a_right_b_wrong"] == 1 and cs["a_wrong_b_right"] == 0 and cs["diff"] < 0
    for key in ("elo_a", "elo_b", "diff", "ci95", "raw_accuracy_a", "raw_accuracy_b", "n"):
        assert key in cs
    assert cmp["categories"]["world_knowledge"]["ci95"] == [0.0, 0.0]  # no flips there: identical draws
    assert cmp["verdict"]["level"] == "not decisive" and "not decisive on 350 items" in cmp["verdict"]["text"]
    # the markdown is a pure rendering of the JSON dict
    text = md.read_text()
    assert text == render_markdown(cmp)
    assert cmp["verdict"]["text"] in text and "quantitative-003" in text and "code_completion-050" in text
    assert "Verdict: " + cmp["verdict"]["text"] in out and "commonsense-001" in out


def test_same_seed_same_numbers_other_seed_other_interval(pair):
    a, b = (load_report(p) for p in pair)
    one = build_comparison(a, b, resamples=200, seed=1)
    assert build_comparison(a, b, resamples=200, seed=1) == one
    assert build_comparison(a, b, resamples=200, seed=2)["overall"]["ci95"] != one["overall"]["ci95"]


def test_identical_runs_give_zero_width_interval(tmp_path):
    rep = make_report(A_RIGHT)
    cmp = build_comparison(
        load_report(write_run(tmp_path, "a", rep)), load_report(write_run(tmp_path, "b", rep)), resamples=100, seed=3
    )
    assert cmp["overall"]["diff"] == 0 and cmp["overall"]["ci95"] == [0.0, 0.0]
    assert cmp["mcnemar"]["discordant"] == 0 and cmp["mcnemar"]["p"] == 1.0
    assert cmp["flipped"] == {"a_right_b_wrong": [], "a_wrong_b_right": []}
    assert cmp["verdict"]["level"] == "not decisive" and cmp["verdict"]["text"].startswith("A and B have the same")


def test_large_difference_is_decisive(tmp_path):
    a = write_run(tmp_path, "a", make_report(ids_where(lambda i: i % 3 == 0)))
    b = write_run(tmp_path, "b", make_report(ids_where(lambda i: i % 3 != 2)))
    cmp = build_comparison(load_report(a), load_report(b), resamples=300, seed=1)
    assert cmp["overall"]["ci95"][0] > 0 and cmp["mcnemar"]["p"] < 1e-6
    assert cmp["verdict"]["decisive"] and cmp["verdict"]["text"].startswith("B is higher by")
    assert "so this difference is decisive on 350 items" in cmp["verdict"]["text"]
    rev = build_comparison(load_report(b), load_report(a), resamples=300, seed=1)
    assert rev["verdict"]["text"].startswith("A is higher by") and rev["verdict"]["decisive"]


def test_verdict_wording():
    t = verdict(23.2, [-12.4, 58.3], 0.41, 350)
    assert t["text"] == (
        "B is higher by 23 Elo (B − A = 23.2, 95% CI −12 to 58); the interval includes 0 and McNemar p = 0.41, "
        "so this difference is not decisive on 350 items."
    )
    # A higher: the interval is still that of B − A, as in the table above the verdict, not turned round
    assert verdict(-30, [-60, -5], 0.01, 350)["text"].startswith(
        "A is higher by 30 Elo (B − A = −30.0, 95% CI −60 to −5)"
    )
    assert verdict(30, [5, 60], 0.2, 350)["level"] == "borderline"
    assert verdict(30, [-5, 60], 0.02, 350)["level"] == "borderline"


@pytest.mark.parametrize("flip", [False, True])
def test_verdict_states_the_interval_of_b_minus_a_as_the_table_does(tmp_path, flip):
    """Every interval the command prints, in the summary, the category table and the verdict, is
    one of B − A: the verdict quotes the overall line's difference and interval as they stand."""
    a = write_run(tmp_path, "a", make_report(ids_where(lambda i: i % 3 == 0)))
    b = write_run(tmp_path, "b", make_report(ids_where(lambda i: i % 3 != 2)))
    cmp = build_comparison(*(load_report(p) for p in ((b, a) if flip else (a, b))), resamples=200, seed=1)
    lo, hi = cmp["overall"]["ci95"]
    assert (cmp["overall"]["diff"] < 0) == flip
    overall = next(line for line in summary_lines(cmp) if line.startswith("Overall Elo"))
    m = re.search(r"B − A (\S+)  95% CI \[(\S+), (\S+)\]", overall)
    stated = re.search(r"\(B − A = (\S+), 95% CI (\S+) to (\S+)\)", cmp["verdict"]["text"])
    assert m and stated, (overall, cmp["verdict"]["text"])
    assert stated.groups() == m.groups()
    assert float(stated.group(2).replace("−", "-")) == pytest.approx(lo, abs=0.5)
    assert float(stated.group(3).replace("−", "-")) == pytest.approx(hi, abs=0.5)
    assert "B − A" in render_markdown(cmp).split("## Overall")[1].splitlines()[2]


def snapshot(*paths):
    return {str(p): p.read_bytes() for p in paths if p.exists()}


@pytest.mark.parametrize("case", ["sha", "items", "missing", "bad_json", "not_report"])
def test_refusals_exit_2_with_one_line_and_leave_files(tmp_path, capsys, case):
    a = write_run(tmp_path, "a", make_report(A_RIGHT))
    if case == "sha":
        b = write_run(tmp_path, "b", make_report(A_RIGHT, sha=OTHER_SHA))
        fragment = "different data"
    elif case == "items":
        first8 = {m["id"] for m in item_meta()[:8]}
        b = write_run(tmp_path, "b", make_report([True] * 8, ids=first8))
        fragment = "different items (A has 350, B has 8"
    elif case == "missing":
        b = tmp_path / "nothing"
        fragment = "no such run directory or file"
    elif case == "bad_json":
        b = tmp_path / "b"
        b.mkdir()
        (b / "report.json").write_text("{not json")
        fragment = "not valid JSON"
    else:
        b = write_run(tmp_path, "b", {"data": {"sha256": SHA}, "items": []})
        fragment = "not a usable base-bench report (no items)"
    js, md = tmp_path / "cmp.json", tmp_path / "cmp.md"
    js.write_text("old json")
    before = snapshot(js, md, a / "report.json", Path(b) / "report.json")
    assert run_cli(a, b, "--json", js, "--markdown", md, "--force") == 2
    err = capsys.readouterr().err
    assert err.startswith("base-bench: error: ") and fragment in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert snapshot(js, md, a / "report.json", Path(b) / "report.json") == before
    assert not md.exists()


def test_existing_output_needs_force(pair, tmp_path, capsys):
    a, b = pair
    js = tmp_path / "cmp.json"
    js.write_text("keep me")
    assert run_cli(a, b, "--json", js, "--resamples", 50) == 2
    err = capsys.readouterr().err
    assert "already exists; add --force" in err and js.read_text() == "keep me"
    assert run_cli(a, b, "--json", js, "--resamples", 50, "--force") == 0
    assert json.loads(js.read_text())["bootstrap"]["resamples"] == 50


def test_report_json_path_accepted_and_settings_noted(tmp_path):
    a = write_run(tmp_path, "a", make_report(A_RIGHT, dtype="float32"))
    b = write_run(tmp_path, "b", make_report(B_RIGHT, dtype="bfloat16", add_bos=True))
    cmp = build_comparison(load_report(a / "report.json"), load_report(b), resamples=20, seed=0)
    assert any("dtype differs" in n for n in cmp["settings_notes"])
    assert any("add_bos differs" in n for n in cmp["settings_notes"])


def test_benchmark_py_compare(pair, tmp_path):
    a, b = pair
    js = tmp_path / "c.json"
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmark.py"),
            "compare",
            str(a),
            str(b),
            "--json",
            str(js),
            "--resamples",
            "100",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "Verdict:" in out.stdout and json.loads(js.read_text())["n_items"] == 350
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmark.py"), "compare", str(a), str(tmp_path / "no")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and out.stderr.startswith("base-bench: error:") and "Traceback" not in out.stderr


def test_help_names_the_subcommands_and_each_has_its_own(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "base-bench compare RUN_A RUN_B" in out and "base-bench leaderboard RUN_DIR..." in out
    assert "base-bench explore RUN_DIR..." in out
    for sub, words in (
        ("compare", ["RUN_A", "RUN_B", "--json", "--markdown", "--resamples", "--seed", "--force"]),
        ("leaderboard", ["RUN_DIR", "--out", "--strict", "--force"]),
        ("explore", ["RUN_DIR", "--out-dir", "--data", "--redact", "--force", "publish"]),
    ):
        with pytest.raises(SystemExit) as exit_:
            main([sub, "--help"])
        assert exit_.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: base-bench {sub}") and all(w in out for w in words)


def _scored(pid, pred, logprobs):
    return {"id": pid, "prediction": pred, "choices": [{"logprob": x, "n_tokens": 1} for x in logprobs]}


@pytest.mark.parametrize(
    "pairs, median, top, where, differ",
    [
        # one item, choices apart by 0, 0.5, 1, 2: median 0.75, max 2 (hand-computed)
        ([(_scored("x", 0, [-1, -2, -3, -4]), _scored("x", 0, [-1, -2.5, -2, -6]))], 0.75, 2.0, "x", []),
        # two items; the second's pick moved; its choice 1 is the farthest (1.5)
        (
            [
                (_scored("x", 0, [-1, -2]), _scored("x", 0, [-1.25, -2])),
                (_scored("y", 0, [-1, -2]), _scored("y", 1, [-1.5, -0.5])),
            ],
            0.375,
            1.5,
            "y",
            ["y"],
        ),
    ],
)
def test_score_agreement_per_choice(pairs, median, top, where, differ):
    from base_bench.commands.compare import score_agreement

    got = score_agreement(pairs)
    assert got["median_abs_logprob_diff"] == pytest.approx(median)
    assert got["max_abs_logprob_diff"] == pytest.approx(top) and got["max_item"] == where
    assert got["items_predicted_differently"] == differ and got["predictions_differ"] == len(differ)


def test_compare_shows_score_agreement_and_backend(tmp_path, capsys):
    a = make_report(A_RIGHT, tag="a")
    b = make_report(A_RIGHT, tag="b")
    b["config"]["backend"] = "llama.cpp"
    b["config"]["dtype"] = "Q4_1"
    for it in b["items"]:
        c = it["choices"][0]
        c["logprob"] -= 0.25  # below the chosen choice's -0.5 still, whichever it is
        c["mean_logprob"] = c["logprob"] / c["n_tokens"]
    ra, rb = write_run(tmp_path, "a", a), write_run(tmp_path, "b", b)
    assert run_cli(ra, rb, "--markdown", tmp_path / "c.md") == 0
    out = capsys.readouterr().out
    assert "backend differs: A transformers, B llama.cpp" in out
    assert "per-choice |log-prob B − A| median 0, max 0.25 nats" in out and "differs on 0 of 350 items" in out
    assert "per-choice |log-prob B − A| median 0, max 0.25 nats" in (tmp_path / "c.md").read_text()

"""base-bench rescore: the rules (hand-computed), Kendall's tau-b (hand-computed, with ties), the
rescored reports (mean gives back the run; other rules never official), the checked reading of
them, refusals, the out-dir, and the readers (compare, leaderboard, explore) on rescored reports."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from explorerun import scored_report, write_scored

from base_bench.commands.cli import main
from base_bench.errors import ReportError, UsageError
from base_bench.items.datasource import open_data
from base_bench.results import checked, ranking, rescoring, rules
from base_bench.results.rules import Choice

ROOT = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------- the rules, by hand

# A: -6 over 3 tokens, " ab" (3 chars, 3 bytes); B: -4 in 1 token, " é" (2 chars, 3 bytes: é is 2);
# C: -10 over 5 tokens, " abcd" (5 chars, 5 bytes).
A = Choice(-6.0, 3, *rules.lengths(" ab"))
B = Choice(-4.0, 1, *rules.lengths(" é"))
C = Choice(-10.0, 5, *rules.lengths(" abcd"))

RULE_CASES = [
    # rule, scores of A, B, C (by hand), pick
    ("mean", (-2.0, -4.0, -2.0), 0),  # A and C tie at -2: the lowest index
    ("sum", (-6.0, -4.0, -10.0), 1),  # the single-token continuation has the highest sum
    ("per_char", (-2.0, -2.0, -2.0), 0),  # a three-way tie: the lowest index
    ("per_byte", (-2.0, -4.0 / 3.0, -2.0), 1),  # é is two bytes: B's bytes are 3, not 2
]


@pytest.mark.parametrize("rule,scores,want", RULE_CASES)
def test_each_rule_scores_and_picks_as_computed_by_hand(rule, scores, want):
    assert tuple(rules.score(rule, c) for c in (A, B, C)) == pytest.approx(scores, abs=0, rel=1e-15)
    assert rules.pick(rule, [A, B, C]) == want


@pytest.mark.parametrize(
    "text,chars,nbytes",
    [(" ab", 3, 3), (" é", 2, 3), (" 30°.", 5, 6), (" 日本", 3, 7), (" 😀", 2, 5), ("x", 1, 1)],
)
def test_lengths_count_the_continuation_as_stored_leading_space_included(text, chars, nbytes):
    assert rules.lengths(text) == (chars, nbytes)


def test_single_token_continuations_mean_and_sum_agree():
    one = [Choice(-3.0, 1, 4, 4), Choice(-1.5, 1, 9, 9), Choice(-2.0, 1, 2, 2)]
    assert rules.pick("mean", one) == rules.pick("sum", one) == 1
    assert rules.pick("per_char", one) == 1  # -0.75, -1/6, -1
    assert rules.pick("per_byte", one) == 1


def test_a_rule_without_its_length_says_which():
    no_tokens = [Choice(-1.0, None, 2, 2), Choice(-2.0, None, 3, 3)]
    assert rules.missing("mean", no_tokens) == "n_tokens"
    assert rules.missing("sum", no_tokens) is None
    assert rules.missing("per_char", no_tokens) is None
    assert rules.missing("per_byte", [Choice(-1.0, 1, 2, None)]) == "n_bytes"


def test_rules_are_parsed_from_comma_lists_and_repeats_in_order_once():
    assert rules.parse_rules(["mean,sum", "per_char", "sum", " per-byte "]) == ("mean", "sum", "per_char", "per_byte")


@pytest.mark.parametrize("value,says", [("pmi", "another forward pass"), ("acc_mutual_info", "another forward pass"),
                                        ("acc_norm", "not a rule"), (",", "names no rule")])  # fmt: skip
def test_unknown_and_pmi_rules_are_refused_by_name(value, says):
    with pytest.raises(UsageError, match=says) as e:
        rules.parse_rules([value])
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------- Kendall's tau-b, by hand

TAU_CASES = [
    ([1, 2, 3], [1, 2, 3], 1.0),
    ([1, 2, 3], [3, 2, 1], -1.0),
    # pairs (0,1) tied in y; (0,2), (1,2) concordant: 2 / sqrt(3 * 2)
    ([1, 2, 3], [1, 1, 2], 2 / math.sqrt(6)),
    # (0,1) tied in x, (1,2) tied in y, the other four concordant: 4 / sqrt(5 * 5)
    ([1, 1, 2, 3], [1, 2, 2, 3], 0.8),
    # (0,1) and (2,3) discordant, four concordant: (4 - 2) / 6
    ([1, 2, 3, 4], [2, 1, 4, 3], 1 / 3),
    # a pair tied on both sides counts on both: 0 concordant... (0,1) tied both; (0,2),(1,2) discordant
    ([1, 1, 2], [5, 5, 4], -2 / math.sqrt(2 * 2)),
    ([7], [7], None),  # one run: no pair
    ([1, 1], [1, 2], None),  # one side all tied
]


@pytest.mark.parametrize("x,y,want", TAU_CASES)
def test_kendall_tau_b_as_computed_by_hand(x, y, want):
    got = ranking.kendall_tau_b(x, y)
    assert got == (None if want is None else pytest.approx(want, abs=1e-15))


def test_ranks_share_a_rank_on_a_tie():
    assert ranking.ranks([1010.0, 987.5, 1010.0, 1200.0]) == [2, 4, 2, 1]


# ---------------------------------------------------------------- rescored reports


@pytest.fixture(scope="module")
def bundled():
    return open_data("bundled")


@pytest.fixture(scope="module")
def run(bundled):
    return scored_report(bundled, seed=3, spec="org/model-a")


def _sum_pick(it: dict) -> int:
    sums = [c["logprob"] for c in it["choices"]]
    return sums.index(max(sums))  # the first of the largest


def test_mean_gives_back_the_run_exactly(bundled, run):
    new = rescoring.rescore_report(run, bundled.dataset.items, "mean")
    assert new["results"] == run["results"]
    assert [it["prediction"] for it in new["items"]] == [it["prediction"] for it in run["items"]]
    assert [it["expected_p"] for it in new["items"]] == [it["expected_p"] for it in run["items"]]
    assert new["official"] is run["official"] and new["scoring"]["rule"] == "mean"
    assert rescoring.reproduction(run, new) == {
        "n_items": 350,
        "same_choice": 350,
        "max_abs_diff": 0.0,
        "official_same": True,
    }
    assert checked.report_problem(new) is None


def test_mean_is_official_exactly_when_the_run_was_and_no_other_rule_ever(bundled, run):
    claimed = dict(run, official=True, non_official_reasons=[])  # not checked here: only what is carried over
    assert rescoring.rescore_report(claimed, bundled.dataset.items, "mean")["official"] is True
    for rule in ("sum", "per_char", "per_byte"):
        new = rescoring.rescore_report(claimed, bundled.dataset.items, rule)
        assert new["official"] is False
        assert any("never official" in r and rule in r for r in new["non_official_reasons"])


def test_a_sum_report_picks_by_sum_names_its_rule_and_passes_the_checked_reading(bundled, run):
    new = rescoring.rescore_report(run, bundled.dataset.items, "sum")
    assert new["scoring"]["rule"] == "sum"
    assert [it["prediction"] for it in new["items"]] == [_sum_pick(it) for it in run["items"]]
    assert [it["correct"] for it in new["items"]] == [_sum_pick(it) == it["label"] for it in run["items"]]
    assert checked.report_problem(new) is None


def test_per_byte_and_per_char_use_the_data_files_lengths(bundled, run):
    items = {it.id: it for it in bundled.dataset.items}
    new = rescoring.rescore_report(run, bundled.dataset.items, "per_byte")
    row = next(it for it in new["items"] if it["id"] == "quantitative-035")  # " 30°." and such
    assert [(c["n_chars"], c["n_bytes"]) for c in row["choices"]] == [
        (len(t), len(t.encode())) for t in items["quantitative-035"].continuations
    ]
    assert row["choices"][0]["n_bytes"] == row["choices"][0]["n_chars"] + 1
    for it in new["items"]:
        want = max(
            range(len(it["choices"])), key=lambda k: (it["choices"][k]["logprob"] / it["choices"][k]["n_bytes"], -k)
        )
        assert it["prediction"] == want


def test_the_checked_reading_recomputes_a_rescored_reports_choices_under_its_rule(bundled, run):
    new = rescoring.rescore_report(run, bundled.dataset.items, "sum")
    differ = next(i for i, it in enumerate(new["items"]) if it["prediction"] != run["items"][i]["prediction"])
    relabelled = json.loads(json.dumps(new))
    relabelled["scoring"]["rule"] = "mean"
    assert checked.report_problem(relabelled).startswith(f"item {differ}: prediction is")
    other = json.loads(json.dumps(new))
    other["scoring"]["rule"] = "median"
    assert checked.report_problem(other) == "scoring.rule 'median' is not one of mean, sum, per_char, per_byte"
    no_chars = json.loads(json.dumps(rescoring.rescore_report(run, bundled.dataset.items, "per_char")))
    for c in no_chars["items"][5]["choices"]:
        c.pop("n_chars")
    assert "n_chars" in checked.report_problem(no_chars)
    bad_bytes = json.loads(json.dumps(new))
    bad_bytes["items"][0]["choices"][0]["n_bytes"] = bad_bytes["items"][0]["choices"][0]["n_chars"] - 1
    assert "n_bytes" in checked.report_problem(bad_bytes)


def test_official_with_another_rule_is_refused_even_with_consistent_choices(bundled, run):
    new = rescoring.rescore_report(run, bundled.dataset.items, "sum")
    assert checked.official_problem(dict(new, data={"sha256": checked.card.OFFICIAL_SHA256})) is not None
    assert "scoring.rule is 'sum'" in checked.official_problem(
        dict(new, data={"sha256": checked.card.OFFICIAL_SHA256}, config=dict(new["config"], add_bos=False))
    )


def _without_token_counts(bundled, run) -> dict:
    rep = json.loads(json.dumps(rescoring.rescore_report(run, bundled.dataset.items, "sum")))
    for it in rep["items"]:
        for c in it["choices"]:
            c.pop("n_tokens"), c.pop("mean_logprob")
    assert checked.report_problem(rep) is None  # a sum report needs no token counts
    return rep


def test_a_report_without_token_counts_is_refused_for_mean_only(bundled, run):
    rep = _without_token_counts(bundled, run)
    with pytest.raises(ReportError, match=r"refused for --rule mean: .*no n_tokens") as e:
        rescoring.rescore_report(rep, bundled.dataset.items, "mean")
    assert "\n" not in str(e.value)
    per_char = rescoring.rescore_report(rep, bundled.dataset.items, "per_char")
    assert "n_tokens" not in per_char["items"][0]["choices"][0]
    assert checked.report_problem(per_char) is None


# ---------------------------------------------------------------- across runs, and the command


@pytest.fixture(scope="module")
def three_runs(bundled, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    reps = [scored_report(bundled, seed=s, spec=f"org/model-{s}", limit=70) for s in (1, 2, 3)]
    # two runs in folders of the same name
    paths = [write_scored(root / "x" / "run", reps[0]), write_scored(root / "y" / "run", reps[1])]
    paths.append(write_scored(root / "z", reps[2]))
    return reps, paths


def test_the_table_ranks_the_runs_under_each_rule_with_tau_b_and_the_flips(three_runs, tmp_path, bundled):
    reps, paths = three_runs
    table = rescoring.rescore([str(p) for p in paths], ["mean", "sum"], tmp_path / "out")
    elos = {r: [row["rules"][r]["elo"] for row in table["runs"]] for r in ("mean", "sum")}
    assert [row["rules"]["mean"]["elo"] for row in table["runs"]] == [rep["results"]["overall"]["elo"] for rep in reps]
    for r in ("mean", "sum"):
        assert [row["rules"][r]["rank"] for row in table["runs"]] == [1 + sum(e > x for e in elos[r]) for x in elos[r]]
    assert table["tau_b"] == [{"a": "mean", "b": "sum", "tau_b": ranking.kendall_tau_b(elos["mean"], elos["sum"])}]
    for rep, row in zip(reps, table["runs"]):
        changed = [it["id"] for it in rep["items"] if _sum_pick(it) != it["prediction"]]
        flips = row["rules"]["sum"]["flips_vs_mean"]
        assert [f["id"] for f in flips["items"]] == changed and flips["n"] == len(changed) > 0
        f = flips["items"][0]
        it = next(i for i in rep["items"] if i["id"] == f["id"])
        assert [c["n_tokens"] for c in f["lengths"]] == [c["n_tokens"] for c in it["choices"]]
        assert row["rules"]["mean"]["reproduces_run"]["max_abs_diff"] == 0.0
    names = [row["name"] for row in table["runs"]]
    assert len(set(names)) == 3 and names[0].startswith("run-") and names[1].startswith("run-")
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted(["rescore.json", "rescore.md", *names])
    for name in names:
        for r in ("mean", "sum"):
            assert checked.report_problem(json.loads((out / name / r / "report.json").read_text())) is None
    md = (out / "rescore.md").read_text()
    assert "**never**" in md and "never official" in md and "Kendall" in md
    assert json.loads((out / "rescore.json").read_text())["rules"]["sum"]["can_be_official"] is False


def test_rescore_in_python_takes_a_comma_list_and_report_dicts(bundled, run, tmp_path):
    table = rescoring.rescore([run], "sum,per_byte", tmp_path / "o")
    assert list(table["runs"][0]["rules"]) == ["sum", "per_byte"] and table["tau_b"][0]["tau_b"] is None
    assert table["runs"][0]["rules"]["sum"]["official"] is False


def test_the_default_out_dir_differs_for_other_runs_and_not_for_the_same(three_runs, bundled):
    reps, paths = three_runs
    loaded = [rescoring._report(str(p)) for p in paths]
    assert rescoring.default_out_dir(loaded[:2]) == rescoring.default_out_dir(loaded[1::-1])
    assert rescoring.default_out_dir(loaded[:2]) != rescoring.default_out_dir(loaded[1:])
    assert rescoring.run_folder(loaded[0]) != rescoring.run_folder(loaded[1])  # x/run and y/run


def test_cli_writes_says_never_official_and_refuses_to_overwrite(three_runs, tmp_path, capsys):
    _, paths = three_runs
    argv = ["rescore", str(paths[0]), str(paths[2]), "--rule", "mean,per_char", "--rule", "per_byte"]
    argv += ["--out-dir", str(tmp_path / "o")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "per_char, per_byte never are" in out and out.count("never official") == 4
    table = tmp_path / "o" / "rescore.json"
    before = table.read_bytes()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("base-bench: error:") and "--force" in err and "\n" not in err
    assert table.read_bytes() == before
    assert main([*argv, "--force"]) == 0


@pytest.mark.parametrize(
    "extra,says",
    [
        (["--rule", "pmi"], "another forward pass"),
        (["--rule", "acc_norm"], "not a rule"),
        (["--data", "nowhere.jsonl"], "nowhere.jsonl"),
    ],
)
def test_cli_refusals_are_one_line_exit_2_and_write_nothing(three_runs, tmp_path, capsys, extra, says):
    _, paths = three_runs
    assert main(["rescore", str(paths[0]), "--out-dir", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_cli_refuses_mean_for_a_report_without_token_counts(bundled, run, tmp_path, capsys):
    old = write_scored(tmp_path / "old", _without_token_counts(bundled, run))
    assert main(["rescore", str(old), "--rule", "sum,mean", "--out-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "refused for --rule mean" in err and "n_tokens" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()
    assert main(["rescore", str(old), "--rule", "sum,per_byte", "--out-dir", str(tmp_path / "o")]) == 0


def test_compare_leaderboard_and_explore_read_a_rescored_report(three_runs, tmp_path, capsys):
    _, paths = three_runs
    assert main(["rescore", str(paths[0]), "--rule", "sum", "--out-dir", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    (folder,) = [p for p in (tmp_path / "o").iterdir() if p.is_dir()]
    rescored = folder / "sum"
    assert main(["compare", str(paths[0]), str(rescored)]) == 0
    assert "rule differs: A mean, B sum" in capsys.readouterr().out
    assert main(["leaderboard", str(paths[0]), str(rescored), "--out-dir", str(tmp_path / "lb")]) == 0
    board = capsys.readouterr().out
    assert "org/model-1 (rescored: sum)" in board
    assert main(["explore", str(paths[0]), str(rescored), "--out-dir", str(tmp_path / "ex")]) == 0


@pytest.mark.slow(reason="a subprocess: a fresh interpreter, to see what rescore imports")
def test_rescore_imports_no_torch_and_no_model_library(three_runs, tmp_path):
    _, paths = three_runs
    code = (
        "import sys\n"
        "from base_bench.commands.cli import main\n"
        f"rc = main(['rescore', {str(paths[0])!r}, {str(paths[1])!r}, '--out-dir', {str(tmp_path / 'o')!r}])\n"
        "loaded = sorted(m for m in ('torch', 'transformers', 'llama_cpp', 'vllm', 'tokenizers') if m in sys.modules)\n"
        "print('rc', rc, 'loaded', loaded)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "rc 0 loaded []"
    assert (tmp_path / "o" / "rescore.json").is_file()


def test_base_bench_help_lists_rescore_with_the_other_commands(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    listed = [line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("  base-bench ")]
    assert listed[:5] == ["compare", "leaderboard", "explore", "rescore", "trajectory"]
    with pytest.raises(SystemExit) as e:
        main(["rescore", "--help"])
    assert e.value.code == 0 and "per_byte" in capsys.readouterr().out

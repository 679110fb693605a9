"""Reports from strangers, as an attacker would craft them, read by every command that reads reports
(`compare`, `leaderboard`, `explore`, `trajectory`): one `base-bench: error:` line naming the field,
or a page that shows only what the report's own items support. Never a traceback, never a claim
repeated as a fact, never memory that grows without bound.

The reports start as the runner's own (explorerun.scored_report: the bundled set's items, made-up
scores, results.report.build_report), so each test changes exactly one thing.
"""

from __future__ import annotations

import copy
import json
import math
import re
import tracemalloc

import pytest
from explorerun import scored_report, write_scored
from test_untrusted import one_error

from base_bench import untrusted
from base_bench.commands.cli import main
from base_bench.errors import ReportError
from base_bench.items import card
from base_bench.items.datasource import open_data
from base_bench.results import reports_io
from base_bench.results.report import dumps


@pytest.fixture(scope="module")
def bundled():
    return open_data("bundled")


@pytest.fixture(scope="module")
def good(bundled) -> dict:
    return scored_report(bundled, seed=7, spec="org/good", resamples=20)


@pytest.fixture(scope="module")
def other(bundled) -> dict:
    return scored_report(bundled, seed=8, spec="org/other", resamples=20)


def readers(tmp_path, run, other_run) -> dict[str, list[str]]:
    """The command line of every reader, for a folder `run` holding report.json (as a step of a
    training run for trajectory, whose folder is its parent)."""
    out = tmp_path / "out"
    return {
        "compare": ["compare", str(run), str(other_run), "--out-dir", str(out / "cmp")],
        "leaderboard": ["leaderboard", str(run), str(other_run), "--out-dir", str(out / "lb")],
        "explore": ["explore", str(run), str(other_run), "--out-dir", str(out / "ex")],
        "trajectory": ["trajectory", str(run.parent), "--out-dir", str(out / "tr")],
    }


def plant(tmp_path, rep: dict, other_rep: dict, raw: str | None = None):
    """Write the crafted report as steps/step-1/report.json (or `raw` text in its place) and an honest
    one beside it; return both folders."""
    run = write_scored(tmp_path / "steps" / "step-1", dict(rep, training_step=1))
    if raw is not None:
        (run / "report.json").write_text(raw, encoding="utf-8")
    return run, write_scored(tmp_path / "honest", other_rep)


def refused_by_every_reader(tmp_path, capsys, rep, other_rep, raw=None) -> list[str]:
    """Run every reader on the crafted report: each exits 2 with one error line (no traceback), and
    writes nothing. Returns the error lines."""
    run, other_run = plant(tmp_path, rep, other_rep, raw)
    lines = []
    for name, argv in readers(tmp_path, run, other_run).items():
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, (name, err[-2000:])
        lines.append(one_error(err))
    assert not (tmp_path / "out").exists()
    return lines


# ---------------------------------------------------------------- 1. one huge integer


@pytest.mark.parametrize(
    "field",
    ["item_elo", "n_tokens", "point_weight", "training_step", "overall n"],
)
def test_a_401_digit_integer_in_any_numeric_field_gets_one_line(tmp_path, capsys, good, other, field):
    big = "9" * 401
    text = json.dumps(dict(good, training_step=1))
    key = {"overall n": "n"}.get(field, field)
    raw, replaced = re.subn(f'"{key}": [0-9.]+', f'"{key}": {big}', text, count=1)
    assert replaced == 1
    for line in refused_by_every_reader(tmp_path, capsys, good, other, raw=raw):
        assert "an integer of 401 digits" in line


def test_nan_and_infinity_literals_are_refused(tmp_path, capsys, good, other):
    text = json.dumps(dict(good, training_step=1))
    raw = re.sub('"item_elo": [0-9.]+', '"item_elo": NaN', text, count=1)
    for line in refused_by_every_reader(tmp_path, capsys, good, other, raw=raw):
        assert "NaN" in line
    with pytest.raises(ValueError, match="too large"):
        untrusted.loads('{"x": 1e999}', strict=True)
    with pytest.raises(ValueError, match="Infinity"):
        untrusted.loads('{"x": -Infinity}', strict=True)
    assert untrusted.loads('{"x": -Infinity}') == {"x": -math.inf}  # only where asked (reports, scans)


def _strict_through_the_hooks(text):
    """What strict mode gives when every number goes through its checking hooks (its slow path)."""
    hooks = {"parse_float": untrusted._finite_float, "parse_int": untrusted._short_int}
    return json.loads(text, parse_constant=untrusted._no_constant, **hooks)


NUMBERS = [
    "0", "-0", "7", "123456789012345678", "-123456789012345678", "1234567890123456789", "-99999999999999999999",
    "1.5", "-2.25e-3", "1e99", "1E+99", "9.99e99", "123456789012345678.5e99", "1e100", "1e308", "9e308",
    "1e999", "-1e400", "1.0e0400", "1e-400", "0.000000000000000000000001", "1" * 310, "1" * 310 + ".5",
    "0.1234567890123456789012", "5e-0001",
]  # fmt: skip


@pytest.mark.parametrize("number", NUMBERS)
@pytest.mark.parametrize("where", ['{{"x": {}}}', "[1,{}]", "{}", " {}", "[\n{}]", '{{"h": "fee433764e2", "x":{}}}'])
def test_strict_numbers_parsed_natively_are_refused_or_kept_as_through_the_hooks(number, where):
    # a text with no number that strict mode could refuse skips the hooks: the same result either way
    text = where.format(number) if isinstance(where, str) else where.replace(b"{}", number.encode())
    try:
        want = ("value", _strict_through_the_hooks(text))
    except ValueError as e:
        want = ("refused", str(e))
    try:
        got = ("value", untrusted.loads(text, strict=True))
    except ValueError as e:
        got = ("refused", str(e))
    assert got == want
    if not untrusted.risky_numbers(text):  # the fast path was taken: it must hold no refusal
        assert want[0] == "value"


# ---------------------------------------------------------------- 2. claims are recomputed


def _forge(rep: dict, change) -> dict:
    rep = copy.deepcopy(rep)
    change(rep)
    return rep


def _set_official_data(rep):
    rep["data"].update(sha256=card.OFFICIAL_SHA256)


CLAIMS = {
    "official is the string no": (lambda r: r.update(official="no"), "official is not true or false"),
    "official on the bundled set": (
        lambda r: r.update(official=True, non_official_reasons=[]),
        "official is true, but its data (bundled set",
    ),
    "data.kind says official": (lambda r: r["data"].update(kind="official"), "data.kind is 'official'"),
    "Elo 1999 and 100%": (
        lambda r: r["results"]["overall"].update(elo=1999.0, raw_accuracy=1.0),
        "results.overall.elo is 1999",
    ),
    "a category's Elo": (
        lambda r: r["results"]["categories"]["commonsense"].update(elo=1500.0),
        "results.categories['commonsense'].elo",
    ),
    "correct without the choices' support": (
        lambda r: [it.update(correct=True, prediction=it["label"]) for it in r["items"]],
        "prediction is",
    ),
    "n_correct": (lambda r: r["results"]["overall"].update(n_correct=350), "results.overall.n_correct"),
    "weighted accuracy": (
        lambda r: r["results"]["overall"].update(weighted_accuracy=0.99),
        "results.overall.weighted_accuracy",
    ),
    "a narrower standard error": (lambda r: r["results"]["overall"].update(elo_se=1.0), "results.overall.elo_se"),
    "an interval upside down": (
        lambda r: r["results"]["overall"].update(elo_ci95=[1100.0, 900.0]),
        "results.overall.elo_ci95 has its upper end below",
    ),
    "a Wilson interval": (
        lambda r: r["results"]["overall"].update(raw_accuracy_ci95=[0.0, 1.0]),
        "raw_accuracy_ci95 is not the Wilson interval",
    ),
    "an item's Elo": (lambda r: r["items"][0].update(item_elo=2000.0), "item_elo 2000 is not the card's"),
    "a made-up category": (lambda r: r["items"][0].update(category="secret_sauce"), "category 'secret_sauce'"),
    "mean_logprob": (lambda r: r["items"][0]["choices"][0].update(mean_logprob=0.0), "mean_logprob"),
    "expected_p": (lambda r: r["items"][0].update(expected_p=0.999), "expected_p"),
}


@pytest.mark.parametrize("what", list(CLAIMS))
def test_a_report_that_disagrees_with_itself_is_refused_naming_the_field(tmp_path, capsys, good, other, what):
    change, words = CLAIMS[what]
    forged = _forge(good, change)
    for line in refused_by_every_reader(tmp_path, capsys, forged, other):
        assert words in line, line


def test_the_honest_reports_pass_every_reader(tmp_path, capsys, good, other):
    run, other_run = plant(tmp_path, good, other)
    for name, argv in readers(tmp_path, run, other_run).items():
        assert main(argv) == 0, (name, capsys.readouterr().err[-2000:])
    capsys.readouterr()


def _official(bundled_rep: dict) -> dict:
    """`bundled_rep` relabelled as a run on the card's data with the card's setup: what an official
    report looks like (the items are the bundled set's; the checks read ids, not texts)."""
    rep = copy.deepcopy(bundled_rep)
    rep["data"].update(sha256=card.OFFICIAL_SHA256, kind="official")
    rep["config"].update(limit=None, limit_per_category=None, add_bos=False)
    rep.update(official=True, non_official_reasons=[])
    return rep


def _rescored_by_sum(rep):
    """The rule named sum, and the choices picked by it (so only the official claim is wrong)."""
    rep["scoring"] = {"rule": "sum"}
    for it in rep["items"]:
        sums = [c["logprob"] for c in it["choices"]]
        it["prediction"] = sums.index(max(sums))
        it["correct"] = it["prediction"] == it["label"]


def test_official_needs_the_card_setup_not_an_empty_list_of_reasons(good):
    from base_bench.results import checked

    assert checked.report_problem(_official(good)) is None
    forged = {
        "--limit": lambda r: (r["config"].update(limit=8), r.update(items=r["items"][:8])),
        "--limit in the config only": lambda r: r["config"].update(limit=400),
        "--limit-per-category": lambda r: r["config"].update(limit_per_category=50),
        "--add-bos": lambda r: r["config"].update(add_bos=True),
        "no add_bos at all": lambda r: r["config"].pop("add_bos"),
        "--max-spread": lambda r: r["config"].update(packing_check={"invariance": {"threshold": 0.01}}),
        "another rule": _rescored_by_sum,
        "an item left out": lambda r: r.update(items=r["items"][:-1]),
    }
    for what, change in forged.items():
        rep = _forge(_official(good), change)
        problem = checked.report_problem(rep)
        assert problem and problem.startswith("official is true, but"), (what, problem)
    # the card's limit itself is allowed
    ok = _forge(_official(good), lambda r: r["config"].update(packing_check={"invariance": {"threshold": 1e-3}}))
    assert checked.report_problem(ok) is None


def test_pages_name_the_data_by_its_checksum_not_by_the_reports_words(tmp_path, capsys, good, other):
    liar = _forge(good, lambda r: r["data"].update(description="official BananaMind data, verified"))
    run, other_run = plant(tmp_path, liar, other)
    argv = readers(tmp_path, run, other_run)
    assert main(argv["leaderboard"]) == 0 and main(argv["trajectory"]) == 0
    capsys.readouterr()
    for page in (tmp_path / "out" / "lb" / "leaderboard.md", tmp_path / "out" / "tr" / "trajectory.md"):
        text = page.read_text()
        assert "verified" not in text and "bundled set" in text


# ---------------------------------------------------------------- 3. crafted fields


CRAFTED = {
    "a margin that overflows": (
        lambda r: r["items"][0]["choices"][0].update(logprob=1.7e308, mean_logprob=1.7e308 / 3, n_tokens=3),
        "choices are not a list of log-probs",
    ),
    "data.kind a list": (lambda r: r["data"].update(kind=["official"]), "data.kind is ['official']"),
    "config.model.spec a number": (lambda r: r["config"]["model"].update(spec=12), "config.model.spec"),
    "config.model.spec a list": (lambda r: r["config"]["model"].update(spec=["a", "b"]), "config.model.spec"),
    "config.dtype a dict": (lambda r: r["config"].update(dtype={"a": 1}), "config.dtype"),
    "data.description a list": (lambda r: r["data"].update(description=["x"]), "data.description"),
    "an item without its difficulty": (lambda r: r["items"][0].pop("difficulty"), "item 0 lacks difficulty"),
}


@pytest.mark.parametrize("what", list(CRAFTED))
def test_crafted_fields_get_one_line_from_every_reader(tmp_path, capsys, good, other, what):
    change, words = CRAFTED[what]
    for line in refused_by_every_reader(tmp_path, capsys, _forge(good, change), other):
        assert words in line, line


@pytest.fixture
def chain(tmp_path):
    """A chain of 1,200 nested folders (made and removed one level at a time, through a descriptor:
    the whole path is longer than PATH_MAX, and shutil.rmtree would recurse as deeply)."""
    import os

    top = tmp_path / "train" / "chain"
    top.mkdir(parents=True)
    fds = [os.open(top, os.O_RDONLY)]
    for _ in range(1200):
        os.mkdir("d", dir_fd=fds[-1])
        fds.append(os.open("d", os.O_RDONLY, dir_fd=fds[-1]))
    os.close(fds.pop())
    yield top
    while fds:
        parent = fds.pop()
        os.rmdir("d", dir_fd=parent)
        os.close(parent)


def test_a_trajectory_folder_with_a_chain_of_1200_folders_is_walked_without_recursion(tmp_path, capsys, good, chain):
    root = chain.parent
    write_scored(root / "step-1", dict(good, training_step=1))
    out = tmp_path / "tr"
    assert main(["trajectory", str(root), "--out-dir", str(out)]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "were not searched" in err
    assert (out / "trajectory.md").exists()


def test_a_deep_chain_is_walked_to_its_limit_and_no_further(tmp_path):
    folder = tmp_path
    for _ in range(reports_io.MAX_WALK_DEPTH + 2):
        folder = folder / "d"
    folder.mkdir(parents=True)
    (folder / "report.json").write_text("{}")
    within = tmp_path.joinpath(*["d"] * reports_io.MAX_WALK_DEPTH) / "report.json"
    within.write_text("{}")
    found, deeper = reports_io.find_named(tmp_path, "report.json")
    assert found == [within] and deeper == 1


# ---------------------------------------------------------------- 4. memory


def test_made_up_categories_are_refused_so_one_board_has_the_cards_seven_at_most(tmp_path, capsys, good):
    runs = []
    for k in range(8):
        rep = copy.deepcopy(good)
        for n, it in enumerate(rep["items"]):
            it["category"] = f"cat{k}_{n % 100}"
        runs.append(write_scored(tmp_path / f"r{k}", rep))
    assert main(["leaderboard", *map(str, runs), "--out-dir", str(tmp_path / "lb")]) == 2
    assert "is not one of the card's 7" in one_error(capsys.readouterr().err)


def test_the_leaderboards_plots_stop_growing_with_the_number_of_runs(tmp_path, capsys, bundled):
    from test_leaderboard import png_size

    from base_bench.results.leaderboard import MAX_PLOT_RUNS

    n = MAX_PLOT_RUNS + 6
    runs = [
        write_scored(tmp_path / f"r{k}", scored_report(bundled, seed=k, spec=f"org/m{k}", resamples=5))
        for k in range(n)
    ]
    out = tmp_path / "lb"
    assert main(["leaderboard", *map(str, runs), "--out-dir", str(out)]) == 0
    capsys.readouterr()
    sha12 = bundled.dataset.sha256[:12]
    from base_bench.results import plots

    w, h = png_size((out / f"category_elo-{sha12}.png").read_bytes())
    assert h <= plots.category_size(MAX_PLOT_RUNS, len(card.CATEGORIES))[1] + 2
    w, h = png_size((out / f"calibration-{sha12}.png").read_bytes())
    assert h <= plots.calibration_size(MAX_PLOT_RUNS)[1] + 2
    md = (out / "leaderboard.md").read_text()
    assert f"The plots draw the {MAX_PLOT_RUNS} highest-ranked of these {n} runs." in md
    assert md.count("| org/m") == n  # the table keeps every run


def test_a_32_mib_report_padded_with_ignored_arrays_is_refused_within_bounded_memory(tmp_path, capsys, good):
    text = json.dumps(dict(good, padding=[[]] * 1))[:-1]
    pad = 32 * 1024 * 1024 - len(text)
    raw = text[: text.rindex("[[]]")] + "[" + ",".join(["[]"] * (pad // 3)) + "]}"
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.json").write_text(raw)
    tracemalloc.start()
    try:
        with pytest.raises(ReportError, match="JSON values"):
            reports_io.load_report(run)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 200 * 2**20, f"peak {peak / 2**20:.0f} MiB"
    assert main(["compare", str(run), str(run)]) == 2
    assert "JSON values" in one_error(capsys.readouterr().err)


# ---------------------------------------------------------------- 5. nothing non-standard is written


def test_log_probs_near_the_float_limit_never_reach_compare_json(tmp_path, capsys, good):
    a = _forge(
        good,
        lambda r: [
            c.update(logprob=-1.7e308, mean_logprob=-1.7e308)
            for it in r["items"]
            for c in it["choices"]
            if c["n_tokens"] == 1
        ],
    )
    b = _forge(
        good,
        lambda r: [
            c.update(logprob=1.7e308, mean_logprob=1.7e308)
            for it in r["items"]
            for c in it["choices"]
            if c["n_tokens"] == 1
        ],
    )
    ra, rb = write_scored(tmp_path / "a", a), write_scored(tmp_path / "b", b)
    assert main(["compare", str(ra), str(rb), "--out-dir", str(tmp_path / "cmp")]) == 2
    assert "choices are not a list of log-probs" in one_error(capsys.readouterr().err)
    assert not (tmp_path / "cmp").exists()


class HugeScores:
    """A backend (the model contract, nothing else) whose first choice of every item scores `value`."""

    def __init__(self, value: float, vocab_size: int):
        from base_bench.backends.base import Backend, Device

        class _B(Backend):
            name, dtype, device = "test-huge", "float32", Device("cpu")

            def fingerprint(self):
                return "0" * 16

            def pick_scorer(self, order, pad_id, ranks):
                from base_bench.items.records import ChoiceScore

                def scorer(batch):
                    return [
                        [ChoiceScore(value if k == 0 else -1.0, len(c)) for k, c in enumerate(e.continuations)]
                        for e in batch
                    ]

                scorer.name = "huge"
                return scorer, None

        self.backend = _B()
        self.backend.vocab_size = vocab_size


@pytest.mark.parametrize("value", [-math.inf, math.nan, -1.7e308, 5e12])
def test_a_score_no_reader_could_take_stops_the_run_in_one_line(tmp_path, value):
    from base_bench import evaluate
    from base_bench.engine.scoring import ScoringError

    from tiny import tiny_tokenizer

    tok = tiny_tokenizer()
    with pytest.raises(ScoringError, match="not a finite number within") as e:
        evaluate(HugeScores(value, len(tok)).backend, tok, "bundled", limit=3, out_dir=tmp_path / "run", progress=False)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "run" / "report.json").exists()


def test_every_report_and_run_file_is_written_as_standard_json(tmp_path):
    from base_bench.engine.runstore import RunStore
    from base_bench.items.records import ChoiceScore, ItemResult

    with pytest.raises(ValueError):
        dumps({"results": {"overall": {"elo": math.inf}}})
    store = RunStore(tmp_path / "run")
    with store.lock():
        store.begin({"k": 1}, {}, resume=False)
        with pytest.raises(ValueError):
            store.append(ItemResult("x", (ChoiceScore(math.nan, 1),), 0, 0))

"""The contamination package's pure parts, table-driven: normalisation, N, the items' n-grams, the
matcher, coverage and the Llama 2 subsets, excerpts, the canary, rank and p-value, and the clean/dirty
re-scoring of a report."""

import random

import numpy as np
import pytest

from base_bench.contamination import index as idx_mod
from base_bench.contamination.canary import Canary, canaries_of, parse, random_second_halves
from base_bench.contamination.excerpt import excerpts
from base_bench.contamination.index import Gram, ItemIndex, ItemWords, item_grams
from base_bench.contamination.normalize import choose_n, nearest_rank_percentile, word_spans, words
from base_bench.contamination.probing import rank_and_p
from base_bench.contamination.rescore import rescore
from base_bench.contamination.results import covered_fraction, llama2_subsets
from base_bench.errors import ReportError
from base_bench.items.dataset import BUNDLED_CANARY, bundled_path, load_dataset_file
from base_bench.results import elo


@pytest.mark.parametrize(
    "text, expected",
    [
        ("It's a Well-Known fact.", [b"its", b"a", b"wellknown", b"fact"]),
        ("THE  end\n\tof\r\nit", [b"the", b"end", b"of", b"it"]),
        ("x = f(a,b) + 1;", [b"x", b"fab", b"1"]),  # "=" and "+" alone are no words
        ("Caf\u00e9 \u2014 \u201cquoted\u201d \u00a35", ["café".encode(), b"quoted", b"5"]),
        ("a\u00a0b\u2009c\u3000d", [b"a", b"b", b"c", b"d"]),  # Unicode spaces split words
        ("a\x1cb\x1fc", [b"a", b"b", b"c"]),  # str.split() whitespace too
        ("\u00c9T\u00c9 \u2019tis", ["été".encode(), b"tis"]),  # non-ASCII lowercased
        ("...  --- !!!", []),
    ],
)
def test_words_gpt3_normalisation(text, expected):
    assert words(text) == expected


def test_word_spans_agree_with_words_on_random_text():
    rng = random.Random(3)
    alphabet = "abcXYZ09 .,;-'\"\n\t\u00a0\u2014\u201c\u00e9\u00c9\u00a3\x1c()"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        spans = word_spans(text)
        assert [w for s, e in spans for w in words(text[s:e])] == words(text)
        assert len(spans) == len(words(text))


@pytest.mark.parametrize(
    "lengths, n, p5",
    [
        (list(range(1, 101)), 8, 5),  # 5th smallest of 100 is 5: clamped up to 8
        ([10] * 100, 10, 10),
        ([5] * 4 + [20] * 96, 13, 20),  # nearest rank: ceil(0.05 * 100) = 5th smallest
        ([5] * 5 + [20] * 95, 8, 5),
        ([30] * 7, 13, 30),
    ],
)
def test_choose_n(lengths, n, p5):
    assert choose_n(lengths) == (n, p5)
    assert nearest_rank_percentile(lengths, 5) == p5


def W(s):
    return tuple(s.split())


def test_item_grams_by_hand():
    # context of 10 words, answer "k l", wrong "k z" (shares its first word) and "y z", N = 8
    it = ItemWords(
        "x",
        tuple(b"a b c d e f g h i j".split()),
        (tuple(b"k l".split()), tuple(b"k z".split()), tuple(b"y z".split())),
        0,
    )
    got = item_grams(it, 0, 8)
    assert [g for g in got if g.kind == "context"] == [Gram(0, "context", -1, s, 8) for s in (0, 1, 2)]
    assert [g for g in got if g.kind == "answer"] == []  # 2 words: too short alone
    # leak: windows of C+A (12 words) starting in C, ending in A: starts 3 and 4
    assert [g for g in got if g.kind == "leak"] == [Gram(0, "leak", 0, 3, 8), Gram(0, "leak", 0, 4, 8)]
    assert [g for g in got if g.kind == "wrong"] == [
        Gram(0, "wrong", 1, 3, 8),
        Gram(0, "wrong", 1, 4, 8),
        Gram(0, "wrong", 2, 3, 8),
        Gram(0, "wrong", 2, 4, 8),
    ]
    index = ItemIndex([it], 8)
    # "d e f g h i j k" is both the leak at 3 and wrong choice 1 at 3: it counts on the right side only
    kinds = [(g.kind, g.choice, g.start) for g in index.grams]
    assert ("wrong", 1, 3) not in kinds and ("wrong", 1, 4) in kinds and ("wrong", 2, 3) in kinds


def test_item_grams_short_sequences_are_matched_whole_from_eight_words():
    it = ItemWords(
        "s",
        tuple(b"one two three four five six".split()),
        (tuple(b"seven eight nine".split()), tuple(b"a b c d e f g h i".split())),
        0,
    )
    got = item_grams(it, 0, 13)
    assert [g for g in got if g.kind == "context"] == []  # 6 words: never alone
    assert [g for g in got if g.kind == "leak"] == [Gram(0, "leak", 0, 0, 9)]  # C+A = 9 words, whole
    assert Gram(0, "wrong", 1, 6, 9) in got  # the 9-word wrong one, whole
    assert Gram(0, "wrong", 1, 0, 15) not in got and all(g.length <= 13 for g in got)


@pytest.fixture(scope="module")
def bundled_index():
    return ItemIndex.build(load_dataset_file(bundled_path()).items)


def test_bundled_index_n_is_gpt3s(bundled_index):
    assert bundled_index.n == 13 and bundled_index.p5 == 13


def test_find_is_exact_and_positions_are_right(bundled_index):
    it = load_dataset_file(bundled_path()).items[40]
    ws = words("Nothing to see here, " + it.context.upper() + it.continuations[it.label] + " and more.")
    found = bundled_index.find(ws)
    assert found
    for gi, at in found:
        g = bundled_index.grams[gi]
        assert tuple(ws[at : at + g.length]) == idx_mod.gram_words(bundled_index.items[g.item], g)
    assert {bundled_index.grams[gi].item for gi, _ in found} == {40}
    # every 5th word changed: no 8 words in a row are left, so nothing may match
    assert bundled_index.find([w if i % 5 else b"zzzq" for i, w in enumerate(ws)]) == []


def test_hash_matches_prefix_sum_hash(bundled_index):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, size=50).tolist()
    bundled_index._prepare(60)
    x = (np.array(ids) + 1).astype(np.uint64)
    prefix = np.zeros(51, dtype=np.uint64)
    np.cumsum(x * bundled_index._pw[:50], out=prefix[1:])
    for L in (8, 13):
        h = (prefix[L:] - prefix[: 51 - L]) * bundled_index._ipw[: 51 - L]
        assert [int(v) for v in h] == [idx_mod._hash(ids[i : i + L]) for i in range(51 - L)]


@pytest.mark.parametrize(
    "spans, length, fraction",
    [
        ([], 10, 0.0),
        ([(0, 5)], 10, 0.5),
        ([(0, 5), (3, 8)], 10, 0.8),
        ([(0, 13), (5, 13)], 10, 1.0),
        ([(2, 4), (6, 7)], 10, 0.3),
        ([(0, 1)], 0, 0.0),
    ],
)
def test_covered_fraction(spans, length, fraction):
    assert covered_fraction(spans, length) == pytest.approx(fraction)


@pytest.mark.parametrize(
    "fraction, subsets",
    [
        (0.0, ["clean", "not dirty"]),
        (0.1999, ["clean", "not dirty"]),
        (0.2, ["not clean", "not dirty"]),
        (0.7999, ["not clean", "not dirty"]),
        (0.8, ["not clean", "dirty"]),
        (1.0, ["not clean", "dirty"]),
    ],
)
def test_llama2_subsets(fraction, subsets):
    assert llama2_subsets(fraction) == subsets


def test_excerpts_cut_around_the_matched_words():
    text = "alpha beta\n\n gamma, delta -- epsilon zeta " + "x " * 200 + "omega end"
    (first, last) = excerpts(text, [(2, 2), (206, 2)])
    assert "gamma, delta" in first and first.startswith("alpha beta gamma")
    assert last.endswith("omega end") and last.startswith("…")


def test_canary_parts():
    c = parse(BUNDLED_CANARY)
    assert c.guid == "395bed8f-52cb-47dc-a967-31acfca315c0"
    assert c.prompt == "BASE-BENCH-BUNDLED-CANARY 395bed8f-52cb-47dc" and c.second_half == "-a967-31acfca315c0"
    assert c.key == b"395bed8f52cb47dca96731acfca315c0"
    assert canaries_of(load_dataset_file(bundled_path()).items) == [c]
    halves = random_second_halves(500, seed=1, exclude=c.second_half)
    assert len(set(halves)) == 500 and c.second_half not in halves
    assert all(len(h) == 18 and h[0] == "-" and h[5] == "-" and h[1] in "89ab" for h in halves)
    assert halves == random_second_halves(500, seed=1, exclude=c.second_half)
    assert parse("no guid here") is None
    assert isinstance(c, Canary)


@pytest.mark.parametrize(
    "true, others, rank, p",
    [
        (0.0, [-1.0, -2.0], 1, 1 / 3),
        (0.0, [0.0, -1.0], 2, 2 / 3),
        (-5.0, [0.0, 1.0, -9.0], 3, 3 / 4),
        (1.0, [-1.0] * 999, 1, 0.001),
    ],
)
def test_rank_and_p(true, others, rank, p):
    assert rank_and_p(true, others) == (rank, pytest.approx(p))


# ---------------------------------------------------------------- re-scoring on clean and dirty items


def _report(correct):
    cats = ["language_completion", "commonsense"]
    items = []
    for n, ok in enumerate(correct):
        cat = cats[n % 2]
        items.append(
            {
                "id": f"{cat}-{n:03d}",
                "category": cat,
                "item_elo": 800 + 50 * (n % 5),
                "point_weight": 1.0 + 0.5 * (n % 3),
                "correct": bool(ok),
            }
        )
    return {
        "data": {"sha256": "ab" * 32},
        "items": items,
        "config": {"model": {"spec": "m"}},
        "results": {"overall": {"elo": None}},
    }


def _scan(rep, dirty_ids):
    return {
        "data": {"sha256": rep["data"]["sha256"]},
        "settings": {"dirty_rule": "test"},
        "items": [{"id": it["id"], "dirty": it["id"] in dirty_ids} for it in rep["items"]],
    }


def test_rescore_full_elo_is_the_fit_and_no_dirty_means_no_difference():
    rep = _report([n % 3 != 0 for n in range(60)])
    res = rescore(rep, _scan(rep, set()), resamples=200, seed=5)
    outcomes = [(it["item_elo"], it["point_weight"], 1.0 if it["correct"] else 0.0) for it in rep["items"]]
    assert res["full"]["elo"] == pytest.approx(elo.fit_elo(outcomes))
    assert res["clean"]["elo"] == pytest.approx(res["full"]["elo"]) and res["clean"]["diff_ci95"] == [0.0, 0.0]
    assert res["dirty"]["n"] == 0 and res["dirty"]["elo"] is None
    assert res["verdict"].startswith("no item is dirty")


def test_rescore_flags_a_score_inflated_by_dirty_items():
    # the model gets every dirty item right and half of the clean ones: clean Elo is well below full
    correct = [n < 20 or n % 2 == 0 for n in range(80)]
    rep = _report(correct)
    dirty = {it["id"] for it in rep["items"][:20]}
    res = rescore(rep, _scan(rep, dirty), resamples=300, seed=1)
    clean_outcomes = [(it["item_elo"], it["point_weight"], 1.0 if it["correct"] else 0.0) for it in rep["items"][20:]]
    assert res["clean"]["elo"] == pytest.approx(elo.fit_elo(clean_outcomes))
    assert res["clean"]["n"] == 60 and res["dirty"]["n"] == 20 and res["dirty"]["raw_accuracy"] == 1.0
    assert res["clean"]["diff_vs_full"] < -20 and res["clean"]["diff_ci95"][1] < 0
    assert "likely inflated" in res["verdict"]
    assert res["dirty_items"] == sorted(dirty, key=lambda i: int(i.split("-")[1]))


def test_rescore_refuses_other_data_or_items():
    rep = _report([True] * 10)
    other = dict(_scan(rep, set()), data={"sha256": "cd" * 32})
    with pytest.raises(ReportError, match="scan with the run's data"):
        rescore(rep, other)
    partial = _scan(rep, set())
    partial["items"] = partial["items"][:5]
    with pytest.raises(ReportError, match="5 of the run's items are not in the scan"):
        rescore(rep, partial)


def test_cli_report_writes_json_and_markdown_and_never_overwrites(tmp_path, capsys):
    import json

    from test_compare import item_meta, make_report

    from base_bench.commands.cli import main

    ids = {m["id"] for m in item_meta(12)[:80]}  # 80 items of a report the checked reading accepts
    rep = make_report([n < 20 or n % 2 == 0 for n in range(80)], per_category=12, ids=ids)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.json").write_text(json.dumps(rep))
    (tmp_path / "scan").mkdir()
    (tmp_path / "scan" / "contamination.json").write_text(json.dumps(_scan(rep, {i["id"] for i in rep["items"][:20]})))
    args = [
        "contamination",
        "report",
        str(tmp_path / "run"),
        "--scan",
        str(tmp_path / "scan"),
        "--resamples",
        "200",
        "--out-dir",
        str(tmp_path / "out"),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "clean  Elo" in out and "(60 items)" in out and "Verdict: clean − full = " in out
    res = json.loads((tmp_path / "out" / "contamination_report.json").read_text())
    assert res["clean"]["n"] == 60 and res["bootstrap"]["resamples"] == 200
    md = (tmp_path / "out" / "contamination_report.md").read_text()
    assert "| clean | 60 |" in md and "| dirty | 20 |" in md
    assert main(args) == 2 and "already exists" in capsys.readouterr().err
    assert main(["contamination", "report", str(tmp_path / "run"), "--scan", str(tmp_path / "nope")]) == 2
    assert "no contamination.json there" in capsys.readouterr().err
    assert main(["contamination"]) == 2 and "give one of scan, probe, report" in capsys.readouterr().err


def _rescore_in_one_matrix(rep, scan, resamples, seed):
    """The clean and dirty bootstrap ratings as rescore computed them with the whole (resamples x
    items) count matrix at once, before it took the draws a block at a time."""
    import numpy as np

    from base_bench.results.elo import fit_elo_many
    from base_bench.results.stats import resample_counts

    items = rep["items"]
    dirty_of = {i["id"]: i["dirty"] for i in scan["items"]}
    e = np.array([float(it["item_elo"]) for it in items])
    w = np.array([float(it["point_weight"]) for it in items])
    y = np.array([1.0 if it["correct"] else 0.0 for it in items])
    dirty = np.array([bool(dirty_of[it["id"]]) for it in items])
    cw = resample_counts([it["category"] for it in items], resamples, seed) * w[None, :]
    full = fit_elo_many(e, cw, y)
    return {k: fit_elo_many(e, cw * m[None, :], y) - full for k, m in (("clean", ~dirty), ("dirty", dirty))}


@pytest.mark.parametrize("block_elements", [None, 350 * 7])
def test_rescore_takes_the_draws_in_blocks_with_the_same_numbers(monkeypatch, block_elements):
    from base_bench.contamination.rescore import rescore
    from base_bench.results import stats

    rep = _report([n % 3 != 0 for n in range(350)])
    scan = _scan(rep, {i["id"] for i in rep["items"][::5]})
    if block_elements is not None:
        monkeypatch.setattr(stats, "BLOCK_ELEMENTS", block_elements)  # blocks of 7 resamples
    got = rescore(rep, scan, resamples=300, seed=99)
    want = _rescore_in_one_matrix(rep, scan, 300, 99)
    for key in ("clean", "dirty"):
        assert got[key]["diff_ci95"] == list(stats.percentile_interval(want[key]))

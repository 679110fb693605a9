"""`base-bench explore` without a browser: the page's numbers against the reports and `compare`, the
data lookup and its refusals, the escaping of untrusted text, the canary, the robots meta and
--redact. tests/test_browser.py opens the page in Chromium."""

import html
import json
import re

import pytest
from explorerun import expected_flips, resummarize, scored_report, write_scored
from test_untrusted import EVIL, one_error

from base_bench import explore
from base_bench.commands.cli import main
from base_bench.commands.compare import build_comparison
from base_bench.items.dataset import BUNDLED_CANARY
from base_bench.items.datasource import open_data
from base_bench.results.explore import build_page, margin, script_json
from base_bench.results.leaderboard import build_leaderboard, render_html, render_markdown
from base_bench.results.reports_io import load_report

from fixtures import records, write_dataset


def page_data(text: str) -> dict:
    m = re.search(r'<script type="application/json" id="bb-data">(.*?)</script>', text, re.S)
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def bundled():
    return open_data("bundled")


@pytest.fixture(scope="module")
def runs(bundled, tmp_path_factory):
    """Three runs on the bundled set: two full ones and one of the first 120 items."""
    root = tmp_path_factory.mktemp("runs")
    reps = {
        "f32": scored_report(bundled, 1, "/m/SmolLM2-135M-Instruct.Q4_1.gguf"),
        "q4": scored_report(bundled, 2, "/m/SmolLM2-135M-Instruct.Q4_1.gguf", backend="llama.cpp", dtype="Q4_1"),
        "part": scored_report(bundled, 3, "org/partial", add_bos=True, limit=120),
    }
    return {k: write_scored(root / k, r) for k, r in reps.items()}


@pytest.fixture(scope="module")
def page(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("page")
    path = explore([runs["f32"], runs["q4"], runs["part"]], out)
    text = path.read_text(encoding="utf-8")
    return {"path": path, "text": text, "data": page_data(text)}


def test_flips_are_compares_and_the_reports(runs, page):
    a, b = load_report(runs["f32"]), load_report(runs["q4"])
    cmp = build_comparison(a, b, resamples=20)
    pair = next(p for p in page["data"]["pairs"] if (p["a"], p["b"]) == (0, 1))
    ids = page["data"]["items"]["id"]
    got_ab = [ids[i] for i in pair["a_right_b_wrong"]]
    got_ba = [ids[i] for i in pair["a_wrong_b_right"]]
    assert got_ab == [f["id"] for f in cmp["flipped"]["a_right_b_wrong"]]
    assert got_ba == [f["id"] for f in cmp["flipped"]["a_wrong_b_right"]]
    assert (len(got_ab), len(got_ba)) == (cmp["mcnemar"]["a_right_b_wrong"], cmp["mcnemar"]["a_wrong_b_right"])
    assert pair["p"] == cmp["mcnemar"]["p"] and pair["discordant"] == cmp["mcnemar"]["discordant"]
    assert (got_ab, got_ba) == expected_flips(a, b) and got_ab and got_ba


def test_a_pair_compare_refuses_says_why(page):
    """The partial run has 120 of 350 items: compare refuses it with either full run, and so does the page."""
    refused = [p for p in page["data"]["pairs"] if p["b"] == 2]
    assert len(refused) == 2 and all("different items" in p["refused"] for p in refused)


def test_per_choice_numbers_are_the_reports(runs, page):
    d = page["data"]
    row = {i: n for n, i in enumerate(d["items"]["id"])}
    for k, name in enumerate(("f32", "q4", "part")):
        run = d["runs"][k]
        rep = load_report(runs[name])
        for it in rep["items"]:
            r = row[it["id"]]
            means = [c["mean_logprob"] for c in it["choices"]]
            assert run["mean"][r] == means and run["logprob"][r] == [c["logprob"] for c in it["choices"]]
            assert run["ntok"][r] == [c["n_tokens"] for c in it["choices"]]
            assert run["pred"][r] == it["prediction"] and run["correct"][r] is it["correct"]
            others = [m for j, m in enumerate(means) if j != it["prediction"]]
            assert run["margin"][r] == means[it["prediction"]] - max(others) >= 0
        assert sum(x is not None for x in run["pred"]) == len(rep["items"])
    assert d["runs"][2]["pred"][200] is None  # not scored by the partial run


def test_rows_and_flags_follow_the_data_file(bundled, runs, page):
    d = page["data"]
    assert d["items"]["id"] == [it.id for it in bundled.dataset.items]
    assert d["items"]["context"][0] == bundled.dataset.items[0].context
    assert d["items"]["label"] == [it.label for it in bundled.dataset.items]
    assert d["items"]["tags"][0] == ["idiom"]  # the item's own tags; the canary tag is on top of the page
    reps = [load_report(runs[k]) for k in ("f32", "q4", "part")]
    by = [{it["id"]: it for it in r["items"]} for r in reps]
    for n, i in enumerate(d["items"]["id"]):
        scored = [b[i] for b in by if i in b]
        assert d["items"]["disagree"][n] == (len({s["prediction"] for s in scored}) > 1)
        assert d["items"]["all_wrong"][n] == (not any(s["correct"] for s in scored))
    assert 0 < sum(d["items"]["disagree"]) < 350 and 0 < sum(d["items"]["all_wrong"]) < 350


def test_header_labels_each_run(page):
    runs = page["data"]["runs"]
    assert [(r["name"], r["dtype"], r["backend"], r["bos"], r["data"]) for r in runs] == [
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "float32", "transformers", "no BOS", "bundled set"),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1", "llama.cpp", "no BOS", "bundled set"),
        ("org/partial", "float32", "transformers", "+BOS", "bundled set"),
    ]
    table = page["text"][page["text"].index('<table class="runs"') : page["text"].index("</table>")]
    for r in runs:
        assert f"{r['elo']:.1f}" in table and f"{r['elo_ci95'][0]:.0f}–{r['elo_ci95'][1]:.0f}" in table


def test_the_page_carries_the_canary_robots_terms_and_a_strict_policy(page):
    text = page["text"]
    assert BUNDLED_CANARY in text
    assert '<meta name="robots" content="noindex, noarchive">' in text
    assert "Do not publish this page" in text and "keep them out of training data" in text
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', text).group(1)
    assert "default-src &#x27;none&#x27;" in csp and "connect-src &#x27;none&#x27;" in csp
    assert not re.search(r"https?://|<link|<img|<iframe|\bsrc=|\bhref=", text)
    assert len(re.findall(r"<script\b", text)) == 2  # the JSON block and the page's own script


def test_script_json_cannot_end_the_script_element():
    evil = {"a": "</script><script>alert(1)</script><!-- & \u2028\u2029 \ud800"}
    text = script_json(evil)
    assert not re.search(r"[<>&\u2028\u2029]", text) and text.isascii()
    assert json.loads(text) == evil


def test_hostile_fields_stay_text(tmp_path, capsys):
    recs = records()
    for r in recs[:3]:
        r["context"] = EVIL + " </script><script>alert(2)</script>"
        r["continuations"] = [" " + EVIL + str(k) for k in range(4)]
    path = write_dataset(tmp_path / "evil", recs)
    source = open_data(path)
    rep = scored_report(source, 4, EVIL)
    rep["data"]["description"] = EVIL
    run = write_scored(tmp_path / "run", rep)
    assert main(["explore", str(run), "--data", str(path), "--out-dir", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "explore.html").read_text()
    static, script = text.split('<script type="application/json"', 1)
    assert "<img" not in static and html.escape("<img src=x onerror=alert(1)>") in static
    assert "</script><script>alert" not in text and "alert(2)" in text
    assert page_data(text)["items"]["context"][0] == recs[0]["context"]
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script and "document.write" not in script
    capsys.readouterr()


def test_redact_leaves_no_item_text(bundled, runs, tmp_path, capsys):
    assert main(["explore", str(runs["f32"]), str(runs["q4"]), "--out-dir", str(tmp_path), "--redact"]) == 0
    out = capsys.readouterr().out
    assert "do not publish" in out
    text = (tmp_path / "explore.html").read_text()
    d = page_data(text)
    assert d["redacted"] and not {"context", "continuations", "tags"} & set(d["items"])
    plain = html.unescape(text)
    for it in bundled.dataset.items:
        assert it.context not in plain and json.dumps(it.context)[1:-1] not in text
        for c in it.continuations:
            if len(c.strip()) >= 12:  # shorter ones (" hitch", " a") are words the page's own text may hold
                assert c not in plain and json.dumps(c)[1:-1] not in text, (it.id, c)
    assert BUNDLED_CANARY in text and "noindex, noarchive" in text


def test_cli_prints_that_the_page_must_not_be_published(runs, tmp_path, capsys):
    assert main(["explore", str(runs["f32"]), "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'explore.html'}" in out and "do not publish it" in out
    assert main(["explore", str(runs["f32"]), "--out-dir", str(tmp_path)]) == 2
    assert "already exists" in one_error(capsys.readouterr().err)
    assert main(["explore", str(runs["f32"]), "--out-dir", str(tmp_path), "--force"]) == 0


def test_data_that_is_not_the_runs_is_refused(runs, tmp_path, capsys):
    other = write_dataset(tmp_path / "other")
    assert main(["explore", str(runs["f32"]), "--data", str(other), "--out-dir", str(tmp_path / "o")]) == 2
    err = one_error(capsys.readouterr().err)
    assert "is not the data file the runs scored" in err and not (tmp_path / "o").exists()


def test_runs_on_other_data_need_data(tmp_path, capsys):
    path = write_dataset(tmp_path / "gen")
    run = write_scored(tmp_path / "run", scored_report(open_data(path), 5, "org/x"))
    assert main(["explore", str(run), "--out-dir", str(tmp_path / "o")]) == 2
    assert "not the bundled set; give that file with --data PATH" in one_error(capsys.readouterr().err)
    assert main(["explore", str(run), "--data", str(path.parent.parent), "--out-dir", str(tmp_path / "o")]) == 0


def test_runs_on_two_data_files_are_refused(runs, tmp_path, capsys):
    path = write_dataset(tmp_path / "gen")
    run = write_scored(tmp_path / "run", scored_report(open_data(path), 5, "org/x"))
    assert main(["explore", str(runs["f32"]), str(run), "--out-dir", str(tmp_path / "o")]) == 2
    assert "different data files" in one_error(capsys.readouterr().err)


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda it: it.update(id="no-such-item"), "is not in the data file"),
        (
            lambda it: it.update(label=(it["label"] + 1) % 4, correct=it["prediction"] == (it["label"] + 1) % 4),
            "is not the data file's",
        ),
        (
            lambda it: it.update(category="commonsense", item_elo=900.0, point_weight=1.65, difficulty="medium"),
            "in the data file",
        ),
        (lambda it: it.update(prediction=7), "prediction is not the index of one of its 4 choices"),
        (lambda it: it["choices"].pop(), "3 choice scores for 4 continuations"),
    ],
    ids=["id", "label", "category", "prediction", "choices"],
)
def test_a_report_that_does_not_fit_its_data_is_refused(bundled, tmp_path, capsys, change, words):
    rep = scored_report(bundled, 6, "org/x", limit=20)
    change(rep["items"][0])
    resummarize(rep)  # consistent with itself, so that only the data file can tell
    run = write_scored(tmp_path / "run", rep)
    assert main(["explore", str(run), "--out-dir", str(tmp_path / "o")]) == 2
    assert words in one_error(capsys.readouterr().err) and not (tmp_path / "o").exists()


def test_margin_is_over_the_runner_up():
    assert margin([-1.0, -3.0, -1.5, -2.0], 0) == 0.5
    assert margin([-2.0, -2.0], 0) == 0.0 and margin([-1.0], 0) is None


def test_build_page_reads_report_dicts(bundled):
    rep = scored_report(bundled, 7, "org/x", limit=10)
    page = build_page([rep], bundled.dataset.items, bundled.record, redact=True)
    assert len(page["items"]["id"]) == 10 and page["pairs"] == [] and "context" not in page["items"]


# ---------------------------------------------------------------- the leaderboard's backend column


def test_leaderboard_has_a_backend_column(runs):
    reps = [load_report(runs[k]) for k in ("f32", "q4")]
    board = build_leaderboard(reps)
    rows = {r["dtype"]: r for r in board["groups"][0]["rows"]}
    assert rows["float32"]["backend"] == "transformers" and rows["Q4_1"]["backend"] == "llama.cpp"
    md = render_markdown(board, [{"category": "c.png", "calibration": "k.png"}])
    head = next(line for line in md.splitlines() if "| model |" in line)
    assert "| model | backend | Overall Elo |" in head
    assert "| llama.cpp |" in md and "| transformers |" in md
    page = render_html(board, [{"category": b"", "calibration": b""}])
    assert "<th>backend</th>" in page and "<td>llama.cpp</td>" in page and 'class="label"' in page


@pytest.mark.parametrize(
    "given, shown", [(None, "transformers"), ("vllm", "vLLM"), ("server", "server"), ("llama.cpp", "llama.cpp")]
)
def test_backend_names(given, shown):
    from base_bench.results.reports_io import backend_name

    assert backend_name(given) == shown

"""explore.html and leaderboard.html in a real browser: Debian's headless Chromium, driven by
Selenium (tests/browser.py). The pages are opened from disk; every filter's row count is checked
against the reports (and the flip filter against `compare`), a hostile field must render as text,
the page must make no request, and the leaderboard must fit a 1400 px window; the item × step grid
of 350 items by 100 checkpoints is drawn on its canvas, sorts as `steps_grid.sort_rows` does and
keeps the page small. Skipped where
Chromium is not installed, a failure under CI=1 (.ci/run installs it).

With BASE_BENCH_DOCS_SHOTS=1 the screenshot for docs/exploring.md is written to docs/explore.png
(from generated items, not the benchmark's)."""

import math
import os
import shutil
from pathlib import Path

import pytest
from browser import chromium_driver, missing, open_page, requests, wait_for
from explorerun import checkpoint_reports, expected_flips, scored_report, write_scored
from test_untrusted import EVIL

from base_bench import explore
from base_bench.commands.cli import main
from base_bench.commands.compare import build_comparison
from base_bench.items import card
from base_bench.items.datasource import open_data
from base_bench.results.explore import build_page
from base_bench.results.reports_io import load_report
from base_bench.results.steps_grid import forgotten, learned_at, sort_rows

from fixtures import record, records, write_dataset

# slow: each test starts a Chromium (a few seconds each on 2 cores)
pytestmark = pytest.mark.slow(reason="a browser: each test starts a Chromium")

ROOT = Path(__file__).resolve().parents[1]
_why = missing()
if _why:
    if os.environ.get("CI"):
        raise RuntimeError(f"CI: not installed: {_why}")  # .ci/run installs them; a skip would hide it
    pytest.skip(f"not installed: {_why}", allow_module_level=True)


@pytest.fixture(scope="module")
def driver():
    with chromium_driver(1400, 1000) as d:
        yield d


@pytest.fixture(scope="module")
def bundled_runs(tmp_path_factory):
    source = open_data("bundled")
    root = tmp_path_factory.mktemp("runs")
    reps = [
        scored_report(source, 1, "/m/SmolLM2-135M-Instruct.Q4_1.gguf"),
        scored_report(source, 2, "/m/SmolLM2-135M-Instruct.Q4_1.gguf", backend="llama.cpp", dtype="Q4_1"),
        scored_report(source, 3, "org/partial", limit=120),
    ]
    runs = [write_scored(root / f"r{k}", r) for k, r in enumerate(reps)]
    page = explore(runs, root / "page")
    return {"runs": runs, "reports": [load_report(r) for r in runs], "page": page, "source": source}


def js(driver, script, *args):
    return driver.execute_script(script, *args)


def choose(driver, control_id: str, value) -> None:
    js(
        driver,
        "var s = document.getElementById(arguments[0]); s.value = arguments[1];s.dispatchEvent(new Event('change'));",
        control_id,
        str(value),
    )


def tick(driver, control_id: str, on: bool) -> None:
    js(
        driver,
        "var c = document.getElementById(arguments[0]); if (c.checked !== arguments[1]) c.click();",
        control_id,
        on,
    )


def matches(driver) -> int:
    return int(js(driver, "return document.getElementById('status').dataset.matches"))


def shown_ids(driver) -> list[str]:
    """The item ids of every row that matches, page after page (500 a page)."""
    choose(driver, "f-size", 500)
    choose(driver, "f-size", 500)
    ids = []
    while True:
        ids += js(driver, "return Array.from(document.querySelectorAll('#items tbody')).map(b => b.dataset.id)")
        more = js(
            driver,
            "var b = document.querySelectorAll('#pager-top button')[2]; if (b.disabled) return false; b.click(); return true;",
        )
        if not more:
            return ids


def reset(driver) -> None:
    for cid, v in (
        ("f-category", -1),
        ("f-difficulty", -1),
        ("f-flip", "off"),
        ("f-outcome", "any"),
        ("f-sort", "file"),
    ):
        choose(driver, cid, v)
    for cid in ("f-disagree", "f-allwrong"):
        tick(driver, cid, False)
    search(driver, "")


def search(driver, text: str) -> None:
    js(
        driver,
        "var s = document.getElementById('f-search'); s.value = arguments[0]; s.dispatchEvent(new Event('input'));",
        text,
    )
    # the box filters 120 ms after the last key: wait until the table shows this search
    wait_for(driver, lambda: js(driver, "return document.getElementById('status').dataset.query") == text)


def test_a_request_is_seen(driver, tmp_path):
    """The check that a page makes no request can fail: a page with one image is caught fetching it."""
    page = tmp_path / "img.html"
    page.write_text('<!DOCTYPE html><html><body><img src="x.png" alt="x"></body></html>')
    url = open_page(driver, page, ready=False)
    wait_for(driver, lambda: js(driver, "return document.readyState") == "complete")
    assert requests(driver) == [url, (tmp_path / "x.png").as_uri()]


def test_every_filter_counts_what_the_reports_say(driver, bundled_runs):
    url = open_page(driver, bundled_runs["page"])
    reps, items = bundled_runs["reports"], bundled_runs["source"].dataset.items
    by = [{it["id"]: it for it in r["items"]} for r in reps]
    assert matches(driver) == 350 and len(js(driver, "return document.querySelectorAll('#items tbody')")) == 50
    for k, cat in enumerate(card.CATEGORIES):
        choose(driver, "f-category", k)
        assert matches(driver) == sum(it.category == cat for it in items)
    choose(driver, "f-category", -1)
    for k, diff in enumerate(card.DIFFICULTY_WEIGHTS):
        choose(driver, "f-difficulty", k)
        assert matches(driver) == sum(it.difficulty == diff for it in items) == card.DIFFICULTY_COUNTS[diff]
    choose(driver, "f-category", 2)
    assert matches(driver) == sum(it.difficulty == "hard" and it.category == "world_knowledge" for it in items)
    reset(driver)

    def scored(i):
        return [b[i] for b in by if i in b]

    tick(driver, "f-disagree", True)
    want = [it.id for it in items if len({s["prediction"] for s in scored(it.id)}) > 1]
    assert shown_ids(driver) == want and 0 < len(want) < 350
    reset(driver)
    tick(driver, "f-allwrong", True)
    want = [it.id for it in items if not any(s["correct"] for s in scored(it.id))]
    assert shown_ids(driver) == want and want
    reset(driver)
    choose(driver, "f-outcome-run", 1)
    choose(driver, "f-outcome", "wrong")
    assert matches(driver) == sum(not it["correct"] for it in reps[1]["items"])
    reset(driver)
    word = "the"
    search(driver, word)
    want = [it.id for it in items if word in "\n".join([it.id, it.context, *it.continuations]).lower()]
    assert matches(driver) == len(want) and shown_ids(driver) == want
    search(driver, "language_completion-00")
    assert matches(driver) == 9
    reset(driver)
    assert requests(driver) == [url]  # the whole session on the page: nothing but the page itself


def check_flips(driver, page: Path, a: dict, b: dict) -> tuple[list[str], list[str]]:
    """The flip filter, run 1 against run 2, shows exactly the items `compare` counts as flipped,
    and the paired counts it prints are compare's; returns those items (A right B wrong, A wrong
    B right)."""
    open_page(driver, page)
    cmp = build_comparison(a, b, resamples=20)
    want_ab = [f["id"] for f in cmp["flipped"]["a_right_b_wrong"]]
    want_ba = [f["id"] for f in cmp["flipped"]["a_wrong_b_right"]]
    assert (want_ab, want_ba) == expected_flips(a, b)
    choose(driver, "f-flip-a", 0)
    choose(driver, "f-flip-b", 1)
    counts = js(
        driver, "var s = document.getElementById('pair-counts'); return [s.dataset.ab, s.dataset.ba, s.textContent]"
    )
    assert [int(counts[0]), int(counts[1])] == [cmp["mcnemar"]["a_right_b_wrong"], cmp["mcnemar"]["a_wrong_b_right"]]
    assert f"{len(want_ab) + len(want_ba)} discordant of {len(a['items'])}" in counts[2]
    choose(driver, "f-flip", "ab")
    assert shown_ids(driver) == want_ab
    choose(driver, "f-flip", "ba")
    assert shown_ids(driver) == want_ba
    choose(driver, "f-flip", "both")
    order = [it["id"] for it in a["items"]]
    assert shown_ids(driver) == sorted(want_ab + want_ba, key=order.index)
    choose(driver, "f-flip-a", 1)  # B against A: the two lists change places
    choose(driver, "f-flip-b", 0)
    choose(driver, "f-flip", "ab")
    assert shown_ids(driver) == want_ba
    return want_ab, want_ba


def test_the_flip_filter_shows_what_compare_counts(driver, bundled_runs):
    a, b = bundled_runs["reports"][:2]
    check_flips(driver, bundled_runs["page"], a, b)
    choose(driver, "f-flip-a", 1)
    choose(driver, "f-flip-b", 2)  # the partial run: compare refuses the pair, and so does the page
    choose(driver, "f-flip", "ab")
    assert matches(driver) == 0
    assert "different items" in js(driver, "return document.getElementById('pairinfo').textContent")
    choose(driver, "f-flip", "off")


def check_numbers(driver, page: Path, reps: list[dict]) -> int:
    """Every choice's mean log-prob on the page is the report's (its full value in data-mean, four
    decimals shown), the chosen and correct marks and each margin are the reports', and sorting
    by margin orders the items as the first report's margins do; returns the cells checked."""
    open_page(driver, page)
    choose(driver, "f-size", 500)
    cells = js(
        driver,
        "return Array.from(document.querySelectorAll('#items tbody')).map(b => ["
        "b.dataset.id, Array.from(b.querySelectorAll('tr.choice')).map(tr => Array.from(tr.querySelectorAll('td.lp'))"
        ".map(td => [td.dataset.run, td.dataset.mean || null, td.textContent, td.classList.contains('chosen')])),"
        "Array.from(b.querySelectorAll('tr.choice')).map(tr => tr.classList.contains('correct')),"
        "Array.from(b.querySelectorAll('td.sum .margin')).map(m => m.dataset.margin)])",
    )
    by = [{it["id"]: it for it in r["items"]} for r in reps]
    assert len(cells) == len(reps[0]["items"])
    checked = 0
    for item_id, rows, correct, margins in cells:
        label = by[0][item_id]["label"]
        assert correct == [j == label for j in range(4)]
        for j, row in enumerate(rows):
            for k, (tag, mean, text, chosen) in enumerate(row):
                assert tag == f"R{k + 1}"
                it = by[k].get(item_id)
                if it is None:
                    assert mean is None and text == ""
                    continue
                want = it["choices"][j]["mean_logprob"]
                assert float(mean) == want and text.replace("● ", "") == f"{want:.4f}"
                assert chosen == (it["prediction"] == j)
                checked += 1
        for k, m in enumerate(margins):
            it = by[k][item_id]
            means = [c["mean_logprob"] for c in it["choices"]]
            assert float(m) == means[it["prediction"]] - max(x for i, x in enumerate(means) if i != it["prediction"])
    assert checked == sum(len(r["items"]) for r in reps) * 4
    choose(driver, "f-sort", "margin-asc:0")
    first = js(driver, "return Array.from(document.querySelectorAll('#items tbody')).map(b => b.dataset.id)")

    def key(it):
        means = [c["mean_logprob"] for c in it["choices"]]
        return means[it["prediction"]] - max(x for i, x in enumerate(means) if i != it["prediction"])

    order = {it["id"]: n for n, it in enumerate(reps[0]["items"])}
    assert first == sorted(order, key=lambda i: (key(by[0][i]), order[i]))
    return checked


def test_numbers_on_the_page_are_the_reports(driver, bundled_runs):
    assert check_numbers(driver, bundled_runs["page"], bundled_runs["reports"]) == (350 + 350 + 120) * 4


# Two real runs of one model (e.g. SmolLM2 float32 through transformers and its Q4_1 GGUF through
# llama.cpp, both on the bundled set): BASE_BENCH_EXPLORE_RUNS=RUN_A,RUN_B runs the two checks
# above on them. Scoring them takes a real model (minutes), so the suite does not make them.
REAL_RUNS = [r for r in os.environ.get("BASE_BENCH_EXPLORE_RUNS", "").split(",") if r]


@pytest.mark.skipif(len(REAL_RUNS) != 2, reason="BASE_BENCH_EXPLORE_RUNS=RUN_A,RUN_B names no two real runs")
def test_two_real_runs(driver, tmp_path, capsys):
    page = explore(REAL_RUNS, tmp_path / "page")
    reps = [load_report(r) for r in REAL_RUNS]
    ab, ba = check_flips(driver, page, *reps)
    cells = check_numbers(driver, page, reps)
    with capsys.disabled():
        print(
            f"\nreal runs: {len(ab)} right in A only, {len(ba)} right in B only; {cells} choice cells equal the reports"
        )


def test_a_hostile_field_renders_as_text(driver, tmp_path):
    evil = '<img src=x onerror="window.pwned=1">' + EVIL + "</script><script>window.pwned=2</script>"
    recs = records()
    recs[0]["context"] = evil
    recs[0]["continuations"] = [" " + evil + str(k) for k in range(4)]
    recs[0]["id"] = evil
    path = write_dataset(tmp_path / "evil", recs)
    rep = scored_report(open_data(path), 4, "org/" + evil.replace("/", ""))
    rep["data"]["description"] = evil
    run = write_scored(tmp_path / "run", rep)
    assert main(["explore", str(run), "--data", str(path), "--out-dir", str(tmp_path / "out")]) == 0
    url = open_page(driver, tmp_path / "out" / "explore.html")
    search(driver, "onerror")
    assert matches(driver) == 1
    got = js(
        driver,
        "var b = document.querySelector('#items tbody'); return [b.dataset.id, b.querySelector('td.ctx').textContent,"
        "b.querySelector('td.meta .id').textContent, document.querySelector('#runs td.label').textContent,"
        "document.querySelectorAll('img, iframe, object, embed, a').length, window.pwned === undefined,"
        "document.querySelectorAll('script').length]",
    )
    assert got[0] == evil and got[1] == evil and got[2] == evil
    assert got[3] == "org/" + evil.replace("/", "")
    assert got[4] == 0 and got[5] is True and got[6] == 2
    assert requests(driver) == [url]  # an <img src=x> that became markup would have fetched ./x


def test_ten_thousand_items_are_paged(driver, tmp_path):
    recs = [record(cat, ("easy", "medium", "hard")[n % 3], n, n % 4) for cat in card.CATEGORIES for n in range(1, 1431)]
    path = write_dataset(tmp_path / "big", recs)
    source = open_data(path)
    runs = [write_scored(tmp_path / f"r{k}", scored_report(source, k, f"org/m{k}")) for k in range(2)]
    page = explore(runs, tmp_path / "out", data=path)
    open_page(driver, page)
    n = len(recs)
    assert n >= 10_000 and matches(driver) == n
    assert js(driver, "return document.querySelectorAll('#items tbody').length") == 50
    assert (
        js(driver, "return document.querySelector('#pager-top .pos').textContent") == f"page 1 of {math.ceil(n / 50)}"
    )
    js(driver, "document.querySelectorAll('#pager-top button')[3].click()")
    assert js(driver, "return document.querySelectorAll('#items tbody').length") == n - 50 * (math.ceil(n / 50) - 1)
    choose(driver, "f-category", 6)
    assert matches(driver) == 1430 and js(driver, "return document.querySelectorAll('#items tbody').length") == 50
    search(driver, "code_completion-14")
    want = [r["id"] for r in recs if "code_completion-14" in r["id"]]
    assert matches(driver) == len(want) == 41 and shown_ids(driver) == want  # -140 ... -149, -1400 ... -1430


def test_the_leaderboard_fits_1400_px(driver, tmp_path):
    source = open_data("bundled")
    long_path = "/srv/models/SmolLM2-135M-Instruct-finetuned-checkpoint-000123456-merged.Q4_K_M.gguf"
    specs = [
        (long_path, "llama.cpp", "Q4_K_M"),
        ("HuggingFaceTB/SmolLM2-135M-Instruct-with-a-much-longer-hub-name", "vllm", "bfloat16"),
        ("org/served-model", "server", "float16"),
        ("/m/SmolLM2-135M-Instruct.Q4_1.gguf", "transformers", "float32"),
    ]
    runs = [
        write_scored(tmp_path / f"r{k}", scored_report(source, k, s, backend=b, dtype=d, add_bos=k == 1))
        for k, (s, b, d) in enumerate(specs)
    ]
    assert main(["leaderboard", *map(str, runs), "--out-dir", str(tmp_path / "lb")]) == 0
    url = open_page(driver, tmp_path / "lb" / "leaderboard.html", ready=False)
    widths = js(driver, "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert widths[0] <= widths[1], f"sideways scroll: page {widths[0]} px wide in a {widths[1]} px window"
    heads = js(driver, "return Array.from(document.querySelectorAll('table.board th')).map(t => t.textContent)")
    assert heads[:3] == ["#", "model", "backend"]
    backends = js(
        driver, "return Array.from(document.querySelectorAll('table.board td:nth-child(3)')).map(t => t.textContent)"
    )
    assert sorted(backends) == ["llama.cpp", "server", "transformers", "vLLM"]
    title = js(driver, "return Array.from(document.querySelectorAll('table.board td.label')).map(t => t.title)")
    assert any(long_path in t for t in title)  # the whole label and model on hover
    shot = tmp_path / "leaderboard-1400.png"
    driver.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert all(u == url or u.startswith("data:image/png") for u in requests(driver))


def test_docs_screenshot(driver, tmp_path):
    """The picture on docs/exploring.md: generated items (not the benchmark's), two made-up runs,
    the flip filter on. Written to docs/ only with BASE_BENCH_DOCS_SHOTS=1."""
    path = write_dataset(tmp_path / "gen")
    source = open_data(path)
    runs = [
        write_scored(tmp_path / "a", scored_report(source, 11, "example/model-7b", skill=0.45)),
        write_scored(
            tmp_path / "b",
            scored_report(source, 12, "model-7b.Q4_1.gguf", backend="llama.cpp", dtype="Q4_1", skill=0.4),
        ),
    ]
    page = explore(runs, tmp_path / "out", data=path)
    open_page(driver, page)
    choose(driver, "f-flip", "both")
    choose(driver, "f-size", 25)
    assert matches(driver) > 0
    shot = tmp_path / "explore.png"
    driver.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("BASE_BENCH_DOCS_SHOTS"):
        shutil.copyfile(shot, ROOT / "docs" / "explore.png")


# ---------------------------------------------------------------- the item × step grid

N_STEPS = 100
KNOWN = 200  # the row of the one item right at the first checkpoint (and every later one)


@pytest.fixture(scope="module")
def checkpoint_page(tmp_path_factory):
    """350 items × 100 checkpoints of one training run and a run without a step. Each item is
    learned at a drawn step (or never) with a few right/wrong flips on top; at the first checkpoint
    every item but row KNOWN is wrong, so sorting by "learned at" puts KNOWN first."""
    import random

    source = open_data("bundled")
    ids = [it.id for it in source.dataset.items]
    rng = random.Random(5)
    outcomes = {}
    for i in ids:
        start = rng.randrange(1, N_STEPS) if rng.random() < 0.85 else None
        row = [start is not None and k >= start for k in range(N_STEPS)]
        outcomes[i] = [False] + [(not o) if rng.random() < 0.04 else o for o in row[1:]]
    outcomes[ids[KNOWN]] = [True] * N_STEPS
    reps = checkpoint_reports(source, [250 * k for k in range(N_STEPS)], outcomes)
    reps.append(scored_report(source, 9, "org/other", resamples=10))
    root = tmp_path_factory.mktemp("grid")
    page = explore(reps, root / "page")
    data = build_page(reps, source.dataset.items, source.record)
    return {"page": page, "data": data, "reports": reps, "ids": ids, "outcomes": outcomes}


def grid_order(driver) -> list[int]:
    return [int(x) for x in js(driver, "return document.getElementById('grid-canvas').dataset.order").split(",")]


def cell_point(driver, r: int, c: int) -> tuple[float, float]:
    """The page (client) coordinates of the middle of the grid's cell at drawn row r, column c."""
    return js(
        driver,
        "var cv = document.getElementById('grid-canvas'), b = cv.getBoundingClientRect();"
        "var wh = cv.dataset.cell.split('x').map(Number), top = +cv.dataset.top;"
        "return [b.left + arguments[1] * wh[0] + wh[0] / 2, b.top + top + arguments[0] * wh[1] + wh[1] / 2];",
        r,
        c,
    )


def on_cell(driver, event: str, r: int, c: int) -> None:
    x, y = cell_point(driver, r, c)
    js(
        driver,
        "document.getElementById('grid-canvas').dispatchEvent(new MouseEvent(arguments[0], "
        "{clientX: arguments[1], clientY: arguments[2], bubbles: true}));",
        event,
        x,
        y,
    )


def test_the_grid_of_350_items_by_100_checkpoints(driver, checkpoint_page):
    """The grid is drawn on one canvas (pixels of both colours), the page stays a few thousand
    elements, and sorting by learned at / forgotten shows the rows in `sort_rows`' order, in the
    grid and in the list, with the category filter too."""
    url = open_page(driver, checkpoint_page["page"])
    grid, ids = checkpoint_page["data"]["grid"], checkpoint_page["ids"]
    assert len(grid["cols"]) == N_STEPS and grid["left_out"] == [N_STEPS]
    for n, i in enumerate(ids):  # the page's numbers are those of the outcomes the reports were made from
        assert grid["learned"][n] == learned_at(checkpoint_page["outcomes"][i])
        assert grid["forgotten"][n] == forgotten(checkpoint_page["outcomes"][i])
    drawn = js(
        driver,
        "var cv = document.getElementById('grid-canvas'), ctx = cv.getContext('2d');"
        "var d = ctx.getImageData(0, +cv.dataset.top, cv.width, cv.height - cv.dataset.top).data, g = 0, r = 0, w = 0;"
        "for (var p = 0; p < d.length; p += 4) { if (d[p] === 255 && d[p + 1] === 255 && d[p + 2] === 255) w++;"
        " else if (d[p + 1] > d[p]) g++; else if (d[p] > d[p + 1]) r++; }"
        "return [cv.width, cv.height, g, r, w, cv.dataset.rows, cv.dataset.drawMs];",
    )
    width, height, green, red, white, rows, draw_ms = drawn
    assert int(rows) == 350 and width >= 2 * N_STEPS and height >= 350
    assert green > 20_000 and red > 20_000 and white < width * height / 2, drawn
    assert float(draw_ms) >= 0  # the page measures its own drawing (performance.now); not held to a time here
    elements = js(driver, "return document.getElementsByTagName('*').length")
    assert elements < 5000, f"{elements} elements: the grid must not be one element per cell"
    assert js(driver, "return document.querySelectorAll('#grid canvas').length") == 1
    assert js(driver, "return document.querySelectorAll('details.runs:not([open]) #runs').length") == 1  # folded
    assert js(driver, "return document.querySelectorAll('#items th.run').length") == 8  # LIST_RUNS of 101 runs
    note = js(driver, "return document.getElementById('grid-note').textContent")
    assert "no training step" in note and "org/other" in note
    assert grid_order(driver) == list(range(350))

    choose(driver, "f-sort", "learned")
    assert grid_order(driver) == sort_rows(grid, "learned") and grid_order(driver)[0] == KNOWN
    first = js(driver, "return document.querySelector('#items tbody').dataset.id")
    assert first == ids[KNOWN]
    assert "learned at step 0" in js(driver, "return document.querySelector('#items tbody td.meta').textContent")
    choose(driver, "f-sort", "forgotten")
    assert grid_order(driver) == sort_rows(grid, "forgotten")
    choose(driver, "f-category", 3)
    in_cat = [n for n, c in enumerate(checkpoint_page["data"]["items"]["category"]) if c == 3]
    assert grid_order(driver) == sort_rows(grid, "forgotten", in_cat) and int(
        js(driver, "return document.getElementById('grid-canvas').dataset.rows")
    ) == len(in_cat)
    choose(driver, "f-sort", "learned")
    assert grid_order(driver) == sort_rows(grid, "learned", in_cat)
    assert (
        js(driver, "return document.querySelector('#items tbody').dataset.id")
        == ids[sort_rows(grid, "learned", in_cat)[0]]
    )
    choose(driver, "f-category", -1)
    choose(driver, "f-sort", "file")
    assert requests(driver) == [url]


def test_a_grid_cell_shows_its_numbers_and_opens_its_item(driver, checkpoint_page):
    open_page(driver, checkpoint_page["page"])
    data, ids = checkpoint_page["data"], checkpoint_page["ids"]
    grid = data["grid"]
    row, col = 301, 77
    run = data["runs"][grid["cols"][col]]
    on_cell(driver, "mousemove", row, col)
    tip = js(
        driver,
        "var t = document.getElementById('grid-tip'); return [t.hidden, t.dataset.row, t.dataset.col, t.textContent]",
    )
    assert tip[:3] == [False, str(row), str(col)]
    word = "right" if run["correct"][row] else "wrong"
    assert ids[row] in tip[3] and f"step {grid['steps'][col]}" in tip[3] and word in tip[3]
    assert f"margin {run['margin'][row]:.4f}" in tip[3] and f"forgotten {grid['forgotten'][row]}" in tip[3]
    context = open_data("bundled").dataset.items[row].context
    assert context[:40] in tip[3]  # a page with the texts shows the item's context in the tooltip
    on_cell(driver, "click", row, col)  # the list opens at the item, with that checkpoint among its columns
    got = js(
        driver,
        "var b = document.querySelector('#items tbody.flash'); return [b.dataset.id,"
        "Array.from(document.querySelectorAll('#items th.run')).map(t => t.dataset.run)]",
    )
    assert got[0] == ids[row] and run["tag"] in got[1] and len(got[1]) == 8
    js(driver, "document.getElementById('grid-canvas').dispatchEvent(new MouseEvent('mouseleave'))")
    assert js(driver, "return document.getElementById('grid-tip').hidden") is True


def test_a_redacted_grid_tooltip_has_no_text(driver, tmp_path):
    source = open_data("bundled")
    reps = checkpoint_reports(source, [10, 20, 30], seed=8)
    page = explore(reps, tmp_path / "out", redact=True)
    open_page(driver, page)
    on_cell(driver, "mousemove", 0, 1)
    tip = js(
        driver,
        "var t = document.getElementById('grid-tip'); return [t.hidden, t.textContent, !!t.querySelector('.ctx')]",
    )
    item = source.dataset.items[0]
    assert tip[0] is False and item.id in tip[1] and "step 20" in tip[1] and not tip[2]
    assert item.context[:20] not in tip[1]
    assert js(driver, "return document.getElementById('f-list-runs')") is None  # three runs: all in the list

"""`base-bench leaderboard` and its plots on small hand-made reports (no model is loaded)."""

import base64
import json
import re
import struct

import matplotlib.image
import pytest
from test_compare import OTHER_SHA, SHA, ids_where, make_report, write_run

from base_bench.commands.cli import main
from base_bench.commands.compare import load_report
from base_bench.items import card
from base_bench.results import plots
from base_bench.results.leaderboard import build_leaderboard, run_labels

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the PNG signature and IHDR chunk."""
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def lb(*args):
    return main(["leaderboard", *map(str, args)])


@pytest.fixture
def runs(tmp_path):
    """Three runs on one data file (Elo order: strong > middle > weak) and one on other data."""
    return {
        "weak": write_run(tmp_path, "weak", make_report(ids_where(lambda i: i % 4 == 0), spec="org/weak")),
        "strong": write_run(
            tmp_path, "strong", make_report(ids_where(lambda i: i % 4 != 0), spec="org/strong", ci=True)
        ),
        "middle": write_run(
            tmp_path, "middle", make_report(ids_where(lambda i: i % 2 == 0), spec="/models/middle.gguf", official=True)
        ),
        "other": write_run(
            tmp_path, "other", make_report(ids_where(lambda i: i % 3 == 0), spec="org/other-data", sha=OTHER_SHA)
        ),
    }


def test_sorted_by_elo_and_na_when_report_lacks_interval(runs):
    board = build_leaderboard([load_report(runs[k]) for k in ("weak", "strong", "middle")])
    assert not board["grouped"] and len(board["groups"]) == 1
    rows = board["groups"][0]["rows"]
    assert [r["label"] for r in rows] == ["org/strong", "middle.gguf", "org/weak"]
    assert [r["rank"] for r in rows] == [1, 2, 3]
    assert rows[0]["elo"] > rows[1]["elo"] > rows[2]["elo"]
    assert rows[0]["elo_ci95"] == [rows[0]["elo"] - 55, rows[0]["elo"] + 65] and rows[2]["elo_ci95"] is None
    assert list(rows[0]["categories"]) == list(card.CATEGORIES)


def test_writes_md_html_and_pngs_with_groups_per_checksum(runs, tmp_path, capsys):
    out = tmp_path / "board"
    assert lb(runs["weak"], runs["other"], runs["strong"], runs["middle"], "--out", out) == 0
    stdout = capsys.readouterr().out
    assert "2 different data files" in stdout and "separate rankings" in stdout
    md = (out / "leaderboard.md").read_text()
    # two labelled tables, never one ranking across checksums
    assert md.count("## Data file ") == 2
    assert f"SHA-256 {SHA[:12]}" in md and f"SHA-256 {OTHER_SHA[:12]}" in md
    first, second = md.split("## Data file 2")
    assert "org/other-data" not in first and "org/other-data" in second
    assert first.index("| 1 | org/strong") < first.index("| 2 | middle.gguf") < first.index("| 3 | org/weak")
    assert "| 1 | org/other-data" in second
    strong_ci = re.search(r"\| 1 \| org/strong \| transformers \| (\d+) \| (\d+)–(\d+) \|", first)
    assert strong_ci and int(strong_ci.group(3)) - int(strong_ci.group(2)) == 120
    assert re.search(r"\| 3 \| org/weak \| transformers \| \d+ \| n/a \|", first)
    assert "| yes |" in first  # the official flag of `middle`

    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == sorted(
        [
            f"calibration-{SHA[:12]}.png",
            f"calibration-{OTHER_SHA[:12]}.png",
            f"category_elo-{SHA[:12]}.png",
            f"category_elo-{OTHER_SHA[:12]}.png",
        ]
    )
    for name in pngs:
        assert f"({name})" in md
    assert png_size((out / f"category_elo-{SHA[:12]}.png").read_bytes()) == plots.category_size(3, 7)
    assert png_size((out / f"calibration-{SHA[:12]}.png").read_bytes()) == plots.calibration_size(3)
    assert png_size((out / f"calibration-{OTHER_SHA[:12]}.png").read_bytes()) == plots.calibration_size(1)
    img = matplotlib.image.imread(out / f"category_elo-{SHA[:12]}.png")
    assert img.shape[:2] == plots.category_size(3, 7)[::-1] and img.std() > 0.05  # decodes, and is not blank

    html = (out / "leaderboard.html").read_text()
    srcs = re.findall(r'src="([^"]*)"', html)
    assert len(srcs) == 4 and all(s.startswith("data:image/png;base64,") for s in srcs)
    for s in srcs:
        assert base64.b64decode(s.split(",", 1)[1])[:8] == PNG_MAGIC
    assert "href=" not in html and "<link" not in html and "<script" not in html  # nothing external
    assert html.count('<table class="board">') == 2 and "org/strong" in html and "separate rankings" in html


def test_strict_refuses_mixed_checksums(runs, tmp_path, capsys):
    out = tmp_path / "board"
    assert lb(runs["weak"], runs["other"], "--out", out, "--strict") == 2
    err = capsys.readouterr().err
    assert err.startswith("base-bench: error: --strict") and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()
    assert lb(runs["weak"], runs["strong"], "--out", out, "--strict") == 0


def test_existing_outputs_need_force(runs, tmp_path, capsys):
    out = tmp_path / "board"
    out.mkdir()
    (out / "leaderboard.html").write_text("keep")
    assert lb(runs["weak"], runs["strong"], "--out", out) == 2
    assert "already exists; add --force" in capsys.readouterr().err
    assert (out / "leaderboard.html").read_text() == "keep" and not (out / "leaderboard.md").exists()
    assert lb(runs["weak"], runs["strong"], "--out", out, "--force") == 0
    assert (out / "leaderboard.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("bad", ["missing", "broken", "no_elo"])
def test_unreadable_run_is_refused_in_one_line(runs, tmp_path, capsys, bad):
    if bad == "missing":
        path = tmp_path / "nope"
    else:
        path = tmp_path / bad
        path.mkdir()
        rep = make_report(ids_where(lambda i: i % 2 == 0))
        del rep["results"]["overall"]["elo"]
        (path / "report.json").write_text("[" if bad == "broken" else json.dumps(rep))
    out = tmp_path / "board"
    assert lb(runs["weak"], path, "--out", out) == 2
    err = capsys.readouterr().err
    assert err.startswith("base-bench: error:") and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_labels_add_dtype_and_bos_only_when_they_differ(tmp_path):
    same = [make_report([True] * 350, spec="org/a"), make_report([False] * 350, spec="org/b")]
    for r, name in zip(same, "ab"):
        r["_path"] = str(tmp_path / name / "report.json")
    assert run_labels(same) == ["org/a", "org/b"]
    mixed = [
        make_report([True] * 350, spec="org/a", dtype="bfloat16"),
        make_report([True] * 350, spec="org/a", dtype="float32", add_bos=True),
    ]
    for r, name in zip(mixed, "cd"):
        r["_path"] = str(tmp_path / name / "report.json")
    assert run_labels(mixed) == ["org/a (bfloat16) no BOS", "org/a (float32) +BOS"]
    twins = [make_report([True] * 350, spec="org/a") for _ in range(2)]
    for r, name in zip(twins, ("run1", "run2")):
        r["_path"] = str(tmp_path / name / "report.json")
    assert run_labels(twins) == ["org/a [run1]", "org/a [run2]"]


def test_calibration_bins_on_the_card_composition():
    rep = make_report(ids_where(lambda i: i % 2 == 0))
    items = rep["items"]
    bins = plots.calibration_bins([i["item_elo"] for i in items], [i["correct"] for i in items], rating=1000.0)
    assert 5 <= len(bins) <= 7
    assert sum(b["n"] for b in bins) == 350 and all(b["n"] >= 25 for b in bins)
    assert all(a["hi"] < b["lo"] for a, b in zip(bins, bins[1:]))
    for b in bins:
        assert b["wilson95"][0] <= b["accuracy"] <= b["wilson95"][1] and 0 < b["expected"] < 1
    few = plots.calibration_bins([1000, 1100], [True, False])
    assert len(few) == 1 and few[0]["n"] == 2


def test_error_bars_prefer_ci_then_se_then_none():
    assert plots.elo_error({"elo": 1000, "elo_ci95": [950, 1070], "elo_se": 1}) == (50, 70)
    lo, hi = plots.elo_error({"elo": 1000, "elo_se": 10})
    assert lo == hi == pytest.approx(19.6, abs=0.01)
    assert plots.elo_error({"elo": 1000}) is None


def test_plot_functions_return_png_bytes_and_save(tmp_path):
    reps = [make_report(ids_where(lambda i: i % 2 == 0), ci=True), make_report(ids_where(lambda i: i % 3 == 0))]
    path = tmp_path / "cat.png"
    data = plots.category_elo_png(reps, ["run one", "run two"], path=path)
    assert path.read_bytes() == data and png_size(data) == plots.category_size(2, 7)
    data = plots.calibration_png(reps, ["run one", "run two"])
    assert png_size(data) == plots.calibration_size(2)
    assert png_size(plots.calibration_png(reps * 2)) == plots.calibration_size(4)  # 3 across, 2 rows

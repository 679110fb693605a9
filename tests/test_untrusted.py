"""Files that someone else made, as an attacker would make them: a report shared for `compare` or
`leaderboard`, a run folder from a tarball, a data file, a corpus, a scan. Each test plants the file
and expects one `base-bench: error:` line (exit 2) or a safe result: nothing written outside the
out-dir, no mixed file, no markup from a field in a Markdown page, no hang, no traceback.

No model is loaded; the reports are hand-made (test_compare.make_report).
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from test_compare import A_RIGHT, B_RIGHT, SHA, make_report, write_run

from base_bench.commands.cli import main
from base_bench.commands.compare import build_comparison
from base_bench.commands.compare import render_markdown as render_compare_md
from base_bench.engine.runstore import LOCK, PARTIAL, RunStore
from base_bench.errors import DataError, ReportError, RunError
from base_bench.items import card
from base_bench.results import plots, reports_io
from base_bench.results.reports_io import load_report, write_atomic

ROOT = Path(__file__).resolve().parents[1]
PRECIOUS = "precious: must not change\n"
EVIL = "<img src=x onerror=alert(1)>\n# Owned\n[click](javascript:alert(1)) | `x` ![i](http://e.example/i.png) *b* _i_"


def one_error(err: str) -> str:
    """The single `base-bench: error:` line of `err` (and no traceback)."""
    lines = [x for x in err.splitlines() if x.startswith("base-bench")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file of the user's, outside every out-dir."""
    p = tmp_path / "home" / "precious.txt"
    p.parent.mkdir()
    p.write_text(PRECIOUS)
    return p


def run_in_child(code: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter; a hang (a FIFO opened for reading) fails the test, not the run."""
    try:
        return subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"blocked for more than {timeout} s")


# ---------------------------------------------------------------- links and temporary files in an out-dir


def test_a_link_planted_at_the_temporary_name_is_never_written_through(tmp_path, victim):
    out = tmp_path / "run"
    out.mkdir()
    for name in ("report.json", "predictions.md", "run_config.json"):
        (out / f"{name}.tmp").symlink_to(victim)
    store = RunStore(out)
    with store.lock():
        store.begin({"k": 1}, {}, resume=False)
        store.write_text("report.json", "{}\n")
        store.write_text("predictions.md", "# p\n")
    assert victim.read_text() == PRECIOUS
    assert (out / "report.json").read_text() == "{}\n" and not (out / "report.json").is_symlink()
    assert json.loads((out / "run_config.json").read_text())["signature"] == {"k": 1}


def test_leaderboard_does_not_write_through_links_at_temporary_names(tmp_path, victim):
    run = write_run(tmp_path, "a", make_report(A_RIGHT))
    out = tmp_path / "lb"
    out.mkdir()
    for name in ("leaderboard.md", "leaderboard.html", f"category_elo-{SHA[:12]}.png", f"calibration-{SHA[:12]}.png"):
        (out / f"{name}.tmp").symlink_to(victim)
    assert main(["leaderboard", str(run), "--out-dir", str(out)]) == 0
    assert victim.read_text() == PRECIOUS
    assert (out / "leaderboard.md").read_text().startswith("# BananaMind")


def test_an_output_that_is_a_link_is_refused_even_with_force(tmp_path, victim, capsys):
    run = write_run(tmp_path, "a", make_report(A_RIGHT))
    out = tmp_path / "lb"
    out.mkdir()
    (out / "leaderboard.md").symlink_to(victim)
    assert main(["leaderboard", str(run), "--out-dir", str(out), "--force"]) == 2
    line = one_error(capsys.readouterr().err)
    assert "leaderboard.md is a symbolic link, not a regular file" in line
    assert victim.read_text() == PRECIOUS and (out / "leaderboard.md").is_symlink()
    assert not (out / "leaderboard.html").exists()


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_lock_file_linked_elsewhere_is_refused_and_left_alone(tmp_path, victim, kind):
    out = tmp_path / "run"
    out.mkdir()
    if kind == "symlink":
        (out / LOCK).symlink_to(victim)
    else:
        os.link(victim, out / LOCK)
    store = RunStore(out)
    with pytest.raises(RunError, match="symbolic link|hard links") as e:
        with store.lock():
            pass
    assert "\n" not in str(e.value)
    with pytest.raises(RunError, match="symbolic link|hard links"):
        store.check({"k": 1}, resume=False)
    assert victim.read_text() == PRECIOUS


@pytest.mark.parametrize("name", [PARTIAL, "report.json", "run_config.json", "predictions.md"])
def test_a_run_file_that_links_outside_is_refused_before_anything_is_written(tmp_path, name):
    out = tmp_path / "run"
    out.mkdir()
    outside = tmp_path / "elsewhere" / "new-file"  # does not exist yet: the link dangles
    outside.parent.mkdir()
    (out / name).symlink_to(outside)
    store = RunStore(out)
    for resume in (False, True):
        with pytest.raises(RunError, match="is a symbolic link, not a regular file") as e:
            store.check({"k": 1}, resume=resume)
        assert "\n" not in str(e.value)
    assert not outside.exists()


def test_a_partial_file_with_a_second_hard_link_is_not_appended_to(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    other = tmp_path / "backup.jsonl"
    other.write_text("")
    os.link(other, out / PARTIAL)
    with pytest.raises(RunError, match="hard links"):
        RunStore(out).check({"k": 1}, resume=True)


@pytest.mark.parametrize("name", [LOCK, PARTIAL, "run_config.json", "report.json"])
def test_a_fifo_in_a_run_folder_is_refused_without_blocking(tmp_path, name):
    out = tmp_path / "run"
    out.mkdir()
    os.mkfifo(out / name)
    res = run_in_child(
        "import sys\nfrom base_bench.engine.runstore import RunStore\nfrom base_bench.errors import RunError\n"
        f"try:\n    RunStore({str(out)!r}).check({{}}, resume=True)\nexcept RunError as e:\n"
        "    print(e)\n    sys.exit(2)\n"
    )
    assert res.returncode == 2, res.stderr[-2000:]
    assert "is a FIFO, not a regular file" in res.stdout and res.stdout.count("\n") == 1


def test_two_writers_at_once_never_publish_a_mixed_file(tmp_path, monkeypatch):
    """Writer A is halfway through its file when writer B writes the same target from start to end."""
    target = tmp_path / "report.json"
    a, b = b"A" * 4096, b"B" * 4096
    real = reports_io.write_all
    calls = []

    def a_then_b_then_a(fd, data):
        calls.append(data[:1])
        if len(calls) == 1:  # writer A: half, then all of writer B, then the rest of A
            real(fd, data[: len(data) // 2])
            write_atomic(target, b)
            real(fd, data[len(data) // 2 :])
        else:
            real(fd, data)

    monkeypatch.setattr(reports_io, "write_all", a_then_b_then_a)
    try:
        write_atomic(target, a)
    except OSError:
        pass  # a writer may fail; it must not publish a mix
    assert target.read_bytes() in (a, b)
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temporary file left


def test_a_written_file_gets_the_mode_a_plain_open_gives(tmp_path):
    """mkstemp makes its file 0600; a report is shared as a plain open would make it (0666 less the umask)."""
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "report.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "report.json").stat().st_mode) == 0o640


def test_temporary_files_a_killed_writer_left_are_removed_by_the_next_run(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "report.json.k3j2h1gf.tmp").write_text("half")  # killed mid-write
    (out / "notes.txt").write_text("mine")
    store = RunStore(out)
    with store.lock():
        store.begin({"k": 1}, {}, resume=False)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "run_config.json"]


def test_a_partial_line_that_is_not_a_whole_result_is_a_damaged_line(tmp_path):
    out = tmp_path / "run"
    store = RunStore(out)
    with store.lock():
        store.begin({"k": 1}, {}, resume=False)
    line = {"id": "x", "choices": [{"logprob": -1.0, "n_tokens": 0}], "prediction": 0, "label": 0}
    (out / PARTIAL).write_text(json.dumps(line) + "\n")  # zero tokens: a division by zero later
    with pytest.raises(RunError, match="line 1 is damaged"):
        RunStore(out).check({"k": 1}, resume=True)


# ---------------------------------------------------------------- fields of a report that name files


BAD_SHAS = ["/../../../xx", "../" * 21 + "x", "A" * 64, "5" * 63, "5" * 65, "g" * 64]


def test_leaderboard_refuses_a_data_sha256_that_is_a_path(tmp_path, capsys):
    run = write_run(tmp_path, "run", make_report(A_RIGHT, sha="/../../../xx"))
    out = tmp_path / "a" / "b" / "lb"
    assert main(["leaderboard", str(run), "--out-dir", str(out)]) == 2
    assert "data.sha256 is not 64 lowercase hex digits" in one_error(capsys.readouterr().err)
    assert not list(tmp_path.rglob("*.png"))


@pytest.mark.parametrize("sha", BAD_SHAS)
@pytest.mark.parametrize("command", ["compare", "leaderboard", "trajectory", "contamination report"])
def test_every_command_that_reads_reports_refuses_a_bad_data_sha256(tmp_path, capsys, command, sha):
    rep = dict(make_report(A_RIGHT, sha=sha), training_step=1)
    run = write_run(tmp_path / "steps", "step-1", rep)
    scan = tmp_path / "scan.json"
    scan.write_text(
        json.dumps({"data": {"sha256": sha}, "items": [{"id": i["id"], "dirty": False} for i in rep["items"]]})
    )
    out = tmp_path / "out"
    argv = {
        "compare": ["compare", str(run), str(run), "--out-dir", str(out)],
        "leaderboard": ["leaderboard", str(run), "--out-dir", str(out)],
        "trajectory": ["trajectory", str(tmp_path / "steps"), "--out-dir", str(out)],
        "contamination report": ["contamination", "report", str(run), "--scan", str(scan), "--out-dir", str(out)],
    }[command]
    assert main(argv) == 2
    assert "data.sha256 is not 64 lowercase hex digits" in one_error(capsys.readouterr().err)
    assert not out.exists()


def test_two_data_files_sharing_their_first_12_hex_digits_get_a_plot_each(tmp_path, capsys):
    sha1, sha2 = "ab" * 6 + "1" * 52, "ab" * 6 + "2" * 52
    runs = [write_run(tmp_path, n, make_report(A_RIGHT, sha=s, spec=n)) for n, s in (("m1", sha1), ("m2", sha2))]
    out = tmp_path / "lb"
    assert main(["leaderboard", *map(str, runs), "--out-dir", str(out)]) == 0
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == 4 and len({p.rsplit("-", 1)[1] for p in pngs}) == 2
    md = (out / "leaderboard.md").read_text()
    assert all(f"]({p})" in md for p in pngs)


def test_the_data_sha256_is_the_only_report_field_in_a_file_name(tmp_path):
    """Labels, ids, categories and paths of a report only ever reach file contents."""
    rep = make_report(A_RIGHT, spec="../../../../x/y", sha=SHA)
    for it in rep["items"]:
        it["id"] = "../" + it["id"]
    run = write_run(tmp_path, "run", rep)
    out = tmp_path / "lb"
    assert main(["leaderboard", str(run), "--out-dir", str(out)]) == 0
    written = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert written == {
        "run/report.json",
        "lb/leaderboard.md",
        "lb/leaderboard.html",
        f"lb/category_elo-{SHA[:12]}.png",
        f"lb/calibration-{SHA[:12]}.png",
    }


# ---------------------------------------------------------------- Markdown built from others' text


class Rendered(HTMLParser):
    """What a Markdown page becomes in a browser: its tags, headings and table rows."""

    def __init__(self, md: str):
        super().__init__()
        self.tags, self.headings, self.tables, self._heading = [], [], [], None
        renderer = MarkdownIt("commonmark").enable(["table", "strikethrough"])
        renderer.validateLink = lambda url: True  # see every link a page makes, safe or not
        self.feed(renderer.render(md))

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if re.fullmatch("h[1-6]", tag):
            self._heading = ""
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append(0)
        elif tag in ("td", "th"):
            self.tables[-1][-1] += 1

    def handle_endtag(self, tag):
        if re.fullmatch("h[1-6]", tag):
            self.headings.append(self._heading)
            self._heading = None

    def handle_data(self, data):
        if self._heading is not None:
            self._heading += data


def assert_inert(md: str, images=()) -> Rendered:
    """Rendered as CommonMark with GFM tables: no tag, link or heading that a field brought in; every
    table row as wide as its header; only the page's own images."""
    page = Rendered(md)
    assert not [t for t, _ in page.tags if t in ("script", "iframe", "svg", "object")]
    assert not [a for _, a in page.tags if any(k.startswith("on") for k in a)]
    assert not [a for t, a in page.tags if t == "a"], "a link from a field"
    assert [a["src"] for t, a in page.tags if t == "img"] == list(images)
    assert not [h for h in page.headings if h.strip().startswith("Owned")]
    assert all(len(set(rows)) == 1 for rows in page.tables), page.tables
    return page


def test_leaderboard_md_escapes_labels_and_the_data_description(tmp_path):
    a = make_report(A_RIGHT, spec=EVIL, dtype=EVIL)
    a["data"]["description"] = EVIL
    b = make_report(B_RIGHT, spec="org/b", dtype="float32")
    runs = [write_run(tmp_path, "a", a), write_run(tmp_path, "b", b)]
    out = tmp_path / "lb"
    assert main(["leaderboard", *map(str, runs), "--out-dir", str(out)]) == 0
    md = (out / "leaderboard.md").read_text()
    assert_inert(md, [f"category_elo-{SHA[:12]}.png", f"calibration-{SHA[:12]}.png"])
    assert "&lt;img src=x onerror=alert(1)&gt;⏎\\# Owned⏎\\[click\\](javascript:alert(1)) \\|" in md


def test_compare_md_escapes_ids_categories_difficulties_and_dtype(tmp_path):
    reps = [make_report(A_RIGHT, dtype=EVIL), make_report(B_RIGHT, dtype="float32")]
    for rep in reps:
        for it in rep["items"]:
            it["id"] = EVIL + it["id"]
            it["selected_text"] = EVIL
    runs = [write_run(tmp_path, n, r) for n, r in zip("ab", reps)]
    md = tmp_path / "cmp.md"
    assert main(["compare", *map(str, runs), "--markdown", str(md), "--resamples", "50"]) == 0
    assert_inert(md.read_text())
    # A report cannot bring its own categories or difficulties (the checked reading refuses any but
    # the card's), but the page escapes them all the same: rendered from reports that were not read.
    for rep in reps:
        for it in rep["items"]:
            it["difficulty"] = EVIL
        for it in rep["items"][:50]:
            it["category"] = EVIL
    assert_inert(render_compare_md(build_comparison(*reps, resamples=50)))


def test_predictions_md_escapes_item_ids_and_texts_from_local_data():
    from base_bench.items.dataset import validate_record
    from base_bench.items.records import ChoiceScore, Item, ItemResult
    from base_bench.results.report import build_report, render_markdown

    from fixtures import records

    items, results = [], {}
    for n, r in enumerate(records()):
        r = dict(r, id=f"{EVIL}-{n}", continuations=[" " + EVIL + str(k) for k in range(4)])
        assert validate_record(r) == []  # a data file may hold all of this
        it = Item(
            **{k: r[k] for k in ("id", "category", "difficulty", "category_weight", "difficulty_weight", "item_elo")},
            context=r["context"],
            continuations=tuple(r["continuations"]),
            label=r["label"],
        )
        items.append(it)
        results[it.id] = ItemResult(it.id, tuple(ChoiceScore(-1.0 - (k == n % 4), 2) for k in range(4)), 0, it.label)
    config = dict(
        model={"spec": EVIL, "revision": EVIL},
        device="cpu",
        dtype="float32",
        add_bos=False,
        batch_size=8,
        scorer="plain",
        runner_version="x",
        bos_note=EVIL,
    )
    data = {"sha256": SHA, "path": EVIL, "description": EVIL}
    rep = build_report(
        config=config, data=data, official=False, reasons=[EVIL], items=items, results=results, bootstrap_resamples=20
    )
    assert_inert(render_markdown(rep))


def test_contamination_md_escapes_item_ids_file_names_document_ids_and_excerpts():
    from base_bench.contamination.render import render_markdown
    from base_bench.contamination.results import build_report

    settings = dict(
        n=8,
        n_rule="r",
        min_gram_words=8,
        normalisation="n",
        dirty_rule="d",
        text_key=EVIL,
        id_key="id",
        executor="local",
        workers=1,
        tasks=1,
        max_documents_per_item=5,
    )
    plan = {
        "data": {"path": EVIL, "kind": "modified", "sha256": SHA},
        "settings": settings,
        "corpus": {"units": [{"unit": 0, "format": "jsonl", "file": EVIL, "bytes": 10}], "ignored": [EVIL]},
        "items": [{"id": EVIL, "category": "c", "difficulty": "easy", "words": 10, "matchable": True}],
        "canaries": [EVIL],
    }
    hit = {
        "unit": 0,
        "file": EVIL,
        "pos": 3,
        "id": EVIL,
        "canary": EVIL,
        "canary_excerpt": EVIL,
        "items": [{"item": 0, "kinds": ["context"], "cover": [[0, 10]], "wrong": [], "excerpt": EVIL}],
    }
    rep = build_report(plan, [hit], [{"unit": 0, "file": EVIL, "error": EVIL}], {})
    assert_inert(render_markdown(rep))


def test_trajectory_rescore_and_probe_pages_escape_what_they_print(tmp_path):
    from base_bench.contamination.probing import render_markdown as probe_md
    from base_bench.contamination.rescore import render_markdown as rescore_md
    from base_bench.contamination.rescore import rescore

    rep = dict(make_report(A_RIGHT, spec=EVIL), training_step=5, non_official_reasons=[EVIL])
    rep["data"]["description"] = EVIL
    write_run(tmp_path / "steps", "step-5", rep)
    assert main(["trajectory", str(tmp_path / "steps")]) == 0
    assert_inert((tmp_path / "steps" / "trajectory.md").read_text(), ["trajectory.png"])
    for it in rep["items"]:
        it["id"] = EVIL + it["id"]
    scan = {"data": {"sha256": SHA}, "settings": {"dirty_rule": EVIL}, "items": []}
    scan["items"] = [{"id": it["id"], "dirty": n % 2 == 0} for n, it in enumerate(rep["items"])]
    assert_inert(rescore_md(dict(rescore(rep, scan, resamples=20), run=EVIL, scan=EVIL)))
    res = {
        "backend": EVIL,
        "prompt": EVIL,
        "true_second_half": EVIL,
        "candidates": 9,
        "seed": 1,
        "true_logprob": -1.0,
        "best_random": EVIL,
        "random_logprob": {"max": -2.0, "median": -3.0, "min": -4.0},
        "rank": 1,
        "p_value": 0.1,
        "verdict": "v",
    }
    assert_inert(probe_md(res, EVIL))


def test_terminal_output_and_errors_carry_no_escape_sequences(tmp_path, capsys):
    esc = "\x1b]0;owned\x07\x1b[2J"
    reps = [make_report(A_RIGHT, spec=esc), make_report(B_RIGHT, spec="org/b")]
    for rep in reps:
        for it in rep["items"]:
            it["id"] = esc + it["id"]
    runs = [write_run(tmp_path, n, r) for n, r in zip("ab", reps)]
    assert main(["compare", *map(str, runs), "--resamples", "20"]) == 0
    assert main(["leaderboard", *map(str, runs), "--out-dir", str(tmp_path / "lb")]) == 0
    out = capsys.readouterr()
    assert "\x1b" not in out.out + out.err and "\\x1b]0;owned" in out.out
    reps[1]["items"][0]["category"] = "other" + esc
    write_run(tmp_path, "b", reps[1])
    assert main(["compare", *map(str, runs)]) == 2
    assert "\x1b" not in one_error(capsys.readouterr().err)


# ---------------------------------------------------------------- sizes, depth and cost


def test_calibration_binning_tries_a_logarithmic_number_of_targets(monkeypatch):
    """50,000 items on 20,000 distinct item Elos: trying every bin size took hours; bisection takes
    about log2(n) greedy passes of linear cost."""
    n, passes = 50_000, []
    real = plots._greedy_bins

    def counted(*args):
        passes.append(1)
        if len(passes) > 40:
            raise AssertionError("more than 40 greedy passes")
        return real(*args)

    monkeypatch.setattr(plots, "_greedy_bins", counted)
    elos = [700.0 + (i % 20_000) * 0.03 for i in range(n)]
    bins = plots.calibration_bins(elos, [i % 3 == 0 for i in range(n)], rating=1000.0)
    assert 1 <= len(bins) <= 7 and sum(b["n"] for b in bins) == n and all(b["n"] >= 25 for b in bins)
    assert len(passes) <= 2 * n.bit_length()


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda r: r["items"].extend(dict(r["items"][0], id=f"x{i}") for i in range(100_001)), "at most 100,000"),
        (lambda r: [it.update(category=f"c{n}") for n, it in enumerate(r["items"])], "is not one of the card's 7"),
    ],
    ids=["items", "categories"],
)
def test_a_report_over_the_caps_is_refused_in_one_line(tmp_path, capsys, change, words):
    rep = make_report(A_RIGHT)
    change(rep)
    run = write_run(tmp_path, "run", rep)
    assert main(["compare", str(run), str(run)]) == 2
    assert words in one_error(capsys.readouterr().err)


def deep(n: int = 100_000) -> str:
    return "[" * n + "]" * n


def test_deeply_nested_or_huge_json_gets_one_line_from_every_reader(tmp_path, capsys):
    good = make_report(A_RIGHT)
    bad_texts = {
        "nested": json.dumps(good).replace('"items": [', '"junk": ' + deep() + ', "items": [', 1),
        "long number": re.sub('"item_elo": [0-9.]+', '"item_elo": ' + "7" * 5000, json.dumps(good), count=1),
    }
    for what, text in bad_texts.items():
        run = tmp_path / what
        run.mkdir()
        (run / "report.json").write_text(text)
        scan = tmp_path / "scan.json"
        scan.write_text(json.dumps({"data": {"sha256": SHA}, "items": []}))
        for argv in (
            ["compare", str(run), str(run)],
            ["leaderboard", str(run), "--out-dir", str(tmp_path / "lb")],
            ["contamination", "report", str(run), "--scan", str(scan)],
        ):
            assert main(argv) == 2, (what, argv)
            one_error(capsys.readouterr().err)
    # a scan's contamination.json
    good_run = write_run(tmp_path, "good", good)
    scan.write_text('{"data": {"sha256": "' + SHA + '"}, "items": ' + deep() + "}")
    assert main(["contamination", "report", str(good_run), "--scan", str(scan)]) == 2
    assert "nested" in one_error(capsys.readouterr().err)
    # a trajectory's step reports
    steps = tmp_path / "steps" / "step-1"
    steps.mkdir(parents=True)
    (steps / "report.json").write_text(bad_texts["nested"])
    assert main(["trajectory", str(tmp_path / "steps")]) == 2
    one_error(capsys.readouterr().err)


@pytest.mark.parametrize("name", ["run_config.json", PARTIAL])
def test_a_deeply_nested_run_file_is_refused_by_resume(tmp_path, name):
    out = tmp_path / "run"
    store = RunStore(out)
    with store.lock():
        store.begin({"k": 1}, {}, resume=False)
    (out / name).write_text(('{"signature": ' + deep() + "}" if name != PARTIAL else deep()) + "\n")
    with pytest.raises(RunError, match="unreadable|damaged") as e:
        RunStore(out).check({"k": 1}, resume=True)
    assert "\n" not in str(e.value)


def test_a_deeply_nested_line_in_a_data_file_is_a_schema_error(tmp_path):
    from base_bench.items.dataset import load_dataset_file

    from fixtures import write_dataset

    path = write_dataset(tmp_path, lines=[deep()])
    with pytest.raises(DataError, match="line 1: not valid JSON \\(nested 100000 levels deep"):
        load_dataset_file(path)


def test_a_report_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "report.json")
    res = run_in_child(
        f"import sys\nfrom base_bench.commands.cli import main\nsys.exit(main(['compare', {str(run)!r}, {str(run)!r}]))"
    )
    assert res.returncode == 2 and "not a regular file (a FIFO)" in one_error(res.stderr)


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r["results"]["categories"]["commonsense"].update(elo="1000"),
        lambda r: r["results"]["overall"].update(elo_ci95={"lo": 1}),
        lambda r: r["config"].update(model="org/m"),
        lambda r: r["items"][0].update(item_elo="800"),
        lambda r: r["items"][0].update(item_elo=float("nan")),
        lambda r: r["items"][0].update(point_weight=0),
        lambda r: r["items"][0].update(correct="yes"),
        lambda r: r["items"][0].update(choices=[1, 2]),
        lambda r: r["items"][0].update(id=["a"]),
        lambda r: r.update(non_official_reasons="x"),
        lambda r: r.update(results=[]),
        lambda r: r["results"]["overall"].update(elo=1e308),
        lambda r: r["results"]["overall"].update(raw_accuracy=2.0),
        lambda r: r.update(training_step=10**300),
        lambda r: r.update(training_step=True),
    ],
)
def test_a_report_with_a_field_of_the_wrong_type_gets_one_line(tmp_path, capsys, change):
    rep = make_report(A_RIGHT, ci=True)
    change(rep)
    run = write_run(tmp_path, "run", rep)
    other = write_run(tmp_path, "other", make_report(B_RIGHT, ci=True))
    for argv in (["compare", str(run), str(other)], ["leaderboard", str(run), "--out-dir", str(tmp_path / "lb")]):
        assert main(argv) == 2
        assert "not a usable base-bench report" in one_error(capsys.readouterr().err)
    with pytest.raises(ReportError):
        load_report(run)


def test_a_dollar_sign_in_a_model_name_is_drawn_as_text(tmp_path):
    run = write_run(tmp_path, "run", make_report(A_RIGHT, spec="org/$\\frac$-{" + "x" * 300))
    assert main(["leaderboard", str(run), "--out-dir", str(tmp_path / "lb")]) == 0
    assert len(list((tmp_path / "lb").glob("*.png"))) == 2


def test_the_caps_are_well_above_the_card():
    assert reports_io.MAX_ITEMS >= 100 * card.ITEMS_PER_CATEGORY * len(
        card.CATEGORIES
    ) and reports_io.MAX_CATEGORIES >= 10 * len(card.CATEGORIES)

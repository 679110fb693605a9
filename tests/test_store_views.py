"""The views read from the results store (`leaderboard`, `trajectory`, `compare`, `explore` with
--store), on a real SQLite file and a real PostgreSQL server (the `store_url` fixture runs each test on
both), and the one rule that names runs in every view (`reports_io.run_names`).

From a store each view gives what it gives from the run folders: the leaderboard's table (the same
leaderboard.md, but for the report paths), the trajectory's points and page, compare's numbers, the
explore page's runs. A selection that matches nothing, a key prefix that names two runs, a server
that cannot be reached and a wrong password are one `base-bench: error:` line, exit code 2, with no
password in it. Run folders given win over $BASE_BENCH_STORE. The reports are made up
(tests/explorerun.py): real items of the bundled set, random scores; no model is loaded."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
from pathlib import Path

import pytest
from explorerun import scored_report, write_scored

from base_bench.commands.cli import main
from base_bench.commands.store import main as store_main
from base_bench.results.labels import Labels
from base_bench.results.report import elo_cell
from base_bench.results.reports_io import run_names
from base_bench.store.ingest import run_key

import storedb

STEPS = (1000, 2000, 3000)
PASSWORD = "notthepassword42"


@pytest.fixture(autouse=True)
def no_store_in_the_environment(monkeypatch):
    monkeypatch.delenv("BASE_BENCH_STORE", raising=False)


@functools.cache
def _bundled():
    from base_bench.items.datasource import open_data

    return open_data("bundled")


@functools.cache
def _made(seed: int, spec: str, labels: tuple) -> dict:
    rep = scored_report(_bundled(), seed=seed, spec=spec, skill=0.2 + 0.05 * seed, resamples=30)
    return Labels.make(*labels).apply(rep) if labels else rep


def made(seed: int, spec: str, group=None, step=None, tokens=None) -> dict:
    """A made-up report of the bundled set (a fresh copy), with these labels in its report.json."""
    labels = (group, step, tokens) if (group, step, tokens) != (None, None, None) else ()
    return copy.deepcopy(_made(seed, spec, labels))


@pytest.fixture
def runs(tmp_path) -> dict[str, Path]:
    """Three checkpoints of one training run, labelled group "pre", step and tokens seen, whose model
    specs all end in "hf"; and an unlabelled run of another checkpoint that also ends in "hf"."""
    root = tmp_path / "runs"
    out = {}
    for k, step in enumerate(STEPS):
        rep = made(k, f"/ckpt/checkpoint-{step}/hf", group="pre", step=step, tokens=step * 4096)
        out[f"c{step}"] = write_scored(root / f"c{step}", rep)
    out["other"] = write_scored(root / "other", made(7, "/elsewhere/checkpoint-1000/hf"))
    return out


def cli(capsys, *args) -> tuple[int, str, str]:
    """`base-bench ARGS` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def ok(capsys, *args) -> str:
    rc, out, err = cli(capsys, *args)
    assert rc == 0, (rc, out, err)
    return out


def one_line(rc: int, out: str, err: str, *words: str) -> str:
    """Exit code 2 and exactly one `base-bench: error:` line on stderr holding each of `words`."""
    assert rc == 2, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("base-bench: error:"), err
    assert "Traceback" not in err and PASSWORD not in out + err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def ingest(capsys, url: str, *folders, extra=()) -> None:
    capsys.readouterr()
    rc = store_main(["ingest", *map(str, folders), "--store", url, "--jobs", "1", *map(str, extra)])
    out, err = capsys.readouterr()
    assert rc == 0 and err == "", (rc, out, err)


def key_of(folder: Path) -> str:
    return run_key(json.loads((Path(folder) / "report.json").read_text()))


def without_report_paths(md: str) -> str:
    return "\n".join(line for line in md.splitlines() if not line.startswith("Reports: "))


# ---------------------------------------------------------------- naming: one rule for every view


def rep(spec: str, path: str | None = None, **kw) -> dict:
    """A report as far as the names look at it."""
    cfg = {"model": {"spec": spec}, "dtype": kw.pop("dtype", "float32"), "add_bos": kw.pop("add_bos", False)}
    if "backend" in kw:
        cfg["backend"] = kw.pop("backend")
    out = {"config": cfg, **kw}
    if path is not None:
        out["_path"] = path
    return out


NAMING = {
    "eight checkpoints ending in hf": (
        [rep(f"ckpt/checkpoint-{n}/hf") for n in range(1000, 9000, 1000)],
        [f"checkpoint-{n}/hf" for n in range(1000, 9000, 1000)],
    ),
    "a Hub id stays whole": ([rep("org/a"), rep("org/b")], ["org/a", "org/b"]),
    "a unique last part stays short": ([rep("/m/one"), rep("/m/two"), rep("x.gguf")], ["one", "two", "x.gguf"]),
    "one more part until they differ": (
        [rep("/a/x/hf"), rep("/b/x/hf"), rep("/c/hf"), rep("/d/other")],
        ["a/x/hf", "b/x/hf", "c/hf", "other"],
    ),
    "labels first": (
        [
            rep("/ckpt/checkpoint-3/hf", group="pre", training_step=3),
            rep("/ckpt/checkpoint-5/hf", group="pre", tokens_seen=5),
            rep("/ckpt/checkpoint-9/hf", group="pre"),  # a group without a step: its spec
            rep("/elsewhere/hf"),
        ],
        ["pre step 3", "pre tokens 5", "checkpoint-9/hf", "elsewhere/hf"],
    ),
    "dtype and BOS where they differ, and the rule": (
        [rep("org/a", dtype="bfloat16"), rep("org/a", add_bos=True), rep("org/a", scoring={"rule": "sum"})],
        ["org/a (bfloat16) no BOS", "org/a (float32) +BOS", "org/a (rescored: sum) (float32) no BOS"],
    ),
    "one model twice: its folder": (
        [rep("org/a", "r/run1/report.json"), rep("org/a", "r/run2/report.json"), rep("org/b", "r/run3/report.json")],
        ["org/a [run1]", "org/a [run2]", "org/b"],
    ),
    "folders alike at their end: one more part": (
        [rep("org/a", "x/a/r/report.json"), rep("org/a", "x/b/r/report.json")],
        ["org/a [a/r]", "org/a [b/r]"],
    ),
    "stored runs: the folder they came from, then the key": (
        [
            rep("org/a", "store:aaaa00000000", _source="/runs/first", _key="aaaa" + "0" * 60),
            rep("org/a", "store:bbbb00000000", _source="/runs/second", _key="bbbb" + "0" * 60),
            rep("org/a", "store:cccc00000000", _source="/runs/first", _key="cccc" + "0" * 60),
        ],
        ["org/a [first] [aaaa00000000]", "org/a [second]", "org/a [first] [cccc00000000]"],
    ),
    "nothing tells them apart: their place": ([rep("org/a"), rep("org/a")], ["org/a #1", "org/a #2"]),
}


@pytest.mark.parametrize("case", list(NAMING))
def test_run_names(case):
    reports, expected = NAMING[case]
    names = run_names(reports)
    assert names == expected
    assert len(set(names)) == len(names)


def test_run_names_beside_columns_leave_settings_to_them():
    """explore's header shows dtype, backend and BOS in columns: runs that differ in them keep the
    same name, and runs that do not are still told apart."""
    beside = ("dtype", "backend", "add_bos")
    two = [rep("/m/a.gguf", "r/1/report.json"), rep("/m/a.gguf", "r/2/report.json", backend="llama.cpp", dtype="Q4_1")]
    assert run_names(two, beside=beside) == ["a.gguf", "a.gguf"]
    assert run_names(two) == ["a.gguf (float32)", "a.gguf (Q4_1)"]
    twins = [rep("/m/a.gguf", "r/1/report.json"), rep("/m/a.gguf", "r/2/report.json")]
    assert run_names(twins, beside=beside) == ["a.gguf [1]", "a.gguf [2]"]
    with pytest.raises(ValueError):
        run_names(twins, beside=("device",))


def test_run_names_of_many_checkpoints_are_distinct():
    reports = [rep(f"/runs/r{i % 7}/checkpoint-{i % 50}/hf", f"out/{i}/report.json") for i in range(300)]
    names = run_names(reports)
    assert len(set(names)) == 300  # 300 specs: "hf" and "checkpoint-K/hf" are alike, "rJ/checkpoint-K/hf" not
    assert names[:2] == ["r0/checkpoint-0/hf", "r1/checkpoint-1/hf"] and not any("[" in n for n in names)


# ---------------------------------------------------------------- leaderboard


def test_leaderboard_from_the_store_has_the_folders_table(store_url, runs, tmp_path, capsys):
    ingest(capsys, store_url, *runs.values())
    folders = ok(capsys, "leaderboard", *runs.values(), "--out-dir", tmp_path / "from-folders")
    stored = ok(capsys, "leaderboard", "--store", store_url, "--out-dir", tmp_path / "from-store")
    assert stored.splitlines()[:-1] == folders.splitlines()[:-1]  # the summary, but for the paths written
    md_f = (tmp_path / "from-folders" / "leaderboard.md").read_text()
    md_s = (tmp_path / "from-store" / "leaderboard.md").read_text()
    assert without_report_paths(md_s) == without_report_paths(md_f)
    assert "`store:" in md_s and "`store:" not in md_f
    for step in STEPS:  # labelled: by group and step; the other run by its spec's last part
        assert f"| pre step {step} |" in md_s
    assert "| hf |" in md_s
    pngs = sorted(p.name for p in (tmp_path / "from-store").glob("*.png"))
    assert pngs == sorted(p.name for p in (tmp_path / "from-folders").glob("*.png")) and len(pngs) == 2


def test_leaderboard_of_a_group_or_tag_and_names_without_labels(store_url, tmp_path, capsys):
    """Unlabelled checkpoints whose specs all end in "hf" get names that tell them apart."""
    folders = [write_scored(tmp_path / f"r{n}", made(n, f"/ckpt/checkpoint-{n}/hf")) for n in range(1, 4)]
    ingest(capsys, store_url, *folders[:2], extra=("--group", "two", "--tag", "smoke"))
    ingest(capsys, store_url, folders[2])
    out = ok(capsys, "leaderboard", "--store", store_url, "--out-dir", tmp_path / "all")
    md = (tmp_path / "all" / "leaderboard.md").read_text()
    assert all(f"| checkpoint-{n}/hf |" in md for n in range(1, 4)), md
    assert "| hf |" not in md and "checkpoint-3/hf" in out
    for flags in (("--group", "two"), ("--tag", "smoke")):
        ok(capsys, "leaderboard", "--store", store_url, *flags, "--out-dir", tmp_path / flags[1])
        md = (tmp_path / flags[1] / "leaderboard.md").read_text()
        assert "checkpoint-1/hf" in md and "checkpoint-2/hf" in md and "checkpoint-3/hf" not in md


def test_folders_win_over_the_environment_and_a_store_flag_with_folders_is_refused(
    store_url, runs, tmp_path, capsys, monkeypatch
):
    ingest(capsys, store_url, runs["c1000"], runs["other"])
    monkeypatch.setenv("BASE_BENCH_STORE", store_url)
    ok(capsys, "leaderboard", runs["c2000"], runs["other"], "--out-dir", tmp_path / "f")
    md = (tmp_path / "f" / "leaderboard.md").read_text()
    assert "store:" not in md and "pre step 2000" in md and "pre step 1000" not in md
    ok(capsys, "leaderboard", "--out-dir", tmp_path / "env")  # no folders: the store of the environment
    md = (tmp_path / "env" / "leaderboard.md").read_text()
    assert "store:" in md and "pre step 1000" in md and "pre step 2000" not in md and "| hf |" in md
    one_line(*cli(capsys, "leaderboard", runs["c1000"], "--store", store_url, "--out-dir", tmp_path / "x"), "not both")
    one_line(*cli(capsys, "trajectory", runs["c1000"].parent, "--store", store_url, "--group", "pre"), "not both")
    one_line(*cli(capsys, "leaderboard", runs["c1000"], "--group", "pre", "--out-dir", tmp_path / "x"), "--group")
    # compare and explore: arguments on disk are folders, else keys of the environment's store
    ok(capsys, "compare", runs["c2000"], runs["other"], "--resamples", "20")
    out = ok(capsys, "compare", key_of(runs["c1000"])[:8], key_of(runs["other"])[:6], "--resamples", "20")
    assert out.startswith("A: pre step 1000,") and "(store:" in out
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------- trajectory


def test_trajectory_of_a_stored_group_has_the_folders_points(store_url, runs, tmp_path, capsys):
    ingest(capsys, store_url, *runs.values())
    train = runs["c1000"].parent  # the folder of every run: "other" has no step and is left out
    for x in ("step", "tokens"):
        f, s = tmp_path / f"folders-{x}", tmp_path / f"store-{x}"
        printed_f = ok(capsys, "trajectory", train, "--x", x, "--out-dir", f)
        rc, printed_s, err = cli(capsys, "trajectory", "--store", store_url, "--group", "pre", "--x", x, "--out-dir", s)
        assert rc == 0 and err == "", err
        assert printed_s.splitlines()[:-1] == printed_f.splitlines()[:-1]
        assert (s / "trajectory.md").read_text() == (f / "trajectory.md").read_text()
        md = (s / "trajectory.md").read_text()
        assert ("| tokens seen |" if x == "tokens" else "| step |") in md
        values = [step * 4096 for step in STEPS] if x == "tokens" else list(STEPS)
        rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", md, re.M)
        assert [int(v) for v, _ in rows] == values
        elos = [json.loads((runs[f"c{st}"] / "report.json").read_text())["results"]["overall"]["elo"] for st in STEPS]
        assert [e.strip() for _, e in rows] == [elo_cell(e) for e in elos]
        assert (s / "trajectory.png").read_bytes()[:4] == b"\x89PNG"


def test_trajectory_uses_the_labels_given_to_ingest_and_notes_runs_without_tokens(store_url, tmp_path, capsys):
    """Unlabelled reports labelled by `store ingest --group --step --tokens`: the store's labels are
    the trajectory's, though the stored report.json stays as it was. A run without tokens seen is left
    out of --x tokens, with a note."""
    for n, step in enumerate(STEPS):
        folder = write_scored(tmp_path / f"s{step}", made(n, f"/ckpt/checkpoint-{step}/hf"))
        tokens = () if step == 3000 else ("--tokens", step * 10)
        ingest(capsys, store_url, folder, extra=("--group", "late", "--step", step, *tokens))
    out = ok(capsys, "trajectory", "--store", store_url, "--group", "late", "--out-dir", tmp_path / "t")
    assert re.findall(r"step +(\d+) ", out) == [str(s) for s in STEPS]
    rc, out, err = cli(
        capsys, "trajectory", "--store", store_url, "--group", "late", "--x", "tokens", "--out-dir", tmp_path / "k"
    )
    assert rc == 0 and re.findall(r"tokens +(\d+) ", out) == ["10000", "20000"]
    assert err.count("\n") == 1 and "1 of 3 run(s) have no tokens_seen" in err


# ---------------------------------------------------------------- compare and explore


def test_compare_by_key_prefix_has_the_folders_numbers(store_url, runs, tmp_path, capsys):
    ingest(capsys, store_url, *runs.values())
    a, b = runs["c1000"], runs["other"]
    ok(capsys, "compare", a, b, "--resamples", "200", "--json", tmp_path / "f.json")
    ka, kb = key_of(a)[:6], key_of(b)[:10]
    out = ok(capsys, "compare", "--store", store_url, ka, kb, "--resamples", "200", "--json", tmp_path / "s.json")
    from_folders = json.loads((tmp_path / "f.json").read_text())
    from_store = json.loads((tmp_path / "s.json").read_text())
    for cmp in (from_folders, from_store):
        for side in ("a", "b"):
            assert cmp[side].pop("report")
    assert from_store == from_folders
    assert from_store["a"]["name"] == "pre step 1000" and from_store["b"]["name"] == "hf"
    assert out.startswith("A: pre step 1000,") and f"(store:{key_of(a)[:12]})" in out


def page_runs(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    return json.loads(re.search(r'<script type="application/json" id="bb-data">(.*?)</script>', text, re.S)[1])["runs"]


def test_explore_a_stored_group_or_keys(store_url, runs, tmp_path, capsys):
    ingest(capsys, store_url, *runs.values())
    ok(capsys, "explore", "--store", store_url, "--group", "pre", "--out-dir", tmp_path / "g")
    got = page_runs(tmp_path / "g" / "explore.html")
    assert [r["name"] for r in got] == [f"pre step {s}" for s in STEPS]  # in step order
    assert [r["report"] for r in got] == [f"store:{key_of(runs[f'c{s}'])[:12]}" for s in STEPS]
    ok(capsys, "explore", *runs.values(), "--out-dir", tmp_path / "f")
    folders = page_runs(tmp_path / "f" / "explore.html")
    keys = [key_of(runs[k])[:8] for k in ("other", "c3000")]
    ok(capsys, "explore", "--store", store_url, *keys, "--out-dir", tmp_path / "k")
    got = page_runs(tmp_path / "k" / "explore.html")
    assert [r["name"] for r in got] == ["hf", "pre step 3000"]  # in the order given
    same = {r["name"]: r for r in folders}
    for r in got:
        for field in ("elo", "elo_ci95", "raw_accuracy", "pred", "correct", "margin"):
            assert r[field] == same[r["name"]][field], field


# ---------------------------------------------------------------- refusals in one line


def _colliding(rep: dict, digits: int = 4) -> tuple[dict, dict]:
    """Two signed versions of `rep` whose run keys share their first `digits`."""
    seen = {}
    for i in range(200_000):
        r = dict(rep, config=dict(rep["config"], signature_sha256=hashlib.sha256(b"%d" % i).hexdigest()))
        k = run_key(r)[:digits]
        if k in seen:
            return seen[k], r
        seen[k] = r
    raise AssertionError("no two keys share a prefix")


def test_a_selection_that_matches_nothing_or_two_runs_is_one_line(store_url, runs, tmp_path, capsys):
    a, b = _colliding(made(5, "org/twin", group="twins", step=1))
    b["training_step"] = 2
    ingest(capsys, store_url, write_scored(tmp_path / "a", a), write_scored(tmp_path / "b", b), runs["c1000"])
    ka, kb = run_key(a), run_key(b)
    common = next(i for i in range(64) if ka[i] != kb[i])
    out = tmp_path / "out"
    store = ("--store", store_url)
    unknown = next(c * 8 for c in "0123456789abcdef" if not (ka.startswith(c * 8) or kb.startswith(c * 8)))
    for args, words in (
        (("leaderboard", *store, "--group", "nope", "--out-dir", out), ("no runs in group 'nope'",)),
        (("leaderboard", *store, "--tag", "nope", "--out-dir", out), ("no runs tagged 'nope'",)),
        (("trajectory", *store, "--group", "nope", "--out-dir", out), ("no runs in group 'nope'",)),
        (("trajectory", *store, "--out-dir", out), ("--group",)),
        (("explore", *store, "--group", "nope", "--out-dir", out), ("no runs in group 'nope'",)),
        (("compare", *store, unknown, ka[:8]), ("no run has a key starting",)),
        (("compare", *store, ka[:common], kb), ("more than one run",)),
        (("explore", *store, kb[:common], "--out-dir", out), ("more than one run",)),
        (("compare", *store, "runs/a", kb), ("not a run key",)),
    ):
        one_line(*cli(capsys, *args), *words)
    assert not out.exists()
    # one digit more names one run: the twins are told apart by their labels
    text = ok(capsys, "compare", *store, ka[: common + 1], kb[: common + 1], "--resamples", "20")
    assert text.startswith("A: twins step 1,") and "\nB: twins step 2," in text


@pytest.mark.parametrize("case", ["wrong password", "unreachable"])
def test_a_store_that_cannot_be_read_is_one_line_without_the_password(postgres_url, tmp_path, capsys, case):
    url = storedb.bad_urls(PASSWORD)[case]
    out = tmp_path / "out"
    for args in (
        ("leaderboard", "--out-dir", out),
        ("trajectory", "--group", "pre", "--out-dir", out),
        ("compare", "abcd", "abce"),
        ("explore", "--group", "pre", "--out-dir", out),
    ):
        line = one_line(*cli(capsys, *args, "--store", url), "postgresql://", ":***@")
        assert ("password authentication failed" if case == "wrong password" else "port 1") in line
    assert not out.exists()


def test_a_missing_sqlite_store_is_one_line_and_not_made(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/none.db"
    one_line(*cli(capsys, "leaderboard", "--store", url, "--out-dir", tmp_path / "o"), "no store there")
    one_line(*cli(capsys, "explore", "--store", url, "abcd", "--out-dir", tmp_path / "o"), "no store there")
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "o").exists()

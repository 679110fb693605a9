"""The results store (base_bench/store, `base-bench store`), on a real SQLite file and a real
PostgreSQL server (the `store_url` fixture runs each test on both): ingest is idempotent, the run's
key (limit, dtype, backend, signature, rule), refusals of reports whose numbers disagree with their
items, export byte for byte, list, rebuild, labels, the items' margins and the choices' lengths, the
schema version and migrations, errors in one line without the password, and a stored report that is
checked again when it is read back. Rows are counted with SQLAlchemy of the tests' own (storerun.py)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import sqlalchemy as sa
from explorerun import resummarize, write_scored
from storerun import N_CHOICES, N_ITEMS, bundled, complete, counts, engine_for, keys, made, signed

from base_bench.commands.store import main as store_main
from base_bench.results.reports_io import load_report
from base_bench.store import open_store, schema
from base_bench.store.ingest import run_key

import storedb

ROOT = Path(__file__).resolve().parents[1]


def cli(capsys, *args) -> tuple[int, str, str]:
    """`base-bench store ARGS` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = store_main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(rc: int, out: str, err: str, *words: str, prefix: str = "base-bench: error: ") -> str:
    """The command failed with exit code 2 and said why in exactly one line on stderr (nothing on
    stdout) that holds each of `words`; that line."""
    assert rc == 2, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), err
    assert out == "", out
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert "Traceback" not in err
    return lines[0]


def ingest(capsys, url, *folders, extra=()) -> str:
    rc, out, err = cli(capsys, "ingest", *folders, "--store", url, "--jobs", "1", *extra)
    assert rc == 0 and err == "", (rc, out, err)
    return out


def listed(capsys, url, *extra) -> list[dict]:
    rc, out, err = cli(capsys, "list", "--store", url, "--json", *extra)
    assert rc == 0 and err == "", (rc, out, err)
    return json.loads(out)["runs"]


def second_store(store_url, tmp_path) -> str:
    """Another empty database of the same kind as `store_url`."""
    if store_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path}/second.db"
    url = storedb.ensure_database(storedb.worker_database() + "_second")
    storedb.empty(url)
    return url


# ---------------------------------------------------------------- ingest: one row per run


def test_ingesting_a_run_twice_stores_it_once_with_all_its_items_and_choices(store_url, tmp_path, capsys):
    rep = made(1)
    run = write_scored(tmp_path / "a", rep)
    assert "stored 1 report(s) as 1 run(s)" in ingest(capsys, store_url, run)
    first = counts(store_url)
    assert "stored 1 report(s) as 1 run(s)" in ingest(capsys, store_url, run)
    n = counts(store_url)
    assert n == first
    assert n["runs"] == 1 and n["reports"] == 1 and n["tags"] == 0 and n["meta"] == 1
    assert n["items"] == N_ITEMS == len(rep["items"])
    assert n["choices"] == N_CHOICES == sum(len(it["choices"]) for it in rep["items"])
    assert n["categories"] == len(rep["results"]["categories"]) > 1
    raw = (run / "report.json").read_bytes()
    with engine_for(store_url) as conn:
        row = conn.execute(sa.text("SELECT key, report_sha256, source, n_items, elo FROM runs")).one()
    assert row.key == run_key(load_report(run))
    assert row.report_sha256 == hashlib.sha256(raw).hexdigest()
    assert row.source == str(run.resolve()) and row.n_items == N_ITEMS
    assert row.elo == rep["results"]["overall"]["elo"]


def test_a_row_keeps_the_versions_and_settings_of_its_run(store_url, tmp_path, capsys):
    rep = made(2)
    rep["config"].update(versions={"python": "3.11.7", "torch": "2.13.0", "odd": 7}, runner_version="0.2.0")
    rep.update(scored_at="2026-12-07T12:00:00+00:00")
    ingest(capsys, store_url, write_scored(tmp_path / "a", rep))
    (run,) = listed(capsys, store_url)
    cfg = run["config"]
    assert cfg["versions"] == {"python": "3.11.7", "torch": "2.13.0"}  # a value that is not a string is left out
    assert cfg["runner_version"] == "0.2.0" and cfg["scoring_version"] == rep["config"]["scoring_version"]
    assert (cfg["backend"], cfg["dtype"], cfg["add_bos"]) == ("transformers", "float32", False)
    assert run["data"] == {"sha256": rep["data"]["sha256"], "kind": "bundled"}
    assert run["scored_at"] == "2026-12-07T12:00:00+00:00" and run["stored_at"] >= "2026-12-07"


def test_ingest_walks_a_folder_for_the_report_json_of_many_runs(store_url, tmp_path, capsys):
    root = tmp_path / "runs"
    where = [root / "a", root / "sweep" / "b", root / "sweep" / "deeper" / "c", root / "d"]
    reps = [made(10 + i, spec=f"org/m{i}") for i in range(len(where))]
    for folder, rep in zip(where, reps):
        write_scored(folder, rep)
    (root / "sweep" / "notes.txt").write_text("not a run")
    (root / "empty").mkdir()
    rc, out, err = cli(capsys, "ingest", root, "--store", store_url, "--jobs", "2")  # two processes
    assert rc == 0 and err == "" and "stored 4 report(s) as 4 run(s)" in out, (rc, out, err)
    n = counts(store_url)
    assert (n["runs"], n["reports"], n["items"], n["choices"]) == (4, 4, 4 * N_ITEMS, 4 * N_CHOICES)
    assert keys(store_url) == sorted(run_key(load_report(f)) for f in where)
    with engine_for(store_url) as conn:
        sources = dict(conn.execute(sa.text("SELECT model, source FROM runs")).all())
    assert sources == {f"org/m{i}": str(f.resolve()) for i, f in enumerate(where)}


# ---------------------------------------------------------------- the key


def test_a_limited_run_and_the_full_run_of_one_model_are_two_rows(store_url, tmp_path, capsys):
    full, part = signed(made(3)), signed(made(3, limit=40))
    assert full["config"]["signature_sha256"] == part["config"]["signature_sha256"]  # --limit is not in it
    ingest(capsys, store_url, write_scored(tmp_path / "full", full), write_scored(tmp_path / "part", part))
    n = counts(store_url)
    assert (n["runs"], n["items"], n["choices"]) == (2, N_ITEMS + 40, N_CHOICES + 160)
    assert sorted(r["n_items"] for r in listed(capsys, store_url)) == [40, N_ITEMS]


@pytest.mark.parametrize("field,value", [("dtype", "bfloat16"), ("backend", "llama_cpp")])
@pytest.mark.parametrize("with_signature", [True, False], ids=["signed", "legacy"])
def test_another_dtype_or_backend_is_another_row_and_other_settings_are_not(
    store_url, tmp_path, capsys, field, value, with_signature
):
    base = made(4)
    other = made(4)
    other["config"][field] = value
    same = made(4)
    same["config"]["batch_size"] = 7  # not in the signature: the same run
    if with_signature:
        base, other, same = signed(base), signed(other), signed(same)
        assert other["config"]["signature_sha256"] != base["config"]["signature_sha256"]
        assert same["config"]["signature_sha256"] == base["config"]["signature_sha256"]
    else:
        assert all("signature_sha256" not in r["config"] for r in (base, other, same))
    folders = [write_scored(tmp_path / name, r) for name, r in (("base", base), ("other", other), ("same", same))]
    out = ingest(capsys, store_url, *folders)
    assert "stored 3 report(s) as 2 run(s)" in out
    n = counts(store_url)
    assert (n["runs"], n["items"], n["choices"], n["reports"]) == (2, 2 * N_ITEMS, 2 * N_CHOICES, 2)
    with engine_for(store_url) as conn:
        values = sorted(conn.execute(sa.text(f"SELECT {field} FROM runs")).scalars())
    assert values == sorted([base["config"][field], value])
    # the base run's row is the last written of the two that share its key: `same`'s report
    exported = tmp_path / "exported"
    rc, _, err = cli(capsys, "export", run_key(load_report(folders[0])), "--store", store_url, "--out-dir", exported)
    assert rc == 0, err
    assert (exported / "report.json").read_bytes() == (folders[2] / "report.json").read_bytes()


def test_a_rescored_report_is_a_row_of_its_own(store_url, tmp_path, capsys):
    from base_bench.results.rescoring import rescore_report

    card = write_scored(tmp_path / "card", signed(made(5)))
    summed = rescore_report(load_report(card), bundled().dataset.items, "sum")
    assert summed["scoring"]["rule"] == "sum"
    rescored = write_scored(tmp_path / "sum", summed)
    ingest(capsys, store_url, card, rescored)
    n = counts(store_url)
    assert (n["runs"], n["items"], n["choices"]) == (2, 2 * N_ITEMS, 2 * N_CHOICES)
    runs = {r.get("scoring", {}).get("rule", "mean"): r for r in listed(capsys, store_url)}
    assert set(runs) == {"mean", "sum"}
    assert runs["sum"]["key"] == run_key(load_report(rescored)) != runs["mean"]["key"]
    assert runs["sum"]["results"]["overall"]["elo"] == summed["results"]["overall"]["elo"]
    assert runs["sum"]["official"] is False


# ---------------------------------------------------------------- refusals


def test_a_report_whose_elo_disagrees_with_its_items_is_refused_and_the_good_one_stored(store_url, tmp_path, capsys):
    bad = made(6, spec="org/bad")
    bad["results"]["overall"]["elo"] += 40.0
    good = made(7, spec="org/good")
    bad_dir, good_dir = write_scored(tmp_path / "bad", bad), write_scored(tmp_path / "good", good)
    rc, out, err = cli(capsys, "ingest", bad_dir, good_dir, "--store", store_url, "--jobs", "1")
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("base-bench: refused: "), err
    assert "results.overall.elo" in lines[0] and "bad" in lines[0]
    assert "stored 1 report(s) as 1 run(s)" in out and "refused 1" in out
    n = counts(store_url)
    assert (n["runs"], n["items"], n["choices"], n["reports"]) == (1, N_ITEMS, N_CHOICES, 1)
    assert keys(store_url) == [run_key(load_report(good_dir))]


# ---------------------------------------------------------------- export


def test_export_writes_back_the_ingested_bytes_and_never_over_a_report(store_url, tmp_path, capsys, monkeypatch):
    from base_bench import redact

    for name in ("_secrets", "_grams", "_pattern"):  # this test's registry of secrets, not the process's
        monkeypatch.setattr(redact, name, type(getattr(redact, name))(getattr(redact, name)))
    redact.register("hunter2-of-the-team")  # a secret this process holds (as the store's password is)
    rep = complete(signed(made(8)))
    # a key the store has no column for, holding that word: the report is written back as it came
    rep["note_from_the_run"] = "kept as it was, hunter2-of-the-team included"
    run = tmp_path / "run"
    run.mkdir()
    # bytes exactly as a writer of its own made them: indented, non-ASCII escaped differently
    (run / "report.json").write_bytes(json.dumps(rep, indent=3, ensure_ascii=True).encode() + b"\n\n")
    ingest(capsys, store_url, run)
    key = run_key(load_report(run))
    out = tmp_path / "out" / "deeper"
    rc, stdout, err = cli(capsys, "export", key[:8].upper(), "--store", store_url, "--out-dir", out)
    assert rc == 0 and err == "", err
    assert key[:12] in stdout
    assert (out / "report.json").read_bytes() == (run / "report.json").read_bytes()
    assert "## Overall Elo" in (out / "predictions.md").read_text(encoding="utf-8")
    # again into the same folder: refused, the file left alone
    (out / "report.json").write_bytes(b"{}")
    one_line(*cli(capsys, "export", key[:8], "--store", store_url, "--out-dir", out), "report.json")
    assert (out / "report.json").read_bytes() == b"{}"


def test_export_of_a_report_without_what_predictions_md_shows_writes_its_report_json(store_url, tmp_path, capsys):
    rep = made(8)  # explorerun's config: no scorer, batch size or runner version, as an older report
    assert "scorer" not in rep["config"]
    run = write_scored(tmp_path / "run", rep)
    ingest(capsys, store_url, run)
    out = tmp_path / "out"
    rc, stdout, err = cli(capsys, "export", run_key(rep), "--store", store_url, "--out-dir", out)
    assert rc == 0 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and "predictions.md not written" in err
    assert (out / "report.json").read_bytes() == (run / "report.json").read_bytes()
    assert not (out / "predictions.md").exists() and "predictions.md" not in stdout


def _colliding(rep: dict, digits: int = 4) -> tuple[dict, dict]:
    """Two signed versions of `rep` (other signatures) whose run keys share their first `digits`."""
    seen = {}
    for i in range(100_000):
        r = dict(rep, config=dict(rep["config"], signature_sha256=hashlib.sha256(b"%d" % i).hexdigest()))
        k = run_key(r)[:digits]
        if k in seen:
            return seen[k], r
        seen[k] = r
    raise AssertionError("no two keys share a prefix")


def test_export_refuses_an_ambiguous_unknown_or_malformed_key_in_one_line(store_url, tmp_path, capsys):
    a, b = _colliding(made(9))
    ingest(capsys, store_url, write_scored(tmp_path / "a", a), write_scored(tmp_path / "b", b))
    ka, kb = run_key(a), run_key(b)
    assert ka != kb and ka[:4] == kb[:4]
    common = next(i for i in range(64) if ka[i] != kb[i])
    out = tmp_path / "out"
    one_line(*cli(capsys, "export", ka[:common], "--store", store_url, "--out-dir", out), "more than one run")
    unknown = next(c * 64 for c in "0123456789abcdef" if c * 64 not in (ka, kb))
    one_line(*cli(capsys, "export", unknown, "--store", store_url, "--out-dir", out), "no run has a key")
    for bad in ("zz12", "abc", ka + "0", "12 4"):
        one_line(*cli(capsys, "export", bad, "--store", store_url, "--out-dir", out), "not a run key")
    assert not out.exists()
    # a prefix one digit longer than the common part names one run
    rc, _, err = cli(capsys, "export", ka[: common + 1], "--store", store_url, "--out-dir", out)
    assert rc == 0, err
    assert (
        json.loads((out / "report.json").read_bytes())["config"]["signature_sha256"] == a["config"]["signature_sha256"]
    )


# ---------------------------------------------------------------- list


def test_list_shows_each_run_with_its_group_step_and_elo(store_url, tmp_path, capsys):
    from base_bench.results.report import elo_cell

    reps = [made(11, spec="org/early"), made(12, spec="org/late"), made(13, spec="org/plain")]
    reps[0].update(group="pretrain-7", training_step=1000, tokens_seen=2_048_000, tags=["ablation", "lr-3e-4"])
    reps[1].update(group="pretrain-7", training_step=2000)
    folders = [write_scored(tmp_path / f"r{i}", r) for i, r in enumerate(reps)]
    ingest(capsys, store_url, *folders)
    by_elo = sorted(range(3), key=lambda i: -reps[i]["results"]["overall"]["elo"])
    runs = listed(capsys, store_url)
    assert [r["key"] for r in runs] == [run_key(load_report(folders[i])) for i in by_elo]
    for r, i in zip(runs, by_elo):
        rep = reps[i]
        assert r["config"]["model"]["spec"] == rep["config"]["model"]["spec"]
        assert r["results"]["overall"]["elo"] == rep["results"]["overall"]["elo"]
        assert r["results"]["overall"]["elo_ci95"] == rep["results"]["overall"]["elo_ci95"]
        assert r["n_items"] == N_ITEMS and r["official"] is False
        assert set(r["results"]["categories"]) == set(rep["results"]["categories"])
        for c, block in rep["results"]["categories"].items():
            assert r["results"]["categories"][c]["elo"] == block["elo"]
        for label in ("group", "training_step", "tokens_seen", "tags"):
            assert r.get(label) == rep.get(label), label
    assert [r["config"]["model"]["spec"] for r in listed(capsys, store_url, "--group", "pretrain-7")] == [
        reps[i]["config"]["model"]["spec"] for i in by_elo if i < 2
    ]
    assert [r["training_step"] for r in listed(capsys, store_url, "--tag", "ablation")] == [1000]

    rc, out, err = cli(capsys, "list", "--store", store_url)
    assert rc == 0 and err == ""
    lines = out.strip().splitlines()
    assert len(lines) == 4 and lines[0].startswith("key")
    for line, i in zip(lines[1:], by_elo):
        rep = reps[i]
        o = rep["results"]["overall"]
        assert line.startswith(run_key(load_report(folders[i]))[:12])
        assert rep["config"]["model"]["spec"] in line
        assert f" {elo_cell(o['elo'])} [{elo_cell(o['elo_ci95'][0])}, {elo_cell(o['elo_ci95'][1])}]" in line
        assert (rep.get("group") or "-") in line.split()
        assert str(rep.get("training_step", "-")) in line.split()
    one_line(*cli(capsys, "list", "--store", store_url, "--group", "nobody"), "no runs", "nobody")


def test_list_on_a_missing_or_empty_store_says_so_in_one_line(store_url, tmp_path, capsys):
    line = one_line(*cli(capsys, "list", "--store", store_url), "store")
    if store_url.startswith("sqlite"):
        assert "no store there" in line
        assert not (tmp_path / "store.db").exists()  # a reader does not make one
    else:
        assert "no base-bench store there yet" in line
        assert counts(store_url)["runs"] is None  # nor tables
    rc, out, err = cli(capsys, "upgrade", "--store", store_url)  # a store with no runs
    assert rc == 0, err
    one_line(*cli(capsys, "list", "--store", store_url), "no runs stored yet")
    one_line(*cli(capsys, "export", "abcd", "--store", store_url, "--out-dir", tmp_path / "o"), "no run has a key")


# ---------------------------------------------------------------- rebuild


def test_rebuild_makes_the_runs_that_ingest_makes_and_refuses_a_store_with_runs(store_url, tmp_path, capsys):
    root = tmp_path / "runs"
    reps = [made(20, spec="org/x"), made(21, spec="org/y"), signed(made(22, spec="org/z", limit=70))]
    reps[1].update(group="g", training_step=3)
    for i, rep in enumerate(reps):
        write_scored(root / f"run{i}", rep)
    ingested = second_store(store_url, tmp_path)
    ingest(capsys, ingested, root)
    rc, out, err = cli(capsys, "rebuild", root, "--store", store_url, "--jobs", "1")
    assert rc == 0 and err == "" and "as 3 run(s)" in out, (rc, out, err)

    def view(url):
        return [
            (r["key"], r["results"]["overall"]["elo"], r["n_items"], r.get("group"), r.get("training_step"))
            for r in listed(capsys, url)
        ]

    assert view(store_url) == view(ingested)
    assert sorted(k for k, *_ in view(store_url)) == sorted(run_key(r) for r in reps)
    assert counts(store_url) == counts(ingested)

    before = counts(store_url)
    more = write_scored(tmp_path / "more" / "run", made(23, spec="org/w"))
    line = one_line(*cli(capsys, "rebuild", more.parent, "--store", store_url, "--jobs", "1"), "3 run(s)")
    assert "rebuild makes a new store" in line
    assert counts(store_url) == before


# ---------------------------------------------------------------- labels


def test_labels_given_to_ingest_label_the_row_and_the_stored_report_stays_as_it_was(store_url, tmp_path, capsys):
    rep = made(30)
    rep.update(group="from-the-run", training_step=5, tokens_seen=10_240, tags=["own"])
    run = write_scored(tmp_path / "run", rep)
    extra = ("--group", "sweep-2", "--step", "7000", "--tag", "x", "--tag", "y")
    ingest(capsys, store_url, run, extra=extra)
    (r,) = listed(capsys, store_url)
    assert (r["group"], r["training_step"], r["tags"]) == ("sweep-2", 7000, ["x", "y"])
    assert r["tokens_seen"] == 10_240  # not given: the report's own
    assert [x["key"] for x in listed(capsys, store_url, "--group", "sweep-2")] == [r["key"]]
    assert [x["key"] for x in listed(capsys, store_url, "--tag", "y")] == [r["key"]]
    one_line(*cli(capsys, "list", "--store", store_url, "--group", "from-the-run"), "no runs")
    one_line(*cli(capsys, "list", "--store", store_url, "--tag", "own"), "no runs")
    with engine_for(store_url) as conn:
        assert sorted(conn.execute(sa.text("SELECT tag FROM tags")).scalars()) == ["x", "y"]
    rc, _, err = cli(capsys, "export", r["key"], "--store", store_url, "--out-dir", tmp_path / "back")
    assert rc == 0, err
    back = tmp_path / "back" / "report.json"
    assert back.read_bytes() == (run / "report.json").read_bytes()
    assert json.loads(back.read_bytes())["group"] == "from-the-run"
    assert counts(store_url)["runs"] == 1


# ---------------------------------------------------------------- items and choices rows


def _rows(url: str, key: str):
    with engine_for(url) as conn:
        run_id = conn.execute(sa.text("SELECT id FROM runs WHERE key = :k"), {"k": key}).scalar_one()
        items = {r.item: r for r in conn.execute(sa.text("SELECT * FROM items WHERE run = :r"), {"r": run_id})}
        choices = {
            (r.item, r.choice): r for r in conn.execute(sa.text("SELECT * FROM choices WHERE run = :r"), {"r": run_id})
        }
    return items, choices


def test_items_hold_the_margin_and_choices_their_scores_and_lengths(store_url, tmp_path, capsys):
    from base_bench.results.rescoring import rescore_report

    card = write_scored(tmp_path / "card", made(40))
    rep = load_report(card)
    summed = rescore_report(rep, bundled().dataset.items, "sum")
    ingest(capsys, store_url, card, write_scored(tmp_path / "sum", summed))
    items, choices = _rows(store_url, run_key(rep))
    assert len(items) == N_ITEMS and len(choices) == N_CHOICES
    picked = rep["items"][:3] + rep["items"][100:103] + [next(it for it in rep["items"] if not it["correct"])]
    for it in picked:
        cs = it["choices"]
        means = [c["logprob"] / c["n_tokens"] for c in cs]  # the card's rule, by hand
        best_other = max(m for i, m in enumerate(means) if i != it["label"])
        row = items[it["id"]]
        assert row.margin == pytest.approx(means[it["label"]] - best_other, rel=1e-12, abs=1e-12)
        assert (row.margin > 0) == it["correct"]
        assert (row.label, row.prediction, bool(row.correct)) == (it["label"], it["prediction"], it["correct"])
        assert (row.category, row.difficulty, bool(row.truncated)) == (
            it["category"],
            it["difficulty"],
            it["truncated"],
        )
        for n, c in enumerate(cs):
            ch = choices[(it["id"], n)]
            assert (ch.logprob, ch.n_tokens) == (c["logprob"], c["n_tokens"])
            assert ch.mean_logprob == pytest.approx(c["mean_logprob"], rel=1e-12)
            assert (ch.n_chars, ch.n_bytes) == (c["n_chars"], c["n_bytes"])
            assert ch.n_chars is not None and ch.n_bytes >= ch.n_chars > 0
    # under the sum rule, the margin is of the summed log-probs
    s_items, _ = _rows(store_url, run_key(summed))
    for it in summed["items"][:5]:
        sums = [c["logprob"] for c in it["choices"]]
        best_other = max(s for i, s in enumerate(sums) if i != it["label"])
        assert s_items[it["id"]].margin == pytest.approx(sums[it["label"]] - best_other, rel=1e-12, abs=1e-12)


def test_choices_of_a_report_without_lengths_get_them_from_the_bundled_set(store_url, tmp_path, capsys):
    full = made(41)
    old = made(41)
    for it in old["items"]:
        for c in it["choices"]:
            del c["n_chars"], c["n_bytes"]
    ingest(capsys, store_url, write_scored(tmp_path / "old", old))
    _, choices = _rows(store_url, run_key(old))
    for it in full["items"]:
        for n, c in enumerate(it["choices"]):
            assert (choices[(it["id"], n)].n_chars, choices[(it["id"], n)].n_bytes) == (c["n_chars"], c["n_bytes"])


# ---------------------------------------------------------------- schema version and migrations


def _set_version(url: str, value: int) -> None:
    with engine_for(url) as conn:
        conn.execute(sa.text("UPDATE meta SET value = :v WHERE name = 'schema_version'"), {"v": str(value)})


def test_a_store_of_a_newer_schema_is_refused_for_reading_and_writing(store_url, tmp_path, capsys):
    ingest(capsys, store_url, write_scored(tmp_path / "a", made(50)))
    _set_version(store_url, schema.SCHEMA_VERSION + 1)
    for args in (("list",), ("list", "--json"), ("ingest", tmp_path / "b", "--jobs", "1"), ("upgrade",)):
        if args[0] == "ingest":
            write_scored(tmp_path / "b", made(51))
        line = one_line(*cli(capsys, *args, "--store", store_url), "newer")
        assert f"version {schema.SCHEMA_VERSION + 1}" in line
    n = counts(store_url)
    assert (n["runs"], n["items"]) == (1, N_ITEMS)


def test_an_older_store_is_refused_until_upgrade_applies_the_migration(store_url, tmp_path, capsys, monkeypatch):
    ingest(capsys, store_url, write_scored(tmp_path / "a", made(52)))  # a store at this version
    now = schema.SCHEMA_VERSION

    def add_note(conn):
        conn.execute(sa.text("ALTER TABLE runs ADD COLUMN note TEXT"))

    monkeypatch.setattr(schema, "SCHEMA_VERSION", now + 1)
    monkeypatch.setattr(schema, "MIGRATIONS", {**schema.MIGRATIONS, now: add_note})
    one_line(*cli(capsys, "list", "--store", store_url), "older", "store upgrade")
    write_scored(tmp_path / "b", made(53, spec="org/other"))
    one_line(*cli(capsys, "ingest", tmp_path / "b", "--store", store_url, "--jobs", "1"), "older", "store upgrade")
    db = open_store(store_url)
    try:
        assert schema.upgrade(db) == (now, now + 1)
        assert schema.upgrade(db) == (now + 1, now + 1)
    finally:
        db.dispose()
    with engine_for(store_url) as conn:
        assert "note" in {c["name"] for c in sa.inspect(conn).get_columns("runs")}
        assert conn.execute(sa.text("SELECT value FROM meta WHERE name = 'schema_version'")).scalar_one() == str(
            now + 1
        )
        assert conn.execute(sa.text("SELECT COUNT(note) FROM runs")).scalar_one() == 0
    (r,) = listed(capsys, store_url)
    assert r["key"] == run_key(made(52))
    ingest(capsys, store_url, tmp_path / "b")
    assert counts(store_url)["runs"] == 2


def test_a_missing_migration_is_said_in_one_line(store_url, tmp_path, capsys, monkeypatch):
    ingest(capsys, store_url, write_scored(tmp_path / "a", made(54)))
    monkeypatch.setattr(schema, "SCHEMA_VERSION", schema.SCHEMA_VERSION + 1)
    monkeypatch.setattr(schema, "MIGRATIONS", {})
    one_line(
        *cli(capsys, "upgrade", "--store", store_url), f"no migration from schema version {schema.SCHEMA_VERSION - 1}"
    )
    monkeypatch.undo()
    assert counts(store_url)["runs"] == 1 and listed(capsys, store_url)


def test_store_upgrade_makes_an_empty_database_a_store(store_url, capsys):
    rc, out, err = cli(capsys, "upgrade", "--store", store_url)
    assert rc == 0 and err == "" and f"made a store at schema version {schema.SCHEMA_VERSION}" in out, (rc, out, err)
    n = counts(store_url)
    assert n == {"runs": 0, "tags": 0, "categories": 0, "items": 0, "choices": 0, "reports": 0, "meta": 1}
    with engine_for(store_url) as conn:
        assert conn.execute(sa.text("SELECT value FROM meta WHERE name = 'schema_version'")).scalar_one() == str(
            schema.SCHEMA_VERSION
        )
    rc, out, err = cli(capsys, "upgrade", "--store", store_url)
    assert rc == 0 and f"at schema version {schema.SCHEMA_VERSION} already" in out


# ---------------------------------------------------------------- errors without secrets

PASSWORD = "wrongpassword99"


@pytest.mark.parametrize("case", ["wrong password", "unreachable"])
def test_a_store_that_cannot_be_reached_is_one_line_without_the_password(postgres_url, tmp_path, capsys, case):
    url = storedb.bad_urls(PASSWORD)[case]
    run = write_scored(tmp_path / "a", made(60))
    for args in (
        ("list",),
        ("ingest", run, "--jobs", "1"),
        ("export", "abcd", "--out-dir", tmp_path / "o"),
        ("upgrade",),
    ):
        rc, out, err = cli(capsys, *args, "--store", url)
        line = one_line(rc, out, err, "postgresql://", ":***@")
        assert PASSWORD not in out + err
        assert ("password authentication failed" if case == "wrong password" else "port 1") in line
    assert not (tmp_path / "o").exists()


def test_the_real_entry_point_says_a_wrong_password_in_one_line(postgres_url):
    url = storedb.bad_urls(PASSWORD)["wrong password"]
    proc = subprocess.run(
        [sys.executable, "-m", "base_bench", "store", "list", "--store", url],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("base-bench: error: postgresql://"), proc.stderr
    assert "Traceback" not in proc.stderr and PASSWORD not in proc.stderr
    assert "password authentication failed" in lines[0]


def test_a_sqlite_store_in_a_missing_folder_is_one_line(tmp_path, capsys):
    run = write_scored(tmp_path / "a", made(61))
    url = f"sqlite:///{tmp_path}/no/such/folder/store.db"
    one_line(*cli(capsys, "ingest", run, "--store", url, "--jobs", "1"), "does not exist")
    one_line(*cli(capsys, "list", "--store", url), "no store there")
    one_line(*cli(capsys, "list", "--store", "mysql://u:p@h/db"), "not a store URL")
    assert not (tmp_path / "no").exists()


# ---------------------------------------------------------------- a stored report is checked again


def _replace_blob(url: str, key: str, blob: bytes) -> None:
    with engine_for(url) as conn:
        run_id = conn.execute(sa.text("SELECT id FROM runs WHERE key = :k"), {"k": key}).scalar_one()
        done = conn.execute(sa.text("UPDATE reports SET report = :b WHERE run = :r"), {"b": blob, "r": run_id})
        assert done.rowcount == 1


def test_a_report_changed_in_the_store_is_refused_when_read_back(store_url, tmp_path, capsys):
    rep = made(70)
    run = write_scored(tmp_path / "a", rep)
    ingest(capsys, store_url, run)
    key = run_key(load_report(run))
    out = tmp_path / "out"

    tampered = json.loads((run / "report.json").read_bytes())
    tampered["results"]["overall"]["elo"] += 100.0
    _replace_blob(store_url, key, zlib.compress(json.dumps(tampered).encode()))
    one_line(*cli(capsys, "export", key[:12], "--store", store_url, "--out-dir", out), "results.overall.elo", key[:12])
    assert not (out / "report.json").exists() and not (out / "predictions.md").exists()

    # an item changed and the results recomputed from the items: consistent, so it reads back
    consistent = json.loads((run / "report.json").read_bytes())
    flipped = next(it for it in consistent["items"] if not it["correct"])
    flipped["prediction"], flipped["correct"] = flipped["label"], True
    resummarize(consistent)
    # ...but its prediction no longer follows its scores: the checked reading sees that too
    _replace_blob(store_url, key, zlib.compress(json.dumps(consistent).encode()))
    one_line(*cli(capsys, "export", key[:12], "--store", store_url, "--out-dir", out), "not a usable")

    _replace_blob(store_url, key, b"not zlib at all")
    one_line(*cli(capsys, "export", key[:12], "--store", store_url, "--out-dir", out), "damaged")
    assert not out.exists() or not any(out.iterdir())

    # the file in the run folder is still the truth: ingest puts the report back
    ingest(capsys, store_url, run)
    rc, _, err = cli(capsys, "export", key[:12], "--store", store_url, "--out-dir", out)
    assert rc == 0, err
    assert (out / "report.json").read_bytes() == (run / "report.json").read_bytes()

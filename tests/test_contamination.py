"""`base-bench contamination scan` on real files in every input format: planted items are found (verbatim,
case and punctuation changed, a line break inside, embedded, context only, answer with the end of its
context, a wrong continuation), clean text and near misses stay clean, the canary is reported, the
result does not depend on the number of workers (the local executor with 2), --write-clean keeps each
file's format, path and fields without the flagged documents, and bad input is one line."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from base_bench.commands.cli import main
from base_bench.contamination.scanner import scan
from base_bench.items.dataset import BUNDLED_CANARY, bundled_path, load_dataset_file

ROOT = Path(__file__).resolve().parents[1]
ITEMS = load_dataset_file(bundled_path()).items
LONG = [it for it in ITEMS if len(it.context.split()) >= 30 and len(it.continuations[it.label].split()) >= 2]
CLEAN_TEXT = [
    "The committee met on Tuesday to review the budget for the coming year and agreed to defer the decision.",
    "Once upon a time, at the end of the day, it goes without saying that the quick brown fox was tired.",
    "To install the package, run the installer and follow the prompts; the defaults suit most systems.",
    "Rain is expected in the north by the evening, with clearer skies in the south later in the week.",
]


def full(it):
    return it.context + it.continuations[it.label]


def wrong(it):
    return next(k for k in range(4) if k != it.label)


def write_corpus(root: Path) -> dict:
    """The planted corpus, in every format; returns {name: (item, where)} of what was planted."""
    e = max(LONG, key=lambda it: len(it.context.split()))  # the answer with 12 context words: < 20% covered
    a, b, c, d, f, g, h, w = [it for it in LONG if it is not e][:8]
    root.mkdir(parents=True)
    (root / "web").mkdir()
    plain = [
        {"text": CLEAN_TEXT[0], "id": "p-0", "url": "https://a.example/0", "score": 0.5},
        {"text": "Reposted: " + full(a) + " Comments (3).", "id": "p-1", "url": "https://a.example/1", "score": 0.9},
        {"text": full(b).upper().replace(",", "").replace(".", "!"), "id": "p-2", "url": "x", "score": 0.1},
        {"text": "Build log.\n" + json.dumps({"tags": [BUNDLED_CANARY]}), "id": "p-3", "url": "y", "score": 0.2},
        {"text": CLEAN_TEXT[1], "id": "p-4", "url": "z", "score": 0.3},
    ]
    (root / "web" / "plain.jsonl").write_text("".join(json.dumps(r) + "\n" for r in plain), encoding="utf-8")
    ctx = c.context.split()
    broken = " ".join(ctx[: len(ctx) // 2]) + "\n\n" + " ".join(ctx[len(ctx) // 2 :]) + c.continuations[c.label]
    near = " ".join(d.context.split()[:8])  # one shared 8-gram: below N = 13, so no match
    gz = [
        {"text": "A long forum thread. " * 30 + broken + " Thanks, that helped. " * 30},
        {"text": "Unrelated: " + near + ". " + CLEAN_TEXT[2]},
        {"text": CLEAN_TEXT[3]},
    ]
    with gzip.open(root / "web" / "thread.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in gz)
    tail = " ".join(e.context.split()[-12:]) + e.continuations[e.label]
    zs = [
        {"text": "Context only: " + d.context},
        {"text": "Quiz answers. ..." + tail + " Next question."},
        {"text": CLEAN_TEXT[0]},
    ]
    (root / "web" / "more.jsonl.zst").write_bytes(
        zstandard.ZstdCompressor().compress("".join(json.dumps(r) + "\n" for r in zs).encode())
    )
    table = pa.table(
        {
            "text": [CLEAN_TEXT[1], "Essay. " + full(f), CLEAN_TEXT[2]],
            "id": [10, 11, 12],
            "lang": ["en", "en", "en"],
            "tokens": [[1, 2], [3], []],
        }
    )
    pq.write_table(table, root / "books.parquet", compression="zstd")
    (root / "pages").mkdir()
    (root / "pages" / "item.txt").write_text("Notes\n" + full(g) + "\n", encoding="utf-8")
    (root / "pages" / "clean.txt").write_text(CLEAN_TEXT[3] + "\n", encoding="utf-8")
    (root / "README.md").write_text("not a corpus file\n", encoding="utf-8")
    from datasets import Dataset
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()
    Dataset.from_dict(
        {
            "text": [CLEAN_TEXT[0], "Q: " + h.context + h.continuations[h.label], CLEAN_TEXT[2]],
            "source": ["s0", "s1", "s2"],
        }
    ).save_to_disk(str(root / "hfds"))
    (root / "wrong.jsonl").write_text(
        json.dumps({"text": w.context + w.continuations[wrong(w)]}) + "\n", encoding="utf-8"
    )
    return {
        "verbatim": (a, "web/plain.jsonl", {"line": 2}),
        "case_punct": (b, "web/plain.jsonl", {"line": 3}),
        "line_break_embedded": (c, "web/thread.jsonl.gz", {"line": 1}),
        "context_only": (d, "web/more.jsonl.zst", {"line": 1}),
        "answer_with_context_end": (e, "web/more.jsonl.zst", {"line": 2}),
        "parquet": (f, "books.parquet", {"row": 1}),
        "txt": (g, "pages/item.txt", {}),
        "datasets": (h, "hfds", {"row": 1}),
        "wrong_continuation": (w, "wrong.jsonl", {"line": 1}),
    }


@pytest.fixture(scope="module")
def scanned(tmp_path_factory):
    base = tmp_path_factory.mktemp("contam")
    planted = write_corpus(base / "corpus")
    rep = scan([str(base / "corpus")], base / "out", data=str(ROOT), workers=2, write_clean=base / "clean")
    return base, planted, rep


@pytest.mark.slow(reason="a real datatrove scan of a planted corpus with worker processes (module fixture, about 30 s)")
def test_every_planted_item_is_found_where_it_was_planted(scanned):
    base, planted, rep = scanned
    by_id = {i["id"]: i for i in rep["items"]}
    for name, (it, rel, where) in planted.items():
        entry = by_id[it.id]
        docs = entry["documents"]
        assert entry["n_documents"] == 1, name
        assert docs[0]["file"] == str(base / "corpus" / rel), name
        assert {k: docs[0][k] for k in ("line", "row") if k in docs[0]} == where, name
        assert docs[0]["excerpt"], name
    for name in ("verbatim", "case_punct", "line_break_embedded", "parquet", "txt", "datasets"):
        entry = by_id[planted[name][0].id]
        assert entry["dirty"] and entry["answer_leaked"] and entry["fraction"] == 1.0, name
        assert entry["llama2"] == ["not clean", "dirty"], name
    ctx_only = by_id[planted["context_only"][0].id]
    assert ctx_only["dirty"] and not ctx_only["answer_leaked"] and 0.8 <= ctx_only["fraction"] < 1.0
    ans = by_id[planted["answer_with_context_end"][0].id]
    it = planted["answer_with_context_end"][0]
    assert ans["dirty"] and ans["answer_leaked"] and ans["llama2"][0] == "clean"
    assert ans["fraction"] == pytest.approx((12 + len(it.continuations[it.label].split())) / ans["words"], abs=0.01)
    w = by_id[planted["wrong_continuation"][0].id]
    assert w["dirty"] and not w["answer_leaked"]  # its context is there, its answer is not
    assert w["wrong_continuations"] == [{"choice": wrong(planted["wrong_continuation"][0]), "documents": 1}]
    planted_ids = {it.id for it, _, _ in planted.values()}
    assert {i["id"] for i in rep["items"] if i["dirty"]} == planted_ids
    assert rep["totals"]["dirty"] == len(planted_ids) == 9
    assert not any(i["wrong_continuations"] for i in rep["items"] if i["id"] != w["id"])


@pytest.mark.slow(reason="a real datatrove scan of a planted corpus with worker processes (module fixture, about 30 s)")
def test_clean_text_and_near_misses_are_not_flagged_and_the_canary_is(scanned):
    base, planted, rep = scanned
    docs = [json.loads(x) for x in (base / "out" / "documents.jsonl").read_text().splitlines()]
    assert len(docs) == rep["totals"]["documents_flagged"] == 10  # 9 planted + the canary-only one
    canary = [d for d in docs if d["canary"]]
    assert len(canary) == 1 and canary[0]["items"] == [] and canary[0]["line"] == 4
    assert rep["canary"]["documents"][0]["file"].endswith("web/plain.jsonl")
    assert "395bed8f-52cb-47dc-a967-31acfca315c0" in rep["canary"]["documents"][0]["excerpt"]
    assert rep["totals"]["documents_scanned"] == 5 + 3 + 3 + 3 + 2 + 3 + 1
    assert rep["corpus"]["ignored"] == [str(base / "corpus" / "README.md")]
    assert {f["format"] for f in rep["corpus"]["files"]} == {"jsonl", "parquet", "txt", "hf"}
    assert all(f["bytes"] > 0 for f in rep["corpus"]["files"])
    assert rep["settings"]["n"] == 13 and rep["settings"]["p5_words"] == 13
    md = (base / "out" / "contamination.md").read_text()
    assert "Llama 2 dirty" in md and planted["verbatim"][0].id in md and "Canary" in md


@pytest.mark.slow(reason="a real datatrove scan of a planted corpus with worker processes (module fixture, about 30 s)")
def test_the_result_does_not_depend_on_workers(scanned, tmp_path):
    base, planted, rep2 = scanned
    rep1 = scan([str(base / "corpus")], tmp_path / "out1", data=str(ROOT), workers=1, tasks=1)
    assert rep2["settings"]["workers"] == 2 and rep2["settings"]["tasks"] > 1
    assert rep1["items"] == rep2["items"] and rep1["canary"] == rep2["canary"]
    assert rep1["totals"] == rep2["totals"]


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


@pytest.mark.slow(reason="a real datatrove scan of a planted corpus with worker processes (module fixture, about 30 s)")
def test_write_clean_keeps_format_path_and_fields_without_the_flagged(scanned):
    base, planted, rep = scanned
    src, dst = base / "corpus", base / "clean"
    plain = _lines((src / "web/plain.jsonl").read_bytes())
    assert _lines((dst / "web/plain.jsonl").read_bytes()) == [plain[0], plain[4]]  # byte for byte
    gz = _lines(gzip.decompress((src / "web/thread.jsonl.gz").read_bytes()))
    assert _lines(gzip.decompress((dst / "web/thread.jsonl.gz").read_bytes())) == gz[1:]
    zs = _lines(zstandard.ZstdDecompressor().decompress((src / "web/more.jsonl.zst").read_bytes()))
    out_zs = zstandard.ZstdDecompressor().decompressobj().decompress((dst / "web/more.jsonl.zst").read_bytes())
    assert _lines(out_zs) == zs[2:]
    t_in, t_out = pq.read_table(src / "books.parquet"), pq.read_table(dst / "books.parquet")
    assert t_out.schema == t_in.schema and t_out.to_pylist() == [t_in.to_pylist()[0], t_in.to_pylist()[2]]
    assert pq.ParquetFile(dst / "books.parquet").metadata.row_group(0).column(0).compression == "ZSTD"
    assert not (dst / "pages/item.txt").exists()
    assert (dst / "pages/clean.txt").read_bytes() == (src / "pages/clean.txt").read_bytes()
    from datasets import load_from_disk

    ds = load_from_disk(str(dst / "hfds"))
    assert ds.column_names == ["text", "source"] and ds["source"] == ["s0", "s2"]
    assert not (dst / "wrong.jsonl").exists() or (dst / "wrong.jsonl").read_text() == ""
    assert not (dst / "README.md").exists()
    # the clean copy scans clean
    again = scan([str(dst)], base / "out-clean", data=str(ROOT))
    assert again["totals"]["dirty"] == 0 and again["totals"]["documents_flagged"] == 0


@pytest.mark.slow(reason="a real datatrove scan of a planted corpus with worker processes (module fixture, about 30 s)")
def test_datatroves_own_filter_runs_on_the_exported_index(scanned):
    from datatrove.data import Document
    from datatrove.pipeline.decont.n_grams import NGramsDecontConfig, NGramsDecontFilter

    from base_bench.contamination.steps import DATATROVE_HASH, IDENTITY_NORM, WordTokenizerGPT3

    base, planted, rep = scanned
    it = planted["verbatim"][0]
    f = NGramsDecontFilter(
        str(base / "out" / "index"),
        NGramsDecontConfig(n_grams=13, find_query_ngrams=True, norm_config=IDENTITY_NORM, hash_config=DATATROVE_HASH),
        language=WordTokenizerGPT3(),
    )
    assert f.filter(Document(text="Reposted: " + full(it).lower(), id="1")) == (False, "contaminated")
    assert f.filter(Document(text=CLEAN_TEXT[0], id="2")) is True


def test_long_documents_are_scanned_in_chunks_without_losing_a_match_at_a_cut(monkeypatch):
    from datatrove.data import Document

    from base_bench.contamination import steps
    from base_bench.contamination.canary import canaries_of
    from base_bench.contamination.index import ItemIndex

    it = LONG[0]
    filler = " ".join(CLEAN_TEXT) + " "
    text = filler * 3 + full(it) + " " + filler * 3 + BUNDLED_CANARY
    filt = steps.ItemNGramFilter(ItemIndex.build(ITEMS), canaries_of(ITEMS))
    whole, guids_whole = filt.scan(text)
    monkeypatch.setattr(steps, "CHUNK", 64)  # cuts every ~64 characters: inside the item many times
    chunked, guids = filt.scan(text)
    assert chunked == whole and guids == guids_whole == ["395bed8f-52cb-47dc-a967-31acfca315c0"]
    assert {filt.index.grams[g].item for g, _ in chunked} == {ITEMS.index(it)}
    res = filt.filter_batch([Document(text=text, id="long"), Document(text=CLEAN_TEXT[0], id="short")])
    assert res == [(False, "benchmark"), True]


# ---------------------------------------------------------------- bad input


def _run_cli(args, capsys):
    code = main(["contamination", "scan", *map(str, args)])
    return code, capsys.readouterr()


@pytest.fixture()
def good(tmp_path):
    p = tmp_path / "good.jsonl"
    p.write_text(json.dumps({"text": "Copied: " + full(LONG[0])}) + "\n" + json.dumps({"text": CLEAN_TEXT[0]}) + "\n")
    return p


def _bad_files(tmp_path: Path) -> dict:
    bad = {}
    p = tmp_path / "badline.jsonl"
    p.write_text(json.dumps({"text": "fine"}) + "\n" + '{"text": "unterminated\n' + json.dumps({"text": "x"}) + "\n")
    bad["line"] = (p, f"{p}: line 2: not valid JSON")
    p = tmp_path / "nokey.jsonl"
    p.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"body": "no text here"}) + "\n")
    bad["key"] = (p, f"{p}: line 2: no 'text' key (keys: body); name the text field with --text-key")
    p = tmp_path / "damaged.jsonl.gz"
    blob = gzip.compress(("".join(json.dumps({"text": CLEAN_TEXT[0]}) + "\n" for _ in range(200))).encode())
    p.write_bytes(blob[: len(blob) // 2])
    bad["gzip"] = (p, f"{p}: cannot be read (EOFError: Compressed file ended before the end-of-stream marker")
    p = tmp_path / "damaged.parquet"
    pq.write_table(pa.table({"text": [CLEAN_TEXT[0]] * 50}), p)
    p.write_bytes(p.read_bytes()[:-30])
    bad["parquet"] = (p, f"{p}: not a readable Parquet file (ArrowInvalid:")
    return bad


@pytest.mark.parametrize("case", ["line", "key", "gzip", "parquet"])
def test_a_bad_file_stops_the_scan_with_one_line_naming_it(case, tmp_path, capsys, good):
    path, message = _bad_files(tmp_path)[case]
    code, cap = _run_cli([good, path, "--local-data", ROOT, "--out-dir", tmp_path / "out"], capsys)
    assert code == 2
    err = cap.err.strip()
    assert "\n" not in err and err.startswith("base-bench: error: " + message), err
    assert "Traceback" not in cap.err + cap.out
    assert not (tmp_path / "out" / "contamination.json").exists()


def test_scan_takes_data_bundled_and_names_it_first(tmp_path, capsys, good):
    """--data bundled is the set in the package (no checkout needed), said on the first line; giving
    --data and --local-data together is refused in one line."""
    from base_bench.items.dataset import BUNDLED_SHA256

    code, cap = _run_cli([good, "--data", "bundled", "--out-dir", tmp_path / "out"], capsys)
    assert code == 0 and cap.out.splitlines()[0].startswith("data: the bundled set (")
    rep = json.loads((tmp_path / "out" / "contamination.json").read_text())
    assert (rep["data"]["source"], rep["data"]["sha256"]) == ("bundled", BUNDLED_SHA256)
    assert rep["totals"]["dirty"] == 1
    code, cap = _run_cli([good, "--data", "bundled", "--local-data", ROOT, "--out-dir", tmp_path / "o2"], capsys)
    assert code == 2 and cap.err == (
        "base-bench: error: give --data or --local-data, not both (--local-data DIR is another spelling of --data DIR)\n"
    )
    assert not (tmp_path / "o2").exists()


def test_executor_options_are_read_as_the_run_reads_model_args(capsys, good, tmp_path):
    code, cap = _run_cli([good, "--data", "bundled", "--out", tmp_path / "o", "--executor-option", "cpus=2=3"], capsys)
    assert code == 2 and "--executor-option cpus: " in cap.err  # "2=3" is text, and the key is checked
    with pytest.raises(SystemExit) as ei:
        _run_cli([good, "--data", "bundled", "--out", tmp_path / "o", "--executor-option", "partition"], capsys)
    assert ei.value.code == 2 and "--executor-option takes KEY=VALUE" in capsys.readouterr().err


def test_missing_path_and_existing_output_are_refused_before_any_work(tmp_path, capsys, good):
    code, cap = _run_cli([good, tmp_path / "nope", "--local-data", ROOT, "--out-dir", tmp_path / "o"], capsys)
    assert code == 2 and cap.err == f"base-bench: error: {tmp_path / 'nope'}: no such file or directory\n"
    assert not (tmp_path / "o").exists()
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "contamination.json").write_text("{}")
    code, cap = _run_cli([good, "--local-data", ROOT, "--out-dir", tmp_path / "o"], capsys)
    assert code == 2 and "already exists" in cap.err and (tmp_path / "o" / "contamination.json").read_text() == "{}"
    code, cap = _run_cli([tmp_path / "x.csv", "--local-data", ROOT, "--out-dir", tmp_path / "o2"], capsys)
    assert code == 2 and "no such file" in cap.err
    (tmp_path / "x.csv").write_text("a,b\n")
    code, cap = _run_cli([tmp_path / "x.csv", "--local-data", ROOT, "--out-dir", tmp_path / "o2"], capsys)
    assert code == 2 and "not a corpus file" in cap.err
    code, cap = _run_cli([good, "--local-data", ROOT, "--out", tmp_path / "o3", "--executor", "slurm"], capsys)
    assert (
        code == 2 and "--executor slurm needs --executor-option partition=... and --executor-option time=..." in cap.err
    )
    code, cap = _run_cli([good, "--local-data", ROOT, "--out", tmp_path / "o3", "--executor-option", "bogus=1"], capsys)
    assert code == 2 and "--executor-option bogus: " in cap.err and "takes none such" in cap.err


def test_skip_bad_notes_every_bad_file_and_scans_the_rest(tmp_path, capsys, good):
    (tmp_path / "bad").mkdir()
    bad = _bad_files(tmp_path / "bad")
    code, cap = _run_cli(
        [
            good,
            tmp_path / "bad",
            "--local-data",
            ROOT,
            "--out-dir",
            tmp_path / "out",
            "--skip-bad",
            "--write-clean",
            tmp_path / "clean",
        ],
        capsys,
    )
    assert code == 0, cap.err
    rep = json.loads((tmp_path / "out" / "contamination.json").read_text())
    skipped = {s["file"]: s["error"] for s in rep["corpus"]["skipped"]}
    assert set(skipped) == {str(p) for p, _ in bad.values()}
    for p, message in bad.values():
        assert skipped[str(p)].startswith(message)
    assert rep["totals"]["files_skipped"] == 4 and rep["totals"]["dirty"] == 1
    assert "skipped 4 bad file(s)" in cap.out
    assert sorted(p.name for p in (tmp_path / "clean").rglob("*") if p.is_file()) == ["good.jsonl"]


@pytest.mark.slow(reason="a subprocess: the scan through the console command")
def test_cli_subprocess_scan_prints_a_summary(tmp_path, good):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "base_bench",
            "contamination",
            "scan",
            str(good),
            "--local-data",
            str(ROOT),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    assert "dirty items: 1 of 350 (answer leaked in 1)" in r.stdout and r.stderr == ""


def test_slurm_gets_datatroves_executor_with_the_options_passed_through(tmp_path, monkeypatch, good):
    """No Slurm here: the stages are built as datatrove's SlurmPipelineExecutors and the submission
    (run) is caught; the options reach the executor, and each stage depends on the one before."""
    from datatrove.executor.slurm import SlurmPipelineExecutor

    submitted = []
    monkeypatch.setattr(SlurmPipelineExecutor, "run", lambda self: submitted.append(self))
    got = scan(
        [str(good)],
        tmp_path / "out",
        data=str(ROOT),
        executor="slurm",
        workers=3,
        tasks=5,
        write_clean=tmp_path / "clean",
        executor_options={"partition": "cpu", "time": "02:00:00", "cpus_per_task": 2, "qos": "low"},
    )
    assert got is None
    (report,) = submitted
    clean = report.depends
    first = clean.depends
    assert [type(x) for x in (report, clean, first)] == [SlurmPipelineExecutor] * 3 and first.depends is None
    assert (first.partition, first.time, first.cpus_per_task, first.qos) == ("cpu", "02:00:00", 2, "low")
    assert (first.tasks, first.workers, report.tasks) == (5, 3, 1)
    assert [type(s).__name__ for s in first.pipeline] == ["CorpusJsonlReader", "ItemNGramFilter"]
    assert first.job_name == "base-bench-contamination-scan"

"""Untrusted corpora for `base-bench contamination scan`: each test is the attacker's file or folder
and the one-line refusal or safe result the scan must give.

A corpus from the web is a stranger's: no line, document or value is held in memory beyond
--max-line-bytes (counted after decompression), and no name from a corpus file (a split in
dataset_dict.json, a data file in state.json, a link) leads the scan, or --write-clean, out of the
folders given. --out-dir, --write-clean and the corpus paths must not overlap where files would be
lost or mixed.
"""

import gzip
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from test_compare import make_report

from base_bench.commands.cli import main
from base_bench.contamination.corpus import MAX_LINE_BYTES, CorpusError, discover
from base_bench.items.dataset import bundled_path, load_dataset_file

ROOT = Path(__file__).resolve().parents[1]
ITEMS = load_dataset_file(bundled_path()).items
DIRTY = ITEMS[0].context + ITEMS[0].continuations[ITEMS[0].label]
CLEAN = "The committee met on Tuesday to review the budget and agreed to defer the decision."


def _cli(args, capsys):
    code = main(["contamination", "scan", *map(str, args)])
    return code, capsys.readouterr()


def _one_line_error(cap, fragment: str) -> str:
    err = cap.err.strip()
    assert "\n" not in err and err.startswith("base-bench: error: ") and fragment in err, err
    assert "Traceback" not in cap.err + cap.out
    return err


def _jsonl(path: Path, texts) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


@pytest.fixture
def good(tmp_path):
    (tmp_path / "good").mkdir()
    return _jsonl(tmp_path / "good" / "good.jsonl", ["Copied: " + DIRTY, CLEAN])


# ------------------------------------------------------------------------------- line-length cap


def gzip_bomb(path: Path, mib: int = 150) -> Path:
    """A .jsonl.gz of about 153 KB holding one JSON line of `mib` MiB: gzip members, each 1 MiB of one
    letter (about 1 KB compressed), concatenated (gzip readers read them as one stream)."""
    block = gzip.compress(b"a" * (1 << 20), compresslevel=9)
    with path.open("wb") as f:
        f.write(gzip.compress(b'{"text": "'))
        for _ in range(mib):
            f.write(block)
        f.write(gzip.compress(b'"}\n'))
    return path


def test_a_153kb_gzip_holding_one_150mib_line_is_a_bad_file(tmp_path, capsys, good):
    bomb = gzip_bomb(tmp_path / "bomb.jsonl.gz")
    assert 140_000 < bomb.stat().st_size < 170_000
    code, cap = _cli([good, bomb, "--local-data", ROOT, "--out-dir", tmp_path / "out"], capsys)
    assert code == 2
    _one_line_error(cap, f"{bomb}: line 1 is longer than {MAX_LINE_BYTES} bytes (--max-line-bytes)")
    assert not (tmp_path / "out" / "contamination.json").exists()
    # --skip-bad notes it and scans the rest
    code, cap = _cli([good, bomb, "--local-data", ROOT, "--out-dir", tmp_path / "out2", "--skip-bad"], capsys)
    assert code == 0, cap.err
    rep = json.loads((tmp_path / "out2" / "contamination.json").read_text())
    assert [s["file"] for s in rep["corpus"]["skipped"]] == [str(bomb)]
    assert rep["totals"]["dirty"] == 1 and rep["settings"]["max_line_bytes"] == MAX_LINE_BYTES


def _zst(path: Path, texts) -> Path:
    data = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
    path.write_bytes(zstandard.ZstdCompressor().compress(data))
    return path


def _parquet(path: Path, texts) -> Path:
    pq.write_table(pa.table({"text": texts, "id": [f"d{i}" for i in range(len(texts))]}), path, compression="zstd")
    return path


def _dataset(path: Path, texts) -> Path:
    from datasets import Dataset
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()
    Dataset.from_dict({"text": texts}).save_to_disk(str(path))
    return path


LONG = "x" * 5000  # over the 4 KiB cap of the tests below, and highly compressible


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda d: _jsonl(d / "plain.jsonl", [CLEAN, LONG]), "plain.jsonl: line 2 is longer than 4096 bytes"),
        (lambda d: _zst(d / "z.jsonl.zst", [CLEAN, CLEAN, LONG]), "z.jsonl.zst: line 3 is longer than 4096 bytes"),
        (lambda d: _parquet(d / "p.parquet", [CLEAN, LONG]), "p.parquet: row 1 holds a value longer than 4096 bytes"),
        (lambda d: _dataset(d / "ds", [CLEAN, CLEAN, LONG]), "ds: row 2 holds a value longer than 4096 bytes"),
        (
            lambda d: (d / "page.txt").write_text(LONG) and d / "page.txt",
            "page.txt: longer than 4096 bytes, the cap on one document",
        ),
    ],
    ids=["jsonl", "zst", "parquet", "datasets", "txt"],
)
def test_every_reader_applies_the_cap(tmp_path, capsys, good, make, fragment):
    (tmp_path / "c").mkdir()
    bad = make(tmp_path / "c")
    args = [good, bad, "--local-data", ROOT, "--max-line-bytes", "4KiB"]
    code, cap = _cli([*args, "--out-dir", tmp_path / "out"], capsys)
    assert code == 2
    _one_line_error(cap, fragment)
    code, cap = _cli([*args, "--out-dir", tmp_path / "out2", "--skip-bad", "--write-clean", tmp_path / "clean"], capsys)
    assert code == 0, cap.err
    rep = json.loads((tmp_path / "out2" / "contamination.json").read_text())
    assert len(rep["corpus"]["skipped"]) == 1 and fragment in rep["corpus"]["skipped"][0]["error"]
    assert not (tmp_path / "clean" / "c").exists()  # a bad file gets no clean copy


def test_a_line_of_exactly_the_cap_is_read(tmp_path, capsys, good):
    line = json.dumps({"text": CLEAN + " " + "y" * 100})
    (tmp_path / "c").mkdir()
    f = tmp_path / "c" / "edge.jsonl"
    f.write_text(line + "\n" + line)  # the last line has no newline
    cap_bytes = len(line.encode())
    code, cap = _cli(
        [good, f, "--local-data", ROOT, "--out-dir", tmp_path / "o", "--max-line-bytes", cap_bytes], capsys
    )
    assert code == 0, cap.err
    assert json.loads((tmp_path / "o" / "contamination.json").read_text())["totals"]["documents_scanned"] == 4
    code, cap = _cli(
        [good, f, "--local-data", ROOT, "--out-dir", tmp_path / "o2", "--max-line-bytes", cap_bytes - 1], capsys
    )
    assert code == 2 and "edge.jsonl: line 1 is longer than" in cap.err


@pytest.mark.parametrize("value", ["0", "-5", "lots", "1.5MiB", "3TiB"])
def test_the_flag_takes_a_positive_byte_count(tmp_path, capsys, good, value):
    with pytest.raises(SystemExit) as ei:
        _cli([good, "--local-data", ROOT, "--out-dir", tmp_path / "o", "--max-line-bytes", value], capsys)
    assert ei.value.code == 2 and "--max-line-bytes" in capsys.readouterr().err


@pytest.mark.parametrize("value, n", [("1", 1), ("4096", 4096), ("4KiB", 4096), ("64MiB", 64 << 20), ("2gib", 2 << 30)])
def test_the_flag_reads_bytes_and_binary_units(tmp_path, value, n):
    from base_bench.commands.contamination import scan_parser

    assert scan_parser().parse_args(["c", "--out-dir", "o", "--max-line-bytes", value]).max_line_bytes == n
    assert scan_parser().parse_args(["c", "--out-dir", "o"]).max_line_bytes == MAX_LINE_BYTES == 64 << 20


# ------------------------------------------------------------------------------- names from the corpus


def _datasetdict(folder: Path, splits) -> Path:
    _dataset(folder / "train", ["Copied: " + DIRTY, CLEAN])
    (folder / "dataset_dict.json").write_text(json.dumps({"splits": splits}))
    return folder


@pytest.mark.parametrize("split", ["..", "", ".", "../other", "a/b", "ABS", "x\0y", 3, None])
def test_a_split_must_be_a_plain_name(tmp_path, capsys, split):
    corpus = tmp_path / "corpus"
    dd = corpus / "dd"
    if split == "ABS":
        split = str(tmp_path / "elsewhere")  # a dataset outside the corpus
    _datasetdict(dd, ["train", split])
    if isinstance(split, str) and "\0" not in split:  # where the split leads holds a real dataset
        target = Path(split) if os.path.isabs(split) else dd / split
        if not (target / "state.json").exists():
            shutil.copytree(_dataset(tmp_path / "tmp-ds", ["secret " + DIRTY]), target, dirs_exist_ok=True)
    code, cap = _cli(
        [dd, "--local-data", ROOT, "--out-dir", tmp_path / "out", "--write-clean", tmp_path / "clean"], capsys
    )
    assert code == 2
    _one_line_error(cap, "dataset_dict.json: split ")
    assert "is not a plain name in its folder" in cap.err
    assert not (tmp_path / "clean").exists() or not any((tmp_path / "clean").iterdir())


def test_the_split_dotdot_no_longer_replaces_the_clean_folder(tmp_path, capsys):
    # dataset_dict.json lists "..": the DatasetDict's own folder's parent (here a saved dataset holding
    # a document the scan flags) became a unit whose clean copy replaced the whole clean folder.
    corpus = tmp_path / "corpus"
    _dataset(corpus, ["Copied: " + DIRTY, CLEAN])
    _datasetdict(corpus / "dd", ["train", ".."])
    with pytest.raises(CorpusError, match=r"split '\.\.' is not a plain name"):
        discover([str(corpus / "dd")])


def test_a_data_file_of_state_json_must_be_a_plain_name_inside(tmp_path):
    ds = _dataset(tmp_path / "corpus" / "ds", [CLEAN])
    outside = _dataset(tmp_path / "elsewhere", ["secret " + DIRTY])
    state = json.loads((ds / "state.json").read_text())
    arrow = next(outside.glob("*.arrow"))
    for name in (f"../../elsewhere/{arrow.name}", str(arrow)):
        state["_data_files"] = [{"filename": name}]
        (ds / "state.json").write_text(json.dumps(state))
        with pytest.raises(CorpusError, match="data file .* is not a plain name"):
            discover([str(tmp_path / "corpus")])
    link = ds / "linked.arrow"
    link.symlink_to(arrow)
    state["_data_files"] = [{"filename": "linked.arrow"}]
    (ds / "state.json").write_text(json.dumps(state))
    with pytest.raises(CorpusError, match="outside"):
        discover([str(tmp_path / "corpus")])


def test_a_link_out_of_the_corpus_is_refused_and_a_loop_is_walked_once(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _jsonl(corpus / "a.jsonl", [CLEAN])
    secret = _jsonl(tmp_path / "secret.jsonl", ["private " + DIRTY])
    (corpus / "loop").symlink_to(corpus)  # a link to a parent: recursed until RecursionError before
    (corpus / "inner").mkdir()
    (corpus / "inner" / "same.jsonl").symlink_to(corpus / "a.jsonl")  # inside: fine, read once
    assert [u.rel for u in discover([str(corpus)]).units] == ["a.jsonl"]
    (corpus / "leak.jsonl").symlink_to(secret)
    code, cap = _cli(
        [corpus, "--local-data", ROOT, "--out-dir", tmp_path / "out", "--write-clean", tmp_path / "clean"], capsys
    )
    assert code == 2
    _one_line_error(cap, f"{corpus / 'leak.jsonl'}: a link that leads to {secret}, outside {corpus}")
    assert not (tmp_path / "clean").exists() or not any((tmp_path / "clean").iterdir())
    (corpus / "leak.jsonl").unlink()
    (corpus / "linkdir").symlink_to(tmp_path)  # a folder outside
    with pytest.raises(CorpusError, match="linkdir: a link that leads to"):
        discover([str(corpus)])


def test_a_dataset_folder_given_alone_is_cleaned_inside_the_clean_folder(tmp_path, capsys):
    # its relative path was ".", so the clean copy was written beside the clean folder and replaced it
    ds = _dataset(tmp_path / "ds", ["Copied: " + DIRTY, CLEAN])
    clean = tmp_path / "clean"
    code, cap = _cli([ds, "--local-data", ROOT, "--out-dir", tmp_path / "out", "--write-clean", clean], capsys)
    assert code == 0, cap.err
    from datasets import load_from_disk

    assert load_from_disk(str(clean / "ds"))["text"] == [CLEAN]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clean", "ds", "out"]  # nothing written beside


# ------------------------------------------------------------------------------- overlapping folders


@pytest.mark.parametrize(
    "out, clean, fragment",
    [
        ("x", "x", "overlap"),
        ("x/out", "x", "overlap"),
        ("x", "x/clean", "overlap"),
        ("corpus/out", "clean", "is inside the corpus path"),
        ("out", "corpus/clean", "overlaps the corpus path"),
    ],
)
def test_overlapping_out_dir_write_clean_and_corpus_are_refused(tmp_path, capsys, out, clean, fragment):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _jsonl(corpus / "documents.jsonl", ["Copied: " + DIRTY, CLEAN])  # the name of the report's own file
    args = [corpus, "--local-data", ROOT, "--out-dir", tmp_path / out, "--write-clean", tmp_path / clean]
    code, cap = _cli(args, capsys)
    assert code == 2
    _one_line_error(cap, fragment)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["corpus", "documents.jsonl"]  # nothing made


def test_a_link_to_the_clean_folder_is_an_overlap_too(tmp_path, capsys, good):
    (tmp_path / "x").mkdir()
    os.symlink(tmp_path / "x", tmp_path / "alias")
    args = [good, "--local-data", ROOT, "--out-dir", tmp_path / "alias" / "out", "--write-clean", tmp_path / "x"]
    code, cap = _cli(args, capsys)
    assert code == 2 and "overlap" in cap.err


# ------------------------------------------------------------------------------- a shared scan


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("[" * 200_000 + "]" * 200_000, "nested 200000 levels deep (at most 64 are read)"),
        (json.dumps({"data": {"sha256": "a" * 64}, "items": [1, 2]}), "item 0 has no string id and true/false dirty"),
        (json.dumps({"data": "x", "items": []}), "not a base-bench contamination scan"),
    ],
    ids=["deep", "items", "data"],
)
def test_contamination_report_reads_a_strangers_scan_in_one_line(tmp_path, capsys, text, fragment):
    (tmp_path / "scan").mkdir()
    (tmp_path / "scan" / "contamination.json").write_text(text)
    (tmp_path / "run").mkdir()
    rep = make_report([True, False] * 11, per_category=3)  # a report that the checked reading accepts
    (tmp_path / "run" / "report.json").write_text(json.dumps(rep))
    code = main(["contamination", "report", str(tmp_path / "run"), "--scan", str(tmp_path / "scan")])
    cap = capsys.readouterr()
    assert code == 2
    _one_line_error(cap, fragment)

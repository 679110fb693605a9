"""The scan's datatrove pipeline steps: strict readers, the item n-gram filter, and two closing steps.

    readers = [CorpusJsonlReader(root, paths_file=..., units=..., work_dir=...), ...]
    filt = ItemNGramFilter(index, canaries, work_dir=...)     # a datatrove BaseFilter
    LocalPipelineExecutor(pipeline=readers + [filt], tasks=4, workers=2, logging_dir=...).run()

Readers. JSONL and Parquet go through datatrove's JsonlReader and ParquetReader (file listing,
sharding over tasks, fsspec with gzip/zstd by extension); a save_to_disk folder through its IpcReader
(its .arrow files are Arrow streams). Each is subclassed only to read strictly: a line that is not
JSON, a record without the text key, a damaged gzip or Parquet file raise CorpusError with one line
naming the file (and line), where datatrove would log a warning and skip on. With skip_bad the file
is noted in work_dir/skipped-<format>/ and the task carries on with the next file. No line (JSONL,
after decompression), .txt file or Parquet/Arrow text or id value longer than `max_line_bytes` is
held in memory: it makes its file bad, like a line that is not JSON. Every document carries
its unit number and line (JSONL, 1-based) or row (Parquet and datasets, 0-based) in its metadata,
so the report can name it and --write-clean can drop exactly it. `.txt` files (one document each)
have no datatrove reader; TextFileReader is a small BaseDiskReader for them.

ItemNGramFilter drops (returns False for) every document that holds an item n-gram or a canary and
appends one JSON line per such document to work_dir/hits/<rank>.jsonl: which items, which kinds of
n-gram, the item words they cover, and an excerpt. It works in any datatrove pipeline (documents
from other readers are named by their `file_path` metadata and id). Documents are matched BATCH at a
time (one numpy pass over their words, a separator between them); long documents are scanned in
chunks of CHUNK characters, cut at whitespace, with the last words carried over so that no n-gram
is lost at a cut; memory stays bounded whatever the document or corpus size.

CleanCopy (stage 2) writes every unit without its flagged documents; ScanReport (stage 3, one task)
merges the per-task files into contamination.json and .md. Both run under the same executor as the
scan, so on Slurm they are jobs that wait for the scan's jobs.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

try:
    import resource
except ImportError:  # Windows: no getrusage; a task's peak memory is then not recorded
    resource = None

from datatrove.data import Document
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.pipeline.readers.base import BaseDiskReader
from datatrove.pipeline.readers.ipc import IpcReader
from datatrove.pipeline.readers.jsonl import JsonlReader
from datatrove.pipeline.readers.parquet import ParquetReader
from datatrove.utils.hashing import HashConfig
from datatrove.utils.text import TextNormConfig
from datatrove.utils.word_tokenizers import WordTokenizer

from .corpus import MAX_LINE_BYTES, CorpusError, capped_lines
from .excerpt import excerpts
from .index import COVERING, ItemIndex
from .normalize import normalized

CHUNK = 1 << 20  # characters of a document normalised at once
BATCH = 128  # documents matched in one pass (numpy's per-call cost is paid once per batch, not per document)
_SEP = b""  # put between the documents of a batch: never a vocabulary word, so no n-gram spans two documents
DATATROVE_HASH = HashConfig(precision=64, hash_fc="sha1")  # what index.datatrove_hashes() writes
IDENTITY_NORM = TextNormConfig(
    lowercase=False, norm_whitespace=False, remove_punctuation=False, norm_unicode_diacritics=False, norm_numbers=False
)


class WordTokenizerGPT3(WordTokenizer):
    """datatrove's WordTokenizer interface over this package's GPT-3 normalisation, so that datatrove's own
    NGramsDecontFilter (with norm_config=IDENTITY_NORM) can run on the index this package writes."""

    def __init__(self):
        super().__init__("en")

    def word_tokenize(self, text: str) -> list[str]:
        from .normalize import words

        return [w.decode("utf-8", "surrogatepass") for w in words(text)]

    def sent_tokenize(self, text: str) -> list[str]:
        return [text]

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        return [(0, len(text))]


class _RankFile:
    """Append JSON lines to work_dir/<kind>/<rank>.jsonl.tmp; `done()` renames it to .jsonl."""

    def __init__(self, work_dir: str, kind: str, rank: int):
        self.path = Path(work_dir) / kind / f"{rank:05d}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.path.with_suffix(".jsonl.tmp"), "w", encoding="utf-8")

    def write(self, obj: dict) -> None:
        self.f.write(json.dumps(obj, ensure_ascii=False, allow_nan=False) + "\n")

    def done(self) -> None:
        self.f.close()
        os.replace(self.path.with_suffix(".jsonl.tmp"), self.path)

    def abandon(self) -> None:
        self.f.close()


def write_json(work_dir: str, kind: str, rank: int, obj: dict) -> None:
    p = Path(work_dir) / kind / f"{rank:05d}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(obj, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, p)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


# ---------------------------------------------------------------- readers


class _Strict:
    """What the corpus readers share: their units, strict errors, --skip-bad, the cap on one line or
    value (--max-line-bytes), and read timing."""

    reader_options: dict = {}  # passed to the datatrove reader besides the folder, listing and keys

    def __init__(
        self,
        data_folder,
        paths_file,
        units,
        work_dir,
        skip_bad=False,
        text_key="text",
        id_key="id",
        max_line_bytes=MAX_LINE_BYTES,
    ):
        kw = dict(paths_file=paths_file, text_key=text_key, id_key=id_key, **self.reader_options)
        super().__init__(data_folder, **kw)
        self.units = units  # path relative to data_folder -> {"unit", "display", ...}
        self.work_dir = work_dir
        self.skip_bad = skip_bad
        self.max_line_bytes = max_line_bytes
        self._rank = 0
        self._skipped = None
        self.read_s = 0.0
        self.n_docs = 0

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        self._rank = rank
        try:
            yield from super().run(data, rank, world_size)
        finally:
            if self._skipped:
                self._skipped.done()
            write_json(self.work_dir, f"read-{self.fmt}", rank, {"read_s": self.read_s, "docs": self.n_docs})

    def _bad(self, unit: dict, message: str) -> None:
        """A file that cannot be read: stop (default) or note it and go on (--skip-bad)."""
        if not self.skip_bad:
            write_json(self.work_dir, "errors", self._rank, {"file": unit["display"], "error": message})
            raise CorpusError(message)
        if self._skipped is None:
            self._skipped = _RankFile(self.work_dir, f"skipped-{self.fmt}", self._rank)
        self._skipped.write({"unit": unit["unit"], "file": unit["display"], "error": message})
        self.stat_update("skipped_files")

    def _doc(self, unit: dict, text: str, pos, doc_id) -> Document:
        self.n_docs += 1
        return Document(
            text=text,
            id=str(doc_id) if doc_id is not None else f"{unit['display']}:{pos}",
            metadata={"bb_unit": unit["unit"], "bb_pos": pos, "file_path": unit["display"]},
        )

    def _text_of(self, unit: dict, rec, where: str):
        if not isinstance(rec, dict):
            raise CorpusError(f"{unit['display']}: {where}: not a JSON object")
        if self.text_key not in rec:
            keys = ", ".join(list(map(str, rec))[:8]) or "none"
            raise CorpusError(
                f"{unit['display']}: {where}: no {self.text_key!r} key (keys: {keys}); "
                "name the text field with --text-key"
            )
        text = rec[self.text_key]
        if text is not None and not isinstance(text, str):
            raise CorpusError(f"{unit['display']}: {where}: {self.text_key!r} is a {type(text).__name__}, not text")
        return text


class CorpusJsonlReader(_Strict, JsonlReader):
    """JSONL (plain, .gz, .zst): one document per line; a bad line stops the file, named by its line number."""

    name = "🐿 Jsonl (strict)"
    fmt = "jsonl"
    reader_options = {"compression": "infer"}

    def read_file(self, filepath: str):
        import orjson

        unit = self.units[filepath]
        t0 = time.perf_counter()
        try:
            with self.data_folder.open(filepath, "rb", compression=self.compression) as raw:
                for li, line in capped_lines(raw, self.max_line_bytes, unit["display"]):
                    if not line.strip():
                        continue
                    try:
                        rec = orjson.loads(line)
                    except orjson.JSONDecodeError as e:
                        raise CorpusError(f"{unit['display']}: line {li}: not valid JSON ({e})") from None
                    text = self._text_of(unit, rec, f"line {li}")
                    if not text:
                        continue
                    doc = self._doc(unit, text, li, rec.get(self.id_key))
                    self.read_s += time.perf_counter() - t0
                    yield doc
                    t0 = time.perf_counter()
        except CorpusError as e:
            self._bad(unit, str(e))
        except Exception as e:  # noqa: BLE001 - gzip/zstd/OS errors: damaged or unreadable file
            self._bad(unit, f"{unit['display']}: cannot be read ({_short(e)})")
        self.read_s += time.perf_counter() - t0


class _ArrowRows:
    """Documents from Arrow record batches (Parquet, datasets' .arrow files), with their row numbers."""

    def _check_lengths(self, unit, col, first_row: int) -> None:
        """CorpusError for a text or binary value longer than the cap, before it becomes a Python string."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if col is None or not (
            pa.types.is_string(col.type)
            or pa.types.is_large_string(col.type)
            or pa.types.is_binary(col.type)
            or pa.types.is_large_binary(col.type)
        ):
            return
        over = pc.greater(pc.binary_length(col), self.max_line_bytes)
        if pc.any(over).as_py():
            at = pc.index(over, True).as_py()
            raise CorpusError(
                f"{unit['display']}: row {first_row + at} holds a value longer than {self.max_line_bytes} bytes "
                "(--max-line-bytes); raise the cap if such values are expected, or pass --skip-bad"
            )

    def _rows(self, unit, batches, names, first_row: int = 0):
        if self.text_key not in names:
            raise CorpusError(
                f"{unit['display']}: no {self.text_key!r} column (columns: {', '.join(names[:8])}); "
                "name the text field with --text-key"
            )
        row = first_row
        t0 = time.perf_counter()
        for batch in batches:
            col = batch.column(batch.schema.get_field_index(self.text_key))
            import pyarrow as pa

            if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or pa.types.is_null(col.type)):
                raise CorpusError(f"{unit['display']}: column {self.text_key!r} holds {col.type}, not text")
            id_col = (
                batch.column(batch.schema.get_field_index(self.id_key)) if self.id_key in batch.schema.names else None
            )
            for c in (col, id_col):
                self._check_lengths(unit, c, row)
            texts = col.to_pylist()
            ids = id_col.to_pylist() if id_col is not None else [None] * len(texts)
            for text, doc_id in zip(texts, ids):
                if text:
                    doc = self._doc(unit, text, row, doc_id)
                    self.read_s += time.perf_counter() - t0
                    yield doc
                    t0 = time.perf_counter()
                row += 1
        self.read_s += time.perf_counter() - t0


class CorpusParquetReader(_Strict, _ArrowRows, ParquetReader):
    """Parquet: one document per row; only the text and id columns are read."""

    name = "📒 Parquet (strict)"
    fmt = "parquet"

    def _batch_rows(self, pf, cols: list[str]) -> int:
        return _parquet_batch_rows(pf, cols, self.max_line_bytes, self.batch_size)

    def read_file(self, filepath: str):
        import pyarrow.parquet as pq

        unit = self.units[filepath]
        try:
            with self.data_folder.open(filepath, "rb") as f:
                pf = pq.ParquetFile(f)
                names = pf.schema_arrow.names
                cols = [c for c in (self.text_key, self.id_key) if c in names] or None
                batches = pf.iter_batches(batch_size=self._batch_rows(pf, cols or []), columns=cols)
                yield from self._rows(unit, batches, names)
        except CorpusError as e:
            self._bad(unit, str(e))
        except Exception as e:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError... for a damaged file
            self._bad(unit, f"{unit['display']}: not a readable Parquet file ({_short(e)})")


def _parquet_batch_rows(pf, cols: list[str], cap: int, most: int) -> int:
    """Rows per batch so that a batch of the read columns holds about `cap` bytes at most, by the
    uncompressed sizes the file's footer states for them (at least 1 row, at most `most`)."""
    meta = pf.metadata
    paths = [meta.schema.column(i).path.split(".")[0] for i in range(meta.num_columns)]
    rows = most
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        size = sum(rg.column(i).total_uncompressed_size for i, p in enumerate(paths) if p in cols)
        if rg.num_rows and size > 0:
            rows = min(rows, max(1, cap * rg.num_rows // size))
    return max(1, rows)


class CorpusArrowReader(_Strict, _ArrowRows, IpcReader):
    """A datasets.save_to_disk folder: its .arrow stream files, rows numbered across the whole dataset."""

    name = "🪶 datasets folder (strict)"
    fmt = "hf"
    reader_options = {"stream": True}

    def read_file(self, filepath: str):
        import pyarrow as pa

        unit = self.units[filepath]
        try:
            with self.data_folder.open(filepath, "rb") as f:
                with pa.ipc.open_stream(f) as reader:
                    yield from self._rows(unit, reader, reader.schema.names, unit["first_row"])
        except CorpusError as e:
            self._bad(unit, str(e))
        except Exception as e:  # noqa: BLE001
            self._bad(unit, f"{unit['display']}: {Path(filepath).name} is not a readable Arrow file ({_short(e)})")


class TextFileReader(_Strict, BaseDiskReader):
    """Plain .txt files, each one document (UTF-8)."""

    name = "📄 Text files"
    fmt = "txt"

    def read_file(self, filepath: str):
        unit = self.units[filepath]
        t0 = time.perf_counter()
        try:
            with self.data_folder.open(filepath, "rb") as f:
                raw = f.read(self.max_line_bytes + 1)
            if len(raw) > self.max_line_bytes:
                self._bad(
                    unit,
                    f"{unit['display']}: longer than {self.max_line_bytes} bytes, the cap on one document "
                    "(--max-line-bytes); raise the cap if such files are expected, or pass --skip-bad",
                )
                return
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            self._bad(unit, f"{unit['display']}: not UTF-8 text (byte {e.start})")
            return
        except Exception as e:  # noqa: BLE001
            self._bad(unit, f"{unit['display']}: cannot be read ({_short(e)})")
            return
        self.read_s += time.perf_counter() - t0
        if text:
            yield self._doc(unit, text, None, unit["display"])


# ---------------------------------------------------------------- the filter


class ItemNGramFilter(BaseFilter):
    """Drop every document holding a benchmark n-gram or canary; note each one in work_dir/hits/."""

    name = "🍌 base-bench items"
    type = "🦠 - DECONT"

    def __init__(
        self, index: ItemIndex, canaries, work_dir: str | None = None, exclusion_writer=None, batch_size: int = BATCH
    ):
        super().__init__(exclusion_writer, batch_size=batch_size)
        self.index = index
        self.canaries = list(canaries)
        self.work_dir = work_dir
        self._hits = None
        self.t = {"normalise_s": 0.0, "match_s": 0.0, "record_s": 0.0}
        self.counts = {"docs": 0, "chars": 0, "words": 0, "flagged": 0}

    def run(self, data, rank: int = 0, world_size: int = 1):
        if self.work_dir:
            self._hits = _RankFile(self.work_dir, "hits", rank)
        t0, c0 = time.perf_counter(), time.process_time()
        ok = False
        try:
            yield from super().run(data, rank, world_size)
            ok = True
        finally:
            if self._hits:
                (self._hits.done if ok else self._hits.abandon)()
            if self.work_dir and ok:
                write_json(
                    self.work_dir,
                    "scan",
                    rank,
                    {
                        **self.counts,
                        **self.t,
                        "task_s": time.perf_counter() - t0,
                        "cpu_s": time.process_time() - c0,
                        **({"maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss} if resource else {}),
                    },
                )

    def scan(self, text: str) -> tuple[set, list]:
        """({(gram number, word position)}, [canary GUIDs]) for one document's text."""
        found: set = set()
        guids: list = []
        carry: list = []
        offset = 0  # position of carry[0] (or of the chunk's first word) in the whole text
        keep = max(self.index.lengths, default=1) - 1
        pos = 0
        while pos < len(text):
            end = len(text) if len(text) - pos <= CHUNK else self._cut(text, pos + CHUNK)
            t0 = time.perf_counter()
            norm = normalized(text[pos:end])
            ws = carry + norm.split()
            t1 = time.perf_counter()
            for c in self.canaries:
                if c.key in norm and c.guid not in guids:
                    guids.append(c.guid)
            for gi, at in self.index.find(ws):
                found.add((gi, at + offset))
            self.t["normalise_s"] += t1 - t0
            self.t["match_s"] += time.perf_counter() - t1
            self.counts["words"] += len(ws) - len(carry)
            if keep and len(ws) > keep:
                offset += len(ws) - keep
                carry = ws[-keep:]
            else:
                carry = ws if keep else []
            pos = end
        return found, guids

    @staticmethod
    def _cut(text: str, at: int) -> int:
        """A cut at or before `at` that falls on ASCII whitespace (never inside a word)."""
        lo = at - CHUNK // 2
        for ch in (" ", "\n"):
            i = text.rfind(ch, lo, at)
            if i > 0:
                return i
        return at

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        return self.filter_batch([doc])[0]

    def filter_batch(self, batch: list[Document]) -> list[bool | tuple[bool, str]]:
        """Short documents are matched together, one `find` over their words with a separator between
        documents; a document longer than CHUNK characters goes through `scan` in chunks."""
        results: list = [None] * len(batch)
        ws_all: list = []
        starts: list[int] = []
        small: list[int] = []
        guids: dict[int, list] = {}
        t0 = time.perf_counter()
        for k, doc in enumerate(batch):
            self.counts["docs"] += 1
            self.counts["chars"] += len(doc.text)
            if len(doc.text) > CHUNK:
                continue
            norm = normalized(doc.text)
            g = [c.guid for c in self.canaries if c.key in norm]
            if g:
                guids[k] = g
            small.append(k)
            starts.append(len(ws_all))
            ws_all += norm.split()
            ws_all.append(_SEP)
        t1 = time.perf_counter()
        found: dict[int, set] = {}
        if ws_all:
            import bisect

            for gi, at in self.index.find(ws_all):
                j = bisect.bisect_right(starts, at) - 1
                found.setdefault(small[j], set()).add((gi, at - starts[j]))
        self.t["normalise_s"] += t1 - t0
        self.t["match_s"] += time.perf_counter() - t1
        self.counts["words"] += len(ws_all) - len(small)
        for k, doc in enumerate(batch):
            if len(doc.text) > CHUNK:
                f, g = self.scan(doc.text)
            else:
                f, g = found.get(k, set()), guids.get(k, [])
            results[k] = self._decide(doc, f, g)
        return results

    def _decide(self, doc: Document, found: set, guids: list) -> bool | tuple[bool, str]:
        if not found and not guids:
            return True
        t0 = time.perf_counter()
        record = self.record(doc, found, guids)
        doc.metadata["base_bench_items"] = [it["item"] for it in record["items"]]
        if self._hits:
            self._hits.write(record)
        self.counts["flagged"] += 1
        self.stat_update("benchmark_documents")
        self.t["record_s"] += time.perf_counter() - t0
        return False, "benchmark"

    def record(self, doc: Document, found: set, guids: list) -> dict:
        """One document's hits as the JSON line written to hits/."""
        per_item: dict[int, dict] = {}
        for gi, at in sorted(found, key=lambda t: (t[1], t[0])):
            g = self.index.grams[gi]
            e = per_item.setdefault(
                g.item, {"item": g.item, "kinds": set(), "cover": [], "wrong": set(), "_at": (at, g.length)}
            )
            e["kinds"].add(g.kind)
            if g.kind in COVERING:
                e["cover"].append((g.start, g.start + g.length))
            else:
                e["wrong"].add(g.choice)
        items = sorted(per_item.values(), key=lambda e: e["item"])
        cuts = excerpts(doc.text, [e["_at"] for e in items])
        out_items = []
        for e, ex in zip(items, cuts):
            out_items.append(
                {
                    "item": e["item"],
                    "kinds": sorted(e["kinds"]),
                    "cover": _merge(e["cover"]),
                    "wrong": sorted(e["wrong"]),
                    "word": e["_at"][0],
                    "excerpt": ex,
                }
            )
        md = doc.metadata
        rec = {
            "unit": md.get("bb_unit"),
            "file": md.get("file_path"),
            "pos": md.get("bb_pos"),
            "id": doc.id,
            "chars": len(doc.text),
            "items": out_items,
            "canary": guids,
        }
        if guids:
            from .excerpt import excerpt_at_char

            low = doc.text.lower()
            at = min((low.find(g.lower()) for g in guids if low.find(g.lower()) >= 0), default=0)
            rec["canary_excerpt"] = excerpt_at_char(doc.text, at, at + 36)
        return rec


def _merge(spans):
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


# ---------------------------------------------------------------- closing steps


class CleanCopy(PipelineStep):
    """Stage 2: write each unit (sharded over tasks) to out_dir without the documents the scan flagged."""

    name = "🧽 clean copy"
    type = "💽 - WRITER"

    def __init__(self, units: list[dict], work_dir: str, out_dir: str, max_line_bytes: int = MAX_LINE_BYTES):
        super().__init__()
        self.units = units
        self.work_dir = work_dir
        self.out_dir = out_dir
        self.max_line_bytes = max_line_bytes

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        from .clean import write_clean_unit
        from .results import load_hits, load_skipped

        flagged: dict[int, set] = {}
        for h in load_hits(self.work_dir):
            flagged.setdefault(h["unit"], set()).add(h["pos"])
        skipped = {s["unit"] for s in load_skipped(self.work_dir)}
        for u in self.units[rank::world_size]:
            if u["unit"] in skipped:
                continue
            with self.track_time("unit"):
                dropped = write_clean_unit(u, flagged.get(u["unit"], set()), self.out_dir, self.max_line_bytes)
            self.stat_update("documents_dropped", value=dropped)
        if data:
            yield from data


class ScanReport(PipelineStep):
    """Stage 3 (one task): contamination.json, contamination.md and documents.jsonl from the tasks' files."""

    name = "📋 contamination report"
    type = "📊 - STATS"

    def __init__(self, out_dir: str):
        super().__init__()
        self.out_dir = out_dir

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        from .results import write_report

        if rank == 0:
            write_report(self.out_dir)
        if data:
            yield from data

"""The contamination scan: throughput on >= 1 GB of real English text, recall and precision on a planted
corpus, and a worker's peak memory against the corpus size.

    python bench/contamination.py --work /work/scratch/contam-bench      # builds the corpus there (never in the repo)
    python bench/contamination.py --work DIR --gb 1.0 --skip-build       # reuse a corpus built before

1. Corpus: text already on the machine (/usr/share/doc: READMEs, changelogs, copyright files, also
   gzipped; man pages with their roff markup stripped; the docstrings of Python's standard library),
   cut into documents of one to a few paragraphs, repeated and shuffled until it reaches --gb, and
   written as --shards plain JSONL files. None of it holds a benchmark item.
2. Throughput: the scan (scanner.scan, the local executor) over the whole corpus with 1 and with 2
   workers; MB/s is corpus bytes on disk over the scan stage's wall time, per worker divided by the
   workers. The time split is the tasks' own: reading (I/O, JSON, documents), normalising, matching.
   Any document flagged here is a false positive (the corpus is unplanted).
3. Memory: the largest peak RSS of a worker process (2 workers), on a quarter of the corpus and on
   all of it.
4. Recall and precision: a background sample of the corpus with, for every matchable bundled item,
   one document per planted form (verbatim; case and punctuation changed; a line break in the
   middle; embedded in a longer document; the context only; the answer with the last 12 words of its
   context, or alone where it has 8 words or more) and near misses (a document holding one 8-word
   run of an item; one holding the item's common short phrases, under 8 words each). Every planted
   document must be flagged for its item; every other flagged document is a false positive.
Prints the Markdown section appended to bench/RESULTS.md and writes --work/results.json.

bench/RESULTS.md: "Contamination scan (`base-bench contamination scan`)" and its "Throughput" and
"Recall and precision" (the Markdown it prints, appended by hand).
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import platform
import random
import re
import shutil
import sys
import time
from pathlib import Path

from benchlib import ROOT, timed_call

from base_bench.contamination.index import ItemIndex
from base_bench.contamination.normalize import word_spans, words
from base_bench.contamination.scanner import scan
from base_bench.items.dataset import bundled_path, load_dataset_file

ROFF = re.compile(r"\\f[BIRP]|\\f\(..|\\\(..|\\[&|^~%]|\\s[-+]?\d")


def _texts_doc():
    for root, _, files in os.walk("/usr/share/doc"):
        for f in sorted(files):
            p = os.path.join(root, f)
            if os.path.islink(p):
                continue
            low = f.lower()
            try:
                if low.endswith(".gz"):
                    if not re.search(r"(changelog|news|readme|copyright|txt|md)", low):
                        continue
                    raw = gzip.open(p).read()
                elif low.endswith((".txt", ".md", ".rst")) or "." not in f or low.startswith(("readme", "copyright")):
                    raw = open(p, "rb").read()
                else:
                    continue
                yield raw.decode("utf-8")
            except (OSError, UnicodeDecodeError, EOFError):
                continue


def _texts_man():
    for root, _, files in os.walk("/usr/share/man"):
        if "/man/" in root and not re.search(r"/man/man\d", root):
            continue  # translated pages: keep English
        for f in sorted(files):
            p = os.path.join(root, f)
            try:
                raw = gzip.open(p).read() if f.endswith(".gz") else open(p, "rb").read()
                text = raw.decode("utf-8")
            except (OSError, UnicodeDecodeError, EOFError):
                continue
            lines = [
                ROFF.sub("", ln).replace("\\-", "-").replace("\\e", "\\")
                for ln in text.splitlines()
                if ln and not ln.startswith((".", "'"))
            ]
            yield "\n".join(lines)


def _texts_python():
    import sysconfig

    for root, _, files in os.walk(sysconfig.get_paths()["stdlib"]):
        if "site-packages" in root or "test" in root:
            continue
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            try:
                tree = ast.parse(open(os.path.join(root, f), encoding="utf-8").read())
            except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    d = ast.get_docstring(node)
                    if d and len(d) > 200:
                        yield d


def documents(min_chars=400, max_chars=12000):
    """Real text cut at blank lines into documents of min_chars..max_chars."""
    for source in (_texts_doc(), _texts_man(), _texts_python()):
        for text in source:
            buf = []
            size = 0
            for para in re.split(r"\n\s*\n", text):
                buf.append(para)
                size += len(para)
                if size >= min_chars and (size >= max_chars // 4 or random.random() < 0.3):
                    yield "\n\n".join(buf)[:max_chars]
                    buf, size = [], 0
            if size >= min_chars:
                yield "\n\n".join(buf)[:max_chars]


def build_corpus(folder: Path, gb: float, shards: int, seed: int = 7) -> dict:
    random.seed(seed)
    docs = list(documents())
    unique_bytes = sum(len(d.encode()) for d in docs)
    folder.mkdir(parents=True, exist_ok=True)
    outs = [open(folder / f"part-{i:03d}.jsonl", "w", encoding="utf-8") for i in range(shards)]
    target, written, n, rep = gb * 1e9, 0, 0, 0
    rng = random.Random(seed)
    while written < target:
        order = list(range(len(docs)))
        rng.shuffle(order)
        for i in order:
            line = json.dumps({"text": docs[i], "id": f"bg-{n}"}, ensure_ascii=False) + "\n"
            outs[n % shards].write(line)
            written += len(line.encode())
            n += 1
            if written >= target:
                break
        rep += 1
    for f in outs:
        f.close()
    return {
        "unique_documents": len(docs),
        "unique_text_bytes": unique_bytes,
        "documents": n,
        "bytes": written,
        "repeats": rep,
        "shards": shards,
    }


def timed_scan(corpus: list[str], out: Path, workers: int, tasks: int):
    if out.exists():
        shutil.rmtree(out)
    load0 = os.getloadavg()[0]
    rep, wall = timed_call(scan, corpus, out, data=str(ROOT), workers=workers, tasks=tasks)
    return rep, wall, load0, os.getloadavg()[0]


# ---------------------------------------------------------------- planted corpus


def _case_punct(text: str) -> str:
    return (
        text.upper().replace(",", "").replace(".", "!").replace("'", "\u2019").replace('"', "\u201c").replace(";", " -")
    )


def planted_docs(items, index: ItemIndex, background: list[str], rng: random.Random):
    """(id, text) for every planted form of every matchable item, and for the near misses."""
    matchable = {g.item for g in index.grams if g.kind != "wrong"}

    def bg():
        return rng.choice(background)

    out, expect = [], {}
    for i, it in enumerate(items):
        if i not in matchable:
            continue
        ans = it.continuations[it.label]
        full = it.context + ans
        ws = full.split(" ")
        mid = len(ws) // 2
        forms = {
            "verbatim": full,
            "case_punct": _case_punct(full),
            "line_break": " ".join(ws[:mid]) + "\n" + " ".join(ws[mid:]),
            "embedded": bg()[:2000] + "\n\n" + full + "\n\n" + bg()[:2000],
        }
        ctx_words = len(words(it.context))
        if ctx_words >= 8:  # a context of fewer than 8 words is never matched alone
            forms["context_only"] = bg()[:1000] + "\n" + it.context + "\n" + bg()[:1000]
        aw = len(words(ans))
        if aw:  # an answer of punctuation only (" );") has no words to find
            spans = word_spans(it.context)
            tail = it.context[spans[-12][0] :] + ans if len(spans) >= 12 else it.context + ans
            forms["answer"] = bg()[:1000] + " " + (ans if aw >= 8 else tail) + " " + bg()[:1000]
        for name, text in forms.items():
            out.append((f"{name}:{it.id}", text))
            expect[f"{name}:{it.id}"] = it.id
        cw = it.context.split()
        if len(cw) >= 10:
            s = rng.randrange(0, len(cw) - 8 + 1)
            out.append((f"near8:{it.id}", bg()[:1500] + " " + " ".join(cw[s : s + 8]) + ". " + bg()[:1500]))
            phrases = [" ".join(cw[k : k + 5]) for k in range(0, len(cw) - 5, 9)]
            out.append((f"common:{it.id}", " ... ".join(p + " " + bg()[:300] for p in phrases)))
    return out, expect


def recall_precision(work: Path, corpus_dir: Path, items, n_background: int, seed: int = 11) -> dict:
    index = ItemIndex.build(items)
    rng = random.Random(seed)
    background = []
    with open(sorted(corpus_dir.glob("*.jsonl"))[0], encoding="utf-8") as f:
        for line in f:
            background.append(json.loads(line)["text"])
            if len(background) >= n_background:
                break
    docs, expect = planted_docs(items, index, background, rng)
    mixed = [(f"bg-{k}", t) for k, t in enumerate(background)] + docs
    rng.shuffle(mixed)
    pdir = work / "planted"
    if pdir.exists():
        shutil.rmtree(pdir)
    pdir.mkdir(parents=True)
    with open(pdir / "planted.jsonl", "w", encoding="utf-8") as f:
        for doc_id, text in mixed:
            f.write(json.dumps({"text": text, "id": doc_id}, ensure_ascii=False) + "\n")
    out = work / "scan-planted"
    if out.exists():
        shutil.rmtree(out)
    rep = scan([str(pdir)], out, data=str(ROOT), workers=1)
    flagged = [json.loads(x) for x in (out / "documents.jsonl").read_text(encoding="utf-8").splitlines()]
    found = {d["id"]: set(d["items"]) for d in flagged}
    by_form: dict[str, list[int]] = {}
    missed = []
    for doc_id, item_id in expect.items():
        form = doc_id.split(":")[0]
        ok = item_id in found.get(doc_id, set())
        by_form.setdefault(form, [0, 0])
        by_form[form][0] += ok
        by_form[form][1] += 1
        if not ok:
            missed.append(doc_id)
    false_pos = [d for d in flagged if d["id"] not in expect]
    wrong_items = [d for d in flagged if d["id"] in expect and set(d["items"]) - {expect[d["id"]]}]
    return {
        "documents": len(mixed),
        "background": len(background),
        "planted": len(expect),
        "near_misses": sum(1 for d, _ in docs if d.split(":")[0] in ("near8", "common")),
        "by_form": by_form,
        "missed": missed,
        "false_positives": [d["id"] for d in false_pos],
        "planted_with_other_items": [d["id"] for d in wrong_items],
        "dirty_items": rep["totals"]["dirty"],
        "matchable_items": len({g.item for g in index.grams if g.kind != "wrong"}),
    }


def micro_profile(corpus_dir: Path, items, mb: float = 50.0) -> dict:
    """Where one process's time goes on the first `mb` MB of documents, outside datatrove: JSON parsing,
    then the filter's own batches (normalising and splitting; matching: vocabulary lookup, hashing,
    bitmap and exact check), and the vocabulary lookup alone."""
    from itertools import repeat

    import numpy as np
    import orjson
    from datatrove.data import Document

    from base_bench.contamination.canary import canaries_of
    from base_bench.contamination.normalize import normalized
    from base_bench.contamination.steps import BATCH, ItemNGramFilter

    index = ItemIndex.build(items)
    filt = ItemNGramFilter(index, canaries_of(items))
    lines, size = [], 0
    with open(sorted(corpus_dir.glob("*.jsonl"))[0], "rb") as f:
        for line in f:
            lines.append(line)
            size += len(line)
            if size >= mb * 1e6:
                break
    clock = time.process_time  # CPU time: the machine is shared, and wall time counts the others' load
    t = {}
    t0 = clock()
    texts = [orjson.loads(x)["text"] for x in lines]
    t["json"] = clock() - t0
    docs = [Document(text=x, id=str(i)) for i, x in enumerate(texts)]
    filt.filter_batch(docs[:10])
    t0 = clock()
    for s in range(0, len(docs), BATCH):
        filt.filter_batch(docs[s : s + BATCH])
    t["filter"] = clock() - t0
    t0 = clock()
    norms = [normalized(x) for x in texts]
    t["normalise"] = clock() - t0
    t0 = clock()
    splits = [n.split() for n in norms]
    t["split"] = clock() - t0
    batches = []
    for s in range(0, len(splits), BATCH):
        ws = []
        for x in splits[s : s + BATCH]:
            ws += x
            ws.append(b"")
        batches.append(ws)
    t0 = clock()
    for ws in batches:
        index.find(ws)
    t["match"] = clock() - t0
    t0 = clock()
    for ws in batches:
        np.fromiter(map(index.vocab.get, ws, repeat(-1)), dtype=np.int64, count=len(ws))
    t["match_vocab_lookup"] = clock() - t0
    t["match_windows_hash_check"] = t["match"] - t["match_vocab_lookup"]
    return {
        "mb": round(size / 1e6, 1),
        "documents": len(lines),
        "words": sum(map(len, splits)),
        "ascii_share": round(sum(x.isascii() for x in texts) / len(texts), 3),
        "seconds": {k: round(v, 3) for k, v in t.items()},
        "mb_per_s": {k: round(size / 1e6 / v, 1) for k, v in t.items() if v > 0},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="scratch folder for the corpus and scans (not the repo)")
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--background", type=int, default=20000, help="background documents of the planted corpus")
    args = ap.parse_args()
    if ROOT in args.work.resolve().parents or args.work.resolve() == ROOT:
        sys.exit("--work must be outside the repository")
    corpus_dir = args.work / "corpus"
    info_file = args.work / "corpus.json"
    if not args.skip_build:
        if corpus_dir.exists():
            shutil.rmtree(corpus_dir)
        info, build_s = timed_call(build_corpus, corpus_dir, args.gb, args.shards)
        info["build_s"] = round(build_s, 1)
        info_file.write_text(json.dumps(info))
    info = json.loads(info_file.read_text())
    items = list(load_dataset_file(bundled_path()).items)
    shards = sorted(str(p) for p in corpus_dir.glob("*.jsonl"))
    res = {
        "corpus": info,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
    }
    res["profile"] = micro_profile(corpus_dir, items)
    runs = {}
    for workers, subset in ((1, shards), (2, shards), (2, shards[: max(1, len(shards) // 4)])):
        key = f"{workers}w-{len(subset)}shards"
        rep, wall, l0, l1 = timed_scan(subset, args.work / f"scan-{key}", workers, tasks=len(subset))
        runs[key] = {
            "workers": workers,
            "shards": len(subset),
            "bytes": rep["totals"]["bytes"],
            "documents": rep["totals"]["documents_scanned"],
            "words": rep["totals"]["words"],
            "flagged": rep["totals"]["documents_flagged"],
            "dirty": rep["totals"]["dirty"],
            "timing": rep["timing"],
            "wall_s": round(wall, 1),
            "loadavg_before_after": [l0, l1],
        }
        print(key, json.dumps(runs[key]), flush=True)
    res["runs"] = runs
    res["planted"] = recall_precision(args.work, corpus_dir, items, args.background)
    (args.work / "results.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res["planted"], indent=1))
    print(json.dumps(res["profile"], indent=1))


if __name__ == "__main__":
    main()

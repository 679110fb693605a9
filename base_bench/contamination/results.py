"""The scan's result: every task's records merged into contamination.json (the source of truth).

    rep = build_report(plan, hits, skipped, task_stats)     # a JSON-able dict; pure
    write_report(out_dir)     # reads out_dir/work/, writes contamination.json, contamination.md, documents.jsonl

Per item, from every flagged document's record:
* fraction: the share of the item's words (context + correct continuation) that lie in at least one
  matched context, answer or leak n-gram, over all documents;
* llama2: the Llama 2 subsets it falls in (App. A.6): "clean" below 20% and "not clean" from 20%,
  "not dirty" below 80% and "dirty" from 80%, so each item is in two of the four;
* answer_leaked: a matched n-gram runs from the context into the correct continuation;
* dirty (GPT-3's rule, App. C): any context, answer or leak n-gram of the item is in the corpus.
  Matches of wrong continuations are reported apart (wrong_continuations) and do not make it dirty;
* documents: up to max_documents of the documents that matched (file, line or row, id, excerpt),
  with n_documents the full count; documents.jsonl lists every flagged document.

Everything is sorted by unit and position, so the result does not depend on how many tasks or
workers the scan used.
"""

from __future__ import annotations

import glob
import json
import time
from pathlib import Path

LLAMA2_CLEAN, LLAMA2_DIRTY = 0.2, 0.8
DIRTY_RULE = (
    "GPT-3 (Brown et al. 2020, App. C): an item is dirty when any n-gram of its context, its correct "
    "continuation, or the two joined is found in a document; wrong continuations are reported apart"
)


def _lines(pattern: str) -> list[dict]:
    out = []
    for f in sorted(glob.glob(pattern)):
        with open(f, encoding="utf-8") as fh:
            out += [json.loads(x) for x in fh if x.strip()]
    return out


def load_hits(work_dir: str) -> list[dict]:
    return sorted(
        _lines(str(Path(work_dir) / "hits" / "*.jsonl")),
        key=lambda h: (h["unit"] if h["unit"] is not None else -1, h["pos"] or 0, str(h["id"])),
    )


def load_skipped(work_dir: str) -> list[dict]:
    got = _lines(str(Path(work_dir) / "skipped-*" / "*.jsonl"))
    plan_file = Path(work_dir) / "plan.json"
    if plan_file.exists():
        got += json.loads(plan_file.read_text(encoding="utf-8")).get("skipped_at_plan", [])
    return sorted({s["unit"]: s for s in got}.values(), key=lambda s: s["unit"])


def load_task_stats(work_dir: str) -> dict:
    out = {}
    for kind in ("scan", "read-jsonl", "read-parquet", "read-hf", "read-txt"):
        files = sorted(glob.glob(str(Path(work_dir) / kind / "*.json")))
        out[kind] = [json.loads(Path(f).read_text(encoding="utf-8")) for f in files]
    return out


def llama2_subsets(fraction: float) -> list[str]:
    return ["clean" if fraction < LLAMA2_CLEAN else "not clean", "not dirty" if fraction < LLAMA2_DIRTY else "dirty"]


def covered_fraction(spans, length: int) -> float:
    """Share of positions 0..length-1 inside at least one [start, end) span."""
    if length <= 0:
        return 0.0
    covered = set()
    for s, e in spans:
        covered.update(range(max(0, s), min(length, e)))
    return len(covered) / length


def _where(unit_format: str | None, pos) -> dict:
    if pos is None:
        return {}
    return {"line": pos} if unit_format == "jsonl" else {"row": pos}


def build_report(plan: dict, hits: list[dict], skipped: list[dict], stats: dict, timing: dict | None = None) -> dict:
    items = plan["items"]
    units = {u["unit"]: u for u in plan["corpus"]["units"]}
    K = plan["settings"]["max_documents_per_item"]
    acc = [{"spans": [], "kinds": {}, "docs": [], "n_docs": 0, "wrong": {}} for _ in items]
    documents, canary_docs = [], []
    for h in hits:
        fmt = units.get(h["unit"], {}).get("format")
        where = {"file": h["file"], **_where(fmt, h["pos"]), "id": h["id"]}
        documents.append(
            {
                **where,
                "items": [items[e["item"]]["id"] for e in h["items"]],
                "kinds": sorted({k for e in h["items"] for k in e["kinds"]}),
                "canary": h["canary"],
            }
        )
        if h["canary"]:
            canary_docs.append(
                {**where, "canary": h["canary"], "items": len(h["items"]), "excerpt": h.get("canary_excerpt", "")}
            )
        for e in h["items"]:
            a = acc[e["item"]]
            a["spans"] += e["cover"]
            for k in e["kinds"]:
                a["kinds"][k] = a["kinds"].get(k, 0) + 1
            for c in e["wrong"]:
                a["wrong"][c] = a["wrong"].get(c, 0) + 1
            a["n_docs"] += 1
            if len(a["docs"]) < K:
                a["docs"].append({**where, "kinds": e["kinds"], "excerpt": e["excerpt"]})
    out_items = []
    for it, a in zip(items, acc):
        frac = covered_fraction(a["spans"], it["words"])
        right = {k: v for k, v in a["kinds"].items() if k != "wrong"}
        out_items.append(
            {
                "id": it["id"],
                "category": it["category"],
                "difficulty": it["difficulty"],
                "words": it["words"],
                "matchable": it["matchable"],
                "dirty": bool(right),
                "answer_leaked": "leak" in right,
                "fraction": round(frac, 4),
                "llama2": llama2_subsets(frac),
                "documents_by_kind": right,
                "wrong_continuations": [{"choice": c, "documents": n} for c, n in sorted(a["wrong"].items())],
                "n_documents": a["n_docs"],
                "documents": a["docs"],
            }
        )
    scan_stats = stats.get("scan", [])
    read_s = sum(s["read_s"] for k, v in stats.items() if k.startswith("read-") for s in v)
    phases = {k: round(sum(s.get(k, 0.0) for s in scan_stats), 3) for k in ("normalise_s", "match_s", "record_s")}
    task_s = sum(s.get("task_s", 0.0) for s in scan_stats)
    cpu_s = sum(s.get("cpu_s", 0.0) for s in scan_stats)
    timing = dict(timing or {})
    total_bytes = sum(u["bytes"] for u in plan["corpus"]["units"])
    if timing.get("scan_wall_s"):
        w = timing["scan_wall_s"]
        timing["mb_per_s"] = round(total_bytes / 1e6 / w, 2)
        timing["mb_per_s_per_worker"] = round(total_bytes / 1e6 / w / max(1, plan["settings"]["workers"]), 2)
    if cpu_s:  # what one worker does per second of its own CPU time (the wall time counts other load too)
        timing["mb_per_cpu_s"] = round(total_bytes / 1e6 / cpu_s, 2)
    timing.update(
        {
            "task_s": round(task_s, 3),
            "cpu_s": round(cpu_s, 3),
            "read_s": round(read_s, 3),
            **phases,
            "max_worker_rss_mb": round(max((s.get("maxrss_kb", 0) for s in scan_stats), default=0) / 1024, 1),
        }
    )
    n_dirty = sum(i["dirty"] for i in out_items)
    totals = {
        "items": len(out_items),
        "dirty": n_dirty,
        "clean": len(out_items) - n_dirty,
        "answer_leaked": sum(i["answer_leaked"] for i in out_items),
        "unmatchable": sum(not i["matchable"] for i in out_items),
        "items_with_wrong_continuation_matches": sum(bool(i["wrong_continuations"]) for i in out_items),
        "llama2": {c: sum(c in i["llama2"] for i in out_items) for c in ("clean", "not clean", "not dirty", "dirty")},
        "documents_scanned": sum(s.get("docs", 0) for s in scan_stats),
        "documents_flagged": len(documents),
        "documents_with_canary": len(canary_docs),
        "characters": sum(s.get("chars", 0) for s in scan_stats),
        "words": sum(s.get("words", 0) for s in scan_stats),
        "files": len(units),
        "files_skipped": len(skipped),
        "bytes": total_bytes,
    }
    return {
        "tool": "base-bench contamination scan",
        "base_bench_version": plan.get("base_bench_version"),
        "data": plan["data"],
        "settings": plan["settings"],
        "corpus": {
            "files": plan["corpus"]["units"],
            "ignored": plan["corpus"]["ignored"],
            "skipped": [{"file": s["file"], "error": s["error"]} for s in skipped],
            "bytes": total_bytes,
        },
        "totals": totals,
        "timing": timing,
        "canary": {"strings": plan["canaries"], "documents": canary_docs},
        "items": out_items,
        "_documents": documents,
    }


def write_report(out_dir: str) -> dict:
    """Merge out_dir/work/ into contamination.json, contamination.md and documents.jsonl."""
    from ..results.reports_io import write_atomic
    from .render import render_markdown

    out = Path(out_dir)
    work = out / "work"
    plan = json.loads((work / "plan.json").read_text(encoding="utf-8"))
    timing_file = work / "timing.json"
    timing = json.loads(timing_file.read_text(encoding="utf-8")) if timing_file.exists() else {}
    timing["report_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    rep = build_report(plan, load_hits(str(work)), load_skipped(str(work)), load_task_stats(str(work)), timing)
    documents = rep.pop("_documents")
    write_atomic(
        out / "documents.jsonl", "".join(json.dumps(d, ensure_ascii=False, allow_nan=False) + "\n" for d in documents)
    )
    write_atomic(out / "contamination.json", json.dumps(rep, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    write_atomic(out / "contamination.md", render_markdown(rep))
    return rep

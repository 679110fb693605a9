"""Views of contamination.json: the Markdown page and the terminal summary (formatting only).

text = render_markdown(rep)          # contamination.md
print("\\n".join(summary_lines(rep)))

File names, document ids, excerpts and item ids come from a corpus and a data file that others
wrote: every one goes into the Markdown through results.markdown (md_text, md_cell, md_code).
"""

from __future__ import annotations

from ..results.markdown import md_cell, md_code, md_text


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.2f} MB" if n >= 1e4 else f"{n} bytes"


def _where(d: dict) -> str:
    pos = f"line {d['line']}" if "line" in d else f"row {d['row']}" if "row" in d else ""
    return (
        f"{d['file']}"
        + (f" {pos}" if pos else "")
        + (f" (id {d['id']})" if d.get("id") not in (None, d["file"]) else "")
    )


def summary_lines(rep: dict) -> list[str]:
    t, s = rep["totals"], rep["settings"]
    lines = [
        f"scanned {t['files']} file(s), {_gb(t['bytes'])}, {t['documents_scanned']} documents, against "
        f"{t['items']} items of {rep['data']['kind']} data (SHA-256 {rep['data']['sha256'][:12]}…); N = {s['n']}",
        f"dirty items: {t['dirty']} of {t['items']} (answer leaked in {t['answer_leaked']}); "
        f"Llama 2: {t['llama2']['clean']} clean, {t['llama2']['dirty']} dirty; "
        f"wrong-continuation matches in {t['items_with_wrong_continuation_matches']} item(s)",
        f"documents holding benchmark text: {t['documents_flagged']}; holding the canary: {t['documents_with_canary']}",
    ]
    if rep["corpus"]["skipped"]:
        lines.append(
            f"skipped {len(rep['corpus']['skipped'])} bad file(s) (--skip-bad): "
            + "; ".join(x["error"] for x in rep["corpus"]["skipped"][:3])
        )
    tm = rep.get("timing", {})
    if tm.get("mb_per_s"):
        lines.append(f"{tm['mb_per_s']} MB/s ({tm['mb_per_s_per_worker']} MB/s per worker, {s['workers']} worker(s))")
    return lines


def render_markdown(rep: dict) -> str:
    t, s, d = rep["totals"], rep["settings"], rep["data"]
    out = [
        "# Benchmark contamination scan",
        "",
        f"Items: {t['items']} from {md_code(d['path'])} ({md_text(d['kind'])}, SHA-256 {md_code(d['sha256'])}).",
        f"Corpus: {t['files']} file(s), {_gb(t['bytes'])}, {t['documents_scanned']} documents, {t['words']} words.",
        "",
        "| | items |",
        "|---|---:|",
        f"| dirty (GPT-3 rule) | {t['dirty']} |",
        f"| clean | {t['clean']} |",
        f"| answer leaked | {t['answer_leaked']} |",
        f"| Llama 2 clean (< 20% of words covered) | {t['llama2']['clean']} |",
        f"| Llama 2 not clean (≥ 20%) | {t['llama2']['not clean']} |",
        f"| Llama 2 not dirty (< 80%) | {t['llama2']['not dirty']} |",
        f"| Llama 2 dirty (≥ 80%) | {t['llama2']['dirty']} |",
        f"| wrong continuations matched | {t['items_with_wrong_continuation_matches']} |",
        f"| too short to match (< {s['min_gram_words']} words) | {t['unmatchable']} |",
        "",
        f"Documents holding benchmark text: **{t['documents_flagged']}** (all listed in `documents.jsonl`); "
        f"holding the canary: **{t['documents_with_canary']}**.",
        "",
        "## Settings",
        "",
        f"- N = {s['n']}: {md_text(s['n_rule'])}",
        f"- Normalisation: {md_text(s['normalisation'])}",
        f"- Dirty: {md_text(s['dirty_rule'])}.",
        f"- Text key {md_code(s['text_key'])}, id key {md_code(s['id_key'])}; executor {md_text(s['executor'])}, "
        f"{s['workers']} worker(s), {s['tasks']} task(s).",
    ]
    if rep["corpus"]["skipped"]:
        out += ["", "## Skipped files", ""] + [f"- {md_cell(x['error'])}" for x in rep["corpus"]["skipped"]]
    if rep["corpus"]["ignored"]:
        out += [
            "",
            f"Not read ({len(rep['corpus']['ignored'])} file(s) of other types): "
            + ", ".join(md_code(x) for x in rep["corpus"]["ignored"][:20])
            + (" …" if len(rep["corpus"]["ignored"]) > 20 else ""),
        ]
    out += ["", "## Canary", ""]
    out += [f"Looked for: {', '.join(md_code(c) for c in rep['canary']['strings'])}.", ""]
    if rep["canary"]["documents"]:
        out += ["| document | benchmark items in it | excerpt |", "|---|---:|---|"]
        out += [
            f"| {md_cell(_where(c))} | {c['items']} | {md_cell(c['excerpt'])} |" for c in rep["canary"]["documents"]
        ]
    else:
        out.append("No document holds the canary.")
    hit = [i for i in rep["items"] if i["dirty"] or i["wrong_continuations"]]
    out += ["", f"## Items with matches ({len(hit)})", ""]
    if not hit:
        out.append("No item n-gram was found in the corpus.")
    else:
        out += [
            "| item | dirty | answer leaked | words covered | Llama 2 | documents | wrong continuations | first document |",
            "|---|---|---|---:|---|---:|---|---|",
        ]
        for i in hit:
            first = i["documents"][0] if i["documents"] else None
            wrong = ", ".join(f"choice {w['choice']} in {w['documents']}" for w in i["wrong_continuations"]) or "–"
            out.append(
                f"| {md_cell(i['id'])} | {'yes' if i['dirty'] else 'no'} | {'yes' if i['answer_leaked'] else 'no'} | "
                f"{100 * i['fraction']:.0f}% | {md_cell(', '.join(i['llama2']))} | {i['n_documents']} | {wrong} | "
                + (f"{md_cell(_where(first))}: {md_cell(first['excerpt'])}" if first else "–")
                + " |"
            )
    tm = rep.get("timing", {})
    if tm.get("mb_per_s"):
        out += [
            "",
            "## Time",
            "",
            f"Scan: {tm['scan_wall_s']:.1f} s, {tm['mb_per_s']} MB/s ({tm['mb_per_s_per_worker']} MB/s per "
            f"worker; {tm.get('mb_per_cpu_s', '?')} MB per CPU second). Summed over tasks: reading {tm['read_s']:.1f} s, normalising {tm['normalise_s']:.1f} s, "
            f"matching {tm['match_s']:.1f} s; peak worker RSS {tm['max_worker_rss_mb']} MB.",
        ]
    return "\n".join(out) + "\n"

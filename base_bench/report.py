"""Build report.json (the single source of truth) and render predictions.md from it.

    report = build_report(config=..., data=..., official=..., reasons=..., items=..., results=...)
    text = render_markdown(report)       # reads nothing but the report dict

The terminal summary (`summary_lines`) is rendered from the report too, so no number is computed
twice.
"""

from __future__ import annotations

import json
from typing import Sequence

from . import card, elo
from .records import Item, ItemResult

BENCHMARK = f"BananaMind Base Bench {card.VERSION}"


def build_report(*, config: dict, data: dict, official: bool, reasons: list[str], items: Sequence[Item],
                 results: dict[str, ItemResult], timing: dict | None = None) -> dict:
    """Assemble the report for `items` (in file order) from their finished `results`."""
    rows, item_rows = [], []
    for it in items:
        r = results[it.id]
        rows.append((it.category, it.difficulty, it.item_elo, it.point_weight, r.correct))
        d = r.to_json()
        d.update(
            category=it.category, difficulty=it.difficulty, item_elo=it.item_elo, point_weight=it.point_weight,
            tags=list(it.tags), selected_text=it.continuations[r.prediction], label_text=it.continuations[it.label],
        )
        item_rows.append(d)
    summary = elo.summarize(rows)
    summary["categories"] = {c: summary["categories"][c] for c in card.CATEGORIES if c in summary["categories"]}
    summary["n_truncated"] = sum(1 for d in item_rows if d["truncated"])
    return {
        "benchmark": BENCHMARK,
        "config": config,
        "data": data,
        "official": official,
        "non_official_reasons": reasons,
        "results": summary,
        "items": item_rows,
        "timing": timing or {},
    }


def dumps(report: dict) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def summary_lines(report: dict) -> list[str]:
    res = report["results"]
    o = res["overall"]
    lines = [
        f"Overall Elo {o['elo']:.0f}  (raw accuracy {_pct(o['raw_accuracy'])}, weighted {_pct(o['weighted_accuracy'])}, "
        f"{o['n_correct']}/{o['n']} items)"
    ]
    for cat, c in res["categories"].items():
        lines.append(f"  {cat:<20} Elo {c['elo']:6.0f}  {c['n_correct']:>3}/{c['n']:<3} {_pct(c['raw_accuracy'])}")
    if report["official"]:
        lines.append(f"Official {BENCHMARK} result.")
    else:
        lines.append("NOT an official result: " + "; ".join(report["non_official_reasons"]))
    return lines


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "⏎").strip() or "(blank)"


def render_markdown(report: dict) -> str:
    cfg, data, res = report["config"], report["data"], report["results"]
    o = res["overall"]
    out = [f"# {report['benchmark']}: {cfg['model']['spec']}", ""]
    if report["official"]:
        out.append(f"**Official result** on the card's data (SHA-256 `{data['sha256']}`).")
    else:
        out.append("**Not an official result.** " + " ".join(f"{r[0].upper()}{r[1:]}." for r in report["non_official_reasons"]))
    out += [
        "",
        f"Data: {data['description']}, `{data['path']}`, SHA-256 `{data['sha256']}`.",
        f"Model: `{cfg['model']['spec']}` (revision {cfg['model'].get('revision') or 'n/a'}), device {cfg['device']}, "
        f"dtype {cfg['dtype']}, add_bos {cfg['add_bos']}, batch size {cfg['batch_size']}, scorer {cfg['scorer']}, "
        f"base-bench {cfg['runner_version']}.",
        "",
        f"## Overall Elo {o['elo']:.1f}",
        "",
        "| category | items | correct | raw accuracy | weighted accuracy | Elo |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for cat, c in res["categories"].items():
        out.append(f"| {cat} | {c['n']} | {c['n_correct']} | {_pct(c['raw_accuracy'])} | {_pct(c['weighted_accuracy'])} | {c['elo']:.1f} |")
    out.append(f"| **overall** | {o['n']} | {o['n_correct']} | {_pct(o['raw_accuracy'])} | {_pct(o['weighted_accuracy'])} | **{o['elo']:.1f}** |")
    out += ["", "| difficulty | items | correct | raw accuracy |", "|---|---:|---:|---:|"]
    for diff, d in res["difficulties"].items():
        out.append(f"| {diff} | {d['n']} | {d['n_correct']} | {_pct(d['raw_accuracy'])} |")
    if res.get("n_truncated"):
        out += ["", f"{res['n_truncated']} item(s) had their context cut to fit the model's window (marked ✂ below)."]
    out += ["", "## Items", "", "| id | difficulty | | selected | correct | mean log-probs |", "|---|---|---|---|---|---|"]
    for it in report["items"]:
        mark = "✓" if it["correct"] else "✗"
        if it["truncated"]:
            mark += " ✂"
        means = " ".join(f"{c['mean_logprob']:.3f}" for c in it["choices"])
        out.append(f"| {it['id']} | {it['difficulty']} | {mark} | {_md_cell(it['selected_text'])} | {_md_cell(it['label_text'])} | {means} |")
    return "\n".join(out) + "\n"

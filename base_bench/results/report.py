"""Build report.json (the single source of truth) and render predictions.md from it.

    report = build_report(config=..., data=..., official=..., reasons=..., items=..., results=...,
                          n_items_in_data=M, bootstrap_resamples=1000, bootstrap_seed=1234)
    text = render_markdown(report)       # reads nothing but the report dict

The terminal summary (`summary_lines`) is rendered from the report too, so no number is computed
twice.

Every Elo carries `elo_se` (curvature of the fitted objective, elo.elo_standard_error) and
`elo_ci95` (stratified percentile bootstrap, stats.bootstrap_intervals); every raw accuracy
carries a Wilson `raw_accuracy_ci95`. `results.uncertainty` records how they were computed, and
each item records `expected_p`, its chance of success under the fitted Overall Elo.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..items import card
from ..items.records import Item, ItemResult
from . import elo, rules, stats
from .markdown import md_cell, md_code, md_text

BENCHMARK = f"BananaMind Base Bench {card.VERSION}"


def build_report(
    *,
    config: dict,
    data: dict,
    official: bool,
    reasons: list[str],
    items: Sequence[Item],
    results: dict[str, ItemResult],
    timing: dict | None = None,
    n_items_in_data: int | None = None,
    bootstrap_resamples: int = stats.DEFAULT_RESAMPLES,
    bootstrap_seed: int = stats.DEFAULT_SEED,
) -> dict:
    """Assemble the report for `items` (in file order) from their finished `results`.

    `n_items_in_data` is how many items the data file holds (default: len(items)); the report
    says the intervals were computed on len(items) of them.
    """
    rows, item_rows = [], []
    for it in items:
        r = results[it.id]
        rows.append((it.category, it.difficulty, it.item_elo, it.point_weight, r.correct))
        d = r.to_json()
        for c, text in zip(d["choices"], it.continuations):
            c["n_chars"], c["n_bytes"] = rules.lengths(text)  # what lm-eval's length rules divide by (rescore)
        d.update(
            category=it.category,
            difficulty=it.difficulty,
            item_elo=it.item_elo,
            point_weight=it.point_weight,
            tags=list(it.tags),
            selected_text=it.continuations[r.prediction],
            label_text=it.continuations[it.label],
        )
        item_rows.append(d)
    summary = elo.summarize(rows)
    summary["categories"] = {c: summary["categories"][c] for c in card.CATEGORIES if c in summary["categories"]}
    summary["n_truncated"] = sum(1 for d in item_rows if d["truncated"])
    _add_uncertainty(summary, rows, bootstrap_resamples, bootstrap_seed)
    summary["uncertainty"] = {
        "confidence": stats.CONFIDENCE,
        "bootstrap_resamples": bootstrap_resamples,
        "bootstrap_seed": bootstrap_seed,
        "bootstrap_scheme": "items resampled with replacement within each category",
        "accuracy_interval": "wilson",
        "n_items_scored": len(items),
        "n_items_in_data": len(items) if n_items_in_data is None else n_items_in_data,
    }
    rating = summary["overall"]["elo"]
    for d in item_rows:
        d["expected_p"] = elo.expected(rating, d["item_elo"])
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


def _add_uncertainty(summary: dict, rows: list[tuple], resamples: int, seed: int) -> None:
    """Put elo_se, elo_ci95 and the accuracy intervals into the blocks of `elo.summarize`."""
    boot = stats.bootstrap_intervals(
        [r[2] for r in rows],
        [r[3] for r in rows],
        [r[4] for r in rows],
        [r[0] for r in rows],
        resamples=resamples,
        seed=seed,
    )
    blocks = [(summary["overall"], rows, boot["overall"])]
    blocks += [(b, [r for r in rows if r[0] == c], boot["strata"][c]) for c, b in summary["categories"].items()]
    for block, sub, intervals in blocks:
        outcomes = [(e, w, 1.0 if y else 0.0) for _, _, e, w, y in sub]
        block["elo_se"] = elo.elo_standard_error(block["elo"], outcomes)
        block["elo_ci95"] = intervals["elo_ci95"]
        block["raw_accuracy_ci95"] = list(stats.wilson_interval(block["n_correct"], block["n"]))
        block["weighted_accuracy_ci95"] = intervals["weighted_accuracy_ci95"]
    for d in summary["difficulties"].values():
        d["raw_accuracy_ci95"] = list(stats.wilson_interval(d["n_correct"], d["n"]))


def dumps(report: dict) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def pct(x: float) -> str:
    """A proportion as a percentage with one decimal, as every table and summary prints it."""
    return f"{100 * x:.1f}%"


def elo_cell(x) -> str:
    """An Elo (or its ±) for a table cell: whole numbers, "n/a" when a report lacks it."""
    return "n/a" if x is None else f"{x:.0f}"


def ci_cell(ci) -> str:
    """An Elo interval for a table cell: "968–1117", "n/a" when a report lacks it."""
    return "n/a" if not ci or None in ci else f"{ci[0]:.0f}–{ci[1]:.0f}"


def pct_cell(x) -> str:
    return "n/a" if x is None else pct(x)


def _range(ci, fmt: str, unit: str = "") -> str:
    return f"{format(ci[0], fmt)}{unit}–{format(ci[1], fmt)}{unit}"


def _elo_text(b: dict, fmt: str = ".0f") -> str:
    """'1043 ± 38 (95% CI 968–1117)' from a results block (plain Elo if it has no intervals)."""
    text = format(b["elo"], fmt)
    if "elo_se" in b:
        text += f" ± {format(b['elo_se'], fmt)}"
    if "elo_ci95" in b:
        text += f" (95% CI {_range(b['elo_ci95'], fmt)})"
    return text


def _acc_text(b: dict, key: str = "raw_accuracy") -> str:
    """'52.3% (95% CI 47.0–57.5%)' for b[key] and b[key + '_ci95']."""
    ci = b.get(key + "_ci95")
    return pct(b[key]) + (f" (95% CI {_range([100 * x for x in ci], '.1f', '%')})" if ci else "")


def _scope_note(res: dict) -> str | None:
    u = res.get("uncertainty") or {}
    n, m = u.get("n_items_scored"), u.get("n_items_in_data")
    return f"intervals computed on {n} of {m} items" if n is not None and m is not None and n < m else None


def _method_note(res: dict) -> str:
    u = res["uncertainty"]
    return (
        f"± is one standard error from the curvature of the fitted log-likelihood; it counts point weights "
        f"as games, so it is usually narrower than the spread from sampling items. Elo and weighted-accuracy "
        f"95% CIs are percentile bootstrap intervals ({u['bootstrap_resamples']} resamples, "
        f"{u['bootstrap_scheme']}, seed {u['bootstrap_seed']}). Raw-accuracy 95% CIs are "
        f"{u['accuracy_interval'].capitalize()} score intervals."
    )


def summary_lines(report: dict) -> list[str]:
    res = report["results"]
    o = res["overall"]
    lines = [
        f"Overall Elo {_elo_text(o)}; raw accuracy {_acc_text(o)}, weighted {pct(o['weighted_accuracy'])}; "
        f"{o['n_correct']}/{o['n']} items"
    ]
    for cat, c in res["categories"].items():
        lines.append(f"  {cat:<20} Elo {_elo_text(c):<28} {c['n_correct']:>3}/{c['n']:<3} {_acc_text(c)}")
    if "uncertainty" in res:
        u = res["uncertainty"]
        lines.append(
            f"(± = curvature standard error; Elo CI = bootstrap, {u['bootstrap_resamples']} resamples within "
            f"categories, seed {u['bootstrap_seed']}; accuracy CI = {u['accuracy_interval'].capitalize()})"
        )
    note = _scope_note(res)
    if note:
        lines.append(f"Note: {note}.")
    if report["official"]:
        lines.append(f"Official {BENCHMARK} result.")
    else:
        lines.append("NOT an official result: " + "; ".join(report["non_official_reasons"]))
    return lines


def _surprising_misses(items: list[dict], top: int = 10) -> list[str]:
    misses = sorted((it for it in items if not it["correct"] and "expected_p" in it), key=lambda it: -it["expected_p"])[
        :top
    ]
    out = ["", "## Most surprising misses", ""]
    if not misses:
        return out + ["No misses."]
    out += [
        f"Wrong answers on the items the Overall Elo gave the highest chance of success (top {top}).",
        "",
        "| # | id | category | difficulty | item Elo | expected p | selected | correct |",
        "|---:|---|---|---|---:|---:|---|---|",
    ]
    for rank, it in enumerate(misses, 1):
        out.append(
            f"| {rank} | {md_cell(it['id'])} | {md_cell(it['category'])} | {md_cell(it['difficulty'])} | "
            f"{it['item_elo']:g} | {it['expected_p']:.2f} | {md_cell(it['selected_text'])} | "
            f"{md_cell(it['label_text'])} |"
        )
    return out


def _adapter_lines(adapter: dict | None) -> list[str]:
    """'Adapter: `org/lora` (LORA, revision abc, fingerprint 1234), trained on `org/base`.'"""
    if not adapter:
        return []
    where = ", ".join(
        md_text(x)
        for x in (
            adapter.get("peft_type"),
            f"revision {adapter['revision']}" if adapter.get("revision") else None,
            f"fingerprint {adapter['fingerprint']}" if adapter.get("fingerprint") else None,
        )
        if x
    )
    base = adapter.get("base_model_name_or_path")
    return [
        f"Adapter: {md_code(adapter.get('spec'))}"
        + (f" ({where})" if where else "")
        + (f", trained on {md_code(base)}" if base else "")
        + "."
    ]


def _ollama_lines(found) -> list[str]:
    """'Ollama model `smollm2:135m`, model layer `sha256:...`, checked against the file.' (--model ollama:...)"""
    if not isinstance(found, dict):
        return []
    return [
        f"Ollama model {md_code(found.get('name'))}, model layer {md_code(found.get('digest'))}, "
        "checked against the file."
    ]


def _note_lines(cfg: dict) -> list[str]:
    """The run's notes (BOS, chat model, adapter base model, the engine check's spread), as
    evaluate() printed them."""
    check = cfg.get("packing_check")
    spread = check.get("note") if isinstance(check, dict) else None
    notes = [str(n) for n in (cfg.get("bos_note"), cfg.get("chat_note"), cfg.get("adapter_note"), spread) if n]
    return [line for n in notes for line in ("", f"> {md_text(n[0].upper() + n[1:])}")]


def _batch_text(cfg: dict) -> str:
    """How the run was cut into passes: "batch size 8", or "at most 4096 tokens per pass"."""
    if cfg.get("batch_tokens") is not None:
        return f"at most {cfg['batch_tokens']} tokens per pass"
    return f"batch size {cfg['batch_size']}"


def render_markdown(report: dict) -> str:
    cfg, data, res = report["config"], report["data"], report["results"]
    o = res["overall"]
    m = md_text
    out = [f"# {m(report['benchmark'])}: {m(cfg['model']['spec'])}", ""]
    if report["official"]:
        out.append(f"**Official result** on the card's data (SHA-256 {md_code(data['sha256'])}).")
    else:
        out.append(
            "**Not an official result.** "
            + " ".join(f"{m(r[0].upper() + r[1:])}." for r in map(str, report["non_official_reasons"]) if r)
        )
    out += [
        "",
        f"Data: {m(data['description'])}, {md_code(data['path'])}, SHA-256 {md_code(data['sha256'])}.",
        f"Model: {md_code(cfg['model']['spec'])} (revision {m(cfg['model'].get('revision') or 'n/a')}), "
        f"device {m(cfg['device'])}, dtype {m(cfg['dtype'])}, add_bos {m(cfg['add_bos'])}, {m(_batch_text(cfg))}, "
        f"scorer {m(cfg['scorer'])}, base-bench {m(cfg['runner_version'])}.",
        *_adapter_lines(cfg["model"].get("adapter")),
        *_ollama_lines(cfg["model"].get("ollama")),
        *([f"Training step {report['training_step']}."] if "training_step" in report else []),
        *_note_lines(cfg),
        "",
        f"## Overall Elo {_elo_text(o, '.1f')}",
        "",
    ]
    if "uncertainty" in res:
        note = _scope_note(res)
        out += [_method_note(res) + (f" Note: {note}." if note else ""), ""]
    out += [
        "| category | items | correct | raw accuracy (95% CI) | weighted accuracy (95% CI) | Elo ± SE | Elo 95% CI |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]

    def row(name, b, bold=False):
        elo_pm = f"{b['elo']:.1f}" + (f" ± {b['elo_se']:.1f}" if "elo_se" in b else "")
        ci = _range(b["elo_ci95"], ".1f") if "elo_ci95" in b else ""
        if bold:
            name, elo_pm = f"**{name}**", f"**{elo_pm}**"
        return (
            f"| {name} | {b['n']} | {b['n_correct']} | {_acc_text(b)} | {_acc_text(b, 'weighted_accuracy')} | "
            f"{elo_pm} | {ci} |"
        )

    out += [row(md_cell(cat), c) for cat, c in res["categories"].items()]
    out.append(row("overall", o, bold=True))
    out += ["", "| difficulty | items | correct | raw accuracy (95% CI) |", "|---|---:|---:|---:|"]
    for diff, d in res["difficulties"].items():
        out.append(f"| {md_cell(diff)} | {d['n']} | {d['n_correct']} | {_acc_text(d)} |")
    if res.get("n_truncated"):
        out += ["", f"{res['n_truncated']} item(s) had their context cut to fit the model's window (marked ✂ below)."]
    out += _surprising_misses(report["items"])
    out += [
        "",
        "## Items",
        "",
        "Expected p is the chance of success that the Overall Elo predicts for the item.",
        "",
        "| id | difficulty | item Elo | expected p | | selected | correct | mean log-probs |",
        "|---|---|---:|---:|---|---|---|---|",
    ]
    for it in report["items"]:
        mark = "✓" if it["correct"] else "✗"
        if it["truncated"]:
            mark += " ✂"
        means = " ".join(f"{c['mean_logprob']:.3f}" for c in it["choices"])
        p = f"{it['expected_p']:.2f}" if "expected_p" in it else ""
        out.append(
            f"| {md_cell(it['id'])} | {md_cell(it['difficulty'])} | {it['item_elo']:g} | {p} | {mark} | "
            f"{md_cell(it['selected_text'])} | {md_cell(it['label_text'])} | {means} |"
        )
    return "\n".join(out) + "\n"

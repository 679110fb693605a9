"""`base-bench rescore`'s table in words: rescore.md and the terminal lines, from rescore.json's dict.

    text = render_markdown(table)          # rescore.md
    lines = summary_lines(table)           # what the command prints

Both read nothing but the dict `rescoring.build_table` made, so the terminal, rescore.json and
rescore.md always agree. Every rule but the card's says, wherever it appears, that it is never
official.
"""

from __future__ import annotations

from .markdown import md_cell, md_code, md_text
from .report import ci_cell, pct
from .rules import CARD_RULE

FLIP_LINES = 5  # flipped items shown per run and rule on the terminal; rescore.md lists them all


def _status(table: dict, rule: str, block: dict) -> str:
    if rule != CARD_RULE:
        return "never official"
    return "official" if block["official"] else "not official"


def _tau(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _diff(x) -> str:
    return "not comparable" if x is None else f"{x:.3g}"


def _lengths(f: dict, k: int) -> str:
    c = f["lengths"][k]
    tokens = "?" if c["n_tokens"] is None else c["n_tokens"]
    return f"{tokens}/{c['n_chars']}/{c['n_bytes']}"


def _flip_text(f: dict, rule: str) -> str:
    right = "right" if f[f"correct_{rule}"] else "wrong"
    return (
        f"{f['id']}: mean picks {f['mean']} ({_lengths(f, f['mean'])}), {rule} picks {f[rule]} "
        f"({_lengths(f, f[rule])}), label {f['label']}: now {right}"
    )


def summary_lines(table: dict) -> list[str]:
    rules = list(table["rules"])
    lines = [
        f"{len(table['runs'])} run(s), data SHA-256 {table['data_sha256'][:12]}…; rules: "
        + ", ".join(f"{r} ({d['description']})" for r, d in table["rules"].items()),
    ]
    if any(r != CARD_RULE for r in rules):
        lines.append(
            "Only mean, the card's rule, can be official; "
            + ", ".join(r for r in rules if r != CARD_RULE)
            + " never are."
        )
    for row in table["runs"]:
        lines += ["", f"{row['name']}: {row['model']}  ({row['report']})"]
        for rule, b in row["rules"].items():
            line = (
                f"  {rule:<9} Elo {b['elo']:7.1f}  95% CI {ci_cell(b['elo_ci95']):<10} raw {pct(b['raw_accuracy']):>6}  "
                f"rank {b['rank']}  {_status(table, rule, b)}"
            )
            if "reproduces_run" in b:
                r = b["reproduces_run"]
                line += f"; the run again: same choice on {r['same_choice']}/{r['n_items']}, max difference {_diff(r['max_abs_diff'])}"
            if "flips_vs_mean" in b:
                fl = b["flips_vs_mean"]
                line += f"; choice differs from mean on {fl['n']} item(s) ({fl['now_right']} now right, {fl['now_wrong']} now wrong)"
            lines.append(line)
            for f in (b.get("flips_vs_mean") or {}).get("items", [])[:FLIP_LINES]:
                lines.append(f"      {_flip_text(f, rule)}")
            n = len((b.get("flips_vs_mean") or {}).get("items", []))
            if n > FLIP_LINES:
                lines.append(f"      … and {n - FLIP_LINES} more (all are in rescore.md and rescore.json)")
    if table["tau_b"]:
        lines += [
            "",
            "Kendall's tau-b between the rankings: "
            + ", ".join(f"{t['a']}–{t['b']} {_tau(t['tau_b'])}" for t in table["tau_b"]),
        ]
    return lines


def render_markdown(table: dict) -> str:
    rules = list(table["rules"])
    out = [f"# {md_text(table['benchmark'])}: runs rescored under {len(rules)} rule(s)", ""]
    out += [
        f"Data SHA-256 {md_code(table['data_sha256'])}. No model was loaded: the choices are picked again from each run's stored log-probs.",
        "",
    ]
    out += ["| rule | ranks by | official |", "|---|---|---|"]
    for r, d in table["rules"].items():
        out.append(f"| {r} | {md_cell(d['description'])} | {'as the run' if d['can_be_official'] else '**never**'} |")
    out += ["", md_text(table["note"]), "", "## Elo and rank under each rule", ""]
    out += ["| run | model | " + " | ".join(f"{r} Elo (rank)" for r in rules) + " |"]
    out += ["|---|---|" + "---:|" * len(rules)]
    for row in table["runs"]:
        cells = [f"{row['rules'][r]['elo']:.1f} ({row['rules'][r]['rank']})" for r in rules]
        out.append(f"| {md_cell(row['name'])} | {md_code(row['model'], cell=True)} | " + " | ".join(cells) + " |")
    out += ["", "## Agreement between the rankings (Kendall's tau-b)", ""]
    if not table["tau_b"]:
        out.append("One rule only: nothing to compare.")
    else:
        out += ["| rules | tau-b |", "|---|---:|"] + [
            f"| {t['a']} – {t['b']} | {_tau(t['tau_b'])} |" for t in table["tau_b"]
        ]
        if len(table["runs"]) < 2:
            out += ["", "n/a: one run has no ranking to compare."]
    for row in table["runs"]:
        out += [
            "",
            f"## {md_text(row['name'])}",
            "",
            f"Report {md_code(row['report'])}; model {md_code(row['model'])}.",
            "",
        ]
        out += [
            "| rule | Elo | 95% CI | raw accuracy | weighted accuracy | official | report |",
            "|---|---:|---|---:|---:|---|---|",
        ]
        for rule, b in row["rules"].items():
            out.append(
                f"| {rule} | {b['elo']:.1f} | {ci_cell(b['elo_ci95'])} | {pct(b['raw_accuracy'])} | {pct(b['weighted_accuracy'])} | "
                f"{_status(table, rule, b)} | {md_code(b['report_written'], cell=True)} |"
            )
        for b in row["rules"].values():
            if "reproduces_run" in b:
                r = b["reproduces_run"]
                out += [
                    "",
                    f"mean gives back the run: the same choice on {r['same_choice']} of {r['n_items']} items; largest "
                    f"difference in any result or expected p: {_diff(r['max_abs_diff'])}.",
                ]
        for rule, b in row["rules"].items():
            fl = b.get("flips_vs_mean")
            if fl is None:
                continue
            out += [
                "",
                f"### {rule} against mean: {fl['n']} item(s) change ({fl['now_right']} now right, {fl['now_wrong']} now wrong; {rule} is never official)",
                "",
            ]
            if not fl["items"]:
                out.append("None.")
                continue
            out += [
                "Lengths are tokens/characters/UTF-8 bytes of the continuation (leading space included).",
                "",
                f"| id | category | label | mean picks | {rule} picks | lengths of mean's pick | lengths of {rule}'s pick | now |",
                "|---|---|---:|---:|---:|---|---|---|",
            ]
            for f in fl["items"]:
                out.append(
                    f"| {md_cell(f['id'])} | {md_cell(f['category'])} | {f['label']} | {f['mean']} | {f[rule]} | "
                    f"{_lengths(f, f['mean'])} | {_lengths(f, f[rule])} | {'right' if f[f'correct_{rule}'] else 'wrong'} |"
                )
    return "\n".join(out) + "\n"

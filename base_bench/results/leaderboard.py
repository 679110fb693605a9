"""The leaderboard: finished runs ranked by Overall Elo, one ranking per data file, as tables,
plots and pages. No store and no command line here: the runs are reports (`reports_io.load_report`)
or a store's summaries (`store.summaries`), and `base-bench leaderboard` and `base-bench sweep`
call `write_pages`.

    board = build_leaderboard([load_report(p) for p in paths])   # JSON-able dict of groups and rows
    board = build_leaderboard(store.summaries(db))                # the same from a store's summaries
    text = render_markdown(board, image_names(board))
    board, names = write_pages(reports, Path("leaderboard"))      # leaderboard.{md,html} + PNG plots
    board, names = write_pages(runs, out, full_reports=lambda rs: store.reports_of(db, rs))   # summaries
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from ..items import card
from . import checked, plots
from .checked import describe_data
from .markdown import md_cell, md_code, md_text
from .report import ci_cell, elo_cell, pct_cell
from .reports_io import (
    ReportError,
    backend_name,
    check_finished,
    check_outputs,
    html_page,
    plain_name,
    run_names,
    write_outputs,
)

MAX_PLOT_RUNS = 24  # runs drawn in one group's plots (the highest ranked): each plot grows with the runs it draws
GROUPING_NOTE = (
    "Runs on different data files (different data SHA-256) are never ranked together: each data "
    "file has its own table. Use --strict to refuse such a mix instead."
)


# The table fits a window of 1400 px without sideways scrolling at the card's seven categories:
# headers wrap at their spaces, and a label wraps anywhere within its column (a GGUF file name or a
# run folder has no space to wrap at); the full label is on hover.
LEADERBOARD_CSS = """table.board{font-size:13px}
table.board th{font-size:12px;text-align:center;vertical-align:bottom;padding:3px 4px}
table.board td{padding:3px 5px;white-space:nowrap}
table.board td.label{white-space:normal;overflow-wrap:anywhere;min-width:9em;max-width:18em}
table.board td:nth-child(3){text-align:left}"""


# ---------------------------------------------------------------- building the board


def _cfg(rep: dict, key: str):
    return (rep.get("config") or {}).get(key)


def _spec(rep: dict) -> str:
    return ((rep.get("config") or {}).get("model") or {}).get("spec") or "unknown model"


def run_labels(reports: list[dict]) -> list[str]:
    """The runs' names on the board: `reports_io.run_names` (group and step, else the shortest tail of
    the model spec that tells runs apart; the rule of a rescored report; dtype / add_bos where runs in
    the list differ in them; the folder, then the key, where two names would still be the same)."""
    return run_names(reports)


def _row(rep: dict, label: str, categories: list[str]) -> dict:
    res = rep.get("results") or {}
    o = res.get("overall") or {}
    cats = res.get("categories") or {}
    return {
        "label": label,
        "model": _spec(rep),
        "dtype": _cfg(rep, "dtype"),
        "backend": backend_name(_cfg(rep, "backend")),
        "add_bos": _cfg(rep, "add_bos"),
        "elo": o.get("elo"),
        "elo_ci95": o.get("elo_ci95"),
        "categories": {c: (cats.get(c) or {}).get("elo") for c in categories},
        "raw_accuracy": o.get("raw_accuracy"),
        "weighted_accuracy": o.get("weighted_accuracy"),
        "n_items": rep["n_items"] if rep.get("n_items") is not None else len(rep["items"]),
        "official": bool(rep.get("official")),
        "rule": checked.report_rule(rep),
        "data_sha256": rep["data"]["sha256"],
        "report": rep["_path"],
    }


def short_shas(shas, n: int = 12) -> dict[str, str]:
    """Each SHA-256 cut to the first `n` hex digits, or to as many as it takes for no two to be the
    same (two data files whose hashes share a prefix still get plots of their own)."""
    shas = list(dict.fromkeys(shas))
    length = n
    while len({s[:length] for s in shas}) < len(shas):
        length += 1
    return {s: s[:length] for s in shas}


def group_by_data(reports: list[dict]) -> dict[str, list[dict]]:
    """Reports by data SHA-256; the card's official data first, then larger groups first."""
    groups: dict[str, list[dict]] = {}
    for r in reports:
        groups.setdefault(r["data"]["sha256"], []).append(r)
    order = sorted(groups, key=lambda s: (s != card.OFFICIAL_SHA256, -len(groups[s])))
    return {s: groups[s] for s in order}


def build_leaderboard(reports: list[dict]) -> dict:
    """Groups (one per data SHA-256), each with its runs sorted by Overall Elo, highest first.
    `reports` are checked reports or the store's summaries (`store.summaries`: no items, `n_items`)."""
    for r in reports:
        check_finished(r)
    out = []
    groups = group_by_data(reports)
    short = short_shas(groups)
    for sha, reps in groups.items():
        reps = sorted(reps, key=lambda r: -r["results"]["overall"]["elo"])
        cats = plots.category_rows(reps)
        rows = [_row(r, lab, cats) for r, lab in zip(reps, run_labels(reps))]
        for rank, row in enumerate(rows, 1):
            row["rank"] = rank
        out.append(
            {
                "data_sha256": sha,
                "data_short": short[sha],
                "data_description": describe_data(sha),
                "official_data": sha == card.OFFICIAL_SHA256,
                "categories": cats,
                "rows": rows,
                "plotted": min(len(rows), MAX_PLOT_RUNS),
            }
        )
    return {
        "benchmark": f"BananaMind Base Bench {card.VERSION}",
        "n_runs": len(reports),
        "grouped": len(out) > 1,
        "groups": out,
    }


def grouping_sentence(board: dict) -> str:
    n = len(board["groups"])
    if n == 1:
        return f"All {board['n_runs']} run(s) scored the same data file. {GROUPING_NOTE}"
    return f"These {board['n_runs']} runs scored {n} different data files, so there are {n} separate rankings. {GROUPING_NOTE}"


# ---------------------------------------------------------------- rendering (formatting only)


def group_title(i: int, g: dict) -> str:
    kind = "official data" if g["official_data"] else g["data_description"]
    return f"Data file {i + 1}: SHA-256 {_short(g)}… — {kind}"


def _short(g: dict) -> str:
    return g.get("data_short") or g["data_sha256"][:12]


def table_cells(g: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one group's table, as plain text cells."""
    head = (
        ["#", "model", "backend", "Overall Elo", "95% CI"]
        + [c.replace("_", " ") for c in g["categories"]]
        + ["raw acc", "weighted acc", "items", "official", "data"]
    )
    rows = []
    for r in g["rows"]:
        rows.append(
            [str(r["rank"]), r["label"], r["backend"], elo_cell(r["elo"]), ci_cell(r["elo_ci95"])]
            + [elo_cell(r["categories"][c]) for c in g["categories"]]
            + [
                pct_cell(r["raw_accuracy"]),
                pct_cell(r["weighted_accuracy"]),
                str(r["n_items"]),
                "yes" if r["official"] else "no",
                _short(g),
            ]
        )
    return head, rows


def plot_note(g: dict) -> str | None:
    """Says that a group's plots leave runs out, when they do."""
    n = len(g["rows"])
    return f"The plots draw the {g['plotted']} highest-ranked of these {n} runs." if g["plotted"] < n else None


def image_names(board: dict) -> list[dict]:
    """PNG file names per group (plain file names: the hashes are checked hex digits)."""
    return [
        {
            "category": plain_name(f"category_elo-{_short(g)}.png"),
            "calibration": plain_name(f"calibration-{_short(g)}.png"),
        }
        for g in board["groups"]
    ]


def render_markdown(board: dict, images: list[dict]) -> str:
    out = [f"# {md_text(board['benchmark'])} leaderboard", "", md_text(grouping_sentence(board))]
    for i, (g, img) in enumerate(zip(board["groups"], images)):
        head, rows = table_cells(g)
        out += [
            "",
            f"## {md_text(group_title(i, g))}",
            "",
            f"Full data SHA-256: {md_code(g['data_sha256'])}.",
            "",
            "| " + " | ".join(md_cell(h) for h in head) + " |",
            "|---:|---|---|" + "---:|" * (len(head) - 3),
        ]
        out += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
        out += [
            "",
            "Reports: " + "; ".join(f"{r['rank']}. {md_code(r['report'])}" for r in g["rows"]),
            *(["", md_text(plot_note(g))] if plot_note(g) else []),
            "",
            f"![Overall and category Elo]({img['category']})",
            "",
            f"![Calibration by item Elo]({img['calibration']})",
        ]
    out += [
        "",
        "Elo intervals are read from the reports (n/a where a report has none). The calibration plot "
        "bins items by item Elo and draws each bin's observed accuracy (Wilson 95% bars) against "
        "1/(1+10^((e−R)/400)) at the run's Overall Elo R: points far from the curve mean one rating "
        "does not describe the model well.",
    ]
    return "\n".join(out) + "\n"


def render_html(board: dict, pngs: list[dict]) -> str:
    """Self-contained HTML: `pngs` holds {"category": bytes, "calibration": bytes} per group."""
    e = html.escape
    out = [f"<h1>{e(board['benchmark'])} leaderboard</h1>", f'<p class="note">{e(grouping_sentence(board))}</p>']
    for i, (g, png) in enumerate(zip(board["groups"], pngs)):
        head, rows = table_cells(g)
        out += [
            f"<h2>{e(group_title(i, g))}</h2>",
            f'<p class="note">Full data SHA-256: <code>{e(g["data_sha256"])}</code></p>',
            '<table class="board"><thead><tr>' + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr></thead><tbody>",
        ]
        for row, r in zip(rows, g["rows"]):
            cells = [f"<td>{e(c)}</td>" for c in row]
            # a long label wraps within its column (LEADERBOARD_CSS); the whole of it, the model and
            # the report are on hover
            cells[1] = f'<td class="label" title="{e(row[1])} — {e(r["model"])} — {e(r["report"])}">{e(row[1])}</td>'
            out.append("<tr>" + "".join(cells) + "</tr>")
        out.append("</tbody></table>")
        if plot_note(g):
            out.append(f'<p class="note">{e(plot_note(g))}</p>')
        for key, alt in (("category", "Overall and category Elo"), ("calibration", "Calibration by item Elo")):
            data = base64.b64encode(png[key]).decode("ascii")
            out.append(f'<img alt="{alt}" src="data:image/png;base64,{data}">')
    out += [
        '<p class="note">Elo intervals are read from the reports (n/a where a report has none). The calibration '
        "plot bins items by item Elo and draws each bin's observed accuracy (Wilson 95% bars) against "
        "1/(1+10<sup>(e−R)/400</sup>) at the run's Overall Elo R: points far from the curve mean one rating "
        "does not describe the model well.</p>"
    ]
    return html_page(f"{board['benchmark']} leaderboard", out, LEADERBOARD_CSS)


def summary_lines(board: dict) -> list[str]:
    lines = [grouping_sentence(board)]
    for i, g in enumerate(board["groups"]):
        lines += ["", group_title(i, g)]
        for r in g["rows"]:
            lines.append(
                f"  {r['rank']:>2}. {r['label']:<44} {r['backend']:<12} Elo {elo_cell(r['elo']):>5}  95% CI {ci_cell(r['elo_ci95']):<10} "
                f"raw {pct_cell(r['raw_accuracy'])}  {'official' if r['official'] else 'not official'}"
            )
    return lines


def write_pages(
    reports: list[dict], out: Path, force: bool = True, strict: bool = False, full_reports=None
) -> tuple[dict, list]:
    """The leaderboard of `reports` (reports, or a store's summaries) written to
    out/leaderboard.{md,html} and its PNG plots (refused without `force` where they exist); (the
    board, the image names). Summaries have no items: `full_reports` gives the full reports of the
    runs a plot draws (`lambda runs: store.reports_of(db, runs)`). `base-bench leaderboard` and
    `base-bench sweep` (after each member) call it."""
    board = build_leaderboard(reports)
    if strict and board["grouped"]:
        shas = ", ".join(f"{g['data_sha256'][:12]}… ({len(g['rows'])} run(s))" for g in board["groups"])
        raise ReportError(
            f"--strict: the runs scored different data files ({shas}); drop --strict to rank each data file separately"
        )
    names = image_names(board)
    targets = [out / "leaderboard.md", out / "leaderboard.html"] + [out / n for img in names for n in img.values()]
    check_outputs(targets, force, out_dir=out)
    by_path = {r["_path"]: r for r in reports}
    pngs = []
    for g, _img in zip(board["groups"], names):
        shown = g["rows"][: g["plotted"]]
        reps = [by_path[row["report"]] for row in shown]
        if full_reports is not None:  # summaries: the plotted runs' reports, read back and checked
            reps = full_reports(reps)
        labels = [row["label"] for row in shown]
        pngs.append(
            {"category": plots.category_elo_png(reps, labels), "calibration": plots.calibration_png(reps, labels)}
        )
    files = {out / img[key]: png[key] for png, img in zip(pngs, names) for key in ("category", "calibration")}
    files[out / "leaderboard.md"] = render_markdown(board, names)
    files[out / "leaderboard.html"] = render_html(board, pngs)
    write_outputs(files)
    return board, names

"""`base-bench trajectory DIR`: the Elo of one model over its training, from per-step reports.

    base-bench trajectory runs/train-bench [--out-dir OUT] [--force]

DIR holds the reports of one training run, one per scored step, as `BaseBenchCallback` writes them
(`DIR/step-<N>/report.json`, each carrying `training_step`). Every report.json under DIR with a
`training_step` is read; nothing is rescored. Written into --out-dir
(default: DIR itself; `--out` is the older spelling):

    trajectory.png    Overall Elo and each category's Elo against step, with 95% bootstrap bands
    trajectory.md     a table per step: Overall Elo, its 95% CI and ±, accuracies, category Elo
    trajectory.html   the same table and the plot in one self-contained page

Refused, with one line and exit code 2: a DIR with no such reports, reports on different data
files (their Elo is not comparable), two reports for the same step, and existing output files
unless --force. In code:

    traj = build_trajectory(find_reports("runs/train-bench"))
    text = render_markdown(traj, "trajectory.png")
"""

from __future__ import annotations

import argparse
import base64
import html
import sys
from pathlib import Path

from ..errors import BaseBenchError, ReportError
from ..results import plots
from ..results.checked import describe_data
from ..results.markdown import md_cell, md_text
from ..results.report import ci_cell, elo_cell, pct
from ..results.reports_io import (
    MAX_WALK_DEPTH,
    check_finished,
    check_outputs,
    display_name,
    find_named,
    html_page,
    load_report,
    write_outputs,
)
from .cliargs import Parser, add_out_dir, fail, printable

OUTPUTS = {"png": "trajectory.png", "md": "trajectory.md", "html": "trajectory.html"}


def find_reports(run_dir: str | Path) -> list[dict]:
    """Every report.json under `run_dir` that carries a training_step, in step order."""
    root = Path(run_dir).expanduser()
    if not root.is_dir():
        raise ReportError(f"{run_dir}: no such directory")
    paths, deeper = find_named(root, "report.json")
    if deeper:
        print(
            f"note: {deeper} folder(s) lie more than {MAX_WALK_DEPTH} levels below {printable(str(run_dir))}; "
            "they were not searched",
            file=sys.stderr,
        )
    reports = [load_report(p) for p in paths]
    reports = [r for r in reports if r.get("training_step") is not None]  # load_report checked it is an int
    if not reports:
        raise ReportError(
            f"{run_dir}: no report.json with a training_step under it (BaseBenchCallback writes "
            "them as step-<N>/report.json)"
        )
    return sorted(reports, key=lambda r: r["training_step"])


def build_trajectory(reports: list[dict]) -> dict:
    """The table behind the plot and pages, as plain JSON-able data; ReportError if the reports
    cannot form one trajectory (different data files, a step twice)."""
    shas = {r["data"]["sha256"] for r in reports}
    if len(shas) > 1:
        raise ReportError(
            f"the reports scored {len(shas)} different data files "
            f"({', '.join(sorted(s[:12] + '…' for s in shas))}); a trajectory needs one"
        )
    seen: dict[int, str] = {}
    for r in reports:
        check_finished(r, ("elo", "raw_accuracy", "weighted_accuracy", "n"))
        step = r["training_step"]
        if step in seen:
            raise ReportError(f"step {step} has two reports: {seen[step]} and {r['_path']}")
        seen[step] = r["_path"]
    categories = plots.category_rows(reports)
    rows = []
    for r in reports:
        res = r["results"]
        o = res["overall"]
        rows.append(
            {
                "step": r["training_step"],
                "elo": o["elo"],
                "elo_ci95": o.get("elo_ci95"),
                "elo_se": o.get("elo_se"),
                "raw_accuracy": o["raw_accuracy"],
                "weighted_accuracy": o["weighted_accuracy"],
                "n_items": o["n"],
                "categories": {c: ((res.get("categories") or {}).get(c) or {}).get("elo") for c in categories},
                "official": r.get("official"),
                "report": r["_path"],
            }
        )
    first = reports[0]
    models = list(
        dict.fromkeys(display_name(((r.get("config") or {}).get("model") or {}).get("spec") or "?") for r in reports)
    )
    return {
        "benchmark": first.get("benchmark", "base-bench"),
        "model": ", ".join(models),
        "data_sha256": first["data"]["sha256"],
        "data_description": describe_data(first["data"]["sha256"]),
        "non_official_reasons": list(dict.fromkeys(x for r in reports for x in r.get("non_official_reasons", []))),
        "categories": categories,
        "rows": rows,
    }


# ---------------------------------------------------------------- rendering (formatting only)


def table_cells(traj: dict) -> tuple[list[str], list[list[str]]]:
    head = ["step", "Overall Elo", "95% CI", "±", "raw acc", "weighted acc", "items"] + [
        c.replace("_", " ") for c in traj["categories"]
    ]
    rows = []
    for r in traj["rows"]:
        rows.append(
            [
                str(r["step"]),
                elo_cell(r["elo"]),
                ci_cell(r["elo_ci95"]),
                elo_cell(r["elo_se"]),
                pct(r["raw_accuracy"]),
                pct(r["weighted_accuracy"]),
                str(r["n_items"]),
            ]
            + [elo_cell(r["categories"][c]) for c in traj["categories"]]
        )
    return head, rows


def _title(traj: dict) -> str:
    return f"{traj['benchmark']} over training: {traj['model']}"


def _notes(traj: dict) -> list[str]:
    out = [f"Data: {traj['data_description']} (SHA-256 {traj['data_sha256']})."]
    if traj["non_official_reasons"]:
        out.append("Not official: " + "; ".join(traj["non_official_reasons"]) + ".")
    out.append(
        "Bands and CIs are the reports' 95% bootstrap intervals; ± is the curvature standard error. "
        "A change between steps smaller than the band is not evidence of progress."
    )
    return out


def render_markdown(traj: dict, png_name: str) -> str:
    head, rows = table_cells(traj)
    out = [f"# {md_text(_title(traj))}", ""] + [md_text(n) + "\n" for n in _notes(traj)]
    out += ["| " + " | ".join(md_cell(h) for h in head) + " |", "|" + "---:|" * len(head)]
    out += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    out += ["", f"![Overall and category Elo against training step]({png_name})"]
    return "\n".join(out) + "\n"


def render_html(traj: dict, png: bytes) -> str:
    e = html.escape
    head, rows = table_cells(traj)
    out = [f"<h1>{e(_title(traj))}</h1>"]
    out += [f'<p class="note">{e(n)}</p>' for n in _notes(traj)]
    out.append("<table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr></thead><tbody>")
    out += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows]
    out.append("</tbody></table>")
    data = base64.b64encode(png).decode("ascii")
    out.append(f'<img alt="Overall and category Elo against training step" src="data:image/png;base64,{data}">')
    return html_page(_title(traj), out)


def summary_lines(traj: dict) -> list[str]:
    lines = [_title(traj)]
    for r in traj["rows"]:
        lines.append(
            f"  step {r['step']:>7}  Overall Elo {elo_cell(r['elo']):>5}  95% CI {ci_cell(r['elo_ci95']):<10}  "
            f"raw {pct(r['raw_accuracy'])}"
        )
    return lines


# ---------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="base-bench trajectory",
        description="Plot a model's Overall and category Elo against training step, from the step-<N>/report.json "
        "files BaseBenchCallback writes, and write a Markdown table and a self-contained HTML page.",
    )
    p.add_argument("run_dir", metavar="DIR", help="directory holding the per-step reports of one training run")
    add_out_dir(p, "where to write trajectory.png/.md/.html (default: DIR); --out is the older spelling")
    p.add_argument("--force", action="store_true", help="overwrite existing trajectory files")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out_dir if args.out_dir else args.run_dir).expanduser()
    try:
        check_outputs([], args.force, out_dir=out)
        reports = find_reports(args.run_dir)
        traj = build_trajectory(reports)
        targets = {k: out / name for k, name in OUTPUTS.items()}
        check_outputs(targets.values(), args.force, out_dir=out)
        png = plots.trajectory_png([r["training_step"] for r in reports], reports, _title(traj))
        write_outputs(
            {
                targets["png"]: png,
                targets["md"]: render_markdown(traj, OUTPUTS["png"]),
                targets["html"]: render_html(traj, png),
            }
        )
    except BaseBenchError as exc:
        return fail(exc)
    print(printable("\n".join(summary_lines(traj))))
    print(f"wrote {targets['png']}, {targets['md']} and {targets['html']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

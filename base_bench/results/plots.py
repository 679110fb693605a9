"""Leaderboard plots as PNG bytes (matplotlib, Agg canvas; no pyplot, no window, no global state).

    png = category_elo_png(reports, labels)                  # Overall + category Elo, one colour per run
    png = calibration_png(reports, labels, path="cal.png")   # observed accuracy by item Elo vs the Elo curve
    png = trajectory_png(steps, reports)                     # Elo against training step, 95% bands

Each function takes a list of report dicts (as loaded from report.json) and optional display
labels, returns the PNG bytes, and also writes them to `path` when one is given. Figures have a
fixed size in pixels (`category_size`, `calibration_size`), so callers and tests know what to expect.

The calibration plot asks whether one number describes the model: items are binned by item Elo
(`calibration_bins`), each bin's observed accuracy is drawn with a Wilson 95% interval, and the
curve is the card's expected(R, e) = 1 / (1 + 10^((e - R) / 400)) at the run's fitted Overall R
(`elo.expected`; the intervals are `stats.wilson_interval`).
Points well off the curve mean the model is stronger on some difficulty levels than one rating says.

Labels, category names and titles come from reports that others made, so they are drawn as plain
text (matplotlib's `text.parse_math` off: a "$" starts no mathtext, which a crafted name could
make fail or run long) and cut to a few dozen characters.
"""

from __future__ import annotations

import bisect
import functools
import io
import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from ..items import card
from .elo import expected
from .markdown import one_line
from .stats import Z95, wilson_interval

DPI = 100
CHANCE = 1.0 / card.N_CHOICES


# ---------------------------------------------------------------- pure helpers


def _greedy_bins(cum: Sequence[int], target: int, most: int | None = None) -> list[tuple[int, int]]:
    """Runs [start, end) of consecutive item-Elo levels holding at least `target` items each, the
    last short run merged back into the one before; `cum[i]` is the number of items on levels
    before i (running sums, cum[0] = 0). Each run's end is found by bisection in `cum`, so a pass
    costs O(runs * log levels); with `most`, it stops once it has more than `most` runs."""
    levels = len(cum) - 1
    bins, start = [], 0
    while most is None or len(bins) <= most:
        end = bisect.bisect_left(cum, cum[start] + target, lo=start + 1)
        if end > levels:
            break
        bins.append((start, end))
        start = end
    if start < levels and (most is None or len(bins) <= most):
        bins[-1:] = [(bins[-1][0] if bins else start, levels)]
    return bins


def calibration_bins(
    item_elo: Sequence[float],
    correct: Sequence[bool],
    rating: float | None = None,
    max_bins: int = 7,
    min_items: int = 25,
) -> list[dict]:
    """Bin items by item Elo into at most `max_bins` runs of adjacent levels, each with at least
    `min_items` items where the data allow (as many bins as that permits).

    Each bin: lo, hi (item Elo range), x (mean item Elo), n, k (correct), accuracy, wilson95 and,
    when `rating` is given, expected (mean expected score of its items at that rating).

    The bins are the greedy runs for the smallest target size (at least `min_items`) that gives no
    more than `max_bins` of them. Their number only falls as the target grows (each run can only end
    later), so that target is found by bisection; each greedy pass and each bin's sums come from
    running sums over the distinct levels: O(n log n) for n items (the sort), where trying every
    target one by one was cubic in the worst case.
    """
    pairs = sorted(zip((float(e) for e in item_elo), (bool(c) for c in correct)))
    if not pairs:
        return []
    levels: list[float] = []  # distinct item Elos, ascending, and the running sums up to each
    cum, cum_k, cum_e, cum_p = [0], [0], [0.0], [0.0]
    for e, c in pairs:
        if not levels or levels[-1] != e:
            levels.append(e)
            p = expected(rating, e) if rating is not None else 0.0
            cum.append(cum[-1])
            cum_k.append(cum_k[-1])
            cum_e.append(cum_e[-1])
            cum_p.append(cum_p[-1])
        cum[-1] += 1
        cum_k[-1] += c
        cum_e[-1] += e
        cum_p[-1] += p
    n = len(pairs)
    lo_t, hi_t = min(min_items, n), n  # a target of n gives one bin
    if len(_greedy_bins(cum, lo_t, max_bins)) <= max_bins:
        hi_t = lo_t
    while hi_t - lo_t > 1:  # invariant: lo_t gives too many bins, hi_t few enough
        mid = (lo_t + hi_t) // 2
        if len(_greedy_bins(cum, mid, max_bins)) <= max_bins:
            hi_t = mid
        else:
            lo_t = mid
    out = []
    for start, end in _greedy_bins(cum, hi_t):
        m = cum[end] - cum[start]
        k = cum_k[end] - cum_k[start]
        b = {
            "lo": levels[start],
            "hi": levels[end - 1],
            "x": (cum_e[end] - cum_e[start]) / m,
            "n": m,
            "k": k,
            "accuracy": k / m,
            "wilson95": list(wilson_interval(k, m)),
        }
        if rating is not None:
            b["expected"] = (cum_p[end] - cum_p[start]) / m
        out.append(b)
    return out


def elo_error(block: dict) -> tuple[float, float] | None:
    """(minus, plus) error-bar lengths for a results block: elo_ci95, else 1.96 * elo_se, else None."""
    elo = block.get("elo")
    ci = block.get("elo_ci95")
    if elo is not None and isinstance(ci, (list, tuple)) and len(ci) == 2 and None not in ci:
        return max(0.0, elo - ci[0]), max(0.0, ci[1] - elo)
    se = block.get("elo_se")
    if elo is not None and isinstance(se, (int, float)) and math.isfinite(se):
        return Z95 * se, Z95 * se
    return None


def _plain_text(draw):
    """Run a plot function with mathtext off, so that every string is drawn as it is."""

    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)

    return wrapper


def _colour(i: int) -> str:
    return f"C{i % 10}"


def _short(label, limit: int = 48) -> str:
    label = one_line(label)  # no control character (a font has no glyph for one), no line break
    return label if len(label) <= limit else label[: limit - 1] + "…"


def _labels(reports: Sequence[dict], labels: Sequence[str] | None) -> list[str]:
    if labels is not None:
        return list(labels)
    return [
        str(((r.get("config") or {}).get("model") or {}).get("spec", f"run {i + 1}")) for i, r in enumerate(reports)
    ]


def _png(fig: Figure, path: str | Path | None) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    data = buf.getvalue()
    if path is not None:
        Path(path).write_bytes(data)
    return data


# ---------------------------------------------------------------- category Elo


def category_rows(reports: Sequence[dict]) -> list[str]:
    """Categories found in the reports, in the card's order (unknown ones last)."""
    present: dict[str, None] = {}
    for r in reports:
        present.update(dict.fromkeys((r.get("results") or {}).get("categories") or {}))
    return [c for c in card.CATEGORIES if c in present] + [c for c in present if c not in card.CATEGORIES]


def category_size(n_runs: int, n_categories: int) -> tuple[int, int]:
    """(width, height) in pixels of the category Elo plot."""
    rows = n_categories + 1
    legend_lines = math.ceil(n_runs / 2)
    height_in = 1.4 + rows * (0.32 + 0.1 * n_runs) + 0.28 * legend_lines
    return 9 * DPI, int(round(height_in * DPI))


@_plain_text
def category_elo_png(
    reports: Sequence[dict], labels: Sequence[str] | None = None, path: str | Path | None = None
) -> bytes:
    """Overall and per-category Elo for each run as dots with 95% error bars (horizontal layout)."""
    labels = _labels(reports, labels)
    cats = category_rows(reports)
    rows = ["Overall"] + [_short(c.replace("_", " "), 32) for c in cats]
    w, h = category_size(len(reports), len(cats))
    fig = Figure(figsize=(w / DPI, h / DPI), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    n = len(reports)
    spread = min(0.7, 0.18 * n)
    offsets = [0.0] if n == 1 else [spread * (j / (n - 1) - 0.5) for j in range(n)]
    for j, (rep, label) in enumerate(zip(reports, labels)):
        res = rep.get("results") or {}
        blocks = [res.get("overall") or {}] + [(res.get("categories") or {}).get(c, {}) for c in cats]
        ys, xs, err, any_bars = [], [], [[], []], False
        for i, b in enumerate(blocks):
            if b.get("elo") is None:
                continue
            e = elo_error(b)
            any_bars = any_bars or e is not None
            ys.append(i + offsets[j])
            xs.append(b["elo"])
            err[0].append(e[0] if e else 0.0)
            err[1].append(e[1] if e else 0.0)
        name = _short(label) + ("" if any_bars else "  (no interval in report)")
        ax.errorbar(
            xs,
            ys,
            xerr=err if any_bars else None,
            fmt="o",
            color=_colour(j),
            ecolor=_colour(j),
            elinewidth=1.4,
            capsize=3,
            markersize=6,
            label=name,
        )
    ax.set_yticks(range(len(rows)), rows)
    ax.get_yticklabels()[0].set_fontweight("bold")
    ax.set_ylim(len(rows) - 0.5, -0.5)  # Overall at the top
    for i in range(len(rows) - 1):
        ax.axhline(i + 0.5, color="0.88", linewidth=0.8, zorder=0)
    ax.grid(axis="x", color="0.92")
    ax.set_axisbelow(True)
    ax.set_xlabel("Elo (dots: fitted rating; bars: 95% interval where the report has one)")
    ax.set_title("Overall and category Elo")
    fig.legend(loc="outside lower center", ncols=2 if n > 1 else 1, fontsize=9, frameon=False)
    return _png(fig, path)


# ---------------------------------------------------------------- calibration


def calibration_size(n_runs: int) -> tuple[int, int]:
    """(width, height) in pixels of the calibration plot (one panel per run, up to 3 across)."""
    cols = max(1, min(3, n_runs))
    rows = max(1, math.ceil(n_runs / cols))
    return int(round(max(7.5, 4.4 * cols) * DPI)), int(round((3.7 * rows + 0.7) * DPI))


@_plain_text
def calibration_png(
    reports: Sequence[dict], labels: Sequence[str] | None = None, path: str | Path | None = None
) -> bytes:
    """Per run: observed accuracy per item-Elo bin (Wilson 95% bars) against expected(R, e) at the
    run's Overall Elo R, with the 25% chance line."""
    labels = _labels(reports, labels)
    n = max(1, len(reports))
    cols = max(1, min(3, n))
    rows = math.ceil(n / cols)
    w, h = calibration_size(n)
    fig = Figure(figsize=(w / DPI, h / DPI), dpi=DPI, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True, sharey=True)
    all_elo = [float(it["item_elo"]) for r in reports for it in r.get("items", [])] or [700.0, 1250.0]
    x_lo, x_hi = min(all_elo) - 60, max(all_elo) + 60
    grid = [x_lo + (x_hi - x_lo) * t / 200 for t in range(201)]
    handles = None
    for j, (rep, label) in enumerate(zip(reports, labels)):
        ax = axes[j // cols][j % cols]
        rating = ((rep.get("results") or {}).get("overall") or {}).get("elo")
        items = rep.get("items", [])
        bins = calibration_bins([it["item_elo"] for it in items], [it["correct"] for it in items], rating)
        colour = _colour(j)
        chance = ax.axhline(CHANCE, color="0.55", linestyle=":", linewidth=1, label="chance (4 choices)")
        curve = None
        if rating is not None:
            (curve,) = ax.plot(
                grid,
                [expected(rating, x) for x in grid],
                color="0.25",
                linewidth=1.6,
                label="expected at the run's Overall Elo",
            )
        xs = [b["x"] for b in bins]
        ys = [b["accuracy"] for b in bins]
        err = [
            [max(0.0, b["accuracy"] - b["wilson95"][0]) for b in bins],
            [max(0.0, b["wilson95"][1] - b["accuracy"]) for b in bins],
        ]
        obs = ax.errorbar(
            xs,
            ys,
            yerr=err,
            fmt="o",
            color=colour,
            capsize=3,
            markersize=6,
            label="observed accuracy per item-Elo bin (Wilson 95%)",
        )
        for b in bins:
            ax.annotate(
                f"n={b['n']}",
                (b["x"], b["wilson95"][0]),
                textcoords="offset points",
                xytext=(0, -11),
                ha="center",
                fontsize=7,
                color="0.35",
            )
        r_text = f"R = {rating:.0f}" if rating is not None else "no Overall Elo"
        ax.set_title(f"{_short(label, 56)}\n{r_text}", fontsize=10)
        ax.set_ylim(-0.08, 1.02)
        ax.set_xlim(x_lo, x_hi)
        ax.grid(color="0.92")
        ax.set_axisbelow(True)
        if handles is None or curve is not None:  # the legend explains the panels; take one with a curve
            handles = [h for h in (obs, curve, chance) if h is not None]
    for j in range(len(reports), rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("item Elo")
    for row in axes:
        row[0].set_ylabel("accuracy")
    fig.suptitle("Calibration: observed accuracy by item Elo vs one Overall Elo", fontsize=11)
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    return _png(fig, path)


# ---------------------------------------------------------------- Elo over training

TRAJECTORY_SIZE = (12 * DPI, 9 * DPI)


def elo_band(block: dict) -> tuple[float, float] | None:
    """(low, high) of the 95% band drawn around an Elo: elo_ci95, else ± 1.96 × elo_se."""
    e = elo_error(block)
    return None if e is None else (block["elo"] - e[0], block["elo"] + e[1])


def _line_with_band(ax, steps, blocks, colour, label, width, alpha):
    pts = [(s, b) for s, b in zip(steps, blocks) if b.get("elo") is not None]
    xs, ys = [s for s, _ in pts], [b["elo"] for _, b in pts]
    ax.plot(xs, ys, "-o", color=colour, linewidth=width, markersize=3 + width, label=label)
    bands = [(s, elo_band(b)) for s, b in pts if elo_band(b) is not None]
    if bands:
        ax.fill_between(
            [s for s, _ in bands],
            [lo for _, (lo, _) in bands],
            [hi for _, (_, hi) in bands],
            color=colour,
            alpha=alpha,
            linewidth=0,
        )


@_plain_text
def trajectory_png(
    steps: Sequence[int],
    reports: Sequence[dict],
    title: str = "",
    path: str | Path | None = None,
    x_label: str = "training step",
) -> bytes:
    """Elo against training step (or what `x_label` names, such as tokens seen): the Overall Elo with its 95% band across the top, then one small
    panel per category (its Elo and band, with the Overall line faint for reference), sharing the
    y axis so that categories compare at a glance."""
    w, h = TRAJECTORY_SIZE
    fig = Figure(figsize=(w / DPI, h / DPI), dpi=DPI, layout="constrained")
    cats = category_rows(reports)
    ncols = 4
    nrows = 1 + math.ceil(len(cats) / ncols)
    grid = fig.add_gridspec(nrows, ncols, height_ratios=[1.5] + [1] * (nrows - 1))
    results = [r.get("results") or {} for r in reports]
    overall = [res.get("overall") or {} for res in results]
    top = fig.add_subplot(grid[0, :])
    _line_with_band(top, steps, overall, "0.15", "Overall Elo", 2.2, 0.18)
    top.set_ylabel("Overall Elo")
    top.set_title("Overall Elo (band: 95% bootstrap interval)", fontsize=10, loc="left")
    panels = [top]
    first = None
    for j, cat in enumerate(cats):
        ax = fig.add_subplot(grid[1 + j // ncols, j % ncols], sharex=top, sharey=first)
        first = first or ax
        ys = [b.get("elo") for b in overall]
        ax.plot(steps, ys, color="0.6", linewidth=1, linestyle="--")
        _line_with_band(
            ax,
            steps,
            [(res.get("categories") or {}).get(cat, {}) for res in results],
            _colour(j),
            _short(cat, 32),
            1.6,
            0.15,
        )
        ax.set_title(_short(cat.replace("_", " "), 32), fontsize=9, loc="left")
        if j % ncols == 0:
            ax.set_ylabel("category Elo")
        if j // ncols == nrows - 2 or j + ncols >= len(cats):
            ax.set_xlabel(x_label)
        panels.append(ax)
    for ax in panels:
        ax.grid(color="0.92")
        ax.set_axisbelow(True)
        ax.tick_params(labelsize=8)
    if len(steps) <= 12:
        top.set_xticks(list(steps))
    fig.suptitle(_short(title or "Elo over training", 120) + "\n(category panels: dashed = Overall Elo)", fontsize=11)
    return _png(fig, path)

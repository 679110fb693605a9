"""The one checked reading of a report: what every reader of report.json (compare, leaderboard,
explore, trajectory, contamination report) trusts, and why.

    problem = report_problem(rep)          # None, or why `rep` cannot be used: one phrase naming the field
    why_not = official_problem(rep)        # None when the report may be official, else the reason
    kind = data_kind(sha)                  # "official" | "bundled" | "modified", from the checksum alone
    label = DATA_LABELS[kind]              # how the pages name that data, in a word or two
    text = describe_data(sha)              # ... and in a sentence (as the runner describes it)

A report may come from anyone, so nothing in it is repeated as a fact before it is checked:

1. **Types and bounds first.** Every field a reader uses has the type it must have, and every number is
   finite and within a bound before any arithmetic (an item Elo within ±MAX_ABS_ELO, a log-prob within
   ±MAX_ABS_LOGPROB, a token count from 1 to MAX_TOKENS), so no sum, division or margin can overflow.
   Categories and difficulties are the card's (a data file with any other is refused by the runner),
   and each item's Elo and point weight are the card's for its category and difficulty.
2. **The claims are recomputed.** Each item's prediction is picked again from its choices' scores by the
   report's rule, `scoring.rule` (the card's, highest mean log-prob, when it names none, as a run's report
   does; a report that `base-bench rescore` wrote names sum, per_char or per_byte, and each choice holds
   what that rule needs: n_tokens, n_chars, n_bytes; see rules.py), the lowest index on a tie. An unknown
   rule is refused. `correct` is that prediction
   against the label. From those outcomes the Overall and category Elo, their standard errors, the
   accuracies, their Wilson intervals and each item's expected p are computed again (`elo.summarize`,
   as the runner does) and must match the report within ELO_TOL / ACC_TOL (room for another CPU's
   rounding, nothing more). The bootstrap intervals are range-checked: two numbers, lowest first, within
   bounds. `data.kind` must be the kind the checksum gives.
3. **"Official" is earned, not claimed.** A report may say `official: true` only when the data is the
   card's file (its SHA-256), every one of its 350 items was scored (50 per category), and the
   configuration itself shows the card's setup: no `--limit` or `--limit-per-category`, no `--add-bos`,
   no `--max-spread` above the card's limit, and the card's scoring rule. An empty list of reasons is
   not enough. A report that says official when it is not is refused, naming the field.

A report that disagrees with itself is refused (`report_problem` returns the phrase; the reader raises
ReportError with the path). Pure functions of the parsed JSON; nothing here reads a file.
"""

from __future__ import annotations

import math
import re

from ..items import card
from ..items.dataset import BUNDLED_SHA256
from ..items.datasource import DESCRIPTIONS
from . import elo, rules, stats
from .labels import labels_problem

ITEM_KEYS = ("id", "category", "difficulty", "item_elo", "point_weight", "correct", "choices", "prediction", "label")
MAX_ITEMS = 100_000  # items in one report (the card's set has 350)
MAX_CATEGORIES = 100  # distinct categories in one report (the card has 7; any other is refused anyway)
MAX_CHOICES = 64  # continuations of one item (the card's items have 4)
MAX_ABS_ELO = 100_000.0  # |Elo| of an item or a result (the card's items lie between 700 and 1250)
MAX_ABS_LOGPROB = 1e12  # |summed log-prob| of one continuation, in nats
MAX_TOKENS = 10**9  # tokens in one continuation
MAX_STEP = 2**53  # a training step (a float holds every whole number up to it: the plots need that)
ELO_TOL = 1e-7  # a recomputed rating or standard error may differ by this share (libm rounding): 1e-4 Elo at 1000
ACC_TOL = 1e-9  # an accuracy, an interval end or an expected p may differ by this much
SHA256 = re.compile(r"[0-9a-f]{64}")
RULE = rules.CARD_RULE  # the card's rule, as `scoring.rule` names it (a rescored report names its own)
LENGTH_KEYS = ("n_tokens", "n_chars", "n_bytes")  # a choice's lengths, that the rules divide by

DATA_LABELS = {"official": "official data", "bundled": "bundled set", "modified": "modified data"}


def data_kind(sha: str) -> str:
    """What the data file of this SHA-256 is: the card's, the bundled set, or anything else."""
    return "official" if sha == card.OFFICIAL_SHA256 else "bundled" if sha == BUNDLED_SHA256 else "modified"


def describe_data(sha: str) -> str:
    """The runner's description of the data of this SHA-256 (never the report's own words)."""
    return DESCRIPTIONS[data_kind(sha)]


def number(x) -> bool:
    """A JSON number that arithmetic can use: an int or a finite float, not a bool. An int too large
    for a float counts as no number (math.isfinite would raise OverflowError on it)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    return abs(x) <= 2**63 if isinstance(x, int) else math.isfinite(x)


def within(x, lo: float, hi: float) -> bool:
    return number(x) and lo <= x <= hi


def count(x, hi: int = 2**53) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= hi


def _close(a: float, b: float, tol: float) -> bool:
    return abs(a - b) <= tol * max(1.0, abs(b))


def report_problem(rep) -> str | None:
    """Why `rep` cannot be used as a report (one short phrase naming the field), or None."""
    if not isinstance(rep, dict):
        return "top level is not an object"
    problem = (
        _data_problem(rep.get("data"))
        or _scoring_problem(rep.get("scoring"))
        or _items_problem(rep.get("items"), report_rule(rep))
        or _config_problem(rep)
    )
    if problem:
        return problem
    reasons = rep.get("non_official_reasons")
    if reasons is not None and not (isinstance(reasons, list) and all(isinstance(r, str) for r in reasons)):
        return "non_official_reasons is not a list of strings"
    problem = labels_problem(rep)
    if problem:
        return problem
    if not isinstance(rep.get("official", False), bool):
        return "official is not true or false"
    if rep.get("official"):
        why_not = official_problem(rep)
        if why_not:
            return f"official is true, but {why_not}"
    return _results_problem(rep.get("results"), rep["items"])


def report_rule(rep: dict) -> str:
    """The rule a (checked) report's predictions follow: its `scoring.rule`, else the card's."""
    return (rep.get("scoring") or {}).get("rule", RULE)


def _scoring_problem(scoring) -> str | None:
    if scoring is None:
        return None
    if not isinstance(scoring, dict) or not isinstance(scoring.get("rule", RULE), str):
        return "scoring.rule is not a string"
    if scoring.get("rule", RULE) not in rules.RULES:
        return f"scoring.rule {_shown(scoring['rule'])} is not one of {', '.join(rules.RULES)}"
    return None


def _data_problem(data) -> str | None:
    if not isinstance(data, dict) or not isinstance(data.get("sha256"), str):
        return "no data.sha256"
    if not SHA256.fullmatch(data["sha256"]):
        return "data.sha256 is not 64 lowercase hex digits"
    kind = data.get("kind")
    if kind is not None and kind != data_kind(data["sha256"]):
        return f"data.kind is {_shown(kind)}, but the SHA-256 is that of {DATA_LABELS[data_kind(data['sha256'])]}"
    for key in ("description", "path", "source"):
        if data.get(key) is not None and not isinstance(data[key], str):
            return f"data.{key} is not a string"
    return None


def _items_problem(items, rule: str) -> str | None:
    if not isinstance(items, list) or not items:
        return "no items"
    if len(items) > MAX_ITEMS:
        return f"{len(items)} items; at most {MAX_ITEMS:,} are read"
    categories = set()
    for n, it in enumerate(items):
        missing = [k for k in ITEM_KEYS if not isinstance(it, dict) or k not in it]
        if missing:
            return f"item {n} lacks {', '.join(missing)}"
        problem = _item_problem(it, rule)
        if problem:
            return f"item {n}: {problem}"
        categories.add(it["category"])
        if len(categories) > MAX_CATEGORIES:
            return f"more than {MAX_CATEGORIES} categories; at most {MAX_CATEGORIES} are read"
    ids = [it["id"] for it in items]
    if len(set(ids)) != len(ids):
        return "duplicate item ids"
    return None


def _item_problem(it: dict, rule: str = RULE) -> str | None:
    """What is wrong with one item (its fields, then its claims), or None."""
    if not isinstance(it["id"], str) or not isinstance(it["category"], str):
        return "id and category must be strings"
    if not (number(it["item_elo"]) and abs(it["item_elo"]) <= MAX_ABS_ELO):
        return f"item_elo is not a number within ±{MAX_ABS_ELO:,.0f}"
    if not (within(it["point_weight"], 0.0, MAX_ABS_ELO) and it["point_weight"] > 0):
        return "point_weight is not a positive number"
    if not isinstance(it["correct"], bool):
        return "correct is not true or false"
    if "truncated" in it and not isinstance(it["truncated"], bool):
        return "truncated is not true or false"
    choices = it["choices"]
    # written out as loops: this runs for every choice of every item of every report read (`store
    # ingest` reads dozens a second), and each check is the one its message names
    if not (isinstance(choices, list) and 0 < len(choices) <= MAX_CHOICES):
        return "choices are not a list of log-probs"
    for c in choices:
        if not isinstance(c, dict):
            return "choices are not a list of log-probs"
        lp = c.get("logprob")
        if not (lp.__class__ is float and -MAX_ABS_LOGPROB <= lp <= MAX_ABS_LOGPROB) and not within(
            lp, -MAX_ABS_LOGPROB, MAX_ABS_LOGPROB
        ):
            return "choices are not a list of log-probs"
    need = rules.NEEDS[rule]
    for key in LENGTH_KEYS:  # each length a choice holds (and the one the rule needs) is a count from 1
        present, ok = key == need, True
        for c in choices:
            if key in c:
                present = True
                v = c[key]
                ok = ok and v.__class__ is int and 1 <= v <= MAX_TOKENS  # JSON's ints: int or bool
            else:
                ok = False
        if present and not ok:
            return f"a choice's {key} is not a whole number from 1 to {MAX_TOKENS:,}"
    if "n_chars" in choices[0] and "n_bytes" in choices[0]:
        if not all(c["n_chars"] <= c["n_bytes"] <= 4 * c["n_chars"] for c in choices):
            return "a choice's n_bytes is not 1 to 4 UTF-8 bytes per character of its n_chars"
    for c in choices:
        if "mean_logprob" in c:
            m, nt = c["mean_logprob"], c.get("n_tokens")
            if not (number(m) and nt and _close(m, float(c["logprob"]) / nt, ACC_TOL)):
                return "a choice's mean_logprob is not its logprob / n_tokens"
    # rules.score of each choice (its length was checked above where the rule needs one)
    scores = [float(c["logprob"]) if need is None else float(c["logprob"]) / c[need] for c in choices]
    for key in ("prediction", "label"):
        if not (count(it[key]) and it[key] < len(choices)):
            return f"{key} is not the index of one of its {len(choices)} choices"
    picked = rules.best(scores)
    if it["prediction"] != picked:
        under = "" if rule == RULE else f" under its rule ({rule})"
        return f"prediction is {it['prediction']}, but its choices' scores pick {picked}{under}"
    if it["correct"] != (it["prediction"] == it["label"]):
        return "correct does not match its prediction and label"
    return _card_problem(it)


def _card_problem(it: dict) -> str | None:
    """An item's category, difficulty, Elo and weight are the card's (the runner refuses any other)."""
    cat, diff = it["category"], it["difficulty"]
    if cat not in card.CATEGORIES:
        return f"category {_shown(cat)} is not one of the card's {len(card.CATEGORIES)}"
    if diff not in card.DIFFICULTY_WEIGHTS:
        return f"difficulty {_shown(diff)} is not easy, medium or hard"
    if it["item_elo"] != card.item_elo(cat, diff):
        return f"item_elo {it['item_elo']:g} is not the card's {card.item_elo(cat, diff)} for {cat}/{diff}"
    weight = card.category_weight(cat) * card.DIFFICULTY_WEIGHTS[diff]
    if not _close(it["point_weight"], weight, ACC_TOL):
        return f"point_weight {it['point_weight']:g} is not the card's {weight:g} for {cat}/{diff}"
    return None


def _config_problem(rep: dict) -> str | None:
    """The configuration fields the readers show or that decide official status, of the right types."""
    cfg = rep.get("config")
    if cfg is None:
        return None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model") or {}, dict):
        return "config or config.model is not an object"
    spec = (cfg.get("model") or {}).get("spec")
    if spec is not None and not isinstance(spec, str):
        return "config.model.spec is not a string"
    for key in ("dtype", "backend", "device", "scoring_version", "scorer", "runner_version"):
        if cfg.get(key) is not None and not isinstance(cfg[key], str):
            return f"config.{key} is not a string"
    if cfg.get("add_bos") is not None and not isinstance(cfg["add_bos"], bool):
        return "config.add_bos is not true or false"
    for key in ("limit", "limit_per_category"):
        if cfg.get(key) is not None and not (count(cfg[key]) and cfg[key] >= 1):
            return f"config.{key} is not a positive whole number"
    return None


def official_problem(rep: dict) -> str | None:
    """Why a (type-checked) report cannot be an official result, or None when it may be one: the
    card's data, all of it scored, and the card's configuration, read from the report's own fields."""
    sha = rep["data"]["sha256"]
    if sha != card.OFFICIAL_SHA256:
        return f"its data ({DATA_LABELS[data_kind(sha)]}, SHA-256 {sha[:12]}…) is not the card's official file"
    items = rep["items"]
    per_category = {c: 0 for c in card.CATEGORIES}
    for it in items:
        per_category[it["category"]] = per_category.get(it["category"], 0) + 1
    if len(items) != card.TOTAL_ITEMS or any(n != card.ITEMS_PER_CATEGORY for n in per_category.values()):
        return f"it scored {len(items)} items, not the card's {card.TOTAL_ITEMS} (50 per category)"
    cfg = rep.get("config")
    if not isinstance(cfg, dict):
        return "it has no configuration"
    for key in ("limit", "limit_per_category"):
        if cfg.get(key) is not None:
            return f"config.{key} is {cfg[key]}"
    if cfg.get("add_bos") is not False:
        return "config.add_bos is not false"
    check = cfg.get("packing_check")
    inv = check.get("invariance") if isinstance(check, dict) else None
    limit = inv.get("threshold") if isinstance(inv, dict) else None
    if limit is not None and not within(limit, 0.0, card.SPREAD_MAX):
        return f"the engine check's limit (--max-spread) is {_shown(limit)}, above the card's {card.SPREAD_MAX:g}"
    rule = report_rule(rep)
    if rule != RULE:
        return f"scoring.rule is {_shown(rule)}, not the card's mean log-prob per token"
    return None


def _results_problem(res, items: list[dict]) -> str | None:
    """The results block is optional (an unfinished report has none); when present, every number in it
    is the one the items give."""
    if res is None:
        return None
    if not isinstance(res, dict):
        return "results is not an object"
    overall, cats = res.get("overall"), res.get("categories")
    if overall is None:
        return None
    if cats is not None and not isinstance(cats, dict):
        return "results.categories is not an object"
    for name, block in [
        ("results.overall", overall),
        *((f"results.categories[{c!r}]", b) for c, b in (cats or {}).items()),
    ]:
        problem = _block_types(name, block)
        if problem:
            return problem
    rows = [(it["category"], it["difficulty"], it["item_elo"], it["point_weight"], it["correct"]) for it in items]
    want = elo.summarize(rows, fit=elo.fit_elo_grouped)  # within 1e-9 Elo of the runner's fit_elo
    problem = _block_claims("results.overall", overall, want["overall"], rows)
    if problem:
        return problem
    if cats is not None:
        if set(cats) != set(want["categories"]):
            return "results.categories are not the categories of its items"
        for c, b in cats.items():
            problem = _block_claims(
                f"results.categories[{c!r}]", b, want["categories"][c], [r for r in rows if r[0] == c]
            )
            if problem:
                return problem
    problem = _difficulties_problem(res.get("difficulties"), want["difficulties"])
    if problem:
        return problem
    if res.get("n_truncated") is not None and res["n_truncated"] != sum(1 for it in items if it.get("truncated")):
        return "results.n_truncated is not the number of truncated items"
    rating = want["overall"]["elo"]
    for it in items:
        p = it.get("expected_p")
        if p is not None and not (number(p) and _close(p, elo.expected(rating, it["item_elo"]), ACC_TOL)):
            return f"item {it['id']!r}: expected_p is not its chance under the Overall Elo"
    return None


def _block_types(name: str, b) -> str | None:
    if not isinstance(b, dict):
        return f"{name} is not an object"
    for k, lo, hi in (
        ("elo", -MAX_ABS_ELO, MAX_ABS_ELO),
        ("elo_se", 0.0, MAX_ABS_ELO),
        ("raw_accuracy", 0.0, 1.0),
        ("weighted_accuracy", 0.0, 1.0),
    ):
        if b.get(k) is not None and not within(b[k], lo, hi):
            return f"{name}.{k} is not a number from {lo:g} to {hi:g}"
    for k in ("n", "n_correct"):
        if b.get(k) is not None and not count(b[k]):
            return f"{name}.{k} is not a count"
    for k, lo, hi in (
        ("elo_ci95", -MAX_ABS_ELO, MAX_ABS_ELO),
        ("raw_accuracy_ci95", 0.0, 1.0),
        ("weighted_accuracy_ci95", 0.0, 1.0),
    ):
        ci = b.get(k)
        if ci is None:
            continue
        if not (isinstance(ci, list) and len(ci) == 2 and all(x is None or within(x, lo, hi) for x in ci)):
            return f"{name}.{k} is not two numbers from {lo:g} to {hi:g}"
        if None not in ci and ci[0] > ci[1]:
            return f"{name}.{k} has its upper end below its lower end"
    return None


def _block_claims(name: str, b: dict, want: dict, rows: list[tuple]) -> str | None:
    """A results block against the one its items give: the counts exactly, the Elo and accuracies
    within the tolerances, the standard error and the Wilson interval recomputed too."""
    for k in ("n", "n_correct"):
        if b.get(k) is not None and b[k] != want[k]:
            return f"{name}.{k} is {b[k]}, but its items give {want[k]}"
    if b.get("elo") is None:
        return f"{name}.elo is missing"
    if not _close(b["elo"], want["elo"], ELO_TOL):
        return f"{name}.elo is {b['elo']:.6g}, but its items give {want['elo']:.6g}"
    for k in ("raw_accuracy", "weighted_accuracy"):
        if b.get(k) is not None and not _close(b[k], want[k], ACC_TOL):
            return f"{name}.{k} is {b[k]:.6g}, but its items give {want[k]:.6g}"
    if b.get("elo_se") is not None:
        se = elo.elo_standard_error(want["elo"], [(e, w, 1.0 if y else 0.0) for _, _, e, w, y in rows])
        if not _close(b["elo_se"], se, ELO_TOL):
            return f"{name}.elo_se is {b['elo_se']:.6g}, but its items give {se:.6g}"
    ci = b.get("raw_accuracy_ci95")
    if ci is not None and None not in ci:
        lo, hi = stats.wilson_interval(want["n_correct"], want["n"])
        if not (_close(ci[0], lo, ACC_TOL) and _close(ci[1], hi, ACC_TOL)):
            return f"{name}.raw_accuracy_ci95 is not the Wilson interval of its items"
    return None


def _difficulties_problem(diffs, want: dict) -> str | None:
    if diffs is None:
        return None
    if not isinstance(diffs, dict) or set(diffs) != set(want):
        return "results.difficulties are not the difficulties of its items"
    for d, b in diffs.items():
        if not isinstance(b, dict):
            return f"results.difficulties[{d!r}] is not an object"
        for k in ("n", "n_correct"):
            if b.get(k) is not None and b[k] != want[d][k]:
                return f"results.difficulties[{d!r}].{k} is {_shown(b[k])}, but its items give {want[d][k]}"
        acc = b.get("raw_accuracy")
        if acc is not None and not (number(acc) and _close(acc, want[d]["raw_accuracy"], ACC_TOL)):
            return f"results.difficulties[{d!r}].raw_accuracy is not the accuracy of its items"
    return None


def _shown(x, limit: int = 40) -> str:
    """A value from a report inside an error phrase: its repr, cut to `limit` characters."""
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 1] + "…"

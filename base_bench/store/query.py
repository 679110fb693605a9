"""What the views read from the store: runs as summaries, keys from prefixes, reports back.

    runs = summaries(db, group="pretrain-7")     # report-shaped dicts without items, best Elo first
    runs = summaries(db, keys=["3fa9c1", ...])   # the runs these keys or key prefixes name
    keys = resolve(db, ["3fa9c1", "77d0"])       # full keys; StoreError for a prefix that names 0 or 2+
    rep = report(db, key)                        # the stored report.json, read back and checked
    reps = reports_of(db, runs)                  # the full reports of summaries, with the store's labels
    raw = report_bytes(db, key)                  # ... its bytes exactly as they were ingested

A summary has the fields of a report that the tables and the trajectory read (config.model.spec,
backend, dtype, add_bos, data, official, scoring.rule, results.overall and results.categories with
their intervals, the labels) and `n_items`, `_key` (the run's key), `_path` ("store:" and the
key's first 12 digits) and `_source` (where the report came from). It is read from the runs and
categories tables alone, so that a leaderboard over thousands of runs never opens a report; a view
that needs the items (plots, compare, explore) reads the report itself with `report`, and that goes
through the checked reading again, as a file would.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from ..errors import StoreError
from ..results.reports_io import LABEL_KEYS, report_from_bytes
from ..untrusted import MAX_BYTES
from . import schema
from .connect import Store

KEY_SHOWN = 12  # hex digits of a key that `store list` and the views show
MIN_PREFIX = 4  # the shortest key prefix accepted


def _versions(text: str | None) -> dict | None:
    """A row's versions (JSON that ingest wrote; a shared database may hold anything): a dict or None."""
    if not text or len(text) > 10_000:
        return None
    try:
        got = json.loads(text)
    except ValueError:
        return None
    return got if isinstance(got, dict) else None


def _summary(r, cats: list, tags: list[str]) -> dict:
    ci = [r.elo_lo, r.elo_hi] if r.elo_lo is not None and r.elo_hi is not None else None
    out = {
        "_key": r.key,
        "_path": f"store:{r.key[:KEY_SHOWN]}",
        "_source": r.source,
        "config": {
            "model": {"spec": r.model},
            "backend": r.backend,
            "dtype": r.dtype,
            "add_bos": r.add_bos,
            "runner_version": r.runner_version,
            "scoring_version": r.scoring_version,
            "versions": _versions(r.versions),
            "signature_sha256": r.signature_sha256,
        },
        "data": {"sha256": r.data_sha256, "kind": r.data_kind},
        "official": bool(r.official),
        "results": {
            "overall": {
                "elo": r.elo,
                "elo_ci95": ci,
                "elo_se": r.elo_se,
                "raw_accuracy": r.raw_accuracy,
                "weighted_accuracy": r.weighted_accuracy,
                "n": r.n_items,
                "n_correct": r.n_correct,
            },
            "categories": {
                name: {
                    "elo": elo,
                    "elo_ci95": [lo, hi] if lo is not None and hi is not None else None,
                    "raw_accuracy": raw,
                    "weighted_accuracy": weighted,
                    "n": n,
                    "n_correct": n_correct,
                }
                for name, elo, lo, hi, raw, weighted, n, n_correct in cats
            },
        },
        "n_items": r.n_items,
        "scored_at": r.scored_at,
        "stored_at": r.stored_at,
    }
    if r.rule != "mean":
        out["scoring"] = {"rule": r.rule}
    for key, value in (("group", r.group_name), ("training_step", r.step), ("tokens_seen", r.tokens)):
        if value is not None:
            out[key] = value
    if tags:
        out["tags"] = tags
    return out


def summaries(
    db: Store, *, group: str | None = None, keys: Sequence[str] | None = None, tag: str | None = None
) -> list[dict]:
    """The runs that match (all of them when nothing is given), as summaries, highest Overall Elo first
    (then by key, so that the order is the same every time). Keys may be prefixes (`resolve`)."""
    runs, c, t = schema.runs, schema.categories, schema.tags
    with schema.reading(db) as conn:
        conds = []
        if keys is not None:
            conds.append(runs.c.key.in_(_resolve(conn, db, keys)))
        if group is not None:
            conds.append(runs.c.group_name == group)
        if tag is not None:
            conds.append(runs.c.id.in_(select(t.c.run).where(t.c.tag == tag)))
        rows = conn.execute(select(runs).where(*conds).order_by(runs.c.elo.desc(), runs.c.key)).all()
        ids = select(runs.c.id).where(*conds)
        cat_cols = (c.c.category, c.c.elo, c.c.elo_lo, c.c.elo_hi, c.c.raw_accuracy, c.c.weighted_accuracy, c.c.n)
        cats: dict[int, list[tuple]] = {}
        tags: dict[int, list[str]] = {}
        if rows:
            sel = select(c.c.run, *cat_cols, c.c.n_correct)
            tsel = select(t.c.run, t.c.tag).order_by(t.c.run, t.c.tag)
            if conds:  # a selection: the categories and tags of its runs only
                sel, tsel = sel.where(c.c.run.in_(ids)), tsel.where(t.c.run.in_(ids))
            for run, *rest in conn.execute(sel).all():
                cats.setdefault(run, []).append(rest)
            for run, name in conn.execute(tsel).all():
                tags.setdefault(run, []).append(name)
    return [_summary(r, cats.get(r.id, []), tags.get(r.id, [])) for r in rows]


def count_runs(db: Store) -> int:
    """How many runs the store holds (0 for a database without base-bench's tables yet)."""
    from sqlalchemy import func

    try:
        with db.engine.connect() as conn:
            if schema.version(conn) == 0:
                return 0
    except SQLAlchemyError as exc:
        from .connect import failure

        raise failure(db, exc, "reading the store") from None
    with schema.reading(db) as conn:
        return conn.execute(select(func.count()).select_from(schema.runs)).scalar_one()


def resolve(db: Store, prefixes: Sequence[str]) -> list[str]:
    """The full key each prefix names, in order; StoreError (one line) for a prefix that names no run or
    more than one."""
    with schema.reading(db) as conn:
        return _resolve(conn, db, prefixes)


def _resolve(conn, db: Store, prefixes: Sequence[str]) -> list[str]:
    out = []
    for p in prefixes:
        text = p.strip().lower()
        if not (MIN_PREFIX <= len(text) <= 64 and all(ch in "0123456789abcdef" for ch in text)):
            raise StoreError(f"{p!r} is not a run key: {MIN_PREFIX} to 64 hex digits (see `base-bench store list`)")
        found = conn.execute(
            select(schema.runs.c.key).where(schema.runs.c.key.like(text + "%")).order_by(schema.runs.c.key).limit(2)
        ).all()
        if not found:
            raise StoreError(f"{db.shown}: no run has a key starting {text}")
        if len(found) > 1:
            raise StoreError(
                f"{db.shown}: key prefix {text} names more than one run ({found[0][0][:16]}…, {found[1][0][:16]}…); "
                "give more digits"
            )
        out.append(found[0][0])
    return out


def report_bytes(db: Store, key: str) -> bytes:
    """The report.json bytes stored for the run `key`, exactly as they were ingested."""
    with schema.reading(db) as conn:
        row = conn.execute(
            select(schema.reports.c.report)
            .join(schema.runs, schema.runs.c.id == schema.reports.c.run)
            .where(schema.runs.c.key == key)
        ).first()
    if row is None:
        raise StoreError(f"{db.shown}: no run has the key {key[:16]}…")
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(row[0], MAX_BYTES)
    except zlib.error:
        raise StoreError(f"{db.shown}: the report of run {key[:16]}… is damaged in the store") from None
    if inflate.unconsumed_tail:
        raise StoreError(f"{db.shown}: the report of run {key[:16]}… is larger than {MAX_BYTES:,} bytes")
    return raw


def report(db: Store, key: str) -> dict:
    """The stored report of run `key`, read within bounds and checked as a file is (a store may be
    shared, and a row written by anyone); `_path` is "store:KEY12", `_key` the key."""
    rep = report_from_bytes(report_bytes(db, key), f"store:{key[:KEY_SHOWN]}")
    rep["_key"] = key
    return rep


def reports_of(db: Store, runs: Sequence[dict]) -> list[dict]:
    """The full reports of `runs` (from `summaries`), in order, each read back from
    the store and checked as a file is (`report`), with the store's labels (which `store ingest
    --group ...` may have set in place of the report's own) and `_source` (the folder it came from)."""
    out = []
    for run in runs:
        rep = report(db, run["_key"])
        for key in LABEL_KEYS:
            rep.pop(key, None)
            if run.get(key) is not None:
                rep[key] = run[key]
        rep["_source"] = run.get("_source")
        out.append(rep)
    return out

"""The store's tables (SQLAlchemy Core), its schema version, and the migrations between versions.

    with writing(db) as conn:          # a write transaction on a store at this version (made if empty)
        conn.execute(...)
    with reading(db) as conn:          # a read: StoreError if the store is empty, older or newer
        ...
    upgrade(db)                        # -> (version before, version after): `base-bench store upgrade`

The tables, one row each per:

    meta      setting: schema_version
    runs      run (an id the other tables refer to, and a key: the run's `signature_sha256` + the item ids scored + the scoring rule, hashed):
              model, backend, dtype, BOS, data, official, Overall Elo with its interval, accuracies,
              versions, when it was scored and stored, where the report came from, and the labels
              (group, step, tokens)
    tags      tag of a run
    categories  category of a run: its Elo with interval, accuracies
    items     item of a run: outcome, choice, label, margin (the label's score minus the best other
              choice's, under the run's rule), truncated
    choices   continuation of an item of a run: summed log-prob, tokens, mean log-prob, and its length
              in characters and UTF-8 bytes (None where the report did not hold them)
    reports   run: its report.json as it was ingested, zlib-compressed (`store export` writes it back)
    sweeps    sweep (`base-bench sweep`, one per group): its out-dir, the run flags every member
              takes, whether it is watching a training run for new checkpoints, and --until-step
    jobs      member of a sweep: its model and revision, name, out-dir, step and tokens; the queue's
              state (waiting, running, done, failed, skipped), attempts, the worker that holds it
              and its last heartbeat (the lease), the last error's class and line, and once it ran,
              its run signature and run key (sweep/queue.py)

SCHEMA_VERSION is what this base-bench writes and reads. A store with no tables is made at that
version by the first write. A store at an older version is brought forward by `upgrade`, which
applies MIGRATIONS[v] (version v to v + 1) in order, each in its own transaction; until then
this base-bench refuses to use it. A store at a newer version (made by a later base-bench) is refused,
for reading and writing, in one line. On PostgreSQL, making and migrating the schema holds an
advisory lock, so that many processes starting at once make it once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    inspect,
    select,
    text,
)
from sqlalchemy.exc import SQLAlchemyError

from ..errors import StoreError
from .connect import Store, failure

SCHEMA_VERSION = 2
ADVISORY_LOCK = 0x0BA5EBE0C  # PostgreSQL advisory lock held while the schema is made or migrated
KEY = String(64)  # a SHA-256 in hex

metadata = MetaData()

meta = Table("meta", metadata, Column("name", String(64), primary_key=True), Column("value", Text, nullable=False))

runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),  # what the other tables refer to (small)
    Column("key", KEY, nullable=False, unique=True),
    Column("signature_sha256", KEY, nullable=False, index=True),
    Column("items_sha256", KEY, nullable=False),
    Column("rule", String(16), nullable=False),
    Column("model", Text, nullable=False),
    Column("backend", String(32)),
    Column("dtype", String(32)),
    Column("add_bos", Boolean),
    Column("data_sha256", KEY, nullable=False, index=True),
    Column("data_kind", String(16), nullable=False),
    Column("official", Boolean, nullable=False),
    Column("elo", Float, nullable=False),
    Column("elo_lo", Float),
    Column("elo_hi", Float),
    Column("elo_se", Float),
    Column("raw_accuracy", Float, nullable=False),
    Column("weighted_accuracy", Float, nullable=False),
    Column("n_items", Integer, nullable=False),
    Column("n_correct", Integer, nullable=False),
    Column("runner_version", String(64)),
    Column("scoring_version", String(64)),
    Column("versions", Text),  # JSON: the report's config.versions (python, torch, transformers, llama.cpp...)
    Column("scored_at", String(40)),  # ISO 8601, UTC, from the report (older reports have none)
    Column("stored_at", String(40), nullable=False),
    Column("source", Text, nullable=False),  # the folder it was ingested from, or how it was written
    Column("group_name", Text, index=True),
    Column("step", BigInteger),
    Column("tokens", BigInteger),
    Column("report_sha256", KEY, nullable=False),
)

tags = Table(
    "tags",
    metadata,
    Column("run", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("tag", Text, primary_key=True),
    sqlite_with_rowid=False,  # SQLite: one B-tree keyed on the primary key, not a table and an index
)

categories = Table(
    "categories",
    metadata,
    Column("run", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("category", String(64), primary_key=True),
    Column("elo", Float, nullable=False),
    Column("elo_lo", Float),
    Column("elo_hi", Float),
    Column("raw_accuracy", Float, nullable=False),
    Column("weighted_accuracy", Float, nullable=False),
    Column("n", Integer, nullable=False),
    Column("n_correct", Integer, nullable=False),
    sqlite_with_rowid=False,  # SQLite: one B-tree keyed on the primary key, not a table and an index
)

items = Table(
    "items",
    metadata,
    Column("run", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("item", Text, primary_key=True),
    Column("category", String(64), nullable=False),
    Column("difficulty", String(16), nullable=False),
    Column("correct", Boolean, nullable=False),
    Column("prediction", Integer, nullable=False),
    Column("label", Integer, nullable=False),
    Column("margin", Float, nullable=False),
    Column("truncated", Boolean, nullable=False),
    sqlite_with_rowid=False,  # SQLite: one B-tree keyed on the primary key, not a table and an index
)

choices = Table(
    "choices",
    metadata,
    Column("run", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("item", Text, primary_key=True),
    Column("choice", Integer, primary_key=True),
    Column("logprob", Float, nullable=False),
    Column("n_tokens", Integer),
    Column("mean_logprob", Float),
    Column("n_chars", Integer),
    Column("n_bytes", Integer),
    sqlite_with_rowid=False,  # SQLite: one B-tree keyed on the primary key, not a table and an index
)

reports = Table(
    "reports",
    metadata,
    Column("run", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("report", LargeBinary, nullable=False),  # report.json's bytes, zlib-compressed
)

CHILDREN = (tags, categories, items, choices, reports)

sweeps = Table(
    "sweeps",
    metadata,
    Column("group_name", String(200), primary_key=True),
    Column("out_dir", Text, nullable=False),
    Column("flags", Text, nullable=False),  # JSON: the run flags every member takes
    Column("flags_sha256", KEY, nullable=False),
    Column("watching", Boolean, nullable=False),  # a `--watch` may still add members
    Column("until_step", BigInteger),
    Column("created_at", String(40), nullable=False),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", KEY, nullable=False, unique=True),  # group + model + revision + run flags, hashed
    Column("group_name", String(200), ForeignKey("sweeps.group_name", ondelete="CASCADE"), nullable=False, index=True),
    Column("model", Text, nullable=False),  # as the run's --model takes it (an absolute path for a local one)
    Column("revision", Text),
    Column("name", Text, nullable=False),  # the member's folder under the sweep's out-dir
    Column("out_dir", Text, nullable=False),
    Column("step", BigInteger),
    Column("tokens", BigInteger),
    Column("state", String(16), nullable=False, index=True),  # waiting running done failed skipped
    Column("attempts", Integer, nullable=False),  # claims so far
    Column("worker", Text),  # who holds it (running) or last held it
    Column("host", Text),  # the worker's host (hostname and boot id): where its process can be seen
    Column("pid", Integer),
    Column("pid_started", String(32)),  # the process's start time on its host (a reused pid is not it)
    Column("heartbeat", Float),  # seconds since the epoch, by the worker's clock
    Column("error_class", String(64)),
    Column("error", Text),  # the last error's line
    Column("note", Text),
    Column("signature_sha256", KEY),
    Column("run_key", KEY),
    Column("queued_at", Float, nullable=False),
    Column("started_at", Float),
    Column("finished_at", Float),
)


def _add_sweeps(conn) -> None:
    metadata.create_all(conn, tables=[sweeps, jobs])


# MIGRATIONS[v](conn) brings a store at version v to v + 1 (within one transaction). A later
# base-bench adds its migrations here and raises SCHEMA_VERSION.
MIGRATIONS: dict[int, Callable] = {1: _add_sweeps}  # 2: the sweep tables


def version(conn) -> int:
    """The store's schema version; 0 for a database without base-bench's tables."""
    if not inspect(conn).has_table("meta"):
        return 0
    row = conn.execute(select(meta.c.value).where(meta.c.name == "schema_version")).first()
    try:
        return int(row[0]) if row else 0
    except ValueError:
        return -1


def _refusal(db: Store, found: int) -> StoreError | None:
    if found == SCHEMA_VERSION:
        return None
    if found < 0:
        return StoreError(f"{db.shown}: its schema_version is not a number; this is not a base-bench store")
    if found > SCHEMA_VERSION:
        return StoreError(
            f"{db.shown}: the store's schema is version {found}, newer than this base-bench's "
            f"({SCHEMA_VERSION}); upgrade base-bench to use it"
        )
    if found == 0:
        return StoreError(f"{db.shown}: no base-bench store there yet (the first run written with --store makes it)")
    return StoreError(
        f"{db.shown}: the store's schema is version {found}, older than this base-bench's ({SCHEMA_VERSION}); "
        f"run `base-bench store upgrade --store URL` first"
    )


def _lock(conn, db: Store) -> None:
    if db.dialect == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": ADVISORY_LOCK})


@contextmanager
def writing(db: Store) -> Iterator:
    """A write transaction on a store at SCHEMA_VERSION; an empty database gets the schema first.
    Any database error ends as one StoreError line (the transaction rolled back)."""
    try:
        with db.engine.connect().execution_options(writing=True) as conn:
            with conn.begin():
                found = version(conn)
                if found == 0:
                    _lock(conn, db)
                    found = version(conn)  # another process may have made it while we waited
                    if found == 0:
                        _create(conn)
                        found = SCHEMA_VERSION
                problem = _refusal(db, found)
                if problem:
                    raise problem
                yield conn
    except SQLAlchemyError as exc:
        raise failure(db, exc, "writing to the store") from None


@contextmanager
def reading(db: Store) -> Iterator:
    """A read transaction on a store at SCHEMA_VERSION; StoreError in one line otherwise."""
    try:
        with db.engine.connect() as conn:
            with conn.begin():
                problem = _refusal(db, version(conn))
                if problem:
                    raise problem
                yield conn
    except SQLAlchemyError as exc:
        raise failure(db, exc, "reading the store") from None


def _create(conn) -> None:
    metadata.create_all(conn)
    conn.execute(meta.insert().values(name="schema_version", value=str(SCHEMA_VERSION)))


def upgrade(db: Store) -> tuple[int, int]:
    """Bring the store to SCHEMA_VERSION: make it where the database is empty, else apply each
    migration from its version on, one transaction each. Returns (version before, version after).
    StoreError for a store newer than this base-bench."""
    try:
        with db.engine.connect().execution_options(writing=True) as conn:
            with conn.begin():
                _lock(conn, db)
                before = version(conn)
                if before < 0 or before > SCHEMA_VERSION:
                    raise _refusal(db, before)
                if before == 0:
                    _create(conn)
                    return 0, SCHEMA_VERSION
            now = before
            while now < SCHEMA_VERSION:
                with conn.begin():
                    _lock(conn, db)
                    now = version(conn)
                    if now >= SCHEMA_VERSION:
                        break
                    if now not in MIGRATIONS:
                        raise StoreError(f"{db.shown}: no migration from schema version {now}")
                    MIGRATIONS[now](conn)
                    conn.execute(meta.update().where(meta.c.name == "schema_version").values(value=str(now + 1)))
                    now += 1
    except SQLAlchemyError as exc:
        raise failure(db, exc, "upgrading the store") from None
    problem = _refusal(db, now)
    if problem:
        raise problem
    return before, now

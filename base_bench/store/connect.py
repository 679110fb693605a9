"""Which database a store URL names, and a connection to it that fails in one line.

    url = store_url(args.store)            # the flag, else $BASE_BENCH_STORE, else None
    db = open_store(url)                   # a Store: its engine, and the URL to show (no password)
    db = open_store(url, create=False)     # reading: a missing SQLite file is an error, not a new store
    print(db.shown)                        # sqlite:///runs/bench.db  |  postgresql://team:***@db/bench

Two kinds of URL:

* `sqlite:///PATH`, or a bare PATH ending in `.db`: an embedded SQLite file, no server. It is opened
  in WAL mode with a busy timeout of BUSY_TIMEOUT_S, and every write takes the database's write lock
  when it begins (BEGIN IMMEDIATE), so several processes on one machine can write at once: they wait
  for each other instead of failing.
* `postgresql://USER:PASSWORD@HOST[:PORT]/DB` (or `postgres://`, or `postgresql+psycopg://`): a
  PostgreSQL server through psycopg 3 (`pip install -e '.[store-postgres]'`).

The password of a URL is a secret: it is registered with `redact` and replaced by *** wherever the
URL is shown, and an error from the driver is cut to its first line and redacted before it is said.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import StoreError, UsageError
from ..redact import redact, register

ENV = "BASE_BENCH_STORE"  # the store every command uses when --store is not given
BUSY_TIMEOUT_S = 120  # how long a SQLite writer waits for another process's write to end
CONNECT_TIMEOUT_S = 10  # how long a PostgreSQL connection may take before the server counts as unreachable
URL_FORMS = "sqlite:///PATH, PATH.db or postgresql://USER:PASSWORD@HOST/DB"
_POSTGRES = re.compile(r"^(postgres|postgresql)(\+psycopg)?://", re.IGNORECASE)


@dataclass(frozen=True)
class Store:
    """An open store: `engine` (SQLAlchemy), `dialect` ("sqlite" or "postgresql"), `shown` (the URL
    without its password, for messages) and `path` (the SQLite file; None for a server)."""

    engine: object
    dialect: str
    shown: str
    path: Path | None = None
    password: str | None = field(default=None, repr=False)  # removed from any driver message, whatever its length

    def dispose(self) -> None:
        self.engine.dispose()


def store_url(given: str | None) -> str | None:
    """The store to use: `given` (a --store flag), else $BASE_BENCH_STORE, else None (no store)."""
    if given is not None:
        if not given.strip():
            raise UsageError(f"--store is empty; give {URL_FORMS}")
        return given
    return os.environ.get(ENV) or None


def _sqlalchemy_url(url: str):
    """(SQLAlchemy URL, dialect, SQLite path or None) for a store URL; UsageError for any other."""
    from sqlalchemy.engine import make_url

    text = url.strip()
    if _POSTGRES.match(text):
        text = _POSTGRES.sub("postgresql+psycopg://", text, count=1)
        try:
            parsed = make_url(text)
        except Exception:  # noqa: BLE001  (sqlalchemy raises ArgumentError, ValueError...)
            raise UsageError(f"the store URL is not a PostgreSQL URL ({URL_FORMS})") from None
        register(parsed.password)
        if not parsed.database:
            raise UsageError(f"the store URL {_shown(parsed)} names no database; add /DB at its end")
        return parsed, "postgresql", None
    if text.lower().startswith("sqlite:///"):
        path = Path(text[len("sqlite:///") :].split("?", 1)[0])
    elif "://" not in text and text.lower().endswith(".db"):
        path = Path(text)
    else:
        raise UsageError(f"not a store URL: give {URL_FORMS}")
    if not str(path) or str(path) == ":memory:":
        raise UsageError("an in-memory SQLite store keeps nothing; give a file: sqlite:///PATH or PATH.db")
    path = path.expanduser().absolute()
    return make_url("sqlite://").set(database=str(path)), "sqlite", path


def _shown(parsed) -> str:
    text = parsed.render_as_string(hide_password=True).replace("postgresql+psycopg://", "postgresql://", 1)
    return redact(text)


def shown_url(url: str) -> str:
    """The store URL as messages show it: its password replaced by ***."""
    try:
        parsed, dialect, path = _sqlalchemy_url(url)
    except UsageError:
        return "(a store URL that cannot be read)"
    return f"sqlite:///{path}" if dialect == "sqlite" else _shown(parsed)


def open_store(url: str, create: bool = True) -> Store:
    """A `Store` for `url`. `create=False` (a reader) refuses a SQLite file that does not exist rather
    than making an empty one. Nothing is connected yet: the first query says whether the server answers."""
    parsed, dialect, path = _sqlalchemy_url(url)
    from sqlalchemy import create_engine, event

    if dialect == "sqlite":
        shown = f"sqlite:///{path}"
        if not path.exists():
            if not create:
                raise StoreError(f"{shown}: no store there (the first run written with --store makes it)")
            if not path.parent.is_dir():
                raise StoreError(f"{shown}: its folder {path.parent} does not exist")
        engine = create_engine(parsed)
        event.listen(engine, "connect", _sqlite_connect)
        event.listen(engine, "begin", _sqlite_begin)
        return Store(engine, dialect, shown, path)
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise StoreError(
            "a PostgreSQL store needs psycopg 3: pip install -e '.[store-postgres]' (or psycopg[binary])"
        ) from None
    engine = create_engine(parsed, connect_args={"connect_timeout": CONNECT_TIMEOUT_S}, pool_pre_ping=True)
    return Store(engine, dialect, _shown(parsed), None, parsed.password)


def _sqlite_connect(dbapi_conn, _record) -> None:
    """Each new SQLite connection: wait for other writers, WAL (readers never block the writer), and
    transactions begun by us (BEGIN IMMEDIATE), not by the driver."""
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
    cur.execute("PRAGMA journal_mode = WAL")
    cur.execute("PRAGMA synchronous = NORMAL")  # with WAL: a commit survives a crash of the process
    cur.execute("PRAGMA foreign_keys = ON")
    cur.close()


def _sqlite_begin(conn) -> None:
    """A write takes the lock when it begins, so that two writers never both hold a read snapshot
    that one of them must then give up (SQLITE_BUSY without waiting); a read begins deferred."""
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("writing") else "BEGIN")


def failure(db: Store, exc: BaseException, doing: str) -> StoreError:
    """A driver's error as one line: what was being done, the store (no password), the first line of
    the driver's message, redacted."""
    first = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    why = first[0].strip() if first else type(exc).__name__
    why = re.sub(r"\s+", " ", why)[:300]
    if db.password:
        why = why.replace(db.password, "***")
    return StoreError(redact(f"{db.shown}: {doing} failed: {why}"))

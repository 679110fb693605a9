"""Real databases for the results store's tests (base_bench/store): an empty SQLite file, or an empty
PostgreSQL database on a real server. No mocks. The fixtures in conftest.py use it:

    def test_saves(store_url): ...        # twice: sqlite:////tmp/.../store.db and postgresql://...
    def test_locks(postgres_url): ...     # PostgreSQL only
    engine = create_engine(sqlalchemy_url(store_url))   # a test's own engine (psycopg 3 driver)

The server is $BASE_BENCH_TEST_PG, an admin URL whose role may create databases (default
postgresql://base_bench:bb-pg-test-7c41e9@127.0.0.1:5432/base_bench_test). Each pytest-xdist worker gets a database of its own,
base_bench_test_<worker>_<session> (gw0, gw1, or master without -n; <session> the pytest run's process id),
made on first use and dropped when the worker exits
Before each test its schemas are dropped and an empty `public`, owned by the role, is made again.

Where the server cannot be reached the fixtures skip, with how to start it, except under CI=1 or
with BASE_BENCH_TEST_PG set, where they fail: .ci/run starts the server and sets the variable, so a
broken install must not pass as a skip. Set up a machine as .ci/run does (Debian, as root):

    pg_ctlcluster 15 main start       # the version `pg_lsclusters` shows
    runuser -u postgres -- psql -c "CREATE ROLE base_bench LOGIN CREATEDB PASSWORD 'bb-pg-test-7c41e9'"
    runuser -u postgres -- createdb -O base_bench base_bench_test

psycopg 3 is used directly here, not the store's code: the fixtures must not depend on what they test.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import time
from urllib.parse import urlsplit, urlunsplit

ENV = "BASE_BENCH_TEST_PG"
DEFAULT_ADMIN_URL = "postgresql://base_bench:bb-pg-test-7c41e9@127.0.0.1:5432/base_bench_test"
HOW_TO_START = (
    "start it as .ci/run does (pg_ctlcluster <version> main start; role base_bench, password base_bench, "
    f"CREATEDB; database base_bench_test owned by it) or set {ENV} to a postgresql:// URL of such a role"
)


def admin_url() -> str:
    """$BASE_BENCH_TEST_PG, or the default: a database that the role may connect to and create others from."""
    url = os.environ.get(ENV) or DEFAULT_ADMIN_URL
    scheme, rest = url.split("://", 1)
    return "postgresql://" + rest if scheme.startswith("postgresql+") or scheme == "postgres" else url


def pg_url(dbname: str, admin: str | None = None) -> str:
    """The admin URL with another database: same role, password, host, port and query."""
    parts = urlsplit(admin or admin_url())
    return urlunsplit(parts._replace(path="/" + dbname))


def sqlalchemy_url(url: str) -> str:
    """A store URL as SQLAlchemy takes it: postgresql:// on the psycopg 3 driver (SQLAlchemy's
    default for postgresql:// is psycopg2, not installed); a sqlite URL as it is."""
    return "postgresql+psycopg://" + url.split("://", 1)[1] if url.startswith("postgresql://") else url


def shown(url: str) -> str:
    """A URL for a message: its password replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(":" + parts.password + "@", ":***@", 1)))


def worker_database() -> str:
    """This process's database: base_bench_test_gw0_<session> on xdist worker gw0 (master without -n),
    where <session> is the pytest session's process id, so that two pytest runs at once on one server
    (two checkouts, two developers) never empty each other's tables. It is dropped when the process ends."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    session = os.getppid() if worker else os.getpid()  # an xdist worker's parent is the session's process
    return "base_bench_test_" + re.sub(r"[^a-z0-9_]", "_", f"{worker or 'master'}_{session}".lower())


@functools.cache
def pg_problem() -> str | None:
    """Why the server cannot be used (one line), or None. Asked once per process."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    try:
        with psycopg.connect(admin_url(), connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return f"PostgreSQL at {shown(admin_url())} cannot be reached: {first}"
    return None


def pg_available() -> bool:
    return pg_problem() is None


@functools.cache
def ensure_database(dbname: str) -> str:
    """Create `dbname` through the admin URL unless it exists (once per process); its URL."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_url(), autocommit=True) as conn:  # CREATE DATABASE: not in a transaction
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone():
            try:  # template0: nothing a developer added to template1, and nobody is ever connected to it
                conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(dbname)))
            except psycopg.errors.DuplicateDatabase:
                pass  # another pytest run made it meanwhile
    atexit.register(_drop, dbname)
    return pg_url(dbname)


def _drop(dbname: str) -> None:
    """Drop a database this process made (at exit), ending any session still in it."""
    import psycopg
    from psycopg import sql

    for _ in range(10):  # autovacuum may be in it right after the tests' writes: a moment later it is not
        try:
            with psycopg.connect(admin_url(), autocommit=True, connect_timeout=5) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
            return
        except psycopg.errors.InsufficientPrivilege:
            time.sleep(0.5)
        except psycopg.Error:
            return  # the server is gone already: nothing is left to tidy


def empty(url: str) -> None:
    """Drop every schema of the database at `url` (its tables, types, sequences...) and make an
    empty `public`, owned by the connecting role, so that the role can create tables in it.

    A connection that a previous test left inside a transaction would hold its locks and block the
    DROP: such sessions of this database are ended first. Idle ones (an engine's pool) are left."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'"
        )
        conn.execute("SET lock_timeout = '20s'")  # an error that names the lock, rather than a hung test
        schemas = conn.execute(
            "SELECT nspname FROM pg_namespace"
            " WHERE nspname <> 'information_schema' AND nspname NOT LIKE 'pg\\_%' ORDER BY nspname"
        ).fetchall()
        with conn.transaction():
            for (name,) in schemas:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))
            conn.execute("CREATE SCHEMA public")


def empty_worker_database() -> str:
    """The URL of this worker's database, made if missing and emptied now (call pg_problem first)."""
    url = ensure_database(worker_database())
    empty(url)
    return url


def bad_urls(password: str) -> dict[str, str]:
    """Two store URLs that cannot be used, each with `password` in it (which no output may show): this
    server with a wrong password (for this worker's database), and a port where nothing listens."""
    admin = urlsplit(admin_url())
    user = admin.username or "base_bench"
    return {
        "wrong password": f"postgresql://{user}:{password}@{admin.hostname}:{admin.port or 5432}/{worker_database()}",
        "unreachable": f"postgresql://{user}:{password}@127.0.0.1:1/db",
    }

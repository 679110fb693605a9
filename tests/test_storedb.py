"""The store's test databases themselves (tests/storedb.py, the `store_url` and `postgres_url`
fixtures): each test gets an empty database, SQLite in its tmp_path and this worker's PostgreSQL
database, whatever the test before it left there. On a real server: skipped without one, a failure
under CI=1 or with BASE_BENCH_TEST_PG set."""

import pytest
import sqlalchemy as sa

from storedb import DEFAULT_ADMIN_URL, pg_url, shown, sqlalchemy_url, worker_database


def user_schemas(conn):
    return sorted(name for name in sa.inspect(conn).get_schema_names() if name != "information_schema")


# Each round finds the database empty, then leaves a table, a row and (PostgreSQL) a schema behind for
# the next: round 2 runs after round 1 on the same worker (a module keeps to one worker under -n N).
@pytest.mark.parametrize("round_", [1, 2])
def test_each_test_gets_an_empty_database(store_url, round_):
    engine = sa.create_engine(sqlalchemy_url(store_url))
    try:
        with engine.begin() as conn:
            assert sa.inspect(conn).get_table_names() == []
            if engine.dialect.name == "postgresql":
                assert user_schemas(conn) == ["public"]
            leftover = sa.Table("leftover", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
            leftover.create(conn)
            conn.execute(leftover.insert().values(id=round_))
            if engine.dialect.name == "postgresql":
                conn.execute(sa.text("CREATE SCHEMA stray"))
                conn.execute(sa.text("CREATE TABLE stray.t (x int)"))
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT id FROM leftover")).scalar_one() == round_
    finally:
        engine.dispose()


def test_sqlite_is_a_file_in_tmp_path_and_postgresql_the_workers_database(store_url, tmp_path):
    if store_url.startswith("sqlite"):
        assert store_url == f"sqlite:///{tmp_path}/store.db" and not (tmp_path / "store.db").exists()
        engine = sa.create_engine(store_url)
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
        engine.dispose()
        assert (tmp_path / "store.db").stat().st_size > 0
    else:
        assert store_url.startswith("postgresql://") and store_url.endswith("/" + worker_database())
        engine = sa.create_engine(sqlalchemy_url(store_url))
        with engine.connect() as conn:
            db = conn.execute(sa.text("SELECT current_database()")).scalar_one()
            owner = conn.execute(
                sa.text("SELECT nspowner::regrole::text = current_user FROM pg_namespace WHERE nspname = 'public'")
            ).scalar_one()
        engine.dispose()
        assert db == worker_database() and owner  # the role owns `public`: it may create tables there


def test_postgres_url_is_an_empty_postgresql_database(postgres_url):
    engine = sa.create_engine(sqlalchemy_url(postgres_url))
    try:
        with engine.connect() as conn:
            assert sa.inspect(conn).get_table_names() == [] and user_schemas(conn) == ["public"]
    finally:
        engine.dispose()


def test_the_url_helpers():
    """No server needed: the per-database URL keeps the credentials, a message hides the password."""
    assert pg_url("base_bench_test_gw1", DEFAULT_ADMIN_URL) == (
        "postgresql://base_bench:bb-pg-test-7c41e9@127.0.0.1:5432/base_bench_test_gw1"
    )
    assert pg_url("other", "postgresql://u:p%40ss@db.example:6543/admin?sslmode=require") == (
        "postgresql://u:p%40ss@db.example:6543/other?sslmode=require"
    )
    assert shown(DEFAULT_ADMIN_URL) == "postgresql://base_bench:***@127.0.0.1:5432/base_bench_test"
    assert sqlalchemy_url("postgresql://u:p@h:1/d") == "postgresql+psycopg://u:p@h:1/d"
    assert sqlalchemy_url("sqlite:////tmp/x/store.db") == "sqlite:////tmp/x/store.db"

"""Fixtures of the store and lookup tests: SQLite files, throwaway PostgreSQL databases, data.

Loaded with ``pytest_plugins = ("store_fixtures",)`` by the test modules that use it.
PostgreSQL tests need a server in $AUTOTRANSPOSE_TEST_PG_URL (`.ci/postgres.sh` starts one);
without it they skip, unless $CI_REQUIRE_POSTGRES=1, when they fail. Every test gets a
database of its own, dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from autotranspose.store import Store, hooks, urls

PG_ENV = "AUTOTRANSPOSE_TEST_PG_URL"


# --- databases -------------------------------------------------------------------------------
def _pg_unavailable(reason: str) -> None:
    if os.environ.get("CI_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"CI_REQUIRE_POSTGRES=1 but {reason}: .ci/postgres.sh should have started one")
    pytest.skip(f"{reason}; set {PG_ENV} (e.g. by sourcing .ci/postgres.sh)")


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    """The PostgreSQL server's URL (an admin connection that may create databases)."""
    url = os.environ.get(PG_ENV)
    if not url:
        _pg_unavailable(f"{PG_ENV} is not set")
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except sa.exc.SQLAlchemyError as exc:
        _pg_unavailable(f"cannot connect to {PG_ENV}: {str(exc).splitlines()[0]}")
    finally:
        engine.dispose()
    return url


@pytest.fixture
def pg_url(pg_server_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test."""
    name = f"at_test_{uuid.uuid4().hex[:16]}"
    admin = sa.create_engine(
        pg_server_url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool
    )
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield sa.make_url(pg_server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database to open: a SQLite file path, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "tuning.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    with Store.open(db_url) as s:
        yield s


@pytest.fixture
def isolated_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Point the default database into tmp_path: tests never touch the user's data dir."""
    path = tmp_path / "home" / "autotranspose" / "tuning.db"
    monkeypatch.setattr(urls, "default_path", lambda: path)
    monkeypatch.delenv(urls.ENV_VAR, raising=False)
    return path


@pytest.fixture
def template_version(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Call with a string to pretend every kernel of the running code has that version; with
    nothing, to go back to the real per-kernel versions."""
    real = hooks._kernel_version

    def set_version(version: str | None = None) -> None:
        fake = lambda config, problem="": version  # noqa: E731
        monkeypatch.setattr(hooks, "_kernel_version", fake if version else real)

    return set_version

"""Engines and transactions on a tuning database's URL: how we connect to SQLite and
PostgreSQL, and how a driver's failure reads.

SQLite runs in WAL mode with a busy timeout and takes its write lock at BEGIN (``BEGIN
IMMEDIATE``), so several processes on one machine can share a file; a reader can go through a
read-only URI. An engine may wait less for a lock than BUSY_TIMEOUT_S (`make_engine`'s
`busy_timeout_s`: a first call's claims and winners wait about a second, PostgreSQL through its
lock timeout); a lock not had in time is :func:`busy`. PostgreSQL connections carry connect and statement timeouts
(:func:`connect_args`); another library's engine on the same database (Optuna's) gets the same
connect timeout through :func:`shared_engine_kwargs`. Every write is one transaction
(:func:`transaction`), so a killed process loses at most the write in flight.
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from ..errors import StoreError
from .urls import SUPPORTED_BACKENDS, SUPPORTED_URLS, sqlite_path

BUSY_TIMEOUT_S = 30
# PostgreSQL: a server that accepts and never answers fails a command within seconds (see
# connect_args); a statement that waits or runs for minutes fails too, unless the URL's own
# ``options`` set statement_timeout (lock waits count: far above any statement of ours).
CONNECT_TIMEOUT_VAR = "AUTOTRANSPOSE_DB_CONNECT_TIMEOUT"
CONNECT_TIMEOUT_S = 5
STATEMENT_TIMEOUT_VAR = "AUTOTRANSPOSE_DB_STATEMENT_TIMEOUT"
STATEMENT_TIMEOUT_S = 300


# --- PostgreSQL timeouts --------------------------------------------------------------------------
def _seconds(var: str, default: float) -> float:
    text = os.environ.get(var, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise StoreError(
            f"{var}={text!r:.40} is not a number of seconds; set it to a number such as "
            f"{default:g} (0: no limit), or unset it"
        )
    return value


def _libpq(u: sa.URL) -> bool:
    """PostgreSQL through libpq (psycopg, psycopg2): the drivers whose settings we set."""
    return u.get_backend_name() == "postgresql" and u.get_driver_name() in ("psycopg", "psycopg2")


def _connect_timeout(u: sa.URL) -> tuple[int, str]:
    """The connect timeout in whole seconds (0: none) and where it is set. libpq counts whole
    seconds and waits at least 2."""
    if "connect_timeout" in u.query:
        text = u.query["connect_timeout"]
        try:
            seconds = int(float(text if isinstance(text, str) else text[-1]))
        except ValueError:
            seconds = 0
        where = "connect_timeout in the URL"
    else:
        seconds = math.ceil(_seconds(CONNECT_TIMEOUT_VAR, CONNECT_TIMEOUT_S))
        where = CONNECT_TIMEOUT_VAR
    return (max(seconds, 2) if seconds > 0 else 0), where


def connect_args(url: str) -> dict[str, Any]:
    """Driver arguments of an engine on `url` (ours, and Optuna's on the same database).

    PostgreSQL through libpq gets a connect timeout: $AUTOTRANSPOSE_DB_CONNECT_TIMEOUT seconds
    (default 5), unless the URL sets ``connect_timeout``; so a server that accepts and never
    answers fails a command within seconds instead of hanging it.
    """
    u = sa.make_url(url)
    if not _libpq(u) or "connect_timeout" in u.query:
        return {}
    return {"connect_timeout": _connect_timeout(u)[0]}


def _statement_timeout_ms(u: sa.URL) -> int | None:
    """The statement timeout our PostgreSQL sessions set (None: none, or the URL's own)."""
    own = u.query.get("options") or ()
    if not _libpq(u) or "statement_timeout" in " ".join((own,) if isinstance(own, str) else own):
        return None
    ms = round(_seconds(STATEMENT_TIMEOUT_VAR, STATEMENT_TIMEOUT_S) * 1000)
    return ms or None


def reason(exc: sa.exc.SQLAlchemyError, url: str | None = None) -> str:
    """The driver's first line, and for a timeout, which limit ran out and how to raise it."""
    orig = getattr(exc, "orig", None)
    lines = str(orig if orig is not None else exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    if url is None or not _libpq(u := sa.make_url(url)):
        return text
    if type(orig).__name__ == "ConnectionTimeout" or "timeout expired" in text:
        seconds, where = _connect_timeout(u)
        return (
            f"no answer from {u.host or 'localhost'}:{u.port or 5432} within {seconds} s ({text}, "
            f"limit from {where}); check that the server is up and reachable, or raise the limit "
            f"with {CONNECT_TIMEOUT_VAR}=SECONDS or ?connect_timeout=SECONDS in the URL"
        )
    if "statement timeout" in text:
        return (
            f"{text} (after {_seconds(STATEMENT_TIMEOUT_VAR, STATEMENT_TIMEOUT_S):g} s, lock "
            f"waits included); raise the limit with {STATEMENT_TIMEOUT_VAR}=SECONDS (0: none)"
        )
    return text


# --- engines and transactions ---------------------------------------------------------------------
# The synchronous PostgreSQL drivers and what to install for each (SQLite's ships with Python).
_DRIVER_PACKAGES = {
    "psycopg": "'psycopg[binary]'",
    "psycopg2": "psycopg2-binary",
    "pg8000": "pg8000",
}
_PLAIN_URLS = {
    "postgresql": "postgresql+psycopg:// (pip install 'autotranspose[postgres]')",
    "sqlite": "a file path or sqlite:///PATH",
}


def _create_engine(u: sa.URL, display: str, **kwargs: Any) -> Engine:
    try:
        return sa.create_engine(u, **kwargs)
    except ImportError as exc:  # SQLAlchemy imports the driver here
        backend, driver = u.get_backend_name(), u.get_driver_name()
        module = exc.name or driver
        plain = _PLAIN_URLS.get(backend, SUPPORTED_URLS)
        if driver == "psycopg":
            hint = f"pip install {_DRIVER_PACKAGES[driver]}"
        elif driver in _DRIVER_PACKAGES:
            hint = f"pip install {_DRIVER_PACKAGES[driver]}, or use {plain}"
        else:
            hint = f"use {plain}"
        raise StoreError(
            f"the tuning database {display} needs the {SUPPORTED_BACKENDS.get(backend, backend)} "
            f"driver {driver}, whose module {module} cannot be imported ({exc}); {hint}"
        ) from exc


def make_engine(
    url: str,
    display: str,
    *,
    readonly: bool = False,
    uri: str | None = None,
    busy_timeout_s: float | None = None,
) -> Engine:
    """An engine on `url`; for SQLite, through the URI `uri` (a read-only one) when given.
    `busy_timeout_s`: how long a statement waits for another connection's lock before it
    fails (:func:`busy`); None: BUSY_TIMEOUT_S for SQLite, PostgreSQL's own (none)."""
    u = sa.make_url(url)
    if u.get_backend_name() != "sqlite":
        settings = {}
        ms = _statement_timeout_ms(u)
        if ms is not None:
            settings["statement_timeout"] = int(ms)
        if busy_timeout_s is not None and _libpq(u):
            settings["lock_timeout"] = max(1, round(busy_timeout_s * 1000))
        engine = _create_engine(u, display, pool_pre_ping=True, connect_args=connect_args(url))
        if settings:

            @event.listens_for(engine, "connect", insert=True)
            def _on_pg_connect(dbapi_connection: Any, _record: Any) -> None:
                # A SET, not the startup `options` (which PgBouncer refuses); SQLAlchemy's
                # recipe for session settings (outside any transaction).
                autocommit = dbapi_connection.autocommit
                dbapi_connection.autocommit = True
                with dbapi_connection.cursor() as cursor:
                    for name, value in settings.items():
                        cursor.execute(f"SET {name} = {value}")
                dbapi_connection.autocommit = autocommit

        return engine
    memory = sqlite_path(url) is None and not (u.database or "").startswith("file:")
    wait_s = BUSY_TIMEOUT_S if busy_timeout_s is None else busy_timeout_s
    kwargs: dict[str, Any] = {"connect_args": {"timeout": wait_s}}
    if memory:
        kwargs["poolclass"] = sa.pool.StaticPool  # one connection, or each sees an empty db
    if uri is not None:
        kwargs["creator"] = lambda: sqlite3.connect(
            uri, uri=True, timeout=wait_s, check_same_thread=False
        )
    wal = not (memory or readonly or uri is not None)
    engine = _create_engine(u, display, **kwargs)

    _own_sqlite_transactions(
        engine, lambda conn: conn.get_execution_options().get("autotranspose_write", False)
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {max(1, round(wait_s * 1000))}")
            cursor.execute("PRAGMA foreign_keys = ON")
            if wal:  # a write to the file: only once it is known to be ours (see schema.gate)
                _enter_wal(cursor, wait_s)  # readers do not block the writer
        finally:
            cursor.close()

    return engine


def _own_sqlite_transactions(engine: Engine, immediate: Callable[[Connection], bool]) -> None:
    """SQLAlchemy emits BEGIN itself, the sqlite3 module's own handling off (SQLAlchemy's
    documented recipe for real SQLite transactions: the module begins one only at the first
    write, so what a transaction read first was not part of it). A transaction that
    `immediate` says may write takes the write lock at BEGIN, waiting up to the busy timeout:
    a deferred one that read first could fail at once when another process wrote since."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate(conn) else "BEGIN")


def serialize_sqlite_transactions(engine: Engine) -> None:
    """Make every transaction of another library's engine on a SQLite file (Optuna's) take
    the write lock at BEGIN. Optuna reads a row and then writes it in one transaction, with a
    row lock (FOR UPDATE) that SQLite does not have: two processes popping a queued trial
    both read it WAITING, and the later one's RUNNING landed on a trial the other had
    already run and finished. The engine's connections made so far are dropped."""
    _own_sqlite_transactions(engine, lambda conn: True)
    engine.dispose()


def _enter_wal(cursor: Any, wait_s: float) -> None:
    """``PRAGMA journal_mode = WAL``, tried again for up to `wait_s`. SQLite answers it
    "database is locked" at once, without its busy handler, while another connection holds the
    write lock on a file not yet in WAL mode: a first open racing another process's first
    write (which creates the schema) would fail where any other statement waits."""
    deadline = time.monotonic() + wait_s
    pause = 0.001
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if not busy(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, 0.05)


# SQLite: SQLITE_BUSY ("database is locked") and SQLITE_LOCKED ("database table is locked");
# PostgreSQL: lock_not_available (a lock timeout) and serialization or deadlock failures.
_BUSY_TEXT = ("database is locked", "database table is locked", "lock timeout")
_BUSY_SQLSTATES = ("55P03", "40001", "40P01")


def busy(exc: BaseException) -> bool:
    """Whether `exc` (a driver's error, or SQLAlchemy's around it) says another connection
    held a lock longer than this one waited: the operation may succeed if tried again."""
    orig = getattr(exc, "orig", None) or exc
    code = getattr(orig, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED and their extended codes
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state is not None:
        return state in _BUSY_SQLSTATES
    text = str(orig).lower()
    return any(t in text for t in _BUSY_TEXT)


@contextmanager
def transaction(engine: Engine, *, write: bool) -> Iterator[Connection]:
    with engine.connect() as conn:
        if write:
            conn.execution_options(autotranspose_write=True)
        with conn.begin():
            yield conn


def shared_engine_kwargs(url: str) -> dict[str, Any]:
    """Engine arguments for another library's engine on our database (Optuna's storage, which
    the tuner keeps beside our tables): a SQLite file shared by several processes waits up to
    a minute for a writer rather than failing at once; PostgreSQL gets our connect timeout
    (a server that never answers fails, not hangs) and a ping before reusing a connection."""
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 60}}
    return {"pool_pre_ping": True, "connect_args": connect_args(url)}

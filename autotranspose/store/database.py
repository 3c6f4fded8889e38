"""The tuning database: the tuner writes measurements into it, lookup reads the best configs.

One :class:`Store` wraps one SQLAlchemy engine. Any SQLAlchemy URL works (SQLite files by
default, PostgreSQL through ``postgresql+psycopg://``); Optuna's study may live in the same
database, since all our tables are prefixed ``at_``. Opening a database to write creates it and
creates or upgrades our schema (Alembic, version table ``at_alembic_version``); opening it to
read (``readonly=True``: show, lookup, export, ``transpose()``) changes nothing: a missing
database is an error saying how to create one, an older schema is read as it is, and a SQLite
file is opened read-only (``mode=ro``), so a database in a read-only directory can be read.
Either way a database that belongs to someone else is refused (:class:`ForeignDatabaseError`)
before anything is written to it. PostgreSQL connections carry connect and statement timeouts
(:func:`connect_args`).

Every write is one transaction, so a killed process loses at most the write in flight. SQLite
runs in WAL mode with a busy timeout and takes its write lock at BEGIN (``BEGIN IMMEDIATE``),
so several processes on one machine can share a file.

Rows are untrusted on the way out: configs go through ``KernelConfig.from_dict``, devices
through ``DeviceInfo.from_dict``, shape classes through ``ShapeClass.parse``, and every number
must lie within the bounds an imported file's must (`bounds`). A bad row is never served:
:meth:`Store.entries` and :meth:`Store.devices` (used by lookup and listings) skip it with a
:class:`BadRowWarning` naming it and what to do about it (:attr:`RowProblem.fix`), so one bad
row cannot break a user's ``transpose()``; :meth:`Store.problems` lists such rows for
``show``; :meth:`Store.best` and :meth:`Store.measured`, which ask for one row, raise
:class:`StoreError` naming it. A bad row is never deleted for the user; a best whose numbers
are out of bounds counts as stale, so the next valid result of its class replaces it.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import sqlite3
import sys
import urllib.parse
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import platformdirs
import sqlalchemy as sa
from alembic import command
from alembic.runtime.migration import MigrationContext
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from .. import __version__, codegen
from ..config import KernelConfig
from ..device import DeviceInfo
from ..dtypes import ELEMENT_SIZES
from ..errors import AutotransposeError, ForeignDatabaseError, StoreError
from ..measurement import Measurement
from ..shapes import Layout, ShapeClass, check_layout
from ..shapes import shape_class as classify
from . import bounds, migrations
from .models import APP_KEY, APP_NAME, Best, Claim, Config, Device, MeasurementRow, Meta, Run

ENV_VAR = "AUTOTRANSPOSE_DB"
BUSY_TIMEOUT_S = 30
# PostgreSQL: a server that accepts and never answers fails a command within seconds (see
# connect_args); a statement that waits or runs for minutes fails too, unless the URL's own
# ``options`` set statement_timeout (lock waits count: far above any statement of ours).
CONNECT_TIMEOUT_VAR = "AUTOTRANSPOSE_DB_CONNECT_TIMEOUT"
CONNECT_TIMEOUT_S = 5
STATEMENT_TIMEOUT_VAR = "AUTOTRANSPOSE_DB_STATEMENT_TIMEOUT"
STATEMENT_TIMEOUT_S = 300
RUN_STATUSES = ("running", "done", "interrupted", "failed", "imported")
# Where a result came from: a tuning run (or an import of one), or a first call's portfolio
# (`autotranspose.winners`). A tuned result always outranks a measured one (`_replaces`).
SOURCES = ("tuned", "measured")

# Tables Optuna's RDBStorage creates (any version): a database holding only these is one we may
# add our tables to, since the tuner keeps its Optuna study beside our results.
OPTUNA_TABLES = frozenset(
    {
        "alembic_version", "version_info", "studies", "study_directions",
        "study_user_attributes", "study_system_attributes", "trials", "trial_params",
        "trial_values", "trial_intermediate_values", "trial_user_attributes",
        "trial_system_attributes", "trial_heartbeats",
    }
)  # fmt: skip

_MAX_CONFIG_JSON = 4096  # a config is ~200 bytes of JSON: anything far larger is not one
_TEMPLATE_VERSION = re.compile(r"[0-9A-Za-z._-]{1,64}")
_DTYPE = re.compile(r"[0-9A-Za-z_]{1,32}")
_SQLITE_HEADER = b"SQLite format 3\x00"
_MIGRATION_LOCK = 0x6174_7472  # pg_advisory_xact_lock key: serialises concurrent first opens


class BadRowWarning(UserWarning):
    """A database row failed validation and was skipped (see :meth:`Store.problems`)."""


@dataclass(frozen=True)
class TunedEntry:
    """The best known config of one (device, element size, shape class), as lookup serves it.

    `stale` is true when the entry was measured with another template version than the running
    code's: it describes kernels that no longer exist and is listed but never served. `source`
    is "tuned" (a tuning run) or "measured" (a first call's portfolio, see SOURCES).
    """

    device: str
    elem_bytes: int
    shape_class: ShapeClass
    config: KernelConfig
    gbps: float
    copy_gbps: float
    ratio: float
    template_version: str
    stale: bool
    updated_at: datetime
    shape: tuple[int, int, int] | None = None  # the shape it was measured on
    dtype: str | None = None
    measured_at: datetime | None = None
    source: str = "tuned"


ImportedFile = tuple[DeviceInfo, Sequence[TunedEntry], str]  # device, entries, file name


@dataclass(frozen=True)
class RowProblem:
    """A row that failed validation: which table, which id, and why."""

    table: str
    row_id: int
    reason: str

    def __str__(self) -> str:
        return f"{self.table} row {self.row_id}: {self.reason}"

    @property
    def fix(self) -> str:
        """What the user can do about the row: a bad row is never served, and stays in the
        database until they act (nothing tuned is deleted behind their back)."""
        if self.table == "at_best":
            return (
                "tune its class again with more --trials (any valid result replaces it) or "
                f"delete the row (DELETE FROM at_best WHERE id = {self.row_id})"
            )
        if self.table == "at_devices":
            return "tune on that GPU or import its tuning file (either rewrites the row)"
        return f"delete the row (DELETE FROM {self.table} WHERE id = {self.row_id})"


# --- where the database is --------------------------------------------------------------------
def default_path() -> Path:
    """The per-user SQLite file used when neither an URL nor $AUTOTRANSPOSE_DB is given."""
    return Path(platformdirs.user_data_dir("autotranspose")) / "tuning.db"


def resolve_url(url: str | os.PathLike[str] | None = None) -> str:
    """The database URL to use: `url`, else $AUTOTRANSPOSE_DB, else the per-user SQLite file.

    A plain file path (no ``://``) means a SQLite file. An URL must name a kind of database
    autotranspose supports, SQLite or PostgreSQL (its driver is checked when the database is
    opened). An empty $AUTOTRANSPOSE_DB counts as unset; an empty `url` is refused: as a path
    it would be the current directory.
    """
    given = url is not None
    if url is None:
        url = os.environ.get(ENV_VAR) or None
    if url is None:
        return _sqlite_url(default_path())
    text = os.fspath(url)
    if not text.strip():
        raise StoreError(
            f"{text!r:.20} names no tuning database (as a path it is the current directory); "
            f"give a file path (such as tuning.db) or a URL, or none to use ${ENV_VAR} or the "
            "default file"
            if given
            else f"${ENV_VAR}={text!r:.20} names no tuning database; set it to a file path (such "
            "as tuning.db) or a URL, or unset it to use the default file"
        )
    if "://" not in text:
        return _sqlite_url(Path(text).expanduser())
    try:
        u = sa.make_url(text)
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise StoreError(
            f"{text!r:.200} is not a database URL ({exc}); use {_SUPPORTED_URLS}"
        ) from exc
    _check_dialect(u)
    return text


_SUPPORTED_URLS = (
    "a file path, sqlite:///PATH, or postgresql+psycopg://USER@HOST[:PORT]/DB "
    "(with pip install 'autotranspose[postgres]')"
)
# The kinds of database autotranspose is built and tested for (ON CONFLICT, row locks,
# advisory locks, timeouts); any other is refused by name before a driver is looked for.
SUPPORTED_BACKENDS = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def _check_dialect(u: sa.URL) -> None:
    """Refuse an URL of a kind of database we do not support, or whose driver SQLAlchemy does
    not know, in one line naming what to use instead."""
    shown = u.render_as_string(hide_password=True)
    backend = u.get_backend_name()
    if backend not in SUPPORTED_BACKENDS:
        raise StoreError(
            f"{backend!r:.40} in {shown!r:.200} is not a kind of database autotranspose supports "
            f"({', '.join(SUPPORTED_BACKENDS.values())}); use {_SUPPORTED_URLS}"
        )
    try:
        u.get_dialect()
        return
    except sa.exc.NoSuchModuleError:
        pass
    raise StoreError(
        f"{SUPPORTED_BACKENDS[backend]} has no driver {u.get_driver_name()!r:.40} (in "
        f"{shown!r:.200}); use {_SUPPORTED_URLS}"
    ) from None


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL, or None (another database, or SQLite in memory)."""
    u = sa.make_url(url)
    if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:"):
        return None
    if u.database.startswith("file:") or u.query.get("uri"):
        return None  # SQLite URI filenames: left to SQLite
    return Path(u.database)


def _sqlite_url(path: Path) -> str:
    return sa.URL.create("sqlite", database=str(path.absolute())).render_as_string()


def _display(url: str) -> str:
    path = sqlite_path(url)
    return str(path) if path is not None else sa.make_url(url).render_as_string(hide_password=True)


def _foreign(display: str, why: str) -> ForeignDatabaseError:
    return ForeignDatabaseError(
        f"{display} is not an autotranspose tuning database: {why}; point --db/{ENV_VAR} at "
        "another file or database, or move this one out of the way"
    )


def _not_created(display: str, what: str) -> StoreError:
    """A read found no tuning database, or none of our tables: say how to make them (reads
    never do)."""
    db = shlex.quote(display)
    return StoreError(
        f"{what}; create it with `autotranspose tune --shapes ... --db {db}` or, empty, with "
        f"`autotranspose db upgrade --db {db}`, or check the path or URL"
    )


def _current_version(config: KernelConfig) -> str:
    """The version of `config`'s kernel in the running code (a function so tests can pretend
    the code changed): a stored result is current only while it equals its own version."""
    return codegen.kernel_version(config)


def _templates_hash() -> str:
    """The running code's template files, recorded with each run (for the record only)."""
    return codegen.template_version()


def _now() -> datetime:
    return datetime.now(timezone.utc)


# --- PostgreSQL timeouts ------------------------------------------------------------------------
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


def _reason(exc: sa.exc.SQLAlchemyError, url: str | None = None) -> str:
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


# --- engine and schema ------------------------------------------------------------------------
# The synchronous PostgreSQL drivers and what to install for each (SQLite's ships with Python).
_DRIVER_PACKAGES = {"psycopg": "'psycopg[binary]'", "psycopg2": "psycopg2-binary", "pg8000": "pg8000"}
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
        plain = _PLAIN_URLS.get(backend, _SUPPORTED_URLS)
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


def _make_engine(
    url: str, display: str, *, readonly: bool = False, uri: str | None = None
) -> Engine:
    """An engine on `url`; for SQLite, through the URI `uri` (a read-only one) when given."""
    u = sa.make_url(url)
    if u.get_backend_name() != "sqlite":
        ms = _statement_timeout_ms(u)
        engine = _create_engine(u, display, pool_pre_ping=True, connect_args=connect_args(url))
        if ms is not None:

            @event.listens_for(engine, "connect", insert=True)
            def _on_pg_connect(dbapi_connection: Any, _record: Any) -> None:
                # A SET, not the startup `options` (which PgBouncer refuses); SQLAlchemy's
                # recipe for session settings (outside any transaction).
                autocommit = dbapi_connection.autocommit
                dbapi_connection.autocommit = True
                with dbapi_connection.cursor() as cursor:
                    cursor.execute(f"SET statement_timeout = {int(ms)}")
                dbapi_connection.autocommit = autocommit

        return engine
    memory = sqlite_path(url) is None and not (u.database or "").startswith("file:")
    kwargs: dict[str, Any] = {"connect_args": {"timeout": BUSY_TIMEOUT_S}}
    if memory:
        kwargs["poolclass"] = sa.pool.StaticPool  # one connection, or each sees an empty db
    if uri is not None:
        kwargs["creator"] = lambda: sqlite3.connect(
            uri, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False
        )
    wal = not (memory or readonly or uri is not None)
    engine = _create_engine(u, display, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # SQLAlchemy emits BEGIN itself (below), the sqlite3 module's own handling is off:
        # SQLAlchemy's documented recipe for real SQLite transactions.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
            cursor.execute("PRAGMA foreign_keys = ON")
            if wal:  # a write to the file: only once it is known to be ours (see _gate)
                cursor.execute("PRAGMA journal_mode = WAL")  # readers do not block the writer
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # A write transaction takes the write lock up front, waiting up to the busy timeout;
        # a deferred one that read first could fail at once when another process wrote since.
        write = conn.get_execution_options().get("autotranspose_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


@contextmanager
def _transaction(engine: Engine, *, write: bool) -> Iterator[Connection]:
    with engine.connect() as conn:
        if write:
            conn.execution_options(autotranspose_write=True)
        with conn.begin():
            yield conn


def _schema_state(conn: Connection, display: str) -> str:
    """Our schema revision ("" for a database without our tables); raises if it is foreign."""
    names = set(sa.inspect(conn).get_table_names())
    ours = {n for n in names if n.startswith("at_")}
    others = sorted(
        n for n in names - ours if n not in OPTUNA_TABLES and not n.startswith("sqlite_")
    )
    if others:
        shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
        raise _foreign(display, f"it holds tables autotranspose did not create ({shown})")
    if not ours:
        return ""
    if "at_meta" not in ours or migrations.VERSION_TABLE not in ours:
        raise _foreign(display, "it has at_ tables but no at_meta marker or schema version")
    try:
        marker = conn.execute(sa.select(Meta.value).where(Meta.key == APP_KEY)).scalar()
        rev = MigrationContext.configure(
            conn, opts={"version_table": migrations.VERSION_TABLE}
        ).get_current_revision()
    except sa.exc.SQLAlchemyError as exc:
        raise _foreign(
            display, f"its at_meta or {migrations.VERSION_TABLE} table is unreadable"
        ) from exc
    if marker != APP_NAME:
        raise _foreign(display, f"its at_meta marker says {marker!r:.40}, not {APP_NAME!r}")
    if rev not in migrations.known_revisions():
        raise StoreError(
            f"{display} has tuning-database schema revision {rev!r:.40}, which this autotranspose "
            f"{__version__} does not know (newest known: {migrations.head()}); upgrade "
            f"autotranspose, or point --db/{ENV_VAR} at another database"
        )
    return rev


def _sqlite_header(path: Path, display: str) -> bytes | None:
    """The file's first 100 bytes (b"" for an empty file), None when there is no file; rejects
    a file that is not SQLite before SQLite itself fails with a terse message."""
    try:
        with path.open("rb") as f:
            header = f.read(100)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"cannot read the tuning database {display}: {exc}") from exc
    if header and not header.startswith(_SQLITE_HEADER):
        raise _foreign(display, "the file is not a SQLite database")
    return header


def _readonly_uri(path: Path, header: bytes, display: str) -> str:
    """A SQLite URI that reads `path` and never writes it.

    A database in WAL mode needs its -shm index, which a reader creates when missing; in a
    directory we cannot write, that fails, and SQLite can read it only as immutable (no
    locking: right while nobody writes, which holds while there is no -wal file: any writer
    has one). A -wal file with changes but no -shm cannot be read there at all.
    """
    uri = f"file:{urllib.parse.quote(str(path.absolute()))}?mode=ro"
    if not _wal_mode(header) or Path(f"{path}-shm").exists() or os.access(path.parent, os.W_OK):
        return uri
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise StoreError(
            f"cannot read the tuning database {display}: it is in WAL mode with changes in "
            f"{wal.name} not yet written to it, and SQLite cannot create {path.name}-shm to read "
            f"them because {path.parent} is read-only; run any autotranspose command on it where "
            "the directory is writable (that folds the changes in), or copy the directory "
            "somewhere writable"
        )
    return uri + "&immutable=1"


def _wal_mode(header: bytes) -> bool:
    return len(header) >= 20 and 2 in header[18:20]  # file format versions: 2 is WAL


def _gate(url: str, path: Path, header: bytes, display: str) -> None:
    """Check that an existing SQLite file is ours (or has no tables) without writing to it.

    Only then may it be written: even the WAL pragma rewrites another application's file. A
    WAL-mode file without a -wal file (nobody is writing it) is read as immutable, which
    creates no -wal and -shm beside someone else's file; if that read fails (a writer came
    along), it is read again as an ordinary read-only reader.
    """
    uris = []
    if _wal_mode(header) and not Path(f"{path}-wal").exists():
        uris.append(f"file:{urllib.parse.quote(str(path.absolute()))}?mode=ro&immutable=1")
    uris.append(_readonly_uri(path, header, display))
    for i, uri in enumerate(uris):
        engine = _make_engine(url, display, uri=uri)
        try:
            with _opening(display, url, writing=False):
                try:
                    with _transaction(engine, write=False) as conn:
                        _schema_state(conn, display)
                    return
                except sa.exc.SQLAlchemyError:
                    if i == len(uris) - 1:
                        raise
        finally:
            engine.dispose()


@contextmanager
def _opening(display: str, url: str, *, writing: bool) -> Iterator[None]:
    """Errors of opening (connecting, checking, migrating) as StoreError, one line each."""
    try:
        yield
    except AutotransposeError:
        raise
    except sa.exc.OperationalError as exc:  # cannot connect, cannot open, locked, ...
        why = _reason(exc, url)
        path = sqlite_path(url)
        if writing and path is not None and not os.access(path.parent, os.W_OK):
            why += (
                f" ({path.parent} is not writable: tune, import and db upgrade write there); "
                f"give a database in a writable directory with --db PATH or {ENV_VAR}=PATH"
            )
        raise StoreError(f"cannot open the tuning database {display}: {why}") from exc
    except sa.exc.DatabaseError as exc:  # SQLite: "file is not a database", corrupt pages
        raise _foreign(display, f"the database cannot be read ({_reason(exc, url)})") from exc
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError(f"cannot open the tuning database {display}: {_reason(exc, url)}") from exc
    except Exception as exc:  # Alembic's own errors (e.g. an impossible target revision)
        if type(exc).__module__.startswith("alembic"):
            raise StoreError(f"cannot migrate the tuning database {display}: {exc}") from exc
        raise


def _prepare(engine: Engine, url: str, display: str, revision: str = "head") -> str:
    """Check the database is ours (or empty) and bring our schema to `revision`."""
    target = migrations.head() if revision == "head" else revision
    with _opening(display, url, writing=True):
        with _transaction(engine, write=False) as conn:
            if _schema_state(conn, display) == target:
                return target
        with _transaction(engine, write=True) as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
            current = _schema_state(conn, display)  # again: another process may have won
            if current != target:
                command.upgrade(migrations.alembic_config(conn), target)
            return target


def _readable(engine: Engine, url: str, display: str) -> tuple[str, tuple[Any, ...], Any]:
    """Check the database is ours and has our tables, without changing it: its revision, the
    at_devices columns to read and at_best's source column (an older revision's, with
    defaults for later ones)."""
    with _opening(display, url, writing=False), _transaction(engine, write=False) as conn:
        rev = _schema_state(conn, display)
        present = best = None
        if rev and rev != migrations.head():
            present = {c["name"] for c in sa.inspect(conn).get_columns("at_devices")}
            best = {c["name"] for c in sa.inspect(conn).get_columns("at_best")}
    if not rev:
        raise _not_created(display, f"{display} has no autotranspose tables yet")
    return rev, _device_columns(present, display), _best_source(best)


def _connect(
    url: str | os.PathLike[str] | None, *, readonly: bool, revision: str = "head"
) -> tuple[Engine, str, str, tuple[Any, ...], Any]:
    """Open the database at `url` (see resolve_url): (engine, resolved URL, display, at_devices
    columns, at_best's source column). A writer creates the database and creates or upgrades our schema; a reader
    (`readonly`) changes nothing and refuses a database that does not exist. Neither writes to
    a database before it is known to be ours, or new."""
    resolved = resolve_url(url)
    display = _display(resolved)
    path = sqlite_path(resolved)
    uri = None
    if path is not None:
        if not readonly:
            _ensure_default_dir(url)
        header = _sqlite_header(path, display)
        if header is None:
            if readonly:
                raise _not_created(
                    display, f"no tuning database at {display} (reads never create one)"
                )
            if not path.parent.is_dir():
                raise StoreError(
                    f"cannot create the tuning database {display}: directory {path.parent} does "
                    "not exist; create it or choose another path"
                )
        elif header:  # an empty file is a new database
            _gate(resolved, path, header, display)
        if readonly:
            uri = _readonly_uri(path, header or b"", display)
    engine = _make_engine(resolved, display, readonly=readonly, uri=uri)
    try:
        if readonly:
            _, columns, source = _readable(engine, resolved, display)
        else:
            _prepare(engine, resolved, display, revision)
            columns, source = _DEVICE_COLUMNS, Best.source
    except BaseException:
        engine.dispose()
        raise
    return engine, resolved, display, columns, source


def upgrade(url: str | os.PathLike[str] | None = None, revision: str = "head") -> str:
    """Create or upgrade our schema in the database at `url` (see :func:`resolve_url`).

    What ``autotranspose db upgrade`` runs; :meth:`Store.open` does the same implicitly.
    Returns the revision the database is at.
    """
    engine = _connect(url, readonly=False, revision=revision)[0]
    engine.dispose()
    return migrations.head() if revision == "head" else revision


def _ensure_default_dir(url: object) -> None:
    """The per-user data directory is ours to create; any other directory is the user's.

    It lies under $HOME (or $XDG_DATA_HOME), which can be read-only or not a directory at
    all (a service account's HOME=/dev/null): say so, and how to name another database.
    """
    if url is None and not os.environ.get(ENV_VAR):
        path = default_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            where = exc.filename or path.parent
            raise StoreError(
                f"cannot create the default tuning database {path}: cannot create {where} "
                f"({exc.strerror or exc}); give another with --db PATH or {ENV_VAR}=PATH (a "
                "file in a writable directory)"
            ) from exc


def _invalidate_lookup() -> None:
    # lookup caches its choices per process; a new best must reach it. Imported lazily (and
    # only if lookup is loaded at all) because lookup imports us.
    lookup = sys.modules.get("autotranspose.lookup")
    if lookup is not None:
        lookup.clear_cache()


# --- the store ---------------------------------------------------------------------------------
class Store:
    """The tuning database at one URL. Open with :meth:`Store.open`; close (or use `with`)."""

    def __init__(
        self,
        engine: Engine,
        url: str,
        display: str,
        *,
        readonly: bool = False,
        device_columns: tuple[Any, ...] | None = None,
        best_source: Any = None,
    ) -> None:
        self.engine = engine
        self.url = url
        self.display = display
        self.readonly = readonly
        self._device_columns = device_columns or _DEVICE_COLUMNS
        self._best_source = Best.source if best_source is None else best_source
        self._device_ids: dict[DeviceInfo, int] = {}

    @classmethod
    def open(cls, url: str | os.PathLike[str] | None = None, *, readonly: bool = False) -> Store:
        """Open the database at `url` (see resolve_url).

        To write (the default): create the database if needed and create or upgrade our
        schema. To read (`readonly`): change nothing; a missing database, or one without our
        tables, is a StoreError saying how to create it; an older schema is read as it is.
        """
        engine, resolved, display, columns, source = _connect(url, readonly=readonly)
        return cls(
            engine, resolved, display, readonly=readonly, device_columns=columns,
            best_source=source,
        )  # fmt: skip

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.display!r})"

    def schema_revision(self) -> str:
        with self._read() as conn:
            rev = MigrationContext.configure(
                conn, opts={"version_table": migrations.VERSION_TABLE}
            ).get_current_revision()
        return rev or ""

    # --- transactions ----------------------------------------------------------------------
    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(
                f"cannot {what} the tuning database {self.display}: {_reason(exc, self.url)}"
            ) from exc

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._errors("read"), _transaction(self.engine, write=False) as conn:
            yield conn

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        if self.readonly:
            raise StoreError(
                f"the tuning database {self.display} was opened read-only; open it with "
                "Store.open(url) to write"
            )
        with self._errors("write"), _transaction(self.engine, write=True) as conn:
            yield conn

    # --- writes -----------------------------------------------------------------------------
    def upsert_device(self, info: DeviceInfo) -> int:
        """Record (or refresh) a GPU model; returns its id."""
        with self._write() as conn:
            device_id = _upsert_device(conn, info)
        self._device_ids[info] = device_id
        return device_id

    def begin_run(self, device: DeviceInfo, settings: Mapping[str, Any]) -> int:
        """Start a tuning run on `device` with `settings` (kept as JSON); returns its id."""
        settings_json = json.dumps(dict(settings), sort_keys=True, default=str)
        with self._write() as conn:
            device_id = self._device_id(conn, device)
            run_id = _insert(conn, Run, device_id=device_id, started_at=_now(), finished_at=None,
                             tool_version=__version__, template_version=_templates_hash(),
                             settings_json=settings_json, status="running")  # fmt: skip
        self._device_ids[device] = device_id
        return run_id

    def finish_run(self, run_id: int, status: str) -> None:
        """Mark a run ended: "done", "interrupted" or "failed"."""
        if status not in RUN_STATUSES or status == "running":
            raise StoreError(f"run status must be one of done/interrupted/failed, got {status!r}")
        with self._write() as conn:
            result = conn.execute(
                sa.update(Run).where(Run.id == run_id).values(status=status, finished_at=_now())
            )
            if result.rowcount != 1:
                raise StoreError(f"no tuning run with id {run_id} in {self.display}")

    def record(
        self,
        run_id: int | None,
        device: DeviceInfo,
        dtype: str,
        elem_bytes: int,
        shape: tuple[int, int, int],
        shape_class: ShapeClass,
        config: KernelConfig,
        m: Measurement,
        *,
        source: str = "tuned",
        layout: Layout | None = None,
    ) -> bool:
        """Store one measurement and, in the same transaction, make it the best of its
        (device, elem_bytes, shape class) if it is correct and faster than the current best,
        or if the current best came from another template version (see `_replaces`: a
        "measured" result, a first call's, never takes a tuned result's place). Returns
        whether it is the best now. `layout`: the strides it was measured on (None:
        contiguous); the measurement row keeps them, the best's key does not."""
        _check_record(dtype, elem_bytes, shape, shape_class, config, m, source, layout)
        layout_text = _layout_text(shape, layout)
        tv = _current_version(config)
        now = _now()
        with self._write() as conn:
            device_id = self._device_id(conn, device)
            config_id = _config_id(conn, config)
            measurement_id = _insert(
                conn, MeasurementRow, run_id=run_id, device_id=device_id, config_id=config_id,
                dtype=dtype, elem_bytes=elem_bytes, batch=shape[0], m=shape[1], n=shape[2],
                shape_class=str(shape_class), status=m.status, gbps=float(m.gbps),
                copy_gbps=float(m.copy_gbps),
                time_us=float(m.time_us) if math.isfinite(m.time_us) else None,
                error=None if m.error is None else str(m.error)[:4000],
                template_version=tv, created_at=now, source=source,
                layout=layout_text,
            )  # fmt: skip
            best = m.ok and _offer_best(
                conn, device_id, elem_bytes, str(shape_class), config_id, measurement_id,
                float(m.gbps), float(m.copy_gbps), tv, True, now, source=source,
            )  # fmt: skip
        self._device_ids[device] = device_id
        if best:
            _invalidate_lookup()
        return best

    def import_entries(self, device: DeviceInfo, entries: Sequence[TunedEntry], source: str) -> int:
        """Add validated entries (from a tuning file) as one "imported" run, in one transaction.

        Each becomes a measurement and competes for best like a measured one (a stale entry
        never displaces a current one). Returns the number of entries written.
        """
        return self.import_many([(device, entries, source)])[0]

    def import_many(self, files: Sequence[ImportedFile]) -> list[int]:
        """Add the entries of several tuning files, each as one "imported" run, all in one
        transaction: every file or none. Returns the number of entries of each.

        Everything that takes time (checks, kernel versions) is done before the write lock is
        taken, and the writes are a few bulk statements, so that a `tune` recording beside a
        large import waits a moment, not a minute (SQLite has one writer at a time).
        """
        for device, entries, source in files:
            _check_import(device, entries, source)
        versions: dict[KernelConfig, str] = {}
        for _, entries, _ in files:
            for e in entries:
                if e.config not in versions:
                    versions[e.config] = _current_version(e.config)
        stored = self._best_versions({device.name for device, _, _ in files})
        infos = {device.name: device for device, _, _ in files}  # as the last file says
        now = _now()
        with self._write() as conn:
            # every device row first, in one order: PostgreSQL row locks taken in a fixed order
            device_ids = {name: _upsert_device(conn, infos[name]) for name in sorted(infos)}
            counts = []
            for device, entries, source in files:
                args = (device_ids[device.name], entries, source, versions, stored, now)
                counts.append(_import_file(conn, *args))
        _invalidate_lookup()
        return counts

    def _best_versions(self, device_names: set[str]) -> dict[str, str | None]:
        """The running code's version of each config that is some best of these devices now,
        by its stored JSON: rendered before an import takes the write lock, not under it."""
        q = (
            sa.select(Config.config_json)
            .distinct()
            .join(Best, Best.config_id == Config.id)
            .join(Device, Device.id == Best.device_id)
            .where(Device.name.in_(sorted(device_names)))
        )
        with self._read() as conn:
            texts = conn.execute(q).scalars().all()
        return {text: _version_of_json(text) for text in texts}

    def claim(self, study: str, key: str, owner: str, *, expire_s: float | None = None) -> bool:
        """Claim `key` (a config on a shape) of `study` for `owner`; True if `owner` holds it now.

        Atomic across processes and hosts (a unique key): of concurrent claimers exactly one
        gets True. Claiming again what one holds is True. With `expire_s`, a claim made more
        than that many seconds ago is taken over (its owner died without releasing it; the
        age is judged by this host's clock): of concurrent takers, again, exactly one wins.
        """
        _check_claim(study, key, owner)
        now = _now()
        values = {"study": study, "key": key, "owner": owner, "created_at": now}
        where = sa.and_(Claim.study == study, Claim.key == key)
        with self._write() as conn:
            if expire_s is not None:
                # PostgreSQL: a second taker waits for the first's row lock, then sees the
                # fresh created_at and updates nothing; SQLite: one writer at a time
                cutoff = now - timedelta(seconds=expire_s)
                conn.execute(
                    sa.update(Claim)
                    .where(where, Claim.created_at < cutoff)
                    .values(owner=owner, created_at=now)
                )
            dialect_insert = _dialect_insert(conn)
            if dialect_insert is not None:
                ins = dialect_insert(Claim).values(**values)
                conn.execute(ins.on_conflict_do_nothing(index_elements=["study", "key"]))
            else:
                _generic_upsert(conn, Claim, where, values, None)
            holder = conn.execute(sa.select(Claim.owner).where(where)).scalar_one()
        return holder == owner

    def claim_holder(self, study: str, key: str) -> tuple[str, datetime] | None:
        """Who holds `key` of `study` and since when, or None: a read, for those waiting."""
        _check_claim(study, key, "reader")
        q = sa.select(Claim.owner, _as_text(Claim.created_at)).where(
            Claim.study == study, Claim.key == key
        )
        with self._read() as conn:
            row = conn.execute(q).first()
        if row is None:
            return None
        try:
            return str(row.owner), _timestamp(row.created_at, "created_at")
        except _ROW_ERRORS as exc:
            raise StoreError(f"{self.display}: at_claims row of {key!r:.60}: {exc}") from exc

    def release(self, study: str, key: str, owner: str) -> bool:
        """Drop `owner`'s claim on `key` (e.g. its process died); True if there was one."""
        _check_claim(study, key, owner)
        with self._write() as conn:
            result = conn.execute(
                sa.delete(Claim).where(Claim.study == study, Claim.key == key, Claim.owner == owner)
            )
        return result.rowcount > 0

    def _device_id(self, conn: Connection, device: DeviceInfo) -> int:
        cached = self._device_ids.get(device)
        return cached if cached is not None else _upsert_device(conn, device)

    # --- reads ------------------------------------------------------------------------------
    def measured(
        self, device_name: str, elem_bytes: int, shape: tuple[int, int, int], config: KernelConfig,
        layout: Layout | None = None,
    ) -> Measurement | None:  # fmt: skip
        """The latest measurement of exactly `config` on this shape and layout (None:
        contiguous) with the current templates (any status), or None: the tuner's "already
        measured?" question on resume. A first call's rough timing ("measured" source) is not
        one: the tuner measures for itself."""
        b, rows, cols = shape
        q = (
            sa.select(MeasurementRow.id, MeasurementRow.status, MeasurementRow.gbps,
                      MeasurementRow.copy_gbps, MeasurementRow.time_us, MeasurementRow.error)
            .join(Device, Device.id == MeasurementRow.device_id)
            .join(Config, Config.id == MeasurementRow.config_id)
            .where(Device.name == device_name, Config.key == config.key,
                   MeasurementRow.elem_bytes == elem_bytes, MeasurementRow.batch == b,
                   MeasurementRow.m == rows, MeasurementRow.n == cols,
                   MeasurementRow.template_version == _current_version(config),
                   MeasurementRow.source == "tuned",
                   MeasurementRow.layout == _layout_text(shape, layout))
            .order_by(MeasurementRow.id.desc())
            .limit(1)
        )  # fmt: skip
        with self._read() as conn:
            row = conn.execute(q).first()
        if row is None:
            return None
        try:
            return Measurement(
                status=row.status,
                gbps=bounds.check_bandwidth("gbps", row.gbps),
                copy_gbps=bounds.check_bandwidth("copy_gbps", row.copy_gbps),
                time_us=math.inf if row.time_us is None else _number(row.time_us, "time_us"),
                error=row.error if isinstance(row.error, str) else None,
            )
        except (ValueError, TypeError) as exc:
            problem = RowProblem("at_measurements", row.id, str(exc))
            raise StoreError(f"{self.display}: {problem} is invalid; {problem.fix}") from exc

    def best(self, device_name: str, elem_bytes: int, shape_class: ShapeClass) -> TunedEntry | None:
        """The current (not stale) best entry of exactly this class, or None; raises
        StoreError if that row is invalid."""
        entries, problems = self._scan(device_name, elem_bytes, str(shape_class))
        if problems:
            raise StoreError(f"{self.display}: {problems[0]}; {problems[0].fix}")
        for e in entries:
            if not e.stale:
                return e
        return None

    def entries(
        self,
        device_name: str | None = None,
        include_stale: bool = True,
        *,
        elem_bytes: int | None = None,
    ) -> list[TunedEntry]:
        """Every best entry (of one device, of one element size), sorted by device, element
        size and class. Invalid rows are skipped with a BadRowWarning naming them."""
        entries, problems = self._scan(device_name, elem_bytes, None)
        for p in problems:
            warnings.warn(f"skipping {p} in {self.display}; {p.fix}", BadRowWarning, stacklevel=2)
        return [e for e in entries if include_stale or not e.stale]

    def devices(self) -> list[DeviceInfo]:
        """Every recorded GPU model (invalid rows skipped with a BadRowWarning)."""
        infos, problems = self._scan_devices()
        for p in problems:
            warnings.warn(f"skipping {p} in {self.display}; {p.fix}", BadRowWarning, stacklevel=2)
        return sorted(infos.values(), key=lambda d: d.name)

    def problems(self, device_name: str | None = None) -> list[RowProblem]:
        """Rows of at_devices and at_best that fail validation (for `show` to list)."""
        _, device_problems = self._scan_devices()
        _, best_problems = self._scan(device_name, None, None)
        seen = set()
        out = []
        for p in device_problems + best_problems:
            if (p.table, p.row_id) not in seen:
                seen.add((p.table, p.row_id))
                out.append(p)
        return out

    def _scan_devices(self) -> tuple[dict[int, DeviceInfo], list[RowProblem]]:
        with self._read() as conn:
            rows = conn.execute(sa.select(*self._device_columns).order_by(Device.id)).all()
        infos: dict[int, DeviceInfo] = {}
        problems: list[RowProblem] = []
        for r in rows:
            try:
                infos[r.dev_id] = _device_from_row(r)
            except _ROW_ERRORS as exc:
                problems.append(RowProblem("at_devices", r.dev_id, _why(exc)))
        return infos, problems

    def _scan(
        self, device_name: str | None, elem_bytes: int | None, shape_class: str | None
    ) -> tuple[list[TunedEntry], list[RowProblem]]:
        q = (
            sa.select(
                Best.id, Best.elem_bytes, Best.shape_class, Best.gbps, Best.copy_gbps, Best.ratio,
                Best.template_version, _as_text(Best.updated_at), Config.config_json,
                MeasurementRow.batch, MeasurementRow.m, MeasurementRow.n, MeasurementRow.dtype,
                _as_text(MeasurementRow.created_at), self._best_source, *self._device_columns,
            )
            .join(Config, Config.id == Best.config_id)
            .join(Device, Device.id == Best.device_id)
            .outerjoin(MeasurementRow, MeasurementRow.id == Best.measurement_id)
            .order_by(Best.id)
        )  # fmt: skip
        if device_name is not None:
            q = q.where(Device.name == device_name)
        if elem_bytes is not None:
            q = q.where(Best.elem_bytes == elem_bytes)
        if shape_class is not None:
            q = q.where(Best.shape_class == shape_class)
        with self._read() as conn:
            rows = conn.execute(q).all()
        entries: list[TunedEntry] = []
        problems: list[RowProblem] = []
        for r in rows:
            try:
                entries.append(_entry_from_row(r))
            except _ROW_ERRORS as exc:
                problems.append(RowProblem("at_best", r.id, _why(exc)))
        entries.sort(key=lambda e: (e.device, e.elem_bytes, e.shape_class))
        return entries, problems


# --- rows in ------------------------------------------------------------------------------------
def _check_record(
    dtype: str,
    elem_bytes: int,
    shape: tuple[int, int, int],
    cls: ShapeClass,
    config: KernelConfig,
    m: Measurement,
    source: str = "tuned",
    layout: Layout | None = None,
) -> None:
    """Refuse to store what could not be served correctly later."""
    problems = []
    if layout is not None and not isinstance(layout, Layout):
        problems.append(f"layout must be a shapes.Layout or None, got {type(layout).__name__}")
    if source not in SOURCES:
        problems.append(f"source must be one of {list(SOURCES)}, got {source!r:.40}")
    if not isinstance(dtype, str) or not _DTYPE.fullmatch(dtype):
        problems.append(f"dtype must be a dtype name, got {dtype!r:.40}")
    if not isinstance(config, KernelConfig):
        problems.append(f"config must be a KernelConfig, got {type(config).__name__}")
    elif config.elem_bytes != elem_bytes:
        problems.append(f"config is for {config.elem_bytes}-byte elements, not {elem_bytes}")
    if not isinstance(m, Measurement):
        problems.append(f"m must be a Measurement, got {type(m).__name__}")
    if not isinstance(cls, ShapeClass):
        problems.append(f"shape_class must be a ShapeClass, got {type(cls).__name__}")
    elif isinstance(config, KernelConfig) and config.vec > cls.vec and not config.any_offset:
        problems.append(f"config vec={config.vec} is wider than class {cls} allows")
    if (
        not isinstance(shape, (tuple, list))
        or len(shape) != 3
        or not all(type(x) is int and x >= 1 for x in shape)
    ):
        problems.append(f"shape must be (batch, m, n) of positive ints, got {shape!r:.60}")
    elif isinstance(cls, ShapeClass) and classify(*shape, cls.vec) != cls:
        problems.append(f"shape {tuple(shape)} is not in class {cls}")
    if problems:
        raise StoreError("cannot record the measurement: " + "; ".join(problems))


def _layout_text(shape: tuple[int, int, int], layout: Layout | None) -> str:
    """How at_measurements.layout keeps `layout`: "" for contiguous (as every row before
    revision 0005), else `Layout.text` of its canonical form."""
    if layout is None:
        return ""
    try:
        canonical = check_layout(shape, layout)
    except AutotransposeError as exc:
        raise StoreError(f"cannot use layout {layout!r:.80}: {exc}") from exc
    return "" if canonical is None else canonical.text


def _check_claim(study: str, key: str, owner: str) -> None:
    for name, value in (("study", study), ("key", key), ("owner", owner)):
        if not isinstance(value, str) or not 0 < len(value) <= 255:
            raise StoreError(
                f"claim {name} must be a string of 1 to 255 characters, got {value!r:.60}"
            )


def _dialect_insert(conn: Connection) -> Any:
    """The dialect's INSERT with ON CONFLICT, or None where we fall back to SELECT FOR UPDATE."""
    return {"sqlite": sqlite.insert, "postgresql": postgresql.insert}.get(conn.dialect.name)


def _insert(conn: Connection, model: Any, **values: Any) -> int:
    return conn.execute(sa.insert(model).values(**values)).inserted_primary_key[0]


def _device_values(info: DeviceInfo) -> dict[str, Any]:
    d = info.to_dict()
    major, minor = d.pop("compute_capability")
    return {**d, "cc_major": major, "cc_minor": minor, "updated_at": _now()}


def _upsert_device(conn: Connection, info: DeviceInfo) -> int:
    values = _device_values(info)
    changes = {k: v for k, v in values.items() if k != "name"}
    dialect_insert = _dialect_insert(conn)
    if dialect_insert is not None:
        ins = dialect_insert(Device).values(**values)
        conn.execute(ins.on_conflict_do_update(index_elements=["name"], set_=changes))
    else:
        _generic_upsert(conn, Device, Device.name == info.name, values, changes)
    return conn.execute(sa.select(Device.id).where(Device.name == info.name)).scalar_one()


def _config_values(config: KernelConfig) -> dict[str, Any]:
    return {
        "key": config.key,
        "elem_bytes": config.elem_bytes,
        "config_json": json.dumps(config.to_dict(), sort_keys=True),
    }


def _config_id(conn: Connection, config: KernelConfig) -> int:
    values = _config_values(config)
    dialect_insert = _dialect_insert(conn)
    if dialect_insert is not None:
        conn.execute(
            dialect_insert(Config).values(**values).on_conflict_do_nothing(index_elements=["key"])
        )
    else:
        _generic_upsert(conn, Config, Config.key == config.key, values, None)
    return conn.execute(sa.select(Config.id).where(Config.key == config.key)).scalar_one()


def _generic_upsert(
    conn: Connection, model: Any, key: Any, values: dict[str, Any], changes: dict[str, Any] | None
) -> None:
    """Insert, or update (`changes`; None: leave it) the row matching `key`, on any database."""
    row = conn.execute(sa.select(model.id).where(key).with_for_update()).first()
    if row is None:
        try:
            with conn.begin_nested():
                conn.execute(sa.insert(model).values(**values))
            return
        except sa.exc.IntegrityError:  # another writer inserted it meanwhile
            row = conn.execute(sa.select(model.id).where(key).with_for_update()).one()
    if changes:
        conn.execute(sa.update(model).where(model.id == row.id).values(**changes))


def _offer_best(
    conn: Connection,
    device_id: int,
    elem_bytes: int,
    shape_class: str,
    config_id: int,
    measurement_id: int,
    gbps: float,
    copy_gbps: float,
    tv: str,
    current: bool,
    now: datetime,
    ratio: float | None = None,
    source: str = "tuned",
) -> bool:
    """Make this result the best of its key if it beats the current best (`_replaces`),
    atomically; returns whether it did. `current`: whether `tv` is the running code's version
    of this result's kernel; `source`: "tuned" or "measured" (SOURCES).

    Staleness is per kernel (the stored version against the running code's version of that
    row's own config), so it is decided here, not in SQL: under the write lock (SQLite's
    BEGIN IMMEDIATE, PostgreSQL's SELECT .. FOR UPDATE, a unique key for the first insert),
    so concurrent writers never lose the faster one.
    """
    values = {
        "device_id": device_id, "elem_bytes": elem_bytes, "shape_class": shape_class,
        "config_id": config_id, "measurement_id": measurement_id, "gbps": gbps,
        "copy_gbps": copy_gbps,
        "ratio": ratio if ratio is not None else (gbps / copy_gbps if copy_gbps > 0 else 0.0),
        "template_version": tv, "updated_at": now, "source": source,
    }  # fmt: skip
    key_names = ("device_id", "elem_bytes", "shape_class")
    key = sa.and_(
        Best.device_id == device_id, Best.elem_bytes == elem_bytes, Best.shape_class == shape_class
    )
    q = (
        sa.select(Best.id, Best.gbps, Best.copy_gbps, Best.ratio, Best.template_version,
                  Best.config_id, Best.source)
        .where(key)
        .with_for_update()
    )  # fmt: skip
    row = conn.execute(q).first()
    if row is None:
        try:
            with conn.begin_nested():
                conn.execute(sa.insert(Best).values(**values))
            return True
        except sa.exc.IntegrityError:  # another writer inserted it meanwhile
            row = conn.execute(q).one()
    stale_best = _unservable(row) or row.template_version != _version_of_config_id(
        conn, row.config_id
    )
    if not _replaces(current, gbps, stale_best, row.gbps, source, row.source):
        return False
    changes = {k: v for k, v in values.items() if k not in key_names}
    conn.execute(sa.update(Best).where(Best.id == row.id).values(**changes))
    return True


def _unservable(row: Any) -> bool:
    """A best whose numbers are out of bounds is never served (see `_bounded`): it counts as
    stale, so that any valid result of its class takes its place."""
    return not _in_bounds(row.gbps, row.copy_gbps, row.ratio)


def _version_of_config_id(conn: Connection, config_id: int) -> str | None:
    """The running code's version of a stored config's kernel; None if the row is invalid
    (then no stored version matches it: it counts as stale)."""
    text = conn.execute(sa.select(Config.config_json).where(Config.id == config_id)).scalar()
    return _version_of_json(text)


def _version_of_json(text: Any) -> str | None:
    try:
        return _current_version(parse_config_json(text))
    except _ROW_ERRORS:
        return None


def _replaces(
    current: bool,
    gbps: float,
    stale_best: bool,
    best_gbps: float,
    source: str = "tuned",
    best_source: str = "tuned",
) -> bool:
    """Whether a result (of its kernel's `current` version or not) takes a best's place.

    Of one source: a current result beats a stale best whatever its speed, and a slower
    current best; a stale result (an imported old file) only beats a slower stale best.
    Across sources a tuned result always outranks a measured one (a first call's few
    timings on the caller's buffers): a measured result never takes a tuned best's place,
    stale or not (what a user tuned is never overwritten), and a tuned one takes a measured
    best's place unless it is stale and the measured best current (`tune` replaces first-call
    results; a stale result is never served)."""
    if source != best_source:
        return source == "tuned" and (current or stale_best)
    return (stale_best or best_gbps < gbps) if current else (stale_best and best_gbps < gbps)


# --- imports: validated first, then written in a few bulk statements ---------------------------
_CHUNK = 500  # keys per IN (...): far below SQLite's limit on bound parameters


def _check_import(device: DeviceInfo, entries: Sequence[TunedEntry], source: str) -> None:
    """Refuse a file with anything a tuning file may not hold, as `textio.parse` does, for
    entries that did not come through it: one bad entry refuses the whole import."""
    try:
        if not isinstance(device, DeviceInfo):
            raise TypeError(f"device must be a DeviceInfo, got {type(device).__name__}")
        bounds.check_device(device)
    except (TypeError, ValueError) as exc:
        raise StoreError(
            f"{source}: device: {exc}; nothing was imported: correct the device"
        ) from exc
    seen: set[tuple[int, str]] = set()
    for i, e in enumerate(entries):
        try:
            _check_imported_entry(e)
            key = (e.elem_bytes, str(e.shape_class))
            if key in seen:
                raise ValueError(f"a second entry of {e.shape_class}, {e.elem_bytes} B")
            seen.add(key)
        except (AutotransposeError, TypeError, ValueError, AttributeError) as exc:
            raise StoreError(
                f"{source}: entry {i}: {exc}; nothing was imported: correct or delete that entry "
                "(an import writes everything or nothing)"
            ) from exc


def _check_imported_entry(e: TunedEntry) -> None:
    if not isinstance(e, TunedEntry):
        raise TypeError(f"an entry must be a TunedEntry, got {type(e).__name__}")
    if not isinstance(e.config, KernelConfig) or not isinstance(e.shape_class, ShapeClass):
        raise TypeError("config must be a KernelConfig and shape_class a ShapeClass")
    check_entry_fields(e.elem_bytes, e.shape_class, e.config, e.template_version)
    _source(e.source)
    cls = e.shape_class
    shape = e.shape or (cls.batch, cls.m, cls.n)
    if (
        not isinstance(shape, tuple)
        or len(shape) != 3
        or not all(type(x) is int and x >= 1 for x in shape)
        or classify(*shape, cls.vec) != cls
    ):
        raise ValueError(f"shape {shape!r:.60} is not three positive ints in class {cls}")
    bounds.check_shape(shape, e.elem_bytes)
    gbps = bounds.check_bandwidth("gbps", e.gbps)
    copy_gbps = bounds.check_bandwidth("copy_gbps", e.copy_gbps)
    bounds.check_ratio(e.ratio, gbps, copy_gbps)
    if e.dtype is not None and (not isinstance(e.dtype, str) or not _DTYPE.fullmatch(e.dtype)):
        raise ValueError(f"dtype {e.dtype!r:.40} is not a dtype name")
    if not isinstance(e.measured_at or e.updated_at, datetime):
        raise TypeError("measured_at (or updated_at) must be a datetime")


def _import_file(
    conn: Connection,
    device_id: int,
    entries: Sequence[TunedEntry],
    source: str,
    versions: Mapping[KernelConfig, str],
    stored: Mapping[str, str | None],
    now: datetime,
) -> int:
    """One file's entries as one "imported" run: a measurement each, each offered as best."""
    run_id = _insert(conn, Run, device_id=device_id, started_at=now, finished_at=now,
                     tool_version=__version__, template_version=_templates_hash(),
                     settings_json=json.dumps({"source": source}), status="imported")  # fmt: skip
    if not entries:
        return 0
    config_ids = _config_ids(conn, {e.config for e in entries})
    measurement_ids = _insert_measurements(conn, run_id, device_id, entries, config_ids)
    _offer_bests(conn, device_id, entries, config_ids, measurement_ids, versions, stored, now)
    return len(entries)


def _config_ids(conn: Connection, configs: set[KernelConfig]) -> dict[KernelConfig, int]:
    """Insert the configs not stored yet; every config's id."""
    dialect_insert = _dialect_insert(conn)
    if dialect_insert is None:
        return {c: _config_id(conn, c) for c in configs}
    rows = [_config_values(c) for c in configs]
    conn.execute(dialect_insert(Config).on_conflict_do_nothing(index_elements=["key"]), rows)
    by_key = {c.key: c for c in configs}
    keys = sorted(by_key)
    ids = {}
    for i in range(0, len(keys), _CHUNK):
        q = sa.select(Config.key, Config.id).where(Config.key.in_(keys[i : i + _CHUNK]))
        for key, config_id in conn.execute(q):
            ids[by_key[key]] = config_id
    return ids


def _insert_measurements(
    conn: Connection,
    run_id: int,
    device_id: int,
    entries: Sequence[TunedEntry],
    config_ids: Mapping[KernelConfig, int],
) -> dict[tuple[int, str], int]:
    """One measurement row per entry, in one statement; their ids by (elem_bytes, class)."""
    before = conn.execute(sa.select(sa.func.max(MeasurementRow.id))).scalar() or 0
    rows = []
    for e in entries:
        b, m, n = e.shape or (e.shape_class.batch, e.shape_class.m, e.shape_class.n)
        rows.append({
            "run_id": run_id, "device_id": device_id, "config_id": config_ids[e.config],
            "dtype": e.dtype or "", "elem_bytes": e.elem_bytes, "batch": b, "m": m, "n": n,
            "shape_class": str(e.shape_class), "status": "ok", "gbps": e.gbps,
            "copy_gbps": e.copy_gbps, "time_us": None, "error": None,
            "template_version": e.template_version, "created_at": e.measured_at or e.updated_at,
            "source": e.source,
        })  # fmt: skip
    conn.execute(sa.insert(MeasurementRow), rows)
    # New ids are above every id that was there (SQLite: max + 1; PostgreSQL: its sequence),
    # so the primary key finds ours without scanning the table.
    q = sa.select(MeasurementRow.id, MeasurementRow.elem_bytes, MeasurementRow.shape_class).where(
        MeasurementRow.id > before, MeasurementRow.run_id == run_id
    )
    return {(r.elem_bytes, r.shape_class): r.id for r in conn.execute(q)}


def _offer_bests(
    conn: Connection,
    device_id: int,
    entries: Sequence[TunedEntry],
    config_ids: Mapping[KernelConfig, int],
    measurement_ids: Mapping[tuple[int, str], int],
    versions: Mapping[KernelConfig, str],
    stored: Mapping[str, str | None],
    now: datetime,
) -> None:
    """Offer every entry as the best of its key, by the rule of `_replaces`, in bulk: one read
    of the device's bests (locked: FOR UPDATE on PostgreSQL; SQLite's write lock is held), one
    update of those beaten and one insert of the new keys."""
    q = (
        sa.select(Best.id, Best.elem_bytes, Best.shape_class, Best.gbps, Best.copy_gbps,
                  Best.ratio, Best.template_version, Best.source, Config.config_json)
        .join(Config, Config.id == Best.config_id)
        .where(Best.device_id == device_id)
        .with_for_update(of=Best)
    )  # fmt: skip
    existing = {(r.elem_bytes, r.shape_class): r for r in conn.execute(q)}
    key_names = ("device_id", "elem_bytes", "shape_class")
    new, beaten = [], []
    for e in entries:
        key = (e.elem_bytes, str(e.shape_class))
        values = {
            "device_id": device_id, "elem_bytes": e.elem_bytes, "shape_class": key[1],
            "config_id": config_ids[e.config], "measurement_id": measurement_ids[key],
            "gbps": e.gbps, "copy_gbps": e.copy_gbps, "ratio": e.ratio,
            "template_version": e.template_version, "updated_at": now, "source": e.source,
        }  # fmt: skip
        row = existing.get(key)
        if row is None:
            new.append((e, values))
            continue
        version = (
            stored[row.config_json] if row.config_json in stored
            else _version_of_json(row.config_json)
        )  # fmt: skip
        current = e.template_version == versions[e.config]
        stale_best = _unservable(row) or row.template_version != version
        if _replaces(current, e.gbps, stale_best, row.gbps, e.source, row.source):
            changes = {k: v for k, v in values.items() if k not in key_names}
            beaten.append({"best_id": row.id, **changes})
    if beaten:
        conn.execute(sa.update(Best).where(Best.id == sa.bindparam("best_id")), beaten)
    for e, values in _insert_bests(conn, device_id, new):
        # another writer made this key since the read above (PostgreSQL), or a database
        # without ON CONFLICT: offered one by one, under a row lock
        _offer_best(conn, device_id, e.elem_bytes, values["shape_class"], values["config_id"],
                    values["measurement_id"], e.gbps, e.copy_gbps, e.template_version,
                    e.template_version == versions[e.config], now, ratio=e.ratio,
                    source=e.source)  # fmt: skip


def _insert_bests(
    conn: Connection, device_id: int, new: list[tuple[TunedEntry, dict[str, Any]]]
) -> list[tuple[TunedEntry, dict[str, Any]]]:
    """Insert bests of keys that had none; returns those another writer inserted first."""
    dialect_insert = _dialect_insert(conn)
    if not new or dialect_insert is None:
        return new
    before = conn.execute(sa.select(sa.func.max(Best.id))).scalar() or 0
    ins = dialect_insert(Best).on_conflict_do_nothing(
        index_elements=["device_id", "elem_bytes", "shape_class"]
    )
    conn.execute(ins, [v for _, v in new])
    made = set(
        conn.execute(
            sa.select(Best.measurement_id).where(Best.id > before, Best.device_id == device_id)
        ).scalars()
    )
    return [(e, v) for e, v in new if v["measurement_id"] not in made]


# --- rows out: untrusted ------------------------------------------------------------------------
_ROW_ERRORS = (AutotransposeError, ValueError, TypeError, KeyError, RecursionError, OverflowError)

_DEVICE_COLUMNS = tuple(c.label(f"dev_{c.name}") for c in Device.__table__.c)
# Columns added to at_devices after revision 0001, and what a row had before: a reader of an
# older database selects these instead (readers never migrate).
_LATER_DEVICE_COLUMNS = {"l2_bytes": 0}


def _device_columns(present: set[str] | None, display: str) -> tuple[Any, ...]:
    """The at_devices columns to select from a database whose at_devices has `present` (None:
    the head revision's)."""
    if present is None:
        return _DEVICE_COLUMNS
    columns = []
    for c in Device.__table__.c:
        if c.name in present:
            columns.append(c.label(f"dev_{c.name}"))
        elif c.name in _LATER_DEVICE_COLUMNS:
            columns.append(sa.literal(_LATER_DEVICE_COLUMNS[c.name], c.type).label(f"dev_{c.name}"))
        else:
            raise StoreError(
                f"{display}: at_devices has no column {c.name}; upgrade its schema with "
                f"`autotranspose db upgrade --db {shlex.quote(display)}`"
            )
    return tuple(columns)


def _best_source(present: set[str] | None) -> Any:
    """at_best's source column, or what every row was before revision 0004 added it."""
    if present is None or "source" in present:
        return Best.source
    return sa.literal("tuned", Best.source.type).label("source")


def _as_text(column: Any) -> Any:
    # Timestamps are parsed by us: SQLAlchemy's SQLite DateTime would raise on a malformed
    # value while fetching, failing the whole query instead of the one bad row.
    return sa.type_coerce(column, sa.String()).label(column.key)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {type(value).__name__} {value!r:.40}")
    x = float(value)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {x!r}")
    return x


def _bounded(gbps: Any, copy_gbps: Any, ratio: Any) -> tuple[float, float, float]:
    """A stored result's numbers, within what an imported file's may be (`bounds`): a row
    is as untrusted as a file, and a bandwidth no GPU reaches must not be served or shown."""
    g = bounds.check_bandwidth("gbps", gbps)
    c = bounds.check_bandwidth("copy_gbps", copy_gbps)
    return g, c, bounds.check_ratio(ratio, g, c)


def _in_bounds(gbps: Any, copy_gbps: Any, ratio: Any) -> bool:
    try:
        _bounded(gbps, copy_gbps, ratio)
    except (TypeError, ValueError):
        return False
    return True


def _timestamp(value: Any, name: str) -> datetime:
    if isinstance(value, str) and len(value) <= 40:
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise ValueError(f"{name} must be a timestamp, got {value!r:.40}")
    return (
        value.replace(tzinfo=timezone.utc)
        if value.tzinfo is None
        else value.astimezone(timezone.utc)
    )


def _device_from_row(r: Any) -> DeviceInfo:
    """A device row, checked as an imported file's device is (`bounds.check_device`)."""
    device = DeviceInfo.from_dict(
        {
            "name": r.dev_name,
            "compute_capability": [r.dev_cc_major, r.dev_cc_minor],
            "multiprocessors": r.dev_multiprocessors,
            "memory_clock_khz": r.dev_memory_clock_khz,
            "bus_width_bits": r.dev_bus_width_bits,
            "l2_bytes": r.dev_l2_bytes,
            "driver_version": r.dev_driver_version,
            "cuda_version": r.dev_cuda_version,
            "max_threads_per_block": r.dev_max_threads_per_block,
            "max_shared_per_block": r.dev_max_shared_per_block,
        }
    )
    bounds.check_device(device)
    return device


def parse_config_json(text: Any) -> KernelConfig:
    """A config from its stored JSON: size-capped, then validated by KernelConfig.from_dict."""
    if not isinstance(text, str) or len(text) > _MAX_CONFIG_JSON:
        raise ValueError(f"config JSON must be a string of at most {_MAX_CONFIG_JSON} characters")
    return KernelConfig.from_dict(json.loads(text, parse_constant=_reject_constant))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a valid number here")


def check_entry_fields(
    elem_bytes: Any, cls: ShapeClass, config: KernelConfig, template_version: Any
) -> None:
    """What every entry must satisfy, from a database row or a file."""
    if type(elem_bytes) is not int or elem_bytes not in ELEMENT_SIZES:
        raise ValueError(f"elem_bytes must be one of {list(ELEMENT_SIZES)}, got {elem_bytes!r:.40}")
    if config.elem_bytes != elem_bytes:
        raise ValueError(
            f"config {config.key} is for {config.elem_bytes}-byte elements, not {elem_bytes}"
        )
    if config.vec > cls.vec and not config.any_offset:  # realigning kernels run on any alignment
        raise ValueError(
            f"config {config.key} uses vec={config.vec}, wider than class {cls} allows"
        )
    if not isinstance(template_version, str) or not _TEMPLATE_VERSION.fullmatch(template_version):
        raise ValueError(f"template_version {template_version!r:.40} is not a template version")


def _entry_from_row(r: Any) -> TunedEntry:
    device = _device_from_row(r)
    cls = ShapeClass.parse(r.shape_class)
    config = parse_config_json(r.config_json)
    check_entry_fields(r.elem_bytes, cls, config, r.template_version)
    shape = None
    if r.batch is not None:
        shape = (r.batch, r.m, r.n)
        if not all(type(x) is int and x >= 1 for x in shape):
            raise ValueError(f"measured shape {shape!r:.60} is not three positive ints")
        bounds.check_shape(shape, r.elem_bytes)
    gbps, copy_gbps, ratio = _bounded(r.gbps, r.copy_gbps, r.ratio)
    dtype = r.dtype if isinstance(r.dtype, str) and _DTYPE.fullmatch(r.dtype) else None
    return TunedEntry(
        device=device.name,
        elem_bytes=r.elem_bytes,
        shape_class=cls,
        config=config,
        gbps=gbps,
        copy_gbps=copy_gbps,
        ratio=ratio,
        template_version=r.template_version,
        stale=r.template_version != _current_version(config),
        updated_at=_timestamp(r.updated_at, "updated_at"),
        shape=shape,
        dtype=dtype,
        measured_at=None if r.created_at is None else _timestamp(r.created_at, "measured_at"),
        source=_source(r.source),
    )


def _source(value: Any) -> str:
    if value not in SOURCES:
        raise ValueError(f"source {value!r:.40} is not one of {list(SOURCES)}")
    return value

"""Opening a tuning database: is it ours, at which schema revision, and creating or upgrading
our schema (Alembic, version table ``at_alembic_version``).

Opening a database to write creates it and creates or upgrades our schema; opening it to read
(``readonly=True``: show, lookup, export, ``transpose()``) changes nothing: a missing database
is an error saying how to create one, an older schema is read as it is (:data:`DEVICE_COLUMNS`
and the columns of older revisions), and a SQLite file is opened read-only (``mode=ro``), so
a database in a read-only directory can be read. Either way a database that belongs to someone
else is refused (:class:`ForeignDatabaseError`) before anything is written to it (`gate`).
"""

from __future__ import annotations

import os
import shlex
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection, Engine

from .._version import __version__
from ..errors import AutotransposeError, ForeignDatabaseError, StoreError
from . import migrations, urls
from .engine import make_engine, reason, transaction
from .models import APP_KEY, APP_NAME, Best, Device, Meta
from .urls import ENV_VAR, resolve_url, sqlite_path

# Tables Optuna's RDBStorage creates (any version): a database holding only these is one we may
# add our tables to, since the tuner keeps its Optuna study beside our results.
OPTUNA_TABLES = frozenset(
    {
        "alembic_version",
        "version_info",
        "studies",
        "study_directions",
        "study_user_attributes",
        "study_system_attributes",
        "trials",
        "trial_params",
        "trial_values",
        "trial_intermediate_values",
        "trial_user_attributes",
        "trial_system_attributes",
        "trial_heartbeats",
    }
)

_MIGRATION_LOCK = 0x6174_7472  # pg_advisory_xact_lock key: serialises concurrent first opens
_SQLITE_HEADER = b"SQLite format 3\x00"


def _foreign(display: str, why: str) -> ForeignDatabaseError:
    return ForeignDatabaseError(
        f"{display} is not an autotranspose tuning database: {why}; point --db/{ENV_VAR} at "
        "another file or database, or move this one out of the way"
    )


def _not_created(display: str, what: str, path: Path | None = None) -> StoreError:
    """A read found no tuning database, or none of our tables: say how to make them (reads
    never do), or, where no database can be made at `path`, why and what to give instead."""
    unfit = _no_place_for(path) if path is not None else None
    if unfit is not None:
        return StoreError(f"{what}; {unfit}")
    db = shlex.quote(display)
    return StoreError(
        f"{what}; create it with `autotranspose tune --shapes ... --db {db}` or, empty, with "
        f"`autotranspose db upgrade --db {db}`, or check the path or URL"
    )


def _no_place_for(path: Path) -> str | None:
    """Why no SQLite database can be created at `path` and what to do instead, or None where
    one can (its directory exists and is writable)."""
    parent = path.parent
    elsewhere = f"give --db (or {ENV_VAR}) a file in a writable directory"
    existing = next(p for p in (parent, *parent.parents) if p.exists() or p == p.parent)
    if existing.exists() and not existing.is_dir():
        return f"{existing} is not a directory, so no database can be made there; {elsewhere}"
    if existing != parent:
        return (
            f"its directory {parent} does not exist: create it (mkdir -p "
            f"{shlex.quote(str(parent))}) or {elsewhere}, or check the path for a typo"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        return (
            f"{parent} is not writable, so neither tune nor db upgrade can create one there; "
            f"{elsewhere}"
        )
    return None


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


def revision(conn: Connection) -> str:
    """The schema revision of the database `conn` is on ("" for none)."""
    rev = MigrationContext.configure(
        conn, opts={"version_table": migrations.VERSION_TABLE}
    ).get_current_revision()
    return rev or ""


def _sqlite_header(path: Path, display: str) -> bytes | None:
    """The file's first 100 bytes (b"" for an empty file), None when there is no file; rejects
    a file that is not SQLite before SQLite itself fails with a terse message."""
    try:
        with path.open("rb") as f:
            header = f.read(100)
    except (FileNotFoundError, NotADirectoryError):
        return None  # no file (or none possible: the callers say why)
    except IsADirectoryError:
        inside = shlex.quote(str(path / "tuning.db"))
        raise StoreError(
            f"the tuning database {display} is a directory, not a file; give a file inside it, "
            f"such as --db {inside}"
        ) from None
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


def gate(
    url: str, path: Path, header: bytes, display: str, busy_timeout_s: float | None = None
) -> None:
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
        engine = make_engine(url, display, uri=uri, busy_timeout_s=busy_timeout_s)
        try:
            with _opening(display, url, writing=False):
                try:
                    with transaction(engine, write=False) as conn:
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
        why = reason(exc, url)
        path = sqlite_path(url)
        if writing and path is not None and not os.access(path.parent, os.W_OK):
            why += (
                f" ({path.parent} is not writable: tune, import and db upgrade write there); "
                f"give a database in a writable directory with --db PATH or {ENV_VAR}=PATH"
            )
        raise StoreError(f"cannot open the tuning database {display}: {why}") from exc
    except sa.exc.DatabaseError as exc:  # SQLite: "file is not a database", corrupt pages
        raise _foreign(display, f"the database cannot be read ({reason(exc, url)})") from exc
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError(f"cannot open the tuning database {display}: {reason(exc, url)}") from exc
    except Exception as exc:  # Alembic's own errors (e.g. an impossible target revision)
        if type(exc).__module__.startswith("alembic"):
            raise StoreError(f"cannot migrate the tuning database {display}: {exc}") from exc
        raise


def _prepare(engine: Engine, url: str, display: str, revision: str = "head") -> str:
    """Check the database is ours (or empty) and bring our schema to `revision`."""
    target = migrations.head() if revision == "head" else revision
    with _opening(display, url, writing=True):
        with transaction(engine, write=False) as conn:
            if _schema_state(conn, display) == target:
                return target
        with transaction(engine, write=True) as conn:
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
    with _opening(display, url, writing=False), transaction(engine, write=False) as conn:
        rev = _schema_state(conn, display)
        present = best = None
        if rev and rev != migrations.head():
            present = {c["name"] for c in sa.inspect(conn).get_columns("at_devices")}
            best = {c["name"] for c in sa.inspect(conn).get_columns("at_best")}
    if not rev:
        raise _not_created(display, f"{display} has no autotranspose tables yet")
    return rev, _device_columns(present, display), _best_columns(best)


def connect(
    url: str | os.PathLike[str] | None,
    *,
    readonly: bool,
    revision: str = "head",
    busy_timeout_s: float | None = None,
) -> tuple[Engine, str, str, tuple[Any, ...], Any]:
    """Open the database at `url` (see resolve_url): (engine, resolved URL, display, at_devices
    columns, at_best's source and problem columns). A writer creates the database and creates or upgrades
    our schema; a reader (`readonly`) changes nothing and refuses a database that does not
    exist. Neither writes to a database before it is known to be ours, or new. The engine's
    statements wait `busy_timeout_s` for a lock (`engine.make_engine`)."""
    resolved = resolve_url(url)
    display = urls.display(resolved)
    path = sqlite_path(resolved)
    uri = None
    if path is not None:
        if not readonly:
            _ensure_default_dir(url)
        header = _sqlite_header(path, display)
        if header is None:
            if readonly:
                raise _not_created(
                    display, f"no tuning database at {display} (reads never create one)", path
                )
            unfit = _no_place_for(path)
            if unfit is not None:
                raise StoreError(f"cannot create the tuning database {display}: {unfit}")
        elif header:  # an empty file is a new database
            gate(resolved, path, header, display, busy_timeout_s)
        if readonly:
            uri = _readonly_uri(path, header or b"", display)
    engine = make_engine(
        resolved, display, readonly=readonly, uri=uri, busy_timeout_s=busy_timeout_s
    )
    try:
        if readonly:
            _, columns, source = _readable(engine, resolved, display)
        else:
            _prepare(engine, resolved, display, revision)
            columns, source = DEVICE_COLUMNS, (Best.source, Best.problem)
    except BaseException:
        engine.dispose()
        raise
    return engine, resolved, display, columns, source


def upgrade(url: str | os.PathLike[str] | None = None, revision: str = "head") -> str:
    """Create or upgrade our schema in the database at `url` (see :func:`resolve_url`).

    What ``autotranspose db upgrade`` runs; :meth:`Store.open` does the same implicitly.
    Returns the revision the database is at.
    """
    engine = connect(url, readonly=False, revision=revision)[0]
    engine.dispose()
    return migrations.head() if revision == "head" else revision


def _ensure_default_dir(url: object) -> None:
    """The per-user data directory is ours to create; any other directory is the user's.

    It lies under $HOME (or $XDG_DATA_HOME), which can be read-only or not a directory at
    all (a service account's HOME=/dev/null): say so, and how to name another database.
    """
    if url is None and not os.environ.get(ENV_VAR):
        path = urls.default_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            where = exc.filename or path.parent
            raise StoreError(
                f"cannot create the default tuning database {path}: cannot create {where} "
                f"({exc.strerror or exc}); give another with --db PATH or {ENV_VAR}=PATH (a "
                "file in a writable directory)"
            ) from exc


DEVICE_COLUMNS = tuple(c.label(f"dev_{c.name}") for c in Device.__table__.c)
# Columns added to at_devices after revision 0001, and what a row had before: a reader of an
# older database selects these instead (readers never migrate).
_LATER_DEVICE_COLUMNS = {"l2_bytes": 0}


def _device_columns(present: set[str] | None, display: str) -> tuple[Any, ...]:
    """The at_devices columns to select from a database whose at_devices has `present` (None:
    the head revision's)."""
    if present is None:
        return DEVICE_COLUMNS
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


# Columns added to at_best after revision 0001, and what every row was before: "tuned"
# (0004's source), "" (0006's problem: a transpose).
_LATER_BEST_COLUMNS = {"source": "tuned", "problem": ""}


def _best_columns(present: set[str] | None) -> tuple[Any, ...]:
    """at_best's source and problem columns, or what every row was before the revisions
    that added them (`_LATER_BEST_COLUMNS`)."""
    return tuple(
        getattr(Best, name)
        if present is None or name in present
        else sa.literal(value, getattr(Best, name).type).label(name)
        for name, value in _LATER_BEST_COLUMNS.items()
    )

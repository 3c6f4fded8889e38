"""Where the tuning database is: an URL, $AUTOTRANSPOSE_DB, or the per-user SQLite file; which
kinds of database are supported; how a database is named in messages (`display`).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs
import sqlalchemy as sa

from ..errors import StoreError

ENV_VAR = "AUTOTRANSPOSE_DB"


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
        return sqlite_url(default_path())
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
        return sqlite_url(Path(text).expanduser())
    try:
        u = sa.make_url(text)
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise StoreError(
            f"{text!r:.200} is not a database URL ({exc}); use {SUPPORTED_URLS}"
        ) from exc
    _check_dialect(u)
    return text


SUPPORTED_URLS = (
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
            f"({', '.join(SUPPORTED_BACKENDS.values())}); use {SUPPORTED_URLS}"
        )
    try:
        u.get_dialect()
        return
    except sa.exc.NoSuchModuleError:
        pass
    raise StoreError(
        f"{SUPPORTED_BACKENDS[backend]} has no driver {u.get_driver_name()!r:.40} (in "
        f"{shown!r:.200}); use {SUPPORTED_URLS}"
    ) from None


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL, or None (another database, or SQLite in memory)."""
    u = sa.make_url(url)
    if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:"):
        return None
    if u.database.startswith("file:") or u.query.get("uri"):
        return None  # SQLite URI filenames: left to SQLite
    return Path(u.database)


def sqlite_url(path: Path) -> str:
    return sa.URL.create("sqlite", database=str(path.absolute())).render_as_string()


def display(url: str) -> str:
    """How messages name the database at `url`: its file, or the URL without its password."""
    path = sqlite_path(url)
    return str(path) if path is not None else sa.make_url(url).render_as_string(hide_password=True)

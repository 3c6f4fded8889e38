"""Alembic migrations of the tuning database, run programmatically (users need no alembic.ini).

Our version table is `at_alembic_version`: Optuna keeps its own `alembic_version` in the same
database, and the two histories must never see each other. To add a revision, copy the latest
file in `versions/` and edit it (revisions are numbered 0001, 0002, ...), or draft one with
``alembic.command.revision(alembic_config(conn), "message", autogenerate=True, rev_id="0003")``
on a connection to a database at the current head.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic.config import Config
from alembic.script import ScriptDirectory

VERSION_TABLE = "at_alembic_version"
_HERE = Path(__file__).resolve().parent


def alembic_config(connection: Any = None) -> Config:
    """An Alembic Config for our scripts; `connection` (in a transaction) is the one to migrate."""
    cfg = Config()
    cfg.set_main_option("script_location", str(_HERE).replace("%", "%%"))
    cfg.set_main_option("version_table", VERSION_TABLE)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def script() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def head() -> str:
    """The newest revision this code knows."""
    rev = script().get_current_head()
    assert rev is not None, "autotranspose's migrations have no head revision"
    return rev


def known_revisions() -> set[str]:
    return {r.revision for r in script().walk_revisions()}

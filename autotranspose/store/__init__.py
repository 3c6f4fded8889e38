"""The tuning database: SQLAlchemy models, Alembic migrations, queries, and the text form.

`Store` is the only code in autotranspose that touches SQL. See `database` for the API and
the rules for untrusted rows, `textio` for the shipped JSON files.
"""

from __future__ import annotations

from .database import (
    ENV_VAR,
    BadRowWarning,
    RowProblem,
    Store,
    TunedEntry,
    default_path,
    resolve_url,
    sqlite_path,
    upgrade,
)
from .textio import TuningFile, dump, dumps, export, export_all, import_into, load, loads, parse

__all__ = [
    "ENV_VAR",
    "BadRowWarning",
    "RowProblem",
    "Store",
    "TunedEntry",
    "TuningFile",
    "default_path",
    "dump",
    "dumps",
    "export",
    "export_all",
    "import_into",
    "load",
    "loads",
    "parse",
    "resolve_url",
    "sqlite_path",
    "upgrade",
]

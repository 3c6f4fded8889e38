"""The tuning database: SQLAlchemy models, Alembic migrations, queries, and the text form.

The store is the only code in autotranspose that runs SQL, and it knows no CUDA, no kernel
source and no lookup: the running code's kernel versions, and whom to tell when a best
changes, are handed to it (`hooks`). One idea a module:

- `urls`: where the database is ($AUTOTRANSPOSE_DB, the per-user file, supported URLs);
- `engine`: engines and transactions (SQLite's WAL and locks, PostgreSQL's timeouts);
- `schema`: opening a database: is it ours, its revision, creating or upgrading it;
- `models` and `migrations`: the tables and their Alembic history;
- `entries`: what the store hands out (`TunedEntry`, `RowProblem`, `BadRowWarning`);
- `store`: `Store`, the database at one URL: its reads, and a transaction per write;
- `writes`: the statements that add or change rows, and the rule of which result is best;
- `ingest`: imports of tuning files' entries, validated, then written in bulk;
- `untrusted`: the checks every row read back passes (a row is as untrusted as a file);
- `bounds`: what an imported or stored number may be;
- `textio`: the shipped JSON files;
- `studies`: Optuna's storage on the same database, for the tuner's studies;
- `hooks`: what the code above hands the store (kernel versions, best-changed callbacks).

The public names below load on first use, so that `hooks` can be imported (by the package,
to hand over the kernel versions) without loading SQLAlchemy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .entries import BadRowWarning, RowProblem, TunedEntry
    from .schema import upgrade
    from .store import Store
    from .textio import (
        TuningFile,
        dump,
        dumps,
        export,
        export_all,
        import_into,
        load,
        loads,
        parse,
    )
    from .urls import ENV_VAR, default_path, resolve_url, sqlite_path

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


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import entries, schema, store, textio, urls

    for module in (entries, schema, store, textio, urls):
        if name in vars(module):
            value = getattr(module, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")  # pragma: no cover

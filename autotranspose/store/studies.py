"""Optuna's storage on a tuning database: the tuner's studies live in Optuna's own tables beside
ours (``at_``-prefixed, so the two never collide), opened here so that the store stays the only
code of ours that makes an engine on the database.

Optuna is imported when a storage is opened, not with the store: listing, exporting and importing
results need none of it.
"""

from __future__ import annotations

import time
import warnings
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ..errors import StoreError
from .engine import serialize_sqlite_transactions, shared_engine_kwargs
from .urls import sqlite_path

if TYPE_CHECKING:
    import optuna

# Optuna creates its tables on first use without a lock: of two processes starting on a new
# database, one may fail ("already exists"); it succeeds once the other is done.
_OPEN_ATTEMPTS = 8


def optuna_storage(url: str, **options: Any) -> optuna.storages.RDBStorage:
    """Optuna's RDBStorage on `url` with the store's engine arguments (`shared_engine_kwargs`:
    several processes share one SQLite file; a PostgreSQL server that never answers fails).
    `options` are the storage's own (its heartbeat, say); Optuna's warning that they are
    experimental is silenced. On a SQLite file each of its transactions takes the write lock
    at BEGIN (`serialize_sqlite_transactions`: SQLite has no row locks). A database that still
    refuses after a few retries is a StoreError naming it without its password."""
    import optuna

    engine_kwargs = shared_engine_kwargs(url)
    for attempt in range(_OPEN_ATTEMPTS):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **options)
            if sqlite_path(url) is not None:  # a file several processes may share
                serialize_sqlite_transactions(storage.engine)
            return storage
        except sa.exc.SQLAlchemyError as exc:
            if attempt == _OPEN_ATTEMPTS - 1:
                shown = sa.make_url(url).render_as_string(hide_password=True)
                reason = " ".join(str(getattr(exc, "orig", exc)).split())[:300]
                raise StoreError(
                    f"cannot open Optuna's storage in the tuning database {shown}: {reason}"
                ) from exc
            time.sleep(0.05 * 2**attempt)
    raise AssertionError("unreachable")

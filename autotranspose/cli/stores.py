"""The database a command opens: to write (tune, import), read-only (show, lookup, export:
never created or migrated just to be read), and `db upgrade`.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from ..store import Store


def open_store(url: str | None, *, readonly: bool = False) -> Store:
    """The database to write (tune, import) or, `readonly`, to read: reads never create or
    migrate one."""
    from ..store import Store

    return Store.open(url, readonly=readonly)


def existing_store(url: str | None) -> Store | None:
    """The database to read, or None when neither --db nor $AUTOTRANSPOSE_DB names one and
    the default file does not exist yet (nothing tuned). Opened read-only: never created or
    migrated; a database named but missing is an error saying how to create it."""
    from ..store import ENV_VAR, Store, default_path

    if url is None and not os.environ.get(ENV_VAR) and not default_path().exists():
        return None
    return Store.open(url, readonly=True)


def cmd_db_upgrade(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .. import store as store_pkg

    revision = store_pkg.upgrade(args.db)
    print(f"database is at revision {revision}", file=out)
    return 0

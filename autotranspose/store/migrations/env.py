"""Alembic environment: migrates the connection the store hands over, inside its transaction."""

from __future__ import annotations

from alembic import context

from autotranspose.store.migrations import VERSION_TABLE
from autotranspose.store.models import Base


def _ours(name: str | None, type_: str, parent_names: object) -> bool:
    # Autogenerate must not propose dropping Optuna's tables, which share the database.
    return type_ != "table" or (name or "").startswith("at_")


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError(
            "autotranspose migrations run through autotranspose.store.upgrade(url) or "
            "Store.open(); they need a connection passed in Config.attributes['connection']"
        )
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        include_name=_ours,
        render_as_batch=True,  # SQLite alters tables by copying them
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("autotranspose migrations run online only (against a connection)")
run_migrations_online()

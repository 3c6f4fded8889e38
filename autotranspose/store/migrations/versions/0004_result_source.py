"""Results say where they came from: "tuned" (a tuning run) or "measured" (a first call).

A first call of a class nobody tuned times a small portfolio and stores the winner like a
tuning result (`autotranspose.dispatch.winners`), so other processes and restarts do not measure it
again. Such a result must never overwrite a tuned one, `tune` must replace it, `show` must
mark it, and the tuner's resume must not take its rough timing for a measurement of its own:
hence a column on at_best and on at_measurements. Every earlier row was tuned (or imported).

Revision ID: 0004
Revises: 0003
Create Date: 2025-01-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TABLES = ("at_best", "at_measurements")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(
            table, sa.Column("source", sa.String(16), nullable=False, server_default="tuned")
        )


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("source")

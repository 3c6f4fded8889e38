"""Measurements say the strides they were taken on: "" (contiguous) or a permute pass's layout.

`tune --axes` measures a permute's strided transpose pass on its own strides (ld_in, ld_out,
bs_in, bs_out) and stores the winner under the pass's shape class, like a contiguous call's.
The tuner's resume ("measured already?") must not take a contiguous measurement of the same
(batch, m, n) for a strided one, or the other way round: hence a column on at_measurements.
Every earlier row was measured contiguous.

Revision ID: 0005
Revises: 0004
Create Date: 2025-01-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "at_measurements", sa.Column("layout", sa.String(100), nullable=False, server_default="")
    )


def downgrade() -> None:
    with op.batch_alter_table("at_measurements") as batch:
        batch.drop_column("layout")

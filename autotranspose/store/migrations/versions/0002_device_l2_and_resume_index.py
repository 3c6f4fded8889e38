"""Devices record their L2 cache size; an index serves the tuner's resume query.

The L2 size tells whether a shape's working set stays in cache (a result on a shape that fits in
L2 measures the cache, not DRAM). The index covers `Store.measured()`, which the tuner asks for
every candidate on resume; without it the query scans every measurement.

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "at_devices",
        sa.Column("l2_bytes", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_index(
        "ix_at_measurements_resume",
        "at_measurements",
        ["device_id", "config_id", "elem_bytes", "batch", "m", "n"],
    )


def downgrade() -> None:
    op.drop_index("ix_at_measurements_resume", table_name="at_measurements")
    with op.batch_alter_table("at_devices") as batch:
        batch.drop_column("l2_bytes")

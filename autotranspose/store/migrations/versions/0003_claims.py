"""Claims: which tuner process is measuring which config of a study.

Revision ID: 0003
Revises: 0002
Create Date: 2025-01-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "at_claims",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("study", sa.String(255), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("study", "key", name="uq_at_claims_key"),
    )


def downgrade() -> None:
    op.drop_table("at_claims")

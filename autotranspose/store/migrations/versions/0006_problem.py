"""Results say what problem their kernel solves: "" (a transpose) or a cast-transpose's pair.

Cast-transposes are tuned per (GPU, input type, output type, shape class) and whether the
same-order output is written too (`kinds.cast.problem`): a bfloat16 -> float8 best and a
bfloat16 transpose's best of one class have the same device, element size and class, and
must not take each other's place. Hence a column on at_best, part of its unique key, and
on at_measurements (the tuner's resume must not take a cast's timing for a transpose's of
the same config key, nor one written with `both` for one without). Every earlier row was a
transpose: it reads "".

Revision ID: 0006
Revises: 0005
Create Date: 2025-01-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

OLD_KEY = ("device_id", "elem_bytes", "shape_class")


def upgrade() -> None:
    op.add_column(
        "at_measurements", sa.Column("problem", sa.String(40), nullable=False, server_default="")
    )
    # SQLite changes a table's constraints by copying it (batch mode): every row is kept
    with op.batch_alter_table("at_best") as batch:
        batch.add_column(sa.Column("problem", sa.String(40), nullable=False, server_default=""))
        batch.drop_constraint("uq_at_best_key", type_="unique")
        batch.create_unique_constraint("uq_at_best_key", [*OLD_KEY, "problem"])


def downgrade() -> None:
    # a database going back to 0005 can keep only the transposes' bests under the old key
    op.execute(sa.text("DELETE FROM at_best WHERE problem <> ''"))
    with op.batch_alter_table("at_best") as batch:
        batch.drop_constraint("uq_at_best_key", type_="unique")
        batch.create_unique_constraint("uq_at_best_key", list(OLD_KEY))
        batch.drop_column("problem")
    with op.batch_alter_table("at_measurements") as batch:
        batch.drop_column("problem")

"""Initial schema: devices, configs, runs, measurements, best, and the at_meta marker.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    meta = op.create_table(
        "at_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(256), nullable=False),
    )
    # The marker that tells Store.open() this database is autotranspose's.
    op.bulk_insert(meta, [{"key": "application", "value": "autotranspose"}])
    op.create_table(
        "at_devices",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("cc_major", sa.Integer, nullable=False),
        sa.Column("cc_minor", sa.Integer, nullable=False),
        sa.Column("multiprocessors", sa.Integer, nullable=False),
        sa.Column("memory_clock_khz", sa.Integer, nullable=False),
        sa.Column("bus_width_bits", sa.Integer, nullable=False),
        sa.Column("driver_version", sa.Integer, nullable=False),
        sa.Column("cuda_version", sa.Integer, nullable=False),
        sa.Column("max_threads_per_block", sa.Integer, nullable=False),
        sa.Column("max_shared_per_block", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("name", name="uq_at_devices_name"),
    )
    op.create_table(
        "at_configs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("key", sa.String(100), nullable=False),
        sa.Column("elem_bytes", sa.Integer, nullable=False),
        sa.Column("config_json", sa.Text, nullable=False),
        sa.UniqueConstraint("key", name="uq_at_configs_key"),
    )
    op.create_table(
        "at_runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("device_id", sa.Integer, sa.ForeignKey("at_devices.id"), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("tool_version", sa.String(32), nullable=False),
        sa.Column("template_version", sa.String(64), nullable=False),
        sa.Column("settings_json", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
    )
    op.create_table(
        "at_measurements",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("at_runs.id"), nullable=True),
        sa.Column("device_id", sa.Integer, sa.ForeignKey("at_devices.id"), nullable=False),
        sa.Column("config_id", sa.Integer, sa.ForeignKey("at_configs.id"), nullable=False),
        sa.Column("dtype", sa.String(32), nullable=False),
        sa.Column("elem_bytes", sa.Integer, nullable=False),
        sa.Column("batch", sa.BigInteger, nullable=False),
        sa.Column("m", sa.BigInteger, nullable=False),
        sa.Column("n", sa.BigInteger, nullable=False),
        sa.Column("shape_class", sa.String(64), nullable=False),
        sa.Column("status", sa.String(8), nullable=False),
        sa.Column("gbps", sa.Float, nullable=False),
        sa.Column("copy_gbps", sa.Float, nullable=False),
        sa.Column("time_us", sa.Float, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("template_version", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "at_best",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("device_id", sa.Integer, sa.ForeignKey("at_devices.id"), nullable=False),
        sa.Column("elem_bytes", sa.Integer, nullable=False),
        sa.Column("shape_class", sa.String(64), nullable=False),
        sa.Column("config_id", sa.Integer, sa.ForeignKey("at_configs.id"), nullable=False),
        sa.Column(
            "measurement_id", sa.Integer, sa.ForeignKey("at_measurements.id"), nullable=True
        ),
        sa.Column("gbps", sa.Float, nullable=False),
        sa.Column("copy_gbps", sa.Float, nullable=False),
        sa.Column("ratio", sa.Float, nullable=False),
        sa.Column("template_version", sa.String(64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("device_id", "elem_bytes", "shape_class", name="uq_at_best_key"),
    )


def downgrade() -> None:
    for table in ("at_best", "at_measurements", "at_runs", "at_configs", "at_devices", "at_meta"):
        op.drop_table(table)

"""The tuning database's schema as SQLAlchemy 2 declarative models (the head revision).

Every table is prefixed `at_` so that Optuna, which the tuner points at the same database URL,
never meets a table of ours (nor we one of its). The migrations in `migrations/versions/` build
these tables step by step; a test checks that the head revision and these models agree.

Rows are not trusted on the way out: configs are stored as the JSON of
`KernelConfig.to_dict()` and parsed back through `KernelConfig.from_dict()` by the store.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# The marker row that makes a database ours: at_meta(key=APP_KEY, value=APP_NAME).
APP_KEY = "application"
APP_NAME = "autotranspose"


class Base(DeclarativeBase):
    """Declarative base of autotranspose's tables (and only those: Optuna has its own)."""


class Meta(Base):
    """Key/value facts about the database; the `application` row marks it as ours."""

    __tablename__ = "at_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(256))


class Device(Base):
    """A GPU model, as `DeviceInfo` describes it; one row per model name."""

    __tablename__ = "at_devices"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    cc_major: Mapped[int] = mapped_column(Integer)
    cc_minor: Mapped[int] = mapped_column(Integer)
    multiprocessors: Mapped[int] = mapped_column(Integer, default=0)
    memory_clock_khz: Mapped[int] = mapped_column(Integer, default=0)
    bus_width_bits: Mapped[int] = mapped_column(Integer, default=0)
    # Added by revision 0002; older rows read 0 ("unknown").
    l2_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    driver_version: Mapped[int] = mapped_column(Integer, default=0)
    cuda_version: Mapped[int] = mapped_column(Integer, default=0)
    max_threads_per_block: Mapped[int] = mapped_column(Integer, default=1024)
    max_shared_per_block: Mapped[int] = mapped_column(Integer, default=48 * 1024)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (UniqueConstraint("name", name="uq_at_devices_name"),)


class Config(Base):
    """A kernel config, stored once and referenced by its measurements."""

    __tablename__ = "at_configs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(100))
    elem_bytes: Mapped[int] = mapped_column(Integer)
    config_json: Mapped[str] = mapped_column(Text)

    __table_args__ = (UniqueConstraint("key", name="uq_at_configs_key"),)


class Run(Base):
    """One tuning session (or one import): what code ran it, with which settings, how it ended."""

    __tablename__ = "at_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("at_devices.id"))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    tool_version: Mapped[str] = mapped_column(String(32))
    template_version: Mapped[str] = mapped_column(String(64))
    settings_json: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))


class MeasurementRow(Base):
    """One config measured on one (device, dtype, shape): the tuner's raw history."""

    __tablename__ = "at_measurements"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("at_runs.id"))
    device_id: Mapped[int] = mapped_column(ForeignKey("at_devices.id"))
    config_id: Mapped[int] = mapped_column(ForeignKey("at_configs.id"))
    dtype: Mapped[str] = mapped_column(String(32))
    elem_bytes: Mapped[int] = mapped_column(Integer)
    batch: Mapped[int] = mapped_column(BigInteger)
    m: Mapped[int] = mapped_column(BigInteger)
    n: Mapped[int] = mapped_column(BigInteger)
    shape_class: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(8))
    gbps: Mapped[float] = mapped_column(Float)
    copy_gbps: Mapped[float] = mapped_column(Float)
    time_us: Mapped[float | None] = mapped_column(Float)  # NULL: not timed (fail/wrong)
    error: Mapped[str | None] = mapped_column(Text)
    template_version: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Added by revision 0004: "tuned" (a tuning run, an import of one) or "measured" (a
    # first call's portfolio, `winners`); the tuner's resume reuses only tuned rows.
    source: Mapped[str] = mapped_column(String(16), default="tuned", server_default="tuned")
    # Added by revision 0005: the strides measured on, `shapes.Layout.text` ("ld_in,ld_out,
    # bs_in,bs_out", a permute's strided pass), or "" for contiguous; the tuner's resume
    # reuses only rows of the same layout.
    layout: Mapped[str] = mapped_column(String(100), default="", server_default="")
    # Added by revision 0006: what the kernel solves, "" for a transpose (every row before),
    # else a cast-transpose's `kinds.cast.problem` ("cast:bf16_e4m3", "cast:bf16_e4m3+both").
    problem: Mapped[str] = mapped_column(String(40), default="", server_default="")

    # Added by revision 0002: the tuner's "measured already?" query on resume.
    __table_args__ = (
        Index(
            "ix_at_measurements_resume", "device_id", "config_id", "elem_bytes", "batch", "m", "n"
        ),
    )


class Best(Base):
    """The fastest correct config per (device, element size, shape class, problem): what
    lookup serves."""

    __tablename__ = "at_best"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("at_devices.id"))
    elem_bytes: Mapped[int] = mapped_column(Integer)
    shape_class: Mapped[str] = mapped_column(String(64))
    config_id: Mapped[int] = mapped_column(ForeignKey("at_configs.id"))
    measurement_id: Mapped[int | None] = mapped_column(ForeignKey("at_measurements.id"))
    gbps: Mapped[float] = mapped_column(Float)
    copy_gbps: Mapped[float] = mapped_column(Float)
    ratio: Mapped[float] = mapped_column(Float)
    template_version: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Added by revision 0004: where the result came from ("tuned" or "measured"); a tuned
    # result always outranks a measured one (`writes.replaces`).
    source: Mapped[str] = mapped_column(String(16), default="tuned", server_default="tuned")
    # Added by revision 0006, and part of the key: "" for a transpose, else a cast-transpose's
    # problem (`kinds.cast.problem`): its pair, and whether the same-order output is written.
    problem: Mapped[str] = mapped_column(String(40), default="", server_default="")

    __table_args__ = (
        UniqueConstraint(
            "device_id", "elem_bytes", "shape_class", "problem", name="uq_at_best_key"
        ),
    )


class Claim(Base):
    """A config being measured by one worker of a study (added by revision 0003).

    The tuner claims a config before measuring it, so concurrent processes of one study never
    measure the same config twice; the unique key makes the claim atomic on any database.
    First calls claim a shape class the same way (study ``first-call``, `winners`), with an
    expiry: a claim older than that is taken over (its process died measuring).
    """

    __tablename__ = "at_claims"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study: Mapped[str] = mapped_column(String(255))
    key: Mapped[str] = mapped_column(String(255))
    owner: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (UniqueConstraint("study", "key", name="uq_at_claims_key"),)

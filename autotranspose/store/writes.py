"""Writes: every statement that adds or changes rows of a tuning run, a measurement, a best or a
claim, each run inside the one transaction the store opens (`Store._write`).

What is stored is checked first (`check_record`, `check_claim`): nothing is written that could
not be served correctly later. A best changes only by the rule of :func:`replaces`, decided
under the write lock (SQLite's BEGIN IMMEDIATE, PostgreSQL's row locks and unique keys), so
concurrent writers never lose the faster result. Staleness is per kernel: a stored version
against the running code's versions of that row's own config and problem (`hooks.versions`).
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from .._version import __version__
from ..errors import AutotransposeError, StoreError
from ..kernels.config import KernelConfig
from ..kernels.shapes import Layout, ShapeClass, check_layout, shape_class as classify
from ..runtime.device import DeviceInfo
from . import hooks
from .entries import SOURCES
from .measurement import Measurement
from .models import Best, Claim, Config, Device, MeasurementRow, Run
from .untrusted import DTYPE, check_problem, in_bounds, versions_of_json

RUN_STATUSES = ("running", "done", "interrupted", "failed", "imported")
BEST_KEY = ("device_id", "elem_bytes", "shape_class", "problem")  # at_best's unique key


def now() -> datetime:
    return datetime.now(timezone.utc)


# --- checks before a write ------------------------------------------------------------------------
def check_record(
    dtype: str,
    elem_bytes: int,
    shape: tuple[int, int, int],
    cls: ShapeClass,
    config: KernelConfig,
    m: Measurement,
    source: str = "tuned",
    layout: Layout | None = None,
    problem: str = "",
) -> None:
    """Refuse to store what could not be served correctly later."""
    problems = []
    if isinstance(config, KernelConfig):
        try:
            check_problem(problem, config)
        except ValueError as exc:
            problems.append(str(exc))
    if layout is not None and not isinstance(layout, Layout):
        problems.append(f"layout must be a shapes.Layout or None, got {type(layout).__name__}")
    if source not in SOURCES:
        problems.append(f"source must be one of {list(SOURCES)}, got {source!r:.40}")
    if not isinstance(dtype, str) or not DTYPE.fullmatch(dtype):
        problems.append(f"dtype must be a dtype name, got {dtype!r:.40}")
    if not isinstance(config, KernelConfig):
        problems.append(f"config must be a KernelConfig, got {type(config).__name__}")
    elif config.elem_bytes != elem_bytes:
        problems.append(f"config is for {config.elem_bytes}-byte elements, not {elem_bytes}")
    if not isinstance(m, Measurement):
        problems.append(f"m must be a Measurement, got {type(m).__name__}")
    if not isinstance(cls, ShapeClass):
        problems.append(f"shape_class must be a ShapeClass, got {type(cls).__name__}")
    elif isinstance(config, KernelConfig) and config.vec > cls.vec and not config.any_offset:
        problems.append(f"config vec={config.vec} is wider than class {cls} allows")
    if (
        not isinstance(shape, (tuple, list))
        or len(shape) != 3
        or not all(type(x) is int and x >= 1 for x in shape)
    ):
        problems.append(f"shape must be (batch, m, n) of positive ints, got {shape!r:.60}")
    elif isinstance(cls, ShapeClass) and classify(*shape, cls.vec) != cls:
        problems.append(f"shape {tuple(shape)} is not in class {cls}")
    if problems:
        raise StoreError("cannot record the measurement: " + "; ".join(problems))


def layout_text(shape: tuple[int, int, int], layout: Layout | None) -> str:
    """How at_measurements.layout keeps `layout`: "" for contiguous (as every row before
    revision 0005), else `Layout.text` of its canonical form."""
    if layout is None:
        return ""
    try:
        canonical = check_layout(shape, layout)
    except AutotransposeError as exc:
        raise StoreError(f"cannot use layout {layout!r:.80}: {exc}") from exc
    return "" if canonical is None else canonical.text


def check_claim(study: str, key: str, owner: str) -> None:
    for name, value in (("study", study), ("key", key), ("owner", owner)):
        if not isinstance(value, str) or not 0 < len(value) <= 255:
            raise StoreError(
                f"claim {name} must be a string of 1 to 255 characters, got {value!r:.60}"
            )


def on_conflict_insert(conn: Connection) -> Any:
    """The dialect's INSERT with ON CONFLICT, or None where we fall back to SELECT FOR UPDATE."""
    return {"sqlite": sqlite.insert, "postgresql": postgresql.insert}.get(conn.dialect.name)


def insert(conn: Connection, model: Any, **values: Any) -> int:
    return conn.execute(sa.insert(model).values(**values)).inserted_primary_key[0]


def _device_values(info: DeviceInfo) -> dict[str, Any]:
    d = info.to_dict()
    major, minor = d.pop("compute_capability")
    return {**d, "cc_major": major, "cc_minor": minor, "updated_at": now()}


def upsert_device(conn: Connection, info: DeviceInfo) -> int:
    values = _device_values(info)
    changes = {k: v for k, v in values.items() if k != "name"}
    dialect_insert = on_conflict_insert(conn)
    if dialect_insert is not None:
        ins = dialect_insert(Device).values(**values)
        conn.execute(ins.on_conflict_do_update(index_elements=["name"], set_=changes))
    else:
        generic_upsert(conn, Device, Device.name == info.name, values, changes)
    return conn.execute(sa.select(Device.id).where(Device.name == info.name)).scalar_one()


def config_values(config: KernelConfig) -> dict[str, Any]:
    return {
        "key": config.key,
        "elem_bytes": config.elem_bytes,
        "config_json": json.dumps(config.to_dict(), sort_keys=True),
    }


def config_id(conn: Connection, config: KernelConfig) -> int:
    values = config_values(config)
    dialect_insert = on_conflict_insert(conn)
    if dialect_insert is not None:
        conn.execute(
            dialect_insert(Config).values(**values).on_conflict_do_nothing(index_elements=["key"])
        )
    else:
        generic_upsert(conn, Config, Config.key == config.key, values, None)
    return conn.execute(sa.select(Config.id).where(Config.key == config.key)).scalar_one()


def generic_upsert(
    conn: Connection, model: Any, key: Any, values: dict[str, Any], changes: dict[str, Any] | None
) -> None:
    """Insert, or update (`changes`; None: leave it) the row matching `key`, on any database."""
    row = conn.execute(sa.select(model.id).where(key).with_for_update()).first()
    if row is None:
        try:
            with conn.begin_nested():
                conn.execute(sa.insert(model).values(**values))
            return
        except sa.exc.IntegrityError:  # another writer inserted it meanwhile
            row = conn.execute(sa.select(model.id).where(key).with_for_update()).one()
    if changes:
        conn.execute(sa.update(model).where(model.id == row.id).values(**changes))


def offer_best(
    conn: Connection,
    device_id: int,
    elem_bytes: int,
    shape_class: str,
    config_id: int,
    measurement_id: int,
    gbps: float,
    copy_gbps: float,
    tv: str,
    current: bool,
    now: datetime,
    ratio: float | None = None,
    source: str = "tuned",
    problem: str = "",
) -> bool:
    """Make this result the best of its key if it beats the current best (`replaces`),
    atomically; returns whether it did. `current`: whether `tv` is the running code's version
    of this result's kernel; `source`: "tuned" or "measured" (SOURCES).

    Staleness is per kernel (the stored version against the running code's version of that
    row's own config), so it is decided here, not in SQL: under the write lock (SQLite's
    BEGIN IMMEDIATE, PostgreSQL's SELECT .. FOR UPDATE, a unique key for the first insert),
    so concurrent writers never lose the faster one.
    """
    values = {
        "device_id": device_id,
        "elem_bytes": elem_bytes,
        "shape_class": shape_class,
        "config_id": config_id,
        "measurement_id": measurement_id,
        "gbps": gbps,
        "copy_gbps": copy_gbps,
        "ratio": ratio if ratio is not None else (gbps / copy_gbps if copy_gbps > 0 else 0.0),
        "template_version": tv,
        "updated_at": now,
        "source": source,
        "problem": problem,
    }
    key = sa.and_(
        Best.device_id == device_id,
        Best.elem_bytes == elem_bytes,
        Best.shape_class == shape_class,
        Best.problem == problem,
    )
    q = (
        sa.select(
            Best.id,
            Best.gbps,
            Best.copy_gbps,
            Best.ratio,
            Best.template_version,
            Best.config_id,
            Best.source,
        )
        .where(key)
        .with_for_update()
    )
    row = conn.execute(q).first()
    if row is None:
        try:
            with conn.begin_nested():
                conn.execute(sa.insert(Best).values(**values))
            return True
        except sa.exc.IntegrityError:  # another writer inserted it meanwhile
            row = conn.execute(q).one()
    stale_best = unservable(row) or row.template_version not in _versions_of_config_id(
        conn, row.config_id, problem
    )
    if not replaces(current, gbps, stale_best, row.gbps, source, row.source):
        return False
    changes = {k: v for k, v in values.items() if k not in BEST_KEY}
    conn.execute(sa.update(Best).where(Best.id == row.id).values(**changes))
    return True


def unservable(row: Any) -> bool:
    """A best whose numbers are out of bounds is never served (`untrusted.bounded`): it counts
    as stale, so that any valid result of its class takes its place."""
    return not in_bounds(row.gbps, row.copy_gbps, row.ratio)


def _versions_of_config_id(conn: Connection, config_id: int, problem: str) -> tuple[str, ...]:
    """The stored versions under which a stored config's result for `problem` is current;
    none if the row is invalid (then no stored version matches it: it counts as stale)."""
    text = conn.execute(sa.select(Config.config_json).where(Config.id == config_id)).scalar()
    return versions_of_json(text, problem)


def replaces(
    current: bool,
    gbps: float,
    stale_best: bool,
    best_gbps: float,
    source: str = "tuned",
    best_source: str = "tuned",
) -> bool:
    """Whether a result (of its kernel's `current` version or not) takes a best's place.

    Of one source: a current result beats a stale best whatever its speed, and a slower
    current best; a stale result (an imported old file) only beats a slower stale best.
    Across sources a tuned result always outranks a measured one (a first call's few
    timings on the caller's buffers): a measured result never takes a tuned best's place,
    stale or not (what a user tuned is never overwritten), and a tuned one takes a measured
    best's place unless it is stale and the measured best current (`tune` replaces first-call
    results; a stale result is never served)."""
    if source != best_source:
        return source == "tuned" and (current or stale_best)
    return (stale_best or best_gbps < gbps) if current else (stale_best and best_gbps < gbps)


# --- the store's writes, each inside its transaction ----------------------------------------------
def start_run(
    conn: Connection,
    device_id: int,
    settings_json: str,
    *,
    now: datetime,
    status: str = "running",
    finished: bool = False,
) -> int:
    """Insert a tuning run ("running"; or an import's, "imported" and finished); its id."""
    return insert(
        conn,
        Run,
        device_id=device_id,
        started_at=now,
        finished_at=now if finished else None,
        tool_version=__version__,
        template_version=hooks.template_version(),
        settings_json=settings_json,
        status=status,
    )


def end_run(conn: Connection, run_id: int, status: str) -> bool:
    """Mark a run ended with `status`; False if there is no such run."""
    result = conn.execute(
        sa.update(Run).where(Run.id == run_id).values(status=status, finished_at=now())
    )
    return result.rowcount == 1


def record(
    conn: Connection,
    run_id: int | None,
    device_id: int,
    dtype: str,
    elem_bytes: int,
    shape: tuple[int, int, int],
    shape_class: ShapeClass,
    config: KernelConfig,
    m: Measurement,
    *,
    source: str,
    layout_text: str,
    tv: str,
    now: datetime,
    problem: str = "",
) -> bool:
    """Insert one measurement and offer it as the best of its key (`offer_best`) if it is
    correct; returns whether it is the best now."""
    config_row = config_id(conn, config)
    measurement_id = insert(
        conn,
        MeasurementRow,
        run_id=run_id,
        device_id=device_id,
        config_id=config_row,
        dtype=dtype,
        elem_bytes=elem_bytes,
        batch=shape[0],
        m=shape[1],
        n=shape[2],
        shape_class=str(shape_class),
        status=m.status,
        gbps=float(m.gbps),
        copy_gbps=float(m.copy_gbps),
        time_us=float(m.time_us) if math.isfinite(m.time_us) else None,
        error=None if m.error is None else str(m.error)[:4000],
        template_version=tv,
        created_at=now,
        source=source,
        layout=layout_text,
        problem=problem,
    )
    return m.ok and offer_best(
        conn,
        device_id,
        elem_bytes,
        str(shape_class),
        config_row,
        measurement_id,
        float(m.gbps),
        float(m.copy_gbps),
        tv,
        True,
        now,
        source=source,
        problem=problem,
    )


def claim(conn: Connection, study: str, key: str, owner: str, expire_s: float | None) -> str:
    """Claim `key` of `study` for `owner` unless another holds it (taking over a claim older
    than `expire_s` seconds); returns who holds it now."""
    at = now()
    values = {"study": study, "key": key, "owner": owner, "created_at": at}
    where = sa.and_(Claim.study == study, Claim.key == key)
    if expire_s is not None:
        # PostgreSQL: a second taker waits for the first's row lock, then sees the
        # fresh created_at and updates nothing; SQLite: one writer at a time
        cutoff = at - timedelta(seconds=expire_s)
        conn.execute(
            sa.update(Claim)
            .where(where, Claim.created_at < cutoff)
            .values(owner=owner, created_at=at)
        )
    dialect_insert = on_conflict_insert(conn)
    if dialect_insert is not None:
        ins = dialect_insert(Claim).values(**values)
        conn.execute(ins.on_conflict_do_nothing(index_elements=["study", "key"]))
    else:
        generic_upsert(conn, Claim, where, values, None)
    return conn.execute(sa.select(Claim.owner).where(where)).scalar_one()


def release(conn: Connection, study: str, key: str, owner: str) -> bool:
    """Delete `owner`'s claim on `key` of `study`; True if there was one."""
    result = conn.execute(
        sa.delete(Claim).where(Claim.study == study, Claim.key == key, Claim.owner == owner)
    )
    return result.rowcount > 0

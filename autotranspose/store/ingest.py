"""Imports: tuning files' entries added to the database, validated first, then written in a
few bulk statements.

An import is all or nothing: one bad entry refuses its file (:func:`check_import`, the checks
`textio.parse` makes, for entries that did not come through it), and every file of one import
is written in one transaction. Each file becomes one "imported" run: a measurement per entry,
each offered as the best of its key by the rule of `writes.replaces` (`offer_bests`: one read
of the device's bests under lock, one update of those beaten, one insert of the new keys).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import AutotransposeError, StoreError
from ..kernels.config import KernelConfig
from ..kernels.shapes import ShapeClass, shape_class as classify
from ..runtime.device import DeviceInfo
from . import bounds, writes
from .entries import TunedEntry
from .models import Best, Config, MeasurementRow
from .untrusted import DTYPE, check_entry_fields, check_source, versions_of_json

_CHUNK = 500  # keys per IN (...): far below SQLite's limit on bound parameters


def check_import(device: DeviceInfo, entries: Sequence[TunedEntry], source: str) -> None:
    """Refuse a file with anything a tuning file may not hold, as `textio.parse` does, for
    entries that did not come through it: one bad entry refuses the whole import."""
    try:
        if not isinstance(device, DeviceInfo):
            raise TypeError(f"device must be a DeviceInfo, got {type(device).__name__}")
        bounds.check_device(device)
    except (TypeError, ValueError) as exc:
        raise StoreError(
            f"{source}: device: {exc}; nothing was imported: correct the device"
        ) from exc
    seen: set[tuple[int, str, str]] = set()
    for i, e in enumerate(entries):
        try:
            _check_imported_entry(e)
            key = e.key
            if key in seen:
                what = f", {e.problem}" if e.problem else ""
                raise ValueError(f"a second entry of {e.shape_class}, {e.elem_bytes} B{what}")
            seen.add(key)
        except (AutotransposeError, TypeError, ValueError, AttributeError) as exc:
            raise StoreError(
                f"{source}: entry {i}: {exc}; nothing was imported: correct or delete that entry "
                "(an import writes everything or nothing)"
            ) from exc


def _check_imported_entry(e: TunedEntry) -> None:
    if not isinstance(e, TunedEntry):
        raise TypeError(f"an entry must be a TunedEntry, got {type(e).__name__}")
    if not isinstance(e.config, KernelConfig) or not isinstance(e.shape_class, ShapeClass):
        raise TypeError("config must be a KernelConfig and shape_class a ShapeClass")
    check_entry_fields(e.elem_bytes, e.shape_class, e.config, e.template_version, e.problem)
    check_source(e.source)
    cls = e.shape_class
    shape = e.shape or (cls.batch, cls.m, cls.n)
    if (
        not isinstance(shape, tuple)
        or len(shape) != 3
        or not all(type(x) is int and x >= 1 for x in shape)
        or classify(*shape, cls.vec) != cls
    ):
        raise ValueError(f"shape {shape!r:.60} is not three positive ints in class {cls}")
    bounds.check_shape(shape, e.elem_bytes)
    gbps = bounds.check_bandwidth("gbps", e.gbps)
    copy_gbps = bounds.check_bandwidth("copy_gbps", e.copy_gbps)
    bounds.check_ratio(e.ratio, gbps, copy_gbps)
    if e.dtype is not None and (not isinstance(e.dtype, str) or not DTYPE.fullmatch(e.dtype)):
        raise ValueError(f"dtype {e.dtype!r:.40} is not a dtype name")
    if not isinstance(e.measured_at or e.updated_at, datetime):
        raise TypeError("measured_at (or updated_at) must be a datetime")


def import_file(
    conn: Connection,
    device_id: int,
    entries: Sequence[TunedEntry],
    source: str,
    config_ids: Mapping[KernelConfig, int],
    versions: Mapping[tuple[KernelConfig, str], tuple[str, ...]],
    stored: Mapping[tuple[str, str], tuple[str, ...]],
    now: datetime,
) -> int:
    """One file's entries as one "imported" run: a measurement each, each offered as best.
    `config_ids`: every entry's config, stored already (:func:`intern_configs`)."""
    settings_json = json.dumps({"source": source})
    run_id = writes.start_run(
        conn, device_id, settings_json, now=now, status="imported", finished=True
    )
    if not entries:
        return 0
    measurement_ids = _insert_measurements(conn, run_id, device_id, entries, config_ids)
    offer_bests(conn, device_id, entries, config_ids, measurement_ids, versions, stored, now)
    return len(entries)


def intern_configs(conn: Connection, configs: set[KernelConfig]) -> dict[KernelConfig, int]:
    """Insert the configs not stored yet; every config's id.

    A config row is a key and its JSON, the same whoever stores it, so an import interns its
    configs in a transaction of their own before its own: on PostgreSQL a writer storing one
    of them would otherwise wait on the import's uncommitted insert for the whole import. A
    failed import may leave configs that no measurement names; nothing reads those."""
    dialect_insert = writes.on_conflict_insert(conn)
    if dialect_insert is None:
        return {c: writes.config_id(conn, c) for c in configs}
    rows = [writes.config_values(c) for c in configs]
    conn.execute(dialect_insert(Config).on_conflict_do_nothing(index_elements=["key"]), rows)
    by_key = {c.key: c for c in configs}
    keys = sorted(by_key)
    ids = {}
    for i in range(0, len(keys), _CHUNK):
        q = sa.select(Config.key, Config.id).where(Config.key.in_(keys[i : i + _CHUNK]))
        for key, config_id in conn.execute(q):
            ids[by_key[key]] = config_id
    return ids


def _insert_measurements(
    conn: Connection,
    run_id: int,
    device_id: int,
    entries: Sequence[TunedEntry],
    config_ids: Mapping[KernelConfig, int],
) -> dict[tuple[int, str, str], int]:
    """One measurement row per entry, in one statement; their ids by (elem_bytes, class,
    problem)."""
    before = conn.execute(sa.select(sa.func.max(MeasurementRow.id))).scalar() or 0
    rows = []
    for e in entries:
        b, m, n = e.shape or (e.shape_class.batch, e.shape_class.m, e.shape_class.n)
        rows.append(
            {
                "run_id": run_id,
                "device_id": device_id,
                "config_id": config_ids[e.config],
                "dtype": e.dtype or "",
                "elem_bytes": e.elem_bytes,
                "batch": b,
                "m": m,
                "n": n,
                "shape_class": str(e.shape_class),
                "status": "ok",
                "gbps": e.gbps,
                "copy_gbps": e.copy_gbps,
                "time_us": None,
                "error": None,
                "template_version": e.template_version,
                "created_at": e.measured_at or e.updated_at,
                "source": e.source,
                "problem": e.problem,
            }
        )
    conn.execute(sa.insert(MeasurementRow), rows)
    # New ids are above every id that was there (SQLite: max + 1; PostgreSQL: its sequence),
    # so the primary key finds ours without scanning the table.
    q = sa.select(
        MeasurementRow.id,
        MeasurementRow.elem_bytes,
        MeasurementRow.shape_class,
        MeasurementRow.problem,
    ).where(MeasurementRow.id > before, MeasurementRow.run_id == run_id)
    return {(r.elem_bytes, r.shape_class, r.problem): r.id for r in conn.execute(q)}


def offer_bests(
    conn: Connection,
    device_id: int,
    entries: Sequence[TunedEntry],
    config_ids: Mapping[KernelConfig, int],
    measurement_ids: Mapping[tuple[int, str, str], int],
    versions: Mapping[tuple[KernelConfig, str], tuple[str, ...]],
    stored: Mapping[tuple[str, str], tuple[str, ...]],
    now: datetime,
) -> None:
    """Offer every entry as the best of its key, by the rule of `writes.replaces`, in bulk: one
    read of the device's bests (locked: FOR UPDATE on PostgreSQL; SQLite's write lock is held),
    one update of those beaten and one insert of the new keys."""
    q = (
        sa.select(
            Best.id,
            Best.elem_bytes,
            Best.shape_class,
            Best.gbps,
            Best.copy_gbps,
            Best.ratio,
            Best.template_version,
            Best.source,
            Best.problem,
            Config.config_json,
        )
        .join(Config, Config.id == Best.config_id)
        .where(Best.device_id == device_id)
        .with_for_update(of=Best)
    )
    existing = {(r.elem_bytes, r.shape_class, r.problem): r for r in conn.execute(q)}
    new, beaten = [], []
    for e in entries:
        key = e.key
        values = {
            "device_id": device_id,
            "elem_bytes": e.elem_bytes,
            "shape_class": key[1],
            "config_id": config_ids[e.config],
            "measurement_id": measurement_ids[key],
            "gbps": e.gbps,
            "copy_gbps": e.copy_gbps,
            "ratio": e.ratio,
            "template_version": e.template_version,
            "updated_at": now,
            "source": e.source,
            "problem": e.problem,
        }
        row = existing.get(key)
        if row is None:
            new.append((e, values))
            continue
        accepted = stored.get((row.config_json, row.problem))
        if accepted is None:
            accepted = versions_of_json(row.config_json, row.problem)
        current = e.template_version in versions[e.config, e.problem]
        stale_best = writes.unservable(row) or row.template_version not in accepted
        if writes.replaces(current, e.gbps, stale_best, row.gbps, e.source, row.source):
            changes = {k: v for k, v in values.items() if k not in writes.BEST_KEY}
            beaten.append({"best_id": row.id, **changes})
    if beaten:
        conn.execute(sa.update(Best).where(Best.id == sa.bindparam("best_id")), beaten)
    for e, values in insert_bests(conn, device_id, new):
        # another writer made this key since the read above (PostgreSQL), or a database
        # without ON CONFLICT: offered one by one, under a row lock
        writes.offer_best(
            conn,
            device_id,
            e.elem_bytes,
            values["shape_class"],
            values["config_id"],
            values["measurement_id"],
            e.gbps,
            e.copy_gbps,
            e.template_version,
            e.template_version in versions[e.config, e.problem],
            now,
            ratio=e.ratio,
            source=e.source,
            problem=e.problem,
        )


def insert_bests(
    conn: Connection, device_id: int, new: list[tuple[TunedEntry, dict[str, Any]]]
) -> list[tuple[TunedEntry, dict[str, Any]]]:
    """Insert bests of keys that had none; returns those another writer inserted first."""
    dialect_insert = writes.on_conflict_insert(conn)
    if not new or dialect_insert is None:
        return new
    before = conn.execute(sa.select(sa.func.max(Best.id))).scalar() or 0
    ins = dialect_insert(Best).on_conflict_do_nothing(index_elements=list(writes.BEST_KEY))
    conn.execute(ins, [v for _, v in new])
    made = set(
        conn.execute(
            sa.select(Best.measurement_id).where(Best.id > before, Best.device_id == device_id)
        ).scalars()
    )
    return [(e, v) for e, v in new if v["measurement_id"] not in made]

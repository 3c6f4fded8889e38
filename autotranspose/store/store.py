"""The tuning database at one URL (:class:`Store`): the tuner writes measurements into it,
lookup reads the best configs.

One :class:`Store` wraps one SQLAlchemy engine. Any SQLAlchemy URL works (SQLite files by
default, PostgreSQL through ``postgresql+psycopg://``); Optuna's study may live in the same
database, since all our tables are prefixed ``at_``. Opening is `schema`'s (to write: create
and upgrade; to read: change nothing), engines and transactions `engine`'s. The reads are
here; each write is one transaction whose statements are `writes`' (imports: `ingest`'s), and a
write that may change a best tells the callbacks registered with `hooks.on_best_changed`.

Rows are untrusted on the way out (`untrusted`). A bad row is never served:
:meth:`Store.entries` and :meth:`Store.devices` (used by lookup and listings) skip it with a
:class:`BadRowWarning` naming it and what to do about it (:attr:`RowProblem.fix`), so one bad
row cannot break a user's ``transpose()``; :meth:`Store.problems` lists such rows for
``show``; :meth:`Store.best` and :meth:`Store.measured`, which ask for one row, raise
:class:`StoreError` naming it.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..errors import StoreBusyError, StoreError
from ..kernels.config import KernelConfig
from ..kernels.shapes import Layout, ShapeClass
from ..runtime.device import DeviceInfo
from . import bounds, hooks, ingest, schema, writes
from .engine import busy, reason, transaction
from .entries import BadRowWarning, ImportedFile, RowProblem, TunedEntry
from .measurement import Measurement
from .models import Best, Claim, Config, Device, MeasurementRow
from .schema import DEVICE_COLUMNS
from .untrusted import (
    ROW_ERRORS,
    as_text,
    device_from_row,
    entry_from_row,
    number,
    timestamp,
    versions_of_json,
    why,
)


class Store:
    """The tuning database at one URL. Open with :meth:`Store.open`; close (or use `with`)."""

    def __init__(
        self,
        engine: Engine,
        url: str,
        display: str,
        *,
        readonly: bool = False,
        device_columns: tuple[Any, ...] | None = None,
        best_columns: tuple[Any, ...] | None = None,
    ) -> None:
        self.engine = engine
        self.url = url
        self.display = display
        self.readonly = readonly
        self._device_columns = device_columns or DEVICE_COLUMNS
        # at_best's source and problem, or what an older revision's rows were (`schema`)
        self._best_columns = best_columns or (Best.source, Best.problem)
        self._has_problem = self._best_columns[1] is Best.problem
        self._device_ids: dict[DeviceInfo, int] = {}

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str] | None = None,
        *,
        readonly: bool = False,
        busy_timeout_s: float | None = None,
    ) -> Store:
        """Open the database at `url` (see resolve_url).

        To write (the default): create the database if needed and create or upgrade our
        schema. To read (`readonly`): change nothing; a missing database, or one without our
        tables, is a StoreError saying how to create it; an older schema is read as it is.
        `busy_timeout_s`: how long each statement waits for another connection's lock (None:
        SQLite's `engine.BUSY_TIMEOUT_S`, PostgreSQL's own); past it, :class:`StoreBusyError`.
        """
        engine, resolved, display, columns, source = schema.connect(
            url, readonly=readonly, busy_timeout_s=busy_timeout_s
        )
        return cls(
            engine,
            resolved,
            display,
            readonly=readonly,
            device_columns=columns,
            best_columns=source,
        )

    def close(self) -> None:
        self.engine.dispose()

    def forget_connections(self) -> None:
        """Drop the pooled connections without closing them: for a forked child, whose parent
        still uses them (SQLite forbids carrying one across fork); the next use reconnects."""
        self.engine.dispose(close=False)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.display!r})"

    def schema_revision(self) -> str:
        """The database's schema revision ("" for none)."""
        with self._read() as conn:
            return schema.revision(conn)

    # --- transactions ----------------------------------------------------------------------
    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except sa.exc.SQLAlchemyError as exc:
            text = f"cannot {what} the tuning database {self.display}: {reason(exc, self.url)}"
            if busy(exc):
                raise StoreBusyError(
                    f"{text} (another connection held a lock on it for longer than this one "
                    "waits); try again once that connection's write is done"
                ) from exc
            raise StoreError(text) from exc

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._errors("read"), transaction(self.engine, write=False) as conn:
            yield conn

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        if self.readonly:
            raise StoreError(
                f"the tuning database {self.display} was opened read-only; open it with "
                "Store.open(url) to write"
            )
        with self._errors("write"), transaction(self.engine, write=True) as conn:
            yield conn

    # --- writes -----------------------------------------------------------------------------
    def upsert_device(self, info: DeviceInfo) -> int:
        """Record (or refresh) a GPU model; returns its id."""
        with self._write() as conn:
            device_id = writes.upsert_device(conn, info)
        self._device_ids[info] = device_id
        return device_id

    def begin_run(self, device: DeviceInfo, settings: Mapping[str, Any]) -> int:
        """Start a tuning run on `device` with `settings` (kept as JSON); returns its id."""
        settings_json = json.dumps(dict(settings), sort_keys=True, default=str)
        with self._write() as conn:
            device_id = self._device_id(conn, device)
            run_id = writes.start_run(conn, device_id, settings_json, now=writes.now())
        self._device_ids[device] = device_id
        return run_id

    def finish_run(self, run_id: int, status: str) -> None:
        """Mark a run ended: "done", "interrupted" or "failed"."""
        if status not in writes.RUN_STATUSES or status == "running":
            raise StoreError(f"run status must be one of done/interrupted/failed, got {status!r}")
        with self._write() as conn:
            if not writes.end_run(conn, run_id, status):
                raise StoreError(f"no tuning run with id {run_id} in {self.display}")

    def record(
        self,
        run_id: int | None,
        device: DeviceInfo,
        dtype: str,
        elem_bytes: int,
        shape: tuple[int, int, int],
        shape_class: ShapeClass,
        config: KernelConfig,
        m: Measurement,
        *,
        source: str = "tuned",
        layout: Layout | None = None,
        problem: str = "",
    ) -> bool:
        """Store one measurement and, in the same transaction, make it the best of its
        (device, elem_bytes, shape class, problem: "" for a transpose, a cast-transpose's
        `kinds.cast.problem`) if it is correct and faster than the current best,
        or if the current best came from another template version (see `writes.replaces`: a
        "measured" result, a first call's, never takes a tuned result's place). Returns
        whether it is the best now. `layout`: the strides it was measured on (None:
        contiguous); the measurement row keeps them, the best's key does not."""
        writes.check_record(
            dtype, elem_bytes, shape, shape_class, config, m, source, layout, problem
        )
        layout_text = writes.layout_text(shape, layout)
        tv = hooks.kernel_version(config, problem)
        now = writes.now()
        with self._write() as conn:
            device_id = self._device_id(conn, device)
            best = writes.record(
                conn,
                run_id,
                device_id,
                dtype,
                elem_bytes,
                shape,
                shape_class,
                config,
                m,
                source=source,
                layout_text=layout_text,
                tv=tv,
                now=now,
                problem=problem,
            )
        self._device_ids[device] = device_id
        if best:
            first_call = source == "measured"  # one class's best, not a tuning run's
            hooks.best_changed(
                hooks.FirstCallBest(device.name, elem_bytes, shape_class, problem)
                if first_call
                else None
            )
        return best

    def import_entries(self, device: DeviceInfo, entries: Sequence[TunedEntry], source: str) -> int:
        """Add validated entries (from a tuning file) as one "imported" run, in one transaction.

        Each becomes a measurement and competes for best like a measured one (a stale entry
        never displaces a current one). Returns the number of entries written.
        """
        return self.import_many([(device, entries, source)])[0]

    def import_many(self, files: Sequence[ImportedFile]) -> list[int]:
        """Add the entries of several tuning files, each as one "imported" run, all in one
        transaction: every file or none. Returns the number of entries of each.

        Everything that takes time (checks, kernel versions) is done before the write lock is
        taken, the configs are stored in a short transaction of their own first
        (`ingest.intern_configs`), and the writes are a few bulk statements, so that a `tune`
        recording beside a large import waits a moment, not a minute (SQLite has one writer
        at a time; on PostgreSQL it waits only for the bests' part).
        """
        for device, entries, source in files:
            ingest.check_import(device, entries, source)
        # the versions under which each entry's result is current (`hooks.versions`)
        versions: dict[tuple[KernelConfig, str], tuple[str, ...]] = {}
        for _, entries, _ in files:
            for e in entries:
                if (e.config, e.problem) not in versions:
                    versions[e.config, e.problem] = hooks.versions(e.config, e.problem)
        stored = self._best_versions({device.name for device, _, _ in files})
        infos = {device.name: device for device, _, _ in files}  # as the last file says
        now = writes.now()
        configs = {e.config for _, entries, _ in files for e in entries}
        config_ids: dict[KernelConfig, int] = {}
        if configs:
            with self._write() as conn:
                config_ids = ingest.intern_configs(conn, configs)
        with self._write() as conn:
            # every device row first, in one order: PostgreSQL row locks taken in a fixed order
            device_ids = {name: writes.upsert_device(conn, infos[name]) for name in sorted(infos)}
            counts = []
            for device, entries, source in files:
                args = (device_ids[device.name], entries, source, config_ids, versions, stored, now)
                counts.append(ingest.import_file(conn, *args))
        hooks.best_changed()
        return counts

    def _best_versions(self, device_names: set[str]) -> dict[tuple[str, str], tuple[str, ...]]:
        """The versions under which each (config, problem) that is some best of these devices
        now is current, by the config's stored JSON (`untrusted.versions_of_json`): rendered
        before an import takes the write lock, not under it."""
        q = (
            sa.select(Config.config_json, Best.problem)
            .distinct()
            .join(Best, Best.config_id == Config.id)
            .join(Device, Device.id == Best.device_id)
            .where(Device.name.in_(sorted(device_names)))
        )
        with self._read() as conn:
            rows = conn.execute(q).all()
        return {(text, problem): versions_of_json(text, problem) for text, problem in rows}

    def claim(self, study: str, key: str, owner: str, *, expire_s: float | None = None) -> bool:
        """Claim `key` (a config on a shape) of `study` for `owner`; True if `owner` holds it now.

        Atomic across processes and hosts (a unique key): of concurrent claimers exactly one
        gets True. Claiming again what one holds is True. With `expire_s`, a claim made more
        than that many seconds ago is taken over (its owner died without releasing it; the
        age is judged by this host's clock): of concurrent takers, again, exactly one wins.
        """
        writes.check_claim(study, key, owner)
        with self._write() as conn:
            holder = writes.claim(conn, study, key, owner, expire_s)
        return holder == owner

    def claim_holder(self, study: str, key: str) -> tuple[str, datetime] | None:
        """Who holds `key` of `study` and since when, or None: a read, for those waiting."""
        writes.check_claim(study, key, "reader")
        q = sa.select(Claim.owner, as_text(Claim.created_at)).where(
            Claim.study == study, Claim.key == key
        )
        with self._read() as conn:
            row = conn.execute(q).first()
        if row is None:
            return None
        try:
            return str(row.owner), timestamp(row.created_at, "created_at")
        except ROW_ERRORS as exc:
            raise StoreError(f"{self.display}: at_claims row of {key!r:.60}: {exc}") from exc

    def release(self, study: str, key: str, owner: str) -> bool:
        """Drop `owner`'s claim on `key` (e.g. its process died); True if there was one."""
        writes.check_claim(study, key, owner)
        with self._write() as conn:
            return writes.release(conn, study, key, owner)

    def _device_id(self, conn: Connection, device: DeviceInfo) -> int:
        cached = self._device_ids.get(device)
        return cached if cached is not None else writes.upsert_device(conn, device)

    # --- reads ------------------------------------------------------------------------------
    def measured(
        self,
        device_name: str,
        elem_bytes: int,
        shape: tuple[int, int, int],
        config: KernelConfig,
        layout: Layout | None = None,
        problem: str = "",
    ) -> Measurement | None:
        """The latest measurement of exactly `config` on this shape and layout (None:
        contiguous), for `problem` ("": a transpose; a cast's, with or without its same-order
        output), with the current templates (any status), or None: the tuner's "already
        measured?" question on resume. A first call's rough timing ("measured" source) is not
        one: the tuner measures for itself."""
        b, rows, cols = shape
        q = (
            sa.select(
                MeasurementRow.id,
                MeasurementRow.status,
                MeasurementRow.gbps,
                MeasurementRow.copy_gbps,
                MeasurementRow.time_us,
                MeasurementRow.error,
            )
            .join(Device, Device.id == MeasurementRow.device_id)
            .join(Config, Config.id == MeasurementRow.config_id)
            .where(
                Device.name == device_name,
                Config.key == config.key,
                MeasurementRow.elem_bytes == elem_bytes,
                MeasurementRow.batch == b,
                MeasurementRow.m == rows,
                MeasurementRow.n == cols,
                MeasurementRow.template_version.in_(hooks.versions(config, problem)),
                MeasurementRow.source == "tuned",
                MeasurementRow.layout == writes.layout_text(shape, layout),
                MeasurementRow.problem == problem,
            )
            .order_by(MeasurementRow.id.desc())
            .limit(1)
        )
        with self._read() as conn:
            row = conn.execute(q).first()
        if row is None:
            return None
        try:
            return Measurement(
                status=row.status,
                gbps=bounds.check_bandwidth("gbps", row.gbps),
                copy_gbps=bounds.check_bandwidth("copy_gbps", row.copy_gbps),
                time_us=math.inf if row.time_us is None else number(row.time_us, "time_us"),
                error=row.error if isinstance(row.error, str) else None,
            )
        except (ValueError, TypeError) as exc:
            problem = RowProblem("at_measurements", row.id, str(exc))
            raise StoreError(f"{self.display}: {problem} is invalid; {problem.fix}") from exc

    def best(
        self, device_name: str, elem_bytes: int, shape_class: ShapeClass, problem: str = ""
    ) -> TunedEntry | None:
        """The current (not stale) best entry of exactly this class and problem ("": a
        transpose), or None; raises StoreError if that row is invalid."""
        entries, problems = self._scan(device_name, elem_bytes, str(shape_class), problem)
        if problems:
            raise StoreError(f"{self.display}: {problems[0]}; {problems[0].fix}")
        for e in entries:
            if not e.stale:
                return e
        return None

    def entries(
        self,
        device_name: str | None = None,
        include_stale: bool = True,
        *,
        elem_bytes: int | None = None,
        problem: str | None = None,
    ) -> list[TunedEntry]:
        """Every best entry (of one device, of one element size, of one problem: "" for the
        transposes', a cast's `kinds.cast.problem`; None: all), sorted by device, element
        size, class and problem. Invalid rows are skipped with a BadRowWarning naming them."""
        entries, problems = self._scan(device_name, elem_bytes, None, problem)
        for p in problems:
            warnings.warn(f"skipping {p} in {self.display}; {p.fix}", BadRowWarning, stacklevel=2)
        return [e for e in entries if include_stale or not e.stale]

    def devices(self) -> list[DeviceInfo]:
        """Every recorded GPU model (invalid rows skipped with a BadRowWarning)."""
        infos, problems = self._scan_devices()
        for p in problems:
            warnings.warn(f"skipping {p} in {self.display}; {p.fix}", BadRowWarning, stacklevel=2)
        return sorted(infos.values(), key=lambda d: d.name)

    def problems(self, device_name: str | None = None) -> list[RowProblem]:
        """Rows of at_devices and at_best that fail validation (for `show` to list)."""
        _, device_problems = self._scan_devices()
        _, best_problems = self._scan(device_name, None, None)
        seen = set()
        out = []
        for p in device_problems + best_problems:
            if (p.table, p.row_id) not in seen:
                seen.add((p.table, p.row_id))
                out.append(p)
        return out

    def _scan_devices(self) -> tuple[dict[int, DeviceInfo], list[RowProblem]]:
        with self._read() as conn:
            rows = conn.execute(sa.select(*self._device_columns).order_by(Device.id)).all()
        infos: dict[int, DeviceInfo] = {}
        problems: list[RowProblem] = []
        for r in rows:
            try:
                infos[r.dev_id] = device_from_row(r)
            except ROW_ERRORS as exc:
                problems.append(RowProblem("at_devices", r.dev_id, why(exc)))
        return infos, problems

    def _scan(
        self,
        device_name: str | None,
        elem_bytes: int | None,
        shape_class: str | None,
        problem: str | None = None,
    ) -> tuple[list[TunedEntry], list[RowProblem]]:
        if problem and not self._has_problem:
            return [], []  # a database from before revision 0006 holds transposes only
        q = (
            sa.select(
                Best.id,
                Best.elem_bytes,
                Best.shape_class,
                Best.gbps,
                Best.copy_gbps,
                Best.ratio,
                Best.template_version,
                as_text(Best.updated_at),
                Config.config_json,
                MeasurementRow.batch,
                MeasurementRow.m,
                MeasurementRow.n,
                MeasurementRow.dtype,
                as_text(MeasurementRow.created_at),
                *self._best_columns,
                *self._device_columns,
            )
            .join(Config, Config.id == Best.config_id)
            .join(Device, Device.id == Best.device_id)
            .outerjoin(MeasurementRow, MeasurementRow.id == Best.measurement_id)
            .order_by(Best.id)
        )
        if device_name is not None:
            q = q.where(Device.name == device_name)
        if elem_bytes is not None:
            q = q.where(Best.elem_bytes == elem_bytes)
        if shape_class is not None:
            q = q.where(Best.shape_class == shape_class)
        if problem is not None and self._has_problem:
            q = q.where(Best.problem == problem)
        with self._read() as conn:
            rows = conn.execute(q).all()
        entries: list[TunedEntry] = []
        problems: list[RowProblem] = []
        for r in rows:
            try:
                entries.append(entry_from_row(r))
            except ROW_ERRORS as exc:
                problems.append(RowProblem("at_best", r.id, why(exc)))
        entries.sort(key=lambda e: (e.device, e.elem_bytes, e.shape_class, e.problem))
        return entries, problems

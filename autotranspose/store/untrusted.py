"""Rows read back from the database are untrusted input, as a file is: the checks they pass
before anything is served, shown or compared.

Configs go through ``KernelConfig.from_dict`` (`parse_config_json`), devices through
``DeviceInfo.from_dict``, shape classes through ``ShapeClass.parse``, and every number must lie
within the bounds an imported file's must (`bounds`). A row that fails raises one of
:data:`ROW_ERRORS`; the store turns that into a :class:`RowProblem` (skipped with a
:class:`BadRowWarning` where many rows are read, a :class:`StoreError` where one is asked for).
A best whose numbers are out of bounds counts as stale (`in_bounds`), so the next valid result
of its class replaces it; a bad row is never deleted for the user.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from ..errors import AutotransposeError
from ..kernels.config import KernelConfig
from ..kernels.shapes import ShapeClass
from ..kinds import cast as cast_kind, inplace as inplace_kind
from ..plans.dtypes import ELEMENT_SIZES
from ..runtime.device import DeviceInfo
from . import bounds, hooks
from .entries import SOURCES, TunedEntry

_MAX_CONFIG_JSON = 4096  # a config is ~200 bytes of JSON: anything far larger is not one
_TEMPLATE_VERSION = re.compile(r"[0-9A-Za-z._-]{1,64}")
DTYPE = re.compile(r"[0-9A-Za-z_]{1,32}")

ROW_ERRORS = (AutotransposeError, ValueError, TypeError, KeyError, RecursionError, OverflowError)


def as_text(column: Any) -> Any:
    # Timestamps are parsed by us: SQLAlchemy's SQLite DateTime would raise on a malformed
    # value while fetching, failing the whole query instead of the one bad row.
    return sa.type_coerce(column, sa.String()).label(column.key)


def why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {type(value).__name__} {value!r:.40}")
    x = float(value)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {x!r}")
    return x


def bounded(gbps: Any, copy_gbps: Any, ratio: Any) -> tuple[float, float, float]:
    """A stored result's numbers, within what an imported file's may be (`bounds`): a row
    is as untrusted as a file, and a bandwidth no GPU reaches must not be served or shown."""
    g = bounds.check_bandwidth("gbps", gbps)
    c = bounds.check_bandwidth("copy_gbps", copy_gbps)
    return g, c, bounds.check_ratio(ratio, g, c)


def in_bounds(gbps: Any, copy_gbps: Any, ratio: Any) -> bool:
    try:
        bounded(gbps, copy_gbps, ratio)
    except (TypeError, ValueError):
        return False
    return True


def timestamp(value: Any, name: str) -> datetime:
    if isinstance(value, str) and len(value) <= 40:
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise ValueError(f"{name} must be a timestamp, got {value!r:.40}")
    return (
        value.replace(tzinfo=timezone.utc)
        if value.tzinfo is None
        else value.astimezone(timezone.utc)
    )


def device_from_row(r: Any) -> DeviceInfo:
    """A device row, checked as an imported file's device is (`bounds.check_device`)."""
    device = DeviceInfo.from_dict(
        {
            "name": r.dev_name,
            "compute_capability": [r.dev_cc_major, r.dev_cc_minor],
            "multiprocessors": r.dev_multiprocessors,
            "memory_clock_khz": r.dev_memory_clock_khz,
            "bus_width_bits": r.dev_bus_width_bits,
            "l2_bytes": r.dev_l2_bytes,
            "driver_version": r.dev_driver_version,
            "cuda_version": r.dev_cuda_version,
            "max_threads_per_block": r.dev_max_threads_per_block,
            "max_shared_per_block": r.dev_max_shared_per_block,
        }
    )
    bounds.check_device(device)
    return device


def parse_config_json(text: Any) -> KernelConfig:
    """A config from its stored JSON: size-capped, then validated by KernelConfig.from_dict."""
    if not isinstance(text, str) or len(text) > _MAX_CONFIG_JSON:
        raise ValueError(f"config JSON must be a string of at most {_MAX_CONFIG_JSON} characters")
    return KernelConfig.from_dict(json.loads(text, parse_constant=_reject_constant))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a valid number here")


def check_problem(problem: Any, config: KernelConfig) -> str:
    """A stored problem ("", a cast-transpose's, `kinds.cast.parse_problem`, or an in-place
    transpose's, `kinds.inplace.parse_problem`) that matches its config: a transpose's entry
    holds neither a cast nor an in-place kernel, a cast's holds its own pair's and an in-place
    one an in-place program's, so a config read back can only ever reach the call it was
    tuned for."""
    inplace = config.kind == inplace_kind.NAME
    square = inplace_kind.parse_problem(problem)
    if square is not None or inplace:
        if square is None or not inplace:
            raise ValueError(
                f"problem {problem!r:.60} holds config {config.key}: an in-place transpose's "
                f"result is an in-place config stored under {list(inplace_kind.PROBLEMS)}, "
                "and nothing else is"
            )
        return problem
    parsed = cast_kind.parse_problem(problem)
    pair = config.params.pair if config.kind == cast_kind.KIND.name else ""
    if parsed is None:
        if pair:
            raise ValueError(
                f"config {config.key} is a cast-transpose kernel ({pair}) stored as a "
                "transpose's result (problem ''); a cast's result names its problem, e.g. "
                f"{cast_kind.problem(pair)!r}"
            )
    elif parsed[0] != pair:
        raise ValueError(
            f"problem {problem!r} is the cast {parsed[0]}, but config {config.key} is "
            f"{'the cast ' + pair if pair else 'no cast kernel'}"
        )
    return problem


def check_entry_fields(
    elem_bytes: Any,
    cls: ShapeClass,
    config: KernelConfig,
    template_version: Any,
    problem: Any = "",
) -> None:
    """What every entry must satisfy, from a database row or a file."""
    if type(elem_bytes) is not int or elem_bytes not in ELEMENT_SIZES:
        raise ValueError(f"elem_bytes must be one of {list(ELEMENT_SIZES)}, got {elem_bytes!r:.40}")
    if config.elem_bytes != elem_bytes:
        raise ValueError(
            f"config {config.key} is for {config.elem_bytes}-byte elements, not {elem_bytes}"
        )
    if config.vec > cls.vec and not config.any_offset:  # realigning kernels run on any alignment
        raise ValueError(
            f"config {config.key} uses vec={config.vec}, wider than class {cls} allows"
        )
    if not isinstance(template_version, str) or not _TEMPLATE_VERSION.fullmatch(template_version):
        raise ValueError(f"template_version {template_version!r:.40} is not a template version")
    check_problem(problem, config)


def entry_from_row(r: Any) -> TunedEntry:
    device = device_from_row(r)
    cls = ShapeClass.parse(r.shape_class)
    config = parse_config_json(r.config_json)
    check_entry_fields(r.elem_bytes, cls, config, r.template_version, r.problem)
    shape = None
    if r.batch is not None:
        shape = (r.batch, r.m, r.n)
        if not all(type(x) is int and x >= 1 for x in shape):
            raise ValueError(f"measured shape {shape!r:.60} is not three positive ints")
        bounds.check_shape(shape, r.elem_bytes)
    gbps, copy_gbps, ratio = bounded(r.gbps, r.copy_gbps, r.ratio)
    dtype = r.dtype if isinstance(r.dtype, str) and DTYPE.fullmatch(r.dtype) else None
    return TunedEntry(
        device=device.name,
        elem_bytes=r.elem_bytes,
        shape_class=cls,
        config=config,
        gbps=gbps,
        copy_gbps=copy_gbps,
        ratio=ratio,
        template_version=r.template_version,
        stale=not hooks.is_current(r.template_version, config, r.problem),
        updated_at=timestamp(r.updated_at, "updated_at"),
        shape=shape,
        dtype=dtype,
        measured_at=None if r.created_at is None else timestamp(r.created_at, "measured_at"),
        source=check_source(r.source),
        problem=r.problem,
    )


def check_source(value: Any) -> str:
    if value not in SOURCES:
        raise ValueError(f"source {value!r:.40} is not one of {list(SOURCES)}")
    return value


def versions_of_json(text: Any, problem: str = "") -> tuple[str, ...]:
    """The stored versions under which a result of a stored config (by its JSON) for
    `problem` is current (`hooks.versions`); none if the JSON is no valid config (then no
    stored version matches it: it counts as stale)."""
    try:
        return hooks.versions(parse_config_json(text), problem)
    except ROW_ERRORS:
        return ()

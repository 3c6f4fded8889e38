"""Tuning results as text: one JSON file per GPU model, made to be read, diffed and shipped.

``tuning_db/<DeviceInfo.slug>.json`` holds::

    {"format": "autotranspose-tuning/1",
     "device": {...DeviceInfo.to_dict()...},
     "entries": [{"elem_bytes": 4, "shape_class": "1x8192x8192/v4", "shape": [1, 8192, 8192],
                  "config": {...KernelConfig.to_dict()...}, "gbps": ..., "copy_gbps": ...,
                  "ratio": ..., "template_version": "...", "measured_at": "ISO 8601",
                  "dtype": "float32"}, ...]}

Keys are sorted, entries sorted by (element size, shape class) and numbers rounded, so
re-exporting unchanged results gives the same bytes. A file is untrusted input: :func:`parse`
checks every field (configs through ``KernelConfig.from_dict``, the device through
``DeviceInfo.from_dict``) and names the entry at fault; an import writes all entries or none.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timezone
from pathlib import Path
from typing import Any

from ..config import KernelConfig
from ..device import DeviceInfo
from ..errors import AutotransposeError, StoreError
from ..shapes import ShapeClass
from ..shapes import shape_class as classify
from .database import (
    _DTYPE,
    Store,
    TunedEntry,
    _current_version,
    _timestamp,
    check_entry_fields,
)

FORMAT = "autotranspose-tuning/1"
MAX_FILE_BYTES = 64 << 20
_ENTRY_KEYS = frozenset(
    {"elem_bytes", "shape_class", "shape", "config", "gbps", "copy_gbps", "ratio",
     "template_version", "measured_at", "dtype"}
)  # fmt: skip
_OPTIONAL_KEYS = frozenset({"dtype"})


@dataclass(frozen=True)
class TuningFile:
    """The contents of one tuning file: a GPU model and its best entries."""

    device: DeviceInfo
    entries: tuple[TunedEntry, ...]


# --- out ----------------------------------------------------------------------------------------
def document(device: DeviceInfo, entries: Iterable[TunedEntry]) -> dict[str, Any]:
    """The JSON document (a dict) of one device's entries."""
    rows = []
    for e in sorted(entries, key=lambda e: (e.elem_bytes, e.shape_class)):
        if e.device != device.name:
            raise StoreError(f"entry {e.shape_class} belongs to {e.device!r}, not {device.name!r}")
        shape = e.shape or (e.shape_class.batch, e.shape_class.m, e.shape_class.n)
        row = {
            "elem_bytes": e.elem_bytes,
            "shape_class": str(e.shape_class),
            "shape": list(shape),
            "config": e.config.to_dict(),
            "gbps": round(e.gbps, 3),
            "copy_gbps": round(e.copy_gbps, 3),
            "ratio": round(e.ratio, 4),
            "template_version": e.template_version,
            "measured_at": (e.measured_at or e.updated_at).astimezone(timezone.utc).isoformat(),
        }
        if e.dtype:
            row["dtype"] = e.dtype
        rows.append(row)
    return {"format": FORMAT, "device": device.to_dict(), "entries": rows}


def export(
    store: Store, device_name: str | None = None, *, include_stale: bool = False
) -> dict[str, Any]:
    """The document of one device's entries (the file :func:`load` reads back).

    Without `device_name` the database must hold entries of exactly one device; with several,
    name one, or write them all with :func:`dump`. Stale entries are left out unless
    `include_stale`: lookup would never serve them.
    """
    docs = export_all(store, include_stale=include_stale)
    if device_name is not None:
        infos = {d.name: d for d in store.devices()}
        if device_name not in infos:
            known = ", ".join(sorted(map(repr, infos))) or "none"
            raise StoreError(f"no device {device_name!r} in {store.display}; known: {known}")
        return docs.get(f"{infos[device_name].slug}.json") or document(infos[device_name], [])
    if len(docs) == 1:
        return next(iter(docs.values()))
    if not docs:
        raise StoreError(f"no tuned results in {store.display} to export; run `autotranspose tune`")
    names = ", ".join(repr(d["device"]["name"]) for d in docs.values())
    raise StoreError(
        f"{store.display} holds results of several devices ({names}); name one "
        "(--device NAME), or write one file per device (`autotranspose export --all-devices "
        "-o DIR`; dump() from Python)"
    )


def export_all(store: Store, *, include_stale: bool = False) -> dict[str, dict[str, Any]]:
    """Documents of every device with entries, keyed by file name (``<slug>.json``)."""
    infos = {d.name: d for d in store.devices()}
    by_device: dict[str, list[TunedEntry]] = {}
    for e in store.entries(include_stale=include_stale):
        by_device.setdefault(e.device, []).append(e)
    return {
        f"{infos[name].slug}.json": document(infos[name], entries)
        for name, entries in sorted(by_device.items())
        if name in infos
    }


def dumps(doc: Mapping[str, Any]) -> str:
    """The canonical text of a document: sorted keys, one key per line, a final newline."""
    return json.dumps(doc, sort_keys=True, indent=1, allow_nan=False, ensure_ascii=True) + "\n"


def dump(
    store: Store,
    directory: str | os.PathLike[str],
    device_name: str | None = None,
    *,
    include_stale: bool = False,
) -> list[Path]:
    """Write one ``<slug>.json`` per device into `directory`; returns the files written."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    if device_name is None:
        docs = export_all(store, include_stale=include_stale)
    else:
        doc = export(store, device_name, include_stale=include_stale)
        docs = {f"{DeviceInfo.from_dict(doc['device']).slug}.json": doc}
    for name, doc in docs.items():
        path = out / name
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(dumps(doc), encoding="utf-8")
        tmp.replace(path)  # a reader never sees half a file
        written.append(path)
    return written


# --- in -----------------------------------------------------------------------------------------
def load(path: str | os.PathLike[str]) -> TuningFile:
    """Read and validate one tuning file."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_FILE_BYTES:
            raise StoreError(f"{p}: larger than {MAX_FILE_BYTES >> 20} MiB, not a tuning file")
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"cannot read tuning file {p}: {exc}") from exc
    return loads(text, source=str(p))


def loads(text: str, source: str = "<string>") -> TuningFile:
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise StoreError(f"{source}: not a JSON tuning file ({exc})") from exc
    return parse(doc, source)


def parse(doc: Any, source: str = "<document>") -> TuningFile:
    """Validate a decoded document; any fault raises StoreError naming `source` and the entry."""
    if not isinstance(doc, Mapping):
        raise StoreError(f"{source}: a tuning file is a JSON object, got {type(doc).__name__}")
    unknown = sorted(set(map(str, doc)) - {"format", "device", "entries"})
    if unknown:
        raise StoreError(f"{source}: unknown top-level key(s) {unknown}")
    if doc.get("format") != FORMAT:
        raise StoreError(
            f"{source}: format is {doc.get('format')!r:.60}, expected {FORMAT!r} (a newer "
            "autotranspose may read it)"
        )
    try:
        if not isinstance(doc.get("device"), dict):
            raise TypeError("device must be a JSON object")
        device = DeviceInfo.from_dict(doc["device"])
    except (AutotransposeError, TypeError, ValueError) as exc:
        raise StoreError(f"{source}: device: {exc}") from exc
    raw = doc.get("entries")
    if not isinstance(raw, list):
        raise StoreError(f"{source}: entries must be a list")
    entries = []
    seen: dict[tuple[int, ShapeClass], int] = {}
    for i, item in enumerate(raw):
        try:
            e = _entry(item, device.name)
        except (AutotransposeError, TypeError, ValueError, RecursionError) as exc:
            raise StoreError(f"{source}: entry {i}: {exc}") from exc
        k = (e.elem_bytes, e.shape_class)
        if k in seen:
            raise StoreError(
                f"{source}: entry {i} repeats entry {seen[k]} ({e.shape_class}, {e.elem_bytes} B)"
            )
        seen[k] = i
        entries.append(e)
    return TuningFile(device, tuple(entries))


def _entry(item: Any, device_name: str) -> TunedEntry:
    if not isinstance(item, dict):
        raise TypeError(f"an entry is a JSON object, got {type(item).__name__}")
    keys = set(map(str, item))
    if keys - _ENTRY_KEYS:
        raise ValueError(f"unknown key(s) {sorted(keys - _ENTRY_KEYS)}")
    if _ENTRY_KEYS - _OPTIONAL_KEYS - keys:
        raise ValueError(f"missing key(s) {sorted(_ENTRY_KEYS - _OPTIONAL_KEYS - keys)}")
    cls = ShapeClass.parse(item["shape_class"])
    if not isinstance(item["config"], dict):
        raise TypeError("config must be a JSON object")
    config = KernelConfig.from_dict(item["config"])
    check_entry_fields(item["elem_bytes"], cls, config, item["template_version"])
    shape = item["shape"]
    if (
        not isinstance(shape, list)
        or len(shape) != 3
        or not all(type(x) is int and 1 <= x <= 1 << 40 for x in shape)
    ):
        raise ValueError(f"shape must be [batch, m, n] of positive ints, got {shape!r:.60}")
    if classify(*shape, cls.vec) != cls:
        raise ValueError(f"shape {shape} is not in class {cls}")
    dtype = item.get("dtype")
    if dtype is not None and (not isinstance(dtype, str) or not _DTYPE.fullmatch(dtype)):
        raise ValueError(f"dtype {dtype!r:.40} is not a dtype name")
    measured_at = _timestamp(item["measured_at"], "measured_at")
    return TunedEntry(
        device=device_name,
        elem_bytes=item["elem_bytes"],
        shape_class=cls,
        config=config,
        gbps=_finite(item["gbps"], "gbps"),
        copy_gbps=_finite(item["copy_gbps"], "copy_gbps"),
        ratio=_finite(item["ratio"], "ratio"),
        template_version=item["template_version"],
        stale=item["template_version"] != _current_version(config),
        updated_at=measured_at,
        shape=(shape[0], shape[1], shape[2]),
        dtype=dtype,
        measured_at=measured_at,
    )


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    x = float(value)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return x


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in a tuning file")


def import_into(store: Store, data: TuningFile | Mapping[str, Any] | str | os.PathLike[str]) -> int:
    """Import a tuning file (a path, a decoded document or a TuningFile) in one transaction.

    Every entry is validated before anything is written; returns the number of entries.
    """
    if isinstance(data, TuningFile):
        tf, source = data, "<TuningFile>"
    elif isinstance(data, Mapping):
        tf, source = parse(data), "<document>"
    else:
        tf, source = load(data), str(data)
    return store.import_entries(tf.device, tf.entries, source)

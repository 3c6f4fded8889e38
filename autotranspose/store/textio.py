"""Tuning results as text: one JSON file per GPU model, made to be read, diffed and shipped.

``tuning_db/<DeviceInfo.slug>.json`` holds::

    {"format": "autotranspose-tuning/1",
     "device": {...DeviceInfo.to_dict()...},
     "entries": [{"elem_bytes": 4, "shape_class": "1x8192x8192/v4", "shape": [1, 8192, 8192],
                  "config": {...KernelConfig.to_dict()...}, "gbps": ..., "copy_gbps": ...,
                  "ratio": ..., "template_version": "...", "measured_at": "ISO 8601",
                  "dtype": "float32", "source": "measured",
                  "problem": "cast:bf16_e4m3"}, ...]}

``dtype``, ``source`` and ``problem`` are optional; ``source`` is written only for a first
call's result ("measured", see ``autotranspose.dispatch.winners``): an entry without it is a tuned
one, so files of tuned results read and write as they always did. ``problem`` is written only
for a cast-transpose's result (`kinds.cast.problem`: its pair, "+both" where the same-order
output is written too) and an in-place transpose's ("inplace", "inplace:square"): an entry
without it is a transpose's, and its config must be neither; a cast's config must be its
problem's pair, an in-place one an in-place config (`store.untrusted.check_problem`).

Keys are sorted, entries sorted by (element size, shape class, problem) and numbers rounded, so
re-exporting unchanged results gives the same bytes. A file is untrusted input: :func:`load`
reads only a regular file, and no more than MAX_FILE_BYTES of it; :func:`parse` checks every
field (configs through ``KernelConfig.from_dict``, the device through ``DeviceInfo.from_dict``,
every number against what hardware can do, `bounds`) and names the entry at fault. A file with
one bad entry is refused whole, as a bad config always was: an import writes all entries or
none, and :func:`import_files` all files or none.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timezone
from pathlib import Path
from typing import Any

from ..errors import AutotransposeError, StoreError
from ..kernels.config import KernelConfig
from ..kernels.shapes import ShapeClass, shape_class as classify
from ..runtime.device import DeviceInfo
from . import bounds, hooks
from .entries import TunedEntry
from .store import Store
from .untrusted import DTYPE, check_entry_fields, check_source, timestamp

FORMAT = "autotranspose-tuning/1"
MAX_FILE_BYTES = 64 << 20
_ENTRY_KEYS = frozenset(
    {
        "elem_bytes",
        "shape_class",
        "shape",
        "config",
        "gbps",
        "copy_gbps",
        "ratio",
        "template_version",
        "measured_at",
        "dtype",
        "source",
        "problem",
    }
)
_OPTIONAL_KEYS = frozenset({"dtype", "source", "problem"})


@dataclass(frozen=True)
class TuningFile:
    """The contents of one tuning file: a GPU model and its best entries."""

    device: DeviceInfo
    entries: tuple[TunedEntry, ...]
    source: str = field(default="<document>", compare=False)  # names the file in messages


# --- out ----------------------------------------------------------------------------------------
def document(device: DeviceInfo, entries: Iterable[TunedEntry]) -> dict[str, Any]:
    """The JSON document (a dict) of one device's entries."""
    rows = []
    for e in sorted(entries, key=lambda e: (e.elem_bytes, e.shape_class, e.problem)):
        if e.device != device.name:
            raise StoreError(f"entry {e.shape_class} belongs to {e.device!r}, not {device.name!r}")
        shape = e.shape or (e.shape_class.batch, e.shape_class.m, e.shape_class.n)
        row = {
            "elem_bytes": e.elem_bytes,
            "shape_class": str(e.shape_class),
            "shape": list(shape),
            "config": e.config.to_dict(),
            "gbps": round(e.gbps, bounds.GBPS_DECIMALS),
            "copy_gbps": round(e.copy_gbps, bounds.GBPS_DECIMALS),
            "ratio": round(e.ratio, bounds.RATIO_DECIMALS),
            "template_version": e.template_version,
            "measured_at": (e.measured_at or e.updated_at).astimezone(timezone.utc).isoformat(),
        }
        if e.dtype:
            row["dtype"] = e.dtype
        if e.source != "tuned":
            row["source"] = e.source
        if e.problem:
            row["problem"] = e.problem
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
        try:
            tmp.write_text(dumps(doc), encoding="utf-8")
            tmp.replace(path)  # a reader never sees half a file
        except OSError:
            with contextlib.suppress(OSError):  # a full disk leaves no half file of ours behind
                tmp.unlink()
            raise
        written.append(path)
    return written


# --- in -----------------------------------------------------------------------------------------
_NOTHING = "nothing was imported"
_GIVE_A_FILE = "give the path of a tuning file, as `autotranspose export -o FILE` writes one"
_FIX_ENTRY = "correct or delete that entry (a file is imported whole or not at all)"


def _refused(source: str, problem: str, fix: str) -> StoreError:
    return StoreError(f"{source}: {problem}; {_NOTHING}: {fix}")


def load(path: str | os.PathLike[str]) -> TuningFile:
    """Read and validate one tuning file."""
    p = Path(path)
    return loads(_read(p), source=str(p))


def _read(p: Path) -> str:
    """The text of `p`, a regular file of at most MAX_FILE_BYTES.

    Anything else is refused before it is opened (a FIFO without a writer blocks open() and
    read() forever, /dev/zero never ends, opening a device can act on it), and again on the
    open descriptor, in case the path changed in between. The read itself stops past the cap:
    st_size can be wrong (/proc) or the file can grow while it is read.
    """
    try:
        _check_regular(p, os.stat(p).st_mode)
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            _check_regular(p, st.st_mode)
            data = b"" if st.st_size > MAX_FILE_BYTES else f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise _refused(str(p), f"cannot read it ({exc.strerror or exc})", _GIVE_A_FILE) from exc
    if st.st_size > MAX_FILE_BYTES or len(data) > MAX_FILE_BYTES:
        too_large = f"larger than {MAX_FILE_BYTES >> 20} MiB, not a tuning file"
        raise _refused(str(p), too_large, _GIVE_A_FILE)
    try:
        return data.decode("utf-8-sig")  # editors on Windows save UTF-8 with a byte-order mark
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 text ({exc.reason} at byte {exc.start})"
        raise _refused(str(p), problem, _GIVE_A_FILE) from exc


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_regular(p: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "a special file")
        raise StoreError(f"{p} is {kind}, not a regular file; {_NOTHING}: {_GIVE_A_FILE}")


def loads(text: str, source: str = "<string>") -> TuningFile:
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise _refused(source, f"not a JSON tuning file ({exc})", _GIVE_A_FILE) from exc
    return parse(doc, source)


def parse(doc: Any, source: str = "<document>") -> TuningFile:
    """Validate a decoded document; any fault raises StoreError naming `source` and the entry."""
    if not isinstance(doc, Mapping):
        problem = f"a tuning file is a JSON object, got {type(doc).__name__}"
        raise _refused(source, problem, _GIVE_A_FILE)
    unknown = sorted(set(map(str, doc)) - {"format", "device", "entries"})
    if unknown:
        raise _refused(source, f"unknown top-level key(s) {unknown}", "remove them")
    if doc.get("format") != FORMAT:
        raise _refused(
            source,
            f"format is {doc.get('format')!r:.60}, expected {FORMAT!r}",
            "a newer autotranspose may read it; upgrade, or export the file again with this one",
        )
    try:
        if not isinstance(doc.get("device"), dict):
            raise TypeError("device must be a JSON object")
        device = DeviceInfo.from_dict(doc["device"])
        bounds.check_device(device)
    except (AutotransposeError, TypeError, ValueError) as exc:
        raise _refused(source, f"device: {exc}", "correct the device in that file") from exc
    raw = doc.get("entries")
    if not isinstance(raw, list):
        raise _refused(source, "entries must be a list", _GIVE_A_FILE)
    entries = []
    seen: dict[tuple[int, str, str], int] = {}
    for i, item in enumerate(raw):
        try:
            e = _entry(item, device.name)
        except (AutotransposeError, TypeError, ValueError, RecursionError) as exc:
            raise _refused(source, f"entry {i}: {exc}", _FIX_ENTRY) from exc
        k = e.key
        if k in seen:
            what = f", {e.problem}" if e.problem else ""
            repeats = f"entry {i} repeats entry {seen[k]} ({e.shape_class}, {e.elem_bytes} B{what})"
            raise _refused(source, repeats, "delete one of them")
        seen[k] = i
        entries.append(e)
    return TuningFile(device, tuple(entries), source)


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
    problem = item.get("problem", "")
    check_entry_fields(item["elem_bytes"], cls, config, item["template_version"], problem)
    shape = item["shape"]
    if (
        not isinstance(shape, list)
        or len(shape) != 3
        or not all(type(x) is int and 1 <= x <= 1 << 40 for x in shape)
    ):
        raise ValueError(f"shape must be [batch, m, n] of positive ints, got {shape!r:.60}")
    if classify(*shape, cls.vec) != cls:
        raise ValueError(f"shape {shape} is not in class {cls}")
    bounds.check_shape((shape[0], shape[1], shape[2]), item["elem_bytes"])
    dtype = item.get("dtype")
    if dtype is not None and (not isinstance(dtype, str) or not DTYPE.fullmatch(dtype)):
        raise ValueError(f"dtype {dtype!r:.40} is not a dtype name")
    measured_at = timestamp(item["measured_at"], "measured_at")
    gbps = bounds.check_bandwidth("gbps", item["gbps"])
    copy_gbps = bounds.check_bandwidth("copy_gbps", item["copy_gbps"])
    return TunedEntry(
        device=device_name,
        elem_bytes=item["elem_bytes"],
        shape_class=cls,
        config=config,
        gbps=gbps,
        copy_gbps=copy_gbps,
        ratio=bounds.check_ratio(item["ratio"], gbps, copy_gbps),
        template_version=item["template_version"],
        stale=not hooks.is_current(item["template_version"], config, problem),
        updated_at=measured_at,
        shape=(shape[0], shape[1], shape[2]),
        dtype=dtype,
        measured_at=measured_at,
        source=check_source(item.get("source", "tuned")),
        problem=problem,
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in a tuning file")


Source = TuningFile | Mapping[str, Any] | str | os.PathLike[str]


def import_into(store: Store, data: Source) -> int:
    """Import a tuning file (a path, a decoded document or a TuningFile) in one transaction.

    Every entry is validated before anything is written; returns the number of entries.
    """
    return import_files(store, [data])[0]


def import_files(store: Store, sources: Sequence[Source]) -> list[int]:
    """Import several tuning files: every file is read and validated first, then all are
    written in one transaction, so one bad file leaves the database as it was. Returns the
    number of entries of each."""
    files = [_tuning_file(s) for s in sources]
    return store.import_many([(tf.device, tf.entries, tf.source) for tf in files])


def _tuning_file(data: Source) -> TuningFile:
    if isinstance(data, TuningFile):
        return data
    if isinstance(data, Mapping):
        return parse(data)
    return load(data)

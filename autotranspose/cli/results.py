"""The commands over tuned results, none of which needs a GPU: `show` (stored and shipped
results per GPU model), `lookup` (the kernel a call would use, and where it comes from; local
GPU 0 is asked its model only without --device), `export` and `import` (JSON files, one GPU
model each).
"""

from __future__ import annotations

import argparse
import json
import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import AutotransposeError, StoreError
from ..kernels.shapes import max_vec, parse_dims, parse_shape, shape_class
from ..plans.dtypes import element_type
from ..plans.permute import plan_permute
from .devices import local_device
from .output import PROG, UsageError, gbps_text, one_line, pct_text, shape_text, table
from .parser import parse_axes, parse_option
from .stores import existing_store, open_store

if TYPE_CHECKING:
    from ..store import Store


# Which dtypes share a kernel of each element size (kernels are keyed by size, not dtype).
DTYPES_BY_SIZE = {
    1: "int8/uint8/bool",
    2: "float16/bfloat16/int16",
    4: "float32/int32",
    8: "float64/int64/complex64",
    16: "complex128",
}


def _dtypes(e: Any) -> str:
    """What an entry serves: the dtypes of its element size, or a cast's problem (its pair,
    "+both" where the same-order output is written too)."""
    return e.problem or DTYPES_BY_SIZE.get(e.elem_bytes, "")


def _entry_dict(e: Any, source: str) -> dict[str, Any]:
    return {
        "device": e.device,
        "source": source,
        "elem_bytes": e.elem_bytes,
        "dtypes": _dtypes(e),
        "problem": e.problem,
        "shape_class": str(e.shape_class),
        "config_key": e.config.key,
        "config": e.config.to_dict(),
        "gbps": e.gbps,
        "copy_gbps": e.copy_gbps,
        "ratio": e.ratio,
        "template_version": e.template_version,
        "stale": e.stale,
        "updated_at": e.updated_at.isoformat() if e.updated_at is not None else None,
    }


def _shipped_entries(device: str | None) -> list[Any]:
    """Results shipped in the package's tuning_db/ (for `device`, or for every GPU model)."""
    from ..dispatch import lookup
    from ..store import textio

    if device is not None:
        return list(lookup.shipped(device))
    directory = lookup.tuning_db_dir()
    names = []
    for path in sorted(directory.glob("*.json")) if directory else []:
        try:
            names.append(textio.load(path).device.name)
        except AutotransposeError as exc:
            warnings.warn(
                f"ignoring shipped results {path.name}: {exc}", RuntimeWarning, stacklevel=2
            )
    return [e for name in names for e in lookup.shipped(name)]


def cmd_show(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ..store import BadRowWarning

    store = existing_store(args.db)
    entries: list[tuple[str, Any]] = []
    if store is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BadRowWarning)  # listed below, once each
            entries = [
                (e.source, e) for e in store.entries(device_name=args.device, include_stale=True)
            ]
        for problem in store.problems(args.device):
            print(f"{PROG}: skipped a bad row: {problem}; {problem.fix}", file=err)
    entries += [("shipped", e) for e in _shipped_entries(args.device)]
    tuned_devices = {e.device for source, e in entries if source != "shipped"}
    entries.sort(
        key=lambda se: (
            se[1].device not in tuned_devices,
            se[1].device,
            se[0] == "shipped",
            se[1].elem_bytes,
            se[1].problem,
            se[1].shape_class,
        )
    )
    if args.json:
        json.dump([_entry_dict(e, source) for source, e in entries], out, indent=2)
        out.write("\n")
        return 0
    if not entries:
        where = f" for {args.device!r}" if args.device else ""
        db = store.display if store is not None else "the default database (none yet)"
        print(f"no tuned results{where} in {db} or shipped; run `autotranspose tune`", file=err)
        return 0
    stale = any(e.stale for _, e in entries)
    headers = ["source", "elem", "dtypes", "class", "config", "GB/s", "% copy"]
    headers += ["note"] if stale else []
    for device in dict.fromkeys(e.device for _, e in entries):
        rows = []
        for source, e in ((s, x) for s, x in entries if x.device == device):
            rows.append(
                [
                    source,
                    f"s{e.elem_bytes}",
                    _dtypes(e),
                    str(e.shape_class),
                    e.config.key,
                    gbps_text(e.gbps),
                    pct_text(e.ratio),
                ]
                + (["stale" if e.stale else ""] if stale else [])
            )
        print(device, file=out)
        print(table(headers, rows), file=out)
        print(file=out)
    if stale:
        print(
            "stale: measured with other kernel templates; not served; tune again to refresh",
            file=out,
        )
    if any(source == "measured" for source, _ in entries):
        print(
            "measured: a first call's winner among a few candidates; `tune` replaces it", file=out
        )
    return 0


def _lookup_device(args: argparse.Namespace, store: Store | None) -> tuple[Any, str]:
    """The GPU model lookup answers for: --device NAME, else local GPU 0."""
    if args.device:
        return args.device, args.device
    try:
        device = local_device(0)
    except AutotransposeError as exc:
        known = ", ".join(repr(d.name) for d in store.devices()) if store else ""
        raise UsageError(
            f"no --device NAME given and no local GPU to ask ({one_line(exc)}); "
            f"devices in the database: {known or 'none'}"
        ) from exc
    return device, device.name


def cmd_lookup(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ..dispatch import lookup

    if args.axes is not None:
        return _lookup_permute(args, out)
    b, m, n = parse_option("--shape", parse_shape, args.shape)
    et = parse_option("--dtype", element_type, args.dtype)
    if args.conjugate and not et.conjugable:
        raise UsageError(f"--conjugate needs complex64 or complex128, not {et.name}")
    store = existing_store(args.db)
    device, device_name = _lookup_device(args, store)
    cls = shape_class(b, m, n, max_vec(et.size, m, n))
    choice = lookup.choose(device, et.size, cls, store=store, conjugate=args.conjugate)
    info = {
        "device": device_name,
        "dtype": et.name,
        "elem_bytes": et.size,
        "shape": [b, m, n],
        **_choice_info(cls, choice),
    }
    call = f"{et.name} {shape_text((b, m, n))} -> class {cls}"
    return _print_choice(args, out, info, device_name, call, choice)


def _choice_info(cls: Any, choice: Any) -> dict[str, Any]:
    return {
        "shape_class": str(cls),
        "source": choice.source,
        "from_shape_class": str(choice.shape_class) if choice.shape_class is not None else None,
        "config_key": choice.config.key,
        "config": choice.config.to_dict(),
        "gbps": choice.gbps,
        "ratio": choice.ratio,
    }


def _print_choice(
    args: argparse.Namespace,
    out: TextIO,
    info: dict[str, Any],
    device_name: str,
    call: str,
    choice: Any,
    head: Sequence[str] = (),
) -> int:
    """`lookup`'s answer: JSON, the CUDA source, or a few aligned lines after `head`."""
    from ..kernels.codegen import render

    if args.json:
        if args.source:
            info["cuda_source"] = render(choice.config)
        json.dump(info, out, indent=2)
        out.write("\n")
        return 0
    if args.source:
        out.write(render(choice.config))
        return 0
    where = {
        "tuned": "tuned for this class",
        "nearest": f"tuned for the nearest class {info['from_shape_class']}",
        "shipped": f"shipped results ({info['from_shape_class']})",
        "measured": "measured on a first call of this class",
        "default": "untuned default",
    }.get(choice.source, choice.source)
    rows = [
        ["device", device_name],
        ["call", call],
        ["config", choice.config.key],
        ["from", where],
        [
            "speed",
            f"{gbps_text(choice.gbps)} GB/s, {pct_text(choice.ratio)} of copy"
            if choice.gbps
            else "-",
        ],
    ]
    for line in head:
        print(line, file=out)
    w = max(len(r[0]) for r in rows)
    for k, v in rows:
        print(f"{k.ljust(w)}  {v}", file=out)
    return 0


def _lookup_permute(args: argparse.Namespace, out: TextIO) -> int:
    """`lookup --shape AxBxCxD --axes ...`: the permute plan, and which kernel serves its pass
    (`lookup.permute_kernel`: for a transpose pass, the config transpose() would choose for
    it on --device)."""
    from dataclasses import asdict

    from ..dispatch import lookup

    shape = parse_option("--shape", parse_dims, args.shape)
    et = parse_option("--dtype", element_type, args.dtype)
    if args.conjugate:
        raise UsageError("--conjugate is for transposes; permute (--axes) has none")
    plan = plan_permute(shape, parse_axes(args.axes), et.size)
    info: dict[str, Any] = {
        "dtype": et.name,
        "elem_bytes": et.size,
        "shape": list(shape),
        "axes": list(plan.axes),
        "out_shape": list(plan.out_shape),
        "case": plan.case,
        "launches": plan.launches,
        "plan": plan.describe(),
        "passes": [asdict(p) for p in plan.passes],
        "alternatives": [asdict(p) for p in plan.alternatives],  # a first call times them too
    }
    if lookup.chooses_per_device(plan):
        store = existing_store(args.db)
        device, device_name = _lookup_device(args, store)
        served = lookup.permute_kernel(plan, device, store=store)
        p, cls, choice = served.pass_, served.shape_class, served.choice
        assert p is not None and choice is not None
        info.update(device=device_name, **_choice_info(cls, choice))
        call = f"{p.elem_bytes}-byte {shape_text((p.batch, p.m, p.n))} -> class {cls}"
        return _print_choice(
            args, out, info, device_name, call, choice, plan.describe().splitlines()
        )
    served = lookup.permute_kernel(plan)
    info["kernel"] = served.kernel
    if args.json:
        if args.source:
            info["cuda_source"] = served.source()
        json.dump(info, out, indent=2)
        out.write("\n")
    elif args.source:
        out.write(served.source())
    else:
        print(plan.describe(), file=out)
        print(f"kernel  {served.kernel}", file=out)
    return 0


def cmd_export(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ..store import textio

    if args.all_devices:
        return _export_all(args, err)
    store = open_store(args.db, readonly=True)
    text = textio.dumps(textio.export(store, device_name=args.device))
    if args.output in (None, "-"):
        out.write(text)
    else:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as exc:
            raise _unwritable(args.output, exc, "a file") from exc
        print(f"wrote {args.output}", file=err)
    return 0


def _unwritable(output: str, exc: OSError, what: str) -> StoreError:
    """An export that could not be written: which path, why, and what to give instead."""
    path = exc.filename if exc.filename is not None else output
    stdout = ", or leave out -o to write to stdout" if what == "a file" else ""
    return StoreError(
        f"cannot write {path}: {exc.strerror or exc}; nothing was exported: give -o {what} "
        f"you can write, on a disk with room{stdout}"
    )


def _export_all(args: argparse.Namespace, err: TextIO) -> int:
    """One ``<GPU model>.json`` per device into a directory: the files `import` reads."""
    from ..store import textio

    if args.device is not None:
        raise UsageError("give --all-devices or --device NAME, not both")
    if args.output in (None, "-"):
        raise UsageError(
            "--all-devices writes one file per GPU model: name a directory with -o DIR"
        )
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise UsageError(
            f"--all-devices writes one file per GPU model: {args.output} is not a directory; "
            "name a directory with -o DIR"
        )
    store = open_store(args.db, readonly=True)
    try:
        written = textio.dump(store, args.output)
    except OSError as exc:
        raise _unwritable(args.output, exc, "a directory") from exc
    if not written:
        raise StoreError(f"no tuned results in {store.display} to export; run `autotranspose tune`")
    for path in written:
        print(f"wrote {path}", file=err)
    return 0


def cmd_import(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ..store import textio

    # Every file is read and checked before anything is written, then all are written in one
    # transaction: `import good.json bad.json` leaves the database as it was.
    files = [textio.load(path) for path in args.paths]
    store = open_store(args.db)
    counts = textio.import_files(store, files)
    for path, tf, count in zip(args.paths, files, counts, strict=True):
        print(f"imported {count} entries of {tf.device.name} from {path}", file=err)
    return 0

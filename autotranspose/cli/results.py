"""The command line: tune, show, lookup, export, import, devices, db upgrade, bench.

`show`, `lookup`, `export`, `import` and `db upgrade` need no GPU and no pycuda; `tune`,
`devices` and `bench` import the GPU code only when they run. Every error autotranspose raises
on purpose, and every bad argument, prints as one line ``autotranspose: error: ...`` and exits
non-zero.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any, NoReturn, TextIO, TypeVar

from ._version import __version__
from .config import max_vec
from .device import check_name
from .dtypes import element_type
from .errors import (
    AutotransposeError,
    DeviceError,
    ShapeError,
    StoreError,
    TuningError,
    UnsupportedDtypeError,
)
from .plan import normalize_axes
from .shapes import Layout, parse_dims, parse_shape, pass_vec, shape_class

if TYPE_CHECKING:
    from .store import Store
    from .tuner import PermuteTarget, TrialReport, TuneResult

PROG = "autotranspose"
# Which dtypes share a kernel of each element size (kernels are keyed by size, not dtype).
_DTYPES_BY_SIZE = {
    1: "int8/uint8/bool",
    2: "float16/bfloat16/int16",
    4: "float32/int32",
    8: "float64/int64/complex64",
    16: "complex128",
}

# make_objective(dtype, shape, device_index, conjugate), and layout=Layout for a permute's
# strided pass (`tune --axes`; only then, so a factory for plain shapes need not take it)
ObjectiveFactory = Callable[..., Any]
_T = TypeVar("_T")


class UsageError(Exception):
    """A bad command line; printed as one line like any other error."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would print usage and exit 2
        raise UsageError(message)


# --- argument types ----------------------------------------------------------------------------
def _split(values: Sequence[str]) -> list[str]:
    """Items given as `a,b c` (commas, spaces or both)."""
    return [item for v in values for item in v.split(",") if item.strip()]


def _option(option: str, parse: Callable[[str], _T], text: str) -> _T:
    """One value of `option`; a bad one is a usage error naming the option, as argparse's."""
    try:
        return parse(text)
    except (ShapeError, UnsupportedDtypeError) as exc:
        raise UsageError(f"argument {option}: {exc}") from None


def _shapes(values: Sequence[str], option: str = "--shapes") -> list[tuple[int, int, int]]:
    return [_option(option, parse_shape, v) for v in _split(values)]


def _dtypes(values: Sequence[str], option: str = "--dtypes") -> list[str]:
    return [_option(option, element_type, v.strip()).name for v in _split(values)]


def _device_name(text: str) -> str:
    """A GPU model name, by the rule the database and imported files follow."""
    try:
        return check_name(text)
    except DeviceError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _shape_text(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))


# --- output helpers -------------------------------------------------------------------------------
def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table; numbers right-aligned."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [
        all(_is_number(r[i]) for r in cells[1:]) and len(cells) > 1 for i in range(len(headers))
    ]
    lines = []
    for j, r in enumerate(cells):
        parts = [
            c.rjust(w) if num and j else c.ljust(w)
            for c, w, num in zip(r, widths, numeric, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _is_number(s: str) -> bool:
    try:
        float(s.rstrip("%"))
    except ValueError:
        return s in ("", "-")
    return True


def _pct(ratio: float | None) -> str:
    return "-" if not ratio else f"{100 * ratio:.1f}%"


def _gbps(x: float | None) -> str:
    return "-" if not x else f"{x:.1f}"


class ProgressBar:
    """A one-line bar on a terminal; on anything else, nothing until the summary."""

    def __init__(self, stream: TextIO, label: str, width: int = 24) -> None:
        self.stream = stream
        self.label = label
        self.width = width
        self.live = bool(getattr(stream, "isatty", lambda: False)())
        self._drawn = False

    def __call__(self, report: TrialReport) -> None:
        if not self.live:
            return
        total = max(report.total, 1)
        done = min(report.done, total)
        fill = round(self.width * done / total)
        mark = "r" if report.reused else ("." if report.measurement.ok else "x")
        line = (
            f"\r{self.label} [{'#' * fill}{'-' * (self.width - fill)}] {done}/{total} "
            f"best {report.best_gbps:.0f} GB/s  {mark} {report.config.key}"
        )
        self.stream.write(line[:160].ljust(100))
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()


# --- commands -------------------------------------------------------------------------------------
def _open_store(url: str | None, *, readonly: bool = False) -> Store:
    """The database to write (tune, import) or, `readonly`, to read: reads never create or
    migrate one."""
    from .store import Store

    return Store.open(url, readonly=readonly)


def _gpu_objective(
    dtype: str, shape: tuple[int, int, int], device: int, conjugate: bool,
    layout: Layout | None = None,
) -> Any:  # fmt: skip
    from .worker import GpuObjective

    return GpuObjective(dtype, shape, device, conjugate=conjugate, layout=layout)


def cmd_tune(
    args: argparse.Namespace, out: TextIO, err: TextIO, make_objective: ObjectiveFactory
) -> int:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the bar and the table say it all
    if args.axes is not None:
        return _tune_permutes(args, out, err, make_objective)
    shapes = _shapes(args.shapes)
    dtypes = _dtypes(args.dtypes)
    if args.conjugate:
        bad = [d for d in dtypes if not element_type(d).conjugable]
        if bad:
            raise UsageError(f"--conjugate needs complex64 or complex128, not {', '.join(bad)}")
    if args.devices is not None and args.device is not None:
        raise UsageError(
            "--device and --devices cannot be used together: --device 2 tunes on GPU 2, "
            "--devices 0,2 or --devices all tune on several GPUs at once"
        )
    device = args.device if args.device is not None else 0
    if args.devices is not None:
        from . import multigpu

        indices = multigpu.resolve_devices(args.devices, multigpu.local_device_count())
        if len(indices) > 1:
            return _tune_devices(args, indices, shapes, dtypes, out, err, make_objective)
        device = indices[0]
    store = _open_store(args.db)
    results: list[TuneResult] = []
    failed = 0
    started = time.monotonic()
    for dtype in dtypes:
        for shape in shapes:
            label = f"{dtype} {_shape_text(shape)}"
            result = _tune_case(args, store, device, dtype, shape, label, err, make_objective)
            if result is None:
                failed += 1
            else:
                results.append(result)
    if results:
        print(table(_RESULT_HEADERS, [_result_row(r) for r in results]), file=out)
    print(f"tuned {len(results)} of {len(results) + failed} in "
          f"{time.monotonic() - started:.1f}s; database {store.display}", file=err)  # fmt: skip
    return 1 if failed else 0


def _tune_case(
    args: argparse.Namespace, store: Store, device: int, dtype: str, shape: tuple[int, int, int],
    label: str, err: TextIO, make_objective: ObjectiveFactory, layout: Layout | None = None,
    max_vector: int | None = None,
) -> TuneResult | None:  # fmt: skip
    """Tune one case on GPU `device` with a progress bar; None (and a line saying why) when
    no config ran correctly."""
    from .tuner import tune

    extra = {"layout": layout} if layout is not None else {}
    objective = make_objective(dtype, shape, device, args.conjugate, **extra)
    bar = ProgressBar(err, label)
    try:
        result = tune(
            dtype, shape, objective=objective, store=store, device=objective.device,
            trials=args.trials, timeout=args.timeout, patience=args.patience,
            sampler=args.sampler, seed=args.seed, batch=args.batch, conjugate=args.conjugate,
            progress=bar, device_index=device, layout=layout, max_vector=max_vector,
        )  # fmt: skip
    except TuningError as exc:
        bar.close()
        print(f"{PROG}: {label}: {_one_line(exc)}", file=err)
        return None
    finally:
        close = getattr(objective, "close", None)
        if close is not None:
            close()
    bar.close()
    if not bar.live:
        print(_result_line(result, label), file=err)
    return result


def _tune_permutes(
    args: argparse.Namespace, out: TextIO, err: TextIO, make_objective: ObjectiveFactory
) -> int:
    """`tune --shapes 64x256x56x56 --axes 0,2,3,1`: plan each permute (contiguous input) and
    tune its transpose pass like a transpose of its class, measured on the pass's strides;
    a copy, packed or gather pass gets one line saying there is nothing to tune. Everything is
    checked, and every permute planned, before any GPU work."""
    targets = _permute_targets(args)
    device = args.device if args.device is not None else 0
    store = _open_store(args.db) if any(t.shape is not None for _, _, t in targets) else None
    axes = ",".join(map(str, targets[0][2].plan.axes)) if targets else ""
    rows: list[list[str]] = []
    failed = skipped = 0
    started = time.monotonic()
    for dtype, shape, target in targets:
        label = f"{dtype} {_shape_text(shape)} axes {axes}"
        if target.shape is None or store is None:
            print(f"{label}: {target.describe()}; {target.untuned}", file=out)
            skipped += 1
            continue
        max_vector = target.shape_class.vec if target.shape_class is not None else None
        result = _tune_case(args, store, device, target.dtype, target.shape, label, err,
                            make_objective, target.layout, max_vector)  # fmt: skip
        if result is None:
            failed += 1
            continue
        strides = result.layout.text if result.layout is not None else "contiguous"
        rows.append([dtype, _shape_text(shape), axes, f"s{element_type(result.dtype).size}",
                     _shape_text(result.shape), strides, *_result_row(result)[2:]])  # fmt: skip
    if rows:
        print(table(_PERMUTE_HEADERS, rows), file=out)
    where = f"; database {store.display}" if store is not None else ""
    print(f"tuned {len(rows)} of {len(rows) + failed} transpose passes ({skipped} of "
          f"{len(targets)} permutes had nothing to tune) in "
          f"{time.monotonic() - started:.1f}s{where}", file=err)  # fmt: skip
    return 1 if failed else 0


def _permute_targets(
    args: argparse.Namespace,
) -> list[tuple[str, tuple[int, ...], PermuteTarget]]:
    """What `tune --axes` tunes, per dtype and shape; every refusal before any GPU work."""
    from .tuner import permute_target

    if args.conjugate:
        raise UsageError("--conjugate is for transposes; permute (--axes) has none")
    if args.devices is not None:
        raise UsageError(
            "--axes tunes a permute's pass on one GPU: give --device INDEX, not --devices"
        )
    shapes = [_option("--shapes", parse_dims, v) for v in _split(args.shapes)]
    dtypes = _dtypes(args.dtypes)
    axes = _axes(args.axes)
    for shape in shapes:  # every shape must take these axes
        normalize_axes(axes, len(shape))
    return [(d, s, permute_target(d, s, axes)) for d in dtypes for s in shapes]


_RESULT_HEADERS = ["dtype", "shape", "class", "config", "GB/s", "% copy",
                   "trials/meas/reuse/fail", "time", "stop"]  # fmt: skip
# tune --axes: the permute, its pass's element size and (batch, m, n) ("shape"), and its
# strides (ld_in,ld_out,bs_in,bs_out in elements, or contiguous)
_PERMUTE_HEADERS = ["dtype", "permute", "axes", "elem", "shape", "strides",
                    *_RESULT_HEADERS[2:]]  # fmt: skip


def _result_row(r: TuneResult) -> list[str]:
    return [
        r.dtype, _shape_text(r.shape), str(r.shape_class), r.config.key,
        _gbps(r.measurement.gbps), _pct(r.measurement.ratio),
        f"{r.trials}/{r.measured}/{r.reused}/{r.failed}", f"{r.elapsed_s:.1f}s", r.stopped_by,
    ]  # fmt: skip


def _result_line(r: TuneResult, label: str = "") -> str:
    """One case's summary, after `label` (a permute's) where that is not its own case."""
    case = f"{r.dtype} {_shape_text(r.shape)}"
    return (
        f"{case if label in ('', case) else f'{label}: {case}'}: {r.trials} trials "
        f"({r.measured} measured, "
        f"{r.reused} reused, {r.failed} failed), best {r.measurement.gbps:.1f} GB/s, "
        f"stopped by {r.stopped_by}"
    )


def _tune_devices(
    args: argparse.Namespace,
    indices: tuple[int, ...],
    shapes: list[tuple[int, int, int]],
    dtypes: list[str],
    out: TextIO,
    err: TextIO,
    make_objective: ObjectiveFactory,
) -> int:
    """`tune --devices`: one process per GPU, a line per case and GPU as each ends, then
    the table and which GPUs failed."""
    from .multigpu import CaseFailure, tune_devices
    from .tuner import TrialReport

    store = _open_store(args.db)
    status = _DevicesLine(err, indices)
    started = time.monotonic()

    def progress(index: int, event: Any) -> None:
        if isinstance(event, TrialReport):
            status.update(index, event)
            return
        status.clear()
        if isinstance(event, CaseFailure):
            print(f"{PROG}: GPU {index}: {event.dtype} {_shape_text(event.shape)}: "
                  f"{event.error}", file=err)  # fmt: skip
        else:
            print(f"GPU {index}: {_result_line(event)}", file=err)

    runs = tune_devices(
        [(d, s) for d in dtypes for s in shapes], devices=indices, db=store.url,
        trials=args.trials, timeout=args.timeout, patience=args.patience, sampler=args.sampler,
        seed=args.seed, batch=args.batch, conjugate=args.conjugate,
        make_objective=None if make_objective is _gpu_objective else make_objective,
        progress=progress,
    )  # fmt: skip
    status.clear()
    rows = [[str(run.index), *_result_row(r)] for run in runs for r in run.results]
    if rows:
        print(table(["gpu", *_RESULT_HEADERS], rows), file=out)
    for run in runs:
        if run.error is not None:
            name = f" ({run.device})" if run.device else ""
            print(f"{PROG}: GPU {run.index}{name} failed: {run.error}", file=err)
    done = sum(len(run.results) for run in runs)
    print(f"tuned {done} of {len(dtypes) * len(shapes) * len(runs)} (case, GPU) pairs on GPUs "
          f"{', '.join(map(str, indices))} in {time.monotonic() - started:.1f}s; "
          f"database {store.display}", file=err)  # fmt: skip
    return 0 if all(run.ok for run in runs) else 1


class _DevicesLine:
    """On a terminal, one line with every GPU's progress; on anything else, nothing."""

    def __init__(self, stream: TextIO, indices: Sequence[int]) -> None:
        self.stream = stream
        self.live = bool(getattr(stream, "isatty", lambda: False)())
        self.parts = {i: f"GPU {i} starting" for i in indices}
        self._drawn = False

    def update(self, index: int, r: TrialReport) -> None:
        if not self.live:
            return
        self.parts[index] = (
            f"GPU {index} {r.config.elem_bytes}B {r.done}/{r.total} best {r.best_gbps:.0f}"
        )
        self.stream.write("\r" + " | ".join(self.parts.values())[:160].ljust(100))
        self.stream.flush()
        self._drawn = True

    def clear(self) -> None:
        if self._drawn:
            self.stream.write("\r" + " " * 160 + "\r")
            self.stream.flush()
            self._drawn = False


def _entry_dict(e: Any, source: str) -> dict[str, Any]:
    return {
        "device": e.device,
        "source": source,
        "elem_bytes": e.elem_bytes,
        "dtypes": _DTYPES_BY_SIZE.get(e.elem_bytes, ""),
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
    from . import lookup
    from .store import textio

    if device is not None:
        return list(lookup.shipped(device))
    directory = lookup.tuning_db_dir()
    names = []
    for path in sorted(directory.glob("*.json")) if directory else []:
        try:
            names.append(textio.load(path).device.name)
        except AutotransposeError as exc:
            warnings.warn(f"ignoring shipped results {path.name}: {exc}", RuntimeWarning, stacklevel=2)
    return [e for name in names for e in lookup.shipped(name)]


def _existing_store(url: str | None) -> Store | None:
    """The database to read, or None when neither --db nor $AUTOTRANSPOSE_DB names one and
    the default file does not exist yet (nothing tuned). Opened read-only: never created or
    migrated; a database named but missing is an error saying how to create it."""
    from .store import ENV_VAR, Store, default_path

    if url is None and not os.environ.get(ENV_VAR) and not default_path().exists():
        return None
    return Store.open(url, readonly=True)


def cmd_show(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .store import BadRowWarning

    store = _existing_store(args.db)
    entries: list[tuple[str, Any]] = []
    if store is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BadRowWarning)  # listed below, once each
            entries = [(e.source, e) for e in store.entries(device_name=args.device, include_stale=True)]
        for problem in store.problems(args.device):
            print(f"{PROG}: skipped a bad row: {problem}; {problem.fix}", file=err)
    entries += [("shipped", e) for e in _shipped_entries(args.device)]
    tuned_devices = {e.device for source, e in entries if source != "shipped"}
    entries.sort(key=lambda se: (
        se[1].device not in tuned_devices, se[1].device, se[0] == "shipped", se[1].elem_bytes,
        se[1].shape_class,
    ))  # fmt: skip
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
            rows.append([
                source, f"s{e.elem_bytes}", _DTYPES_BY_SIZE.get(e.elem_bytes, ""),
                str(e.shape_class), e.config.key, _gbps(e.gbps), _pct(e.ratio),
            ] + (["stale" if e.stale else ""] if stale else []))  # fmt: skip
        print(device, file=out)
        print(table(headers, rows), file=out)
        print(file=out)
    if stale:
        print("stale: measured with other kernel templates; not served; tune again to refresh",
              file=out)  # fmt: skip
    if any(source == "measured" for source, _ in entries):
        print("measured: a first call's winner among a few candidates; `tune` replaces it",
              file=out)  # fmt: skip
    return 0


def _local_device(index: int) -> Any:
    from .compiler import list_devices

    devices = list_devices()
    if not 0 <= index < len(devices):
        raise UsageError(f"--device {index}: this machine has {len(devices)} GPU(s)")
    return devices[index]


def _lookup_device(args: argparse.Namespace, store: Store | None) -> tuple[Any, str]:
    """The GPU model lookup answers for: --device NAME, else local GPU 0."""
    if args.device:
        return args.device, args.device
    try:
        device = _local_device(0)
    except AutotransposeError as exc:
        known = ", ".join(repr(d.name) for d in store.devices()) if store else ""
        raise UsageError(
            f"no --device NAME given and no local GPU to ask ({_one_line(exc)}); "
            f"devices in the database: {known or 'none'}"
        ) from exc
    return device, device.name


def cmd_lookup(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from . import lookup

    if args.axes is not None:
        return _lookup_permute(args, out)
    b, m, n = _option("--shape", parse_shape, args.shape)
    et = _option("--dtype", element_type, args.dtype)
    if args.conjugate and not et.conjugable:
        raise UsageError(f"--conjugate needs complex64 or complex128, not {et.name}")
    store = _existing_store(args.db)
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
    call = f"{et.name} {_shape_text((b, m, n))} -> class {cls}"
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
    args: argparse.Namespace, out: TextIO, info: dict[str, Any], device_name: str, call: str,
    choice: Any, head: Sequence[str] = (),
) -> int:  # fmt: skip
    """`lookup`'s answer: JSON, the CUDA source, or a few aligned lines after `head`."""
    from .codegen import render

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
            f"{_gbps(choice.gbps)} GB/s, {_pct(choice.ratio)} of copy" if choice.gbps else "-",
        ],
    ]
    for line in head:
        print(line, file=out)
    w = max(len(r[0]) for r in rows)
    for k, v in rows:
        print(f"{k.ljust(w)}  {v}", file=out)
    return 0


def _axes(text: str) -> tuple[int, ...]:
    """`--axes 0,2,3,1` (commas or spaces; negative ones count from the end)."""
    items = [t for t in text.replace(",", " ").split() if t]
    try:
        return tuple(int(t) for t in items)
    except ValueError:
        raise UsageError(
            f"argument --axes: {text!r:.40} is not a list of axes; write a permutation like 0,2,3,1"
        ) from None


def _lookup_permute(args: argparse.Namespace, out: TextIO) -> int:
    """`lookup --shape AxBxCxD --axes ...`: the permute plan, and which kernel serves its pass
    (for a transpose pass, the config transpose() would choose for it on --device)."""
    from dataclasses import asdict

    from . import lookup
    from .codegen import (
        RUNS_KERNEL,
        gather_kernel_name,
        render_gather,
        render_packed,
        render_rows,
        row_kernel_name,
    )
    from .packed import packed_args
    from .plan import GATHER, PACKED, TRANSPOSE, plan_permute

    shape = _option("--shape", parse_dims, args.shape)
    et = _option("--dtype", element_type, args.dtype)
    if args.conjugate:
        raise UsageError("--conjugate is for transposes; permute (--axes) has none")
    plan = plan_permute(shape, _axes(args.axes), et.size)
    info: dict[str, Any] = {
        "dtype": et.name, "elem_bytes": et.size, "shape": list(shape), "axes": list(plan.axes),
        "out_shape": list(plan.out_shape), "case": plan.case, "launches": plan.launches,
        "plan": plan.describe(), "passes": [asdict(p) for p in plan.passes],
        "alternatives": [asdict(p) for p in plan.alternatives],  # a first call times them too
    }  # fmt: skip
    p = plan.passes[0] if plan.passes else None
    if p is not None and p.kind == TRANSPOSE:
        store = _existing_store(args.db)
        device, device_name = _lookup_device(args, store)
        cls = shape_class(p.batch, p.m, p.n, pass_vec(p))  # as permute() and `tune --axes`
        choice = lookup.choose(device, p.elem_bytes, cls, store=store)
        info.update(device=device_name, **_choice_info(cls, choice))
        call = f"{p.elem_bytes}-byte {_shape_text((p.batch, p.m, p.n))} -> class {cls}"
        return _print_choice(args, out, info, device_name, call, choice, plan.describe().splitlines())
    if p is None or p.contiguous:
        kernel, source = ("none" if p is None else "cuMemcpyDtoDAsync"), ""
    elif p.kind == GATHER:
        kernel, source = gather_kernel_name(p.elem_bytes), render_gather()
    elif p.kind == PACKED:
        spec = packed_args(p.elem_bytes, p.dims, p.box).kernel
        kernel, source = spec.name, render_packed([spec])
    else:
        kernel, source = RUNS_KERNEL if p.realign else row_kernel_name(p.elem_bytes), render_rows()
    info["kernel"] = kernel
    if args.json:
        if args.source:
            info["cuda_source"] = source
        json.dump(info, out, indent=2)
        out.write("\n")
    elif args.source:
        out.write(source)
    else:
        print(plan.describe(), file=out)
        print(f"kernel  {kernel}", file=out)
    return 0


def cmd_export(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .store import textio

    if args.all_devices:
        return _export_all(args, err)
    store = _open_store(args.db, readonly=True)
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
    from .store import textio

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
    store = _open_store(args.db, readonly=True)
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
    from .store import textio

    # Every file is read and checked before anything is written, then all are written in one
    # transaction: `import good.json bad.json` leaves the database as it was.
    files = [textio.load(path) for path in args.paths]
    store = _open_store(args.db)
    counts = textio.import_files(store, files)
    for path, tf, count in zip(args.paths, files, counts, strict=True):
        print(f"imported {count} entries of {tf.device.name} from {path}", file=err)
    return 0


def cmd_devices(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .compiler import list_devices

    devices = list_devices()
    if args.json:
        json.dump([{**d.to_dict(), "slug": d.slug, "arch": d.arch} for d in devices], out, indent=2)
        out.write("\n")
        return 0
    rows = [
        [i, d.name, d.arch, d.multiprocessors, f"{d.peak_bandwidth_gbps:.0f}", d.slug]
        for i, d in enumerate(devices)
    ]
    print(table(["#", "name", "arch", "SMs", "peak GB/s", "slug"], rows), file=out)
    return 0


def cmd_db_upgrade(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from . import store as store_pkg

    revision = store_pkg.upgrade(args.db)
    print(f"database is at revision {revision}", file=out)
    return 0


_DRAWS = ("random", "random_permute", "small")  # the options that draw bench's cases


def cmd_bench(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .bench.cases import draw_dtypes
    from .bench.command import run_from_args

    drawing = [f"--{k.replace('_', '-')}" for k in _DRAWS if getattr(args, k) is not None]
    if len(drawing) > 1:
        raise UsageError(
            f"--random N (transposes), --random-permute N (permutes) and --small N (the host "
            f"cost of small calls) each draw the cases: give one, not both {' and '.join(drawing)}"
        )
    if not drawing:
        args.dtypes = _dtypes(args.dtypes if args.dtypes is not None else ["float32"])
    elif args.dtypes is not None:  # only these types are drawn; without --dtypes, every type
        try:
            args.dtypes = list(draw_dtypes([v.strip() for v in _split(args.dtypes)]))
        except UnsupportedDtypeError as exc:
            raise UsageError(f"argument --dtypes: {exc}") from None
    if args.small is not None and args.png:
        raise UsageError("--png charts GB/s per shape; --small writes --json and --markdown")
    if args.axes is not None:
        if drawing:
            raise UsageError(
                f"--axes permutes the --shapes given: leave out {drawing[0]} "
                "(--random, --random-permute and --small draw their own cases)"
            )
        args.shapes = [_option("--shapes", parse_dims, v) for v in _split(args.shapes)]
        args.axes = _axes(args.axes)
        for shape in args.shapes:  # every shape must take these axes, before any GPU work
            normalize_axes(args.axes, len(shape))
    else:
        args.shapes = [_shape_text(s) for s in _shapes(args.shapes)]
    return int(run_from_args(args) or 0)


# --- the parser -----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Generated, autotuned CUDA matrix-transpose kernels.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def db_option(q: argparse.ArgumentParser) -> None:
        q.add_argument("--db", metavar="URL", type=_db_location,
                       help="tuning database: a SQLite file path or a SQLAlchemy URL (SQLite or "
                            "PostgreSQL); default: $AUTOTRANSPOSE_DB, else a SQLite file in the "
                            "user data directory")  # fmt: skip

    t = sub.add_parser("tune", help="tune kernels for shapes and dtypes on a local GPU",
                       description="Tune kernels on a local GPU; an interrupted run resumes.")  # fmt: skip
    t.add_argument("--shapes", nargs="+", required=True, metavar="SHAPE",
                   help="MxN or BATCHxMxN, e.g. 8192x8192 64x1024x1024 (commas work too); "
                        "with --axes, 1 to 8 sides")  # fmt: skip
    t.add_argument("--axes", metavar="I,J,...",
                   help="tune the permute of each of --shapes by these axes, e.g. --shapes "
                        "64x256x56x56 --axes 0,2,3,1: its transpose pass, measured on the "
                        "pass's own strides, into the pass's shape class (or the batched "
                        "transpose a first call times against a packed or gather pass; a copy, "
                        "packed or gather pass without one: nothing to tune)")  # fmt: skip
    t.add_argument("--dtypes", nargs="+", default=["float32"], metavar="DTYPE",
                   help="e.g. float32,int8 (default float32)")  # fmt: skip
    t.add_argument("--trials", type=_positive_int, default=40,
                   help="finished trials per shape and dtype, counting earlier runs; with "
                        "--devices, in total over the GPUs of one model (default 40)")  # fmt: skip
    t.add_argument("--timeout", type=_positive_float, metavar="SECONDS",
                   help="stop each study after this long")  # fmt: skip
    t.add_argument("--patience", type=_positive_int, metavar="K",
                   help="stop when K trials in a row did not beat the best")  # fmt: skip
    t.add_argument("--sampler", choices=("tpe", "random", "gp"), default="tpe")
    t.add_argument("--seed", type=_sampler_seed,
                   help="seed of the sampler (0 to 2**32-1), for reproducible runs")  # fmt: skip
    t.add_argument("--batch", type=_positive_int, default=8,
                   help="trials compiled and measured together (default 8)")  # fmt: skip
    t.add_argument("--device", type=_nonnegative_int, default=None, metavar="INDEX",
                   help="local GPU index (default 0)")  # fmt: skip
    t.add_argument("--devices", type=_device_spec, metavar="all|I,J,...",
                   help="tune on several local GPUs at once, one process each: all, or "
                        "indices like 0,2; GPUs of one model share each study and its "
                        "--trials, so the budget is spent once, not once per GPU")  # fmt: skip
    t.add_argument("--conjugate", action="store_true", help="tune the conjugate transpose")
    db_option(t)

    s = sub.add_parser("show", help="tuned results per device")
    s.add_argument("--device", type=_device_name, metavar="NAME",
                   help="only this GPU model, e.g. 'NVIDIA H100 80GB HBM3'")  # fmt: skip
    s.add_argument("--json", action="store_true", help="machine-readable output")
    db_option(s)

    lk = sub.add_parser("lookup", help="the kernel a call would use, and where it comes from")
    lk.add_argument("--shape", required=True,
                    help="MxN or BATCHxMxN, e.g. 4096x4096; with --axes, 1 to 8 sides")  # fmt: skip
    lk.add_argument("--axes", metavar="I,J,...",
                    help="a permute of --shape by these axes (e.g. 0,2,3,1): show its plan and "
                         "the kernel that serves it")  # fmt: skip
    lk.add_argument("--dtype", default="float32")
    lk.add_argument("--device", type=_device_name, metavar="NAME",
                    help="GPU model name (default: local GPU 0)")  # fmt: skip
    lk.add_argument("--conjugate", action="store_true")
    lk.add_argument("--source", action="store_true", help="print the kernel's CUDA source")
    lk.add_argument("--json", action="store_true", help="machine-readable output")
    db_option(lk)

    e = sub.add_parser("export", help="write tuned results as JSON")
    e.add_argument("--device", type=_device_name, metavar="NAME", help="only this GPU model")
    e.add_argument("--all-devices", action="store_true",
                   help="every GPU model in the database: one <model>.json each into -o DIR")  # fmt: skip
    e.add_argument("-o", "--output", metavar="PATH",
                   help="file to write (default stdout); with --all-devices, a directory")  # fmt: skip
    db_option(e)

    i = sub.add_parser("import", help="read tuned results from JSON files")
    i.add_argument("paths", nargs="+", metavar="PATH")
    db_option(i)

    d = sub.add_parser("devices", help="list local GPUs (needs pycuda)")
    d.add_argument("--json", action="store_true")

    db = sub.add_parser("db", help="database maintenance")
    db_sub = db.add_subparsers(dest="db_command", metavar="ACTION", parser_class=_Parser)
    up = db_sub.add_parser("upgrade", help="migrate the database to this version's schema")
    db_option(up)

    b = sub.add_parser("bench", help="compare against copy, cuBLAS, CuPy, PyTorch and the seed")
    b.add_argument("--shapes", nargs="+", default=["8192x8192"], metavar="SHAPE",
                   help="e.g. 8192x8192 64x1024x1024 (default 8192x8192)")  # fmt: skip
    b.add_argument("--dtypes", nargs="+", default=None, metavar="DTYPE",
                   help="e.g. float32,int8 (default float32); with --random, --random-permute "
                        "or --small, the only types drawn (default: every type)")  # fmt: skip
    b.add_argument("--random", type=_positive_int, default=None, metavar="N",
                   help="instead of --shapes: N random (shape, dtype) cases, 32 MB to "
                        "1 GB, square, rectangular, skinny and batched, odd and aligned")  # fmt: skip
    b.add_argument("--random-permute", type=_positive_int, default=None, metavar="N",
                   help="N random permutes: 3- to 6-D shapes, 32 MB to 1 GB, every element "
                        "size, against copy, CuPy, PyTorch, cuTENSOR, torch.compile")  # fmt: skip
    b.add_argument("--small", type=_positive_int, default=None, metavar="N",
                   help="N random small permutes and transposes (4 KB to 16 MB, 2- to 6-D, "
                        "every dtype), each into out= and new: host-included us per call "
                        "of ours against PyTorch's and CuPy's own on the same arrays")  # fmt: skip
    b.add_argument("--axes", metavar="I,J,...",
                   help="permute each of --shapes (1 to 8 sides) by these axes, e.g. "
                        "--shapes 64x256x56x56 --axes 0,2,3,1")  # fmt: skip
    b.add_argument("--seed", type=_nonnegative_int, default=0, metavar="S",
                   help="the random cases' seed (default 0)")  # fmt: skip
    b.add_argument("--json", metavar="PATH", help="write results as JSON")
    b.add_argument("--png", metavar="PATH", help="write a chart")
    b.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    b.add_argument("--repeat", type=_positive_int, default=None, metavar="N",
                   help="timed repeats, the median kept (default 7; --small: 5 runs of 300 "
                        "calls)")  # fmt: skip
    b.add_argument("--device", type=_nonnegative_int, default=0, metavar="INDEX")
    db_option(b)
    return p


def _bounded(
    kind: type, least: float, inclusive: bool, most: int | None = None
) -> Callable[[str], Any]:
    """An argparse type: a number of `kind` at least (or, not inclusive, above) `least`, and
    at most `most` if given."""
    noun = "an integer" if kind is int else "a number"
    words = "at least" if inclusive else "more than"

    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:  # also int()'s refusal of thousands of digits: echo only the start
            raise argparse.ArgumentTypeError(f"{text!r:.40} is not {noun}") from None
        if kind is float and not math.isfinite(v):  # float() takes inf, nan, 1e999
            raise argparse.ArgumentTypeError(
                f"{text!r:.40} is not a finite number; give one such as 60, or leave the "
                "option out"
            )
        shown = str(v)[:40]
        if not (v >= least if inclusive else v > least):
            raise argparse.ArgumentTypeError(f"{shown} must be {words} {least:g}")
        if most is not None and v > most:
            raise argparse.ArgumentTypeError(f"{shown} must be at most {most}")
        return v

    return parse


def _db_location(text: str) -> str:
    """An argparse type: `--db PATH|URL`, not blank (an empty path is the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r:.20} names no database (as a path it is the current directory); give a "
            "file (such as --db tuning.db) or a URL, or leave out --db to use $AUTOTRANSPOSE_DB "
            "or the default file"
        )
    return text


def _device_spec(text: str) -> Any:
    """An argparse type: `--devices all` or `--devices 0,2` (checked against the machine
    when the command runs)."""
    from .multigpu import device_spec

    try:
        return device_spec(text)
    except TuningError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("devices ")) from None


_positive_int = _bounded(int, 1, inclusive=True)
_nonnegative_int = _bounded(int, 0, inclusive=True)
_positive_float = _bounded(float, 0, inclusive=False)
_sampler_seed = _bounded(int, 0, inclusive=True, most=2**32 - 1)  # what NumPy's seeding takes


def _one_line(exc: BaseException) -> str:
    """The message on one line, with control characters shown escaped: a name or path with
    terminal escapes in it is printed, never obeyed."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _check_no_dropped_values(args: argparse.Namespace) -> None:
    """argparse before Python 3.13 turns `--opt=--` into [] without calling the option's
    type, so the value would skip its check. No option of ours can hold an empty list
    (nargs="+" needs one item): an empty one is that."""
    for dest, value in vars(args).items():
        if isinstance(value, list) and not value:
            raise UsageError(f"argument --{dest.replace('_', '-')}: expected a value, not '--'")


_COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO, TextIO], int]] = {
    "show": cmd_show,
    "lookup": cmd_lookup,
    "export": cmd_export,
    "import": cmd_import,
    "devices": cmd_devices,
    "bench": cmd_bench,
}


def _warning_printer(err: TextIO) -> Callable[..., None]:
    """`warnings.showwarning` while a command runs: one line ``autotranspose: warning: ...``
    like an error, not Python's two (where it was raised, then that source line)."""

    def show(message: Any, category: type[Warning], *_: Any, **__: Any) -> None:
        text = _one_line(message).removeprefix(f"{PROG}: ")
        if category not in (UserWarning, RuntimeWarning) and not category.__module__.startswith(
            PROG
        ):
            text = f"{category.__name__}: {text}"  # another library's: say which kind
        print(f"{PROG}: warning: {text}", file=err)

    return show


def run(
    argv: Sequence[str] | None = None,
    *,
    make_objective: ObjectiveFactory | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
) -> int:
    """Run one command; `make_objective(dtype, shape, device_index, conjugate)` builds what
    `tune` measures with (the GPU worker unless given: tests pass a synthetic one), called
    with `layout=` too for a permute's strided pass (`tune --axes`)."""
    err = stderr or sys.stderr
    with warnings.catch_warnings():
        warnings.showwarning = _warning_printer(err)
        return _run(argv, make_objective, stdout or sys.stdout, err)


def _run(
    argv: Sequence[str] | None,
    make_objective: ObjectiveFactory | None,
    out: TextIO,
    err: TextIO,
) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        _check_no_dropped_values(args)
        if args.command is None:
            parser.print_help(out)
            return 2
        if args.command == "tune":
            return cmd_tune(args, out, err, make_objective or _gpu_objective)
        if args.command == "db":
            if args.db_command != "upgrade":
                raise UsageError("db needs an action: autotranspose db upgrade [--db URL]")
            return cmd_db_upgrade(args, out, err)
        return _COMMANDS[args.command](args, out, err)
    except BrokenPipeError:  # `autotranspose show | head`: the reader has what it wanted
        raise
    except (AutotransposeError, UsageError, OSError) as exc:
        print(f"{PROG}: error: {_one_line(exc)}", file=err)
        return 2 if isinstance(exc, UsageError) else 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted (run the same command again to resume)", file=err)
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    """The `autotranspose` console script."""
    try:
        return run(argv)
    except BrokenPipeError:
        # Python's recipe: point stdout at devnull so the flush at exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1

"""`autotranspose tune`: each (dtype, shape) tuned on one GPU with a progress bar, permutes'
transpose passes (--axes), cast-transposes (--cast), in-place transposes (--inplace), or
every case on several GPUs at once (--devices); then the table of results.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO

from ..errors import TuningError
from ..kernels.shapes import Layout, parse_dims
from ..plans.dtypes import element_type
from ..plans.layout import normalize_axes
from .output import PROG, UsageError, gbps_text, one_line, pct_text, shape_text, table
from .parser import parse_axes, parse_dtypes, parse_option, parse_shapes, split_items
from .stores import open_store

if TYPE_CHECKING:
    from ..store import Store
    from ..tuner.study import PermuteTarget, TrialReport, TuneResult
    from ..tuner.study.settings import TuneSettings


# make_objective(dtype, shape, device_index, conjugate), and layout=Layout for a permute's
# strided pass (`tune --axes`), cast=(code, both) for a cast-transpose (`tune --cast`),
# inplace=True for an in-place transpose (`tune --inplace`): each only then, so a factory for
# plain shapes need not take them
ObjectiveFactory = Callable[..., Any]


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


def gpu_objective(
    dtype: str,
    shape: tuple[int, int, int],
    device: int,
    conjugate: bool,
    layout: Layout | None = None,
    cast: tuple[str, bool] | None = None,
    inplace: bool = False,
) -> Any:
    from ..tuner.worker import GpuObjective

    return GpuObjective(
        dtype, shape, device, conjugate=conjugate, layout=layout, cast=cast, inplace=inplace
    )


def cmd_tune(
    args: argparse.Namespace, out: TextIO, err: TextIO, make_objective: ObjectiveFactory
) -> int:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the bar and the table say it all
    if args.inplace:
        return _tune_inplace(args, out, err, make_objective)
    if args.cast is not None:
        return _tune_casts(args, out, err, make_objective)
    if args.both:
        raise UsageError("--both is for cast-transposes: give the pairs with --cast IN:OUT")
    if args.axes is not None:
        return _tune_permutes(args, out, err, make_objective)
    shapes = parse_shapes(args.shapes)
    dtypes = parse_dtypes(args.dtypes or ["float32"])
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
        from ..tuner import multigpu

        indices = multigpu.resolve_devices(args.devices, multigpu.local_device_count())
        if len(indices) > 1:
            return _tune_devices(args, indices, shapes, dtypes, out, err, make_objective)
        device = indices[0]
    store = open_store(args.db)
    results: list[TuneResult] = []
    failed = 0
    started = time.monotonic()
    for dtype in dtypes:
        for shape in shapes:
            label = f"{dtype} {shape_text(shape)}"
            result = _tune_case(args, store, device, dtype, shape, label, err, make_objective)
            if result is None:
                failed += 1
            else:
                results.append(result)
    if results:
        print(table(_RESULT_HEADERS, [_result_row(r) for r in results]), file=out)
    print(
        f"tuned {len(results)} of {len(results) + failed} in "
        f"{time.monotonic() - started:.1f}s; database {store.display}",
        file=err,
    )
    return 1 if failed else 0


def _tune_case(
    args: argparse.Namespace,
    store: Store,
    device: int,
    dtype: str,
    shape: tuple[int, int, int],
    label: str,
    err: TextIO,
    make_objective: ObjectiveFactory,
    layout: Layout | None = None,
    max_vector: int | None = None,
) -> TuneResult | None:
    """Tune one case on GPU `device` with a progress bar; None (and a line saying why) when
    no config ran correctly."""
    from ..tuner.study import tune

    extra = {"layout": layout} if layout is not None else {}
    objective = make_objective(dtype, shape, device, args.conjugate, **extra)
    return _with_bar(
        err,
        label,
        objective,
        lambda bar: tune(
            dtype,
            shape,
            objective=objective,
            store=store,
            device=objective.device,
            settings=_settings(args),
            conjugate=args.conjugate,
            progress=bar,
            device_index=device,
            layout=layout,
            max_vector=max_vector,
        ),
    )


def _with_bar(
    err: TextIO, label: str, objective: Any, run: Callable[[ProgressBar], TuneResult]
) -> TuneResult | None:
    """`run(bar)`, one tuning run shown by a progress bar, with its objective closed after;
    None (and a line saying why) when no config ran correctly."""
    bar = ProgressBar(err, label)
    try:
        result = run(bar)
    except TuningError as exc:
        bar.close()
        print(f"{PROG}: {label}: {one_line(exc)}", file=err)
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
    store = open_store(args.db) if any(t.shape is not None for _, _, t in targets) else None
    axes = ",".join(map(str, targets[0][2].plan.axes)) if targets else ""
    rows: list[list[str]] = []
    failed = skipped = 0
    started = time.monotonic()
    for dtype, shape, target in targets:
        label = f"{dtype} {shape_text(shape)} axes {axes}"
        if target.shape is None or store is None:
            print(f"{label}: {target.describe()}; {target.untuned}", file=out)
            skipped += 1
            continue
        max_vector = target.shape_class.vec if target.shape_class is not None else None
        result = _tune_case(
            args,
            store,
            device,
            target.dtype,
            target.shape,
            label,
            err,
            make_objective,
            target.layout,
            max_vector,
        )
        if result is None:
            failed += 1
            continue
        strides = result.layout.text if result.layout is not None else "contiguous"
        rows.append(
            [
                dtype,
                shape_text(shape),
                axes,
                f"s{element_type(result.dtype).size}",
                shape_text(result.shape),
                strides,
                *_result_row(result)[2:],
            ]
        )
    if rows:
        print(table(_PERMUTE_HEADERS, rows), file=out)
    where = f"; database {store.display}" if store is not None else ""
    print(
        f"tuned {len(rows)} of {len(rows) + failed} transpose passes ({skipped} of "
        f"{len(targets)} permutes had nothing to tune) in "
        f"{time.monotonic() - started:.1f}s{where}",
        file=err,
    )
    return 1 if failed else 0


def _permute_targets(
    args: argparse.Namespace,
) -> list[tuple[str, tuple[int, ...], PermuteTarget]]:
    """What `tune --axes` tunes, per dtype and shape; every refusal before any GPU work."""
    from ..tuner.study import permute_target

    if args.conjugate:
        raise UsageError("--conjugate is for transposes; permute (--axes) has none")
    if args.devices is not None:
        raise UsageError(
            "--axes tunes a permute's pass on one GPU: give --device INDEX, not --devices"
        )
    shapes = [parse_option("--shapes", parse_dims, v) for v in split_items(args.shapes)]
    dtypes = parse_dtypes(args.dtypes or ["float32"])
    axes = parse_axes(args.axes)
    for shape in shapes:  # every shape must take these axes
        normalize_axes(axes, len(shape))
    return [(d, s, permute_target(d, s, axes)) for d in dtypes for s in shapes]


def _tune_casts(
    args: argparse.Namespace, out: TextIO, err: TextIO, make_objective: ObjectiveFactory
) -> int:
    """`tune --cast bf16:e4m3 --shapes 8192x8192`: each pair and shape tuned on one GPU like
    a transpose, results under the pair's problem; every refusal before any GPU work."""
    from ..tuner.study.cast import cast_target, parse_pair, tune_cast

    for flag, given in (
        ("--axes", args.axes is not None),
        ("--conjugate", args.conjugate),
        ("--dtypes", args.dtypes is not None),
        ("--devices", args.devices is not None),
    ):
        if given:
            raise UsageError(
                f"--cast tunes cast-transposes of contiguous inputs on one GPU; {flag} is not "
                "for them (the pair gives the dtypes; --device INDEX picks the GPU)"
            )
    try:
        pairs = [parse_pair(v) for v in split_items(args.cast)]
        settings = _settings(args)
    except TuningError as exc:
        raise UsageError(f"argument --cast: {one_line(exc)}") from None
    shapes = parse_shapes(args.shapes)
    targets = [cast_target(s, d, shape, args.both) for s, d in pairs for shape in shapes]
    device = args.device if args.device is not None else 0
    cases = [
        _Case(
            f"{t.src.name}->{t.dst.name}{' both' if t.both else ''} {shape_text(t.shape)}",
            lambda t=t: make_objective(t.src.name, t.shape, device, False, cast=(t.code, t.both)),
            lambda objective, store, bar, t=t: tune_cast(
                t.src,
                t.dst,
                t.shape,
                objective=objective,
                store=store,
                device=objective.device,
                both=t.both,
                settings=settings,
                progress=bar,
                device_index=device,
            ),
            lambda result, t=t: [t.problem.removeprefix("cast:"), *_result_row(result)[1:]],
        )
        for t in targets
    ]
    return _tune_cases(args, out, err, cases, ["cast", *_RESULT_HEADERS[1:]], "cast-transposes")


def _tune_inplace(
    args: argparse.Namespace, out: TextIO, err: TextIO, make_objective: ObjectiveFactory
) -> int:
    """`tune --inplace --dtypes float16 --shapes 8192x7168`: each dtype and shape's in-place
    transpose (transpose_() of a contiguous array) tuned on one GPU like a transpose, results
    under its problem (squares apart) and class; every refusal before any GPU work."""
    from ..tuner.study.inplace import inplace_target, tune_inplace

    for flag, given, fix in (
        ("--cast", args.cast is not None, "tune cast-transposes in a run of their own"),
        ("--both", args.both, "it is for cast-transposes (--cast)"),
        ("--axes", args.axes is not None, "a permute's pass is tuned by tune --axes"),
        (
            "--conjugate",
            args.conjugate,
            "transpose_(conjugate=True) is served the same results: leave it out",
        ),
        ("--devices", args.devices is not None, "--device INDEX picks the GPU"),
    ):
        if given:
            raise UsageError(
                f"--inplace tunes in-place transposes of contiguous arrays on one GPU; {flag} "
                f"is not for them ({fix})"
            )
    shapes = parse_shapes(args.shapes)
    dtypes = parse_dtypes(args.dtypes or ["float32"])
    try:
        targets = [inplace_target(d, s) for d in dtypes for s in shapes]
        settings = _settings(args)
    except TuningError as exc:
        raise UsageError(f"argument --inplace: {one_line(exc)}") from None
    device = args.device if args.device is not None else 0

    def row(result: TuneResult, problem: str) -> list[str]:
        dtype, shape, cls, _, *rest = _result_row(result)
        return [dtype, shape, problem, cls, result.config.params.key, *rest]

    cases = [
        _Case(
            f"{t.dtype} {shape_text(t.shape)} in place",
            lambda t=t: make_objective(t.dtype, t.shape, device, False, inplace=True),
            lambda objective, store, bar, t=t: tune_inplace(
                t.dtype,
                t.shape,
                objective=objective,
                store=store,
                device=objective.device,
                settings=settings,
                progress=bar,
                device_index=device,
            ),
            lambda result, t=t: row(result, t.problem),
        )
        for t in targets
    ]
    return _tune_cases(args, out, err, cases, _INPLACE_HEADERS, "in-place transposes")


def _settings(args: argparse.Namespace) -> TuneSettings:
    """The search's settings the command line gives (a TuningError where they do not go
    together)."""
    from ..tuner.study.settings import TuneSettings

    return TuneSettings(
        trials=args.trials,
        timeout=args.timeout,
        patience=args.patience,
        sampler=args.sampler,
        seed=args.seed,
        batch=args.batch,
    )


class _Case(NamedTuple):
    """One case of `_tune_cases`: its label, its objective made, its study run
    (objective, store, progress bar) and its row of the table."""

    label: str
    objective: Callable[[], Any]
    tune: Callable[[Any, Store, ProgressBar], TuneResult]
    row: Callable[[TuneResult], list[str]]


def _tune_cases(
    args: argparse.Namespace,
    out: TextIO,
    err: TextIO,
    cases: Sequence[_Case],
    headers: list[str],
    what: str,
) -> int:
    """Each case tuned on one GPU with a progress bar (a line saying why where it fails),
    then the table of results and a summary: the cast-transposes' and in-place transposes'
    runs."""
    store = open_store(args.db)
    rows: list[list[str]] = []
    started = time.monotonic()
    for case in cases:
        objective = case.objective()
        result = _with_bar(
            err,
            case.label,
            objective,
            lambda bar, case=case, objective=objective: case.tune(objective, store, bar),
        )
        if result is not None:
            rows.append(case.row(result))
    if rows:
        print(table(headers, rows), file=out)
    print(
        f"tuned {len(rows)} of {len(cases)} {what} in {time.monotonic() - started:.1f}s; "
        f"database {store.display}",
        file=err,
    )
    return 1 if len(rows) < len(cases) else 0


_RESULT_HEADERS = [
    "dtype",
    "shape",
    "class",
    "config",
    "GB/s",
    "% copy",
    "trials/meas/reuse/fail",
    "time",
    "stop",
]
# tune --axes: the permute, its pass's element size and (batch, m, n) ("shape"), and its
# strides (ld_in,ld_out,bs_in,bs_out in elements, or contiguous)
_PERMUTE_HEADERS = ["dtype", "permute", "axes", "elem", "shape", "strides", *_RESULT_HEADERS[2:]]
# tune --inplace: the problem its results are keyed by, and the config as its parameters'
# key (kinds.inplace.InplaceParams.key: what a stored config writes as inplace='<key>')
_INPLACE_HEADERS = ["dtype", "shape", "problem", "class", "params", *_RESULT_HEADERS[4:]]


def _result_row(r: TuneResult) -> list[str]:
    return [
        r.dtype,
        shape_text(r.shape),
        str(r.shape_class),
        r.config.key,
        gbps_text(r.measurement.gbps),
        pct_text(r.measurement.ratio),
        f"{r.trials}/{r.measured}/{r.reused}/{r.failed}",
        f"{r.elapsed_s:.1f}s",
        r.stopped_by,
    ]


def _result_line(r: TuneResult, label: str = "") -> str:
    """One case's summary, after `label` (a permute's) where that is not its own case."""
    case = f"{r.dtype} {shape_text(r.shape)}"
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
    from ..tuner.multigpu import CaseFailure, tune_devices
    from ..tuner.study import TrialReport

    store = open_store(args.db)
    status = _DevicesLine(err, indices)
    started = time.monotonic()

    def progress(index: int, event: Any) -> None:
        if isinstance(event, TrialReport):
            status.update(index, event)
            return
        status.clear()
        if isinstance(event, CaseFailure):
            print(
                f"{PROG}: GPU {index}: {event.dtype} {shape_text(event.shape)}: {event.error}",
                file=err,
            )
        else:
            print(f"GPU {index}: {_result_line(event)}", file=err)

    runs = tune_devices(
        [(d, s) for d in dtypes for s in shapes],
        devices=indices,
        db=store.url,
        settings=_settings(args),
        conjugate=args.conjugate,
        make_objective=None if make_objective is gpu_objective else make_objective,
        progress=progress,
    )
    status.clear()
    rows = [[str(run.index), *_result_row(r)] for run in runs for r in run.results]
    if rows:
        print(table(["gpu", *_RESULT_HEADERS], rows), file=out)
    for run in runs:
        if run.error is not None:
            name = f" ({run.device})" if run.device else ""
            print(f"{PROG}: GPU {run.index}{name} failed: {run.error}", file=err)
    done = sum(len(run.results) for run in runs)
    print(
        f"tuned {done} of {len(dtypes) * len(shapes) * len(runs)} (case, GPU) pairs on GPUs "
        f"{', '.join(map(str, indices))} in {time.monotonic() - started:.1f}s; "
        f"database {store.display}",
        file=err,
    )
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

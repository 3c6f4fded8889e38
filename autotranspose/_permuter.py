"""permute(): any axis order of a 0- to 8-D array, through the kernels transpose() serves.

A call is validated before anything touches a GPU or an output (axes, dtype, `out`'s shape,
dtype, device and overlap, both layouts: the plan's rules), then planned
(`plan.plan_permute`: one pass, or nothing for an empty array) and run as steps on the
call's stream, in the array's context, exactly as transpose() chooses them:

- a transpose pass is the launch transpose() would make for that (batch, m, n) of
  `elem_bytes`-byte elements (`api.batched_launch`: lookup, flat fit, first-call
  measurement, its launch cache), walking the pass's outer dims too (the config's outer
  variant, `launch.make_launch`; a first call times its candidates on that whole launch),
  once per index of the plan's host loops;
- a copy of one contiguous block is one ``cuMemcpyDtoDAsync``;
- a copy of rows is `launch.make_row_copy` (a generated kernel: its docstring says why not
  the driver's 2-D copy), or `launch.make_runs_copy` where the plan realigns it into 16-byte
  words (`plan.realigned`), once per host-loop index;
- a packed or gather pass (the plan's choice where those would be many small launches or
  tiny tiles) is `launch.make_packed` (`vbox.make_vbox` for a box the plan moves in
  vectors) or `launch.make_gather`: the whole fused problem in one launch.

Where the plan names alternatives (other passes that move the same bytes: `plan.ALT_*` says
which and why no rule ranks them), the first call of the signature builds each and times
them against the plan's own pass on its own buffers and stream (`firstcall.race`, within
`firstcall.BUDGET_S` of GPU time; the plan's pass stays unless another is faster by
`firstcall.MARGIN`), as transpose()'s first call chooses a config; ``AUTOTRANSPOSE_FIRST_CALL=0``
switches it off with the rest. The choice is kept for this process (not in the database).

The steps of a call signature (device, element size, shape, strides, axes, pointer
alignment, lookup generation) are built once and kept, as transpose() keeps its launches.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _driver
from . import _firstcall as firstcall
from . import _lookup as lookup
from . import _streams as streams
from ._api import (
    _FAST,
    batched_launch,
    call_target,
    delivered,
    empty_result,
    host_target,
    keeping_context,
    remember,
    through_device,
)
from ._arrays import NDView, allocate, check_permute_output, nd_view
from ._compiler import DeviceState
from ._launch import Launch, make_gather, make_packed, make_row_copy, make_runs_copy
from ._plan import (
    COPY,
    GATHER,
    PACKED,
    TRANSPOSE,
    Dim,
    Pass,
    Plan,
    contiguous_strides,
    normalize_axes,
    plan_permute,
)
from ._vbox import make_vbox
from .errors import AutotransposeError

_steps: dict[tuple[Any, ...], tuple[Step, ...]] = {}
_lock = threading.Lock()
# What the first calls of this process chose between, newest last: (device name, the plan,
# Outcome: the chosen pass and each pass's median seconds). For looking into a choice;
# bounded, so a long-running service does not grow it.
history: deque[tuple[str, Plan, firstcall.Outcome[Pass]]] = deque(maxlen=256)


@dataclass(frozen=True)
class Step:
    """One pass made runnable: `launch` at each (input, output) byte offset, or, with no
    launch, a device-to-device copy of `nbytes` there."""

    launch: Launch | None
    nbytes: int
    offsets: tuple[tuple[int, int], ...]

    def run(self, src: int, dst: int, stream: int | None, ctx: int) -> None:
        launch = self.launch
        if launch is None:
            for i, o in self.offsets:
                _driver.memcpy_dtod_async(dst + o, src + i, self.nbytes, stream, ctx)
            return
        for i, o in self.offsets:
            launch.run(src + i, dst + o, stream, ctx)


# make_transpose(elem_bytes, (batch, m, n), (ld_in, ld_out, bs_in, bs_out), src, dst,
#                (outer, outer2))
MakeTranspose = Callable[
    [int, tuple[int, int, int], tuple[int, int, int, int], int, int, tuple[Dim, Dim]], Any
]
# make_copy(elem_bytes, batch, m, n, ld_in, ld_out, bs_in, bs_out, outer, os_in, os_out,
#           outer2, os2_in, os2_out, realign=False)
MakeCopy = Callable[..., Any]
# make_gather(elem_bytes, dims); make_packed(elem_bytes, dims, box, src, dst, pipelined,
# vectors)
MakeGather = Callable[[int, tuple[Dim, ...]], Any]
MakePacked = Callable[[int, tuple[Dim, ...], tuple[int, ...], int, int, bool, tuple[int, int]], Any]


@dataclass(frozen=True)
class Steps:
    """The steps of one plan as one runner (what `firstcall.race` times)."""

    steps: tuple[Step, ...]

    def run(self, src: int, dst: int, stream: int | None, ctx: int) -> None:
        for step in self.steps:
            step.run(src, dst, stream, ctx)


def build_steps(
    plan: Plan,
    src: int,
    dst: int,
    make_transpose: MakeTranspose,
    make_copy: MakeCopy,
    make_gather: MakeGather,
    make_packed: MakePacked,
) -> tuple[Step, ...]:
    """The steps that run `plan` from `src` into `dst` (device pointers). A launch serves
    every host-loop index, so it is made at the least aligned of their pointer pairs: a
    real launch's start, since a first-call measurement runs that whole launch on it. A
    transpose launch also walks its outer dims, whose matrices start at further pointers;
    `api.batched_launch` derives its vector from those as well (a measurement started at one
    of them would write past the end of out)."""
    steps = []
    for p in plan.passes:
        offsets = tuple(p.offsets())
        if p.contiguous:
            steps.append(Step(None, p.n * p.elem_bytes, offsets))
            continue
        i, o = weakest(offsets, src, dst)
        if p.kind == TRANSPOSE:  # its outer dims' pointers: the api derives the vector from them
            shape, strides = (p.batch, p.m, p.n), (p.ld_in, p.ld_out, p.bs_in, p.bs_out)
            launch = make_transpose(
                p.elem_bytes, shape, strides, src + i, dst + o, (p.outer, p.outer2)
            )
        elif p.kind == GATHER:
            launch = make_gather(p.elem_bytes, p.dims)
        elif p.kind == PACKED:
            launch = make_packed(
                p.elem_bytes, p.dims, p.box, src + i, dst + o, p.pipelined, p.vectors
            )  # words if aligned; the vector box (`_vbox`) where the plan gave vectors
        else:
            assert p.kind == COPY, p.kind
            o, o2 = p.outer, p.outer2
            launch = make_copy(
                p.elem_bytes,
                p.batch,
                p.m,
                p.n,
                p.ld_in,
                p.ld_out,
                p.bs_in,
                p.bs_out,
                o.extent,
                o.in_stride,
                o.out_stride,
                o2.extent,
                o2.in_stride,
                o2.out_stride,
                realign=p.realign,
            )
        steps.append(Step(launch, 0, offsets))
    return tuple(steps)


def weakest(offsets: Sequence[tuple[int, int]], src: int, dst: int) -> tuple[int, int]:
    """The (input, output) offsets whose pointers are aligned to the fewest bytes (up to 16)."""

    def alignment(pair: tuple[int, int]) -> int:
        bits = ((src + pair[0]) | (dst + pair[1])) & 15
        return bits & -bits if bits else 16

    return min(offsets, key=alignment)


def permute(x: Any, axes: Sequence[int], out: Any = None, *, stream: Any = None) -> Any:
    """Permute the axes of `x`: ``out[i_0, ..., i_k] = x[...]`` with out's axis k being x's
    axis ``axes[k]``, like ``np.transpose(x, axes)`` but materialised, on the GPU.

    `x` is any array transpose() takes (pycuda GPUArray, CuPy, PyTorch CUDA tensor, JAX,
    `__cuda_array_interface__`, or NumPy, copied to the GPU and back), of 0 to 8 dimensions
    and any supported dtype; `axes` a permutation of its dimensions (negative ones count
    from the end). x may be a strided view: strides are whole elements, not negative, and
    some axis of more than one element has stride 1 (NumPy arrays: any layout, they are
    copied contiguously first). The result is the same kind of array, or `out` when given
    (contiguous or a view whose innermost stride is 1; nothing is allocated). Streams,
    contexts and threads as for transpose(). Bad input raises an `autotranspose.errors`
    exception before anything is launched or written.
    """
    if stream is None:  # a signature seen before: a dictionary hit and one native call
        fast = _FAST.get(type(x))
        if fast is not None and (out is None or type(out) is type(x)):
            tag = axes_tag(axes)
            result = fast(x, out, tag) if tag is not None else None
            if result is not None:
                return result
    given = None if stream is None else streams.explicit(stream)
    xv = nd_view(x, "x", given.handle if given is not None else None)
    order = normalize_axes(axes, xv.ndim)
    want = tuple(xv.shape[a] for a in order)
    if xv.kind == "numpy":
        return _on_host(xv, order, want, out, given)
    if not xv.size:
        if out is not None:
            check_permute_output(xv, nd_view(out, "out"), want, order)
        return empty_result(xv, want, out, given)
    return keeping_context(_on_device, x, axes, xv, order, want, out, given)


def axes_tag(axes: Any) -> tuple[int, ...] | None:
    """The axes as the fast path keys a call by: a tuple or list as given (no other iterable:
    reading a generator here would consume it before the full path sees it)."""
    return axes if type(axes) is tuple else tuple(axes) if type(axes) is list else None


def _plan(
    xv: NDView, axes: tuple[int, ...], out_strides: tuple[int, ...] | None, out_ptr: int
) -> Plan:
    return _planned(xv.shape, axes, xv.et.size, xv.strides, out_strides, xv.ptr & 15, out_ptr & 15)


@functools.lru_cache(maxsize=4096)
def _planned(
    shape: tuple[int, ...],
    axes: tuple[int, ...],
    e: int,
    in_strides: tuple[int, ...],
    out_strides: tuple[int, ...] | None,
    in_align: int,
    out_align: int,
) -> Plan:
    """plan_permute, once per signature (it reads only the pointers' alignment; a refused
    call raises every time: exceptions are not cached)."""
    return plan_permute(shape, axes, e, in_strides, out_strides, in_ptr=in_align, out_ptr=out_align)


def _on_device(
    x: Any,
    as_given: Sequence[int],
    xv: NDView,
    axes: tuple[int, ...],
    want: tuple[int, ...],
    out: Any,
    given: streams.Explicit | None,
) -> Any:
    state, ctx, handle = call_target(xv, given)
    if out is None:
        plan = _plan(xv, axes, None, 0)  # x's layout is refused before allocating
        result = allocate(xv, want, ctx)
        if xv.kind == "jax":  # our export, not yet an array
            ov = xv._replace(
                obj=result,
                ptr=result.alloc.ptr,
                shape=want,
                strides=contiguous_strides(want),
                keep=None,
            )
        else:
            ov = nd_view(result, "out")
        if ov.ptr & 15:  # never seen (allocators align to 256 bytes): plan for this pointer
            plan = _plan(xv, axes, None, ov.ptr)
    else:
        result = out
        ov = nd_view(out, "out")
        check_permute_output(xv, ov, want, axes)
        plan = _plan(xv, axes, ov.strides, ov.ptr)
    steps, final = _steps_of(plan, xv, ov.ptr, state, handle, ctx)
    for step in steps:
        step.run(xv.ptr, ov.ptr, handle, ctx)
    if given is None and final and xv.kind in _FAST_KINDS:
        remember(x, out, xv, ov, program(steps, ctx), want, tuple(as_given))
    return delivered(xv.kind, result)


_FAST_KINDS = ("torch", "cupy", "gpuarray")


def program(steps: Sequence[Step], ctx: int) -> _driver.Prepared | _driver.Program:
    """A call's steps made ready in `ctx` as what the fast path hands the driver: the one
    prepared launch itself where that is the whole call, else a program of every launch
    (and copy) at its offsets, run in one native call."""
    if len(steps) == 1 and steps[0].launch is not None and steps[0].offsets == ((0, 0),):
        return steps[0].launch.prepared(ctx)
    return _driver.Program(
        ctx,
        [
            (None if st.launch is None else st.launch.prepared(ctx), i, o, st.nbytes)
            for st in steps
            for i, o in st.offsets
        ],
    )


def _cached_steps(
    plan: Plan, xv: NDView, ov_ptr: int, state: DeviceState, stream: int | None, ctx: int
) -> tuple[Step, ...]:
    """The steps of `plan` for this call signature, built on first use."""
    return _steps_of(plan, xv, ov_ptr, state, stream, ctx)[0]


def _steps_of(
    plan: Plan, xv: NDView, ov_ptr: int, state: DeviceState, stream: int | None, ctx: int
) -> tuple[tuple[Step, ...], bool]:
    """`_cached_steps`, and whether they are final for the signature (not while a choice
    waits for a call outside graph capture)."""
    key = (xv.device, plan, xv.ptr & 15, ov_ptr & 15, lookup.generation)
    steps = _steps.get(key)
    if steps is not None:
        return steps, True
    _, steps, final = served(plan, state, xv.ptr, ov_ptr, stream, ctx)
    if final:
        _keep(key, steps)
    return steps, final


def served(
    plan: Plan, state: DeviceState, src: int, dst: int, stream: int | None, ctx: int
) -> tuple[Plan, tuple[Step, ...], bool]:
    """What permute() runs for `plan` from `src` into `dst`: (the plan as run, its steps,
    whether they are final for the signature). A plan with alternatives has them measured
    here against its own pass (the module's docstring); while the stream is being captured
    into a graph, or with first-call measurement off, the plan's own pass runs (captured: not
    final, a later call measures). The bench times what this returns."""
    own = build(plan, state, src, dst, stream, ctx)
    if not plan.alternatives:
        return plan, own, True
    if not firstcall.enabled():  # held off for this thread only: a later call may measure
        return plan, own, not firstcall.globally_enabled()
    if _driver.is_capturing(stream):
        return plan, own, False
    guess = plan.passes[0]
    runners = {guess: Steps(own)}
    for p in plan.alternatives:
        try:
            runners[p] = Steps(build(plan.taking(p), state, src, dst, stream, ctx))
        except AutotransposeError:  # e.g. a kernel that does not fit this device: not a candidate
            continue
    outcome = firstcall.race(runners, guess, src, dst, stream, ctx)
    if outcome is None:  # nothing ran (each launch failed): the plan's own pass, as before
        return plan, own, True
    history.append((state.info.name, plan, outcome))
    if outcome.best == guess:
        return plan, own, True
    return plan.taking(outcome.best), runners[outcome.best].steps, True


def build(
    plan: Plan, state: DeviceState, src: int, dst: int, stream: int | None, ctx: int
) -> tuple[Step, ...]:
    """The steps of `plan` on `state`'s device, as permute() runs them (the bench times these
    very steps)."""

    def make_transpose(e: int, shape: Any, strides: Any, s: int, d: int, outer: Any) -> Launch:
        return batched_launch(state, e, shape, strides, s, d, stream, ctx, tuple(outer))

    def make_copy(*args: int, realign: bool = False) -> Launch:
        return (make_runs_copy if realign else make_row_copy)(state, *args)

    def gather(e: int, dims: tuple[Dim, ...]) -> Launch:
        return make_gather(state, e, dims)

    def packed(
        e: int,
        dims: tuple[Dim, ...],
        box: tuple[int, ...],
        s: int,
        d: int,
        pipelined: bool,
        vectors: tuple[int, int],
    ) -> Launch:
        if vectors[0]:
            return make_vbox(state, e, dims, box, vectors, s, d)
        return make_packed(state, e, dims, box, s, d, pipelined)

    return build_steps(plan, src, dst, make_transpose, make_copy, gather, packed)


def _keep(key: tuple[Any, ...], steps: tuple[Step, ...]) -> None:
    with _lock:
        if len(_steps) > 4096:
            _steps.clear()
        _steps[key] = steps


def clear_caches() -> None:
    """Forget the plans and steps of every call signature (as `api.clear_caches` does for
    launches)."""
    _steps.clear()
    _planned.cache_clear()


def _on_host(
    xv: NDView,
    axes: tuple[int, ...],
    want: tuple[int, ...],
    out: Any,
    given: streams.Explicit | None,
) -> Any:
    """NumPy in, NumPy out: copied contiguously to the GPU, permuted, copied back."""
    if out is not None:
        check_permute_output(xv, nd_view(out, "out"), want, axes)
    if xv.size == 0:
        return out if out is not None else np.empty(want, xv.dtype)
    host = np.ascontiguousarray(xv.obj)
    # the contiguous copy's plan: it refuses what it must before any GPU use
    plan = _planned(xv.shape, axes, xv.et.size, contiguous_strides(xv.shape), None, 0, 0)
    state, ctx, handle = host_target(given)

    def prepare(src: int, dst: int) -> Callable[[], None]:
        dx = xv._replace(kind="device", ptr=src, strides=plan.in_strides, device=state.ordinal)
        steps = _cached_steps(plan, dx, dst, state, handle, ctx)

        def run() -> None:
            for step in steps:
                step.run(src, dst, handle, ctx)

        return run

    return through_device(host, want, out, ctx, handle, prepare)


def device_program(
    device: int, shape: tuple[int, ...], axes: Sequence[int], dtype: Any, *, conjugate: bool = False
) -> _driver.Prepared | _driver.Program:
    """What permute(x, axes) (or, with `conjugate`, transpose(x, conjugate=True): `axes` then
    swap the last two) runs for a contiguous `shape` of `dtype` on GPU `device`, between
    16-byte aligned buffers, made ready in the device's primary context: for callers that
    launch it later on buffers and a stream they get from elsewhere (JAX's FFI handler gets
    XLA's). Chosen as an eager call's first call chooses: the kernels are measured on
    scratch buffers of the call's size where the device has room for them, else served as
    looked up. Bad input raises what the eager call raises, before any GPU use."""
    from ._arrays import NDView
    from ._compiler import device_state
    from ._dtypes import element_type

    et = element_type(dtype)
    order = normalize_axes(axes, len(shape))
    if conjugate:
        et.check_conjugable()
    strides = contiguous_strides(shape)
    plan = _planned(tuple(shape), order, et.size, strides, None, 0, 0)
    state = device_state(device)
    ctx, nbytes = state.ctx, max(1, math.prod(shape)) * et.size
    try:
        src, dst = _driver.Allocation(nbytes, ctx), _driver.Allocation(nbytes, ctx)
    except AutotransposeError:  # no room beside the caller's arrays: served unmeasured
        src = dst = None
    held = contextlib.nullcontext() if src is not None else firstcall.held_off()
    s, d = (src.ptr, dst.ptr) if src is not None else (256, 512)  # aligned, never touched
    try:
        with held, _driver.on_context(ctx):
            if conjugate:
                launch = _conjugate_launch(state, tuple(shape), et, s, d)
                _driver.synchronize_stream(streams.LEGACY)
                return launch.prepared(ctx)
            xv = NDView("device", None, s, tuple(shape), strides, None, et, device, ctx)
            steps = _cached_steps(plan, xv, d, state, streams.LEGACY, ctx)
            _driver.synchronize_stream(streams.LEGACY)
            return program(steps, ctx)
    finally:
        if src is not None:
            src.free()
            dst.free()


def _conjugate_launch(
    state: DeviceState, shape: tuple[int, ...], et: Any, src: int, dst: int
) -> Launch:
    """transpose(x, conjugate=True)'s launch for a contiguous 2-D or batched 3-D `shape`."""
    from ._api import conjugate_launch

    return conjugate_launch(state, shape, et, src, dst)

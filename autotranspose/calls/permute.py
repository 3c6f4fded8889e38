"""permute(): any axis order of a 0- to 8-D array, through the kernels transpose() serves.

A call is validated before anything touches a GPU or an output (axes, dtype, `out`'s shape,
dtype, device and overlap, both layouts: the plan's rules), then planned
(`plan.plan_permute`: one pass, or nothing for an empty array) and run as the steps
`_dispatch.permute` picks for the plan (a transpose pass is the launch transpose() would
make; rows, packed boxes and gathers their own kernels; alternatives raced on the first
call) on the call's stream, in the array's context. The steps of a signature are kept, and
a validated call of a PyTorch, CuPy or pycuda array is remembered by `_fastpath` as one
native program for its next repetition.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..dispatch import fastpath, picker as dispatch
from ..dispatch.permute import plan_of, planned, program, steps_final, steps_for
from ..errors import AutotransposeError
from ..plans.layout import contiguous_strides, normalize_axes
from ..runtime import driver as _driver, streams
from ..runtime.arrays import NDView, allocate, check_permute_output, nd_view
from .common import (
    call_target,
    delivered,
    empty_result,
    host_target,
    keeping_context,
    through_device,
)


def permute(x: Any, axes: Sequence[int], out: Any = None, *, stream: Any = None) -> Any:
    """Permute the axes of `x`: ``out[i_0, ..., i_k] = x[...]`` with out's axis k being x's
    axis ``axes[k]``, like ``np.transpose(x, axes)`` but materialised, on the GPU.

    `x` is any array transpose() takes (pycuda GPUArray, CuPy, PyTorch CUDA tensor, JAX,
    `__cuda_array_interface__`, or NumPy, copied to the GPU and back), of 0 to 8 dimensions
    and any supported dtype; `axes` a permutation of its dimensions (negative ones count
    from the end). x may be a strided view: strides are whole elements and not negative, 0
    (broadcast) included (NumPy arrays: any layout, they are copied contiguously first).
    The result is the same kind of array, or `out` when given (contiguous or a view whose
    elements do not overlap; nothing is allocated). Streams,
    contexts and threads as for transpose(). Bad input raises an `autotranspose.errors`
    exception before anything is launched or written.
    """
    if stream is None:  # a signature seen before: a dictionary hit and one native call
        fast = fastpath.BY_TYPE.get(type(x))
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
        plan = plan_of(xv, axes, None, 0)  # x's layout is refused before allocating
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
            plan = plan_of(xv, axes, None, ov.ptr)
    else:
        result = out
        ov = nd_view(out, "out")
        check_permute_output(xv, ov, want, axes)
        plan = plan_of(xv, axes, ov.strides, ov.ptr)
    steps, final = steps_final(plan, xv, ov.ptr, state, handle, ctx)
    for step in steps:
        step.run(xv.ptr, ov.ptr, handle, ctx)
    if given is None and final and xv.kind in _FAST_KINDS:
        fastpath.remember(x, out, xv, ov, program(steps, ctx), want, tuple(as_given))
    return delivered(xv.kind, result)


_FAST_KINDS = ("torch", "cupy", "gpuarray")


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
    plan = planned(xv.shape, axes, xv.et.size, contiguous_strides(xv.shape), None, 0, 0)
    state, ctx, handle = host_target(given)

    def prepare(src: int, dst: int) -> Callable[[], None]:
        dx = xv._replace(kind="device", ptr=src, strides=plan.in_strides, device=state.ordinal)
        steps = steps_for(plan, dx, dst, state, handle, ctx)

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
    from ..plans.dtypes import element_type
    from ..runtime.compiler import device_state

    et = element_type(dtype)
    order = normalize_axes(axes, len(shape))
    if conjugate:
        et.check_conjugable()
    strides = contiguous_strides(shape)
    plan = planned(tuple(shape), order, et.size, strides, None, 0, 0)
    state = device_state(device)
    ctx, nbytes = state.ctx, max(1, math.prod(shape)) * et.size
    try:
        src, dst = _driver.Allocation(nbytes, ctx), _driver.Allocation(nbytes, ctx)
    except AutotransposeError:  # no room beside the caller's arrays: served unmeasured
        src = dst = None
    held = contextlib.nullcontext() if src is not None else dispatch.unmeasured()
    s, d = (src.ptr, dst.ptr) if src is not None else (256, 512)  # aligned, never touched
    try:
        with held, _driver.on_context(ctx):
            if conjugate:
                launch = dispatch.transpose.conjugate_launch(state, tuple(shape), et, s, d)
                _driver.synchronize_stream(streams.LEGACY)
                return launch.prepared(ctx)
            xv = NDView("device", None, s, tuple(shape), strides, None, et, device, ctx)
            steps = steps_for(plan, xv, d, state, streams.LEGACY, ctx)
            _driver.synchronize_stream(streams.LEGACY)
            return program(steps, ctx)
    finally:
        if src is not None:
            src.free()
            dst.free()

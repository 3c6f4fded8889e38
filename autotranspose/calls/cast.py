"""cast_transpose(): validate the call, plan its launches (`plans.cast`), launch the pair's
cast kernel (templates/cast/cast.cu.j2) on the caller's stream.

The first call of a signature (devices, dtypes, shapes, strides, axes, pointer alignment,
what is written) chooses the config (`dispatch.cast`), compiles or loads the kernel and plans
the launches, kept as a `runtime.launch.CastLaunch` in the dispatch's launch cache
(`dispatch.caches`, the same bound and invalidation as transpose()'s); later calls pack the
pointers and launch. An eager PyTorch call is remembered by the fast path
(`dispatch.fastpath.remember_cast`), whose next call is a dict hit and one native call. Calls
run from any thread: the array's context is made current for the launches only, and the
thread's own is put back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..dispatch import caches, cast as cast_dispatch, fastpath, policy
from ..errors import (
    ConfigError,
    InputTypeError,
    LayoutError,
    OutputError,
)
from ..kernels.config import KernelConfig
from ..kinds.cast import Format
from ..plans.cast import MAX_LOOP_LAUNCHES, CastPlan, plan_cast
from ..plans.layout import contiguous_strides
from ..runtime import driver as _driver, streams
from ..runtime.arrays import NDView, _source, nd_view
from ..runtime.compiler import DeviceState, get_kernel
from ..runtime.launch import CastLaunch
from .castargs import _amax, _scale, check_both, checked, input_format as input_format
from .common import call_target, keeping_context

# raw-bits dtypes that hold a format in arrays of libraries that lack it (CuPy, pycuda)
_RAW = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16)}


def cast_transpose(
    x: Any,
    dtype: Any,
    *,
    scale: Any = None,
    amax: Any = None,
    axes: Sequence[int] | None = None,
    out: Any = None,
    out_t: Any = None,
    both: bool = False,
    stream: Any = None,
    config: KernelConfig | None = None,
) -> Any:
    """The cast of `x` (times `scale`) to `dtype`, permuted by `axes` (default: the last two
    swapped); with `both`, the pair (cast in x's order, cast permuted) from one pass. `amax`
    (a 1-element float32 array on x's GPU) is raised in place to max |x|. See
    autotranspose.cast_transpose for the rules."""
    check_both(both)
    if out is not None and not both:
        raise OutputError(
            "out= is the cast in x's own order, written only with both=True; pass the "
            "transposed buffer as out_t=, or set both=True to have both written"
        )
    given = None if stream is None else streams.explicit(stream)
    handle = given.handle if given is not None else None
    # what needs no driver first: x's kind, dtype and shape, the pair, the axes, the scale's type
    s = _source(x, "x", handle)
    if s.kind in ("numpy", "jax"):
        raise InputTypeError(
            f"cast_transpose() takes arrays on the GPU from PyTorch, CuPy, pycuda or any "
            f"__cuda_array_interface__ producer; x is a {'NumPy' if s.kind == 'numpy' else 'JAX'} "
            "array: move it to the GPU as a PyTorch tensor or CuPy array first"
        )
    src, dst, order = checked(tuple(s.shape), s.et.name, dtype, axes, scale, config)
    xv = nd_view(x, "x", handle)
    scale_ptr, scale_value = _scale(scale, xv)
    amax_ptr = _amax(amax, xv)
    want = tuple(xv.shape[a] for a in order)
    remember = None  # an eager PyTorch call: its next call skips to the launch
    if s.kind == "torch" and given is None and config is None:
        remember = fastpath.cast_signature(x, dtype, scale, amax, axes, both, out, out_t)
    return keeping_context(
        _on_device, xv, src, dst, order, want, out, out_t, both, given, config,
        scale_ptr, scale_value, amax_ptr, remember,
    )  # fmt: skip


def _on_device(
    xv: NDView,
    src: Format,
    dst: Format,
    order: tuple[int, ...],
    want: tuple[int, ...],
    out: Any,
    out_t: Any,
    both: bool,
    given: streams.Explicit | None,
    config: KernelConfig | None,
    scale_ptr: int,
    scale_value: float,
    amax_ptr: int,
    remember: tuple[Any, ...] | None = None,
) -> Any:
    state, ctx, handle = call_target(xv, given)
    y = out_t if out_t is not None else _allocate(xv, want, dst, ctx)
    yv = _output(y, "out_t", xv, want, dst)
    z = zv = None
    if both:
        z = out if out is not None else _allocate(xv, xv.shape, dst, ctx)
        zv = _output(z, "out", xv, xv.shape, dst)
        (a0, a1), (b0, b1) = yv.extent(), zv.extent()
        if xv.size and a0 < b1 and b0 < a1:
            raise OutputError("out and out_t overlap in memory; pass separate buffers")
    if amax_ptr and xv.size:
        for what, v in (("out_t", yv), ("out", zv)):
            if v is not None and v.size and fastpath.overlap(*_span(v), amax_ptr, 4):
                raise OutputError(
                    f"amax overlaps {what} in memory; pass a separate 1-element buffer"
                )
    if xv.size:
        operands = (scale_ptr, scale_value, amax_ptr)
        prep, settled = _prepare(state, xv, yv, zv, order, src, dst, config, ctx, handle, operands)
        _run(prep, ctx, handle, xv, yv, zv, order, scale_ptr, scale_value, amax_ptr)
        if remember is not None and settled and not prep.plan.two_pass and xv.device is not None:
            hit = fastpath.CastHit(
                prep,
                prep.program(ctx),
                ctx,
                xv.device,
                want,
                y.dtype,
                _span(xv)[1],
                _span(yv)[1] if out_t is not None else 0,
                _span(zv)[1] if zv is not None and out is not None else 0,
            )
            fastpath.remember_cast(remember, hit)
    return (z, y) if both else y


def _span(v: NDView) -> tuple[int, int]:
    """(first byte, bytes to the view's end) of a view's memory."""
    lo, hi = v.extent()
    return lo, hi - lo


def _allocate(xv: NDView, shape: tuple[int, ...], dst: Format, ctx: int) -> Any:
    """A new row-major array of `shape` in `dst`, of x's kind and device: a torch tensor of
    that dtype; for CuPy and pycuda, the ml_dtypes dtype where the library takes it, else
    the unsigned integers of its size holding the bits."""
    if xv.kind == "torch":
        import torch

        return xv.obj.new_empty(shape, dtype=getattr(torch, dst.name))
    np_dtype = _numpy_dtype(dst)
    if xv.kind == "cupy":
        import cupy

        with cupy.cuda.Device(xv.device):
            try:
                return cupy.empty(shape, dtype=np_dtype)
            except (TypeError, ValueError):
                return cupy.empty(shape, dtype=_RAW[dst.size])
    import pycuda.gpuarray as gpuarray

    nbytes = math.prod(shape) * dst.size
    with _driver.on_context(ctx):
        data = _driver.Allocation(nbytes, ctx) if nbytes else None
        return gpuarray.GPUArray(shape, np_dtype, gpudata=data)


def _numpy_dtype(dst: Format) -> np.dtype:
    if dst.name == "float16":
        return np.dtype(np.float16)
    try:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, dst.name))
    except ImportError:
        return _RAW[dst.size]


def _output(arr: Any, what: str, xv: NDView, want: tuple[int, ...], dst: Format) -> NDView:
    v = nd_view(arr, what)
    if v.kind in ("numpy", "jax"):
        raise OutputError(
            f"{what} is a {'NumPy' if v.kind == 'numpy' else 'JAX'} array; it must be a writable "
            "GPU array of x's library (or leave it None)"
        )
    if v.shape != want:
        raise OutputError(f"{what} has shape {v.shape}; this call writes shape {want}")
    raw = v.kind != "torch" and v.et.name == _RAW[dst.size].name
    if v.et.name != dst.name and not raw:
        hint = f" or {_RAW[dst.size]} (its bits)" if v.kind != "torch" else ""
        raise OutputError(f"{what} has dtype {v.et.name}; this call writes {dst.name}{hint}")
    if v.size and not any(s == 1 for n, s in zip(v.shape, v.strides, strict=True) if n > 1):
        if v.size > 1:
            raise LayoutError(
                f"{what} has strides {v.strides} (elements) and no axis of stride 1; pass a "
                "contiguous buffer or a view whose innermost stride is 1"
            )
    if v.device != xv.device or (v.ctx is not None and xv.ctx is not None and v.ctx != xv.ctx):
        raise OutputError(
            f"{what} is on GPU {v.device} but x is on GPU {xv.device} (or in another context); "
            f"allocate {what} where x is, or leave it None"
        )
    (a0, a1), (b0, b1) = v.extent(), xv.extent()
    if xv.size and a0 < b1 and b0 < a1:
        raise OutputError(f"{what} overlaps x in memory; pass a separate buffer")
    return v


def _key(
    xv: NDView,
    yv: NDView,
    zv: NDView | None,
    order: tuple[int, ...],
    dst: Format,
    config: KernelConfig | None,
) -> tuple[Any, ...]:
    return (
        "cast",
        xv.device,
        xv.et.name,
        dst.name,
        xv.shape,
        xv.strides,
        order,
        yv.strides,
        zv.strides if zv is not None else None,
        (xv.ptr & 15, yv.ptr & 15, zv.ptr & 15 if zv is not None else 0),
        config,
    )


def _prepare(
    state: DeviceState,
    xv: NDView,
    yv: NDView,
    zv: NDView | None,
    order: tuple[int, ...],
    src: Format,
    dst: Format,
    config: KernelConfig | None,
    ctx: int,
    stream: int | None,
    operands: tuple[int, float, int] | None,
) -> tuple[CastLaunch, bool]:
    """The signature's config, kernel and launches, and whether they are settled (kept in
    the dispatch's launch cache for its later calls; not while a first call cannot measure
    under graph capture). `operands`
    (scale pointer, scale value, amax pointer) let a first call measure on the call's own
    buffers; None: no buffers to measure on, lookup's choice."""
    caches.fresh()
    key = _key(xv, yv, zv, order, dst, config)
    prep = caches.launches.recent(key)
    if prep is not None:
        return prep, True
    plan = plan_cast(
        xv.shape, order, xv.strides, yv.strides, zv.strides if zv is not None else None
    )
    z_plan = None
    if plan.two_pass:  # cast into a contiguous buffer, then permute() it
        first = plan_cast(xv.shape, order, xv.strides, None, contiguous_strides(xv.shape))
        if first.two_pass:
            raise LayoutError(
                f"x's strides {xv.strides} (elements) fuse into no fewer than "
                f"{MAX_LOOP_LAUNCHES} launches; make x contiguous first (e.g. .contiguous())"
            )
        plan = CastPlan(first.launches, True, plan.why)
        if zv is not None and zv.strides != contiguous_strides(xv.shape):
            z_plan = plan_cast(xv.shape, order, xv.strides, None, zv.strides)
            if z_plan.two_pass:
                raise LayoutError(
                    f"out's strides {zv.strides} (elements) need more than {MAX_LOOP_LAUNCHES} "
                    "launches; pass a contiguous out (or leave it None)"
                )
    cfg = config
    if cfg is None:
        aligned = policy.cast_aligned_out(plan, dst, yv.ptr)
        race = None
        if operands is not None and not plan.two_pass and xv.device is not None:
            race = _race(state, plan, src, dst, xv, yv, zv, ctx, stream, operands)
        cfg, settled = cast_dispatch.choose_config(
            state, plan, src, dst, xv.ptr, zv is not None, aligned, race
        )
        if not settled:
            return CastLaunch(cfg, get_kernel(state, cfg), plan, src, dst, state, z_plan), False
    if not cfg.fits(state.info.limits):
        raise ConfigError(
            f"config {cfg.key} needs {cfg.threads} threads and {cfg.smem_bytes} bytes of shared "
            f"memory a block; {state.info.name} allows {state.info.limits.max_threads_per_block} "
            f"and {state.info.limits.max_shared_optin} (past 48 KiB, as dynamic shared memory)"
        )
    with caches.lock:
        prep = caches.launches.get(key)
        if prep is None:
            kernel = get_kernel(state, cfg)
            prep = caches.launches.keep(key, CastLaunch(cfg, kernel, plan, src, dst, state, z_plan))
    return prep, True


def _race(
    state: DeviceState,
    plan: CastPlan,
    src: Format,
    dst: Format,
    xv: NDView,
    yv: NDView,
    zv: NDView | None,
    ctx: int,
    stream: int | None,
    operands: tuple[int, float, int],
) -> cast_dispatch.Race:
    """How a first call times a config: the call's own launches into its own outputs, with
    its scale and amax (a max taken again is the same max)."""
    scale_ptr, scale_value, amax_ptr = operands
    z_ptr = zv.ptr if zv is not None else 0
    nbytes = xv.size * (src.size + dst.size * (2 if zv is not None else 1))

    class Runner:
        def __init__(self, cfg: KernelConfig) -> None:
            self.launch = CastLaunch(cfg, get_kernel(state, cfg), plan, src, dst, state)
            self.launch.function(ctx)  # loaded before it is timed

        def run(self, _src: int, _dst: int, stream: int | None, ctx: int) -> None:
            self.launch.run(ctx, stream, xv.ptr, yv.ptr, z_ptr, scale_ptr, scale_value, amax_ptr)

    return cast_dispatch.Race(Runner, stream, ctx, nbytes)


def _run(
    prep: CastLaunch,
    ctx: int,
    stream: int | None,
    xv: NDView,
    yv: NDView,
    zv: NDView | None,
    order: tuple[int, ...],
    scale_ptr: int,
    scale_value: float,
    amax_ptr: int,
) -> None:
    if prep.plan.two_pass:
        tmp = zv if zv is not None and zv.strides == contiguous_strides(xv.shape) else None
        buf = tmp.obj if tmp is not None else _allocate(xv, xv.shape, prep.dst, ctx)
        tv = tmp if tmp is not None else nd_view(buf, "out")
        prep.run(ctx, stream, xv.ptr, 0, tv.ptr, scale_ptr, scale_value, amax_ptr)
        if prep.z_plan is not None and tmp is None:  # z was asked for in another layout
            prep.for_z().run(ctx, stream, xv.ptr, 0, zv.ptr, scale_ptr, scale_value, 0)
        from .permute import permute

        permute(buf, order, yv.obj, stream=stream if stream is not None else streams.LEGACY)
        return
    z_ptr = zv.ptr if zv is not None else 0
    prep.run(ctx, stream, xv.ptr, yv.ptr, z_ptr, scale_ptr, scale_value, amax_ptr)


def contiguous_plan(shape: tuple[int, ...], order: tuple[int, ...], both: bool) -> CastPlan:
    """The plan of a call on a contiguous x into new contiguous outputs (`two_pass` says
    whether it is one pass of the cast kernel)."""
    want = tuple(shape[a] for a in order)
    strides = contiguous_strides(shape)
    return plan_cast(shape, order, strides, contiguous_strides(want), strides if both else None)


def device_launches(
    device: int,
    shape: tuple[int, ...],
    order: tuple[int, ...],
    src: Format,
    dst: Format,
    *,
    both: bool,
    scale_value: float,
    pointers: tuple[int, int, int, int, int],
) -> list[_driver.Prepared]:
    """The launches cast_transpose() runs for a contiguous, non-empty x of `shape` on GPU
    `device` into new outputs, made ready in the device's primary context: for callers that
    launch them later on buffers and a stream of their own (JAX's FFI handler gets XLA's).
    `pointers` (x, y, z, scale, amax) are the words the argument blocks hold for them (0: no
    such array); the caller replaces them. The config is lookup's for 16-byte aligned
    buffers (tuned, measured by an earlier eager first call, shipped, or the default): with
    no buffers yet, nothing is measured here. A plan of two passes (`contiguous_plan`) is the caller's to
    split into a cast and a permute."""
    from ..plans.dtypes import element_type
    from ..runtime.compiler import device_state

    state = device_state(device)
    ctx = state.ctx
    want = tuple(shape[a] for a in order)
    xv = NDView(
        "device", None, 0, shape, contiguous_strides(shape), None, element_type(src.name),
        device, ctx,
    )  # fmt: skip
    yv = xv._replace(shape=want, strides=contiguous_strides(want), et=element_type(dst.name))
    zv = xv._replace(et=yv.et) if both else None
    with _driver.on_context(ctx):
        prep, _ = _prepare(state, xv, yv, zv, order, src, dst, None, ctx, None, None)
        if prep.plan.two_pass:
            raise LayoutError(
                f"casting shape {shape} by axes {order} takes two passes ({prep.plan.why}): "
                "cast in x's order, then permute the result"
            )
    return prep.on_pointers(ctx, pointers, scale_value)

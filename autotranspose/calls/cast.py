"""cast_transpose(): validate the call, plan its launches (`_castplan`), launch the pair's
cast kernel (templates/cast/cast.cu.j2) on the caller's stream.

The first call of a signature (devices, dtypes, shapes, strides, axes, pointer alignment,
what is written) compiles or loads the kernel and plans the launches; later calls pack the
pointers and launch. Calls run from any thread: the array's context is made current for the
launches only, and the thread's own is put back.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..dispatch import caches, cast as cast_dispatch, policy
from ..dispatch.lru import LRU
from ..errors import (
    ConfigError,
    InputTypeError,
    LayoutError,
    OutputError,
)
from ..kernels.config import KernelConfig
from ..kinds.cast import Format
from ..plans.cast import (
    ARG_WORDS,
    MAX_LOOP_LAUNCHES,
    CastPlan,
    Launch,
    coded_args,
    pack_args,
    plan_cast,
)
from ..plans.layout import contiguous_strides
from ..runtime import driver as _driver, native as _native, streams
from ..runtime.arrays import NDView, _source, nd_view
from ..runtime.compiler import DeviceState, Kernel, get_kernel
from .castargs import (
    _amax,
    _keyable,
    _overlap,
    _plain_tensor,
    _scale,
    check_both,
    checked,
    input_format as input_format,
    torch_key,
)
from .common import call_target, keeping_context

# raw-bits dtypes that hold a format in arrays of libraries that lack it (CuPy, pycuda)
_RAW = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16)}


@dataclass(frozen=True)
class _Prepared:
    """What a signature's calls share: the config, its loaded kernel and the launches."""

    config: KernelConfig
    kernel: Kernel
    plan: CastPlan
    src: Format
    dst: Format
    z_plan: CastPlan | None = None  # two passes: z's own launches where x's buffer is not z


class _Hit(NamedTuple):
    """A validated eager PyTorch call, made ready: the prepared launches and where they run."""

    prep: _Prepared
    head: Any
    block: tuple[int, int, int]
    ctx: int
    device: int
    y_shape: tuple[int, ...]
    dtype: Any  # the outputs' torch dtype
    x_extent: int  # bytes from x's pointer to its end (amax may not overlap it)
    y_extent: int = 0  # the same for a given out_t and out (0: allocated by the call)
    z_extent: int = 0
    # the launches as one program of coded addresses (`_relocated_program`), run in one C call;
    # None without the compiled launcher (then `_launch_all` packs each launch's arguments)
    program: _driver.Program | None = None


# Bounded like the dispatch's caches (`_dispatch.caches`: the same bounds and reasons); a hit
# is read with the dict's own `get` (not reordered), the prepared launches as recently used.
_prepared: LRU[tuple[Any, ...], _Prepared] = LRU(caches.LIMIT)
# eager PyTorch calls seen before: their signature (`torch_key`) -> what the call launches
_hits: LRU[tuple[Any, ...], _Hit] = LRU(caches.HITS_LIMIT)
# (kernel handle, context) -> launch arguments' head: one per cast kernel and context, so far
# fewer than signatures; a dropped one is looked up again (`_function`)
_functions: LRU[tuple[int, int], Any] = LRU(1024)
_lock = threading.Lock()


def clear_caches() -> None:
    """Forget the prepared cast launches (with every other cache: `_dispatch.caches.clear`)."""
    _prepared.clear()
    _functions.clear()
    _hits.clear()


caches.also_clear(clear_caches)


def _drop_chosen() -> None:
    """Forget what an older lookup generation chose (results tuned or imported in this
    process since: `_dispatch.caches`): the next call of each signature is served them. The fast path's
    signatures carry the generation too, so its hits miss from then on."""
    with _lock:
        _prepared.clear()
        _hits.clear()


caches.also_fresh(_drop_chosen)


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
    if (
        s.kind == "torch"
        and given is None
        and config is None
        and _keyable(dtype, axes)
        and _plain_tensor(out)
        and _plain_tensor(out_t)
    ):
        remember = torch_key(x, dtype, scale, amax, axes, both, out, out_t)
    return keeping_context(
        _on_device, xv, src, dst, order, want, out, out_t, both, given, config,
        scale_ptr, scale_value, amax_ptr, remember,
    )  # fmt: skip


def fast_torch(
    x: Any,
    dtype: Any,
    scale: Any,
    amax: Any,
    axes: Any,
    both: bool,
    out: Any = None,
    out_t: Any = None,
) -> Any:
    """An eager PyTorch call whose signature was validated before: its launches straight away,
    into new outputs or the given ones (None: take the full path, which validates the call
    and raises what it finds, such as outputs overlapping x, each other or amax)."""
    if (
        not _keyable(dtype, axes)
        or type(both) is not bool
        or not (_plain_tensor(out) and _plain_tensor(out_t))
    ):
        return None
    hit = _hits.get(torch_key(x, dtype, scale, amax, axes, both, out, out_t))
    if hit is None or x.is_neg():  # a lazily negated view is resolved on the full path
        return None
    px = x.data_ptr()
    amax_ptr = amax.data_ptr() if amax is not None else 0
    if amax_ptr and _overlap(px, hit.x_extent, amax_ptr, 4):
        return None  # overlapping: the full path says so
    if scale is None:
        scale_ptr, scale_value = 0, 1.0
    elif hasattr(scale, "data_ptr"):
        scale_ptr, scale_value = scale.data_ptr(), 1.0
    else:  # the launcher rounds a float to float32 as NumPy does
        scale_ptr, scale_value = 0, float(scale)
    if out_t is None:
        y = x.new_empty(hit.y_shape, dtype=hit.dtype)
        py = y.data_ptr()
        if py & 15:
            return None  # the allocator aligns to 512 bytes; never seen otherwise
    else:
        y, py = out_t, out_t.data_ptr()
        if (
            y.is_neg()
            or _overlap(px, hit.x_extent, py, hit.y_extent)
            or (amax_ptr and _overlap(py, hit.y_extent, amax_ptr, 4))
        ):
            return None
    z, pz = None, 0
    if both:
        if out is None:
            z = x.new_empty(x.shape, dtype=hit.dtype)
            pz = z.data_ptr()
            if pz & 15:
                return None
        else:
            z, pz = out, out.data_ptr()
            if (
                z.is_neg()
                or _overlap(px, hit.x_extent, pz, hit.z_extent)
                or (amax_ptr and _overlap(pz, hit.z_extent, amax_ptr, 4))
            ):
                return None
        if out_t is not None and _overlap(py, hit.y_extent, pz, hit.z_extent):
            return None
    stream = streams.torch_current(hit.device)
    if hit.program is not None:
        _driver.run_relocated(hit.program, stream, px, py, pz, scale_ptr, amax_ptr, scale_value)
    else:
        _launch_all(
            hit.prep, hit.head, hit.block, hit.ctx, stream, px, py, pz, scale_ptr,
            float(np.float32(scale_value)), amax_ptr,
        )  # fmt: skip
    return (z, y) if both else y


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
            if v is not None and v.size and _overlap(*_span(v), amax_ptr, 4):
                raise OutputError(
                    f"amax overlaps {what} in memory; pass a separate 1-element buffer"
                )
    if xv.size:
        operands = (scale_ptr, scale_value, amax_ptr)
        prep, settled = _prepare(state, xv, yv, zv, order, src, dst, config, ctx, handle, operands)
        _run(prep, state, ctx, handle, xv, yv, zv, order, scale_ptr, scale_value, amax_ptr)
        if remember is not None and settled and not prep.plan.two_pass and xv.device is not None:
            head = _function(prep, ctx)
            block = (prep.config.threads, 1, 1)
            hit = _Hit(
                prep,
                head,
                block,
                ctx,
                xv.device,
                want,
                y.dtype,
                _span(xv)[1],
                _span(yv)[1] if out_t is not None else 0,
                _span(zv)[1] if zv is not None and out is not None else 0,
                _relocated_program(prep, head, ctx),
            )
            with _lock:
                _hits.keep(remember, hit)
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
) -> tuple[_Prepared, bool]:
    """The signature's config, kernel and launches, and whether they are settled (kept for
    its later calls; not while a first call cannot measure under graph capture). `operands`
    (scale pointer, scale value, amax pointer) let a first call measure on the call's own
    buffers; None: no buffers to measure on, lookup's choice."""
    caches.fresh()
    key = _key(xv, yv, zv, order, dst, config)
    prep = _prepared.recent(key)
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
            return _Prepared(cfg, get_kernel(state, cfg), plan, src, dst, z_plan), False
    if not cfg.fits(state.info.limits):
        raise ConfigError(
            f"config {cfg.key} needs {cfg.threads} threads and {cfg.smem_bytes} bytes of shared "
            f"memory a block; {state.info.name} allows {state.info.limits.max_threads_per_block} "
            f"and {state.info.limits.max_shared_optin} (past 48 KiB, as dynamic shared memory)"
        )
    with _lock:
        prep = _prepared.get(key)
        if prep is None:
            kernel = get_kernel(state, cfg)
            prep = _prepared.keep(key, _Prepared(cfg, kernel, plan, src, dst, z_plan))
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
            self.prep = _Prepared(cfg, get_kernel(state, cfg), plan, src, dst)
            self.head = _function(self.prep, ctx)
            self.block = (cfg.threads, 1, 1)

        def run(self, _src: int, _dst: int, stream: int | None, ctx: int) -> None:
            p = self.prep
            _launch_all(
                p, self.head, self.block, ctx, stream, xv.ptr, yv.ptr, z_ptr, scale_ptr,
                scale_value, amax_ptr,
            )  # fmt: skip

    return cast_dispatch.Race(Runner, stream, ctx, nbytes)


def _run(
    prep: _Prepared,
    state: DeviceState,
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
    cfg, src, dst = prep.config, prep.src, prep.dst
    head = _function(prep, ctx)
    block = (cfg.threads, 1, 1)
    if prep.plan.two_pass:
        tmp = zv if zv is not None and zv.strides == contiguous_strides(xv.shape) else None
        buf = tmp.obj if tmp is not None else _allocate(xv, xv.shape, dst, ctx)
        tv = tmp if tmp is not None else nd_view(buf, "out")
        _launch_all(
            prep, head, block, ctx, stream, xv.ptr, 0, tv.ptr, scale_ptr, scale_value, amax_ptr
        )
        if prep.z_plan is not None and tmp is None:  # z was asked for in another layout
            z_prep = _Prepared(cfg, prep.kernel, prep.z_plan, src, dst)
            _launch_all(
                z_prep, head, block, ctx, stream, xv.ptr, 0, zv.ptr, scale_ptr, scale_value, 0
            )
        from .permute import permute

        permute(buf, order, yv.obj, stream=stream if stream is not None else streams.LEGACY)
        return
    z_ptr = zv.ptr if zv is not None else 0
    _launch_all(
        prep, head, block, ctx, stream, xv.ptr, yv.ptr, z_ptr, scale_ptr, scale_value, amax_ptr
    )


def _function(prep: _Prepared, ctx: int) -> int:
    """The prepared kernel's function in `ctx` (loaded there on first use; opted in to its
    dynamic shared memory, if its tile is past the static limit)."""
    head = _functions.get((prep.kernel.handle, ctx))
    if head is None:
        head = _driver.kernel_function(prep.kernel.handle, ctx)
        shared = prep.config.dynamic_smem
        if shared:
            _driver.allow_function_dynamic_shared(head, shared, ctx)
        _functions.keep((prep.kernel.handle, ctx), head)
    return head


# the buffers of a relocated program's call, in the order `fast_torch` passes them
_CODES = tuple(k << _native.RELOC_SHIFT for k in range(1, ARG_WORDS + 1))


def _prepared_launches(
    prep: _Prepared, head: int, ctx: int, pack: Callable[[Launch], tuple[bytes, int]]
) -> list[_driver.Prepared]:
    """The prepared signature's launches made ready in `ctx`, each with the argument block
    and grid `pack` gives it (`pack_args` on pointers, or `coded_args` on codes)."""
    cfg = prep.config
    launches = []
    for lc in prep.plan.launches:
        args, grid = pack(lc)
        launches.append(
            _driver.Prepared(
                head,
                ctx,
                (grid, 1, 1),
                (cfg.threads, 1, 1),
                args[16:],
                shared=cfg.dynamic_smem,
                head=args[:16],
            )
        )
    return launches


def _relocated_program(prep: _Prepared, head: int, ctx: int) -> _driver.Program | None:
    """The signature's launches as one program whose leading argument words are codes for a
    call's x, y, z, scale pointer, amax and scale (`_CODES`), or None without the compiled
    launcher: a call is then one C call, not a Python packing and ctypes launch each."""
    cfg, src, dst = prep.config, prep.src, prep.dst
    launches = _prepared_launches(
        prep, head, ctx, lambda lc: coded_args(lc, cfg.tile_m, cfg.tile_n, src, dst, _CODES)
    )
    program = _driver.Program(ctx, [(lc, 0, 0, 8 * ARG_WORDS) for lc in launches])
    return program if program.address else None


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
        head = _function(prep, ctx)
    cfg = prep.config
    return _prepared_launches(
        prep,
        head,
        ctx,
        lambda lc: pack_args(lc, cfg.tile_m, cfg.tile_n, src, dst, *pointers, scale_value),
    )


def _launch_all(
    prep: _Prepared,
    func: int,
    block: tuple[int, int, int],
    ctx: int,
    stream: int | None,
    x: int,
    y: int,
    z: int,
    scale_ptr: int,
    scale_value: float,
    amax_ptr: int,
) -> None:
    cfg = prep.config
    with _driver.on_context(ctx):
        for lc in prep.plan.launches:
            args, grid = pack_args(
                lc,
                cfg.tile_m,
                cfg.tile_n,
                prep.src,
                prep.dst,
                x,
                y,
                z,
                scale_ptr,
                amax_ptr,  # every launch: a max taken twice is the same max
                scale_value,
            )
            _driver.launch(
                _driver.launch_args(func, (grid, 1, 1), block, cfg.dynamic_smem), stream, args
            )

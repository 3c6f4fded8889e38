"""The fast path: a call whose signature was validated before goes straight to the driver.

The signature is read from the array's own attributes (shape, strides, dtype, device, pointer
alignment, lookup generation, and for permute() the axes as given) into one flat tuple; a hit
is the call made ready in its context (one prepared launch, or a permute's steps as one
`_driver.Program`) and runs in one native call on the library's current stream. Anything
else, and any call with an explicit stream, takes the full path (`calls.transpose`,
`calls.permute`), which `remember`s what it ran.

An eager PyTorch cast_transpose() takes the same path through the same cache: its signature
adds the output dtype, axes, `both`, the kinds of scale and amax and any given outputs'
layouts (`cast_key`), and its hit (`CastHit`) is the call's launches as one relocated program
whose argument words are filled from the call's six operands (`calls.cast` remembers it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..runtime import driver as _driver, streams
from ..runtime.arrays import NDView, View, transposed_shape
from ..runtime.launch import CastLaunch, Launch
from . import caches, lookup
from .lru import LRU


class Hit(NamedTuple):
    ordinal: int  # the device, for the library's current stream
    # the call made ready in its context, handed to the driver as is: one launch, or a
    # permute's steps (`_driver.Program`)
    prep: _driver.Prepared | _driver.Program
    x_extent: int  # bytes from x's pointer to its end, for the overlap check
    o_extent: int
    out_shape: tuple[int, ...]


# the same cache: cleared with every cache, bounded (its `get` is the dict's own: a hit does
# not reorder it, so the least recently prepared signature goes first)
_fast: LRU[tuple[Any, ...], Hit] = caches.hits
_launch = _driver.launch_transpose


def _disjoint(px: int, po: int, hit: Hit) -> bool:
    return px + hit.x_extent <= po or po + hit.o_extent <= px


# Signature keys: one flat tuple (building nested ones costs measurably on the fast path).
# `tag` tells the calls apart: None for transpose(), the axes as given for permute().
def torch_key(x: Any, out: Any, px: int, po: int, tag: Any = None) -> tuple[Any, ...]:
    if out is None:
        return (
            "torch",
            x.shape,
            x.stride(),
            x.dtype,
            x.get_device(),
            px & 15,
            lookup.generation,
            tag,
        )
    return (
        "torch",
        x.shape,
        x.stride(),
        x.dtype,
        x.get_device(),
        type(out),
        out.shape,
        out.stride(),
        out.dtype,
        out.get_device(),
        (px | po) & 15,
        lookup.generation,
        tag,
    )


def _lazy(t: Any) -> bool:
    """A PyTorch view whose values are its memory's conjugated or negated (`x.conj()`)."""
    return t.is_conj() or t.is_neg()


def fast_torch(x: Any, out: Any, tag: Any = None) -> Any:
    px = x.data_ptr()
    if out is None:
        hit = _fast.get(torch_key(x, None, px, 0, tag))
        if hit is None or x.is_neg() or x.is_conj():  # lazy views: resolved on the full path
            return None
        prev = _driver.current()  # a first CUDA call in this thread may bind a context
        out = x.new_empty(hit.out_shape)
        po = out.data_ptr()
        if po & 15:  # the caching allocator aligns to 512 bytes; never seen otherwise
            return None
        _launch(hit.prep, px, po, streams.torch_current(hit.ordinal), prev)
        return out
    else:
        po = out.data_ptr()
        hit = _fast.get(torch_key(x, out, px, po, tag))
        if hit is None or not _disjoint(px, po, hit) or _lazy(x) or _lazy(out):
            return None
    _launch(hit.prep, px, po, streams.torch_current(hit.ordinal))
    return out


def cupy_key(x: Any, out: Any, px: int, po: int, tag: Any = None) -> tuple[Any, ...]:
    if out is None:
        return (
            "cupy",
            x.shape,
            x.strides,
            x.dtype,
            x.data.device_id,
            px & 15,
            lookup.generation,
            tag,
        )
    return (
        "cupy",
        x.shape,
        x.strides,
        x.dtype,
        x.data.device_id,
        type(out),
        out.shape,
        out.strides,
        out.dtype,
        out.data.device_id,
        (px | po) & 15,
        lookup.generation,
        tag,
    )


def fast_cupy(x: Any, out: Any, tag: Any = None) -> Any:
    px = x.data.ptr
    if out is None:
        hit = _fast.get(cupy_key(x, None, px, 0, tag))
        if hit is None:
            return None
        cupy = sys.modules["cupy"]  # x is a CuPy array: imported (the import statement costs)
        dev = hit.ordinal
        prev = _driver.current()
        if cupy.cuda.runtime.getDevice() == dev:
            out = cupy.empty(hit.out_shape, x.dtype)
        else:
            with cupy.cuda.Device(dev):
                out = cupy.empty(hit.out_shape, x.dtype)
        po = out.data.ptr
        if po & 15:
            return None
        _launch(hit.prep, px, po, streams.cupy_current(dev), prev)
        return out
    else:
        po = out.data.ptr
        hit = _fast.get(cupy_key(x, out, px, po, tag))
        if hit is None or not _disjoint(px, po, hit):
            return None
    _launch(hit.prep, px, po, streams.cupy_current(hit.ordinal))
    return out


def gpuarray_key(x: Any, out: Any, px: int, po: int, tag: Any = None) -> tuple[Any, ...]:
    # The owning context identifies the device (and the context) of a GPUArray on any machine.
    ctx = _driver.pointer_context(px)
    if out is None:
        return ("gpuarray", x.shape, x.strides, x.dtype, ctx, px & 15, lookup.generation, tag)
    return (
        "gpuarray",
        x.shape,
        x.strides,
        x.dtype,
        ctx,
        type(out),
        out.shape,
        out.strides,
        out.dtype,
        _driver.pointer_context(po),
        (px | po) & 15,
        lookup.generation,
        tag,
    )


def fast_gpuarray(x: Any, out: Any, tag: Any = None) -> Any:
    data = x.gpudata
    if data is None or (out is not None and out.gpudata is None):
        return None  # an empty GPUArray has no memory (its .ptr raises): the full path
    px = int(data)
    if out is None:
        hit = _fast.get(gpuarray_key(x, None, px, 0, tag))
        if hit is None:
            return None
        import pycuda.gpuarray as gpuarray

        nbytes = x.size * x.dtype.itemsize
        ctx = hit.prep.ctx
        with _driver.on_context(ctx):  # pycuda's GPUArray() asks the current context
            out = gpuarray.GPUArray(hit.out_shape, x.dtype, gpudata=_driver.Allocation(nbytes, ctx))
        po = out.ptr
    else:
        po = int(out.gpudata)
        hit = _fast.get(gpuarray_key(x, out, px, po, tag))
        if hit is None or not _disjoint(px, po, hit):
            return None
    _launch(hit.prep, px, po, streams.LEGACY)
    return out


_KINDS: dict[str, tuple[Callable[..., Any], Callable[..., tuple[Any, ...]]]] = {
    "torch": (fast_torch, torch_key),
    "cupy": (fast_cupy, cupy_key),
    "gpuarray": (fast_gpuarray, gpuarray_key),
}
BY_TYPE: dict[type, Callable[[Any, Any], Any]] = {}


def remember_launch(x: Any, out: Any, xv: View, ov: View, launch: Launch, ctx: int) -> None:
    """After a validated call: let the next call of this signature skip to its launch."""
    remember(x, out, xv, ov, launch.prepared(ctx), transposed_shape(xv), None)


def remember(
    x: Any,
    out: Any,
    xv: View | NDView,
    ov: View | NDView,
    prep: _driver.Prepared | _driver.Program,
    out_shape: tuple[int, ...],
    tag: Any,
) -> None:
    """After a validated call of `x` (into `out`, or a new array `ov`): the next call of its
    signature (with `tag`: permute's axes as given) runs `prep` straight away."""
    kind = _KINDS.get(xv.kind)
    if kind is None or (out is not None and ov.kind != xv.kind) or xv.device is None:
        return
    if xv.kind == "torch" and (_lazy(x) or (out is not None and _lazy(out))):
        return  # lazily conjugated/negated views are resolved on the full path only
    fast, key = kind
    (x0, x1), (o0, o1) = xv.extent(), ov.extent()
    hit = Hit(xv.device, prep, x1 - x0, o1 - o0, out_shape)
    _fast.keep(key(x, out, xv.ptr, ov.ptr if out is not None else 0, tag), hit)
    BY_TYPE[type(x)] = fast


# --- cast_transpose(): eager PyTorch calls --------------------------------------------------


class CastHit(NamedTuple):
    """A validated eager PyTorch cast_transpose() made ready: its launches, and with the
    compiled launcher the same as one relocated program (None: `launch.run` packs each);
    where they run; the outputs' shape and torch dtype; the extents the overlap checks need
    (bytes from each pointer to its array's end; 0 for an output the call allocates)."""

    launch: CastLaunch
    program: _driver.Program | None
    ctx: int
    ordinal: int
    y_shape: tuple[int, ...]
    dtype: Any
    x_extent: int
    y_extent: int = 0
    z_extent: int = 0


def cast_plain(out: Any) -> bool:
    """Whether a given output may enter a cast signature: None (allocated by the call) or a
    plain torch.Tensor (subclasses, and other arrays, go the full way every time)."""
    return out is None or (type(out).__name__ == "Tensor" and type(out).__module__ == "torch")


def cast_keyable(dtype: Any, axes: Any) -> bool:
    """Whether a call's dtype and axes enter its signature as given (other iterables of axes
    and dtype spellings go the full way every time)."""
    return type(dtype) is not str and type(axes) in (tuple, list, type(None))


def _operand_key(obj: Any) -> Any:
    """How a scale or amax enters a signature: None, a float, or a tensor's dtype, shape and
    device (what the full path validated)."""
    if obj is None:
        return None
    if hasattr(obj, "data_ptr"):
        return (obj.dtype, tuple(obj.shape), obj.get_device())
    return float if isinstance(obj, float) else type(obj)


def _output_key(out: Any) -> Any:
    """How a given output enters a signature: None (allocated by the call), or its type,
    shape, strides, dtype, device and alignment."""
    if out is None:
        return None
    return (type(out), out.shape, out.stride(), out.dtype, out.get_device(), out.data_ptr() & 15)


def cast_key(
    x: Any,
    dtype: Any,
    scale: Any,
    amax: Any,
    axes: Any,
    both: bool,
    out: Any = None,
    out_t: Any = None,
) -> tuple[Any, ...]:
    """The signature of an eager PyTorch cast_transpose(): x's shape, strides, dtype, device
    and alignment, the output dtype and axes as given, `both`, the kinds of scale and amax,
    each given output's layout, and lookup's generation."""
    return (
        "cast",
        lookup.generation,
        x.shape,
        x.stride(),
        x.dtype,
        x.get_device(),
        x.data_ptr() & 15,
        dtype,
        tuple(axes) if type(axes) in (tuple, list) else axes,
        both,
        _operand_key(scale),
        _operand_key(amax),
        _output_key(out_t),
        _output_key(out),
    )


def cast_signature(
    x: Any,
    dtype: Any,
    scale: Any,
    amax: Any,
    axes: Any,
    both: Any,
    out: Any = None,
    out_t: Any = None,
) -> tuple[Any, ...] | None:
    """The call's `cast_key`, or None where it enters no signature (a dtype given as a
    string, axes of another iterable, a `both` that is not a bool, an output that is not a
    plain tensor): what the full path remembers a call by, and what the fast path looks up."""
    if (
        not cast_keyable(dtype, axes)
        or type(both) is not bool
        or not (cast_plain(out) and cast_plain(out_t))
    ):
        return None
    return cast_key(x, dtype, scale, amax, axes, both, out, out_t)


def overlap(a: int, a_len: int, b: int, b_len: int) -> bool:
    return a < b + b_len and b < a + a_len


def fast_cast_torch(
    x: Any,
    dtype: Any,
    scale: Any,
    amax: Any,
    axes: Any,
    both: bool,
    out: Any = None,
    out_t: Any = None,
) -> Any:
    """An eager PyTorch cast_transpose() whose signature was validated before: its launches
    straight away, into new outputs or the given ones (None: take the full path, which
    validates the call and raises what it finds, such as outputs overlapping x, each other
    or amax)."""
    key = cast_signature(x, dtype, scale, amax, axes, both, out, out_t)
    hit = _fast.get(key) if key is not None else None
    if hit is None or x.is_neg():  # a lazily negated view is resolved on the full path
        return None
    px = x.data_ptr()
    amax_ptr = amax.data_ptr() if amax is not None else 0
    if amax_ptr and overlap(px, hit.x_extent, amax_ptr, 4):
        return None  # overlapping: the full path says so
    if scale is None:
        scale_ptr, scale_value = 0, 1.0
    elif hasattr(scale, "data_ptr"):
        scale_ptr, scale_value = scale.data_ptr(), 1.0
    else:  # rounded to float32 as NumPy rounds (the relocated program writes its bits)
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
            or overlap(px, hit.x_extent, py, hit.y_extent)
            or (amax_ptr and overlap(py, hit.y_extent, amax_ptr, 4))
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
                or overlap(px, hit.x_extent, pz, hit.z_extent)
                or (amax_ptr and overlap(pz, hit.z_extent, amax_ptr, 4))
            ):
                return None
        if out_t is not None and overlap(py, hit.y_extent, pz, hit.z_extent):
            return None
    stream = streams.torch_current(hit.ordinal)
    if hit.program is not None:
        _driver.run_relocated(hit.program, stream, px, py, pz, scale_ptr, amax_ptr, scale_value)
    else:
        value = float(np.float32(scale_value))
        hit.launch.run(hit.ctx, stream, px, py, pz, scale_ptr, value, amax_ptr)
    return (z, y) if both else y


def remember_cast(key: tuple[Any, ...], hit: CastHit) -> None:
    """After a validated eager PyTorch cast_transpose() of signature `key` (`cast_key`): its
    next call runs `hit` straight away."""
    _fast.keep(key, hit)

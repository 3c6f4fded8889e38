"""The fast path: a call whose signature was validated before goes straight to the driver.

The signature is read from the array's own attributes (shape, strides, dtype, device, pointer
alignment, lookup generation, and for permute() the axes as given) into one flat tuple; a hit
is the call made ready in its context (one prepared launch, or a permute's steps as one
`_driver.Program`) and runs in one native call on the library's current stream. Anything
else, and any call with an explicit stream, takes the full path (`_api`, `_permuter`), which
`remember`s what it ran.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from ..runtime import driver as _driver, streams
from ..runtime.arrays import NDView, View, transposed_shape
from ..runtime.launch import Launch
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

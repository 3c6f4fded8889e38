"""Adapting the arrays callers pass: pycuda GPUArray, CuPy, PyTorch, JAX, anything with
`__cuda_array_interface__`, and NumPy (copied to the GPU and back).

Every input becomes a :class:`View` (pointer, batch/rows/cols, strides in elements, device,
and the stream its producer names, if any), and every output is allocated as the same kind of
array as the input, so callers get back what they gave.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ..errors import (
    AutotransposeError,
    DeviceError,
    InputTypeError,
    LayoutError,
    OutputError,
    ShapeError,
    UnsupportedDtypeError,
)
from ..plans.dtypes import ElementType, element_type
from . import dlpack as _dlpack, driver as _driver


class View(NamedTuple):
    """A 2-D or batched 3-D array as a kernel sees it. Strides are in elements.

    A NamedTuple rather than a dataclass: one is built per call, on the hot path."""

    kind: str  # "torch", "cupy", "gpuarray", "jax", "cai", "numpy"
    obj: Any
    ptr: int
    ndim: int
    batch: int
    m: int
    n: int
    ld: int  # row pitch
    bs: int  # batch stride
    dtype: Any  # the library's own dtype object
    et: ElementType
    device: int | None  # None for host (NumPy) arrays, and for memory-less empty GPU arrays
    ctx: int | None = None  # the context owning the memory, if not the device's primary one
    stream: int | None = None  # the stream the producer says the data is ready on (CAI v3, JAX)
    keep: Any = None  # what must stay alive while a kernel reads the memory (a DLPack capsule)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.batch, self.m, self.n) if self.ndim == 3 else (self.m, self.n)

    @property
    def size(self) -> int:
        return self.batch * self.m * self.n

    def extent(self) -> tuple[int, int]:
        """[start, end) byte addresses the view touches (empty for an empty array)."""
        if self.size == 0:
            return (self.ptr, self.ptr)
        last = (self.batch - 1) * self.bs + (self.m - 1) * self.ld + self.n
        return (self.ptr, self.ptr + last * self.et.size)


def _module(x: Any) -> str:
    return type(x).__module__.split(".", 1)[0]


def matrix_layout(
    what: str, shape: tuple[int, ...], strides_bytes: tuple[int, ...], itemsize: int
) -> tuple[int, int, int, int, int]:
    """(batch, m, n, ld, bs) in elements, checking the innermost stride is one element."""
    if len(shape) not in (2, 3):
        raise ShapeError(
            f"{what} has {len(shape)} dimension(s) {tuple(shape)}; autotranspose takes a 2-D "
            "matrix (M, N) or a batch (B, M, N); reshape it first"
        )
    if any(s % itemsize for s in strides_bytes):
        raise LayoutError(
            f"{what} has strides {strides_bytes} bytes, not whole {itemsize}-byte elements; "
            "make it contiguous first (e.g. .copy())"
        )
    strides = [s // itemsize for s in strides_bytes]
    if len(shape) == 2:
        shape, strides = (1, *shape), [0, *strides]
    b, m, n = shape
    bs, ld, inner = strides
    if n > 1 and inner != 1 and b * m:  # an empty array has no rows to read (NumPy 2: strides 0)
        raise LayoutError(
            f"{what} has innermost stride {inner} elements (shape {tuple(shape)}, strides "
            f"{tuple(strides)}); the kernels read rows of consecutive elements. Make it "
            "row-major contiguous (e.g. ascontiguousarray / .contiguous()); if it is a "
            "column-major matrix, its transpose is already free: use a .T view instead"
        )
    if m == 1:
        ld = n  # a single row: the row pitch is never used
    if b == 1:
        bs = m * ld
    if b * m * n and (ld < n or bs < 0 or (b > 1 and bs < (m - 1) * ld + n and bs != 0)):
        raise LayoutError(
            f"{what} has overlapping or negative strides {tuple(strides)} (elements) for "
            f"shape {(b, m, n)}; make it contiguous first"
        )
    return b, m, n, ld, bs


class _Source(NamedTuple):
    """What any supported array says of itself: strides in bytes, as its library gives them."""

    kind: str
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # bytes
    dtype: Any
    et: ElementType
    device: int | None
    ctx: int | None = None
    stream: int | None = None
    keep: Any = None


def torch_not_on_gpu(what: str, device: Any) -> DeviceError:
    return DeviceError(
        f"{what} is a PyTorch tensor on {device}; move it to the GPU with .cuda(), "
        "or pass x.numpy() to have autotranspose copy it"
    )


def _source(x: Any, what: str, stream: int | None) -> _Source:
    """Describe `x` without judging its layout: shared by `view` (2-D/3-D, transpose) and
    `nd_view` (any number of dimensions, permute). The layout is checked by the caller
    before the driver is asked anything about a pointer (`_owner` is called last)."""
    mod = _module(x)
    if mod == "torch" and hasattr(x, "data_ptr"):
        et = element_type(x.dtype)
        if not x.is_cuda:
            raise torch_not_on_gpu(what, x.device)
        keep = None
        if x.is_conj() or x.is_neg():  # a lazy view: its values are not its memory's
            if what == "out":
                raise OutputError(
                    "out is a lazily conjugated or negated view (e.g. t.conj()); its memory "
                    "holds other values than it shows: pass a plain tensor (t.resolve_conj())"
                )
            x = keep = x.resolve_conj().resolve_neg()  # on the current stream, before ours
        strides = tuple(s * et.size for s in x.stride())
        return _Source(
            "torch", x.data_ptr(), tuple(x.shape), strides, x.dtype, et, x.device.index, keep=keep
        )
    if mod == "cupy" and hasattr(x, "data") and hasattr(x, "device"):
        et = element_type(x.dtype)
        return _Source("cupy", x.data.ptr, x.shape, x.strides, x.dtype, et, x.device.id)
    if mod == "pycuda" and hasattr(x, "gpudata"):
        et = element_type(x.dtype)
        ptr = x.ptr if x.gpudata is not None else 0
        return _Source("gpuarray", ptr, x.shape, x.strides, x.dtype, et, None)
    if mod in ("jax", "jaxlib") and hasattr(x, "__dlpack__"):
        return _source_jax(x, stream)
    if isinstance(x, np.ndarray):
        et = element_type(x.dtype)
        return _Source("numpy", 0, x.shape, x.strides, x.dtype, et, None)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        dt = np.dtype(cai["typestr"])
        et = element_type(dt)
        shape = tuple(cai["shape"])
        strides = tuple(cai.get("strides") or _c_strides(shape, dt.itemsize))
        named = cai.get("stream") if cai.get("version", 0) >= 3 else None
        return _Source("cai", int(cai["data"][0]), shape, strides, dt, et, None, None, named)
    raise InputTypeError(
        f"{what} is a {type(x).__module__}.{type(x).__name__}; autotranspose takes a "
        "pycuda GPUArray, a CuPy array, a PyTorch CUDA tensor, a JAX array, any object with "
        "__cuda_array_interface__, or a NumPy array: for nested lists, pass np.asarray(x)"
    )


def _owner(s: _Source, what: str) -> tuple[int | None, int | None]:
    """(device, context) of the memory: asked of the driver for GPUArrays and CAI objects,
    whose producers do not say. An empty one may have no memory (pointer 0: pycuda's empty
    GPUArrays, and the CUDA Array Interface allows it), so no device: (None, None), and
    nothing is ever read or written there. Pointer 0 with elements is refused."""
    if s.kind not in ("gpuarray", "cai"):
        return s.device, s.ctx
    if s.ptr:
        return _driver.pointer_owner(s.ptr)
    size = math.prod(s.shape)
    if size:
        where = "its gpudata" if s.kind == "gpuarray" else "__cuda_array_interface__['data']"
        raise DeviceError(
            f"{what} has data pointer 0 (NULL) in {where} but holds {size} elements (shape "
            f"{tuple(s.shape)}); only an empty array may have no memory. Pass an array whose "
            "pointer is the device address of its data, or a NumPy array to have "
            "autotranspose copy it"
        )
    return None, None


def shape_and_type(x: Any) -> tuple[int, ElementType]:
    """(number of dimensions, element type) of any supported array."""
    s = _source(x, "x", None)
    return len(s.shape), s.et


def view(x: Any, what: str = "x", stream: int | None = None) -> View:
    """Describe `x` (any supported array) as a :class:`View`. `stream` is the stream the call
    will run on, for producers that make their data ready on a stream we name (JAX)."""
    s = _source(x, what, stream)
    # NumPy arrays are copied contiguously to the GPU and written back with `out[...] =`:
    # any layout goes, as the row-major one
    strides = s.strides if s.kind != "numpy" else _c_strides(s.shape, s.et.size)
    b, m, n, ld, bs = matrix_layout(what, s.shape, strides, s.et.size)
    dev, ctx = _owner(s, what)
    return View(
        s.kind, x, s.ptr, len(s.shape), b, m, n, ld, bs, s.dtype, s.et, dev, ctx, s.stream, s.keep
    )


class NDView(NamedTuple):
    """An array of any number of dimensions as permute() sees it: shape and strides in
    elements (what `plan.plan_permute` takes), pointer, device, context and stream."""

    kind: str
    obj: Any
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # elements
    dtype: Any
    et: ElementType
    device: int | None  # as View.device
    ctx: int | None = None
    stream: int | None = None
    keep: Any = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def extent(self) -> tuple[int, int]:
        """[start, end) byte addresses the view touches (empty for an empty array)."""
        if self.size == 0:
            return (self.ptr, self.ptr)
        e = self.et.size
        lo = sum((n - 1) * s for n, s in zip(self.shape, self.strides, strict=True) if s < 0)
        hi = sum((n - 1) * s for n, s in zip(self.shape, self.strides, strict=True) if s > 0)
        return (self.ptr + lo * e, self.ptr + (hi + 1) * e)


def nd_view(x: Any, what: str = "x", stream: int | None = None) -> NDView:
    """Describe `x` (any supported array, any number of dimensions) as an :class:`NDView`.
    Only one rule is checked here, before the driver is asked anything: a GPU array's
    strides must be whole elements (on axes of more than one element; others never move a
    pointer; NumPy arrays are copied contiguously, any layout goes). Which strides the
    kernels can read is the plan's question (`plan.plan_permute`)."""
    s = _source(x, what, stream)
    e = s.et.size
    if s.kind != "numpy" and any(st % e for st, n in zip(s.strides, s.shape, strict=True) if n > 1):
        raise LayoutError(
            f"{what} has strides {tuple(s.strides)} bytes, not whole {e}-byte elements; "
            "make it contiguous first (e.g. .copy())"
        )
    strides = tuple(st // e if n > 1 else 0 for st, n in zip(s.strides, s.shape, strict=True))
    dev, ctx = _owner(s, what)
    return NDView(
        s.kind, x, s.ptr, tuple(s.shape), strides, s.dtype, s.et, dev, ctx, s.stream, s.keep
    )


def jax_device(x: Any) -> Any:
    devices = x.devices()
    if len(devices) != 1:
        raise ShapeError(
            f"this JAX array is sharded over {len(devices)} devices; transpose each shard "
            "(x.addressable_shards) or gather it onto one device first"
        )
    (device,) = devices
    if device.platform not in ("gpu", "cuda"):
        raise DeviceError(
            f"this JAX array is on {device} ; put it on a GPU with jax.device_put(x, "
            "jax.devices('cuda')[0]), or pass np.asarray(x) to have autotranspose copy it"
        )
    return device


def jax_stream(device: Any) -> int | None:
    """The stream JAX names for work from outside it on `device` (what its own from_dlpack
    asks a producer to order its writes on)."""
    try:
        return int(device.get_stream_for_external_ready_events())
    except Exception:  # not implemented by this backend: the legacy default stream
        return None


def _source_jax(x: Any, stream: int | None) -> _Source:
    device = jax_device(x)
    et = element_type(x.dtype)
    et.check_whole_values("JAX")
    if stream is None:
        stream = jax_stream(device)
    # JAX makes the data ready on `stream` and keeps the buffer alive while the capsule lives.
    try:
        capsule = x.__dlpack__(stream=stream if stream is not None else 1)
    except Exception as exc:  # a dtype this jaxlib's DLPack has no code for (older float8)
        if isinstance(exc, AutotransposeError) or "DLPack" not in str(exc):
            raise
        raise UnsupportedDtypeError(
            f"JAX cannot hand over this {et.name} array through DLPack ({exc}); call "
            "autotranspose inside jax.jit (its primitive takes any dtype of 1 to 16 bytes), "
            "or upgrade jax"
        ) from exc
    t = _dlpack.read(capsule)
    strides = tuple(s * et.size for s in t.strides) if t.strides else _c_strides(t.shape, et.size)
    dev = int(device.local_hardware_id)
    return _Source("jax", t.ptr, tuple(t.shape), strides, x.dtype, et, dev, None, stream, t.capsule)


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, acc = [], itemsize
    for dim in reversed(shape):
        strides.append(acc)
        acc *= dim
    return tuple(reversed(strides))


def transposed_shape(v: View) -> tuple[int, ...]:
    return (v.batch, v.n, v.m) if v.ndim == 3 else (v.n, v.m)


def allocate_like(v: View, ctx: int) -> Any:
    """A new row-major output (the transposed shape) of the same kind and device as `v`;
    `ctx` is the context our own allocations go in (GPUArray, JAX, unknown CAI producers)."""
    return allocate(v, transposed_shape(v), ctx)


def allocate(v: View | NDView, shape: tuple[int, ...], ctx: int) -> Any:
    """A new row-major array of `shape`, of the same kind, dtype and device as `v` (an empty
    one with no memory where its library makes those: pycuda, Numba)."""
    if v.kind == "torch":
        return v.obj.new_empty(shape)  # x's device and dtype; the caching allocator's stream
    if v.kind == "cupy":
        import cupy

        with cupy.cuda.Device(v.device):
            return cupy.empty(shape, dtype=v.dtype)
    if v.kind == "cai" and _module(v.obj) == "numba":
        from numba import cuda

        if v.device is None:  # an empty array with no memory: Numba's current device
            return cuda.device_array(shape, dtype=v.dtype)
        with cuda.gpus[v.device]:
            return cuda.device_array(shape, dtype=v.dtype)
    nbytes = v.size * v.et.size
    if v.kind == "jax":
        return _dlpack.Exported(
            _driver.Allocation(nbytes, ctx),
            shape,
            _dlpack.dl_dtype(v.et.name, v.et.size),
            v.device,
            v.stream,
            keep=v.keep,
        )
    import pycuda.gpuarray as gpuarray  # a GPUArray for GPUArray, NumPy and unknown CAI inputs

    # Our own allocation in `ctx`: pycuda's allocator would need its context stack, which
    # worker threads do not have.
    with _driver.on_context(ctx):  # pycuda's GPUArray() asks the current context
        data = _driver.Allocation(nbytes, ctx) if nbytes else None  # empty: none, as pycuda's
        return gpuarray.GPUArray(shape, v.dtype, gpudata=data)


def check_output(x: View, out: View) -> None:
    """Reject an `out` that does not fit: before anything is written to it."""
    _check_not_jax(out, "transpose")
    want = transposed_shape(x)
    if out.shape != want:
        raise OutputError(
            f"out has shape {out.shape}; transposing x of shape {x.shape} needs out of shape {want}"
        )
    _check_pair(x, out)


def check_permute_output(
    x: NDView, out: NDView, want: tuple[int, ...], axes: tuple[int, ...]
) -> None:
    """`check_output` for permute(): `want` is the permuted shape."""
    _check_not_jax(out, "permute")
    if out.shape != want:
        raise OutputError(
            f"out has shape {out.shape}; permuting x of shape {x.shape} by axes {axes} needs "
            f"out of shape {want}"
        )
    _check_pair(x, out)


def _check_not_jax(out: View | NDView, call: str) -> None:
    if out.kind == "jax":
        raise OutputError(
            "out is a JAX array, and JAX arrays are immutable: leave out=None and use the "
            f"JAX array {call}() returns"
        )


def _check_pair(x: View | NDView, out: View | NDView) -> None:
    """Dtype, device and overlap: what any output must share with, or keep from, x. An empty
    GPU array with no memory (pointer 0) has no device to compare: nothing is moved."""
    if out.et.name != x.et.name:
        raise OutputError(f"out has dtype {out.et.name}; x has {x.et.name}: they must match")
    if (out.kind == "numpy") != (x.kind == "numpy"):
        raise OutputError(
            "out and x must both be GPU arrays or both NumPy arrays; got "
            f"x on {_place(x)} and out on {_place(out)}"
        )
    if out.device is not None and x.device is not None and out.device != x.device:
        raise OutputError(
            f"out is on GPU {out.device} but x is on GPU {x.device}; allocate out on GPU {x.device}"
        )
    if x.kind != "numpy" and x.size:
        (a0, a1), (b0, b1) = x.extent(), out.extent()
        if a0 < b1 and b0 < a1:
            raise OutputError(
                "out overlaps x in memory; a transpose cannot run in place: pass a separate "
                "buffer (or leave out=None)"
            )
    elif x.kind == "numpy" and x.size and np.shares_memory(x.obj, out.obj):
        raise OutputError("out overlaps x in memory; pass a separate buffer (or leave out=None)")
    if out.ctx is not None and x.ctx is not None and out.ctx != x.ctx:
        raise OutputError(
            "out and x live in different CUDA contexts of the same GPU (e.g. a pycuda "
            "context and the primary one); a kernel can reach only one: allocate out in "
            "x's context, or leave out=None"
        )


def _place(v: View | NDView) -> str:
    if v.kind == "numpy":
        return "the host"
    return "a GPU (empty, no memory)" if v.device is None else f"GPU {v.device}"

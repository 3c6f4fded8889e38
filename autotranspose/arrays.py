"""Adapting the arrays callers pass: pycuda GPUArray, CuPy, PyTorch, JAX, anything with
`__cuda_array_interface__`, and NumPy (copied to the GPU and back).

Every input becomes a :class:`View` (pointer, batch/rows/cols, strides in elements, device,
and the stream its producer names, if any), and every output is allocated as the same kind of
array as the input, so callers get back what they gave.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from . import _dlpack, _driver
from .dtypes import ElementType, element_type
from .errors import DeviceError, InputTypeError, LayoutError, OutputError, ShapeError


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
    device: int | None  # None for host (NumPy) arrays
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


def _layout(
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


def view(x: Any, what: str = "x", stream: int | None = None) -> View:
    """Describe `x` (any supported array) as a :class:`View`. `stream` is the stream the call
    will run on, for producers that make their data ready on a stream we name (JAX)."""
    mod = _module(x)
    if mod == "torch" and hasattr(x, "data_ptr"):
        et = element_type(x.dtype)
        if not x.is_cuda:
            raise DeviceError(
                f"{what} is a PyTorch tensor on {x.device}; move it to the GPU with .cuda(), "
                "or pass x.numpy() to have autotranspose copy it"
            )
        b, m, n, ld, bs = _layout(
            what, tuple(x.shape), tuple(s * et.size for s in x.stride()), et.size
        )
        return View("torch", x, x.data_ptr(), x.dim(), b, m, n, ld, bs, x.dtype, et, x.device.index)
    if mod == "cupy" and hasattr(x, "data") and hasattr(x, "device"):
        et = element_type(x.dtype)
        b, m, n, ld, bs = _layout(what, x.shape, x.strides, et.size)
        return View("cupy", x, x.data.ptr, x.ndim, b, m, n, ld, bs, x.dtype, et, x.device.id)
    if mod == "pycuda" and hasattr(x, "gpudata"):
        et = element_type(x.dtype)
        b, m, n, ld, bs = _layout(what, x.shape, x.strides, et.size)
        ptr = x.ptr if x.gpudata is not None else 0
        dev, ctx = _driver.pointer_owner(ptr) if ptr else (None, None)
        return View("gpuarray", x, ptr, x.ndim, b, m, n, ld, bs, x.dtype, et, dev, ctx)
    if mod in ("jax", "jaxlib") and hasattr(x, "__dlpack__"):
        return _view_jax(x, what, stream)
    if isinstance(x, np.ndarray):
        et = element_type(x.dtype)
        b, m, n, ld, bs = _layout(what, x.shape, x.strides, et.size)
        return View("numpy", x, 0, x.ndim, b, m, n, ld, bs, x.dtype, et, None)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        dt = np.dtype(cai["typestr"])
        et = element_type(dt)
        shape = tuple(cai["shape"])
        strides = cai.get("strides") or _c_strides(shape, dt.itemsize)
        b, m, n, ld, bs = _layout(what, shape, tuple(strides), et.size)
        ptr = int(cai["data"][0])
        dev, ctx = _driver.pointer_owner(ptr) if ptr else (None, None)
        named = cai.get("stream") if cai.get("version", 0) >= 3 else None
        return View("cai", x, ptr, len(shape), b, m, n, ld, bs, dt, et, dev, ctx, named)
    raise InputTypeError(
        f"{what} is a {type(x).__module__}.{type(x).__name__}; autotranspose.transpose takes a "
        "pycuda GPUArray, a CuPy array, a PyTorch CUDA tensor, a JAX array, any object with "
        "__cuda_array_interface__, or a NumPy array: for nested lists, pass np.asarray(x)"
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


def _view_jax(x: Any, what: str, stream: int | None) -> View:
    device = jax_device(x)
    et = element_type(x.dtype)
    if stream is None:
        stream = jax_stream(device)
    # JAX makes the data ready on `stream` and keeps the buffer alive while the capsule lives.
    t = _dlpack.read(x.__dlpack__(stream=stream if stream is not None else 1))
    strides = tuple(s * et.size for s in t.strides) if t.strides else _c_strides(t.shape, et.size)
    b, m, n, ld, bs = _layout(what, t.shape, strides, et.size)
    dev = int(device.local_hardware_id)
    return View("jax", x, t.ptr, len(t.shape), b, m, n, ld, bs, x.dtype, et, dev, None, stream, t.capsule)


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
    shape = transposed_shape(v)
    if v.kind == "torch":
        return v.obj.new_empty(shape)  # x's device and dtype; the caching allocator's stream
    if v.kind == "cupy":
        import cupy

        with cupy.cuda.Device(v.device):
            return cupy.empty(shape, dtype=v.dtype)
    if v.kind == "cai" and _module(v.obj) == "numba":
        from numba import cuda

        with cuda.gpus[v.device]:
            return cuda.device_array(shape, dtype=v.dtype)
    nbytes = v.size * v.et.size
    if v.kind == "jax":
        return _dlpack.Exported(
            _driver.Allocation(nbytes, ctx), shape, _dlpack.dl_dtype(v.et.name, v.et.size),
            v.device, v.stream, keep=v.keep,
        )  # fmt: skip
    import pycuda.gpuarray as gpuarray  # a GPUArray for GPUArray, NumPy and unknown CAI inputs

    # Our own allocation in `ctx`: pycuda's allocator would need its context stack, which
    # worker threads do not have.
    with _driver.on_context(ctx):  # pycuda's GPUArray() asks the current context
        return gpuarray.GPUArray(shape, v.dtype, gpudata=_driver.Allocation(nbytes, ctx))


def check_output(x: View, out: View) -> None:
    """Reject an `out` that does not fit: before anything is written to it."""
    if out.kind == "jax":
        raise OutputError(
            "out is a JAX array, and JAX arrays are immutable: leave out=None and use the "
            "JAX array transpose() returns"
        )
    want = transposed_shape(x)
    if out.shape != want:
        raise OutputError(
            f"out has shape {out.shape}; transposing x of shape {x.shape} needs out of shape {want}"
        )
    if out.et.name != x.et.name:
        raise OutputError(f"out has dtype {out.et.name}; x has {x.et.name}: they must match")
    if (out.device is None) != (x.device is None):
        raise OutputError(
            "out and x must both be GPU arrays or both NumPy arrays; got "
            f"x on {'the host' if x.device is None else f'GPU {x.device}'} and out on "
            f"{'the host' if out.device is None else f'GPU {out.device}'}"
        )
    if out.device != x.device:
        raise OutputError(
            f"out is on GPU {out.device} but x is on GPU {x.device}; allocate out on GPU {x.device}"
        )
    if x.device is not None and x.size:
        (a0, a1), (b0, b1) = x.extent(), out.extent()
        if a0 < b1 and b0 < a1:
            raise OutputError(
                "out overlaps x in memory; a transpose cannot run in place: pass a separate "
                "buffer (or leave out=None)"
            )
    elif x.device is None and x.size and np.shares_memory(x.obj, out.obj):
        raise OutputError("out overlaps x in memory; pass a separate buffer (or leave out=None)")

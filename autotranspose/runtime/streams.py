"""Which stream a call runs on: the caller's current one, as its array library defines it.

With no ``stream=``, a call runs where the caller's own next operation on that array would run,
as PyTorch extensions and Triton do, so it is ordered after the work queued before it and
before the work queued after it, and it is captured into a CUDA graph being recorded there:

- PyTorch: ``torch.cuda.current_stream(x.device)``;
- CuPy: CuPy's current stream for x's device;
- ``__cuda_array_interface__`` v3: the stream the producer names (else the legacy default);
- JAX: the stream JAX asks external producers to order their writes on;
- pycuda GPUArray and NumPy: the legacy default stream.

``stream=`` overrides it; a stream of another device than the array's is refused.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..errors import DeviceError, InputTypeError
from . import driver as _driver
from .signatures import SPECIAL_STREAMS

LEGACY = 0  # the legacy default stream (NULL) of the current context


class Explicit(NamedTuple):
    """A stream the caller passed: its handle, its device if known without the driver, and the
    context it belongs to (None: the device's primary context or a special handle)."""

    handle: int
    device: int | None
    ctx: int | None


def _module(obj: Any) -> str:
    return type(obj).__module__.split(".", 1)[0]


def explicit(stream: Any) -> Explicit:
    """Resolve a caller's ``stream=`` (PyTorch, CuPy, pycuda, ``__cuda_stream__``, int)."""
    mod = _module(stream)
    if mod == "torch" and hasattr(stream, "cuda_stream"):
        return Explicit(int(stream.cuda_stream), int(stream.device_index), None)
    if mod == "cupy" and hasattr(stream, "ptr"):
        return Explicit(int(stream.ptr), int(stream.device_id), None)
    if hasattr(stream, "__cuda_stream__"):
        handle = int(stream.__cuda_stream__()[1])
    elif mod == "pycuda" and hasattr(stream, "handle"):
        handle = int(stream.handle)
    elif isinstance(stream, int) and not isinstance(stream, bool):
        handle = stream
    else:
        raise InputTypeError(
            f"stream must be a PyTorch, CuPy or pycuda stream, an object with __cuda_stream__, "
            f"or an int handle; got {type(stream).__name__} (leave stream=None for the "
            "array's current stream)"
        )
    if handle < 0:
        raise ValueError(f"stream handle {handle} is negative; pass a CUDA stream handle")
    if handle in SPECIAL_STREAMS:  # default streams of whichever context is current
        return Explicit(handle, None, None)
    ctx = _driver.stream_context(handle)
    return Explicit(handle, _driver.context_device(ctx), ctx)


def check_device(s: Explicit, device: int) -> None:
    """Refuse a stream of another device before anything is launched."""
    if s.device is not None and s.device != device:
        raise DeviceError(
            f"stream {s.handle:#x} belongs to GPU {s.device} but the array is on GPU {device}; "
            f"pass a stream of GPU {device} (e.g. torch.cuda.current_stream({device})), or "
            "leave stream=None to run on the array's current stream"
        )


_getters: dict[str, Any] = {}


def torch_current(device: int) -> int:
    """PyTorch's current stream on `device`, as a raw handle (what Triton launches on)."""
    get = _getters.get("torch")
    if get is None:
        import torch

        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        get = _getters["torch"] = raw or (lambda d: torch.cuda.current_stream(d).cuda_stream)
    return get(device)


def cupy_current(device: int) -> int:
    """CuPy's current stream for `device` (CuPy keeps one per device and thread)."""
    get = _getters.get("cupy")
    if get is None:
        import cupy

        get = _getters["cupy"] = cupy.cuda.get_current_stream
    return get(device).ptr


def default(kind: str, device: int | None, named: int | None) -> int:
    """The stream a call on an array of `kind` runs on when the caller names none."""
    if kind == "torch":
        return torch_current(device or 0)
    if kind == "cupy":
        return cupy_current(device or 0)
    if kind in ("cai", "jax") and named is not None:
        return int(named)
    return LEGACY

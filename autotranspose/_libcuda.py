"""The few driver calls pycuda does not expose: pointer attributes and cross-stream events.

pycuda only launches on its own Stream objects; a caller's CuPy/PyTorch stream is bridged with
two events (record on theirs, wait on ours; record on ours, wait on theirs).
"""

from __future__ import annotations

import ctypes
import functools
import threading

from .errors import DeviceError

_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
MEMORYTYPE_HOST = 1
_EVENT_DISABLE_TIMING = 2


@functools.cache
def _lib() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise DeviceError(f"the CUDA driver library libcuda.so.1 cannot be loaded ({exc})") from exc
    lib.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    lib.cuEventCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
    lib.cuEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.cuStreamWaitEvent.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
    return lib


def pointer_device(ptr: int) -> int | None:
    """Ordinal of the device that owns `ptr`, or None for host memory the driver knows of.

    Raises DeviceError for a pointer the driver does not know (plain host memory, freed memory).
    """
    lib = _lib()
    kind = ctypes.c_uint(0)
    err = lib.cuPointerGetAttribute(ctypes.byref(kind), _POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)
    if err:
        raise DeviceError(
            f"address {ptr:#x} is not CUDA device memory (driver error {err}); pass a GPU "
            "array, or a NumPy array to have autotranspose copy it for you"
        )
    if kind.value == MEMORYTYPE_HOST:
        return None
    ordinal = ctypes.c_int(-1)
    err = lib.cuPointerGetAttribute(ctypes.byref(ordinal), _POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
    if err:
        raise DeviceError(f"cannot tell which device owns address {ptr:#x} (driver error {err})")
    return ordinal.value


_tls = threading.local()


def _event(slot: str) -> int:
    ev = getattr(_tls, slot, None)
    if ev is None:
        handle = ctypes.c_void_p()
        err = _lib().cuEventCreate(ctypes.byref(handle), _EVENT_DISABLE_TIMING)
        if err:
            raise DeviceError(f"cuEventCreate failed (driver error {err})")
        ev = handle.value
        setattr(_tls, slot, ev)
    return ev


def join(waiter: int, producer: int, slot: str) -> None:
    """Make stream `waiter` wait for the work queued so far on stream `producer`."""
    lib = _lib()
    ev = _event(slot)
    err = lib.cuEventRecord(ev, producer) or lib.cuStreamWaitEvent(waiter, ev, 0)
    if err:
        raise DeviceError(f"cannot order work between CUDA streams (driver error {err})")

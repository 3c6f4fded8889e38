"""DLPack in and out, for arrays that only speak DLPack with streams (JAX).

Reading: a producer's ``__dlpack__(stream=s)`` makes its data ready on stream `s` and returns
a capsule; we read the pointer, shape and strides from it and keep the capsule (and so the
producer's buffer) alive for as long as our output lives.

Writing: :class:`Exported` wraps memory we allocated and wrote on a stream; a consumer's
``from_dlpack`` calls its ``__dlpack__(stream=theirs)``, which orders their stream after ours,
and frees the memory through the DLPack deleter when the consumer is done with it.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, NamedTuple

from . import _driver

KDL_CUDA = 2
_DL_CODES = {"int": 0, "uint": 1, "float": 2, "bfloat": 4, "complex": 5, "bool": 6}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [
    ("dl_tensor", _DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Tensor(NamedTuple):
    """What a DLPack capsule describes; strides in elements (None: row-major contiguous)."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    device_type: int
    device_id: int
    capsule: Any  # keep alive while the memory is used


def read(capsule: Any) -> Tensor:
    """The tensor a legacy ("dltensor") DLPack capsule describes. The capsule keeps ownership:
    when it is collected unconsumed, its producer's destructor releases the buffer."""
    addr = _api.PyCapsule_GetPointer(capsule, b"dltensor")
    t = _DLManagedTensor.from_address(addr).dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None
    return Tensor(
        (t.data or 0) + t.byte_offset, shape, strides, t.device.device_type, t.device.device_id,
        capsule,
    )  # fmt: skip


def dl_dtype(name: str, size: int) -> tuple[int, int]:
    """(DLPack type code, bits) of one of our element type names."""
    if name == "bool":
        return _DL_CODES["bool"], 8
    for prefix in ("complex", "bfloat", "float", "uint", "int"):
        if name.startswith(prefix):
            return _DL_CODES[prefix], size * 8
    return _DL_CODES["uint"], size * 8  # any other plain type moves as raw bytes


# Exports alive in a consumer: address of the DLManagedTensor -> the Exported that owns it.
_live: dict[int, Exported] = {}
_live_lock = threading.Lock()


@_DELETER
def _deleter(managed: Any) -> None:
    with _live_lock:
        owner = _live.pop(ctypes.addressof(managed.contents), None)
    if owner is not None:
        owner.release()


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule: int) -> None:
    # A capsule nobody consumed still owns its tensor (a consumer renames it "used_dltensor").
    obj = ctypes.cast(capsule, ctypes.py_object).value
    if _api.PyCapsule_IsValid(obj, b"dltensor"):
        addr = _api.PyCapsule_GetPointer(obj, b"dltensor")
        _deleter(ctypes.cast(addr, ctypes.POINTER(_DLManagedTensor)))


class Exported:
    """GPU memory we own, written on `stream`, handed to a DLPack consumer once.

    `keep` holds whatever the data was made from (the input's capsule), so the producer of the
    input cannot reuse that memory before our kernel has read it."""

    def __init__(
        self, alloc: _driver.Allocation, shape: tuple[int, ...], dtype: tuple[int, int],
        device: int, stream: int | None, keep: Any = None,
    ) -> None:  # fmt: skip
        self.alloc, self.shape, self.dtype, self.device = alloc, shape, dtype, device
        self.stream, self.keep = stream, keep
        self._managed: Any = None

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, self.device)

    def __dlpack__(self, stream: Any = None, **_ignored: Any) -> Any:
        if self._managed is not None:
            raise BufferError("this autotranspose result was already exported once")
        if stream is not None and stream != -1 and int(stream) != (self.stream or 0):
            with _driver.on_context(self.alloc.ctx):
                _driver.join(int(stream), self.stream)  # their stream waits for our kernel
        m = _DLManagedTensor()
        ndim = len(self.shape)
        self._shape = (ctypes.c_int64 * ndim)(*self.shape)
        m.dl_tensor.data = self.alloc.ptr
        m.dl_tensor.device = _DLDevice(KDL_CUDA, self.device)
        m.dl_tensor.ndim = ndim
        m.dl_tensor.dtype = _DLDataType(self.dtype[0], self.dtype[1], 1)
        m.dl_tensor.shape = self._shape
        m.dl_tensor.strides = None  # row-major contiguous
        m.dl_tensor.byte_offset = 0
        m.deleter = _deleter
        self._managed = m
        addr = ctypes.addressof(m)
        with _live_lock:
            _live[addr] = self
        return _api.PyCapsule_New(addr, b"dltensor", ctypes.cast(_capsule_destructor, ctypes.c_void_p))

    def release(self) -> None:
        """The consumer is done: wait for our kernel, then free the memory and the input."""
        try:
            with _driver.on_context(self.alloc.ctx):
                _driver.synchronize_stream(self.stream or 0)
        except Exception:  # the context is gone: nothing left to wait for
            pass
        self.alloc.free()
        self.keep = None

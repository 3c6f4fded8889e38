"""The CUDA driver's interface as autotranspose uses it: the entry points it calls through
ctypes with their argument types (runtime/driver.py declares each one on libcuda as it loads
the library), and the driver's constants it passes. Pure data: no library is loaded here."""

from __future__ import annotations

import ctypes
from typing import Any

c_void_p, c_uint, c_int, c_size_t = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_size_t

SIGNATURES: dict[str, list[Any]] = {
    "cuInit": [c_uint],
    "cuDriverGetVersion": [ctypes.POINTER(c_int)],
    "cuGetErrorName": [c_int, ctypes.POINTER(ctypes.c_char_p)],
    "cuDeviceGetCount": [ctypes.POINTER(c_int)],
    "cuDeviceGet": [ctypes.POINTER(c_int), c_int],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(c_void_p), c_int],
    "cuCtxGetCurrent": [ctypes.POINTER(c_void_p)],
    "cuCtxSetCurrent": [c_void_p],
    "cuCtxGetDevice": [ctypes.POINTER(c_int)],
    "cuCtxSynchronize": [],
    "cuPointerGetAttribute": [c_void_p, c_int, ctypes.c_uint64],
    "cuLibraryLoadData": [
        ctypes.POINTER(c_void_p),
        ctypes.c_char_p,
        c_void_p,
        c_void_p,
        c_uint,
        c_void_p,
        c_void_p,
        c_uint,
    ],
    "cuLibraryGetKernel": [ctypes.POINTER(c_void_p), c_void_p, ctypes.c_char_p],
    "cuKernelGetFunction": [ctypes.POINTER(c_void_p), c_void_p],
    "cuKernelSetAttribute": [c_int, c_int, c_void_p, c_int],
    "cuFuncSetAttribute": [c_void_p, c_int, c_int],
    "cuLaunchKernel": [
        c_void_p,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_void_p,
        c_void_p,
        c_void_p,
    ],
    "cuStreamGetCtx": [c_void_p, ctypes.POINTER(c_void_p)],
    "cuStreamSynchronize": [c_void_p],
    "cuStreamIsCapturing": [c_void_p, ctypes.POINTER(c_int)],
    "cuStreamWaitEvent": [c_void_p, c_void_p, c_uint],
    "cuEventCreate": [ctypes.POINTER(c_void_p), c_uint],
    "cuEventRecord": [c_void_p, c_void_p],
    "cuEventSynchronize": [c_void_p],
    "cuEventElapsedTime": [ctypes.POINTER(ctypes.c_float), c_void_p, c_void_p],
    "cuEventDestroy_v2": [c_void_p],
    "cuMemAlloc_v2": [ctypes.POINTER(ctypes.c_uint64), c_size_t],
    "cuMemFree_v2": [ctypes.c_uint64],
    "cuMemAllocAsync": [ctypes.POINTER(ctypes.c_uint64), c_size_t, c_void_p],
    "cuMemFreeAsync": [ctypes.c_uint64, c_void_p],
    "cuMemsetD8_v2": [ctypes.c_uint64, ctypes.c_ubyte, c_size_t],
    "cuMemsetD32_v2": [ctypes.c_uint64, c_uint, c_size_t],
    "cuMemcpyHtoD_v2": [ctypes.c_uint64, c_void_p, c_size_t],
    "cuMemcpyDtoH_v2": [c_void_p, ctypes.c_uint64, c_size_t],
    "cuMemcpyDtoD_v2": [ctypes.c_uint64, ctypes.c_uint64, c_size_t],
    "cuMemcpyDtoDAsync_v2": [ctypes.c_uint64, ctypes.c_uint64, c_size_t, c_void_p],
}

POINTER_ATTRIBUTE_CONTEXT = 1
POINTER_ATTRIBUTE_MEMORY_TYPE = 2
POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
MEMORYTYPE_HOST = 1
EVENT_DISABLE_TIMING = 2
FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # CUfunction_attribute
# Stream handles with a meaning of their own: NULL and CU_STREAM_LEGACY are the legacy default
# stream, CU_STREAM_PER_THREAD the per-thread default stream, of whichever context is current.
SPECIAL_STREAMS = (0, 1, 2)

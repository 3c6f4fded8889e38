"""The CUDA driver calls autotranspose makes itself, through ctypes on libcuda.

pycuda compiles our kernels (nvcc and its disk cache). Loading and launching go through the
driver directly, for two reasons that a library call in a real program cannot live with:
pycuda keeps a per-thread context *stack* and aborts the whole process when a thread ends with
a context still pushed, and its launches take only its own Stream objects, not the stream a
PyTorch, CuPy or JAX caller is working on.

So: kernels are loaded as context-independent libraries (``cuLibraryLoadData``, CUDA 12.0+),
whose kernel handles launch in whichever context is current; a call makes the array's context
current with ``cuCtxSetCurrent`` (as the CUDA runtime, and so PyTorch and CuPy, do), launches
on the caller's stream, and puts back whatever context the thread had before. Nothing is ever
pushed, so nothing can be left on a stack when a thread or the interpreter exits.

CUDA contexts do not survive fork: a process forked after this one initialised the driver
(a DataLoader worker, a `multiprocessing` fork) gets CudaForkError, naming the 'spawn' start
method, from every entry into the driver (`_after_fork_in_child` swaps the hot path's bound
calls for one that raises: no check per call); a process forked before any GPU use is free to
initialise CUDA itself.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import struct
import threading
from collections.abc import Sequence
from typing import Any

from ..errors import CudaForkError, DeviceError, KernelLaunchError
from . import native as _native
from .signatures import (
    EVENT_DISABLE_TIMING,
    FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
    MEMORYTYPE_HOST,
    POINTER_ATTRIBUTE_CONTEXT,
    POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    POINTER_ATTRIBUTE_MEMORY_TYPE,
    SIGNATURES as _SIGNATURES,
)

c_void_p, c_uint, c_int, c_size_t = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_size_t

# Not empty once the interpreter is exiting (atexit: before the teardown of modules): then
# objects that free GPU resources when collected leave them to the driver, which reclaims
# everything at process exit. Freeing then could touch a context already destroyed (pycuda
# destroys its own at exit) or a driver already shut down. Read through a class attribute,
# which outlives the module's globals during teardown.
_EXITING: list[bool] = []
atexit.register(_EXITING.append, True)

_PARAM_CAPACITY = (
    _native.CAPACITY
)  # bytes of kernel arguments (the gathers' 368, the box patterns' 408)
# Offsets of the transpose kernels' arguments (compiler.ARG_FORMAT "PPqqqqqqIII").
TRANSPOSE_OFFSETS = (0, 8, 16, 24, 32, 40, 48, 56, 64, 68, 72)
TRANSPOSE_BYTES = 76


class _Lib:
    """libcuda's functions we call, with their argument types declared."""

    def __init__(self) -> None:
        try:
            self.dll = ctypes.CDLL("libcuda.so.1")  # CDLL: the GIL is released during calls
        except OSError as exc:
            raise DeviceError(
                f"the CUDA driver library libcuda.so.1 cannot be loaded ({exc}); install the "
                "NVIDIA driver or run on a machine with a CUDA GPU"
            ) from exc
        for name, argtypes in _SIGNATURES.items():
            try:
                fn = getattr(self.dll, name)
            except AttributeError as exc:
                raise DeviceError(
                    f"the CUDA driver has no {name}: autotranspose needs a driver for CUDA "
                    "12.0 or newer; update the NVIDIA driver"
                ) from exc
            fn.argtypes, fn.restype = argtypes, c_int
            setattr(self, name, fn)


@functools.cache
def lib() -> Any:
    """libcuda, loaded and initialised once per process."""
    check_not_forked()
    found = _Lib()
    err = found.cuInit(0)
    if err:
        raise DeviceError(
            f"the CUDA driver failed to initialise ({error_name(err, found)}); check "
            "`nvidia-smi` and that CUDA_VISIBLE_DEVICES names a GPU"
        )
    _INITIALISED.append(True)
    return found


def error_name(err: int, found: Any = None) -> str:
    """CUDA_ERROR_... for a driver result code."""
    name = ctypes.c_char_p()
    try:
        (found or lib()).cuGetErrorName(err, ctypes.byref(name))
    except Exception:  # pragma: no cover - only while the driver itself is failing
        pass
    return f"{name.value.decode() if name.value else 'CUDA error'} ({err})"


def check(err: int, what: str) -> None:
    if err:
        raise DeviceError(f"{what} failed: {error_name(err)}")


class _Scratch(threading.local):
    """Per-thread buffers for the hot path: a kernel's argument block and out-parameters.

    Per thread because ctypes releases the GIL during a driver call: a shared buffer could be
    rewritten by another thread between packing and launching."""

    def __init__(self) -> None:
        self.params = bytearray(_PARAM_CAPACITY)
        cbuf = (ctypes.c_char * _PARAM_CAPACITY).from_buffer(self.params)
        self.size = c_size_t(0)
        # cuLaunchKernel's `extra`: BUFFER_POINTER, &params, BUFFER_SIZE, &size, END
        self.extra = (c_void_p * 5)(1, ctypes.addressof(cbuf), 2, ctypes.addressof(self.size), None)
        self.extra_ref = c_void_p(ctypes.addressof(self.extra))
        self._cbuf = cbuf
        self.ctx = c_void_p()
        self.ctx_ref = ctypes.byref(self.ctx)
        # cuLaunchKernel's `kernelParams` for our transpose kernels' fixed argument layout:
        # pointers into `params` at each argument's offset (cheaper for the driver than `extra`);
        # the driver reads only as many as the kernel has, so the gathers' three (in, out and
        # their struct at offset 16) use the first three
        base = ctypes.addressof(cbuf)
        self.kernel_params = (c_void_p * len(TRANSPOSE_OFFSETS))(
            *(base + o for o in TRANSPOSE_OFFSETS)
        )
        self.kernel_params_ref = c_void_p(ctypes.addressof(self.kernel_params))


_scratch = _Scratch()


# --- contexts ----------------------------------------------------------------------------------
def device_count() -> int:
    n = c_int(0)
    check(lib().cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
    return n.value


_primary: dict[int, int] = {}
_primary_lock = threading.Lock()


def primary_context(ordinal: int) -> int:
    """Device `ordinal`'s primary context, retained once for the life of the process (the
    context CuPy, PyTorch, JAX and Numba use, so their arrays need no translation)."""
    ctx = _primary.get(ordinal)
    if ctx is None:
        with _primary_lock:
            ctx = _primary.get(ordinal)
            if ctx is None:
                dev, handle = c_int(0), c_void_p()
                check(lib().cuDeviceGet(ctypes.byref(dev), ordinal), f"cuDeviceGet({ordinal})")
                check(
                    lib().cuDevicePrimaryCtxRetain(ctypes.byref(handle), dev.value),
                    f"retaining device {ordinal}'s primary context",
                )
                ctx = _primary[ordinal] = handle.value
    return ctx


def _ctypes_current() -> int | None:
    """The calling thread's current context (None for none)."""
    s = _scratch
    _cuCtxGetCurrent(s.ctx_ref)
    return s.ctx.value


current = _ctypes_current  # the compiled launcher's module form replaces it (same contract)


def set_current(ctx: int | None) -> None:
    err = _cuCtxSetCurrent(ctx)
    if err:
        raise DeviceError(f"cannot make a CUDA context current: {error_name(err)}")


class on_context:
    """``with on_context(ctx):`` run driver calls in `ctx`, then restore the caller's context."""

    __slots__ = ("ctx", "prev")

    def __init__(self, ctx: int) -> None:
        self.ctx = ctx

    def __enter__(self) -> None:
        self.prev = current()
        if self.prev != self.ctx:
            set_current(self.ctx)

    def __exit__(self, *exc: object) -> None:
        if self.prev != self.ctx:
            set_current(self.prev)


def context_device(ctx: int) -> int:
    """The device ordinal of context `ctx`."""
    dev = c_int(-1)
    with on_context(ctx):
        check(lib().cuCtxGetDevice(ctypes.byref(dev)), "cuCtxGetDevice")
    return dev.value


def synchronize(ctx: int) -> None:
    """Wait for all work in `ctx`; raises DeviceError if the context is broken."""
    with on_context(ctx):
        check(lib().cuCtxSynchronize(), "cuCtxSynchronize")


def stream_context(stream: int) -> int | None:
    """The context a (non-special) stream belongs to."""
    ctx = c_void_p()
    err = lib().cuStreamGetCtx(stream, ctypes.byref(ctx))
    if err:
        raise DeviceError(
            f"stream {stream:#x} is not a live CUDA stream ({error_name(err)}); pass a stream "
            "object of the array's library, or leave stream=None for its current stream"
        )
    return ctx.value


def is_capturing(stream: int | None) -> bool:
    """Is `stream` being captured into a CUDA graph? Also True when the driver refuses to say
    (the legacy stream while another stream captures in global mode): then nothing that
    synchronises may run either."""
    status = c_int(0)
    err = lib().cuStreamIsCapturing(stream, ctypes.byref(status))
    return bool(err) or status.value != 0  # CU_STREAM_CAPTURE_STATUS_NONE is 0


def synchronize_stream(stream: int) -> None:
    check(lib().cuStreamSynchronize(stream), "cuStreamSynchronize")


# --- pointers ----------------------------------------------------------------------------------
def pointer_owner(ptr: int) -> tuple[int | None, int | None]:
    """(device ordinal, owning context) of `ptr`; (None, None) for host memory the driver
    knows. The context is None for memory not tied to one (stream-ordered pools, VMM).

    Raises DeviceError for an address the driver does not know (plain host memory, freed)."""
    L = lib()
    kind = c_uint(0)
    err = L.cuPointerGetAttribute(ctypes.byref(kind), POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)
    if err:
        raise DeviceError(
            f"address {ptr:#x} is not CUDA device memory ({error_name(err)}); pass a GPU "
            "array, or a NumPy array to have autotranspose copy it for you"
        )
    if kind.value == MEMORYTYPE_HOST:
        return None, None
    ordinal, ctx = c_int(-1), c_void_p()
    err = L.cuPointerGetAttribute(ctypes.byref(ordinal), POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
    if err:
        raise DeviceError(f"cannot tell which device owns address {ptr:#x} ({error_name(err)})")
    if L.cuPointerGetAttribute(ctypes.byref(ctx), POINTER_ATTRIBUTE_CONTEXT, ptr):
        ctx.value = None
    return ordinal.value, ctx.value


def pointer_context(ptr: int) -> int | None:
    """Hot-path form of :func:`pointer_owner`: the owning context only (None if unknown)."""
    s = _scratch
    if _cuPointerGetAttribute(s.ctx_ref, POINTER_ATTRIBUTE_CONTEXT, ptr):
        return None
    return s.ctx.value


# --- kernels -----------------------------------------------------------------------------------
def load_library(cubin: bytes) -> int:
    """Load a cubin as a context-independent library; its kernels launch in any context."""
    handle = c_void_p()
    check(
        lib().cuLibraryLoadData(ctypes.byref(handle), cubin, None, None, 0, None, None, 0),
        "cuLibraryLoadData",
    )
    return handle.value


def library_kernel(library: int, name: str) -> int:
    handle = c_void_p()
    check(lib().cuLibraryGetKernel(ctypes.byref(handle), library, name.encode()), f"kernel {name}")
    return handle.value


def kernel_function(kernel: int, ctx: int) -> int:
    """The CUfunction of a library kernel in context `ctx` (loading it there if needed).
    Launching this handle skips the driver's per-launch kernel-to-context resolution."""
    handle = c_void_p()
    with on_context(ctx):
        check(lib().cuKernelGetFunction(ctypes.byref(handle), kernel), "cuKernelGetFunction")
    return handle.value


def allow_dynamic_shared(kernel: int, nbytes: int, device: int) -> None:
    """Let library kernel `kernel` launch with `nbytes` of dynamic shared memory on `device`
    (past the 48 KiB every kernel may use, a kernel must opt in)."""
    check(
        lib().cuKernelSetAttribute(
            FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes, kernel, device
        ),
        "cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
    )


def allow_function_dynamic_shared(func: int, nbytes: int, ctx: int) -> None:
    """The same for a context's function of a library kernel (`kernel_function`): the
    attribute set on the kernel covers functions loaded after it, this one those before."""
    with on_context(ctx):
        check(
            lib().cuFuncSetAttribute(func, FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes),
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
        )


def launch_args(
    kernel: int, grid: tuple[int, ...], block: tuple[int, ...], shared: int = 0
) -> tuple[Any, ...]:
    """cuLaunchKernel's leading arguments, converted to C once per prepared launch: the hot
    path then hands ctypes objects straight through, with no per-argument conversion.
    `shared`: dynamic shared memory bytes (the kernel opted in: `allow_dynamic_shared`)."""
    return (c_void_p(kernel), *(c_uint(v) for v in (*grid, *block)), c_uint(shared))


def launch(args: tuple[Any, ...], stream: int | None, params: bytes) -> None:
    """cuLaunchKernel with `args` (from :func:`launch_args`) on `stream`, with the packed
    argument block `params`, in the calling thread's current context."""
    s = _scratch
    n = len(params)
    s.params[:n] = params
    s.size.value = n
    err = _cuLaunchKernelRaw(*args, c_void_p(stream), None, s.extra_ref)
    if err:
        raise KernelLaunchError(f"cuLaunchKernel failed: {error_name(err)}")


_SAME: Any = object()


class Prepared:
    """One launch made ready for one context: the kernel's function there, its grid and
    block, and the argument block with everything but the two pointers (`tail`: the
    transpose kernels' scalars, or a row copy's, gather's or packed launch's struct; their
    first arguments sit at the same offsets, TRANSPOSE_OFFSETS). `head`: the two pointers'
    words as the native struct holds them until a call fills them in (a relocated program's
    codes, `frameworks._jax_handler`; zeros otherwise).

    With the compiled launcher (:mod:`._native`) the whole launch is a C struct handed over by
    address; without it, the ctypes objects for ``cuLaunchKernel``."""

    __slots__ = ("address", "args", "ctx", "nbytes", "spec", "tail")

    def __init__(
        self,
        func: int,
        ctx: int,
        grid: tuple[int, ...],
        block: tuple[int, ...],
        tail: bytes,
        shared: int = 0,
        head: bytes = bytes(16),
    ) -> None:
        self.ctx = ctx
        if shared:  # the context's function of a kernel that opted in: say so for it too
            allow_function_dynamic_shared(func, shared, ctx)
        self.args = launch_args(func, grid, block, shared)
        self.tail = tail
        self.nbytes = 16 + len(tail)
        if self.nbytes > _PARAM_CAPACITY:
            raise KernelLaunchError(
                f"a kernel argument block of {self.nbytes} bytes: the launcher holds at most "
                f"{_PARAM_CAPACITY} (raise _native.CAPACITY)"
            )
        self.spec: Any = None
        self.address = 0
        if _native_launch() is not None:
            spec = _native.Spec()
            spec.get, spec.set, spec.launch = _entry_points()
            spec.func, spec.ctx = func, ctx
            spec.dims[:] = [*grid, *block, shared]
            spec.nbytes = self.nbytes
            spec.offsets[:] = list(TRANSPOSE_OFFSETS)
            ctypes.memmove(ctypes.addressof(spec.params), head + tail, self.nbytes)
            self.spec, self.address = spec, ctypes.addressof(spec)


@functools.cache
def _entry_points() -> tuple[int, int, int]:
    """Addresses of the driver functions the compiled launcher calls."""
    dll = lib().dll
    names = ("cuCtxGetCurrent", "cuCtxSetCurrent", "cuLaunchKernel")
    get, set_, launch_ = (ctypes.cast(dll[name], c_void_p).value for name in names)
    return get, set_, launch_


class Program:
    """The steps of one call made ready in one context: each a prepared launch at its
    (input, output) byte offsets, or (no launch) a device-to-device copy of `nbytes` there.

    With the compiled launcher the whole call is one C call (`_native`'s `at_run`), so a plan
    of several launches costs the host no Python per launch; without it, a loop here."""

    __slots__ = ("address", "c", "c_steps", "ctx", "steps")

    def __init__(self, ctx: int, steps: Sequence[tuple[Prepared | None, int, int, int]]) -> None:
        self.ctx = ctx
        self.steps = tuple(steps)
        for prep, *_ in self.steps:
            if prep is not None and prep.ctx != ctx:
                raise KernelLaunchError("a program's launches must be prepared in its context")
        self.address = 0
        self.c: Any = None
        self.c_steps: Any = None
        if _native_launch() is not None and all(p is None or p.address for p, *_ in self.steps):
            arr = (_native.Step * max(1, len(self.steps)))()
            for k, (prep, i, o, nbytes) in enumerate(self.steps):
                arr[k].launch = prep.address if prep is not None else None
                arr[k].in_off, arr[k].out_off, arr[k].nbytes = i, o, nbytes
            prog = _native.CProgram()
            prog.get, prog.set, _ = _entry_points()
            prog.copy = ctypes.cast(lib().dll["cuMemcpyDtoDAsync_v2"], c_void_p).value
            prog.ctx, prog.count = ctx, len(self.steps)
            prog.steps = ctypes.cast(arr, ctypes.POINTER(_native.Step))
            self.c, self.c_steps, self.address = prog, arr, ctypes.addressof(prog)

    def run(self, src: int, dst: int, stream: int | None, restore: Any = _SAME) -> None:
        """Every step on `stream` in the program's context, from any thread; the thread's
        own context (or `restore`) is current again afterwards."""
        if self.address:
            err = _at_run(
                self.address, src, dst, stream, _native.SAME if restore is _SAME else restore
            )
            if err:
                raise KernelLaunchError(f"a launch of the call failed: {error_name(err)}")
            return
        prev = current() if restore is _SAME else restore
        try:
            for prep, i, o, nbytes in self.steps:
                if prep is None:
                    memcpy_dtod_async(dst + o, src + i, nbytes, stream, self.ctx)
                else:
                    launch_transpose(prep, src + i, dst + o, stream, prev)
        finally:
            if current() != prev:
                set_current(prev)


def _native_launch() -> Any:
    """The compiled launch function, or None (then the ctypes path below). The module form
    also takes over :func:`current`, which the hot path calls before allocating an output."""
    global _at_transpose, _at_run, _at_relocated, current
    check_not_forked()  # in a forked child, the refusals stay bound
    native = _native.launcher()
    if native is None:
        _at_transpose = _at_run = _at_relocated = None
        return None
    if native.current is not None and current is _ctypes_current:
        native.bind(_entry_points()[0])
        current = native.current
    _at_transpose, _at_run, _at_relocated = native.transpose, native.run, native.relocated
    return _at_transpose


_at_transpose: Any = None
_at_run: Any = None
_at_relocated: Any = None


def run_relocated(
    program: Program, stream: int | None, *bases: int | float, restore: Any = _SAME
) -> None:
    """Run a program whose argument words are codes for the call's buffers (`_native`'s
    `at_run_relocated`: code k << RELOC_SHIFT | offset is bases[k - 1] + offset; a float base
    is its float32's bits) on `stream`, then make `restore` current (by default what the
    thread had). The program needs the compiled launcher (`program.address`)."""
    err = _at_relocated(
        program.address, stream, _native.SAME if restore is _SAME else restore, *bases
    )
    if err:
        raise KernelLaunchError(f"a launch of the call failed: {error_name(err)}")


def launch_transpose(
    prep: Prepared | Program, src: int, dst: int, stream: int | None, restore: Any = _SAME
) -> None:
    """The hot path: launch a prepared kernel, or run a program of several (`src` -> `dst`),
    in its context from any thread, then make current again the context the thread had (or
    `restore`, what it had before the caller's own work changed it)."""
    if type(prep) is Program:
        prep.run(src, dst, stream, restore)
        return
    if prep.address:
        err = _at_transpose(
            prep.address, src, dst, stream, _native.SAME if restore is _SAME else restore
        )
        if err:
            raise KernelLaunchError(f"cuLaunchKernel failed: {error_name(err)}")
        return
    ctx = prep.ctx
    s = _scratch
    _cuCtxGetCurrent(s.ctx_ref)
    cur = s.ctx.value
    if cur != ctx:
        set_current(ctx)
    s.params[: prep.nbytes] = _POINTERS.pack(src, dst) + prep.tail
    err = _cuLaunchKernelRaw(*prep.args, c_void_p(stream), s.kernel_params_ref, None)
    back = cur if restore is _SAME else restore
    if back != ctx:
        _cuCtxSetCurrent(back)
    if err:
        raise KernelLaunchError(f"cuLaunchKernel failed: {error_name(err)}")


_POINTERS = struct.Struct("PP")


# --- events and streams ------------------------------------------------------------------------
class Event:
    """A CUDA event in the current context (timing enabled unless `timing=False`)."""

    _at_exit = _EXITING

    def __init__(self, timing: bool = True) -> None:
        h = c_void_p()
        check(
            lib().cuEventCreate(ctypes.byref(h), 0 if timing else EVENT_DISABLE_TIMING),
            "cuEventCreate",
        )
        self.handle = h.value

    def record(self, stream: int | None = 0) -> Event:
        check(lib().cuEventRecord(self.handle, stream), "cuEventRecord")
        return self

    def synchronize(self) -> None:
        check(lib().cuEventSynchronize(self.handle), "cuEventSynchronize")

    def ms_since(self, start: Event) -> float:
        ms = ctypes.c_float(0)
        check(
            lib().cuEventElapsedTime(ctypes.byref(ms), start.handle, self.handle),
            "cuEventElapsedTime",
        )
        return ms.value

    def __del__(self) -> None:
        if self._at_exit:  # the process is ending: the driver reclaims it, maybe already has
            return
        try:
            lib().cuEventDestroy_v2(self.handle)
        except Exception:  # interpreter shutdown
            pass


def recorded_event(stream: int | None) -> int:
    """A raw event (no timing) recorded on `stream` in the current context, owned by the
    caller: for the C side that waits on it and destroys it (`_dlpack`'s release)."""
    h = c_void_p()
    check(lib().cuEventCreate(ctypes.byref(h), EVENT_DISABLE_TIMING), "cuEventCreate")
    err = lib().cuEventRecord(h.value, stream)
    if err:
        lib().cuEventDestroy_v2(h.value)
        check(err, "cuEventRecord")
    return h.value


@functools.cache
def release_entry_points() -> tuple[int, int, int, int, int]:
    """Addresses of cuCtxGetCurrent, cuCtxSetCurrent, cuMemFree_v2, cuEventSynchronize and
    cuEventDestroy_v2: what C code that frees our memory outside Python calls."""
    dll = lib().dll
    names = (
        "cuCtxGetCurrent",
        "cuCtxSetCurrent",
        "cuMemFree_v2",
        "cuEventSynchronize",
        "cuEventDestroy_v2",
    )
    get, set_, free, sync, destroy = (ctypes.cast(dll[n], c_void_p).value for n in names)
    return get, set_, free, sync, destroy


def join(waiter: int | None, producer: int | None) -> None:
    """Make stream `waiter` wait for the work queued so far on stream `producer` (both in the
    current context)."""
    ev = Event(timing=False).record(producer)
    check(lib().cuStreamWaitEvent(waiter, ev.handle, 0), "cuStreamWaitEvent")


# --- memory ------------------------------------------------------------------------------------
def mem_alloc(nbytes: int) -> int:
    """Device memory in the current context."""
    ptr = ctypes.c_uint64(0)
    err = lib().cuMemAlloc_v2(ctypes.byref(ptr), max(1, nbytes))
    if err:
        raise DeviceError(
            f"cannot allocate {nbytes} bytes of GPU memory ({error_name(err)}); free some, or "
            "pass a preallocated out="
        )
    return ptr.value


def mem_free(ptr: int) -> None:
    check(lib().cuMemFree_v2(ptr), "cuMemFree")


def mem_alloc_async(nbytes: int, stream: int | None, ctx: int) -> int:
    """Device memory ordered on `stream` (the driver's stream-ordered pool, in context
    `ctx`): usable by work queued there after this call, and captured into a CUDA graph
    being recorded there (an allocation node) rather than refused."""
    ptr = ctypes.c_uint64(0)
    with on_context(ctx):
        err = lib().cuMemAllocAsync(ctypes.byref(ptr), max(1, nbytes), stream)
    if err:
        raise DeviceError(
            f"cannot allocate {nbytes} bytes of GPU memory on the call's stream "
            f"({error_name(err)}); free some GPU memory and call again"
        )
    return ptr.value


def mem_free_async(ptr: int, stream: int | None, ctx: int) -> None:
    """Free `mem_alloc_async` memory once the work queued on `stream` before it is done."""
    with on_context(ctx):
        check(lib().cuMemFreeAsync(ptr, stream), "cuMemFreeAsync")


def memset_d8(ptr: int, value: int, count: int) -> None:
    check(lib().cuMemsetD8_v2(ptr, value, count), "cuMemsetD8")


def memset_d32(ptr: int, value: int, count: int) -> None:
    check(lib().cuMemsetD32_v2(ptr, value, count), "cuMemsetD32")


def memcpy_htod(dst: int, src_host: int, nbytes: int) -> None:
    check(lib().cuMemcpyHtoD_v2(dst, src_host, nbytes), "cuMemcpyHtoD")


def memcpy_dtoh(dst_host: int, src: int, nbytes: int) -> None:
    check(lib().cuMemcpyDtoH_v2(dst_host, src, nbytes), "cuMemcpyDtoH")


def memcpy_dtod(dst: int, src: int, nbytes: int) -> None:
    check(lib().cuMemcpyDtoD_v2(dst, src, nbytes), "cuMemcpyDtoD")


def memcpy_dtod_async(dst: int, src: int, nbytes: int, stream: int | None, ctx: int) -> None:
    """A device-to-device copy queued on `stream` in context `ctx` (made current for the
    call only, as a launch does): ordered with the kernels of that stream, and captured
    into a CUDA graph being recorded there."""
    with on_context(ctx):
        check(lib().cuMemcpyDtoDAsync_v2(dst, src, nbytes, stream), "cuMemcpyDtoDAsync")


class Allocation(int):
    """Device memory owned by a Python object: freed (in its own context) when collected.

    An int (the pointer) so that pycuda, whose Boost.Python signatures take only real ints,
    accepts it as a GPUArray's `gpudata`."""

    ptr: int
    ctx: int
    nbytes: int
    _at_exit = _EXITING

    def __new__(cls, nbytes: int, ctx: int) -> Allocation:
        with on_context(ctx):
            ptr = mem_alloc(nbytes)
        self = super().__new__(cls, ptr)
        self.ptr, self.ctx, self.nbytes = ptr, ctx, nbytes
        return self

    def free(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            with on_context(self.ctx):
                mem_free(ptr)

    def disown(self) -> int:
        """Hand the memory to another owner (C code that frees it): this object no longer
        frees it. Returns the pointer."""
        ptr, self.ptr = self.ptr, 0
        return ptr

    def __del__(self) -> None:
        if self._at_exit:  # the process is ending: the driver reclaims the memory, and the
            return  # context may already be gone (pycuda destroys its own at exit)
        try:
            self.free()
        except Exception:  # interpreter shutdown, or the context is gone
            pass


# Bound once: the hot path calls these without an attribute lookup on `lib()`.
def _bind() -> None:
    global _cuCtxGetCurrent, _cuCtxSetCurrent, _cuLaunchKernelRaw, _cuPointerGetAttribute
    L = lib()
    # cuCtxGetCurrent reads a thread-local: called without releasing the GIL (PYFUNCTYPE),
    # which costs less than the release and re-acquire around it.
    get = ctypes.PYFUNCTYPE(c_int, c_void_p)(("cuCtxGetCurrent", L.dll))
    _cuCtxGetCurrent, _cuCtxSetCurrent = get, L.cuCtxSetCurrent
    _cuPointerGetAttribute = L.cuPointerGetAttribute
    # A second handle on cuLaunchKernel with no declared argument types: it takes the ctypes
    # objects of launch_args() as they are (declared types would convert each one per call).
    raw = L.dll["cuLaunchKernel"]
    raw.restype = c_int
    _cuLaunchKernelRaw = raw


def _late(name: str) -> Any:
    def first_call(*args: Any) -> int:
        _bind()  # loads and initialises the driver, then rebinds the module globals
        return globals()["_" + name](*args)

    return first_call


_cuCtxGetCurrent = _late("cuCtxGetCurrent")
_cuCtxSetCurrent = _late("cuCtxSetCurrent")
_cuLaunchKernelRaw = _late("cuLaunchKernelRaw")
_cuPointerGetAttribute = _late("cuPointerGetAttribute")


def ready() -> None:
    """Load and initialise the driver and bind the hot-path calls (idempotent)."""
    lib()
    _bind()


# --- fork ------------------------------------------------------------------------------------------
# Not empty once `lib` initialised the driver in this process (or in an ancestor before a fork).
_INITIALISED: list[bool] = []
# The parent's pid, in a process forked after the driver was initialised (in its parent, or an
# ancestor): there every entry into the driver raises CudaForkError.
_FORKED_FROM: list[int] = []


def fork_error() -> CudaForkError:
    return CudaForkError(
        f"autotranspose used the GPU in this process's parent (pid {_FORKED_FROM[0]}) before "
        "this process was forked from it, and CUDA cannot be used in a forked child; start the "
        "worker processes with the 'spawn' start method instead: "
        "multiprocessing.set_start_method('spawn') (or multiprocessing.get_context('spawn')), "
        "torch.multiprocessing.set_start_method('spawn'), or "
        "DataLoader(..., multiprocessing_context='spawn')"
    )


def forked() -> bool:
    """Whether this process was forked after the driver was initialised (it cannot use CUDA)."""
    return bool(_FORKED_FROM)


def check_not_forked() -> None:
    """CudaForkError in a process forked after the driver was initialised: what the full
    path of a call meets first (the hot path meets the refusals bound in its place)."""
    if _FORKED_FROM:
        raise fork_error()


def _refuse(*_args: Any) -> Any:
    raise fork_error()


def _after_fork_in_child() -> None:
    """In a forked child: a lock the parent's threads held stays free; and where the parent
    had initialised the driver, every call the hot path binds (the launcher's included) now
    raises CudaForkError, and the parent's contexts are forgotten. Nothing in the child then
    reaches the driver: collected Allocations and Events, and exit, touch no context."""
    global _primary_lock, current, _at_transpose, _at_run, _at_relocated
    global _cuCtxGetCurrent, _cuCtxSetCurrent, _cuLaunchKernelRaw, _cuPointerGetAttribute
    _primary_lock = threading.Lock()
    if not _FORKED_FROM and not _INITIALISED:
        return  # no GPU use before the fork: this process may initialise CUDA itself
    if not _FORKED_FROM:
        _FORKED_FROM.append(os.getppid())
    _primary.clear()
    current = _refuse
    _at_transpose = _at_run = _at_relocated = _refuse
    _cuCtxGetCurrent = _cuCtxSetCurrent = _cuLaunchKernelRaw = _cuPointerGetAttribute = _refuse
    lib.cache_clear()
    _entry_points.cache_clear()
    release_entry_points.cache_clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

"""DLPack in and out, for arrays that only speak DLPack with streams (JAX).

Reading: a producer's ``__dlpack__(stream=s)`` makes its data ready on stream `s` and returns
a capsule; we read the pointer, shape and strides from it and keep the capsule (and so the
producer's buffer) alive for as long as our output lives.

Writing: :class:`Exported` wraps memory we allocated and wrote on a stream; a consumer's
``from_dlpack`` calls its ``__dlpack__(stream=theirs)``, which orders their stream after ours,
and frees the memory through the DLPack deleter when the consumer is done with it.

The deleter runs whenever and wherever the consumer lets go: JAX calls it from its own
threads, and at exit after the interpreter has torn down this module's globals, or has
finished altogether. A Python callback cannot run there (a ctypes callback whose thunk or
globals are gone crashed the process at exit), nor may the tensor it is handed live in
memory Python frees. So the exported tensor, its deleter and the capsule's destructor are C
(`RELEASE_SOURCE`, built once per machine with the system C compiler, like the launcher):
the tensor is malloc'ed, the deleter waits for our kernel's event and frees the device
memory through driver entry points it was handed, then puts the tensor on a list of
released exports and asks the interpreter, while it runs, for a pending call
(``Py_AddPendingCall``: any thread, no GIL needed) that takes that list in the main thread
and drops what Python still held for them (the input's capsule); each new export takes it
too. Without a C compiler, Python callbacks do the same, made to
outlive the module's teardown and to do nothing once the interpreter is exiting (the
process's memory goes with it): safe while Python runs, best effort after.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import subprocess
import sys
import threading
from typing import Any, NamedTuple

from . import driver as _driver, native as _native

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

# The capsule functions through prototypes of our own: the attributes of ctypes.pythonapi's
# function objects are shared by every library in the process, and others set them their
# own way (jax.ffi.pycapsule gives PyCapsule_New's destructor a CFUNCTYPE type).
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_new = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)(("PyCapsule_New", ctypes.pythonapi))
_incref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", ctypes.pythonapi))
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
    addr = _capsule_get_pointer(capsule, b"dltensor")
    t = _DLManagedTensor.from_address(addr).dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None
    return Tensor(
        (t.data or 0) + t.byte_offset,
        shape,
        strides,
        t.device.device_type,
        t.device.device_id,
        capsule,
    )


def dl_dtype(name: str, size: int) -> tuple[int, int]:
    """(DLPack type code, bits) of one of our element type names: DLPack 1.1's own code where
    it has one (the float8/6/4 formats: what JAX exports and imports them as), else the
    unsigned integer of the element's size (raw bytes)."""
    if name in _DL_NAMED:
        return _DL_NAMED[name], size * 8
    if name == "bool":
        return _DL_CODES["bool"], 8
    for prefix in ("complex", "bfloat", "float", "uint", "int"):
        if name.startswith(prefix) and name.removeprefix(prefix).isdigit():
            return _DL_CODES[prefix], size * 8
    return _DL_CODES["uint"], size * 8  # any other type moves as raw bytes


# DLPack 1.1's codes of the 8-bit float formats (dlpack.h, DLDataTypeCode)
_DL_NAMED = {
    "float8_e3m4": 7,
    "float8_e4m3": 8,
    "float8_e4m3b11fnuz": 9,
    "float8_e4m3fn": 10,
    "float8_e4m3fnuz": 11,
    "float8_e5m2": 12,
    "float8_e5m2fnuz": 13,
    "float8_e8m0fnu": 14,
}


# --- exports ----------------------------------------------------------------------------------
MAX_DIMS = 16  # shape entries an export holds (permute() makes at most 8)

RELEASE_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>

#define AT_MAX_DIMS @MAX_DIMS@
typedef struct { int32_t device_type, device_id; } at_dl_device;
typedef struct { uint8_t code, bits; uint16_t lanes; } at_dl_dtype;
typedef struct {
    void *data;
    at_dl_device device;
    int32_t ndim;
    at_dl_dtype dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} at_dl_tensor;
typedef struct at_dl_managed {
    at_dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct at_dl_managed *);
} at_dl_managed;

typedef int (*get_t)(void **);
typedef int (*set_t)(void *);
typedef int (*free_t)(uint64_t);
typedef int (*event_t)(void *);

/* One exported tensor and how to release it; malloc'ed, so no interpreter teardown frees
   it under a consumer. Entry points left NULL are skipped (tests export host memory). */
typedef struct at_export {
    at_dl_managed managed;  /* first: the consumer holds its address */
    int64_t shape[AT_MAX_DIMS];
    get_t get;              /* cuCtxGetCurrent */
    set_t set;              /* cuCtxSetCurrent */
    free_t mem_free;        /* cuMemFree_v2 */
    event_t event_sync;     /* cuEventSynchronize */
    event_t event_destroy;  /* cuEventDestroy_v2 */
    void *ctx;              /* the memory's (and the event's) context */
    uint64_t ptr;           /* the memory, freed once */
    void *event;            /* recorded after our kernel */
    struct at_export *next; /* on the released list */
} at_export;

static at_export *g_released;

/* Python learns of released exports through Py_AddPendingCall (callable from any thread,
   with or without the GIL): the interpreter's main thread runs the sweeper at its next
   bytecode boundary, which drops what Python held for them. Only while Python runs: the
   process's exit switches it off (at_export_python_gone) before the teardown begins. The
   Python C API is handed over by address, so no Python headers are needed. */
typedef int (*pending_t)(void *);
typedef int (*add_pending_t)(pending_t, void *);
typedef void *(*call_t)(void *);
typedef void (*decref_t)(void *);
typedef void (*err_clear_t)(void);
static add_pending_t g_add_pending;
static call_t g_call;
static decref_t g_decref;
static err_clear_t g_err_clear;
static void *g_sweeper;
static int g_python_alive;
static int g_pending;

static int at_export_run_sweeper(void *unused)
{
    (void)unused;
    __atomic_store_n(&g_pending, 0, __ATOMIC_RELEASE);
    if (!__atomic_load_n(&g_python_alive, __ATOMIC_ACQUIRE)) return 0;
    void *r = g_call(g_sweeper);
    if (r) g_decref(r);
    else g_err_clear();
    return 0;
}

static int g_waking;  /* threads between the check of g_python_alive and their call */

static void at_export_wake_python(void)
{
    __atomic_add_fetch(&g_waking, 1, __ATOMIC_ACQ_REL);
    if (__atomic_load_n(&g_python_alive, __ATOMIC_ACQUIRE) &&
        !__atomic_exchange_n(&g_pending, 1, __ATOMIC_ACQ_REL) &&  /* else one is queued */
        g_add_pending(at_export_run_sweeper, 0) != 0)
        __atomic_store_n(&g_pending, 0, __ATOMIC_RELEASE);  /* queue full: the next export sweeps */
    __atomic_sub_fetch(&g_waking, 1, __ATOMIC_ACQ_REL);
}

void at_export_bind_sweeper(void *add_pending, void *call, void *decref, void *err_clear,
                            void *sweeper)
{
    g_add_pending = (add_pending_t)add_pending;
    g_call = (call_t)call;
    g_decref = (decref_t)decref;
    g_err_clear = (err_clear_t)err_clear;
    g_sweeper = sweeper;
    __atomic_store_n(&g_python_alive, sweeper != 0, __ATOMIC_RELEASE);
}

/* At exit (atexit, main thread): no pending call is asked for after this returns, so none
   reaches an interpreter being finalized. Py_AddPendingCall takes no lock the caller holds. */
void at_export_python_gone(void)
{
    __atomic_store_n(&g_python_alive, 0, __ATOMIC_RELEASE);
    while (__atomic_load_n(&g_waking, __ATOMIC_ACQUIRE))
        ;
}

/* The DLPack deleter: any thread, Python or not, running or gone. */
static void at_export_release(at_dl_managed *m)
{
    at_export *e = (at_export *)m;
    void *cur = 0;
    int switched = 0;
    if (e->get) e->get(&cur);
    if (e->set && cur != e->ctx) switched = e->set(e->ctx) == 0;
    if (e->event) {
        if (e->event_sync) e->event_sync(e->event);
        if (e->event_destroy) e->event_destroy(e->event);
        e->event = 0;
    }
    if (e->ptr && e->mem_free) e->mem_free(e->ptr);
    e->ptr = 0;
    if (switched) e->set(cur);
    at_export *head = __atomic_load_n(&g_released, __ATOMIC_ACQUIRE);
    do {
        e->next = head;
    } while (!__atomic_compare_exchange_n(&g_released, &head, e, 0, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE));
    at_export_wake_python();
}

at_export *at_export_new(void)
{
    at_export *e = (at_export *)calloc(1, sizeof(at_export));
    if (e) {
        e->managed.manager_ctx = e;
        e->managed.deleter = at_export_release;
        e->managed.dl_tensor.shape = e->shape;
    }
    return e;
}

/* Every export released since the last call, as a list through at_export_next. */
at_export *at_export_take_released(void) { return __atomic_exchange_n(&g_released, 0, __ATOMIC_ACQ_REL); }
at_export *at_export_next(const at_export *e) { return e->next; }
void at_export_free(at_export *e) { free(e); }
unsigned at_export_size(void) { return (unsigned)sizeof(at_export); }

/* The capsule's destructor (called with the GIL held): a capsule nobody consumed still owns
   its tensor (a consumer renames it "used_dltensor"). PyCapsule_IsValid and
   PyCapsule_GetPointer are handed over by address: no Python headers needed. */
typedef int (*capsule_valid_t)(void *, const char *);
typedef void *(*capsule_pointer_t)(void *, const char *);
static capsule_valid_t g_valid;
static capsule_pointer_t g_pointer;

void at_export_bind(void *valid, void *pointer)
{
    g_valid = (capsule_valid_t)valid;
    g_pointer = (capsule_pointer_t)pointer;
}

void at_export_capsule_destructor(void *capsule)
{
    if (g_valid && g_pointer && g_valid(capsule, "dltensor")) {
        at_dl_managed *m = (at_dl_managed *)g_pointer(capsule, "dltensor");
        if (m && m->deleter) m->deleter(m);
    }
}
""".replace("@MAX_DIMS@", str(MAX_DIMS))


class _Export(ctypes.Structure):
    """The C `at_export` struct."""

    _fields_ = [
        ("managed", _DLManagedTensor),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("get", ctypes.c_void_p),
        ("set", ctypes.c_void_p),
        ("mem_free", ctypes.c_void_p),
        ("event_sync", ctypes.c_void_p),
        ("event_destroy", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("ptr", ctypes.c_uint64),
        ("event", ctypes.c_void_p),
        ("next", ctypes.c_void_p),
    ]


_helpers_lock = threading.Lock()
_helpers_loaded: list[Any] = []  # [library or None] once tried


def helpers_path() -> Any:
    tag = hashlib.sha256(RELEASE_SOURCE.encode()).hexdigest()[:16]
    return _native.cache_dir() / f"dlpack-{tag}-{sys.platform}-{os.uname().machine}.so"


def build_helpers(path: Any, cc: str) -> Any:
    """Compile RELEASE_SOURCE into the shared library `path` (atomically) and load it."""
    _native.build_files(
        path,
        {"release.c": RELEASE_SOURCE},
        lambda tmp, so: [[cc, "-O2", "-shared", "-fPIC", "-o", str(so), str(tmp / "release.c")]],
    )
    return load_helpers(path)


def load_helpers(path: Any) -> Any:
    lib = ctypes.CDLL(str(path))
    lib.at_export_size.restype = ctypes.c_uint
    if lib.at_export_size() != ctypes.sizeof(_Export):
        raise RuntimeError(f"{path} does not match this autotranspose")
    for name in ("at_export_new", "at_export_take_released", "at_export_next"):
        getattr(lib, name).restype = ctypes.c_void_p
    lib.at_export_next.argtypes = [ctypes.c_void_p]
    lib.at_export_free.argtypes = [ctypes.c_void_p]
    lib.at_export_free.restype = None
    lib.at_export_bind.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.at_export_bind.restype = None
    api = ctypes.pythonapi
    address = lambda name: ctypes.cast(getattr(api, name), ctypes.c_void_p).value  # noqa: E731
    lib.at_export_bind(address("PyCapsule_IsValid"), address("PyCapsule_GetPointer"))
    lib.destructor = ctypes.cast(lib.at_export_capsule_destructor, ctypes.c_void_p).value
    lib.at_export_python_gone.restype = None
    lib.at_export_bind_sweeper.restype = None
    lib.at_export_bind_sweeper.argtypes = [ctypes.c_void_p] * 5
    lib.sweeper = _sweeper(lib)
    _incref(lib.sweeper)  # the C side holds its address for the process's life
    atexit.register(lib.at_export_python_gone)  # before the teardown: no Python after it
    lib.at_export_bind_sweeper(
        address("Py_AddPendingCall"),
        address("PyObject_CallNoArgs"),
        address("Py_DecRef"),
        address("PyErr_Clear"),
        id(lib.sweeper),
    )
    return lib


def helpers() -> Any:
    """The compiled release helpers, built on first use; None without a C compiler (then the
    Python callbacks below serve)."""
    if _helpers_loaded:
        return _helpers_loaded[0]
    with _helpers_lock:
        if not _helpers_loaded:
            _helpers_loaded.append(_try_helpers())
    return _helpers_loaded[0]


def _try_helpers() -> Any:
    path = helpers_path()
    if path.exists():
        try:
            return load_helpers(path)
        except (OSError, RuntimeError):
            pass  # damaged, or from another toolchain: built again
    cc = _native.compiler()
    if cc is None:
        return None
    try:
        return build_helpers(path, cc)
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return None


# Exports alive in a consumer: address of the DLManagedTensor -> the Exported that owns it.
_live: dict[int, Exported] = {}
_live_lock = threading.Lock()


def sweep(lib: Any, wait: bool = True) -> int:
    """Drop what Python held for the exports the consumers released (their inputs' capsules)
    and free their structs; how many there were. With `wait=False` (the pending call, which
    may interrupt a thread holding the lock) nothing is done while another holds it: the
    released ones stay listed for the next sweep."""
    if not _live_lock.acquire(blocking=wait):
        return 0
    owners, count = [], 0
    try:
        e = lib.at_export_take_released()
        while e:
            after = lib.at_export_next(e)
            owners.append(_live.pop(e, None))
            lib.at_export_free(e)
            e, count = after, count + 1
    finally:
        _live_lock.release()
    for owner in owners:  # outside the lock: dropping an input's capsule runs its producer's code
        if owner is not None:
            owner.keep = None
    return count


def _sweeper(lib: Any) -> Any:
    """What the pending call runs: a sweep that never waits and never raises."""

    def sweeper() -> None:
        try:
            sweep(lib, wait=False)
        except Exception:
            pass

    return sweeper


def export_capsule(
    lib: Any,
    owner: Any,
    data: int,
    shape: tuple[int, ...],
    dtype: tuple[int, int],
    device: tuple[int, int],
    release: dict[str, int | None],
) -> Any:
    """A "dltensor" capsule of a C export of `data` (row-major `shape`), kept in `_live` with
    `owner` until released. `release` names the C fields that free it (get, set, mem_free,
    event_sync, event_destroy, ctx, ptr, event); the export owns `ptr` and `event` from here."""
    if len(shape) > MAX_DIMS:
        raise ValueError(f"an export holds at most {MAX_DIMS} dimensions, not {len(shape)}")
    sweep(lib)
    addr = lib.at_export_new()
    if not addr:
        raise MemoryError("cannot allocate a DLPack export")
    e = _Export.from_address(addr)
    t = e.managed.dl_tensor
    t.data, t.device, t.ndim = data, _DLDevice(*device), len(shape)
    t.dtype = _DLDataType(dtype[0], dtype[1], 1)
    t.strides, t.byte_offset = None, 0  # row-major contiguous
    e.shape[: len(shape)] = list(shape)
    for name, value in release.items():
        setattr(e, name, value)
    with _live_lock:
        _live[addr] = owner
    return _capsule_new(addr, b"dltensor", lib.destructor)


# The Python deleter and destructor, where nothing could be compiled: they read no module
# globals (all bound here), outlive the module's teardown (one reference more than the module
# holds), and do nothing once the interpreter is exiting.
_exiting: list[bool] = []
atexit.register(_exiting.append, True)


def _python_callbacks() -> tuple[Any, Any]:
    live, lock, exiting = _live, _live_lock, _exiting
    addressof = ctypes.addressof
    raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)
    is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
        ("PyCapsule_IsValid", ctypes.pythonapi)
    )
    get_pointer = raw(("PyCapsule_GetPointer", ctypes.pythonapi))

    def release(address: int) -> None:
        with lock:
            owner = live.pop(address, None)
        if owner is not None:
            owner.release()

    @_DELETER
    def deleter(managed: Any) -> None:
        if exiting:
            return
        try:
            release(addressof(managed.contents))
        except Exception:  # nothing to raise into: the consumer called from C
            pass

    @_CAPSULE_DESTRUCTOR
    def destructor(capsule: int) -> None:
        if exiting:
            return
        try:
            if is_valid(capsule, b"dltensor"):
                release(get_pointer(capsule, b"dltensor"))
        except Exception:
            pass

    return deleter, destructor


_deleter, _capsule_destructor = _python_callbacks()
for _kept in (_deleter, _capsule_destructor, _live):
    _incref(_kept)


class Exported:
    """GPU memory we own, written on `stream`, handed to a DLPack consumer once.

    `keep` holds whatever the data was made from (the input's capsule), so the producer of the
    input cannot reuse that memory before our kernel has read it."""

    def __init__(
        self,
        alloc: _driver.Allocation,
        shape: tuple[int, ...],
        dtype: tuple[int, int],
        device: int,
        stream: int | None,
        keep: Any = None,
    ) -> None:
        self.alloc, self.shape, self.dtype, self.device = alloc, shape, dtype, device
        self.stream, self.keep = stream, keep
        self._managed: Any = None

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, self.device)

    def __dlpack__(self, stream: Any = None, **_ignored: Any) -> Any:
        if self._managed is not None:
            raise BufferError("this autotranspose result was already exported once")
        lib = helpers()
        ctx = self.alloc.ctx
        with _driver.on_context(ctx):
            if stream is not None and stream != -1 and int(stream) != (self.stream or 0):
                _driver.join(int(stream), self.stream)  # their stream waits for our kernel
            event = _driver.recorded_event(self.stream) if lib is not None else None
        if lib is None:
            return self._python_capsule()
        get, set_, free, sync, destroy = _driver.release_entry_points()
        capsule = export_capsule(
            lib,
            self,
            self.alloc.ptr,
            self.shape,
            self.dtype,
            (KDL_CUDA, self.device),
            dict(
                get=get,
                set=set_,
                mem_free=free,
                event_sync=sync,
                event_destroy=destroy,
                ctx=ctx,
                ptr=self.alloc.ptr,
                event=event,
            ),
        )
        self.alloc.disown()  # the export frees it now
        self._managed = True
        return capsule

    def _python_capsule(self) -> Any:
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
        return _capsule_new(addr, b"dltensor", ctypes.cast(_capsule_destructor, ctypes.c_void_p))

    def release(self) -> None:
        """The consumer is done (Python callbacks only): wait for our kernel, then free the
        memory and the input."""
        try:
            with _driver.on_context(self.alloc.ctx):
                _driver.synchronize_stream(self.stream or 0)
        except Exception:  # the context is gone: nothing left to wait for
            pass
        self.alloc.free()
        self.keep = None


def _after_fork_in_child() -> None:
    """After the parent used the GPU, the exports a consumer still holds are the parent's
    memory, in its context: released in the child (collected, or at exit), they free nothing
    there, and no driver call is made (`_driver` refuses them in a forked child; the C
    release is handed no entry points)."""
    if not _driver.forked():
        return
    for address, owner in list(_live.items()):
        if owner._managed is True:  # a C export (Python ones call `_driver`, which refuses)
            e = _Export.from_address(address)
            e.get = e.set = e.mem_free = e.event_sync = e.event_destroy = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

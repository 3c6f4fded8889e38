"""A compiled launcher for the hot path: context check, launch and restore in one C call.

A transpose call's host cost is mostly Python-to-C crossings: through ctypes, launching with
``cuLaunchKernel`` means converting eleven arguments, plus separate calls to read and set the
current context. Triton and CuPy launch from compiled code for the same reason. This module
compiles a 40-line C function once per machine (the system C compiler; no CUDA headers: the
driver's entry points are handed over as function pointers) and caches it under the user cache
directory. One call then takes five integers.

Two forms of the same C source, the first that builds wins:
- ``module``: a CPython extension module (needs the Python headers, as Triton's launcher does).
  A METH_FASTCALL call costs far less than ctypes' per-argument conversion, and it also reads
  the current context (:func:`Launcher.current`) without a ctypes pointer.
- ``ctypes``: a plain shared library called through ctypes (no Python headers needed).

Everything here is optional: when no C compiler is found, or the build fails, or
``AUTOTRANSPOSE_NATIVE_LAUNCH=0`` is set, :func:`launcher` returns None and the caller keeps
the pure-ctypes path (same behaviour, about 1-2 µs more per call).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .env import flag

ENV_VAR = "AUTOTRANSPOSE_NATIVE_LAUNCH"
SAME = 1  # `restore` value meaning "the context the thread had" (never a context handle)

# The transpose kernels' argument block (compiler.ARG_FORMAT): its argument count and bytes.
# _driver.TRANSPOSE_OFFSETS / TRANSPOSE_BYTES describe the same block; tests/test_native.py
# checks that all three agree. Other kernels take their first arguments at the same offsets
# (the gathers: in, out and a struct of 352 bytes at 16); each launch says how many bytes its
# block has, up to CAPACITY.
NARGS, NBYTES = 11, 76
CAPACITY = 512  # bench --ceiling's box patterns take 408 bytes
# a coded address (`at_run_relocated`) is (buffer number << RELOC_SHIFT) | byte offset
RELOC_SHIFT = 40
MAX_BASES = 8  # buffers a relocated program's call may name

SOURCE = r"""
#ifdef AT_PYTHON
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#endif
#include <stdint.h>
#include <string.h>

#define NARGS @NARGS@
#define CAPACITY @CAPACITY@
typedef int (*get_t)(void **);
typedef int (*set_t)(void *);
typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **);

/* Everything about one prepared launch in one context; built once, read-only afterwards. */
typedef struct {
    get_t get;
    set_t set;
    launch_t launch;
    void *func;          /* the kernel's CUfunction in `ctx` */
    void *ctx;
    unsigned dims[7];    /* grid x, y, z, block x, y, z, dynamic shared bytes */
    unsigned nbytes;     /* bytes of this kernel's argument block, at most CAPACITY */
    unsigned offsets[NARGS];  /* where each argument starts; the driver reads as many as the
                                 kernel has */
    uint64_t params[CAPACITY / 8];  /* argument block; src and dst filled per call */
} at_launch;

/* Launch with the argument block `p`, filled in by the caller, in whichever context is current
   (the caller made L->ctx current). */
static int at_launch_block(const at_launch *L, uint64_t *p, void *stream)
{
    void *kp[NARGS];
    for (int i = 0; i < NARGS; i++)
        kp[i] = (char *)p + L->offsets[i];
    return L->launch(L->func, L->dims[0], L->dims[1], L->dims[2], L->dims[3], L->dims[4],
                     L->dims[5], L->dims[6], stream, kp, 0);
}

static int at_launch_here(const at_launch *L, uint64_t src, uint64_t dst, void *stream)
{
    uint64_t p[CAPACITY / 8];
    memcpy(p, L->params, L->nbytes);
    p[0] = src;
    p[1] = dst;
    return at_launch_block(L, p, stream);
}

/* Make `ctx` current, the thread's own context read into *cur first ... */
static int at_enter(get_t get, set_t set, void *ctx, void **cur)
{
    *cur = 0;
    get(cur);
    return *cur != ctx ? set(ctx) : 0;
}

/* ... and afterwards `restore` (1: the thread's own, *cur) current again. */
static void at_leave(set_t set, void *ctx, void *cur, void *restore)
{
    if (restore == (void *)1)
        restore = cur;
    if (restore != ctx)
        set(restore);
}

int at_transpose(const at_launch *L, uint64_t src, uint64_t dst, void *stream, void *restore)
{
    void *cur;
    int err = at_enter(L->get, L->set, L->ctx, &cur);
    if (err)
        return err;
    err = at_launch_here(L, src, dst, stream);
    at_leave(L->set, L->ctx, cur, restore);
    return err;
}

/* A whole call of several steps (a permute plan's launches at their host-loop offsets, or
   device-to-device copies), run in one C call: the host loop costs no Python per step. */
typedef int (*memcpy_t)(uint64_t, uint64_t, size_t, void *);

typedef struct {
    const at_launch *launch;  /* NULL: cuMemcpyDtoDAsync of `nbytes` */
    uint64_t in_off, out_off, nbytes;
} at_step;

typedef struct {
    get_t get;
    set_t set;
    memcpy_t copy;           /* cuMemcpyDtoDAsync_v2 */
    void *ctx;               /* every step's context */
    uint64_t count;
    const at_step *steps;
} at_program;

int at_run(const at_program *P, uint64_t src, uint64_t dst, void *stream, void *restore)
{
    void *cur;
    int err = at_enter(P->get, P->set, P->ctx, &cur);
    if (err)
        return err;
    for (uint64_t i = 0; i < P->count && !err; i++) {
        const at_step *s = &P->steps[i];
        err = s->launch ? at_launch_here(s->launch, src + s->in_off, dst + s->out_off, stream)
                        : P->copy(dst + s->out_off, src + s->in_off, (size_t)s->nbytes, stream);
    }
    at_leave(P->set, P->ctx, cur, restore);
    return err;
}

/* A program whose addresses are codes for the call's buffers: a word k << @SHIFT@ | offset,
   k from 1 to nbases, stands for bases[k - 1] + offset; 0 stays 0. A launch step's first
   `nbytes` / 8 argument words are codes (cast_transpose's launches take five pointers and a
   scale, not the two at_run fills in); a copy step's in_off and out_off are, and it copies
   `nbytes`. Returns CUDA_ERROR_INVALID_VALUE (1) for a code of no buffer, before anything of
   that step runs. The eager PyTorch fast path and JAX's FFI handler both run these. */
static int at_relocate(uint64_t code, const uint64_t *bases, uint64_t nbases, uint64_t *out)
{
    uint64_t k = code >> @SHIFT@;
    if (code == 0) { *out = 0; return 0; }
    if (k == 0 || k > nbases) return 1;
    *out = bases[k - 1] + (code & ((1ull << @SHIFT@) - 1));
    return 0;
}

int at_run_relocated(const at_program *P, const uint64_t *bases, uint64_t nbases, void *stream,
                     void *restore)
{
    void *cur;
    int err = at_enter(P->get, P->set, P->ctx, &cur);
    if (err)
        return err;
    for (uint64_t i = 0; i < P->count && !err; i++) {
        const at_step *s = &P->steps[i];
        if (s->launch) {
            const at_launch *L = s->launch;
            uint64_t p[CAPACITY / 8];
            memcpy(p, L->params, L->nbytes);
            for (uint64_t w = 0; w < s->nbytes / 8 && w < L->nbytes / 8 && !err; w++)
                err = at_relocate(p[w], bases, nbases, &p[w]);
            if (!err)
                err = at_launch_block(L, p, stream);
        } else {
            uint64_t src = 0, dst = 0;
            err = at_relocate(s->in_off, bases, nbases, &src);
            if (!err)
                err = at_relocate(s->out_off, bases, nbases, &dst);
            if (!err)
                err = P->copy(dst, src, (size_t)s->nbytes, stream);
        }
    }
    at_leave(P->set, P->ctx, cur, restore);
    return err;
}

unsigned at_layout(void) { return (NARGS << 16) | CAPACITY; }
unsigned at_struct_size(void) { return sizeof(at_launch); }
unsigned at_program_size(void) { return (unsigned)(sizeof(at_program) << 8 | sizeof(at_step)); }

#ifdef AT_PYTHON
/* The same launcher as a CPython module: a METH_FASTCALL call costs a fraction of a ctypes
   call's argument conversion, and the context read needs no ctypes pointer either. */
static get_t g_get;

static int as_word(PyObject *o, uint64_t *out)
{
    if (o == Py_None) { *out = 0; return 0; }
    PyObject *i = PyNumber_Index(o);
    if (!i) return -1;
    *out = PyLong_AsUnsignedLongLong(i);
    Py_DECREF(i);
    return (*out == (uint64_t)-1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *py_transpose(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    uint64_t w[5];
    if (n != 5) {
        PyErr_SetString(PyExc_TypeError, "transpose(spec, src, dst, stream, restore)");
        return NULL;
    }
    for (int i = 0; i < 5; i++)
        if (as_word(args[i], &w[i])) return NULL;
    return PyLong_FromLong(at_transpose((const at_launch *)(uintptr_t)w[0], w[1], w[2],
                                        (void *)(uintptr_t)w[3], (void *)(uintptr_t)w[4]));
}

static PyObject *py_run(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    uint64_t w[5];
    if (n != 5) {
        PyErr_SetString(PyExc_TypeError, "run(program, src, dst, stream, restore)");
        return NULL;
    }
    for (int i = 0; i < 5; i++)
        if (as_word(args[i], &w[i])) return NULL;
    return PyLong_FromLong(at_run((const at_program *)(uintptr_t)w[0], w[1], w[2],
                                  (void *)(uintptr_t)w[3], (void *)(uintptr_t)w[4]));
}

/* relocated(program, stream, restore, base, ...): at_run_relocated with up to MAX_BASES
   bases; a Python float base is its float32's bits (the cast kernels' scale word). */
#define MAX_BASES @MAX_BASES@
static PyObject *py_relocated(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    uint64_t w[3], bases[MAX_BASES];
    if (n < 3 || n > 3 + MAX_BASES) {
        return PyErr_Format(PyExc_TypeError,
                            "relocated(program, stream, restore, base, ...) takes at most %d "
                            "bases, got %zd", MAX_BASES, n < 3 ? (Py_ssize_t)0 : n - 3);
    }
    for (int i = 0; i < 3; i++)
        if (as_word(args[i], &w[i])) return NULL;
    for (Py_ssize_t i = 3; i < n; i++) {
        if (PyFloat_Check(args[i])) {
            /* round to float32 as NumPy does (IEEE conversion, overflow to infinity) */
            float f = (float)PyFloat_AS_DOUBLE(args[i]);
            uint32_t b;
            memcpy(&b, &f, 4);
            bases[i - 3] = b;
        } else if (as_word(args[i], &bases[i - 3])) {
            return NULL;
        }
    }
    return PyLong_FromLong(at_run_relocated((const at_program *)(uintptr_t)w[0], bases,
                                            (uint64_t)(n - 3), (void *)(uintptr_t)w[1],
                                            (void *)(uintptr_t)w[2]));
}

static PyObject *py_bind(PyObject *self, PyObject *arg)
{
    uint64_t get;
    if (as_word(arg, &get)) return NULL;
    g_get = (get_t)(uintptr_t)get;
    Py_RETURN_NONE;
}

static PyObject *py_current(PyObject *self, PyObject *unused)
{
    void *cur = 0;
    int err;
    if (!g_get) {
        PyErr_SetString(PyExc_RuntimeError, "bind(cuCtxGetCurrent) first");
        return NULL;
    }
    if ((err = g_get(&cur)) != 0) return PyErr_Format(PyExc_RuntimeError, "cuCtxGetCurrent: %d", err);
    if (!cur) Py_RETURN_NONE;
    return PyLong_FromVoidPtr(cur);
}

static PyObject *py_layout(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("(III)", at_layout(), at_struct_size(), at_program_size());
}

static PyMethodDef methods[] = {
    {"transpose", (PyCFunction)(void (*)(void))py_transpose, METH_FASTCALL, "launch a prepared transpose"},
    {"run", (PyCFunction)(void (*)(void))py_run, METH_FASTCALL, "run a prepared program"},
    {"relocated", (PyCFunction)(void (*)(void))py_relocated, METH_FASTCALL, "run a program of coded addresses"},
    {"bind", py_bind, METH_O, "the address of cuCtxGetCurrent, for current()"},
    {"current", py_current, METH_NOARGS, "the thread's current context, or None"},
    {"layout", py_layout, METH_NOARGS, "(NARGS << 16 | CAPACITY, sizeof(at_launch), sizeof(at_program) << 8 | sizeof(at_step))"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_at_launch", NULL, -1, methods};

PyMODINIT_FUNC PyInit__at_launch(void) { return PyModule_Create(&module); }
#endif
"""
for _name, _value in (
    ("NARGS", NARGS),
    ("CAPACITY", CAPACITY),
    ("SHIFT", RELOC_SHIFT),
    ("MAX_BASES", MAX_BASES),
):
    SOURCE = SOURCE.replace(f"@{_name}@", str(_value))


class Spec(ctypes.Structure):
    """The C `at_launch` struct."""

    _fields_ = [
        ("get", ctypes.c_void_p),
        ("set", ctypes.c_void_p),
        ("launch", ctypes.c_void_p),
        ("func", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("dims", ctypes.c_uint * 7),
        ("nbytes", ctypes.c_uint),
        ("offsets", ctypes.c_uint * NARGS),
        ("params", ctypes.c_uint64 * (CAPACITY // 8)),
    ]


class Step(ctypes.Structure):
    """The C `at_step` struct: a launch (or, NULL, a copy of `nbytes`) at byte offsets."""

    _fields_ = [
        ("launch", ctypes.c_void_p),
        ("in_off", ctypes.c_uint64),
        ("out_off", ctypes.c_uint64),
        ("nbytes", ctypes.c_uint64),
    ]


class CProgram(ctypes.Structure):
    """The C `at_program` struct: the steps of one call, run by `at_run` in one C call."""

    _fields_ = [
        ("get", ctypes.c_void_p),
        ("set", ctypes.c_void_p),
        ("copy", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("count", ctypes.c_uint64),
        ("steps", ctypes.POINTER(Step)),
    ]


PROGRAM_SIZES = ctypes.sizeof(CProgram) << 8 | ctypes.sizeof(Step)

# at_transpose(spec, src, dst, stream, restore); PYFUNCTYPE keeps the GIL: the call takes
# about a microsecond, less than releasing and re-taking the GIL would cost (PyTorch and CuPy
# launch with the GIL held too).
TRANSPOSE_TYPE = ctypes.PYFUNCTYPE(
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.c_uint64,
    ctypes.c_uint64,
    ctypes.c_void_p,
    ctypes.c_void_p,
)

# at_run_relocated(program, bases, nbases, stream, restore)
RELOCATED_TYPE = ctypes.PYFUNCTYPE(
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_uint64),
    ctypes.c_uint64,
    ctypes.c_void_p,
    ctypes.c_void_p,
)
_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")


def _ctypes_relocated(fn: Callable[..., int]) -> Callable[..., int]:
    """The module form's `relocated(program, stream, restore, *bases)` over the plain C
    function (floats to their float32 bits here)."""

    def relocated(program: int, stream: int | None, restore: int | None, *bases: Any) -> int:
        if len(bases) > MAX_BASES:
            raise TypeError(f"relocated() takes at most {MAX_BASES} bases")
        words = [
            _U32.unpack(_F32.pack(float(np.float32(b))))[0] if isinstance(b, float) else b or 0
            for b in bases
        ]
        arr = (ctypes.c_uint64 * max(1, len(words)))(*words)
        return fn(program, arr, len(words), stream, restore)

    return relocated


KINDS = ("module", "ctypes")  # the forms tried, fastest first


class Launcher(NamedTuple):
    """A built launcher. `transpose(spec_address, src, dst, stream, restore)`,
    `run(program_address, src, dst, stream, restore)` and `relocated(program_address, stream,
    restore, *bases)` (a program of coded addresses; a float base is its float32's bits)
    return the CUresult; `bind(get_address)` then `current()` read the thread's context
    (module form only)."""

    kind: str
    transpose: Callable[..., int]
    run: Callable[..., int]
    relocated: Callable[..., int]
    bind: Callable[[int], None] | None = None
    current: Callable[[], int | None] | None = None


_lock = threading.Lock()
_loaded: list[Launcher | None] = []  # [launcher or None] once tried


def cache_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("autotranspose"))


def compiler() -> str | None:
    """The C compiler to build with: $CC, else cc, gcc or clang on PATH."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def python_headers() -> str | None:
    """The directory holding Python.h for this interpreter, if installed."""
    inc = sysconfig.get_paths().get("include")
    return inc if inc and Path(inc, "Python.h").is_file() else None


def kinds() -> tuple[str, ...]:
    """The forms this machine can build, fastest first."""
    return KINDS if python_headers() else ("ctypes",)


def library_path(kind: str | None = None) -> Path:
    """Where the built launcher of `kind` (default: the fastest buildable) is cached."""
    kind = kind or kinds()[0]
    tag = hashlib.sha256(SOURCE.encode()).hexdigest()[:16]
    if kind == "module":  # the suffix names the interpreter's ABI
        return cache_dir() / f"_at_launch-{tag}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    return cache_dir() / f"launcher-{tag}-{sys.platform}-{os.uname().machine}.so"


def build(path: Path, cc: str, kind: str = "ctypes") -> Path:
    """Compile SOURCE into the shared library `path` (atomically: concurrent builders each
    write their own file and rename it into place)."""
    flags = ["-DAT_PYTHON", f"-I{python_headers()}"] if kind == "module" else []
    return build_files(
        path,
        {"launcher.c": SOURCE},
        lambda tmp, so: [
            [cc, "-O2", "-shared", "-fPIC", *flags, "-o", str(so), str(tmp / "launcher.c")]
        ],
    )


def build_files(
    path: Path,
    files: Mapping[str, str],
    commands: Callable[[Path, Path], Sequence[Sequence[str]]],
    timeout: float = 120,
) -> Path:
    """Write `files` (name -> text) into a fresh folder beside `path`, run the compiler command
    lines `commands(folder, library)` there in turn, and move the library they made to `path`
    (atomically: concurrent builders each write their own and rename it into place). A failed
    command raises subprocess.CalledProcessError carrying the compiler's output."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        folder = Path(tmp)
        for name, text in files.items():
            (folder / name).write_text(text)
        so = folder / path.name
        for argv in commands(folder, so):
            subprocess.run(list(argv), check=True, capture_output=True, timeout=timeout, cwd=folder)
        os.replace(so, path)
    return path


def _check_layout(path: Path, layout: int, size: int, program: int) -> None:
    if (
        layout != (NARGS << 16 | CAPACITY)
        or size != ctypes.sizeof(Spec)
        or program != PROGRAM_SIZES
    ):
        raise RuntimeError(f"{path} does not match this autotranspose")


def load(path: Path, kind: str = "ctypes") -> Launcher:
    if kind == "module":
        spec = importlib.util.spec_from_file_location("_at_launch", path)
        if spec is None or spec.loader is None:
            raise RuntimeError(f"{path} is not an extension module")
        try:
            mod = importlib.util.module_from_spec(spec)
        except ImportError as e:
            raise OSError(str(e)) from e
        _check_layout(path, *mod.layout())
        return Launcher("module", mod.transpose, mod.run, mod.relocated, mod.bind, mod.current)
    lib = ctypes.CDLL(str(path))
    for name in ("at_layout", "at_struct_size", "at_program_size"):
        getattr(lib, name).restype = ctypes.c_uint
    _check_layout(path, lib.at_layout(), lib.at_struct_size(), lib.at_program_size())
    return Launcher(
        "ctypes",
        TRANSPOSE_TYPE(("at_transpose", lib)),
        TRANSPOSE_TYPE(("at_run", lib)),
        _ctypes_relocated(RELOCATED_TYPE(("at_run_relocated", lib))),
    )


def enabled() -> bool:
    return flag(ENV_VAR)


def launcher() -> Launcher | None:
    """The compiled launcher, built on first use; None when disabled or unbuildable."""
    if _loaded:
        return _loaded[0]
    with _lock:
        if not _loaded:
            _loaded.append(_try_load())
    return _loaded[0]


def _try_load() -> Launcher | None:
    if not enabled():
        return None
    cc = compiler()
    for kind in kinds():
        path = library_path(kind)
        if path.exists():
            try:
                return load(path, kind)
            except (OSError, RuntimeError):
                pass  # damaged (or from another toolchain): built again below
        if cc is None:
            continue
        try:
            return load(build(path, cc, kind), kind)
        except (OSError, RuntimeError, subprocess.SubprocessError):
            continue
    return None


def reset() -> None:
    """Forget the loaded launcher (tests flip ENV_VAR)."""
    with _lock:
        _loaded.clear()

"""A compiled launcher for the hot path: context check, launch and restore in one C call.

A transpose call's host cost is mostly Python-to-C crossings: through ctypes, launching with
``cuLaunchKernel`` means converting eleven arguments, plus separate calls to read and set the
current context. Triton and CuPy launch from compiled code for the same reason. This module
compiles a 40-line C function once per machine (the system C compiler; no CUDA or Python
headers: the driver's entry points are handed over as function pointers) and caches the shared
library under the user cache directory. One call then takes five integers.

Everything here is optional: when no C compiler is found, or the build fails, or
``AUTOTRANSPOSE_NATIVE_LAUNCH=0`` is set, :func:`launcher` returns None and the caller keeps
the pure-ctypes path (same behaviour, about 1 µs more per call).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ENV_VAR = "AUTOTRANSPOSE_NATIVE_LAUNCH"
SAME = 1  # `restore` value meaning "the context the thread had" (never a context handle)

# The transpose kernels' argument block (compiler.ARG_FORMAT): its argument count and bytes.
# _driver.TRANSPOSE_OFFSETS / TRANSPOSE_BYTES describe the same block; tests/test_native.py
# checks that all three agree.
NARGS, NBYTES = 11, 76

SOURCE = r"""
#include <stdint.h>
#include <string.h>

#define NARGS @NARGS@
#define NBYTES @NBYTES@
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
    unsigned offsets[NARGS];
    uint64_t params[(NBYTES + 7) / 8];  /* argument block; src and dst filled per call */
} at_launch;

int at_transpose(const at_launch *L, uint64_t src, uint64_t dst, void *stream, void *restore)
{
    uint64_t p[(NBYTES + 7) / 8];
    void *kp[NARGS];
    void *cur = 0;
    int err;
    memcpy(p, L->params, sizeof p);
    p[0] = src;
    p[1] = dst;
    for (int i = 0; i < NARGS; i++)
        kp[i] = (char *)p + L->offsets[i];
    L->get(&cur);
    if (cur != L->ctx && (err = L->set(L->ctx)) != 0)
        return err;
    err = L->launch(L->func, L->dims[0], L->dims[1], L->dims[2], L->dims[3], L->dims[4],
                    L->dims[5], L->dims[6], stream, kp, 0);
    if (restore == (void *)1)
        restore = cur;
    if (restore != L->ctx)
        L->set(restore);
    return err;
}

unsigned at_layout(void) { return (NARGS << 16) | NBYTES; }
unsigned at_struct_size(void) { return sizeof(at_launch); }
""".replace("@NARGS@", str(NARGS)).replace("@NBYTES@", str(NBYTES))


class Spec(ctypes.Structure):
    """The C `at_launch` struct."""

    _fields_ = [
        ("get", ctypes.c_void_p),
        ("set", ctypes.c_void_p),
        ("launch", ctypes.c_void_p),
        ("func", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("dims", ctypes.c_uint * 7),
        ("offsets", ctypes.c_uint * NARGS),
        ("params", ctypes.c_uint64 * ((NBYTES + 7) // 8)),
    ]


# at_transpose(spec, src, dst, stream, restore); PYFUNCTYPE keeps the GIL: the call takes
# about a microsecond, less than releasing and re-taking the GIL would cost (PyTorch and CuPy
# launch with the GIL held too).
TRANSPOSE_TYPE = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p,
    ctypes.c_void_p,
)  # fmt: skip

_lock = threading.Lock()
_loaded: list[Any] = []  # [function or None] once tried


def cache_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("autotranspose"))


def compiler() -> str | None:
    """The C compiler to build with: $CC, else cc, gcc or clang on PATH."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def library_path() -> Path:
    tag = hashlib.sha256(SOURCE.encode()).hexdigest()[:16]
    return cache_dir() / f"launcher-{tag}-{sys.platform}-{os.uname().machine}.so"


def build(path: Path, cc: str) -> Path:
    """Compile SOURCE into the shared library `path` (atomically: concurrent builders each
    write their own file and rename it into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        src = Path(tmp) / "launcher.c"
        src.write_text(SOURCE)
        so = Path(tmp) / path.name
        subprocess.run(
            [cc, "-O2", "-shared", "-fPIC", "-o", str(so), str(src)],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        os.replace(so, path)
    return path


def load(path: Path) -> Any:
    lib = ctypes.CDLL(str(path))
    lib.at_layout.restype = ctypes.c_uint
    lib.at_struct_size.restype = ctypes.c_uint
    if lib.at_layout() != (NARGS << 16 | NBYTES) or lib.at_struct_size() != ctypes.sizeof(Spec):
        raise RuntimeError(f"{path} does not match this autotranspose")
    return TRANSPOSE_TYPE(("at_transpose", lib))


def enabled() -> bool:
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def launcher() -> Any:
    """The compiled `at_transpose`, built on first use; None when disabled or unbuildable."""
    if _loaded:
        return _loaded[0]
    with _lock:
        if not _loaded:
            _loaded.append(_try_load())
    return _loaded[0]


def _try_load() -> Any:
    if not enabled():
        return None
    path = library_path()
    if path.exists():
        try:
            return load(path)
        except (OSError, RuntimeError):
            pass  # damaged (or from another toolchain): built again below
    cc = compiler()
    if cc is None:
        return None
    try:
        return load(build(path, cc))
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return None


def reset() -> None:
    """Forget the loaded launcher (tests flip ENV_VAR)."""
    with _lock:
        _loaded.clear()

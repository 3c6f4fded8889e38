"""Our DLPack exports are released by C code (`_dlpack.RELEASE_SOURCE`), so a consumer may let
go of one from any thread and at any point of the interpreter's exit. Checked without a GPU:
host memory exported the same way into JAX's CPU backend, released in process, and processes
that exit with such arrays (and a capsule nobody consumed) still alive, with an empty stderr
and exit status 0, through the compiled release and through the Python fallback."""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from autotranspose.runtime import dlpack as _dlpack, native as _native

ROOT = Path(__file__).resolve().parent.parent
needs_cc = pytest.mark.skipif(_native.compiler() is None, reason="no C compiler")

# A host-memory stand-in for _dlpack.Exported: exported through the same capsule, deleter and
# destructor (compiled, or the Python fallback), with libc's free as the memory's release.
HOST_EXPORT = r"""
import builtins, ctypes, sys
import numpy as np
from autotranspose.runtime import dlpack as D

libc = ctypes.CDLL(None)
libc.aligned_alloc.restype = ctypes.c_void_p
libc.aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
FREE = ctypes.cast(libc.free, ctypes.c_void_p).value
# the mode: a subprocess is told on its command line; a test that runs this in its own
# process (where argv is pytest's, or an xdist worker's with no arguments) sets COMPILED itself
COMPILED = sys.argv[1:2] == ["compiled"]


class Host:
    def __init__(self, values):
        self.ptr = libc.aligned_alloc(256, 4096)  # aligned: JAX's CPU backend keeps it, no copy
        ctypes.memmove(self.ptr, values.ctypes.data, values.nbytes)
        self.shape = values.shape
        self.keep = object()

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU

    def __dlpack__(self, stream=None, **_):
        if COMPILED:
            return D.export_capsule(D.helpers(), self, self.ptr, self.shape, (2, 32), (1, 0),
                                    dict(mem_free=FREE, ptr=self.ptr))
        m = D._DLManagedTensor()
        self._shape = (ctypes.c_int64 * len(self.shape))(*self.shape)
        t = m.dl_tensor
        t.data, t.device, t.ndim = self.ptr, D._DLDevice(1, 0), len(self.shape)
        t.dtype, t.shape = D._DLDataType(2, 32, 1), self._shape
        m.deleter = D._deleter
        self._m = m
        with D._live_lock:
            D._live[ctypes.addressof(m)] = self
        destructor = ctypes.cast(D._capsule_destructor, ctypes.c_void_p)
        return D._capsule_new(ctypes.addressof(m), b"dltensor", destructor)

    def release(self):
        libc.free(ctypes.c_void_p(self.ptr))
"""


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )


@needs_cc
def test_compiled_release_in_process():
    jax = pytest.importorskip("jax")
    scope: dict = {}
    exec(compile(HOST_EXPORT, "host_export", "exec"), scope)
    lib = _dlpack.helpers()
    assert lib is not None
    _dlpack.sweep(lib)
    scope["COMPILED"] = True
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    host = scope["Host"](values)
    y = jax.dlpack.from_dlpack(host)
    np.testing.assert_array_equal(np.asarray(y), values)
    address = next(a for a, o in _dlpack._live.items() if o is host)
    assert _dlpack.sweep(lib) == 0 and host.keep is not None  # JAX still holds it
    del y
    gc.collect()
    _until(lambda: host.keep is None)  # the pending call swept it, unasked
    assert address not in _dlpack._live and _dlpack.sweep(lib) == 0
    unconsumed = scope["Host"](values)
    capsule = unconsumed.__dlpack__()
    del capsule  # never consumed: the capsule's destructor releases it
    _until(lambda: unconsumed.keep is None)
    held = scope["Host"](values)
    y = jax.dlpack.from_dlpack(held)
    with _dlpack._live_lock:  # a pending call that finds the lock taken leaves the list
        del y
        gc.collect()
        time.sleep(0.05)
        assert held.keep is not None
    assert _dlpack.sweep(lib) == 1 and held.keep is None  # for the next sweep


def _until(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not released in time"
        time.sleep(0.01)


@needs_cc
def test_exports_survive_other_libraries_retyping_pythonapi():
    """jax.ffi.pycapsule sets ctypes.pythonapi.PyCapsule_New's argument types for its own use;
    our capsules are made through prototypes of our own."""
    jax = pytest.importorskip("jax")
    scope: dict = {}
    exec(compile(HOST_EXPORT, "host_export", "exec"), scope)
    scope["COMPILED"] = True
    jax.ffi.pycapsule(ctypes.CDLL(None).free)
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(jax.dlpack.from_dlpack(scope["Host"](values))), values)


@needs_cc
def test_consumer_releases_after_python_let_go():
    """What the interpreter's teardown does: Python's side of an export (the owner, and with
    the old Python-owned tensor, the tensor itself) is gone before JAX releases the array.
    The compiled export's tensor is not Python's: the release still finds it."""
    pytest.importorskip("jax")
    script = HOST_EXPORT + (
        "import gc, jax\n"
        "y = jax.dlpack.from_dlpack(Host(np.arange(12, dtype=np.float32)))\n"
        "D._live.clear()\n"
        "gc.collect()\n"
        "del y\n"
        "gc.collect()\n"
        "print('released')\n"
    )
    run = _run(script, "compiled")
    assert run.returncode == 0 and run.stdout.strip() == "released", run.stderr


@pytest.mark.parametrize("release", [pytest.param("compiled", marks=needs_cc), "python"])
def test_exit_with_exports_alive_is_clean(release):
    pytest.importorskip("jax")
    script = HOST_EXPORT + (
        "import jax\n"
        "values = np.arange(12, dtype=np.float32).reshape(3, 4)\n"
        "result = jax.dlpack.from_dlpack(Host(values))\n"  # a module global
        "assert (np.asarray(result) == values).all()\n"
        "builtins.kept = jax.dlpack.from_dlpack(Host(values))\n"  # collected last of all
        "builtins.unconsumed = Host(values).__dlpack__()\n"
        "doubled = jax.jit(lambda a: a * 2)(result)\n"
    )
    run = _run(script, release)
    assert run.returncode == 0 and run.stderr == "", f"exit {run.returncode}:\n{run.stderr}"


def test_python_callbacks_outlive_the_module():
    """The fallback deleter and destructor read no module globals (the teardown sets them to
    None) and stay referenced after the module is gone."""
    for callback in (_dlpack._deleter, _dlpack._capsule_destructor):
        assert sys.getrefcount(callback) >= 3  # the module's, the extra one, getrefcount's
    code = _dlpack._python_callbacks.__code__
    nested = [c for c in code.co_consts if isinstance(c, type(code))]
    for fn in nested:
        assert not set(fn.co_names) & {
            "_live",
            "_live_lock",
            "_exiting",
            "ctypes",
            "_capsule_new",
        }, fn.co_name

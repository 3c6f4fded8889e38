"""The XLA FFI handler behind the JAX primitive: built, cached, loaded and registered.

`jax_handler.cc` is compiled once per machine with the system C++ compiler against the headers
of the installed jaxlib (``jax.ffi.include_dir()``), together with the compiled launcher's C
source (`_native.SOURCE`: the handler calls its ``at_transpose`` / ``at_run``, which take the
driver's entry points as function pointers, so no CUDA headers or libraries are needed). The
library is cached under the user cache directory beside the launcher, keyed by a hash of both
sources, the compile command and the jaxlib version, and written atomically
(`_native.build_files`), so concurrent processes never load a half-written file.

Registration happens on first use (the first CUDA lowering of the primitive), once per
process: importing this module loads nothing.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from ..errors import KernelCompileError
from ..runtime import native as _native

TARGET = "autotranspose_permute"  # the CUDA target the lowering calls
HOST_TARGET = "autotranspose_permute_host"  # the same handler on XLA's CPU backend (tests)
CAST_TARGET = "autotranspose_cast_transpose"  # cast_transpose's CUDA target (jax_cast)
HOST_CAST_TARGET = "autotranspose_cast_transpose_host"  # the same on XLA's CPU backend (tests)
HANDLER_SOURCE = Path(__file__).with_name("jax_handler.cc")
# Read the launcher's structs' contexts (the handler picks the entry made for XLA's stream);
# it runs programs whose addresses are codes for the call's buffers with the launcher's own
# `at_run_relocated` (cast_transpose's launches take five pointers, not the two at_run fills in).
RELOC_SHIFT = _native.RELOC_SHIFT  # a code is (buffer number << RELOC_SHIFT) | byte offset
LAUNCHER_EXTRA = r"""
void *at_launch_context(const at_launch *L) { return L->ctx; }
void *at_program_context(const at_program *P) { return P->ctx; }
"""
CXX_FLAGS = ("-std=c++17", "-O2", "-fPIC")

_lock = threading.Lock()
_loaded: dict[str, Any] = {}  # "lib" -> the CDLL; target name -> True once registered


def cxx() -> str | None:
    """The C++ compiler to build with: $CXX, else c++, g++ or clang++ on PATH."""
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def _jax_headers() -> tuple[str, str]:
    """(the installed jaxlib's version, its FFI include directory)."""
    import jax.ffi
    import jaxlib

    return jaxlib.__version__, jax.ffi.include_dir()


def sources() -> dict[str, str]:
    """The files of one build, by name."""
    return {"launcher.c": _native.SOURCE + LAUNCHER_EXTRA, "handler.cc": HANDLER_SOURCE.read_text()}


def library_path() -> Path:
    """Where the handler for the installed jaxlib is cached."""
    version, _ = _jax_headers()
    digest = hashlib.sha256()
    for name, text in sorted(sources().items()):
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    digest.update(" ".join(CXX_FLAGS).encode())
    tag = digest.hexdigest()[:16]
    return _native.cache_dir() / f"jax-ffi-{version}-{tag}-{sys.platform}-{os.uname().machine}.so"


def build(path: Path, compiler: str | None = None) -> Path:
    """Compile the handler into `path`. Raises KernelCompileError naming the compiler's
    complaint (or the missing compiler) and the fix."""
    compiler = compiler or cxx()
    if compiler is None:
        raise KernelCompileError(
            "autotranspose under jax.jit needs a C++ compiler to build its XLA FFI handler "
            "once per machine, and none was found (tried $CXX, c++, g++, clang++): install "
            "g++ or clang++, or set CXX to one"
        )
    _, include = _jax_headers()

    def commands(tmp: Path, so: Path) -> list[list[str]]:
        obj = str(tmp / "launcher.o")
        return [
            [compiler, "-x", "c", "-O2", "-fPIC", "-c", str(tmp / "launcher.c"), "-o", obj],
            [
                compiler,
                *CXX_FLAGS,
                "-shared",
                f"-I{include}",
                str(tmp / "handler.cc"),
                obj,
                "-o",
                str(so),
            ],
        ]

    try:
        return _native.build_files(path, sources(), commands, timeout=300)
    except subprocess.CalledProcessError as exc:
        log = (exc.stderr or b"").decode(errors="replace")
        raise KernelCompileError(
            f"building autotranspose's XLA FFI handler with {compiler} against jaxlib's "
            f"headers in {include} failed (exit {exc.returncode}): {log.strip()[-2000:]}\n"
            "Check that the compiler supports C++17 and that jaxlib is installed completely; "
            "set CXX to pick another compiler",
            source_path=str(HANDLER_SOURCE),
            log=log,
        ) from exc
    except (OSError, subprocess.SubprocessError) as exc:
        raise KernelCompileError(
            f"building autotranspose's XLA FFI handler with {compiler} failed: {exc}; set CXX "
            "to a working C++ compiler",
            source_path=str(HANDLER_SOURCE),
        ) from exc


def load(path: Path) -> Any:
    """Load a built handler and check that its launcher structs are the ones this
    autotranspose fills (`_native.Spec`, `_native.CProgram`)."""
    lib = ctypes.CDLL(str(path))
    for name in ("at_layout", "at_struct_size", "at_program_size"):
        getattr(lib, name).restype = ctypes.c_uint
    _native._check_layout(path, lib.at_layout(), lib.at_struct_size(), lib.at_program_size())
    lib.at_jax_bind.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.at_jax_bind.restype = None
    return lib


def library() -> Any:
    """The handler library for the installed jaxlib: loaded from the cache, built there first
    if missing or unloadable (damaged, or from another toolchain)."""
    lib = _loaded.get("lib")
    if lib is not None:
        return lib
    with _lock:
        if "lib" not in _loaded:
            path = library_path()
            try:
                lib = load(path) if path.exists() else None
            except (OSError, RuntimeError):
                lib = None
            _loaded["lib"] = lib if lib is not None else load(build(path))
    return _loaded["lib"]


def register() -> None:
    """Register the CUDA targets (permute's and cast_transpose's) with XLA, once per process,
    with the driver's cuStreamGetCtx and cuGetErrorName bound for the handler."""
    if TARGET in _loaded:
        return
    lib = library()
    import jax.ffi

    from ..runtime import driver as _driver

    with _lock:
        if TARGET in _loaded:
            return
        dll = _driver.lib().dll
        address = lambda name: ctypes.cast(dll[name], ctypes.c_void_p).value  # noqa: E731
        lib.at_jax_bind(address("cuStreamGetCtx"), address("cuGetErrorName"))
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.AtJaxPermute), platform="CUDA")
        jax.ffi.register_ffi_target(
            CAST_TARGET, jax.ffi.pycapsule(lib.AtJaxRelocated), platform="CUDA"
        )
        _loaded[TARGET] = True


def register_host() -> None:
    """Register the handler's stream-less variants for XLA's CPU backend (tests drive them
    with launcher structs whose driver entry points are host functions)."""
    if HOST_TARGET in _loaded:
        return
    lib = library()
    import jax.ffi

    with _lock:
        if HOST_TARGET not in _loaded:
            jax.ffi.register_ffi_target(
                HOST_TARGET, jax.ffi.pycapsule(lib.AtJaxPermuteHost), platform="cpu"
            )
            jax.ffi.register_ffi_target(
                HOST_CAST_TARGET, jax.ffi.pycapsule(lib.AtJaxRelocatedHost), platform="cpu"
            )
            _loaded[HOST_TARGET] = True

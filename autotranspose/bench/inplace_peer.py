"""The peer of `bench --inplace --inplace-peer DIR`: Catanzaro, Keller and Garland's CUDA
in-place transpose (github.com/bryancatanzaro/inplace, PPoPP 2014), built from a checkout the
user names, for the GPU the bench runs on.

Nothing of it ships here: the checkout's sources are compiled as they are, with three small
files of our own beside them: a C entry point (`at_inplace_peer`, its float and double
transposes of a row-major M x N matrix), a shim that builds its one warp vote
(`__ballot`, gone from sm_70 on) as `__ballot_sync` over the active lanes, and the link
(its kernel templates' host stubs kept external: CUDA 13 makes them static by default).
The library runs on the legacy default stream and allocates its own scratch
(`cudaMalloc`, `cudaFree`) in every call: what a user of it gets, so the bench times it so.
It takes 4- and 8-byte elements of one matrix (its float and double); other cases are "n/a".
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# The checkout's translation units (its inplace/SConscript's device and host sources, less its
# timer and OpenMP parts); rotate.cu is compiled through ROTATE_SHIM
SOURCES = (
    "enact.cu",
    "introspect.cu",
    "save_array.cu",
    "permute.cu",
    "smem_shuffle.cu",
    "memory_shuffle.cu",
    "skinny.cu",
    "gcd.cpp",
    "reduced_math.cpp",
)
SIZES = (4, 8)  # its float and double

ENTRY = r"""// autotranspose's entry point into the peer: a C symbol for ctypes
#include <cuda_runtime.h>
#include "inplace/transpose.h"

// Transpose the row-major m x n matrix at `data` (device memory) in place into n x m, by the
// peer's inplace::transpose(row_major = true, ...); the CUDA error of the call (0: none).
extern "C" int at_inplace_peer(void* data, int m, int n, int elem_bytes)
{
    if (elem_bytes == 4)
        inplace::transpose(true, static_cast<float*>(data), m, n);
    else if (elem_bytes == 8)
        inplace::transpose(true, static_cast<double*>(data), m, n);
    else
        return (int)cudaErrorInvalidValue;
    return (int)cudaGetLastError();
}
"""

# Its one legacy warp vote, as the active lanes' vote (what __ballot meant before sm_70)
ROTATE_SHIM = """// builds the peer's rotate.cu for sm_70 and later
#include <cuda_runtime.h>
#define __ballot(p) __ballot_sync(__activemask(), (p))
#include "inplace/rotate.cu"
"""


class PeerBuildError(RuntimeError):
    """The peer's checkout could not be built: the message names the step and its output."""


def check_checkout(source: Path) -> Path:
    """The checkout's root, or PeerBuildError naming what is missing."""
    root = Path(source).expanduser().resolve()
    missing = [
        f for f in (*SOURCES, "rotate.cu", "transpose.h") if not (root / "inplace" / f).is_file()
    ]
    if missing:
        raise PeerBuildError(
            f"{root} is not a checkout of bryancatanzaro/inplace (no inplace/{missing[0]}); "
            "clone it (git clone https://github.com/bryancatanzaro/inplace) and pass its root"
        )
    return root


def build(source: Path, arch: str, cache: Path, nvcc: str | None = None) -> Path:
    """The peer built for `arch` ("sm_90") as a shared library under `cache`, reused while the
    checkout's sources and ours are unchanged."""
    root = check_checkout(source)
    nvcc = nvcc or shutil.which("nvcc")
    if nvcc is None:
        raise PeerBuildError("nvcc is not on PATH: the peer is built from source with it")
    digest = hashlib.sha256(f"{arch}\n{ENTRY}\n{ROTATE_SHIM}".encode())
    for name in sorted(p.name for p in (root / "inplace").iterdir() if p.is_file()):
        digest.update(name.encode() + (root / "inplace" / name).read_bytes())
    out = Path(cache) / f"inplace-peer-{arch}-{digest.hexdigest()[:16]}"
    lib = out / "libatinplacepeer.so"
    if lib.is_file():
        return lib
    out.mkdir(parents=True, exist_ok=True)
    (out / "at_entry.cu").write_text(ENTRY)
    (out / "at_rotate.cu").write_text(ROTATE_SHIM)
    units = [root / "inplace" / f for f in SOURCES] + [out / "at_entry.cu", out / "at_rotate.cu"]
    # its kernel templates are instantiated in one file and launched from another: their
    # host stubs need external linkage (CUDA 13 makes them static by default)
    flags = [
        "-std=c++17",
        "-O3",
        f"-arch={arch}",
        "-static-global-template-stub=false",
        "-Xcompiler",
        "-fPIC",
        f"-I{root}",
        f"-I{root / 'inplace'}",
    ]
    objects = [out / f"{unit.name}.o" for unit in units]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        jobs = [
            pool.submit(
                _run, [nvcc, *flags, "-c", str(unit), "-o", str(obj)], f"compiling {unit.name}"
            )
            for unit, obj in zip(units, objects, strict=True)
        ]
        for job in jobs:
            job.result()
    tmp = out / f"{lib.name}.tmp"
    _run([nvcc, "-shared", f"-arch={arch}", *map(str, objects), "-o", str(tmp)], "linking")
    tmp.replace(lib)  # whole or not at all: a concurrent bench reads a finished library
    return lib


def _run(cmd: list[str], step: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-12:]
        raise PeerBuildError(f"the peer failed {step}:\n" + "\n".join(tail))


class Peer:
    """The built peer, loaded: `transpose(ptr, m, n, elem_bytes)` on a device pointer."""

    def __init__(self, lib: Path) -> None:
        self.dll = ctypes.CDLL(str(lib))
        fn = self.dll.at_inplace_peer
        fn.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int)
        fn.restype = ctypes.c_int
        self._fn = fn

    def transpose(self, ptr: int, m: int, n: int, elem_bytes: int) -> None:
        if elem_bytes not in SIZES:
            raise ValueError(f"the peer transposes 4- or 8-byte elements, not {elem_bytes}")
        err = self._fn(ptr, m, n, elem_bytes)
        if err:
            raise RuntimeError(f"the peer's transpose failed with CUDA error {err}")

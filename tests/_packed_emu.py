"""A packed-argument kernel (the vector box and packed kernels: `at_packed_args` by value) built
for the CPU with tests/_cuda_emulator.h: its threads are OS threads, -fsanitize=alignment makes a
vector access at an address its type forbids abort the run (a fault on the GPU)."""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
CXX = shutil.which("g++")
FLAGS = ["-std=c++20", "-O1", "-fno-strict-aliasing", "-fsanitize=alignment"]
FLAGS += ["-fno-sanitize-recover=all", "-Wno-unknown-pragmas", "-shared", "-fPIC", "-pthread"]


def library(
    source: str, name: str, etype: str, threads: int, tmp: Path, args_type: str = "at_packed_args"
) -> ctypes.CDLL:
    """Kernel `name` of `source` and `at_emu_run(grid, in, out, args)`, which runs it on a grid
    of `grid` blocks of `threads` (cached per source under `tmp`); `args` is the kernel's
    by-value struct `args_type` (the gather's is at_gather_dims)."""
    src = (
        '#include "_cuda_emulator.h"\n'
        + source
        + f"""
extern "C" void at_emu_run(unsigned grid, const void* in, void* out, const void* args) {{
    const {args_type} a = *(const {args_type}*)args;
    at_emu_launch(grid, {threads}, [&] {{ {name}((const {etype}*)in, ({etype}*)out, a); }});
}}
"""
    )
    digest = hashlib.sha256(src.encode()).hexdigest()[:16]
    lib = tmp / f"packed_{digest}.so"
    if not lib.exists():
        cpp = tmp / f"packed_{digest}.cpp"
        cpp.write_text(src)
        subprocess.run(
            [CXX, *FLAGS, f"-I{HERE}", str(cpp), "-o", str(lib)], check=True, capture_output=True
        )
    return ctypes.CDLL(str(lib))

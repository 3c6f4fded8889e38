"""Run a kernel's own CUDA source on the CPU (tests/emu/cuda_emu.h): its threads as fibers,
its barriers and warp reductions honoured, cuda_fp8.h's host conversions. Slow (a block of 256
threads switches 256 fibers at each barrier), so tests keep to small shapes; what it checks is
the kernel's indexing, edges, alignment paths and (casts) amax and conversions: the cast
kernels (`run`, `cast_call`) and the transposes that take the tiled kernels' arguments
(`transpose`: register transposes, byte permutes).

Buffers are NumPy byte arrays; an array's "pointer" is its address, so pointer offsets,
pitches and misalignments are those of real views into them."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from autotranspose.kernels import codegen
from autotranspose.kernels.config import KernelConfig
from autotranspose.plans.cast import ARGS

HERE = Path(__file__).resolve().parent
_BUILD = Path(tempfile.gettempdir()) / "autotranspose-cast-emu"


def gxx() -> str | None:
    """The host C++ compiler and CUDA's headers, or None where either is missing."""
    import shutil

    cxx = shutil.which("g++")
    if cxx is None or _cuda_include() is None:
        return None
    return cxx


@functools.cache
def _cuda_include() -> str | None:
    import shutil

    for base in ("/usr/local/cuda/include",):
        if (Path(base) / "cuda_fp8.h").is_file():
            return base
    nvcc = shutil.which("nvcc")
    if nvcc:
        inc = Path(nvcc).resolve().parent.parent / "include"
        if (inc / "cuda_fp8.h").is_file():
            return str(inc)
    return None


def emulated(name: str, source: str, args_type: str, glue: str) -> ctypes.CDLL:
    """Kernel `source` built for the CPU (cached by its text): `glue` defines `emu_args` (of
    `args_type`) and `emu_one()`, which calls kernel `name` on them; the library's
    `emu_launch(args, grid, threads)` runs every block and returns the first error."""
    text = (
        f'#include "{HERE / "emu" / "cuda_emu.h"}"\n'
        "#include <cerrno>\n#include <sys/wait.h>\n#include <unistd.h>\n"
        f"{source}\n{glue}"
        f'extern "C" int emu_launch(const {args_type}* a, unsigned grid, unsigned threads) {{\n'
        "    emu_args = *a; emu_body = emu_one; blockDim.x = threads; gridDim.x = grid;\n"
        "    for (unsigned b = 0; b < grid; ++b) {\n"
        "        blockIdx.x = b;\n"
        "        const int e = emu_block(threads);\n"
        "        if (e) return e;\n"
        "    }\n"
        "    return 0;\n"
        "}\n"
        # The launch in a child process, forked here in C: a misaligned access (UBSan aborts)
        # or one outside memory kills the child, not the test run. os.fork() would run
        # Python's fork hooks (JAX's warns of a deadlock: its threads do not follow); this
        # child runs only the kernel's C code and leaves by _exit, never touching a lock of
        # Python's or JAX's. Returns the launch's error, or -signal where the child died.
        f'extern "C" int emu_launch_isolated(const {args_type}* a, unsigned grid,\n'
        "                                    unsigned threads) {\n"
        "    const pid_t pid = fork();\n"
        "    if (pid < 0) return -1000;\n"
        "    if (pid == 0) _exit(emu_launch(a, grid, threads));\n"
        "    int status = 0;\n"
        "    while (waitpid(pid, &status, 0) < 0) if (errno != EINTR) return -1000;\n"
        "    return WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);\n"
        "}\n"
    )
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    _BUILD.mkdir(parents=True, exist_ok=True)
    lib = _BUILD / f"{name}_{digest}.so"
    if not lib.is_file():
        src = _BUILD / f"{name}_{digest}.{os.getpid()}.cpp"  # per process: xdist workers
        src.write_text(text)
        tmp = lib.with_suffix(f".{os.getpid()}.tmp.so")
        subprocess.run(
            [
                gxx() or "g++",
                "-std=c++17",
                "-O1",
                "-shared",
                "-fPIC",
                "-Wno-unknown-pragmas",
                # a vector access off its alignment faults on the GPU: here it is reported
                "-fsanitize=alignment",
                "-fno-sanitize-recover=alignment",
                f"-I{_cuda_include()}",
                str(src),
                "-o",
                str(tmp),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        tmp.rename(lib)
    so = ctypes.CDLL(str(lib))
    so.emu_launch.restype = so.emu_launch_isolated.restype = ctypes.c_int
    return so


def _source(config: KernelConfig) -> str:
    """The config's kernel source; shared memory past 48 KiB, declared extern for the bytes a
    launch passes, as one array of those bytes."""
    source = codegen._render_kernels(config.policy.template, [codegen.kernel_params(config)])
    if config.dynamic_smem:
        dynamic = re.compile(r"extern __shared__ __align__\((\d+)\) ([\w ]+?) smem\[\];")
        assert dynamic.search(source), "a tile past 48 KiB declares its shared memory extern"
        sized = rf"__shared__ __align__(\1) \2 smem[{config.dynamic_smem} / sizeof(\2)];"
        source = dynamic.sub(sized, source, count=1)
    return source


@functools.cache
def _library(config: KernelConfig) -> ctypes.CDLL:
    source = _source(config)
    name = config.kernel_name
    glue = f"static at_cast_args emu_args;\nstatic void emu_one() {{ {name}(emu_args); }}\n"
    so = emulated(name, source, "at_cast_args", glue)
    so.emu_launch_isolated.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint]
    return so


def run(config: KernelConfig, args: bytes, grid: int) -> None:
    """Launch `config`'s kernel on the CPU with packed `at_cast_args` (autotranspose.plans.cast)
    in a child process, so that a misaligned vector access (UBSan aborts) or an access
    outside memory fails the test instead of the test run: the arrays it writes must live in
    memory shared with the child (`shared`)."""
    assert len(args) == ARGS.size
    _isolated(_library(config), config, args, grid)


def _isolated(lib: ctypes.CDLL, config: KernelConfig, args: Any, grid: int) -> None:
    """`lib.emu_launch(args, grid, threads)` in a child the library forks (`emulated`); its
    death or failure raised here as an AssertionError naming the config."""
    code = lib.emu_launch_isolated(args, grid, config.threads)
    if code == -1000:
        raise OSError(f"{config.key}: fork() of the emulated launch failed")
    if code < 0:
        raise AssertionError(
            f"{config.key}: the kernel died of signal {-code} (SIGABRT: UBSan found a "
            "misaligned access, see stderr; SIGSEGV: an access outside memory)"
        )
    if code:
        raise AssertionError(f"{config.key}: a barrier or warp collective not all threads reach")


def shared(nbytes: int) -> np.ndarray:
    """Bytes the forked kernel's writes reach (an anonymous shared mapping)."""
    import mmap

    return np.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype=np.uint8)[:nbytes]


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def elements(a: np.ndarray) -> tuple[int, ...]:
    """A view's strides in elements."""
    return tuple(s // a.itemsize for s in a.strides)


def cast_call(
    config: KernelConfig,
    x: np.ndarray,
    axes: tuple[int, ...],
    y: np.ndarray | None,
    z: np.ndarray | None = None,
    scale: float | np.ndarray = 1.0,
    amax: np.ndarray | None = None,
) -> None:
    """What cast_transpose() launches for these views, run on the CPU: y = cast(x * scale)
    permuted by `axes`, z = cast(x * scale), amax folded with max |x|."""
    from autotranspose.kinds.cast import PAIRS
    from autotranspose.plans.cast import pack_args, plan_cast

    src, dst = PAIRS[config.params.pair]
    plan = plan_cast(
        x.shape,
        axes,
        elements(x),
        elements(y) if y is not None else None,
        elements(z) if z is not None else None,
    )
    assert not plan.two_pass, plan.why
    scale_ptr = address(scale) if isinstance(scale, np.ndarray) else 0
    value = 1.0 if isinstance(scale, np.ndarray) else float(np.float32(scale))
    for launch in plan.launches:
        args, grid = pack_args(
            launch,
            config.tile_m,
            config.tile_n,
            src,
            dst,
            address(x),
            address(y) if y is not None else 0,
            address(z) if z is not None else 0,
            scale_ptr,
            address(amax) if amax is not None else 0,
            value,
        )
        run(config, args, grid)


# --- transposes: (in, out, M, N, ld_in, ld_out, bs_in, bs_out, tiles_fast, tiles_slow, total)
_TRANSPOSE_GLUE = """struct emu_a { const void* in; void* out; long long M, N, ldi, ldo, bsi, bso;
    unsigned fast, slow, total; };
static emu_a emu_args;
template <class I, class O, class... R> static void emu_call(void (*k)(I, O, R...)) {
    const emu_a& A = emu_args;
    k((I)A.in, (O)A.out, A.M, A.N, A.ldi, A.ldo, A.bsi, A.bso, A.fast, A.slow, A.total);
}
"""


class _TransposeArgs(ctypes.Structure):
    _fields_ = [
        ("inp", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        *[(f, ctypes.c_longlong) for f in ("M", "N", "ldi", "ldo", "bsi", "bso")],
        *[(f, ctypes.c_uint) for f in ("fast", "slow", "total")],
    ]


@functools.cache
def _transpose_library(config: KernelConfig) -> ctypes.CDLL:
    glue = _TRANSPOSE_GLUE + f"static void emu_one() {{ emu_call({config.kernel_name}); }}\n"
    return emulated(config.kernel_name, _source(config), "emu_a", glue)


def transpose(
    cfg: KernelConfig,
    b: int,
    m: int,
    n: int,
    strides: tuple[int, int, int, int],
    offsets: tuple[int, int],
    rng: np.random.Generator,
    grid_max: int = 3,
) -> tuple[np.ndarray, np.ndarray]:
    """Run `cfg` on the CPU for a (b, m, n) problem with strides (ld_in, ld_out, bs_in,
    bs_out) in elements, input and output at byte `offsets` into their buffers, on the grid
    a launch makes, at most `grid_max` blocks (a kernel loops over the rest). Returns (got, want): the output buffer and the reference written into the same
    poisoned bytes."""
    s = cfg.elem_bytes
    dt = np.dtype(f"u{s}")
    ld_in, ld_out, bs_in, bs_out = strides
    off_in, off_out = offsets
    in_elems = (b - 1) * bs_in + (m - 1) * ld_in + n
    out_elems = (b - 1) * bs_out + (n - 1) * ld_out + m
    src = shared(off_in + in_elems * s + 48)
    src[:] = rng.integers(0, 256, src.size, dtype=np.uint8)
    dst = shared(off_out + out_elems * s + 48)
    dst[:] = rng.integers(0, 256, dst.size, dtype=np.uint8)
    want = dst.copy()
    x = np.lib.stride_tricks.as_strided(
        src[off_in:].view(dt)[:in_elems], (b, m, n), (bs_in * s, ld_in * s, s)
    )
    wv = np.lib.stride_tricks.as_strided(
        want[off_out:].view(dt)[:out_elems], (b, n, m), (bs_out * s, ld_out * s, s)
    )
    wv[...] = x.transpose(0, 2, 1)
    tm, tn = cfg.tiles(m, n)
    fast, slow = (tn, tm) if cfg.raster == "row" else (tm, tn)
    grid = min(cfg.grid(m, n, b, 1)[0], grid_max)
    args = _TransposeArgs(address(src) + off_in, address(dst) + off_out, m, n, *strides,
                          fast, slow, tm * tn * b)  # fmt: skip
    _isolated(_transpose_library(cfg), cfg, ctypes.byref(args), grid)
    return dst, want

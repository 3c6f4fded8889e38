"""Compiling and holding kernels: pycuda compiles, the driver loads them context-free.

pycuda's compiler runs nvcc; the cubins it makes are kept in autotranspose's own disk cache
(`cubin_cache_dir`), written atomically, so each kernel is built once per (arch, config) across
processes, and processes that compile the same kernel at once (a pool's first calls) never
read each other's half-written file, as they could in pycuda's own cache. The cubin is loaded as a context-independent CUDA library (see
`_driver`), so one loaded kernel serves every thread, every context and every device of that
architecture; this module keeps them by (arch, kernel name), so a second call compiles and
loads nothing.

Each device runs on its *primary* context, the one the CUDA runtime (and so CuPy, PyTorch, JAX
and Numba) uses, so their arrays work here with no context juggling.
"""

from __future__ import annotations

import os
import struct
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CudaUnavailableError, DeviceError, KernelCompileError
from ..kernels.codegen import (
    GATHER_KERNELS,
    NVCC_OPTIONS,
    ROW_KERNELS,
    RUNS_KERNEL,
    gather_kernel_name,
    kernel_name,
    render_gather,
    render_many,
    render_outer,
    render_packed,
    render_rows,
    row_kernel_name,
)
from ..kernels.config import KernelConfig
from ..kernels.inplace import InplaceKernel, render_inplace
from ..kernels.packed import PackedKernel
from ..kernels.vbox import VBoxKernel, render_vbox
from . import driver as _driver
from .device import DeviceInfo, query_device

# Kernel arguments: in, out, M, N, ld_in, ld_out, bs_in, bs_out, tiles_fast, tiles_slow, total.
ARG_FORMAT = "PPqqqqqqIII"


def driver() -> Any:
    """pycuda.driver, initialised; a clear error when pycuda or the driver is missing."""
    _driver.check_not_forked()  # pycuda's own error would not say why
    try:
        import pycuda.driver as drv
    except ImportError as exc:
        if "pycuda" in str(exc) and "libcuda" not in str(exc):
            raise CudaUnavailableError(
                "pycuda is not installed, and tuning, benchmarks and kernel launches need it: "
                "install it with `python3 -m pip install 'autotranspose[cuda]'` (it needs an "
                "NVIDIA GPU with its driver, and the CUDA toolkit's nvcc to build)"
            ) from exc
        raise CudaUnavailableError(
            f"pycuda is installed but cannot load the CUDA driver ({exc}); install the NVIDIA "
            "driver or run on a machine with a CUDA GPU"
        ) from exc
    try:
        drv.init()
        count = drv.Device.count()
    except drv.Error as exc:
        raise DeviceError(
            f"the CUDA driver failed to initialise ({exc}); check `nvidia-smi` and that "
            "CUDA_VISIBLE_DEVICES names a GPU"
        ) from exc
    if count == 0:
        raise DeviceError("no CUDA device is visible; check `nvidia-smi` and CUDA_VISIBLE_DEVICES")
    _driver.ready()
    return drv


@dataclass(frozen=True)
class Kernel:
    """A loaded kernel: its context-independent handle, launchable from any thread."""

    name: str
    handle: int
    library: int

    def call(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        fmt: str,
        *args: Any,
        stream: int | None = 0,
    ) -> None:
        """Launch in the current context with `args` packed as struct format `fmt`."""
        _driver.launch(
            _driver.launch_args(self.handle, grid, block), stream, struct.pack(fmt, *args)
        )


@dataclass(frozen=True)
class DeviceState:
    """One device: its ordinal, its retained primary context and what the database records."""

    ordinal: int
    ctx: int
    info: DeviceInfo

    @property
    def arch(self) -> str:
        return self.info.arch

    def synchronize(self) -> None:
        """Wait for the device's work; DeviceError if a kernel broke the context."""
        _driver.synchronize(self.ctx)


_states: dict[int, DeviceState] = {}
_infos: dict[int, DeviceInfo] = {}
_states_lock = threading.Lock()
_kernels: dict[tuple[str, str], Kernel] = {}  # (arch, kernel name) -> loaded kernel
_kernels_lock = threading.Lock()


def _check_ordinal(ordinal: int) -> Any:
    drv = driver()
    count = drv.Device.count()
    if not 0 <= ordinal < count:
        raise DeviceError(
            f"CUDA device {ordinal} does not exist: this machine has {count} "
            f"(0..{count - 1}); pass device=<index> or set CUDA_VISIBLE_DEVICES"
        )
    return drv.Device(ordinal)


def device_info(ordinal: int = 0) -> DeviceInfo:
    """What the database records of device `ordinal` (no context is created)."""
    info = _infos.get(ordinal)
    if info is None:
        info = _infos[ordinal] = query_device(_check_ordinal(ordinal))
    return info


def device_state(ordinal: int = 0) -> DeviceState:
    """Device `ordinal`'s state, its primary context retained; the thread's current context
    is left as it is (the library call makes the context current only for its launch)."""
    state = _states.get(ordinal)
    if state is None:
        _driver.check_not_forked()  # a forked child's states are gone: every call comes here
        with _states_lock:
            state = _states.get(ordinal)
            if state is None:
                info = device_info(ordinal)
                state = _states[ordinal] = DeviceState(
                    ordinal, _driver.primary_context(ordinal), info
                )
    return state


def _after_fork_in_child() -> None:
    # Locks a parent thread may have held; and after the parent used the GPU, its contexts
    # and loaded kernels, which the child cannot use (`_driver` refuses every call there).
    global _states_lock, _kernels_lock
    _states_lock, _kernels_lock = threading.Lock(), threading.Lock()
    if _driver.forked():
        _states.clear()
        _kernels.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def activate(ordinal: int = 0) -> DeviceState:
    """Make device `ordinal`'s primary context current on this thread (cuCtxSetCurrent, as
    cudaSetDevice does) and return its state: for tools that then allocate, time and launch
    in it (the tuner's worker, the bench). Nothing is pushed on any context stack."""
    state = device_state(ordinal)
    _driver.set_current(state.ctx)
    return state


def list_devices() -> list[DeviceInfo]:
    """Every visible GPU, as the tuning database records it."""
    drv = driver()
    return [device_info(i) for i in range(drv.Device.count())]


def failed_source_dir() -> Path:
    path = Path(os.environ.get("AUTOTRANSPOSE_FAILED_DIR") or tempfile.gettempdir())
    path = path / "autotranspose-failed"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _compile_error(
    configs: Sequence[KernelConfig], arch: str, source: str, exc: Exception
) -> KernelCompileError:
    names = ", ".join(c.key for c in configs[:4]) + (" ..." if len(configs) > 4 else "")
    path = failed_source_dir() / f"{configs[0].key}{'_and_more' if len(configs) > 1 else ''}.cu"
    path.write_text(source)
    log = "\n".join(
        str(x) for x in (getattr(exc, "stderr", None), getattr(exc, "stdout", None)) if x
    )
    tail = (log or str(exc)).strip().splitlines()[-8:]
    return KernelCompileError(
        f"nvcc could not compile kernel(s) {names} for {arch}; the rendered source is in "
        f"{path}; nvcc said:\n" + "\n".join(tail),
        source_path=str(path),
        log=log,
    )


CUBIN_CACHE = "cubin-v1"  # the folder of the cache's layout, under the per-user cache


def cubin_cache_dir() -> Path | None:
    """Where compiled cubins are kept, or None where caching is off (PYCUDA_DISABLE_CACHE, the
    variable pycuda's own cache honours)."""
    if "PYCUDA_DISABLE_CACHE" in os.environ:
        return None
    from .native import cache_dir

    return cache_dir() / CUBIN_CACHE


def _whole_elf(data: bytes) -> bool:
    """True for a 64-bit ELF image that holds everything its headers name (the section and
    program header tables and every section's bytes): a cache file cut short by a crash or a
    full disk fails this and is compiled again."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2:
        return False
    (phoff, shoff) = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    end = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    if shnum == 0 or end > len(data):
        return False
    for i in range(shnum):
        (kind,) = struct.unpack_from("<I", data, shoff + i * shentsize + 4)
        offset, size = struct.unpack_from("<QQ", data, shoff + i * shentsize + 0x18)
        if kind != 8 and offset + size > len(data):  # 8: SHT_NOBITS holds no bytes
            return False
    return True


def nvcc_cubin(source: str, arch: str) -> bytes:
    """The cubin of `source` for `arch` (nvcc through pycuda, NVCC_OPTIONS), from the disk
    cache when there. A new cubin is written to a file of this process's own and renamed into
    place: a reader sees a whole file or none."""
    import hashlib

    from pycuda.compiler import compile as pycuda_compile, get_nvcc_version

    folder = cubin_cache_dir()
    path = None
    if folder is not None:
        key = hashlib.sha256()
        for part in (source, arch, *NVCC_OPTIONS, get_nvcc_version("nvcc")):
            key.update(part.encode() + b"\0")
        path = folder / f"{key.hexdigest()}.cubin"
        try:
            data = path.read_bytes()
        except OSError:
            pass
        else:
            if _whole_elf(data):
                return data
    data = pycuda_compile(
        source, no_extern_c=True, arch=arch, options=list(NVCC_OPTIONS), cache_dir=False
    )
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem[:16], suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError:  # a read-only or full cache: the cubin is still good for this call
            pass
    return data


def compile_cubin(configs: Sequence[KernelConfig], arch: str, *, outer: bool = False) -> bytes:
    """Compile configs (or their outer variants) into one cubin (`nvcc_cubin`: nvcc and the
    disk cache)."""
    source = render_outer(configs) if outer else render_many(configs)
    try:
        return nvcc_cubin(source, arch)
    except Exception as exc:
        raise _compile_error(list(configs), arch, source, exc) from exc


def load_kernels(arch: str, cubin: bytes, names: Sequence[str]) -> dict[str, Kernel]:
    """Load a cubin once and return its kernels by name (kept for the life of the process)."""
    library = _driver.load_library(cubin)
    return {n: Kernel(n, _driver.library_kernel(library, n), library) for n in names}


def load_source(arch: str, source: str, names: Sequence[str]) -> dict[str, Kernel]:
    """Compile CUDA source (`nvcc_cubin`, disk-cached) and load the named kernels: the
    measuring helpers and the seed kernel, which are not KernelConfigs."""
    return load_kernels(arch, nvcc_cubin(source, arch), names)


def get_kernel(state: DeviceState, config: KernelConfig, *, outer: bool = False) -> Kernel:
    """The loaded kernel for `config` (or its outer variant: `codegen.render_outer`) on
    `state`'s architecture, compiled on first use."""
    name = kernel_name(config, outer)

    def build() -> Kernel:
        cubin = compile_cubin([config], state.arch, outer=outer)
        return load_kernels(state.arch, cubin, [name])[name]

    return _cached(state.arch, name, build)


def _cached(arch: str, name: str, build: Callable[[], Kernel]) -> Kernel:
    """Kernel `name` on `arch` from the process's cache, built (compiled and loaded) once:
    the lock makes a second thread wait for the first one's build instead of repeating it."""
    key = (arch, name)
    kernel = _kernels.get(key)
    if kernel is None:
        with _kernels_lock:
            kernel = _kernels.get(key)
            if kernel is None:
                kernel = _kernels[key] = build()
    return kernel


def get_row_kernel(state: DeviceState, elem_bytes: int, skew: bool = False) -> Kernel:
    """permute()'s strided row copy of `elem_bytes`-byte words, skewed or not, on `state`'s
    architecture (every row kernel compiled and loaded together, on first use)."""
    return _untuned_kernel(state, row_kernel_name(elem_bytes, skew), render_rows, ROW_KERNELS)


def get_runs_kernel(state: DeviceState) -> Kernel:
    """permute()'s realigning row copy on `state`'s architecture (compiled and loaded with
    the row kernels)."""
    return _untuned_kernel(state, RUNS_KERNEL, render_rows, ROW_KERNELS)


def get_gather_kernel(state: DeviceState, elem_bytes: int) -> Kernel:
    """permute()'s one-launch gather of `elem_bytes`-byte elements on `state`'s architecture
    (all five sizes compiled and loaded together, on first use)."""
    return _untuned_kernel(state, gather_kernel_name(elem_bytes), render_gather, GATHER_KERNELS)


def get_packed_kernel(state: DeviceState, spec: PackedKernel) -> Kernel:
    """permute()'s packed-box kernel `spec` on `state`'s architecture, compiled on first use
    (one per box shape; the cubin cache keeps it across processes)."""
    return _cached(
        state.arch,
        spec.name,
        lambda: load_source(state.arch, _spec_source(spec), [spec.name])[spec.name],
    )


def get_vbox_kernel(state: DeviceState, spec: VBoxKernel) -> Kernel:
    """Vector box kernel `spec` on `state`'s architecture, compiled on first use (one per
    box shape and widths; the cubin cache keeps it across processes)."""
    return _cached(
        state.arch,
        spec.name,
        lambda: load_source(state.arch, _spec_source(spec), [spec.name])[spec.name],
    )


def get_inplace_kernel(state: DeviceState, spec: InplaceKernel) -> Kernel:
    """In-place pass kernel `spec` on `state`'s architecture, compiled on first use (the
    cubin cache keeps it across processes)."""
    return _cached(
        state.arch,
        spec.name,
        lambda: load_source(state.arch, _spec_source(spec), [spec.name])[spec.name],
    )


def _spec_source(spec: PackedKernel | VBoxKernel | InplaceKernel) -> str:
    """The source `get_packed_kernel`, `get_vbox_kernel` or `get_inplace_kernel` compiles for
    `spec` (the same text: the disk cache is keyed by it)."""
    if isinstance(spec, VBoxKernel):
        return render_vbox(spec)
    if isinstance(spec, PackedKernel):
        return render_packed([spec])
    return render_inplace(spec)


def precompile_specs(
    state: DeviceState, specs: Sequence[PackedKernel | VBoxKernel | InplaceKernel]
) -> None:
    """Compile one-spec kernels not yet loaded (permute()'s boxes, in-place passes), nvcc
    calls in parallel, into the cubin cache; `get_packed_kernel`, `get_vbox_kernel` and
    `get_inplace_kernel` then load them from it. A first call that races several boxes, or a
    program of several in-place passes, waits for one nvcc instead of one after another.
    Failures are left for the load that follows to raise."""
    todo = list({k.name: k for k in specs if (state.arch, k.name) not in _kernels}.values())
    if len(todo) < 2 or cubin_cache_dir() is None:
        return

    def build(k: PackedKernel | VBoxKernel | InplaceKernel) -> None:
        try:
            nvcc_cubin(_spec_source(k), state.arch)
        except Exception:  # reported by the load that follows
            pass

    with ThreadPoolExecutor(max_workers=min(len(todo), os.cpu_count() or 1)) as pool:
        list(pool.map(build, todo))


def _untuned_kernel(
    state: DeviceState, name: str, render: Callable[[], str], names: Sequence[str]
) -> Kernel:
    """Kernel `name` of a source that holds all of `names`, compiled once per architecture
    (the cubin cache: once per machine) and kept."""
    kernel = _kernels.get((state.arch, name))
    if kernel is not None:
        return kernel
    with _kernels_lock:
        if (state.arch, name) not in _kernels:
            for n, k in load_source(state.arch, render(), list(names)).items():
                _kernels[(state.arch, n)] = k
    return _kernels[(state.arch, name)]


def precompile(
    state: DeviceState, configs: Sequence[KernelConfig], *, jobs: int | None = None
) -> dict[KernelConfig, Exception]:
    """Compile many configs ahead of use: several kernels per nvcc call, nvcc calls in
    parallel. Returns the configs that failed with their errors (the rest are loaded)."""
    arch = state.arch
    todo = list(
        {c.kernel_name: c for c in configs if (arch, c.kernel_name) not in _kernels}.values()
    )
    if not todo:
        return {}
    jobs = jobs or max(1, min(len(todo), os.cpu_count() or 1))
    groups = [todo[i::jobs] for i in range(jobs)]
    failed: dict[KernelConfig, Exception] = {}

    def build(group: list[KernelConfig]) -> tuple[list[KernelConfig], bytes | None]:
        try:
            return group, compile_cubin(group, arch)
        except KernelCompileError:
            return group, None

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(build, [g for g in groups if g]))
    loaded: dict[str, Kernel] = {}
    for group, cubin in results:
        if cubin is None:  # one bad config spoils its group: retry them one by one
            for c in group:
                try:
                    single = compile_cubin([c], arch)
                except KernelCompileError as exc:
                    failed[c] = exc
                    continue
                loaded.update(load_kernels(arch, single, [c.kernel_name]))
            continue
        loaded.update(load_kernels(arch, cubin, [c.kernel_name for c in group]))
    with _kernels_lock:
        for name, kernel in loaded.items():
            _kernels.setdefault((arch, name), kernel)
    names = {c.kernel_name: c for c in failed}
    return {c: failed[names[c.kernel_name]] for c in configs if c.kernel_name in names}


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel."""

    registers: int
    smem_bytes: int
    stack_bytes: int
    spill_bytes: int


def nvcc_resources(
    configs: Sequence[KernelConfig], arch: str, nvcc: str = "nvcc", *, outer: bool = False
) -> dict[str, Resources]:
    """Compile configs (or their outer variants) to a cubin with plain nvcc (no GPU, no
    pycuda) and return ptxas's resource report per kernel name: how CI checks that kernels
    fit and never spill."""
    source = render_outer(configs) if outer else render_many(configs)
    try:
        return source_resources(source, arch, nvcc)
    except _NvccFailed as exc:
        raise _compile_error(list(configs), arch, source, exc) from None


def untuned_resources(arch: str, nvcc: str = "nvcc") -> dict[str, Resources]:
    """`nvcc_resources` for permute()'s row copies and gathers (not configs)."""
    report = {}
    for what, source in (("rows", render_rows()), ("gather", render_gather())):
        try:
            report.update(source_resources(source, arch, nvcc))
        except _NvccFailed as exc:
            path = failed_source_dir() / f"{what}.cu"
            path.write_text(source)
            tail = "\n".join(str(exc).strip().splitlines()[-8:])
            raise KernelCompileError(
                f"nvcc could not compile permute()'s {what} kernels for {arch}; the rendered "
                f"source is in {path}; nvcc said:\n{tail}",
                source_path=str(path),
                log=str(exc),
            ) from None
    return report


class _NvccFailed(RuntimeError):
    """nvcc's stderr, for the caller to turn into a KernelCompileError naming its kernels."""


def source_resources(source: str, arch: str, nvcc: str = "nvcc") -> dict[str, Resources]:
    """ptxas's resource report per kernel of CUDA `source`, compiled with plain nvcc."""
    return parse_resources(compile_report(source, arch, nvcc))


def compile_report(source: str, arch: str, nvcc: str = "nvcc") -> str:
    """What nvcc and ptxas (-v) say compiling CUDA `source` to a cubin for `arch`: the
    resource lines `parse_resources` reads, and any diagnostics."""
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernels.cu"
        src.write_text(source)
        cmd = [
            nvcc,
            "-cubin",
            f"-arch={arch}",
            *NVCC_OPTIONS,
            "-Xptxas",
            "-v",
            str(src),
            "-o",
            str(Path(tmp) / "k.cubin"),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise _NvccFailed(proc.stderr)
    return proc.stderr


def parse_resources(text: str) -> dict[str, Resources]:
    """ptxas's -v report (`compile_report`) per kernel name."""
    import re

    report: dict[str, Resources] = {}
    name = None
    stack = spill = 0
    for line in text.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            name = m.group(1)
        elif m := re.search(
            r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line
        ):
            stack, spill = int(m.group(1)), int(m.group(2)) + int(m.group(3))
        elif (m := re.search(r"Used (\d+) registers", line)) and name:
            smem = re.search(r"(\d+) bytes smem", line)
            report[name] = Resources(
                int(m.group(1)), int(smem.group(1)) if smem else 0, stack, spill
            )
            name = None
    return report

"""Compiling and holding kernels: pycuda SourceModule on the device's primary context.

autotranspose runs on each device's *primary* context (the one the CUDA runtime, and so CuPy,
PyTorch and Numba, use), so their arrays work here with no context juggling. Kernels compile
once per (device, config): pycuda keeps the cubin in its disk cache across processes, and this
module keeps the loaded function in memory, so a second call compiles and loads nothing.
"""

from __future__ import annotations

import atexit
import os
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .codegen import render_many
from .config import KernelConfig
from .device import DeviceInfo, query_device
from .errors import CudaUnavailableError, DeviceError, KernelCompileError

NVCC_OPTIONS: tuple[str, ...] = ("-O3", "-lineinfo")
# Kernel arguments: in, out, M, N, ld_in, ld_out, bs_in, bs_out, tiles_fast, tiles_slow, total.
ARG_FORMAT = "PPqqqqqqIII"


def driver() -> Any:
    """pycuda.driver, initialised; a clear error when pycuda or the driver is missing."""
    try:
        import pycuda.driver as drv
    except ImportError as exc:
        if "pycuda" in str(exc) and "libcuda" not in str(exc):
            raise CudaUnavailableError(
                "pycuda is not installed: install the CUDA extra with "
                "`pip install 'autotranspose[cuda]'` (needs the CUDA toolkit's nvcc)"
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
    return drv


@dataclass
class Kernel:
    """A loaded kernel, prepared for launches with the least Python per call."""

    config: KernelConfig
    function: Any
    module: Any  # keeps the module (and so the function) alive


@dataclass
class DeviceState:
    """One device's primary context, identity and loaded kernels."""

    ordinal: int
    device: Any
    context: Any
    info: DeviceInfo
    kernels: dict[str, Kernel] = field(default_factory=dict)  # by kernel name
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def arch(self) -> str:
        return self.info.arch


_states: dict[int, DeviceState] = {}
_states_lock = threading.Lock()
_tls = threading.local()


def _retain(ordinal: int) -> DeviceState:
    drv = driver()
    count = drv.Device.count()
    if not 0 <= ordinal < count:
        raise DeviceError(
            f"CUDA device {ordinal} does not exist: this machine has {count} "
            f"(0..{count - 1}); pass device=<index> or set CUDA_VISIBLE_DEVICES"
        )
    dev = drv.Device(ordinal)
    ctx = dev.retain_primary_context()
    ctx.push()
    try:
        info = query_device(dev)
    finally:
        ctx.pop()
    return DeviceState(ordinal, dev, ctx, info)


def activate(ordinal: int = 0) -> DeviceState:
    """Make device `ordinal`'s primary context current on this thread and return its state."""
    state = _states.get(ordinal)
    if state is None:
        with _states_lock:
            state = _states.get(ordinal)
            if state is None:
                state = _states[ordinal] = _retain(ordinal)
    if getattr(_tls, "ordinal", None) != ordinal:
        previous = getattr(_tls, "state", None)
        if previous is not None:
            previous.context.pop()
        state.context.push()
        _tls.ordinal, _tls.state = ordinal, state
        if threading.current_thread() is threading.main_thread():
            _main_pushed[0] = state
    return state


_main_pushed: list[DeviceState | None] = [None]


@atexit.register
def _release_main_thread_context() -> None:
    # pycuda aborts at exit if a context it pushed is still on the stack.
    state = _main_pushed[0]
    if state is not None and getattr(_tls, "state", None) is state:
        try:
            state.context.pop()
        except Exception:  # the driver may already be shutting down
            pass
        _tls.state = _tls.ordinal = None


def list_devices() -> list[DeviceInfo]:
    """Every visible GPU, as the tuning database records it."""
    drv = driver()
    return [activate(i).info for i in range(drv.Device.count())]


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


def compile_cubin(configs: Sequence[KernelConfig], arch: str) -> bytes:
    """Compile configs into one cubin with pycuda's compiler (and its disk cache)."""
    from pycuda.compiler import compile as pycuda_compile

    source = render_many(configs)
    try:
        return pycuda_compile(source, no_extern_c=True, arch=arch, options=list(NVCC_OPTIONS))
    except Exception as exc:
        raise _compile_error(list(configs), arch, source, exc) from exc


def _prepare(config: KernelConfig, module: Any) -> Kernel:
    function = module.get_function(config.kernel_name)
    function.prepare(ARG_FORMAT)
    return Kernel(config, function, module)


def get_kernel(state: DeviceState, config: KernelConfig) -> Kernel:
    """The loaded kernel for `config` on `state`'s device, compiled on first use."""
    kernel = state.kernels.get(config.kernel_name)
    if kernel is not None:
        return kernel
    with state.lock:
        kernel = state.kernels.get(config.kernel_name)
        if kernel is None:
            from pycuda.compiler import SourceModule

            source = render_many([config])
            try:
                module = SourceModule(
                    source, no_extern_c=True, arch=state.arch, options=list(NVCC_OPTIONS)
                )
            except Exception as exc:
                raise _compile_error([config], state.arch, source, exc) from exc
            kernel = state.kernels[config.kernel_name] = _prepare(config, module)
    return kernel


def precompile(
    state: DeviceState, configs: Sequence[KernelConfig], *, jobs: int | None = None
) -> dict[KernelConfig, Exception]:
    """Compile many configs ahead of use: several kernels per nvcc call, nvcc calls in
    parallel. Returns the configs that failed with their errors (the rest are loaded)."""
    todo = list({c.kernel_name: c for c in configs if c.kernel_name not in state.kernels}.values())
    if not todo:
        return {}
    jobs = jobs or max(1, min(len(todo), os.cpu_count() or 1))
    groups = [todo[i::jobs] for i in range(jobs)]
    failed: dict[KernelConfig, Exception] = {}

    def build(group: list[KernelConfig]) -> tuple[list[KernelConfig], bytes | None]:
        try:
            return group, compile_cubin(group, state.arch)
        except KernelCompileError:
            return group, None

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(build, [g for g in groups if g]))
    drv = driver()
    for group, cubin in results:
        if cubin is None:  # one bad config spoils its group: retry them one by one
            for c in group:
                try:
                    single = compile_cubin([c], state.arch)
                except KernelCompileError as exc:
                    failed[c] = exc
                    continue
                state.kernels[c.kernel_name] = _prepare(c, drv.module_from_buffer(single))
            continue
        module = drv.module_from_buffer(cubin)
        for c in group:
            state.kernels[c.kernel_name] = _prepare(c, module)
    names = {c.kernel_name: c for c in failed}
    return {c: failed[names[c.kernel_name]] for c in configs if c.kernel_name in names}


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel."""

    registers: int
    smem_bytes: int
    stack_bytes: int
    spill_bytes: int


def nvcc_resources(configs: Sequence[KernelConfig], arch: str, nvcc: str = "nvcc") -> dict[str, Resources]:
    """Compile configs to a cubin with plain nvcc (no GPU, no pycuda) and return ptxas's
    resource report per kernel name: how CI checks that kernels fit and never spill."""
    import re
    import subprocess

    source = render_many(configs)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernels.cu"
        src.write_text(source)
        cmd = [nvcc, "-cubin", f"-arch={arch}", *NVCC_OPTIONS, "-Xptxas", "-v", str(src), "-o", str(Path(tmp) / "k.cubin")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise _compile_error(list(configs), arch, source, RuntimeError(proc.stderr))
    report: dict[str, Resources] = {}
    name = None
    stack = spill = 0
    for line in proc.stderr.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            name = m.group(1)
        elif m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line):
            stack, spill = int(m.group(1)), int(m.group(2)) + int(m.group(3))
        elif (m := re.search(r"Used (\d+) registers", line)) and name:
            smem = re.search(r"(\d+) bytes smem", line)
            report[name] = Resources(int(m.group(1)), int(smem.group(1)) if smem else 0, stack, spill)
            name = None
    return report

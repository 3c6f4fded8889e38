"""CPU compile checks shared by the kernel kinds' tests: nvcc's resource report and its
diagnostics for rendered kernels (no GPU, no pycuda)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def assert_compile_without_spills(configs: Iterable[Any], arch: str) -> None:
    """Every config's kernel uses no local memory, exactly the shared memory the config
    predicts, and registers its block can have (64K a block)."""
    from autotranspose.runtime.compiler import nvcc_resources

    picks = {c.kernel_name: c for c in configs}
    report = nvcc_resources(list(picks.values()), arch)
    for cfg in picks.values():
        res = report[cfg.kernel_name]
        assert res.spill_bytes == 0 and res.stack_bytes == 0, f"{cfg.key} spills on {arch}: {res}"
        assert res.smem_bytes == cfg.static_smem_bytes, (
            f"{cfg.key}: ptxas {res.smem_bytes} B, predicted {cfg.static_smem_bytes} B"
        )
        assert res.registers * cfg.threads <= 65536


def assert_nvcc_silent(source: str, arch: str = "sm_90") -> None:
    """nvcc compiles `source` and says nothing (pycuda turns what it says into a warning at
    every user's first call)."""
    import subprocess
    import tempfile
    from pathlib import Path

    from autotranspose.runtime.compiler import NVCC_OPTIONS

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernels.cu"
        src.write_text(source)
        proc = subprocess.run(
            [
                "nvcc",
                "-cubin",
                f"-arch={arch}",
                *NVCC_OPTIONS,
                str(src),
                "-o",
                str(Path(tmp) / "k.cubin"),
            ],
            capture_output=True,
            text=True,
        )
    assert proc.returncode == 0 and "warning" not in proc.stderr.lower(), proc.stderr

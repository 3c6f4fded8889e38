"""CPU compile checks shared by the kernel kinds' tests: nvcc's resource report and its
diagnostics for rendered kernels (no GPU, no pycuda)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def assert_compile_without_spills(configs: Iterable[Any], arch: str, silent: bool = False) -> None:
    """Every config's kernel uses no local memory, exactly the shared memory the config
    predicts, and registers its block can have (64K a block); with `silent`, from the same
    one compilation, nvcc and ptxas warn of nothing either (`assert_nvcc_silent`)."""
    from autotranspose.kernels.codegen import render_many
    from autotranspose.runtime.compiler import compile_report, nvcc_resources, parse_resources

    picks = {c.kernel_name: c for c in configs}
    if silent:
        said = compile_report(render_many(list(picks.values())), arch)
        assert "warning" not in said.lower(), said
        report = parse_resources(said)
    else:
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

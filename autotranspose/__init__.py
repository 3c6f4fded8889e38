"""autotranspose: generated, autotuned CUDA matrix-transpose kernels."""

from __future__ import annotations

__version__ = "0.1.0"

from .codegen import render, template_version  # noqa: E402
from .config import KernelConfig, config_space, default_config  # noqa: E402

__all__ = [
    "KernelConfig",
    "__version__",
    "config_space",
    "default_config",
    "render",
    "template_version",
]

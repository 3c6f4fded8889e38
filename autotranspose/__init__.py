"""autotranspose: generated, autotuned CUDA matrix-transpose kernels."""

from __future__ import annotations

__version__ = "0.1.0"

from .api import transpose
from .codegen import render, template_version
from .config import KernelConfig, config_space, default_config

__all__ = [
    "KernelConfig",
    "__version__",
    "config_space",
    "default_config",
    "render",
    "template_version",
    "transpose",
]

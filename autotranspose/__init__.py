"""autotranspose: generated, autotuned CUDA matrix-transpose kernels."""

from __future__ import annotations

__version__ = "0.1.0"

from .api import transpose
from .codegen import render, template_version
from .config import KernelConfig, config_space, default_config

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .tuner import tune_gpu


def __getattr__(name: str) -> object:
    # the tuner needs Optuna and SQLAlchemy: imported on first use, so `import autotranspose`
    # stays cheap for a process that only calls transpose()
    if name == "tune_gpu":
        from .tuner import tune_gpu

        return tune_gpu
    raise AttributeError(f"module 'autotranspose' has no attribute {name!r}")


__all__ = [
    "KernelConfig",
    "__version__",
    "config_space",
    "default_config",
    "render",
    "template_version",
    "transpose",
    "tune_gpu",
]

"""autotranspose: generated, autotuned CUDA matrix-transpose kernels."""

from __future__ import annotations

__version__ = "0.1.0"

from .codegen import render, template_version
from .config import KernelConfig, config_space, default_config

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .entry import permute, transpose
    from .multigpu import tune_devices
    from .tuner import tune_gpu


def __getattr__(name: str) -> object:
    # Imported on first use (then a plain attribute). transpose() and permute() bring the
    # CUDA side (compiler, driver, array adapters): the store and lookup, which import this
    # package first, run without it. The tuner brings Optuna and SQLAlchemy, which a process that only
    # calls transpose() need not load.
    if name in ("transpose", "permute"):
        from . import entry  # loads the PyTorch and JAX integrations where those are imported

        globals().update(transpose=entry.transpose, permute=entry.permute)
        return globals()[name]
    if name == "tune_gpu":
        from .tuner import tune_gpu

        return tune_gpu
    if name == "tune_devices":
        from .multigpu import tune_devices

        return tune_devices
    raise AttributeError(f"module 'autotranspose' has no attribute {name!r}")


__all__ = [
    "KernelConfig",
    "__version__",
    "config_space",
    "default_config",
    "permute",
    "render",
    "template_version",
    "transpose",
    "tune_devices",
    "tune_gpu",
]

"""autotranspose: generated, autotuned CUDA transpose and permute kernels.

The public names: `transpose`, `permute`, `transpose_` (in place) (PyTorch, JAX, CuPy, pycuda, CUDA Array Interface
and NumPy arrays), `cast_transpose` (cast and transpose in one pass), `tune_gpu` and
`tune_devices` (offline tuning; `TuneSettings`, their search), `KernelConfig`,
`config_space`, `default_config`, `render` and `template_version` (the kernels themselves),
and the process switches `set_first_call_measurement`, `set_keep_winners` and
`clear_caches`. Modules named with a leading `_` are internal (see ARCHITECTURE.md).
"""

from __future__ import annotations

from ._version import __version__
from .kernels import codegen as _codegen, inplace as _inplace_kernels  # noqa: F401 (registers

# the in-place programs' sources with codegen: their configs' versions)
from .kernels.codegen import render, template_version
from .kernels.config import KernelConfig, config_space, default_config
from .store import hooks as _store_hooks

# The store judges stored results by the running code's kernel versions but renders no kernels:
# it is handed codegen's functions here, before any caller can open a database.
_store_hooks.use_kernel_versions(_codegen.kernel_version, _codegen.template_version)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._api import cast_transpose, permute, transpose, transpose_
    from .dispatch.switches import clear_caches, set_first_call_measurement, set_keep_winners
    from .tuner.multigpu import tune_devices
    from .tuner.study import TuneSettings, tune_gpu


def __getattr__(name: str) -> object:
    # Imported on first use (then a plain attribute). transpose() and permute() bring the
    # CUDA side (compiler, driver, array adapters): the store and lookup, which import this
    # package first, run without it. The tuner brings Optuna and SQLAlchemy, which a process that only
    # calls transpose() need not load.
    if name in ("transpose", "permute", "transpose_", "cast_transpose"):
        from . import (
            _api as entry,  # loads the PyTorch and JAX integrations where those are imported
        )

        # kept as plain attributes: a module __getattr__ (an import statement) on every
        # `at.cast_transpose(...)` cost an H200 host 6.5 of a call's 22 us
        globals().update(
            transpose=entry.transpose,
            permute=entry.permute,
            transpose_=entry.transpose_,
            cast_transpose=entry.cast_transpose,
        )
        return globals()[name]
    if name in ("set_first_call_measurement", "set_keep_winners", "clear_caches"):
        from .dispatch import switches as _switches

        return getattr(_switches, name)
    if name in ("tune_gpu", "TuneSettings"):
        from .tuner import study as _tuner

        return getattr(_tuner, name)
    if name == "tune_devices":
        from .tuner.multigpu import tune_devices

        return tune_devices
    raise AttributeError(f"module 'autotranspose' has no attribute {name!r}")


__all__ = [
    "KernelConfig",
    "TuneSettings",
    "__version__",
    "cast_transpose",
    "clear_caches",
    "config_space",
    "default_config",
    "permute",
    "render",
    "set_first_call_measurement",
    "set_keep_winners",
    "template_version",
    "transpose",
    "transpose_",
    "tune_devices",
    "tune_gpu",
]

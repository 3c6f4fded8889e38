"""The exceptions autotranspose raises.

Every message says what is wrong and what to do about it. All of them derive from
:class:`AutotransposeError`, so a caller can catch the whole family in one place.
"""

from __future__ import annotations


class AutotransposeError(Exception):
    """Base class of every error autotranspose raises on purpose."""


class ConfigError(AutotransposeError, ValueError):
    """A kernel config is invalid: a field has a value the kernels cannot take."""


class UnsupportedDtypeError(AutotransposeError, TypeError):
    """The array's element type cannot be transposed by autotranspose."""


class InputTypeError(AutotransposeError, TypeError):
    """An argument is not of a type transpose() takes: x or out not an array, a bad stream."""


class ShapeError(AutotransposeError, ValueError):
    """The array or the output buffer has the wrong number of dimensions or extent."""


class AxesError(AutotransposeError, ValueError):
    """The axes of a permute are not a permutation of the array's dimensions."""


class LayoutError(AutotransposeError, ValueError):
    """The array's strides are not a layout the kernels read (innermost stride must be 1)."""


class OutputError(AutotransposeError, ValueError):
    """The `out` buffer does not fit the call: shape, dtype, device or overlap with the input."""


class DeviceError(AutotransposeError, RuntimeError):
    """No usable CUDA device or driver, or an array lives on another device."""


class CudaUnavailableError(DeviceError, ImportError):
    """pycuda (the `cuda` extra) is not installed or cannot load the CUDA driver."""


class KernelCompileError(AutotransposeError, RuntimeError):
    """nvcc rejected a rendered kernel; the message names the config and the source file."""

    def __init__(self, message: str, *, source_path: str | None = None, log: str = "") -> None:
        super().__init__(message)
        self.source_path = source_path
        self.log = log


class KernelLaunchError(AutotransposeError, RuntimeError):
    """A kernel failed at launch or while running."""


class StoreError(AutotransposeError, RuntimeError):
    """The tuning database cannot be opened, read or written."""


class ForeignDatabaseError(StoreError):
    """The database exists but was not written by autotranspose (or is unreadable)."""


class TuningError(AutotransposeError, RuntimeError):
    """A tuning run could not go on (no valid config, no device, bad settings)."""


class StoreBusyError(StoreError):
    """Another connection held the tuning database's write lock longer than this operation
    waits (SQLite's busy timeout, PostgreSQL's lock timeout)."""


class CudaForkError(DeviceError):
    """This process was forked after autotranspose used CUDA in its parent: CUDA contexts do
    not survive fork, so the child cannot use the GPU; start workers with 'spawn'."""

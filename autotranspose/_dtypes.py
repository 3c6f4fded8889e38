"""Element types: which dtypes autotranspose moves, and the element size that keys a kernel.

A transpose only moves bytes, so kernels are keyed by element size (1, 2, 4, 8 or 16 bytes),
not by dtype: float32, int32 and uint32 share one compiled kernel. The one exception is the
conjugate transpose, which flips the sign bit of the imaginary part of complex64/complex128.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import UnsupportedDtypeError

ELEMENT_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16)

# dtypes named in the docs; any other plain numeric dtype of a supported size works too.
SUPPORTED_NAMES: tuple[str, ...] = (
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "float16",
    "bfloat16",
    "int32",
    "uint32",
    "float32",
    "int64",
    "uint64",
    "float64",
    "complex64",
    "complex128",
)


@dataclass(frozen=True)
class ElementType:
    """What a kernel needs to know about a dtype: its name, size, and whether it is complex."""

    name: str
    size: int
    complex: bool

    @property
    def conjugable(self) -> bool:
        """True for complex64/complex128, whose conjugate is a sign flip of the imaginary half."""
        return self.complex and self.size in (8, 16)

    def check_conjugable(self) -> None:
        """Refuse conjugate=True for an element type that has no conjugate to take."""
        if not self.conjugable:
            raise UnsupportedDtypeError(
                f"conjugate=True needs complex64 or complex128 elements; x is {self.name} "
                "(for real types the transpose is already the conjugate transpose)"
            )


def word_type(size: int) -> ElementType:
    """The element type of a pass that moves `size`-byte words whatever the caller's dtype (a
    permute's passes, whose elements the pointers may widen). Its name is what the tuning
    database records as the dtype measured, so it is a plain name like the dtypes' own."""
    return ElementType(f"word{size}", size, False)


def _torch_dtype_name(dtype: Any) -> str | None:
    if type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype":
        return str(dtype).removeprefix("torch.")
    return None


def element_type(dtype: Any) -> ElementType:
    """Resolve a NumPy/CuPy/torch dtype (or its name) to an :class:`ElementType`.

    Raises :class:`UnsupportedDtypeError` naming the dtype and the supported ones. Cached:
    every transpose() call resolves its dtype.
    """
    try:
        return _cached(dtype)
    except TypeError:  # unhashable dtype-like: resolve without the cache
        return _resolve(dtype)


@functools.lru_cache(maxsize=256)
def _cached(dtype: Any) -> ElementType:
    return _resolve(dtype)


def _resolve(dtype: Any) -> ElementType:
    name = _torch_dtype_name(dtype)
    if name is not None:
        return _from_torch_name(name)
    if isinstance(dtype, str) and dtype == "bfloat16":
        return ElementType("bfloat16", 2, False)
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError) as exc:  # ValueError: malformed strings such as '(-1,)i4'
        raise UnsupportedDtypeError(
            f"{dtype!r:.60} is not a dtype autotranspose understands; pass a NumPy dtype or "
            f"one of: {', '.join(SUPPORTED_NAMES)}"
        ) from exc
    if dt.name in _ML_DTYPES:  # ml_dtypes' floats: NumPy dtypes of kind 'V' for some
        return ElementType(dt.name, dt.itemsize, False)
    if dt.hasobject or dt.kind in "OSUV" or dt.fields is not None:
        raise UnsupportedDtypeError(
            f"dtype {dt!s:.60} cannot be transposed on the GPU: only plain numeric element "
            f"types are supported ({', '.join(SUPPORTED_NAMES)}); convert the array first, "
            f"e.g. with .astype(np.float32)"
        )
    if dt.itemsize not in ELEMENT_SIZES:
        raise UnsupportedDtypeError(
            f"dtype {dt!s:.60} has {dt.itemsize}-byte elements; autotranspose moves "
            f"elements of {', '.join(map(str, ELEMENT_SIZES))} bytes; convert the array, e.g. to "
            f"complex128 or float64"
        )
    return ElementType(dt.name, dt.itemsize, dt.kind == "c")


# ml_dtypes' float types (bfloat16, and the float8 formats cast_transpose() writes)
_ML_DTYPES = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2"})

_TORCH_SIZES = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int16": 2,
    "uint16": 2,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "uint32": 4,
    "float32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "complex64": 8,
    "complex128": 16,
}


def _from_torch_name(name: str) -> ElementType:
    size = _TORCH_SIZES.get(name)
    if size is None:
        raise UnsupportedDtypeError(
            f"torch.{name} is not supported; use one of: {', '.join(SUPPORTED_NAMES)}"
        )
    return ElementType(name, size, name.startswith("complex"))

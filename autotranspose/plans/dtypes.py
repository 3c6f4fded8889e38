"""Element types: which dtypes autotranspose moves, and the element size that keys a kernel.

A transpose only moves bytes, so kernels are keyed by element size (1, 2, 4, 8 or 16 bytes),
not by dtype: float32, int32 and uint32 share one compiled kernel, and so does any dtype a
library adds whose elements are 4 bytes. A dtype is resolved by its size and kind, never by a
list of names: PyTorch's by `dtype.itemsize` (complex32, the float8 and float4 formats and
the bits types included), NumPy's by itemsize and kind (ml_dtypes' types, unstructured void
`V1`..`V16` as raw bytes), JAX's through its NumPy dtype. Refused: what is not plain bytes
(objects, strings, structured records, quantized tensors, which carry a scale) and sizes the
kernels do not have. The one exception to "only bytes" is the conjugate transpose, which flips
the sign bit of the imaginary part of complex64/complex128.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UnsupportedDtypeError

ELEMENT_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16)

# dtypes named in the docs and drawn by the benchmarks; any other dtype of a supported size
# works too (see the module docstring).
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

_FIX = (
    "autotranspose moves elements of 1, 2, 4, 8 or 16 bytes of any numeric dtype; view or "
    "convert the array to one (e.g. x.view(torch.uint8) / x.view(np.uint8) for raw bytes, "
    "or .astype(np.float32))"
)


@dataclass(frozen=True)
class ElementType:
    """What a kernel needs to know about a dtype: its name, size, and whether it is complex.
    `bits` is the width of one value where a byte holds several (ml_dtypes' int4, float4:
    NumPy keeps one a byte, JAX packs them on the GPU); 0 otherwise."""

    name: str
    size: int
    complex: bool
    bits: int = 0

    @property
    def conjugable(self) -> bool:
        """True for complex64/complex128, whose conjugate is a sign flip of the imaginary half."""
        return self.complex and self.size in (8, 16)

    def check_whole_values(self, library: str) -> None:
        """Refuse a type whose values `library` packs several to a byte on the GPU (JAX's
        int4, uint4, int2, float4_e2m1fn...): moving its bytes would move pairs of values."""
        if self.bits:
            raise UnsupportedDtypeError(
                f"{library} stores {self.name} values ({self.bits} bits each) packed several "
                "to a byte on the GPU, and autotranspose moves whole bytes; convert the "
                "array first (e.g. x.astype(jnp.int8)), permute, and convert back"
            )

    def check_conjugable(self) -> None:
        """Refuse conjugate=True for an element type that has no conjugate kernel."""
        if self.conjugable:
            return
        if self.complex:  # complex32: two float16 halves in a 4-byte element
            raise UnsupportedDtypeError(
                f"conjugate=True takes complex64 or complex128 elements; x is {self.name} "
                f"({self.size}-byte elements, which no conjugating kernel moves). Transpose "
                "without conjugate=True, then flip the imaginary halves' sign bits (for "
                "torch.complex32: y.view(torch.int32).bitwise_xor_(-2**31)), or convert x "
                "to complex64 first"
            )
        raise UnsupportedDtypeError(
            f"conjugate=True needs complex64 or complex128 elements; x is {self.name} "
            "(for real types the transpose is already the conjugate transpose)"
        )


def word_type(size: int) -> ElementType:
    """The element type of a pass that moves `size`-byte words whatever the caller's dtype (a
    permute's passes, whose elements the pointers may widen). Its name is what the tuning
    database records as the dtype measured, so it is a plain name like the dtypes' own."""
    return ElementType(f"word{size}", size, False)


def _torch_dtype(dtype: Any) -> bool:
    return type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype"


def element_type(dtype: Any) -> ElementType:
    """Resolve a NumPy/CuPy/torch/JAX dtype (or its name) to an :class:`ElementType`.

    Raises :class:`UnsupportedDtypeError` naming the dtype, why, and what to do. Cached:
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
    if _torch_dtype(dtype):
        return _from_torch(dtype)
    if isinstance(dtype, str) and dtype == "bfloat16":
        return ElementType("bfloat16", 2, False)
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError) as exc:  # ValueError: malformed strings such as '(-1,)i4'
        raise UnsupportedDtypeError(
            f"{dtype!r:.60} is not a dtype autotranspose understands; pass a NumPy, PyTorch, "
            f"CuPy or JAX dtype (e.g. one of: {', '.join(SUPPORTED_NAMES)})"
        ) from exc
    if dt.hasobject or dt.fields is not None or dt.subdtype is not None:
        raise UnsupportedDtypeError(
            f"dtype {dt!s:.60} is not plain bytes (objects, structured records and subarrays "
            "hold references or several fields): only numeric element types are moved; "
            f"convert the array first, e.g. with .astype(np.float32)"
        )
    if dt.kind in "SU":
        raise UnsupportedDtypeError(
            f"dtype {dt!s:.60} is a string type, not a numeric one: convert the array to a "
            "numeric dtype first, or view fixed-size strings as bytes (x.view(np.uint8), "
            "adding an axis for the characters)"
        )
    if dt.itemsize not in ELEMENT_SIZES:
        raise UnsupportedDtypeError(f"dtype {dt!s:.60} has {dt.itemsize}-byte elements; {_FIX}")
    if dt.type.__module__ != "numpy":  # ml_dtypes (bfloat16, float8/6/4, int4/2, complex32)
        complex_ = dt.kind == "c" or "complex" in dt.name
        return ElementType(dt.name, dt.itemsize, complex_, 0 if complex_ else _bits(dt))
    return ElementType(dt.name, dt.itemsize, dt.kind == "c")


def _bits(dt: np.dtype) -> int:
    """Bits of one value of an ml_dtypes type narrower than its byte (int4: 4), else 0."""
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover - the type came from somewhere that has it
        return 0
    for info in (ml_dtypes.finfo, ml_dtypes.iinfo):
        try:
            bits = int(info(dt).bits)
        except (TypeError, ValueError, AttributeError):
            continue
        return bits if bits < 8 else 0
    return 0


_TORCH_QUANTIZED = ("qint", "quint")


def _from_torch(dtype: Any) -> ElementType:
    """A torch dtype by its size: every dtype of a supported size moves as bytes, including
    those added after this was written (float8_e8m0fnu, float4_e2m1fn_x2: two values a
    byte, which PyTorch itself counts as one element). Quantized dtypes carry a scale and a
    zero point beside their bytes, so a new tensor of their bytes would lose them."""
    name = str(dtype).removeprefix("torch.")
    if name.startswith(_TORCH_QUANTIZED):
        raise UnsupportedDtypeError(
            f"torch.{name} is a quantized dtype: its scale and zero point are not in the "
            "tensor's bytes, and a new tensor of them would lose them; permute "
            "x.int_repr() and requantize, or x.dequantize()"
        )
    size = getattr(dtype, "itemsize", None)
    if size is None:  # PyTorch before 2.1: the element size of an empty tensor
        import torch

        size = torch.empty((), dtype=dtype).element_size()
    if size not in ELEMENT_SIZES:
        raise UnsupportedDtypeError(f"torch.{name} has {size}-byte elements; {_FIX}")
    return ElementType(name, int(size), bool(dtype.is_complex))

"""cast_transpose()'s arguments: dtypes, config, scale and amax checked before any GPU use, and the
key of a PyTorch call's operands for its fast path."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..dispatch import lookup
from ..errors import (
    ConfigError,
    InputTypeError,
    OutputError,
    ShapeError,
    UnsupportedDtypeError,
)
from ..kernels.config import KernelConfig
from ..kinds import cast as cast_kind
from ..kinds.cast import Format
from ..plans.cast import (
    format_of,
    pair,
)
from ..plans.layout import normalize_axes
from ..runtime.arrays import NDView, nd_view


def check_both(both: Any) -> None:
    """both= is a bool (a truthy object would hide a mistaken positional argument)."""
    if type(both) is not bool:
        raise InputTypeError(f"both must be True or False, got {type(both).__name__}")


def checked(
    shape: tuple[int, ...],
    x_dtype: str,
    dtype: Any,
    axes: Sequence[int] | None,
    scale: Any,
    config: KernelConfig | None = None,
) -> tuple[Format, Format, tuple[int, ...]]:
    """(input format, output format, axes) of a call on x of `shape` and dtype name
    `x_dtype`: what needs no driver, checked alike for every kind of x (the pair, a forced
    config's pair, the axes, the scale's type)."""
    src = input_format(x_dtype)
    dst = format_of(dtype)
    code = pair(src, dst)
    if config is not None:
        _check_config(config, code)
    ndim = len(shape)
    if axes is None:
        if ndim < 2:
            raise ShapeError(
                f"x has shape {shape}; the default axes swap the last two of at least "
                f"two: pass axes= (e.g. axes={tuple(range(ndim))} for a plain cast)"
            )
        order = (*range(ndim - 2), ndim - 1, ndim - 2)
    else:
        order = normalize_axes(axes, ndim)
    _check_scale_type(scale)
    return src, dst, order


def _plain_tensor(out: Any) -> bool:
    """Whether a given output may enter a signature: None (allocated by the call) or a plain
    torch.Tensor (subclasses, and other arrays, go the full way every time)."""
    return out is None or (type(out).__name__ == "Tensor" and type(out).__module__ == "torch")


def _keyable(dtype: Any, axes: Any) -> bool:
    """Whether a call's dtype and axes enter its signature as given (other iterables of axes
    and dtype spellings go the full way every time)."""
    return type(dtype) is not str and type(axes) in (tuple, list, type(None))


def _operand_key(obj: Any) -> Any:
    """How a scale or amax enters a PyTorch call's signature: None, a float, or a tensor's
    dtype, shape and device (what `_operand` validated)."""
    if obj is None:
        return None
    if hasattr(obj, "data_ptr"):
        return (obj.dtype, tuple(obj.shape), obj.get_device())
    return float if isinstance(obj, float) else type(obj)


def _output_key(out: Any) -> Any:
    """How a given output enters a PyTorch call's signature: None (allocated by the call), or
    its type, shape, strides, dtype, device and alignment (what `_output` validated)."""
    if out is None:
        return None
    return (type(out), out.shape, out.stride(), out.dtype, out.get_device(), out.data_ptr() & 15)


def torch_key(
    x: Any,
    dtype: Any,
    scale: Any,
    amax: Any,
    axes: Any,
    both: bool,
    out: Any = None,
    out_t: Any = None,
) -> tuple[Any, ...]:
    """The signature of an eager PyTorch call: x's shape, strides, dtype, device and
    alignment, the output dtype and axes as given, `both`, the kinds of scale and amax, and
    each given output's layout (`_output_key`); and lookup's generation, so that a call
    seen before a tuning result arrived is chosen again."""
    return (
        lookup.generation,
        x.shape,
        x.stride(),
        x.dtype,
        x.get_device(),
        x.data_ptr() & 15,
        dtype,
        tuple(axes) if type(axes) in (tuple, list) else axes,
        both,
        _operand_key(scale),
        _operand_key(amax),
        _output_key(out_t),
        _output_key(out),
    )


def _overlap(a: int, a_len: int, b: int, b_len: int) -> bool:
    return a < b + b_len and b < a + a_len


def input_format(name: str) -> Format:
    """The format of an input dtype's name, or UnsupportedDtypeError naming those read."""
    fmt = cast_kind.FORMATS.get(name)
    if fmt is None or fmt not in cast_kind.INPUTS:
        raise UnsupportedDtypeError(
            f"cast_transpose() reads {', '.join(f.name for f in cast_kind.INPUTS)}; x is "
            f"{name}: cast it to one of those first (e.g. x.float())"
        )
    return fmt


def _check_config(config: Any, code: str) -> None:
    if not (
        isinstance(config, KernelConfig) and config.kind == "cast" and config.params.pair == code
    ):
        got = config.key if isinstance(config, KernelConfig) else type(config).__name__
        raise ConfigError(
            f"config must be a cast KernelConfig for the pair {code!r} (e.g. "
            f"autotranspose.kinds.cast.default(KernelConfig, ...)); got {got}"
        )


def _operand(obj: Any, what: str, xv: NDView) -> NDView:
    """A 1-element float32 array on x's GPU (scale, amax)."""
    try:
        v = nd_view(obj, what)
    except InputTypeError:
        raise InputTypeError(
            f"{what} must be a 1-element float32 array on x's GPU (e.g. torch.zeros(1, "
            f"device='cuda')){' or a Python float' if what == 'scale' else ''}; got "
            f"{type(obj).__name__}"
        ) from None
    if v.et.name != "float32" or v.size != 1:
        raise InputTypeError(
            f"{what} has dtype {v.et.name} and {v.size} element(s); it must be one float32 "
            f"element (e.g. torch.zeros(1, dtype=torch.float32, device=x.device))"
        )
    if v.kind in ("numpy", "jax") or v.device != xv.device:
        where = "the host" if v.kind == "numpy" else f"GPU {v.device}"
        if v.kind == "jax":
            where = "a JAX array (immutable, of another library)"
        raise InputTypeError(
            f"{what} is on {where}; it must be on x's GPU ({xv.device}): allocate it there, "
            "e.g. torch.zeros(1, device=x.device)"
        )
    return v


def _check_scale_type(scale: Any) -> None:
    if isinstance(scale, (bool, np.bool_, str, bytes)):
        raise InputTypeError(
            f"scale must be a Python float or a 1-element float32 array on x's GPU, got "
            f"{type(scale).__name__} {scale!r:.20}"
        )


def _scale(scale: Any, xv: NDView) -> tuple[int, float]:
    """(device pointer or 0, value): a Python number is rounded to float32 as torch does."""
    if scale is None:
        return 0, 1.0
    if isinstance(scale, numbers.Real) and not isinstance(scale, (bool, np.bool_)):
        return 0, float(np.float32(scale))
    return _operand(scale, "scale", xv).ptr, 1.0


def _amax(amax: Any, xv: NDView) -> int:
    if amax is None:
        return 0
    v = _operand(amax, "amax", xv)
    (a0, a1), (x0, x1) = v.extent(), xv.extent()
    if a0 < x1 and x0 < a1:
        raise OutputError("amax overlaps x in memory; pass a separate 1-element buffer")
    return v.ptr

"""cast_transpose()'s arguments: dtypes, config, scale and amax checked before any GPU use (the
key of an eager PyTorch call's operands is the fast path's: `dispatch.fastpath.cast_key`)."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

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

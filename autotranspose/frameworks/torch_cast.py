"""PyTorch operators for cast_transpose(): `autotranspose::cast_transpose` (the permuted
cast), `cast_transpose_both` (the same-order and the permuted cast from one pass) and
`cast_transpose_out` (into given buffers), each updating an optional amax in place.

Their fake implementations give the outputs' shapes and dtypes and raise the eager call's
errors at trace time, so `torch.compile(fullgraph=True)` traces a call with no graph break.
An eager call that nothing traces goes straight to the kernels (`_cast`). The casts are not
differentiable (float8 outputs have no gradient to give): no autograd is registered.

Loaded by `autotranspose._api` once PyTorch is imported.
"""

# No `from __future__ import annotations`: the op schemas are given explicitly, and the
# functions below are called by the dispatcher with real or fake tensors.
from collections.abc import Sequence
from typing import Any

import torch

from ..calls import cast as _cast
from ..dispatch import fastpath
from ..errors import AutotransposeError, InputTypeError, OutputError, ShapeError
from ..plans.cast import format_of, pair
from ..plans.layout import normalize_axes

_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack
_Tensor = torch.Tensor
_fast = fastpath.fast_cast_torch  # a dict hit and one native call


def cast_transpose(
    x: torch.Tensor,
    dtype: Any,
    scale: Any,
    amax: Any,
    axes: Any,
    out: Any,
    out_t: Any,
    both: bool,
    stream: Any,
) -> Any:
    """cast_transpose() of a PyTorch tensor: eager calls straight to the kernels, traced ones
    (torch.compile, torch.export, tensor subclasses and modes) through the ops."""
    if not _compiling() and not _dispatch_modes() and type(x) in (_Tensor, torch.nn.Parameter):
        if stream is None:  # seen before: straight to it
            result = _fast(x, dtype, scale, amax, axes, both, out, out_t)
            if result is not None:
                return result
        return _cast.cast_transpose(
            x, dtype, scale=scale, amax=amax, axes=axes, out=out, out_t=out_t, both=both,
            stream=stream,
        )  # fmt: skip
    if stream is not None:
        raise AutotransposeError(
            "stream= is not supported under torch.compile: the compiled graph runs on "
            "PyTorch's current stream; use `with torch.cuda.stream(s):` around the call"
        )
    if out is not None and not both:
        raise OutputError(
            "out= is the cast in x's own order, written only with both=True; pass the "
            "transposed buffer as out_t=, or set both=True to have both written"
        )
    dt = _torch_dtype(dtype)
    order = _order(x, axes)
    if isinstance(scale, torch.Tensor):
        scale_t, scale_v = scale, 1.0
    elif scale is None:
        scale_t, scale_v = None, 1.0
    elif isinstance(scale, (bool,)) or not isinstance(scale, (int, float)):
        raise InputTypeError(
            f"scale must be a Python float or a 1-element float32 tensor on x's GPU, got "
            f"{type(scale).__name__}"
        )
    else:
        scale_t, scale_v = None, float(scale)
    ops = torch.ops.autotranspose
    if out is None and out_t is None:
        if both:
            return ops.cast_transpose_both(x, dt, scale_t, scale_v, amax, order)
        return ops.cast_transpose(x, dt, scale_t, scale_v, amax, order)
    if out_t is None:
        out_t = x.new_empty([x.shape[a] for a in order], dtype=dt)
    if both and out is None:
        out = x.new_empty(x.shape, dtype=dt)
    ops.cast_transpose_out(x, scale_t, scale_v, amax, order, out_t, out)
    return (out, out_t) if both else out_t


def _torch_dtype(dtype: Any) -> torch.dtype:
    """A torch dtype as given (what a traced call passes: no string work to trace), else the
    one its spelling names."""
    if isinstance(dtype, torch.dtype):
        return dtype
    return getattr(torch, format_of(dtype).name)


def _order(x: torch.Tensor, axes: Any) -> list[int]:
    if axes is None:
        if x.dim() < 2:
            raise ShapeError(
                f"x has shape {tuple(x.shape)}; the default axes swap the last two of at least "
                f"two: pass axes= (e.g. axes={tuple(range(x.dim()))} for a plain cast)"
            )
        return [*range(x.dim() - 2), x.dim() - 1, x.dim() - 2]
    return list(normalize_axes(axes, x.dim()))


def _scale_arg(scale: Any, value: float) -> Any:
    return scale if scale is not None else value


# --- the ops ---------------------------------------------------------------------------------
@torch.library.custom_op(
    "autotranspose::cast_transpose",
    mutates_args=("amax",),
    schema="(Tensor x, ScalarType dtype, Tensor? scale, float scale_value, Tensor(a!)? amax, "
    "int[] axes) -> Tensor",
)
def _cast_transpose(x, dtype, scale, scale_value, amax, axes):
    return _cast.cast_transpose(
        x, dtype, scale=_scale_arg(scale, scale_value), amax=amax, axes=axes
    )


@torch.library.custom_op(
    "autotranspose::cast_transpose_both",
    mutates_args=("amax",),
    schema="(Tensor x, ScalarType dtype, Tensor? scale, float scale_value, Tensor(a!)? amax, "
    "int[] axes) -> (Tensor, Tensor)",
)
def _cast_transpose_both(x, dtype, scale, scale_value, amax, axes):
    return _cast.cast_transpose(
        x, dtype, scale=_scale_arg(scale, scale_value), amax=amax, axes=axes, both=True
    )


@torch.library.custom_op(
    "autotranspose::cast_transpose_out",
    mutates_args=("amax", "out_t", "out"),
    schema="(Tensor x, Tensor? scale, float scale_value, Tensor(a!)? amax, int[] axes, "
    "Tensor(b!) out_t, Tensor(c!)? out) -> ()",
)
def _cast_transpose_out(x, scale, scale_value, amax, axes, out_t, out):
    _cast.cast_transpose(
        x,
        out_t.dtype,
        scale=_scale_arg(scale, scale_value),
        amax=amax,
        axes=axes,
        out=out,
        out_t=out_t,
        both=out is not None,
    )


# --- fake implementations: shapes, and the eager call's errors at trace time -----------------
def _check(x: torch.Tensor, dtype: torch.dtype, scale: Any, amax: Any) -> None:
    pair(_cast.input_format(str(x.dtype).removeprefix("torch.")), format_of(dtype))
    if x.device.type not in ("cuda", "meta"):
        raise InputTypeError(f"x is on {x.device}; cast_transpose() needs a CUDA tensor")
    for what, t in (("scale", scale), ("amax", amax)):
        if t is not None and (t.dtype != torch.float32 or t.numel() != 1):
            raise InputTypeError(
                f"{what} has dtype {t.dtype} and {t.numel()} element(s); it must be one float32 "
                "element on x's GPU"
            )


def _permuted(x: torch.Tensor, axes: Sequence[int]) -> list[Any]:
    order = normalize_axes(axes, x.dim())
    return [x.shape[a] for a in order]


@_cast_transpose.register_fake
def _(x, dtype, scale, scale_value, amax, axes):
    _check(x, dtype, scale, amax)
    return x.new_empty(_permuted(x, axes), dtype=dtype)


@_cast_transpose_both.register_fake
def _(x, dtype, scale, scale_value, amax, axes):
    _check(x, dtype, scale, amax)
    return x.new_empty(x.shape, dtype=dtype), x.new_empty(_permuted(x, axes), dtype=dtype)


@_cast_transpose_out.register_fake
def _(x, scale, scale_value, amax, axes, out_t, out):
    _check(x, out_t.dtype, scale, amax)
    want = _permuted(x, axes)
    if list(out_t.shape) != list(want):
        raise OutputError(f"out_t has shape {tuple(out_t.shape)}; this call writes {tuple(want)}")
    if out is not None and (list(out.shape) != list(x.shape) or out.dtype != out_t.dtype):
        raise OutputError(
            f"out has shape {tuple(out.shape)} and dtype {out.dtype}; this call writes "
            f"{tuple(x.shape)} of {out_t.dtype}"
        )

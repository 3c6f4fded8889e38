"""PyTorch operators: transpose() and permute() as `torch.library` custom ops.

Through the ops, `torch.compile` traces our calls into its graph (a fake implementation gives
the output's shape, so `fullgraph=True`, `torch.export` and CUDA-graph capture see through
them), autograd differentiates them (the backward of a permute is the inverse permute of the
gradient, run by us; of a conjugate transpose, the conjugate transpose), and
`torch.library.opcheck` checks them. The dispatcher costs host time of its own, so an eager
call that nothing traces and that needs no gradient skips it: `permute()` and `transpose()`
go straight to their fast path (a dictionary hit and one native launch) as for any array.

Loaded by `autotranspose._api` once PyTorch is imported; the ops are `autotranspose::
permute`, `permute_out`, `transpose`, `transpose_out` and `transpose_inplace` (transpose_():
it mutates x and returns nothing; the caller gets x's storage viewed in the transposed shape).
"""

# No `from __future__ import annotations`: the op schemas are given explicitly, and the
# functions below are called by the dispatcher with real or fake tensors.
from collections.abc import Sequence
from typing import Any

import torch

from ..calls import inplace, permute as permuter, transpose as api
from ..calls.permute import axes_tag
from ..dispatch import fastpath
from ..errors import AutotransposeError, LayoutError, OutputError
from ..plans.dtypes import element_type
from ..plans.layout import normalize_axes
from ..plans.permute import plan_permute
from ..runtime.arrays import matrix_layout, torch_not_on_gpu

_Tensor = torch.Tensor
_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_fast = fastpath.fast_torch  # the kernels' fast path for torch tensors (a dictionary hit)


# --- the entry points (called by autotranspose._api for torch tensors) ----------------------
def permute(x: torch.Tensor, axes: Sequence[int], out: Any, stream: Any) -> torch.Tensor:
    """permute() of a PyTorch tensor: eager calls straight to the kernels, anything traced
    or differentiated through the registered op."""
    if not _compiling() and _plain(x, out):
        if stream is None and (out is None or type(out) is _Tensor):  # a signature seen before
            tag = axes_tag(axes)
            result = _fast(x, out, tag) if tag is not None else None
            if result is not None:
                return result
        return permuter.permute(x, axes, out, stream=stream)
    order = list(axes)
    if out is None:
        return _on_stream(stream, torch.ops.autotranspose.permute, x, order)
    _check_no_grad(x, out)
    _on_stream(stream, torch.ops.autotranspose.permute_out, x, order, out)
    return out


def transpose(x: torch.Tensor, out: Any, stream: Any, config: Any, conjugate: bool) -> torch.Tensor:
    """transpose() of a PyTorch tensor, as `permute` above (a forced `config` is an eager
    tuning tool: it takes the plain path and is refused where a graph or gradient needs it)."""
    if not _compiling() and (_plain(x, out) or config is not None):
        if config is not None and not _plain(x, out):
            raise AutotransposeError(
                "config= forces a kernel on the eager path only; under torch.compile or for a "
                "tensor that requires grad, leave config=None (the tuned kernel is used)"
            )
        if (
            stream is None
            and config is None
            and not conjugate
            and (out is None or type(out) is _Tensor)
        ):
            result = _fast(x, out)
            if result is not None:
                return result
        return api.transpose(x, out, stream=stream, config=config, conjugate=conjugate)
    if out is None:
        return _on_stream(stream, torch.ops.autotranspose.transpose, x, conjugate)
    _check_no_grad(x, out)
    _on_stream(stream, torch.ops.autotranspose.transpose_out, x, out, conjugate)
    return out


def transpose_(x: torch.Tensor, conjugate: bool, stream: Any) -> torch.Tensor:
    """transpose_() of a PyTorch tensor: refused for a tensor autograd tracks; eager calls
    straight to the kernels, traced ones through the mutating op; the result is x's storage
    viewed in the transposed shape either way."""
    if x.requires_grad and _grad_enabled():
        inplace.check_no_grad(x)
    shape = [*x.shape[:-2], x.shape[-1], x.shape[-2]] if x.dim() >= 2 else None
    if shape is None or not (_compiling() or _dispatch_modes() or type(x) is not _Tensor):
        return inplace.transpose_(x, conjugate=conjugate, stream=stream)
    _on_stream(stream, torch.ops.autotranspose.transpose_inplace, x, conjugate)
    return x.view(shape)


def _plain(x: torch.Tensor, out: Any) -> bool:
    """Nothing records this call: no gradient to track, no tracing mode, no tensor subclass
    (an `out` of another library is written by the kernels' own path). Lazily conjugated or
    negated views are materialised on that path (`arrays`)."""
    if type(x) is not _Tensor and not isinstance(x, torch.nn.Parameter):
        return False
    if x.requires_grad and _grad_enabled():
        return out is not None and not isinstance(out, _Tensor) and _refuse_grad_out()
    return not _dispatch_modes() and (
        out is None or type(out) is _Tensor or not isinstance(out, _Tensor)
    )


def _refuse_grad_out() -> bool:
    raise OutputError(
        "out= does not support automatic differentiation (as PyTorch's own out= "
        "functions): x or out requires grad; leave out=None to get a differentiable "
        "result, or call under torch.no_grad()"
    )


def _check_no_grad(x: torch.Tensor, out: torch.Tensor) -> None:
    if _grad_enabled() and (x.requires_grad or out.requires_grad):
        _refuse_grad_out()


def _on_stream(stream: Any, op: Any, *args: Any) -> Any:
    if stream is None:
        return op(*args)
    if _compiling():
        raise AutotransposeError(
            "stream= is not supported under torch.compile: the compiled graph runs on "
            "PyTorch's current stream; use `with torch.cuda.stream(s):` around the call"
        )
    from ..runtime import streams

    given = streams.explicit(stream)
    with torch.cuda.stream(torch.cuda.ExternalStream(given.handle, device=given.device)):
        return op(*args)


# --- the ops ---------------------------------------------------------------------------------
@torch.library.custom_op(
    "autotranspose::permute", mutates_args=(), schema="(Tensor x, int[] axes) -> Tensor"
)
def _permute(x, axes):
    return permuter.permute(x, axes)  # lazy views resolved there (arrays)


@torch.library.custom_op(
    "autotranspose::permute_out",
    mutates_args=("out",),
    schema="(Tensor x, int[] axes, Tensor(a!) out) -> ()",
)
def _permute_out(x, axes, out):
    permuter.permute(x, axes, out)


@torch.library.custom_op(
    "autotranspose::transpose", mutates_args=(), schema="(Tensor x, bool conjugate) -> Tensor"
)
def _transpose(x, conjugate):
    return api.transpose(x, conjugate=conjugate)


@torch.library.custom_op(
    "autotranspose::transpose_out",
    mutates_args=("out",),
    schema="(Tensor x, Tensor(a!) out, bool conjugate) -> ()",
)
def _transpose_out(x, out, conjugate):
    api.transpose(x, out, conjugate=conjugate)


@torch.library.custom_op(
    "autotranspose::transpose_inplace",
    mutates_args=("x",),
    schema="(Tensor(a!) x, bool conjugate) -> ()",
)
def _transpose_inplace(x, conjugate):
    inplace.transpose_(x, conjugate=conjugate)


# --- fake implementations: shapes, and the eager call's errors at trace time -----------------
def _concrete(values: Sequence[Any]) -> bool:
    return all(type(v) is int for v in values)


def _check_tensor(x: torch.Tensor) -> Any:
    et = element_type(x.dtype)
    if x.device.type not in ("cuda", "meta"):
        raise torch_not_on_gpu("x", x.device)
    return et


def _check_layout(t: torch.Tensor, order: Sequence[int]) -> None:
    """The layouts the kernels read, as the eager call checks them (`plan.plan_permute`);
    symbolic shapes or strides are left to the call itself."""
    shape, strides = tuple(t.shape), tuple(t.stride())
    if _concrete(shape) and _concrete(strides):
        moving = tuple(s if n > 1 else 0 for n, s in zip(shape, strides, strict=True))
        plan_permute(shape, tuple(order), t.element_size(), moving)


def _permuted(x: torch.Tensor, axes: Sequence[int]) -> list[Any]:
    _check_tensor(x)
    order = normalize_axes(axes, x.dim())
    _check_layout(x, order)
    return [x.shape[a] for a in order]


def _transposed(x: torch.Tensor, conjugate: bool) -> list[Any]:
    """The transposed shape, after the eager call's checks in its order: the layout, then
    whether the dtype has a conjugate."""
    et = _check_tensor(x)
    shape, strides = tuple(x.shape), tuple(x.stride())
    if x.dim() not in (2, 3) or (_concrete(shape) and _concrete(strides)):
        try:
            matrix_layout("x", shape, tuple(s * et.size for s in strides), et.size)
        except LayoutError:  # the eager call's permute() takes the layout (api._any_layout)
            _check_layout(x, (1, 0) if x.dim() == 2 else (0, 2, 1))
    if conjugate:
        et.check_conjugable()
    return [*x.shape[:-2], x.shape[-1], x.shape[-2]]


def _check_out(out: torch.Tensor, want: list[Any], x: torch.Tensor) -> None:
    if list(out.shape) != list(want):
        raise OutputError(
            f"out has shape {tuple(out.shape)}; x of shape {tuple(x.shape)} needs {tuple(want)}"
        )
    if out.dtype != x.dtype:
        raise OutputError(f"out has dtype {out.dtype}; x has {x.dtype}: they must match")


@_permute.register_fake
def _(x, axes):
    return x.new_empty(_permuted(x, axes))


@_permute_out.register_fake
def _(x, axes, out):
    _check_out(out, _permuted(x, axes), x)


@_transpose.register_fake
def _(x, conjugate):
    return x.new_empty(_transposed(x, conjugate))


@_transpose_out.register_fake
def _(x, out, conjugate):
    _check_out(out, _transposed(x, conjugate), x)


@_transpose_inplace.register_fake
def _(x, conjugate):
    """The eager call's checks: a 2-D or 3-D row-major contiguous tensor, a conjugable dtype."""
    et = _check_tensor(x)
    if x.dim() not in (2, 3) or not x.is_contiguous():
        raise LayoutError(
            f"transpose_() needs a row-major contiguous 2-D or 3-D tensor; x has shape "
            f"{tuple(x.shape)} and strides {tuple(x.stride())}. Make it contiguous first, or "
            "use transpose(x), which takes any layout"
        )
    if conjugate:
        et.check_conjugable()


# --- autograd --------------------------------------------------------------------------------
def _readable(g: torch.Tensor, matrix: bool = False) -> torch.Tensor:
    """A gradient the kernels can read in one pass: PyTorch hands broadcast (stride-0) or
    otherwise strided gradients to a backward, e.g. the expanded ones of `.sum()`. permute()
    reads any of them (the gather); a conjugate transpose (`matrix`) of rows that are not
    runs would copy them first, which PyTorch's own copy does as well."""
    if not (_concrete(g.shape) and _concrete(g.stride())):
        return g.contiguous()
    try:
        if matrix:
            e = g.element_size()
            matrix_layout("grad", tuple(g.shape), tuple(s * e for s in g.stride()), e)
        else:
            _check_layout(g, range(g.dim()))
    except AutotransposeError:
        return g.contiguous()
    return g


def _permute_setup(ctx, inputs, output):
    x, axes = inputs
    ctx.inverse = _inverse(normalize_axes(axes, x.dim()))


def _permute_backward(ctx, grad):
    return torch.ops.autotranspose.permute(_readable(grad), ctx.inverse), None


def _transpose_setup(ctx, inputs, output):
    ctx.conjugate = inputs[1]


def _transpose_backward(ctx, grad):
    return torch.ops.autotranspose.transpose(_readable(grad, ctx.conjugate), ctx.conjugate), None


def _inverse(order: Sequence[int]) -> list[int]:
    inv = [0] * len(order)
    for k, a in enumerate(order):
        inv[a] = k
    return inv


_permute.register_autograd(_permute_backward, setup_context=_permute_setup)
_transpose.register_autograd(_transpose_backward, setup_context=_transpose_setup)

"""The public transpose() and permute(): each call goes to the path its array needs.

- a PyTorch tensor: `frameworks.torch_ops` (eager calls straight to the kernels; under
  `torch.compile`, `torch.export` or autograd, the registered custom ops);
- a JAX tracer (inside `jax.jit`, `jax.grad`, `jax.vmap`): `frameworks.jax_ops` (a JAX
  primitive lowered to an FFI call that launches the same kernels on XLA's stream);
- anything else, and concrete JAX arrays: `api.transpose` / `permuter.permute`.

The framework modules are loaded once their framework is: a program that never imports PyTorch
or JAX never loads them. The checks are `isinstance` tests on module globals, which
`torch.compile` traces as constants.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from . import _api as api, _permuter as permuter
from ._config import KernelConfig
from .errors import InputTypeError, OutputError

_TorchTensor: Any = ()  # torch.Tensor once PyTorch is loaded
_JaxTracer: Any = ()  # jax.core.Tracer once JAX is loaded
_torch_ops: Any = None
_jax_ops: Any = None


def transpose(
    x: Any,
    out: Any = None,
    *,
    stream: Any = None,
    config: KernelConfig | None = None,
    conjugate: bool = False,
) -> Any:
    """Transpose a matrix (M, N) -> (N, M), or a batch (B, M, N) -> (B, N, M), on the GPU.

    `x` may be a PyTorch CUDA tensor, a JAX array (also inside `jax.jit`, `jax.grad` and
    `jax.vmap`), a CuPy array, a pycuda GPUArray, any object with `__cuda_array_interface__`,
    or a NumPy array (copied to the GPU and back). The result is the same kind of array, or
    `out` when given (then nothing is allocated). With no `stream`, the call runs on the
    caller's current stream for x's library and device; `stream` may be a PyTorch, CuPy or
    pycuda stream, an object with `__cuda_stream__`, or a raw handle. `config` forces a
    kernel; `conjugate=True` gives the conjugate transpose of a complex array. PyTorch calls
    are differentiable and trace under `torch.compile`. Safe to call from any thread.
    """
    if isinstance(x, _TorchTensor):
        return _torch_ops.transpose(x, out, stream, config, conjugate)
    if isinstance(x, _JaxTracer):
        _traced_jax_call(out, stream, config, "transpose")
        return _jax_ops.transpose(x, conjugate=conjugate)
    if _load_frameworks(x):
        return transpose(x, out, stream=stream, config=config, conjugate=conjugate)
    return api.transpose(x, out, stream=stream, config=config, conjugate=conjugate)


def permute(x: Any, axes: Sequence[int], out: Any = None, *, stream: Any = None) -> Any:
    """Permute the axes of `x`: ``out[i_0, ..., i_k] = x[...]`` with out's axis k being x's
    axis ``axes[k]``, like ``np.transpose(x, axes)`` but materialised, on the GPU.

    `x` is any array transpose() takes, of 0 to 8 dimensions and any supported dtype; `axes`
    a permutation of its dimensions (negative ones count from the end). x may be a strided
    view: strides are whole elements, not negative, and some axis of more than one element
    has stride 1. The result is the same kind of array, or `out` when given (contiguous or a
    view whose innermost stride is 1). Streams, threads, autograd, `torch.compile` and JAX
    transformations as for transpose(). Bad input raises an `autotranspose.errors`
    exception before anything is launched or written.
    """
    if isinstance(x, _TorchTensor):
        return _torch_ops.permute(x, axes, out, stream)
    if isinstance(x, _JaxTracer):
        _traced_jax_call(out, stream, None, "permute")
        return _jax_ops.permute(x, axes)
    if _load_frameworks(x):
        return permute(x, axes, out, stream=stream)
    return permuter.permute(x, axes, out, stream=stream)


def _traced_jax_call(out: Any, stream: Any, config: Any, call: str) -> None:
    """What a call inside a JAX transformation cannot take, refused as the eager call would."""
    if out is not None:
        raise OutputError(
            "out is given, and JAX arrays are immutable: leave out=None and use the JAX "
            f"array {call}() returns"
        )
    if stream is not None or config is not None:
        what = "stream=" if stream is not None else "config="
        raise InputTypeError(
            f"{what} cannot be used inside jax.jit, jax.grad or jax.vmap: XLA runs the call on "
            f"its own stream with the tuned kernel; leave {what[:-1]} unset"
        )


def _load_frameworks(x: Any) -> bool:
    """Load the integration of a framework imported since the last look, if `x` is one of
    its arrays (True: call again). Costs two dictionary lookups for other arrays."""
    global _TorchTensor, _JaxTracer, _torch_ops, _jax_ops
    found = False
    if _torch_ops is None and "torch" in sys.modules:
        _torch_ops = _integration(_import_torch_ops, "PyTorch")
        if _torch_ops:
            _TorchTensor = sys.modules["torch"].Tensor
            found = isinstance(x, _TorchTensor)
    if _jax_ops is None and "jax" in sys.modules:
        _jax_ops = _integration(_import_jax_ops, "JAX")
        if _jax_ops:
            _JaxTracer = sys.modules["jax"].core.Tracer
            found = found or isinstance(x, _JaxTracer)
    return found


def _import_torch_ops() -> Any:
    from .frameworks import torch_ops

    return torch_ops


def _import_jax_ops() -> Any:
    from .frameworks import jax_ops

    return jax_ops


def _integration(load: Callable[[], Any], framework: str) -> Any:
    """The framework's integration module, or False (once, with a warning) where this
    version of the framework lacks what it needs: then calls take the plain path, untraced
    and not differentiable."""
    try:
        return load()
    except (ImportError, AttributeError) as exc:
        warnings.warn(
            f"autotranspose: the {framework} integration could not be loaded ({exc}); calls on "
            f"{framework} arrays run eagerly only: no gradients, no compiled graphs. Update "
            f"{framework} to a version with custom operators / foreign-function calls",
            RuntimeWarning,
            stacklevel=3,
        )
        return False


_load_frameworks(None)

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

from .calls import cast as _cast, inplace as _inplace, permute as permuter, transpose as api
from .errors import InputTypeError, OutputError
from .kernels.config import KernelConfig

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
    dtype: Any = None,
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
    `dtype` casts as it transposes (`cast_transpose` with no scale: float32, bfloat16 or
    float16 to float8 e4m3 or e5m2, bfloat16 or float16).
    """
    if dtype is not None:
        _no_cast_options(config, conjugate)
        return _cast_call(x, dtype, axes=None, out_t=out, stream=stream)
    if isinstance(x, _TorchTensor):
        return _torch_ops.transpose(x, out, stream, config, conjugate)
    if isinstance(x, _JaxTracer):
        _traced_jax_call(out, stream, config, "transpose")
        return _jax_ops.transpose(x, conjugate=conjugate)
    if _load_frameworks(x):
        return transpose(x, out, stream=stream, config=config, conjugate=conjugate)
    return api.transpose(x, out, stream=stream, config=config, conjugate=conjugate)


def permute(
    x: Any, axes: Sequence[int], out: Any = None, *, stream: Any = None, dtype: Any = None
) -> Any:
    """Permute the axes of `x`: ``out[i_0, ..., i_k] = x[...]`` with out's axis k being x's
    axis ``axes[k]``, like ``np.transpose(x, axes)`` but materialised, on the GPU.

    `x` is any array transpose() takes, of 0 to 8 dimensions and any supported dtype; `axes`
    a permutation of its dimensions (negative ones count from the end). x may be a strided
    view: strides are whole elements and not negative, 0 (broadcast) included. The result is
    the same kind of array, or `out` when given (contiguous or a view whose elements do not
    overlap). Streams, threads, autograd, `torch.compile` and JAX
    transformations as for transpose(). Bad input raises an `autotranspose.errors`
    exception before anything is launched or written. `dtype` casts as it permutes
    (`cast_transpose` with no scale).
    """
    if dtype is not None:
        return _cast_call(x, dtype, axes=axes, out_t=out, stream=stream)
    if isinstance(x, _TorchTensor):
        return _torch_ops.permute(x, axes, out, stream)
    if isinstance(x, _JaxTracer):
        _traced_jax_call(out, stream, None, "permute")
        return _jax_ops.permute(x, axes)
    if _load_frameworks(x):
        return permute(x, axes, out, stream=stream)
    return permuter.permute(x, axes, out, stream=stream)


def transpose_(x: Any, *, conjugate: bool = False, stream: Any = None) -> Any:
    """Transpose a row-major contiguous matrix (M, N) or batch (B, M, N) in its own memory,
    with no second buffer: returns the (N, M) or (B, N, M) array over x's memory (PyTorch: a
    view of x's storage; CuPy, pycuda: a reshaped view). x itself then holds the transposed
    bytes under its old shape; use what is returned. Any M and N; 1- to 16-byte elements;
    `conjugate=True` for complex64/complex128; the caller's stream or `stream`. Scratch: at
    most max(one row of x, 32 MiB) plus a table of 4 bytes a row (docs/inplace.md). PyTorch calls
    trace under `torch.compile` (the custom op `autotranspose::transpose_inplace`, which mutates x)
    and refuse a tensor that requires grad. JAX arrays are immutable: use transpose().
    """
    if isinstance(x, _TorchTensor):
        return _torch_ops.transpose_(x, conjugate, stream)
    if isinstance(x, _JaxTracer):
        raise InputTypeError(
            "JAX arrays are immutable, so transpose_() cannot write into x; use "
            "autotranspose.transpose(x) inside jax.jit (XLA may reuse a donated x's memory)"
        )
    if _load_frameworks(x):
        return transpose_(x, conjugate=conjugate, stream=stream)
    return _inplace.transpose_(x, conjugate=conjugate, stream=stream)


def _cast_call(x: Any, dtype: Any, **kw: Any) -> Any:
    return cast_transpose(x, dtype, **kw)


def _no_cast_options(config: Any, conjugate: bool) -> None:
    if config is not None or conjugate:
        raise InputTypeError(
            "transpose(dtype=...) casts with the cast kernels: config= and conjugate= do not "
            "apply; leave them unset (or call without dtype=)"
        )


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


# --- cast_transpose(): its own PyTorch operators (frameworks/torch_cast.py) -------------------
_TorchTensorCast: Any = ()  # torch.Tensor once the PyTorch cast operators are loaded
_torch_cast: Any = None


def cast_transpose(
    x: Any,
    dtype: Any,
    *,
    scale: Any = None,
    amax: Any = None,
    axes: Sequence[int] | None = None,
    out: Any = None,
    out_t: Any = None,
    both: bool = False,
    stream: Any = None,
) -> Any:
    """Cast `x` to `dtype` and transpose it in one pass: ``cast(x * scale)`` permuted by
    `axes` (default: the last two axes swapped), or with ``both=True`` the pair (cast in x's
    own order, cast permuted), both written by the same pass.

    - `x`: float32, bfloat16 or float16 on the GPU (a PyTorch tensor, CuPy array, pycuda
      GPUArray or any `__cuda_array_interface__` array); `dtype`: float8 e4m3
      (``torch.float8_e4m3fn``), float8 e5m2 (``torch.float8_e5m2``), bfloat16 or float16
      (torch, NumPy or ml_dtypes dtypes, or their names).
    - The cast rounds to nearest even; magnitudes beyond the output's largest finite value
      (infinities included) saturate to it; NaN stays NaN: bit for bit
      ``torch.clamp(x.float() * scale, -max, max).to(dtype)``.
    - `scale`: a Python float (rounded to float32) or a 1-element float32 array on x's GPU
      (read by the kernel: no host synchronisation). `amax`: a 1-element float32 array on
      x's GPU, raised in place to max(amax, max |x|) (NaN if any element is NaN).
    - `out_t` / `out`: buffers for the permuted / same-order cast (`out` only with both=True).
    - Runs on the array's current stream (or `stream`), returns arrays of x's kind. PyTorch
      calls trace under `torch.compile` (custom ops `autotranspose::cast_transpose*`) and are
      not differentiable.
    - JAX arrays (also inside `jax.jit` and `jax.vmap`): immutable, so with `amax` the new
      amax is returned as an extra last result instead, and `out` / `out_t` are refused;
      `scale` a Python float or a 1-element float32 JAX array (frameworks/jax_cast.py).
    """
    if isinstance(x, _TorchTensorCast):
        return _torch_cast.cast_transpose(x, dtype, scale, amax, axes, out, out_t, both, stream)
    if _load_torch_cast(x):
        return _torch_cast.cast_transpose(x, dtype, scale, amax, axes, out, out_t, both, stream)
    if isinstance(x, _JaxValue) or _load_jax_cast(x):  # eager arrays and tracers alike
        return _jax_cast.cast_transpose(
            x, dtype, scale=scale, amax=amax, axes=axes, out=out, out_t=out_t, both=both,
            stream=stream,
        )  # fmt: skip
    return _cast.cast_transpose(
        x, dtype, scale=scale, amax=amax, axes=axes, out=out, out_t=out_t, both=both, stream=stream
    )


def _load_torch_cast(x: Any) -> bool:
    """Load the PyTorch integration once PyTorch is imported; True if `x` is a tensor."""
    global _TorchTensorCast, _torch_cast
    if _torch_cast is None and "torch" in sys.modules:
        try:
            from .frameworks import torch_cast
        except (ImportError, AttributeError) as exc:
            warnings.warn(
                f"autotranspose: the PyTorch cast_transpose operators could not be loaded "
                f"({exc}); tensors are cast eagerly only, not under torch.compile",
                RuntimeWarning,
                stacklevel=3,
            )
            _torch_cast = False
            return False
        _torch_cast = torch_cast
        _TorchTensorCast = sys.modules["torch"].Tensor
    return bool(_torch_cast) and isinstance(x, _TorchTensorCast)


_load_torch_cast(None)

# --- cast_transpose() of JAX arrays: a JAX primitive (frameworks/jax_cast.py) ------------------
_JaxValue: Any = ()  # (jax.Array, jax.core.Tracer) once the JAX cast is loaded
_jax_cast: Any = None


def _import_jax_cast() -> Any:
    from .frameworks import jax_cast

    return jax_cast


def _load_jax_cast(x: Any) -> bool:
    """Load the JAX cast once JAX is imported; True if `x` is a JAX array or tracer."""
    global _JaxValue, _jax_cast
    if _jax_cast is None and "jax" in sys.modules:
        _jax_cast = _integration(_import_jax_cast, "JAX")
        if _jax_cast:
            jax = sys.modules["jax"]
            _JaxValue = (jax.Array, jax.core.Tracer)
    return bool(_jax_cast) and isinstance(x, _JaxValue)


_load_jax_cast(None)

"""cast_transpose() for JAX arrays: eager, and under jax.jit, jax.vmap and friends.

JAX arrays are immutable, so the JAX form differs from the in-place one in two ways:

- `amax` (a 1-element float32 JAX array) is not raised in place: the call returns the new
  amax, max(amax, max |x|) (NaN if any element is NaN), as an extra last result of amax's
  shape: ``y, amax = cast_transpose(x, dt, amax=amax)``; with both=True ``z, y, amax``;
- `out=` and `out_t=` cannot be written: given with a JAX x they raise OutputError.

An eager array and a tracer take the same path: one JAX primitive,
``autotranspose_cast_transpose``, with params ``dtype`` (the output format's name), ``axes``,
``both``, ``scale`` (the float32 value of a Python float, or None where the scale is an
operand: a 1-element float32 array read on the device) and ``amax`` (an amax operand is given
and the new one returned). Operands: x, [scale], [amax]; results: [z], y, [new amax].

- abstract evaluation: the permuted shape (and x's, for z) in the output dtype;
- differentiation: none, as the PyTorch operators: a JVP raises InputTypeError saying how to
  differentiate around it;
- batching (vmap): the batch axis is moved to the front within the same call, so a batched
  call is one call, and the new amax is over the whole batch (one max of |x|, as unbatched).
  A scale or amax per example (batched too) runs one call per example (`lax.map`);
- lowering on CUDA: the launches an eager call of that shape runs are made ready in the
  lowering (`_cast.device_launches`, chosen as its first call would be) for each local GPU
  the computation is placed on, as one program whose pointers are codes for the call's
  operands and results (`_jax_handler.RELOC_SHIFT`), led by a copy of the given amax into
  the new one for the kernel to raise; the handler's cast target relocates them onto XLA's
  buffers and launches them on XLA's stream. A plan of two passes is lowered as the eager
  call runs it: a cast in x's order, then the permute primitive (`jax_ops`);
- lowering elsewhere (CPU, or an empty x): XLA's ops, bit for bit
  ``clamp(x.astype(float32) * scale, -max, max).astype(dtype)`` permuted, except that XLA's
  CPU backend flushes float32 subnormals to zero in a product: with a scale other than 1,
  a product below 2**-126 in magnitude is taken as zero, which only a bfloat16 output can
  tell (every other output rounds it to zero anyway; the CUDA lowering keeps it).

Bad dtypes, axes and scales raise at trace time, with the eager call's exceptions and
messages (`_cast.checked`). Nothing here imports JAX until it is used.
"""

from __future__ import annotations

import functools
import math
import numbers
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..calls import cast as _cast
from ..errors import InputTypeError, KernelLaunchError, OutputError
from ..kinds.cast import FORMATS, Format
from . import jax_ops

NAME = "autotranspose_cast_transpose"


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
    config: Any = None,
) -> Any:
    """cast_transpose() of a JAX array or tracer, as a JAX operation: the permuted cast (with
    `both`, the pair (same order, permuted)), and where `amax` is given the new amax as an
    extra last result."""
    _cast.check_both(both)
    if out is not None or out_t is not None:
        raise OutputError(
            f"{'out=' if out is not None else 'out_t='} is given, and JAX arrays are "
            "immutable: leave out= and out_t= None and use the arrays cast_transpose() "
            "returns (with amax=, the new amax is returned too, as the last result)"
        )
    if stream is not None or config is not None:
        what = "stream=" if stream is not None else "config="
        raise InputTypeError(
            f"{what} cannot be used with JAX arrays: XLA runs the call on its own stream with "
            f"the tuned kernel; leave {what[:-1]} unset"
        )
    jax_ops._checked(x)  # a JAX array or tracer
    shape = tuple(int(n) for n in x.shape)
    _, dst, order = _cast.checked(shape, np.dtype(x.dtype).name, dtype, axes, scale)
    operands = []
    if scale is None:
        value: float | None = 1.0
    elif isinstance(scale, numbers.Real) and not isinstance(scale, (bool, np.bool_)):
        value = float(np.float32(scale))  # rounded to float32, as the eager call does
    else:
        operands.append(_operand(scale, "scale"))
        value = None
    if amax is not None:
        operands.append(_operand(amax, "amax"))
    outs = primitive().bind(
        x, *operands, dtype=dst.name, axes=order, both=both, scale=value, amax=amax is not None
    )
    if amax is not None:
        outs[-1] = outs[-1].reshape(np.shape(amax))
    return outs[0] if len(outs) == 1 else tuple(outs)


def _operand(obj: Any, what: str) -> Any:
    """A scale or amax: a 1-element float32 JAX array (or tracer), as shape (1,)."""
    jax = sys.modules.get("jax")
    if jax is None or not isinstance(obj, (jax.Array, jax.core.Tracer)):
        raise InputTypeError(
            f"{what} must be a 1-element float32 JAX array (e.g. jnp.zeros(1, jnp.float32))"
            f"{' or a Python float' if what == 'scale' else ''} when x is a JAX array; got "
            f"{type(obj).__module__}.{type(obj).__name__}"
        )
    if np.dtype(obj.dtype) != np.float32 or math.prod(obj.shape) != 1:
        raise InputTypeError(
            f"{what} has dtype {np.dtype(obj.dtype).name} and {math.prod(obj.shape)} "
            "element(s); it must be one float32 element (e.g. jnp.zeros(1, jnp.float32))"
        )
    return obj.reshape(1)


def out_dtype(name: str) -> np.dtype:
    """The NumPy (ml_dtypes) dtype of an output format's name: what JAX arrays hold."""
    return _cast._numpy_dtype(FORMATS[name])


# --- the primitive -------------------------------------------------------------------------------
_lock = threading.Lock()
_primitive: list[Any] = []


def primitive() -> Any:
    """The ``autotranspose_cast_transpose`` primitive, defined with its rules on first use."""
    if not _primitive:
        with _lock:
            if not _primitive:
                _primitive.append(_define())
    return _primitive[0]


def _define() -> Any:
    from jax.extend.core import Primitive
    from jax.interpreters import ad, batching, mlir

    p = Primitive(NAME)
    p.multiple_results = True
    p.def_impl(_impl)
    p.def_abstract_eval(_abstract_eval)
    ad.primitive_jvps[p] = _no_jvp
    batching.primitive_batchers[p] = _batch
    mlir.register_lowering(p, _reference_lowering())
    mlir.register_lowering(p, _cuda_lowering, platform="cuda")
    jax_ops._lowered_per_device(p)
    return p


def _scale_key(scale: float | None) -> int | None:
    """A float scale as cache keys take it: its float32 bits (0.0 and -0.0 cast differently;
    NaN equals itself)."""
    return None if scale is None else int(np.float32(scale).view(np.uint32))


def _impl(*args: Any, dtype: str, axes: tuple[int, ...], both: bool, scale: Any, amax: bool) -> Any:
    """An eager bind (concrete arrays outside any transformation): compiled once per
    signature by jax.jit, as JAX runs its own primitives op by op."""
    return _jitted(dtype, axes, both, _scale_key(scale), amax)(*args)


@functools.lru_cache(maxsize=256)
def _jitted(dtype: str, axes: tuple[int, ...], both: bool, scale: int | None, amax: bool) -> Any:
    import jax

    value = None if scale is None else float(np.uint32(scale).view(np.float32))
    bind = functools.partial(
        primitive().bind, dtype=dtype, axes=axes, both=both, scale=value, amax=amax
    )
    return jax.jit(lambda *args: bind(*args))


def _abstract_eval(
    x: Any, *ops: Any, dtype: str, axes: tuple[int, ...], both: bool, scale: Any, amax: bool
) -> list[Any]:
    dt = out_dtype(dtype)
    y = jax_ops._abstract_eval(x, axes=axes, conjugate=False).update(dtype=dt, weak_type=False)
    outs = [x.update(dtype=dt, weak_type=False)] if both else []
    outs.append(y)
    if amax:
        outs.append(ops[-1].update(weak_type=False))
    return outs


def _no_jvp(primals: Sequence[Any], tangents: Sequence[Any], **params: Any) -> Any:
    raise InputTypeError(
        "cast_transpose() is not differentiable (as its PyTorch operators): a float8, "
        "bfloat16 or float16 cast has no gradient to give back to x. Differentiate around "
        "it: pass jax.lax.stop_gradient(x) (and of the scale), or wrap the cast in a "
        "jax.custom_vjp that passes the gradient straight through"
    )


def _batch(
    args: Sequence[Any],
    dims: Sequence[int | None],
    *,
    dtype: str,
    axes: tuple[int, ...],
    both: bool,
    scale: Any,
    amax: bool,
) -> tuple[list[Any], list[int | None]]:
    """vmap: one call of the batched x whose axes also move the batch axis to the front (z
    keeps x's order, so its batch axis stays where x's is); a scale or amax per example: one
    call per example."""
    params = dict(dtype=dtype, both=both, scale=scale, amax=amax)
    x, *ops = args
    d, *op_dims = dims
    n = len(axes)
    if any(od is not None for od in op_dims) or d is None:
        from jax import lax
        from jax.interpreters import batching

        size = next(a.shape[b] for a, b in zip(args, dims, strict=True) if b is not None)
        front = [batching.bdim_at_front(a, b, size) for a, b in zip(args, dims, strict=True)]
        outs = lax.map(lambda a: primitive().bind(*a, axes=axes, **params), tuple(front))
        return list(outs), [0] * len(outs)
    d %= n + 1
    full = (d, *(a + (a >= d) for a in axes))
    outs = primitive().bind(x, *ops, axes=full, **params)
    out_dims: list[int | None] = [d] if both else []
    out_dims.append(0)
    if amax:
        out_dims.append(None)
    return outs, out_dims


# --- lowering -------------------------------------------------------------------------------------
def _reference(
    x: Any, *ops: Any, dtype: str, axes: tuple[int, ...], both: bool, scale: Any, amax: bool
) -> list[Any]:
    """clamp(x.astype(float32) * scale, -max, max).astype(dtype), permuted; the new amax."""
    import jax.numpy as jnp
    from jax import lax

    fmt = FORMATS[dtype]
    rest = list(ops)
    v = x.astype(jnp.float32)
    if scale is None:
        v = v * rest.pop(0).reshape(())
    elif np.float32(scale) != 1:
        v = v * np.float32(scale)
    # the clamp on the bits, so that NaN and float32 subnormals pass unchanged (XLA's CPU
    # backend flushes subnormal operands of min / max and of products to zero)
    bits = lax.bitcast_convert_type(v, jnp.uint32)
    size, top = bits & np.uint32(0x7FFFFFFF), np.float32(fmt.max).view(np.uint32)
    over = (size > top) & (size <= np.uint32(0x7F800000))  # beyond the largest finite, not NaN
    bits = jnp.where(over, (bits & np.uint32(0x80000000)) | top, bits)
    c = lax.bitcast_convert_type(bits, jnp.float32).astype(out_dtype(dtype))
    outs = [c] if both else []
    outs.append(lax.transpose(c, axes))
    if amax:
        prior = rest.pop(0)
        if math.prod(x.shape):
            prior = jnp.maximum(prior, jnp.max(jnp.abs(x.astype(jnp.float32))))  # NaN stays
        outs.append(prior)
    return outs


@functools.cache
def _reference_lowering() -> Any:
    """XLA's own ops: for other platforms and for an empty x."""
    from jax.interpreters import mlir

    return mlir.lower_fun(_reference, multiple_results=True)


def _two_pass(
    x: Any, *ops: Any, dtype: str, axes: tuple[int, ...], both: bool, scale: Any, amax: bool
) -> list[Any]:
    """A plan of more host loops than one pass takes, as the eager call runs it: the cast in
    x's order, then the permute primitive of it."""
    same = tuple(range(len(axes)))
    z, *rest = primitive().bind(x, *ops, dtype=dtype, axes=same, both=False, scale=scale, amax=amax)
    y = jax_ops.primitive().bind(z, axes=axes, conjugate=False)
    return [z, y, *rest] if both else [y, *rest]


@functools.cache
def _two_pass_lowering() -> Any:
    from jax.interpreters import mlir

    return mlir.lower_fun(_two_pass, multiple_results=True)


@functools.cache
def _ffi_lowering() -> Any:
    import jax.ffi

    from . import _jax_handler

    return jax.ffi.ffi_lowering(_jax_handler.CAST_TARGET)


def buffers(both: bool, scale: Any, amax: bool) -> dict[str, int]:
    """The call's buffers by name, numbered from 1 as the handler counts them: the operands
    (x, scale, amax_in), then the results (z, y, amax); the absent ones left out."""
    names = ["x", *(["scale"] if scale is None else []), *(["amax_in"] if amax else [])]
    names += [*(["z"] if both else []), "y", *(["amax"] if amax else [])]
    return {name: k for k, name in enumerate(names, 1)}


def device_program(
    device: int,
    shape: tuple[int, ...],
    axes: tuple[int, ...],
    src: Format,
    dst: Format,
    both: bool,
    scale: Any,
    amax: bool,
) -> Any:
    """One device's program for the handler's cast target: the eager call's launches with
    their pointers coded for the call's buffers (`buffers`), after a copy of the given amax
    into the new one where amax is asked for."""
    from ..runtime import driver as _driver
    from . import _jax_handler

    nums = buffers(both, scale, amax)
    code = lambda name: nums[name] << _jax_handler.RELOC_SHIFT if name in nums else 0  # noqa: E731
    pointers = (code("x"), code("y"), code("z"), code("scale"), code("amax"))
    launches = _cast.device_launches(
        device, shape, axes, src, dst, both=both, scale_value=1.0 if scale is None else scale,
        pointers=pointers,
    )  # fmt: skip
    steps = [(None, code("amax_in"), code("amax"), 4)] if amax else []
    steps += [(launch, 0, 0, 8 * len(pointers)) for launch in launches]
    return _driver.Program(launches[0].ctx, steps)


def _entry(
    device: int,
    shape: tuple[int, ...],
    axes: tuple[int, ...],
    src: Format,
    dst: Format,
    both: bool,
    scale: Any,
    amax: bool,
) -> jax_ops.Entry:
    # kept with permute's programs (jax_ops.kept_program), never dropped
    key = ("cast", device, shape, axes, src.name, dst.name, both, _scale_key(scale), amax)
    prog = jax_ops.kept_program(
        key, lambda: device_program(device, shape, axes, src, dst, both, scale, amax)
    )
    return jax_ops.Entry(device, prog.address, False)


def _cuda_lowering(
    ctx: Any, *args: Any, dtype: str, axes: tuple[int, ...], both: bool, scale: Any, amax: bool
) -> Any:
    params = dict(dtype=dtype, axes=axes, both=both, scale=scale, amax=amax)
    aval = ctx.avals_in[0]
    shape = tuple(int(n) for n in aval.shape)
    if math.prod(shape) == 0:
        return _reference_lowering()(ctx, *args, **params)
    if _cast.contiguous_plan(shape, axes, both).two_pass:
        return _two_pass_lowering()(ctx, *args, **params)
    if getattr(ctx.module_context.lowering_parameters, "for_export", False):
        raise InputTypeError(
            "autotranspose's JAX cast primitive cannot be exported (jax.export): the compiled "
            "call holds the addresses of this process's prepared launches. Export a function "
            "that casts with jnp ops instead"
        )
    from . import _jax_handler

    _jax_handler.register()
    src, dst = _cast.input_format(np.dtype(aval.dtype).name), FORMATS[dtype]
    entries = [
        _entry(d, shape, axes, src, dst, both, scale, amax) for d in jax_ops.lowering_devices(ctx)
    ]
    if not entries:
        raise KernelLaunchError(
            "lowering autotranspose's JAX cast primitive for CUDA, but JAX lists no local GPU "
            "to make its launches ready on; run it where jax.devices('cuda') is not empty"
        )
    names = buffers(both, scale, amax)
    return _ffi_lowering()(
        ctx, *args, **attributes(entries, names, [*ctx.avals_in, *ctx.avals_out])
    )


def attributes(
    entries: Sequence[jax_ops.Entry], names: dict[str, int], avals: Sequence[Any]
) -> dict[str, Any]:
    """The cast target's attributes (jax_handler.cc says what each means) for the buffers
    `names` (`buffers`) of `avals`: the arrays 16-byte aligned, as the kernels were chosen
    for; a scale and an amax 4-byte."""
    small = ("scale", "amax_in", "amax")
    return {
        "programs": np.array([e.address for e in entries], np.uint64),
        "launches": np.array([int(e.is_launch) for e in entries], np.int32),
        "devices": np.array([e.device for e in entries], np.int32),
        "sizes": np.array(
            [math.prod(a.shape) * np.dtype(a.dtype).itemsize for a in avals], np.uint64
        ),
        "align": np.array([4 if name in small else 16 for name in names], np.uint64),
    }

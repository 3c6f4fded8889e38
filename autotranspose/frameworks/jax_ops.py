"""transpose() and permute() for JAX arrays under jax.jit, jax.grad, jax.vmap and friends.

An eager call reads a JAX array's memory through DLPack, but a traced value (a Tracer) has no
memory yet: inside a transformation the call must become part of JAX's program. So it is one
JAX primitive, ``autotranspose_permute`` with params ``axes`` (a permutation) and ``conjugate``
(complex conjugate as well, only where the axes swap the last two and keep the rest in
place: what transpose(x, conjugate=True) does):

- abstract evaluation: the permuted shape, the same dtype;
- differentiation: it is linear, so its JVP is itself on the tangent and its transpose the
  inverse permutation (with conjugate: itself, since swapping the last two is its own
  inverse and JAX transposes conj to conj);
- batching (vmap): the batch axis is moved to the front within the same permute, so a
  batched call is still one call (conjugate with another batch axis: a plain permute, then
  lax.conj);
- lowering on CUDA: the call's launches are made ready in the lowering
  (`permuter.device_program`: exactly what an eager call of that shape runs, chosen and
  measured as its first call would be) for each local GPU the computation is placed on, and
  an XLA FFI custom call (`_jax_handler`, target ``autotranspose_permute``) launches them on
  XLA's stream with XLA's buffers. Their addresses are attributes of the call; the objects
  behind them are kept for the life of the process (`_programs`);
- lowering elsewhere (CPU, or a call that moves no data: an empty array, or axes that leave
  the memory order as it is): XLA's own transpose (and conj).

Bad axes, dtypes and shapes raise at trace time, with the exceptions and messages of the
eager calls (they run the same checks).

Nothing here imports JAX until it is used: `is_traced` costs a dict lookup for callers that
never touch JAX.
"""

from __future__ import annotations

import ctypes
import functools
import math
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..errors import AutotransposeError, InputTypeError, KernelLaunchError
from ..plans.dtypes import element_type
from ..plans.layout import contiguous_strides, normalize_axes
from ..plans.permute import plan_permute
from ..runtime.arrays import matrix_layout

NAME = "autotranspose_permute"


def is_traced(x: Any) -> bool:
    """Whether `x` is a JAX tracer (a value inside jit, grad, vmap...): such a value must go
    through the primitive, never through DLPack. False without importing JAX."""
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.core.Tracer)


def transpose(x: Any, *, conjugate: bool = False) -> Any:
    """Transpose a 2-D JAX array (M, N) -> (N, M), or a batch (B, M, N) -> (B, N, M), as a
    JAX operation: traceable, differentiable and batchable. `conjugate=True` gives the
    conjugate transpose of complex64/complex128. Returns a JAX array (or tracer)."""
    shape, et = _checked(x)
    matrix_layout("x", shape, tuple(s * et.size for s in contiguous_strides(shape)), et.size)
    if conjugate:
        et.check_conjugable()
    axes = (1, 0) if len(shape) == 2 else (0, 2, 1)
    return primitive().bind(x, axes=axes, conjugate=bool(conjugate))


def permute(x: Any, axes: Sequence[int]) -> Any:
    """Permute the axes of a JAX array (or tracer) of 0 to 8 dimensions as a JAX operation:
    ``out`` has axis k of x's axis ``axes[k]``, as ``jnp.transpose(x, axes)``. Traceable,
    differentiable and batchable; returns a JAX array (or tracer)."""
    shape, et = _checked(x)
    order = normalize_axes(axes, len(shape))
    _planned(shape, order, et.size)  # what the eager call refuses (e.g. more than 8 dims)
    return primitive().bind(x, axes=order, conjugate=False)


def _checked(x: Any) -> tuple[tuple[int, ...], Any]:
    """(shape, element type) of a JAX array or tracer; the eager calls' dtype error."""
    jax = sys.modules.get("jax")
    if jax is None or not isinstance(x, (jax.Array, jax.core.Tracer)):
        raise InputTypeError(
            f"x is a {type(x).__module__}.{type(x).__name__}; this entry point takes JAX "
            "arrays and tracers: pass jnp.asarray(x), or call autotranspose.transpose / "
            "permute, which take any supported array"
        )
    et = element_type(x.dtype)
    et.check_whole_values("JAX")
    return tuple(x.shape), et


@functools.lru_cache(maxsize=1024)
def _planned(shape: tuple[int, ...], axes: tuple[int, ...], elem_bytes: int) -> None:
    """The eager call's plan, for its refusals only (cached: a shape traced again is a hit)."""
    plan_permute(shape, axes, elem_bytes)


# --- the primitive -------------------------------------------------------------------------------
_lock = threading.Lock()
_primitive: list[Any] = []


def primitive() -> Any:
    """The ``autotranspose_permute`` primitive, defined with its rules on first use."""
    if not _primitive:
        with _lock:
            if not _primitive:
                _primitive.append(_define())
    return _primitive[0]


def _define() -> Any:
    from jax.extend.core import Primitive
    from jax.interpreters import ad, batching, mlir

    p = Primitive(NAME)
    p.def_impl(_impl)
    p.def_abstract_eval(_abstract_eval)
    ad.deflinear2(p, _transpose_rule)
    batching.primitive_batchers[p] = _batch
    mlir.register_lowering(p, _reference_lowering())
    mlir.register_lowering(p, _cuda_lowering, platform="cuda")
    _lowered_per_device(p)
    return p


def _lowered_per_device(p: Any) -> None:
    """Ask jit to lower a computation holding `p` once per device assignment, with the devices
    in the lowering context (as JAX's own cuDNN primitives do): then launches are made ready
    for those devices only. Private in JAX: where it is missing, jit lowers once for any
    device, and `lowering_devices` makes the call ready on every local GPU instead."""
    try:
        from jax._src import dispatch

        dispatch.prim_requires_devices_during_lowering.add(p)
    except (ImportError, AttributeError):
        pass


def _impl(x: Any, *, axes: tuple[int, ...], conjugate: bool) -> Any:
    """An eager bind (a concrete array outside any transformation): compiled once per
    signature by jax.jit, as JAX runs its own primitives op by op."""
    return _jitted(axes, conjugate)(x)


@functools.lru_cache(maxsize=256)
def _jitted(axes: tuple[int, ...], conjugate: bool) -> Any:
    import jax

    return jax.jit(functools.partial(primitive().bind, axes=axes, conjugate=conjugate))


def _abstract_eval(x: Any, *, axes: tuple[int, ...], conjugate: bool) -> Any:
    shape = tuple(x.shape[a] for a in axes)
    sharding = getattr(x, "sharding", None)
    spec = getattr(sharding, "spec", None)
    if spec is not None and any(s is not None for s in spec):  # a sharded axis moves with it
        full = (*spec, *[None] * (len(axes) - len(spec)))
        return x.update(shape=shape, sharding=sharding.update(spec=[full[a] for a in axes]))
    return x.update(shape=shape)


def _transpose_rule(ct: Any, x: Any, *, axes: tuple[int, ...], conjugate: bool) -> list[Any]:
    """The cotangent of x: the inverse permutation of out's (conjugated as out was: JAX's
    transpose of conj is conj)."""
    inverse = tuple(int(i) for i in np.argsort(axes))
    return [primitive().bind(ct, axes=inverse, conjugate=conjugate)]


def _batch(
    args: Sequence[Any], dims: Sequence[int | None], *, axes: tuple[int, ...], conjugate: bool
) -> tuple[Any, int | None]:
    """vmap: one permute of the batched array that also moves the batch axis to the front."""
    (x,), (d,) = args, dims
    if d is None:
        return primitive().bind(x, axes=axes, conjugate=conjugate), None
    d %= len(axes) + 1
    full = (d, *(a + (a >= d) for a in axes))
    if conjugate and not is_conjugate_form(full):
        from jax import lax

        return lax.conj(primitive().bind(x, axes=full, conjugate=False)), 0
    return primitive().bind(x, axes=full, conjugate=conjugate), 0


def is_conjugate_form(axes: Sequence[int]) -> bool:
    """Axes transpose(conjugate=True) can run: the last two swapped, the rest in place."""
    n = len(axes)
    return n >= 2 and tuple(axes) == (*range(n - 2), n - 1, n - 2)


# --- lowering -------------------------------------------------------------------------------------
def _reference(x: Any, *, axes: tuple[int, ...], conjugate: bool) -> Any:
    from jax import lax

    y = lax.transpose(x, axes)
    return lax.conj(y) if conjugate else y


@functools.cache
def _reference_lowering() -> Any:
    """XLA's own transpose (and conj): for other platforms and calls that move nothing."""
    from jax.interpreters import mlir

    return mlir.lower_fun(_reference, multiple_results=False)


@functools.cache
def _ffi_lowering() -> Any:
    import jax.ffi

    from . import _jax_handler

    return jax.ffi.ffi_lowering(_jax_handler.TARGET)


def fused(shape: Sequence[int], axes: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The same permutation with axes of one element dropped and axes that stay side by side
    merged: (shape, axes) of the fewest dims that move the same bytes the same way (the
    plan fuses so too). Identity axes: the data keeps its order."""
    kept = sorted(a for a in range(len(shape)) if shape[a] != 1)
    rank = {a: i for i, a in enumerate(kept)}
    order = [rank[a] for a in axes if shape[a] != 1]  # output order, as kept input ranks
    groups: list[list[int]] = []
    for r in order:
        if groups and groups[-1][-1] + 1 == r:
            groups[-1].append(r)
        else:
            groups.append([r])
    by_input = sorted(range(len(groups)), key=lambda g: groups[g][0])
    new_shape = tuple(math.prod(shape[kept[r]] for r in groups[g]) for g in by_input)
    position = {g: i for i, g in enumerate(by_input)}
    return new_shape, tuple(position[g] for g in range(len(groups)))


class Entry(NamedTuple):
    """One device's launches for a call signature, as the handler takes them."""

    device: int
    address: int
    is_launch: bool  # one prepared launch (at_transpose), else a program (at_run)


# A call signature -> the launches' owner: ("permute", device, fused shape, fused axes, dtype
# name, conjugate), or jax_cast's ("cast", ...). Never dropped, so not bounded like the eager
# caches (`_lru`): compiled XLA executables hold the addresses as constants, JAX says nothing
# when it drops an executable, and a program freed under a live one would be a launch from
# freed memory. It grows only with what JAX lowers (one entry a signature, however often it
# is lowered), each beside an XLA executable many times its size.
_programs: dict[tuple[Any, ...], Any] = {}
_programs_lock = threading.Lock()
# One reference more than the module holds: the structs outlive the interpreter's teardown of
# module globals (a jitted call on a daemon thread at exit still finds them).
ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", ctypes.pythonapi))(_programs)


def _entry(
    device: int, shape: tuple[int, ...], axes: tuple[int, ...], dtype: Any, conjugate: bool
) -> Entry:
    from ..calls import permute as permuter
    from ..runtime import driver as _driver

    key = ("permute", device, shape, axes, element_type(dtype).name, conjugate)
    prog = kept_program(
        key, lambda: permuter.device_program(device, shape, axes, dtype, conjugate=conjugate)
    )
    return Entry(device, prog.address, isinstance(prog, _driver.Prepared))


def kept_program(key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """The program (or prepared launch) of a call signature, made once by `make` and kept for
    the process's life (`_programs`); KernelLaunchError where no native launcher can run it."""
    prog = _programs.get(key)
    if prog is None:
        with _programs_lock:
            prog = _programs.get(key)
            if prog is None:
                prog = make()
                if not prog.address:
                    raise KernelLaunchError(_no_launcher_reason())
                _programs[key] = prog
    return prog


def _no_launcher_reason() -> str:
    from ..runtime import native as _native

    if not _native.enabled():
        return (
            f"{_native.ENV_VAR}=0 switches off the compiled launcher, and autotranspose's JAX "
            "primitive launches through it from XLA's FFI handler: unset it (or set it to 1) "
            "to use autotranspose under jax.jit, grad or vmap"
        )
    return (
        "the compiled launcher could not be built (no working C compiler: tried $CC, cc, gcc, "
        "clang), and autotranspose's JAX primitive launches through it from XLA's FFI "
        "handler: install a C compiler, or set CC to one"
    )


def attributes(entries: Sequence[Entry], nbytes: int) -> dict[str, Any]:
    """The custom call's attributes (jax_handler.cc says what each means)."""
    return {
        "programs": np.array([e.address for e in entries], np.uint64),
        "launches": np.array([int(e.is_launch) for e in entries], np.int32),
        "devices": np.array([e.device for e in entries], np.int32),
        "nbytes": np.uint64(nbytes),
    }


def lowering_devices(ctx: Any) -> list[int]:
    """The CUDA ordinals of the local GPUs the lowered computation is placed on: the
    device assignment of a jit or a mesh, else (pmap, or none said) every local GPU."""
    import jax

    context = getattr(ctx.module_context, "axis_context", None)
    devices = getattr(context, "device_assignment", None)
    if devices is None:
        devices = getattr(getattr(context, "mesh", None), "devices", None)
    found: set[int] = set()
    if devices is not None:
        me = jax.process_index()
        for d in np.asarray(devices, dtype=object).flat:
            hw = getattr(d, "local_hardware_id", None)
            if (
                hw is not None
                and getattr(d, "process_index", me) == me
                and d.platform in ("gpu", "cuda")
            ):
                found.add(int(hw))
    if not found:
        found = {int(d.local_hardware_id) for d in _local_gpus()}
    return sorted(found)


def _local_gpus() -> list[Any]:
    import jax

    for backend in ("cuda", "gpu"):
        try:
            return list(jax.local_devices(backend=backend))
        except RuntimeError:  # no such backend here
            continue
    return []


def _cuda_lowering(ctx: Any, x: Any, *, axes: tuple[int, ...], conjugate: bool) -> Any:
    (aval,) = ctx.avals_in
    shape, order = fused(aval.shape, axes)
    moves = order != tuple(range(len(order)))
    try:
        element_type(aval.dtype)
    except AutotransposeError:  # e.g. float0 tangents: nothing of ours to run
        moves = False
    if not moves or math.prod(aval.shape) == 0:
        return _reference_lowering()(ctx, x, axes=axes, conjugate=conjugate)
    if conjugate and not is_conjugate_form(order):  # never made by this module's rules
        return _reference_lowering()(ctx, x, axes=axes, conjugate=conjugate)
    if getattr(ctx.module_context.lowering_parameters, "for_export", False):
        raise InputTypeError(
            "autotranspose's JAX primitive cannot be exported (jax.export): the compiled call "
            "holds the addresses of this process's prepared launches. Export a function "
            "that uses jnp.transpose instead"
        )
    from . import _jax_handler

    _jax_handler.register()
    entries = [_entry(d, shape, order, aval.dtype, conjugate) for d in lowering_devices(ctx)]
    if not entries:
        raise KernelLaunchError(
            "lowering autotranspose's JAX primitive for CUDA, but JAX lists no local GPU to "
            "make its launches ready on; run it where jax.devices('cuda') is not empty"
        )
    nbytes = math.prod(aval.shape) * np.dtype(aval.dtype).itemsize
    return _ffi_lowering()(ctx, x, **attributes(entries, nbytes))

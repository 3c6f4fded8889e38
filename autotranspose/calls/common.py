"""What transpose() and permute() share around a call: its device, context and stream, the
result handed back in the caller's kind, empty arrays, and NumPy arrays run through the GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..runtime import driver as _driver, streams
from ..runtime.arrays import NDView, View, allocate
from ..runtime.compiler import DeviceState, device_state


def keeping_context(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args), then the thread's context as it was: array libraries may switch it while we
    allocate or ask for their stream (CuPy's Device guard does)."""
    prev = _driver.current()
    try:
        return fn(*args)
    finally:
        if _driver.current() != prev:
            _driver.set_current(prev)


def empty_result(
    xv: View | NDView, want: tuple[int, ...], out: Any, given: streams.Explicit | None
) -> Any:
    """An empty GPU array has nothing to move: no kernel, no device state. `out` (checked by
    the caller) comes back untouched, else a new empty array of x's kind of shape `want`.
    An empty GPUArray or CAI array may have no memory (pointer 0), hence no device: its
    result is made in the given stream's context, else the thread's current one."""
    if given is not None and xv.device is not None:
        streams.check_device(given, xv.device)
    if out is not None:
        return out
    return keeping_context(_new_empty, xv, want, given)


def _new_empty(xv: View | NDView, want: tuple[int, ...], given: streams.Explicit | None) -> Any:
    ctx = (given.ctx if given is not None else None) or xv.ctx
    device = xv.device if xv.device is not None else given.device if given is not None else None
    if ctx is None:
        ctx = _driver.primary_context(device) if device is not None else _driver.current()
    if ctx is None:  # no device named anywhere and no current context: the first GPU's
        ctx = _driver.primary_context(0)
    return delivered(xv.kind, allocate(xv, want, ctx))


def call_target(
    xv: View | NDView, given: streams.Explicit | None
) -> tuple[DeviceState, int, int | None]:
    """(device state, context, stream) a call on device array `xv` runs in: the caller's
    stream if given (refused if of another device), else x's library's current one."""
    assert xv.device is not None
    if given is not None:
        streams.check_device(given, xv.device)
    state = device_state(xv.device)
    ctx = (given.ctx if given is not None else None) or xv.ctx or state.ctx
    handle = given.handle if given is not None else streams.default(xv.kind, xv.device, xv.stream)
    return state, ctx, handle


def host_target(given: streams.Explicit | None) -> tuple[DeviceState, int, int | None]:
    """(device state, context, stream) a NumPy call runs in: the given stream's device, else
    the thread's current context's, else the first."""
    state = device_state(
        given.device if given is not None and given.device is not None else host_device()
    )
    ctx = (given.ctx if given is not None else None) or state.ctx
    handle = given.handle if given is not None else streams.LEGACY
    return state, ctx, handle


def delivered(kind: str, result: Any) -> Any:
    """What the caller gets back: the array itself, or for JAX the array made from our
    exported output (JAX arrays cannot be written in place)."""
    if kind == "jax":
        import jax

        return jax.dlpack.from_dlpack(result)
    return result


def host_device() -> int:
    """The device a NumPy call uses: the thread's current context's, else the first."""
    ctx = _driver.current()
    return _driver.context_device(ctx) if ctx else 0


def through_device(
    host: np.ndarray,
    want: tuple[int, ...],
    out: Any,
    ctx: int,
    handle: int | None,
    prepare: Callable[[int, int], Callable[[], None]],
) -> Any:
    """NumPy calls (transpose and permute): a contiguous host array copied to `ctx`'s device
    into a scratch buffer, what `prepare(src, dst)` returns run there, and the result (shape
    `want`) copied back into `out` or a new array; synchronous, and the scratch buffers are
    freed whatever happens."""
    nbytes = host.nbytes
    src, dst = _driver.Allocation(nbytes, ctx), _driver.Allocation(nbytes, ctx)
    try:
        run = prepare(src.ptr, dst.ptr)
        result = np.empty(want, host.dtype)
        with _driver.on_context(ctx):
            _driver.memcpy_htod(src.ptr, host.ctypes.data, nbytes)
            run()
            _driver.synchronize_stream(handle)
            _driver.memcpy_dtoh(result.ctypes.data, dst.ptr, nbytes)
    finally:
        src.free()
        dst.free()
    if out is not None:
        out[...] = result
        return out
    return result

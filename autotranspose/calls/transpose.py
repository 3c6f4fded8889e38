"""transpose(): validate the call, run the kernel `_dispatch` picks for it on the caller's
stream.

The first call of a signature (device, element size, shape, strides, alignment, config) is
validated here and its launch picked and kept by `_dispatch`; later calls of that signature
from PyTorch, CuPy or pycuda arrays take `_fastpath` (a dict hit and one native call), with no
database query, rendering or compilation on the way. Any thread may call: the array's context
is made current for the launch only, and the thread's own context is put back (see `_driver`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..dispatch import fastpath, picker as dispatch
from ..errors import ConfigError, LayoutError
from ..kernels.config import KernelConfig
from ..runtime import driver as _driver, streams
from ..runtime.arrays import (
    View,
    allocate_like,
    check_output,
    shape_and_type,
    transposed_shape,
    view,
)
from . import permute as permuter
from .common import (
    call_target,
    delivered,
    empty_result,
    host_target,
    keeping_context,
    through_device,
)


def _check_config_type(config: Any, x: View) -> None:
    if not isinstance(config, KernelConfig):
        raise ConfigError(
            f"config must be an autotranspose.KernelConfig, got {type(config).__name__}"
        )
    if config.elem_bytes != x.et.size:
        raise ConfigError(
            f"config is for {config.elem_bytes}-byte elements but x holds {x.et.size}-byte "
            f"{x.et.name}; use config.replace(elem_bytes={x.et.size}, ...)"
        )


def transpose(
    x: Any,
    out: Any = None,
    *,
    stream: Any = None,
    config: KernelConfig | None = None,
    conjugate: bool = False,
) -> Any:
    """Transpose a matrix (M, N) -> (N, M), or a batch (B, M, N) -> (B, N, M), on the GPU.

    `x` may be a pycuda GPUArray, a CuPy array, a PyTorch CUDA tensor, a JAX array, any object
    with `__cuda_array_interface__`, or a NumPy array (copied to the GPU and back). The result
    is the same kind of array, or `out` when given (then nothing is allocated). With no
    `stream`, the call runs on the caller's current stream for x's library and device (see
    :mod:`autotranspose.runtime.streams`); `stream` may be a PyTorch, CuPy or pycuda stream, an object
    with `__cuda_stream__`, or a raw handle. `config` forces a kernel; `conjugate=True` gives
    the conjugate transpose of a complex array. Safe to call from any thread.

    `x` may have any strides (whole elements, not negative): layouts whose rows are not runs
    of consecutive elements, and such an `out`, are moved as permute() moves them (with
    `conjugate=True`, the conjugating kernels run between permute()'s contiguous copies; a
    forced `config`, a matrix kernel, refuses them).
    """
    if stream is None and config is None and not conjugate:
        fast = fastpath.BY_TYPE.get(type(x))
        if fast is not None and (out is None or type(out) is type(x)):  # mixed kinds: full path
            result = fast(x, out)
            if result is not None:
                return result
    return _transpose(x, out, stream, config, conjugate)


def _transpose(x: Any, out: Any, stream: Any, config: Any, conjugate: bool) -> Any:
    given = None if stream is None else streams.explicit(stream)
    try:
        xv = view(x, "x", given.handle if given is not None else None)
        if out is not None:
            view(out, "out")  # its layout, before anything runs
    except LayoutError:
        if config is not None:
            raise  # a forced config is a matrix kernel
        return _any_layout(x, out, stream, given, conjugate)
    if conjugate:
        xv.et.check_conjugable()
    if config is not None:
        _check_config_type(config, xv)
    if xv.kind == "numpy":
        return _host_transpose(xv, out, given, config, conjugate)
    if not xv.size:
        if out is not None:
            check_output(xv, view(out, "out"))
        return empty_result(xv, transposed_shape(xv), out, given)
    return keeping_context(_on_device, x, out, xv, given, config, conjugate)


def _any_layout(
    x: Any, out: Any, stream: Any, given: streams.Explicit | None, conjugate: bool
) -> Any:
    """Layouts the matrix kernels do not read or write (rows that are not runs of consecutive
    elements: a column-major matrix, a stride-2 view, a broadcast; or such an `out`):
    permute()'s plan takes any strides. A conjugate transpose runs the conjugating matrix
    kernels between contiguous copies that permute() makes (two or three launches)."""
    nd, et = shape_and_type(x)
    swap = (1, 0) if nd == 2 else (0, 2, 1)
    if not conjugate:
        return permuter.permute(x, swap, out, stream=stream)
    et.check_conjugable()
    same = tuple(range(nd))
    src = x if _matrix(x) else permuter.permute(x, same, stream=stream)
    if out is None or _matrix(out):
        result = _transpose(src, out, stream, None, True)
    else:
        done = _transpose(src, None, stream, None, True)
        result = permuter.permute(done, same, out, stream=stream)
    sv = view(src)
    if given is not None and sv.size:
        # the copies are freed on their library's current stream, which may run ahead of the
        # given one: wait until the given stream has read them
        _, ctx, handle = call_target(sv, given)
        with _driver.on_context(ctx):
            _driver.synchronize_stream(handle if handle is not None else streams.LEGACY)
    return result


def _matrix(a: Any) -> bool:
    """Whether the matrix kernels take `a`'s layout (rows of consecutive elements)."""
    try:
        view(a)
    except LayoutError:
        return False
    return True


def _on_device(
    x: Any, out: Any, xv: View, given: streams.Explicit | None, config: Any, conjugate: bool
) -> Any:
    state, ctx, handle = call_target(xv, given)
    if out is None:
        result = allocate_like(xv, ctx)
        ov = _exported_view(xv, result) if xv.kind == "jax" else view(result, "out")
    else:
        result = out
        ov = view(out, "out")
        check_output(xv, ov)
    if xv.size:
        launch = dispatch.launch_for(xv, ov, config, conjugate, state, handle, ctx)
        launch.run(xv.ptr, ov.ptr, handle, ctx)
        if given is None and config is None and not conjugate:
            fastpath.remember_launch(x, out, xv, ov, launch, ctx)
    return delivered(xv.kind, result)


def _exported_view(xv: View, result: Any) -> View:
    """The view of a JAX output we allocated (not yet an array): row-major, transposed."""
    m, n = xv.n, xv.m
    return xv._replace(obj=result, ptr=result.alloc.ptr, m=m, n=n, ld=n, bs=m * n, keep=None)


def _host_transpose(
    xv: View, out: Any, given: streams.Explicit | None, config: Any, conjugate: bool
) -> Any:
    """NumPy in, NumPy out: through the GPU, synchronously."""
    if out is not None:
        ov = view(out, "out")
        check_output(xv, ov)
    if xv.size == 0:
        return out if out is not None else np.empty(transposed_shape(xv), xv.dtype)
    state, ctx, handle = host_target(given)
    host = np.ascontiguousarray(xv.obj)
    m, n = xv.m, xv.n

    def prepare(src: int, dst: int) -> Callable[[], None]:
        dx = xv._replace(kind="device", ptr=src, ld=n, bs=m * n, device=state.ordinal)
        do = dx._replace(ptr=dst, m=n, n=m, ld=m)
        launch = dispatch.launch_for(dx, do, config, conjugate, state, handle, ctx)
        return lambda: launch(src, dst, handle)

    return through_device(host, transposed_shape(xv), out, ctx, handle, prepare)

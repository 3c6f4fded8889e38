"""transpose_(): an (M, N) or (B, M, N) array transposed in its own memory, handed back as
the (N, M) or (B, N, M) array over that same memory.

The passes are plans/inplace.py's, prepared by dispatch/inplace.py and run here on the
caller's stream. Besides x, a call needs at most PERMUTE's table (4 bytes a cycle, or 12 a
piece; uploaded once per device and shape and kept for the process: a captured CUDA graph may
launch with it) and a scratch of at most kernels/inplace.SCRATCH_BYTES or one row
(stream-ordered, freed on the stream after the passes): the long rows SHUFFLE gathers, the
first rows of PERMUTE's pieces. Both are had before any pass runs, so a call that cannot get
them raises with x untouched.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..dispatch import inplace as programs
from ..errors import InputTypeError, LayoutError
from ..kernels.inplace import ARG_FORMAT, ARG_NAMES
from ..kinds.inplace import InplaceParams
from ..runtime import driver as _driver, streams
from ..runtime.arrays import View, view
from .common import call_target, keeping_context

# PERMUTE's tables on the device: (context, m, n, kernel, entries) -> the uploaded table.
# Never freed: a CUDA graph captured with one launches with it for as long as the graph lives.
_TABLES: dict[tuple[object, ...], _driver.Allocation] = {}
_TABLES_LOCK = threading.Lock()
_ROW, _ROWS_PER = ARG_NAMES.index("row"), ARG_NAMES.index("rows_per")
_POINTERS = struct.Struct("<QQ")


def transpose_(
    x: Any,
    *,
    conjugate: bool = False,
    stream: Any = None,
    params: InplaceParams | None = None,
) -> Any:
    """Transpose x, a row-major contiguous (M, N) or (B, M, N) array, in its own memory;
    returns the (N, M) or (B, N, M) array over that memory (a view of x's storage: PyTorch
    `x.view`, CuPy and pycuda `reshape`). x itself then holds the transposed bytes under its
    old shape: use what is returned. `conjugate=True` conjugates complex64/complex128 as it
    transposes. Runs on the caller's current stream for x's library, or `stream`. NumPy arrays
    go through the GPU; JAX arrays are immutable and are refused (use transpose())."""
    if type(x).__module__.split(".", 1)[0] in ("jax", "jaxlib"):
        raise InputTypeError(
            "JAX arrays are immutable, so transpose_() cannot write into x; use "
            "autotranspose.transpose(x), which returns a new array (under jax.jit with x "
            "donated, XLA may reuse x's memory)"
        )
    if isinstance(x, np.ndarray) and not (x.flags.c_contiguous and x.flags.writeable):
        raise LayoutError(
            "transpose_() writes x's own memory, and this NumPy array is "
            + ("read-only" if x.flags.c_contiguous else "not C-contiguous")
            + "; pass a writeable C-contiguous array (np.ascontiguousarray(x), x.copy()) "
            "or use transpose(x)"
        )
    if type(x).__module__.split(".", 1)[0] == "torch" and (x.is_conj() or x.is_neg()):
        raise LayoutError(
            "x is a lazily conjugated or negated PyTorch view: its memory holds other values "
            "than it shows, so transpose_() cannot transpose it in place; resolve it first "
            "(x = x.resolve_conj().resolve_neg()) or use transpose(x)"
        )
    given = None if stream is None else streams.explicit(stream)
    xv = view(x, "x", given.handle if given is not None else None)
    if params is not None and not isinstance(params, InplaceParams):
        raise InputTypeError(
            f"params must be an autotranspose InplaceParams, got {type(params).__name__}"
        )
    check_contiguous(xv)
    if conjugate:
        xv.et.check_conjugable()
    if xv.kind == "torch":
        check_no_grad(x)
    shape = (*xv.shape[:-2], xv.n, xv.m)
    if xv.kind == "numpy":
        return _host(x, xv, shape, conjugate, stream)
    if xv.size and (conjugate or min(xv.m, xv.n) > 1):
        keeping_context(_on_device, xv, given, conjugate, params)
    return reshaped(x, xv.kind, shape)


def check_contiguous(xv: View) -> None:
    """Only a row-major contiguous array holds its transpose in the same bytes."""
    if xv.size and (xv.ld != xv.n or (xv.batch > 1 and xv.bs != xv.m * xv.n)):
        raise LayoutError(
            f"transpose_() needs a row-major contiguous array; x of shape {xv.shape} has row "
            f"pitch {xv.ld} and batch stride {xv.bs} elements. Make it contiguous first "
            "(.contiguous() / ascontiguousarray), or use transpose(x), which takes any layout"
        )


def check_no_grad(x: Any) -> None:
    """A tensor autograd tracks cannot be overwritten behind its back."""
    import torch

    if x.requires_grad and torch.is_grad_enabled():
        raise InputTypeError(
            "transpose_() writes x in place, and x requires grad: autograd cannot record an "
            "in-place transpose. Use autotranspose.transpose(x) (differentiable), or call "
            "under torch.no_grad() / on x.detach()"
        )


def reshaped(x: Any, kind: str, shape: tuple[int, ...]) -> Any:
    """x's memory as an array of `shape`, in x's own kind."""
    if kind == "torch":
        return x.view(shape)
    if hasattr(x, "reshape"):  # CuPy, pycuda, Numba: a view of a contiguous array
        return x.reshape(*shape)
    return _Reshaped(x, shape)


class _Reshaped:
    """An `__cuda_array_interface__` object's memory under another shape (it keeps x)."""

    def __init__(self, base: Any, shape: tuple[int, ...]) -> None:
        self.base = base
        cai = dict(base.__cuda_array_interface__)
        cai["shape"] = tuple(shape)
        cai["strides"] = None
        self.__cuda_array_interface__ = cai


def _host(x: np.ndarray, xv: View, shape: tuple[int, ...], conjugate: bool, stream: Any) -> Any:
    """NumPy: through the GPU (transpose()), the result copied back over x's memory."""
    from .transpose import transpose

    done = transpose(x, conjugate=conjugate, stream=stream)
    flat = x.reshape(-1)  # contiguous: a view
    flat[...] = np.ascontiguousarray(done).reshape(-1)
    return x.reshape(shape)


def _on_device(
    xv: View, given: streams.Explicit | None, conjugate: bool, params: InplaceParams | None
) -> None:
    state, ctx, handle = call_target(xv, given)
    prog = programs.program(state, xv.batch, xv.m, xv.n, xv.et.size, conjugate, params)
    run(prog, xv.ptr, ctx, handle)


def run(
    prog: programs.InplaceProgram,
    ptr: int,
    ctx: int,
    handle: int | None,
    mark: Callable[[int], None] | None = None,
) -> None:
    """Queue `prog`'s passes on matrix memory `ptr` in `ctx` on stream `handle`: the tables
    and the scratch first (raising before any pass), then the passes in order. `mark(k)`, if
    given, is called before pass k and after the last (k = len(steps)): `bench --inplace`
    records its events there to time each pass."""
    tables = [_table(s, ctx, handle) if s.table_key is not None else 0 for s in prog.steps]
    scratch = _driver.mem_alloc_async(prog.scratch_bytes, handle, ctx) if prog.scratch_bytes else 0
    try:
        for k, (step, table) in enumerate(zip(prog.steps, tables, strict=True)):
            if mark is not None:
                mark(k)
            aux = step.how.aux
            if aux == "rows":
                _rows(step, ptr, scratch, ctx, handle)
            elif aux == "leaders":
                step.launch.run(ptr, table, handle, ctx)
            elif aux == "scratch":
                if table:  # PERMUTE's pieces: their table at the scratch's start
                    nbytes = step.how.table.nbytes
                    _driver.memcpy_dtod_async(scratch, table, nbytes, handle, ctx)
                step.launch.run(ptr, scratch, handle, ctx)
            else:
                step.launch.run(ptr, 0, handle, ctx)
        if mark is not None:
            mark(len(prog.steps))
    finally:
        if scratch:
            _driver.mem_free_async(scratch, handle, ctx)


def _table(step: programs.InplaceStep, ctx: int, handle: int | None) -> int:
    """A step's table on the device, uploaded on its first call in `ctx`."""
    key = (ctx, *step.table_key)
    found = _TABLES.get(key)
    if found is not None:
        return found.ptr
    m, n = step.table_key[0], step.table_key[1]
    if _driver.is_capturing(handle):
        raise InputTypeError(
            f"the first in-place transpose of a {m}x{n} matrix uploads a table of its row "
            "cycles, which cannot happen while a CUDA graph is being captured; call "
            "transpose_() once on an array of this shape before capturing (a warm-up call)"
        )
    table = np.ascontiguousarray(step.how.table, dtype=np.uint32)
    with _TABLES_LOCK:
        found = _TABLES.get(key)
        if found is None:
            found = _driver.Allocation(table.nbytes, ctx)
            with _driver.on_context(ctx):
                _driver.memcpy_htod(found.ptr, table.ctypes.data, table.nbytes)
            _TABLES[key] = found
    return found.ptr


def _rows(step: programs.InplaceStep, ptr: int, scratch: int, ctx: int, handle: int | None) -> None:
    """A SHUFFLE of rows longer than shared memory: groups of consecutive rows copied to the
    scratch, each then gathered back from it by the whole grid."""
    how = step.how
    launch, row_bytes = step.launch, how.args["n"] * step.how.spec.elem_bytes
    values = list(launch.scalars)
    for first in range(0, how.rows, how.rows_per):
        count = min(how.rows_per, how.rows - first)
        start = ptr + first * row_bytes
        _driver.memcpy_dtod_async(scratch, start, count * row_bytes, handle, ctx)
        values[_ROW], values[_ROWS_PER] = first, count
        params = _POINTERS.pack(ptr, scratch) + struct.pack(ARG_FORMAT, *values)
        with _driver.on_context(ctx):
            _driver.launch(launch.prepared(ctx).args, handle, params)

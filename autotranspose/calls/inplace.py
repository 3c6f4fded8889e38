"""transpose_(): an (M, N) or (B, M, N) array transposed in its own memory, handed back as
the (N, M) or (B, N, M) array over that same memory.

The passes are plans/inplace.py's, prepared by dispatch/inplace.py and queued here on the
caller's stream (runtime/inplace.py's `queue`, or its `native` program on the fast path). Besides x, a call needs at most PERMUTE's table (4 bytes a cycle, or 12 a
piece; uploaded once per device and shape and kept for the process: a captured CUDA graph may
launch with it) and a scratch of at most kernels/inplace.SCRATCH_BYTES or one row
(kept per device and stream, grown as needed, freed by clear_caches(); under CUDA graph
capture the graph's own, stream-ordered): the long rows SHUFFLE gathers, the first rows of
PERMUTE's pieces. Both are had before any pass runs, so a call that cannot get them raises
with x untouched. A PyTorch or CuPy signature called before runs from `_HITS`: its passes as
one `_driver.Program`, one native call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..dispatch import caches, inplace as programs, lookup
from ..dispatch.lru import LRU
from ..errors import DeviceError, InputTypeError, LayoutError
from ..kinds.inplace import InplaceParams
from ..runtime import driver as _driver, inplace as _inplace, streams
from ..runtime.arrays import View, view
from .common import call_target, keeping_context

# PERMUTE's tables on the device: (context, m, n, kernel, entries) -> the uploaded table.
# Never freed: a CUDA graph captured with one launches with it for as long as the graph lives.
_TABLES: dict[tuple[object, ...], _driver.Allocation] = {}
_TABLES_LOCK = threading.Lock()
# The scratch per (context, stream, thread for the per-thread stream), and those outgrown
# (work queued before may still use them): freed by clear_caches()
_SCRATCH: dict[tuple[int, int | None, int], _driver.Allocation] = {}
_RETIRED: list[_driver.Allocation] = []
_SCRATCH_LOCK = threading.Lock()
_PER_THREAD = 2  # CU_STREAM_PER_THREAD


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
    fast = _FAST.get(type(x))
    if fast is not None and stream is None and params is None:
        done = fast(x, conjugate)
        if done is not None:
            return done
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
    generation = lookup.generation  # before the choice: a result recorded meanwhile moves it
    chosen, settled = params is None, True
    if chosen:  # lookup's, or for a class nobody tuned the first call's winner on x itself
        race = programs.Race(
            lambda prog: run(prog, xv.ptr, ctx, handle),
            handle,
            ctx,
            xv.size * xv.et.size,
            xv.et.name,
        )
        params, settled = programs.choose(state, xv.batch, xv.m, xv.n, xv.et.size, conjugate, race)
    prog = programs.program(state, xv.batch, xv.m, xv.n, xv.et.size, conjugate, params)
    run(prog, xv.ptr, ctx, handle)
    if settled and chosen and given is None and xv.kind in _KEYS and xv.device is not None:
        _remember(xv, ctx, prog, conjugate, generation)


# The fast path: a signature called before (the array's own shape, strides, dtype, device,
# pointer alignment and conjugation, read from its attributes) maps to its program, whose
# launches run as one `_driver.Program` per scratch: a dict hit and one native call.
@dataclass
class _Hit:
    ordinal: int
    ctx: int
    prog: _inplace.InplaceProgram
    tables: list[int]
    shape: tuple[int, ...]
    generation: int  # lookup's when it was chosen: a tuning run or an import moves it
    runs: dict[int, _driver.Program] = field(default_factory=dict)  # by scratch pointer


_HITS: LRU[tuple[Any, ...], _Hit] = LRU(caches.HITS_LIMIT)
_RUNS_PER_HIT = 8  # streams whose scratch a signature keeps a ready program for


def _torch_key(x: Any, px: int, conjugate: bool) -> tuple[Any, ...]:
    return ("torch", x.shape, x.stride(), x.dtype, x.get_device(), px & 15, conjugate)


def _cupy_key(x: Any, px: int, conjugate: bool) -> tuple[Any, ...]:
    return ("cupy", x.shape, x.strides, x.dtype, x.data.device_id, px & 15, conjugate)


_KEYS: dict[str, Callable[[Any, int, bool], tuple[Any, ...]]] = {
    "torch": _torch_key,
    "cupy": _cupy_key,
}


def _fast_torch(x: Any, conjugate: bool) -> Any:
    px = x.data_ptr()
    hit = _HITS.get(_torch_key(x, px, conjugate))
    if hit is None or hit.generation != lookup.generation:
        return None  # chosen again on the full path
    if x.requires_grad or x.is_conj() or x.is_neg():
        return None  # the full path checks (and refuses) these
    if not _go(hit, px, streams.torch_current(hit.ordinal)):
        return None
    return x.view(hit.shape)


def _fast_cupy(x: Any, conjugate: bool) -> Any:
    px = x.data.ptr
    hit = _HITS.get(_cupy_key(x, px, conjugate))
    if hit is None or hit.generation != lookup.generation:
        return None  # chosen again on the full path
    if not _go(hit, px, streams.cupy_current(hit.ordinal)):
        return None
    return x.reshape(*hit.shape)


_FAST_BY_KIND = {"torch": _fast_torch, "cupy": _fast_cupy}
_FAST: dict[type, Callable[[Any, bool], Any]] = {}


def _remember(
    xv: View, ctx: int, prog: _inplace.InplaceProgram, conjugate: bool, generation: int
) -> None:
    """After a validated call of a torch or CuPy array on its library's current stream: the
    next call of its signature runs its program straight away."""
    x = xv.obj
    if xv.kind == "torch" and (x.requires_grad or x.is_conj() or x.is_neg()):
        return
    tables = [_TABLES[(ctx, *s.table_key)].ptr if s.table_key else 0 for s in prog.steps]
    shape = (*xv.shape[:-2], xv.n, xv.m)
    hit = _Hit(xv.device, ctx, prog, tables, shape, generation)
    _HITS.keep(_KEYS[xv.kind](x, xv.ptr, conjugate), hit)
    _FAST[type(x)] = _FAST_BY_KIND[xv.kind]


def _go(hit: _Hit, ptr: int, handle: int) -> bool:
    """Run `hit`'s program on matrix `ptr` on stream `handle`; False (nothing queued) under
    CUDA graph capture of a program with scratch: the full path allocates the graph's own."""
    scratch = 0
    if hit.prog.scratch_bytes:
        if _driver.is_capturing(handle):
            return False
        scratch = scratch_for(hit.ctx, handle, hit.prog.scratch_bytes)
    program = hit.runs.get(scratch)
    if program is None:
        if len(hit.runs) >= _RUNS_PER_HIT:
            hit.runs.clear()
        program = hit.runs[scratch] = _inplace.native(hit.prog, hit.tables, hit.ctx, scratch)
    program.run(ptr, 0, handle)
    return True


def _clear() -> None:
    """clear_caches(): forget the signatures and free the scratch (after the work queued
    on it: a free waits for the device)."""
    _HITS.clear()
    with _SCRATCH_LOCK:
        held = [*_SCRATCH.values(), *_RETIRED]
        _SCRATCH.clear()
        _RETIRED.clear()
    for alloc in held:
        try:
            _driver.synchronize(alloc.ctx)
            alloc.free()
        except DeviceError:  # its context is gone (destroyed), and its memory with it
            alloc.disown()


caches.also_clear(_clear)


def run(
    prog: _inplace.InplaceProgram,
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
    capturing = bool(prog.scratch_bytes) and _driver.is_capturing(handle)
    if not prog.scratch_bytes:
        scratch = 0
    elif capturing:  # a graph's own allocation node: the cached scratch is not the graph's
        scratch = _driver.mem_alloc_async(prog.scratch_bytes, handle, ctx)
    else:
        scratch = scratch_for(ctx, handle, prog.scratch_bytes)
    try:
        _inplace.queue(prog, ptr, ctx, handle, tables, scratch, mark)
    finally:
        if capturing:
            _driver.mem_free_async(scratch, handle, ctx)


def scratch_for(ctx: int, handle: int | None, nbytes: int) -> int:
    """The scratch of calls on stream `handle` in `ctx`, of at least `nbytes`: kept per
    device and stream (work on one stream runs in order, so its calls share one), grown as
    needed and freed by clear_caches(); no allocation, free or synchronisation per call. The
    per-thread default stream is a stream per thread, so its scratch is the thread's."""
    key = (ctx, handle, threading.get_ident() if handle == _PER_THREAD else 0)
    found = _SCRATCH.get(key)
    if found is not None and found.nbytes >= nbytes:
        return found.ptr
    with _SCRATCH_LOCK:
        found = _SCRATCH.get(key)
        if found is None or found.nbytes < nbytes:
            if found is not None:  # work queued before may still use it: freed at clear
                _RETIRED.append(found)
            found = _SCRATCH[key] = _driver.Allocation(nbytes, ctx)
    return found.ptr


def _table(step: _inplace.InplaceStep, ctx: int, handle: int | None) -> int:
    """A step's table on the device, uploaded on its first call in `ctx`."""
    key = (ctx, *step.table_key)
    found = _TABLES.get(key)
    if found is not None:
        return found.ptr
    m, n = step.table_key[0], step.table_key[1]
    if _driver.is_capturing(handle):
        raise InputTypeError(
            f"the first in-place transpose of a {m}x{n} matrix uploads a table of its rows "
            "(offsets or cycles), which cannot happen while a CUDA graph is being captured; call "
            "transpose_() once on an array of this shape before capturing (a warm-up call)"
        )
    with _TABLES_LOCK:
        found = _TABLES.get(key)
        if found is None:
            found = _TABLES[key] = _inplace.upload_table(step, ctx)
    return found.ptr

"""The peers `autotranspose bench` times against ours, each as launch(src, dst, stream) on the
bench's raw device buffers, or None and a note saying why it cannot run: the device-to-device
copy (the ceiling), cuBLAS geam and CuPy (through CuPy), PyTorch, torch.compile's generated
kernel, cuTENSOR (through cupyx) and the seed documents' kernel; and the small calls whose
host cost `bench` reports (ours, CuPy's and PyTorch's own).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..plans.dtypes import element_type

PEERS = ("copy", "autotranspose", "geam", "cupy", "torch", "seed")
GEAM_DTYPES = ("float32", "float64", "complex64", "complex128")


class _Raw:
    """A device buffer described by `__cuda_array_interface__`, for peers to wrap."""

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (ptr, False),
            "strides": None,
            "version": 3,
        }


def numpy_typestr(dtype: str) -> str | None:
    """NumPy's typestr for `dtype`, or None where NumPy has no type for it: bfloat16 and the
    float8 types (or only an opaque 'V' one, once ml_dtypes is imported)."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return None
    return None if dt.kind == "V" else dt.str


# torch.as_tensor reads a __cuda_array_interface__ typestr through NumPy, so a type NumPy
# lacks goes over as the integer of its size and the tensor is viewed as the type (.view:
# same element size, no copy).
_TORCH_PROXY = {1: "|u1", 2: "<i2", 4: "<i4", 8: "<i8"}


def torch_wrapping(dtype: str) -> tuple[str, str]:
    """(typestr handed to torch.as_tensor, name of the torch dtype the tensor is viewed as)
    for the PyTorch peer on `dtype` arrays: NumPy's own typestr where it has one (bool is
    '|b1', which torch reads), else the same-size integer's (bfloat16: '<i2')."""
    et = element_type(dtype)
    typestr = numpy_typestr(et.name)
    if typestr is None:
        typestr = _TORCH_PROXY[et.size]
    return typestr, et.name


def _torch_wrapper(
    torch: Any, dtype: str
) -> tuple[Callable[[int, tuple[int, ...]], Any] | None, str]:
    """wrap(ptr, shape) making a PyTorch tensor of `dtype` on that memory, or None and why."""
    typestr, name = torch_wrapping(dtype)
    as_type = getattr(torch, name, None)
    if not isinstance(as_type, torch.dtype):
        return None, f"PyTorch {torch.__version__} has no {name}"

    def wrap(ptr: int, shape: tuple[int, ...]) -> Any:
        return torch.as_tensor(_Raw(ptr, shape, typestr), device="cuda").view(as_type)

    return wrap, ""


def peer_mask(dtype: str) -> int:
    """The fill mask (`measure.Bench.refill`) for checking a peer that moves elements as
    values, not bytes: bytes 0 or 1 for bool, finite floats for the rest."""
    from ..tuner.measure import Bench

    return Bench.BOOL_MASK if element_type(dtype).name == "bool" else Bench.FINITE_MASK


def _wrap_cupy(ptr: int, shape: tuple[int, ...], dtype: str) -> Any:
    import cupy

    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    mem = cupy.cuda.UnownedMemory(ptr, nbytes, None)
    return cupy.ndarray(shape, dtype=dtype, memptr=cupy.cuda.MemoryPointer(mem, 0))


def transpose_peers(bench: Any, dtype: str, config: Any) -> dict[str, tuple[Callable | None, str]]:
    """peer -> (launch(src, dst, stream) or None, note)."""
    from ..runtime.launch import contiguous_launch

    b, m, n = bench.batch, bench.m, bench.n
    s = element_type(dtype).size
    shp_in = (b, m, n) if b > 1 else (m, n)
    shp_out = (b, n, m) if b > 1 else (n, m)
    peers: dict[str, tuple[Callable | None, str]] = {}
    drv = bench.drv
    peers["copy"] = (lambda src, dst, _s: drv.memcpy_dtod(dst, src, bench.nbytes), "cuMemcpyDtoD")
    if config is None:  # transpose() moves one column or row a matrix as a copy
        from ..dispatch.transpose import copy_launch

        src, dst = bench.pointers(0)
        launch = copy_launch(bench.state, s, b, max(m, n), m * n, m * n, src, dst)
        peers["autotranspose"] = (launch, "row copy")
    else:
        launch = contiguous_launch(bench.state, config, b, m, n)
        peers["autotranspose"] = (launch, config.key)
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is None or numpy_typestr(dtype) is None:
        why = "CuPy not installed" if cupy is None else f"CuPy has no {dtype} type"
        peers["cupy"] = peers["geam"] = (None, why)
    else:
        views: dict[tuple[int, int], tuple[Any, Any]] = {}

        def cupy_views(src: int, dst: int) -> tuple[Any, Any]:
            v = views.get((src, dst))
            if v is None:
                v = views[(src, dst)] = (
                    _wrap_cupy(src, shp_in, dtype),
                    _wrap_cupy(dst, shp_out, dtype),
                )
            return v

        def cupy_t(src: int, dst: int, _s: Any) -> None:
            a, o = cupy_views(src, dst)
            cupy.copyto(o, a.swapaxes(-1, -2))

        peers["cupy"] = (cupy_t, "copyto(out, a.T)")
        if dtype in GEAM_DTYPES and b == 1:
            from cupy import cublas

            def geam(src: int, dst: int, _s: Any) -> None:
                a, o = cupy_views(src, dst)
                cublas.geam("T", "N", 1, a, 0, o, out=o)

            peers["geam"] = (geam, "cupy.cublas.geam")
        else:
            peers["geam"] = (None, "geam: float32/64 and complex 2-D only")
    try:
        import torch

        wrap, why = _torch_wrapper(torch, dtype)
        tviews: dict[tuple[int, int], tuple[Any, Any]] = {}

        def torch_t(src: int, dst: int, _s: Any) -> None:
            v = tviews.get((src, dst))
            if v is None:
                assert wrap is not None
                v = tviews[(src, dst)] = (wrap(src, shp_in), wrap(dst, shp_out))
            v[1].copy_(v[0].transpose(-1, -2))

        peers["torch"] = (torch_t, "out.copy_(a.transpose(-1, -2))") if wrap else (None, why)
    except ImportError:
        peers["torch"] = (None, "PyTorch not installed")
    seed = seed_kernel(bench.state, s)
    grid = (-(-n // 32), -(-m // 32), 1)
    if b == 1 and grid[1] <= 65535:
        peers["seed"] = (
            lambda src, dst, _s: seed.call(grid, (32, 8, 1), "PPqq", src, dst, m, n),
            "32x32 tile, +1 pad, 32x8 threads",
        )
    else:
        peers["seed"] = (None, "the seed kernel is 2-D only")
    return peers


_seed_kernels: dict[tuple[str, int], Any] = {}


def seed_kernel(state: Any, elem_bytes: int) -> Any:
    """The seed documents' kernel for `elem_bytes`, compiled for `state`'s architecture."""
    key = (state.arch, elem_bytes)
    if key not in _seed_kernels:
        from ..kernels.codegen import render_seed
        from ..runtime.compiler import load_source

        sizes = (1, 2, 4, 8, 16)
        loaded = load_source(state.arch, render_seed(), [f"seed_transpose_s{s}" for s in sizes])
        for s in sizes:
            _seed_kernels[(state.arch, s)] = loaded[f"seed_transpose_s{s}"]
    return _seed_kernels[key]


@dataclass(frozen=True)
class ServedSteps:
    """permute()'s steps for a case as a peer's launch(src, dst, stream), run on the default
    stream in `ctx`; the plan as run and its steps are what `bench --ceiling` takes the
    pattern of."""

    steps: tuple[Any, ...]
    ctx: int
    plan: Any = None

    def __call__(self, src: int, dst: int, _stream: Any) -> None:
        for step in self.steps:
            step.run(src, dst, 0, self.ctx)


# A permute's peers (`bench --random-permute`, `bench --shapes AxBxCxD --axes ...`): the copy
# of the same bytes, CuPy, PyTorch, cuTENSOR and torch.compile's kernel.
PERMUTE_PEERS = ("copy", "autotranspose", "cupy", "torch", "cutensor", "compile")


# cuTENSOR computes (D = 1*A + 0*C): it moves floats. Each size is timed as the float type
# of that size (bit patterns kept finite by the check's fill); 1-byte elements it has none for.
_CUTENSOR_AS = {2: "float16", 4: "float32", 8: "float64", 16: "complex128"}


def permute_peers(
    bench: Any, shape: tuple[int, ...], axes: tuple[int, ...], dtype: str
) -> dict[str, tuple[Callable | None, str]]:
    """peer -> (launch(src, dst, stream) or None, note), for a permute case."""
    from ..dispatch.permute import served
    from ..plans.layout import contiguous_strides
    from ..plans.permute import plan_permute

    e = element_type(dtype).size
    out_shape = tuple(shape[a] for a in axes)
    drv, state = bench.drv, bench.state
    peers: dict[str, tuple[Callable | None, str]] = {}
    peers["copy"] = (lambda src, dst, _s: drv.memcpy_dtod(dst, src, bench.nbytes), "cuMemcpyDtoD")
    src0, dst0 = bench.pointers(0)  # every set is 256-byte aligned: one plan serves them all
    plan = plan_permute(shape, axes, e, contiguous_strides(shape), None, in_ptr=src0, out_ptr=dst0)
    # what permute() serves: a plan with alternatives has its first call's choice measured here
    plan, steps, _ = served(plan, state, src0, dst0, 0, state.ctx)

    ours = ServedSteps(steps, state.ctx, plan)
    p = plan.passes[0] if plan.passes else None
    what = "nothing" if p is None else p.describe().split(" (")[0]
    peers["autotranspose"] = (ours, f"{plan.case}: {what}, {plan.launches} launch(es)")
    try:
        import cupy

        def cupy_views(src: int, dst: int, as_dtype: str = dtype) -> tuple[Any, Any]:
            return _wrap_cupy(src, shape, as_dtype), _wrap_cupy(dst, out_shape, as_dtype)

        def cupy_p(src: int, dst: int, _s: Any) -> None:
            a, o = cupy_views(src, dst)
            cupy.copyto(o, a.transpose(axes))

        if numpy_typestr(dtype) is None:
            peers["cupy"] = (None, f"CuPy has no {dtype} type")
        else:
            peers["cupy"] = (cupy_p, "copyto(out, a.transpose(axes)): ascontiguousarray's kernel")
        peers["cutensor"] = _cutensor_peer(cupy_views, axes, e)
    except ImportError:
        peers["cupy"] = (None, "CuPy not installed")
        peers["cutensor"] = (None, "CuPy not installed")
    try:
        import torch

        wrap, why = _torch_wrapper(torch, dtype)

        def torch_p(src: int, dst: int, _s: Any) -> None:
            assert wrap is not None
            wrap(dst, out_shape).copy_(wrap(src, shape).permute(axes))

        note = "out.copy_(a.permute(axes)): .contiguous()'s kernel"
        peers["torch"] = (torch_p, note) if wrap else (None, why)
        peers["compile"] = compile_peer(torch, shape, axes, dtype)
    except ImportError:
        peers["torch"] = (None, "PyTorch not installed")
        peers["compile"] = (None, "PyTorch not installed")
    return peers


# Inductor generates no kernels for complex tensors (it falls back to aten's copy, or fails
# in Triton's type table): the compiled peer moves them as pairs of floats of half the size,
# a trailing axis of 2 that stays innermost, the same bytes to the same places.
_COMPILE_AS_PAIRS = {"complex64": "float32", "complex128": "float64"}


def compile_peer(
    torch: Any, shape: tuple[int, ...], axes: tuple[int, ...], dtype: str
) -> tuple[Callable | None, str]:
    """torch.compile's generated kernel for this permute, as launch(src, dst, stream), or None
    and why not. `out.copy_(x.permute(axes))` is compiled once per case (fullgraph, static
    shapes) after dynamo's caches are reset: every case's function shares one code object,
    and past dynamo's recompile limit it would run eagerly, not the compiled kernel, without
    a word. Compilation itself happens on the first call (the check), where a failure is a
    note like any peer's."""
    compile_fn = getattr(torch, "compile", None)
    if compile_fn is None:
        return None, f"PyTorch {torch.__version__} has no torch.compile"
    as_dtype = _COMPILE_AS_PAIRS.get(element_type(dtype).name, dtype)
    pairs = as_dtype != dtype
    wrap, why = _torch_wrapper(torch, as_dtype)
    if wrap is None:
        return None, why
    out_shape = tuple(shape[a] for a in axes)
    if pairs:
        shape, out_shape, axes = (*shape, 2), (*out_shape, 2), (*axes, len(axes))
    order = tuple(axes)
    dynamo = getattr(torch, "_dynamo", None)
    if dynamo is not None and hasattr(dynamo, "reset"):
        dynamo.reset()

    def move(x: Any, out: Any) -> None:
        out.copy_(x.permute(order))

    try:
        compiled = compile_fn(move, fullgraph=True, dynamic=False)
    except Exception as exc:  # a build without a compiler backend, say
        return None, f"torch.compile: {type(exc).__name__}: {exc}"[:200]
    views: dict[tuple[int, int], tuple[Any, Any]] = {}

    def run(src: int, dst: int, _s: Any) -> None:
        v = views.get((src, dst))
        if v is None:  # wrapped once per buffer pair: the host's share stays the compiled call's
            assert wrap is not None
            v = views[(src, dst)] = (wrap(src, shape), wrap(dst, out_shape))
        compiled(*v)

    note = "torch.compile(out.copy_(a.permute(axes)))"
    return run, f"{note} as {as_dtype} pairs" if pairs else note


def _cutensor_peer(
    cupy_views: Callable, axes: tuple[int, ...], e: int
) -> tuple[Callable | None, str]:
    """cuTENSOR's permutation through CuPy (D = 1*A[modes in] + 0*C[modes out], C = D = out),
    or None and why not."""
    try:
        from cupyx import cutensor
    except ImportError as exc:
        first = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        return None, f"cupyx.cutensor not importable ({first})"
    as_dtype = _CUTENSOR_AS.get(e)
    if as_dtype is None:
        return None, "cuTENSOR has no 1-byte type"
    modes_in, modes_out = tuple(range(len(axes))), tuple(axes)

    def run(src: int, dst: int, _s: Any) -> None:
        a, o = cupy_views(src, dst, as_dtype)
        cutensor.elementwise_binary(1, a, modes_in, 0, o, modes_out, out=o)

    return run, f"cupyx.cutensor.elementwise_binary as {as_dtype}"


HOST_COST_CASES = (
    ("autotranspose", "gpuarray"),
    ("autotranspose", "cupy"),
    ("autotranspose", "torch"),
    ("own", "cupy"),
    ("own", "torch"),
)


def host_cost_calls(who: str, lib: str, shape: tuple[int, int]) -> tuple[Any, Any, Any] | None:
    """(call into out, call making a new output, synchronize) for one library, or None."""
    from ..calls.transpose import transpose

    a = np.random.default_rng().standard_normal(shape).astype(np.float32)
    try:
        if lib == "gpuarray":
            import pycuda.gpuarray as gpuarray

            from ..runtime import driver as _driver
            from ..runtime.compiler import device_state

            ctx = device_state(0).ctx

            def new_gpuarray(shp: tuple[int, ...]) -> Any:
                return gpuarray.GPUArray(shp, np.float32, gpudata=_driver.Allocation(a.nbytes, ctx))

            x, out = new_gpuarray(shape), new_gpuarray(shape[::-1])
            x.set(a)
            sync = lambda: _driver.synchronize(ctx)  # noqa: E731
        elif lib == "cupy":
            import cupy

            x, out = cupy.asarray(a), cupy.empty(shape[::-1], np.float32)
            sync = cupy.cuda.runtime.deviceSynchronize
        else:
            import torch

            x, out = torch.as_tensor(a, device="cuda"), torch.empty(shape[::-1], device="cuda")
            sync = torch.cuda.synchronize
    except ImportError:
        return None
    if who == "autotranspose":
        return (lambda: transpose(x, out)), (lambda: transpose(x)), sync
    if lib == "cupy":
        return (lambda: cupy.copyto(out, x.T)), (lambda: cupy.ascontiguousarray(x.T)), sync
    if lib == "torch":
        return (lambda: out.copy_(x.t())), (lambda: x.t().contiguous()), sync
    return None

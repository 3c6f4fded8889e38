"""`autotranspose bench`: every peer timed side by side, in one process, on the same buffers.

For each (shape, dtype) the device-to-device copy of the same bytes is the ceiling; the tuned
autotranspose kernel, cuBLAS geam (through CuPy), CuPy, PyTorch and the seed documents' kernel
are timed on the same rotating buffers with the same CUDA-event method, and reported as GB/s
(bytes read + written) and as a share of the copy. Peers that are not installed are skipped
with a note.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .dtypes import SUPPORTED_NAMES, element_type
from .errors import UnsupportedDtypeError
from .shapes import parse_shape

PEERS = ("copy", "autotranspose", "geam", "cupy", "torch", "seed")
GEAM_DTYPES = ("float32", "float64", "complex64", "complex128")


@dataclass(frozen=True)
class Row:
    """One peer on one (shape, dtype)."""

    shape: tuple[int, ...]  # (batch, m, n) for a transpose, x's shape for a permute
    dtype: str
    peer: str
    us: float | None
    gbps: float | None
    of_copy: float | None
    note: str = ""
    axes: tuple[int, ...] | None = None  # a permute case: x of `shape` permuted by `axes`


class _Raw:
    """A device buffer described by `__cuda_array_interface__`, for peers to wrap."""

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (ptr, False),
            "strides": None, "version": 3,
        }  # fmt: skip


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


def _torch_wrapper(torch: Any, dtype: str) -> tuple[Callable[[int, tuple[int, ...]], Any] | None, str]:
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
    from .measure import Bench

    return Bench.BOOL_MASK if element_type(dtype).name == "bool" else Bench.FINITE_MASK


def _wrap_cupy(ptr: int, shape: tuple[int, ...], dtype: str) -> Any:
    import cupy

    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    mem = cupy.cuda.UnownedMemory(ptr, nbytes, None)
    return cupy.ndarray(shape, dtype=dtype, memptr=cupy.cuda.MemoryPointer(mem, 0))


def _peer_launches(bench: Any, dtype: str, config: Any) -> dict[str, tuple[Callable | None, str]]:
    """peer -> (launch(src, dst, stream) or None, note)."""
    from .launch import contiguous_launch

    b, m, n = bench.batch, bench.m, bench.n
    s = element_type(dtype).size
    shp_in = (b, m, n) if b > 1 else (m, n)
    shp_out = (b, n, m) if b > 1 else (n, m)
    peers: dict[str, tuple[Callable | None, str]] = {}
    drv = bench.drv
    peers["copy"] = (lambda src, dst, _s: drv.memcpy_dtod(dst, src, bench.nbytes), "cuMemcpyDtoD")
    if config is None:  # transpose() moves one column or row a matrix as a copy
        from .launch import run_copy

        launch = run_copy(bench.state, s, b, m, n, m * n, m * n)
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
    seed = _seed_kernel(bench.state, s)
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


def _seed_kernel(state: Any, elem_bytes: int) -> Any:
    """The seed documents' kernel for `elem_bytes`, compiled for `state`'s architecture."""
    key = (state.arch, elem_bytes)
    if key not in _seed_kernels:
        from .codegen import render_seed
        from .compiler import load_source

        sizes = (1, 2, 4, 8, 16)
        loaded = load_source(state.arch, render_seed(), [f"seed_transpose_s{s}" for s in sizes])
        for s in sizes:
            _seed_kernels[(state.arch, s)] = loaded[f"seed_transpose_s{s}"]
    return _seed_kernels[key]


# --- random workloads (`bench --random N --seed S`) ---------------------------------------------
# The stated distribution: element size uniform over 1, 2, 4, 8, 16 bytes (then a dtype of that
# size); total bytes log-uniform in [32 MB, 1 GB]; a quarter each square, rectangular (aspect
# log-uniform in 1/16..16), skinny (a side uniform in 1..200, either orientation) and batched
# (batch log-uniform in 2..512, matrices square, rectangular or skinny); each side is a
# multiple of 64 half the time and any length (mostly odd) otherwise.
RANDOM_DTYPES: dict[int, tuple[str, ...]] = {
    1: ("int8", "uint8", "bool"), 2: ("float16", "int16", "uint16"), 4: ("float32", "int32"),
    8: ("float64", "complex64", "int64"), 16: ("complex128",),
}  # fmt: skip
RANDOM_BYTES = (32 << 20, 1 << 30)
RANDOM_KINDS = ("square", "rectangular", "skinny", "batched")


def draw_dtypes(names: Sequence[str]) -> tuple[str, ...]:
    """The element types a random draw may take (`bench --dtypes` with --random,
    --random-permute or --small), as canonical names, each once. A name that is not one of
    SUPPORTED_NAMES raises UnsupportedDtypeError naming the accepted ones: a draw must not
    reach a type no peer was written for (float128, say, which NumPy has)."""
    found: list[str] = []
    for name in names:
        try:
            canonical: str | None = element_type(name).name
        except UnsupportedDtypeError:
            canonical = None
        if canonical not in SUPPORTED_NAMES:
            raise UnsupportedDtypeError(
                f"{name!r:.40} is not a dtype the random cases can draw; accepted: "
                f"{', '.join(SUPPORTED_NAMES)}"
            )
        found.append(str(canonical))
    if not found:
        raise UnsupportedDtypeError(f"no dtype given; accepted: {', '.join(SUPPORTED_NAMES)}")
    return tuple(dict.fromkeys(found))


def dtype_pool(dtypes: Sequence[str] | None) -> dict[int, tuple[str, ...]]:
    """element size -> the dtypes a draw picks among: RANDOM_DTYPES when `dtypes` is None
    (so a seed draws what it always drew), else `dtypes` grouped by size. The draws pick a
    size uniformly, then a dtype of that size."""
    if dtypes is None:
        return RANDOM_DTYPES
    pool: dict[int, list[str]] = {}
    for name in draw_dtypes(dtypes):
        pool.setdefault(element_type(name).size, []).append(name)
    return {size: tuple(pool[size]) for size in sorted(pool)}


def random_cases(
    count: int, seed: int, dtypes: Sequence[str] | None = None
) -> list[tuple[tuple[int, int, int], str]]:
    """`count` (shape (batch, m, n), dtype) cases drawn from the stated distribution, of
    `dtypes` only where given; the same seed gives the same cases on any machine."""
    rng = np.random.default_rng(seed)
    pool = dtype_pool(dtypes)
    cases = []
    for _ in range(count):
        size = int(rng.choice(sorted(pool)))
        dtype = str(rng.choice(pool[size]))
        lo, hi = (np.log(v / size) for v in RANDOM_BYTES)
        elems = float(np.exp(rng.uniform(lo, hi)))
        kind = str(rng.choice(RANDOM_KINDS))
        batch = int(np.exp(rng.uniform(np.log(2), np.log(512)))) if kind == "batched" else 1
        per = elems / batch
        shape_kind = str(rng.choice(RANDOM_KINDS[:3])) if kind == "batched" else kind
        if shape_kind == "skinny":
            small = int(rng.integers(1, 201))
            m, n = small, max(1, round(per / small))
            if rng.random() < 0.5:
                m, n = n, m
        elif shape_kind == "square":
            m = n = _side(rng, per**0.5)
        else:
            aspect = float(np.exp(rng.uniform(-1, 1) * np.log(16)))
            m, n = _side(rng, (per * aspect) ** 0.5), _side(rng, (per / aspect) ** 0.5)
        if kind == "batched":  # rounding small sides to 64 can be far off: the batch absorbs it
            batch = max(1, round(elems / (m * n)))
        cases.append(((batch, int(m), int(n)), dtype))
    return cases


def _side(rng: np.random.Generator, x: float) -> int:
    """A side near `x`: a multiple of 64 half the time, any length otherwise."""
    if rng.random() < 0.5:
        return max(64, round(x / 64) * 64)
    return max(1, round(x) | 1 if rng.random() < 0.8 else round(x))  # mostly odd


# --- permutes (`bench --random-permute N --seed S`, `bench --shapes AxBxCxD --axes ...`) ----------
# The stated distribution: 3 to 6 dimensions (uniform); element size uniform over 1, 2, 4, 8,
# 16 bytes (then a dtype of that size); total bytes log-uniform in [32 MB, 1 GB], shared out
# over the sides at random (a side log-uniform share of the total); each side a multiple of 8
# half the time and any length otherwise; any permutation but the identity (a plain copy).
# Peers: the copy of the same bytes, CuPy, PyTorch, cuTENSOR and torch.compile's kernel.
PERMUTE_PEERS = ("copy", "autotranspose", "cupy", "torch", "cutensor", "compile")
PERMUTE_DIMS = (3, 6)
# cuTENSOR computes (D = 1*A + 0*C): it moves floats. Each size is timed as the float type
# of that size (bit patterns kept finite by the check's fill); 1-byte elements it has none for.
_CUTENSOR_AS = {2: "float16", 4: "float32", 8: "float64", 16: "complex128"}


def random_permute_cases(
    count: int, seed: int, dtypes: Sequence[str] | None = None
) -> list[tuple[tuple[int, ...], tuple[int, ...], str]]:
    """`count` (shape, axes, dtype) permute cases drawn from the stated distribution, of
    `dtypes` only where given; the same seed gives the same cases on any machine."""
    rng = np.random.default_rng([seed, 0x9E3])  # a stream of its own: not --random's cases
    pool = dtype_pool(dtypes)
    cases = []
    for _ in range(count):
        nd = int(rng.integers(PERMUTE_DIMS[0], PERMUTE_DIMS[1] + 1))
        size = int(rng.choice(sorted(pool)))
        dtype = str(rng.choice(pool[size]))
        lo, hi = (np.log(v / size) for v in RANDOM_BYTES)
        elems = float(np.exp(rng.uniform(lo, hi)))
        share = rng.dirichlet(np.full(nd, 1.5)) * np.log(elems)
        sides = [max(1, round(float(np.exp(v)))) for v in share]
        aligned = rng.random() < 0.5
        if aligned:
            sides = [max(8, round(v / 8) * 8) if v >= 6 else v for v in sides]
        big = int(np.argmax(sides))  # the largest side absorbs the rounding
        rest = int(np.prod([v for k, v in enumerate(sides) if k != big]))
        sides[big] = max(1, round(elems / rest))
        if aligned and sides[big] >= 8:
            sides[big] = round(sides[big] / 8) * 8
        axes = tuple(int(a) for a in rng.permutation(nd))
        while axes == tuple(range(nd)):
            axes = tuple(int(a) for a in rng.permutation(nd))
        cases.append((tuple(sides), axes, dtype))
    return cases


class _PermuteCheck:
    """Correctness of a permute peer on `bench`'s buffers: input set 0 and the output (with
    its guard region) read back and compared with np.transpose, bit for bit."""

    def __init__(self, bench: Any, shape: tuple[int, ...], axes: tuple[int, ...], dtype: str) -> None:
        self.bench, self.shape, self.axes, self.dtype = bench, shape, axes, dtype

    def __call__(self, fn: Callable, mask: int) -> str | None:
        b = self.bench
        drv = b.drv
        b.refill(mask)
        drv.memset_d8(int(b.dst), b.POISON, b.stride + b.GUARD_BYTES)
        src, dst = b.pointers(0)
        fn(src, dst, None)
        b.state.synchronize()
        x = np.empty((*self.shape, b.elem_bytes), np.uint8)  # elements as their bytes
        drv.memcpy_dtoh(x.ctypes.data, src, b.nbytes)
        got = np.empty(b.nbytes + b.GUARD_BYTES, np.uint8)
        drv.memcpy_dtoh(got.ctypes.data, dst, got.nbytes)
        want = np.transpose(x, (*self.axes, len(self.axes))).ravel()
        bad = int(np.count_nonzero(got[: b.nbytes] != want))
        if bad:
            return f"wrong output: {bad} of {b.nbytes} bytes differ from np.transpose"
        if np.any(got[b.nbytes :] != b.POISON):
            return "wrote past the end of the output (the guard region was overwritten)"
        return None


def _permute_launches(
    bench: Any, shape: tuple[int, ...], axes: tuple[int, ...], dtype: str
) -> dict[str, tuple[Callable | None, str]]:
    """peer -> (launch(src, dst, stream) or None, note), for a permute case."""
    from .permuter import served
    from .plan import contiguous_strides, plan_permute

    e = element_type(dtype).size
    out_shape = tuple(shape[a] for a in axes)
    drv, state = bench.drv, bench.state
    peers: dict[str, tuple[Callable | None, str]] = {}
    peers["copy"] = (lambda src, dst, _s: drv.memcpy_dtod(dst, src, bench.nbytes), "cuMemcpyDtoD")
    src0, dst0 = bench.pointers(0)  # every set is 256-byte aligned: one plan serves them all
    plan = plan_permute(shape, axes, e, contiguous_strides(shape), None, in_ptr=src0, out_ptr=dst0)
    # what permute() serves: a plan with alternatives has its first call's choice measured here
    plan, steps, _ = served(plan, state, src0, dst0, 0, state.ctx)

    def ours(src: int, dst: int, _s: Any) -> None:
        for step in steps:
            step.run(src, dst, 0, state.ctx)

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


def _cutensor_peer(cupy_views: Callable, axes: tuple[int, ...], e: int) -> tuple[Callable | None, str]:
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


def bench_permute_case(
    shape: tuple[int, ...],
    axes: tuple[int, ...],
    dtype: str,
    *,
    device: int = 0,
    peers: Sequence[str] = PERMUTE_PEERS,
    repeats: int = 7,
) -> list[Row]:
    """Time every peer on one permute (shape, axes, dtype) against the copy of the same
    bytes; each is checked against np.transpose first (a peer that fails is a note, not a
    time)."""
    from .compiler import activate
    from .measure import Bench

    state = activate(device)
    total = int(np.prod(shape))
    bench = Bench(state, element_type(dtype).size, (1, 1, total))
    check = _PermuteCheck(bench, shape, axes, dtype)
    rows: list[Row] = []

    def row(peer: str, t: float | None, note: str) -> Row:
        if t is None:
            return Row(shape, dtype, peer, None, None, None, note, axes)
        return Row(shape, dtype, peer, t * 1e6, bench.gbps(t), copy_s / t, note, axes)

    try:
        launches = _permute_launches(bench, shape, axes, dtype)
        copy_s = bench.copy_time(repeats=repeats)
        for peer in peers:
            fn, note = launches.get(peer, (None, "unknown peer"))
            if fn is None:
                rows.append(row(peer, None, note))
                continue
            mask = Bench.ALL_BITS if peer == "autotranspose" else peer_mask(dtype)
            try:
                problem = None if peer == "copy" else check(fn, mask)
            except Exception as exc:  # a peer that cannot take this case (cuTENSOR's limits)
                problem = f"{type(exc).__name__}: {exc}"[:200]
            if problem:
                rows.append(row(peer, None, f"{note}: {problem}"))
                continue
            rows.append(row(peer, copy_s if peer == "copy" else bench.time(fn, repeats=repeats), note))
    finally:
        bench.close()
    return rows


def summarize(rows: Sequence[Row]) -> dict[str, Any]:
    """The random run's summary: autotranspose's median, 10th percentile and minimum share of
    copy, and per peer how often it was faster, and more than 1% faster."""
    cases: dict[tuple[Any, ...], dict[str, float]] = {}
    for r in rows:
        if r.of_copy:
            cases.setdefault((r.shape, r.dtype, r.axes), {})[r.peer] = r.of_copy
    ours = [c["autotranspose"] for c in cases.values() if "autotranspose" in c]
    out: dict[str, Any] = {"cases": len(cases), "measured": len(ours)}
    if ours:
        out.update(median=float(np.median(ours)), p10=float(np.percentile(ours, 10)),
                   min=float(min(ours)))  # fmt: skip
        worst = min(cases.items(), key=lambda kv: kv[1].get("autotranspose", 9.0))
        (shape, dtype, axes), ratio = worst[0], worst[1]["autotranspose"]
        out["worst"] = f"{ratio * 100:.1f}% {_case_text(shape, axes)} {dtype}"
    for peer in _peers(rows):
        if peer in ("copy", "autotranspose"):
            continue
        both = [c for c in cases.values() if peer in c and "autotranspose" in c]
        out[f"{peer}_cases"] = len(both)
        out[f"{peer}_faster"] = sum(c[peer] > c["autotranspose"] for c in both)
        out[f"{peer}_faster_1pct"] = sum(c[peer] > 1.01 * c["autotranspose"] for c in both)
    return out


def _peers(rows: Sequence[Row]) -> list[str]:
    """PEERS, then any other peer the rows name (permute's cuTENSOR), in order."""
    return [*PEERS, *(p for p in dict.fromkeys(r.peer for r in rows) if p not in PEERS)]


def format_summary(summary: dict[str, Any]) -> str:
    if not summary.get("measured"):
        return "no autotranspose measurement"
    lines = [
        f"autotranspose over {summary['measured']} cases, % of copy: median "
        f"{100 * summary['median']:.1f}, 10th percentile {100 * summary['p10']:.1f}, "
        f"min {100 * summary['min']:.1f} ({summary['worst']})"
    ]
    for peer in [k.removesuffix("_cases") for k in summary if k.endswith("_cases")]:
        lines.append(
            f"  {peer:>8} faster in {summary[f'{peer}_faster']} of {summary[f'{peer}_cases']}"
            f" cases, more than 1% faster in {summary[f'{peer}_faster_1pct']}"
        )
    return "\n".join(lines)


def bench_case(
    shape: tuple[int, int, int],
    dtype: str,
    *,
    device: int = 0,
    config: Any = None,
    peers: Sequence[str] = PEERS,
    repeats: int = 7,
) -> list[Row]:
    """Time every peer on one (shape, dtype); each is checked against the reference first.
    Without `config`, autotranspose runs what transpose() would choose for this call."""
    from .api import served
    from .compiler import activate
    from .measure import Bench

    state = activate(device)
    s = element_type(dtype).size
    source = "given"
    bench = Bench(state, s, shape)
    rows: list[Row] = []
    try:
        if config is None:  # as transpose() would serve it (a first call measures if untuned)
            choice = served(state, element_type(dtype), shape, *bench.pointers(0))
            config, source = (choice.config, choice.source) if choice else (None, "copy")
        launches = _peer_launches(bench, dtype, config)
        name = config.key if config is not None else "row copy (one column or row a matrix)"
        launches["autotranspose"] = (launches["autotranspose"][0], f"{name} ({source})")
        copy_s = bench.copy_time(repeats=repeats)
        for peer in peers:
            fn, note = launches.get(peer, (None, "unknown peer"))
            if fn is None:
                rows.append(Row(shape, dtype, peer, None, None, None, note))
                continue
            if peer != "copy":
                values = peer in ("geam", "cupy", "torch")  # they move values, not bytes
                mask = peer_mask(dtype) if values else Bench.ALL_BITS
                try:
                    problem = bench.check(fn, mask=mask)
                except Exception as exc:
                    if peer == "autotranspose":
                        raise
                    problem = f"{type(exc).__name__}: {exc}"[:200]  # a note, not a crashed run
                if problem:
                    rows.append(Row(shape, dtype, peer, None, None, None, f"{note}: {problem}"))
                    continue
            t = copy_s if peer == "copy" else bench.time(fn, repeats=repeats)
            rows.append(Row(shape, dtype, peer, t * 1e6, bench.gbps(t), copy_s / t, note))
    finally:
        bench.close()
    return rows


HOST_COST_CASES = (
    ("autotranspose", "gpuarray"), ("autotranspose", "cupy"), ("autotranspose", "torch"),
    ("own", "cupy"), ("own", "torch"),
)  # fmt: skip


def _host_cost_calls(who: str, lib: str, shape: tuple[int, int]) -> tuple[Any, Any, Any] | None:
    """(call into out, call making a new output, synchronize) for one library, or None."""
    from .api import transpose

    a = np.random.default_rng().standard_normal(shape).astype(np.float32)
    try:
        if lib == "gpuarray":
            import pycuda.gpuarray as gpuarray

            from . import _driver
            from .compiler import device_state

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


HOST_COST_CHUNK = 200  # calls timed between two synchronizations: well under the driver's
# launch-queue depth (about 1000), so no launch ever waits for the GPU to drain the queue


def host_costs(
    shape: tuple[int, int] = (64, 64), calls: int = 5000, rounds: int = 3
) -> dict[str, float | None]:
    """Host-timed microseconds per call of a small float32 transpose, ours and CuPy's and
    PyTorch's own, into a preallocated out ("<who>/<lib>/out") and into a new output
    ("<who>/<lib>/new"). All in one process, interleaved, each the best of `rounds`.

    Only the host's time is counted: calls run in chunks of HOST_COST_CHUNK and the GPU
    drains between chunks, outside the clock. Back-to-back calls without that would measure
    the GPU's rate of tiny kernels instead, once the launch queue fills."""
    from .compiler import activate

    activate(0)
    fns: dict[str, tuple[Any, Any]] = {}
    costs: dict[str, float | None] = {}
    for who, lib in HOST_COST_CASES:
        found = _host_cost_calls(who, lib, shape)
        for i, mode in enumerate(("out", "new")):
            key = f"{who}/{lib}/{mode}"
            costs[key] = None
            if found is not None:
                fns[key] = (found[i], found[2])
    for _ in range(rounds):
        for key, (fn, sync) in fns.items():
            for _ in range(100):
                fn()
            sync()
            spent, done = 0.0, 0
            while done < calls:
                t0 = time.perf_counter()
                for _ in range(HOST_COST_CHUNK):
                    fn()
                spent += time.perf_counter() - t0
                done += HOST_COST_CHUNK
                sync()
            us = spent / done * 1e6
            costs[key] = us if costs[key] is None else min(costs[key], us)
    return costs


def format_host_costs(costs: dict[str, float | None], shape: tuple[int, int] = (64, 64)) -> str:
    """The host-cost table: one line per (who, library), into out and into a new output."""
    lines = [
        f"host-timed {shape[0]}x{shape[1]} float32 call, us per call (best of 3 runs):",
        f"  {'':36} {'into out=':>10} {'new output':>11}",
    ]
    for who, lib in HOST_COST_CASES:
        label = f"autotranspose.transpose({lib})" if who == "autotranspose" else {
            "cupy": "CuPy copyto / ascontiguousarray(a.T)",
            "torch": "PyTorch out.copy_(a.t()) / a.t().contiguous()",
        }.get(lib, lib)  # fmt: skip
        vals = [costs.get(f"{who}/{lib}/{m}") for m in ("out", "new")]
        cells = ["-" if v is None else f"{v:.2f}" for v in vals]
        lines.append(f"  {label:36} {cells[0]:>10} {cells[1]:>11}")
    return "\n".join(lines)


def format_table(rows: Sequence[Row]) -> str:
    lines = [f"{'shape':>16} {'dtype':>10} {'peer':>13} {'us':>10} {'GB/s':>8} {'% copy':>7}  note"]
    for r in rows:
        shp = _case_text(r.shape, r.axes)
        if r.us is None:
            lines.append(
                f"{shp:>16} {r.dtype:>10} {r.peer:>13} {'-':>10} {'-':>8} {'-':>7}  {r.note}"
            )
        else:
            lines.append(
                f"{shp:>16} {r.dtype:>10} {r.peer:>13} {r.us:10.1f} {r.gbps:8.0f} "
                f"{100 * r.of_copy:6.1f}%  {r.note}"
            )
    return "\n".join(lines)


def _shape_text(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape if shape[0] > 1 else shape[1:]))


def _case_text(shape: Sequence[int], axes: Sequence[int] | None) -> str:
    """'8192x8192' for a transpose case, '64x256x56x56/0,2,3,1' for a permute case."""
    if axes is None:
        return _shape_text(shape)
    return "x".join(map(str, shape)) + "/" + ",".join(map(str, axes))


def markdown_table(rows: Sequence[Row]) -> str:
    """One Markdown row per (shape, dtype): copy and our GB/s, every peer as % of the same
    run's copy, and our speed over geam and over the best other peer (BENCHMARKS.md).
    The columns are the peers the rows name (a transpose run's PEERS, a permute run's
    cuTENSOR and compile too)."""
    named = {r.peer for r in rows}
    shown = [p for p in _peers(rows) if p != "copy" and p in named]
    cells: dict[tuple[tuple[int, ...], tuple[int, ...] | None, str], dict[str, Row]] = {}
    for r in rows:  # a permute case is its shape and its axes: one row each
        cells.setdefault((r.shape, r.axes, r.dtype), {})[r.peer] = r
    geam = "geam" in shown
    head = ["shape", "dtype", "copy GB/s", "autotranspose GB/s",
            *(f"{p} % copy" for p in shown), *(["vs geam"] if geam else []),
            "vs best other"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (shape, axes, dtype), row in cells.items():
        pct = {p: r.of_copy for p, r in row.items() if p in shown and r.of_copy}
        ours = pct.get("autotranspose")
        others = [v for p, v in pct.items() if p != "autotranspose"]
        gbps = {p: f"{r.gbps:.0f}" if r.gbps else "-" for p, r in row.items()}
        cols = [
            _case_text(shape, axes), dtype, gbps.get("copy", "-"), gbps.get("autotranspose", "-"),
            *(("**{:.1f}**" if p == "autotranspose" else "{:.1f}").format(100 * pct[p])
              if p in pct else "-" for p in shown),
            *([f"{ours / pct['geam']:.3f}x" if ours and "geam" in pct else "-"] if geam else []),
            f"{ours / max(others):.2f}x" if ours and others else "-",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)


def rows_from_json(doc: Any) -> list[Row]:
    """The rows of a `bench --json` file."""
    return [
        Row(**{**r, "shape": tuple(r["shape"]),
               "axes": tuple(r["axes"]) if r.get("axes") is not None else None})
        for r in doc["rows"]
    ]  # fmt: skip


def plot(rows: Sequence[Row], path: str | Path) -> bool:
    """A bar chart of % of copy per case and peer; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    shapes = list(dict.fromkeys(r.shape for r in rows))
    peers = [p for p in PEERS if p != "copy" and any(r.peer == p and r.of_copy for r in rows)]
    of_copy = {(r.shape, r.dtype, r.peer): 100 * r.of_copy for r in rows if r.of_copy}
    cols = min(3, len(shapes))
    nrows = -(-len(shapes) // cols)
    fig, axes = plt.subplots(
        nrows, cols, figsize=(4.2 * cols, 3.0 * nrows), squeeze=False, sharey=True
    )
    width = 0.8 / max(len(peers), 1)
    for ax, shape in zip(axes.flat, shapes, strict=False):  # spare panels stay blank
        dtypes = list(dict.fromkeys(r.dtype for r in rows if r.shape == shape))
        x = np.arange(len(dtypes))
        for i, peer in enumerate(peers):
            vals = [of_copy.get((shape, d, peer), 0.0) for d in dtypes]
            ax.bar(x + i * width, vals, width, label=peer, color=f"C{i}")
        ax.axhline(100, color="k", lw=0.8)
        ax.set_title(_shape_text(shape), fontsize=9)
        ax.set_xticks(x + 0.4 - width / 2)
        ax.set_xticklabels(dtypes, fontsize=7, rotation=30)
        ax.tick_params(axis="y", labelsize=7)
    for ax in axes.flat[len(shapes) :]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("% of device-to-device copy", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(peers), fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def run_from_args(args: Any) -> int:
    """The `autotranspose bench` command."""
    import os

    if getattr(args, "db", None):  # the tuned results to serve, as transpose() would
        os.environ["AUTOTRANSPOSE_DB"] = args.db
    if getattr(args, "small", None):
        from .bench_small import run_small

        return run_small(args)
    repeats = getattr(args, "repeat", None) or 7
    if getattr(args, "random_permute", None) or getattr(args, "axes", None):
        return _run_permutes(args, repeats)
    if getattr(args, "random", None):
        drawn = _drawn_dtypes(args)
        cases = random_cases(args.random, args.seed, drawn)
        print(f"{len(cases)} random cases, seed {args.seed}{_of(drawn)}", flush=True)
    else:
        cases = [(parse_shape(s), d) for s in args.shapes for d in args.dtypes]
    rows, summary = _measure_cases(
        [lambda shape=shape, dtype=dtype: bench_case(shape, dtype, device=args.device, repeats=repeats)
         for shape, dtype in cases]
    )  # fmt: skip
    costs = host_costs()
    print()
    print(format_host_costs(costs))
    _write(args, rows, {"summary": summary, "call_us": costs, "random": getattr(args, "random", None),
                        "seed": getattr(args, "seed", None),
                        "dtypes": _drawn_dtypes(args)})  # fmt: skip
    return 0


def _drawn_dtypes(args: Any) -> list[str] | None:
    """The dtypes a random draw is limited to (`--dtypes` given with --random,
    --random-permute or --small), or None: every type of the stated distribution."""
    drawing = any(getattr(args, k, None) for k in ("random", "random_permute", "small"))
    dtypes = getattr(args, "dtypes", None)
    return list(dtypes) if drawing and dtypes is not None else None


def _of(dtypes: Sequence[str] | None) -> str:
    return "" if dtypes is None else f", dtypes {' '.join(dtypes)}"


def _measure_cases(cases: list[Callable[[], list[Row]]]) -> tuple[list[Row], dict[str, Any]]:
    """Run each case (printing its rows as it finishes), then print all rows and the summary."""
    rows: list[Row] = []
    for run in cases:
        case = run()
        rows.extend(case)
        print(format_table(case), flush=True)
    print()
    print(format_table(rows))
    summary = summarize(rows)
    print()
    print(format_summary(summary))
    return rows, summary


def _write(args: Any, rows: list[Row], extra: dict[str, Any]) -> None:
    """The files `--json`, `--markdown` and `--png` ask for."""
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": [asdict(r) for r in rows], **extra}, indent=1))
    if getattr(args, "markdown", None):
        Path(args.markdown).write_text(markdown_table(rows) + "\n")
    if getattr(args, "png", None) and not plot(rows, args.png):
        print("matplotlib is not installed: no chart written")


def _run_permutes(args: Any, repeats: int) -> int:
    """`bench --random-permute N` or `bench --shapes ... --axes ...`: every case against copy,
    CuPy, PyTorch and cuTENSOR, then the summary."""
    if getattr(args, "random_permute", None):
        drawn = _drawn_dtypes(args)
        cases = random_permute_cases(args.random_permute, args.seed, drawn)
        print(f"{len(cases)} random permute cases, seed {args.seed}{_of(drawn)}", flush=True)
    else:
        cases = [(tuple(s), tuple(args.axes), d) for s in args.shapes for d in args.dtypes]
    rows, summary = _measure_cases(
        [lambda shape=shape, axes=axes, dtype=dtype: bench_permute_case(
            shape, axes, dtype, device=args.device, repeats=repeats) for shape, axes, dtype in cases]
    )  # fmt: skip
    _write(args, rows, {"summary": summary, "random_permute": getattr(args, "random_permute", None),
                        "seed": args.seed, "dtypes": _drawn_dtypes(args)})  # fmt: skip
    return 0

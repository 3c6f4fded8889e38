"""permute() on a real GPU: random shapes (1- to 6-D) and permutations for every element size,
odd sizes, sliced and strided inputs, strided outputs, a poisoned output with a guard region
after it, against NumPy on fresh random data; CuPy, PyTorch and JAX in and out; NCHW<->NHWC;
the attention-heads swap in bfloat16; the one-launch packed and gather passes (random
permutes that take them, views, strided outputs, both launchers, and one past 2**32 elements
when memory allows); every alternative a first call may choose, and the choice itself (once
per signature, never while a graph is captured, off with first-call measurement)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import autotranspose as at
from autotranspose.dispatch import picker as dispatch
from autotranspose.kernels.packed import packed_args
from autotranspose.plans.layout import contiguous_strides
from autotranspose.plans.permute import (
    GATHER,
    PACKED,
    can_pipeline,
    one_launch as one_launch_pass,
    plan_permute,
)
from autotranspose.runtime import launch

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("pycuda_primary")]

DTYPES = {1: "uint8", 2: "float16", 4: "float32", 8: "complex64", 16: "complex128"}
POISON = 0xA5


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Every bit of every element random (so a wrong byte shows)."""
    dt = np.dtype(dtype)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    return raw.view(dt).reshape(shape)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _random_problem(rng, nd: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A shape of `nd` sides (odd and even, up to a few hundred thousand elements) and axes
    (negative half the time)."""
    cap = {1: 5000, 2: 300, 3: 60, 4: 20, 5: 11, 6: 7}[nd]
    shape = tuple(int(v) for v in rng.integers(1, cap + 1, nd))
    axes = [int(a) for a in rng.permutation(nd)]
    if rng.random() < 0.5:
        axes = [a - nd if rng.random() < 0.5 else a for a in axes]
    return shape, tuple(axes)


@pytest.mark.parametrize("e", sorted(DTYPES))
@pytest.mark.parametrize("nd", [1, 2, 3, 4, 5, 6])
def test_random_permutes_through_numpy(rng, e, nd):
    """The host path: contiguous copies of random data, every element size."""
    for _ in range(3):
        shape, axes = _random_problem(rng, nd)
        x = random_array(rng, shape, DTYPES[e])
        assert same_bits(at.permute(x, axes), np.transpose(x, axes)), (shape, axes)


def _poisoned(cupy, shape, dtype, guard: int = 4096):
    """A contiguous array of `shape` poisoned, followed by `guard` poisoned bytes."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = cupy.full(nbytes + guard, POISON, np.uint8)
    return raw, raw[:nbytes].view(dtype).reshape(shape)


@pytest.mark.parametrize("e", sorted(DTYPES))
def test_random_views_into_poisoned_outputs_with_a_guard(rng, e):
    """Sliced and stepped CuPy inputs, contiguous and strided outputs; nothing outside out is
    written (the poison around and after it survives)."""
    cupy = pytest.importorskip("cupy")
    dtype = DTYPES[e]
    for _ in range(12):
        nd = int(rng.integers(2, 7))
        shape, axes = _random_problem(rng, nd)
        shape = (*shape[:-1], max(2, shape[-1]))  # x keeps an axis of stride 1
        pad = tuple(int(v) for v in rng.integers(0, 4, nd))
        big = cupy.asarray(
            random_array(rng, tuple(s + p for s, p in zip(shape, pad, strict=True)), dtype)
        )
        starts = [int(rng.integers(0, p + 1)) for p in pad]
        x = big[tuple(slice(a, a + s) for a, s in zip(starts, shape, strict=True))]
        if nd > 2 and rng.random() < 0.3:  # a step on an outer axis
            k = int(rng.integers(0, nd - 1))
            x = x[tuple(slice(None, None, 2) if i == k else slice(None) for i in range(nd))]
        want = np.transpose(cupy.asnumpy(x), axes)
        if rng.random() < 0.5:
            raw, out = _poisoned(cupy, want.shape, dtype)
            got = at.permute(x, axes, out)
            assert got is out and same_bits(cupy.asnumpy(out), want), (x.shape, x.strides, axes)
            assert bool((raw[out.nbytes :] == POISON).all()), "the guard region was written"
        else:  # a window of a larger poisoned buffer
            inner = max((k for k, w in enumerate(want.shape) if w > 1), default=nd - 1)
            # no padding after the innermost axis of more than one element: padded trailing
            # size-1 axes would leave out without an axis of stride 1 (refused, LayoutError)
            opad = tuple(int(v) if k <= inner else 0 for k, v in enumerate(rng.integers(0, 3, nd)))
            raw, whole = _poisoned(
                cupy, tuple(w + p for w, p in zip(want.shape, opad, strict=True)), dtype
            )
            out = whole[tuple(slice(p, p + w) for p, w in zip(opad, want.shape, strict=True))]
            assert at.permute(x, axes, out) is out
            host = cupy.asnumpy(whole)
            inside = host[tuple(slice(p, p + w) for p, w in zip(opad, want.shape, strict=True))]
            assert same_bits(inside, want), (x.shape, x.strides, axes, out.strides)
            mask = np.ones(host.shape, bool)
            mask[tuple(slice(p, p + w) for p, w in zip(opad, want.shape, strict=True))] = False
            assert np.all(host.view(np.uint8).reshape(*host.shape, e)[mask] == POISON)
            assert bool((raw[whole.nbytes :] == POISON).all())


@pytest.mark.parametrize("kernel", ["words", "words_skewed", "realigned"])
@pytest.mark.parametrize("e", [1, 2, 4, 8])
def test_long_rows_at_any_offset_into_a_poisoned_window(rng, e, kernel, monkeypatch):
    """Row copies of long rows of words under 16 bytes (odd lengths and pitches), inputs and
    outputs at random element offsets, so each row starts at its own alignment; the poison
    around the output window survives. Each through one kernel: the realigning one
    (`plan.realigned`, what the plan serves such rows), or the word copy (realigning off),
    its chunks long enough that it skews the rows' stores to start on a line
    (`launch.row_store_line`, "words_skewed": rows enough that the launch is not cut into
    chunks) or not."""
    cupy = pytest.importorskip("cupy")
    from autotranspose.plans import permute as plan_module
    from autotranspose.runtime.compiler import device_state

    if kernel != "realigned":
        monkeypatch.setattr(plan_module, "REALIGN_MIN_RUN_BYTES", 2**62)
    else:  # long rows of 8-byte words too (the plan serves those the word copy first)
        monkeypatch.setattr(plan_module, "REALIGN_WORDS_FIRST_BYTES", 2**62)
    state = device_state(0)
    stream = cupy.cuda.get_current_stream().ptr
    dtype = DTYPES[e]
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    for _ in range(3):
        if kernel == "words_skewed":  # rows enough that the launch is not cut
            b, m, n = (
                int(rng.integers(92, 111)),
                int(rng.integers(92, 111)),
                int(rng.integers(2000, 4000)) | 1,
            )
        else:
            b, m, n = (
                int(rng.integers(1, 40)),
                int(rng.integers(1, 40)),
                int(rng.integers(512 // e, 900)) | 1,
            )
        pad = int(rng.integers(0, 5))
        big = cupy.asarray(random_array(rng, (b, m, n + pad + 8), dtype))
        start = int(rng.integers(0, 8))
        x = big[:, :, start : start + n]
        want = np.transpose(cupy.asnumpy(x), (1, 0, 2))
        lead = int(rng.integers(1, 16))
        raw = cupy.full(want.nbytes + (lead + 1) * e + 4096, POISON, np.uint8)
        out = raw[lead * e : lead * e + want.nbytes].view(dtype).reshape(want.shape)
        plan = plan_permute(
            x.shape,
            (1, 0, 2),
            e,
            tuple(st // e for st in x.strides),
            None,
            in_ptr=x.data.ptr,
            out_ptr=out.data.ptr,
        )
        p = plan.passes[0]
        assert (
            p.kind == "copy" and p.elem_bytes * p.n >= 512 and p.realign == (kernel == "realigned")
        )
        if kernel != "realigned":
            g = launch.row_geometry(p.batch * p.m, p.n, sms, p.outer.extent * p.outer2.extent)
            assert (launch.row_store_line(p.n, g.chunk, g.lanes) > 0) == (
                kernel == "words_skewed"
            ), (b, m, n, g)
        for step in dispatch.permute.build(
            plan, state, x.data.ptr, out.data.ptr, stream, state.ctx
        ):
            step.run(x.data.ptr, out.data.ptr, stream, state.ctx)
        cupy.cuda.get_current_stream().synchronize()
        assert same_bits(cupy.asnumpy(out), want), (x.shape, x.strides, start, lead)
        assert bool((raw[: lead * e] == POISON).all()) and bool(
            (raw[lead * e + want.nbytes :] == POISON).all()
        )


@pytest.mark.parametrize("e", [1, 2, 4, 8])
def test_realigned_short_rows_into_poisoned_windows(rng, e):
    """Permutes that keep the innermost axis innermost with short rows (16 to 63 bytes, or to
    40 elements: the realigned copy's shortest) of sliced inputs at any element offset, into a contiguous or row-padded out window at
    any offset: the realigned copy (rows side by side fused into runs, or runs of one row)
    through permute() and through its own pass, against NumPy; the poison around the window
    survives."""
    cupy = pytest.importorskip("cupy")
    from autotranspose.runtime.compiler import device_state

    state = device_state(0)
    stream = cupy.cuda.get_current_stream().ptr
    dtype = DTYPES[e]
    done = 0
    while done < 6:
        nd = int(rng.integers(3, 6))
        shape = [int(v) for v in rng.integers(2, 40 if nd == 3 else 14, nd)]
        shape[-1] = int(rng.integers(-(-16 // e), max(-(-16 // e), min(40, 63 // e)) + 1))
        axes = (*(int(a) for a in rng.permutation(nd - 1)), nd - 1)
        start = int(rng.integers(0, 8))
        big = cupy.asarray(random_array(rng, (*shape[:-1], shape[-1] + start + 3), dtype))
        x = big[..., start : start + shape[-1]]
        want = np.transpose(cupy.asnumpy(x), axes)
        lead, gap = int(rng.integers(0, 16)), int(rng.integers(0, 3)) * int(rng.integers(1, 7))
        rows = (*want.shape[:-1], want.shape[-1] + gap)  # gap > 0: the output's rows apart
        raw = cupy.full((int(np.prod(rows)) + lead + 64) * e, POISON, np.uint8)
        whole = raw[lead * e : (lead + int(np.prod(rows))) * e].view(dtype).reshape(rows)
        out = whole[..., : want.shape[-1]]
        plan = plan_permute(
            x.shape,
            axes,
            e,
            tuple(st // e for st in x.strides),
            tuple(st // e for st in out.strides),
            in_ptr=x.data.ptr,
            out_ptr=out.data.ptr,
        )
        if not plan.passes or not plan.passes[0].realign:
            continue
        done += 1
        for how in ("pass", "permute"):
            raw.fill(POISON)
            if how == "pass":
                for step in dispatch.permute.build(
                    plan, state, x.data.ptr, out.data.ptr, stream, state.ctx
                ):
                    step.run(x.data.ptr, out.data.ptr, stream, state.ctx)
            else:
                assert at.permute(x, axes, out) is out
            cupy.cuda.get_current_stream().synchronize()
            case = f"{how}: {x.shape} by {axes}, x strides {x.strides}, out strides {out.strides}, lead {lead}"
            assert same_bits(cupy.asnumpy(out), want), case
            host = cupy.asnumpy(raw)
            written = np.zeros(host.size, bool)
            idx = np.lib.stride_tricks.as_strided(
                np.arange(host.size),
                shape=(*want.shape, e),
                strides=(*(st // e * 8 * e for st in out.strides), 8),
            )
            written[(idx + lead * e).ravel()] = True
            assert bool((host[~written] == POISON).all()), f"poison overwritten: {case}"


@pytest.mark.parametrize(
    ("shape", "axes"),
    [
        ((3, 5, 7), (2, 0, 1)),
        ((1, 1, 1), (2, 1, 0)),
        ((2, 3, 5, 7), (3, 1, 0, 2)),
        ((4099, 3), (1, 0)),
        ((7, 1, 9, 1, 11), (4, 3, 2, 1, 0)),
        ((2, 2, 2, 2, 2, 2), (5, 0, 4, 1, 3, 2)),
        ((257, 129, 3), (0, 2, 1)),
        ((5, 6007), (1, 0)),
        ((6, 4, 3), (0, 1, 2)),
    ],
)
@pytest.mark.parametrize("e", sorted(DTYPES))
def test_odd_sizes(rng, shape, axes, e):
    cupy = pytest.importorskip("cupy")
    x = cupy.asarray(random_array(rng, shape, DTYPES[e]))
    y = at.permute(x, axes)
    assert isinstance(y, cupy.ndarray) and y.flags.c_contiguous
    assert same_bits(cupy.asnumpy(y), np.transpose(cupy.asnumpy(x), axes))


@pytest.mark.parametrize(
    ("shape", "axes"),
    [
        ((200, 6, 112, 64), (3, 1, 0, 2)),  # 6 outer x 200 matrices of 112x64
        ((9, 5, 130, 67), (1, 0, 3, 2)),  # odd rows (staged and realigning kernels)
        ((3, 4, 5, 96, 64), (2, 1, 0, 4, 3)),  # two outer dims
        ((2, 3, 5, 7, 256, 160), (3, 2, 1, 0, 5, 4)),
    ],  # two outer dims and a host loop
)
@pytest.mark.parametrize("e", sorted(DTYPES))
def test_transpose_launches_walk_their_outer_dims(rng, shape, axes, e):
    """A transpose pass whose launch walks outer batch dims itself (the tuned kernel's outer
    variant): every matrix at its place, nothing written past out."""
    cupy = pytest.importorskip("cupy")
    (p,) = plan_permute(shape, axes, e).passes
    assert p.kind != GATHER and p.outer.extent > 1, p.describe()
    x = cupy.asarray(random_array(rng, shape, DTYPES[e]))
    want = np.transpose(cupy.asnumpy(x), axes)
    raw, out = _poisoned(cupy, want.shape, DTYPES[e])
    assert at.permute(x, axes, out) is out
    assert same_bits(cupy.asnumpy(out), want), (shape, axes)
    assert bool((raw[out.nbytes :] == POISON).all()), "the guard region was written"


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_nchw_to_nhwc_and_back_in_torch(rng, dtype):
    torch = pytest.importorskip("torch")
    x = torch.as_tensor(random_array(rng, (8, 64, 56, 56), dtype), device="cuda")
    nhwc = at.permute(x, (0, 2, 3, 1))
    assert isinstance(nhwc, torch.Tensor) and nhwc.shape == (8, 56, 56, 64)
    bits = torch.int16 if dtype == "float16" else torch.int32
    assert torch.equal(nhwc.view(bits), x.permute(0, 2, 3, 1).contiguous().view(bits))
    back = at.permute(nhwc, (0, 3, 1, 2))
    assert torch.equal(back.view(torch.uint8), x.view(torch.uint8))


def test_attention_heads_swap_in_bfloat16_through_torch():
    """(8, 4096, 32, 128) bf16 by (0, 2, 1, 3): rows of whole head vectors."""
    torch = pytest.importorskip("torch")
    x = torch.randn(8, 4096, 32, 128, device="cuda").to(torch.bfloat16)
    y = at.permute(x, (0, 2, 1, 3))
    assert y.dtype == torch.bfloat16 and y.shape == (8, 32, 4096, 128)
    assert torch.equal(y, x.permute(0, 2, 1, 3).contiguous())
    out = torch.empty_like(y)
    assert at.permute(x, (0, -2, 1, -1), out) is out and torch.equal(out, y)


def test_torch_views_and_the_callers_stream(rng):
    torch = pytest.importorskip("torch")
    base = torch.as_tensor(random_array(rng, (6, 40, 50, 9), "int16"), device="cuda")
    x = base[1:5, ::2, 3:47]  # sliced and stepped: strides (18000, 900, 9, 1)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = at.permute(x, (3, 0, 2, 1))  # on s, torch's current stream there
        z = y * 1
    s.synchronize()
    assert torch.equal(z.cpu(), x.permute(3, 0, 2, 1).contiguous().cpu())
    out_base = torch.zeros(9, 4, 44, 25, device="cuda", dtype=torch.int16)
    with pytest.raises(at.errors.OutputError, match="shape"):
        at.permute(x, (3, 0, 2, 1), out_base[..., :19])
    assert not out_base.any()
    out = out_base[..., 2:22]  # a strided out: rows 25 elements apart
    assert at.permute(x, (3, 0, 2, 1), out) is out
    assert torch.equal(out, x.permute(3, 0, 2, 1))
    assert not out_base[..., :2].any() and not out_base[..., 22:].any()


def test_cupy_in_cupy_out_and_refusals_write_nothing(rng):
    cupy = pytest.importorskip("cupy")
    x = cupy.asarray(random_array(rng, (3, 4, 5), "float32"))
    out = cupy.full((5, 3, 4), 7.0, np.float32)
    for bad, kind, words in [
        ((0, 1), at.errors.AxesError, "permutation"),
        ((1, 2, 0), at.errors.OutputError, None),  # out (5, 3, 4) is the wrong shape: (4, 5, 3)
    ]:
        with pytest.raises(kind, match=words):
            at.permute(x, bad, out if kind is at.errors.OutputError else None)
    wrong_dtype = cupy.full((5, 4, 3), 7.0, np.float64)
    with pytest.raises(at.errors.OutputError, match="dtype"):
        at.permute(x, (2, 1, 0), wrong_dtype)
    with pytest.raises(at.errors.OutputError, match="overlaps"):
        at.permute(x, (0, 1, 2), x)
    with pytest.raises(at.errors.LayoutError, match="negative"):
        at.permute(x[:, :, ::-1], (2, 1, 0))
    assert bool((out == 7.0).all()) and bool((wrong_dtype == 7.0).all())
    y = at.permute(x, (2, 0, 1), out)
    assert y is out and same_bits(cupy.asnumpy(out), np.transpose(cupy.asnumpy(x), (2, 0, 1)))
    gappy = x[:, :, ::2]  # no axis of stride 1: one gather
    want = np.transpose(cupy.asnumpy(gappy), (2, 1, 0))
    assert same_bits(cupy.asnumpy(at.permute(gappy, (2, 1, 0))), want)


def test_gpuarray_in_gpuarray_out(rng):
    import pycuda.gpuarray as gpuarray

    x = random_array(rng, (5, 6, 7, 8), "int32")
    y = at.permute(gpuarray.to_gpu(x), (1, 3, 0, 2))
    assert isinstance(y, gpuarray.GPUArray) and same_bits(y.get(), np.transpose(x, (1, 3, 0, 2)))


class _Cai:
    """A bare __cuda_array_interface__ object (as Numba and others export)."""

    def __init__(self, ptr, shape, typestr):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "strides": None,
            "typestr": typestr,
            "data": (ptr, False),
            "version": 3,
        }


@pytest.mark.parametrize("shape", [(0,), (3, 0), (2, 0, 5), (0, 4, 1, 6), (4, 1, 0, 2, 3)])
def test_empty_arrays_of_every_kind(rng, shape):
    """Empty arrays (GPUArrays and CAI objects with no memory, pointer 0; PyTorch and CuPy
    ones): an empty array of the same kind back, permuted; out back untouched; a wrong out
    still refused."""
    import pycuda.gpuarray as gpuarray

    axes = tuple(int(a) for a in rng.permutation(len(shape)))
    want = tuple(shape[a] for a in axes)
    for x in (gpuarray.empty(shape, np.float16), _Cai(0, shape, "<f2")):
        y = at.permute(x, axes)
        assert isinstance(y, gpuarray.GPUArray) and y.shape == want and y.dtype == np.float16
        out = gpuarray.empty(want, np.float16)
        assert at.permute(x, axes, out) is out
        with pytest.raises(at.errors.OutputError, match="dtype"):
            at.permute(x, axes, gpuarray.empty(want, np.float32))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        x = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
        y = at.permute(x, axes)
        assert isinstance(y, torch.Tensor) and tuple(y.shape) == want and y.dtype == x.dtype
        out = torch.empty(want, dtype=torch.bfloat16, device="cuda")
        assert at.permute(x, axes, out) is out
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        x = cupy.empty(shape, cupy.uint8)
        y = at.permute(x, axes)
        assert isinstance(y, cupy.ndarray) and y.shape == want and y.dtype == cupy.uint8


def test_jax_in_jax_out(rng):
    jax = pytest.importorskip("jax")
    if not any(d.platform in ("gpu", "cuda") for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    host = rng.standard_normal((3, 17, 29, 5)).astype(np.float32)
    x = jax.numpy.asarray(host).astype("bfloat16")
    y = at.permute(x, (2, 0, 3, 1))
    assert isinstance(y, jax.Array) and y.shape == (29, 3, 5, 17) and y.dtype == x.dtype
    assert np.array_equal(np.asarray(y), np.transpose(np.asarray(x), (2, 0, 3, 1)))
    with pytest.raises(at.errors.OutputError, match="immutable"):
        at.permute(x, (2, 0, 3, 1), jax.numpy.empty((29, 3, 5, 17), x.dtype))


def test_wide_and_runs_cases_and_a_second_call_from_the_cache(rng):
    """(B, M, N, 2) float32 by (0, 2, 1, 3) is a transpose of 8-byte words; (B, M, N, 3) int8
    is rows of 3 bytes; each called twice (the second from the cached steps)."""
    cupy = pytest.importorskip("cupy")
    for shape, dtype in [
        ((4, 300, 200, 2), "float32"),
        ((4, 300, 200, 3), "int8"),
        ((2, 64, 48, 33), "float16"),
    ]:
        for _ in range(2):
            x = cupy.asarray(random_array(rng, shape, dtype))
            y = at.permute(x, (0, 2, 1, 3))
            assert same_bits(cupy.asnumpy(y), np.transpose(cupy.asnumpy(x), (0, 2, 1, 3)))


# --- the one-launch passes: packed and gather -----------------------------------------------------
@pytest.fixture(params=[PACKED, GATHER])
def one_launch(request: pytest.FixtureRequest, own_pass: None) -> str:
    """The kind of one-launch pass a test runs: packed (as planned), or the gather (the
    plan's boxes turned off: `no_packed`); the plan's own pass, never an alternative a first
    call found faster (`own_pass`)."""
    if request.param == GATHER:
        request.getfixturevalue("no_packed")
    return request.param


def _gather_problem(rng, e: int, kind: str = GATHER) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A random 2- to 8-D permute whose contiguous plan is one `kind` launch (many small
    host-loop launches, or both tile sides under 8), up to a few million elements."""
    while True:
        nd = int(rng.integers(2, 9))
        cap = max(2, round((3e6 if rng.random() < 0.3 else 2e5) ** (1 / nd)))
        shape = tuple(int(v) for v in rng.integers(1, cap + 1, nd))
        axes = tuple(int(a) for a in rng.permutation(nd))
        if plan_permute(shape, axes, e).passes[0].kind == kind:
            return shape, axes


def _takes(kind: str, x, axes, out=None) -> bool:
    """Does permute(x, axes, out) of these CuPy arrays plan one `kind` launch?"""
    e = x.dtype.itemsize
    os_ = None if out is None else tuple(s // e for s in out.strides)
    p = plan_permute(
        x.shape,
        axes,
        e,
        tuple(s // e for s in x.strides),
        os_,
        in_ptr=x.data.ptr,
        out_ptr=0 if out is None else out.data.ptr,
    )
    return bool(p.passes) and p.passes[0].kind == kind


@pytest.mark.parametrize("e", sorted(DTYPES))
def test_gather_random_permutes(rng, e, one_launch):
    """Contiguous CuPy arrays of fresh random bits, into a fresh result and into a poisoned
    out with a guard region after it; each call twice (the second from the cached steps)."""
    cupy = pytest.importorskip("cupy")
    for _ in range(10):
        shape, axes = _gather_problem(rng, e, one_launch)
        x = cupy.asarray(random_array(rng, shape, DTYPES[e]))
        want = np.transpose(cupy.asnumpy(x), axes)
        for _ in range(2):
            assert same_bits(cupy.asnumpy(at.permute(x, axes)), want), (shape, axes)
        raw, out = _poisoned(cupy, want.shape, DTYPES[e])
        assert at.permute(x, axes, out) is out and same_bits(cupy.asnumpy(out), want), (shape, axes)
        assert bool((raw[out.nbytes :] == POISON).all()), "the guard region was written"


@pytest.mark.parametrize(
    ("shape", "axes"),
    [
        ((2, 3, 5, 7, 11, 13), (5, 0, 4, 1, 3, 2)),
        ((100003, 3, 5), (0, 2, 1)),
        ((7, 6), (1, 0)),
        ((3,) * 8, (7, 5, 3, 1, 0, 2, 4, 6)),
        ((2,) * 8, (1, 0, 3, 2, 5, 4, 7, 6)),
        ((1, 7, 1, 5, 3, 1), (5, 4, 3, 2, 1, 0)),
        ((9, 11, 13, 2, 3), (4, 2, 0, 3, 1)),
        ((4099, 3, 2, 5), (2, 0, 3, 1)),
        ((33, 65, 3, 5, 2), (0, 4, 2, 3, 1)),
    ],
)
@pytest.mark.parametrize("e", sorted(DTYPES))
def test_gather_odd_sizes(rng, shape, axes, e, one_launch):
    cupy = pytest.importorskip("cupy")
    x = cupy.asarray(random_array(rng, shape, DTYPES[e]))
    kind = plan_permute(shape, axes, e).passes[0].kind
    assert kind == one_launch or (kind == GATHER and one_launch == PACKED and len(shape) == 8)
    y = at.permute(x, axes)
    assert isinstance(y, cupy.ndarray) and y.flags.c_contiguous
    assert same_bits(cupy.asnumpy(y), np.transpose(cupy.asnumpy(x), axes))


def _view_layout(rng, shape: tuple[int, ...], kind: str) -> tuple[list[int], tuple[int, ...]]:
    """Steps and padding for a view of `shape`: on the axes outside the innermost one of
    more than one element (inside it, size-1 axes stay unpadded: else there would be no axis
    of stride 1). For a packed pass the innermost three such axes stay contiguous (only the
    outermost of them padded): a box needs runs of 32 bytes on both sides, which padding
    every small axis would cut."""
    nd = len(shape)
    big = [k for k in range(nd) if shape[k] > 1] or [nd - 1]
    kept = big[-(3 if kind == PACKED else 1) :]
    steps = [2 if k < kept[0] and rng.random() < 0.4 else 1 for k in range(nd)]
    pad = tuple(
        int(v) if k <= big[-1] and (k == kept[0] or k not in kept) else 0
        for k, v in enumerate(rng.integers(0, 3, nd))
    )
    return steps, pad


@pytest.mark.parametrize("e", sorted(DTYPES))
def test_gather_views_into_strided_poisoned_outputs(rng, e, one_launch):
    """Sliced and stepped inputs into windows of larger poisoned buffers: the one launch's
    reads follow the input's strides, its writes the output's, and nothing around out
    changes. Views are drawn until 4 of them took the launch (a padded view may plan another
    pass), at least 12 and at most 48."""
    cupy = pytest.importorskip("cupy")
    dtype, gathered, drawn = DTYPES[e], 0, 0
    while drawn < 12 or (gathered < 4 and drawn < 48):
        drawn += 1
        shape, axes = _gather_problem(rng, e, one_launch)
        steps, pad = _view_layout(rng, shape, one_launch)
        ext = tuple(s * st + p for s, st, p in zip(shape, steps, pad, strict=True))
        big = cupy.asarray(random_array(rng, ext, dtype))
        starts = [int(rng.integers(0, p + 1)) for p in pad]
        x = big[
            tuple(slice(a, a + s * st, st) for a, s, st in zip(starts, shape, steps, strict=True))
        ]
        assert x.shape == shape
        want = np.transpose(cupy.asnumpy(x), axes)
        _, opad = _view_layout(rng, want.shape, one_launch)
        raw, whole = _poisoned(
            cupy, tuple(w + p for w, p in zip(want.shape, opad, strict=True)), dtype
        )
        window = tuple(slice(p, p + w) for p, w in zip(opad, want.shape, strict=True))
        out = whole[window]
        gathered += _takes(one_launch, x, axes, out)
        assert at.permute(x, axes, out) is out
        host = cupy.asnumpy(whole)
        assert same_bits(host[window], want), (shape, axes, x.strides, out.strides)
        mask = np.ones(host.shape, bool)
        mask[window] = False
        assert np.all(host.view(np.uint8).reshape(*host.shape, e)[mask] == POISON)
        assert bool((raw[whole.nbytes :] == POISON).all())
    assert gathered >= 4, f"only {gathered} of {drawn} views took the {one_launch} pass"


def _words_problem(rng, e: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A random 3- to 6-D permute of 1- or 2-byte elements, up to a few million, planned as
    one packed launch that the words kernel can take (extents multiples of 4 / e)."""
    k = 4 // e
    while True:
        nd = int(rng.integers(3, 7))
        cap = max(2, round((2e6 if rng.random() < 0.5 else 2e5) ** (1 / nd) / 2))
        shape = tuple(
            int(v) * (k if rng.random() < 0.85 else 1) for v in rng.integers(1, cap + 1, nd)
        )
        axes = tuple(int(a) for a in rng.permutation(nd))
        p = plan_permute(shape, axes, e).passes[0]
        if p.kind == PACKED and p.elem_bytes == e and packed_args(e, p.dims, p.box).kernel.words:
            return shape, axes


@pytest.mark.parametrize("e", [1, 2])
def test_packed_words_into_poisoned_windows(rng, e, own_pass):
    """The words kernel (K x K blocks byte-permuted in registers, aligned words on both
    sides) on random permutes, its boxes whole and cut at the edges, into outputs at a
    word's offset (words) or not (the element kernel): equal to np.transpose, the poison
    before and after the output untouched."""
    cupy = pytest.importorskip("cupy")
    dtype, k = DTYPES[e], 4 // e
    seen = {True: 0, False: 0}
    done = 0
    for _ in range(100):
        if done == 14:
            break
        shape, axes = _words_problem(rng, e)
        x = cupy.asarray(random_array(rng, shape, dtype))
        want = np.transpose(cupy.asnumpy(x), axes)
        lead = int(rng.integers(1, 5)) * k + (int(rng.integers(1, k)) if done % 4 == 3 else 0)
        raw = cupy.full(want.nbytes + (lead + 1) * e + 4096, POISON, np.uint8)
        out = raw[lead * e : lead * e + want.nbytes].view(dtype).reshape(want.shape)
        p = plan_permute(shape, axes, e, in_ptr=x.data.ptr, out_ptr=out.data.ptr).passes[0]
        # the plan depends on the pointers: at an output offset off the word, a problem drawn
        # as a packed pass can be a row copy (the H200 suite drew (2, 4, 6, 12, 1, 8), axes
        # (1, 3, 2, 4, 0, 5) of 2-byte elements), or a pass of wider elements where the
        # innermost axis stays innermost and the offset allows them (2, 8, 8, 6, 4, 4) by
        # (2, 4, 3, 1, 0, 5) at 12 bytes: 4-byte elements); draw another
        if p.kind != PACKED or p.elem_bytes != e:
            continue
        done += 1
        words = packed_args(e, p.dims, p.box, x.data.ptr, out.data.ptr).kernel.words
        assert words == (lead % k == 0), (shape, axes, lead)
        seen[words] += 1
        assert at.permute(x, axes, out) is out
        assert same_bits(cupy.asnumpy(out), want), (shape, axes, p.box, lead, words)
        assert bool((raw[: lead * e] == POISON).all()) and bool(
            (raw[lead * e + want.nbytes :] == POISON).all()
        )
    assert done == 14, f"only {done} of 100 drawn problems were packed passes at their pointers"
    assert seen[True] >= 8 and seen[False] >= 2, seen


def _funnel_problem(rng, e: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A random 3- to 6-D permute of 1- or 2-byte elements, up to a few million, planned as
    one packed launch whose output side allows words (the output's innermost extent and
    strides multiples of 4 / e) and whose input side does not (odd extents and strides)."""
    k = 4 // e
    while True:
        nd = int(rng.integers(3, 7))
        cap = max(2, round((2e6 if rng.random() < 0.5 else 2e5) ** (1 / nd) / 2))
        axes = tuple(int(a) for a in rng.permutation(nd))
        shape = tuple(
            int(v) * (k if j == axes[-1] or rng.random() < 0.3 else 1)
            for j, v in enumerate(rng.integers(1, cap + 1, nd))
        )
        p = plan_permute(shape, axes, e).passes[0]
        if p.kind == PACKED and p.elem_bytes == e and packed_args(e, p.dims, p.box).kernel.funnel:
            return shape, axes


@pytest.mark.parametrize("e", [1, 2])
def test_packed_funnel_into_poisoned_windows(rng, e, own_pass):
    """The words kernel with realigning loads (funnel) on random permutes whose input side
    is not word-aligned, from inputs that start 0 to K - 1 elements past a word, into
    outputs at a word's offset, with poison before and after: equal to np.transpose."""
    cupy = pytest.importorskip("cupy")
    dtype, k = DTYPES[e], 4 // e
    done = 0
    for case in range(100):
        if done == 12:
            break
        shape, axes = _funnel_problem(rng, e)
        host = random_array(rng, shape, dtype)
        lead_in = case % k
        big = cupy.asarray(random_array(rng, (host.size + lead_in + k,), dtype))
        x = big[lead_in : lead_in + host.size].reshape(shape)
        x[...] = cupy.asarray(host)
        want = np.transpose(host, axes)
        lead = int(rng.integers(1, 5)) * k
        raw = cupy.full(want.nbytes + (lead + 1) * e + 4096, POISON, np.uint8)
        out = raw[lead * e : lead * e + want.nbytes].view(dtype).reshape(want.shape)
        p = plan_permute(shape, axes, e, in_ptr=x.data.ptr, out_ptr=out.data.ptr).passes[0]
        # the plan depends on the pointers: at this offset a problem drawn as a packed pass
        # can be a row copy (one run of the GPU suite drew one); draw another
        if not (
            p.kind == PACKED
            and p.elem_bytes == e
            and packed_args(e, p.dims, p.box, x.data.ptr, out.data.ptr).kernel.funnel
        ):
            continue
        done += 1
        assert at.permute(x, axes, out) is out
        assert same_bits(cupy.asnumpy(out), want), (shape, axes, p.box, lead_in)
        assert bool((raw[: lead * e] == POISON).all()) and bool(
            (raw[lead * e + want.nbytes :] == POISON).all()
        )
    assert done == 12, f"only {done} of 100 drawn problems were funnel passes at their pointers"


def _pipelined_problem(rng, e: int, big: bool):
    """A random 3- to 6-D permute of `e`-byte elements (odd extents: edge boxes), up to 16
    million elements when `big` (more boxes than the grid has blocks: each block alternates
    its two buffers many times), as one packed pass the pipelined kernel takes."""
    while True:
        nd = int(rng.integers(3, 7))
        cap = max(2, round((1.6e7 / e * 4 if big else 2e5) ** (1 / nd) * (2.2 if big else 1.5)))
        shape = tuple(int(v) for v in rng.integers(1, cap + 1, nd))
        if math.prod(shape) * e > (256 << 20):
            continue
        axes = tuple(int(a) for a in rng.permutation(nd))
        p = one_launch_pass(plan_permute(shape, axes, e).passes[0], PACKED)
        # the pass's element: a permute that keeps the innermost axis moves wider words
        if p is not None and p.elem_bytes == e and can_pipeline(p):
            return shape, axes, p


@pytest.mark.parametrize("e", [4, 8, 16])
def test_packed_pipelined_into_poisoned_windows(rng, e):
    """The pipelined element kernel (the next box streams into a second shared buffer while
    the block writes this one; a first call races it) and the same box through the
    one-buffer kernel, on random
    permutes whose boxes are whole and cut, small and large enough for many boxes a block,
    into an output window with poison before and after: both equal to np.transpose."""
    cupy = pytest.importorskip("cupy")
    from autotranspose.runtime.compiler import device_state

    state, dtype = device_state(0), DTYPES[e]
    cut = 0
    for case in range(8):
        shape, axes, p = _pipelined_problem(rng, e, big=case % 2 == 1)
        x = cupy.asarray(random_array(rng, shape, dtype))
        want = np.transpose(cupy.asnumpy(x), axes)
        lead = int(rng.integers(1, 9))
        raw = cupy.full(want.nbytes + (lead + 1) * e + 4096, POISON, np.uint8)
        out = raw[lead * e : lead * e + want.nbytes].view(dtype).reshape(want.shape)
        cut += any(d.extent % b for d, b in zip(p.dims, p.box, strict=True))
        for pipelined in (True, False):
            raw[lead * e : lead * e + want.nbytes] = POISON
            lc = launch.make_packed(state, e, p.dims, p.box, x.data.ptr, out.data.ptr, pipelined)
            assert lc.kernel.name.endswith("_p") == pipelined, lc.kernel.name
            lc.run(x.data.ptr, out.data.ptr, cupy.cuda.get_current_stream().ptr, state.ctx)
            cupy.cuda.get_current_stream().synchronize()
            assert same_bits(cupy.asnumpy(out), want), (shape, axes, p.box, pipelined)
            assert bool((raw[: lead * e] == POISON).all()) and bool(
                (raw[lead * e + want.nbytes :] == POISON).all()
            )
    assert cut >= 2, "too few problems with cut boxes"


# Output rows at odd offsets: the lowest calls of random mixes on an H200 (float16
# 459x81x77x9x1 by (2,1,4,3,0) and bool 20861x308x6x3x1 by (3,1,0,2,4) scaled down, uint8
# 25x655x15x147 reversed and int8 4676x2x987x58 by (3,0,2,1) at full size) and a float16
# reversal of rows of 301 halves.
REALIGNED = [
    ((459, 81, 7, 9, 1), (2, 1, 4, 3, 0), 2),
    ((2861, 38, 6, 3, 1), (3, 1, 0, 2, 4), 1),
    ((25, 655, 15, 147), (3, 2, 1, 0), 1),
    ((4676, 2, 987, 58), (3, 0, 2, 1), 1),
    ((3, 301, 5, 11), (0, 3, 2, 1), 2),
]


def _run_cut(dims, box):
    """`box` with the output run's last dim shortened so that the problem's edge cuts it."""
    from autotranspose.plans.boxes import out_run_dims

    last = out_run_dims(dims, box)[-1]
    b = next(b for b in range(box[last] - 1, 1, -1) if dims[last].extent % b)
    return (*box[:last], b, *box[last + 1 :])


@pytest.mark.parametrize("shape, axes, e", REALIGNED)
def test_packed_realigned_runs_into_poisoned_windows(rng, shape, axes, e):
    """The spread kernel's realigned variant (output runs that start at any element, written
    in the aligned words they cover, the cut first and last words element by element), in the
    plan's packed box and in one an edge cuts along the run, from inputs 0 to K - 1 elements
    past a word into outputs 0 to K - 1 elements past a word with poison before and after:
    equal to np.transpose; and permute() of the same call (whichever pass its first call
    keeps) too."""
    cupy = pytest.importorskip("cupy")
    from autotranspose.plans.boxes import packed_box
    from autotranspose.runtime.compiler import device_state

    state, dtype, k = device_state(0), DTYPES[e], 4 // e
    host = random_array(rng, shape, dtype)
    want = np.transpose(host, axes)
    for lead_in, lead_out in ((0, 0), (1, k - 1), (k - 1, 1)):
        big = cupy.asarray(random_array(rng, (host.size + lead_in + k,), dtype))
        x = big[lead_in : lead_in + host.size].reshape(shape)
        x[...] = cupy.asarray(host)
        lead = 4 * k + lead_out
        raw = cupy.full(want.nbytes + (lead + 1) * e + 4096, POISON, np.uint8)
        out = raw[lead * e : lead * e + want.nbytes].view(dtype).reshape(want.shape)
        dims = plan_permute(shape, axes, e).dims
        box = packed_box(dims, e)
        for b in (box, _run_cut(dims, box)):
            kernel = packed_args(e, dims, b, x.data.ptr, out.data.ptr, realign_out=True).kernel
            assert kernel.realign_out, (shape, b, kernel)
            raw[:] = POISON
            lc = launch.make_packed(state, e, dims, b, x.data.ptr, out.data.ptr, realign_out=True)
            lc.run(x.data.ptr, out.data.ptr, cupy.cuda.get_current_stream().ptr, state.ctx)
            cupy.cuda.get_current_stream().synchronize()
            assert same_bits(cupy.asnumpy(out), want), (shape, axes, b, lead_in, lead_out)
            assert bool((raw[: lead * e] == POISON).all()) and bool(
                (raw[lead * e + want.nbytes :] == POISON).all()
            )
        raw[:] = POISON
        assert at.permute(x, axes, out) is out
        assert same_bits(cupy.asnumpy(out), want), (shape, axes, "permute()")


@pytest.mark.parametrize(
    ("shape", "axes"),
    [((6, 5, 4, 3, 7, 2), (4, 2, 0, 5, 3, 1)), ((6, 5, 41, 3, 37, 2), (4, 2, 0, 5, 3, 1))],
)
def test_one_launch_through_both_launchers(rng, monkeypatch, one_launch, shape, axes):
    """A gather's 368-byte argument block, or a packed launch's (its box cut at the dims'
    edges), through the compiled launcher and through the ctypes path
    (AUTOTRANSPOSE_NATIVE_LAUNCH=0)."""
    cupy = pytest.importorskip("cupy")
    from autotranspose.runtime import launch, native as _native
    from autotranspose.runtime.compiler import device_state

    state = device_state(0)
    x = cupy.asarray(random_array(rng, shape, "float32"))
    want = np.transpose(cupy.asnumpy(x), axes)
    (p,) = plan_permute(shape, axes, 4).passes
    assert p.kind == one_launch
    box = tuple(min(b, 8) if b > 1 else b for b in p.box)  # a packed box cut at the edges
    # the compiled launcher last: a ctypes-path launch made last would leave _driver's
    # module-level launcher unset for launches other tests prepared and cached before
    for setting in ("0", "1"):
        monkeypatch.setenv(_native.ENV_VAR, setting)
        _native.reset()
        try:
            if p.kind == GATHER:
                lc = launch.make_gather(state, 4, p.dims)
            else:
                lc = launch.make_packed(state, 4, p.dims, box)
            out = cupy.full(want.shape, np.nan, np.float32)
            lc.run(x.data.ptr, out.data.ptr, cupy.cuda.get_current_stream().ptr, state.ctx)
            assert bool(lc.prepared(state.ctx).address) == (
                setting == "1" and _native.launcher() is not None
            )
            assert same_bits(cupy.asnumpy(out), want), f"native launcher {setting}, box {box}"
        finally:
            _native.reset()


def _free_gpu_bytes(cupy) -> int:
    return int(cupy.cuda.runtime.memGetInfo()[0])


def test_gather_past_2_32_elements(no_packed):
    """uint8 (286331154, 3, 5) by (0, 2, 1): 4.29e9 elements (> 2**32) in 3x5 tiles, one
    gather launch: 64-bit offsets and element count. Uses about 9 GB of GPU memory (x and the
    result) and 9 GB of host memory to check it; skipped with less than 24 GB free on the GPU."""
    cupy = pytest.importorskip("cupy")
    if _free_gpu_bytes(cupy) < 24 << 30:
        pytest.skip("needs 24 GB of free GPU memory")
    shape, axes = (2**32 // 15 + 1, 3, 5), (0, 2, 1)
    assert math.prod(shape) > 2**32
    plan = plan_permute(shape, axes, 1, contiguous_strides(shape))
    assert plan.passes[0].kind == GATHER and plan.launches == 1
    x = cupy.empty(shape, cupy.uint8)
    chunk = 1 << 24  # rows at a time: random bytes without a temporary the size of x
    for i in range(0, shape[0], chunk):
        x[i : i + chunk] = cupy.random.randint(
            0, 256, (min(chunk, shape[0] - i), 3, 5), dtype=cupy.uint8
        )
    y = at.permute(x, axes)
    cupy.cuda.get_current_stream().synchronize()
    assert y.shape == (shape[0], 5, 3)
    host_x, host_y = cupy.asnumpy(x), cupy.asnumpy(y)
    del x, y
    for i in range(0, shape[0], chunk):
        got, want = host_y[i : i + chunk], np.transpose(host_x[i : i + chunk], axes)
        assert np.array_equal(got, want), f"rows {i} to {i + chunk} differ"


# --- the first call's choice between a plan's pass and its alternatives ---------------------------
def _alternatives_problem(rng, e: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A random 3- to 6-D permute of 9 to 40 MB whose plan names alternatives."""
    while True:
        nd = int(rng.integers(3, 7))
        target = rng.uniform(9e6, 4e7) / e
        shape = tuple(max(2, round(v)) for v in target ** rng.dirichlet(np.ones(nd)))
        axes = tuple(int(a) for a in rng.permutation(nd))
        if plan_permute(shape, axes, e).alternatives:
            return shape, axes


def _each_pass_into_poison(cupy, state, stream, plan, src, dst, raw, out, want) -> None:
    """`plan`'s own pass and each alternative, run on its own from `src` into `out` (at
    `dst`, inside the poisoned `raw` with a guard region after it): equal to `want`, the
    guard untouched."""
    for p in (plan.passes[0], *plan.alternatives):
        raw.fill(POISON)
        for step in dispatch.permute.build(plan.taking(p), state, src, dst, stream, state.ctx):
            step.run(src, dst, stream, state.ctx)
        cupy.cuda.get_current_stream().synchronize()
        where = f"{plan.shape} by {plan.axes}: {p.describe()}"
        assert same_bits(cupy.asnumpy(out), want), where
        assert bool((raw[out.nbytes :] == POISON).all()), f"guard written: {where}"


@pytest.mark.parametrize("e", sorted(DTYPES))
def test_every_alternative_moves_the_same_bytes(rng, e):
    """Each pass a first call may choose (the plan's, the gather, boxes of both sizes, the
    batched pass), run on its own into a poisoned out with a guard region after it, equals
    np.transpose on fresh random bits."""
    cupy = pytest.importorskip("cupy")
    from autotranspose.runtime.compiler import device_state

    state = device_state(0)
    stream = cupy.cuda.get_current_stream().ptr
    for _ in range(3):
        shape, axes = _alternatives_problem(rng, e)
        x = cupy.asarray(random_array(rng, shape, DTYPES[e]))
        want = np.transpose(cupy.asnumpy(x), axes)
        raw, out = _poisoned(cupy, want.shape, DTYPES[e])
        src, dst = x.data.ptr, out.data.ptr
        plan = plan_permute(shape, axes, e, in_ptr=src, out_ptr=dst)
        _each_pass_into_poison(cupy, state, stream, plan, src, dst, raw, out, want)


@pytest.mark.parametrize("e", [1, 2])
@pytest.mark.parametrize("c", [2, 3, 5, 7])
def test_image_batches_by_every_alternative_and_the_batched_transpose(rng, e, c, monkeypatch):
    """Batches of images HWC <-> CHW (matrices with a side under 8 and a long one): the plan's
    one-launch pass, its alternatives and the batched transpose it races (`narrow_batch`), each
    on its own into a poisoned out with a guard region, at odd sizes and an odd batch, equal
    np.transpose on fresh random bits."""
    cupy = pytest.importorskip("cupy")
    from autotranspose.plans import permute as _plan
    from autotranspose.runtime.compiler import device_state

    monkeypatch.setattr(_plan, "ALT_MIN_BYTES", 0)  # race at a test's size
    state = device_state(0)
    stream = cupy.cuda.get_current_stream().ptr
    n, h, w = int(rng.integers(2, 4)), int(rng.integers(230, 260)) | 1, int(rng.integers(300, 340))
    for shape, axes in (((n, h, w, c), (0, 3, 1, 2)), ((n, c, h, w), (0, 2, 3, 1))):
        x = cupy.asarray(random_array(rng, shape, DTYPES[e]))
        want = np.transpose(cupy.asnumpy(x), axes)
        raw, out = _poisoned(cupy, want.shape, DTYPES[e])
        src, dst = x.data.ptr, out.data.ptr
        plan = plan_permute(shape, axes, e, in_ptr=src, out_ptr=dst)
        batched = [p for p in plan.alternatives if p.kind == "transpose"]
        assert len(batched) == 1 and batched[0].batch == n, plan.describe()
        _each_pass_into_poison(cupy, state, stream, plan, src, dst, raw, out, want)


@pytest.fixture
def fresh_choices():
    """No steps cached and no choices recorded; first-call measurement as the user has it."""
    from autotranspose.dispatch import firstcall

    firstcall.set_enabled(None)
    dispatch.clear()
    dispatch.permute.history.clear()
    yield dispatch.permute.history
    dispatch.clear()


_CHOICE = ((200, 64, 112, 8), (3, 1, 0, 2))  # float32, 46 MB: packed; the gather, a bigger box
# and the batched transpose (64 launches) are its alternatives


def _choices(history, shape) -> list:
    return [h for h in history if h[1].shape == shape]


def test_a_first_call_compiles_its_boxes_at_once(rng, fresh_choices, monkeypatch):
    """The race's box kernels (the plan's box pipelined, a bigger box, the vector box) are
    handed to `precompile_specs` together before any is built, so nvcc runs for them at once;
    every box the race timed was among them."""
    cupy = pytest.importorskip("cupy")
    from autotranspose.dispatch import lookup

    real, handed = dispatch.permute.precompile_specs, []

    def spy(state, specs):
        handed.append([k.name for k in specs])
        real(state, specs)

    monkeypatch.setattr(dispatch.permute, "precompile_specs", spy)
    shape, axes = _CHOICE
    x = cupy.asarray(random_array(rng, shape, "float32"))
    out = cupy.empty(tuple(shape[a] for a in axes), dtype=x.dtype)
    at.permute(x, axes, out=out)
    assert same_bits(cupy.asnumpy(out), np.transpose(cupy.asnumpy(x), axes))
    ((_, plan, outcome),) = _choices(fresh_choices, shape)
    boxes = {
        lookup.packed_kernel(p, x.data.ptr, out.data.ptr).name
        for p in outcome.seconds
        if p.kind == PACKED
    }
    assert len(boxes) >= 3, plan.describe()
    assert len(handed) == 1 and boxes <= set(handed[0]), (handed, boxes)


def test_a_first_call_times_the_alternatives_once_and_keeps_the_fastest(rng, fresh_choices):
    cupy = pytest.importorskip("cupy")
    from autotranspose.dispatch import firstcall

    shape, axes = _CHOICE
    x = cupy.asarray(random_array(rng, shape, "float32"))
    want = np.transpose(cupy.asnumpy(x), axes)
    assert same_bits(cupy.asnumpy(at.permute(x, axes)), want)
    ((_, plan, outcome),) = _choices(fresh_choices, shape)
    guess = plan.passes[0]
    # its box pipelined, the gather, a bigger box, the batched pass and the vector box
    # (test_plan names them)
    assert len(plan.alternatives) == 5 and set(outcome.seconds) == {guess, *plan.alternatives}
    timed = {p: t for p, t in outcome.seconds.items() if t is not None}
    assert guess in timed and outcome.best in timed, outcome
    # the plan's pass stays unless an alternative beats it head to head by CONFIRM_MARGIN
    # (the outcome's seconds of the two are those of the pairs)
    if outcome.best != guess:
        assert timed[outcome.best] < timed[guess] * (1 - firstcall.CONFIRM_MARGIN)
    assert 0 < outcome.gpu_s <= firstcall.BUDGET_S + sum(timed.values())
    x2 = cupy.asarray(random_array(rng, shape, "float32"))  # the same signature: no new timing
    assert same_bits(cupy.asnumpy(at.permute(x2, axes)), np.transpose(cupy.asnumpy(x2), axes))
    assert len(_choices(fresh_choices, shape)) == 1


def test_no_choice_is_timed_when_first_calls_are_off(rng, fresh_choices):
    cupy = pytest.importorskip("cupy")
    from autotranspose.dispatch import firstcall

    shape, axes = _CHOICE
    x = cupy.asarray(random_array(rng, shape, "float32"))
    firstcall.set_enabled(False)
    try:
        assert same_bits(cupy.asnumpy(at.permute(x, axes)), np.transpose(cupy.asnumpy(x), axes))
    finally:
        firstcall.set_enabled(None)
    assert _choices(fresh_choices, shape) == []


def test_no_choice_is_timed_while_the_stream_is_captured(rng, fresh_choices):
    """Capture forbids the timing's synchronisation: the plan's own pass is captured, and a
    later call outside capture makes the choice."""
    torch = pytest.importorskip("torch")
    from autotranspose.dispatch import firstcall

    shape, axes = _CHOICE
    x = torch.empty(shape, device="cuda")
    out = torch.empty(tuple(shape[a] for a in axes), device="cuda")
    firstcall.set_enabled(False)  # compile and load the kernels before capture
    try:
        at.permute(x, axes, out)
    finally:
        firstcall.set_enabled(None)
    dispatch.clear()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        at.permute(x, axes, out)
    assert _choices(fresh_choices, shape) == []
    x.copy_(torch.as_tensor(random_array(rng, shape, "float32")))
    g.replay()
    torch.cuda.synchronize()

    def bits(t):  # random bits hold NaNs: compare them as integers
        return t.contiguous().view(torch.int32)

    assert torch.equal(bits(out), bits(x.permute(*axes)))
    out.zero_()
    at.permute(x, axes, out)
    torch.cuda.synchronize()
    assert torch.equal(bits(out), bits(x.permute(*axes)))
    assert len(_choices(fresh_choices, shape)) == 1

"""permute() on a real GPU: random shapes (1- to 6-D) and permutations for every element size,
odd sizes, sliced and strided inputs, strided outputs, a poisoned output with a guard region
after it, against NumPy on fresh random data; CuPy, PyTorch and JAX in and out; NCHW<->NHWC;
the attention-heads swap in bfloat16."""

from __future__ import annotations

import numpy as np
import pytest

import autotranspose as at

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
        big = cupy.asarray(random_array(rng, tuple(s + p for s, p in zip(shape, pad, strict=True)), dtype))
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
            raw, whole = _poisoned(cupy, tuple(w + p for w, p in zip(want.shape, opad, strict=True)), dtype)
            out = whole[tuple(slice(p, p + w) for p, w in zip(opad, want.shape, strict=True))]
            assert at.permute(x, axes, out) is out
            host = cupy.asnumpy(whole)
            inside = host[tuple(slice(p, p + w) for p, w in zip(opad, want.shape, strict=True))]
            assert same_bits(inside, want), (x.shape, x.strides, axes, out.strides)
            mask = np.ones(host.shape, bool)
            mask[tuple(slice(p, p + w) for p, w in zip(opad, want.shape, strict=True))] = False
            assert np.all(host.view(np.uint8).reshape(*host.shape, e)[mask] == POISON)
            assert bool((raw[whole.nbytes :] == POISON).all())


@pytest.mark.parametrize(
    ("shape", "axes"),
    [((3, 5, 7), (2, 0, 1)), ((1, 1, 1), (2, 1, 0)), ((2, 3, 5, 7), (3, 1, 0, 2)),
     ((4099, 3), (1, 0)), ((7, 1, 9, 1, 11), (4, 3, 2, 1, 0)), ((2, 2, 2, 2, 2, 2), (5, 0, 4, 1, 3, 2)),
     ((257, 129, 3), (0, 2, 1)), ((5, 6007), (1, 0)), ((6, 4, 3), (0, 1, 2))],
)  # fmt: skip
@pytest.mark.parametrize("e", sorted(DTYPES))
def test_odd_sizes(rng, shape, axes, e):
    cupy = pytest.importorskip("cupy")
    x = cupy.asarray(random_array(rng, shape, DTYPES[e]))
    y = at.permute(x, axes)
    assert isinstance(y, cupy.ndarray) and y.flags.c_contiguous
    assert same_bits(cupy.asnumpy(y), np.transpose(cupy.asnumpy(x), axes))


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
    with pytest.raises(at.errors.LayoutError, match="stride 1"):
        at.permute(x[:, :, ::2], (2, 1, 0))  # no axis of stride 1
    assert bool((out == 7.0).all()) and bool((wrong_dtype == 7.0).all())
    y = at.permute(x, (2, 0, 1), out)
    assert y is out and same_bits(cupy.asnumpy(out), np.transpose(cupy.asnumpy(x), (2, 0, 1)))


def test_gpuarray_in_gpuarray_out(rng):
    import pycuda.gpuarray as gpuarray

    x = random_array(rng, (5, 6, 7, 8), "int32")
    y = at.permute(gpuarray.to_gpu(x), (1, 3, 0, 2))
    assert isinstance(y, gpuarray.GPUArray) and same_bits(y.get(), np.transpose(x, (1, 3, 0, 2)))


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
    for shape, dtype in [((4, 300, 200, 2), "float32"), ((4, 300, 200, 3), "int8"),
                         ((2, 64, 48, 33), "float16")]:  # fmt: skip
        for _ in range(2):
            x = cupy.asarray(random_array(rng, shape, dtype))
            y = at.permute(x, (0, 2, 1, 3))
            assert same_bits(cupy.asnumpy(y), np.transpose(cupy.asnumpy(x), (0, 2, 1, 3)))

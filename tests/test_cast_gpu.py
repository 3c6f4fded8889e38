"""cast_transpose() on a GPU: every pair bit for bit against
``torch.clamp(x.float() * scale, -max, max).to(dtype)`` on fresh data holding infinities,
NaN, subnormals and rounding midpoints; odd shapes, batches, pitched and offset inputs,
poisoned outputs with guard regions, amax against torch.amax, scales as tensors and floats,
both=True, permutes (fused, host loops, two passes), torch.compile(fullgraph=True), CuPy and
pycuda arrays."""

from __future__ import annotations

import _cast_data as data
import numpy as np
import pytest

import autotranspose as at
from autotranspose import errors
from autotranspose.kernels.config import KernelConfig
from autotranspose.kinds import cast

pytestmark = pytest.mark.gpu

PAIRS = sorted(cast.PAIRS)
POISON = 0x5A


def _cast_hits():
    """The eager cast calls the fast path remembers (`fastpath.cast_key`'s keys)."""
    from autotranspose.dispatch import caches

    return [hit for key, hit in caches.hits.items() if key[0] == "cast"]


def _cast_launches():
    """The cast signatures prepared in the dispatch's launch cache, by key."""
    from autotranspose.dispatch import caches

    return {key: launch for key, launch in caches.launches.items() if key[0] == "cast"}


def _input(torch, rng, shape, src, dst, scale):
    """x on the GPU in `src`: half special values, half random magnitudes (the values of
    tests/_cast_data.py, made in float32 and cast by PyTorch to x's dtype)."""
    vals = data.make_input(rng, shape, cast.FLOAT32, dst, scale)
    t = torch.from_numpy(np.ascontiguousarray(vals)).cuda()
    return t.to(getattr(torch, src.name))


def _reference(torch, x, scale, dst):
    dt = getattr(torch, dst.name)
    return torch.clamp(x.float() * scale, -dst.max, dst.max).to(dt)


def _assert_same(torch, got, want, what="y"):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    bits = torch.uint8 if got.element_size() == 1 else torch.int16
    g, w = got.contiguous().view(bits), want.contiguous().view(bits)
    nan = torch.isnan(got.float()) & torch.isnan(want.float())
    bad = (g != w) & ~nan
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} differ; first at {idx}: got "
            f"{int(g[idx]) & 0xFFFF:#x} want {int(w[idx]) & 0xFFFF:#x}"
        )


def _amax_ref(torch, x, prior):
    return torch.maximum(prior, torch.amax(x.float().abs()).reshape(1))


def _same_amax(torch, got, want):
    assert (torch.isnan(got) & torch.isnan(want)).all() or torch.equal(got, want), (got, want)


def _guarded(torch, shape, dtype, offset=0, pitch_pad=0, margin=512):
    """A (rows, cols) output view into a poisoned byte buffer: `offset` elements in, rows
    `pitch_pad` elements longer; with the buffer and the view's byte span."""
    rows, cols = shape
    pitch, size = cols + pitch_pad, dtype.itemsize
    raw = torch.full(((2 * margin + offset + rows * pitch) * size,), POISON, dtype=torch.uint8)
    raw = raw.cuda()
    start = margin + offset
    view = raw.view(dtype)[start : start + rows * pitch].view(rows, pitch)[:, :cols]
    return raw, view, (start * size, (start + rows * pitch) * size, pitch * size, cols * size)


def _guard_intact(torch, raw, span):
    lo, hi, pitch, row = span
    assert (raw[:lo] == POISON).all() and (raw[hi:] == POISON).all(), "a byte outside out changed"
    gaps = raw[lo:hi].view(-1, pitch)[:, row:]
    assert (gaps == POISON).all(), "a byte in out's row gaps changed"


@pytest.mark.parametrize("code", PAIRS)
@pytest.mark.parametrize("shape", [(4099, 6007), (3000, 7001), (7, 197), (2048, 4096)])
def test_every_pair_is_bit_exact(torch, rng, code, shape):
    src, dst = cast.PAIRS[code]
    scale = 2.0 if dst.fp8 else 1.0
    x = _input(torch, rng, shape, src, dst, scale)
    amax = torch.zeros(1, device="cuda")
    y = at.cast_transpose(x, getattr(torch, dst.name), scale=scale, amax=amax)
    _assert_same(torch, y, _reference(torch, x, scale, dst).t())
    _same_amax(torch, amax, _amax_ref(torch, x, torch.zeros(1, device="cuda")))


@pytest.mark.parametrize("code", PAIRS)
def test_inner_tiles_of_rows_off_their_word_boundary_with_realign(torch, rng, code):
    """realign=True (whole tiles past the first column whose rows start off a word boundary
    run a function of their own, with no edge tests): bit for bit on odd sides with z, and an
    amax that folds none of the large values between x's pitched rows (a forced config: the
    call beneath the public one, which PyTorch's op wraps without it)."""
    from autotranspose.calls.cast import cast_transpose

    src, dst = cast.PAIRS[code]
    cfg = cast.default(KernelConfig, src, dst).replace(realign=True)
    x = _input(torch, rng, (4099, 6007), src, dst, 2.0)
    amax = torch.zeros(1, device="cuda")
    z, y = cast_transpose(x, dst.name, scale=2.0, amax=amax, both=True, config=cfg)
    ref = _reference(torch, x, 2.0, dst)
    _assert_same(torch, y, ref.t())
    _assert_same(torch, z, ref, "z")
    _same_amax(torch, amax, _amax_ref(torch, x, torch.zeros(1, device="cuda")))
    big = 60000.0 if src is cast.FLOAT16 else 1e30
    wide = torch.full((1031, 520), big, dtype=getattr(torch, src.name), device="cuda")
    xs = wide[:, 1:518]
    xs.copy_(torch.randn(1031, 517, device="cuda").mul_(50))
    amax = torch.zeros(1, device="cuda")
    y = cast_transpose(xs, dst.name, scale=1.0, amax=amax, config=cfg)
    _assert_same(torch, y, _reference(torch, xs, 1.0, dst).t())
    assert float(amax) == float(xs.float().abs().max())


@pytest.mark.parametrize("code", ["f32_e4m3", "bf16_e4m3", "bf16_e5m2", "f16_bf16", "f32_bf16"])
def test_both_outputs_come_from_one_pass(torch, rng, code):
    src, dst = cast.PAIRS[code]
    x = _input(torch, rng, (2, 1031, 517), src, dst, 0.5)
    s = torch.tensor([0.5], device="cuda")
    amax = torch.full((1,), 3.0, device="cuda")
    z, y = at.cast_transpose(x, dst.name, scale=s, amax=amax, both=True)
    ref = _reference(torch, x, 0.5, dst)
    _assert_same(torch, z, ref, "z")
    _assert_same(torch, y, ref.transpose(-1, -2), "y")
    _same_amax(torch, amax, _amax_ref(torch, x, torch.full((1,), 3.0, device="cuda")))


@pytest.mark.parametrize("code", ["f32_e4m3", "bf16_e5m2", "f16_f16"])
@pytest.mark.parametrize(
    "x_offset, x_pad, y_offset, y_pad", [(3, 5, 1, 7), (1, 0, 0, 0), (0, 3, 5, 0), (8, 8, 16, 16)]
)
def test_pitched_and_offset_views_into_guarded_outputs(torch, rng, code, x_offset, x_pad, y_offset, y_pad):  # fmt: skip
    src, dst = cast.PAIRS[code]
    m, n = 389, 1203
    big = _input(torch, rng, (x_offset + m * (n + x_pad),), src, dst, 1.0)
    x = big[x_offset:].view(m, n + x_pad)[:, :n]
    dt = getattr(torch, dst.name)
    buf, out_t, span = _guarded(torch, (n, m), dt, y_offset, y_pad)
    zbuf, out, zspan = _guarded(torch, (m, n), dt, y_offset + 1, 0)
    z, y = at.cast_transpose(x, dt, out=out, out_t=out_t, both=True)
    assert y is out_t and z is out
    ref = _reference(torch, x, 1.0, dst)
    _assert_same(torch, y, ref.t())
    _assert_same(torch, z, ref, "z")
    _guard_intact(torch, buf, span)
    _guard_intact(torch, zbuf, zspan)


@pytest.mark.parametrize(
    "shape, axes",
    [
        ((8, 197, 12, 64), (0, 2, 1, 3)),  # the head swap: the innermost axis stays
        ((16, 3, 56, 56), (0, 2, 3, 1)),  # NCHW -> NHWC: fused to a batched transpose
        ((5, 6, 7, 33), (3, 1, 0, 2)),  # host loops
        ((3, 70, 5, 7), (1, 0, 3, 2)),  # 70 loops: two passes
        ((31, 4099), (0, 1)),  # a plain cast
    ],
)
def test_permutes(torch, rng, shape, axes):
    x = _input(torch, rng, shape, cast.BFLOAT16, cast.E4M3, 1.0)
    amax = torch.zeros(1, device="cuda")
    y = at.permute(x, axes, dtype=torch.float8_e4m3fn)
    _assert_same(torch, y, _reference(torch, x, 1.0, cast.E4M3).permute(axes).contiguous())
    z, y = at.cast_transpose(x, "e4m3", axes=axes, both=True, amax=amax)
    _assert_same(torch, z, _reference(torch, x, 1.0, cast.E4M3), "z")
    _same_amax(torch, amax, _amax_ref(torch, x, torch.zeros(1, device="cuda")))


def test_transpose_with_dtype_and_strided_x(torch, rng):
    x = _input(torch, rng, (300, 500), cast.FLOAT32, cast.BFLOAT16, 1.0)
    xt = x.t()  # a transposed view: its stride-1 axis is axis 0
    # transpose() of the transposed view is x itself, cast (saturating, as every cast here)
    want = _reference(torch, x, 1.0, cast.BFLOAT16)
    _assert_same(torch, at.transpose(xt, dtype=torch.bfloat16), want.contiguous())
    _assert_same(torch, at.transpose(x, dtype="bf16"), _reference(torch, x, 1.0, cast.BFLOAT16).t())


def test_nan_and_negative_priors_of_amax(torch):
    x = torch.tensor([[1.0, -7.0], [float("nan"), 2.0]], device="cuda")
    amax = torch.zeros(1, device="cuda")
    at.cast_transpose(x, "e4m3", amax=amax)
    assert torch.isnan(amax).all()
    amax = torch.full((1,), -5.0, device="cuda")
    at.cast_transpose(torch.zeros(3, 3, device="cuda"), "e4m3", amax=amax)
    assert amax.item() == 0.0
    amax = torch.full((1,), float("nan"), device="cuda")
    at.cast_transpose(torch.ones(3, 3, device="cuda"), "e4m3", amax=amax)
    assert torch.isnan(amax).all()


def test_compile_fullgraph_traces_the_op(torch, rng):
    torch._dynamo.reset()
    x = _input(torch, rng, (257, 1031), cast.BFLOAT16, cast.E4M3, 4.0)

    def f(x, s, amax):
        y = at.cast_transpose(x * 1, torch.float8_e4m3fn, scale=s, amax=amax)
        z, y2 = at.cast_transpose(x, torch.float8_e5m2, scale=2.0, both=True)
        return y, z, y2

    s = torch.tensor([4.0], device="cuda")
    a1, a2 = torch.zeros(1, device="cuda"), torch.zeros(1, device="cuda")
    compiled = torch.compile(f, fullgraph=True)
    y, z, y2 = compiled(x, s, a1)
    ey, ez, ey2 = f(x, s, a2)
    _assert_same(torch, y, ey)
    _assert_same(torch, z, ez, "z")
    _assert_same(torch, y2, ey2)
    _same_amax(torch, a1, a2)
    _assert_same(torch, y, _reference(torch, x, 4.0, cast.E4M3).t())
    explained = torch._dynamo.explain(f)(x, s, a1)
    assert explained.graph_break_count == 0, explained.break_reasons


def test_compile_with_out_buffers(torch, rng):
    torch._dynamo.reset()
    x = _input(torch, rng, (130, 70), cast.FLOAT32, cast.E4M3, 1.0)
    out_t = torch.empty(70, 130, dtype=torch.float8_e4m3fn, device="cuda")

    @torch.compile(fullgraph=True)
    def f(x, out_t):
        return at.cast_transpose(x, torch.float8_e4m3fn, out_t=out_t)

    f(x, out_t)
    _assert_same(torch, out_t, _reference(torch, x, 1.0, cast.E4M3).t())


def test_errors_at_trace_time_and_eagerly(torch):
    x = torch.zeros(4, 4, device="cuda", dtype=torch.float64)
    with pytest.raises(errors.UnsupportedDtypeError, match="reads"):
        at.cast_transpose(x, torch.float8_e4m3fn)
    # traced: the fake implementation raises the same message (Dynamo wraps the exception)
    with pytest.raises(Exception, match="reads float32, bfloat16, float16; x is float64"):
        torch.compile(lambda x: at.cast_transpose(x, torch.float8_e4m3fn), fullgraph=True)(x)
    x = torch.zeros(4, 4, device="cuda")
    with pytest.raises(errors.InputTypeError, match="one float32"):
        at.cast_transpose(x, "e4m3", amax=torch.zeros(2, device="cuda"))
    with pytest.raises(errors.InputTypeError, match="one float32"):
        at.cast_transpose(x, "e4m3", scale=torch.zeros(1, device="cuda", dtype=torch.float16))
    with pytest.raises(errors.DeviceError, match="amax is a PyTorch tensor on cpu"):
        at.cast_transpose(x, "e4m3", amax=torch.zeros(1))
    with pytest.raises(errors.OutputError, match="shape"):
        at.cast_transpose(
            x, "e4m3", out_t=torch.empty(4, 5, device="cuda", dtype=torch.float8_e4m3fn)
        )
    with pytest.raises(errors.OutputError, match="dtype"):
        at.cast_transpose(x, "e4m3", out_t=torch.empty(4, 4, device="cuda", dtype=torch.uint8))


def test_empty_arrays_launch_nothing(torch):
    amax = torch.full((1,), 2.0, device="cuda")
    y = at.cast_transpose(torch.zeros(0, 5, device="cuda"), "e5m2", amax=amax)
    assert y.shape == (5, 0) and amax.item() == 2.0


def test_cupy_and_pycuda_arrays(rng, pycuda_primary):
    cupy = pytest.importorskip("cupy")
    import ml_dtypes
    import pycuda.gpuarray as gpuarray

    vals = data.make_input(rng, (333, 517), cast.FLOAT32, cast.E4M3, 1.0)
    want = data.reference(vals, 1.0, cast.E4M3).T
    y = at.cast_transpose(cupy.asarray(vals), "e4m3")
    assert isinstance(y, cupy.ndarray)
    data.assert_same_bits(cupy.asnumpy(y).view(np.uint8), want, cast.E4M3)
    with np.errstate(over="ignore"):  # float32 values past float16's range become inf, meant
        half = vals.astype(np.float16)
    g = gpuarray.to_gpu(half)
    amax = gpuarray.to_gpu(np.zeros(1, np.float32))
    y = at.cast_transpose(g, ml_dtypes.bfloat16, amax=amax)
    assert isinstance(y, gpuarray.GPUArray)
    want = data.reference(half, 1.0, cast.BFLOAT16).T
    data.assert_same_bits(y.get().view(np.uint16), want, cast.BFLOAT16)
    assert amax.get()[0] == data.amax_reference(half) or np.isnan(amax.get()[0])


@pytest.mark.parametrize("code", PAIRS)
def test_batched_odd_sides(torch, rng, code):
    src, dst = cast.PAIRS[code]
    x = _input(torch, rng, (3, 67, 131), src, dst, 1.0)
    y = at.cast_transpose(x, dst.name, scale=1.0)
    _assert_same(torch, y, _reference(torch, x, 1.0, dst).transpose(1, 2))


@pytest.mark.parametrize("both", [False, True])
def test_a_repeated_eager_call_takes_the_fast_path_and_matches(torch, rng, both):
    """The second eager call of a signature launches from the fast path's hits (no validation on the
    way) and writes what the first wrote, on fresh data; an amax inside x, or another scale
    kind, goes the full way again."""

    at.clear_caches()
    m, n = int(rng.integers(100, 700)), int(rng.integers(100, 700))
    dst = cast.E4M3
    dt = torch.float8_e4m3fn
    s = torch.tensor([2.5], device="cuda")
    for round_ in range(3):
        x = _input(torch, rng, (m, n), cast.BFLOAT16, dst, 2.5)
        amax = torch.full((1,), 0.5, device="cuda")
        got = at.cast_transpose(x, dt, scale=s, amax=amax, both=both)
        y = got[1] if both else got
        _assert_same(torch, y, _reference(torch, x, 2.5, dst).t().contiguous())
        if both:
            _assert_same(torch, got[0], _reference(torch, x, 2.5, dst), "z")
        want = _amax_ref(torch, x, torch.tensor([0.5], device="cuda"))  # NaN where x has one
        torch.testing.assert_close(amax, want, rtol=0, atol=0, equal_nan=True)
        assert len(_cast_hits()) == 1, round_  # kept after the first call, used after
    y = at.cast_transpose(x, dt, scale=2.5, both=both)  # a float scale: a signature of its own
    _assert_same(torch, y[1] if both else y, _reference(torch, x, 2.5, dst).t().contiguous())
    assert len(_cast_hits()) == 2
    flat = torch.zeros(m * n + 4, device="cuda", dtype=torch.bfloat16)
    x2 = flat[: m * n].view(m, n)
    start = (m * n - 2) // 2 * 2  # a 4-byte aligned pair of x's last elements
    inside = flat[start : start + 2].view(torch.float32)  # an amax over x's own memory
    with pytest.raises(errors.OutputError, match="amax overlaps x"):
        at.cast_transpose(x2, dt, scale=s, amax=inside, both=both)


@pytest.mark.parametrize(
    "shape, axes", [((3, 4, 50, 60), (1, 0, 3, 2)), ((5, 6, 7, 40), (2, 0, 3, 1))]
)
@pytest.mark.parametrize("both", [False, True])
def test_repeated_permutes_of_several_launches_with_a_float_scale(
    torch, rng, monkeypatch, shape, axes, both
):
    """A permute whose plan is several launches at offsets, with a Python float scale that
    float32 rounds and an amax: validated once, then every repeat runs the launches as one
    program of coded addresses (the offsets added to each call's pointers, the scale written
    as its float32 bits, rounded as NumPy rounds it) and writes what torch's cast does."""
    from autotranspose.calls import cast as _cast
    from autotranspose.runtime import native as _native

    at.clear_caches()
    full = []
    on_device = _cast._on_device
    monkeypatch.setattr(_cast, "_on_device", lambda *a: full.append(1) or on_device(*a))
    dst, dt = cast.E5M2, torch.float8_e5m2
    for round_ in range(3):
        scale = float(rng.uniform(0.5, 4.0))  # a double: its float32 is what multiplies
        x = _input(torch, rng, shape, cast.FLOAT32, dst, scale)
        amax = torch.full((1,), 0.125, device="cuda")
        got = at.cast_transpose(x, dt, scale=scale, amax=amax, axes=axes, both=both)
        z, y = got if both else (None, got)
        ref = _reference(torch, x, float(np.float32(scale)), dst)
        _assert_same(torch, y, ref.permute(axes).contiguous())
        if both:
            _assert_same(torch, z, ref, "z")
        _same_amax(torch, amax, _amax_ref(torch, x, torch.full((1,), 0.125, device="cuda")))
        assert len(full) == 1 and len(_cast_hits()) == 1, round_
        hit = _cast_hits()[0]
        assert len(hit.launch.plan.launches) > 1
        assert (hit.program is not None) == (_native.launcher() is not None)


@pytest.mark.parametrize(
    "code, both, given",
    [
        ("bf16_e4m3", False, "out_t"),
        ("bf16_e5m2", True, "both"),
        ("f16_e4m3", True, "out"),
        ("f32_e4m3", True, "both"),
        ("f32_bf16", False, "out_t"),
    ],
)
def test_repeated_eager_calls_into_given_outputs_take_the_fast_path(
    torch, rng, monkeypatch, code, both, given
):
    """Calls into given buffers (pitched and offset views in poisoned memory) are validated
    once per signature, then launch from the fast path's hits: each repeat, on fresh data into
    re-poisoned buffers, writes what torch's cast does, bit for bit, and nothing around it."""
    from autotranspose.calls import cast as _cast

    at.clear_caches()
    full = []
    on_device = _cast._on_device
    monkeypatch.setattr(_cast, "_on_device", lambda *a: full.append(1) or on_device(*a))
    src, dst = cast.PAIRS[code]
    dt = getattr(torch, dst.name)
    m, n = int(rng.integers(300, 900)), int(rng.integers(300, 900))
    s = torch.tensor([2.0], device="cuda")
    ybuf, out_t, yspan = _guarded(torch, (n, m), dt, 16 // dst.size, 3)
    zbuf, out, zspan = _guarded(torch, (m, n), dt, 0, 5)
    kw = {"out_t": out_t if given in ("out_t", "both") else None}
    if both:
        kw["out"] = out if given in ("out", "both") else None
    for round_ in range(4):
        x = _input(torch, rng, (m, n), src, dst, 2.0)
        ybuf.fill_(POISON)
        zbuf.fill_(POISON)
        amax = torch.full((1,), 0.25, device="cuda")
        got = at.cast_transpose(x, dt, scale=s, amax=amax, both=both, **kw)
        y, z = (got[1], got[0]) if both else (got, None)
        ref = _reference(torch, x, 2.0, dst)
        _assert_same(torch, y, ref.t())
        if kw["out_t"] is not None:
            assert y is out_t
            _guard_intact(torch, ybuf, yspan)
        if both:
            _assert_same(torch, z, ref, "z")
            if kw.get("out") is not None:
                assert z is out
                _guard_intact(torch, zbuf, zspan)
        _same_amax(torch, amax, _amax_ref(torch, x, torch.full((1,), 0.25, device="cuda")))
        assert len(full) == 1 and len(_cast_hits()) == 1, round_  # validated once, then hits


def test_calls_into_given_outputs_that_differ_or_overlap_are_validated_again(torch, rng):
    """A signature seen before does not excuse a call: outputs overlapping x, each other or
    amax raise as on the first call; another dtype or layout is a signature of its own and
    is checked (and raises) in full."""

    at.clear_caches()
    m, n = 256, 384
    dt = torch.float8_e4m3fn
    x = _input(torch, rng, (m, n), cast.BFLOAT16, cast.E4M3, 1.0)
    out_t, out = (
        torch.empty(n, m, device="cuda", dtype=dt),
        torch.empty(m, n, device="cuda", dtype=dt),
    )
    at.cast_transpose(x, dt, out_t=out_t, out=out, both=True)
    at.cast_transpose(x, dt, out_t=out_t)
    at.cast_transpose(x, dt, out_t=out_t, amax=torch.zeros(1, device="cuda"))
    assert len(_cast_hits()) == 3
    # the same signatures (shapes, strides, dtypes, 16-byte alignment), memory shared
    raw = torch.empty(4 * m * n, device="cuda", dtype=torch.uint8)
    x2 = raw[: 2 * m * n].view(torch.bfloat16).view(m, n)
    x2.copy_(x)
    inside_x = raw[m * n : 2 * m * n].view(dt).view(n, m)
    with pytest.raises(errors.OutputError, match="overlaps x"):
        at.cast_transpose(x2, dt, out_t=inside_x)
    spare = raw[2 * m * n :].view(dt)
    with pytest.raises(errors.OutputError, match="out and out_t overlap"):
        at.cast_transpose(x, dt, out_t=spare[: m * n].view(n, m), out=spare[m * n // 2 :][: m * n].view(m, n), both=True)  # fmt: skip
    amax_in_out = spare[:4].view(torch.float32)
    with pytest.raises(errors.OutputError, match="amax overlaps out_t"):
        at.cast_transpose(x, dt, out_t=spare[: m * n].view(n, m), amax=amax_in_out)
    with pytest.raises(errors.OutputError, match="dtype"):
        at.cast_transpose(x, dt, out_t=torch.empty(n, m, device="cuda", dtype=torch.float8_e5m2))
    with pytest.raises(errors.LayoutError, match="no axis of stride 1"):
        at.cast_transpose(x, dt, out_t=torch.empty(n, 2 * m, device="cuda", dtype=dt)[:, ::2])
    # a transposed view as out_t: a signature of its own, right on every call
    for _ in range(2):
        x3 = _input(torch, rng, (m, n), cast.BFLOAT16, cast.E4M3, 1.0)
        t_view = torch.empty(m, n, device="cuda", dtype=dt).t()
        y = at.cast_transpose(x3, dt, out_t=t_view)
        assert y is t_view
        _assert_same(torch, y, _reference(torch, x3, 1.0, cast.E4M3).t())
    # and the calls seen first still run straight through
    at.cast_transpose(x, dt, out_t=out_t)
    _assert_same(torch, out_t, _reference(torch, x, 1.0, cast.E4M3).t())


@pytest.fixture
def own_store(monkeypatch, tmp_path):
    """The default tuning database in tmp_path (created: first calls record their winners
    there), and every cache dropped before and after."""
    from autotranspose.store import Store, urls

    path = tmp_path / "tuning.db"
    Store.open(path).close()
    monkeypatch.setenv(urls.ENV_VAR, f"sqlite:///{path}")
    at.clear_caches()
    yield path
    at.clear_caches()


def test_a_result_recorded_in_this_process_serves_the_next_call(torch, rng, own_store):
    """A cast signature prepared before a tuning result for its class arrives (a `tune
    --cast` or a record in this process) is chosen again: the next call, fast path or not,
    runs the recorded config, and still writes the right bits."""
    from autotranspose.dispatch import cast as cast_dispatch
    from autotranspose.kernels.config import KernelConfig
    from autotranspose.runtime.compiler import activate
    from autotranspose.store import Store
    from autotranspose.store.measurement import Measurement

    at.set_first_call_measurement(False)
    try:
        src, dst = cast.BFLOAT16, cast.E4M3
        m, n = int(rng.integers(300, 900)), int(rng.integers(300, 900))
        x = _input(torch, rng, (m, n), src, dst, 1.0)
        want = _reference(torch, x, 1.0, dst).t().contiguous()
        _assert_same(torch, at.cast_transpose(x, torch.float8_e4m3fn), want)
        (first,) = _cast_launches().values()
        assert first.config == cast.default(KernelConfig, src, dst)
        info = activate(torch.cuda.current_device()).info
        variants = [
            c for c in cast.space(KernelConfig, src, dst)
            if c != first.config and c.fits(info.limits)
        ]  # fmt: skip
        tuned = variants[int(rng.integers(len(variants)))]
        cls = cast_dispatch.cast_class(first.plan, src, x.data_ptr())
        copy = float(rng.uniform(2000, 3000))
        with Store.open(own_store) as store:
            store.record(
                None, info, "bfloat16", 2, (1, m, n), cls, tuned,
                Measurement("ok", 0.9 * copy, copy, 10.0), problem=cast.problem(tuned.params.pair),
            )  # fmt: skip
        for _ in range(2):  # the full path once, then the fast path
            x = _input(torch, rng, (m, n), src, dst, 1.0)
            got = at.cast_transpose(x, torch.float8_e4m3fn)
            _assert_same(torch, got, _reference(torch, x, 1.0, dst).t().contiguous())
            assert [p.config for p in _cast_launches().values()] == [tuned]
        assert len(_cast_hits()) == 1
    finally:
        at.set_first_call_measurement(None)


@pytest.mark.parametrize("code, both", [("f32_e4m3", True), ("bf16_e5m2", False)])
def test_a_first_call_measures_keeps_and_records_its_winner(torch, rng, own_store, code, both):
    """The first call of an untuned cast class times the default and its candidates on the
    call's own buffers: the winner is one of them, serves the class's later calls in this
    process, is recorded under the pair's problem as measured, and every call writes the
    right bits and amax."""
    from autotranspose.dispatch import cast as cast_dispatch, lookup
    from autotranspose.kernels.config import KernelConfig
    from autotranspose.runtime.compiler import activate
    from autotranspose.store import Store

    at.set_first_call_measurement(True)
    try:
        src, dst = cast.PAIRS[code]
        dt = getattr(torch, dst.name)
        m, n = int(rng.integers(1500, 3000)) | 1, int(rng.integers(1500, 3000)) | 1
        for _ in range(2):
            x = _input(torch, rng, (m, n), src, dst, 2.0)
            amax = torch.zeros(1, device="cuda")
            got = at.cast_transpose(x, dt, scale=2.0, amax=amax, both=both)
            y = got[1] if both else got
            _assert_same(torch, y, _reference(torch, x, 2.0, dst).t().contiguous())
            if both:
                _assert_same(torch, got[0], _reference(torch, x, 2.0, dst), "z")
            _same_amax(torch, amax, _amax_ref(torch, x, torch.zeros(1, device="cuda")))
            (prep,) = _cast_launches().values()
        info = activate(torch.cuda.current_device()).info
        # what this GPU races: the default, the candidates and the wide tiles its limits allow
        assert prep.config in cast.race_candidates(KernelConfig, src, dst, info.limits)
        cls = cast_dispatch.cast_class(prep.plan, src, x.data_ptr())
        choice = lookup.cast_choice(info, code, cls, both=both, aligned_out=False)
        assert (choice.source, choice.config) == ("measured", prep.config)
        with Store.open(own_store) as store:
            best = store.best(info.name, src.size, cls, cast.problem(code, both))
        assert best is not None and best.source == "measured" and best.config == prep.config
    finally:
        at.set_first_call_measurement(None)


def test_first_calls_recorded_into_a_database_keep_every_prepared_signature(
    torch, rng, own_store, monkeypatch
):
    """With a tuning database to record into (a user who ran `tune`), the first call of each
    new cast class records its winner there. That drops nothing this process prepared: every
    signature's full path runs once, its hit and its config are kept however many classes
    are measured after it, and each class's recorded winner is what its calls run."""
    from autotranspose.calls import cast as _cast
    from autotranspose.dispatch import cast as cast_dispatch, lookup
    from autotranspose.runtime.compiler import activate
    from autotranspose.store import Store

    monkeypatch.setattr(lookup, "tuning_db_dir", lambda: None)  # every class untuned
    at.set_first_call_measurement(True)
    full = []
    on_device = _cast._on_device
    monkeypatch.setattr(_cast, "_on_device", lambda *a: full.append(1) or on_device(*a))
    try:
        src, dst, dt = cast.BFLOAT16, cast.E4M3, torch.float8_e4m3fn
        shapes = [  # three classes apart by their sides
            (int(rng.integers(300, 500)) | 1, int(rng.integers(600, 1000)) | 1),
            (int(rng.integers(1100, 1900)) | 1, int(rng.integers(300, 500)) | 1),
            (int(rng.integers(2500, 3800)) | 1, int(rng.integers(2500, 3800)) | 1),
        ]
        generation = lookup.generation
        prepared = {}
        for round_ in range(3):
            for shape in shapes:
                scale = float(rng.uniform(0.5, 4.0))
                x = _input(torch, rng, shape, src, dst, scale)
                y = at.cast_transpose(x, dt, scale=scale)
                want = _reference(torch, x, float(np.float32(scale)), dst).t().contiguous()
                _assert_same(torch, y, want)
            assert len(full) == len(shapes) and len(_cast_hits()) == len(shapes), round_
            now = {k: p.config for k, p in _cast_launches().items()}
            assert len(now) == len(shapes) and all(prepared.get(k, c) == c for k, c in now.items())
            prepared = now
        assert lookup.generation == generation
        info = activate(torch.cuda.current_device()).info
        with Store.open(own_store) as store:
            for prep in _cast_launches().values():
                cls = cast_dispatch.cast_class(prep.plan, src, 0)
                best = store.best(info.name, src.size, cls, cast.problem("bf16_e4m3", False))
                assert best is not None and best.source == "measured"
                assert best.config == prep.config
    finally:
        at.set_first_call_measurement(None)

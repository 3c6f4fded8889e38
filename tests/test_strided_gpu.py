"""Layouts and dtypes past the matrix kernels' on a GPU, against PyTorch bit for bit on fresh
random bytes: inputs with no axis of stride 1 (a 1-D stride-2 view, z.real, x[..., ::2]),
broadcast (expand) inputs, outputs whose innermost stride is not 1 (their gaps untouched),
through permute() and transpose() (conjugate too); every dtype of 1 to 16 bytes PyTorch has
(complex32, float8, float4, uint16-64) through both; the refusals that remain (an output
that overlaps itself, complex32's conjugate, negative strides) with their messages."""

from __future__ import annotations

import pytest

import autotranspose as at
from autotranspose import errors

pytestmark = pytest.mark.gpu

POISON = 0x5A


def _raw(torch, t):
    size = t.element_size()
    return t.view(
        {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(size, torch.complex128)
    )


def _bits(torch, t):
    """`t`'s bytes in logical order (conjugated views resolved first)."""
    t = t.resolve_conj() if t.is_conj() else t
    return _raw(torch, t).contiguous().reshape(-1).view(torch.uint8)


def _random(torch, shape, dtype):
    e = torch.empty((), dtype=dtype).element_size()
    b = torch.randint(0, 256, (*shape, e), dtype=torch.uint8, device="cuda")
    return b.view(dtype).reshape(shape)


def _conj(torch, t):
    """`t` conjugated as the kernels conjugate: the imaginary halves' sign bits flipped, every
    other bit kept (torch's conj computes -imag, which may give NaNs of random bytes another
    payload)."""
    half = {8: torch.int32, 16: torch.int64}[t.element_size()]
    parts = t.contiguous().view(half).reshape(*t.shape, 2).clone()
    parts[..., 1] ^= torch.iinfo(half).min  # the sign bit alone
    return parts.reshape(*t.shape[:-1], 2 * t.shape[-1]).view(t.dtype)


def _same(torch, got, want) -> bool:
    return (
        got.shape == want.shape
        and got.dtype == want.dtype
        and torch.equal(_bits(torch, got), _bits(torch, want))
    )


def _gappy_out(torch, shape, dtype):
    """An out of `shape` whose every axis is at a step of 2 inside a poisoned buffer, and
    that buffer (to check the gaps stay poisoned)."""
    big = _random(torch, tuple(2 * n for n in shape), dtype)
    _raw(torch, big).view(torch.uint8).fill_(POISON)
    return big, big[(slice(None, None, 2),) * len(shape)]


def _gaps_untouched(torch, big, out) -> bool:
    mask = torch.ones(big.shape, dtype=torch.bool, device="cuda")
    mask[(slice(None, None, 2),) * big.dim()] = False
    raw = _raw(torch, big).view(torch.uint8).reshape(*big.shape, -1)
    return bool((raw[mask] == POISON).all())


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "complex64", "complex128"])
def test_inputs_without_a_stride_one_axis(torch, dtype):
    dt = getattr(torch, dtype)
    v = _random(torch, (2 * 4097,), dt)[::2]  # a 1-D stride-2 view
    assert v.stride() == (2,)
    assert _same(torch, at.permute(v, (0,)), v)
    x = _random(torch, (6, 40, 2 * 33), dt)[..., ::2]  # x[..., ::2]: strides (2640, 66, 2)
    for axes in [(2, 0, 1), (1, 0, 2), (0, 2, 1), (2, 1, 0)]:
        for _ in range(2):  # the first call, then the fast path's
            assert _same(torch, at.permute(x, axes), x.permute(axes)), axes
    m = x[0]
    assert _same(torch, at.transpose(m), m.t())
    assert _same(torch, at.transpose(x), x.transpose(1, 2))
    if dt.is_complex:
        z = _random(torch, (37, 45), dt)
        for part in (z.real, z.imag):  # stride 2 on the innermost axis
            assert _same(torch, at.transpose(part), part.t())
            assert _same(torch, at.permute(part, (1, 0)), part.t())
        assert _same(torch, at.transpose(x, conjugate=True), _conj(torch, x.transpose(1, 2)))
        assert _same(torch, at.transpose(m, conjugate=True), _conj(torch, m.t()))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "uint8", "float64"])
def test_broadcast_inputs(torch, dtype):
    dt = getattr(torch, dtype)
    s = _random(torch, (), dt).expand(5, 7)  # a broadcast scalar: strides (0, 0)
    assert _same(torch, at.transpose(s), s.t())
    assert _same(torch, at.permute(s, (1, 0)), s.t())
    col = _random(torch, (300, 1), dt).expand(300, 129)  # strides (1, 0)
    assert _same(torch, at.transpose(col), col.t())
    row = _random(torch, (1, 3, 257), dt).expand(4, 3, 257)  # a stride-1 axis: as before
    for axes in [(2, 1, 0), (1, 0, 2), (0, 2, 1)]:
        assert _same(torch, at.permute(row, axes), row.permute(axes))
    b = _random(torch, (3, 1, 5), dt).expand(3, 8, 5)[..., ::2]  # broadcast and no stride 1
    assert _same(torch, at.permute(b, (2, 0, 1)), b.permute(2, 0, 1))


@pytest.mark.parametrize("dtype", ["float32", "int16", "complex64", "uint8"])
def test_outputs_without_a_stride_one_axis(torch, dtype):
    dt = getattr(torch, dtype)
    x = _random(torch, (37, 129), dt)
    big, out = _gappy_out(torch, (129, 37), dt)
    assert at.transpose(x, out) is out
    assert _same(torch, out, x.t()) and _gaps_untouched(torch, big, out)
    y = _random(torch, (4, 9, 33), dt)
    big, out = _gappy_out(torch, (33, 4, 9), dt)
    assert at.permute(y, (2, 0, 1), out) is out
    assert _same(torch, out, y.permute(2, 0, 1)) and _gaps_untouched(torch, big, out)
    gx = y[..., ::2]  # and an input without one either
    big, out = _gappy_out(torch, (gx.shape[0], gx.shape[2], gx.shape[1]), dt)
    assert at.transpose(gx, out) is out
    assert _same(torch, out, gx.transpose(1, 2)) and _gaps_untouched(torch, big, out)
    if dt.is_complex:
        big, out = _gappy_out(torch, (129, 37), dt)
        assert at.transpose(x, out, conjugate=True) is out
        assert _same(torch, out, _conj(torch, x.t())) and _gaps_untouched(torch, big, out)


def test_conjugate_of_a_strided_view_on_an_explicit_stream(torch):
    z = _random(torch, (3, 50, 2 * 61), torch.complex64)[..., ::2]
    s = torch.cuda.Stream()
    torch.cuda.synchronize()  # z is written on the default stream
    y = at.transpose(z, stream=s)  # the copies are released only once s has read them
    s.synchronize()
    assert _same(torch, y, z.transpose(1, 2))
    y = at.transpose(z, conjugate=True, stream=s)
    s.synchronize()
    assert _same(torch, y, _conj(torch, z.transpose(1, 2)))


def test_outputs_that_overlap_themselves_are_refused_untouched(torch):
    x = _random(torch, (6, 5), torch.float32)
    out = torch.zeros(1, 6, device="cuda").expand(5, 6)  # stride 0: writes would race
    for call in (lambda: at.transpose(x, out), lambda: at.permute(x, (1, 0), out)):
        with pytest.raises(errors.LayoutError, match="overlap"):
            call()
    assert not out.any()


NEW_DTYPES = [
    "complex32",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn_x2",
    "uint16",
    "uint32",
    "uint64",
]


@pytest.mark.parametrize("name", NEW_DTYPES)
def test_every_dtype_of_a_kernel_size(torch, name):
    """Dtypes that went by a list of names before: moved by their size, as their bytes."""
    dt = getattr(torch, name, None)
    if dt is None:
        pytest.skip(f"this PyTorch has no {name}")
    x = _random(torch, (3, 67, 130), dt)
    for axes in [(2, 0, 1), (0, 2, 1), (1, 0, 2)]:
        assert _same(torch, at.permute(x, axes), x.permute(axes)), axes
    assert _same(torch, at.transpose(x), x.transpose(1, 2))
    assert _same(torch, at.transpose(x[0]), x[0].t())
    g = x[..., ::2]  # and without a stride-1 axis
    assert _same(torch, at.permute(g, (2, 1, 0)), g.permute(2, 1, 0))
    out = torch.empty(130, 3, 67, device="cuda", dtype=dt)
    assert at.permute(x, (2, 0, 1), out) is out and _same(torch, out, x.permute(2, 0, 1))


def test_complex32_conjugate_is_refused_with_the_bit_flip_to_use(torch):
    z = _random(torch, (7, 9), torch.complex32)
    with pytest.raises(errors.UnsupportedDtypeError, match=r"complex32.*bitwise_xor_"):
        at.transpose(z, conjugate=True)
    y = at.transpose(z)  # what the message says to do instead
    y.view(torch.int32).bitwise_xor_(-(2**31))
    want = _raw(torch, z.t()).contiguous()
    want.view(torch.int32).bitwise_xor_(-(2**31))  # the imaginary float16's sign bit
    assert torch.equal(_bits(torch, y), want.reshape(-1).view(torch.uint8))


def test_quantized_dtypes_are_refused(torch):
    q = torch.quantize_per_tensor(torch.randn(4, 5), 0.1, 0, torch.qint8)
    with pytest.raises(errors.UnsupportedDtypeError, match="quantized"):
        at.permute(q, (1, 0))


def test_fake_implementations_take_strided_layouts(torch):
    """torch.compile's view of a call (the fake implementations) takes what the eager call
    takes: no stride-1 axis in, a strided out."""
    ops = torch.ops.autotranspose
    # finite values: opcheck and the compiled call compare values, and random bytes hold NaNs
    x = torch.randn(4, 6, 10, device="cuda")[..., ::2]
    torch.library.opcheck(ops.permute.default, (x, [2, 0, 1]))
    torch.library.opcheck(ops.transpose.default, (x, False))
    torch._dynamo.reset()
    f = torch.compile(lambda a: at.permute(a, (2, 0, 1)) * 2, fullgraph=True)
    assert torch.equal(f(x), x.permute(2, 0, 1) * 2)


def test_cupy_strided_inputs_and_negative_strides(torch):
    cupy = pytest.importorskip("cupy")
    import numpy as np

    x = cupy.asarray(np.random.default_rng().standard_normal((5, 8, 12)).astype(np.float32))
    g = x[:, ::2, ::3]
    want = np.transpose(cupy.asnumpy(g), (2, 0, 1))
    assert np.array_equal(cupy.asnumpy(at.permute(g, (2, 0, 1))), want)
    assert np.array_equal(cupy.asnumpy(at.transpose(g)), np.swapaxes(cupy.asnumpy(g), 1, 2))
    with pytest.raises(errors.LayoutError, match="negative"):
        at.permute(x[:, ::-1], (2, 0, 1))

"""The cast kernels' own CUDA code run on the CPU (tests/_emu.py): every pair, odd
shapes, pitched rows and pointer offsets at every alignment, batches, the same-order output,
permutes, scales and amax, against NumPy's cast bit for bit, with the bytes around every
output untouched. The kernels' device-only parts (hardware float8 conversion on sm_89+) are
checked by tests/test_cast_gpu.py."""

from __future__ import annotations

import _cast_data as data
import _emu as emu
import numpy as np
import pytest

from autotranspose.dispatch import caches
from autotranspose.dispatch.lru import LRU
from autotranspose.kernels.config import KernelConfig
from autotranspose.kinds import cast

pytestmark = pytest.mark.skipif(emu.gxx() is None, reason="needs g++ and CUDA's headers")

POISON = 0xA5
PAIRS = sorted(cast.PAIRS)


class Guarded:
    """A strided view placed `offset` elements into a poisoned byte buffer."""

    def __init__(self, shape, fmt, strides=None, offset=0, margin=64):
        itemsize = fmt.size
        if strides is None:
            strides = [1] * len(shape)
            for k in range(len(shape) - 2, -1, -1):
                strides[k] = strides[k + 1] * max(shape[k + 1], 1)
        span = sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + 1 if shape else 1
        self.start = margin + offset * itemsize
        self.buf = emu.shared(self.start + span * itemsize + margin)
        self.buf[...] = POISON
        self.view = np.ndarray(
            tuple(shape),
            data.np_type(fmt),
            self.buf,
            self.start,
            tuple(s * itemsize for s in strides),
        )
        touched = np.zeros(self.buf.size, dtype=bool)
        idx = np.lib.stride_tricks.as_strided(
            np.arange(self.buf.size - self.start, dtype=np.int64),
            shape=tuple(shape),
            strides=tuple(s * itemsize * 8 for s in strides),
        )
        for b in range(itemsize):
            touched[self.start + idx.ravel() + b] = True
        self.touched = touched

    def untouched_ok(self) -> bool:
        return bool((self.buf[~self.touched] == POISON).all())


def _check(cfg, shape, axes=None, *, x_strides=None, x_off=0, y_pad=0, y_off=0, both=False,
           z_off=0, scale=1.0, scale_on_device=False, amax_prior=None, seed=0, x_fill=None):  # fmt: skip
    """`x_fill`: a value x's buffer holds outside x (between pitched rows, before and after);
    x's own values are then finite and under half of it, so that an amax that folded any of
    the fill would show it."""
    src, dst = cast.PAIRS[cfg.params.pair]
    rng = np.random.default_rng(seed)
    ndim = len(shape)
    axes = tuple(axes) if axes is not None else (*range(ndim - 2), ndim - 1, ndim - 2)
    xg = Guarded(shape, src, x_strides, x_off)
    if x_fill is not None:
        whole = xg.buf.size // src.size * src.size
        xg.buf[:whole].view(data.np_type(src))[...] = x_fill
    values = data.make_input(rng, shape, src, dst, scale)
    if x_fill is not None:
        wide = values.astype(np.float32)
        bound = abs(x_fill) / 2
        values = np.clip(np.where(np.isfinite(wide), wide, 0), -bound, bound).astype(values.dtype)
    xg.view[...] = values
    out_shape = tuple(shape[a] for a in axes)
    strides = [1] * len(out_shape)
    for k in range(len(out_shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * (out_shape[k + 1] + (y_pad if k == len(out_shape) - 2 else 0))
    yg = Guarded(out_shape, dst, strides, y_off)
    zg = Guarded(shape, dst, None, z_off) if both else None
    sc = scale
    if scale_on_device:
        sc = emu.shared(4).view(np.float32)
        sc[0] = scale
    amax = None
    if amax_prior is not None:
        amax = emu.shared(4).view(np.float32)
        amax[0] = amax_prior
    x_before = xg.buf.copy()
    emu.cast_call(cfg, xg.view, axes, yg.view, zg.view if zg else None, sc, amax)
    want = data.reference(np.transpose(xg.view, axes), scale, dst)
    data.assert_same_bits(yg.view, want, dst, "y")
    assert yg.untouched_ok(), "a byte outside y changed"
    assert (xg.buf == x_before).all(), "x changed"
    if zg is not None:
        data.assert_same_bits(zg.view, data.reference(xg.view, scale, dst), dst, "z")
        assert zg.untouched_ok(), "a byte outside z changed"
    if amax is not None:
        want_amax = data.amax_reference(xg.view, amax_prior)
        if np.isnan(want_amax):
            assert np.isnan(amax[0])
        else:
            assert amax[0] == want_amax, (amax[0], want_amax)


@pytest.mark.parametrize("code", PAIRS)
def test_every_pair_casts_odd_shapes_bit_for_bit(code):
    """Rows and pitches at every alignment (odd sides), full and cut tiles, in one call."""
    src, dst = cast.PAIRS[code]
    cfg = cast.default(KernelConfig, src, dst, aligned_out=False)
    _check(cfg, (131, 70), scale=2.0, amax_prior=0.0, both=True)


@pytest.mark.parametrize("code", ["f32_e4m3", "bf16_e5m2", "f16_bf16", "bf16_f16"])
@pytest.mark.parametrize(
    "shape, kw",
    [
        ((7, 197), {}),
        ((64, 128), {}),  # whole aligned tiles: the vector paths alone
        ((3, 33, 40), {}),  # a batch
        ((2, 20, 37), {"x_strides": (1500, 41, 1), "x_off": 3, "y_pad": 5, "y_off": 1}),
        ((45, 66), {"x_off": 1, "y_off": 7, "both": True, "z_off": 3}),
        ((30, 50), {"scale": 0.0078125, "scale_on_device": True, "amax_prior": 1e30}),
        ((30, 50), {"scale": 3.7, "amax_prior": -1.0}),
        ((37, 20), {"x_strides": (1, 37), "both": True}),  # x is a transposed view
        ((45, 67), {"both": True}),  # z from registers, rows at every offset
        ((33, 130), {"x_off": 3, "z_off": 3, "y_off": 1, "both": True}),  # the same, shifted
        ((40, 5), {"x_off": 2, "z_off": 2, "both": True}),  # rows shorter than a word
    ],
    ids=[
        "odd",
        "aligned",
        "batch",
        "strided",
        "offsets-both",
        "scale-tensor",
        "scale-float",
        "x-transposed",
        "odd-both",
        "z-at-x-offsets",
        "narrow-both",
    ],
)
def test_layouts(code, shape, kw):
    src, dst = cast.PAIRS[code]
    _check(cast.default(KernelConfig, src, dst), shape, **kw)


@pytest.mark.parametrize("code", ["f32_e4m3", "bf16_e5m2", "f16_bf16", "f32_f16"])
@pytest.mark.parametrize("odd_m", [False, True])
def test_interior_tiles_of_aligned_rows_beside_edge_tiles(code, odd_m):
    """Two tiles each way whole and a cut third: the whole ones of x's word-aligned rows run
    the specialised branch (the tile's extent and the rows' offsets constants), the cut ones
    the general one, in one launch; the transposed rows aligned or odd, z written too."""
    src, dst = cast.PAIRS[code]
    cfg = cast.default(KernelConfig, src, dst)
    m = 2 * cfg.tile_m + (3 if odd_m else 16)
    n = 2 * cfg.tile_n + 16 // src.size + 8  # aligned rows: 16-byte pitches
    assert n * src.size % 16 == 0
    _check(cfg, (m, n), scale=2.0, amax_prior=0.0, both=True)
    _check(cfg, (2, m, n), scale=4.0)


@pytest.mark.parametrize("code", ["f32_e4m3", "bf16_e5m2", "f16_bf16", "f32_f16"])
@pytest.mark.parametrize("pitch", [3, 5])
def test_inner_tiles_of_rows_off_their_word_boundary_fold_only_the_matrix(code, pitch):
    """realign=True: the whole tiles past the matrix's first column whose rows start off a
    word boundary run a function of their own, without edge tests, beside the tiles of the
    first column and the cut ones; x's rows pitched past their end with a large value between
    them (and before the first), which no amax may fold; y odd, z written too."""
    src, dst = cast.PAIRS[code]
    cfg = cast.default(KernelConfig, src, dst).replace(realign=True)
    m, n = 2 * cfg.tile_m + 5, 3 * cfg.tile_n + cfg.vec + 3
    big = 60000.0 if src.size == 2 and src.name == "float16" else 1e30
    for both in (False, True):
        _check(cfg, (m, n), x_strides=(n + pitch, 1), x_off=1, y_off=1, both=both,
               amax_prior=0.0, x_fill=big, scale=0.5)  # fmt: skip
    _check(cfg, (2, m, n), x_strides=(m * (n + pitch) + 1, n + pitch, 1), amax_prior=0.0,
           x_fill=-big)  # fmt: skip


def test_nan_in_the_prior_amax_stays():
    cfg = cast.default(KernelConfig, cast.FLOAT32, cast.E4M3)
    _check(cfg, (9, 9), amax_prior=float("nan"))


@pytest.mark.parametrize(
    "shape, axes",
    [
        ((4, 6, 5, 33), (0, 2, 1, 3)),  # the innermost axis stays: a strided cast
        ((3, 4, 37), (2, 0, 1)),  # fused to a transpose of (12, 37)
        ((2, 3, 5, 7), (3, 1, 2, 0)),  # host loops
        ((5, 7), (0, 1)),  # a plain cast
    ],
)
def test_permutes(shape, axes):
    cfg = cast.default(KernelConfig, cast.BFLOAT16, cast.E4M3)
    _check(cfg, shape, axes, amax_prior=0.0)
    _check(cfg, shape, axes, both=True, x_off=1)


@pytest.mark.parametrize(
    "fields",
    [
        {"tile_m": 64, "tile_n": 32, "per_thread": 2},
        {"tile_m": 32, "tile_n": 128, "per_thread": 8, "raster": "col"},
        {"tile_m": 256, "tile_n": 64, "per_thread": 8, "vec": 4, "cache": "stream"},
    ],
)
def test_other_configs(fields):
    base = cast.default(KernelConfig, cast.BFLOAT16, cast.BFLOAT16)
    cfg = base.replace(**fields)
    _check(cfg, (300, 150), x_off=3, y_off=2, both=True, amax_prior=0.0)
    _check(cfg, (2, 64, 64))


# --- the whole call, its GPU standing in for the emulator ---------------------------------------
class HostCuda:
    """A NumPy view (in shared memory) presented as a GPU array by __cuda_array_interface__."""

    def __init__(self, view: np.ndarray, typestr: str | None = None):
        self.view = view
        self.__cuda_array_interface__ = {
            "shape": view.shape,
            "typestr": typestr or view.dtype.str,
            "data": (emu.address(view), False),
            "strides": view.strides,
            "version": 3,
        }


@pytest.fixture
def emulated_gpu(monkeypatch):
    """cast_transpose() with its driver calls answered here and its launches run by the
    emulator: what it validates, plans, chooses and packs is the real code's."""
    import contextlib
    import types

    from autotranspose.calls import cast as _cast
    from autotranspose.dispatch import firstcall
    from autotranspose.kinds.base import NEWEST
    from autotranspose.runtime import arrays as _arrays, driver as _driver

    info = types.SimpleNamespace(limits=NEWEST, name="emulated GPU")
    state = types.SimpleNamespace(info=info, ordinal=0, arch="sm_90")
    kernels: dict[int, KernelConfig] = {}
    ran: list[tuple[str, int]] = []

    def get_kernel(_state, cfg):
        kernels[id(cfg)] = cfg
        return types.SimpleNamespace(handle=id(cfg))

    def launch(args, stream, params):
        cfg = kernels[args[0].value]
        ran.append((cfg.key, args[1].value))
        emu.run(cfg, params, args[1].value)

    monkeypatch.setattr(_arrays, "_owner", lambda s, what: (0, None))
    monkeypatch.setattr(_cast, "call_target", lambda xv, given: (state, 1, None))
    monkeypatch.setattr(_cast, "get_kernel", get_kernel)
    monkeypatch.setattr(_driver, "kernel_function", lambda handle, ctx: handle)
    monkeypatch.setattr(_driver, "on_context", lambda ctx: contextlib.nullcontext())
    monkeypatch.setattr(_driver, "launch", launch)
    monkeypatch.setattr(_driver, "current", lambda: None)
    monkeypatch.setattr(caches, "launches", LRU(caches.LIMIT))  # a fresh, empty one
    # a first call would time candidates with CUDA events: lookup's choice serves here
    monkeypatch.setattr(firstcall, "enabled", lambda: False)
    return ran


def _shared_like(shape, dtype, fill=POISON):
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = emu.shared(n)
    buf[...] = fill
    return buf[:n].view(dtype).reshape(shape) if n else np.empty(shape, dtype)


@pytest.mark.parametrize("src", [cast.FLOAT32, cast.FLOAT16])
@pytest.mark.parametrize("dst", [cast.E4M3, cast.E5M2, cast.BFLOAT16, cast.FLOAT16])
def test_the_call_end_to_end(emulated_gpu, src, dst):
    import autotranspose as at

    rng = np.random.default_rng()
    x = _shared_like((2, 45, 70), data.np_type(src))
    x[...] = data.make_input(rng, x.shape, src, dst, 4.0)
    bits = data.BITS[dst.size]
    y = _shared_like((2, 70, 45), bits)
    z = _shared_like((2, 45, 70), bits)
    amax = _shared_like((1,), np.float32, 0)
    amax[...] = 0
    scale = _shared_like((1,), np.float32, 0)
    scale[...] = 4.0
    got = at.cast_transpose(
        HostCuda(x), dst.name, scale=HostCuda(scale), amax=HostCuda(amax),
        out_t=HostCuda(y), out=HostCuda(z), both=True,
    )  # fmt: skip
    assert got[1].view is y and got[0].view is z
    want = data.reference(x, 4.0, dst)
    data.assert_same_bits(z, want, dst, "z")
    data.assert_same_bits(y, np.transpose(want, (0, 2, 1)), dst, "y")
    want_amax = data.amax_reference(x)
    assert (np.isnan(amax[0]) and np.isnan(want_amax)) or amax[0] == want_amax
    assert len(emulated_gpu) == 1  # one pass


def test_a_permute_of_many_loops_takes_two_passes(emulated_gpu, monkeypatch):
    import autotranspose as at
    from autotranspose.calls import cast as _cast

    seen = []
    monkeypatch.setattr(_cast, "_allocate", lambda xv, shape, dst, ctx: seen.append(shape))
    x = _shared_like((3, 70, 5, 7), np.float32)
    x[...] = np.random.default_rng().standard_normal(x.shape)
    y = _shared_like((70, 3, 7, 5), np.uint8)
    z = _shared_like(x.shape, np.uint8)
    import autotranspose.calls.permute as permuter

    permuted = []
    monkeypatch.setattr(permuter, "permute", lambda *a, **k: permuted.append(a))
    at.cast_transpose(HostCuda(x), "e4m3", axes=(1, 0, 3, 2), out_t=HostCuda(y), out=HostCuda(z), both=True)  # fmt: skip
    # the cast into z (contiguous) in one launch, then z permuted into y by permute()
    assert len(emulated_gpu) == 1 and not seen and permuted[0][1] == (1, 0, 3, 2)
    data.assert_same_bits(z, data.reference(x, 1.0, cast.E4M3), cast.E4M3, "z")


def test_a_forced_config_runs_and_a_bad_out_is_refused_before_any_launch(emulated_gpu):
    import autotranspose as at
    from autotranspose import errors
    from autotranspose.calls.cast import cast_transpose

    x = _shared_like((33, 65), np.float16)
    x[...] = 1.5
    y = _shared_like((65, 33), np.uint16)
    cfg = cast.default(KernelConfig, cast.FLOAT16, cast.BFLOAT16).replace(
        tile_m=32, tile_n=32, per_thread=1
    )
    cast_transpose(HostCuda(x), "bf16", out_t=HostCuda(y), config=cfg)
    assert emulated_gpu[0][0] == cfg.key and (y == 0x3FC0).all()  # 1.5 in bfloat16
    with pytest.raises(errors.OutputError, match="shape"):
        at.cast_transpose(HostCuda(x), "bf16", out_t=HostCuda(y.T))
    with pytest.raises(errors.OutputError, match="dtype"):
        at.cast_transpose(HostCuda(x), "bf16", out_t=HostCuda(_shared_like((65, 33), np.uint8)))
    with pytest.raises(errors.OutputError, match="overlaps x"):
        at.cast_transpose(HostCuda(x), "f16", out_t=HostCuda(_alias(x)))
    with pytest.raises(errors.InputTypeError, match="one float32"):
        at.cast_transpose(HostCuda(x), "bf16", amax=HostCuda(_shared_like((2,), np.float32)))
    assert len(emulated_gpu) == 1


def _alias(x: np.ndarray) -> np.ndarray:
    """A (65, 33) uint16 view of x's own memory."""
    return np.ndarray((65, 33), np.uint16, x, 0, (66, 2))


@pytest.mark.parametrize("code", ["f32_e4m3", "bf16_e4m3", "f32_bf16", "f16_f16"])
@pytest.mark.parametrize("off", range(16))
def test_every_byte_offset_of_x_and_y_realigns_in_the_exchange_and_store(code, off):
    """x and y start 0-15 bytes off a 16-byte boundary (as many elements as the format allows),
    odd pitches, a batch and tiles the matrix's edge cuts: every row's funnel shift in the
    exchange and every output row's in the store; off 0 with y's pitch a multiple of 16 bytes
    takes the aligned store path, partial last words included."""
    src, dst = cast.PAIRS[code]
    cfg = cast.default(KernelConfig, src, dst)
    m = 16 // dst.size * 9 if off == 0 else 133  # aligned y rows: M a multiple of 16 bytes
    _check(cfg, (2, m, 75), x_off=off // src.size, y_off=off // dst.size, amax_prior=0.0,
           x_strides=(m * 77 + 5, 77, 1), y_pad=0 if off == 0 else 3, both=off % 3 == 0)  # fmt: skip


@pytest.mark.parametrize("code", ["f32_e4m3", "bf16_e5m2", "f32_f16"])
@pytest.mark.parametrize("shape", [(50, 5), (3, 300), (17, 15), (1, 1), (2, 129, 33)])
def test_rows_shorter_than_a_word_cut_at_both_ends(code, shape):
    """Output rows (y's and z's) of fewer than 16 bytes, at offsets that put a 16-byte boundary
    inside them or not: the cut words' head and tail in one word."""
    src, dst = cast.PAIRS[code]
    cfg = cast.default(KernelConfig, src, dst)
    _check(cfg, shape, x_off=1, y_off=5 // dst.size, both=True, z_off=11 // dst.size,
           amax_prior=0.0)  # fmt: skip
    _check(cfg, shape, both=True, z_off=14 // dst.size)


def test_an_amax_inside_an_output_is_refused_before_any_launch(emulated_gpu):
    import autotranspose as at
    from autotranspose import errors

    x = _shared_like((33, 65), np.float32)
    x[...] = 1.0
    y = _shared_like((65, 33), np.uint8)
    z = _shared_like((33, 65), np.uint8)
    for what, buf in (("out_t", y), ("out", z)):
        inside = np.ndarray((1,), np.float32, buf, 8)
        with pytest.raises(errors.OutputError, match=f"amax overlaps {what}"):
            at.cast_transpose(HostCuda(x), "e4m3", amax=HostCuda(inside), out_t=HostCuda(y),
                              out=HostCuda(z), both=True)  # fmt: skip
    assert not emulated_gpu

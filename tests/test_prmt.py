"""Byte-permute kernels (config.kind == "prmt", templates/prmt/): validation and the space; a
Python model of a block's work (aligned word loads, the shuffle and funnel shift that absorb
a row's offset, the byte permutes, the swizzled shared memory, the shifted word stores with
byte-wise ends) run against np.transpose at random offsets and pitches, which also checks
that every output byte is written once and that no warp's shared-memory access conflicts;
nvcc's resource report and the kernels' own source run on the CPU (tests/_emu.py);
correctness on the GPU at every pointer offset, odd sizes, 1xN and Nx1, batches, pitched
views, past 2**31 elements, poisoned output."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from _emu import gxx, transpose
from _gpu import assert_kind_at_every_offset, assert_kind_matches_reference, assert_match_reference
from _nvcc import assert_compile_without_spills

from autotranspose.errors import ConfigError
from autotranspose.kernels.codegen import kernel_params as prmt_params, kernel_source
from autotranspose.kernels.config import (
    NEWEST,
    PRMT_SIZES,
    DeviceLimits,
    KernelConfig,
    config_space,
    flat_prmt_space,
    neighbours,
    prmt_default,
    prmt_space,
)
from autotranspose.kinds.base import STATIC_SHARED_MAX, shared_optin

DTYPES = {1: "uint8", 2: "float16", 4: "float32"}
M32 = 0xFFFFFFFF


def prmt(elem_bytes: int, **kw) -> KernelConfig:
    return prmt_default(elem_bytes).replace(**kw)


# --- the config --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "s, change, says",
    [
        (1, {"vec": 2}, "vec must be 4"),
        (2, {"tile_m": 256}, "use tile_m in \\[32, 64, 128\\]"),
        (1, {"tile_n": 32}, "use tile_n in \\[64, 128, 256\\]"),
        (1, {"per_thread": 4}, "must be one of \\[1, 2\\]"),
        (1, {"staged": True}, "spell no kernel kind"),
        (1, {"layout": "swizzle"}, "takes layout='pad'"),
    ],
)
def test_invalid_prmt_configs_say_what_to_change(s, change, says):
    with pytest.raises(ConfigError, match=says):
        prmt(s, **change)


@pytest.mark.parametrize("s", [8, 16])
def test_wider_elements_are_left_to_the_other_kernels(s):
    with pytest.raises(ConfigError, match="elem_bytes in \\[1, 2, 4\\]"):
        KernelConfig(s, 64, 64, 1, 4, 0, "pad", kind="prmt")
    assert prmt_default(s) is None and not list(prmt_space(s, NEWEST))


def test_conjugation_has_no_byte_permute_kernel():
    assert prmt_default(1, conjugate=True) is None


@pytest.mark.parametrize("s", PRMT_SIZES)
def test_prmt_configs_come_with_unaligned_calls_only(s):
    aligned = [c for c in config_space(DTYPES[s]) if c.kind == "prmt"]
    unaligned = [c for c in config_space(DTYPES[s], max_vector=1) if c.kind == "prmt"]
    assert not aligned and prmt_default(s) in unaligned
    assert all(c.any_offset and c.fits(NEWEST) for c in unaligned)
    assert len({c.key for c in unaligned}) == len(unaligned)


def test_keys_round_trip_and_neighbours_stay_in_the_kind(rng):
    space = list(prmt_space(1, NEWEST))
    for i in rng.choice(len(space), 5, replace=False):
        c = space[i]
        assert c.key.endswith("_pm") or "_pm_p" in c.key
        assert KernelConfig.from_dict(c.to_dict()) == c
        assert all(
            n.kind == "prmt"
            for n in neighbours(c)
            if n.elem_bytes == c.elem_bytes and n.vec == c.vec
        )


@pytest.mark.parametrize("s", PRMT_SIZES)
def test_tiles_cover_the_windows_that_start_early(rng, s):
    """Output windows start up to 16 / elem_bytes - 1 rows before a tile: the last tile's
    windows must still reach row m - 1 (the model checks every byte is written)."""
    c = prmt_default(s)
    for m in (1, c.tile_m, c.tile_m + 1, int(rng.integers(1, 10**6))):
        n = int(rng.integers(1, 10**6))
        tm, tn = c.tiles(m, n)
        assert (tm - 1) * c.tile_m < m + 16 // s - 1 <= tm * c.tile_m
        assert tn == -(-n // c.tile_n)


# --- a Python model of the kernel ----------------------------------------------------------------
def byte_perm(x: np.ndarray, y: np.ndarray, sel: int) -> np.ndarray:
    """CUDA's __byte_perm: byte i of the result is byte (sel >> 4i) & 7 of y:x."""
    both = (y.astype(np.uint64) << np.uint64(32)) | x.astype(np.uint64)
    out = np.zeros_like(x, dtype=np.uint64)
    for i in range(4):
        b = (sel >> (4 * i)) & 7
        out |= ((both >> np.uint64(8 * b)) & np.uint64(0xFF)) << np.uint64(8 * i)
    return out.astype(np.uint32)


def block(s: int, r: list[np.ndarray]) -> list[np.ndarray]:
    """The template's K x K transpose (macro `block`), selector for selector."""
    if s == 1:
        lo01, hi01 = byte_perm(r[0], r[1], 0x5140), byte_perm(r[0], r[1], 0x7362)
        lo23, hi23 = byte_perm(r[2], r[3], 0x5140), byte_perm(r[2], r[3], 0x7362)
        return [
            byte_perm(lo01, lo23, 0x5410),
            byte_perm(lo01, lo23, 0x7632),
            byte_perm(hi01, hi23, 0x5410),
            byte_perm(hi01, hi23, 0x7632),
        ]
    if s == 2:
        return [byte_perm(r[0], r[1], 0x5410), byte_perm(r[0], r[1], 0x7632)]
    return [r[0]]


def funnel_r(lo: np.ndarray, hi: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """__funnelshift_r with shift in 0..31: low word of (hi:lo) >> shift."""
    both = (hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)
    return ((both >> shift.astype(np.uint64)) & np.uint64(M32)).astype(np.uint32)


def conflicts(words: np.ndarray, active: np.ndarray, width: int = 4) -> int:
    """Extra shared-memory wavefronts of one access per warp: for `width`-byte accesses the
    worst bank's count of distinct words, less one (16-byte accesses: per quarter warp)."""
    extra = 0
    group = 32 if width == 4 else 8
    for w in range(0, words.size, group):
        sel = words[w : w + group][active[w : w + group]]
        if width == 16:
            sel = sel // 4
            banks = sel % 8
        else:
            banks = sel % 32
        per_bank = [len(set(sel[banks == k].tolist())) for k in set(banks.tolist())]
        extra += max(per_bank, default=1) - 1
    return extra


def model(
    c: KernelConfig,
    mem: np.ndarray,
    off_in: int,
    out: np.ndarray,
    off_out: int,
    batch: int,
    m: int,
    n: int,
    ld_in: int,
    ld_out: int,
    bs_in: int,
    bs_out: int,
    stats: dict[str, int],
) -> np.ndarray:
    """Run every tile of the kernel on byte buffers `mem` (input) and `out`; the matrices
    start at byte offsets off_in and off_out, strides in elements. Returns how often each
    byte of `out` was written; adds each phase's extra shared-memory wavefronts to `stats`."""
    v = prmt_params(c)
    s, kk, tm, tn, h, T = (v[x] for x in ("s", "kk", "tm", "tn", "h", "threads"))
    sr, nc1, p1w, ng, p2w, ncw = (v[x] for x in ("sr", "nc1", "p1w", "ng", "p2w", "ncw"))
    t = np.arange(T)
    written = np.zeros(out.size, dtype=np.int64)
    lo_in = off_in // 16 * 16  # reads stay within the aligned chunks the input's bytes touch
    hi_in = -(-(off_in + ((batch - 1) * bs_in + (m - 1) * ld_in + n) * s) // 16) * 16

    def row_base(q):
        return q * p1w + (q // kk) * 8

    tiles_m, tiles_n = c.tiles(m, n)
    for b in range(batch):
        for ti in range(tiles_m):
            for tj in range(tiles_n):
                r0, c0 = ti * tm, tj * tn
                rs = r0 - h
                ncols = min(tn, n - c0)
                in_bytes = ncols * s
                ib = off_in + (b * bs_in + c0) * s
                obase = off_out + (b * bs_out + c0 * ld_out + r0) * s
                sa = np.full(v["sa_words"], 0xDEADBEEF, dtype=np.uint32)  # stale data
                sb = np.full(v["sb_words"], 0xDEADBEEF, dtype=np.uint32)
                lead0, step = ib & M32, (ld_in * s) & M32
                lead_rs = (lead0 + (rs & M32) * step) & M32
                qlo, qhi = (0 if r0 > 0 else h), min(sr, m - rs)
                lq, lw = t // nc1, t % nc1
                r1 = v["r1"]
                for u in range(v["lu1"]):
                    q = lq + u * r1
                    row = rs + q
                    lead = (lead_rs + (q * step)) & 15
                    ok = (t < r1 * nc1) & (q >= qlo) & (q < qhi) & (lw * 16 < lead + in_bytes)
                    assert np.all(ok <= ((row >= 0) & (row < m) & (q < sr)))
                    addr = ib + row * ld_in * s - lead + lw * 16
                    assert np.all((addr[ok] >= lo_in) & (addr[ok] + 16 <= hi_in)), (
                        "a load outside the input's chunks"
                    )
                    dst = row_base(q) + lw * 4
                    stats["load"] += conflicts(dst, ok, 16)
                    for x in range(4):
                        word = sum(
                            mem[addr[ok] + 4 * x + y].astype(np.uint32) << np.uint32(8 * y)
                            for y in range(4)
                        )
                        sa[dst[ok] + x] = word
                xg, xp = t // 8, t % 8
                for u in range(v["lu2"]):
                    g = xg + u * v["g2"]
                    act = g < ng
                    rows = []
                    for e in range(kk):
                        q = g * kk + e
                        lead = (lead_rs + q * step) & 15
                        rows.append(
                            (np.where(act, row_base(q) + xp + (lead >> 2), 0), 8 * (lead & 3))
                        )
                    for x in range(v["x"]):
                        rw = []
                        for p, sh in rows:
                            stats["exchange"] += conflicts(p + 8 * x, act) + conflicts(
                                p + 8 * x + 1, act
                            )
                            rw.append(funnel_r(sa[p + 8 * x], sa[p + 8 * x + 1], sh))
                        o = block(s, rw)
                        for f in range(kk):
                            dst = ((xp + 8 * x) * kk + f) * p2w + g
                            stats["exchange"] += conflicts(dst, act)
                            sb[dst[act]] = o[f][act]
                sj, sk = t // ncw, t % ncw
                for u in range(v["lu3"]):
                    j = sj + u * v["r3"]
                    act = j < ncols
                    a0 = obase + j * ld_out * s
                    rel = sk * 16 - (a0 & 15)
                    lb = h * s + rel
                    p = np.where(act, j * p2w + (lb >> 2), 0)
                    sh = 8 * (lb & 3)
                    x = [sb[p + y] for y in range(5)]
                    for y in range(5):
                        stats["store"] += conflicts(p + y, act)
                    chunk = [funnel_r(x[y], x[y + 1], sh) for y in range(4)]
                    lo = r0 * s + rel
                    dst = a0 + rel
                    assert np.all(dst[act] % 16 == 0), "a store chunk that is not 16-byte aligned"
                    for y in range(4):
                        for e in range(4):
                            pos = lo + 4 * y + e
                            mine = act & (pos >= 0) & (pos < m * s)
                            np.add.at(written, dst[mine] + 4 * y + e, 1)
                            out[dst[mine] + 4 * y + e] = (chunk[y][mine] >> np.uint32(8 * e)) & 0xFF
    return written


def _run_model(rng, c: KernelConfig, batch: int, m: int, n: int, stats: dict[str, int]) -> None:
    s = c.elem_bytes
    dtype = np.dtype(f"u{s}")
    off_in, off_out = int(rng.integers(0, 16 // s)) * s, int(rng.integers(0, 16 // s)) * s
    ld_in, ld_out = n + int(rng.integers(0, 5)), m + int(rng.integers(0, 5))
    bs_in, bs_out = m * ld_in + int(rng.integers(0, 3)), n * ld_out + int(rng.integers(0, 3))
    src = rng.integers(0, 256, size=off_in + batch * bs_in * s + 16, dtype=np.uint8)
    fill = rng.integers(0, 256, size=off_out + batch * bs_out * s + 8, dtype=np.uint8)
    out = fill.copy()
    written = model(c, src, off_in, out, off_out, batch, m, n, ld_in, ld_out, bs_in, bs_out, stats)
    x = np.lib.stride_tricks.as_strided(
        src[off_in:].view(np.uint8)[: batch * bs_in * s].view(dtype),
        (batch, m, n),
        (bs_in * s, ld_in * s, s),
    )
    want = fill.copy()
    region = np.lib.stride_tricks.as_strided(
        want[off_out:].view(np.uint8)[: batch * bs_out * s].view(dtype),
        (batch, n, m),
        (bs_out * s, ld_out * s, s),
        writeable=True,
    )
    region[...] = np.swapaxes(x, 1, 2)
    mask = np.zeros(out.size, dtype=bool)
    bi, i, j, k = np.ix_(range(batch), range(n), range(m), range(s))
    mask[(off_out + (bi * bs_out + i * ld_out + j) * s + k).ravel()] = True
    assert np.array_equal(out, want), (c.key, batch, m, n, off_in, off_out)
    assert np.all(written[mask] == 1) and not written[~mask].any(), (
        "each output byte is written once, no other"
    )


@pytest.mark.parametrize("s", PRMT_SIZES)
def test_model_matches_numpy_at_any_offset(rng, s):
    """Random configs of the space on odd, even, thin and batched shapes, random pointer
    offsets and pitches: the model's output is np.transpose's, each output byte written once,
    and no warp's shared-memory store or load has a bank conflict."""
    space = [c for c in prmt_space(s, NEWEST) if not c.persistent and c.cache == "default"]
    picks = [prmt_default(s)] + [space[i] for i in rng.choice(len(space), 3, replace=False)]
    odd = lambda lo, hi: int(rng.integers(lo, hi)) | 1  # noqa: E731
    shapes = [
        (1, odd(100, 300), odd(100, 300)),
        (2, odd(3, 70), odd(60, 200)),
        (1, 1, odd(50, 300)),
        (1, odd(50, 300), 1),
        (1, int(rng.integers(64, 200)) * 2, int(rng.integers(64, 200)) * 2),
    ]
    for c in picks:
        stats = {"load": 0, "exchange": 0, "store": 0}
        for shape in shapes:
            _run_model(rng, c, *shape, stats)
        print(c.key, stats)


def test_byte_perm_model_is_a_transpose(rng):
    """The selectors themselves: a 4x4 and a 2x2 block come out transposed."""
    for s in PRMT_SIZES:
        k = 4 // s
        a = rng.integers(0, 256, size=(k, 4), dtype=np.uint8)
        r = [
            np.array([int.from_bytes(a[e].tobytes(), "little")], dtype=np.uint32) for e in range(k)
        ]
        o = block(s, r)
        elems = a.view(f"u{s}")  # k rows of k elements
        got = np.stack([np.frombuffer(int(x[0]).to_bytes(4, "little"), dtype=f"u{s}") for x in o])
        assert np.array_equal(got, elems.T)


def test_template_renders_the_selectors_the_model_runs():
    src = kernel_source(prmt_default(1))
    for sel in ("0x5140", "0x7362", "0x5410", "0x7632"):
        assert sel in src
    assert "0x5410" in kernel_source(prmt_default(2)) and "0x5140" not in kernel_source(
        prmt_default(2)
    )


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_prmt_kernels_compile_without_spills_or_warnings(arch):
    """Every tile shape and per_thread of both element sizes (rasters and cache hints add no
    registers to speak of: one of each)."""
    picks = [
        c
        for s in PRMT_SIZES
        for c in prmt_space(s, NEWEST)
        if not c.persistent and (c.raster, c.cache) in (("row", "default"), ("col", "stream"))
    ]
    assert_compile_without_spills(picks, arch, silent=True)  # one compilation for both


# --- tiles past 48 KiB: dynamic shared memory ------------------------------------------------------
def _limits(cc: tuple[int, int]) -> DeviceLimits:
    return DeviceLimits(1024, STATIC_SHARED_MAX, f"sm_{cc[0]}{cc[1]}", cc, shared_optin(cc))


def _dynamic(elem_bytes: int, cc: tuple[int, int] = (9, 0)) -> list[KernelConfig]:
    """The byte-permute configs past the static limit that a GPU of `cc` runs: tiled, and
    flat for a short side of 150 bytes (tall and wide)."""
    limits = _limits(cc)
    flat = flat_prmt_space(elem_bytes, limits, 150 // elem_bytes)
    return [
        c
        for c in [*prmt_space(elem_bytes, limits), *flat]
        if c.dynamic_smem and not c.persistent and c.cache == "default"
    ]


@pytest.mark.parametrize("s", [1, 2])
def test_tiles_past_the_static_limit_take_dynamic_shared_memory(s):
    """Wider segments and windows than 48 KiB allow: the space of an sm_90 GPU holds them
    (tiled, tall and wide), the newest-GPU limits the defaults are chosen by do not, and an
    sm_86 GPU (99 KiB) only those that fit it. Their kernel declares its shared memory extern
    and the launch passes its size; every other config's is static."""
    dyn = _dynamic(s)
    assert {c.spans_short_side for c in dyn} == {False, True} and any(c.flag("wide") for c in dyn)
    assert all(STATIC_SHARED_MAX < c.smem_bytes <= shared_optin((9, 0)) for c in dyn)
    assert all(c.dynamic_smem == c.smem_bytes and c.static_smem_bytes == 0 for c in dyn)
    assert not any(c.fits(NEWEST) for c in dyn)
    small = _limits((8, 6))
    assert {c.fits(small) for c in dyn} == {True, False}
    assert all(c.fits(small) == (c.smem_bytes <= shared_optin((8, 6))) for c in dyn)
    for c in dyn[:3]:
        src = kernel_source(c)
        assert "extern __shared__" in src and "u32 sa[" not in src
    plain = prmt_default(s)
    assert plain.dynamic_smem == 0 and plain.static_smem_bytes == plain.smem_bytes
    assert "extern __shared__" not in kernel_source(plain)


def test_other_kinds_keep_to_static_shared_memory():
    """Kinds without dynamic shared memory never get past 48 KiB, whatever the GPU offers."""
    limits = _limits((9, 0))
    for dtype in ("uint8", "float32", "complex128"):
        for c in config_space(dtype, limits):
            if c.kind != "prmt":
                assert c.smem_bytes <= STATIC_SHARED_MAX and c.dynamic_smem == 0, c.key


def test_unknown_architectures_get_no_opt_in():
    assert shared_optin((9, 0)) == 227 * 1024 and shared_optin((8, 0)) == 163 * 1024
    assert shared_optin((42, 0)) == STATIC_SHARED_MAX


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
@pytest.mark.parametrize("arch, cc", [("sm_80", (8, 0)), ("sm_90", (9, 0))])
def test_dynamic_tiles_compile_without_spills(arch, cc):
    """No spills, no static shared memory (ptxas reports 0: it is all the launch's)."""
    picks = [c for s in (1, 2) for c in _dynamic(s, cc)]
    assert picks
    assert_compile_without_spills(picks, arch)


# --- the kernel's own source on the CPU ---------------------------------------------------------
needs_gxx = pytest.mark.skipif(gxx() is None, reason="needs g++ and CUDA's headers")


@needs_gxx
@pytest.mark.parametrize("s", PRMT_SIZES)
@pytest.mark.parametrize("raster", ["col", "row"])
def test_the_kernel_on_the_cpu_at_offsets_pitches_batches_and_grids(s, raster):
    """The kernel's own source on the CPU (tests/emu/cuda_emu.h): odd sides over several tiles
    each way, batches, random pitches and pointer offsets, blocks looping over the tiles.
    The output matches np.transpose and no byte around or between the output rows changes."""
    rng = np.random.default_rng(100 * s + len(raster))
    c = prmt(s, tile_m=64 // s, tile_n=64 // s, per_thread=2, raster=raster)
    for trial in range(3):
        b = 1 + trial % 2
        m = c.tile_m * int(rng.integers(2, 4)) + int(rng.integers(0, c.tile_m)) | 1
        n = c.tile_n * int(rng.integers(1, 3)) + int(rng.integers(0, c.tile_n)) | 1
        ld_in, ld_out = n + int(rng.integers(0, 9)), m + int(rng.integers(0, 9))
        strides = (ld_in, ld_out, m * ld_in + int(rng.integers(0, 5)), n * ld_out + 3)
        offsets = tuple(int(rng.integers(0, 16 // s)) * s for _ in range(2))
        got, want = transpose(c, b, m, n, strides, offsets, rng, grid_max=3)
        assert np.array_equal(got, want), (c.key, b, m, n, strides, offsets)


@needs_gxx
def test_a_tile_past_48_kib_on_the_cpu():
    """The 1-byte tile of 128-byte windows and 256-byte segments: its shared memory dynamic."""
    c = prmt(1, tile_m=128, tile_n=256, per_thread=1)
    assert c.dynamic_smem
    rng = np.random.default_rng(7)
    got, want = transpose(c, 1, 301, 389, (391, 303, 0, 0), (5, 11), rng, grid_max=2)
    assert np.array_equal(got, want)


# --- on the GPU ----------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("s", [1, 2])
def test_dynamic_tiles_match_the_reference(rng, s):
    """Tiles past 48 KiB on this GPU (tiled, tall, wide): fresh data, a poisoned output and
    a guard region, odd and batched shapes the config applies to, and a persistent grid."""
    from autotranspose.runtime.compiler import activate, precompile

    state = activate(0)
    limits = state.info.limits
    dyn = [
        c
        for c in [*prmt_space(s, limits), *flat_prmt_space(s, limits, 150 // s)]
        if c.dynamic_smem and not c.persistent
    ]
    if not dyn:
        pytest.skip(f"{state.info.name} offers no shared memory past 48 KiB")
    picks = [dyn[i] for i in rng.choice(len(dyn), min(8, len(dyn)), replace=False)]
    picks.append(picks[0].replace(persistent=2))
    assert not precompile(state, picks)
    odd = lambda lo, hi: int(rng.integers(lo, hi)) | 1  # noqa: E731
    short = 150 // s
    shapes = [
        (1, odd(1000, 3000), odd(1000, 3000)),
        (2, odd(300, 700), odd(300, 700)),
        (1, odd(20000, 60000), short),
        (3, odd(2000, 6000), odd(60, short)),
        (1, short, odd(20000, 60000)),
        (2, odd(60, short), odd(2000, 6000)),
        (1, 7, odd(3000, 9000)),
    ]
    for c in picks:
        for shape in shapes:
            if c.applies(shape[1], shape[2]):
                assert_match_reference(state, s, shape, [c])


@pytest.mark.gpu
def test_dynamic_tiles_at_every_pointer_offset(rng):
    """A dynamic tile through transpose(config=...) at every input offset, pitched output."""
    pytest.importorskip("cupy")
    from autotranspose.runtime.compiler import activate

    limits = activate(0).info.limits
    dyn = [c for c in prmt_space(1, limits) if c.dynamic_smem and not c.persistent]
    if not dyn:
        pytest.skip("no shared memory past 48 KiB on this GPU")
    assert_kind_at_every_offset(rng, 1, np.dtype("uint8"), dyn, dyn[0])


@pytest.mark.gpu
@pytest.mark.parametrize("s", PRMT_SIZES)
def test_prmt_kernels_match_the_reference(rng, s):
    """Odd sizes, 1xN, Nx1, batches; fresh data, a poisoned output and a guard region after
    it (measure.Bench.check); random configs of the space, the default, a persistent grid."""
    assert_kind_matches_reference(rng, s, prmt_space, prmt_default(s))


@pytest.mark.gpu
@pytest.mark.parametrize("s", PRMT_SIZES)
def test_every_pointer_offset_and_pitched_views(rng, s):
    """Input and output at every byte offset the element size allows (0-15), rows of pitched
    views; the bytes around and between the output rows are left as they were."""
    pytest.importorskip("cupy")
    space = [c for c in prmt_space(s, NEWEST) if not c.persistent]
    assert_kind_at_every_offset(rng, s, np.dtype(DTYPES[s]), space, prmt_default(s))


@pytest.mark.gpu
def test_prmt_past_2_31_elements():
    from autotranspose.runtime.compiler import activate

    shape = (1, 46349, 46337)  # 2**31 + about 1.5M int8 elements, odd rows
    assert shape[1] * shape[2] > 2**31
    assert_match_reference(activate(0), 1, shape, [prmt_default(1)])

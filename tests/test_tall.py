"""Flat byte-permute kernels (config flat=True with prmt=True, templates/prmt/): one
tile spans the short side. Tall: rows of at most tile_n elements, contiguous, at any offset,
staged as the one contiguous run they are. Wide: at most tile_m rows, whose output rows (at
least 4 bytes) are one contiguous run, written as its aligned chunks. Validation, the space
and the defaults, where they may run (CPU); nvcc's resource report; correctness on the GPU at
every pointer offset, short sides of every length, batches, fewer rows than a tile, past
2**31 elements, poisoned output."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from _gpu import assert_match_reference, assert_views_at_every_offset
from _nvcc import assert_compile_without_spills

from autotranspose.errors import ConfigError
from autotranspose.kernels.codegen import kernel_source
from autotranspose.kernels.config import (
    NEWEST,
    PRMT_SEGMENTS,
    PRMT_SIZES,
    KernelConfig,
    config_space,
    flat_prmt_space,
    for_rows,
    prmt_default,
    tall_default,
    wide_default,
    wider_tiles,
)
from autotranspose.kernels.shapes import flat_fits

DTYPES = {1: "uint8", 2: "float16", 4: "float32"}


# --- the config --------------------------------------------------------------------------------
def test_a_tall_config_is_named_and_rendered_as_one():
    c = tall_default(1, 20)
    assert c.kind == "prmt" and c.params.flat and c.key.endswith("_flat_pm")
    src = kernel_source(c)
    assert "contiguous run" in src and "nwords" in src
    assert "contiguous run" not in kernel_source(prmt_default(1))  # the tiled prmt is unchanged


@pytest.mark.parametrize("s", PRMT_SIZES)
def test_the_tall_default_spans_the_rows_with_the_widest_window_that_fits(rng, s):
    for short in [1, *rng.integers(2, 256 // s + 1, 5).tolist()]:
        c = tall_default(s, short)
        if c is None:  # only rows too wide for any window that fits
            assert not any(cfg.fits(NEWEST) for cfg in flat_prmt_space(s, NEWEST, short))
            continue
        assert c.tile_n >= short and c.fits(NEWEST) and c.applies(10**6, short)
        wider = [b // s for b in PRMT_SEGMENTS if b // s > c.tile_m]
        assert all(not c.replace(tile_m=tm).fits(NEWEST) for tm in wider)
    assert tall_default(s, 256 // s + 1) is None
    assert tall_default(8, 3) is None and not list(flat_prmt_space(8, NEWEST, 3))


def test_flat_prmt_configs_run_calls_whose_short_side_they_span_with_contiguous_rows():
    c, w = tall_default(2, 20), wide_default(2, 20)
    assert c.applies(7081411, 20) and not c.applies(20, 7081411)
    assert w.applies(20, 7081411) and not w.applies(w.tile_m + 1, 7081411) and w.params.wide
    assert c.tiles(1000, 20) == (-(-(1000 + 8 - 1) // c.tile_m), 1)  # 8 halo rows (16 bytes)
    assert w.tiles(20, 1000) == (1, -(-1000 // w.tile_n))  # wide: no halo
    with pytest.raises(ConfigError, match="needs a side of at most"):
        c.tiles(20, 7081411)
    assert flat_fits(c, 1000, 20, 20, 1000) and flat_fits(c, 1000, 20, 20, 1024)  # output pitched
    assert not flat_fits(c, 1000, 20, 24, 1000)  # pitched input rows: not one run
    assert flat_fits(w, 20, 1000, 1024, 20)  # wide: input pitched, output rows one run
    assert not flat_fits(w, 20, 1000, 1000, 24) and not flat_fits(c, 20, 1000, 1000, 20)
    run = w.replace(elem_bytes=1, tile_m=64, tile_n=64, vec=4, ordered=False)
    assert not wide_default(1, 3) and not run.applies(
        3, 1000
    )  # a run store's words span two rows at most
    assert run.replace(ordered=True).applies(3, 1000) and run.replace(ordered=True).applies(1, 1000)
    assert wide_default(2, 2).applies(2, 1000) and wide_default(2, 2).params.ordered
    assert (
        wide_default(1, 20).params.ordered and not wide_default(1, 21).params.ordered
    )  # 1 byte: whole words only
    assert not wide_default(
        1, 32, exact=False
    ).params.ordered  # a class's 1-byte rows may end mid-word
    assert (
        wide_default(2, 32, exact=False).params.ordered
        and wide_default(4, 32, exact=False).params.ordered
    )
    with pytest.raises(ConfigError, match="wide=True is a flat byte-permute"):
        prmt_default(1).replace(wide=True)


def test_one_byte_rows_from_33_get_the_ordered_buffer_whole_words_or_not():
    """From WIDE_ORDERED_ODD_ROWS rows the ordered buffer serves 1-byte rows that end
    mid-word too (a call's or a class's), in 128-byte segments and 512 / span threads; the
    256-row span's tile is past 48 KiB, so its static default stays the run store and the
    first call races the ordered tile. A served ordered config keeps its buffer from there,
    and runs as its run-store twin below."""
    for m in (33, 37, 50, 64, 75, 101, 127):
        for exact in (True, False):
            c = wide_default(1, m, exact)
            assert c.params.ordered and c.tile_n == 128 and c.threads == 2 * c.tile_m, (m, c.key)
            assert c.applies(m, 10**6) and for_rows(c, m) == c
    assert wide_default(1, 128).params.ordered  # whole words: the 8 KiB tile as before
    assert (
        not wide_default(1, 190).params.ordered
        and not wide_default(1, 137, exact=False).params.ordered
    )
    assert any(c.params.ordered and c.tile_n == 128 for c in wider_tiles(1, 137, 334774))
    ordered = wide_default(1, 32)  # whole words
    assert (
        ordered.params.ordered
        and not for_rows(ordered, 21).params.ordered
        and not for_rows(ordered, 31).params.ordered
    )
    assert for_rows(ordered, 24).params.ordered


def test_tall_configs_take_the_row_raster_only():
    with pytest.raises(ConfigError, match="raster='row'"):
        tall_default(1, 20).replace(raster="col")


@pytest.mark.parametrize("s", PRMT_SIZES)
def test_the_space_has_them_for_short_rows_only(s):
    tall = [
        c
        for c in config_space(DTYPES[s], max_vector=1, short_side=20)
        if c.kind == "prmt" and c.params.flat
    ]
    assert tall and all((c.tile_m if c.params.wide else c.tile_n) >= 20 for c in tall)
    assert {c.params.wide for c in tall} == {False, True}
    assert not [
        c
        for c in config_space(DTYPES[s], max_vector=1, short_side=4096)
        if c.kind == "prmt" and c.params.flat
    ]
    assert not [
        c for c in config_space("complex64", short_side=3) if c.kind == "prmt" and c.params.flat
    ]


def test_key_round_trip():
    for s in PRMT_SIZES:
        for c in flat_prmt_space(s, NEWEST, 1):
            assert KernelConfig.from_dict(c.to_dict()) == c


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_tall_kernels_compile_without_spills_or_warnings(arch):
    """Every tile shape and per_thread of every element size (the cache hint adds no
    registers to speak of: the default only)."""
    picks = [
        c
        for s in PRMT_SIZES
        for c in flat_prmt_space(s, NEWEST, 1)
        if not c.persistent and c.cache == "default"
    ]
    assert_compile_without_spills(picks, arch, silent=True)  # one compilation for both


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ordered_wide_kernels_with_wide_segments_keep_to_64_registers(arch, rng):
    """Ordered wide kernels of 1- and 2-byte elements whose row segments are 128 bytes or
    more run one more block an SM at 64 registers (H200: +4 to +6 points); a random sample of them, both
    cache hints, compiles to at most 64 without spills, while run-store wide kernels keep the
    80 their store needs (and their launch bounds say so)."""
    from autotranspose.kinds.prmt import prmt_registers
    from autotranspose.runtime.compiler import nvcc_resources

    wide = [
        c
        for s in (1, 2)
        for c in flat_prmt_space(s, NEWEST, 1)
        if c.params.wide and not c.persistent
    ]
    capped = [c for c in wide if prmt_registers(c) == 64]
    assert capped and all(c.params.ordered and c.tile_n * c.elem_bytes >= 128 for c in capped)
    assert all(prmt_registers(c) == 80 for c in wide if not c.params.ordered)
    picks = [capped[i] for i in rng.choice(len(capped), 12, replace=False)]
    report = nvcc_resources(picks, arch)
    for c in picks:
        assert report[c.kernel_name].registers <= 64 and report[c.kernel_name].spill_bytes == 0, (
            c.key
        )
        assert f"__launch_bounds__({c.threads}, {65536 // (c.threads * 64)})" in kernel_source(c)


# --- on the GPU ----------------------------------------------------------------------------------
def _tall_shapes(rng, tn: int) -> list[tuple[int, int, int]]:
    """Rows of 1 to tn elements: many rows, a batch, fewer rows than a tile, one row."""
    n = lambda: int(rng.integers(1, tn + 1))  # noqa: E731
    odd = lambda lo, hi: int(rng.integers(lo, hi)) | 1  # noqa: E731
    return [
        (1, odd(20000, 90000), n()),
        (1, odd(2000, 9000), tn),
        (1, odd(2000, 9000), 1),
        (3, odd(100, 700), n()),
        (2, 5, n()),
        (1, 1, n()),
        (1, odd(300, 900) + 1, n()),
    ]


@pytest.mark.gpu
@pytest.mark.parametrize("s", PRMT_SIZES)
def test_tall_kernels_match_the_reference(rng, s):
    """Fresh data, a poisoned output and a guard region after it (measure.Bench.check):
    random configs of the space, the default and the default on a persistent grid."""
    from autotranspose.runtime.compiler import activate, precompile

    state = activate(0)
    space = [
        c
        for c in flat_prmt_space(s, state.info.limits, 1)
        if not c.persistent and not c.params.wide
    ]
    picks = [space[i] for i in rng.choice(len(space), 6, replace=False)]
    picks += [tall_default(s, 20), tall_default(s, 20).replace(persistent=2)]
    assert not precompile(state, picks)
    for c in picks:
        for shape in _tall_shapes(rng, c.tile_n):
            assert_match_reference(state, s, shape, [c])


@pytest.mark.gpu
@pytest.mark.parametrize("s", PRMT_SIZES)
def test_tall_kernels_at_every_pointer_offset(rng, s):
    """Input at every byte offset the element size allows (0-15), output at a random one with
    pitched rows; the bytes around and between the output rows are left as they were."""
    pytest.importorskip("cupy")
    space = [c for c in flat_prmt_space(s, NEWEST, 1) if not c.persistent and not c.params.wide]
    tn = min(c.tile_n for c in space)
    narrow = [c for c in space if c.tile_n == tn]
    assert_views_at_every_offset(
        rng, s, np.dtype(DTYPES[s]), lambda: narrow[int(rng.integers(len(narrow)))], n_max=tn
    )


def _wide_shapes(rng, tm: int, s: int, ordered: bool = False) -> list[tuple[int, int, int]]:
    """1 to tm rows (transposes of at least 4 bytes, or of any length into an ordered buffer):
    long rows, a batch, a short row."""
    lo = 1 if ordered else -(-4 // s)
    m = lambda: int(rng.integers(lo, tm + 1))  # noqa: E731
    odd = lambda a, b: int(rng.integers(a, b)) | 1  # noqa: E731
    return [
        (1, m(), odd(20000, 90000)),
        (1, tm, odd(2000, 9000)),
        (1, lo, odd(2000, 9000)),
        (3, m(), odd(100, 700)),
        (2, m(), 5),
        (1, m(), 1),
        (1, m(), odd(300, 900) + 1),
    ]


@pytest.mark.gpu
@pytest.mark.parametrize("s", PRMT_SIZES)
def test_wide_kernels_match_the_reference(rng, s):
    """As above, for few long rows (the wide path)."""
    from autotranspose.runtime.compiler import activate, precompile

    state = activate(0)
    space = [
        c for c in flat_prmt_space(s, state.info.limits, 1) if not c.persistent and c.params.wide
    ]
    picks = [space[i] for i in rng.choice(len(space), 6, replace=False)]
    ordered = [c for c in space if c.params.ordered]
    picks += [ordered[i] for i in rng.choice(len(ordered), 4, replace=False)]
    picks += [wide_default(s, 20), wide_default(s, 20).replace(persistent=2)]
    picks += [wide_default(s, 20).replace(ordered=not wide_default(s, 20).params.ordered)]
    assert not precompile(state, picks)
    for c in picks:
        for shape in _wide_shapes(rng, c.tile_m, s, c.params.ordered):
            if c.applies(shape[1], shape[2]):
                assert_match_reference(state, s, shape, [c])


@pytest.mark.gpu
@pytest.mark.parametrize("s", PRMT_SIZES)
def test_wide_kernels_at_every_pointer_offset(rng, s):
    """Input rows pitched at every byte offset (0-15), output rows one run at a random one."""
    pytest.importorskip("cupy")
    space = [c for c in flat_prmt_space(s, NEWEST, 1) if not c.persistent and c.params.wide]
    tm = min(c.tile_m for c in space if c.tile_m * s >= 16)
    narrow = [c for c in space if c.tile_m == tm]
    assert {c.params.ordered for c in narrow} == {False, True}
    assert_views_at_every_offset(
        rng, s, np.dtype(DTYPES[s]), lambda: narrow[int(rng.integers(len(narrow)))], m_max=tm
    )


@pytest.mark.gpu
@pytest.mark.parametrize("s", PRMT_SIZES)
def test_ordered_wide_kernels_take_rows_of_any_length(rng, s):
    """1 to 7 rows (transposes of 1 to 28 bytes, most not a whole number of words) at every
    input offset: an ordered buffer places each word's elements one by one where needed."""
    pytest.importorskip("cupy")
    space = [c for c in flat_prmt_space(s, NEWEST, 1) if not c.persistent and c.params.ordered]
    tm = min(c.tile_m for c in space)
    narrow = [c for c in space if c.tile_m == tm]
    assert_views_at_every_offset(
        rng, s, np.dtype(DTYPES[s]), lambda: narrow[int(rng.integers(len(narrow)))], m_max=7
    )


@pytest.mark.gpu
def test_wide_past_2_31_elements():
    from autotranspose.runtime.compiler import activate

    shape = (1, 21, 2**31 // 21 + 4099)  # int8, 21 rows
    assert shape[1] * shape[2] > 2**31
    assert_match_reference(activate(0), 1, shape, [wide_default(1, 21)])


@pytest.mark.gpu
def test_tall_past_2_31_elements():
    from autotranspose.runtime.compiler import activate

    shape = (1, 2**31 // 21 + 4099, 21)  # int8, rows of 21 bytes
    assert shape[1] * shape[2] > 2**31
    assert_match_reference(activate(0), 1, shape, [tall_default(1, 21)])


# --- a model of the wide store (templates/prmt/wide.cu.j2 `store_run`), on the CPU ------------
M32 = 0xFFFFFFFF


def _funnel_r(lo: int, hi: int, sh: int) -> int:
    """__funnelshift_r: the low 32 bits of (hi:lo) >> (sh & 31)."""
    return (((hi << 32) | lo) >> (sh & 31)) & M32


def _store_run_model(sb: np.ndarray, p2w: int, rowb: int, ncols: int, lead: int, threads: int):
    """The bytes `store_run` writes into a run that starts `lead` bytes into an aligned chunk:
    {run byte: value}, and how often each was written. `sb` holds output row j's bytes in
    words j * p2w ..., as the exchange leaves them (padding words hold garbage)."""
    nb = ncols * rowb
    inv = (M32 // rowb + 1) & M32
    words = sb.view(np.uint32)
    raw = sb.view(np.uint8)
    out: dict[int, int] = {}
    count: dict[int, int] = {}

    def put(e: int, v: int) -> None:
        out[e] = v
        count[e] = count.get(e, 0) + 1

    nck = (lead + nb + 15) >> 4
    for t in range(threads):
        for ck in range(t, nck, threads):
            f = 16 * ck - lead
            if f >= 0 and f + 16 <= nb:
                j = (f * inv) >> 32  # __umulhi
                b = (f - j * rowb) & M32
                if b >= 2**31:  # (int)b < 0: one too many rows
                    j -= 1
                    b = (b + rowb) & M32
                elif b >= rowb:
                    j += 1
                    b -= rowb
                for i in range(4):
                    p = j * p2w + (b >> 2)
                    x = _funnel_r(int(words[p]), int(words[p + 1]), b << 3)
                    if b + 4 > rowb:  # the word ends in the next row
                        keep = 8 * (rowb - b)
                        x = (x & (M32 >> (32 - keep))) | ((int(words[(j + 1) * p2w]) << keep) & M32)
                    for q in range(4):
                        put(f + 4 * i + q, (x >> (8 * q)) & 0xFF)
                    b += 4
                    if b >= rowb:
                        b -= rowb
                        j += 1
            else:
                for e in range(max(f, 0), min(f + 16, nb)):
                    put(e, int(raw[(e // rowb) * p2w * 4 + e % rowb]))
    return out, count


@pytest.mark.parametrize("s", PRMT_SIZES)
def test_the_wide_store_writes_each_byte_of_the_run_once(rng, s):
    """Random configs' transposed buffers (random bytes, garbage in the padding words), random
    row counts (at least 4 bytes a row), tile widths and run offsets: every byte of the run
    is the right row's byte, written exactly once, and nothing outside it is written."""
    from autotranspose.kernels.config import prmt_layout

    space = [
        c
        for c in flat_prmt_space(s, NEWEST, 1)
        if c.params.wide and not c.params.ordered and not c.persistent
    ]
    for c in [space[i] for i in rng.choice(len(space), 4, replace=False)]:
        lay = prmt_layout(c)
        for _ in range(6):
            m = int(rng.integers(-(-4 // s), c.tile_m + 1))
            ncols = int(rng.integers(1, c.tile_n + 1))
            lead = int(rng.integers(0, 16 // s)) * s
            sb = rng.integers(0, 256, size=lay["sb_words"] * 4 + 16, dtype=np.uint8)
            rowb = m * s
            got, count = _store_run_model(sb, lay["p2w"], rowb, ncols, lead, lay["threads"])
            want = {
                j * rowb + b: int(sb[j * lay["p2w"] * 4 + b])
                for j in range(ncols)
                for b in range(rowb)
            }
            assert got == want, (c.key, m, ncols, lead)
            assert set(count.values()) == {1}


# --- a model of the ordered buffer (templates/prmt/wide.cu.j2 `put_ordered`, `store_copy`) -------
def _ordered_model(m: int, s: int, ncols: int, lead: int, threads: int, sb_bytes: int):
    """Where the exchange puts each word of an ordered buffer ({buffer byte: (output row, input
    row, byte)}, and how often each byte is written), and which buffer bytes the store reads
    for which run bytes."""
    k = 4 // s
    rowb = m * s
    put: dict[int, tuple[int, int, int]] = {}
    count: dict[int, int] = {}
    for g in range(-(-m // k)):
        a0, vb = lead + 4 * g, min(4, rowb - 4 * g)
        for c in range(-(-ncols // k) * k):  # the rows' last word can hold columns past ncols
            a = a0 + c * rowb
            for e in range(vb):  # whole word or element by element: the same bytes
                assert 0 <= a + e < sb_bytes
                put[a + e] = (c, (4 * g + e) // s, (4 * g + e) % s)
                count[a + e] = count.get(a + e, 0) + 1
    nb = ncols * rowb
    reads: dict[int, int] = {}
    for t in range(threads):
        for ck in range(t, (lead + nb + 15) >> 4, threads):
            f = 16 * ck - lead
            lo, hi = (f, f + 16) if f >= 0 and f + 16 <= nb else (max(f, 0), min(f + 16, nb))
            for e in range(lo, hi):
                assert e not in reads
                reads[e] = lead + e
    return put, count, reads


@pytest.mark.parametrize("s", PRMT_SIZES)
def test_the_ordered_buffer_holds_each_run_byte_once_where_the_store_reads_it(rng, s):
    """Random ordered configs, row counts from 1 to the tile's (words of rows under 4 bytes,
    and rows ending mid-word), tile widths and run offsets: every run byte is put once, by the
    right output row's word, inside the buffer, and the store reads it from there once; what
    the rows' last word holds past the tile's columns lands past the run, inside the buffer."""
    from autotranspose.kernels.config import prmt_layout

    space = [c for c in flat_prmt_space(s, NEWEST, 1) if c.params.ordered and not c.persistent]
    for c in [space[i] for i in rng.choice(len(space), 4, replace=False)]:
        lay = prmt_layout(c)
        for _ in range(8):
            m = int(rng.integers(1, c.tile_m + 1))
            ncols = int(rng.integers(1, c.tile_n + 1))
            lead = int(rng.integers(0, 16 // s)) * s
            put, count, reads = _ordered_model(
                m, s, ncols, lead, lay["threads"], lay["sb_words"] * 4
            )
            rowb = m * s
            assert set(count.values()) == {1}
            assert all(put[a][0] >= ncols for a in put if not lead <= a < lead + ncols * rowb)
            assert {e: put[a] for e, a in reads.items()} == {
                j * rowb + b: (j, b // s, b % s) for j in range(ncols) for b in range(rowb)
            }, (c.key, m, ncols, lead)


def test_an_ordered_config_is_a_wide_one_and_named_so():
    w = wide_default(1, 20).replace(ordered=False)
    o = w.replace(ordered=True)
    assert o.key == w.key + "_or" and "lead_o" not in kernel_source(w)
    assert (
        "in order" in kernel_source(o)
        and "lead_o" in kernel_source(o)
        and o.applies(1, 1000)
        and not w.applies(1, 1000)
    )
    assert "ordered" not in w.to_dict() and KernelConfig.from_dict(o.to_dict()) == o
    with pytest.raises(ConfigError, match="ordered=True is a wide kernel's"):
        tall_default(1, 20).replace(ordered=True)


def test_a_served_1_byte_ordered_config_runs_whole_words_only():
    """for_rows: a 1-byte ordered wide config serves calls whose rows are whole words as it
    is, and others as its run-store twin; 2- and 4-byte ones and other configs as they are."""
    from autotranspose.kernels.config import for_rows

    o1, o2 = wide_default(1, 20), wide_default(2, 20)
    assert for_rows(o1, 20) == o1 and for_rows(o1, 32) == o1
    assert for_rows(o1, 21) == o1.replace(ordered=False) and for_rows(o1, 22).applies(22, 1000)
    assert for_rows(o1, 3) == o1  # under 4 bytes only the ordered buffer runs them
    assert for_rows(o2, 21) == o2 and for_rows(prmt_default(1), 21) == prmt_default(1)

"""The access pattern of served launches (autotranspose/bench/pattern.py): the closed-form
sector count against a walk of every tile, word by word, as the pattern kernel's threads
move them (templates/pattern/tile.cu.j2); the sectors against the call's exact bytes; the
geometry each kind's served config gives."""

from __future__ import annotations

import math
import shutil
from dataclasses import replace

import numpy as np
import pytest

from autotranspose.bench.pattern import (
    SECTOR,
    TileAccess,
    Traffic,
    cast_access,
    copy_traffic,
    launch_access,
    tile_access,
    traffic,
)
from autotranspose.dispatch import policy
from autotranspose.kernels import config as C
from autotranspose.kinds import cast as cast_kind
from autotranspose.plans.cast import Launch as CastLaunch

Z_BASE = 1 << 40  # the same-order output's addresses: apart from the output's


def walk(a: TileAccess, offsets=((0, 0),)) -> Traffic:
    """Every tile of the launch in the kernel's order, each word its threads load or store
    (the template's arithmetic, in Python): distinct sectors per tile, summed."""
    si, so = a.in_bytes, a.out_bytes
    outer = list(a.outer) + [(1, 0, 0)] * (2 - len(a.outer))
    z_outer = list(a.z_outer) + [0] * (2 - len(a.z_outer))
    rt, ct = a.row_tiles, a.col_tiles
    fast, slow = (ct, rt) if a.raster == "row" else (rt, ct)
    reads = writes = 0
    for i0, o0 in offsets:
        for tile in range(a.tiles):
            b, r = divmod(tile, fast * slow)
            q, b0 = divmod(b, a.batch)
            b2, b1 = divmod(q, outer[1][0])
            ti, tj = divmod(r, fast) if a.raster == "row" else (r % fast, r // fast)
            r0, c0 = ti * a.tile_m, tj * a.tile_n
            ncols = min(a.tile_n, a.n - c0)
            base_in = a.base_in + i0 + (b0 * a.bs_in + b1 * outer[1][1] + b2 * outer[0][1]) * si
            base_out = a.base_out + o0 + (b0 * a.bs_out + b1 * outer[1][2] + b2 * outer[0][2]) * so
            seen: set[int] = set()
            for row_i in range(max(r0 - a.halo, 0), min(r0 + a.tile_m, a.m)):
                seen |= _words(base_in + (row_i * a.ld_in + c0) * si, ncols * si, a.in_word)
            reads += len(seen)
            seen = set()
            for c in range(ncols):
                row = base_out + (c0 + c) * a.ld_out * so
                start = (row + r0 * so) // a.window * a.window
                lo, hi = max(start, row), min(start + a.tile_m * so, row + a.m * so)
                if hi > lo:
                    seen |= _words(lo, hi - lo, a.out_word)
            if a.z_ld:
                z = (
                    Z_BASE
                    + a.base_out
                    + o0
                    + (b0 * a.z_bs + b1 * z_outer[1] + b2 * z_outer[0]) * so
                )
                for row_i in range(r0, min(r0 + a.tile_m, a.m)):
                    seen |= _words(z + (row_i * a.z_ld + c0) * so, ncols * so, a.out_word)
            writes += len(seen)
    n = len(offsets)
    return Traffic(reads, writes, n * a.read_bytes, n * a.written_bytes)


def _words(start: int, length: int, w: int) -> set[int]:
    """Sectors of the aligned `w`-byte words covering [start, start + length)."""
    first = start // w * w
    return {p // SECTOR for p in range(first, start + length, w)}


def _side(rng, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi))


def _served(rng) -> list[tuple[object, int, int, int]]:
    """(config as the call runs it, batch, m, n): each kind's served configs on random small
    shapes they take."""
    out = []
    for s in (1, 2, 4, 8, 16):
        b, m, n = _side(rng, 1, 3), _side(rng, 20, 300), _side(rng, 20, 300)
        for cfg in (C.default_config(s, max_vector=1), C.staged_default(s), C.prmt_default(s)):
            if cfg is not None:
                out.append((cfg, b, m, n))
        short = _side(rng, 1, 16)
        tall, wide = C.tall_default(s, short), C.wide_default(s, short)
        if tall is not None:
            out.append((tall, 1, _side(rng, 100, 900), short))
        if wide is not None and wide.applies(short, 600):
            out.append((wide, 1, short, _side(rng, 100, 900)))
        flat = C.flat_default(s, short)
        if flat is not None:
            out.append((flat, b, _side(rng, 100, 900), short))
            out.append((flat, b, short, _side(rng, 100, 900)))
        for cfg in (C.direct_default(s, m, n), C.narrow_default(s, 5, n)):
            if cfg is not None:
                out.append((cfg, b, 5 if cfg.tile_m <= 8 else m, n))
    for s, side in ((1, 3), (2, 5), (1, 13)):
        cfg = C.regt_default(s, 700, side)
        if cfg is not None:
            out.append((policy.for_call(cfg, 700, side), 1, 700, side))
        cfg = C.regt_default(s, side, 700)
        if cfg is not None:
            out.append((policy.for_call(cfg, side, 700), 1, side, 700))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_the_closed_form_counts_what_the_pattern_kernel_walks(seed):
    """Every kind's served config on random shapes, pitched rows, a batch, a host loop's
    offsets: the residue count equals the tile-by-tile walk, sector for sector."""
    rng = np.random.default_rng(seed)
    for cfg, b, m, n in _served(rng):
        ld_in, ld_out = n + _side(rng, 0, 5), m + _side(rng, 0, 5)
        a = tile_access(cfg, b, m, n, ld_in, ld_out, m * ld_in + 3, n * ld_out + 1)
        offsets = ((0, 0), (_side(rng, 0, 64) * cfg.elem_bytes, _side(rng, 0, 64) * cfg.elem_bytes))
        assert traffic(a, offsets) == walk(a, offsets), (cfg.key, b, m, n)


@pytest.mark.parametrize("seed", range(3))
def test_outer_dims_and_raster_are_walked_alike(seed):
    rng = np.random.default_rng(seed)
    cfg = C.default_config(2, max_vector=1)
    m, n = _side(rng, 30, 200), _side(rng, 30, 200)
    outer = (
        (_side(rng, 1, 4), m * n * 3 + 7, m * n * 3 + 5),
        (_side(rng, 1, 4), m * n + 1, m * n + 3),
    )
    for raster in ("row", "col"):
        a = replace(tile_access(cfg, 2, m, n, n, m, 0, 0, outer=outer), raster=raster)
        assert traffic(a) == walk(a)


@pytest.mark.parametrize("seed", range(3))
def test_a_cast_launch_counts_its_same_order_output(seed):
    rng = np.random.default_rng(seed)
    src, dst = cast_kind.PAIRS["f32_e4m3"]
    cfg = cast_kind.default(C.KernelConfig, src, dst)
    m, n = _side(rng, 100, 400), _side(rng, 100, 400)
    for rides in (False, True):
        lc = CastLaunch(1, m, n, n, m * n, m, m * n, True, rides=rides, ld_r=n, bs_r=m * n)
        a = cast_access(cfg, lc, 0, 0)
        got = traffic(a)
        assert got == walk(a)
        assert got.written_bytes == m * n * (2 if rides else 1)


@pytest.mark.parametrize("s", [1, 2, 4, 8, 16])
def test_aligned_tiles_touch_exactly_the_calls_bytes(rng, s):
    """Sides and tiles on sector boundaries: every sector read and written is the call's."""
    cfg = C.default_config(s)
    m = cfg.tile_m * _side(rng, 1, 5) * max(1, SECTOR // (cfg.tile_m * s))
    n = cfg.tile_n * _side(rng, 1, 5) * max(1, SECTOR // (cfg.tile_n * s))
    t = traffic(tile_access(cfg, _side(rng, 1, 4), m, n, n, m, m * n, m * n))
    assert t.read_per_byte == 1.0 and t.written_per_byte == 1.0, (cfg.key, m, n)


@pytest.mark.parametrize("seed", range(3))
def test_sectors_are_never_fewer_than_the_bytes(seed):
    """Odd sides: at least the call's bytes in sectors; narrow odd tiles of 1-byte elements
    read and write well past them."""
    rng = np.random.default_rng(seed)
    for cfg, b, m, n in _served(rng):
        t = traffic(tile_access(cfg, b, m, n, n, m, m * n, m * n))
        assert t.read_per_byte >= 1.0 and t.written_per_byte >= 1.0, cfg.key
    cfg = C.default_config(1, max_vector=1)
    odd = traffic(tile_access(cfg, 1, 4097, 4099, 4099, 4097, 0, 0))
    assert odd.written_per_byte > 1.05


def test_a_huge_call_is_counted_without_walking_its_tiles():
    """A 1 GB call counts in well under a second: tiles alike are counted as residues."""
    import time

    cfg = C.prmt_default(1)
    t0 = time.perf_counter()
    t = traffic(tile_access(cfg, 1, 32771, 32769, 32769, 32771, 0, 0))
    assert time.perf_counter() - t0 < 2.0
    assert t.read_bytes == 32771 * 32769 and t.read_per_byte > 1.0


def test_copies_count_their_span():
    assert copy_traffic(64, 0, 0) == Traffic(2, 2, 64, 64)
    assert copy_traffic(64, 16, 0) == Traffic(3, 2, 64, 64)
    assert copy_traffic(0) == Traffic(0, 0, 0, 0)


@pytest.mark.parametrize("seed", range(3))
def test_a_launch_is_read_back_from_its_scalars(seed):
    """make_launch's scalars (strides in words, the outer dims' struct) give back the call."""
    rng = np.random.default_rng(seed)
    for cfg in (C.default_config(4), C.staged_default(2), C.prmt_default(1)):
        v = 1 if cfg.any_offset else cfg.vec
        m, n = _side(rng, 1, 50) * 16, _side(rng, 1, 50) * 16
        b, o1, o2 = _side(rng, 1, 4), _side(rng, 1, 4), _side(rng, 1, 4)
        tm, tn = cfg.tiles(m, n)
        fast, slow = (tn, tm) if cfg.raster == "row" else (tm, tn)
        total = tm * tn * b * o1 * o2
        grid = cfg.grid(m, n, b * o1 * o2)
        strides = (n * 2, m * 2, m * n * 4, m * n * 4)
        os_ = (m * n * 64, m * n * 64, m * n * 16, m * n * 16)
        scalars = (m, n, *(x // v for x in strides), fast, slow, total, b,
                   *(x // v for x in os_), o2, 0)  # fmt: skip
        got = launch_access(cfg, scalars, grid)
        want = tile_access(cfg, b, m, n, *strides,
                           outer=((o1, os_[0], os_[1]), (o2, os_[2], os_[3])), grid=grid)  # fmt: skip
        assert got == want
        assert got.tiles == total and math.prod(got.grid) >= 1
        flat = launch_access(cfg, (m, n, *(x // v for x in strides), fast, slow, tm * tn * b), grid)
        assert flat == tile_access(cfg, b, m, n, *strides, grid=grid)


# --- the pattern kernel itself, run on the CPU (tests/_emu.py) -----------------------------

_RECORDING = """static unsigned long long* at_rec;  // [entries, then (address, bytes + 256 * store)...]
template <class T> static inline T at_rec_ld(const T* p) {
    const unsigned long long n = at_rec[0]++;
    at_rec[1 + 2 * n] = (unsigned long long)p; at_rec[2 + 2 * n] = sizeof(T);
    return *p;
}
template <class T> static inline void at_rec_st(T* p, T v) {
    const unsigned long long n = at_rec[0]++;
    at_rec[1 + 2 * n] = (unsigned long long)p; at_rec[2 + 2 * n] = sizeof(T) + 256;
    *p = v;
}
#define __ldcs at_rec_ld
#define __stcs at_rec_st
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
"""
_GLUE = """struct emu_a { const unsigned char* in; unsigned char* out; unsigned long long* rec;
    at_pattern_args a; };
static emu_a emu_args;
static void emu_one() {
    gridDim.y = gridDim.z = 1;
    at_rec = emu_args.rec;
    NAME(emu_args.in, emu_args.out, emu_args.a);
}
"""


def expected_words(a: TileAccess, inp: int, out: int, z: int):
    """(address, bytes, store) of every word the pattern kernel's threads move, as a count."""
    from collections import Counter

    si, so = a.in_bytes, a.out_bytes
    outer = [(1, 0, 0)] * (2 - len(a.outer)) + list(a.outer)
    got: Counter = Counter()
    for b2 in range(outer[0][0]):
        for b1 in range(outer[1][0]):
            for b0 in range(a.batch):
                i0 = inp + (b0 * a.bs_in + b1 * outer[1][1] + b2 * outer[0][1]) * si
                o0 = out + (b0 * a.bs_out + b1 * outer[1][2] + b2 * outer[0][2]) * so
                zb = z + b0 * a.z_bs * so
                for ti in range(a.row_tiles):
                    for tj in range(a.col_tiles):
                        r0, c0 = ti * a.tile_m, tj * a.tile_n
                        nc = min(a.tile_n, a.n - c0)
                        for r in range(max(r0 - a.halo, 0), min(r0 + a.tile_m, a.m)):
                            _count(got, i0 + (r * a.ld_in + c0) * si, nc * si, a.in_word, 0)
                        for c in range(nc):
                            row = o0 + (c0 + c) * a.ld_out * so
                            start = (row + r0 * so) // a.window * a.window
                            lo, hi = max(start, row), min(start + a.tile_m * so, row + a.m * so)
                            if hi > lo:
                                _count(got, lo, hi - lo, a.out_word, 1)
                        if a.z_ld:
                            for r in range(r0, min(r0 + a.tile_m, a.m)):
                                _count(got, zb + (r * a.z_ld + c0) * so, nc * so, a.out_word, 1)
    return got


def _count(got, start: int, length: int, w: int, store: int) -> None:
    for p in range(start // w * w, start + length, w):
        got[(p, w, store)] += 1


def _emulated_cases(rng):
    out = []
    for cfg, b, m, n in _served(rng):
        m, n = min(m, 70), min(n, 70)  # fibers are slow: a few tiles each
        if cfg.kind == "regt" or not cfg.applies(m, n):
            continue
        out.append(tile_access(cfg, min(b, 2), m, n, n + 1, m + 3, m * (n + 1) + 5, n * (m + 3)))
    cfg = policy.for_call(C.regt_default(1, 300, 3), 300, 3)
    out.append(tile_access(cfg, 1, 300, 3, 3, 300, 0, 0))
    cfg = C.prmt_default(1)  # a permute's transpose pass: a batch and two outer dims
    m, n = 40, 70
    outer = ((2, 3 * m * n * 2 + 5, 3 * m * n * 2 + 1), (3, 2 * m * n + 3, 2 * m * n + 7))
    out.append(tile_access(cfg, 2, m, n, n, m, m * n, m * n, outer=outer))
    src, dst = cast_kind.PAIRS["bf16_e4m3"]
    ccfg = cast_kind.default(C.KernelConfig, src, dst)
    lc = CastLaunch(1, 77, 301, 301, 0, 77, 0, True, rides=True, ld_r=301)
    out.append(cast_access(ccfg, lc, 0, 0))
    return out


def test_the_pattern_kernel_moves_exactly_the_words_of_the_pattern(rng):
    """The rendered kernel, run on the CPU with its loads and stores recorded: every word
    the Python walk names, each once, and nothing else."""
    import ctypes

    from _emu import address, emulated, gxx, shared

    from autotranspose.bench.ceiling import ARG_BYTES, params, render, scalars

    if gxx() is None:
        pytest.skip("no g++ or CUDA headers to build the emulated kernel")
    from autotranspose.bench.ceiling import widened

    cases = _emulated_cases(rng)
    for a in [*cases, *(widened(a) for a in cases[::2])]:  # served words, and 16-byte ones
        a = replace(a, cache="stream", base_in=0, base_out=0)  # loads and stores recorded
        k = params(a)
        src = _RECORDING + render([k])
        lib = emulated(k["name"], src, "emu_a", _GLUE.replace("NAME", k["name"]))
        outer = [(1, 0, 0)] * (2 - len(a.outer)) + list(a.outer)
        span_in = (a.batch * max(a.bs_in, 1) + a.m * a.ld_in + a.n) * a.in_bytes
        span_out = (a.batch * max(a.bs_out, 1) + a.n * a.ld_out + a.m) * a.out_bytes
        for e, si_, so_ in outer:
            span_in += e * si_ * a.in_bytes
            span_out += e * so_ * a.out_bytes
        inp, out, z = shared(span_in + 128), shared(span_out + 128), shared(span_in + 128)
        rec = shared(8 * (1 + 2 * 4 * (span_in + span_out)))
        pin, pout, pz = address(inp) + 64, address(out) + 64, address(z) + 64
        vals = scalars(a, pz if a.z_ld else 0)
        blob = bytes(struct_pack(pin, pout, address(rec), vals))
        assert len(blob) == 24 + ARG_BYTES
        code = lib.emu_launch_isolated(ctypes.c_char_p(blob), min(math.prod(a.grid), 3), a.threads)
        assert code == 0, (a.kind, code)
        r = rec.view(np.uint64)
        n = int(r[0])
        words = r[1 : 1 + 2 * n].reshape(n, 2)
        from collections import Counter

        got = Counter((int(p), int(s) % 256, int(s) // 256) for p, s in words)
        want = expected_words(a, pin, pout, pz)
        assert got == want and sum(got.values()) > 0, (a.kind, a.tile_m, a.tile_n, a.m, a.n)


def struct_pack(pin: int, pout: int, rec: int, vals: tuple[int, ...]) -> bytes:
    import struct

    from autotranspose.bench.ceiling import ARG_FORMAT

    return struct.pack("<QQQ", pin, pout, rec) + struct.pack(ARG_FORMAT, *vals)


# --- box passes ---------------------------------------------------------------------------


def _box_cases(rng) -> list:
    """The box passes permute() plans for random 3- to 5-D permutes of every element size."""
    from autotranspose.bench.pattern import box_access
    from autotranspose.kernels.packed import packed_args
    from autotranspose.plans.layout import contiguous_strides
    from autotranspose.plans.permute import plan_permute

    out = []
    while len(out) < 8:
        nd = int(rng.integers(3, 6))
        shape = tuple(int(v) for v in rng.integers(2, 40, nd))
        axes = tuple(int(a) for a in rng.permutation(nd))
        e = int(rng.choice([1, 2, 4, 8, 16]))
        if math.prod(shape) * e > 60000:  # walked element by element in Python
            continue
        plan = plan_permute(shape, axes, e, contiguous_strides(shape), None, in_ptr=0, out_ptr=0)
        for p in plan.passes:
            if p.box:
                args = packed_args(p.elem_bytes, p.dims, p.box)
                out.append(box_access(args, p.elem_bytes, (3, 1, 1), 256))
    return out


def _moved(a) -> int:
    """Bytes the boxes hold, counted box by box."""
    total = 0
    for t in range(a.tiles):
        rest, lims = t, list(a.box)
        for g, count in enumerate(a.tiles_of):
            rest, r = divmod(rest, count)
            if g < len(a.checked):
                d = a.checked[g]
                lims[d] = min(a.box[d], a.extent[d] - r * a.box[d])
        total += math.prod(lims)
    return total * a.elem_bytes


def box_words(a, inp: int, out: int):
    """(address, bytes, store) of every word the box pattern kernel moves, and the sectors
    per box summed (reads, writes), by walking every box."""
    from collections import Counter

    e = a.elem_bytes
    got: Counter = Counter()
    reads = writes = 0
    for t in range(a.tiles):
        rest, ib, ob, lims = t, 0, 0, list(a.box)
        for g, count in enumerate(a.tiles_of):
            rest, r = divmod(rest, count)
            ib, ob = ib + r * a.tile_in[g], ob + r * a.tile_out[g]
            if g < len(a.checked):
                d = a.checked[g]
                lims[d] = min(a.box[d], a.extent[d] - r * a.box[d])
        for base, corner, strides, run, w, store in (
            (inp, ib, a.in_stride, a.in_run, a.in_word, 0),
            (out, ob, a.out_stride, a.out_run, a.out_word, 1),
        ):
            w = w if run is not None else e
            seen: set[int] = set()
            others = [d for d in range(len(a.box)) if d != run]
            for idx in np.ndindex(*[lims[d] for d in others]):
                start = (
                    base
                    + (corner + sum(x * strides[d] for x, d in zip(idx, others, strict=True))) * e
                )
                length = lims[run] * e if run is not None else e
                for p in range(start // w * w, start + length, w):
                    got[(p, w, store)] += 1
                    seen.add(p // SECTOR)
            if store:
                writes += len(seen)
            else:
                reads += len(seen)
    return got, reads, writes


@pytest.mark.parametrize("seed", range(3))
def test_a_tile_in_wide_words_touches_the_same_sectors(seed):
    """A tile's pattern in 16-byte words (`widened`) reads and writes exactly the sectors of
    its served words, at any residue of x and y in a sector."""
    from autotranspose.bench.ceiling import WIDE_WORD, narrow, widened

    rng = np.random.default_rng(seed)
    for a in _emulated_cases(rng):
        w = widened(a)
        assert w.in_word == w.out_word == WIDE_WORD
        assert narrow(a) == (min(a.in_word, a.out_word) < WIDE_WORD)
        base_in = int(rng.integers(0, 32)) // a.in_bytes * a.in_bytes
        base_out = int(rng.integers(0, 32)) // a.out_bytes * a.out_bytes
        at = ((1 << 20) + base_in, (1 << 22) + base_out, 1 << 24 if a.z_ld else 0)
        got = [{(p // 32, st) for p, _, st in expected_words(x, *at)} for x in (a, w)]
        assert got[0] == got[1], (a.kind, a.in_word, a.out_word)


@pytest.mark.parametrize("seed", range(3))
def test_wide_words_touch_the_same_sectors_as_the_served_ones(seed):
    """A box pass's pattern in 16-byte words (`widened`) reads and writes exactly the sectors
    of its served words: the wide pattern prices the same traffic in fewer instructions."""
    from autotranspose.bench.ceiling import WIDE_WORD, widened

    rng = np.random.default_rng(seed)
    for a in _box_cases(rng):
        a = replace(a, base_in=int(rng.integers(0, 32)) // a.elem_bytes * a.elem_bytes)
        w = widened(a)
        assert (w.in_word == WIDE_WORD) == (a.in_run is not None)
        assert (w.out_word == WIDE_WORD) == (a.out_run is not None)
        _, reads, writes = box_words(a, a.base_in, a.base_out)
        _, wide_reads, wide_writes = box_words(w, a.base_in, a.base_out)
        assert (wide_reads, wide_writes) == (reads, writes), a


@pytest.mark.parametrize("seed", range(3))
def test_box_sectors_in_closed_form_are_the_walks(seed):
    from autotranspose.bench.pattern import box_traffic

    rng = np.random.default_rng(seed)
    for a in _box_cases(rng):
        a = replace(a, base_in=int(rng.integers(0, 32)) // a.elem_bytes * a.elem_bytes)
        _, reads, writes = box_words(a, a.base_in, a.base_out)
        t = box_traffic(a)
        assert (t.read_sectors, t.written_sectors) == (reads, writes), a
        assert t.read_per_byte >= 1.0 and t.written_per_byte >= 1.0
        assert t.read_bytes == t.written_bytes == _moved(a)  # every element once


def test_the_box_pattern_kernel_moves_exactly_the_words_of_the_walk(rng):
    import ctypes
    from collections import Counter

    from _emu import address, emulated, gxx, shared

    from autotranspose.bench.ceiling import (
        BOX_ARG_BYTES,
        BOX_ARG_FORMAT,
        box_params,
        box_scalars,
        render,
    )

    if gxx() is None:
        pytest.skip("no g++ or CUDA headers to build the emulated kernel")
    import struct

    from autotranspose.bench.ceiling import widened

    cases = _box_cases(rng)
    for a in cases[:5] + [widened(c) for c in cases[5:8]]:  # served words, and wide ones
        a = replace(a, threads=64)  # fewer fibers: the same walk
        k = {**box_params(a), "cache": "stream"}
        glue = _GLUE.replace("NAME", k["name"]).replace("at_pattern_args a;", "at_box_args a;")
        lib = emulated(k["name"], _RECORDING + render([k]), "emu_a", glue)
        span = a.moved_bytes + 64 * a.elem_bytes
        inp, out = shared(span + 128), shared(span + 128)
        rec = shared(8 * (1 + 2 * 2 * span))
        pin, pout = address(inp) + 64, address(out) + 64
        blob = struct.pack("<QQQ", pin, pout, address(rec)) + struct.pack(
            BOX_ARG_FORMAT, *box_scalars(a)
        )
        assert len(blob) == 24 + BOX_ARG_BYTES
        assert lib.emu_launch_isolated(ctypes.c_char_p(blob), 3, a.threads) == 0, a
        r = rec.view(np.uint64)
        n = int(r[0])
        words = r[1 : 1 + 2 * n].reshape(n, 2)
        got = Counter((int(p), int(s) % 256, int(s) // 256) for p, s in words)
        want, _, _ = box_words(a, pin, pout)
        assert got == want and n > 0, a


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_every_pattern_kernel_compiles_silently(rng):
    """The tile kernels of each kind's served configs, a cast's, and the box kernels of
    random permutes' box passes: nvcc says nothing (pycuda would warn at every first use)."""
    from _nvcc import assert_nvcc_silent

    from autotranspose.bench.ceiling import box_params, params, render, widened

    kernels = [
        params(tile_access(cfg, b, m, n, n + 1, m + 3, 0, 0)) for cfg, b, m, n in _served(rng)
    ]
    kernels += [params(a) for a in _emulated_cases(rng)[-1:]]  # the cast's, with z
    boxes = _box_cases(rng)
    kernels += [box_params(a) for a in boxes] + [box_params(widened(a)) for a in boxes[:4]]
    kernels = list({k["name"]: k for k in kernels}.values())  # a box already in wide words once
    assert_nvcc_silent(render(kernels))

"""The access pattern of served launches (autotranspose/bench/pattern.py): the closed-form
sector count against a walk of every tile, word by word, as the pattern kernel's threads
move them (templates/pattern/tile.cu.j2); the sectors against the call's exact bytes; the
geometry each kind's served config gives."""

from __future__ import annotations

import math
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
            out.append((C.for_call(cfg, 700, side), 1, 700, side))
        cfg = C.regt_default(s, side, 700)
        if cfg is not None:
            out.append((C.for_call(cfg, side, 700), 1, side, 700))
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

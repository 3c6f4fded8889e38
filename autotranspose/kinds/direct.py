"""Direct kernels (direct=True, templates/direct/): the seed documents' strategy with the
tiled kernel's parameters: one element an access, tile indices from a 2-D grid (the batch on
z). Square tiles of 4- to 16-byte elements, and narrow tiles (a side of 2-8 elements) of any
element size for calls with a side that short.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .base import (
    CACHE_HINTS,
    PER_THREAD,
    RASTERS,
    TILE_SIZES,
    WARP,
    Config,
    Kind,
    Launchable,
    New,
    Search,
    SpaceCall,
    fixed_field_errors,
    min_blocks_errors,
    occupancy_steps,
    register_budget,
)

DIRECT_SIZES = (4, 8, 16)
DIRECT_TILES = (16, 32, 64)
# Narrow direct tiles, for calls with a side of at most DIRECT_NARROW[-1] elements (few
# columns of one-element words, interleaves of a few rows): a short side of 2-8 elements
# and a long side of 64-256, so a warp's loads (few columns) or stores (few rows) are one
# contiguous run. A block with fewer threads than a tile side walks that side in steps of
# the block (templates/direct/).
DIRECT_NARROW = (2, 4, 8)
DIRECT_LONG = (64, 128, 256)
DIRECT_SIDES = tuple(sorted(set(TILE_SIZES + DIRECT_NARROW)))
MAX_GRID_YZ = 65535  # a launch's grid y and z; a direct kernel loops over tiles past them
# A direct kernel needs few registers (the seed documents' kernel: 26 on sm_90, 8 blocks of
# 256 threads an SM), but ptxas takes 48 for it uncapped: caps down to 32 are searched.
DIRECT_CAPS: tuple[int, ...] = (64, 40, 32)
# a thread's elements in flight (its loads are all issued before a barrier): 16 spilled
# under the 32-register cap
DIRECT_MAX_PER_THREAD = 8


def _direct_errors(c: Config) -> Iterator[str]:
    yield from fixed_field_errors(
        c,
        "direct",
        {
            "vec": 1,
            "layout": "pad",
            "realign": False,
            "persistent": 0,
        },
        "a direct kernel moves one element an access, through a padded tile, one block a tile",
    )
    if c.per_thread > DIRECT_MAX_PER_THREAD:
        yield (
            f"direct=True: per_thread={c.per_thread} elements in flight a thread; at most "
            f"{DIRECT_MAX_PER_THREAD} (ptxas spilled 16 under the register caps): lower per_thread"
        )
    threads = c.tile_m * c.tile_n // c.per_thread
    if threads % WARP or threads > 1024:
        yield (
            f"direct tile {c.tile_m}x{c.tile_n} with per_thread={c.per_thread} gives {threads} "
            f"threads; a block takes a multiple of {WARP} up to 1024: change per_thread"
        )
    if c.conjugate and c.elem_bytes not in (8, 16):
        yield "conjugate=True needs complex64 or complex128 elements (elem_bytes 8 or 16)"
    yield from min_blocks_errors(c, threads)


def direct_space(launchable: Launchable, call: SpaceCall) -> Iterator[Any]:
    """The direct configs (one element an access, the seed documents' strategy) for
    `elem_bytes`-byte elements (4 to 16), each uncapped and at the register caps; with a
    `short_side` of at most DIRECT_NARROW[-1], the narrow tiles too, for every element size
    (padded or not: padding spreads a warp's reads down a 2-8 wide column over the banks,
    but a first call's refinement found float16 20000003x2 faster unpadded on an H200)."""
    elem_bytes, short_side = call.elem_bytes, call.short_side
    tiles = (
        [(tm, tn) for tm in DIRECT_TILES for tn in DIRECT_TILES]
        if elem_bytes in DIRECT_SIZES
        else []
    )
    if short_side is not None and short_side <= DIRECT_NARROW[-1]:
        narrow = [(a, b) for a in DIRECT_NARROW for b in DIRECT_LONG]
        tiles += narrow + [(b, a) for a, b in narrow]
    for tm, tn in tiles:
        for pt in PER_THREAD:
            for pad in (0, 1):
                for raster in RASTERS:
                    for cache in CACHE_HINTS:
                        yield from launchable(
                            call.limits,
                            elem_bytes,
                            tm,
                            tn,
                            1,
                            pt,
                            pad,
                            "pad",
                            raster,
                            cache,
                            call.conjugate,
                            kind="direct",
                        )


FEW_ROWS_MAX = 256  # an m x n call with fewer rows than this (and than columns) has few rows
DIRECT_FEW_ROWS_MIN = 4  # direct tiles serve few long rows of 8- and 16-byte elements from here


def _search(launchable: Launchable, call: SpaceCall) -> Iterator[Any]:
    """4- to 16-byte elements, or a call with a side of at most DIRECT_NARROW[-1]."""
    short = call.short_side
    if call.elem_bytes in DIRECT_SIZES or (short is not None and short <= DIRECT_NARROW[-1]):
        yield from direct_space(launchable, call)


def _params(c: Config) -> dict[str, object]:
    """What templates/direct/ needs about one direct config."""
    return {
        "tm": c.tile_m,
        "tn": c.tile_n,
        "pt": c.per_thread,
        "pad": c.pad,
        "e": max(c.elem_bytes // 4, 1),  # 32-bit words an element (the last holds a sign)
        "lstep": c.threads // c.tile_n,  # input rows apart a thread's loads are
        "sstep": c.threads // c.tile_m,  # output rows apart its stores are
        # a narrow tile's long side with more elements than the block has threads: a thread's
        # loads (lq) or stores (sq) walk it, this many a row (0: the tile's other mapping)
        "lq": c.tile_n // c.threads if c.threads < c.tile_n else 0,
        "sq": c.tile_m // c.threads if c.threads < c.tile_m else 0,
        "raster": c.raster,
        "smem": c.smem_bytes,
    }


class Direct(Kind):
    name = "direct"
    mark = "direct"
    codes = (("direct", "dr"),)
    template = "direct/direct.cu.j2"
    persistent = False  # a direct grid is the tiles

    def errors(self, c: Config) -> Iterator[str]:
        return _direct_errors(c)

    def derive(self, c: Config) -> dict[str, int]:
        # a tile_m x (tile_n + pad) array of elements
        return {
            "threads": c.tile_m * c.tile_n // c.per_thread,
            "smem": c.tile_m * (c.tile_n + c.pad) * c.elem_bytes,
        }

    def params(self, c: Config) -> dict[str, object]:
        return _params(c)

    def searches(self) -> tuple[Search, ...]:
        return ((30, _search),)

    def tile_n_values(self, c: Config) -> tuple[int, ...]:
        return DIRECT_SIDES  # narrow ones too

    def grid(
        self, c: Config, m: int, n: int, batch: int, multiprocessors: int
    ) -> tuple[int, int, int]:
        """The raster's fast tiles on x, the others on y and the batch on z (each capped at
        what a launch allows: the kernel loops over the rest)."""
        tm, tn = self.tiles(c, m, n)
        fast, slow = (tn, tm) if c.raster == "row" else (tm, tn)
        return (fast, min(slow, MAX_GRID_YZ), min(batch, MAX_GRID_YZ))

    def cap_steps(self, c: Config) -> tuple[int, ...]:
        """Caps that leave at least half the registers to what it is not loading: its
        elements in flight at half of 32 registers spilled (16-byte elements, per_thread 8,
        sm_90)."""
        data = c.per_thread * max(c.elem_bytes // 4, 1)  # registers of elements in flight
        steps = occupancy_steps(c.threads, tuple(cap for cap in DIRECT_CAPS if cap >= 2 * data))
        if c.elem_bytes == 16 and c.raster == "row":
            # ptxas 13 spilled 8-16 bytes (sm_90) in these where it had exactly twice the
            # elements' registers, 32: 5 of the 2992 capped direct configs streaming, and
            # s16_m128_n2_v1_t4_pad0_row_default_dr_b32 with the default hint (which kept 64
            # registers for 32 of elements without a spill: the served few-rows tiles)
            least = 2 * data if c.cache == "stream" else min(2 * data, 32)
            steps = tuple(b for b in steps if register_budget(c.threads, b) > least)
        return steps

    def step_values(
        self, c: Config, name: str, values: tuple[int, ...], pair: bool
    ) -> tuple[int, ...]:
        if not pair and name in ("tile_m", "tile_n") and _narrow_direct(c):
            # a narrow tile's sides step within their own lists: the short one in DIRECT_NARROW
            # (it covers the call's few rows or columns), the long one in DIRECT_LONG
            return DIRECT_NARROW if getattr(c, name) in DIRECT_NARROW else DIRECT_LONG
        return values


KIND = Direct()


def direct_default(
    new: New, elem_bytes: int, m: int, n: int, conjugate: bool = False
) -> Any | None:
    """The direct config for an m x n call of 4-, 8- or 16-byte elements (None for others),
    by the call's shape: the best geometric mean of each group of the H200 sweep
    (dev/direct_sweep.py, docs/perf-notes.md, "Direct tiles"):
    - few long rows (m < n, under FEW_ROWS_MAX): 32x64 tiles, 8 elements a thread, walking
      the output rows; 16-row tiles under 16 rows. 8 and 16 bytes: float64 21x7536398 95
      (66.9 served before), 9x5303956 97.6 (75.9), complex128 5x10000019 94.2 (83.5);
      4 bytes: one tile spanning up to 64 rows (`_DIRECT_FOUR_BYTE_ROWS`), float32
      20x7081411 88.9 against the wide kernel's 81.4;
    - few columns (n < m, under FEW_ROWS_MAX): 64x16 tiles (complex64 574153x13 99.7, 93.3);
    - otherwise the seed documents' 32x32 tile walking the output rows (int64 2304² 96.7).
    Registers capped to the blocks an SM the sweep's best had."""
    if elem_bytes not in DIRECT_SIZES:
        return None
    words = elem_bytes > 4  # elements of several 32-bit words
    if m < n and m < FEW_ROWS_MAX:
        if not words:  # the tile that the rows fill best: one tile spans up to 64 rows
            fields = next(f for most, f in _DIRECT_FOUR_BYTE_ROWS if m <= most)
        elif m < TILE_SIZES[0]:
            fields = (16, 64, 8, "row", 16 if elem_bytes == 8 else 8)
        else:
            fields = (32, 64, 8, "col", 8 if elem_bytes == 8 else 4)
    elif n < m and n < FEW_ROWS_MAX:
        fields = (64, 16, 4, "row", 6) if words else (64, 32, 8, "col", 8)
    else:
        fields = (32, 32, 4, "col", 6)
    tm, tn, pt, raster, blocks = fields
    return new(
        elem_bytes,
        tm,
        tn,
        1,
        pt,
        1,
        "pad",
        raster,
        conjugate=conjugate,
        kind="direct",
        min_blocks=blocks,
    )


# 4-byte few rows: (most rows, the tile spanning them as direct_default's fields), H200
# sweep (dev/direct_sweep.py; the ordered wide kernel in brackets): float32 15x16642555 91.4 (93.8),
# 9x5303956 86.0 (80.7); 20x7081411 88.9 (81.4), 18x1267567 86.2 (78.2); 47x1060938 85.3
# (84.1), 64x2000003 90.2 (63.1); more rows 91.9 with 32x64 tiles
_DIRECT_FOUR_BYTE_ROWS: tuple[tuple[int, tuple[Any, ...]], ...] = (
    (16, (16, 64, 8, "col", 16)),
    (32, (32, 32, 8, "col", 12)),
    (64, (64, 32, 8, "col", 8)),
    (FEW_ROWS_MAX, (32, 64, 8, "col", 8)),
)


def _narrow_direct(c: Config) -> bool:
    """A direct tile with a side of DIRECT_NARROW (the other one of DIRECT_LONG)."""
    return c.kind == "direct" and min(c.tile_m, c.tile_n) in DIRECT_NARROW


# A narrow tile of few long rows has this many elements: the long side is this over the
# short one (within DIRECT_LONG). The H200 whole-space bests of 4 such calls (dev/space_check.py).
NARROW_TILE_ELEMENTS = 512


def narrow_default(
    new: New, elem_bytes: int, m: int, n: int, conjugate: bool = False
) -> Any | None:
    """The narrow direct tile for an m x n call with a side of 2 to DIRECT_NARROW[-1]
    elements (any element size): the first of `narrow_configs`. None for other shapes."""
    found = narrow_configs(new, elem_bytes, m, n, conjugate)
    return found[0] if found else None


def narrow_configs(new: New, elem_bytes: int, m: int, n: int, conjugate: bool = False) -> list[Any]:
    """The narrow direct tiles a first call races for an m x n call with a side of 2 to
    DIRECT_NARROW[-1] elements, the likelier first: the short side spanning the call's
    (`_narrow_sides` for which first), the long one NARROW_TILE_ELEMENTS over it (few rows)
    or DIRECT_LONG's longest (few columns), 8 elements a thread (4 of 8 and 16 bytes). Why:
    a warp's loads of few columns (or stores of few rows) are then one contiguous run of 8-32
    rows, where a tiled or flat tile leaves most of its lanes past the last column, and 1-
    and 2-byte rows at odd offsets need no vector (H200: the whole space's best
    was such a tile on 24 of 24 such calls, 44-104% of copy against 22-97 served before,
    e.g. float16 2x261136885 83.5 against 22.0). Empty for other shapes."""
    short = min(m, n)
    if not 2 <= short <= DIRECT_NARROW[-1]:
        return []
    few_columns = m > n
    pt = 8 if elem_bytes <= 4 else 4
    found = []
    for side in _narrow_sides(elem_bytes, short, few_columns):
        if few_columns:  # output rows as long as the list goes (256 on 3 of 4)
            tm, tn, raster = DIRECT_LONG[-1], side, "row"
        else:  # few long rows: 512 elements (the best on 4 of 4)
            long = min(max(NARROW_TILE_ELEMENTS // side, DIRECT_LONG[0]), DIRECT_LONG[-1])
            tm, tn, raster = side, long, "col"
        found.append(
            new(elem_bytes, tm, tn, 1, pt, 1, "pad", raster, conjugate=conjugate, kind="direct")
        )
    return found


def _narrow_sides(elem_bytes: int, short: int, few_columns: bool) -> tuple[int, ...]:
    """The narrow sides for a call's `short` side, the likelier first: the smallest that
    spans it, and the one whose tiles leave the fewest lanes idle past the last column (the
    wider of a tie: 2 for 5 and 6, 4 for 3, 8 for 7) where that differs. The idle rule first
    for few columns of 1- and 2-byte elements: it held the best of 6 of 6 such calls (H200:
    float16 11000003x6 81.1 at 2 columns a tile against 59.7 served, int8
    24000007x5 43.9); the spanning tile first elsewhere: it won float32 5000003x6, float64
    4000037x5 and complex64 3000017x6 by 3-6 points over 2 columns a tile, and few rows of
    2 to 4 bytes (float16 6 and 7 rows, float32 6)."""
    span = next(t for t in DIRECT_NARROW if t >= short)
    idle = min(DIRECT_NARROW, key=lambda t: ((-short) % t, -t))
    first = idle if few_columns and elem_bytes <= 2 else span
    return tuple(dict.fromkeys((first, idle, span)))

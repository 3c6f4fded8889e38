"""The access pattern of a served launch, as data: which bytes each tile reads and writes, in
which tile order and grid, and how many 32-byte sectors that touches (pure, no CUDA).

A `TileAccess` describes a 2-D tile launch of any kernel kind (and the cast kernel): the
tile's input rows (with the rows it stages before its first, the halo), its columns, its
output rows and where each output row's window starts (at the tile's first row, or at the
aligned word at or before it), the word widths, the tile walk (raster, grid, one tile a block
or a warp). `bench/ceiling.py` renders a kernel from it that reads and writes exactly those
words with no exchange between threads: the pattern's ceiling (`templates/pattern/`).

`traffic(access)` counts the sectors: per tile, the distinct 32-byte sectors its reads touch
and those its writes touch, summed over tiles (a sector two tiles share counts twice, as two
requests reach L2). It is exact in closed form: a tile's count depends only on its class
(edge or interior along each side) and its first address modulo 32, so the tiles are counted
as residue histograms, whatever the shape. `tests/test_pattern.py` walks every tile of small
shapes word by word, as the pattern kernel's threads do, and finds the same counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

SECTOR = 32  # bytes: the unit L2 serves an SM in


@dataclass(frozen=True)
class TileAccess:
    """One 2-D tile launch's accesses. For b < batch (and the outer dims' indices), the
    input is an m x n matrix of `in_bytes`-byte elements (rows `ld_in` elements apart), the
    output its n x m transpose of `out_bytes`-byte elements; strides in elements of each side.

    Tile (ti, tj) covers input rows [ti*tile_m, +tile_m) and columns [tj*tile_n, +tile_n),
    clipped to the matrix. It reads those columns of input rows [ti*tile_m - halo, ti*tile_m
    + tile_m) (clipped) and writes, in output rows tj*tile_n ... (its columns), the window of
    tile_m elements that starts at element ti*tile_m, or with `window` > 1 at the `window`-
    byte aligned address at or before it, clipped to the row. Reads and writes move aligned
    words of `in_word` and `out_word` bytes covering those bytes (a word never spans two
    sectors, so the sectors are the bytes' own). Where `z_ld` is set (a cast's same-order
    output), each tile also writes its own rows' columns of z (`out_bytes` elements).

    Tiles are numbered as the served kernels number them: batch outermost, then along
    `raster` ("row": consecutive tiles along a row of tiles); `walkers` tiles a block walks at
    once (1, or its warps: a warp a tile), `grid` blocks, each walking tiles grid-apart."""

    in_bytes: int
    out_bytes: int
    m: int
    n: int
    ld_in: int
    ld_out: int
    batch: int = 1
    bs_in: int = 0
    bs_out: int = 0
    outer: tuple[tuple[int, int, int], ...] = ()  # (extent, in_stride, out_stride), outermost first
    tile_m: int = 32
    tile_n: int = 32
    m_tiles: int = 0  # tiles along the rows where the kind counts more (a halo's): 0, ceil
    halo: int = 0
    window: int = 1
    in_word: int = 4
    out_word: int = 4
    raster: str = "row"
    threads: int = 256
    walkers: int = 1
    grid: tuple[int, int, int] = (1, 1, 1)
    z_ld: int = 0  # a same-order output: its row pitch (0: none), batch and outer strides
    z_bs: int = 0
    z_outer: tuple[int, ...] = ()
    base_in: int = 0  # the launch's pointers modulo SECTOR (what a host loop's offsets add)
    base_out: int = 0
    cache: str = "default"  # the served kernel's cache hint ("stream": evict-first)
    kind: str = ""  # the served kernel's kind, for messages
    note: str = ""  # where the pattern differs from the served kernel's own accesses

    @property
    def row_tiles(self) -> int:
        """Tiles along the rows: the served kind's count (`m_tiles`), else as many as the
        rows need."""
        return self.m_tiles or -(-self.m // self.tile_m)

    @property
    def col_tiles(self) -> int:
        return -(-self.n // self.tile_n)

    @property
    def walked(self) -> int:
        return math.prod(e for e, _, _ in self.outer)

    @property
    def tiles(self) -> int:
        return self.row_tiles * self.col_tiles * self.batch * self.walked

    @property
    def read_bytes(self) -> int:
        return self.batch * self.walked * self.m * self.n * self.in_bytes

    @property
    def written_bytes(self) -> int:
        each = self.batch * self.walked * self.m * self.n * self.out_bytes
        return 2 * each if self.z_ld else each


@dataclass(frozen=True)
class Traffic:
    """Sectors a launch (or a call's launches) reads and writes, and the bytes it moves."""

    read_sectors: int
    written_sectors: int
    read_bytes: int
    written_bytes: int

    @property
    def read_per_byte(self) -> float:
        """Bytes of the sectors read per byte of the input (1.0: not a byte more)."""
        return self.read_sectors * SECTOR / self.read_bytes if self.read_bytes else 1.0

    @property
    def written_per_byte(self) -> float:
        return self.written_sectors * SECTOR / self.written_bytes if self.written_bytes else 1.0

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(
            self.read_sectors + other.read_sectors,
            self.written_sectors + other.written_sectors,
            self.read_bytes + other.read_bytes,
            self.written_bytes + other.written_bytes,
        )


NO_TRAFFIC = Traffic(0, 0, 0, 0)


def copy_traffic(nbytes: int, src: int = 0, dst: int = 0) -> Traffic:
    """A contiguous copy of `nbytes` from `src` to `dst` (addresses or their residues)."""
    if nbytes <= 0:
        return NO_TRAFFIC
    return Traffic(_span(src, nbytes), _span(dst, nbytes), nbytes, nbytes)


def _span(start: int, length: int) -> int:
    return (start + length - 1) // SECTOR - start // SECTOR + 1


# --- the sector count ---------------------------------------------------------------------


def traffic(a: TileAccess, offsets: Iterable[tuple[int, int]] = ((0, 0),)) -> Traffic:
    """Sectors the launch reads and writes, per tile summed over its tiles, once per host
    loop's (input, output) byte offset in `offsets`."""
    total = NO_TRAFFIC
    counted: dict[tuple[int, int], Traffic] = {}
    for i, o in offsets:
        key = ((a.base_in + i) % SECTOR, (a.base_out + o) % SECTOR)
        if key not in counted:
            counted[key] = _traffic(replace(a, base_in=key[0], base_out=key[1]))
        total = total + counted[key]
    return total


def _traffic(a: TileAccess) -> Traffic:
    si, so = a.in_bytes, a.out_bytes
    extents = [e for e, _, _ in a.outer]
    # the residues of the matrices' first bytes, over the batch and the outer dims
    h_in = _batches(a.base_in, a.batch, a.bs_in * si, [(e, s * si) for e, s, _ in a.outer])
    h_out = _batches(a.base_out, a.batch, a.bs_out * so, [(e, s * so) for e, _, s in a.outer])
    h_z = _batches(
        a.base_out,
        a.batch,
        a.z_bs * so,
        [(e, s * so) for e, s in zip(extents, a.z_outer, strict=False)],
    )
    reads = writes = 0
    for rows in _row_classes(a):  # tiles alike along the rows
        for cols in _col_classes(a):  # tiles alike along the columns
            # input: the tile's first staged row, at its first column
            first = _conv(
                _along(h_in, rows.first, rows.step, rows.count, a.ld_in * si),
                _ap(cols.first * si, cols.step * si, cols.count),
            )
            reads += _dot(first, _rows_sectors(rows.rows, cols.width * si, a.ld_in * si))
            # output: the tile's first output row, at the tile's first input row
            first = _conv(
                _along(h_out, rows.r0, rows.step, rows.count, so),
                _ap(cols.first * a.ld_out * so, cols.step * a.ld_out * so, cols.count),
            )
            clip = rows.r0 * so if rows.edge else None
            per = _windows_sectors(
                cols.width, a.ld_out * so, a.tile_m * so, a.m * so, a.window, clip
            )
            writes += _dot(first, per)
            if a.z_ld:  # the same-order output: the tile's own rows, no halo
                own = min(rows.r0 + a.tile_m, a.m) - rows.r0 if rows.edge else a.tile_m
                first = _conv(
                    _along(h_z, rows.r0, rows.step, rows.count, a.z_ld * so),
                    _ap(cols.first * so, cols.step * so, cols.count),
                )
                writes += _dot(first, _rows_sectors(own, cols.width * so, a.z_ld * so))
    return Traffic(reads, writes, a.read_bytes, a.written_bytes)


def _along(h: np.ndarray, first: int, step: int, count: int, pitch: int) -> np.ndarray:
    """`h` moved by rows first, first + step, ... (`count` of them) of `pitch` bytes."""
    return _conv(h, _ap(first * pitch, step * pitch, count))


@dataclass(frozen=True)
class _Rows:
    """Tiles alike along the rows: `count` of them, `step` rows apart from the first; each
    reads `rows` input rows from row `first` (its halo included) and has its tile's first row
    at `r0` (the first tile's). `edge`: a tile whose window or rows the matrix clips."""

    first: int
    r0: int
    step: int
    count: int
    rows: int
    edge: bool


@dataclass(frozen=True)
class _Cols:
    """Tiles alike along the columns: `count` of them from column `first`, `step` apart,
    each `width` columns (output rows) wide."""

    first: int
    step: int
    count: int
    width: int


def _row_classes(a: TileAccess) -> list[_Rows]:
    tm, h, m = a.tile_m, a.halo, a.m
    n_tiles = a.row_tiles
    # interior: its halo and window inside the matrix, no clipping anywhere
    lo = max(-(-h // tm), -(-(max(a.window - 1, 0)) // (tm * a.out_bytes)))
    hi = min(n_tiles, m // tm)  # r0 + tm <= m
    out: list[_Rows] = []
    if lo < hi:
        out.append(_Rows(lo * tm - h, lo * tm, tm, hi - lo, tm + h, False))
    for ti in [*range(min(lo, n_tiles)), *range(max(hi, lo), n_tiles)]:
        r0 = ti * tm
        first, last = max(r0 - h, 0), min(r0 + tm, m)
        out.append(_Rows(first, r0, 0, 1, max(0, last - first), True))
    return out


def _col_classes(a: TileAccess) -> list[_Cols]:
    tn, n = a.tile_n, a.n
    full = n // tn
    out = [_Cols(0, tn, full, tn)] if full else []
    if n % tn:
        out.append(_Cols(full * tn, 0, 1, n % tn))
    return out


def _batches(base: int, batch: int, bs: int, outer: list[tuple[int, int]]) -> np.ndarray:
    """The residues of every matrix's first byte: `batch` matrices `bs` bytes apart, times
    each outer dim's (extent, stride in bytes)."""
    h = _ap(base, bs, batch)
    for extent, stride in outer:
        h = _conv(h, _ap(0, stride, extent))
    return h


def _ap(first: int, step: int, count: int) -> np.ndarray:
    """How many of first + k*step (0 <= k < count) fall on each residue modulo SECTOR."""
    h = np.zeros(SECTOR, np.int64)
    if count <= 0:
        return h
    step %= SECTOR
    period = SECTOR // math.gcd(step, SECTOR)
    full, rest = divmod(count, period)
    for k in range(min(period, count)):
        h[(first + k * step) % SECTOR] += full + (1 if k < rest else 0)
    return h


def _conv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The residues of sums: a cyclic convolution modulo SECTOR."""
    out = np.zeros(SECTOR, np.int64)
    for r in np.nonzero(b)[0]:
        out += np.roll(a, int(r)) * b[r]
    return out


def _dot(h: np.ndarray, per: tuple[int, ...]) -> int:
    return int(np.dot(h, np.asarray(per, np.int64)))


@lru_cache(maxsize=4096)
def _rows_sectors(rows: int, width: int, pitch: int) -> tuple[int, ...]:
    """Distinct sectors of `rows` segments of `width` bytes, `pitch` apart, the first at
    each residue: one tile's reads (or same-order writes)."""
    if rows <= 0 or width <= 0:
        return (0,) * SECTOR
    starts = np.arange(rows, dtype=np.int64) * pitch
    return tuple(_distinct(starts + r, starts + r + width) for r in range(SECTOR))


@lru_cache(maxsize=4096)
def _windows_sectors(
    rows: int, pitch: int, length: int, row_bytes: int, window: int, r0: int | None
) -> tuple[int, ...]:
    """Distinct sectors of one tile's output windows: `rows` output rows `pitch` apart, each
    a window of `length` bytes from the tile's first row (at each residue), moved back to its
    `window`-byte boundary; `r0` (bytes into the row; None: an interior tile, never clipped)
    clips it to the row's `row_bytes`."""
    k = np.arange(rows, dtype=np.int64) * pitch
    out = []
    for r in range(SECTOR):
        p = k + r
        lo = p - p % window
        hi = lo + length
        if r0 is not None:
            row = p - r0
            lo, hi = np.maximum(lo, row), np.minimum(hi, row + row_bytes)
        out.append(_distinct(lo, hi))
    return tuple(out)


def _distinct(lo: np.ndarray, hi: np.ndarray) -> int:
    """Distinct sectors of segments [lo, hi) in increasing order of lo (empty ones skipped)."""
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    if not len(lo):
        return 0
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    first, last = lo // SECTOR, (hi - 1) // SECTOR
    seen = np.maximum.accumulate(last)  # the last sector counted so far
    begin = np.maximum(first, np.concatenate(([first[0] - 1], seen[:-1])) + 1)
    return int(np.maximum(last - begin + 1, 0).sum())


# --- the served launches' geometry ---------------------------------------------------------

CHUNK = 16  # bytes: the byte-permute, cast-store and widest vector words


def tile_access(
    cfg: Any,
    batch: int,
    m: int,
    n: int,
    ld_in: int,
    ld_out: int,
    bs_in: int,
    bs_out: int,
    outer: tuple[tuple[int, int, int], ...] = (),
    grid: tuple[int, int, int] | None = None,
    multiprocessors: int = 132,
) -> TileAccess:
    """The accesses of `cfg` (a transpose kernel's config, as the call runs it) on a batch
    of m x n matrices with these strides (elements), walking `outer` dims too (a permute's
    transpose pass: (extent, in_stride, out_stride), outermost first); `grid` the launch's
    (None: the config's own for the call)."""
    from ..kinds.prmt import prmt_halo
    from ..kinds.regt import REGT_LANES, regt_long, regt_window

    s, kind = cfg.elem_bytes, cfg.kind
    walked = math.prod(e for e, _, _ in outer)
    if grid is None:
        grid = cfg.grid(m, n, batch * walked, multiprocessors)
    tiles_m, _ = cfg.tiles(m, n)
    a = TileAccess(
        s, s, m, n, ld_in, ld_out, batch, bs_in, bs_out, tuple(outer), cfg.tile_m, cfg.tile_n,
        m_tiles=tiles_m, in_word=cfg.word_bytes, out_word=cfg.word_bytes, raster=cfg.raster,
        threads=cfg.threads, grid=tuple(grid), cache=cfg.cache, kind=kind,
    )  # fmt: skip
    if kind == "tiled":
        note = "edge tiles element by element in the served kernel" if cfg.realign else ""
        return replace(a, note=note)
    if kind == "flat":  # a tile spans the short side whole: tile_m elements of the long one
        tile = (cfg.tile_m, n) if n <= cfg.tile_n else (m, cfg.tile_m)
        word = max(4, s)
        return replace(a, tile_m=tile[0], tile_n=tile[1], in_word=word, out_word=word)
    if kind == "staged":  # windows from a word boundary up to vec - 1 rows before the tile
        return replace(a, halo=cfg.vec - 1, window=cfg.word_bytes)
    if kind == "prmt":
        if cfg.params.flat and cfg.params.wide:  # whole output rows: no halo, no window
            return replace(a, tile_m=m, in_word=CHUNK, out_word=CHUNK)
        tile = (cfg.tile_m, n) if cfg.params.flat else (cfg.tile_m, cfg.tile_n)
        return replace(
            a, tile_m=tile[0], tile_n=tile[1], halo=prmt_halo(cfg), window=CHUNK,
            in_word=CHUNK, out_word=CHUNK,
        )  # fmt: skip
    if kind == "direct":  # one element an access
        return replace(a, in_word=s, out_word=s)
    if kind == "regt":  # the long side in windows; the short side whole
        if cfg.params.staged:
            tile, walkers = (m, regt_long(cfg)), 1
        else:
            per = REGT_LANES * regt_window(s)
            tile, walkers = ((m, per) if cfg.params.wide else (per, n)), cfg.threads // 32
        words = (CHUNK if tile[1] * s >= CHUNK else 4, CHUNK if tile[0] * s >= CHUNK else 4)
        return replace(
            a, tile_m=tile[0], tile_n=tile[1], walkers=walkers, in_word=words[0],
            out_word=words[1],
            note="a warp's windows moved as one tile's rows (the same bytes, not the same lanes)",
        )  # fmt: skip
    raise ValueError(f"no access pattern for kernel kind {kind!r} ({cfg.key})")


def launch_access(cfg: Any, scalars: tuple[int, ...], grid: tuple[int, int, int]) -> TileAccess:
    """The accesses of a transpose launch (`runtime.launch.make_launch`'s config, scalars and
    grid): its scalars read back into shape, strides and outer dims."""
    v = 1 if cfg.any_offset else cfg.vec  # the strides it was handed are in words of v
    m, n, ld_in, ld_out, bs_in, bs_out, fast, slow = scalars[:8]
    strides = (ld_in * v, ld_out * v, bs_in * v, bs_out * v)
    total = scalars[8]
    if len(scalars) == 9:
        return tile_access(cfg, total // (fast * slow), m, n, *strides, grid=grid)
    batch, os_in, os_out, os2_in, os2_out, outer2 = scalars[9:15]
    walked = total // (fast * slow * batch)
    outer = ((walked // outer2, os_in * v, os_out * v), (outer2, os2_in * v, os2_out * v))
    return tile_access(cfg, batch, m, n, *strides, outer=outer, grid=grid)


def cast_access(cfg: Any, launch: Any, src: int, dst: int) -> TileAccess:
    """The accesses of a transposing cast launch (`plans.cast.Launch` of config `cfg`), for
    x and y at addresses `src` and `dst` (or their residues): `vec`-element words in,
    16-byte words out, z's rows beside where the launch also writes the same order."""
    from ..kinds.cast import pair_of

    x, y = pair_of(cfg)
    tm, tn = -(-launch.m // cfg.tile_m), -(-launch.n // cfg.tile_n)
    return TileAccess(
        x.size, y.size, launch.m, launch.n, launch.ld_x, launch.ld_o, launch.batch, launch.bs_x,
        launch.bs_o, (), cfg.tile_m, cfg.tile_n, in_word=cfg.vec * x.size, out_word=CHUNK,
        raster=cfg.raster, threads=cfg.threads, grid=(tm * tn * launch.batch, 1, 1),
        z_ld=launch.ld_r if launch.rides else 0, z_bs=launch.bs_r,
        base_in=(src + launch.x0 * x.size) % SECTOR, base_out=(dst + launch.o0 * y.size) % SECTOR,
        cache=cfg.cache, kind="cast",
        note="z's rows as the tile's own columns (the served kernel writes a word past them)"
        if launch.rides else "",
    )  # fmt: skip


# --- box passes (a permute's packed and vector box passes) ---------------------------------


@dataclass(frozen=True)
class BoxAccess:
    """One packed (or vector) box pass's accesses, from its `kernels.packed.PackedArgs`.
    Box dims in the output's memory order, innermost first (`box` extents, strides in
    elements); `in_order` the same dims in the input's order. Box t's corner is the sum over
    grid dims g (fastest first) of (t's digit g) * tile_in[g] (tile_out[g]); the first
    `len(checked)` grid dims are the box dims `checked` names, cut at the problem's edge
    (`extent`). A box reads its elements as runs along the input's innermost box dim (where
    its stride is 1; else element by element) and writes them as runs along the output's."""

    elem_bytes: int
    box: tuple[int, ...]
    in_order: tuple[int, ...]
    in_stride: tuple[int, ...]
    out_stride: tuple[int, ...]
    extent: tuple[int, ...]
    checked: tuple[int, ...]  # box dims the edge cuts: the first grid dims, in this order
    tile_in: tuple[int, ...]
    tile_out: tuple[int, ...]
    tiles_of: tuple[int, ...]
    outside: int = 1  # elements of the dims the box does not span (box extent 1)
    threads: int = 256
    grid: tuple[int, int, int] = (1, 1, 1)
    in_word: int = 1
    out_word: int = 1
    base_in: int = 0
    base_out: int = 0
    kind: str = "packed"
    note: str = ""

    @property
    def tiles(self) -> int:
        return math.prod(self.tiles_of)

    @property
    def in_run(self) -> int | None:
        """The box dim read as contiguous runs, or None (element by element)."""
        d = self.in_order[0]
        return d if self.in_stride[d] == 1 else None

    @property
    def out_run(self) -> int | None:
        return 0 if self.out_stride[0] == 1 else None

    @property
    def moved_bytes(self) -> int:
        return math.prod(self.extent) * self.outside * self.elem_bytes


def box_access(args: Any, elem_bytes: int, grid: tuple[int, int, int], threads: int) -> BoxAccess:
    """The accesses of a packed or vector box launch of `kernels.packed.PackedArgs` `args`."""
    k, nb, ng = args.kernel, len(args.kernel.box), args.ngrid
    e = elem_bytes
    word = 4 if k.words or k.spread else e
    extent = args.extent[:nb]
    # the grid walks the cut box dims, the other box dims of more than one box, then the
    # dims outside the box (`packed_args`)
    boxed = sum(k.checked) + sum(1 for d in range(nb) if not k.checked[d] and extent[d] > k.box[d])
    return BoxAccess(
        e, k.box, k.in_order, args.in_stride[:nb], args.out_stride[:nb], extent,
        tuple(d for d in range(nb) if k.checked[d]), args.tile_in[:ng], args.tile_out[:ng],
        args.tiles_of[:ng], math.prod(args.tiles_of[boxed:ng]), threads, tuple(grid), word, word,
    )  # fmt: skip


def box_traffic(a: BoxAccess, offsets: Iterable[tuple[int, int]] = ((0, 0),)) -> Traffic:
    """Sectors the box pass reads and writes, per box summed over its boxes (and the host
    loop's offsets), counted as `traffic` counts tiles: boxes alike by residue."""
    e = a.elem_bytes
    reads = writes = 0
    n_off = 0
    for i, o in offsets:
        n_off += 1
        for lims, h_in, h_out in _box_classes(a, (a.base_in + i) * 1, (a.base_out + o) * 1):
            reads += _dot(h_in, _box_sectors(a.box, lims, a.in_stride, a.in_run, e))
            writes += _dot(h_out, _box_sectors(a.box, lims, a.out_stride, a.out_run, e))
    return Traffic(reads, writes, n_off * a.moved_bytes, n_off * a.moved_bytes)


def _box_classes(a: BoxAccess, base_in: int, base_out: int):
    """(the box's extents, residues of its input corners, of its output corners) for each
    class of boxes alike: whole, or cut on some of the checked dims."""
    e = a.elem_bytes
    per_dim = []  # per grid dim: [(limit or None, histogram in, histogram out)]
    for g, (t_in, t_out, count) in enumerate(zip(a.tile_in, a.tile_out, a.tiles_of, strict=True)):
        if g < len(a.checked):
            d = a.checked[g]
            last = a.extent[d] - (count - 1) * a.box[d]
            per_dim.append([
                (None, _ap(0, t_in * e, count - 1), _ap(0, t_out * e, count - 1)),
                ((d, last), _ap((count - 1) * t_in * e, 0, 1), _ap((count - 1) * t_out * e, 0, 1)),
            ])  # fmt: skip
        else:
            per_dim.append([(None, _ap(0, t_in * e, count), _ap(0, t_out * e, count))])
    classes = [((), _ap(base_in, 0, 1), _ap(base_out, 0, 1))]
    for options in per_dim:
        classes = [
            ((*cuts, cut) if cut else cuts, _conv(hi, oi), _conv(ho, oo))
            for cuts, hi, ho in classes
            for cut, oi, oo in options
        ]
    out = []
    for cuts, hi, ho in classes:
        lims = list(a.box)
        for d, last in cuts:
            lims[d] = last
        out.append((tuple(lims), hi, ho))
    return out


@lru_cache(maxsize=1024)
def _box_sectors(
    box: tuple[int, ...], lims: tuple[int, ...], strides: tuple[int, ...], run: int | None, e: int
) -> tuple[int, ...]:
    """Distinct sectors of a box of extents `lims` (elements) along dims of these strides,
    moved as runs along dim `run` (None: element by element), the corner at each residue."""
    dims = [d for d in range(len(box)) if d != run]
    starts = np.zeros(1, np.int64)
    for d in dims:
        starts = (
            starts[:, None] + np.arange(lims[d], dtype=np.int64)[None, :] * strides[d] * e
        ).ravel()
    length = lims[run] * e if run is not None else e
    return tuple(_distinct(starts + r, starts + r + length) for r in range(SECTOR))

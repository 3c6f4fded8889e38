"""Byte-permute kernels (prmt=True, templates/prmt/): 1-, 2- and 4-byte rows at any
offset, moved as aligned 16-byte chunks and transposed K x K elements a 32-bit word at a time
(K = 4 / elem_bytes) with byte permutes. Tiled ones stage a tile with a halo of rows (output
windows start 16-byte aligned); flat ones (flat=True) span a skinny matrix's short side: tall
(rows of at most `tile_n` elements) or wide (wide=True: at most `tile_m` rows, their output
`ordered` in a buffer or stored as runs).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .base import (
    CACHE_HINTS,
    FLAT_LONG,
    NEWEST,
    PER_THREAD,
    RASTERS,
    TILE_SIZES,
    Config,
    Kind,
    Launchable,
    New,
    Search,
    SpaceCall,
    fixed_field_errors,
)


@dataclass(frozen=True)
class PrmtParams:
    """A byte-permute kernel's own parameters: tiled (none set), or flat, one tile spanning a
    skinny matrix's short side: tall (rows of at most `tile_n` elements) or `wide` (at most
    `tile_m` rows), a wide tile's output `ordered` in a buffer (else stored as runs)."""

    flat: bool = False
    wide: bool = False
    ordered: bool = False


PRMT_SIZES = (1, 2, 4)  # elements moved K x K at a time, K = 4 / size (4 bytes: words, no permute)
# sizes whose untuned unaligned classes get prmt_default from lookup; for 4 bytes it won the
# large odd squares by 4 points and lost a small batch by 3.6 (H200), so it is only raced
PRMT_SERVED = (1, 2)
PRMT_SEGMENTS = (64, 128, 256)  # bytes of a tile's row segment, in (tile_n) and out (tile_m)
# a flat byte-permute kernel's (flat=True) tile sides in bytes: tall, output windows (tile_m)
# and rows (tile_n); wide, rows (tile_m) and row segments (tile_n). Its shared memory grows
# with their product, so narrow rows afford wide windows, and wide windows with narrow rows
# keep more bytes in flight on an SM (H200, docs/perf-notes.md, "Skinny matrices")
TALL_WINDOWS = (16, 32, 64, 128, 256, 512, 1024)
TALL_ROWS = TALL_WINDOWS
TALL_PER_THREAD = (1, 2, 4)
WIDE_MIN_ROW_BYTES = 4  # a wide kernel's output word spans at most two output rows
# an ordered wide tile's tile_m x tile_n x elem_bytes: the best ordered tile of every few-rows
# case of the H200 sweep (1, 2 and 4 bytes, 9 to 82 rows) held 8 KiB (dev/flat_prmt_sweep.py --wide)
WIDE_ORDERED_TILE_BYTES = 8192
# 1-byte rows that are not whole words: from this many rows the ordered buffer (written a byte
# at a time where a row ends mid-word) beat the run store on the H200, below it lost
# (int8 21x7536398: 55.4 against 60.3); its tile then has 128-byte segments and 512 threads
# a 256-row tile (dev/flat_prmt_sweep.py --wide: 37, 50, 75, 101, 137 and 190 rows, ordered
# against run store 63.2 / 59.4, 70.7 / 63.5, 57.1 / 57.1, 67.4 / 58.2, 56.3 / 53.8, 60.5 / 57.0)
WIDE_ORDERED_ODD_ROWS = 33
PRMT_THREADS = 512  # threads = PRMT_THREADS / per_thread
PRMT_THREAD_BYTES = 128  # 16-byte chunks a thread loads at once, in bytes (registers)
CHUNK = 16  # the kernel's global accesses: aligned 16-byte chunks


def tall_rows(elem_bytes: int, m: int, n: int) -> bool:
    """Whether an m x n call (or class) has rows a tall byte-permute kernel spans: of at most
    256 bytes, more rows than columns, and elements it moves."""
    return elem_bytes in PRMT_SIZES and n * elem_bytes <= TALL_ROWS[-1] and m > n


def wide_rows(elem_bytes: int, m: int, n: int) -> bool:
    """Whether an m x n call (or class) of 1-, 2- or 4-byte elements has the few long rows the
    wide byte-permute kernel serves by default: transposed rows of 16 to 256 bytes, more
    columns than rows (fewer rows went to the flat kernel on the H200: int16 3x53414884 29
    against 21%; bool 5x23148327 34 against 22-25). 4-byte rows since the ordered buffer
    (H200: float32 20x7081411 82.5 against the staged kernel's 64.4)."""
    return elem_bytes in PRMT_SIZES and 16 <= m * elem_bytes <= 256 and n > m


def rows_at_any_offset(elem_bytes: int, vec: int) -> bool:
    """Whether rows allowing vectors of `vec` elements need the kernels that keep 16-byte
    accesses at any offset (staged, byte-permute): odd element offsets, or rows not aligned to
    a 4-byte word."""
    return vec == 1 or vec * elem_bytes < 4


def prmt_k(c: Config) -> int:
    """Elements per 32-bit word of a byte-permute kernel: it moves K x K blocks."""
    return 4 // c.elem_bytes


def prmt_halo(c: Config) -> int:
    """Rows a byte-permute tile stages before its first: output windows start 16-byte
    aligned, up to 16 / elem_bytes - 1 elements early."""
    return CHUNK // c.elem_bytes


def prmt_layout(c: Config) -> dict[str, int]:
    """The threads, shared-memory layout and per-thread work of a byte-permute config (see
    templates/prmt/), from its fields alone: `sr` staged rows of `nc1` chunks at a pitch
    of `p1w` words; `ng` row groups of K; `cw` column words; transposed rows of `p2w` words
    (K * p2w / 4 odd, so the exchange's K-apart rows fall in different banks); `ncw` chunks
    per window. Each thread's part is the same in every tile: it loads one chunk of rows
    `r1` apart (`lu1` of them), exchanges `x` column words of row groups `g2` apart (`lu2`
    groups at most), stores one chunk of output rows `r3` apart (`lu3` at most)."""
    k, t = prmt_k(c), PRMT_THREADS // c.per_thread
    sr = c.tile_m + (0 if c.params.wide else prmt_halo(c))  # a wide tile has no halo
    nc1 = c.tile_n * c.elem_bytes // CHUNK + 1
    p1w = -(-4 * nc1 // 8) * 8
    ng, cw = sr // k, c.tile_n * c.elem_bytes // 4
    p2w = next(p for p in range(ng + 1, ng + 16) if k * p % 4 == 0 and (k * p // 4) % 2 == 1)
    ncw = c.tile_m * c.elem_bytes // CHUNK
    r1, g2, r3 = t // nc1 // k * k, t // 8, t // ncw  # r1 whole row groups: one skew step a pass
    # tall (flat): the staged rows are one contiguous run, staged whole from its aligned
    # start; the exchange reads up to a word past a row's last, so two chunks more
    sa = sr * p1w + ng * 8  # tiled and wide: staged rows at a pitch of p1w words
    if c.params.flat and not c.params.wide:  # tall: one run
        sa = -(-(sr * c.tile_n * c.elem_bytes) // CHUNK) * 4 + 8
    lr = min(PRMT_THREAD_BYTES // CHUNK, -(-(sa // 4) // t))  # tall: chunks a thread has in flight
    # ordered (wide): the tile's output bytes in order, from the output's offset from alignment
    sb = (
        -(-(c.tile_n * c.tile_m * c.elem_bytes + CHUNK) // CHUNK) * 4
        if c.params.ordered
        else c.tile_n * p2w
    )
    return {
        "threads": t,
        "sr": sr,
        "nc1": nc1,
        "p1w": p1w,
        "ng": ng,
        "cw": cw,
        "p2w": p2w,
        "ncw": ncw,
        "sa_words": sa,
        "sb_words": sb,
        "lr": lr,
        "r1": r1,
        "g2": g2,
        "r3": r3,
        "x": -(-cw // 8),
        "lu1": -(-sr // r1),
        "lu2": -(-ng // g2),
        "lu3": -(-c.tile_n // r3),
    }


def _prmt_errors(c: Config) -> Iterator[str]:
    if c.params.wide and not c.params.flat:
        yield "prmt wide=True is a flat byte-permute kernel's (few long rows): set flat=True, or wide=False"
    if c.params.ordered and not c.params.wide:
        yield "prmt ordered=True is a wide kernel's output buffer (few long rows): set wide=True, or ordered=False"
    if c.min_blocks:
        yield "min_blocks is a tiled, staged or staged register-transpose kernel's (flat and byte-permute kernels set their own): set min_blocks=0"
    yield from fixed_field_errors(
        c,
        "prmt",
        {"pad": 0, "layout": "pad", "realign": False, "conjugate": False},
        "a byte-permute kernel has its own shared-memory layout",
    )
    if c.params.flat and c.raster != "row":  # one tile across the rows: the raster changes nothing
        yield "prmt=True with flat=True takes raster='row' (one tile spans the short side: its tiles form one line)"
    if c.elem_bytes not in PRMT_SIZES:
        yield f"prmt=True needs elem_bytes in {list(PRMT_SIZES)} (wider elements span several words: use a staged or tiled config)"
        return
    k = prmt_k(c)
    if c.vec != k:
        yield f"prmt=True moves 4-byte words: vec must be {k} for {c.elem_bytes}-byte elements (got {c.vec})"
    bad = False
    for name, sizes in _prmt_sizes(c):
        nbytes = getattr(c, name) * c.elem_bytes
        if nbytes not in sizes:
            bad = True
            allowed = [
                b // c.elem_bytes for b in sizes if b // c.elem_bytes in TILE_SIZES + FLAT_LONG
            ]
            yield f"prmt=True: {name}={getattr(c, name)} makes {nbytes}-byte row segments; use {name} in {allowed}"
    if c.per_thread > (4 if c.params.flat else 2):  # 128 threads: ptxas 13 spilled the tiled ones
        allowed_pt = list(TALL_PER_THREAD if c.params.flat else (1, 2))
        yield f"prmt=True: per_thread={c.per_thread} must be one of {allowed_pt} (threads = {PRMT_THREADS} / per_thread)"
        return
    if bad:
        return
    lay = prmt_layout(c)
    if not c.params.flat and lay["lu1"] * CHUNK > PRMT_THREAD_BYTES:
        yield (
            f"prmt tile {c.tile_m}x{c.tile_n} loads {lay['lu1']} chunks of {CHUNK} bytes per "
            f"thread ({lay['threads']} threads); at most {PRMT_THREAD_BYTES} bytes: "
            + ("lower per_thread" if c.per_thread > 1 else "use a smaller tile_m or tile_n")
        )


def _prmt_sizes(c: Config) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(field, its values in bytes) for tile_m and tile_n of a byte-permute config."""
    if c.params.flat:
        return (("tile_m", TALL_WINDOWS), ("tile_n", TALL_ROWS))
    return (("tile_m", PRMT_SEGMENTS), ("tile_n", PRMT_SEGMENTS))


def prmt_registers(c: Config) -> int:
    """Registers a thread a byte-permute kernel is capped at (through its launch bounds).

    64 (with 80, as shared memory alone would allow for the biggest tiles, ptxas 13 spilled
    120-190 bytes); 80 for a wide kernel (its run store spilled at 64), but 64 again for an
    ordered wide kernel of 1- or 2-byte elements with row segments of 128 bytes or more: one
    more block an SM (H200, best config uncapped -> capped in one process:
    int8 20 / 100 rows 76.4 / 77.0 -> 82.0 / 82.7, float16 9 / 20 / 43 rows 64.0 / 79.1 /
    70.8 -> 69.5 / 84.4 / 74.5; 64-byte segments lost up to 7 on int8 100 rows, and 4-byte
    elements moved within noise)."""
    if not c.params.wide:
        return 64
    if c.params.ordered and c.elem_bytes <= 2 and c.tile_n * c.elem_bytes >= 128:
        return 64
    return 80


def _params(c: Config) -> dict[str, object]:
    """What templates/prmt/ needs about one byte-permute config."""
    return {
        **prmt_layout(c),
        "kk": prmt_k(c),
        "h": prmt_halo(c),
        "flat": c.params.flat,  # one tile spans the short side: tall, or wide
        "wide": c.params.wide,
        "ordered": c.params.ordered,  # wide: the transposed buffer holds the output run in order
        "tm": c.tile_m,
        "tn": c.tile_n,
        "smem": c.smem_bytes,
        "dynamic": c.dynamic_smem > 0,  # shared memory past the static limit: extern, opted in
        "raster": c.raster,
        "min_blocks": max(1, 65536 // (c.threads * prmt_registers(c))),
    }


def prmt_space(launchable: Launchable, call: SpaceCall) -> Iterator[Any]:
    """The byte-permute configs (1- and 2-byte rows at any offset) for `elem_bytes`."""
    elem_bytes, limits = call.elem_bytes, call.limits
    if elem_bytes not in PRMT_SIZES:
        return
    sizes = [b // elem_bytes for b in PRMT_SEGMENTS]
    for tm in sizes:
        for tn in sizes:
            for pt in PER_THREAD:
                for raster in RASTERS:
                    for cache in CACHE_HINTS:
                        yield from launchable(
                            limits,
                            elem_bytes,
                            tm,
                            tn,
                            4 // elem_bytes,
                            pt,
                            0,
                            "pad",
                            raster,
                            cache,
                            kind="prmt",
                        )


def _search(launchable: Launchable, call: SpaceCall) -> Iterator[Any]:
    """A call whose rows restrict its vectors: the tiled byte-permute configs."""
    if call.restricted and call.elem_bytes in PRMT_SIZES and not call.conjugate:
        yield from prmt_space(launchable, call)


def _flat_search(launchable: Launchable, call: SpaceCall) -> Iterator[Any]:
    """A skinny call: the flat byte-permute configs spanning its short side."""
    if call.short_side is not None and call.elem_bytes in PRMT_SIZES and not call.conjugate:
        yield from flat_prmt_space(launchable, call)


class Prmt(Kind):
    name = "prmt"
    Params = PrmtParams
    mark = "prmt"
    codes = (("flat", "flat"), ("prmt", "pm"), ("wide", "wd"), ("ordered", "or"))
    template = "prmt/prmt.cu.j2"
    capped = False  # it sets its own blocks per SM (`prmt_registers`)
    # tiles past 48 KiB (wider row segments and output windows) take dynamic shared memory
    dynamic_shared = True

    def errors(self, c: Config) -> Iterator[str]:
        return _prmt_errors(c)

    def derive(self, c: Config) -> dict[str, int]:
        lay = prmt_layout(c)
        return {"threads": lay["threads"], "smem": 4 * (lay["sa_words"] + lay["sb_words"])}

    def params(self, c: Config) -> dict[str, object]:
        return _params(c)

    def searches(self) -> tuple[Search, ...]:
        return ((20, _search), (50, _flat_search))

    def spans_short_side(self, c: Config) -> bool:
        return c.params.flat

    def tile_m_values(self, c: Config) -> tuple[int, ...]:
        # a tall byte-permute kernel's output window: either list
        return tuple(sorted(set(TILE_SIZES + FLAT_LONG))) if c.params.flat else TILE_SIZES

    def tiles(self, c: Config, m: int, n: int) -> tuple[int, int]:
        if c.params.flat:
            if not self.applies(c, m, n):
                raise ConfigError(
                    f"flat config {c.key} needs a side of at most {c.tile_n} elements; "
                    f"the matrix is {m}x{n}: use a tiled config"
                )
            # tall: output windows start up to 16 bytes before a tile; wide: none
            if c.params.wide:
                return (1, -(-n // c.tile_n))
            return (-(-(m + prmt_halo(c) - 1) // c.tile_m), 1)
        # output windows start up to 16 bytes before a tile: staged likewise
        return (-(-(m + prmt_halo(c) - 1) // c.tile_m), -(-n // c.tile_n))

    def applies(self, c: Config, m: int, n: int) -> bool:
        """A flat byte-permute kernel takes rows of at most `tile_n` elements, or at most
        `tile_m` rows whose transposes are at least 4 bytes long, of any length when
        `ordered`; a tiled one any matrix."""
        if not c.params.flat:
            return True
        if c.params.wide:  # an ordered buffer takes rows of any length; a run store 4 bytes
            return m <= c.tile_m and (c.params.ordered or m * c.elem_bytes >= WIDE_MIN_ROW_BYTES)
        return n <= c.tile_n

    def any_offset(self, c: Config) -> bool:
        return True

    def step_values(
        self, c: Config, name: str, values: tuple[int, ...], pair: bool
    ) -> tuple[int, ...]:
        return FLAT_LONG if name == "tile_m" and c.params.flat else values

    def for_call(self, c: Config, m: int, n: int) -> Any:
        return for_rows(c, m)


KIND = Prmt()


def prmt_default(new: New, elem_bytes: int, conjugate: bool = False) -> Any | None:
    """The untuned byte-permute config for 1-, 2- and 4-byte elements (None for wider ones,
    which span several words, or conjugated ones)."""
    return _prmt_pick(new, elem_bytes, conjugate, 0)


def prmt_alternative(new: New, elem_bytes: int, conjugate: bool = False) -> Any | None:
    """The byte-permute config that won the cases the default lost (raced at a first call)."""
    return _prmt_pick(new, elem_bytes, conjugate, 1)


def _prmt_pick(new: New, elem_bytes: int, conjugate: bool, i: int) -> Any | None:
    if elem_bytes not in PRMT_SIZES or conjugate:
        return None
    tm, tn, pt, raster = _PRMT_DEFAULTS[elem_bytes][i]
    return new(elem_bytes, tm, tn, 4 // elem_bytes, pt, 0, "pad", raster, kind="prmt")


# elem_bytes -> (default, alternative) as (tile_m, tile_n, per_thread, raster): of every
# non-persistent prmt config, the best and the best of the rest by geometric mean over 7
# 1-byte, 6 2-byte and 5 4-byte odd cases on the H200 (dev/prmt_sweep.py,
# docs/perf-notes.md, "Byte permutes"): 128-byte output windows and 128- (1 byte) or 256-byte
# (2 bytes) input segments; 256 bytes both ways for 4 bytes
_PRMT_DEFAULTS: dict[int, tuple[tuple[Any, ...], ...]] = {
    1: ((64, 128, 2, "col"), (128, 128, 2, "col")),
    2: ((64, 128, 2, "col"), (32, 128, 2, "col")),
    4: (
        (64, 64, 2, "col"),
        (32, 64, 2, "col"),
    ),  # 256-byte segments: staged still serves by default
}


def flat_prmt_space(launchable: Launchable, call: SpaceCall) -> Iterator[Any]:
    """The flat byte-permute configs (flat and prmt, any offset) whose tile spans a short side
    of `short_side` elements: tall (rows of at most `tile_n` elements) or wide (at most
    `tile_m` rows)."""
    elem_bytes, limits, short_side = call.elem_bytes, call.limits, call.short_side
    if elem_bytes not in PRMT_SIZES or short_side is None:
        return
    sides = TILE_SIZES + FLAT_LONG
    for tm in [b // elem_bytes for b in TALL_WINDOWS if b // elem_bytes in sides]:
        for tn in [b // elem_bytes for b in TALL_ROWS if b // elem_bytes in sides]:
            for wide, ordered in ((False, False), (True, False), (True, True)):
                if (tm if wide else tn) < short_side or (wide and tm * elem_bytes > 256):
                    continue
                for pt in TALL_PER_THREAD:
                    for cache in CACHE_HINTS:
                        yield from launchable(
                            limits,
                            elem_bytes,
                            tm,
                            tn,
                            4 // elem_bytes,
                            pt,
                            0,
                            "pad",
                            "row",
                            cache,
                            kind="prmt",
                            params=PrmtParams(flat=True, wide=wide, ordered=ordered),
                        )


def tall_default(new: New, elem_bytes: int, short_side: int) -> Any | None:
    """The untuned tall byte-permute config for rows of `short_side` elements: the narrowest
    tile that spans them, 256-byte output windows (narrower where they do not fit), 128
    threads for tiles of rows up to 128 bytes and 256 for wider ones: the best tall config on
    9 of the 11 unaligned tall cases of the H200 sweeps (dev/flat_prmt_sweep.py,
    docs/perf-notes.md, "Skinny matrices"); float16 23079386x15 did best with 512-byte windows (88.9
    against 80.6), uint8 4957161x157 with 128 threads (by about 1). None for wider elements
    or rows over 256 bytes."""
    if elem_bytes not in PRMT_SIZES:
        return None
    tn = _spanning_side(elem_bytes, short_side)
    if tn is None:
        return None
    # tiles of rows up to 128 bytes: 128 threads (float32 7081411x20 81.9 against under 69
    # with 256); 256 bytes: 256 threads (float16 4791597x102 and 611077x122: +7-10)
    pt = 4 if tn * elem_bytes <= 128 else 2
    for window in (256, 128, 64):  # the first that static shared memory allows
        cfg = new(
            elem_bytes,
            window // elem_bytes,
            tn,
            4 // elem_bytes,
            pt,
            0,
            "pad",
            "row",
            kind="prmt",
            params=PrmtParams(flat=True),
        )
        if cfg.fits(NEWEST):
            return cfg
    return None


def wider_tiles(new: New, elem_bytes: int, m: int, n: int) -> list[Any]:
    """Byte-permute tiles past 48 KiB (dynamic shared memory) for an m x n call, raced at
    its first call where the GPU has the shared memory; the defaults stay static, so they
    run on every GPU. What won on an H100 (dev/dynamic_sweep.py, best static against best
    dynamic config): tall rows of 129-256 bytes with 128-byte output windows (bool
    2528978x182 66.4 -> 82.4, uint8 1069425x162 67.6 -> 78.2), few rows in 128-byte
    segments (uint8 130x4304117 61.7 -> 67.2), 1-byte tiles of 256-byte output windows and
    128-byte segments (int8 28881x28881 81.7 -> 85.4). 2-byte tiles of 256 bytes both ways
    lost (float16 3x251585x191 81.5 against 86.8): none for them."""
    out = []
    if elem_bytes not in PRMT_SIZES:
        return out
    if tall_rows(elem_bytes, m, n):
        tall = tall_default(new, elem_bytes, n)
        if tall is not None and tall.tile_m * elem_bytes < 128:
            out.append(tall.replace(tile_m=128 // elem_bytes))
    elif m < n and m * elem_bytes <= 256:
        wide = wide_default(new, elem_bytes, m)
        if wide is not None and wide.tile_n * elem_bytes < 128:
            wider = wide.replace(tile_n=128 // elem_bytes, per_thread=1)
            if elem_bytes == 1 and m >= WIDE_ORDERED_ODD_ROWS:  # 137 / 190 rows: ordered
                wider = wider.replace(ordered=True)  # 56.3 / 60.5, run store 53.8 / 57.0
            out.append(wider)
    elif elem_bytes == 1:
        out.append(new(1, 256, 128, 4, 1, 0, "pad", "col", kind="prmt"))
    return out


def _spanning_side(elem_bytes: int, short_side: int) -> int | None:
    """The narrowest flat byte-permute tile side (elements, at least 16, at most 256 bytes)
    that spans a short side of `short_side` elements; None if none does."""
    return next(
        (b // elem_bytes for b in TALL_ROWS if b // elem_bytes >= max(short_side, 16) and b <= 256),
        None,
    )


def wide_default(new: New, elem_bytes: int, short_side: int, exact: bool = True) -> Any | None:
    """The untuned wide byte-permute config for `short_side` rows (`exact`: a call's, not a
    class's largest): the fewest rows that span them, 128 threads, and the output in order
    (`ordered`) where its words are whole or element-sized (2 and 4 bytes; 1-byte rows of a
    call whose rows are a multiple of 4 bytes), with tiles of 8 KiB
    (H200: int8 / float16 / float32 20x7081411 63.0 / 64.0 / 64.4 -> 76.6 / 79.2
    / 82.5, float16 43x618881 60.0 -> 70.1; int8 21 rows lost 5 to the run store); 1-byte
    rows of any length from WIDE_ORDERED_ODD_ROWS: ordered, 128-byte segments. Else the
    run store with the widest row segments up to 512 bytes that fit (H200: float16 9x5303956
    53.8% with 512 bytes against 38.4% with 256). None for wider elements, more than 256
    bytes of rows, or (run store) output rows under 4 bytes."""
    if elem_bytes not in PRMT_SIZES:
        return None
    tm = _spanning_side(elem_bytes, short_side)
    if tm is None:
        return None
    if (
        elem_bytes == 1
        and short_side >= WIDE_ORDERED_ODD_ROWS
        and not (exact and short_side % 4 == 0)
    ):
        # rows that are not whole words (or a class's, which may be either): 128-byte
        # segments, threads from the rows' span (128 for 64 rows, 512 for 256)
        cfg = new(
            1,
            tm,
            128,
            4,
            256 // tm,
            0,
            "pad",
            "row",
            kind="prmt",
            params=PrmtParams(flat=True, wide=True, ordered=True),
        )
        if cfg.fits(NEWEST):
            return cfg
    if elem_bytes > 1 or (exact and short_side % 4 == 0):
        want = WIDE_ORDERED_TILE_BYTES // (tm * elem_bytes)
        tn = max((t for t in TILE_SIZES if t <= want and t * elem_bytes in TALL_ROWS), default=0)
        if tn:
            cfg = new(
                elem_bytes,
                tm,
                tn,
                4 // elem_bytes,
                4,
                0,
                "pad",
                "row",
                kind="prmt",
                params=PrmtParams(flat=True, wide=True, ordered=True),
            )
            if cfg.fits(NEWEST):
                return cfg
    if short_side * elem_bytes < WIDE_MIN_ROW_BYTES:
        return None
    for segment in (512, 256, 128, 64):  # the first that is a tile side and fits
        if segment // elem_bytes not in TILE_SIZES:
            continue
        cfg = new(
            elem_bytes,
            tm,
            segment // elem_bytes,
            4 // elem_bytes,
            4,
            0,
            "pad",
            "row",
            kind="prmt",
            params=PrmtParams(flat=True, wide=True),
        )
        if cfg.fits(NEWEST):
            return cfg
    return None


def for_rows(c: Config, m: int) -> Any:
    """A served (not forced) config as a call of `m` rows runs it: an ordered wide config of
    1-byte elements on fewer rows than WIDE_ORDERED_ODD_ROWS that are not whole words runs as
    its run-store twin, where the ordered buffer would be written byte by byte (H200, int8
    21x7536398: 60.3 against 55.4); every other config as it is."""
    if (
        c.kind == "prmt"
        and c.params.ordered
        and c.elem_bytes == 1
        and m % 4
        and WIDE_MIN_ROW_BYTES <= m < WIDE_ORDERED_ODD_ROWS
    ):
        return c.replace(ordered=False)
    return c

"""Register transposes (regt=True, templates/regt/): 1- and 2-byte matrices with a side of at
most 16 bytes, transposed in registers, no shared memory. The short side `side` is the
kernel's own (rendered into it; the call must have exactly that side), so the byte permutes
that regroup a thread's bytes are compile-time selectors.

- Few rows (`wide=True`, tile_m = the rows, 2 to 16 bytes of them): a thread loads a 16-byte
  column of every row (two aligned 16-byte loads and a byte shift a row, rows at any
  offset), regroups the bytes into its `side` x 16 bytes of the output, one contiguous run,
  and stores it as aligned 16-byte words.
- Few columns (`wide=False`, tile_n = the columns): a thread loads 16 / elem_bytes whole
  input rows, one contiguous run of `side` 16-byte words (aligned loads and a shift), and
  writes 16 bytes to each of the `side` output rows, realigned to each row's offset with the
  next lane's bytes (a warp shuffle).

- Few rows staged (`wide=True`, `staged=True`): a block is the tile, its threads' windows side
  by side. The rows come in as they lie in memory (coalesced aligned 16-byte words) to shared
  memory; each thread realigns its window of every row from there, regroups it as above and
  writes its run back; the tile's run goes out as coalesced aligned words. No row's loaded
  words stay in registers across the loads, so 8-16 bytes of rows do not run out of them, and
  the output's sectors are written whole.

Both need the run side contiguous (the output rows of few rows, the input rows of few
columns): regt configs are flat (flat=True), and `shapes.flat_fits` checks the strides. A
warp's 32 lanes each hold one 16-byte window of the long side; the stores realigned to the
output are made by lanes 0-30 (each joins its bytes with the next lane's), so a warp moves 31
windows and the next warp starts at the 32nd. Windows the long side does not fill, and the
bytes before a matrix's first aligned store, go element by element.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .base import (
    CACHE_HINTS,
    STATIC_SHARED_MAX,
    WARP,
    Config,
    Kind,
    Launchable,
    New,
    Search,
    SpaceCall,
    fixed_field_errors,
    occupancy_steps,
)


@dataclass(frozen=True)
class RegtParams:
    """A register transpose's own parameters: few rows (`wide`, the rows its short side) or
    few columns, few rows `staged` through shared memory."""

    wide: bool = False
    staged: bool = False


REGT_SIZES = (1, 2)  # element sizes (bytes)
REGT_BYTES = 16  # a thread's window: 16 bytes of the long side, and the most bytes of a side
# the long side a block's threads span (elements): 16 bytes of it a thread
REGT_LONG = (512, 1024, 2048, 4096, 8192)
REGT_MIN_THREADS, REGT_MAX_THREADS = 64, 512
REGT_LANES = WARP - 1  # lanes of a warp whose windows it stores (the last one's the next warp's)
# the default: 256 threads, one block a tile (the grid walks warp tiles)
REGT_DEFAULT_THREADS = 256
# few rows of more bytes than this hold too many registers for 512 threads (a thread keeps two
# loaded words of every row in flight: 1-byte rows of 14-16 bytes spilled under the 128
# registers that 512 threads leave, nvcc 13, sm_80 and sm_90)
REGT_WIDE_512_BYTES = 12
# staged few rows of more than 16 bytes (up to STAGED_WORDS_MAX_BYTES): a thread's window is one
# 4-byte word of every row (templates/regt/staged_words.cu.j2), the block 64 or 128 threads
# (a row's 16-byte words over the tile are one warp's lanes at most)
STAGED_WORDS_MAX_BYTES = 64
STAGED_WORD = 4
STAGED_WORD_THREADS = (64, 128)
# staged few rows of more bytes (up to STAGED_MAX_ROWS rows): too many for a thread to hold a word
# of each, so a block's tile is a byte of columns a thread (STAGED_TILE, the window marker)
# across all rows, its threads regrouping units of 4 bytes of rows x 4 bytes of columns
# (templates/regt/staged_tile.cu.j2), the block 64 or 128 threads
STAGED_MAX_ROWS = 256
STAGED_TILE = 1
STAGED_TILE_THREADS = (64, 128)
# their long sides (elements) that REGT_LONG lacks, for the tile lists
_WORD_LONGS = tuple(
    sorted(
        (
            {t * STAGED_WORD // s for s in REGT_SIZES for t in STAGED_WORD_THREADS}
            | {t // s for s in REGT_SIZES for t in STAGED_TILE_THREADS}
        )
        - set(REGT_LONG)
    )
)


def regt_window(elem_bytes: int) -> int:
    """Elements of the long side in a thread's 16-byte window."""
    return REGT_BYTES // elem_bytes


def regt_side(c: Config) -> int:
    """The short side a regt kernel is rendered for: the rows (wide) or the columns."""
    return c.tile_m if c.params.wide else c.tile_n


def regt_long(c: Config) -> int:
    return c.tile_n if c.params.wide else c.tile_m


def fits_side(elem_bytes: int, side: int) -> bool:
    """Whether a short side of `side` elements is one a regt kernel takes: 2 to 16 bytes."""
    return elem_bytes in REGT_SIZES and 2 <= side and side * elem_bytes <= REGT_BYTES


def fits_staged_side(elem_bytes: int, side: int) -> bool:
    """Whether `side` rows are few rows a staged regt kernel takes: 2 to STAGED_MAX_ROWS."""
    return elem_bytes in REGT_SIZES and 2 <= side <= STAGED_MAX_ROWS


def window_bytes(elem_bytes: int, side: int, staged: bool) -> int:
    """A thread's window of the long side (bytes): staged rows of more than 64 bytes a byte
    (STAGED_TILE: the tile is a byte of columns a thread), of more than 16 one 4-byte word,
    else 16 bytes."""
    if staged and side * elem_bytes > STAGED_WORDS_MAX_BYTES:
        return STAGED_TILE
    return STAGED_WORD if staged and side * elem_bytes > REGT_BYTES else REGT_BYTES


def _window(c: Config) -> int:
    """Elements of the long side in a thread's window."""
    return window_bytes(c.elem_bytes, regt_side(c), c.params.staged) // c.elem_bytes


def _threads(c: Config) -> int:
    return regt_long(c) * c.elem_bytes // window_bytes(c.elem_bytes, regt_side(c), c.params.staged)


def block_longs(elem_bytes: int, side: int, staged: bool) -> tuple[int, ...]:
    """The long sides (elements) a block may span: REGT_LONG for 16-byte windows, those of
    STAGED_WORD_THREADS for a word a thread, of STAGED_TILE_THREADS for a byte."""
    window = window_bytes(elem_bytes, side, staged)
    if window == STAGED_WORD:
        return tuple(t * STAGED_WORD // elem_bytes for t in STAGED_WORD_THREADS)
    if window == STAGED_TILE:
        return tuple(t // elem_bytes for t in STAGED_TILE_THREADS)
    return REGT_LONG


def _longs(c: Config) -> tuple[int, ...]:
    return block_longs(c.elem_bytes, regt_side(c), c.params.staged)


def _errors(c: Config) -> Iterator[str]:
    yield from fixed_field_errors(
        c,
        "regt",
        {
            "vec": 1,
            "per_thread": 1,
            "pad": 0,
            "layout": "pad",
            "raster": "row",
            "conjugate": False,
        },
        "a register transpose holds one 16-byte window a thread, spans the short side "
        "(flat) and sets its own launch bounds",
    )
    if c.elem_bytes not in REGT_SIZES:
        yield f"regt=True takes 1- or 2-byte elements (got elem_bytes={c.elem_bytes})"
        return
    side = regt_side(c)
    staged_rows = c.params.staged and c.params.wide
    if not (fits_staged_side if staged_rows else fits_side)(c.elem_bytes, side):
        which = "tile_m (the rows)" if c.params.wide else "tile_n (the columns)"
        most = STAGED_MAX_ROWS if staged_rows else REGT_BYTES // c.elem_bytes
        yield (
            f"regt=True: {which}={side} must be a short side of 2 to {most} elements"
            + ("" if staged_rows else f" (16 bytes; staged few rows {STAGED_MAX_ROWS})")
        )
        return
    long = regt_long(c)
    which = "tile_n" if c.params.wide else "tile_m"
    if long not in _longs(c):
        yield f"regt=True: {which}={long} (the long side a block spans) must be one of {list(_longs(c))}"
        return
    threads = _threads(c)
    if not REGT_MIN_THREADS <= threads <= REGT_MAX_THREADS:
        window = window_bytes(c.elem_bytes, side, c.params.staged)
        lo = REGT_MIN_THREADS * window // c.elem_bytes
        hi = REGT_MAX_THREADS * window // c.elem_bytes
        yield (
            f"regt=True: {which}={long} gives {threads} threads of {window} bytes; "
            f"{REGT_MIN_THREADS} to {REGT_MAX_THREADS}: use {lo} to {hi}"
        )
    elif c.realign and not (
        c.params.staged and window_bytes(c.elem_bytes, side, True) == STAGED_TILE
    ):
        yield (
            "regt=True takes realign=True (units loaded straight from the rows) only for staged "
            f"few rows of more than {STAGED_WORDS_MAX_BYTES} bytes; set realign=False"
        )
    elif c.min_blocks and not c.params.staged:
        yield f"regt=True takes min_blocks=0 (got {c.min_blocks}) unless staged=True: its own launch bounds"
    elif c.params.staged and not c.params.wide:
        yield "regt=True with staged=True stages few rows (wide=True); few columns take staged=False"
    elif (
        c.params.staged and _stage_bytes(c.elem_bytes, side, threads, c.realign) > STATIC_SHARED_MAX
    ):
        fit = max(
            t
            for t in (REGT_MIN_THREADS, 128, 256)
            if _stage_bytes(c.elem_bytes, side, t, c.realign) <= STATIC_SHARED_MAX
        )
        yield (
            f"regt=True, staged=True: {threads} threads stage "
            f"{_stage_bytes(c.elem_bytes, side, threads, c.realign)} bytes of "
            f"{side} rows, past the {STATIC_SHARED_MAX} a block holds statically; at most "
            f"{fit} threads, tile_n={fit * window_bytes(c.elem_bytes, side, True) // c.elem_bytes}"
        )
    elif (
        c.params.wide
        and not c.params.staged
        and side * c.elem_bytes > REGT_WIDE_512_BYTES
        and threads > 256
    ):
        yield (
            f"regt=True: {side} rows of {side * c.elem_bytes} bytes hold too many registers for "
            f"{threads} threads (ptxas spilled): at most 256, tile_n={256 * regt_window(c.elem_bytes)}"
        )


def stage_pitch(side: int) -> int:
    """Run words (of the window's size) between two threads' runs in a staged kernel's shared
    memory: the run's `side` words, made odd so that a wavefront of threads' writes falls on
    distinct banks."""
    return side | 1


def unit_rows(elem_bytes: int) -> int:
    """Rows of a staged tile's unit (templates/regt/staged_tile.cu.j2): 4 bytes of them."""
    return 4 // elem_bytes


def _row_words(side: int, threads: int, window: int, elem_bytes: int, direct: bool = False) -> int:
    """16-byte words of the rows a staged tile brings in: each row's over the tile, and the
    word past them; a byte a thread: each row's over the tile realigned, the rows made whole
    units, or none where its units are loaded straight from the rows (`direct`)."""
    if window == STAGED_TILE:
        unit = unit_rows(elem_bytes)
        return 0 if direct else -(-side // unit) * unit * threads // 16
    return side * (threads * window // 16 + 1)


def _stage_bytes(elem_bytes: int, side: int, threads: int, direct: bool = False) -> int:
    # the rows, then the runs: two buffers, so that a thread writes each run word as soon as
    # its permutes make it (no registers holding the whole run across a barrier) and a tile
    # takes two barriers. Runs of 16-byte windows are 16-byte words (side of them a thread),
    # of 4-byte windows 4-byte words, plus each row's offset
    # (a byte a thread: the runs of 4-byte column words, `side` words each)
    window = window_bytes(elem_bytes, side, True)
    rows = 16 * _row_words(side, threads, window, elem_bytes, direct)
    if window == STAGED_TILE:
        return rows + stage_pitch(side) * threads + 16
    return rows + window * stage_pitch(side) * threads + (4 * side if window == STAGED_WORD else 0)


def byte_sources(
    elem_bytes: int, side: int, wide: bool, window: int = REGT_BYTES
) -> list[list[tuple[int, int]]]:
    """For each 32-bit word a thread stores (in order), the (source word, byte) of each of its
    4 bytes, the source words being what the thread loaded, `window` bytes a row. Few rows:
    row i's window is words (window / 4) i.., and the output is the run of `side` x `window`
    bytes of its window's columns (column-major). Few columns (16-byte windows): the loaded run
    is 16 / elem_bytes rows of `side` elements, and output row r takes element r of each."""
    s = elem_bytes
    words = []
    for w in range(window * side // 4):
        sources = []
        for k in range(4 * w, 4 * w + 4):
            if wide:
                e, p = divmod(k, s)  # the run's element, and the byte in it
                col, row = divmod(e, side)
                src = window * row + col * s + p
            else:
                r, k16 = divmod(k, REGT_BYTES)  # output row r, its byte k16
                e, p = divmod(k16, s)  # input row e of the window
                src = e * side * s + r * s + p
            sources.append(divmod(src, 4))
        words.append(sources)
    return words


def prmt_expression(sources: list[tuple[int, int]], name: str = "x") -> str:
    """A C expression of the 32-bit word whose bytes 0-3 are bytes `sources` ((word, byte))
    of `name`[]: the word itself, one byte permute of one or two source words, or three for
    three or four (two pairs, then the pair's bytes merged)."""
    regs = list(dict.fromkeys(w for w, _ in sources))
    if len(regs) == 1 and [b for _, b in sources] == [0, 1, 2, 3]:
        return f"{name}[{regs[0]}]"

    def perm(pair: list[int], picks: list[tuple[int, int] | None]) -> str:
        sel = 0
        for i, pick in enumerate(picks):
            if pick is not None:
                sel |= (4 * pair.index(pick[0]) + pick[1]) << (4 * i)
        second = f"{name}[{pair[1]}]" if len(pair) > 1 else "0u"
        return f"__byte_perm({name}[{pair[0]}], {second}, 0x{sel:04x}u)"

    if len(regs) <= 2:
        return perm(regs, list(sources))
    first, second = regs[:2], regs[2:]
    a = perm(first, [p if p[0] in first else None for p in sources])
    b = perm(second, [p if p[0] in second else None for p in sources])
    sel = sum((i if p[0] in first else 4 + i) << (4 * i) for i, p in enumerate(sources))
    return f"__byte_perm({a}, {b}, 0x{sel:04x}u)"


def permutes(elem_bytes: int, side: int, wide: bool) -> int:
    """Byte permutes a thread's regrouping takes (what the template renders)."""
    return sum(
        e.count("__byte_perm")
        for e in (prmt_expression(w) for w in byte_sources(elem_bytes, side, wide))
    )


def _params(c: Config) -> dict[str, object]:
    side = regt_side(c)
    window = window_bytes(c.elem_bytes, side, c.params.staged)
    # (a byte a thread: the template's own two-step permutes of a unit)
    sources = (
        [] if window == STAGED_TILE else byte_sources(c.elem_bytes, side, c.params.wide, window)
    )
    return {
        "side": side,
        "wide": c.params.wide,
        "w": _window(c),  # elements of a window (not the staged tiles': a byte a thread)
        "window": window,
        "long": regt_long(c),  # the long side a block (staged) or a warp tile spans
        "tb": regt_long(c) * c.elem_bytes,  # bytes of it
        "unit": unit_rows(c.elem_bytes),
        "warps": c.threads // WARP,
        "lanes": REGT_LANES,
        "words": [prmt_expression(w) for w in sources],
        "min_blocks": c.min_blocks or 1,
        "staged": c.params.staged,
        # the rows' 16-byte words, and the runs' words (16 or 4 bytes: the window's)
        "stage_words": _row_words(side, _threads(c), window, c.elem_bytes, c.realign),
        "direct": c.realign,  # a staged tile's units straight from the rows
        # (a byte a thread: a run of `pitch` words for each 4-byte column word of the tile)
        # and 16 bytes past them, read with the last word out)
        "run_words": stage_pitch(side) * _threads(c) // 4 + 4
        if window == STAGED_TILE
        else stage_pitch(side) * _threads(c),
        "pitch": stage_pitch(side),
    }


def _search(launchable: Launchable, call: SpaceCall) -> Iterator[Any]:
    """A call with a side of 2 to 16 bytes (the exact side: `short_side`): both directions."""
    side = call.short_side
    if side is None or call.conjugate or not fits_staged_side(call.elem_bytes, side):
        return
    yield from regt_space(launchable, call)


def regt_space(launchable: Launchable, call: SpaceCall) -> Iterator[Any]:
    """The regt configs for a short side of exactly `short_side` elements: few rows and few
    columns, every block size, both cache hints (and persistent grids)."""
    s, side = call.elem_bytes, call.short_side
    if side is None or not fits_staged_side(s, side):
        return
    for wide, staged in ((True, False), (True, True), (False, False)):
        if not (fits_staged_side if staged else fits_side)(s, side):
            continue
        window = window_bytes(s, side, staged)
        # staged tiles: their units from shared memory and straight from the rows
        for long, direct in itertools.product(
            block_longs(s, side, staged), (False, True) if window == STAGED_TILE else (False,)
        ):
            threads = long * s // window
            if staged and _stage_bytes(s, side, threads, direct) > STATIC_SHARED_MAX:
                continue
            # staged: its registers capped as the other kinds' are (more blocks an SM hide
            # the barriers between a tile's loads and its stores)
            caps = (0, *occupancy_steps(threads)) if staged else (0,)
            for cache, blocks in itertools.product(CACHE_HINTS, caps):
                tm, tn = (side, long) if wide else (long, side)
                yield from launchable(
                    call.limits, s, tm, tn, 1, 1, 0, "pad", "row", cache, realign=direct,
                    kind="regt", params=RegtParams(wide=wide, staged=staged), min_blocks=blocks,
                )  # fmt: skip


class Regt(Kind):
    name = "regt"
    Params = RegtParams
    mark = "regt"
    fixed = (("flat", True),)  # written as a flat kernel: it spans the short side
    codes = (("flat", "flat"), ("staged", "sg"), ("wide", "wd"), ("regt", "rg"))

    def spans_short_side(self, c: Config) -> bool:
        return True

    template = "regt/regt.cu.j2"
    capped = False  # one block a tile of warps, its own launch bounds

    def errors(self, c: Config) -> Iterator[str]:
        return _errors(c)

    def derive(self, c: Config) -> dict[str, int]:
        smem = (
            _stage_bytes(c.elem_bytes, regt_side(c), _threads(c), c.realign)
            if c.params.staged
            else 0
        )
        return {"threads": _threads(c), "smem": smem}

    def params(self, c: Config) -> dict[str, object]:
        return _params(c)

    def searches(self) -> tuple[Search, ...]:
        return ((15, _search),)

    def tile_m_values(self, c: Config) -> tuple[int, ...]:
        return tuple(range(2, STAGED_MAX_ROWS + 1)) + _WORD_LONGS + REGT_LONG

    def tile_n_values(self, c: Config) -> tuple[int, ...]:
        return tuple(range(2, REGT_BYTES + 1)) + _WORD_LONGS + REGT_LONG

    def applies(self, c: Config, m: int, n: int) -> bool:
        """Exactly the side it was rendered for (`for_call` makes a served config's)."""
        return (m if c.params.wide else n) == regt_side(c)

    def tiles(self, c: Config, m: int, n: int) -> tuple[int, int]:
        """Warp tiles (31 windows each) along the long side; staged: block tiles (a window a
        thread)."""
        if not self.applies(c, m, n):
            raise ConfigError(
                f"regt config {c.key} is rendered for {regt_side(c)} "
                f"{'rows' if c.params.wide else 'columns'}; the matrix is {m}x{n}"
            )
        if c.params.staged:
            return (1, -(-n // regt_long(c)))
        per = REGT_LANES * regt_window(c.elem_bytes)
        return (1, -(-n // per)) if c.params.wide else (-(-m // per), 1)

    def grid(
        self, c: Config, m: int, n: int, batch: int, multiprocessors: int
    ) -> tuple[int, int, int]:
        """A warp a tile (staged: a block), or `persistent` blocks an SM that walk them."""
        tm, tn = self.tiles(c, m, n)
        blocks = (
            tm * tn * batch if c.params.staged else -(-(tm * tn * batch) // (c.threads // WARP))
        )
        if c.persistent:
            blocks = min(blocks, c.persistent * multiprocessors)
        return (max(blocks, 1), 1, 1)

    def any_offset(self, c: Config) -> bool:
        return True

    def for_call(self, c: Config, m: int, n: int) -> Any:
        """The config rendered for this call's side (the same block and hints; staged: the
        block and register cap of `staged_block` for the side), or `c` where the call's side
        is not one it takes."""
        side = m if c.params.wide else n
        fits = fits_staged_side if c.params.staged else fits_side
        if side == regt_side(c) or not fits(c.elem_bytes, side):
            return c
        if c.realign and window_bytes(c.elem_bytes, side, True) != STAGED_TILE:
            return c  # units straight from the rows are a staged tile's only
        if (
            c.params.staged
        ):  # the block and the register cap follow the rows (shared memory, registers)
            long, blocks = staged_block(c.elem_bytes, side, c.realign)
            return c.replace(tile_m=side, tile_n=long, min_blocks=blocks)
        return c.replace(**({"tile_m": side} if c.params.wide else {"tile_n": side}))

    def step_values(
        self, c: Config, name: str, values: tuple[int, ...], pair: bool
    ) -> tuple[int, ...]:
        """The long side steps along its block sizes (the block's threads); the short side is
        the call's and stays."""
        if name == ("tile_n" if c.params.wide else "tile_m"):
            return _longs(c)
        return (regt_side(c),) if name in ("tile_m", "tile_n") else values


KIND = Regt()


# Where a register transpose is served (sweeps with dev/regt_sweep.py: every side of 1- and
# 2-byte elements both ways against the narrow direct tiles and the flat, tall and wide
# defaults; docs/perf-notes.md, "Register transposes"), by (element bytes, few rows): the most
# rows or columns of a call whose first call races it. Few columns (H100): it won every side
# up to these by 5-50 points and lost 1-byte columns of 11-16 to the tall byte-permute kernel.
# Few rows: the staged kernel (H200) won every side of 4-16 bytes, 1-byte rows of 4-16 at
# 85-102% of copy against 36-87 for the unstaged one and 45-76 for the others. Rows of 17-64
# bytes (a word a thread; H100): with 128 threads it won 1-byte rows of 17, 32 and 37 and
# 2-byte rows of 9, 16 and 32 by 5-27 points and lost 24 bytes by 3-4 (the race keeps the
# ordered wide kernel there); with 64 threads, all that fit past 47 rows of bytes, it lost 48
# and 58 rows by 12-14 points, so it is raced only where 128 threads fit ...
REGT_RACED_SIDES = {(1, True): 47, (1, False): 10, (2, True): 32, (2, False): 8}
# ... and the largest class bound (a power of two) whose calls lookup serves it by default
REGT_DEFAULT_SIDES = {(1, True): 16, (1, False): 8, (2, True): 8, (2, False): 8}
# staged tiles (rows of more than STAGED_WORDS_MAX_BYTES, units of 4x4 bytes; H200,
# dev/regt_sweep.py: int8 65-190 rows 69-89% of copy against 48-70 for the other kinds,
# float16 33-128 rows 66-94 against 54-79) are raced where a block of this many threads fits
# their shared memory (up to 190 rows), never lookup's default
STAGED_TILE_RACED_THREADS = 128
# few rows of at least this many rows go through shared memory (staged=True); fewer: one
# window a thread in registers, 64 threads for rows of at most REGT_FEW_THREADS_BYTES bytes
# (the H100 sweep's best or within 0.5 of it on 9 of 10; 256 threads lost 1-5 there), else 256
STAGED_MIN_ROWS = 3
REGT_FEW_THREADS_BYTES = 6
# staged: 128 threads where the rows and runs fit the static shared memory (16-byte windows:
# up to 11 rows; a word a thread: 1-byte rows up to 47), else 64; registers capped at 64 (8
# blocks of 128 threads) for at most this many rows (H200: int8 4 rows 101.9 capped against
# 87.6, float16 4 and 5 rows 102.3 and 103.2 against 89.1 and 102.0), uncapped above (int8 8
# rows capped 94.0 against 100.8)
STAGED_CAPPED_ROWS = 5
STAGED_THREADS = (128, REGT_MIN_THREADS)


# staged tiles: registers capped where the shared memory lets an SM run this many blocks (H200,
# dev/regt_sweep.py: int8 65 and 80 rows, float16 33 and 51 rows, 10-16 blocks: capped 87-93%
# of copy against 81-88 uncapped; int8 101 rows and float16 95 rows, 8-9 blocks: uncapped
# 86.6 and 79.1 against 72 capped; past them within a point)
STAGED_TILE_CAP_FIT = 10
# the shared memory of an SM that blocks share (Hopper and Ampere's A100: 228 KiB, 1 KiB of
# it reserved a block), for the blocks a staged tile's shared memory lets an SM run
SM_SHARED = 228 * 1024
BLOCK_RESERVED_SHARED = 1024


def staged_block(elem_bytes: int, side: int, direct: bool = False) -> tuple[int, int]:
    """(tile_n, min_blocks) of the staged config for `side` rows of `elem_bytes`-byte elements:
    staged tiles (rows of more than STAGED_WORDS_MAX_BYTES) capped to 64 registers (8 blocks of
    128 threads) where their shared memory lets an SM run STAGED_TILE_CAP_FIT blocks or more;
    those that load their units straight from the rows (`direct`) uncapped (40-48 registers;
    capped, float16 33 and 191 rows lost 9-11 points, H200)."""
    threads = next(
        t for t in STAGED_THREADS if _stage_bytes(elem_bytes, side, t, direct) <= STATIC_SHARED_MAX
    )
    blocks = occupancy_steps(threads)[-1] if side <= STAGED_CAPPED_ROWS else 0
    if direct:
        blocks = 0
    elif window_bytes(elem_bytes, side, True) == STAGED_TILE:
        fit = SM_SHARED // (_stage_bytes(elem_bytes, side, threads) + BLOCK_RESERVED_SHARED)
        steps = [b for b in occupancy_steps(threads) if b <= fit]
        blocks = max(steps) if fit >= STAGED_TILE_CAP_FIT and steps else 0
    return threads * window_bytes(elem_bytes, side, True) // elem_bytes, blocks


def regt_default(new: New, elem_bytes: int, m: int, n: int, exact: bool = True) -> Any | None:
    """The regt config for an m x n call (`exact`) or class (its bounds; `for_call` sets the
    call's own side) with a short side that a register transpose serves: few rows where the
    rows are the short side, else few columns, up to REGT_RACED_SIDES (a call's) or
    REGT_DEFAULT_SIDES (a class's bound); few rows of STAGED_MIN_ROWS or more staged through
    shared memory (`staged_block`), fewer in registers with 64 threads for rows of at most
    REGT_FEW_THREADS_BYTES bytes, else 256; default caching. None for other calls."""
    if fits_staged_side(elem_bytes, m) and m <= n:
        wide, side = True, m
    elif fits_side(elem_bytes, n):
        wide, side = False, n
    else:
        return None
    direct = False
    if wide and side * elem_bytes > STAGED_WORDS_MAX_BYTES:
        # staged tiles: from shared memory where 128 threads fit it (64 lost to the ordered
        # wide kernel: int8 220 rows 53.0 against 60.2, H200), else straight from the rows
        if not exact:
            return None
        direct = staged_block(elem_bytes, side)[0] * elem_bytes < STAGED_TILE_RACED_THREADS
    elif side > (REGT_RACED_SIDES if exact else REGT_DEFAULT_SIDES)[(elem_bytes, wide)]:
        return None
    if wide and side >= STAGED_MIN_ROWS:
        long, blocks = staged_block(elem_bytes, side, direct)
        return new(
            elem_bytes, side, long, 1, 1, 0, "pad", "row", realign=direct,
            kind="regt", params=RegtParams(wide=True, staged=True), min_blocks=blocks,
        )  # fmt: skip
    few = wide and side * elem_bytes <= REGT_FEW_THREADS_BYTES
    long = (64 if few else REGT_DEFAULT_THREADS) * regt_window(elem_bytes)
    tm, tn = (side, long) if wide else (long, side)
    return new(elem_bytes, tm, tn, 1, 1, 0, "pad", "row", kind="regt", params=RegtParams(wide=wide))


def regt_alternative(c: Any | None) -> Any | None:
    """For a call whose first call races `c` (its `regt_default`), a staged tile from shared
    memory, the same tile loading its units straight from the rows (realign=True), raced
    beside it: neither won everywhere (H200: int8 139x6878879 82 against 72 and float16 128
    rows 75 against 66, but int8 65 and 101 rows 65-68 against 88-90 and float16 33 rows 62
    against 88); None for other calls."""
    if c is None or c.kind != "regt" or c.realign or not c.params.staged:
        return None
    if window_bytes(c.elem_bytes, c.tile_m, True) != STAGED_TILE:
        return None
    long, blocks = staged_block(c.elem_bytes, c.tile_m, True)
    return c.replace(realign=True, tile_n=long, min_blocks=blocks)

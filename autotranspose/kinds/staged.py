"""Staged kernels (staged=True, templates/staged/): rows at any offset. A tile's input
rows are staged in shared memory as aligned words of 4, 8 or 16 bytes; output windows start
up to `vec` - 1 rows before a tile, so a tile holds that many rows more.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .base import (
    CACHE_HINTS,
    PER_THREAD,
    RASTERS,
    TILE_SIZES,
    VEC_SIZES,
    WARP,
    WORD_TYPES,
    Config,
    Kind,
    Launchable,
    New,
    Search,
    SpaceCall,
    fixed_field_errors,
    min_blocks_errors,
)

STAGED_SIZES = (1, 2, 4, 8)  # 16-byte elements are always aligned: the tiled kernels serve them
STAGED_MAX_THREADS = 512  # 1024 threads cap registers at 64: int8 kernels spilled
STAGED_THREAD_BYTES = 128  # words in flight per thread, in bytes
# At STAGED_MAX_THREADS a thread has 128 registers; with 33 words in flight (16 output, 17
# loaded) nvcc 13.0 spilled 8-24 bytes on sm_90 for 16 of the 36 such configs (the other 20
# sat at the edge), none with 32 or fewer.
STAGED_WORDS_AT_MAX_THREADS = 32


def staged_rows(c: Config) -> int:
    """Input rows a staged tile holds: output windows start up to vec - 1 rows early."""
    return c.tile_m + c.vec - 1


def staged_pitch(c: Config) -> int:
    """Bytes between staged rows in shared memory: the row's words, rounded to 8 bytes (so
    rows vec apart, one 4-byte skew further, fall in different banks)."""
    return -(-staged_words(c) * c.word_bytes // 8) * 8


def staged_loads(c: Config) -> int:
    """Words each thread of a staged kernel loads: the whole tile in one pass."""
    return -(-staged_rows(c) * staged_words(c) // c.threads)


def staged_words(c: Config) -> int:
    """Aligned words staged per input row of a staged tile: its tile_n elements at any offset."""
    return -(-c.tile_n * c.elem_bytes // c.word_bytes) + 1


def _errors(c: Config) -> Iterator[str]:
    yield from fixed_field_errors(
        c,
        "staged",
        {"pad": 0, "layout": "pad", "realign": False},
        "a staged kernel has its own shared-memory layout",
    )
    if c.elem_bytes not in STAGED_SIZES:
        yield f"staged=True needs elem_bytes in {list(STAGED_SIZES)} (16-byte rows are always aligned: use a tiled config)"
        return
    w = c.word_bytes
    if w not in (4, 8, 16):
        yield f"staged=True moves words of 4, 8 or 16 bytes; vec={c.vec} x {c.elem_bytes} bytes = {w}"
        return
    if c.vec > c.tile_m:
        yield f"vec={c.vec} exceeds tile_m={c.tile_m}"
        return
    if c.per_thread > c.tile_m // c.vec:
        yield (
            f"per_thread={c.per_thread} exceeds the {c.tile_m // c.vec} words a {c.tile_m}-row "
            f"window of an output row holds (vec={c.vec}): lower per_thread or raise tile_m"
        )
        return
    words = c.tile_n * (c.tile_m // c.vec)
    threads = words // c.per_thread
    if words % c.per_thread or threads % WARP or not 0 < threads <= STAGED_MAX_THREADS:
        yield (
            f"staged tile {c.tile_m}x{c.tile_n} has {words} output words; per_thread={c.per_thread} "
            f"gives {threads} threads, which must be a multiple of {WARP} up to {STAGED_MAX_THREADS}"
        )
    loads = -(-staged_rows(c) * staged_words(c) // max(threads, 1))
    if loads * w > STAGED_THREAD_BYTES:
        yield (
            f"staged tile {c.tile_m}x{c.tile_n} loads {loads} words of {w} bytes per thread "
            f"({threads} threads); at most {STAGED_THREAD_BYTES} bytes: lower per_thread"
        )
    if threads == STAGED_MAX_THREADS and c.per_thread + loads > STAGED_WORDS_AT_MAX_THREADS:
        yield (
            f"staged tile {c.tile_m}x{c.tile_n} holds {c.per_thread} output and {loads} loaded "
            f"words per thread at {threads} threads (128 registers each); at most "
            f"{STAGED_WORDS_AT_MAX_THREADS} there (more spills on sm_90): lower per_thread"
        )
    if c.per_thread * w > STAGED_THREAD_BYTES:
        yield (
            f"per_thread={c.per_thread} words of {w} bytes in flight per thread; at most "
            f"{STAGED_THREAD_BYTES} bytes (more spills): lower per_thread"
        )
    if c.conjugate and c.elem_bytes != 8:
        yield "conjugate=True needs complex64 elements for a staged kernel (elem_bytes 8)"
    yield from min_blocks_errors(c, threads)


def _params(c: Config) -> dict[str, object]:
    """What templates/staged/ needs about one staged config."""
    return {
        "v": c.vec,
        "w": c.word_bytes,
        "ww": c.word_bytes // 4,
        "tm": c.tile_m,
        "tn": c.tile_n,
        "pt": c.per_thread,
        "rows": staged_rows(c),
        "pitch": staged_pitch(c),
        "nw": staged_words(c),
        "nwo": c.tile_m // c.vec,
        "lu": staged_loads(c),
        "lpr": c.tile_m // c.vec // c.per_thread,  # threads per output row of a tile
        "vstep": c.vec * staged_pitch(c) + 4,  # shared-memory bytes between rows vec apart
        "smem": c.smem_bytes,
        "raster": c.raster,
        "word_t": WORD_TYPES[c.word_bytes],
    }


def staged_space(launchable: Launchable, call: SpaceCall) -> Iterator[Any]:
    """The staged configs (rows at any offset) for `elem_bytes`-byte elements."""
    elem_bytes = call.elem_bytes
    for vec in VEC_SIZES:
        if vec * elem_bytes not in (4, 8, 16):
            continue
        for tm in TILE_SIZES:
            for tn in TILE_SIZES:
                for pt in PER_THREAD:
                    for raster in RASTERS:
                        for cache in CACHE_HINTS:
                            yield from launchable(
                                call.limits,
                                elem_bytes,
                                tm,
                                tn,
                                vec,
                                pt,
                                0,
                                "pad",
                                raster,
                                cache,
                                call.conjugate,
                                kind="staged",
                            )


def _search(launchable: Launchable, call: SpaceCall) -> Iterator[Any]:
    """A call whose rows restrict its vectors: the staged configs (complex64 ones conjugate)."""
    s = call.elem_bytes
    if call.restricted and s in STAGED_SIZES and (not call.conjugate or s == 8):
        yield from staged_space(launchable, call)


class Staged(Kind):
    name = "staged"
    mark = "staged"
    codes = (("staged", "sg"),)
    template = "staged/staged.cu.j2"

    def errors(self, c: Config) -> Iterator[str]:
        return _errors(c)

    def derive(self, c: Config) -> dict[str, int]:
        rows = staged_rows(c)
        smem = rows * staged_pitch(c) + (rows - 1) // c.vec * 4
        return {
            "threads": c.tile_n * (c.tile_m // c.vec) // c.per_thread,
            "smem": -(-smem // 16) * 16,
        }

    def params(self, c: Config) -> dict[str, object]:
        return _params(c)

    def searches(self) -> tuple[Search, ...]:
        return ((10, _search),)

    def tiles(self, c: Config, m: int, n: int) -> tuple[int, int]:
        # output windows start up to vec - 1 rows before a tile: one more
        return (-(-(m + c.vec - 1) // c.tile_m), -(-n // c.tile_n))

    def any_offset(self, c: Config) -> bool:
        return True


KIND = Staged()


def staged_default(new: New, elem_bytes: int, conjugate: bool = False) -> Any | None:
    """The untuned staged config (rows at any offset) for an element size; None where the
    tiled kernels serve every call (16-byte elements)."""
    fields = _STAGED_DEFAULTS.get(elem_bytes)
    if fields is None or (conjugate and elem_bytes != 8):
        return None
    tm, tn, vec, pt, raster, blocks = fields
    return new(
        elem_bytes,
        tm,
        tn,
        vec,
        pt,
        0,
        "pad",
        raster,
        "default",
        conjugate,
        kind="staged",
        min_blocks=blocks,
    )


# elem_bytes -> (tile_m, tile_n, vec, per_thread, raster, min_blocks): of 5-6 candidates each,
# the best geometric mean over 3-5 odd-row cases on the H200 (dev/staged_sweep.py,
# docs/perf-notes.md, "Rows at odd offsets"). 2, 4 and 8 bytes: 4 blocks an SM (64 registers)
# instead of 3 (80), H200: float32 4099x6007 82.3 -> 88.0, 6x3603x3603 82.2 -> 89.0,
# 116x259791 81.8 -> 87.0; float64 10923x10923 80.9 -> 86.6; float16 11407x11407 74.3 ->
# 79.3, 2125x14695 81.9 -> 85.8 (dev/occupancy_sweep.py). 1 byte (128 threads): no cap gained.
_STAGED_DEFAULTS: dict[int, tuple[Any, ...]] = {
    1: (128, 64, 16, 4, "col", 0),
    2: (128, 64, 8, 4, "col", 4),
    4: (128, 32, 4, 4, "col", 4),
    8: (64, 32, 2, 4, "col", 4),
}

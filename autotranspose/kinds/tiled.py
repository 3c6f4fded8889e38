"""Tiled kernels (no kind flag; templates/tiled/): a `tile_m` x `tile_n` tile through shared
memory in `vec` x `vec` micro-blocks, each thread moving `per_thread` of them; `realign` ones
use their vectors at any offset.

Shared memory is split into planes of `chunk_bytes`-wide entries (the widest shared-memory
access, at most 16 bytes), so both phases access it at full width; bank conflicts are avoided
either by padding each row by `pad` chunks or by an XOR swizzle of the chunk column.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..errors import ConfigError
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
    min_blocks_errors,
    occupancy_steps,
)

MAX_MICROBLOCK_BYTES = 256  # a micro-block lives in registers: 64 words at most
MAX_THREAD_BYTES = 256  # all micro-blocks of a thread are loaded before any is stored
# The estimate (`KernelConfig.registers`) is a lower bound: nvcc 13 for sm_90 used up to twice
# as many (realigning kernels: calibrated separately, see `registers`). Keeping twice the
# estimate under ptxas's 255 and the 64K register file means every config in the space
# compiles without spills and launches (tests/test_compile.py checks).
MAX_REGISTERS = 128
REGISTER_FILE = 65536


def _errors(c: Config) -> Iterator[str]:
    w = c.vec * c.elem_bytes
    if w > 16:
        yield f"vec={c.vec} x elem_bytes={c.elem_bytes} = {w} bytes: a vector is at most 16 bytes"
    elif c.vec > 1 and w < 4:
        yield f"vec={c.vec} with {c.elem_bytes}-byte elements makes {w}-byte words; use vec=1 or a vector of at least 4 bytes"
    elif c.vec * w > MAX_MICROBLOCK_BYTES:
        yield f"a {c.vec}x{c.vec} micro-block of {c.elem_bytes}-byte elements needs {c.vec * w} bytes of registers; at most {MAX_MICROBLOCK_BYTES}"
    if c.vec > min(c.tile_m, c.tile_n):
        yield f"vec={c.vec} exceeds the tile ({c.tile_m}x{c.tile_n})"
        return
    blocks_m, blocks_n = c.tile_m // c.vec, c.tile_n // c.vec
    if c.per_thread > min(blocks_m, blocks_n):
        yield (
            f"per_thread={c.per_thread} exceeds the micro-block rows of the tile "
            f"({min(blocks_m, blocks_n)} for tile {c.tile_m}x{c.tile_n}, vec={c.vec})"
        )
        return
    if c.per_thread * c.vec * w > MAX_THREAD_BYTES:
        yield (
            f"per_thread={c.per_thread} micro-blocks of {c.vec * w} bytes hold "
            f"{c.per_thread * c.vec * w} bytes in registers; at most {MAX_THREAD_BYTES}"
        )
    threads = blocks_m * blocks_n // c.per_thread
    regs = c.registers
    if regs > MAX_REGISTERS or 2 * regs * threads > REGISTER_FILE:
        yield (
            f"per_thread={c.per_thread} micro-blocks of {c.vec}x{c.vec} need about {regs} "
            f"registers per thread ({threads} threads); ptxas would spill: lower per_thread"
        )
    if threads % WARP:
        yield f"the config gives {threads} threads per block; it must be a multiple of {WARP}: use a larger tile or a smaller per_thread"
    if threads > 1024:
        yield f"the config gives {threads} threads per block; at most 1024: raise per_thread or shrink the tile"
    if c.layout == "swizzle" and c.pad:
        yield "pad must be 0 with layout='swizzle' (the swizzle replaces padding)"
    if c.realign and c.vec == 1:
        yield "realign=True needs vec >= 2 (it realigns vectors of several elements)"
    if c.conjugate and c.elem_bytes not in (8, 16):
        yield "conjugate=True needs complex64 or complex128 elements (elem_bytes 8 or 16)"
    yield from min_blocks_errors(c, threads)


def _block_bytes(c: Config) -> int:
    return c.vec * c.word_bytes


def _chunk_bytes(c: Config) -> int:
    return min(_block_bytes(c), 16)


def smem_pitch(c: Config) -> int:
    """Chunks per shared-memory row (one row holds the micro-blocks of `vec` output rows)."""
    return c.tile_m // c.vec + (c.pad if c.layout == "pad" else 0)


def _params(c: Config) -> dict[str, object]:
    """Everything templates/tiled/ needs about one tiled config, derived here so the
    template only lays out code."""
    w = c.word_bytes
    a = _chunk_bytes(c)
    planes = _block_bytes(c) // a
    iw, ow = c.tile_n // c.vec, c.tile_m // c.vec
    rows = iw
    plane = rows * smem_pitch(c)
    return {
        "v": c.vec,
        "w": w,
        "ww": max(w // 4, 1),
        "e": max(c.elem_bytes // 4, 1),
        "narrow": w < 4,
        "tm": c.tile_m,
        "tn": c.tile_n,
        "pt": c.per_thread,
        "word_t": WORD_TYPES[w],
        "chunk_t": WORD_TYPES[a],
        "a": a,
        "cw": max(a // 4, 1),
        "planes": planes,
        "rows": rows,
        "pitch": smem_pitch(c),
        "plane": plane,
        "smem_chunks": planes * plane,
        "smem": c.smem_bytes,
        "iw": iw,
        "ow": ow,
        "lstep": c.threads // iw,
        "ostep": c.threads // ow,
        "layout": c.layout,
        "pad": c.pad,
        "swz_mask": min(ow, 128 // a) - 1,
        "swz_rows": max(1, 128 // (ow * a)),
        "raster": c.raster,
        "realign": c.realign,
    }


def _search(launchable: Launchable, call: SpaceCall) -> Iterator[Any]:
    """Every tiled config: the vectors the call allows, and where its rows restrict them, the
    realigning kernels, which use vectors of any width on any alignment."""
    mv = call.max_vector
    modes = [(v, False) for v in VEC_SIZES if mv is None or v <= mv]
    modes += [(v, True) for v in VEC_SIZES if call.restricted and v > 1]
    for vec, realign in modes:
        for tm in TILE_SIZES:
            for tn in TILE_SIZES:
                for pt in PER_THREAD:
                    for layout, pad in (("pad", 0), ("pad", 1), ("swizzle", 0)):
                        for raster in RASTERS:
                            for cache in CACHE_HINTS:
                                yield from launchable(
                                    call.limits,
                                    call.elem_bytes,
                                    tm,
                                    tn,
                                    vec,
                                    pt,
                                    pad,
                                    layout,
                                    raster,
                                    cache,
                                    call.conjugate,
                                    realign=realign,
                                )


class Tiled(Kind):
    name = "tiled"
    template = "tiled/tiled.cu.j2"

    def errors(self, c: Config) -> Iterator[str]:
        return _errors(c)

    def derive(self, c: Config) -> dict[str, int]:
        threads = (c.tile_m // c.vec) * (c.tile_n // c.vec) // c.per_thread
        rows = c.tile_n // c.vec  # one shared-memory row per vec output rows
        smem = (_block_bytes(c) // _chunk_bytes(c)) * rows * smem_pitch(c) * _chunk_bytes(c)
        return {"threads": threads, "smem": smem}

    def params(self, c: Config) -> dict[str, object]:
        return _params(c)

    def searches(self) -> tuple[Search, ...]:
        return ((0, _search),)

    def any_offset(self, c: Config) -> bool:
        return c.realign


KIND = Tiled()


# The seed documents' best kernel: 32x32 tile, +1 padding, a 32x8 thread block (4 rows each).
def seed_config(new: New, elem_bytes: int) -> Any:
    return new(elem_bytes, 32, 32, 1, 4, 1, "pad", "row", "default")


def default_config(new: New, elem_bytes: int, max_vector: int, conjugate: bool) -> Any | None:
    """The untuned choice for an element size: the best config of a sweep on an H100 at
    8192x8192 (BENCHMARKS.md) for the widest vector the call allows (None: no such size)."""
    for (s, vec), fields in _DEFAULTS.items():
        if s == elem_bytes and vec <= max_vector:
            tm, tn, v, pt, pad, layout, raster, cache, persistent = fields
            return new(elem_bytes, tm, tn, v, pt, pad, layout, raster, cache, conjugate, persistent)
    return None


# (elem_bytes, vec) -> (tile_m, tile_n, vec, per_thread, pad, layout, raster, cache, persistent),
# widest first: the best of dev/sweep.py on an H100 (docs/perf-notes.md).
_DEFAULTS: dict[tuple[int, int], tuple[Any, ...]] = {
    (1, 8): (128, 256, 8, 2, 1, "pad", "col", "default", 0),
    (1, 4): (64, 64, 4, 2, 0, "swizzle", "row", "default", 0),
    (1, 1): (32, 32, 1, 16, 1, "pad", "col", "default", 8),
    (2, 4): (128, 128, 4, 4, 0, "swizzle", "row", "default", 0),
    (2, 2): (64, 64, 2, 4, 0, "swizzle", "row", "default", 0),
    (2, 1): (64, 64, 1, 16, 1, "pad", "col", "default", 0),
    (4, 2): (64, 128, 2, 4, 0, "swizzle", "row", "default", 0),
    (4, 1): (64, 64, 1, 16, 1, "pad", "col", "default", 0),
    (8, 1): (32, 32, 1, 4, 1, "pad", "row", "default", 0),
    (16, 1): (32, 32, 1, 2, 0, "swizzle", "row", "default", 0),
}


FEW_COLS_MAX = 32  # a call with at most this many columns (and FEW_COLS_RATIO x as many rows)
FEW_COLS_RATIO = 8  # races the narrow tiled tile of `few_cols_default` at its first call


def few_cols_default(
    new: New, elem_bytes: int, m: int, n: int, vec: int, conjugate: bool = False
) -> Any | None:
    """A tiled config for a tall call of few columns (4- to 16-byte elements): tiles of 16
    columns (32 past 16), so few of a block's threads idle past the last column, 128 rows
    (64 of 8- and 16-byte elements) of the class's widest words, 8 rows a thread, streaming
    stores. Why: the flat kernel (lookup's skinny default) wastes most of its 16-column tile
    on 4 columns, and nothing else in a first call's portfolio was near the whole space's
    best there (H200: float32 2266934x4 was served the flat kernel at 52.9% of
    copy; the space's best, this tile with registers capped at 16 blocks an SM, which spills
    24 bytes on sm_90, reached 85.5); the tuned H200 classes of 20 and 32 columns all hold
    tiled tiles of 16 or 32 columns. None where it does not apply: more than FEW_COLS_MAX
    columns, fewer than FEW_COLS_RATIO x as many rows, 1- and 2-byte elements (the tall
    byte-permute kernels' calls)."""
    if elem_bytes < 4 or n > FEW_COLS_MAX or m < FEW_COLS_RATIO * n:
        return None
    tn = 16 if n <= 16 else 32
    tm = 128 if elem_bytes == 4 else 64
    v = max(w for w in VEC_SIZES if w <= vec and w * elem_bytes <= 16)  # at most 16 <= tn
    for pt in (8, 4, 2, 1):  # fewer where the micro-blocks are shorter
        try:
            cfg = new(elem_bytes, tm, tn, v, pt, 1, "pad", "col", "stream", conjugate)
        except ConfigError:
            continue
        # registers capped only where ptxas keeps everything in registers (sm_80 and sm_90):
        # words of one element at the most blocks an SM runs (16-byte ones one step fewer);
        # wider words uncapped (8 rows of them take 118-186 registers, and every cap spilled).
        # A first call's refinement steps to the caps (`neighbours`)
        steps = occupancy_steps(cfg.threads) if v == 1 else ()
        if not steps:
            return cfg
        return cfg.replace(min_blocks=steps[0] if elem_bytes == 16 else steps[-1])
    return None

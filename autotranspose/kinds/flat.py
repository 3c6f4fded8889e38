"""Flat kernels (flat=True, templates/flat/): for skinny matrices, one tile spans the
whole short side (`tile_n` at most) and `tile_m` elements of the long one; the contiguous side
moves in aligned 32-bit words. (flat=True with prmt=True is a byte-permute kind: prmt.py.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..errors import ConfigError
from .base import (
    CACHE_HINTS,
    FLAT_LONG,
    NEWEST,
    PER_THREAD,
    TILE_SIZES,
    WARP,
    WORD_TYPES,
    Config,
    Kind,
    Launchable,
    New,
    Search,
    SpaceCall,
    fixed_field_errors,
)

FLAT_MAX_THREADS = 512
FLAT_SHORT_SIDE = 64  # untuned calls with a side this short or shorter get a flat kernel
FLAT_WORD = 4  # a flat kernel moves the contiguous side in aligned 32-bit words


def _threads(c: Config) -> int:
    """A flat kernel's threads: each moves `per_thread` words of a full tile in one pass."""
    words = -(-c.tile_m * c.tile_n * c.elem_bytes // FLAT_WORD)
    return -(-words // c.per_thread // WARP) * WARP


def _errors(c: Config) -> Iterator[str]:
    if c.min_blocks:
        yield "min_blocks is a tiled, staged or staged register-transpose kernel's (flat and byte-permute kernels set their own): set min_blocks=0"
    yield from fixed_field_errors(
        c,
        "flat",
        {"vec": 1, "pad": 0, "layout": "pad", "raster": "row", "realign": False},
        "a flat kernel has no vectors, padding or raster of its own",
    )
    threads = _threads(c)
    if threads > FLAT_MAX_THREADS:  # 1024 threads cap registers at 64 and ptxas spilled
        yield f"flat tile {c.tile_m}x{c.tile_n} with per_thread={c.per_thread} needs {threads} threads; at most {FLAT_MAX_THREADS}: raise per_thread"
    if c.conjugate and c.elem_bytes not in (8, 16):
        yield "conjugate=True needs complex64 or complex128 elements (elem_bytes 8 or 16)"


def flat_tiles(c: Config, m: int, n: int) -> tuple[int, int]:
    """A flat tile spans the short side: tiles along the long one (rows or columns)."""
    return (-(-m // c.tile_m), 1) if n <= c.tile_n else (1, -(-n // c.tile_m))


def _params(c: Config) -> dict[str, object]:
    """What templates/flat/ needs about one flat config."""
    wb = max(FLAT_WORD, c.elem_bytes)
    return {
        "tl": c.tile_m,
        "tw": c.tile_n,
        "unroll": c.per_thread,
        "words": c.smem_bytes // 4,
        # the element-wise side moves aligned units: 32-bit words of 1- and 2-byte elements
        # (a row can start mid-word: one unit more per row), or the element itself
        "wb": wb,
        "epu": wb // c.elem_bytes,
        "units": c.tile_m * c.elem_bytes // wb,  # whole units per row segment of a tile
        "unit_t": WORD_TYPES[wb],
        # Blocks per SM the registers must allow: as many as threads (2048 per SM), shared
        # memory (160 KiB, the A100's) and the registers a thread needs (its `per_thread` words
        # in flight and about 24 more, rounded up to 32 or 64) allow. Without it nvcc took 52-99
        # registers where 32 do, and one 512-thread block per SM kept a quarter of the bytes in
        # flight (H200: 80% -> 32% of copy).
        "min_blocks": max(
            1,
            min(
                65536 // (c.threads * (32 if c.per_thread <= 8 else 64)),
                160 * 1024 // (c.smem_bytes + 1024),
                32,
            ),
        ),
    }


def flat_space(launchable: Launchable, call: SpaceCall) -> Iterator[Any]:
    """The flat configs (skinny matrices) whose tile spans a short side of `short_side`."""
    if call.short_side is None:
        return
    for tw in TILE_SIZES:
        if tw < call.short_side:
            continue
        for tl in FLAT_LONG:
            for pt in PER_THREAD:
                for cache in CACHE_HINTS:
                    yield from launchable(
                        call.limits,
                        call.elem_bytes,
                        tl,
                        tw,
                        1,
                        pt,
                        0,
                        "pad",
                        "row",
                        cache,
                        call.conjugate,
                        kind="flat",
                    )


class Flat(Kind):
    name = "flat"
    mark = "flat"
    codes = (("flat", "flat"),)
    template = "flat/flat.cu.j2"
    capped = False  # it sets its own blocks per SM (`_params`)

    def errors(self, c: Config) -> Iterator[str]:
        return _errors(c)

    def derive(self, c: Config) -> dict[str, int]:
        words = -(-(c.tile_m * c.tile_n * c.elem_bytes + FLAT_WORD - 1) // FLAT_WORD)
        return {"threads": _threads(c), "smem": -(-words // WARP) * WARP * FLAT_WORD}

    def params(self, c: Config) -> dict[str, object]:
        return _params(c)

    def searches(self) -> tuple[Search, ...]:
        return ((40, flat_space),)

    def spans_short_side(self, c: Config) -> bool:
        return True

    def tile_m_values(self, c: Config) -> tuple[int, ...]:
        return FLAT_LONG

    def tiles(self, c: Config, m: int, n: int) -> tuple[int, int]:
        if not self.applies(c, m, n):
            raise ConfigError(
                f"flat config {c.key} needs a side of at most {c.tile_n} elements; "
                f"the matrix is {m}x{n}: use a tiled config"
            )
        return flat_tiles(c, m, n)

    def applies(self, c: Config, m: int, n: int) -> bool:
        return min(m, n) <= c.tile_n

    def step_values(
        self, c: Config, name: str, values: tuple[int, ...], pair: bool
    ) -> tuple[int, ...]:
        return FLAT_LONG if name == "tile_m" else values


KIND = Flat()


def flat_default(new: New, elem_bytes: int, short_side: int, conjugate: bool = False) -> Any | None:
    """The untuned flat config for a skinny call: the narrowest tile that spans the short
    side, about 16 KiB of it, 8 words in flight per thread; None if no flat tile fits."""
    tw = next((t for t in TILE_SIZES if t >= short_side), None)
    if tw is None:
        return None
    for tl in sorted(FLAT_LONG, key=lambda tl: abs(tl * tw * elem_bytes - 16384)):
        for pt in (8, 16, 4):
            try:
                cfg = new(
                    elem_bytes, tl, tw, 1, pt, 0, "pad", "row", "default", conjugate, kind="flat"
                )
            except ConfigError:
                continue
            if cfg.fits(NEWEST):
                return cfg
    return None

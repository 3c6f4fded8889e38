"""The in-place kind (`transpose_()`): a program of pass kernels, its own typed parameters.

An in-place transpose runs a few passes (plans/inplace.py), each its own kernel
(templates/inplace/, rendered by kernels/inplace.py); `InplaceParams` holds what those
kernels are rendered and launched with. As a `Kind` it is a config
(`KernelConfig(e, kind="inplace", params=...)`, every shared field at its default) so that
the tuner searches it (`space`), the store keeps its results under its problem (`problem`:
squares apart from rectangles, whose passes differ) and lookup serves them. A config is a
program, not one kernel: codegen does not render it alone (`single_kernel`). Pure: no CUDA,
no config.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from ..errors import ConfigError
from .base import STATIC_SHARED_MAX, WARP, Config, Kind, New, fixed_field_errors

NAME = "inplace"
# SWAP's tile sides. 128 is for 1-byte elements (two padded tiles, 33 KB): a tile row of 64
# one-byte elements is half a 128-byte line, which its neighbour tile's block reads apart
TILES: tuple[int, ...] = (16, 32, 64, 128)
THREADS: tuple[int, ...] = (128, 256, 512)
UNROLLS: tuple[int, ...] = (1, 2, 4, 8)
LANE_BYTES: tuple[int, ...] = (4, 8, 16)
BLOCKS_PER_SM: tuple[int, ...] = (2, 4, 8, 16)
_KEY = re.compile(r"t(\d+)\.th(\d+)\.u(\d+)\.lb(\d+)\.b(\d+)")


@dataclass(frozen=True)
class InplaceParams:
    """What the in-place kernels are rendered and launched with.

    tile: SWAP's tile side (two padded tiles in static shared memory, `swap_smem`);
    threads: every pass's block; unroll: rows PERMUTE reads ahead along a cycle (loads in
    flight per lane); lane_bytes: bytes a lane moves per PERMUTE row step (a warp's segment
    is 32 lanes of them); blocks_per_sm: the grid of the grid-stride passes, per SM."""

    tile: int = 32
    threads: int = 256
    unroll: int = 4
    lane_bytes: int = 16
    blocks_per_sm: int = 8

    def __post_init__(self) -> None:
        for name, allowed in (
            ("tile", TILES),
            ("threads", THREADS),
            ("unroll", UNROLLS),
            ("lane_bytes", LANE_BYTES),
            ("blocks_per_sm", BLOCKS_PER_SM),
        ):
            v = getattr(self, name)
            if type(v) is not int or v not in allowed:
                raise ConfigError(
                    f"InplaceParams.{name} must be one of {allowed}, got {v!r}; use "
                    f"InplaceParams({name}={allowed[0]}) or leave it out for the default"
                )

    @property
    def key(self) -> str:
        """A stable string naming these parameters (kernel names, reports); `parse` reads
        it back."""
        return (
            f"t{self.tile}.th{self.threads}.u{self.unroll}.lb{self.lane_bytes}"
            f".b{self.blocks_per_sm}"
        )

    def swap_smem(self, elem_bytes: int) -> int:
        """SWAP's static shared memory: two padded tiles."""
        return 2 * self.tile * (self.tile + swap_pad(elem_bytes)) * elem_bytes

    def fits(self, elem_bytes: int) -> bool:
        """Whether SWAP's tiles fit static shared memory for `elem_bytes`-byte elements."""
        return self.swap_smem(elem_bytes) <= STATIC_SHARED_MAX

    def per_lane(self, elem_bytes: int) -> int:
        """Elements a lane moves per PERMUTE row step."""
        return max(1, self.lane_bytes // elem_bytes)

    @property
    def warps(self) -> int:
        return self.threads // WARP


def swap_pad(elem_bytes: int) -> int:
    """Elements a SWAP tile's shared row is padded by: rows of an odd number of 4-byte words
    (tile + 4 one-byte elements, tile + 2 two-byte, tile + 1 otherwise), so that the 32 lanes
    reading a column of 1-4-byte elements hit 32 banks (8- and 16-byte accesses are served a
    half or a quarter warp at a time, which the same pitch keeps apart)."""
    return max(1, 4 // elem_bytes)


def parse(key: str) -> InplaceParams:
    """The parameters a `key` names (ConfigError for anything else)."""
    found = _KEY.fullmatch(key) if isinstance(key, str) else None
    if found is None:
        raise ConfigError(
            f"{key!r} is not an in-place parameter key; keys read like "
            f"{InplaceParams().key!r} (InplaceParams.key)"
        )
    t, th, u, lb, b = (int(g) for g in found.groups())
    return InplaceParams(t, th, u, lb, b)


def default(elem_bytes: int, square: bool = False) -> InplaceParams:
    """The parameters served for `elem_bytes`-byte elements: 64-element tiles for 1- and
    2-byte elements (a 32-element row of them is under a 128-byte line), 32 otherwise; 4
    bytes a lane for them in PERMUTE (16 one-byte elements a lane and 4 rows ahead took 163
    registers: one block an SM). A square of 1-byte elements (SWAP alone) takes tiles of 128
    (a tile row a whole line) and blocks of 512: on the H200 80% of a copy at 8192 and 16384
    square, against 58% and 47% with the 64-tiles and 256 threads the rectangles keep."""
    small = elem_bytes <= 2
    if square and elem_bytes == 1:
        return InplaceParams(tile=128, threads=512, lane_bytes=4)
    return InplaceParams(tile=64 if small else 32, lane_bytes=4 if small else 16)


DEFAULT = InplaceParams()

# A first call's portfolio beside the guess (`race_candidates`): SWAP's tile and block for a
# square (what moved squares on the H200: 1-byte odd squares ran tile 128 in blocks of 256 at
# 30-34% of a copy where 512 ran 25-29; the float32 8192 square tiles of 64 in blocks of 512,
# 92% against 82), a rectangle's block and grid (its tuned classes' winners: 128 threads, or
# 16 blocks an SM of them)
_SQUARE_RACE: dict[bool, tuple[tuple[int, int], ...]] = {  # by 1-byte elements: (tile, threads)
    True: ((128, 512), (128, 256), (64, 256), (64, 512)),
    False: ((32, 256), (64, 256), (64, 512), (32, 128), (32, 512)),
}
_RECTANGLE_RACE: tuple[tuple[int, int], ...] = ((256, 8), (128, 8), (128, 16), (512, 4))


def race_candidates(elem_bytes: int, square: bool, guess: InplaceParams) -> list[InplaceParams]:
    """What the first call of an untuned class times (`dispatch.inplace.choose`): the guess
    first, then a few parameters that changed the kind's speed where they were tuned, each
    at the guess's other fields, none twice, every one fitting `elem_bytes`."""
    if square:
        pairs = _SQUARE_RACE[elem_bytes == 1]
        more = [replace(guess, tile=t, threads=th) for t, th in pairs]
    else:
        more = [replace(guess, threads=th, blocks_per_sm=b) for th, b in _RECTANGLE_RACE]
    found = [guess]
    for p in more:
        if p not in found and p.fits(elem_bytes):
            found.append(p)
    return found


# How tuned in-place results are keyed beside the transposes' (problem "") and the casts':
# a square runs one pass (SWAP: tile and threads matter), a rectangle three or more (threads,
# unroll, lane bytes and blocks per SM), so their results never serve each other.
RECTANGLE = "inplace"
SQUARE = "inplace:square"
PROBLEMS: tuple[str, ...] = (RECTANGLE, SQUARE)


def problem(square: bool) -> str:
    """The store's key of in-place results: "inplace:square" or "inplace"."""
    return SQUARE if square else RECTANGLE


def parse_problem(text: object) -> bool | None:
    """Whether a stored problem is an in-place square's (True) or rectangle's (False); None
    for any other problem (a transpose's or a cast's, which `kinds.cast` reads)."""
    return {SQUARE: True, RECTANGLE: False}.get(text) if isinstance(text, str) else None


# The shared fields an in-place config holds: their defaults (the passes take none of them)
_SHARED = {
    "tile_m": 32,
    "tile_n": 32,
    "vec": 1,
    "per_thread": 4,
    "pad": 1,
    "layout": "pad",
    "raster": "row",
    "cache": "default",
    "persistent": 0,
    "realign": False,
    "min_blocks": 0,
}


# The tuner's steps from a config (`param_steps`), most decisive first: every pass's block and
# grid, then PERMUTE's rows ahead and bytes a lane, then SWAP's tile
_STEPS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("threads", THREADS),
    ("blocks_per_sm", BLOCKS_PER_SM),
    ("unroll", UNROLLS),
    ("lane_bytes", LANE_BYTES),
    ("tile", TILES),
)


class InplaceKind(Kind):
    name = NAME
    Params = InplaceParams
    mark = NAME
    template = "inplace/inplace.cu.j2"  # one pass's kernel; kernels/inplace.py renders them
    persistent = False
    capped = False
    single_kernel = False

    # written as `inplace="<key>"` (InplaceParams.key), the key's part `_ip<key>` (dots as _)
    def flag_defaults(self) -> dict[str, Any]:
        return {NAME: ""}

    def written(self, params: Any) -> dict[str, Any]:
        return {NAME: params.key}

    def reads(self, flags: Mapping[str, Any]) -> Any | None:
        key = flags.get(NAME)
        if not isinstance(key, str) or not key or set(flags) != {NAME}:
            return None
        return parse(key)  # a ConfigError for a key no InplaceParams has

    def key_part(self, params: Any) -> str:
        return "_ip" + params.key.replace(".", "_")  # a C identifier's characters

    def spelled(self) -> str:
        return f"inplace='<key>' (InplaceParams.key, e.g. {DEFAULT.key!r}) alone"

    def errors(self, c: Config) -> Iterator[str]:
        yield from fixed_field_errors(
            c, NAME, _SHARED, "an in-place program's passes take only its InplaceParams"
        )
        if c.conjugate and c.elem_bytes not in (8, 16):
            yield "conjugate=True is for 8- and 16-byte complex elements"
        if not c.params.fits(c.elem_bytes):
            yield (
                f"inplace: SWAP tiles of {c.params.tile} {c.elem_bytes}-byte elements need "
                f"{c.params.swap_smem(c.elem_bytes)} bytes of static shared memory (at most "
                f"{STATIC_SHARED_MAX}); use tile={TILES[0]}"
            )

    def derive(self, c: Config) -> dict[str, int]:
        return {"threads": c.params.threads, "smem": c.params.swap_smem(c.elem_bytes)}

    def params(self, c: Config) -> dict[str, object]:
        raise TypeError(
            "an in-place config is a program of pass kernels: kernels/inplace.py renders "
            "them (render_inplace), codegen does not"
        )

    def param_steps(self, params: Any) -> tuple[Any, ...]:
        found = []
        for name, values in _STEPS:
            i = values.index(getattr(params, name))
            found += [
                replace(params, **{name: values[j]}) for j in (i - 1, i + 1) if 0 <= j < len(values)
            ]
        return tuple(found)

    def tile_m_values(self, c: Config) -> tuple[int, ...]:
        return (32,)

    def tile_n_values(self, c: Config) -> tuple[int, ...]:
        return (32,)


KIND = InplaceKind()


def config(new: New, elem_bytes: int, params: InplaceParams, conjugate: bool = False) -> Any:
    """The config of `params` for `elem_bytes`-byte elements (built by `new`, KernelConfig)."""
    return new(elem_bytes, conjugate=conjugate, kind=NAME, params=params)


def space(new: New, elem_bytes: int, square: bool) -> Iterator[Any]:
    """What `tune --inplace` searches for `elem_bytes`-byte elements: a square's SWAP tiles
    and blocks (the other parameters do not reach its one pass), a rectangle's every
    parameter but the tile (which only SWAP reads), each at the kind's default where it does
    not matter, so that no two configs run the same kernels."""
    base = default(elem_bytes, square)
    seen: set[InplaceParams] = set()
    for threads in THREADS:
        if square:
            variants = (
                InplaceParams(t, threads, base.unroll, base.lane_bytes, base.blocks_per_sm)
                for t in TILES
            )
        else:
            variants = (
                InplaceParams(base.tile, threads, u, lb, b)
                for u in UNROLLS
                for lb in LANE_BYTES
                for b in BLOCKS_PER_SM
                if b * threads <= 2048
            )
        for p in variants:
            if p not in seen and p.fits(elem_bytes):
                seen.add(p)
                yield config(new, elem_bytes, p)


def field_names() -> tuple[str, ...]:
    """InplaceParams' fields, in order (the tuner's parameters)."""
    return tuple(f.name for f in fields(InplaceParams))

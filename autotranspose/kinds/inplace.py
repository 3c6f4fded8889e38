"""The in-place kind (`transpose_()`): its own typed parameters, not KernelConfig's fields.

An in-place transpose runs a few passes (plans/inplace.py), each its own kernel
(templates/inplace/); `InplaceParams` holds what those kernels are rendered and launched
with. Pure: no CUDA, no config. The tuner does not search these yet: `DEFAULT` is served.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError
from .base import STATIC_SHARED_MAX, WARP

NAME = "inplace"
TILES: tuple[int, ...] = (16, 32, 64)
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


def default(elem_bytes: int) -> InplaceParams:
    """The parameters served for `elem_bytes`-byte elements: 64-element tiles for 1- and
    2-byte elements (a 32-element row of them is under a 128-byte line), 32 otherwise; 4
    bytes a lane for them in PERMUTE (16 one-byte elements a lane and 4 rows ahead took 163
    registers: one block an SM)."""
    small = elem_bytes <= 2
    return InplaceParams(tile=64 if small else 32, lane_bytes=4 if small else 16)


DEFAULT = InplaceParams()

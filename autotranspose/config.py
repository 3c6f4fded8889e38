"""KernelConfig (one transpose kernel variant), its validation, and the space the tuner searches.

A kernel transposes a `tile_m` x `tile_n` tile of the input through shared memory. Each thread
reads `vec` x `vec` micro-blocks (`vec` consecutive elements from each of `vec` rows, one
vector load per row), transposes the micro-block in registers, and stores it to shared memory;
after a barrier it reads transposed micro-blocks back and writes `vec`-wide vectors to the
output rows. Narrow types thus move in wide words: int8 with `vec=16` loads and stores 16 bytes
per thread per row.

Shared memory is split into planes of `chunk_bytes`-wide entries (the widest shared-memory
access, at most 16 bytes), so both phases access it at full width; bank conflicts are avoided
either by padding each row by `pad` chunks or by an XOR swizzle of the chunk column.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from numbers import Integral
from types import MappingProxyType
from typing import Any

from .dtypes import ELEMENT_SIZES, element_type
from .errors import ConfigError

TILE_SIZES: tuple[int, ...] = (16, 32, 64, 128, 256)
FLAT_LONG: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048)  # a flat tile's long side
FLAT_MAX_THREADS = 512
FLAT_SHORT_SIDE = 64  # untuned calls with a side this short or shorter get a flat kernel
VEC_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16)
PER_THREAD: tuple[int, ...] = (1, 2, 4, 8, 16)
PERSISTENT: tuple[int, ...] = (0, 1, 2, 4, 8)
# `__launch_bounds__` blocks per SM a tiled or staged kernel asks for (`min_blocks`, 0 or
# 2..MAX_BLOCKS_PER_SM). 0 (the default) says one block, which only stops ptxas capping
# registers: it took 80 for the staged 4-byte default, 3 blocks of 256 threads an SM, where
# 4 blocks (64 registers, no spill) ran float32 4099x6007 at 88.0% of copy against 82.3
# (H200, docs/perf-notes.md, "Register caps").
MAX_BLOCKS_PER_SM = 32
MAX_THREADS_PER_SM = 2048
REGISTERS_PER_SM = 65536
# the register caps the search space and a neighbour step try, as blocks per SM for a block's
# threads (`occupancy_steps`). Capped variants are searched and measured like any config, and
# some spill (ptxas: the staged defaults under 64, 64-thread tiles of 16-byte elements under
# 80); a cap of 40 spilled in most configs of the H200 sweep (dev/occupancy_sweep.py) and won none.
OCCUPANCY_CAPS: tuple[int, ...] = (80, 64)
PADS: tuple[int, ...] = (0, 1, 2, 3, 4)
LAYOUTS: tuple[str, ...] = ("pad", "swizzle")
RASTERS: tuple[str, ...] = ("row", "col")
CACHE_HINTS: tuple[str, ...] = ("default", "stream")
MAX_MICROBLOCK_BYTES = 256  # a micro-block lives in registers: 64 words at most
MAX_THREAD_BYTES = 256  # all micro-blocks of a thread are loaded before any is stored
# The estimate (`KernelConfig.registers`) is a lower bound: nvcc 13 for sm_90 used up to twice
# as many (realigning kernels: calibrated separately, see `registers`). Keeping twice the
# estimate under ptxas's 255 and the 64K register file means every config in the space
# compiles without spills and launches (tests/test_compile.py checks).
MAX_REGISTERS = 128
REGISTER_FILE = 65536
WARP = 32

# Bumped whenever the meaning of a field changes: part of the version stored with results.
CONFIG_SCHEMA = 1


@dataclass(frozen=True)
class DeviceLimits:
    """The per-block limits a config must fit: from the device, or the newest architecture."""

    max_threads_per_block: int = 1024
    max_shared_per_block: int = 48 * 1024  # static __shared__ arrays stop at 48 KiB
    name: str = "any"
    compute_capability: tuple[int, int] = (9, 0)


NEWEST = DeviceLimits()


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


@dataclass(frozen=True)
class KernelConfig:
    """One transpose kernel variant. Validated on construction; immutable and hashable."""

    elem_bytes: int
    tile_m: int = 32
    tile_n: int = 32
    vec: int = 1
    per_thread: int = 4
    pad: int = 1
    layout: str = "pad"
    raster: str = "row"
    cache: str = "default"
    conjugate: bool = False
    persistent: int = 0
    realign: bool = False
    flat: bool = False
    staged: bool = False
    prmt: bool = False
    wide: bool = False  # a flat byte-permute kernel for few long rows (else for short rows)
    min_blocks: int = 0  # blocks per SM the registers must allow (0: one, ptxas uncapped)
    ordered: bool = False  # wide: the transposed buffer holds the output bytes in order
    direct: bool = False  # one element an access, tile indices from a 2-D grid (the seed's way)
    _derived: dict[str, int] = field(default=None, init=False, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        errors = list(_field_errors(self))
        if errors:
            raise ConfigError("invalid KernelConfig: " + "; ".join(errors))
        object.__setattr__(self, "_derived", _derive(self))

    # --- derived shape of the kernel --------------------------------------------------------
    @property
    def word_bytes(self) -> int:
        """Bytes per vector load/store along a row (`vec` elements)."""
        return self.vec * self.elem_bytes

    @property
    def block_bytes(self) -> int:
        """Bytes of one vec x vec micro-block."""
        return self.vec * self.word_bytes

    @property
    def chunk_bytes(self) -> int:
        """Width of one shared-memory access: the micro-block, at most 16 bytes."""
        return min(self.block_bytes, 16)

    @property
    def planes(self) -> int:
        """Shared-memory planes: chunks per micro-block."""
        return self.block_bytes // self.chunk_bytes

    @property
    def threads(self) -> int:
        """Threads per block (a 1-D block)."""
        return self._derived["threads"]

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.threads, 1, 1)

    @property
    def smem_pitch(self) -> int:
        """Chunks per shared-memory row (one row holds the micro-blocks of `vec` output rows)."""
        return self.tile_m // self.vec + (self.pad if self.layout == "pad" else 0)

    @property
    def smem_bytes(self) -> int:
        """Static shared memory per block, exactly as the compiler reports it."""
        return self._derived["smem"]

    @property
    def elements_per_thread(self) -> int:
        return self.per_thread * self.vec * self.vec

    @property
    def key(self) -> str:
        """A stable identifier, also the suffix of the kernel's `extern "C"` name."""
        k = (
            f"s{self.elem_bytes}_m{self.tile_m}_n{self.tile_n}_v{self.vec}_t{self.per_thread}"
            f"_{self.layout}{self.pad if self.layout == 'pad' else ''}_{self.raster}_{self.cache}"
        )
        k += "_ra" if self.realign else ""
        k += "_flat" if self.flat else ""
        k += "_sg" if self.staged else ""
        k += "_pm" if self.prmt else ""
        k += "_wd" if self.wide else ""
        k += "_or" if self.ordered else ""
        k += "_dr" if self.direct else ""
        k += f"_b{self.min_blocks}" if self.min_blocks else ""
        k += f"_p{self.persistent}" if self.persistent else ""
        return k + ("_conj" if self.conjugate else "")

    @property
    def kernel_name(self) -> str:
        """The `extern "C"` name: the key without launch-only fields (`persistent`), so
        configs that differ only in how they are launched share one compiled kernel."""
        return f"autotranspose_{self.replace(persistent=0).key}"

    @property
    def registers(self) -> int:
        """Estimated registers per thread: loaded micro-blocks plus their 64-bit row
        addresses, which ptxas keeps live together. A realigning kernel also holds the second
        word of every row and the funnel-shifted result: ptxas (nvcc 13, sm_80) used up to
        three times the extra registers, so its estimate is scaled by that."""
        base = 32 + self.per_thread * max(self.block_bytes, 4) // 4 + 2 * self.per_thread * self.vec
        return 48 + 3 * (base - 32) if self.realign else base

    def tiles(self, m: int, n: int) -> tuple[int, int]:
        """Tiles along the input's rows and columns for an m x n matrix. A flat kernel's tile
        spans the whole short side (`tile_n` at most) and `tile_m` elements of the long one."""
        if self.flat:
            if not self.applies(m, n):
                raise ConfigError(
                    f"flat config {self.key} needs a side of at most {self.tile_n} elements; "
                    f"the matrix is {m}x{n}: use a tiled config (flat=False)"
                )
            if self.prmt:  # tall: output windows start up to 16 bytes before a tile; wide: none
                if self.wide:
                    return (1, -(-n // self.tile_n))
                return (-(-(m + prmt_halo(self) - 1) // self.tile_m), 1)
            return (-(-m // self.tile_m), 1) if n <= self.tile_n else (1, -(-n // self.tile_m))
        if self.prmt:  # output windows start up to 16 bytes before a tile: staged likewise
            return (-(-(m + prmt_halo(self) - 1) // self.tile_m), -(-n // self.tile_n))
        if self.staged:  # output windows start up to vec - 1 rows before a tile: one more
            return (-(-(m + self.vec - 1) // self.tile_m), -(-n // self.tile_n))
        return (-(-m // self.tile_m), -(-n // self.tile_n))

    @property
    def any_offset(self) -> bool:
        """Whether the kernel runs on rows at any offset (realigning, staged and byte-permute
        kernels use their words whatever the call's alignment); otherwise `vec` must fit the
        call."""
        return self.realign or self.staged or self.prmt

    def applies(self, m: int, n: int) -> bool:
        """Whether the kernel handles an m x n matrix (tiled kernels handle any; a flat
        byte-permute kernel rows of at most `tile_n` elements, or at most `tile_m` rows whose
        transposes are at least 4 bytes long, of any length when `ordered`)."""
        if self.flat and self.prmt:
            if self.wide:  # an ordered buffer takes rows of any length; a run store 4 bytes
                return m <= self.tile_m and (self.ordered or m * self.elem_bytes >= WIDE_MIN_ROW_BYTES)
            return n <= self.tile_n
        return not self.flat or min(m, n) <= self.tile_n

    def grid(self, m: int, n: int, batch: int = 1, multiprocessors: int = 132) -> tuple[int, int, int]:
        """Launch grid: one block per tile (batches folded in), or with `persistent` = k,
        k blocks per multiprocessor that loop over the tiles. A direct kernel's grid has the
        raster's fast tiles on x, the others on y and the batch on z (each capped at what a
        launch allows: the kernel loops over the rest)."""
        tm, tn = self.tiles(m, n)
        if self.direct:
            fast, slow = (tn, tm) if self.raster == "row" else (tm, tn)
            return (fast, min(slow, MAX_GRID_YZ), min(batch, MAX_GRID_YZ))
        total = tm * tn * batch
        if self.persistent:
            total = min(total, self.persistent * multiprocessors)
        return (total, 1, 1)

    def fits(self, limits: DeviceLimits) -> bool:
        """Whether a device with these limits can run the kernel."""
        return (
            self.threads <= limits.max_threads_per_block
            and self.smem_bytes <= limits.max_shared_per_block
        )

    # --- (de)serialisation: a config read from a database is untrusted input ----------------
    def to_dict(self) -> dict[str, Any]:
        # fields that came later (OPTIONAL_FIELDS) are left out at their default, so every
        # other config's stored form (and what earlier versions read) is what it was
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.init and OPTIONAL_FIELDS.get(f.name, _ABSENT) != getattr(self, f.name)}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KernelConfig:
        """Build a config from untrusted data: unknown keys and wrong types are rejected."""
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"a kernel config must be a mapping of fields, got {type(data).__name__}"
            )
        known = {f.name: f for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(map(str, data)) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown KernelConfig field(s) {unknown}; known fields are {sorted(known)}"
            )
        kwargs: dict[str, Any] = {}
        for name, value in data.items():
            want = bool if name in _BOOL_FIELDS else (str if name in _STR_FIELDS else int)
            if type(value) is not want:  # bool is an int subclass: compare types exactly
                raise ConfigError(
                    f"KernelConfig field {name!r} must be {want.__name__}, got "
                    f"{type(value).__name__} {value!r:.60}"
                )
            kwargs[name] = value
        if "elem_bytes" not in kwargs:
            raise ConfigError("KernelConfig needs 'elem_bytes' (1, 2, 4, 8 or 16)")
        return cls(**kwargs)

    def replace(self, **changes: Any) -> KernelConfig:
        return dataclasses.replace(self, **changes)

    def __str__(self) -> str:
        return self.key


_STR_FIELDS = frozenset({"layout", "raster", "cache"})
# Fields added after configs were first stored, with the default `to_dict` leaves out: a
# reader that needs every field (the tuner's search space) fills them back in from here.
OPTIONAL_FIELDS: Mapping[str, Any] = MappingProxyType(
    {"wide": False, "min_blocks": 0, "ordered": False, "direct": False}
)
_ABSENT = object()
_BOOL_FIELDS = frozenset({"conjugate", "realign", "flat", "staged", "prmt", "wide", "ordered", "direct"})


def _field_errors(c: KernelConfig) -> Iterator[str]:
    """Every reason a config is invalid, each naming the field and what is allowed."""
    ints = ("elem_bytes", "tile_m", "tile_n", "vec", "per_thread", "pad", "persistent", "min_blocks")
    for name in ints:
        v = getattr(c, name)
        if type(v) is not int:
            yield f"{name} must be an int, got {type(v).__name__}"
    for name, allowed in (("layout", LAYOUTS), ("raster", RASTERS), ("cache", CACHE_HINTS)):
        if getattr(c, name) not in allowed:
            yield f"{name}={getattr(c, name)!r} is not one of {list(allowed)}"
    for name in _BOOL_FIELDS:
        if type(getattr(c, name)) is not bool:
            yield f"{name} must be a bool"
    if any(type(getattr(c, n)) is not bool for n in ("flat", "staged", "prmt", "direct")):
        return
    if any(type(getattr(c, n)) is not int for n in ints):
        return
    checks = (
        (c.elem_bytes in ELEMENT_SIZES, f"elem_bytes={c.elem_bytes} must be one of {list(ELEMENT_SIZES)}"),
        (c.tile_m in _tile_m_values(c), f"tile_m={c.tile_m} must be one of {list(_tile_m_values(c))}"),
        (c.tile_n in _tile_n_values(c), f"tile_n={c.tile_n} must be one of {list(_tile_n_values(c))}"),
        (c.vec in VEC_SIZES, f"vec={c.vec} must be one of {list(VEC_SIZES)}"),
        (c.per_thread in PER_THREAD, f"per_thread={c.per_thread} must be one of {list(PER_THREAD)}"),
        (c.pad in PADS, f"pad={c.pad} must be one of {list(PADS)}"),
        (c.persistent in PERSISTENT, f"persistent={c.persistent} must be one of {list(PERSISTENT)}"),
        (c.min_blocks == 0 or 2 <= c.min_blocks <= MAX_BLOCKS_PER_SM,
         f"min_blocks={c.min_blocks} must be 0 (one block per SM, registers uncapped) or 2 to {MAX_BLOCKS_PER_SM}"),
    )  # fmt: skip
    bad = [msg for ok, msg in checks if not ok]
    if c.min_blocks and (c.flat or c.prmt):
        bad.append("min_blocks is a tiled or staged kernel's (flat and byte-permute kernels set their own): set min_blocks=0")
    if c.wide and not (c.flat and c.prmt):
        bad.append("wide=True is a flat byte-permute kernel's (few long rows): set flat=True and prmt=True, or wide=False")
    if c.ordered and not c.wide:
        bad.append("ordered=True is a wide kernel's output buffer (few long rows): set flat=True, prmt=True and wide=True, or ordered=False")
    yield from bad
    if bad:
        return
    if c.direct:
        yield from _direct_errors(c)
        return
    if c.prmt:
        yield from _prmt_errors(c)
        return
    if c.flat:
        yield from _flat_errors(c)
        return
    if c.staged:
        yield from _staged_errors(c)
        return
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
    yield from _min_blocks_errors(c, threads)


def _min_blocks_errors(c: KernelConfig, threads: int) -> Iterator[str]:
    if c.min_blocks * threads > MAX_THREADS_PER_SM:
        yield (
            f"min_blocks={c.min_blocks} blocks of {threads} threads exceed the {MAX_THREADS_PER_SM} "
            f"threads an SM runs; use 0 or 2 to {MAX_THREADS_PER_SM // threads}"
        )


def occupancy_steps(threads: int, caps: tuple[int, ...] = OCCUPANCY_CAPS) -> tuple[int, ...]:
    """The min_blocks values the space holds for blocks of `threads`: those that cap registers
    at each of `caps` (fewest blocks first), at least 2 blocks, at most what an SM runs."""
    most = min(MAX_BLOCKS_PER_SM, MAX_THREADS_PER_SM // threads)
    steps = (min(most, REGISTERS_PER_SM // (threads * cap)) for cap in caps)
    return tuple(sorted({b for b in steps if b >= 2}))


def cap_steps(c: KernelConfig) -> tuple[int, ...]:
    """The register caps (as min_blocks) the space holds for `c`'s kind and threads. A direct
    kernel's caps leave at least half the registers to what it is not loading: its elements
    in flight at half of 32 registers spilled (16-byte elements, per_thread 8, sm_90)."""
    if not c.direct:
        return occupancy_steps(c.threads, OCCUPANCY_CAPS)
    data = c.per_thread * max(c.elem_bytes // 4, 1)  # registers of elements in flight
    steps = occupancy_steps(c.threads, tuple(cap for cap in DIRECT_CAPS if cap >= 2 * data))
    if c.elem_bytes == 16 and c.cache == "stream" and c.raster == "row":
        # ptxas 13 spilled 8 bytes (sm_90) in these where it had exactly twice the elements'
        # registers, 32 (5 of the 2992 capped direct configs)
        steps = tuple(b for b in steps if register_budget(c.threads, b) > 2 * data)
    return steps


def register_budget(threads: int, blocks: int) -> int:
    """The registers a thread gets when `blocks` blocks of `threads` share an SM, as ptxas
    caps them under `__launch_bounds__(threads, blocks)`: the SM's four partitions each hold
    a quarter of the register file and of the warps, allocated 8 registers a thread at a
    time. So 25 blocks of 64 threads get 32, not the 40 that the SM's total suggests."""
    warps = -(-(blocks * threads // WARP) // 4)  # a partition's share, rounded up
    return REGISTERS_PER_SM // 4 // (warps * WARP) // 8 * 8


# Direct kernels (`direct`, templates/direct.cu.j2): the seed documents' strategy with the
# tiled kernel's parameters. One element an access is a wide access only for 4- to 16-byte
# elements, so the space holds them for those; tiles of at most 64 elements a side.
DIRECT_SIZES = (4, 8, 16)
DIRECT_TILES = (16, 32, 64)
# Narrow direct tiles, for calls with a side of at most DIRECT_NARROW[-1] elements (few
# columns of one-element words, interleaves of a few rows): a short side of 2-8 elements
# and a long side of 64-256, so a warp's loads (few columns) or stores (few rows) are one
# contiguous run. A block with fewer threads than a tile side walks that side in steps of
# the block (templates/direct.cu.j2).
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


def _direct_errors(c: KernelConfig) -> Iterator[str]:
    yield from _fixed_field_errors(
        c, "direct", {"vec": 1, "layout": "pad", "realign": False, "flat": False, "staged": False,
                      "prmt": False, "persistent": 0},
        "a direct kernel moves one element an access, through a padded tile, one block a tile")  # fmt: skip
    if c.per_thread > DIRECT_MAX_PER_THREAD:
        yield (f"direct=True: per_thread={c.per_thread} elements in flight a thread; at most "
               f"{DIRECT_MAX_PER_THREAD} (ptxas spilled 16 under the register caps): lower per_thread")  # fmt: skip
    threads = c.tile_m * c.tile_n // c.per_thread
    if threads % WARP or threads > 1024:
        yield (f"direct tile {c.tile_m}x{c.tile_n} with per_thread={c.per_thread} gives {threads} "
               f"threads; a block takes a multiple of {WARP} up to 1024: change per_thread")  # fmt: skip
    if c.conjugate and c.elem_bytes not in (8, 16):
        yield "conjugate=True needs complex64 or complex128 elements (elem_bytes 8 or 16)"
    yield from _min_blocks_errors(c, threads)


def _tile_m_values(c: KernelConfig) -> tuple[int, ...]:
    """tile_m's values: a flat tile's long side, a tall byte-permute kernel's output window
    (either list), a direct tile's side (narrow ones too), or a tile's side."""
    if c.flat:
        return tuple(sorted(set(TILE_SIZES + FLAT_LONG))) if c.prmt else FLAT_LONG
    return _tile_n_values(c)


def _tile_n_values(c: KernelConfig) -> tuple[int, ...]:
    """tile_n's values: a direct tile's side (narrow ones too), or a tile's side."""
    return DIRECT_SIDES if c.direct else TILE_SIZES


def _fixed_field_errors(c: KernelConfig, kind: str, fixed: Mapping[str, Any], why: str) -> Iterator[str]:
    """A kernel kind's fields that have one value only: each other value, named with the fix."""
    for name, want in fixed.items():
        if getattr(c, name) != want:
            yield f"{kind}=True takes {name}={want!r} (got {getattr(c, name)!r}): {why}"


FLAT_WORD = 4  # a flat kernel moves the contiguous side in aligned 32-bit words


def _flat_threads(c: KernelConfig) -> int:
    """A flat kernel's threads: each moves `per_thread` words of a full tile in one pass."""
    words = -(-c.tile_m * c.tile_n * c.elem_bytes // FLAT_WORD)
    return -(-words // c.per_thread // WARP) * WARP


def _flat_errors(c: KernelConfig) -> Iterator[str]:
    yield from _fixed_field_errors(
        c, "flat", {"vec": 1, "pad": 0, "layout": "pad", "raster": "row", "realign": False},
        "a flat kernel has no vectors, padding or raster of its own")  # fmt: skip
    threads = _flat_threads(c)
    if threads > FLAT_MAX_THREADS:  # 1024 threads cap registers at 64 and ptxas spilled
        yield f"flat tile {c.tile_m}x{c.tile_n} with per_thread={c.per_thread} needs {threads} threads; at most {FLAT_MAX_THREADS}: raise per_thread"
    if c.conjugate and c.elem_bytes not in (8, 16):
        yield "conjugate=True needs complex64 or complex128 elements (elem_bytes 8 or 16)"


STAGED_SIZES = (1, 2, 4, 8)  # 16-byte elements are always aligned: the tiled kernels serve them
STAGED_MAX_THREADS = 512  # 1024 threads cap registers at 64: int8 kernels spilled
STAGED_THREAD_BYTES = 128  # words in flight per thread, in bytes
# At STAGED_MAX_THREADS a thread has 128 registers; with 33 words in flight (16 output, 17
# loaded) nvcc 13.0 spilled 8-24 bytes on sm_90 for 16 of the 36 such configs (the other 20
# sat at the edge), none with 32 or fewer.
STAGED_WORDS_AT_MAX_THREADS = 32


def staged_rows(c: KernelConfig) -> int:
    """Input rows a staged tile holds: output windows start up to vec - 1 rows early."""
    return c.tile_m + c.vec - 1


def staged_pitch(c: KernelConfig) -> int:
    """Bytes between staged rows in shared memory: the row's words, rounded to 8 bytes (so
    rows vec apart, one 4-byte skew further, fall in different banks)."""
    return -(-staged_words(c) * c.word_bytes // 8) * 8


def staged_loads(c: KernelConfig) -> int:
    """Words each thread of a staged kernel loads: the whole tile in one pass."""
    return -(-staged_rows(c) * staged_words(c) // c.threads)


def staged_words(c: KernelConfig) -> int:
    """Aligned words staged per input row of a staged tile: its tile_n elements at any offset."""
    return -(-c.tile_n * c.elem_bytes // c.word_bytes) + 1


def _staged_errors(c: KernelConfig) -> Iterator[str]:
    yield from _fixed_field_errors(
        c, "staged", {"pad": 0, "layout": "pad", "realign": False, "flat": False},
        "a staged kernel has its own shared-memory layout")  # fmt: skip
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
    yield from _min_blocks_errors(c, threads)


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


def prmt_k(c: KernelConfig) -> int:
    """Elements per 32-bit word of a byte-permute kernel: it moves K x K blocks."""
    return 4 // c.elem_bytes


def prmt_halo(c: KernelConfig) -> int:
    """Rows a byte-permute tile stages before its first: output windows start 16-byte
    aligned, up to 16 / elem_bytes - 1 elements early."""
    return CHUNK // c.elem_bytes


def prmt_layout(c: KernelConfig) -> dict[str, int]:
    """The threads, shared-memory layout and per-thread work of a byte-permute config (see
    templates/prmt.cu.j2), from its fields alone: `sr` staged rows of `nc1` chunks at a pitch
    of `p1w` words; `ng` row groups of K; `cw` column words; transposed rows of `p2w` words
    (K * p2w / 4 odd, so the exchange's K-apart rows fall in different banks); `ncw` chunks
    per window. Each thread's part is the same in every tile: it loads one chunk of rows
    `r1` apart (`lu1` of them), exchanges `x` column words of row groups `g2` apart (`lu2`
    groups at most), stores one chunk of output rows `r3` apart (`lu3` at most)."""
    k, t = prmt_k(c), PRMT_THREADS // c.per_thread
    sr = c.tile_m + (0 if c.wide else prmt_halo(c))  # a wide tile has no halo
    nc1 = c.tile_n * c.elem_bytes // CHUNK + 1
    p1w = -(-4 * nc1 // 8) * 8
    ng, cw = sr // k, c.tile_n * c.elem_bytes // 4
    p2w = next(p for p in range(ng + 1, ng + 16) if k * p % 4 == 0 and (k * p // 4) % 2 == 1)
    ncw = c.tile_m * c.elem_bytes // CHUNK
    r1, g2, r3 = t // nc1 // k * k, t // 8, t // ncw  # r1 whole row groups: one skew step a pass
    # tall (flat): the staged rows are one contiguous run, staged whole from its aligned
    # start; the exchange reads up to a word past a row's last, so two chunks more
    sa = sr * p1w + ng * 8  # tiled and wide: staged rows at a pitch of p1w words
    if c.flat and not c.wide:  # tall: one run
        sa = -(-(sr * c.tile_n * c.elem_bytes) // CHUNK) * 4 + 8
    lr = min(PRMT_THREAD_BYTES // CHUNK, -(-(sa // 4) // t))  # tall: chunks a thread has in flight
    # ordered (wide): the tile's output bytes in order, from the output's offset from alignment
    sb = -(-(c.tile_n * c.tile_m * c.elem_bytes + CHUNK) // CHUNK) * 4 if c.ordered else c.tile_n * p2w
    return {"threads": t, "sr": sr, "nc1": nc1, "p1w": p1w, "ng": ng, "cw": cw, "p2w": p2w,
            "ncw": ncw, "sa_words": sa, "sb_words": sb, "lr": lr,
            "r1": r1, "g2": g2, "r3": r3, "x": -(-cw // 8),
            "lu1": -(-sr // r1), "lu2": -(-ng // g2), "lu3": -(-c.tile_n // r3)}  # fmt: skip


def _prmt_errors(c: KernelConfig) -> Iterator[str]:
    yield from _fixed_field_errors(
        c, "prmt", {"pad": 0, "layout": "pad", "realign": False, "staged": False,
                    "conjugate": False},
        "a byte-permute kernel has its own shared-memory layout")  # fmt: skip
    if c.flat and c.raster != "row":  # one tile across the rows: the raster changes nothing
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
            allowed = [b // c.elem_bytes for b in sizes if b // c.elem_bytes in TILE_SIZES + FLAT_LONG]
            yield f"prmt=True: {name}={getattr(c, name)} makes {nbytes}-byte row segments; use {name} in {allowed}"
    if c.per_thread > (4 if c.flat else 2):  # 128 threads: ptxas 13 spilled the tiled ones
        allowed_pt = list(TALL_PER_THREAD if c.flat else (1, 2))
        yield f"prmt=True: per_thread={c.per_thread} must be one of {allowed_pt} (threads = {PRMT_THREADS} / per_thread)"
        return
    if bad:
        return
    lay = prmt_layout(c)
    if not c.flat and lay["lu1"] * CHUNK > PRMT_THREAD_BYTES:
        yield (
            f"prmt tile {c.tile_m}x{c.tile_n} loads {lay['lu1']} chunks of {CHUNK} bytes per "
            f"thread ({lay['threads']} threads); at most {PRMT_THREAD_BYTES} bytes: "
            + ("lower per_thread" if c.per_thread > 1 else "use a smaller tile_m or tile_n")
        )


def _prmt_sizes(c: KernelConfig) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(field, its values in bytes) for tile_m and tile_n of a byte-permute config."""
    if c.flat:
        return (("tile_m", TALL_WINDOWS), ("tile_n", TALL_ROWS))
    return (("tile_m", PRMT_SEGMENTS), ("tile_n", PRMT_SEGMENTS))


def _derive(c: KernelConfig) -> dict[str, int]:
    if c.direct:  # a tile_m x (tile_n + pad) array of elements
        return {"threads": c.tile_m * c.tile_n // c.per_thread,
                "smem": c.tile_m * (c.tile_n + c.pad) * c.elem_bytes}  # fmt: skip
    if c.prmt:
        lay = prmt_layout(c)
        return {"threads": lay["threads"], "smem": 4 * (lay["sa_words"] + lay["sb_words"])}
    if c.staged:
        rows = staged_rows(c)
        smem = rows * staged_pitch(c) + (rows - 1) // c.vec * 4
        return {"threads": c.tile_n * (c.tile_m // c.vec) // c.per_thread,
                "smem": -(-smem // 16) * 16}  # fmt: skip
    if c.flat:
        words = -(-(c.tile_m * c.tile_n * c.elem_bytes + FLAT_WORD - 1) // FLAT_WORD)
        return {"threads": _flat_threads(c), "smem": -(-words // WARP) * WARP * FLAT_WORD}
    threads = (c.tile_m // c.vec) * (c.tile_n // c.vec) // c.per_thread
    rows = c.tile_n // c.vec  # one shared-memory row per vec output rows
    smem = c.planes * rows * c.smem_pitch * c.chunk_bytes
    return {"threads": threads, "smem": smem}


def max_vec(elem_bytes: int, *extents_and_strides: int, pointers: Iterable[int] = ()) -> int:
    """Largest usable `vec` for a call: every row length, pitch and pointer must be a whole
    number of vectors, and every vector aligned to its width."""
    v = 16 // elem_bytes
    while v > 1:
        w = v * elem_bytes
        if (
            (v * elem_bytes >= 4)
            and all(x % v == 0 for x in extents_and_strides)
            and all(p % w == 0 for p in pointers)
        ):
            return v
        v //= 2
    return 1


def config_space(
    dtype: Any,
    device: Any = None,
    *,
    conjugate: bool = False,
    max_vector: int | None = None,
    short_side: int | None = None,
) -> Iterator[KernelConfig]:
    """Every valid config for `dtype` that `device` can run (no device: the newest GPUs).

    `device` may be :class:`DeviceLimits`, a pycuda ``Device`` or None. `max_vector` caps
    `vec` for a call whose rows or pointers are not aligned to wider vectors; such a call also
    gets the `realign` kernels, which use vectors of any width on any alignment. With
    `short_side` (the shorter matrix side, or its class's bound), the flat kernels whose tile
    spans it come too.
    """
    et = element_type(dtype)
    if conjugate and not et.conjugable:
        raise ConfigError(f"conjugate transpose needs a complex dtype, got {et.name}")
    if max_vector is not None:
        _check_count("max_vector", max_vector, "the widest vector, in elements, the call allows")
    if short_side is not None:
        _check_count("short_side", short_side, "the shorter matrix side, in elements")
    limits = device_limits(device)
    s = et.size
    restricted = max_vector is not None and max_vector < 16 // s
    modes = [(v, False) for v in VEC_SIZES if max_vector is None or v <= max_vector]
    modes += [(v, True) for v in VEC_SIZES if restricted and v > 1]
    for vec, realign in modes:
        for tm in TILE_SIZES:
            for tn in TILE_SIZES:
                for pt in PER_THREAD:
                    for layout, pad in (("pad", 0), ("pad", 1), ("swizzle", 0)):
                        for raster in RASTERS:
                            for cache in CACHE_HINTS:
                                yield from _launchable(
                                    limits, s, tm, tn, vec, pt, pad, layout, raster, cache,
                                    conjugate, realign=realign,
                                )  # fmt: skip
    if restricted and s in STAGED_SIZES and (not conjugate or s == 8):
        yield from staged_space(s, limits, conjugate)
    if restricted and s in PRMT_SIZES and not conjugate:
        yield from prmt_space(s, limits)
    if s in DIRECT_SIZES or (short_side is not None and short_side <= DIRECT_NARROW[-1]):
        yield from direct_space(s, limits, conjugate, short_side)
    if short_side is not None:
        yield from flat_space(s, limits, short_side, conjugate)
        if s in PRMT_SIZES and not conjugate:
            yield from flat_prmt_space(s, limits, short_side)


def _check_count(name: str, value: Any, meaning: str) -> None:
    """A cap given by the caller is a positive int: 0 would silently select another space."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ConfigError(
            f"{name}={value!r:.40} must be an int of at least 1 ({meaning}); leave it None "
            "for no limit"
        )


def staged_space(elem_bytes: int, limits: DeviceLimits, conjugate: bool = False) -> Iterator[KernelConfig]:
    """The staged configs (rows at any offset) for `elem_bytes`-byte elements."""
    for vec in VEC_SIZES:
        if vec * elem_bytes not in (4, 8, 16):
            continue
        for tm in TILE_SIZES:
            for tn in TILE_SIZES:
                for pt in PER_THREAD:
                    for raster in RASTERS:
                        for cache in CACHE_HINTS:
                            yield from _launchable(limits, elem_bytes, tm, tn, vec, pt, 0, "pad",
                                                   raster, cache, conjugate, staged=True)  # fmt: skip


def direct_space(
    elem_bytes: int, limits: DeviceLimits, conjugate: bool = False, short_side: int | None = None
) -> Iterator[KernelConfig]:
    """The direct configs (one element an access, the seed documents' strategy) for
    `elem_bytes`-byte elements (4 to 16), each uncapped and at the register caps; with a
    `short_side` of at most DIRECT_NARROW[-1], the narrow tiles too, for every element size
    (padded or not: padding spreads a warp's reads down a 2-8 wide column over the banks,
    but a first call's refinement found float16 20000003x2 faster unpadded on an H200)."""
    tiles = [(tm, tn) for tm in DIRECT_TILES for tn in DIRECT_TILES] if elem_bytes in DIRECT_SIZES else []
    if short_side is not None and short_side <= DIRECT_NARROW[-1]:
        narrow = [(a, b) for a in DIRECT_NARROW for b in DIRECT_LONG]
        tiles += narrow + [(b, a) for a, b in narrow]
    for tm, tn in tiles:
        for pt in PER_THREAD:
            for pad in (0, 1):
                for raster in RASTERS:
                    for cache in CACHE_HINTS:
                        yield from _launchable(limits, elem_bytes, tm, tn, 1, pt, pad, "pad", raster,
                                               cache, conjugate, direct=True)  # fmt: skip


def prmt_space(elem_bytes: int, limits: DeviceLimits) -> Iterator[KernelConfig]:
    """The byte-permute configs (1- and 2-byte rows at any offset) for `elem_bytes`."""
    if elem_bytes not in PRMT_SIZES:
        return
    sizes = [b // elem_bytes for b in PRMT_SEGMENTS]
    for tm in sizes:
        for tn in sizes:
            for pt in PER_THREAD:
                for raster in RASTERS:
                    for cache in CACHE_HINTS:
                        yield from _launchable(limits, elem_bytes, tm, tn, 4 // elem_bytes, pt, 0,
                                               "pad", raster, cache, prmt=True)  # fmt: skip


def prmt_default(elem_bytes: int, conjugate: bool = False) -> KernelConfig | None:
    """The untuned byte-permute config for 1-, 2- and 4-byte elements (None for wider ones,
    which span several words, or conjugated ones)."""
    return _prmt_pick(elem_bytes, conjugate, 0)


def prmt_alternative(elem_bytes: int, conjugate: bool = False) -> KernelConfig | None:
    """The byte-permute config that won the cases the default lost (raced at a first call)."""
    return _prmt_pick(elem_bytes, conjugate, 1)


def _prmt_pick(elem_bytes: int, conjugate: bool, i: int) -> KernelConfig | None:
    if elem_bytes not in PRMT_SIZES or conjugate:
        return None
    tm, tn, pt, raster = _PRMT_DEFAULTS[elem_bytes][i]
    return KernelConfig(elem_bytes, tm, tn, 4 // elem_bytes, pt, 0, "pad", raster, prmt=True)


# elem_bytes -> (default, alternative) as (tile_m, tile_n, per_thread, raster): of every
# non-persistent prmt config, the best and the best of the rest by geometric mean over 7
# 1-byte, 6 2-byte and 5 4-byte odd cases on the H200 (dev/prmt_sweep.py,
# docs/perf-notes.md, "Byte permutes"): 128-byte output windows and 128- (1 byte) or 256-byte
# (2 bytes) input segments; 256 bytes both ways for 4 bytes
_PRMT_DEFAULTS: dict[int, tuple[tuple[Any, ...], ...]] = {
    1: ((64, 128, 2, "col"), (128, 128, 2, "col")),
    2: ((64, 128, 2, "col"), (32, 128, 2, "col")),
    4: ((64, 64, 2, "col"), (32, 64, 2, "col")),  # 256-byte segments: staged still serves by default
}


def flat_space(
    elem_bytes: int, limits: DeviceLimits, short_side: int, conjugate: bool = False
) -> Iterator[KernelConfig]:
    """The flat configs (skinny matrices) whose tile spans a short side of `short_side`."""
    for tw in TILE_SIZES:
        if tw < short_side:
            continue
        for tl in FLAT_LONG:
            for pt in PER_THREAD:
                for cache in CACHE_HINTS:
                    yield from _launchable(limits, elem_bytes, tl, tw, 1, pt, 0, "pad", "row",
                                           cache, conjugate, flat=True)  # fmt: skip


def _launchable(limits: DeviceLimits, *fields: Any, **named: Any) -> Iterator[KernelConfig]:
    """The config with these fields, then its persistent variants, if it is valid and
    `limits` can run it; nothing otherwise."""
    try:
        cfg = KernelConfig(*fields, **named)
    except ConfigError:
        return
    if cfg.fits(limits):
        yield cfg
        for p in PERSISTENT[1:] if not cfg.direct else ():  # a direct grid is the tiles
            yield cfg.replace(persistent=p)
        if not (cfg.flat or cfg.prmt):  # tiled and staged kernels: capped registers too
            for b in cap_steps(cfg):
                yield cfg.replace(min_blocks=b)


def flat_prmt_space(elem_bytes: int, limits: DeviceLimits, short_side: int) -> Iterator[KernelConfig]:
    """The flat byte-permute configs (flat and prmt, any offset) whose tile spans a short side
    of `short_side` elements: tall (rows of at most `tile_n` elements) or wide (at most
    `tile_m` rows)."""
    if elem_bytes not in PRMT_SIZES:
        return
    sides = TILE_SIZES + FLAT_LONG
    for tm in [b // elem_bytes for b in TALL_WINDOWS if b // elem_bytes in sides]:
        for tn in [b // elem_bytes for b in TALL_ROWS if b // elem_bytes in sides]:
            for wide, ordered in ((False, False), (True, False), (True, True)):
                if (tm if wide else tn) < short_side or (wide and tm * elem_bytes > 256):
                    continue
                for pt in TALL_PER_THREAD:
                    for cache in CACHE_HINTS:
                        yield from _launchable(limits, elem_bytes, tm, tn, 4 // elem_bytes, pt, 0,
                                               "pad", "row", cache, flat=True, prmt=True, wide=wide,
                                               ordered=ordered)  # fmt: skip


def tall_default(elem_bytes: int, short_side: int) -> KernelConfig | None:
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
        cfg = KernelConfig(elem_bytes, window // elem_bytes, tn, 4 // elem_bytes, pt, 0, "pad",
                           "row", flat=True, prmt=True)  # fmt: skip
        if cfg.fits(NEWEST):
            return cfg
    return None


def _spanning_side(elem_bytes: int, short_side: int) -> int | None:
    """The narrowest flat byte-permute tile side (elements, at least 16, at most 256 bytes)
    that spans a short side of `short_side` elements; None if none does."""
    return next((b // elem_bytes for b in TALL_ROWS
                 if b // elem_bytes >= max(short_side, 16) and b <= 256), None)  # fmt: skip


def wide_default(elem_bytes: int, short_side: int, exact: bool = True) -> KernelConfig | None:
    """The untuned wide byte-permute config for `short_side` rows (`exact`: a call's, not a
    class's largest): the fewest rows that span them, 128 threads, and the output in order
    (`ordered`) where its words are whole or element-sized (2 and 4 bytes; 1-byte rows of a
    call whose rows are a multiple of 4 bytes), with tiles of 8 KiB
    (H200: int8 / float16 / float32 20x7081411 63.0 / 64.0 / 64.4 -> 76.6 / 79.2
    / 82.5, float16 43x618881 60.0 -> 70.1; int8 21 rows lost 5 to the run store). Else the
    run store with the widest row segments up to 512 bytes that fit (H200: float16 9x5303956
    53.8% with 512 bytes against 38.4% with 256). None for wider elements, more than 256
    bytes of rows, or (run store) output rows under 4 bytes."""
    if elem_bytes not in PRMT_SIZES:
        return None
    tm = _spanning_side(elem_bytes, short_side)
    if tm is None:
        return None
    if elem_bytes > 1 or (exact and short_side % 4 == 0):
        want = WIDE_ORDERED_TILE_BYTES // (tm * elem_bytes)
        tn = max((t for t in TILE_SIZES if t <= want and t * elem_bytes in TALL_ROWS), default=0)
        if tn:
            cfg = KernelConfig(elem_bytes, tm, tn, 4 // elem_bytes, 4, 0, "pad", "row", flat=True,
                               prmt=True, wide=True, ordered=True)  # fmt: skip
            if cfg.fits(NEWEST):
                return cfg
    if short_side * elem_bytes < WIDE_MIN_ROW_BYTES:
        return None
    for segment in (512, 256, 128, 64):  # the first that is a tile side and fits
        if segment // elem_bytes not in TILE_SIZES:
            continue
        cfg = KernelConfig(elem_bytes, tm, segment // elem_bytes, 4 // elem_bytes, 4, 0, "pad",
                           "row", flat=True, prmt=True, wide=True)  # fmt: skip
        if cfg.fits(NEWEST):
            return cfg
    return None


def for_rows(c: KernelConfig, m: int) -> KernelConfig:
    """A served (not forced) config as a call of `m` rows runs it: an ordered wide config of
    1-byte elements on rows that are not whole words runs as its run-store twin, where the
    ordered buffer would be written byte by byte (H200, int8 21x7536398: 60.3
    against 55.4); every other config as it is."""
    if c.ordered and c.elem_bytes == 1 and m % 4 and m >= WIDE_MIN_ROW_BYTES:
        return c.replace(ordered=False)
    return c


FEW_ROWS_MAX = 256  # an m x n call with fewer rows than this (and than columns) has few rows
DIRECT_FEW_ROWS_MIN = 4  # direct tiles serve few long rows of 8- and 16-byte elements from here


def direct_default(elem_bytes: int, m: int, n: int, conjugate: bool = False) -> KernelConfig | None:
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
    return KernelConfig(elem_bytes, tm, tn, 1, pt, 1, "pad", raster, conjugate=conjugate,
                        direct=True, min_blocks=blocks)  # fmt: skip


# 4-byte few rows: (most rows, the tile spanning them as direct_default's fields), H200
# sweep (dev/direct_sweep.py; the ordered wide kernel in brackets): float32 15x16642555 91.4 (93.8),
# 9x5303956 86.0 (80.7); 20x7081411 88.9 (81.4), 18x1267567 86.2 (78.2); 47x1060938 85.3
# (84.1), 64x2000003 90.2 (63.1); more rows 91.9 with 32x64 tiles
_DIRECT_FOUR_BYTE_ROWS: tuple[tuple[int, tuple[Any, ...]], ...] = (
    (16, (16, 64, 8, "col", 16)), (32, (32, 32, 8, "col", 12)), (64, (64, 32, 8, "col", 8)),
    (FEW_ROWS_MAX, (32, 64, 8, "col", 8)),
)


FEW_COLS_MAX = 32  # a call with at most this many columns (and FEW_COLS_RATIO x as many rows)
FEW_COLS_RATIO = 8  # races the narrow tiled tile of `few_cols_default` at its first call


def few_cols_default(
    elem_bytes: int, m: int, n: int, vec: int, conjugate: bool = False
) -> KernelConfig | None:
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
            cfg = KernelConfig(elem_bytes, tm, tn, v, pt, 1, "pad", "col", "stream", conjugate)
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


def _narrow_direct(c: KernelConfig) -> bool:
    """A direct tile with a side of DIRECT_NARROW (the other one of DIRECT_LONG)."""
    return c.direct and min(c.tile_m, c.tile_n) in DIRECT_NARROW


# A narrow tile of few long rows has this many elements: the long side is this over the
# short one (within DIRECT_LONG). The H200 whole-space bests of 4 such calls (dev/space_check.py).
NARROW_TILE_ELEMENTS = 512


def narrow_default(elem_bytes: int, m: int, n: int, conjugate: bool = False) -> KernelConfig | None:
    """The narrow direct tile for an m x n call with a side of 2 to DIRECT_NARROW[-1]
    elements (any element size): the first of `narrow_configs`. None for other shapes."""
    found = narrow_configs(elem_bytes, m, n, conjugate)
    return found[0] if found else None


def narrow_configs(elem_bytes: int, m: int, n: int, conjugate: bool = False) -> list[KernelConfig]:
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
        found.append(KernelConfig(elem_bytes, tm, tn, 1, pt, 1, "pad", raster, conjugate=conjugate, direct=True))
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


def few_rows_default(
    elem_bytes: int, rows: int, cols: int, vec: int, conjugate: bool = False
) -> KernelConfig | None:
    """The config for few long rows: for 8- and 16-byte elements the direct kernel's
    (`direct_default`: every tile is an edge tile and costs no more; from DIRECT_FEW_ROWS_MIN
    rows, any alignment); for 4-byte elements in words of 8 bytes, tiles no taller than the
    rows (a taller tiled tile is all edge: element-wise loads and stores), 64 rows of
    2-element words, walking down the tile columns (H200: float32 140x1843254 89.1
    against 78.6). `rows` and `cols` are the call's (a class's fewest). None where the rule
    does not apply: no fewer rows than columns, rows of at least FEW_ROWS_MAX, fewer than
    DIRECT_FEW_ROWS_MIN (8 and 16 bytes) or 16 (4 bytes), 4-byte words."""
    if not rows < min(FEW_ROWS_MAX, cols):
        return None
    if elem_bytes in (8, 16):
        return direct_default(elem_bytes, rows, cols, conjugate) if rows >= DIRECT_FEW_ROWS_MIN else None
    v = min(vec, 2) if elem_bytes == 4 else 0
    if v * elem_bytes < 8 or rows < TILE_SIZES[0]:
        return None
    tm = max(t for t in TILE_SIZES if t <= min(rows, 64))
    try:
        return KernelConfig(elem_bytes, tm, 64, v, 4, 1, "pad", "col", conjugate=conjugate)
    except ConfigError:
        return None


def flat_default(elem_bytes: int, short_side: int, conjugate: bool = False) -> KernelConfig | None:
    """The untuned flat config for a skinny call: the narrowest tile that spans the short
    side, about 16 KiB of it, 8 words in flight per thread; None if no flat tile fits."""
    tw = next((t for t in TILE_SIZES if t >= short_side), None)
    if tw is None:
        return None
    for tl in sorted(FLAT_LONG, key=lambda tl: abs(tl * tw * elem_bytes - 16384)):
        for pt in (8, 16, 4):
            try:
                cfg = KernelConfig(elem_bytes, tl, tw, 1, pt, 0, "pad", "row", "default",
                                   conjugate, flat=True)  # fmt: skip
            except ConfigError:
                continue
            if cfg.fits(NEWEST):
                return cfg
    return None


def staged_default(elem_bytes: int, conjugate: bool = False) -> KernelConfig | None:
    """The untuned staged config (rows at any offset) for an element size; None where the
    tiled kernels serve every call (16-byte elements)."""
    fields = _STAGED_DEFAULTS.get(elem_bytes)
    if fields is None or (conjugate and elem_bytes != 8):
        return None
    tm, tn, vec, pt, raster, blocks = fields
    return KernelConfig(elem_bytes, tm, tn, vec, pt, 0, "pad", raster, "default", conjugate,
                        staged=True, min_blocks=blocks)  # fmt: skip


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


def device_limits(device: Any) -> DeviceLimits:
    """Limits of a pycuda Device, DeviceLimits as given, or the newest architecture's."""
    if device is None:
        return NEWEST
    if isinstance(device, DeviceLimits):
        return device
    get = getattr(device, "get_attribute", None)
    if get is None:
        raise ConfigError(
            f"device must be a pycuda Device, a DeviceLimits or None, got {type(device).__name__}"
        )
    import pycuda.driver as drv  # only reached with a pycuda Device in hand

    a = drv.device_attribute
    return DeviceLimits(
        max_threads_per_block=get(a.MAX_THREADS_PER_BLOCK),
        max_shared_per_block=min(get(a.MAX_SHARED_MEMORY_PER_BLOCK), 48 * 1024),
        name=device.name(),
        compute_capability=device.compute_capability(),
    )


# The seed documents' best kernel: 32x32 tile, +1 padding, a 32x8 thread block (4 rows each).
def seed_config(elem_bytes: int) -> KernelConfig:
    return KernelConfig(elem_bytes, 32, 32, 1, 4, 1, "pad", "row", "default")


def default_config(elem_bytes: int, max_vector: int = 16, conjugate: bool = False) -> KernelConfig:
    """The untuned choice for an element size: the best config of a sweep on an H100 at
    8192x8192 (BENCHMARKS.md) for the widest vector the call allows."""
    _check_count("max_vector", max_vector, "the widest vector, in elements, the call allows")
    for (s, vec), fields in _DEFAULTS.items():
        if s == elem_bytes and vec <= max_vector:
            tm, tn, v, pt, pad, layout, raster, cache, persistent = fields
            return KernelConfig(
                elem_bytes, tm, tn, v, pt, pad, layout, raster, cache, conjugate, persistent
            )
    raise ConfigError(f"elem_bytes={elem_bytes} must be one of {list(ELEMENT_SIZES)}")


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


# Fields a neighbour steps along, most often decisive first (H200 space checks: the best
# config of a class nobody tuned was mostly a tile or per_thread step from the served one).
_STEPPED: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("tile_m", TILE_SIZES), ("tile_n", TILE_SIZES), ("per_thread", PER_THREAD),
    ("vec", VEC_SIZES), ("persistent", PERSISTENT),
)  # fmt: skip
_SMEM_LAYOUTS: tuple[tuple[str, int], ...] = (("pad", 0), ("pad", 1), ("swizzle", 0))


def neighbours(config: KernelConfig) -> list[KernelConfig]:
    """The valid configs one step from `config`: one size field (tile, per_thread, vec,
    persistent, the register cap `min_blocks`) one value up or down its list, or one other
    choice (raster, shared-memory layout, cache hint) changed; most decisive fields first.
    The tuner's local search and the first call's refinement walk these."""
    found: list[KernelConfig] = []

    def add(**change: Any) -> None:
        try:
            found.append(config.replace(**change))
        except ConfigError:
            pass  # not a kernel: the step leaves the space here

    for name, values in _STEPPED:
        if name == "tile_m" and config.flat:
            values = FLAT_LONG
        if name in ("tile_m", "tile_n") and _narrow_direct(config):
            # a narrow tile's sides step within their own lists: the short one in DIRECT_NARROW
            # (it covers the call's few rows or columns), the long one in DIRECT_LONG
            values = DIRECT_NARROW if getattr(config, name) in DIRECT_NARROW else DIRECT_LONG
        if name == "persistent" and config.min_blocks:
            continue  # a persistent grid sets its own blocks per SM: not with a register cap
        here = getattr(config, name)
        if here not in values:
            continue
        i = values.index(here)
        for j in (i - 1, i + 1):
            if 0 <= j < len(values):
                add(**{name: values[j]})
        if name == "per_thread":
            # the raster before the rest: it decided float32 471466x129 (H200:
            # staged col 69 against row 82 at the same cap), and a first call's refinement
            # times only the first REFINE_STEPS neighbours
            add(raster="col" if config.raster == "row" else "row")
    if not (config.flat or config.prmt or config.persistent):
        # from uncapped registers every cap (which one pays is not monotonic: the staged
        # defaults gained at 64 registers and spilled at 40), else the next cap either way
        steps = (0, *cap_steps(config))
        if config.min_blocks == 0:
            for b in steps[1:]:
                add(min_blocks=b)
        elif config.min_blocks in steps:
            i = steps.index(config.min_blocks)
            for j in (i + 1, i - 1):
                if 0 <= j < len(steps):
                    add(min_blocks=steps[j])
    for layout, pad in _SMEM_LAYOUTS:
        if (layout, pad) != (config.layout, config.pad):
            add(layout=layout, pad=pad)
    add(cache="stream" if config.cache == "default" else "default")
    return list(dict.fromkeys(c for c in found if c != config))


def pair_steps(config: KernelConfig) -> list[KernelConfig]:
    """The valid configs one step away in each of two size fields at once (tile_m, tile_n,
    per_thread, vec): where no single step improves, the best is often a tile and a
    per_thread step together (H200: float32 4099x6007's best was t2/n16 against a local
    optimum at t4/n32; int64 1403597x77 and complex64 182x132834 likewise). Most decisive
    pairs first."""
    found: list[KernelConfig] = []
    fields = [(name, values) for name, values in _STEPPED if name != "persistent"]
    for (a, av), (b, bv) in itertools.combinations(fields, 2):
        if a == "tile_m" and config.flat:
            av = FLAT_LONG
        here_a, here_b = getattr(config, a), getattr(config, b)
        if here_a not in av or here_b not in bv:
            continue
        i, j = av.index(here_a), bv.index(here_b)
        for di, dj in ((1, -1), (-1, 1), (1, 1), (-1, -1)):
            if 0 <= i + di < len(av) and 0 <= j + dj < len(bv):
                try:
                    found.append(config.replace(**{a: av[i + di], b: bv[j + dj]}))
                except ConfigError:
                    pass  # not a kernel
    return list(dict.fromkeys(found))

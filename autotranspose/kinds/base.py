"""What every kernel kind shares: the field values and hardware limits, and `Kind`, the
interface each kind implements (its policy: rules, shape, template parameters, search, and how
it is written).

A config is a kind plus that kind's own typed parameters (`Kind.Params`, a frozen dataclass)
beside the fields every kind shares. Kinds know nothing of `KernelConfig`'s class (config.py
builds on them): a kind reads a config's fields and derived sizes (`Config`), and builds
configs only through the constructor it is handed (`New`), so config.py can dispatch to the
kinds and the kinds can build configs without an import circle.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Protocol

TILE_SIZES: tuple[int, ...] = (16, 32, 64, 128, 256)
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
WARP = 32
# a flat kernel's tile's long side (flat.py); also a flat byte-permute tile's (prmt.py)
FLAT_LONG: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048)
# The C type of a word of each width, as the templates name it.
WORD_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "u32", 8: "uint2", 16: "uint4"}


STATIC_SHARED_MAX = 48 * 1024  # static __shared__ arrays stop here; past it, dynamic by opt-in
# The shared memory a block may opt in to (dynamic, past STATIC_SHARED_MAX) by compute
# capability: the CUDA C++ Programming Guide's "maximum amount of shared memory per thread
# block" (cudaFuncAttributeMaxDynamicSharedMemorySize); unknown architectures get none.
SHARED_OPTIN: dict[tuple[int, int], int] = {
    (7, 0): 96 * 1024,
    (7, 5): 64 * 1024,
    (8, 0): 163 * 1024,
    (8, 6): 99 * 1024,
    (8, 7): 163 * 1024,
    (8, 9): 99 * 1024,
    (9, 0): 227 * 1024,
    (10, 0): 227 * 1024,
    (12, 0): 99 * 1024,
}


def shared_optin(compute_capability: tuple[int, int]) -> int:
    """Bytes of shared memory a block of this architecture may opt in to."""
    return SHARED_OPTIN.get(tuple(compute_capability), STATIC_SHARED_MAX)  # type: ignore[arg-type]


@dataclass(frozen=True)
class DeviceLimits:
    """The per-block limits a config must fit: from the device, or the newest architecture.
    `max_shared_optin` is what a kind that declares its shared memory dynamic
    (`Kind.dynamic_shared`) may use; NEWEST allows none past the static limit, so the
    untuned defaults run on every GPU."""

    max_threads_per_block: int = 1024
    max_shared_per_block: int = STATIC_SHARED_MAX  # static __shared__ arrays stop at 48 KiB
    name: str = "any"
    compute_capability: tuple[int, int] = (9, 0)
    max_shared_optin: int = STATIC_SHARED_MAX


NEWEST = DeviceLimits()


class Config(Protocol):
    """What a kind reads of a config (config.KernelConfig): its fields and derived sizes."""

    elem_bytes: int
    tile_m: int
    tile_n: int
    vec: int
    per_thread: int
    pad: int
    layout: str
    raster: str
    cache: str
    conjugate: bool
    persistent: int
    realign: bool
    min_blocks: int
    kind: str
    params: Any  # the kind's own parameters: an instance of its `Kind.Params`

    @property
    def key(self) -> str: ...
    @property
    def threads(self) -> int: ...
    @property
    def smem_bytes(self) -> int: ...
    @property
    def dynamic_smem(self) -> int: ...
    @property
    def word_bytes(self) -> int: ...
    @property
    def registers(self) -> int: ...
    def fits(self, limits: DeviceLimits) -> bool: ...
    def replace(self, **changes: Any) -> Any: ...


@dataclass(frozen=True)
class NoParams:
    """The parameters of a kind that has none of its own."""


# Builds a config from KernelConfig's fields (positional or named; a kind's own parameters as
# `kind=` and `params=`), raising ConfigError if they are not a valid kernel:
# config.KernelConfig itself.
New = Callable[..., Any]
# Yields a config built from these fields, then its variants (persistent grids, register
# caps), if it is valid and the limits can run it (config._launchable): what a search walks.
Launchable = Callable[..., Iterator[Any]]


@dataclass(frozen=True)
class SpaceCall:
    """What one config_space() call asks for: the element size, the limits, whether the
    call conjugates, its widest vector (None: any) and short side (None: not skinny), and
    whether its rows are restricted to vectors narrower than 16 bytes (unaligned)."""

    elem_bytes: int
    limits: DeviceLimits
    conjugate: bool
    max_vector: int | None
    short_side: int | None

    @property
    def restricted(self) -> bool:
        return self.max_vector is not None and self.max_vector < 16 // self.elem_bytes


# A search: (its place in config_space's order, a function of the call's launchable builder
# and the call that yields the kind's configs for it).
Search = tuple[int, Callable[[Launchable, SpaceCall], Iterator[Any]]]


class Kind(ABC):
    """A kernel kind's policy: how its configs are validated and sized, which tiles and grid
    they launch, which parameters their template renders, and the configs it adds to the
    search space. One instance per kind, registered in `autotranspose.kinds` by `name`.

    A config names its kind (`name`) and carries the kind's own parameters, an instance of
    `Params` (a frozen dataclass of bools, ints and strs). Methods take the config (`Config`);
    KernelConfig validates the fields all kinds share (types, value lists) and the parameters'
    types before it asks `errors`.

    The written form (a config's `to_dict` and key: the store, the shipped files, the tuner's
    parameters) predates kinds as objects and spells a kind as flags: `mark`, the flag that
    names it (None for the tiled kind, which none names), `fixed`, flags it always writes
    beside its mark, and each parameter under its own name where it is not its default;
    `codes` gives each written flag's part of the key, in the key's order. `written` and
    `reads` convert; a kind whose written form is not flags of bools overrides both.
    """

    name: ClassVar[str]
    Params: ClassVar[type] = NoParams
    mark: ClassVar[str | None] = None
    fixed: ClassVar[tuple[tuple[str, Any], ...]] = ()
    codes: ClassVar[tuple[tuple[str, str], ...]] = ()
    template: ClassVar[str]  # its skeleton under templates/, in the kind's folder with its pieces
    persistent: ClassVar[bool] = True  # the space holds its persistent-grid variants
    capped: ClassVar[bool] = True  # the space and the neighbours hold register-capped variants
    # its kernels declare shared memory past STATIC_SHARED_MAX dynamic (extern) and the
    # launch opts in to it, so its configs may use up to `DeviceLimits.max_shared_optin`
    dynamic_shared: ClassVar[bool] = False
    # a config is one kernel that codegen renders from the config alone (`template`,
    # `params`); False for a kind whose config parameterises a program of kernels rendered
    # elsewhere (the in-place passes: kernels/inplace.py), which codegen refuses to render
    single_kernel: ClassVar[bool] = True

    # --- the written form --------------------------------------------------------------------
    def flag_defaults(self) -> dict[str, Any]:
        """Every flag this kind may write, at its value when not written."""
        out: dict[str, Any] = dict.fromkeys(
            (*dict(self.fixed), *([self.mark] if self.mark else ())), False
        )
        out.update({f.name: f.default for f in fields(self.Params)})
        return out

    def written(self, params: Any) -> dict[str, Any]:
        """The flags that spell this kind and `params` (those away from their default)."""
        out = dict(self.fixed)
        if self.mark:
            out[self.mark] = True
        for f in fields(params):
            value = getattr(params, f.name)
            if value != f.default:
                out[f.name] = value
        return out

    def reads(self, flags: Mapping[str, Any]) -> Any | None:
        """This kind's parameters where `flags` (a written form's kind flags away from their
        default) spell this kind, else None: its mark set (none for a kind without one), its
        fixed flags as it writes them, and no flag it does not write."""
        if self.mark is not None and flags.get(self.mark) is not True:
            return None
        if any(flags.get(k) != v for k, v in self.fixed):
            return None
        own = {f.name for f in fields(self.Params)}
        if set(flags) - own - set(dict(self.fixed)) - {self.mark}:
            return None
        return self.Params(**{k: v for k, v in flags.items() if k in own})

    def key_part(self, params: Any) -> str:
        """The kind's part of a config's key: each written flag's code, in `codes`' order."""
        written = self.written(params)
        part = ""
        for flag, code in self.codes:
            value = written.get(flag, False)
            if value is True:
                part += f"_{code}"
            elif isinstance(value, str) and value:
                part += f"_{code}{value}"
        return part

    def spelled(self) -> str:
        """How the written form names this kind, for messages."""
        if self.mark is None:
            return f"{self.name} (no kind flag)"
        extra = [*dict(self.fixed), *(f.name for f in fields(self.Params))]
        with_ = f" with {', '.join(extra)}" if extra else ""
        return f"{self.mark}=True{with_}"

    def spans_short_side(self, c: Config) -> bool:
        """Whether one tile spans a skinny matrix's short side (the flat tiles): such a
        kernel needs the call's rows contiguous (`shapes.flat_fits`)."""
        return False

    @abstractmethod
    def errors(self, c: Config) -> Iterator[str]:
        """Every reason `c` is not a kernel of this kind, each naming the field and the fix."""

    @abstractmethod
    def derive(self, c: Config) -> dict[str, int]:
        """`threads` per block and static shared memory (`smem`, bytes) of a valid config."""

    @abstractmethod
    def params(self, c: Config) -> dict[str, object]:
        """What the template needs about `c` besides what every kind's does (codegen's
        common parameters: name, element, threads, hints, min_blocks, which this may override)."""

    def searches(self) -> tuple[Search, ...]:
        """The kind's parts of config_space(), each with its place in the order."""
        return ()

    def tile_m_values(self, c: Config) -> tuple[int, ...]:
        return self.tile_n_values(c)

    def tile_n_values(self, c: Config) -> tuple[int, ...]:
        return TILE_SIZES

    def tiles(self, c: Config, m: int, n: int) -> tuple[int, int]:
        """Tiles along the input's rows and columns of an m x n matrix."""
        return (-(-m // c.tile_m), -(-n // c.tile_n))

    def applies(self, c: Config, m: int, n: int) -> bool:
        """Whether the kernel handles an m x n matrix."""
        return True

    def grid(
        self, c: Config, m: int, n: int, batch: int, multiprocessors: int
    ) -> tuple[int, int, int]:
        """One block per tile (batches folded in), or with `persistent` = k, k blocks per
        multiprocessor that loop over the tiles."""
        tm, tn = self.tiles(c, m, n)
        total = tm * tn * batch
        if c.persistent:
            total = min(total, c.persistent * multiprocessors)
        return (total, 1, 1)

    def any_offset(self, c: Config) -> bool:
        """Whether the kernel runs on rows at any offset (else `vec` must fit the call)."""
        return False

    def for_call(self, c: Config, m: int, n: int) -> Any:
        """A served config as an m x n call runs it (a kernel rendered for the call's exact
        side takes that side); most kinds run every config as it is."""
        return c

    def cap_steps(self, c: Config) -> tuple[int, ...]:
        """The register caps (as min_blocks) for `c`'s threads (searched where `capped`)."""
        return occupancy_steps(c.threads, OCCUPANCY_CAPS)

    def step_values(
        self, c: Config, name: str, values: tuple[int, ...], pair: bool
    ) -> tuple[int, ...]:
        """The list a neighbour steps `name` along (`pair`: two fields at once); `values` is
        the shared one."""
        return values

    def param_steps(self, params: Any) -> tuple[Any, ...]:
        """The kind's parameters one step from `params` (one field one value up or down its
        list), most decisive first: the neighbours of a kind whose own parameters the tuner
        searches (in-place); none where the shared fields' steps are the neighbours."""
        return ()

    def __repr__(self) -> str:
        return f"<kind {self.name}>"


def fixed_field_errors(c: Config, kind: str, fixed: Mapping[str, Any], why: str) -> Iterator[str]:
    """A kernel kind's fields that have one value only: each other value, named with the fix."""
    for name, want in fixed.items():
        if getattr(c, name) != want:
            yield f"{kind}=True takes {name}={want!r} (got {getattr(c, name)!r}): {why}"


def min_blocks_errors(c: Config, threads: int) -> Iterator[str]:
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


def register_budget(threads: int, blocks: int) -> int:
    """The registers a thread gets when `blocks` blocks of `threads` share an SM, as ptxas
    caps them under `__launch_bounds__(threads, blocks)`: the SM's four partitions each hold
    a quarter of the register file and of the warps, allocated 8 registers a thread at a
    time. So 25 blocks of 64 threads get 32, not the 40 that the SM's total suggests."""
    warps = -(-(blocks * threads // WARP) // 4)  # a partition's share, rounded up
    return REGISTERS_PER_SM // 4 // (warps * WARP) // 8 * 8

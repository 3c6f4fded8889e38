"""KernelConfig (one transpose kernel variant), its validation, and the space the tuner searches.

Every kernel kind (tiled, flat, staged, byte-permute, direct, register transpose, cast) is a
policy in `autotranspose/kinds/`: its own parameters, rules, shape, template parameters,
search space and defaults. A KernelConfig is a kind (`kind`, its name), that kind's typed
parameters (`params`) and the fields every kind shares; it checks the shared fields and asks
its kind for the rest. Its written form (`to_dict`, the key) spells the kind as flags, as
stored and shipped results always have. This module also composes the search space from the
kinds' searches (`config_space`), walks the neighbourhood of a config (`neighbours`,
`pair_steps`) and reads a pycuda device's limits; the kinds' defaults are bound to
KernelConfig here under their established names (`staged_default`, `tall_default`, ...).
Which of them a call runs is `dispatch.policy`'s to decide.

A tiled kernel transposes a `tile_m` x `tile_n` tile of the input through shared memory. Each
thread reads `vec` x `vec` micro-blocks (`vec` consecutive elements from each of `vec` rows,
one vector load per row), transposes the micro-block in registers, and stores it to shared
memory; after a barrier it reads transposed micro-blocks back and writes `vec`-wide vectors to
the output rows. Narrow types thus move in wide words: int8 with `vec=16` loads and stores 16
bytes per thread per row.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from numbers import Integral
from types import MappingProxyType
from typing import Any

from .. import kinds
from ..errors import ConfigError
from ..kinds import (
    direct as _direct,
    flat as _flat,
    prmt as _prmt,
    regt as _regt,
    staged as _staged,
    tiled as _tiled,
)
from ..kinds.base import (  # noqa: F401  (the shared values, under their established names)
    CACHE_HINTS,
    FLAT_LONG,
    LAYOUTS,
    MAX_BLOCKS_PER_SM,
    MAX_THREADS_PER_SM,
    NEWEST,
    OCCUPANCY_CAPS,
    PADS,
    PER_THREAD,
    PERSISTENT,
    RASTERS,
    REGISTERS_PER_SM,
    STATIC_SHARED_MAX,
    TILE_SIZES,
    VEC_SIZES,
    WARP,
    DeviceLimits,
    Kind,
    SpaceCall,
    occupancy_steps,
    register_budget,
    shared_optin,
)
from ..kinds.direct import (  # noqa: F401
    DIRECT_CAPS,
    DIRECT_FEW_ROWS_MIN,
    DIRECT_LONG,
    DIRECT_MAX_PER_THREAD,
    DIRECT_NARROW,
    DIRECT_SIDES,
    DIRECT_SIZES,
    DIRECT_TILES,
    FEW_ROWS_MAX,
    MAX_GRID_YZ,
    NARROW_TILE_ELEMENTS,
)
from ..kinds.flat import FLAT_MAX_THREADS, FLAT_SHORT_SIDE, FLAT_WORD  # noqa: F401
from ..kinds.prmt import (  # noqa: F401
    CHUNK,
    PRMT_SEGMENTS,
    PRMT_SERVED,
    PRMT_SIZES,
    PRMT_THREAD_BYTES,
    PRMT_THREADS,
    TALL_PER_THREAD,
    TALL_ROWS,
    TALL_WINDOWS,
    WIDE_MIN_ROW_BYTES,
    WIDE_ORDERED_TILE_BYTES,
    for_rows,
    prmt_halo,
    prmt_k,
    prmt_layout,
    rows_at_any_offset,
    tall_rows,
    wide_rows,
)
from ..kinds.regt import (  # noqa: F401
    REGT_BYTES,
    REGT_LANES,
    REGT_LONG,
    REGT_SIZES,
    fits_side as regt_fits_side,
    regt_side,
    regt_window,
)
from ..kinds.staged import (  # noqa: F401
    STAGED_MAX_THREADS,
    STAGED_SIZES,
    STAGED_THREAD_BYTES,
    STAGED_WORDS_AT_MAX_THREADS,
    staged_loads,
    staged_pitch,
    staged_rows,
    staged_words,
)
from ..kinds.tiled import (  # noqa: F401
    FEW_COLS_MAX,
    FEW_COLS_RATIO,
    MAX_MICROBLOCK_BYTES,
    MAX_REGISTERS,
    MAX_THREAD_BYTES,
    REGISTER_FILE,
)
from ..plans.dtypes import ELEMENT_SIZES, element_type

# Bumped whenever the meaning of a field changes: part of the version stored with results.
CONFIG_SCHEMA = 1


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
    min_blocks: int = 0  # blocks per SM the registers must allow (0: one, ptxas uncapped)
    kind: str = "tiled"  # a registered kind's name (autotranspose/kinds/)
    params: Any = None  # that kind's own parameters (`Kind.Params`); None: its defaults
    _derived: dict[str, int] = field(default=None, init=False, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if type(self.kind) is not str or self.kind not in kinds.names():
            raise ConfigError(
                f"kind={self.kind!r:.40} is not a kernel kind; the kinds are {list(kinds.names())}"
            )
        policy = kinds.get(self.kind)
        if self.params is None:
            object.__setattr__(self, "params", policy.Params())
        errors = list(_field_errors(self, policy))
        if errors:
            raise ConfigError("invalid KernelConfig: " + "; ".join(errors))
        object.__setattr__(self, "_derived", policy.derive(self))

    # --- its kind ---------------------------------------------------------------------------
    @property
    def policy(self) -> Kind:
        """The kind's policy (autotranspose/kinds/): rules, shape, template, search."""
        return kinds.get(self.kind)

    @property
    def spans_short_side(self) -> bool:
        """Whether one tile spans a skinny matrix's short side (flat tiles: the call's rows
        must be contiguous, `shapes.flat_fits`)."""
        return kinds.get(self.kind).spans_short_side(self)

    def flag(self, name: str) -> Any:
        """A kind flag of the written form (`to_dict`), at its default where not written:
        `c.flag("wide")` is True for a wide byte-permute or register-transpose kernel. For
        tools and tests that read configs as stored; code asks the kind."""
        defaults = kinds.flag_defaults()
        if name not in defaults:
            raise ConfigError(f"no kind flag {name!r}; the kind flags are {sorted(defaults)}")
        return self.policy.written(self.params).get(name, defaults[name])

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
        """Shared memory per block: static, exactly as the compiler reports it, or past
        STATIC_SHARED_MAX dynamic (`dynamic_smem`), for kinds that allow it."""
        return self._derived["smem"]

    @property
    def dynamic_smem(self) -> int:
        """Bytes of dynamic shared memory a launch passes (0: the kernel's is static): a
        kind with `dynamic_shared` declares its shared memory extern past the static limit."""
        smem = self._derived["smem"]
        return smem if smem > STATIC_SHARED_MAX and self.policy.dynamic_shared else 0

    @property
    def static_smem_bytes(self) -> int:
        """Static shared memory per block, as ptxas reports it."""
        return 0 if self.dynamic_smem else self._derived["smem"]

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
        k += self.policy.key_part(self.params)
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
        return self.policy.tiles(self, m, n)

    @property
    def any_offset(self) -> bool:
        """Whether the kernel runs on rows at any offset (realigning, staged and byte-permute
        kernels use their words whatever the call's alignment); otherwise `vec` must fit the
        call."""
        return self.policy.any_offset(self)

    def applies(self, m: int, n: int) -> bool:
        """Whether the kernel handles an m x n matrix (tiled kernels handle any; a flat
        byte-permute kernel rows of at most `tile_n` elements, or at most `tile_m` rows whose
        transposes are at least 4 bytes long, of any length when `ordered`)."""
        return self.policy.applies(self, m, n)

    def grid(
        self, m: int, n: int, batch: int = 1, multiprocessors: int = 132
    ) -> tuple[int, int, int]:
        """Launch grid: one block per tile (batches folded in), or with `persistent` = k,
        k blocks per multiprocessor that loop over the tiles. A direct kernel's grid has the
        raster's fast tiles on x, the others on y and the batch on z (each capped at what a
        launch allows: the kernel loops over the rest)."""
        return self.policy.grid(self, m, n, batch, multiprocessors)

    def fits(self, limits: DeviceLimits) -> bool:
        """Whether a device with these limits can run the kernel."""
        smem = self.smem_bytes
        if smem <= STATIC_SHARED_MAX:  # static: within what the device gives every block
            room = limits.max_shared_per_block
        else:  # dynamic, for kinds that declare it so, within what a block may opt in to
            room = limits.max_shared_optin if self.policy.dynamic_shared else 0
        return self.threads <= limits.max_threads_per_block and smem <= room

    # --- (de)serialisation: a config read from a database is untrusted input ----------------
    def to_dict(self) -> dict[str, Any]:
        """The written form: the shared fields and the kind spelled as flags (`Kind.written`),
        as stored, shipped and searched since the first schema. Flags that came later
        (OPTIONAL_FIELDS) are left out at their default, so every other config's written form
        (and what earlier versions read) is what it was."""
        out: dict[str, Any] = {name: getattr(self, name) for name in _SHARED}
        out.update(kinds.flag_defaults())
        out.update(self.policy.written(self.params))
        return {k: v for k, v in out.items() if OPTIONAL_FIELDS.get(k, _ABSENT) != v}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KernelConfig:
        """Build a config from its written form, untrusted: unknown keys and wrong types are
        rejected, and the kind flags must spell one kind."""
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"a kernel config must be a mapping of fields, got {type(data).__name__}"
            )
        flags = kinds.flag_defaults()
        known = {*_SHARED, *flags}
        unknown = sorted(set(map(str, data)) - known)
        if unknown:
            raise ConfigError(
                f"unknown KernelConfig field(s) {unknown}; known fields are {sorted(known)}"
            )
        for name, value in data.items():
            want = type(flags[name]) if name in flags else _SHARED_TYPES.get(name, int)
            if type(value) is not want:  # bool is an int subclass: compare types exactly
                raise ConfigError(
                    f"KernelConfig field {name!r} must be {want.__name__}, got "
                    f"{type(value).__name__} {value!r:.60}"
                )
        if "elem_bytes" not in data:
            raise ConfigError("KernelConfig needs 'elem_bytes' (1, 2, 4, 8 or 16)")
        return _from_written(data)

    def replace(self, **changes: Any) -> KernelConfig:
        """This config with `changes`: fields, or flags of the written form (`wide=True`,
        `direct=True`), which may change the kind and its parameters."""
        if set(changes) <= _FIELDS:
            if "kind" in changes and "params" not in changes:
                changes["params"] = None  # another kind: its defaults
            return dataclasses.replace(self, **changes)
        return _from_written({**self.to_dict(), **changes})

    def __str__(self) -> str:
        return self.key


# The fields every kind shares, as written, and the types of those that are not ints.
_SHARED: tuple[str, ...] = (
    *("elem_bytes", "tile_m", "tile_n", "vec", "per_thread", "pad", "layout", "raster"),
    *("cache", "conjugate", "persistent", "realign", "min_blocks"),
)
_SHARED_TYPES = {"layout": str, "raster": str, "cache": str, "conjugate": bool, "realign": bool}
_FIELDS = frozenset({*_SHARED, "kind", "params"})
_ABSENT = object()


def _from_written(data: Mapping[str, Any]) -> KernelConfig:
    """A config from its written form (shared fields and kind flags)."""
    flags = kinds.flag_defaults()
    kind, params = kinds.read({k: v for k, v in data.items() if k in flags})
    shared = {k: v for k, v in data.items() if k not in flags}
    return KernelConfig(**shared, kind=kind.name, params=params)


def _optional_fields() -> Mapping[str, Any]:
    """Fields of the written form added after configs were first stored, with the default
    `to_dict` leaves out: a reader that needs every field (the tuner's search space) fills
    them back in from here. The first schema wrote realign, flat, staged and prmt always."""
    first = {"realign", "flat", "staged", "prmt"}
    later = {k: v for k, v in kinds.flag_defaults().items() if k not in first}
    return MappingProxyType({"min_blocks": 0, **later})


OPTIONAL_FIELDS: Mapping[str, Any] = _optional_fields()


def _field_errors(c: KernelConfig, kind: Kind) -> Iterator[str]:
    """Every reason a config is invalid, each naming the field and what is allowed: the
    fields every kind shares here, its parameters' types, then the kind's own rules
    (`Kind.errors`)."""
    ints = ("elem_bytes", "tile_m", "tile_n", "vec", "per_thread", "pad", "persistent")
    ints += ("min_blocks",)
    for name in ints:
        v = getattr(c, name)
        if type(v) is not int:
            yield f"{name} must be an int, got {type(v).__name__}"
    for name, allowed in (("layout", LAYOUTS), ("raster", RASTERS), ("cache", CACHE_HINTS)):
        if getattr(c, name) not in allowed:
            yield f"{name}={getattr(c, name)!r} is not one of {list(allowed)}"
    for name in ("conjugate", "realign"):
        if type(getattr(c, name)) is not bool:
            yield f"{name} must be a bool"
    if type(c.params) is not kind.Params:
        yield (
            f"params must be the {kind.name} kind's {kind.Params.__name__}, got "
            f"{type(c.params).__name__}"
        )
        return
    for f in dataclasses.fields(c.params):
        value = getattr(c.params, f.name)
        if type(value) is not type(f.default):
            yield f"{kind.name} parameter {f.name} must be {type(f.default).__name__}, got {type(value).__name__}"
            return
    if any(type(getattr(c, n)) is not int for n in ints):
        return
    checks = (
        (
            c.elem_bytes in ELEMENT_SIZES,
            f"elem_bytes={c.elem_bytes} must be one of {list(ELEMENT_SIZES)}",
        ),
        (
            c.tile_m in kind.tile_m_values(c),
            f"tile_m={c.tile_m} must be one of {list(kind.tile_m_values(c))}",
        ),
        (
            c.tile_n in kind.tile_n_values(c),
            f"tile_n={c.tile_n} must be one of {list(kind.tile_n_values(c))}",
        ),
        (c.vec in VEC_SIZES, f"vec={c.vec} must be one of {list(VEC_SIZES)}"),
        (
            c.per_thread in PER_THREAD,
            f"per_thread={c.per_thread} must be one of {list(PER_THREAD)}",
        ),
        (c.pad in PADS, f"pad={c.pad} must be one of {list(PADS)}"),
        (
            c.persistent in PERSISTENT,
            f"persistent={c.persistent} must be one of {list(PERSISTENT)}",
        ),
        (
            c.min_blocks == 0 or 2 <= c.min_blocks <= MAX_BLOCKS_PER_SM,
            f"min_blocks={c.min_blocks} must be 0 (one block per SM, registers uncapped) or 2 to {MAX_BLOCKS_PER_SM}",
        ),
    )
    bad = [msg for ok, msg in checks if not ok]
    yield from bad
    if bad:
        return
    yield from kind.errors(c)


def cap_steps(c: KernelConfig) -> tuple[int, ...]:
    """The register caps (as min_blocks) the space holds for `c`'s kind and threads (a direct
    kernel's leave at least half the registers to what it is not loading)."""
    return c.policy.cap_steps(c)


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
    call = SpaceCall(et.size, device_limits(device), conjugate, max_vector, short_side)
    searches = [search for kind in kinds.all_kinds() for search in kind.searches()]
    for _, search in sorted(searches, key=lambda s: s[0]):
        yield from search(_launchable, call)


def _check_count(name: str, value: Any, meaning: str) -> None:
    """A cap given by the caller is a positive int: 0 would silently select another space."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ConfigError(
            f"{name}={value!r:.40} must be an int of at least 1 ({meaning}); leave it None "
            "for no limit"
        )


def _launchable(limits: DeviceLimits, *fields: Any, **named: Any) -> Iterator[KernelConfig]:
    """The config with these fields, then its persistent variants (where its kind has them)
    and its register-capped ones (where its kind is `capped`), if it is valid and `limits`
    can run it; nothing otherwise."""
    try:
        cfg = KernelConfig(*fields, **named)
    except ConfigError:
        return
    if cfg.fits(limits):
        yield cfg
        kind = cfg.policy
        for p in PERSISTENT[1:] if kind.persistent else ():
            yield cfg.replace(persistent=p)
        if kind.capped:
            for b in kind.cap_steps(cfg):
                yield cfg.replace(min_blocks=b)


# Each kind's part of the space on its own, for element size and limits (config_space
# composes them for a call).
def staged_space(
    elem_bytes: int, limits: DeviceLimits, conjugate: bool = False
) -> Iterator[KernelConfig]:
    """The staged configs (rows at any offset) for `elem_bytes`-byte elements."""
    return _staged.staged_space(_launchable, SpaceCall(elem_bytes, limits, conjugate, None, None))


def direct_space(
    elem_bytes: int, limits: DeviceLimits, conjugate: bool = False, short_side: int | None = None
) -> Iterator[KernelConfig]:
    """The direct configs for `elem_bytes`-byte elements (4 to 16), and with a `short_side`
    of at most DIRECT_NARROW[-1], the narrow tiles for every element size."""
    return _direct.direct_space(
        _launchable, SpaceCall(elem_bytes, limits, conjugate, None, short_side)
    )


def prmt_space(elem_bytes: int, limits: DeviceLimits) -> Iterator[KernelConfig]:
    """The byte-permute configs (1- and 2-byte rows at any offset) for `elem_bytes`."""
    return _prmt.prmt_space(_launchable, SpaceCall(elem_bytes, limits, False, None, None))


def flat_space(
    elem_bytes: int, limits: DeviceLimits, short_side: int, conjugate: bool = False
) -> Iterator[KernelConfig]:
    """The flat configs (skinny matrices) whose tile spans a short side of `short_side`."""
    return _flat.flat_space(_launchable, SpaceCall(elem_bytes, limits, conjugate, None, short_side))


def flat_prmt_space(
    elem_bytes: int, limits: DeviceLimits, short_side: int
) -> Iterator[KernelConfig]:
    """The flat byte-permute configs whose tile spans a short side of `short_side` elements."""
    return _prmt.flat_prmt_space(
        _launchable, SpaceCall(elem_bytes, limits, False, None, short_side)
    )


# The kinds' defaults and serving rules, building KernelConfigs (see each kind's module).
def staged_default(elem_bytes: int, conjugate: bool = False) -> KernelConfig | None:
    return _staged.staged_default(KernelConfig, elem_bytes, conjugate)


def prmt_default(elem_bytes: int, conjugate: bool = False) -> KernelConfig | None:
    return _prmt.prmt_default(KernelConfig, elem_bytes, conjugate)


def prmt_alternative(elem_bytes: int, conjugate: bool = False) -> KernelConfig | None:
    return _prmt.prmt_alternative(KernelConfig, elem_bytes, conjugate)


def tall_default(elem_bytes: int, short_side: int) -> KernelConfig | None:
    return _prmt.tall_default(KernelConfig, elem_bytes, short_side)


def wide_default(elem_bytes: int, short_side: int, exact: bool = True) -> KernelConfig | None:
    return _prmt.wide_default(KernelConfig, elem_bytes, short_side, exact)


def wider_tiles(elem_bytes: int, m: int, n: int) -> list[KernelConfig]:
    return _prmt.wider_tiles(KernelConfig, elem_bytes, m, n)


def flat_default(elem_bytes: int, short_side: int, conjugate: bool = False) -> KernelConfig | None:
    return _flat.flat_default(KernelConfig, elem_bytes, short_side, conjugate)


def direct_default(elem_bytes: int, m: int, n: int, conjugate: bool = False) -> KernelConfig | None:
    return _direct.direct_default(KernelConfig, elem_bytes, m, n, conjugate)


def narrow_default(elem_bytes: int, m: int, n: int, conjugate: bool = False) -> KernelConfig | None:
    return _direct.narrow_default(KernelConfig, elem_bytes, m, n, conjugate)


def narrow_configs(elem_bytes: int, m: int, n: int, conjugate: bool = False) -> list[KernelConfig]:
    return _direct.narrow_configs(KernelConfig, elem_bytes, m, n, conjugate)


def regt_default(elem_bytes: int, m: int, n: int, exact: bool = True) -> KernelConfig | None:
    return _regt.regt_default(KernelConfig, elem_bytes, m, n, exact)


def regt_alternative(c: KernelConfig | None) -> KernelConfig | None:
    return _regt.regt_alternative(c)


def regt_space(elem_bytes: int, limits: DeviceLimits, short_side: int) -> Iterator[KernelConfig]:
    """The register transposes for a short side of exactly `short_side` elements."""
    return _regt.regt_space(_launchable, SpaceCall(elem_bytes, limits, False, None, short_side))


def few_cols_default(
    elem_bytes: int, m: int, n: int, vec: int, conjugate: bool = False
) -> KernelConfig | None:
    return _tiled.few_cols_default(KernelConfig, elem_bytes, m, n, vec, conjugate)


def seed_config(elem_bytes: int) -> KernelConfig:
    """The seed documents' best kernel: 32x32 tile, +1 padding, a 32x8 thread block."""
    return _tiled.seed_config(KernelConfig, elem_bytes)


def default_config(elem_bytes: int, max_vector: int = 16, conjugate: bool = False) -> KernelConfig:
    """The untuned choice for an element size: the best config of a sweep on an H100 at
    8192x8192 (BENCHMARKS.md) for the widest vector the call allows."""
    _check_count("max_vector", max_vector, "the widest vector, in elements, the call allows")
    found = _tiled.default_config(KernelConfig, elem_bytes, max_vector, conjugate)
    if found is None:
        raise ConfigError(f"elem_bytes={elem_bytes} must be one of {list(ELEMENT_SIZES)}")
    return found


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
        max_shared_per_block=min(get(a.MAX_SHARED_MEMORY_PER_BLOCK), STATIC_SHARED_MAX),
        name=device.name(),
        compute_capability=device.compute_capability(),
        max_shared_optin=shared_optin(device.compute_capability()),
    )


# Fields a neighbour steps along, most often decisive first (H200 space checks: the best
# config of a class nobody tuned was mostly a tile or per_thread step from the served one).
_STEPPED: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("tile_m", TILE_SIZES),
    ("tile_n", TILE_SIZES),
    ("per_thread", PER_THREAD),
    ("vec", VEC_SIZES),
    ("persistent", PERSISTENT),
)
_SMEM_LAYOUTS: tuple[tuple[str, int], ...] = (("pad", 0), ("pad", 1), ("swizzle", 0))


def neighbours(config: KernelConfig) -> list[KernelConfig]:
    """The valid configs one step from `config`: one size field (tile, per_thread, vec,
    persistent, the register cap `min_blocks`) one value up or down its list, or one other
    choice (raster, shared-memory layout, cache hint) changed; most decisive fields first.
    A kind whose own parameters are searched (`Kind.param_steps`: in-place) steps those
    first. The tuner's local search and the first call's refinement walk these."""
    found: list[KernelConfig] = []

    def add(**change: Any) -> None:
        try:
            found.append(config.replace(**change))
        except ConfigError:
            pass  # not a kernel: the step leaves the space here

    kind = config.policy
    for params in kind.param_steps(config.params):
        add(params=params)
    for name, values in _STEPPED:
        values = kind.step_values(config, name, values, pair=False)
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
    if kind.capped and not config.persistent:
        # from uncapped registers every cap (which one pays is not monotonic: the staged
        # defaults gained at 64 registers and spilled at 40), else the next cap either way
        steps = (0, *kind.cap_steps(config))
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
    kind = config.policy
    for (a, av), (b, bv) in itertools.combinations(fields, 2):
        av = kind.step_values(config, a, av, pair=True) if a == "tile_m" else av
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

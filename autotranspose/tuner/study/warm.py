"""Warm starts: the configs a study measures first, before its sampler proposes any.

Known-good configs (the seed documents' kernel, each kind's default, what the lookup serves
today, the nearest classes' bests on this and other GPU models) are queued as the first trials,
so a short run starts from what already works and the sampler learns from them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import AutotransposeError
from ...kernels.config import (
    KernelConfig,
    default_config,
    direct_default,
    few_cols_default,
    narrow_configs,
    prmt_alternative,
    prmt_default,
    regt_default,
    seed_config,
    staged_default,
    tall_default,
    wide_default,
)
from ...kernels.shapes import ShapeClass
from ...runtime.device import DeviceInfo
from .space import SearchSpace

if TYPE_CHECKING:
    from ...store import Store

WARM_STARTS = 6  # nearest classes' bests per GPU model group (this one, the others) queued first


def known_good(
    elem_bytes: int,
    cls: ShapeClass,
    space: SearchSpace,
    *,
    device: DeviceInfo,
    store: Store | None = None,
    conjugate: bool = False,
    sides: tuple[int, int] | None = None,
) -> list[KernelConfig]:
    """Configs worth measuring first: the seed documents' kernel, the defaults (tiled, and
    the kind lookup serves this class by default; for few long rows, the tiles that fit the
    tuned shape's rows, from its `sides` (m, n)), what the lookup would serve today, and
    the bests of the nearest classes of this and every other GPU model we have results for
    (`lookup.warm_starts`), if this study can run them."""
    from ...dispatch import lookup, policy

    seed = seed_config(elem_bytes)
    if conjugate:
        seed = seed.replace(conjugate=True)
    found = [
        seed,
        default_config(elem_bytes, max_vector=cls.vec, conjugate=conjugate),
        # the flat kernel for a skinny class, the staged one for an unaligned class: on the
        # H200 the best of float32 4099x6007 is a staged kernel (85.7% of copy) that 40
        # trials started from tiled warm starts never reached (76.8%)
        policy.default_choice(elem_bytes, cls, device.limits, conjugate).config,
        # the other kinds for rows at any offset (only an unaligned class's space has them)
        staged_default(elem_bytes, conjugate),
        prmt_default(elem_bytes, conjugate),
        prmt_alternative(elem_bytes, conjugate),
        # tall rows: the tall byte-permute kernel (only a class of short rows has it)
        None if conjugate else tall_default(elem_bytes, cls.n),
        # few long rows: with the class's rows taken as the call's, the ordered wide kernel for
        # 1-byte rows too (the lookup default above is the class's run store)
        None if conjugate else wide_default(elem_bytes, cls.m),
        policy.few_rows_default(elem_bytes, *sides, cls.vec, conjugate) if sides else None,
        policy.few_rows_cover(elem_bytes, *sides, cls.vec, conjugate) if sides else None,
        # the direct kernel for the tuned shape (the seed documents' strategy, capped)
        direct_default(elem_bytes, *sides, conjugate) if sides else None,
        # few columns: the narrow tiled tile
        few_cols_default(elem_bytes, *sides, cls.vec, conjugate) if sides else None,
        # a side of 2-8 elements: the narrow direct tile
        *(narrow_configs(elem_bytes, *sides, conjugate) if sides else ()),
        # a short side of 1- and 2-byte elements where it won: the register transpose
        regt_default(elem_bytes, *sides) if sides and not conjugate else None,
    ]
    if store is not None:
        try:
            choice = lookup.choose(device, elem_bytes, cls, store=store, conjugate=conjugate)
        except AutotransposeError:
            choice = None
        if choice is not None and choice.source != "default":
            found.append(choice.config)
    found += [
        c.replace(conjugate=conjugate)
        for c in lookup.warm_starts(device, elem_bytes, cls, WARM_STARTS, store=store)
    ]
    return [c for c in dict.fromkeys(found) if c in space]


def problem_neighbours(
    device: DeviceInfo,
    cls: ShapeClass,
    problem: str,
    store: Store | None,
    elem_bytes: int | None = None,
) -> list[KernelConfig]:
    """The current results of `problem` (and of `elem_bytes`, where given) for the classes
    nearest `cls`, stored or shipped, this GPU model's first: up to 2 * `WARM_STARTS`. The
    warm starts of a problem lookup serves exact classes only (casts, in-place transposes):
    it serves none of them to `cls`, but they won its neighbours."""
    from ...dispatch import lookup
    from ...errors import StoreError

    entries = list(lookup.shipped(device.name))
    if store is not None:
        try:
            entries += store.entries(
                None, include_stale=False, elem_bytes=elem_bytes, problem=problem
            )
        except StoreError:
            pass
    near = sorted(
        (
            e
            for e in entries
            if e.problem == problem
            and not e.stale
            and (elem_bytes is None or e.elem_bytes == elem_bytes)
        ),
        key=lambda e: (e.device != device.name, cls.distance(e.shape_class), e.shape_class),
    )
    return [e.config for e in near[: 2 * WARM_STARTS]]

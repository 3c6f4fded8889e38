"""transpose_()'s programs: an in-place transpose signature (device, element size, shape,
conjugation, parameters) -> its passes as prepared launches, kept per signature.

The program is runtime/inplace.py's (`build`: plans/inplace.py's passes, launched as
kernels/inplace.py's `pass_launches` says), its parameters lookup's where the call gives none;
PERMUTE's cycles are found here, on the host, once per shape; its table (the cycles' leaders,
or their pieces) the call uploads once per device.
"""

from __future__ import annotations

from ..kinds.inplace import InplaceParams
from ..plans.inplace import RowCycles, row_cycles
from ..runtime.compiler import DeviceState
from ..runtime.inplace import InplaceProgram, build
from . import caches, lookup
from .lru import LRU

# PERMUTE's cycles by shape, host side, and the programs by signature: bounded like the
# other per-signature caches
_CYCLES: LRU[tuple[int, int], RowCycles] = LRU(256)
_PROGRAMS: LRU[tuple[object, ...], InplaceProgram] = LRU(1024)


def cycles_of(m: int, n: int, a: int) -> RowCycles:
    """PERMUTE's cycles for an m x n shape (kept per shape)."""
    found = _CYCLES.get((m, n))
    if found is None:
        found = _CYCLES.keep((m, n), row_cycles(m, n, a))
    return found


def program(
    state: DeviceState,
    batch: int,
    m: int,
    n: int,
    elem_bytes: int,
    conjugate: bool = False,
    params: InplaceParams | None = None,
    fused: bool = True,
) -> InplaceProgram:
    """The prepared steps of transposing `batch` m x n matrices of `elem_bytes`-byte elements
    in place on `state`'s device (kept per signature), with `params`, else what lookup serves
    the class (`lookup.inplace_choice`: tuned, shipped or the default). `fused=False`: the
    unfused passes (REVERSE, SPLIT, PERMUTE) even where a side's columns fit a COLS block,
    which `bench --inplace` times against the fused ones."""
    if params is None:
        params = lookup.inplace_choice(state.info, elem_bytes, batch, m, n).config.params
    key = (state.ordinal, batch, m, n, elem_bytes, conjugate, params, fused)
    found = _PROGRAMS.get(key)
    if found is None:
        built = build(state, batch, m, n, elem_bytes, conjugate, params, fused, cycles_of)
        found = _PROGRAMS.keep(key, built)
    return found


def clear() -> None:
    """Forget every program and the cycles found (kernels stay loaded; so do the device
    tables, which a captured graph may launch with)."""
    _PROGRAMS.clear()
    _CYCLES.clear()


caches.also_clear(clear)  # at.clear_caches() forgets them with the rest

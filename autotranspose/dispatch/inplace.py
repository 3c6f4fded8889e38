"""transpose_()'s programs: an in-place transpose signature (device, element size, shape,
conjugation, parameters) -> its passes as prepared launches, kept per signature.

The passes are plans/inplace.py's, launched as kernels/inplace.py's `pass_launches` says;
PERMUTE's cycles are found here, on the host, once per shape; its table (the cycles' leaders,
or their pieces) the call uploads once per device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..kernels.inplace import SHUFFLE_PAD, PassLaunch, cols_rows, pass_launches, staged_rows
from ..kinds.inplace import InplaceParams
from ..plans.inplace import PERMUTE, InplacePlan, RowCycles, plan_inplace, row_cycles
from ..runtime.compiler import DeviceState, precompile_inplace
from ..runtime.launch import Launch, make_inplace
from . import caches, lookup
from .lru import LRU

# PERMUTE's cycles by shape, host side, and the programs by signature: bounded like the
# other per-signature caches
_CYCLES: LRU[tuple[int, int], RowCycles] = LRU(256)
_PROGRAMS: LRU[tuple[object, ...], InplaceProgram] = LRU(1024)


@dataclass(frozen=True)
class InplaceStep:
    """One pass made ready: how it launches (`how`), its prepared launch, and for a pass
    with a table the key its device copy is kept under (per context). `bands`: a staged COLS
    pass's launches, made ready once per (context, second pointer, scratch): a call queues
    them, it does not pack them (calls/inplace.py)."""

    how: PassLaunch
    launch: Launch
    table_key: tuple[object, ...] | None = None
    bands: dict[tuple[int, int, int], list[Any]] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )

    @property
    def kind(self) -> str:
        return self.how.kind


@dataclass(frozen=True)
class InplaceProgram:
    """An in-place transpose's steps and the bytes of scratch they need (0 for none)."""

    plan: InplacePlan
    elem_bytes: int
    params: InplaceParams
    steps: tuple[InplaceStep, ...]
    scratch_bytes: int

    @property
    def table_bytes(self) -> int:
        """Device memory of the steps' tables (kept per device and shape, not per call)."""
        return sum(s.how.table.nbytes for s in self.steps if s.how.table is not None)


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
        built = _build(state, batch, m, n, elem_bytes, conjugate, params, fused)
        found = _PROGRAMS.keep(key, built)
    return found


def _build(
    state: DeviceState,
    batch: int,
    m: int,
    n: int,
    elem_bytes: int,
    conjugate: bool,
    params: InplaceParams,
    fused: bool,
) -> InplaceProgram:
    optin = state.info.limits.max_shared_optin
    # fused: every column pass is one COLS pass, a block's where its columns fit one, through
    # the scratch where they are taller (up to staged_rows)
    band_rows = max(cols_rows(optin), staged_rows()) if fused else 0
    plan = plan_inplace(batch, m, n, conjugate, band_rows, (optin - SHUFFLE_PAD) // elem_bytes)
    permutes = any(p.kind == PERMUTE for p in plan.passes)
    hows = pass_launches(
        plan,
        elem_bytes,
        params,
        state.info.multiprocessors,
        optin,
        cycles_of(m, n, plan.a) if permutes else None,
    )
    precompile_inplace(state, [h.spec for h in hows])
    steps = tuple(
        InplaceStep(
            h,
            make_inplace(state, h.spec, h.blocks, h.args, h.smem),
            None if h.table is None else (m, n, h.spec.piece, h.args.get("split", 0), len(h.table)),
        )
        for h in hows
    )
    scratch = max((h.scratch for h in hows), default=0)
    return InplaceProgram(plan, elem_bytes, params, steps, scratch)


def clear() -> None:
    """Forget every program and the cycles found (kernels stay loaded; so do the device
    tables, which a captured graph may launch with)."""
    _PROGRAMS.clear()
    _CYCLES.clear()


caches.also_clear(clear)  # at.clear_caches() forgets them with the rest

"""transpose_()'s programs: an in-place transpose signature (device, element size, shape,
conjugation, parameters) -> its passes as prepared launches, kept per signature.

The passes are plans/inplace.py's, launched as kernels/inplace.py's `pass_launches` says;
PERMUTE's table of cycle leaders is computed here, on the host, once per shape (the call
uploads it once per device).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.inplace import PassLaunch, pass_launches
from ..kinds import inplace as kind
from ..kinds.inplace import InplaceParams
from ..plans.inplace import PERMUTE, InplacePlan, cycle_leaders, plan_inplace
from ..runtime.compiler import DeviceState
from ..runtime.launch import Launch, make_inplace
from .lru import LRU

# PERMUTE's tables by shape, host side (4 bytes a cycle), and the programs by signature:
# bounded like the other per-signature caches
_LEADERS: LRU[tuple[int, int], np.ndarray] = LRU(256)
_PROGRAMS: LRU[tuple[object, ...], InplaceProgram] = LRU(1024)


@dataclass(frozen=True)
class InplaceStep:
    """One pass made ready: how it launches (`how`) and its prepared launch."""

    how: PassLaunch
    launch: Launch

    @property
    def kind(self) -> str:
        return self.how.kind


@dataclass(frozen=True)
class InplaceProgram:
    """An in-place transpose's steps, PERMUTE's cycle leaders (uint32, or None) and the
    bytes of row scratch it needs (a long-row SHUFFLE's row; 0 for none)."""

    plan: InplacePlan
    elem_bytes: int
    params: InplaceParams
    steps: tuple[InplaceStep, ...]
    leaders: np.ndarray | None
    scratch_bytes: int

    @property
    def scratch_total(self) -> int:
        """Device memory the call needs besides x: the row scratch and the leaders table."""
        table = 0 if self.leaders is None else 4 * len(self.leaders)
        return self.scratch_bytes + table


def leaders_of(m: int, n: int, a: int) -> np.ndarray:
    """PERMUTE's cycle leaders for an m x n shape (kept per shape)."""
    found = _LEADERS.get((m, n))
    if found is None:
        found = _LEADERS.keep((m, n), cycle_leaders(m, n, a))
    return found


def program(
    state: DeviceState,
    batch: int,
    m: int,
    n: int,
    elem_bytes: int,
    conjugate: bool = False,
    params: InplaceParams | None = None,
) -> InplaceProgram:
    """The prepared steps of transposing `batch` m x n matrices of `elem_bytes`-byte elements
    in place on `state`'s device (kept per signature)."""
    params = params if params is not None else kind.default(elem_bytes)
    key = (state.ordinal, batch, m, n, elem_bytes, conjugate, params)
    found = _PROGRAMS.get(key)
    if found is None:
        found = _PROGRAMS.keep(key, _build(state, batch, m, n, elem_bytes, conjugate, params))
    return found


def _build(
    state: DeviceState,
    batch: int,
    m: int,
    n: int,
    elem_bytes: int,
    conjugate: bool,
    params: InplaceParams,
) -> InplaceProgram:
    plan = plan_inplace(batch, m, n, conjugate)
    permutes = any(p.kind == PERMUTE for p in plan.passes)
    leaders = leaders_of(m, n, plan.a) if permutes else None
    hows = pass_launches(
        plan,
        elem_bytes,
        params,
        state.info.multiprocessors,
        state.info.limits().max_shared_optin,
        0 if leaders is None else len(leaders),
    )
    steps = tuple(
        InplaceStep(h, make_inplace(state, h.spec, h.blocks, h.args, h.smem)) for h in hows
    )
    scratch = max((h.row_bytes for h in hows), default=0)
    return InplaceProgram(plan, elem_bytes, params, steps, leaders, scratch)


def clear() -> None:
    """Forget every program (kernels stay loaded)."""
    _PROGRAMS.clear()

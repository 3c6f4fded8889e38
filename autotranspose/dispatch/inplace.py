"""transpose_()'s programs: an in-place transpose signature (device, element size, shape,
conjugation, parameters) -> its passes as prepared launches, kept per signature.

The program is runtime/inplace.py's (`build`: plans/inplace.py's passes, launched as
kernels/inplace.py's `pass_launches` says), its parameters lookup's where the call gives none;
PERMUTE's cycles are found here, on the host, once per shape; its table (the cycles' leaders,
or their pieces) the call uploads once per device.

The first call of a class nobody tuned or shipped (lookup's answer is the kind's default),
or whose result was measured on rows apart from the call's (`policy.inplace_raced`), times a
small portfolio on the call's own matrix (`choose`: `policy.inplace_race`, timed by
`firstcall.race`) and keeps the fastest for the class, in this process and in the tuning
database (`winners`, under the in-place problem), as transpose()'s first call does. Each
candidate is timed as a round trip that leaves x as it was: its program, then one that
undoes it (the same program for a square; for a rectangle, lookup's program of the n x m
view, the same for every candidate). `AUTOTRANSPOSE_FIRST_CALL=0` switches it off.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import DeviceError, KernelCompileError, KernelLaunchError
from ..kernels.config import KernelConfig
from ..kernels.shapes import ShapeClass
from ..kinds.inplace import InplaceParams
from ..plans.inplace import RowCycles, row_cycles
from ..runtime import driver as _driver
from ..runtime.compiler import DeviceState
from ..runtime.inplace import InplaceProgram, build
from . import caches, firstcall, lookup, policy, winners
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


@dataclass(frozen=True)
class Race:
    """What an in-place first call times on: `run(program)` queues a program on the call's
    own matrix (its tables and scratch had as a call has them) on `stream` in `ctx`;
    `nbytes`: the matrix's bytes; `dtype`: its dtype's name (the database row's)."""

    run: Callable[[InplaceProgram], None]
    stream: int | None
    ctx: int
    nbytes: int
    dtype: str


# What the first calls of this process timed, newest last: (device name, problem, class,
# Outcome: the chosen config and each candidate's median seconds a round trip). Bounded.
history: deque[tuple[str, str, ShapeClass, firstcall.Outcome[KernelConfig]]] = deque(maxlen=256)


class _RoundTrip:
    """A candidate as `firstcall.race` times it: its program on x, then `back`, which undoes
    it, so that x holds what it held after every run, however many the race makes. A pass
    that fails to launch in between leaves x partly transposed: that is raised, not skipped
    as a failed candidate is."""

    def __init__(self, there: InplaceProgram, back: InplaceProgram, race: Race) -> None:
        self.there, self.back, self.race = there, back, race

    def run(self, src: int, dst: int, stream: int | None, ctx: int) -> None:
        try:
            self.race.run(self.there)
            self.race.run(self.back)
        except KernelLaunchError as exc:
            raise DeviceError(
                f"a pass failed to launch while transpose_()'s first call timed its "
                f"candidates, so x may be left partly transposed: {exc}. Set "
                f"{firstcall.ENV_VAR}=0 to serve the default without timing"
            ) from exc


def choose(
    state: DeviceState,
    batch: int,
    m: int,
    n: int,
    elem_bytes: int,
    conjugate: bool,
    race: Race | None,
) -> tuple[InplaceParams, bool]:
    """The parameters an in-place call runs (lookup's; where `policy.inplace_raced` says so,
    the first call's winner on `race`), and whether they are settled for its
    signature (False under CUDA graph capture, which timing cannot run in: the next call asks
    again). `race` None: no measurement."""
    choice = lookup.inplace_choice(state.info, elem_bytes, batch, m, n)
    cls = policy.inplace_class(batch, m, n)
    guess = choice.config.params
    if race is None or not firstcall.enabled():
        return guess, True
    if not policy.inplace_raced(choice, cls, elem_bytes, m, n):
        return guess, True
    if _driver.is_capturing(race.stream):
        return guess, False
    square, problem = m == n, policy.inplace_problem(m, n)
    call = winners.Call(
        state.info, race.dtype, elem_bytes, (batch, m, n), cls, conjugate, problem=problem
    )

    def measure() -> winners.Winner | None:
        configs = policy.inplace_race(guess, elem_bytes, square)
        back = None if square else program(state, batch, n, m, elem_bytes, conjugate)
        runners: dict[KernelConfig, _RoundTrip] = {}
        for c in configs:
            try:
                there = program(state, batch, m, n, elem_bytes, conjugate, c.params)
            except KernelCompileError:  # a kernel that does not compile here: not raced
                continue
            runners[c] = _RoundTrip(there, there if back is None else back, race)
        outcome = firstcall.race(runners, configs[0], state, 0, 0, race.stream, race.ctx)
        if outcome is None:
            return None
        history.append((state.info.name, problem, cls, outcome))
        trip = outcome.seconds[outcome.best]  # two transposes, each reading and writing x
        gbps = 4 * race.nbytes / trip / 1e9 if trip else 0.0
        return winners.Winner(outcome.best, gbps, seconds=trip / 2 if trip else None)

    settled = winners.settle(call, measure)
    return (guess if settled is None else settled.config.params), True


def clear() -> None:
    """Forget every program and the cycles found (kernels stay loaded; so do the device
    tables, which a captured graph may launch with)."""
    _PROGRAMS.clear()
    _CYCLES.clear()


caches.also_clear(clear)  # at.clear_caches() forgets them with the rest

"""Which config a cast-transpose runs: its pair's result for the call's class
(`lookup.cast_choice`: tuned or measured here, shipped, else `policy.cast_default`), and for
a class with no result, the first call's measurement: `policy.cast_race` (lookup's guess,
then `kinds.cast.race_candidates`) timed on the call's own buffers, the winner kept for the class
in this process and in the tuning database (`winners`, under the pair's problem), as a
transpose's first call does, timed by `firstcall.race` (the GPU's time alone, behind a spin
kernel, the default staying unless another beats it again head to head: timed by events
around host-queued calls, the race served configs 5-15 points slower than the default to 4
of 40 calls of 58-150 MB on the H100, where a call takes the GPU about as long as the host
takes to queue it).

`_cast` asks once per signature, when it prepares the signature's launches; a hit of its
fast path runs what was prepared (no lookup). The class is the first launch's (batch, m, n)
with the widest vector its input side allows (sizes, pitches and pointer in input
elements, `shapes.call_vec`), as `autotranspose tune --cast` keys what it measures.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ..kernels.config import KernelConfig
from ..kernels.shapes import ShapeClass, call_vec, shape_class
from ..kinds import cast as cast_kind
from ..kinds.cast import Format, pair_code
from ..plans.cast import CastPlan
from ..runtime import driver as _driver
from ..runtime.compiler import DeviceState
from . import firstcall, lookup, policy, winners

# What the first calls of this process timed, newest last: (device name, problem, class,
# Outcome: the chosen config and each candidate's median seconds). For looking into a choice
# (dev/cast_race.py); bounded, so a long-running service does not grow it.
history: deque[tuple[str, str, ShapeClass, firstcall.Outcome[KernelConfig]]] = deque(maxlen=256)


def cast_class(plan: CastPlan, src: Format, x_ptr: int) -> ShapeClass:
    """The class a cast call's results are keyed by: its first launch (a host loop's launches
    share sizes and strides) as a batched transpose of input elements."""
    lc = plan.launches[0]
    pointer = x_ptr + lc.x0 * src.size
    vec = call_vec(src.size, lc.batch, lc.m, lc.n, lc.ld_x, lc.ld_o, lc.bs_x, lc.bs_o, (pointer,))
    return shape_class(lc.batch, lc.m, lc.n, vec)


def choose_config(
    state: DeviceState,
    plan: CastPlan,
    src: Format,
    dst: Format,
    x_ptr: int,
    both: bool,
    aligned_out: bool,
    race: Race | None = None,
) -> tuple[KernelConfig, bool]:
    """The config a cast call with no config given runs, and whether it is settled for the
    signature (False: a first call that could not measure, under graph capture: ask again
    next call). A call whose launches do not transpose (a strided cast of the same order)
    runs the default: what is tuned and keyed are transposing launches. `race` (None: no
    measurement) times the call's launches for a config on its own buffers."""
    if not plan.launches[0].transpose:
        return policy.cast_default(src, dst, aligned_out), True
    cls = cast_class(plan, src, x_ptr)
    code = pair_code(src, dst)
    choice = lookup.cast_choice(state.info, code, cls, both=both, aligned_out=aligned_out)
    if race is None or not firstcall.enabled() or not policy.is_guess(choice, cls):
        return choice.config, True
    if _driver.is_capturing(race.stream):
        return choice.config, False
    lc = plan.launches[0]
    call = winners.Call(
        state.info, src.name, src.size, (lc.batch, lc.m, lc.n), cls, False,
        problem=cast_kind.problem(code, both),
    )  # fmt: skip

    limits = state.info.limits

    def runnable(c: KernelConfig) -> bool:
        return policy.cast_runs(c, code, limits)

    def measure() -> winners.Winner | None:
        configs = policy.cast_race(choice.config, src, dst, limits)
        outcome = firstcall.measure(state, configs, race.runner, 0, 0, race.stream, race.ctx)
        if outcome is None:
            return None
        history.append((state.info.name, call.problem, cls, outcome))
        seconds = outcome.seconds[outcome.best]
        gbps = race.nbytes / seconds / 1e9 if seconds else 0.0
        return winners.Winner(outcome.best, gbps, seconds=seconds)

    settled = winners.settle(call, measure, runnable)
    return (choice.config if settled is None else settled.config), True


@dataclass(frozen=True)
class Race:
    """What a cast's first call times: `runner(config)` launches the call for a config on its
    own buffers (a `firstcall.Runner`), on `stream` in `ctx`; `nbytes` read and written."""

    runner: Callable[[KernelConfig], firstcall.Runner]
    stream: int | None
    ctx: int
    nbytes: int

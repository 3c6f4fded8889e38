"""Which kernels a permute plan runs: its steps, chosen once per call signature and kept.

A plan's pass becomes steps: a transpose pass is the launch `transpose.batched_launch` picks
for its (batch, m, n) (lookup, flat fit, first-call measurement, the same cache); rows are a
generated row copy; a packed or gather pass one launch of its kernel; a contiguous copy
``cuMemcpyDtoDAsync``. Where the plan names alternatives (passes that move the same bytes,
`plan.ALT_*`), the first call of the signature times each against the plan's own pass on its
own buffers and stream (`race`) and keeps the fastest for this process.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import _driver, _firstcall as firstcall, _lookup as lookup
from .._arrays import NDView
from .._codegen import render_support
from .._compiler import DeviceState, Kernel, _cached, load_source
from .._launch import Launch, make_gather, make_packed, make_row_copy, make_runs_copy
from .._plan import COPY, GATHER, PACKED, TRANSPOSE, Dim, Pass, Plan, plan_permute
from .._vbox import make_vbox
from ..errors import AutotransposeError, KernelLaunchError
from . import caches
from .transpose import batched_launch

# The race of a first call (`race`). Timing a few microseconds of kernels by events around
# calls queued from Python measures the host's launch rate where the host is the slower
# side: the K/V head swap (16 MB, L2-resident, ~6 us a call) ranked its passes 2-6 points
# apart by noise and served a packed box at 77.9% of copy where the row copy ran at 95.2 (an
# H100). So each timed batch waits behind a spin of the GPU (`at_spin`, twice the host's time
# to queue the batch, at most SPIN_MAX_S) and times the GPU alone; the candidates are timed
# in ROUNDS rounds, each round in another order; and the fastest alternative replaces the
# plan's pass only if it then wins again head to head: CONFIRM_ROUNDS pairs of batches, the
# order alternating, its median faster by CONFIRM_MARGIN and faster in CONFIRM_WINS of the
# pairs (the plan's pass was chosen for a reason; the outcome's seconds for the two are
# those of the pairs). Timed so, one pass's figure repeated within 0.7 points over three
# first calls (H100: the h = 2 swap's row copy 110.8 / 110.1 / 110.4% of copy), while the
# packed box beat the row copy of h = 4-7 by 1.6-2.4 points in the steady state: a 2%
# margin kept the row copy in 9 of 12 such first calls, so the margin is 1%.
ROUNDS = firstcall.ROUNDS
CONFIRM_ROUNDS, CONFIRM_WINS, CONFIRM_MARGIN = 8, 6, 0.01
SPIN_MAX_S, SPIN_MIN_S = 2e-3, 20e-6

# What the first calls of this process chose between, newest last: (device name, the plan,
# Outcome: the chosen pass and each pass's median seconds). For looking into a choice;
# bounded, so a long-running service does not grow it.
history: deque[tuple[str, Plan, firstcall.Outcome[Pass]]] = deque(maxlen=256)


@dataclass(frozen=True)
class Step:
    """One pass made runnable: `launch` at each (input, output) byte offset, or, with no
    launch, a device-to-device copy of `nbytes` there."""

    launch: Launch | None
    nbytes: int
    offsets: tuple[tuple[int, int], ...]

    def run(self, src: int, dst: int, stream: int | None, ctx: int) -> None:
        launch = self.launch
        if launch is None:
            for i, o in self.offsets:
                _driver.memcpy_dtod_async(dst + o, src + i, self.nbytes, stream, ctx)
            return
        for i, o in self.offsets:
            launch.run(src + i, dst + o, stream, ctx)


# make_transpose(elem_bytes, (batch, m, n), (ld_in, ld_out, bs_in, bs_out), src, dst,
#                (outer, outer2))
MakeTranspose = Callable[
    [int, tuple[int, int, int], tuple[int, int, int, int], int, int, tuple[Dim, Dim]], Any
]
# make_copy(elem_bytes, batch, m, n, ld_in, ld_out, bs_in, bs_out, outer, os_in, os_out,
#           outer2, os2_in, os2_out, realign=False)
MakeCopy = Callable[..., Any]
# make_gather(elem_bytes, dims); make_packed(elem_bytes, dims, box, src, dst, pipelined,
# vectors, scatter)
MakeGather = Callable[[int, tuple[Dim, ...]], Any]
MakePacked = Callable[
    [int, tuple[Dim, ...], tuple[int, ...], int, int, bool, tuple[int, int], int], Any
]


@dataclass(frozen=True)
class Steps:
    """The steps of one plan as one runner (what `firstcall.race` times)."""

    steps: tuple[Step, ...]

    def run(self, src: int, dst: int, stream: int | None, ctx: int) -> None:
        for step in self.steps:
            step.run(src, dst, stream, ctx)


def build_steps(
    plan: Plan,
    src: int,
    dst: int,
    make_transpose: MakeTranspose,
    make_copy: MakeCopy,
    make_gather: MakeGather,
    make_packed: MakePacked,
) -> tuple[Step, ...]:
    """The steps that run `plan` from `src` into `dst` (device pointers). A launch serves
    every host-loop index, so it is made at the least aligned of their pointer pairs: a
    real launch's start, since a first-call measurement runs that whole launch on it. A
    transpose launch also walks its outer dims, whose matrices start at further pointers;
    `transpose.batched_launch` derives its vector from those as well (a measurement started at one
    of them would write past the end of out)."""
    steps = []
    for p in plan.passes:
        offsets = tuple(p.offsets())
        if p.contiguous:
            steps.append(Step(None, p.n * p.elem_bytes, offsets))
            continue
        i, o = weakest(offsets, src, dst)
        if p.kind == TRANSPOSE:  # its outer dims' pointers: the api derives the vector from them
            shape, strides = (p.batch, p.m, p.n), (p.ld_in, p.ld_out, p.bs_in, p.bs_out)
            launch = make_transpose(
                p.elem_bytes, shape, strides, src + i, dst + o, (p.outer, p.outer2)
            )
        elif p.kind == GATHER:
            launch = make_gather(p.elem_bytes, p.dims)
        elif p.kind == PACKED:
            launch = make_packed(
                p.elem_bytes, p.dims, p.box, src + i, dst + o, p.pipelined, p.vectors, p.scatter
            )  # words if aligned; the vector box (`_vbox`) where the plan gave vectors
        else:
            assert p.kind == COPY, p.kind
            o, o2 = p.outer, p.outer2
            launch = make_copy(
                p.elem_bytes,
                p.batch,
                p.m,
                p.n,
                p.ld_in,
                p.ld_out,
                p.bs_in,
                p.bs_out,
                o.extent,
                o.in_stride,
                o.out_stride,
                o2.extent,
                o2.in_stride,
                o2.out_stride,
                realign=p.realign,
            )
        steps.append(Step(launch, 0, offsets))
    return tuple(steps)


def weakest(offsets: Sequence[tuple[int, int]], src: int, dst: int) -> tuple[int, int]:
    """The (input, output) offsets whose pointers are aligned to the fewest bytes (up to 16)."""

    def alignment(pair: tuple[int, int]) -> int:
        bits = ((src + pair[0]) | (dst + pair[1])) & 15
        return bits & -bits if bits else 16

    return min(offsets, key=alignment)


def plan_of(
    xv: NDView, axes: tuple[int, ...], out_strides: tuple[int, ...] | None, out_ptr: int
) -> Plan:
    return planned(xv.shape, axes, xv.et.size, xv.strides, out_strides, xv.ptr & 15, out_ptr & 15)


@functools.lru_cache(maxsize=4096)
def planned(
    shape: tuple[int, ...],
    axes: tuple[int, ...],
    e: int,
    in_strides: tuple[int, ...],
    out_strides: tuple[int, ...] | None,
    in_align: int,
    out_align: int,
) -> Plan:
    """plan_permute, once per signature (it reads only the pointers' alignment; a refused
    call raises every time: exceptions are not cached)."""
    return plan_permute(shape, axes, e, in_strides, out_strides, in_ptr=in_align, out_ptr=out_align)


def program(steps: Sequence[Step], ctx: int) -> _driver.Prepared | _driver.Program:
    """A call's steps made ready in `ctx` as what the fast path hands the driver: the one
    prepared launch itself where that is the whole call, else a program of every launch
    (and copy) at its offsets, run in one native call."""
    if len(steps) == 1 and steps[0].launch is not None and steps[0].offsets == ((0, 0),):
        return steps[0].launch.prepared(ctx)
    return _driver.Program(
        ctx,
        [
            (None if st.launch is None else st.launch.prepared(ctx), i, o, st.nbytes)
            for st in steps
            for i, o in st.offsets
        ],
    )


def steps_for(
    plan: Plan, xv: NDView, ov_ptr: int, state: DeviceState, stream: int | None, ctx: int
) -> tuple[Step, ...]:
    """The steps of `plan` for this call signature, built on first use."""
    return steps_final(plan, xv, ov_ptr, state, stream, ctx)[0]


def steps_final(
    plan: Plan, xv: NDView, ov_ptr: int, state: DeviceState, stream: int | None, ctx: int
) -> tuple[tuple[Step, ...], bool]:
    """`steps_for`, and whether they are final for the signature (not while a choice
    waits for a call outside graph capture)."""
    caches.fresh()
    key = (xv.device, plan, xv.ptr & 15, ov_ptr & 15, lookup.generation)
    steps = caches.steps.get(key)
    if steps is not None:
        return steps, True
    _, steps, final = served(plan, state, xv.ptr, ov_ptr, stream, ctx)
    if final:
        with caches.lock:
            caches.keep(caches.steps, key, steps)
    return steps, final


def served(
    plan: Plan, state: DeviceState, src: int, dst: int, stream: int | None, ctx: int
) -> tuple[Plan, tuple[Step, ...], bool]:
    """What permute() runs for `plan` from `src` into `dst`: (the plan as run, its steps,
    whether they are final for the signature). A plan with alternatives has them measured
    here against its own pass (the module's docstring); while the stream is being captured
    into a graph, or with first-call measurement off, the plan's own pass runs (captured: not
    final, a later call measures). The bench times what this returns."""
    own = build(plan, state, src, dst, stream, ctx)
    if not plan.alternatives:
        return plan, own, True
    if not firstcall.enabled():  # held off for this thread only: a later call may measure
        return plan, own, not firstcall.globally_enabled()
    if _driver.is_capturing(stream):
        return plan, own, False
    guess = plan.passes[0]
    runners = {guess: Steps(own)}
    for p in plan.alternatives:
        try:
            runners[p] = Steps(build(plan.taking(p), state, src, dst, stream, ctx))
        except AutotransposeError:  # e.g. a kernel that does not fit this device: not a candidate
            continue
    outcome = race(runners, guess, state, src, dst, stream, ctx)
    if outcome is None:  # nothing ran (each launch failed): the plan's own pass, as before
        return plan, own, True
    history.append((state.info.name, plan, outcome))
    if outcome.best == guess:
        return plan, own, True
    return plan.taking(outcome.best), runners[outcome.best].steps, True


def spinner(state: DeviceState) -> Kernel:
    """`at_spin` (templates/common/support.cu.j2) on `state`'s architecture, loaded once."""
    return _cached(
        state.arch,
        "at_spin",
        lambda: load_source(state.arch, render_support(), ["at_spin"])["at_spin"],
    )


def race(
    runners: Mapping[Pass, firstcall.Runner],
    guess: Pass,
    state: DeviceState,
    src: int,
    dst: int,
    stream: int | None,
    ctx: int,
    budget_s: float = firstcall.BUDGET_S,
) -> firstcall.Outcome[Pass] | None:
    """Time each of `runners` (the plan's pass `guess` and its alternatives) on the call's
    buffers and stream and return the fastest, the GPU's time only (ROUNDS, CONFIRM_*,
    SPIN_*: why and how). A runner whose launch fails is left out; None when none ran. The
    caller checks that the stream is not being captured (timing synchronises)."""
    if not runners:
        return None
    spin = spinner(state)
    gpu: dict[Pass, float] = {}
    host: dict[Pass, float] = {}
    reps: dict[Pass, int] = {}
    spent = 0.0
    with firstcall._measuring, _driver.on_context(ctx):
        start, end = _driver.Event(), _driver.Event()

        def waits(p: Pass) -> float:
            """The spin before a batch of `p`: twice the host's time to queue the batch."""
            return min(SPIN_MAX_S, max(SPIN_MIN_S, 2 * reps[p] * host[p]))

        def timed(p: Pass) -> float:
            """Seconds a call of `p` takes the GPU: a batch of reps[p] calls behind a spin."""
            nonlocal spent
            wait = waits(p)
            spin.call((1, 1, 1), (1, 1, 1), "<Q", int(wait * 1e9), stream=stream)
            start.record(stream)
            for _ in range(reps[p]):
                runners[p].run(src, dst, stream, ctx)
            end.record(stream)
            end.synchronize()
            t = end.ms_since(start) / 1e3
            spent += t + wait
            return t / reps[p]

        for p, runner in runners.items():  # warm-up: what a call costs the host and the GPU
            try:
                runner.run(src, dst, stream, ctx)
                _driver.synchronize(ctx)
                t0 = time.perf_counter()
                start.record(stream)
                runner.run(src, dst, stream, ctx)
                end.record(stream)
                host[p] = time.perf_counter() - t0
                end.synchronize()
            except KernelLaunchError:
                continue
            gpu[p] = end.ms_since(start) / 1e3
            spent += 2 * gpu[p]
            reps[p] = max(1, min(64, int(firstcall.MIN_TIMED_S / max(gpu[p], 1e-7))))
        if not gpu:
            return None
        order = list(gpu)
        times: dict[Pass, list[float]] = {p: [] for p in order}
        round_s = sum(reps[p] * gpu[p] + waits(p) for p in order)
        for r in range(ROUNDS):
            if spent + round_s > budget_s:
                break
            for p in order[r % len(order) :] + order[: r % len(order)]:
                times[p].append(timed(p))
        medians = {p: statistics.median(v) if v else gpu[p] for p, v in times.items()}
        best = min(medians, key=medians.__getitem__)
        if guess in medians and best != guess:
            best, rival = guess, best
            if medians[rival] * (1 + firstcall.MARGIN) < medians[guess]:
                pair_s = sum(reps[p] * gpu[p] + waits(p) for p in (guess, rival))
                head: dict[Pass, list[float]] = {guess: [], rival: []}
                for r in range(CONFIRM_ROUNDS):
                    if spent + pair_s > budget_s:
                        break
                    for p in (guess, rival) if r % 2 == 0 else (rival, guess):
                        head[p].append(timed(p))
                if len(head[rival]) == CONFIRM_ROUNDS:
                    wins = sum(a < g for a, g in zip(head[rival], head[guess], strict=True))
                    medians = {**medians, **{p: statistics.median(v) for p, v in head.items()}}
                    if wins >= CONFIRM_WINS and medians[rival] < medians[guess] * (
                        1 - CONFIRM_MARGIN
                    ):
                        best = rival
    return firstcall.Outcome(best, {p: medians.get(p) for p in runners}, spent)


def build(
    plan: Plan, state: DeviceState, src: int, dst: int, stream: int | None, ctx: int
) -> tuple[Step, ...]:
    """The steps of `plan` on `state`'s device, as permute() runs them (the bench times these
    very steps)."""

    def make_transpose(e: int, shape: Any, strides: Any, s: int, d: int, outer: Any) -> Launch:
        return batched_launch(state, e, shape, strides, s, d, stream, ctx, tuple(outer))

    def make_copy(*args: int, realign: bool = False) -> Launch:
        return (make_runs_copy if realign else make_row_copy)(state, *args)

    def gather(e: int, dims: tuple[Dim, ...]) -> Launch:
        return make_gather(state, e, dims)

    def packed(
        e: int,
        dims: tuple[Dim, ...],
        box: tuple[int, ...],
        s: int,
        d: int,
        pipelined: bool,
        vectors: tuple[int, int],
        scatter: int,
    ) -> Launch:
        if vectors[0]:
            return make_vbox(state, e, dims, box, vectors, s, d, scatter)
        return make_packed(state, e, dims, box, s, d, pipelined)

    return build_steps(plan, src, dst, make_transpose, make_copy, gather, packed)


caches.also_clear(planned.cache_clear)

"""Which kernels a permute plan runs: its steps, chosen once per call signature and kept.

A plan's pass becomes steps: a transpose pass is the launch `transpose.batched_launch` picks
for its (batch, m, n) (lookup, flat fit, first-call measurement, the same cache); rows are a
generated row copy; a packed or gather pass one launch of its kernel; a contiguous copy
``cuMemcpyDtoDAsync``. Where the plan names alternatives (passes that move the same bytes,
`plan.ALT_*`; `policy.permute_race`), the first call of the signature times each against the plan's own pass on its
own buffers and stream (`race`) and keeps the fastest for this process.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import AutotransposeError
from ..plans.boxes import Dim
from ..plans.permute import COPY, GATHER, PACKED, TRANSPOSE, Pass, Plan, plan_permute
from ..runtime import driver as _driver
from ..runtime.arrays import NDView
from ..runtime.compiler import DeviceState, precompile_specs
from ..runtime.launch import (
    Launch,
    make_gather,
    make_packed,
    make_row_copy,
    make_runs_copy,
    make_vbox,
)
from . import caches, firstcall, lookup, policy
from .transpose import batched_launch

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
# vectors, scatter, pad, realign_out)
MakeGather = Callable[[int, tuple[Dim, ...]], Any]
MakePacked = Callable[
    [int, tuple[Dim, ...], tuple[int, ...], int, int, bool, tuple[int, int], int, int, bool], Any
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
                p.elem_bytes,
                p.dims,
                p.box,
                src + i,
                dst + o,
                p.pipelined,
                p.vectors,
                p.scatter,
                p.pad,
                p.realign_out,
            )  # words if aligned; the vector box (`_vbox`) where the plan gave vectors
        else:
            assert p.kind == COPY, p.kind
            launch = make_copy(*p.copy_args(), realign=p.realign)
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
    steps = caches.steps.recent(key)
    if steps is not None:
        return steps, True
    _, steps, final = served(plan, state, xv.ptr, ov_ptr, stream, ctx)
    if final:
        with caches.lock:
            caches.steps.keep(key, steps)
    return steps, final


def served(
    plan: Plan, state: DeviceState, src: int, dst: int, stream: int | None, ctx: int
) -> tuple[Plan, tuple[Step, ...], bool]:
    """What permute() runs for `plan` from `src` into `dst`: (the plan as run, its steps,
    whether they are final for the signature). A plan with alternatives has them measured
    here against its own pass (the module's docstring); while the stream is being captured
    into a graph, or with first-call measurement off, the plan's own pass runs (captured: not
    final, a later call measures). The bench times what this returns."""
    rivals = policy.permute_race(plan)
    if rivals and firstcall.enabled() and not _driver.is_capturing(stream):
        _precompile_boxes(state, (*plan.passes, *rivals), src, dst)
    own = build(plan, state, src, dst, stream, ctx)
    if not rivals:
        return plan, own, True
    if not firstcall.enabled():  # held off for this thread only: a later call may measure
        return plan, own, not firstcall.globally_enabled()
    if _driver.is_capturing(stream):
        return plan, own, False
    guess = plan.passes[0]
    runners = {guess: Steps(own)}
    for p in rivals:
        try:
            runners[p] = Steps(build(plan.taking(p), state, src, dst, stream, ctx))
        except AutotransposeError:  # e.g. a kernel that does not fit this device: not a candidate
            continue
    outcome = firstcall.race(runners, guess, state, src, dst, stream, ctx)
    if outcome is None:  # nothing ran (each launch failed): the plan's own pass, as before
        return plan, own, True
    history.append((state.info.name, plan, outcome))
    if outcome.best == guess:
        return plan, own, True
    return plan.taking(outcome.best), runners[outcome.best].steps, True


def _precompile_boxes(state: DeviceState, passes: tuple[Pass, ...], src: int, dst: int) -> None:
    """Compile the box kernels of a first call's race at once, nvcc calls in parallel
    (`precompile_specs`): each candidate box is a kernel of its own, and compiled one after
    another they held a first call for seconds. A spec that cannot be made is left for the
    build that follows to report."""
    specs = []
    for p in passes:
        if p.kind != PACKED:
            continue
        try:
            specs.append(lookup.packed_kernel(p, src, dst))
        except AutotransposeError:
            continue
    precompile_specs(state, specs)


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
        pad: int,
        realign_out: bool,
    ) -> Launch:
        if vectors[0]:
            return make_vbox(state, e, dims, box, vectors, s, d, scatter, pad)
        return make_packed(state, e, dims, box, s, d, pipelined, realign_out)

    return build_steps(plan, src, dst, make_transpose, make_copy, gather, packed)


caches.also_clear(planned.cache_clear)

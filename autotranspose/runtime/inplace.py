"""An in-place transpose's program: its passes as prepared launches, and their queueing.

`build` makes the passes plans/inplace.py orders, launched as kernels/inplace.py's
`pass_launches` says, ready on one device; `queue` runs them on a matrix with the device
tables and the scratch the caller owns (`upload_table`: a table's upload), or `native` makes
them one `driver.Program` (one C call). transpose_() keeps programs per signature
(dispatch/inplace.py) and its tables and scratch per device and stream (calls/inplace.py);
the tuner (`tuner/inplacemeasure.py`) times the same programs on buffers of its own. Like
`launch`, this knows nothing of lookup, the store or the tuner: it runs the parameters it is
given.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..kernels.inplace import (
    ARG_FORMAT,
    ARG_NAMES,
    SHUFFLE_PAD,
    STAGED_ZERO,
    PassLaunch,
    cols_rows,
    pass_launches,
    runs_side_rows,
    staged_rows,
)
from ..kinds.inplace import InplaceParams
from ..plans.inplace import (
    PERMUTE,
    InplacePlan,
    RowCycles,
    plan_inplace,
    row_cycles,
)
from . import driver as _driver
from .compiler import DeviceState, precompile_specs
from .launch import Launch, make_inplace

# (context, second pointer, scratch) triples a staged COLS pass keeps its launches made
# ready for (a call's scratch is per stream: a few are live at a time)
BANDS_KEPT = 8


@dataclass(frozen=True)
class InplaceStep:
    """One pass made ready: how it launches (`how`), its prepared launch, and for a pass
    with a table the key its device copy is kept under (per context). `bands`: a staged COLS
    pass's launches, made ready once per (context, second pointer, scratch): a call queues
    them, it does not pack them."""

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


Cycles = Callable[[int, int, int], RowCycles]  # (m, n, a) -> PERMUTE's cycles


def passes(
    state: DeviceState,
    batch: int,
    m: int,
    n: int,
    elem_bytes: int,
    conjugate: bool,
    params: InplaceParams,
    fused: bool = True,
    cycles: Cycles = row_cycles,
) -> tuple[InplacePlan, list[PassLaunch]]:
    """The plan of transposing `batch` m x n matrices in place on `state`'s device, and how
    each of its passes launches (nothing compiled or loaded). `fused=False`: the unfused
    passes (REVERSE, SPLIT, PERMUTE) even where a side's columns fit a COLS block."""
    optin = state.info.limits.max_shared_optin
    # fused: every column pass is one COLS pass, a block's where its columns fit one, through
    # the scratch where they are taller (up to staged_rows)
    band_rows = max(cols_rows(optin), staged_rows()) if fused else 0
    row_elems = (optin - SHUFFLE_PAD) // elem_bytes
    plan = plan_inplace(batch, m, n, conjugate, band_rows, row_elems, runs_side_rows())
    permutes = any(p.kind == PERMUTE for p in plan.passes)
    hows = pass_launches(
        plan,
        elem_bytes,
        params,
        state.info.multiprocessors,
        optin,
        cycles(m, n, plan.a) if permutes else None,
        cluster=cluster_max(state.info.compute_capability),
    )
    return plan, hows


def cluster_max(compute_capability: tuple[int, int]) -> int:
    """The most blocks a COLS cluster takes on a GPU of this compute capability: 8 (the
    portable size) from sm_90, which has clusters; 0 before it."""
    return 8 if tuple(compute_capability) >= (9, 0) else 0


def build(
    state: DeviceState,
    batch: int,
    m: int,
    n: int,
    elem_bytes: int,
    conjugate: bool,
    params: InplaceParams,
    fused: bool = True,
    cycles: Cycles = row_cycles,
) -> InplaceProgram:
    """The program of `passes`, its kernels compiled (in parallel) and loaded: a
    CompileError or KernelLoadError where one of them fails."""
    plan, hows = passes(state, batch, m, n, elem_bytes, conjugate, params, fused, cycles)
    precompile_specs(state, [h.spec for h in hows])
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


def upload_table(step: InplaceStep, ctx: int) -> _driver.Allocation:
    """A step's table (`step.how.table`) copied to new device memory in `ctx`."""
    table = np.ascontiguousarray(step.how.table, dtype=np.uint32)
    found = _driver.Allocation(table.nbytes, ctx)
    with _driver.on_context(ctx):
        _driver.memcpy_htod(found.ptr, table.ctypes.data, table.nbytes)
    return found


def queue(
    prog: InplaceProgram,
    ptr: int,
    ctx: int,
    handle: int | None,
    tables: list[int],
    scratch: int,
    mark: Callable[[int], None] | None = None,
) -> None:
    """Queue `prog`'s passes on matrix memory `ptr` in `ctx` on stream `handle`, in order,
    with each step's device table (`tables`, 0 for a step without one) and `scratch` (at
    least `prog.scratch_bytes`). `mark(k)`, if given, is called before pass k and after the
    last (k = len(steps)): `bench --inplace` records its events there to time each pass."""
    for k, (items, second) in enumerate(launches(prog, tables, ctx, scratch)):
        if mark is not None:
            mark(k)
        for item in items:
            if isinstance(item, tuple):  # a long-row SHUFFLE's group copied to the scratch
                _driver.memcpy_dtod_async(scratch, ptr + item[0], item[1], handle, ctx)
            else:
                _driver.launch_transpose(item, ptr, second, handle)
    if mark is not None:
        mark(len(prog.steps))


def native(prog: InplaceProgram, tables: list[int], ctx: int, scratch: int) -> _driver.Program:
    """`prog`'s passes as one program run with (x, 0): each launch's second pointer and each
    row copy's target are absolute (the tables, the scratch), x's offsets relative."""
    steps: list[tuple[_driver.Prepared | None, int, int, int]] = []
    for items, second in launches(prog, tables, ctx, scratch):
        for item in items:
            if isinstance(item, tuple):
                steps.append((None, item[0], scratch, item[1]))
            else:
                steps.append((item, 0, second, 0))
    return _driver.Program(ctx, steps)


# A pass's prepared launches in order, and (a long-row SHUFFLE) before each the copy of its
# group of rows to the scratch, as (byte offset in x, bytes)
_Items = list[Any]


def launches(
    prog: InplaceProgram, tables: list[int], ctx: int, scratch: int
) -> list[tuple[_Items, int]]:
    """Each pass as (items, its second pointer): the prepared launches (and a long-row
    SHUFFLE's group copies) that run it with `scratch` and the device tables `tables`.

    PERMUTE's pieces read their table of pieces (uploaded once) at their second pointer and
    the saved first rows `offset` bytes past it: the offset is set here to where the scratch
    lies from the table, so no copy of the table is made per call."""
    out: list[tuple[_Items, int]] = []
    pieces_table = 0
    for step, table in zip(prog.steps, tables, strict=True):
        how, launch = step.how, step.launch
        if how.aux == "leaders":
            out.append(([launch.prepared(ctx)], table))
        elif how.aux == "scratch":
            pieces_table = table or pieces_table
            offset = scratch - pieces_table
            out.append(([_with(launch, ctx, offset=offset)], pieces_table))
        elif how.aux == "bands":  # a staged COLS pass: each band out to the scratch, then back
            second = table or scratch
            staged = step.bands.get((ctx, second, scratch))
            if staged is None:
                if len(step.bands) >= BANDS_KEPT:
                    step.bands.clear()
                staged = step.bands[(ctx, second, scratch)] = _bands(step, ctx, second, scratch)
            out.append((staged, second))
        elif how.aux == "rows":
            row_bytes = how.args["n"] * how.spec.elem_bytes
            items: _Items = []
            for first in range(0, how.rows, how.rows_per):
                count = min(how.rows_per, how.rows - first)
                items.append((first * row_bytes, count * row_bytes))
                items.append(_with(launch, ctx, row=first, rows_per=count))
            out.append((items, scratch))
        else:
            out.append(([launch.prepared(ctx)], 0))
    return out


def _bands(step: InplaceStep, ctx: int, second: int, scratch: int) -> _Items:
    """A staged COLS pass's launches: its counters zeroed, then the pass, whose blocks take
    every band's parts by ticket (the second pointer its table, the scratch `offset` past it;
    or the scratch itself)."""
    launch = step.launch
    offset = scratch - second
    return [
        _with(launch, ctx, 0, segs=STAGED_ZERO, offset=offset),
        _with(launch, ctx, segs=0, offset=offset),
    ]


def _with(launch: Any, ctx: int, shared: int | None = None, **values: int) -> _driver.Prepared:
    """`launch` made ready in `ctx` with some of its `at_inplace_args` replaced (and its
    dynamic shared memory: `shared`, where given)."""
    scalars = list(launch.scalars)
    for name, value in values.items():
        scalars[ARG_NAMES.index(name)] = value
    base = launch.prepared(ctx)
    func = base.args[0].value if hasattr(base.args[0], "value") else base.args[0]
    tail = struct.pack(ARG_FORMAT, *scalars)
    shared = launch.shared if shared is None else shared
    prep = _driver.Prepared(func, ctx, launch.grid, launch.block, tail, shared)
    if launch.shared:  # the kernel's opt-in stays at the device's most (SharedLaunch)
        _driver.allow_function_dynamic_shared(func, launch.optin, ctx)
    return prep

"""permute() plans, checked on the CPU: every plan run by the NumPy stand-in for the kernels
(tests/_plan_ref.py) must equal np.transpose, byte for byte, writing each byte of `out`
exactly once and nothing around it; with the gather pass where the plan picks it, and without
(`no_gather`: the batched passes it replaces stay covered too).

Random cases draw a fresh seed each run (AUTOTRANSPOSE_PLAN_SEED=<seed> replays one); every
failure message names the seed and the case.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import os
import secrets
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from _plan_ref import byte_index, execute

from autotranspose import errors
from autotranspose.kernels.config import TILE_SIZES
from autotranspose.plans import permute as plan
from autotranspose.plans.boxes import Dim, realigned_out
from autotranspose.plans.layout import MAX_NDIM, normalize_axes
from autotranspose.plans.permute import (
    CONTIGUOUS,
    COPY,
    ELEMENTS,
    EMPTY,
    GATHER,
    GRID_TILES,
    MIN_TILE_SIDE,
    OUTER_MIN_ROW_BYTES,
    PACKED,
    RUNS,
    STRIDED,
    TRANSPOSE,
    WIDE,
    Pass,
    Plan,
    can_pipeline,
    gather_reason,
    max_tiles,
    plan_permute,
    realigned,
)
from autotranspose.runtime.arrays import matrix_layout

SEED = int(os.environ.get("AUTOTRANSPOSE_PLAN_SEED") or secrets.randbits(32))
SIZES = (1, 2, 4, 8, 16)


def _rng(*salt: int | str) -> np.random.Generator:
    return np.random.default_rng(
        [SEED, *(s if isinstance(s, int) else zlib.crc32(s.encode()) for s in salt)]
    )


@dataclass
class Buf:
    """An array view inside a larger buffer: `view` is what the call sees, `base` holds it."""

    base: np.ndarray
    view: np.ndarray
    take: Any  # base-shaped array -> the view's elements, in logical order

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(s // self.view.itemsize for s in self.view.strides)

    @property
    def flat(self) -> np.ndarray:
        return self.base.reshape(-1).view(np.uint8)

    @property
    def at(self) -> int:
        return self.view.ctypes.data - self.base.ctypes.data


def _bytes(rng: np.random.Generator, shape: tuple[int, ...], e: int) -> np.ndarray:
    data = rng.integers(0, 256, size=math.prod(shape) * e, dtype=np.uint8)
    return data.view(f"V{e}").reshape(shape)


def make(rng: np.random.Generator, shape: tuple[int, ...], e: int, strided: bool) -> Buf:
    """A view of `shape` with `e`-byte elements: contiguous, or with its axes in a random
    memory order, steps on all but the stride-1 axis, padding and start offsets (so its
    pointer is aligned to one element only, some of the time)."""
    nd = len(shape)
    if not strided:
        base = _bytes(rng, shape, e)
        return Buf(base, base, lambda a: a)
    mem = [int(a) for a in rng.permutation(nd)]  # memory order, innermost last
    big = [k for k, a in enumerate(mem) if shape[a] > 1]
    inner = big[-1] if big else nd
    ext, cut = [], []
    for k, a in enumerate(mem):
        n = shape[a]
        if k > inner:  # size-1 axes inside the stride-1 one: no padding, or it is not stride 1
            ext.append(n)
            cut.append(slice(0, n))
            continue
        step = 1 if k == inner else int(rng.choice([1, 1, 2, 3]))
        start, pad = int(rng.integers(0, 2)), int(rng.integers(0, 3))
        ext.append(start + max(n - 1, 0) * step + (1 if n else 0) + pad)
        cut.append(slice(start, start + max(n - 1, 0) * step + (1 if n else 0), step))
    back = tuple(int(k) for k in np.argsort(mem))
    base = _bytes(rng, tuple(ext), e)

    def take(a: np.ndarray) -> np.ndarray:
        return a[tuple(cut)].transpose(back)

    view = take(base)
    assert view.shape == tuple(shape)
    return Buf(base, view, take)


def run(x: Buf, axes: tuple[int, ...], out: Buf, what: str = "") -> Plan:
    """Plan, execute on the reference, compare with np.transpose; returns the plan."""
    e = x.view.itemsize
    p = plan_permute(
        x.view.shape,
        axes,
        e,
        x.strides,
        out.strides,
        in_ptr=x.view.ctypes.data,
        out_ptr=out.view.ctypes.data,
    )
    ctx = (
        f"seed {SEED} {what}: shape {x.view.shape} axes {axes} e {e} in strides {x.strides} "
        f"out strides {out.strides}\n{p.describe()}"
    )
    before = out.base.copy()
    expected = out.base.copy()
    out.take(expected)[...] = np.transpose(x.view, axes)
    want = np.zeros(out.flat.size, dtype=np.int64)
    ids = out.take(np.arange(out.base.size).reshape(out.base.shape))
    want[(ids[..., None] * e + np.arange(e)).ravel()] = 1
    # the plan's pass, then each alternative a first call may pick instead, from the same
    # poisoned output: every one moves exactly the same bytes
    for q in (*p.passes[:1], *p.alternatives):
        out.base[...] = before
        hits = execute(p.taking(q), x.flat, x.at, out.flat, out.at)
        what = f"{ctx}\nrunning: {q.describe()}"
        assert out.base.tobytes() == expected.tobytes(), what
        assert np.array_equal(hits, want), "bytes written not exactly once, or outside out: " + what
    if not p.passes:
        execute(p, x.flat, x.at, out.flat, out.at)
        assert out.base.tobytes() == expected.tobytes(), ctx
    _check_minimal(p, ctx)
    return p


def _check_minimal(p: Plan, ctx: str) -> None:
    """One pass at most; no fusable pair left; the kernel's batch is the largest loop; the
    alternatives are other passes, each once."""
    assert len(p.passes) <= 1, ctx
    assert len(set(p.alternatives)) == len(p.alternatives), ctx
    assert not set(p.alternatives) & set(p.passes), ctx
    for a, d in itertools.pairwise(p.dims):
        assert not (
            a.in_stride == d.in_stride * d.extent and a.out_stride == d.out_stride * d.extent
        ), ctx
    for q in (*p.passes, *p.alternatives):
        # (a realigned copy's batch is the dim its runs fuse, not the largest: it walks as
        # many dims in the launch, the rows' and batch's inside its runs)
        assert q.realign or all(q.batch >= d.extent for d in q.loops), ctx
        assert q.elem_bytes in SIZES, ctx


def _shape(rng: np.random.Generator, nd: int) -> tuple[int, ...]:
    """Random extents, mostly small enough that the whole array stays under ~4000 elements;
    size-1 axes often, a size-0 one now and then."""
    top = max(2, round(4000 ** (1 / max(nd, 1))))
    shape = [int(rng.integers(2, top + 1)) for _ in range(nd)]
    for k in range(nd):
        if rng.random() < 0.2:
            shape[k] = 1
    if nd and rng.random() < 0.03:
        shape[int(rng.integers(nd))] = 0
    return tuple(shape)


@pytest.fixture(autouse=True)
def every_alternative(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans of these small arrays name their alternatives too (`plan.ALT_MIN_BYTES` keeps
    them from small arrays), so `run` checks every pass a first call may pick."""
    monkeypatch.setattr(plan, "ALT_MIN_BYTES", 0)


# --- random problems ----------------------------------------------------------------------------
@pytest.fixture(params=["packed", "gather", "no_gather"])
def gathers(request: pytest.FixtureRequest) -> str:
    """Run a test as planned (packed or gather passes where the plan picks them), with
    gathers where it would pack, and without either."""
    if request.param != "packed":
        request.getfixturevalue("no_gather" if request.param == "no_gather" else "no_packed")
    return request.param


@pytest.mark.parametrize("e", SIZES)
@pytest.mark.parametrize("nd", range(1, MAX_NDIM + 1))
def test_random_permutations_match_numpy(nd: int, e: int, gathers: str):
    rng = _rng(nd, e, gathers)
    for case in range(25):
        shape = _shape(rng, nd)
        axes = tuple(int(a) for a in rng.permutation(nd))
        if rng.random() < 0.3:  # negative axes: NumPy's meaning
            axes = tuple(a - nd if rng.random() < 0.5 else a for a in axes)
        out_shape = tuple(shape[a] for a in axes)
        x = make(rng, shape, e, strided=rng.random() < 0.5)
        out = make(rng, out_shape, e, strided=rng.random() < 0.3)
        p = run(x, axes, out, f"case {case}")
        assert p.case != STRIDED  # layouts with stride-1 axes keep the tile and row kernels


@pytest.mark.parametrize("e", SIZES)
def test_random_plans_cover_every_case(e: int, gathers: str):
    """The random draws above are not all one kind: over many draws each case and each kind
    of pass shows up (one-launch passes often: these arrays are small, so host loops launch
    little)."""
    rng = _rng(99, e, gathers)
    seen, kinds, alts = set(), collections.Counter(), collections.Counter()
    for _ in range(400):
        nd = int(rng.integers(1, MAX_NDIM + 1))
        shape = _shape(rng, nd)
        x = make(rng, shape, e, strided=rng.random() < 0.5)
        axes = tuple(int(a) for a in rng.permutation(nd))
        out = make(rng, tuple(shape[a] for a in axes), e, strided=False)
        p = run(x, axes, out)
        seen.add(p.case)
        kinds.update(q.kind for q in p.passes)
        alts.update((p.passes[0].kind, q.kind) for q in p.alternatives)
    print(f"seed {SEED}: passes {dict(kinds)}, alternatives {dict(alts)}")
    assert {CONTIGUOUS, RUNS, ELEMENTS} <= seen, f"seed {SEED}: {seen}"
    assert {COPY, TRANSPOSE} <= set(kinds), f"seed {SEED}: {kinds}"
    one = kinds[GATHER] + kinds[PACKED]
    if gathers == "packed":
        assert one > 40 and kinds[PACKED] > 10, (
            f"seed {SEED}: {kinds}"
        )  # 75-180 and 25-120 (1- to 16-byte)
    elif gathers == "gather":
        assert kinds[GATHER] > 40 and PACKED not in kinds, f"seed {SEED}: {kinds}"
    else:
        assert one == 0, f"seed {SEED}: {kinds}"


# --- named cases --------------------------------------------------------------------------------
@pytest.mark.parametrize("e", SIZES)
@pytest.mark.parametrize(
    "shape, axes",
    [((2, 3, 5, 7), (0, 2, 3, 1)), ((2, 5, 7, 3), (0, 3, 1, 2)), ((3, 4, 6, 5), (0, 2, 1, 3))],
    ids=["NCHW->NHWC", "NHWC->NCHW", "heads"],
)
def test_named_cases_match_numpy(shape: tuple[int, ...], axes: tuple[int, ...], e: int):
    rng = _rng(7, e)
    for strided in (False, True):
        x = make(rng, shape, e, strided)
        run(x, axes, make(rng, tuple(shape[a] for a in axes), e, strided), f"strided={strided}")


def test_nchw_to_nhwc_is_one_batched_transpose():
    p = plan_permute((32, 256, 56, 56), (0, 2, 3, 1), 2)
    assert p.case == ELEMENTS and p.launches == 1
    assert p.passes == (Pass(TRANSPOSE, 2, 256, 56 * 56, 56 * 56, 256, 32, 256 * 3136, 3136 * 256),)


def test_nhwc_to_nchw_is_one_batched_transpose():
    p = plan_permute((32, 56, 56, 256), (0, 3, 1, 2), 2)
    assert p.case == ELEMENTS and p.launches == 1
    assert p.passes == (Pass(TRANSPOSE, 2, 3136, 256, 256, 3136, 32, 3136 * 256, 256 * 3136),)


@pytest.mark.parametrize("e", SIZES)
def test_attention_heads_swap_copies_rows_of_whole_head_vectors(e: int):
    """(8, 4096, 32, 128) by (0, 2, 1, 3): the 128-element innermost axis stays innermost, so
    it moves as rows of 128*e bytes in 16-byte words; the kernel takes 4096 rows and a batch
    of 32, and the 8 outer indices in the same launch (blockIdx.z): no host loop."""
    p = plan_permute((8, 4096, 32, 128), (0, 2, 1, 3), e)
    w = 128 * e // 16
    assert p.case == RUNS
    assert p.dims == (
        Dim(8, 4096 * 32 * 128, 32 * 4096 * 128),
        Dim(32, 128, 4096 * 128),
        Dim(4096, 32 * 128, 128),
        Dim(128, 1, 1),
    )
    (q,) = p.passes
    assert q == Pass(
        COPY, 16, 4096, w, 32 * w, w, 32, w, 4096 * w, outer=Dim(8, 4096 * 32 * w, 32 * 4096 * w)
    )
    assert p.launches == 1 and list(q.offsets()) == [(0, 0)]
    assert q.launch_bytes == 8 * 4096 * 32 * 128 * e


# --- the cases of the classification ------------------------------------------------------------
def test_wide_elements_when_the_run_is_a_kernel_element():
    """(B, M, N, 2) of float32: runs of 8 bytes, a transpose of 8-byte elements."""
    p = plan_permute((3, 50, 70, 2), (0, 2, 1, 3), 4)
    assert p.case == WIDE
    assert p.passes == (Pass(TRANSPOSE, 8, 50, 70, 70, 50, 3, 3500, 3500),)


@pytest.mark.parametrize("e", SIZES)
@pytest.mark.parametrize("run_len", [1, 2, 3, 4, 8, 16])
def test_innermost_axis_that_stays_matches_numpy(run_len: int, e: int):
    rng = _rng(11, run_len, e)
    for strided in (False, True, True):
        x = make(rng, (3, 5, run_len), e, strided)
        p = run(x, (1, 0, 2), make(rng, (5, 3, run_len), e, strided), f"strided={strided}")
        run(
            make(rng, (2, 3, 5, run_len), e, strided),
            (2, 0, 1, 3),
            make(rng, (5, 2, 3, run_len), e, strided),
            f"4-D strided={strided}",
        )
        if not strided and run_len > 1:
            assert p.case == (WIDE if run_len * e in SIZES else RUNS)


@pytest.mark.parametrize("offset, word", [(0, 16), (4, 4), (8, 8), (12, 4)])
def test_wide_elements_need_aligned_pointers(offset: int, word: int):
    """A run of 16 bytes at a pointer aligned to less is copied as rows of the widest words
    the pointer allows, not transposed (out rows apart: runs too short to realign); with the
    output's rows side by side, the copy is realigned into 16-byte words instead."""
    apart = (40, 8, 1) if offset else None
    p = plan_permute((5, 7, 4), (1, 0, 2), 4, in_ptr=1024 + offset, out_strides=apart)
    assert p.case == (WIDE if offset == 0 else RUNS)
    assert p.passes[0].elem_bytes == word and not p.passes[0].realign
    side_by_side = plan_permute((5, 7, 4), (1, 0, 2), 4, in_ptr=1024 + offset).passes[0]
    assert side_by_side.realign == (offset != 0)


def test_identity_is_one_contiguous_copy():
    p = plan_permute((4, 5, 6), (0, 1, 2), 2)
    assert p.case == CONTIGUOUS and p.dims == (Dim(120, 1, 1),)
    assert p.passes == (Pass(COPY, 16, 1, 15, 15, 15, 1, 15, 15),)
    assert p.passes[0].contiguous and p.launches == 1


def test_strided_identity_copies_rows():
    """Padded rows (pitch 10 of 6) into a contiguous out: the two outer axes fuse, so one
    launch copies 20 rows of 24 bytes, at most 8-byte words; the output's rows lie side by
    side, so that copy runs realigned, as one run of 480 bytes."""
    p = plan_permute((4, 5, 6), (0, 1, 2), 4, (50, 10, 1), None)
    assert p.case == RUNS and p.dims == (Dim(20, 10, 6), Dim(6, 1, 1))
    assert p.passes == (realigned(Pass(COPY, 8, 20, 3, 5, 3, 1, 100, 60)),)
    assert p.passes[0] == Pass(COPY, 1, 20, 24, 40, 24, 1, 800, 480, realign=True)
    assert p.passes[0].run_bytes == 480


def test_size_one_axes_are_dropped_whatever_their_strides():
    p = plan_permute((1, 4, 1, 6, 1), (4, 3, 2, 1, 0), 4, (999, 6, -5, 1, 0))
    q = plan_permute((4, 6), (1, 0), 4)
    assert p.dims == q.dims and p.passes == q.passes


def test_a_single_element_is_one_copy():
    for shape in [(), (1,), (1, 1, 1)]:
        p = plan_permute(shape, tuple(range(len(shape)))[::-1], 8)
        assert p.case == CONTIGUOUS and p.passes == (Pass(COPY, 8, 1, 1, 1, 1, 1, 1, 1),)


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 5, 7), (2, 3, 0, 1)])
def test_empty_arrays_plan_nothing(shape: tuple[int, ...]):
    axes = tuple(range(len(shape)))[::-1]
    p = plan_permute(shape, axes, 4, (-3,) * len(shape))  # strides of an empty array: unread
    assert p.case == EMPTY and p.passes == () and p.launches == 0
    assert p.out_shape == tuple(shape[a] for a in axes)
    assert "0 launches" in p.describe()


def test_broadcast_input_is_read_in_place():
    """A stride-0 input axis (np.broadcast_to) needs no copy first: reading twice is fine."""
    rng = _rng(13)
    base = _bytes(rng, (1, 5, 6), 4)
    x = np.broadcast_to(base, (3, 5, 6))
    buf = Buf(base, x, None)
    out = make(rng, (6, 3, 5), 4, strided=False)
    p = run(buf, (2, 0, 1), out)
    assert p.case == ELEMENTS


@pytest.mark.parametrize("e", SIZES)
def test_broadcast_inputs_beside_a_stride_one_axis_take_no_box(e: int):
    """A broadcast axis (stride 0) beside the input's stride-1 axis (x.expand of a tensor with
    a size-1 axis) keeps the tile, row or gather kernels: no packed or vector box pass, whose
    tables assume each element of a box is read from its own place; every plan and
    alternative matches np.transpose."""
    rng = _rng(e, "broadcast-box")
    for case in range(30):
        nd = int(rng.integers(2, 5))
        shape = tuple(int(v) for v in rng.integers(2, 40, nd))
        flat = [k for k in range(nd - 1) if rng.random() < 0.5] or [0]
        base_shape = tuple(1 if k in flat else n for k, n in enumerate(shape))
        base = _bytes(rng, base_shape, e)
        buf = Buf(base, np.broadcast_to(base, shape), None)
        axes = tuple(int(a) for a in rng.permutation(nd))
        out = make(rng, tuple(shape[a] for a in axes), e, strided=case % 2 == 0)
        p = run(buf, axes, out, f"case {case}")
        assert all(q.kind != PACKED and not q.box for q in (*p.passes, *p.alternatives)), (
            p.describe()
        )


def gappy(rng: np.random.Generator, shape: tuple[int, ...], e: int, zeros: bool = False) -> Buf:
    """A view of `shape` with no axis of stride 1: every axis a step of 2 or 3 elements (or,
    with `zeros`, some axes broadcast: stride 0), in a random memory order, inside a padded
    buffer at a random element offset."""
    nd = len(shape)
    mem = [int(a) for a in rng.permutation(nd)]  # memory order, innermost last
    flat = [zeros and shape[a] > 1 and rng.random() < 0.4 for a in mem]
    ext, cut = [], []
    for a, zero in zip(mem, flat, strict=True):
        n = 1 if zero else shape[a]
        step = int(rng.choice([2, 3]))
        start, pad = int(rng.integers(0, 2)), int(rng.integers(0, 3))
        ext.append(start + max(n - 1, 0) * step + 1 + pad)
        cut.append(slice(start, start + max(n - 1, 0) * step + 1, step))
    back = tuple(int(k) for k in np.argsort(mem))
    base = _bytes(rng, tuple(ext), e)

    def take(a: np.ndarray) -> np.ndarray:
        return a[tuple(cut)].transpose(back)

    view = take(base)
    if zeros:
        view = np.broadcast_to(view, shape)
    assert view.shape == tuple(shape)
    return Buf(base, view, None if zeros else take)


@pytest.mark.parametrize("e", SIZES)
@pytest.mark.parametrize("nd", range(1, 7))
def test_random_layouts_without_a_stride_one_axis_match_numpy(nd: int, e: int):
    """Inputs with no axis of stride 1 (steps of 2-3 on every axis, broadcast axes), and
    outputs whose innermost stride is not 1: one gather launch, every output byte written
    once, from where np.transpose reads it."""
    rng = _rng(nd, e, "gappy")
    cases = collections.Counter()
    for case in range(20):
        shape = tuple(int(v) for v in rng.integers(1, 6, nd))
        axes = tuple(int(a) for a in rng.permutation(nd))
        out_shape = tuple(shape[a] for a in axes)
        kind = case % 3
        x = gappy(rng, shape, e, zeros=kind == 1) if kind != 2 else make(rng, shape, e, True)
        out = gappy(rng, out_shape, e) if kind else make(rng, out_shape, e, case % 2 == 0)
        p = run(x, axes, out, f"case {case}")
        moving = [d for d in p.dims if d.extent > 1]
        if moving:
            assert p.case == STRIDED and p.passes[0].kind == GATHER and not p.alternatives
            assert p.passes[0].dims == p.dims
        cases[p.case] += 1
    # enough of them strided to mean something; at least 10 of 20 failed about one seed in
    # 300 for 1-D layouts, whose side is 1 (a copy) a fifth of the time
    assert cases[STRIDED] >= 5, (SEED, cases)


def test_a_strided_vector_and_a_broadcast_scalar_are_gathers():
    for shape, strides in [((7,), (2,)), ((3, 5), (0, 0)), ((4, 3), (1, 0))]:
        p = plan_permute(shape, (len(shape) - 1, *range(len(shape) - 1)), 4, strides)
        if all(s != 1 for s in strides):
            assert p.case == STRIDED and p.passes[0].kind == GATHER, p.describe()
            assert "strided" in p.describe()
        else:  # a stride-1 axis beside the broadcast one: the tile kernels, as before
            assert p.case != STRIDED
    # complex z.real: float32 at stride 2, transposed
    p = plan_permute((6, 5), (1, 0), 4, (10, 2))
    assert p.case == STRIDED and p.passes[0].dims == (Dim(5, 2, 6), Dim(6, 10, 1))


def test_overlapping_input_windows_are_read_in_place():
    rng = _rng(17)
    base = _bytes(rng, (40,), 2)
    x = np.lib.stride_tricks.sliding_window_view(base, 8)  # strides (1, 1)
    run(Buf(base, x, None), (1, 0), make(rng, (8, 33), 2, strided=False))
    run(Buf(base, x, None), (0, 1), make(rng, (33, 8), 2, strided=True))


@pytest.mark.parametrize(
    ("shape", "outer", "loops"),
    [
        ((9, 5, 3, 7, 16), (5, 3), []),  # rows 9, batch 7, then 5 and 3 over blockIdx.z
        ((2, 9, 5, 3, 7, 16), (5, 3), [2]),  # the fifth dim is a host loop
        ((2, 70000, 70001, 70002, 8), (2, 1), [70000]),  # over 65535 in all: never over z
        # the 300 rows lie side by side in the output: m; 400 x 299 would pass 65535: a loop
        ((300, 400, 500, 299, 16), (400, 1), [299]),
        ((2, 3, 16), (1, 1), []),
    ],
)
def test_row_copies_walk_more_dims_in_the_launch(no_gather, shape, outer, loops):
    """Rows (the innermost axis stays innermost) over several dims: the kernel takes the
    output's side-by-side rows (else the largest) as its rows, the largest other as its batch
    and the next two (at most 65535 together) over blockIdx.z; only what is left is host
    loops."""
    axes = (*reversed(range(len(shape) - 1)), len(shape) - 1)
    p = plan_permute(shape, axes, 4)
    (q,) = p.passes
    assert q.kind == COPY and (q.outer.extent, q.outer2.extent) == outer, p.describe()
    assert [d.extent for d in q.loops] == loops and p.launches == math.prod(loops)


@pytest.mark.parametrize(
    ("shape", "axes", "e"),
    [
        ((36, 3359, 7, 29), (2, 1, 0, 3), 8),  # the 36 rows are side by side: m, not the 3359
        ((8, 8, 4, 8, 10320, 4), (2, 4, 3, 0, 1, 5), 8),
        ((12, 20, 1, 76, 1, 2160), (1, 3, 2, 4, 0, 5), 8),
        ((8, 4096, 32, 128), (0, 2, 1, 3), 2),
    ],  # the head swap: already along them
)
def test_row_copies_run_along_the_outputs_side_by_side_rows(no_gather, shape, axes, e):
    """A block's rows (m) are the output's side-by-side rows where one of the two largest
    dims has them, so its stores are one run (plan.ROWS_MAX_OUTER's note: +4 to +11 points
    on an H200); the two dims walked are still the largest two."""
    p = plan_permute(shape, axes, e)
    (q,) = p.passes
    assert q.kind == COPY and not q.realign and q.ld_out == q.n, p.describe()
    *rows, _ = q.problem()
    assert sorted((q.m, q.batch)) == sorted(d.extent for d in rows)[-2:], p.describe()


def test_a_row_copys_batch_stays_within_32_bits():
    """The output's side-by-side rows (3) are not the row copy's m where its batch would
    then be the 2**32 rows: the row kernel's batch is 32-bit (plan only, nothing allocated)."""
    (q,) = plan_permute((3, 5, 2**32, 40), (2, 1, 0, 3), 1).passes
    assert q.kind == COPY and (q.m, q.batch) == (2**32, 5), q.describe()


@pytest.mark.parametrize("case", range(40))
def test_random_row_copies_walk_along_the_outputs_side_by_side_rows(case: int):
    """Random permutes that keep the innermost axis (sides under 40, so every dim of rows
    fits one launch): every word row copy is one launch, and its m is the dim whose rows the
    output lays side by side where there is one, so that a block's consecutive rows store
    one run."""
    rng = _rng("row walk", case)
    nd = int(rng.integers(3, 6))
    shape = tuple(int(v) for v in rng.integers(1, 40, nd))
    axes = (*(int(a) for a in rng.permutation(nd - 1)), nd - 1)
    e = int(rng.choice(SIZES))
    p = plan_permute(shape, axes, e)
    what = f"seed {SEED} case {case}: {shape} by {axes}, {e}-byte elements: {p.describe()}"
    for q in p.passes:
        if q.kind != COPY or q.contiguous or q.realign:
            continue
        *rows, _ = q.problem()
        assert p.launches == 1, what
        side = [d for d in rows if d.out_stride == q.n and d.extent > 1]
        assert q.ld_out == q.n if side else q.m == max(d.extent for d in rows), what


def test_host_loops_take_what_the_kernel_batch_does_not(no_gather):
    """Four batch axes: the largest (7) is the kernel's batch, the next two (5, 3) its outer
    dims, walked in the launch; the last is launches. Matrices with a side under
    OUTER_MIN_ROW_BYTES walk no outer dim: host loops take them all."""
    p = plan_permute((2, 7, 3, 5, 5, 11), (3, 2, 1, 0, 5, 4), 16)
    (q,) = p.passes
    assert (q.kind, q.m, q.n, q.batch) == (TRANSPOSE, 5, 11, 7)
    assert (q.outer.extent, q.outer2.extent) == (5, 3)
    assert [d.extent for d in q.loops] == [2] and p.launches == 2
    assert len(list(q.offsets())) == 2
    assert q.launch_bytes == 7 * 5 * 3 * 5 * 11 * 16
    (q,) = plan_permute((2, 7, 3, 5, 5, 11), (3, 2, 1, 0, 5, 4), 4).passes  # 20-byte rows
    assert q.outer.extent == q.outer2.extent == 1 and q.launches == 30
    assert 5 * 4 < OUTER_MIN_ROW_BYTES <= 5 * 16


def test_the_outer_dims_keep_a_launch_within_one_grid(no_gather):
    """The outer dims a transpose launch walks keep its tiles (of any config) within a grid;
    a dim that would not fit stays a host loop."""
    big = plan_permute((70000, 3, 16, 16), (1, 0, 3, 2), 16)  # 3 x 70000 matrices of 16x16
    (q,) = big.passes
    tiles = q.batch * q.outer.extent * q.outer2.extent * max_tiles(q.m, q.n)
    assert tiles <= GRID_TILES
    assert (q.outer.extent, q.loops) == (3, ())
    too_big = plan_permute((2**24, 3, 2**10, 16), (1, 0, 3, 2), 4)  # 3 x 2**24 of 1024x16
    (q,) = too_big.passes
    assert q.batch * max_tiles(q.m, q.n) <= GRID_TILES < 3 * q.batch * max_tiles(q.m, q.n)
    assert q.outer.extent == 1 and [d.extent for d in q.loops] == [3]
    assert MIN_TILE_SIDE == min(TILE_SIZES)


# --- what transpose() does today ----------------------------------------------------------------
def _transpose_args(x: np.ndarray, out: np.ndarray) -> tuple[int, ...]:
    """(batch, m, n, ld_in, ld_out, bs_in, bs_out) as api.transpose() hands them to
    launch.make_launch for these arrays."""
    b, m, n, ld, bs = matrix_layout("x", x.shape, x.strides, x.itemsize)
    _, _, _, old, obs = matrix_layout("out", out.shape, out.strides, out.itemsize)
    return (b, m, n, ld, old, bs, obs)


@pytest.mark.parametrize("e", SIZES)
@pytest.mark.parametrize(
    "shape, x_slice, out_pad",
    [
        ((6, 9), None, 0),
        ((6, 9), np.s_[:, :9], 3),  # padded input rows (pitch 13), padded output rows
        ((4, 6, 9), None, 0),
        ((4, 6, 9), np.s_[::2, :, :9], 0),  # every other matrix, padded rows
        ((1, 6, 9), None, 2),  # a batch of one
        ((5, 2, 3), None, 0),
    ],
)
def test_two_and_three_d_reduce_to_what_transpose_does(shape, x_slice, out_pad, e, no_gather):
    rng = _rng(19, e)
    if x_slice is None:
        big = _bytes(rng, shape, e)
        x = big
    else:
        lead = (2 * shape[0],) if len(shape) == 3 else ()
        big = _bytes(rng, (*lead, *shape[len(lead) : -1], shape[-1] + 4), e)
        x = big[x_slice]
    axes = (1, 0) if len(shape) == 2 else (0, 2, 1)
    o_shape = tuple(shape[a] for a in axes)
    o_big = _bytes(rng, (*o_shape[:-1], o_shape[-1] + out_pad), e)

    def take(a: np.ndarray) -> np.ndarray:
        return a[..., : o_shape[-1]]

    out = take(o_big)
    p = run(Buf(big, x, None), axes, Buf(o_big, out, take))
    (q,) = p.passes
    assert (q.kind, q.elem_bytes, q.loops) == (TRANSPOSE, e, ())
    assert (q.batch, q.m, q.n, q.ld_in, q.ld_out, q.bs_in, q.bs_out) == _transpose_args(x, out)


def test_broadcast_batch_reduces_to_what_transpose_does():
    x = np.broadcast_to(np.zeros((1, 8, 9), np.float32), (4, 8, 9))
    out = np.zeros((4, 9, 8), np.float32)
    (q,) = plan_permute(x.shape, (0, 2, 1), 4, [s // 4 for s in x.strides]).passes
    assert (q.batch, q.m, q.n, q.ld_in, q.ld_out, q.bs_in, q.bs_out) == _transpose_args(x, out)


# --- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "axes, words",
    [
        ((0, 1), "name 2 axes but the array has 3"),
        ((0, 1, 3), "3 is out of range"),
        ((0, -4, 1), "-4 is out of range"),
        ((0, 1, 1), "repeat axis 1"),
        ((0, -1, 2), "repeat axis 2"),
        ((0, 1.0, 2), "sequence of ints"),
        ("abc", "sequence of ints"),
    ],
)
def test_axes_that_are_not_a_permutation_are_refused(axes: Any, words: str):
    with pytest.raises(errors.AxesError, match=words) as info:
        plan_permute((2, 3, 4), axes, 4)
    assert isinstance(info.value, ValueError)
    assert "permutation of (0, 1, 2)" in str(info.value) or "permutation of range" in str(
        info.value
    )


@pytest.mark.parametrize("axes", [(0, 1, 2), (-3, -2, -1), (2, 0, 1), (-1, 0, -2)])
def test_negative_axes_mean_what_numpy_means(axes: tuple[int, ...]):
    assert normalize_axes(axes, 3) == tuple(a % 3 for a in axes)
    assert (
        np.transpose(np.empty((2, 3, 4)), axes).shape == plan_permute((2, 3, 4), axes, 1).out_shape
    )


@pytest.mark.parametrize(
    "call, error, words",
    [
        (dict(shape=(2,) * 9, axes=range(9)), errors.ShapeError, "at most 8"),
        (dict(shape=(2, -1), axes=(1, 0)), errors.ShapeError, "negative extent"),
        (dict(elem_bytes=3), errors.UnsupportedDtypeError, "1, 2, 4, 8, 16 bytes"),
        (dict(in_strides=(1, 2, 3, 4)), errors.ShapeError, "4 strides"),
        (dict(in_strides=(-12, 4, 1)), errors.LayoutError, "negative strides"),
        (dict(out_strides=(12, 1, 3)), errors.LayoutError, "overlap"),
        (dict(out_strides=(0, 1, 2)), errors.LayoutError, "overlap"),
        (dict(out_strides=(6, 3, 0)), errors.LayoutError, "overlap"),
        (dict(shape=(2**31, 2), axes=(1, 0), in_strides=(2, 0)), errors.LayoutError, "gather"),
        (dict(out_strides=(4, 1, 2)), errors.LayoutError, "overlap"),
        (dict(in_ptr=2), errors.LayoutError, "input pointer is not aligned"),
        (dict(out_ptr=6), errors.LayoutError, "output pointer is not aligned"),
    ],
)
def test_bad_calls_say_what_to_do(call: dict[str, Any], error: type, words: str):
    args = dict(shape=(2, 3, 4), axes=(0, 2, 1), elem_bytes=4) | call
    with pytest.raises(error, match=words):
        plan_permute(**args)


# --- describe -----------------------------------------------------------------------------------
def test_describe_names_the_problem_the_pass_and_the_launches(no_gather):
    text = plan_permute((2, 7, 3, 5, 11), (0, 2, 1, 4, 3), 4).describe()
    assert (
        "permute (2, 7, 3, 5, 11) by (0, 2, 1, 4, 3), 4-byte elements -> (2, 3, 7, 11, 5)" in text
    )
    assert "transpose 7 x 5x11 of 4-byte elements" in text
    assert "host loops 2 (in +1155, out +1155), 3 (in +55, out +385) elements" in text
    assert text.endswith("1 pass, 6 launches")
    text = plan_permute((2, 7, 3, 5, 11), (0, 2, 1, 4, 3), 16).describe()
    assert "x 3 in the launch (in +55, out +385) x 2 in the launch (in +1155, out +1155)" in text
    assert text.endswith("1 pass, 1 launch")
    text = plan_permute((2, 3, 5, 7, 64, 64), (3, 2, 1, 0, 5, 4), 4).describe()
    assert "host loops 2 (in +430080, out +4096) elements" in text
    assert text.endswith("1 pass, 2 launches")
    assert "copy 240 contiguous bytes" in plan_permute((4, 5, 6), (0, 1, 2), 2).describe()
    text = plan_permute((8, 4096, 32, 128), (0, 2, 1, 3), 2).describe()
    assert "runs (a strided copy, or the innermost axis stays innermost): copy 32 x 4096 " in text
    assert "rows of 256 bytes (16 16-byte words" in text and text.endswith("1 launch")
    assert "x 8 in the launch (in +2097152, out +2097152 words)" in text
    assert "wide elements" in plan_permute((3, 5, 7, 2), (0, 2, 1, 3), 4).describe()


def test_reference_byte_index_is_the_kernel_formula():
    idx = byte_index(3, 2, [(2, 10), (3, 1)])
    assert idx.shape == (2, 3, 2)
    assert idx[1, 2].tolist() == [3 + (10 + 2) * 2, 3 + (10 + 2) * 2 + 1]


# --- the gather pass ----------------------------------------------------------------------------
MiB = 1 << 20


@pytest.mark.parametrize(
    "shape, axes, e, kind",
    [
        (
            (2, 7, 3, 5, 11),
            (0, 2, 1, 4, 3),
            4,
            PACKED,
        ),  # 7 x 2 x 3 matrices of 5x11: a side under 8
        ((2, 3, 5, 7, 64, 64), (3, 2, 1, 0, 5, 4), 4, PACKED),  # 2 launches of 1.7 MB
        ((100000, 3, 5), (0, 2, 1), 4, PACKED),  # one launch, but 3x5 tiles
        ((3, 5, 7, 2), (0, 2, 1, 3), 4, PACKED),  # wide 8-byte elements in 5x7 tiles
        ((6, 7), (1, 0), 2, PACKED),  # one 6x7 matrix: both sides under 8
        ((2,) * 8, (7, 6, 5, 4, 3, 2, 1, 0), 4, GATHER),  # 32 launches: a box of 8 dims
        ((10, 10, 512, 512), (1, 0, 3, 2), 4, TRANSPOSE),  # 10 x 10 matrices in one launch
        ((3, 2, 512, 512), (1, 0, 3, 2), 4, TRANSPOSE),  # 2 x 3 matrices in one launch
        ((5, 40, 64, 6), (2, 1, 0, 3), 1, COPY),  # rows of 6 bytes: one launch walks all 3 dims
        ((5, 4, 3, 40, 64, 6), (4, 3, 2, 1, 0, 5), 1, PACKED),  # 3 launches of 300 KiB
        ((4, 2, 1024, 1024), (1, 0, 3, 2), 4, TRANSPOSE),  # 2 launches of 16 MiB
        ((2, 2, 2, 4, 512, 512), (2, 1, 0, 3, 5, 4), 4, TRANSPOSE),  # 8 launches of 4 MiB
        ((3, 3, 4, 512, 512), (1, 0, 2, 4, 3), 4, TRANSPOSE),  # 4 x 3 x 3 matrices, one launch
        ((3, 3, 3, 4, 512, 512), (2, 1, 0, 3, 5, 4), 4, TRANSPOSE),  # 3 launches of 12 MiB
        ((32, 256, 56, 56), (0, 2, 3, 1), 2, TRANSPOSE),  # NCHW -> NHWC: one launch
        ((100000, 3, 8), (0, 2, 1), 4, PACKED),  # a batch of 3x8: a side under 8
        ((100000, 8, 8), (0, 2, 1), 4, TRANSPOSE),  # sides of 8: tiles
        ((300000, 3), (1, 0), 4, TRANSPOSE),  # one skinny matrix: the flat kernels
        ((7, 4099), (1, 0), 4, TRANSPOSE),
        ((8, 4096, 32, 128), (0, 2, 1, 3), 2, COPY),  # heads: one launch of 256 MiB
        ((4, 5, 6), (0, 1, 2), 2, COPY),  # contiguous: one memcpy, never a gather
        ((64, 3, 1000), (1, 0, 2), 1, COPY),  # rows of 1000 bytes, one launch
    ],
)
def test_when_the_plan_gathers(shape, axes, e, kind):
    p = plan_permute(shape, axes, e)
    (q,) = p.passes
    assert q.kind == kind, p.describe()
    assert (p.why_one_launch != "") == (kind in (GATHER, PACKED))
    if kind in (GATHER, PACKED):
        assert p.launches == 1 and not q.loops and q.launches == 1
        assert math.prod(d.extent for d in q.dims) * q.elem_bytes == math.prod(shape) * e
        assert q.dims[-1].out_stride == 1, "stores along the output's innermost dim"


def _pass(kind: str, m: int, n: int, loops: int = 0, batch: int = 1, e: int = 4) -> Pass:
    """A contiguous-looking pass: `loops` host-loop launches of a batch of m x n."""
    size = batch * m * n
    loop = (Dim(loops, size, size),) if loops else ()
    return Pass(kind, e, m, n, n, m if kind == TRANSPOSE else n, batch, m * n, m * n, loop)


@pytest.mark.parametrize(
    "p, gathers",
    [
        (_pass(TRANSPOSE, 1024, 1024, loops=8), False),  # 8 launches of 4 MiB: the limits
        (_pass(TRANSPOSE, 1024, 1024, loops=9), True),  # one launch too many
        (_pass(TRANSPOSE, 1024, 1023, loops=2), True),  # 4 KiB short of 4 MiB per launch
        (_pass(TRANSPOSE, 1024, 1024), False),  # no host loops: one launch
        (_pass(TRANSPOSE, 7, 7, batch=10**6), True),  # tiles of 7x7
        (_pass(TRANSPOSE, 8, 7, batch=10**6), True),  # a batch with a side under 8
        (_pass(TRANSPOSE, 7, 8, batch=10**6), True),
        (_pass(TRANSPOSE, 8, 8, batch=10**6), False),
        (_pass(TRANSPOSE, 10**6, 7), False),  # one skinny matrix: its tuned kernels
        (_pass(COPY, 7, 7, batch=10**6), False),  # small rows: the row copy is not tiles
        (_pass(COPY, 64, 3, loops=100), True),
        (_pass(COPY, 1, 100), False),  # a contiguous block: cuMemcpyDtoDAsync
        (_pass(TRANSPOSE, 2**31, 2, loops=2), False),  # a side too long for 32-bit digits
    ],
)
def test_gather_reason_thresholds(p: Pass, gathers: bool):
    assert bool(gather_reason(p)) == gathers, gather_reason(p)


def test_gather_thresholds_are_module_constants(monkeypatch):
    """Calibrating on the GPU means changing the constants: the decision reads them."""
    p = _pass(TRANSPOSE, 1024, 1024, loops=8)
    assert not gather_reason(p)
    monkeypatch.setattr(plan, "GATHER_MAX_LAUNCHES", 7)
    assert "8 launches of 4194304 bytes" in gather_reason(p)
    monkeypatch.setattr(plan, "GATHER_MAX_LAUNCHES", 8)
    monkeypatch.setattr(plan, "GATHER_MIN_LAUNCH_BYTES", 8 * MiB)
    assert gather_reason(p)
    monkeypatch.setattr(plan, "GATHER_MIN_SIDE", 2000)
    assert "both sides under 2000" in gather_reason(_pass(TRANSPOSE, 1024, 1024))


@pytest.mark.parametrize(
    "p",
    [
        _pass(TRANSPOSE, 5, 7, loops=3, batch=4),
        _pass(COPY, 5, 7, loops=3, batch=4),
        Pass(TRANSPOSE, 2, 2, 3, 33, 40, 4, 1000, 2, (Dim(5, 5000, 8), Dim(6, 3, 120))),
    ],
)
def test_a_pass_as_a_gather_moves_the_same_bytes(p: Pass):
    """`Pass.problem()`, the dims a gather takes, covers exactly what the launches write,
    reading from the same places."""
    e = p.elem_bytes
    g = Pass(GATHER, e, 1, 0, 0, 0, dims=p.problem())
    src = np.concatenate([byte_index(i, e, _launch_dims(p)[0]).ravel() for i, _ in p.offsets()])
    dst = np.concatenate([byte_index(o, e, _launch_dims(p)[1]).ravel() for _, o in p.offsets()])
    gsrc = byte_index(0, e, [(d.extent, d.in_stride) for d in g.dims]).ravel()
    gdst = byte_index(0, e, [(d.extent, d.out_stride) for d in g.dims]).ravel()
    assert sorted(zip(dst, src, strict=True)) == sorted(zip(gdst, gsrc, strict=True))
    assert [d.out_stride for d in g.dims] == sorted((d.out_stride for d in g.dims), reverse=True)


def _launch_dims(p: Pass) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    src = [(p.batch, p.bs_in), (p.m, p.ld_in), (p.n, 1)]
    if p.kind == TRANSPOSE:
        return src, [(p.batch, p.bs_out), (p.m, 1), (p.n, p.ld_out)]
    return src, [(p.batch, p.bs_out), (p.m, p.ld_out), (p.n, 1)]


@pytest.mark.parametrize("e", SIZES)
@pytest.mark.parametrize("kind", [PACKED, GATHER])
def test_one_launch_plans_of_views_match_numpy(e: int, kind: str, request: pytest.FixtureRequest):
    """Shapes one launch takes when contiguous (many small loops, tiny sides), as a packed
    pass and as a gather, and as strided views in and out (which may change the plan: memory
    order decides the sides)."""
    if kind == GATHER:
        request.getfixturevalue("no_packed")
    rng = _rng(23, e)
    for shape, axes in [
        ((2, 3, 5, 7, 2, 3), (5, 1, 3, 0, 4, 2)),
        ((50, 3, 5), (0, 2, 1)),
        ((2,) * 8, (7, 0, 6, 1, 5, 2, 4, 3)),
        ((3, 4, 5, 6), (3, 1, 2, 0)),
    ]:
        for strided in (False, True):
            x = make(rng, shape, e, strided)
            out = make(rng, tuple(shape[a] for a in axes), e, strided)
            p = run(x, axes, out, f"strided={strided}")
            if not strided:  # a box of 8 dims is a gather either way
                want = GATHER if shape == (2,) * 8 else kind
                assert p.passes[0].kind == want and p.launches == 1, p.describe()


def test_describe_says_why_a_gather(no_packed):
    text = plan_permute((2, 7, 3, 5, 11), (0, 2, 1, 4, 3), 4).describe()
    assert "gather 2 x 3 x 7 x 11 x 5 of 4-byte elements in one launch" in text
    assert "out strides (1155, 385, 55, 5, 1)" in text
    assert "why gather: the batched pass would be 6 launches of 1540 bytes" in text
    text = plan_permute((2, 3, 5, 7, 64, 64), (3, 2, 1, 0, 5, 4), 4).describe()
    assert (
        "why gather: the batched pass would be 2 launches of 1720320 bytes (transpose 7 x 64x64)"
        in text
    )
    assert text.endswith("1 pass, 1 launch")
    text = plan_permute((100000, 3, 5), (0, 2, 1), 4).describe()
    assert "transpose 100000 x 3x5 (both sides under 8" in text


# --- alternatives: the passes a first call times against the plan's --------------------------------
@pytest.mark.parametrize(
    "shape, axes, e, kind, alternatives",
    [
        # 64 launches of 0.7 MB: packed, with its box pipelined, the gather, a bigger box,
        # the batched pass and a box in vectors (its gather, dense, would conflict 28 ways:
        # padded every 64 bytes)
        ((200, 64, 112, 8), (3, 1, 0, 2), 4, PACKED, [PACKED, GATHER, PACKED, TRANSPOSE, PACKED]),
        (
            (8, 696, 1, 312, 3),
            (1, 4, 0, 3, 2),
            8,
            PACKED,
            [PACKED, GATHER, TRANSPOSE, PACKED],
        ),  # 8 launches; the vector box padded every 16 bytes
        ((8, 4096, 32, 128), (0, 2, 1, 3), 2, COPY, [PACKED]),  # heads: rows of 256 bytes
        # uint8 images HWC <-> CHW: the vector box, its other boxes and the gather, and the
        # batch of 2073600 x 3 matrices it replaced (narrow_batch)
        ((8, 1080, 1920, 3), (0, 3, 1, 2), 1, PACKED, [PACKED, GATHER, PACKED, PACKED, TRANSPOSE]),
        ((8, 3, 1080, 1920), (0, 2, 3, 1), 1, PACKED, [PACKED, GATHER, PACKED, PACKED, TRANSPOSE]),
        # ... but not where the long side is short: 3 x 2000 bytes
        ((2000, 1000, 3), (0, 2, 1), 1, PACKED, [PACKED]),
        # rows of 32 bytes: the gather too, and a box no edge cuts (packed_box's 1000 x 32 x 8
        # leaves a box of 8 rows at the edge of 1000)
        ((1000, 1000, 8), (1, 0, 2), 4, COPY, [PACKED, PACKED, GATHER]),
        # odd sides of 63 and 33 (boxes of 32 x 32 cut at both edges): 63 x 33 too, and a
        # box that writes the 2 x 33 whole (long_out_box)
        ((3, 33, 5478, 2, 63), (4, 2, 0, 3, 1), 8, TRANSPOSE, [PACKED, PACKED, PACKED]),
        # a side of 128 bytes: a box, and the vector box wherever a box races
        ((32, 64, 224, 224), (0, 2, 3, 1), 2, TRANSPOSE, [PACKED, PACKED]),
        # 288 bytes: two boxes, one that no edge cuts (72 of 72 where they take 32 or 64), the
        # vector box (9 KB) and one of 4 KB (VECTOR_SMALL_BOX_BYTES)
        ((4, 225440, 72), (0, 2, 1), 4, TRANSPOSE, [PACKED, PACKED, PACKED, PACKED, PACKED]),
        # sides of 16 and 18 bytes with a host loop: the vector box too (its gather padded)
        ((2, 665960, 9, 8), (3, 1, 0, 2), 2, TRANSPOSE, [PACKED, PACKED, PACKED]),
        ((64, 256, 56, 56), (0, 2, 3, 1), 2, TRANSPOSE, []),  # sides of 512 bytes and more
        ((4096, 4096), (1, 0), 4, TRANSPOSE, []),  # the tuned kernels' home ground
        ((300000, 3), (1, 0), 4, TRANSPOSE, []),  # 12-byte runs: no box
        ((64, 3, 1000), (1, 0, 2), 4, COPY, []),  # rows of 4000 bytes
        ((4096, 4096), (0, 1), 4, COPY, []),  # one contiguous block
    ],
)
def test_the_alternatives_a_first_call_times(shape, axes, e, kind, alternatives, monkeypatch):
    monkeypatch.setattr(plan, "ALT_MIN_BYTES", 8 << 20)  # as shipped
    p = plan_permute(shape, axes, e)
    (q,) = p.passes
    assert q.kind == kind and [a.kind for a in p.alternatives] == alternatives, p.describe()
    for a in p.alternatives:  # the same bytes: the same fused problem (checked in full by `run`)
        assert a.problem() == q.problem() and a.launches <= plan.ALT_MAX_LAUNCHES
        assert p.taking(a).passes == (a,) and not p.taking(a).alternatives
        assert "a first call also times: " + a.describe() in p.describe()
    boxes = [(a.box, a.pipelined, a.vectors) for a in (q, *p.alternatives) if a.kind == PACKED]
    assert len(set(boxes)) == len(boxes), "each box once, each way"
    twins = [a for a in p.alternatives if a.pipelined]  # only the plan's own box, and where it fits
    assert twins == ([dataclasses.replace(q, pipelined=True)] if can_pipeline(q) else []), (
        p.describe()
    )


@pytest.mark.parametrize(
    "shape, axes, e",
    [
        ((459, 81, 77, 9, 1), (2, 1, 4, 3, 0), 2),  # rows of 459 halves at odd offsets
        ((25, 655, 15, 147), (3, 2, 1, 0), 1),
        ((217, 197, 197), (2, 1, 0), 2),
    ],
)
def test_boxes_of_runs_off_a_word_race_their_realigned_twins(shape, axes, e, monkeypatch):
    """Where a raced packed box writes output runs that start off a word, the first call also
    times the same box through the spread kernel's realigned variant; the plan's own pass
    stays the element kernel's, and no other pass gains a twin."""
    monkeypatch.setattr(plan, "ALT_MIN_BYTES", 8 << 20)
    p = plan_permute(shape, axes, e)
    passes = (*p.passes, *p.alternatives)
    twins = [a for a in p.alternatives if a.realign_out]
    assert twins and not p.passes[0].realign_out, p.describe()
    for t in twins:
        plain = dataclasses.replace(t, realign_out=False)
        assert plain in passes and plain.kind == PACKED and not plain.vectors[0]
        assert realigned_out(t.dims, t.box, e)
        assert "output runs realigned into words" in t.describe()
    others = [a for a in passes if a.kind == PACKED and not a.realign_out and not a.vectors[0]]
    want = [a for a in others if realigned_out(a.dims, a.box, e)]
    assert sorted(map(str, want)) == sorted(
        str(dataclasses.replace(t, realign_out=False)) for t in twins
    )
    # wider elements, or aligned output runs: none
    assert not any(a.realign_out for a in plan_permute(shape, axes, 4).alternatives)
    assert not any(a.realign_out for a in plan_permute((64, 3, 1000), (1, 0, 2), 1).alternatives)


def test_small_arrays_have_no_alternatives(monkeypatch):
    """Under ALT_MIN_BYTES a first call would compile alternatives to save microseconds."""
    monkeypatch.setattr(plan, "ALT_MIN_BYTES", 8 << 20)
    shape, axes = (200, 64, 112, 8), (3, 1, 0, 2)  # 45.9 MB
    assert plan_permute(shape, axes, 4).alternatives
    assert not plan_permute((20, 64, 112, 8), axes, 4).alternatives  # 4.6 MB
    monkeypatch.setattr(plan, "ALT_MIN_BYTES", 64 << 20)
    assert not plan_permute(shape, axes, 4).alternatives


def test_a_plan_takes_only_its_own_alternatives():
    p = plan_permute((200, 64, 112, 8), (3, 1, 0, 2), 4)
    other = plan_permute((8, 696, 1, 312, 3), (1, 4, 0, 3, 2), 8).passes[0]
    with pytest.raises(ValueError, match="not one of this plan's"):
        p.taking(other)
    assert p.taking(p.passes[0]) == dataclasses.replace(p, alternatives=())


def _in_bytes(p: Pass) -> tuple[Dim, ...]:
    """`p`'s problem in bytes (a realigned copy's is; the others' are in their elements)."""
    e = p.elem_bytes
    dims = [Dim(d.extent, d.in_stride * e, d.out_stride * e) for d in p.problem()] + [Dim(e, 1, 1)]
    return tuple(plan._fuse([d for d in dims if d.extent > 1]))


@pytest.mark.parametrize("e", SIZES)
def test_alternatives_of_big_random_permutes(e: int, monkeypatch):
    """Permutes of the bench's sizes (planned only: too big to run here): each alternative is
    another kind of pass or another box of the same problem, in one launch or at most
    ALT_MAX_LAUNCHES, and a packed plan always names the gather."""
    monkeypatch.setattr(plan, "ALT_MIN_BYTES", 8 << 20)
    rng = _rng(4711, e)
    named = 0
    for _ in range(200):
        nd = int(rng.integers(3, 7))
        target = math.exp(rng.uniform(math.log(16e6), math.log(1e9))) / e  # elements
        shape = tuple(max(2, round(v)) for v in target ** rng.dirichlet(np.ones(nd)))
        axes = tuple(int(a) for a in rng.permutation(nd))
        p = plan_permute(shape, axes, e)
        q = p.passes[0]
        named += bool(p.alternatives)
        for a in p.alternatives:
            assert _in_bytes(a) == _in_bytes(q), p.describe()
            assert a.launches <= plan.ALT_MAX_LAUNCHES
        if q.kind == PACKED:
            assert GATHER in {a.kind for a in p.alternatives}, p.describe()
    assert named > 20


@pytest.mark.parametrize(
    "batch, run, e, bs_in, bs_out, ptrs, realign",
    [
        (202, 1571295, 1, 1571295, 1571295, (0, 0), True),  # back to back: one run of bytes
        (1, 1000001, 1, 1000001, 1000001, (0, 0), True),  # one matrix: one contiguous run
        (7, 3001, 2, 3001, 3011, (2, 0), True),  # output batches apart: runs a matrix
        (5, 4096, 4, 4096, 4096, (0, 0), False),  # whole 16-byte words: the word copy
        (3, 1001, 8, 1001, 1001, (8, 0), False),  # 8-byte words, long rows: the word copy
    ],
)
def test_transposes_of_one_run_a_matrix_copy_as_permute_would(
    batch, run, e, bs_in, bs_out, ptrs, realign
):
    """transpose() of matrices that are one contiguous run each (a side of 1) plans the row
    copy permute() plans for the same bytes: realigned into 16-byte words where the words
    are under 8 bytes (one contiguous block included, which permute() hands to the driver),
    the widest word otherwise; every byte of every run once."""
    p = plan.run_copy(batch, run, e, bs_in, bs_out, *ptrs)
    assert p.realign == realign and p.kind == plan.COPY and not p.loops
    assert p.launch_bytes == batch * run * e
    w = p.elem_bytes
    assert w == 1 if realign else (run * e) % w == 0 and (ptrs[0] | ptrs[1]) % w == 0
    if not realign:
        assert w == math.gcd(16, run * e, bs_in * e, bs_out * e, 16 | ptrs[0] | ptrs[1]) or w == 16

"""The spread kernel (templates/packed/spread.cu.j2) without a GPU: where `packed_args` picks
it (1- and 2-byte boxes whose output side takes words but whose output innermost dim is not
whole words), its shared layout's bank spread, and the rendered kernel itself run on the CPU
(tests/_cuda_emulator.h) against np.transpose: whole boxes by the table and boxes an edge cuts
by digits, input rows at every alignment (the funnel), padded rows, poisoned output and guard
bytes; and the boxes `word_box` takes on along the output's chain so that output rows of odd
bytes move in words."""

from __future__ import annotations

import ctypes
import math
from pathlib import Path

import numpy as np
import pytest
from _packed_emu import CXX, library

from autotranspose.errors import ShapeError
from autotranspose.kernels.codegen import (
    _ELEMENT_TYPES,
    _packed_vars,
    _spread_inner,
    render_packed,
    spread_conflicts,
    spread_layout,
)
from autotranspose.kernels.packed import THREADS, PackedKernel, packed_args, spread_mode
from autotranspose.plans import permute as plan_module
from autotranspose.plans.boxes import (
    PACKED_MAX_BYTES,
    Dim,
    packed_box,
    realigned_out,
    vector_widths,
    word_box,
)
from autotranspose.plans.layout import contiguous_strides
from autotranspose.plans.permute import plan_permute

HERE = Path(__file__).resolve().parent
_CXX = CXX


def _pass(shape, axes, e, strides=None, in_ptr=0, out_ptr=0):
    out_shape = tuple(shape[a] for a in axes)
    p = plan_permute(
        shape, axes, e, strides, contiguous_strides(out_shape), in_ptr=in_ptr, out_ptr=out_ptr
    )
    return next(q for q in (*p.passes, *p.alternatives) if q.kind == "packed" and not q.vectors[0])


# (shape, axes, element bytes): the output's innermost extent is 2, 3, 5 or 25, so the words
# kernel cannot take them; in random permute mixes these ran element by element
CASES = [
    ((2, 5, 6, 3, 130), (4, 2, 3, 1, 0), 1),  # innermost out extent 2, a fused run of 2 x 5 x ...
    ((3, 4, 2, 2, 300), (4, 0, 1, 3, 2), 1),  # 2 x 2 x 12 rows of 300 bytes
    ((6, 7, 3, 98), (3, 1, 0, 2), 1),  # innermost out extent 3 (7 x 3 = 21 rows: partial words)
    ((5, 8, 7, 260), (3, 1, 2, 0), 1),  # innermost out extent 5
    ((3, 6, 5, 2, 70), (4, 2, 3, 1, 0), 2),  # 2-byte elements
    ((4, 3, 10, 66), (3, 0, 2, 1), 2),
]
# the output's run spans the input's innermost dim (the box holds whole dims: no padded rows,
# no edge), in slabs of 3 and 10 bytes: a dense layout
SPANS = [((40, 9, 3, 8), (0, 1, 3, 2), 1), ((6, 1, 6, 5, 9), (0, 2, 4, 3, 1), 2)]
RUNS = [
    (*c, pad, offset, cut)
    for c in CASES
    for pad in (0, 5)
    for offset in (0, 1, 3)
    for cut in (False, True)
] + [(*c, 0, offset, False) for c in SPANS for offset in (0, 1, 3)]


def test_spread_where_the_output_takes_words_but_not_k_by_k_blocks():
    """The int8 and bool cases of a random permute mix that ran element by element get the
    spread kernel; a box whose output's run is not whole words does not."""
    dims = (Dim(1554, 1, 25296), Dim(372, 1554, 68), Dim(34, 578088, 2), Dim(2, 19654992, 1))
    assert spread_mode(1, dims, (128, 2, 34, 2), 0, 0) == (3, True)
    a = packed_args(1, dims, (128, 2, 34, 2))
    assert a.kernel.spread and a.kernel.out_run == 3 and a.kernel.funnel and not a.kernel.words
    # output runs of 25 x 8 = 200 bytes at odd box corners (16375 apart): no words, so the
    # realigned variant (each run in the aligned words it covers)
    dims = (Dim(147, 1, 245625), Dim(15, 147, 16375), Dim(655, 2205, 25), Dim(25, 1444275, 1))
    assert spread_mode(1, dims, (128, 1, 8, 25), 0, 0) == (0, False)
    assert spread_mode(1, dims, (128, 1, 8, 25), 0, 0, realign=True) == (2, True)
    assert not packed_args(1, dims, (128, 1, 8, 25)).kernel.spread  # the element kernel
    k = packed_args(1, dims, (128, 1, 8, 25), realign_out=True).kernel
    assert k.spread and k.realign_out and k.out_run == 2 and k.name.endswith("_r2fa")
    # 4-byte elements, an output pointer off a word: never
    assert spread_mode(4, dims, (128, 1, 8, 25), 0, 0) == (0, False)
    assert spread_mode(1, (Dim(64, 1, 4), Dim(4, 64, 1)), (64, 4), 0, 2) == (0, False)


@pytest.mark.parametrize(
    "fields",
    [
        dict(out_run=0),
        dict(out_run=4),
        dict(words=True, out_run=1),
        dict(elem_bytes=4, out_run=1),
        dict(box=(3, 7, 64), out_run=1),  # a run of 3 bytes: not whole words
        dict(box=(4, 7, 63), out_run=1),  # 63 along the input's innermost without funnel
        dict(box=(3, 7, 64), out_run=3, realign_out=True),  # the run reaches the input's dim
        dict(realign_out=1),
    ],
)
def test_a_spread_spec_is_checked_before_it_becomes_source(fields):
    base = dict(elem_bytes=1, box=(4, 7, 64), in_order=(2, 1, 0), checked=(False,) * 3)
    base.update(spread=True, out_run=1)
    base.update(fields)
    with pytest.raises(ShapeError, match="spread"):
        PackedKernel(**base)


@pytest.mark.parametrize("shape, axes, e", CASES + SPANS)
def test_the_layout_spreads_a_warps_stores_over_the_banks(shape, axes, e):
    """The first warp's spread stores and word loads cost at most twice the conflict-free
    wavefronts (K stores and one load)."""
    q = _pass(shape, axes, e)
    k = packed_args(e, q.dims, q.box).kernel
    assert k.spread, k
    pitch, sh = spread_layout(k)
    assert spread_conflicts(k, pitch, sh) <= 2 * (4 // e + 1), (k, pitch, sh)


def _library(spec: PackedKernel, tmp: Path) -> ctypes.CDLL:
    return library(
        render_packed([spec]), spec.name, dict(_ELEMENT_TYPES)[spec.elem_bytes], THREADS, tmp
    )


def _run(e, dims, box, x, out, tmp, about="", realign_out=False) -> PackedKernel:
    """The spread kernel of `dims` in boxes of `box`, run on a small grid from x to out
    (`about`: what a failed check prints)."""
    a = packed_args(e, dims, box, x.ctypes.data, out.ctypes.data, realign_out=realign_out)
    assert a.kernel.spread, (a.kernel, about)
    lib = _library(a.kernel, tmp)
    lib.at_emu_run(
        ctypes.c_uint(min(a.tiles, 3)),
        ctypes.c_void_p(x.ctypes.data),
        ctypes.c_void_p(out.ctypes.data),
        ctypes.c_char_p(a.pack()),
    )
    return a.kernel


def _arrays(rng, shape, axes, e, pad, offset):
    full = (*shape[:-1], shape[-1] + pad)
    base = rng.integers(0, 256, 16 + (offset + math.prod(full)) * e + 64, dtype=np.uint8)
    start = 16 + offset * e
    x = base[start : start + math.prod(full) * e].view(f"V{e}").reshape(full)[..., : shape[-1]]
    want = np.ascontiguousarray(np.transpose(x, axes))
    out_base = np.full(16 + want.nbytes + 64, 0xA5, dtype=np.uint8)
    out = out_base[16 : 16 + want.nbytes].view(f"V{e}").reshape(want.shape)
    return base, x, want, out_base, out


@pytest.mark.skipif(_CXX is None, reason="needs g++ (C++20) to run the kernel on the CPU")
@pytest.mark.parametrize("shape, axes, e, pad, offset, cut", RUNS)
def test_the_kernel_on_the_cpu_matches_numpy(shape, axes, e, pad, offset, cut, tmp_path_factory):
    """The rendered kernel on a small grid (each block walks several boxes) moves every
    element where np.transpose puts it and writes nothing else, for input rows padded by
    `pad` elements at `offset` elements from a word (funnel loads), with the plan's box or one
    an edge cuts along the input's innermost dim."""
    rng = np.random.default_rng([e, pad, offset, *shape])
    base, x, want, out_base, out = _arrays(rng, shape, axes, e, pad, offset)
    strides = tuple(s // e for s in x.strides)
    q = _pass(shape, axes, e, strides, x.ctypes.data, out.ctypes.data)
    box = q.box
    if cut:
        i0 = next(j for j, d in enumerate(q.dims) if d.in_stride == 1)
        box = next(
            c
            for b in range(q.box[i0] - 1, 1, -1)
            if q.dims[i0].extent % b
            and spread_mode(
                e, q.dims, c := (*q.box[:i0], b, *q.box[i0 + 1 :]), x.ctypes.data, out.ctypes.data
            )[0]
        )
    k = _run(e, q.dims, box, x, out, tmp_path_factory.getbasetemp(), q.describe())
    assert k.funnel == bool(offset or pad or cut or shape[-1] % (4 // e)), k
    assert any(k.checked) or not cut
    assert out.tobytes() == want.tobytes(), f"{k.name}\n{q.describe()}"
    assert (out_base[:16] == 0xA5).all() and (out_base[16 + want.nbytes :] == 0xA5).all()
    del base


@pytest.mark.skipif(_CXX is None, reason="needs g++ (C++20) to run the kernel on the CPU")
@pytest.mark.parametrize(
    "shape, axes, e, box",
    [
        ((13, 2, 51), (0, 2, 1), 1, (4, 51, 2)),  # runs of 102 bytes, 4 a box: the edge's one
        ((9, 3, 35), (0, 2, 1), 2, (2, 35, 3)),  # runs of 105 halves, 2 a box
        ((7, 2, 3, 45), (0, 3, 1, 2), 1, (2, 45, 6)),
    ],
)
def test_an_edge_that_cuts_the_output_run_mid_word(shape, axes, e, box, tmp_path_factory):
    """A box cut along the output run's outermost dim where the cut run is not whole words:
    the word the edge cuts goes out element by element (`run_cut`), the others whole."""
    rng = np.random.default_rng([e, *shape])
    base, x, want, out_base, out = _arrays(rng, shape, axes, e, 0, 1)
    q = _pass(shape, axes, e, tuple(s // e for s in x.strides), x.ctypes.data, out.ctypes.data)
    a = packed_args(e, q.dims, box, x.ctypes.data, out.ctypes.data)
    assert a.kernel.spread and _packed_vars(a.kernel)["run_cut"], (a.kernel, q.describe())
    k = _run(e, q.dims, box, x, out, tmp_path_factory.getbasetemp(), q.describe())
    assert out.tobytes() == want.tobytes(), f"{k.name}\n{q.describe()}"
    assert (out_base[:16] == 0xA5).all() and (out_base[16 + want.nbytes :] == 0xA5).all()
    del base


def test_a_word_box_takes_the_output_run_on_to_whole_words():
    """bool 2x13x84x130x1098 by (0,3,2,4,1): output rows of 13 x 1098 bytes, so every box of
    `packed_box`'s (128 x 13) starts at an odd offset and moves byte by byte (20.7% of copy on
    an H200). Two rows in one box make the run 28548 bytes and every box step whole words: the
    spread kernel takes it (50.1%). No divisor of 1098 does, so the row is taken whole first."""
    dims = plan_permute((2, 13, 84, 130, 1098), (0, 3, 2, 4, 1), 1).dims
    box = packed_box(dims, 1)
    assert box == (1, 1, 1, 128, 13) and vector_widths(dims, box, 1)[1] == 0
    assert word_box(dims, 1, box) == (1, 1, 2, 1098, 13)
    assert packed_args(1, dims, (1, 1, 2, 1098, 13)).kernel.spread
    # already words, wider elements, and a run that would pass PACKED_MAX_BYTES: none
    assert word_box(dims, 1, (1, 1, 2, 1098, 13)) is None
    assert word_box(plan_permute((2, 13, 84, 130, 1098), (0, 3, 2, 4, 1), 4).dims, 4, box) is None
    dims = (Dim(147, 1, 245625), Dim(15, 147, 16375), Dim(655, 2205, 25), Dim(25, 1444275, 1))
    assert word_box(dims, 1, (128, 1, 8, 25)) is None  # 25 x 655 x 15 bytes before a whole word


def _odd_rows(rng: np.random.Generator, e: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A permute whose output rows (c x n elements, both odd) start at odd offsets: shape
    (a, c, r, b, n) to (a, b, r, n, c), r a multiple of 4 and b of 2 or more (else r and n fuse), as the
    bool example is."""
    a, b, r = int(rng.integers(1, 3)), int(rng.integers(2, 4)), 4 * int(rng.integers(1, 3))
    c, n = (2 * int(rng.integers(k, 3 * k)) + 1 for k in (1, 17))
    return (a, c, r, b, n), (0, 3, 2, 4, 1)


@pytest.mark.parametrize("e", [1, 2])
def test_word_boxes_of_odd_rows_on_the_cpu(e: int, tmp_path_factory):
    """Random permutes of odd output rows, in boxes of one row: `word_box` gives a box within
    PACKED_MAX_BYTES that the spread kernel takes (odd rows have no K x K blocks), and that
    kernel, run on the CPU on rows at an odd input offset (funnel loads), writes exactly
    np.transpose's bytes and nothing else."""
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        shape, axes = _odd_rows(rng, e)
        base, x, want, out_base, out = _arrays(rng, shape, axes, e, 0, 1)
        dims = plan_permute(shape, axes, e, tuple(s // e for s in x.strides)).dims
        # a box of one output row (n x c), as packed_box takes one where rows are long
        row = shape[1] * shape[4]
        cut = tuple(d.extent if d.out_stride < row else 1 for d in dims)
        assert vector_widths(dims, cut, e)[1] == 0, (seed, shape, cut)
        box = word_box(dims, e, cut)
        assert box is not None and math.prod(box) * e <= PACKED_MAX_BYTES, (seed, shape, cut)
        k = _run(e, dims, box, x, out, tmp_path_factory.getbasetemp(), (seed, shape, box))
        assert out.tobytes() == want.tobytes(), (seed, shape, box, k.name)
        assert (out_base[:16] == 0xA5).all() and (out_base[16 + want.nbytes :] == 0xA5).all()
        del base


# --- the realigned variant: output runs that start at any element ---------------------------
# The lowest calls of random permute mixes on an H200 (% of a copy, the element kernel served):
# float16 459x81x77x9x1 by (2,1,4,3,0) 32.3, bool 20861x308x6x3x1 by (3,1,0,2,4) 16.7, uint8
# 25x655x15x147 by (3,2,1,0) 14.4, int8 4676x2x987x58 by (3,0,2,1) 17.9: their output rows
# start at odd offsets (strides 459, 125166, 245625 and 1974 elements).
TAILS = [
    ((459, 81, 77, 9, 1), (2, 1, 4, 3, 0), 2),
    ((20861, 308, 6, 3, 1), (3, 1, 0, 2, 4), 1),
    ((25, 655, 15, 147), (3, 2, 1, 0), 1),
    ((4676, 2, 987, 58), (3, 0, 2, 1), 1),
]


@pytest.mark.parametrize("shape, axes, e", TAILS)
def test_runs_at_odd_offsets_take_the_realigned_spread_kernel(shape, axes, e):
    p = plan_permute(shape, axes, e)
    box = packed_box(p.dims, e)
    assert vector_widths(p.dims, box, e)[1] == 0  # no aligned words on the output side
    assert realigned_out(p.dims, box, e)
    assert not packed_args(e, p.dims, box).kernel.spread  # unless asked for: the element kernel
    k = packed_args(e, p.dims, box, realign_out=True).kernel
    assert k.spread and k.realign_out and not k.words, k
    assert k.in_order[0] >= k.out_run  # the run ends before the input's innermost box dim
    # where the output does take words, the aligned kernel; never both
    dims = (Dim(64, 1, 4), Dim(4, 64, 1))
    assert spread_mode(1, dims, (64, 4), 0, 0, realign=True) == (0, False)
    assert not realigned_out(dims, (64, 4), 1)
    assert not packed_args(1, dims, (64, 4), 0, 2, realign_out=True).kernel.realign_out
    # a run that reaches the input's innermost box dim (it would span slabs): not taken
    dims = (Dim(5, 7, 1), Dim(7, 1, 5), Dim(9, 35, 35))
    assert not realigned_out(dims, (5, 7, 9), 1) and not realigned_out(dims, (5, 7, 9), 2)


@pytest.mark.parametrize(
    "shape, axes, e",
    [*TAILS, ((2637, 3025, 4, 2), (3, 1, 2, 0), 1), ((2, 4, 1717, 553, 5), (4, 1, 3, 0, 2), 1)],
)
def test_realigned_runs_lie_an_odd_count_of_words_apart(shape, axes, e):
    """Where dims lie between the output run and the input's innermost box dim, the realigned
    kernel's runs are an odd count of words apart in shared memory, so a warp's spread stores
    (lanes a run apart) spread over the banks: at most twice the conflict-free wavefronts,
    where dense runs of 128 bytes cost 65 (uint8 2637x3025x4x2: 62.0M bank conflicts)."""
    dims = plan_permute(shape, axes, e).dims
    k = packed_args(e, dims, packed_box(dims, e), realign_out=True).kernel
    inner = _spread_inner(k)
    i0, t = k.in_order[0], k.out_run
    if t < i0:
        assert inner[t] % 4 == 0 and (inner[t] // 4) % 2 == 1, (k, inner)
        assert inner[t] >= math.prod(k.box[:t]) * e
    pitch, sh = spread_layout(k)
    assert spread_conflicts(k, pitch, sh) <= 2 * (4 // e + 1), (k, pitch, sh)


def _reversal(rng: np.random.Generator, e: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A permute whose output rows are n elements (n odd and longer than a box takes, so the
    box cuts it) at odd offsets: (n, m, k) or (b, n, m, k) with the last three reversed, the
    input's innermost dim k outermost among the box's, as the float16 reversal above."""
    # m x k of 8 or more: packed_box's first run target (128 bytes) already fills its box
    n, m, k = 2 * int(rng.integers(70, 300)) + 1, int(rng.integers(2, 7)), int(rng.integers(4, 20))
    if rng.integers(2):
        return (n, m, k), (2, 1, 0)
    return (int(rng.integers(2, 4)), n, m, k), (0, 3, 2, 1)


@pytest.mark.skipif(_CXX is None, reason="needs g++ (C++20) to run the kernel on the CPU")
@pytest.mark.parametrize("e", [1, 2])
def test_realigned_runs_on_the_cpu(e: int, tmp_path_factory):
    """Random permutes whose output runs start at odd elements, in the plan's packed box: the
    realigned spread kernel, run on the CPU (alignment-checked) at input and output pointers
    off a word by 0 to 3 elements, with the box whole and cut at an edge, writes exactly
    np.transpose's bytes and nothing else (poisoned output and guard bytes)."""
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        shape, axes = _reversal(rng, e)
        offset, out_offset = (int(v) for v in rng.integers(0, 4 // e, size=2))
        base, x, want, out_base, out = _arrays(rng, shape, axes, e, 0, offset)
        if out_offset:  # the output at an odd element too
            out_base = np.full(16 + (out_offset + want.size) * e + 64, 0xA5, dtype=np.uint8)
            start = 16 + out_offset * e
            out = out_base[start : start + want.nbytes].view(f"V{e}").reshape(want.shape)
        dims = plan_permute(shape, axes, e, tuple(s // e for s in x.strides)).dims
        box = packed_box(dims, e)
        about = (seed, shape, axes, box, offset, out_offset)
        k = _run(e, dims, box, x, out, tmp_path_factory.getbasetemp(), about, realign_out=True)
        assert k.realign_out, (about, k)
        assert out.tobytes() == want.tobytes(), (about, k.name)
        start = 16 + out_offset * e
        assert (out_base[:start] == 0xA5).all() and (out_base[start + want.nbytes :] == 0xA5).all()
        del base


@pytest.mark.skipif(_CXX is None, reason="needs g++ (C++20) to run the kernel on the CPU")
@pytest.mark.parametrize("e", [1, 2])
def test_realigned_twins_of_random_permutes_on_the_cpu(e: int, tmp_path_factory, monkeypatch):
    """Random 3- to 5-D permutes of small arrays (odd sides, input and output pointers off a
    word by 0 to K - 1 elements), planned as a first call races them: every realigned twin
    among the plan's alternatives, run on the CPU, writes exactly np.transpose's bytes and
    nothing else, whatever its run's dims, its slab's dims and the edges that cut it."""
    monkeypatch.setattr(plan_module, "ALT_MIN_BYTES", 0)  # small arrays race too
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    runs = 0
    for _ in range(400):
        if runs == 5:
            break
        nd = int(rng.integers(3, 6))
        shape = tuple(int(v) for v in rng.integers(1, 40, nd))
        if math.prod(shape) > 300_000:
            continue
        axes = tuple(int(a) for a in rng.permutation(nd))
        offset, out_offset = (int(v) for v in rng.integers(0, 4 // e, size=2))
        base, x, want, _, _ = _arrays(rng, shape, axes, e, 0, offset)
        out_base = np.full(16 + (out_offset + want.size) * e + 64, 0xA5, dtype=np.uint8)
        start = 16 + out_offset * e
        out = out_base[start : start + want.nbytes].view(f"V{e}").reshape(want.shape)
        strides = tuple(s // e for s in x.strides)
        p = plan_permute(shape, axes, e, strides, in_ptr=x.ctypes.data, out_ptr=out.ctypes.data)
        for q in p.alternatives:
            if not q.realign_out or runs == 5:
                continue
            about = (seed, shape, axes, q.box, offset, out_offset)
            out_base[:] = 0xA5
            k = _run(e, q.dims, q.box, x, out, tmp_path_factory.getbasetemp(), about, True)
            assert k.realign_out, (about, k)
            assert out.tobytes() == want.tobytes(), (about, k.name)
            assert (out_base[:start] == 0xA5).all() and (
                out_base[start + want.nbytes :] == 0xA5
            ).all()
            runs += 1
        del base
    assert runs == 5, f"only {runs} realigned twins in 400 draws (seed {seed})"

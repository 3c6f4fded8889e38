"""The packed kernels (templates/packed/) without a GPU: a Python model of a block's walk
(the box index split over the grid dims by the kernel's multiply-shift division, the edge
limits, the box read in the input's order into skewed shared memory and written in the
output's, by the table of per-thread offsets or by splitting each index), run on the very
arguments the host packs (`packed.packed_args`) for the boxes the plan picks
(`plan.packed_box`), against np.transpose; the boxes' promises; the kernel spec's checks
(everything in it becomes CUDA source); and nvcc's resource report for rendered kernels."""

from __future__ import annotations

import dataclasses
import math
import re
import shutil
from collections.abc import Sequence

import numpy as np
import pytest
from _nvcc import assert_nvcc_silent

from autotranspose import errors
from autotranspose.kernels.codegen import PACKED_THREADS, _packed_vars, render_packed
from autotranspose.kernels.packed import (
    ARG_BYTES,
    MAX_BLOCKS,
    MAX_BOX_DIMS,
    MAX_GRID_DIMS,
    MIN_BLOCKS,
    PIPELINE_MAX_BYTES,
    PIPELINE_MIN_ELEM_BYTES,
    PackedArgs,
    PackedKernel,
    divide,
    divisor,
    packed_args,
    pipelines,
    word_aligned,
    words_mode,
)
from autotranspose.plans.boxes import (
    LONG_OUT_MAX_BYTES,
    PACKED_MAX_BOX_DIMS,
    PACKED_MAX_BYTES,
    PACKED_MIN_ELEMS,
    PACKED_MIN_RUN_BYTES,
    Dim,
    long_out_box,
    packed_box,
    packed_runs,
    whole_box,
)
from autotranspose.plans.permute import PACKED, PACKED_BIG_ELEMS, Pass, can_pipeline, plan_permute
from autotranspose.runtime.compiler import source_resources

SIZES = (1, 2, 4, 8, 16)


def _boxes(a: PackedArgs):
    """The kernel's walk over boxes: each box's input and output corner and, per box dim, how
    much of it is inside the problem (the multiply-shift split checked against //)."""
    k = a.kernel
    checked = [
        kk for kk in range(len(k.box)) if k.checked[kk]
    ]  # the grid's first dims, in this order
    assert a.ngrid <= MAX_GRID_DIMS and all(t >= 2 for t in a.tiles_of[: a.ngrid])
    for tile in range(a.tiles):
        rest, ib, ob, lim = tile, 0, 0, list(k.box)
        for g in range(a.ngrid):
            q = divide(rest, a.div_magic[g], a.div_shift[g])
            assert q == rest // a.tiles_of[g], "the multiply-shift division is off"
            r = rest - q * a.tiles_of[g]
            rest = q
            ib += r * a.tile_in[g]
            ob += r * a.tile_out[g]
            if g < len(checked):
                lim[checked[g]] = min(
                    k.box[checked[g]], a.extent[checked[g]] - r * k.box[checked[g]]
                )
        assert rest == 0, "the box index has digits left over"
        yield ib, ob, lim


def _digits(index: np.ndarray, order: Sequence[int], ext: Sequence[int]) -> list[np.ndarray]:
    """A linear index's digits along `ext`, the dims in `order` innermost first (the
    template's `split`)."""
    d, r = [None] * len(ext), index.copy()
    for j, kk in enumerate(order):
        d[kk] = r if j == len(order) - 1 else r % ext[kk]
        r = r // ext[kk]
    return d


def model_words(
    a: PackedArgs,
    src: np.ndarray,
    out: np.ndarray,
    paths: dict[str, int] | None = None,
    lead: int = 0,
) -> np.ndarray:
    """The words kernel's walk (`PackedKernel.words`): per box, each K x K block's K word loads
    (aligned: element index a multiple of K, the arrays starting at a word; funnel: `lead`
    elements past a word, each load the one or two aligned words holding its elements, the
    second only where they reach into it, a block's last elements along the input's innermost
    dim possibly fewer than K), its byte-permuted words stored to shared words (only those
    that exist), then the box written in aligned words. Like `model`."""
    k = a.kernel
    v = _packed_vars(k)
    kk, i0, nb, sh = v["K"], v["i0"], len(k.box), v["wshift"]
    words = [1] + [int(np.prod(k.box[:d])) // kk for d in range(1, nb)]
    shared_index = [
        v["mstep"] * kk if d == i0 else words[d] for d in range(nb)
    ]  # a block's word, per digit
    rscale = [kk if d in (0, i0) else 1 for d in range(nb)]
    b = np.arange(v["nblocks"], dtype=np.int64)
    w = np.arange(v["nwords"], dtype=np.int64)
    d_in, d_out = _digits(b, k.in_order, v["rext"]), _digits(w, range(nb), v["wext"])
    written = np.zeros(out.size, dtype=np.int64)
    paths = {} if paths is None else paths
    for ib, ob, lim in _boxes(a):
        table = k.table and all(lim[d] == k.box[d] for d in range(nb) if k.checked[d])
        paths["table" if table else "digits"] = paths.get("table" if table else "digits", 0) + 1
        box = np.full((v["wsmem"], kk), -1, dtype=src.dtype)
        loaded = np.zeros(v["wsmem"], dtype=bool)
        ok = np.ones(b.size, dtype=bool)
        for d in range(nb):
            ok &= d_in[d] * rscale[d] < lim[d]
        at = ib + sum(d_in[d] * rscale[d] * a.in_stride[d] for d in range(nb))[ok]
        w0 = sum(d_in[d] * shared_index[d] for d in range(nb))[ok]
        nv = np.minimum(kk, lim[i0] - d_in[i0][ok] * kk)  # the block's elements along i0
        assert (nv >= 1).all() and (k.funnel or (nv == kk).all())
        for m in range(kk):  # row m of each block: one word of up to K elements along i0
            row = at + m * a.in_stride[0]
            if k.funnel:  # the aligned words read hold at least one element of x each
                first = (row + lead) // kk
                second = (row + lead) % kk + nv > kk
                words_read = np.concatenate([first, first[second] + 1]) * kk - lead
                assert (words_read + kk > 0).all() and (words_read < src.size).all(), (
                    "a word outside x"
                )
            else:
                assert (row % kk == 0).all() and lead == 0, "an unaligned word load"
            assert row.min(initial=0) >= 0 and (row + nv).max(initial=0) <= src.size, (
                "a read outside x"
            )
            for q in range(kk):  # after the byte permute: word q holds the K rows' element q
                has = nv > q
                slot = (w0 + q * v["mstep"])[has]
                slot = slot + (slot >> sh)
                box[slot, m] = src[row[has] + q]
                loaded[slot] = True
        slots = np.concatenate(
            [
                (w0 + q * v["mstep"])[nv > q] + ((w0 + q * v["mstep"])[nv > q] >> sh)
                for q in range(kk)
            ]
        )
        assert slots.max(initial=0) < v["wsmem"] and np.unique(slots).size == slots.size, (
            "shared words collide"
        )
        ok = np.ones(w.size, dtype=bool)
        for d in range(nb):
            ok &= d_out[d] * (kk if d == 0 else 1) < lim[d]
        slot = (w + (w >> sh))[ok]
        if table:  # the write slot steps by a constant: wslot + j * wwstride
            t, j = w % PACKED_THREADS, w // PACKED_THREADS
            assert np.array_equal((t + (t >> sh) + j * v["wwstride"])[ok], slot)
        assert loaded[slot].all(), "a store of a shared word no thread loaded"
        to = ob + sum(d_out[d] * (kk if d == 0 else 1) * a.out_stride[d] for d in range(nb))[ok]
        assert (to % kk == 0).all(), "an unaligned word store"
        assert to.min(initial=0) >= 0 and to.max(initial=0) + kk <= out.size, "a write outside out"
        for q in range(kk):
            out[to + q] = box[slot, q]
            np.add.at(written, to + q, 1)
    return written


def model(
    a: PackedArgs,
    src: np.ndarray,
    out: np.ndarray,
    paths: dict[str, int] | None = None,
    lead: int = 0,
) -> np.ndarray:
    """Run the kernel's walk: every block's box, every thread's elements (vectorised over the
    box's indices), from `src` into `out` (flat arrays of elements). Returns how often each
    output element was written; counts the boxes each path moved into `paths`."""
    k = a.kernel
    if k.words:
        return model_words(a, src, out, paths, lead)
    v = _packed_vars(k)
    nb = len(k.box)
    dense = np.cumprod((1, *k.box[:-1]))
    shift, pad, smem = v["shift"], v["pad"], v["smem"]
    written = np.zeros(out.size, dtype=np.int64)
    i = np.arange(k.volume, dtype=np.int64)  # every thread's indices: j * THREADS + threadIdx.x
    d_in, d_out = _digits(i, k.in_order, k.box), _digits(i, range(nb), k.box)
    checked = [kk for kk in range(nb) if k.checked[kk]]
    paths = {} if paths is None else paths
    for ib, ob, lim in _boxes(a):
        table = k.table and all(lim[kk] == k.box[kk] for kk in checked)
        paths["table" if table else "digits"] = paths.get("table" if table else "digits", 0) + 1
        box = np.full(smem, -1, dtype=src.dtype)
        loaded = np.zeros(smem, dtype=bool)
        ok = np.ones(k.volume, dtype=bool)
        for kk in range(nb):
            if k.checked[kk]:
                ok &= d_in[kk] < lim[kk]
            else:
                assert lim[kk] == k.box[kk]
        s = sum(d_in[kk] * int(dense[kk]) for kk in range(nb))[ok]
        at = ib + sum(d_in[kk] * a.in_stride[kk] for kk in range(nb))[ok]
        slot = s + (s >> shift) * pad
        assert slot.max(initial=0) < smem and np.unique(slot).size == slot.size, (
            "shared slots collide"
        )
        assert at.min(initial=0) >= 0 and at.max(initial=0) < src.size, "a read outside x"
        box[slot], loaded[slot] = src[at], True
        ok = np.ones(k.volume, dtype=bool)
        for kk in range(nb):
            if k.checked[kk]:
                ok &= d_out[kk] < lim[kk]
        if table:  # the write slot steps by a constant: wslot + j * wstride
            t, j = i % PACKED_THREADS, i // PACKED_THREADS
            slot = (t + (t >> shift) * pad + j * v["wstride"])[ok]
            assert np.array_equal(slot, (i + (i >> shift) * pad)[ok])
        else:
            slot = (i + (i >> shift) * pad)[ok]
        assert loaded[slot].all(), "a store of a shared slot no thread loaded"
        to = ob + sum(d_out[kk] * a.out_stride[kk] for kk in range(nb))[ok]
        assert to.min(initial=0) >= 0 and to.max(initial=0) < out.size, "a write outside out"
        out[to] = box[slot]
        np.add.at(written, to, 1)
    return written


def _random_problem(rng: np.random.Generator, e: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A random 2- to 6-D permute with small and odd extents (a few thousand elements)."""
    nd = int(rng.integers(2, 7))
    top = max(2, round(6000 ** (1 / nd)))
    shape = tuple(int(v) for v in rng.integers(1, top + 1, nd))
    return shape, tuple(int(a) for a in rng.permutation(nd))


@pytest.mark.parametrize("e", SIZES)
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("min_elems", [PACKED_MIN_ELEMS, PACKED_BIG_ELEMS, "whole", "long_out"])
def test_the_walk_moves_what_np_transpose_moves(e: int, seed: int, min_elems: int | str):
    """Random permutes, boxed as the plan boxes them (edge boxes included; the plan's box,
    the bigger one a first call also times, `whole_box`'s, which no edge cuts, and
    `long_out_box`'s, which writes one long run): every output element is written once,
    from the input element np.transpose puts there."""
    rng = np.random.default_rng([seed, e, 4242])
    checked, paths = 0, {}
    for _ in range(40):
        shape, axes = _random_problem(rng, e)
        dims = plan_permute(shape, axes, e).dims
        if len(dims) > MAX_GRID_DIMS:
            continue
        if min_elems == "whole":
            box = whole_box(dims, e)
            if box is None:
                continue
            # it divides every extent, fits the kernels' shared memory, and its runs are
            # whole sectors on both sides
            assert all(d.extent % b == 0 for d, b in zip(dims, box, strict=True)), box
            assert math.prod(box) * e <= PACKED_MAX_BYTES
            assert min(packed_runs(dims, box)) * e >= PACKED_MIN_RUN_BYTES
            assert sum(b > 1 for b in box) <= PACKED_MAX_BOX_DIMS
        elif min_elems == "long_out":
            box = long_out_box(dims, e)
            if box is None:
                continue
            # it writes longer runs than the box a first call races, fits LONG_OUT_MAX_BYTES,
            # and its runs are whole sectors on both sides
            raced = packed_box(dims, e)
            assert raced is not None
            assert packed_runs(dims, box)[1] > packed_runs(dims, raced)[1], (box, raced)
            assert math.prod(box) * e <= LONG_OUT_MAX_BYTES
            assert min(packed_runs(dims, box)) * e >= PACKED_MIN_RUN_BYTES
            assert sum(b > 1 for b in box) <= PACKED_MAX_BOX_DIMS
        else:
            box = packed_box(dims, e, min_elems)
            if box is None:
                continue
        x = rng.integers(0, 2**62, math.prod(shape), dtype=np.int64)
        out = np.full(x.size, -1, dtype=np.int64)
        written = model(packed_args(e, dims, box), x, out, paths)
        want = np.transpose(x.reshape(shape), axes).ravel()
        assert (written == 1).all(), f"{shape} by {axes} in boxes {box}"
        assert np.array_equal(out, want), f"{shape} by {axes} in boxes {box}"
        checked += 1
    assert checked >= {"whole": 8, "long_out": 1}.get(min_elems, 10)
    assert paths.get("table", 0) > 0, paths  # whole boxes of up to 16 elements a thread


def test_a_long_out_box_takes_the_outputs_short_dims_whole():
    """float32 180x37x3x3326 by (0,3,2,1): the grown boxes cut the output's 37 x 3 and write
    runs of 128-296 bytes; the long-out box reads runs of 128 bytes and writes the whole box
    as one run (13 KB); the plan races it."""
    p = plan_permute((180, 37, 3, 3326), (0, 3, 2, 1), 4)
    dims = p.passes[0].problem()
    box = long_out_box(dims, 4)
    assert box == (1, 32, 3, 37)
    assert packed_runs(dims, box) == (32, math.prod(box))
    assert any(q.kind == "packed" and q.box == box for q in p.alternatives)
    # where the raced box already writes the longest run there is, none
    assert long_out_box(plan_permute((64, 256, 56, 56), (0, 2, 3, 1), 2).dims, 2) is None


@pytest.mark.parametrize(
    "dims, e, box",
    [
        # float64 3x33x5478x2x63 by (4,2,0,3,1): packed_box takes 32 of 63 and of 33
        (
            [
                Dim(63, 1, 1084644),
                Dim(5478, 126, 198),
                Dim(3, 22777524, 66),
                Dim(2, 63, 33),
                Dim(33, 690228, 1),
            ],
            8,
            (63, 1, 1, 1, 33),
        ),
        # int16 2x665960x9x8 by (3,1,0,2): 8 of 665960 divides it already
        (
            [Dim(8, 1, 11987280), Dim(665960, 72, 18), Dim(2, 47949120, 9), Dim(9, 8, 1)],
            2,
            (8, 8, 2, 9),
        ),
    ],
)
def test_a_whole_box_of_odd_extents(dims: list[Dim], e: int, box: tuple[int, ...]):
    assert whole_box(dims, e) == box
    cut = packed_box(dims, e)
    assert cut is not None and math.prod(cut) * e <= PACKED_MAX_BYTES


@pytest.mark.parametrize("e", [1, 2])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("min_elems", [PACKED_MIN_ELEMS, PACKED_BIG_ELEMS])
def test_the_words_walk_moves_what_np_transpose_moves(e: int, seed: int, min_elems: int):
    """Random permutes of 1- and 2-byte elements whose innermost extents are multiples of K
    (so most boxes take the words kernel): every output element written once, from the right
    input element, every load and store an aligned word; whole and cut boxes both seen."""
    rng = np.random.default_rng([seed, e, 5151])
    kk = 4 // e
    checked, paths = 0, {}
    for _ in range(60):
        shape, axes = _random_problem(rng, e)
        shape = tuple(s * kk if rng.random() < 0.8 else s for s in shape)
        dims = plan_permute(shape, axes, e).dims
        box = packed_box(dims, e, min_elems) if len(dims) <= MAX_GRID_DIMS else None
        if box is None:
            continue
        a = packed_args(e, dims, box)
        if not a.kernel.words:
            continue
        x = rng.integers(0, 2**62, math.prod(shape), dtype=np.int64)
        out = np.full(x.size, -1, dtype=np.int64)
        written = model(a, x, out, paths)
        want = np.transpose(x.reshape(shape), axes).ravel()
        assert (written == 1).all(), f"{shape} by {axes} in boxes {box}"
        assert np.array_equal(out, want), f"{shape} by {axes} in boxes {box}"
        checked += 1
    assert checked >= 8, checked
    assert paths.get("table", 0) > 0 and paths.get("digits", 0) > 0, paths


@pytest.mark.parametrize(
    "e, dims, box, ptrs, words, funnel",
    [
        (1, (Dim(8, 1, 12), Dim(12, 8, 1)), (8, 12), (0, 0), True, False),  # a 12x8 byte transpose
        (
            1,
            (Dim(8, 1, 12), Dim(12, 8, 1)),
            (8, 12),
            (2, 0),
            True,
            True,
        ),  # the input pointer is not a word's
        (
            1,
            (Dim(8, 1, 12), Dim(12, 8, 1)),
            (8, 12),
            (0, 6),
            False,
            False,
        ),  # nor the output's: no words
        (
            1,
            (Dim(8, 1, 14), Dim(14, 8, 1)),
            (8, 14),
            (0, 0),
            False,
            False,
        ),  # 14 output rows: not a multiple of 4
        (
            1,
            (Dim(7, 1, 12), Dim(12, 7, 1)),
            (7, 12),
            (0, 0),
            True,
            True,
        ),  # input rows of 7: the last block part-filled
        (
            1,
            (Dim(8, 1, 12), Dim(12, 9, 1)),
            (8, 12),
            (0, 0),
            True,
            True,
        ),  # input rows 9 apart: unaligned
        (1, (Dim(8, 1, 13), Dim(12, 8, 1)), (8, 12), (0, 0), False, False),  # output rows 13 apart
        (2, (Dim(3, 200, 200), Dim(8, 1, 10), Dim(10, 8, 1)), (1, 8, 10), (4, 8), True, False),
        (
            2,
            (Dim(3, 201, 200), Dim(8, 1, 10), Dim(10, 8, 1)),
            (1, 8, 10),
            (0, 0),
            True,
            True,
        ),  # odd input batch stride
        (
            2,
            (Dim(3, 200, 201), Dim(8, 1, 10), Dim(10, 8, 1)),
            (1, 8, 10),
            (0, 0),
            False,
            False,
        ),  # odd output one
        (
            4,
            (Dim(8, 1, 12), Dim(12, 8, 1)),
            (8, 12),
            (0, 0),
            False,
            False,
        ),  # 4-byte elements: words already
    ],
)
def test_the_words_kernel_only_where_every_word_is_aligned(e, dims, box, ptrs, words, funnel):
    """Aligned words on both sides, or (funnel) on the output's only: the words kernel;
    otherwise the element kernel, and asking for words there is a clear error."""
    assert word_aligned(e, dims, box, *ptrs) is (words and not funnel)
    assert words_mode(e, dims, box, *ptrs) == (words, words and funnel)
    k = packed_args(e, dims, box, *ptrs, spread=False).kernel
    assert (k.words, k.funnel) == (words, funnel) and k.name.endswith(
        "_kf" if funnel else "_k" if words else "n"
    )
    assert packed_args(e, dims, box, *ptrs, words=False).kernel.words is False
    if not words:
        with pytest.raises(errors.ShapeError, match="word-aligned"):
            packed_args(e, dims, box, *ptrs, words=True)


@pytest.mark.parametrize("e", [1, 2])
@pytest.mark.parametrize("seed", range(3))
def test_the_funnel_walk_moves_what_np_transpose_moves(e: int, seed: int):
    """Random permutes of 1- and 2-byte elements whose output side allows words and whose
    input side does not (odd input extents and strides, the input `lead` elements past a
    word): every output element written once from the right input element, every aligned
    word a load reads holding at least one element of x, no shared word stored twice."""
    rng = np.random.default_rng([seed, e, 6161])
    kk = 4 // e
    checked, partial = 0, 0
    for _ in range(120):
        shape, axes = _random_problem(rng, e)
        o = axes[-1]  # the output's innermost axis: a multiple of K, like every output stride
        shape = tuple(s * kk if j == o or rng.random() < 0.3 else s for j, s in enumerate(shape))
        dims = plan_permute(shape, axes, e).dims
        box = (
            packed_box(dims, e, int(rng.choice([PACKED_MIN_ELEMS, PACKED_BIG_ELEMS])))
            if len(dims) <= MAX_GRID_DIMS
            else None
        )
        lead = int(rng.integers(0, kk))
        if box is None or words_mode(e, dims, box, lead * e, 0) != (True, True):
            continue
        a = packed_args(e, dims, box, lead * e, 0)
        assert a.kernel.funnel
        partial += _packed_vars(a.kernel)["partial"]
        x = rng.integers(0, 2**62, math.prod(shape), dtype=np.int64)
        out = np.full(x.size, -1, dtype=np.int64)
        written = model(a, x, out, lead=lead)
        want = np.transpose(x.reshape(shape), axes).ravel()
        assert (written == 1).all(), f"{shape} by {axes} in boxes {box}, lead {lead}"
        assert np.array_equal(out, want), f"{shape} by {axes} in boxes {box}, lead {lead}"
        checked += 1
    assert checked >= 10 and partial >= 3, (checked, partial)


@pytest.mark.parametrize(
    "dims, box",
    [
        ((Dim(7, 1, 13), Dim(13, 7, 1)), (7, 8)),  # a 7x13 transpose, the 13 cut at 8
        ((Dim(5, 40, 3), Dim(3, 1, 1), Dim(9, 3, 15)), (2, 3, 4)),  # two dims cut, odd edges
        ((Dim(3, 100, 1), Dim(11, 1, 3)), (3, 4)),  # strided input: gaps of 89
    ],
)
def test_edge_boxes_and_views(dims: tuple[Dim, ...], box: tuple[int, ...]):
    """Hand-made boxes that cut dims at their edges, and strides with gaps: exactly the
    elements inside are moved, no read or write strays (the model asserts bounds)."""
    extents = [d.extent for d in dims]
    span_in = 1 + sum((d.extent - 1) * d.in_stride for d in dims)
    span_out = 1 + sum((d.extent - 1) * d.out_stride for d in dims)
    x = np.arange(span_in, dtype=np.int64) * 7 + 3
    out = np.full(span_out, -1, dtype=np.int64)
    a = packed_args(4, dims, box)
    assert any(a.kernel.checked)
    paths: dict[str, int] = {}
    written = model(a, x, out, paths)
    assert paths["digits"] > 0 and paths["table"] > 0, paths  # cut boxes split each index
    for index in np.ndindex(*extents):
        o = sum(k * d.out_stride for k, d in zip(index, dims, strict=True))
        i = sum(k * d.in_stride for k, d in zip(index, dims, strict=True))
        assert out[o] == x[i] and written[o] == 1
    assert written.sum() == math.prod(extents)


@pytest.mark.parametrize("e", SIZES)
@pytest.mark.parametrize("min_elems", [PACKED_MIN_ELEMS, PACKED_BIG_ELEMS])
def test_boxes_keep_their_promises(e: int, min_elems: int):
    """Whatever the plan boxes: runs of at least PACKED_MIN_RUN_BYTES on both sides, at most
    PACKED_MAX_BYTES of shared memory and PACKED_MAX_BOX_DIMS dims, a box within the dims,
    and an element for every thread of a block unless the whole problem is smaller (a box
    stops short of PACKED_MIN_ELEMS only where the next run target would pass the memory
    cap)."""
    rng = np.random.default_rng([e, 77])
    boxed = small = 0
    for _ in range(300):
        shape, axes = _random_problem(rng, e)
        shape = tuple(s * int(rng.integers(1, 40)) if rng.random() < 0.3 else s for s in shape)
        dims = plan_permute(shape, axes, e).dims
        box = packed_box(dims, e, min_elems) if len(dims) <= MAX_GRID_DIMS else None
        if box is None:
            continue
        boxed += 1
        runs = packed_runs(dims, box)
        volume = math.prod(box)
        assert min(runs) * e >= PACKED_MIN_RUN_BYTES and volume * e <= PACKED_MAX_BYTES
        assert sum(b > 1 for b in box) <= PACKED_MAX_BOX_DIMS
        assert all(1 <= b <= d.extent for b, d in zip(box, dims, strict=True))
        whole = math.prod(d.extent for d in dims)
        assert volume >= min(PACKED_THREADS, whole), (shape, axes, box)
        small += volume < min(min_elems, whole)
        plans = packed_box(dims, e)  # the plan's own box: a bigger target never boxes less
        assert plans is None or volume >= math.prod(plans), (shape, axes, box, plans)
        partial = [b for b, d in zip(box, dims, strict=True) if b < d.extent]
        assert all(b & (b - 1) == 0 for b in partial), f"a dim cut at {partial}: powers of two"
    # the plan's box reaches its target but for a few; the bigger one often meets the cap
    assert boxed > 50 and (small < boxed / 4 or min_elems * e > PACKED_MAX_BYTES / 4)


def test_the_plan_packs_what_would_be_small_launches():
    """float32 (200, 64, 112, 8) by (3, 1, 0, 2): 64 launches of 0.7 MB as a transpose, one
    packed launch whose box reads 8 x 112 contiguous elements and writes 112 x 2."""
    p = plan_permute((200, 64, 112, 8), (3, 1, 0, 2), 4)
    (q,) = p.passes
    assert q.kind == PACKED and p.launches == 1
    assert q.box == (8, 1, 2, 112) and packed_runs(q.dims, q.box) == (896, 224)
    a = packed_args(4, q.dims, q.box)
    assert a.kernel == PackedKernel(4, (112, 2, 8), (2, 0, 1), (False, False, False))
    assert packed_args(4, q.dims, q.box, pipelined=True).kernel == dataclasses.replace(
        a.kernel, pipelined=True
    )
    assert (
        a.tiles == 64 * 100 and a.ngrid == 2 and a.tiles_of[:2] == (100, 64)
    )  # dims of one box: not walked


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"elem_bytes": 3}, "3-byte"),
        ({"box": ()}, "positive int"),
        ({"box": (4, 0)}, "positive int"),
        ({"box": (4, "8); evil(")}, "positive int"),
        (
            {
                "box": (2,) * (MAX_BOX_DIMS + 1),
                "in_order": tuple(range(MAX_BOX_DIMS + 1)),
                "checked": (False,) * (MAX_BOX_DIMS + 1),
            },
            "positive int",
        ),
        ({"in_order": (0, 0)}, "permutation"),
        ({"in_order": (0, 1.0)}, "permutation"),
        ({"checked": (True,)}, "one bool per box dim"),
        ({"checked": (1, 0)}, "one bool per box dim"),
        ({"box": (4096, 4096)}, "shared memory"),
        ({"wide": "yes"}, "shared memory"),
        ({"words": 1}, "bools"),
        ({"pipelined": "no"}, "bools"),
        ({"pipelined": True, "elem_bytes": 2}, "4 bytes or more"),
        (
            {"pipelined": True, "box": (128, 64)},
            "at most 16384 bytes",
        ),  # 32 KB: two buffers overflow
        ({"words": True}, "1- or 2-byte"),  # 4-byte elements
        ({"words": True, "elem_bytes": 1, "box": (30, 32)}, "output's a multiple of 4"),
        ({"words": True, "elem_bytes": 2, "box": (32, 31)}, "input's too unless funnel"),
        ({"funnel": True}, "only for the words"),
        ({"funnel": 1, "words": True, "elem_bytes": 1}, "only for the words"),
        ({"words": True, "elem_bytes": 1, "in_order": (0, 1)}, "different"),
    ],
)
def test_a_kernel_spec_is_checked_before_it_becomes_source(fields, words):
    good = {"elem_bytes": 4, "box": (32, 32), "in_order": (1, 0), "checked": (False, True)}
    with pytest.raises(errors.ShapeError, match=words):
        PackedKernel(**{**good, **fields})
    with pytest.raises(TypeError):
        render_packed(["at_packed_s4_b32x32_i10_fc_n"])


@pytest.mark.parametrize(
    "dims, box, words",
    [
        ((Dim(4, 1, 1),), (4, 4), "one extent per dim"),
        ((Dim(4, 1, 4), Dim(4, 4, 1)), (8, 4), "does not fit"),
        ((Dim(4, 1, 4), Dim(4, 4, 1)), (1, 1), "one element"),
    ],
)
def test_what_the_kernel_cannot_take_is_refused(dims, box, words):
    with pytest.raises(errors.ShapeError, match=words):
        packed_args(4, dims, box)


def test_the_struct_matches_the_template():
    """The packed fields are the C struct's, in order; the template asserts sizeof."""
    src = render_packed([PackedKernel(4, (32, 32), (1, 0), (False, True))])
    body = re.search(r"struct at_packed_args \{(.*?)\};", src, re.S).group(1)
    names = re.findall(r"^\s*(?:i64|u32) (\w+)", body, re.M)
    assert names == [f.name for f in dataclasses.fields(PackedArgs) if f.name != "kernel"]
    assert f"sizeof(at_packed_args) == {ARG_BYTES}" in src


def _specs() -> list[PackedKernel]:
    """The kernels the plan makes for a spread of permutes, every element size."""
    rng = np.random.default_rng(2024)
    specs: dict[str, PackedKernel] = {}
    for e in SIZES:
        for _ in range(60):
            shape, axes = _random_problem(rng, e)
            shape = tuple(s * int(rng.integers(1, 60)) for s in shape)
            dims = plan_permute(shape, axes, e).dims
            for min_elems in (PACKED_MIN_ELEMS, PACKED_BIG_ELEMS):  # the plan's, the alternative
                box = packed_box(dims, e, min_elems) if len(dims) <= MAX_GRID_DIMS else None
                if box is not None:
                    k = packed_args(e, dims, box).kernel
                    specs.setdefault(k.name, k)
                    if (
                        pipelines(e, k.volume) and not k.words
                    ):  # the pipelined twin a first call races
                        specs.setdefault(k.name + "_p", dataclasses.replace(k, pipelined=True))
    specs["wide"] = PackedKernel(8, (16, 64), (1, 0), (True, True), wide=True)
    for k in _SMALL:
        specs.setdefault(k.name, k)
    return list(specs.values())


# boxes of one element a thread or less (odd problems' edge-sized boxes), cut or whole
_SMALL = (
    PackedKernel(4, (7, 13), (1, 0), (False, True)),
    PackedKernel(2, (5, 40), (1, 0), (True, False)),
    PackedKernel(1, (3, 5, 2), (2, 0, 1), (False, False, False)),
    PackedKernel(1, (8, 12), (1, 0), (False, True), words=True),
    PackedKernel(2, (6, 4, 3), (1, 2, 0), (True, False, True), words=True),
    PackedKernel(2, (32, 31), (1, 0), (False, True), words=True, funnel=True),
    PackedKernel(1, (8, 13, 3), (1, 2, 0), (True, True, False), words=True, funnel=True),
    PackedKernel(1, (4, 6), (1, 0), (False, False), words=True, funnel=True),
    PackedKernel(4, (7, 13), (1, 0), (False, True), pipelined=True),
    PackedKernel(16, (3, 5, 2), (2, 0, 1), (False, False, False), pipelined=True),
    PackedKernel(8, (3, 5, 2), (2, 0, 1), (True, True, False), pipelined=True),
)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_packed_kernels_compile_without_warnings():
    """nvcc says nothing about the generated source (pycuda turns what it says into a
    warning at every user's first call), small and big boxes alike."""
    specs = [
        *_SMALL,
        PackedKernel(4, (32, 32), (1, 0), (False, True)),
        PackedKernel(1, (128, 128), (1, 0), (True, True)),
        PackedKernel(1, (128, 128), (1, 0), (True, True), words=True),
        PackedKernel(
            1,
            (2, 34, 2, 128),
            (3, 2, 1, 0),
            (False,) * 3 + (True,),
            funnel=True,
            spread=True,
            out_run=3,
        ),
        PackedKernel(1, (5, 32, 128), (2, 1, 0), (False, True, True), spread=True, out_run=2),
        PackedKernel(
            2, (3, 8, 64), (1, 0, 2), (False, False, True), funnel=True, spread=True, out_run=3
        ),
    ]
    assert_nvcc_silent(render_packed(specs), "sm_90")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_packed_kernels_compile_without_spills(arch: str):
    """A spread of the boxes the plan makes compile in one source, with no local memory,
    the shared memory of their box, and registers that let the blocks per SM it is launched
    for (`PackedKernel.blocks_per_sm`) of PACKED_THREADS reside on an SM."""
    specs = _specs()
    assert len({k.elem_bytes for k in specs}) == len(SIZES) and len(specs) > 40
    report = source_resources(render_packed(specs), arch)
    for k in specs:
        res = report[k.name]
        assert res.spill_bytes == 0 and res.stack_bytes == 0, f"{k.name} spills on {arch}: {res}"
        assert res.smem_bytes == _packed_vars(k)["smem_bytes"], f"{k.name}: {res}"
        assert res.registers * PACKED_THREADS * k.blocks_per_sm <= 65536, f"{k.name}: {res}"
    assert any(k.table for k in specs) and not all(k.table for k in specs)
    words = [k for k in specs if k.words]
    assert (
        {k.elem_bytes for k in words} == {1, 2}
        and any(k.table for k in words)
        and any(any(k.checked) for k in words)
    )
    funnel = [k for k in specs if k.funnel]
    assert {k.elem_bytes for k in funnel} == {1, 2} and any(
        k.table and _packed_vars(k)["table_partial"] for k in funnel
    )
    spread = [k for k in specs if k.spread]
    assert (
        {k.elem_bytes for k in spread} == {1, 2}
        and any(k.table for k in spread)
        and any(any(k.checked) for k in spread)
        and any(k.funnel for k in spread)
    )
    piped = [k for k in specs if k.pipelined]
    assert {k.elem_bytes for k in piped} == {4, 8, 16} and any(
        k.table and any(k.checked) for k in piped
    )
    assert any(k.elem_bytes >= 4 and not k.pipelined for k in specs)  # boxes over 16 KB: one buffer


@pytest.mark.parametrize("e", SIZES)
def test_only_one_launch_plans_pack(e: int, monkeypatch: pytest.MonkeyPatch):
    """A box replaces the gather and nothing else: over random permutes, a plan is packed
    exactly where, with boxes turned off, it is a gather that a box takes (in vectors where
    `vector_box` finds one, for elements up to VECTOR_OWN_MAX_ELEM_BYTES); every other plan
    is the same with and without boxes."""
    from autotranspose.plans import permute as plan_module

    rng = np.random.default_rng([e, 31337])
    problems = [_random_problem(rng, e) for _ in range(300)]
    packed = [plan_permute(s, a, e) for s, a in problems]
    vector_box = plan_module.vector_box
    monkeypatch.setattr(plan_module, "packed_box", lambda *args: None)
    monkeypatch.setattr(plan_module, "vector_box", lambda *args: None)
    gathered = [plan_permute(s, a, e) for s, a in problems]
    for p, g in zip(packed, gathered, strict=True):
        (q,), (h,) = p.passes, g.passes
        if q.kind == PACKED:
            box = packed_box(q.dims, q.elem_bytes)
            if q.vectors[0]:
                assert q.elem_bytes <= plan_module.VECTOR_OWN_MAX_ELEM_BYTES
                box, vectors, scatter, pad = vector_box(q.dims, q.elem_bytes)
                assert (q.vectors, q.scatter, q.pad) == (vectors, scatter, pad)
            assert h.kind == "gather" and h.dims == q.dims and q.box == box
        else:
            assert p.passes == g.passes, p.describe()
    assert sum(p.passes[0].kind == PACKED for p in packed) > 20


@pytest.mark.parametrize("seed", range(3))
def test_the_box_split_divides_exactly(seed: int):
    """The kernel splits a box index by multiply-shift (`packed.divisor`): exact for every
    32-bit index and every divisor the grid can have, the extremes included."""
    rng = np.random.default_rng([seed, 99])
    ds = [2, 3, 7, 641, 65537, 2**31, 2**31 + 1, 2**32 - 2, 2**32 - 1]
    ds += [int(d) for d in rng.integers(2, 2**32, 300)] + [
        int(d) for d in rng.integers(2, 5000, 300)
    ]
    for d in ds:
        magic, shift = divisor(d)
        assert 0 < magic < 2**32 and 0 <= shift < 32
        ns = [
            0,
            1,
            d - 1,
            d,
            d + 1,
            2**31,
            2**32 - 1,
            (2**32 - 1) // d * d,
            (2**32 - 1) // d * d - 1,
        ]
        ns += [int(n) for n in rng.integers(0, 2**32, 50)]
        for n in ns:
            assert divide(n, magic, shift) == n // d, (n, d)


@pytest.mark.parametrize("d", [0, 1, 2**32, -5, 2.0])
def test_a_grid_dim_of_one_box_has_no_divisor(d):
    with pytest.raises(errors.ShapeError, match="2 to 2"):
        divisor(d)


@pytest.mark.parametrize("e", SIZES)
def test_the_pipelined_kernel_where_two_boxes_fit(e: int):
    """4- to 16-byte boxes of up to PIPELINE_MAX_BYTES take the pipelined kernel when a
    pass asks for it (a first call races it), never unasked; 1- and 2-byte boxes and bigger
    boxes cannot, and asking for it there is a clear error. The plan's rule is packed's."""
    for side in (8, 16, 32, 64, 128):
        if 3 * side * side * e > PACKED_MAX_BYTES:
            continue
        dims = (Dim(side, 1, 3 * side), Dim(3, side, side), Dim(side, 3 * side, 1))
        box = (side, 3, side)
        fits = e >= PIPELINE_MIN_ELEM_BYTES and 3 * side * side * e <= PIPELINE_MAX_BYTES
        k = packed_args(e, dims, box).kernel
        assert not k.pipelined and pipelines(e, k.volume) == fits
        assert can_pipeline(Pass(PACKED, e, 1, 0, 0, 0, dims=dims, box=box)) == fits
        if fits:
            piped = packed_args(e, dims, box, pipelined=True).kernel
            assert piped == dataclasses.replace(k, pipelined=True) and piped.name == k.name + "_p"
        else:
            with pytest.raises(errors.ShapeError, match="pipelined=False"):
                packed_args(e, dims, box, pipelined=True)


def test_the_pipelined_source_waits_before_it_reads():
    """The pipelined kernel's order in its loop: the next box's copies are issued and
    committed, this box's are waited for, then a barrier, the writes, and a barrier before
    the buffer is reused; the async helpers are in a source only where a kernel needs them."""
    k = PackedKernel(4, (32, 32), (1, 0), (False, True), pipelined=True)
    src = render_packed([k])
    body = src[src.index("for (u32 n = 0;") :]
    order = [
        body.index(s)
        for s in (
            "at_async_copy(&next",
            "at_async_commit()",
            "at_async_wait_prior()",
            "__syncthreads()",
            "out[ob",
            "__syncthreads();  // the box is written",
        )
    ]
    assert order == sorted(order)
    assert "cp.async.wait_group 1" in src and "AT_ASYNC_COPY" in src
    assert "cp.async" not in render_packed([dataclasses.replace(k, pipelined=False)])


def test_blocks_per_sm_follow_the_box():
    """Small boxes ask for more resident blocks (loads in flight), big ones for fewer."""
    small = PackedKernel(4, (32, 32), (1, 0), (False, False))  # 4 KB
    big = PackedKernel(4, (64, 64), (1, 0), (False, False))  # 16 KB
    assert small.blocks_per_sm > big.blocks_per_sm >= 3
    assert PackedKernel(1, (32, 32), (1, 0), (False, False)).blocks_per_sm == MAX_BLOCKS
    assert (
        PackedKernel(1, (128, 128), (1, 0), (False, False)).blocks_per_sm == MIN_BLOCKS
    )  # no table

"""The vector box kernel (templates/vbox/vbox.cu.j2) without a GPU: the vectors' promise (every
vector the kernel moves lies in one contiguous run and starts aligned, for the boxes and
widths `plan.vector_box` picks, at the pointers the plan saw), the table, the spec's checks,
the rendered kernel run on the CPU (tests/_cuda_emulator.h: a block's threads are OS threads,
misaligned vector accesses abort) against np.transpose with poisoned outputs and guard bytes,
and nvcc's resource report."""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from _nvcc import assert_nvcc_silent
from _packed_emu import CXX, library
from test_packed import _boxes

from autotranspose.bench.cases import random_permute_cases
from autotranspose.errors import ShapeError
from autotranspose.kernels.codegen import _ELEMENT_TYPES
from autotranspose.kernels.packed import packed_args
from autotranspose.kernels.vbox import THREADS, VBoxKernel, render_vbox, table, vbox_spec
from autotranspose.plans import permute as plan
from autotranspose.plans.boxes import (
    VECTOR_MAX_SMEM_BYTES,
    VECTOR_MIN_BYTES,
    VECTOR_SMALL_BOX_BYTES,
    gather_conflicts,
    grown_boxes,
    scatter_chunk,
    scatter_options,
    vector_box,
    vector_widths,
)
from autotranspose.plans.dtypes import element_type
from autotranspose.plans.layout import contiguous_strides
from autotranspose.plans.permute import PACKED, Pass, plan_permute, vector_launch

HERE = Path(__file__).resolve().parent


def _offsets(order: tuple[int, ...], box: tuple[int, ...], strides) -> np.ndarray:
    """Each element's offset from its box's corner, the box's elements taken in `order`
    (innermost first): what the kernel's `split` of an index and its strides give."""
    idx = np.arange(math.prod(box))
    off = np.zeros(idx.size, dtype=np.int64)
    for k in order:
        off += (idx % box[k]) * strides[k]
        idx //= box[k]
    return off


def _vector_walk(p: Pass, in_ptr: int, out_ptr: int) -> int:
    """Every vector of every whole box, as the kernel addresses it (its first element's
    offset from the split of its index, the rest the next addresses), against each
    element's own offset, and each vector's alignment. Returns the vectors checked."""
    e = p.elem_bytes
    spec, _ = vbox_spec(e, p.dims, p.box, p.vectors, in_ptr, out_ptr, p.scatter, p.pad)
    a = packed_args(e, p.dims, p.box, in_ptr, out_ptr, words=False)
    n = len(spec.box)
    corners = np.array([(ib, ob) for ib, ob, lim in _boxes(a) if list(lim) == list(spec.box)])
    checked = 0
    for side, order, strides, ptr, w in (
        (0, spec.in_order, a.in_stride[:n], in_ptr, spec.vin),
        (1, tuple(range(n)), a.out_stride[:n], out_ptr, spec.vout),
    ):
        per = w // e
        vec = _offsets(order, spec.box, strides).reshape(-1, per)
        assert (vec - vec[:, :1] == np.arange(per)).all(), (
            f"a vector is not one run: {p.describe()}"
        )
        assert ptr % w == 0 and (vec[:, 0] % per == 0).all(), p.describe()
        if corners.size:
            assert (corners[:, side] % per == 0).all(), (
                f"a box corner is misaligned: {p.describe()}"
            )
        checked += vec.shape[0] * len(corners)
    return checked


@pytest.fixture
def any_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
    """Vector boxes wherever their vectors fit, whatever their shared-memory conflicts or
    size: the kernel's correctness on every shape, not the plan's taste."""
    monkeypatch.setattr("autotranspose.plans.boxes.VECTOR_MAX_CONFLICTS", float("inf"))
    monkeypatch.setattr("autotranspose.plans.boxes.VECTOR_MIN_BOX_BYTES", 0)
    monkeypatch.setattr(plan, "ALT_MIN_BYTES", 0)


def _random_problem(rng: np.random.Generator, e: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A random 2- to 6-D permute whose sides are often multiples of 4 or 8 (vectors need
    aligned runs), a few thousand to a hundred thousand elements."""
    nd = int(rng.integers(2, 7))
    top = max(2, round(20000 ** (1 / nd)))
    shape = []
    for _ in range(nd):
        v = int(rng.integers(1, top + 1))
        shape.append(v * int(rng.choice([1, 2, 4, 8])) if rng.random() < 0.7 else v)
    return tuple(shape), tuple(int(a) for a in rng.permutation(nd))


@pytest.mark.parametrize("e", [1, 2, 4, 8])
def test_every_vector_is_one_aligned_run(e: int, any_vectors):
    """Random permutes at random pointer offsets: wherever the plan finds a vector box, each
    vector the kernel would load or store is contiguous and aligned to its width."""
    rng = np.random.default_rng([e, 777])
    found = 0
    for _ in range(300):
        shape, axes = _random_problem(rng, e)
        in_ptr, out_ptr = (int(v) * e for v in rng.integers(0, 16 // e + 1, 2))
        dims = plan_permute(shape, axes, e).dims
        if not 1 <= len(dims) <= 8:
            continue
        p = Pass(PACKED, e, 1, 0, 0, 0, dims=dims)
        q = vector_launch(p, in_ptr, out_ptr)
        if q is None:
            continue
        assert min(q.vectors) >= max(VECTOR_MIN_BYTES, 2 * e)
        found += bool(_vector_walk(q, in_ptr, out_ptr))
    assert found > 15, found


@pytest.mark.parametrize(
    "shape, axes, e, box, vectors",
    [
        # ViT patchify, p = 16: the input's rows of 14 patches, the output's patches
        ((64, 3, 14, 16, 14, 16), (0, 2, 4, 3, 5, 1), 2, (1, 1, 14, 8, 16, 3), (16, 16)),
        # p = 14: rows of 14 patches cut in 8 left half the boxes at an edge; whole rows
        # of patches make 16-byte vectors on both sides
        ((64, 3, 16, 14, 16, 14), (0, 2, 4, 3, 5, 1), 2, (1, 1, 16, 14, 14, 3), (16, 16)),
        ((8, 3, 1080, 1920), (0, 2, 3, 1), 1, (1, 4096, 3), (16, 16)),  # CHW -> HWC
        ((8, 2, 1080, 1920), (0, 2, 3, 1), 1, (1, 4096, 2), (16, 16)),
        ((8, 4, 1080, 1920), (0, 2, 3, 1), 1, (1, 2048, 4), (16, 16)),
    ],
)
def test_the_workloads_boxes(shape, axes, e, box, vectors):
    """The plan's pass for the ML workloads of docs/perf-notes.md is the vector box."""
    p = plan_permute(shape, axes, e)
    q = p.passes[0]
    assert (q.kind, q.box, q.vectors) == (PACKED, box, vectors), p.describe()
    assert "16-byte vectors in" in p.describe()
    assert any(a.kind == PACKED and not a.vectors[0] for a in p.alternatives), p.describe()


@pytest.mark.parametrize("e", [1, 2])
@pytest.mark.parametrize("c, ways", [(2, 8.0), (3, 4.0), (4, 16.0)])
def test_boxes_whose_gather_would_conflict_scatter(c: int, ways: float, e: int):
    """Images HWC -> CHW: a vector of one channel's 16 pixels would gather bytes c apart, a
    lane 16 c bytes from the next, so its shared loads would conflict `ways` ways (uint8;
    the vector box ran at 30-75% of copy on an H100): the box scatters on the load side
    instead, a chunk of whole pixels a thread, rows of 8-16 bytes, 16-byte loads. The packed
    kernels stay a first call's alternative. CHW -> HWC keeps the gather: its output's
    innermost dim is the input's outermost, so no chunk of the input holds an output word."""
    shape, axes = (8, 1080, 1920, c), (0, 3, 1, 2)
    dims = plan_permute(shape, axes, 1).dims
    box = (1, c, 4096)
    assert gather_conflicts(dims, box, 1, vector_widths(dims, box, 1)[1]) == ways
    p = plan_permute(shape, axes, e)
    q = p.passes[0]
    assert q.scatter and q.vectors == (16, 16), p.describe()
    assert q.scatter * e in (8, 16) and c * q.scatter * e <= plan.VECTOR_SCATTER_MAX_CHUNK
    assert (q.scatter, q.vectors[0]) == scatter_chunk(q.dims, q.box, e, 16)
    assert "scattered in chunks" in p.describe()
    assert any(a.kind == PACKED and not a.vectors[0] for a in p.alternatives), p.describe()
    back = plan_permute((8, c, 1080, 1920), (0, 2, 3, 1), e).passes[0]  # CHW -> HWC
    assert back.vectors[0] and not back.scatter
    assert scatter_options(back.dims, back.box, e, back.vectors[0]) == []
    assert gather_conflicts(back.dims, back.box, e, back.vectors[1]) <= plan.VECTOR_MAX_CONFLICTS


def test_no_scatter_where_a_chunk_is_not_one_run():
    """A chunk must be one contiguous piece of the input: channels padded apart (a view of
    a wider array) or an inner block the box cuts leave the gather's rule (no box here: its
    gather would conflict)."""
    dims = plan_permute(
        (8, 1080, 1920, 3), (0, 3, 1, 2), 1, (8 * 1080 * 1920 * 4, 1920 * 4, 4, 1)
    ).dims
    assert scatter_options(dims, (1, 3, 4096), 1, 16) == []
    dims = plan_permute((8, 1080, 1920, 3), (0, 3, 1, 2), 1).dims
    assert scatter_options(dims, (1, 3, 4096), 1, 16)
    # a row of 256 pixels holds 32 chunks of 8 or 4, not of 16: 8-byte and 4-byte loads
    assert scatter_options(dims, (1, 3, 256), 1, 16) == [(4, 4, 12), (8, 8, 24)]
    assert scatter_chunk(dims, (1, 3, 256), 1, 16) == (8, 8)
    assert scatter_options(dims, (1, 3, 4096), 4, 16) == []  # 4-byte elements: the gather


def test_boxes_cut_at_an_edge_give_way_to_whole_ones():
    """ViT's p = 14 rows of patches: growing to runs cuts the 14 patch rows in 8 (half the
    boxes at the edge); the divisor-rounded, whole choice takes all 14."""
    dims = plan_permute((64, 3, 16, 14, 16, 14), (0, 2, 4, 3, 5, 1), 2).dims
    box, *_ = vector_box(dims, 2)
    assert all(d.extent % b == 0 for d, b in zip(dims, box, strict=True)), box


def test_no_vectors_where_a_side_is_misaligned():
    """An odd pointer or an odd run leaves no vectors (the packed kernels keep the plan)."""
    shape, axes = (8, 3, 1080, 1920), (0, 2, 3, 1)
    assert plan_permute(shape, axes, 1, in_ptr=1).passes[0].vectors == (0, 0)
    assert plan_permute((8, 3, 1081, 1921), axes, 1).passes[0].vectors == (0, 0)
    assert plan_permute(shape, axes, 1, out_ptr=8).passes[0].vectors == (16, 8)
    dims = plan_permute(shape, axes, 1).dims
    assert vector_widths(dims, (1, 4096, 3), 1, 4, 0) == (4, 16)
    assert vector_widths(dims, (1, 4095, 3), 1) == (0, 0)


def test_the_table_is_the_output_order_in_the_input_layout():
    k = VBoxKernel(2, (3, 4, 2), (1, 2, 0), (False,) * 3, False, 8, 8)
    t = table(k)
    assert len(t) == 24 and len(t) % 8 == 0
    box = np.arange(24).reshape(3, 2, 4)  # shared memory: dims 0, 2, 1, outermost first
    want = box.transpose(1, 2, 0).ravel() * 2  # output order: dims 2, 1, 0, outermost first
    assert t == list(want)
    assert table(VBoxKernel(1, (3, 7, 4), (1, 2, 0), (False,) * 3, False, 4, 4))[84:] == [0] * 4


@pytest.mark.parametrize(
    "fields, words",
    [
        (dict(elem_bytes=16), "1, 2, 4 or 8"),
        (dict(vin=2), "two elements or more"),
        (dict(vout=32), r"one of \(16, 8, 4\)"),
        (dict(box=(3, 5)), "dividing the box"),
        (dict(in_order=(0, 0)), "not a permutation"),
        (dict(box=(8, 4096), checked=(False, True)), "shared memory"),
        (dict(blocks=1), "blocks an SM"),
        (dict(blocks=9), "blocks an SM"),
        (dict(blocks=4.0), "blocks an SM"),
    ],
)
def test_bad_specs_never_reach_cuda(fields, words):
    base = dict(
        elem_bytes=2,
        box=(8, 64),
        in_order=(1, 0),
        checked=(False, False),
        wide=False,
        vin=16,
        vout=16,
    )
    with pytest.raises(ShapeError, match=words):
        VBoxKernel(**{**base, **fields})


def test_small_gathering_boxes_run_more_blocks_an_sm():
    """The gather keeps about VECTOR_FLIGHT_BYTES of boxes in flight an SM: 4 blocks down to
    boxes of a quarter of it, up to 8 for small ones (6 where a thread moves many vectors:
    32 registers would spill); the scatter 4; `blocks` overrides both and is in the kernel's
    name (its launch bounds differ)."""
    from autotranspose.kernels.vbox import (
        BLOCKS_PER_SM,
        SCATTER_BLOCKS_PER_SM,
        VECTOR_BLOCKS_MANY,
        VECTOR_BLOCKS_MAX,
        VECTOR_FLIGHT_BYTES,
        VECTOR_STEPS_AT_MAX,
    )

    rng = np.random.default_rng()
    for _ in range(200):
        e = int(rng.choice([1, 2, 4, 8]))
        box = (int(rng.integers(1, 9)) * 16 // e, int(rng.integers(1, 40)))
        try:
            k = VBoxKernel(e, box, (1, 0), (False, False), False, 16, 16)
        except ShapeError:
            continue
        data = k.volume * e
        assert BLOCKS_PER_SM <= k.blocks_per_sm <= VECTOR_BLOCKS_MAX
        assert k.blocks_per_sm * data <= VECTOR_FLIGHT_BYTES or k.blocks_per_sm == BLOCKS_PER_SM
        most = VECTOR_BLOCKS_MAX if sum(k.steps) <= VECTOR_STEPS_AT_MAX else VECTOR_BLOCKS_MANY
        assert k.blocks_per_sm <= most
        assert k.blocks_per_sm == most or (k.blocks_per_sm + 1) * data > VECTOR_FLIGHT_BYTES
        assert "_k" not in k.name
        forced = dataclasses.replace(k, blocks=int(rng.integers(2, 9)))
        assert forced.blocks_per_sm == forced.blocks and forced.name.endswith(f"_k{forced.blocks}")
    p = plan_permute((8, 1080, 1920, 3), (0, 3, 1, 2), 1)
    q = next(a for a in (*p.passes, *p.alternatives) if a.scatter)
    spec, _ = vbox_spec(1, q.dims, q.box, q.vectors, scatter=q.scatter)
    assert spec.blocks_per_sm == SCATTER_BLOCKS_PER_SM
    forced, _ = vbox_spec(1, q.dims, q.box, q.vectors, scatter=q.scatter, blocks=6)
    assert forced.blocks_per_sm == 6


def test_vectors_the_pointers_do_not_allow_are_refused():
    dims = plan_permute((8, 3, 1080, 1920), (0, 2, 3, 1), 1).dims
    with pytest.raises(ShapeError, match="at most"):
        vbox_spec(1, dims, (1, 4096, 3), (16, 16), in_ptr=4)
    vbox_spec(1, dims, (1, 2048, 3), (4, 16), in_ptr=4)


def test_boxes_fit_shared_memory_and_steps():
    rng = np.random.default_rng(5)
    padded = 0
    for _ in range(300):
        e = int(rng.choice([1, 2, 4, 8]))
        shape, axes = _random_problem(rng, e)
        dims = plan_permute(shape, axes, e).dims
        found = vector_box(dims, e) if len(dims) <= 8 else None
        if found:
            box, vectors, scatter, pad = found
            assert math.prod(box) * (e + 2) <= VECTOR_MAX_SMEM_BYTES, box
            # the padded box and its table fit too: the spec checks it
            spec, _ = vbox_spec(e, dims, box, vectors, scatter=scatter, pad=pad)
            assert spec.smem_bytes <= VECTOR_MAX_SMEM_BYTES and spec.pad == pad
            padded += bool(pad)
    assert padded, "no box of 300 random permutes was padded"


def test_a_big_vector_box_is_raced_a_small_one():
    """Where a raced plan's vector box holds more than VECTOR_SMALL_BOX_BYTES, the first call
    also times the best box of at most that, a valid vector box of the same problem; a box
    of at most that size races nothing more."""
    gained = 0
    for shape, axes, dtype in random_permute_cases(
        300, int(np.random.default_rng().integers(1 << 30))
    ):
        e = element_type(dtype).size
        p = plan_permute(shape, axes, e)
        found = [q for q in (*p.passes, *p.alternatives) if q.kind == PACKED and q.vectors[0]]
        small = [q for q in found if math.prod(q.box) * q.elem_bytes <= VECTOR_SMALL_BOX_BYTES]
        big = [q for q in found if math.prod(q.box) * q.elem_bytes > VECTOR_SMALL_BOX_BYTES]
        assert len(small) <= 1 and len(big) <= 1, found
        if not small or not big:
            continue
        gained += 1
        (q,) = small
        assert q.dims == big[0].dims and q.box != big[0].box
        want = vector_box(q.dims, q.elem_bytes, most_bytes=VECTOR_SMALL_BOX_BYTES)
        assert want is not None and (q.box, q.vectors, q.scatter, q.pad) == want
        spec, _ = vbox_spec(q.elem_bytes, q.dims, q.box, q.vectors, scatter=q.scatter, pad=q.pad)
        assert spec.smem_bytes <= VECTOR_MAX_SMEM_BYTES
    # float32 2448x1x16x8x32x2 by (5,1,2,0,4,3): boxes of 16 KB, raced one of 4 KB
    p = plan_permute((2448, 1, 16, 8, 32, 2), (5, 1, 2, 0, 4, 3), 4)
    sizes = sorted(math.prod(q.box) * 4 for q in (*p.passes, *p.alternatives) if q.vectors[0])
    assert sizes == [VECTOR_SMALL_BOX_BYTES, 16384], sizes
    assert gained, "no random plan raced a small vector box"


def _ways(dims, box, e: int, vout: int, pad: int) -> float:
    """The gather's conflicts counted lane by lane: lane w of a warp reads element j of
    output vector w at its place in the box held in the input's order (padded: `max(4, e)`
    bytes after every `pad`); a bank takes one pass per distinct 4-byte word."""
    inside = [k for k, b in enumerate(box) if b > 1]
    in_order = sorted(inside, key=lambda k: (dims[k].in_stride, k))
    out_order = sorted(inside, key=lambda k: (dims[k].out_stride, k))
    dense = np.cumprod([1] + [box[k] for k in in_order])[:-1]
    place = _offsets(tuple(out_order), box, dict(zip(in_order, dense, strict=True))) * e
    if pad:
        place += max(4, e) * (place // pad)
    per, passes = vout // e, []
    vectors = place.size // per
    for first in range(0, min(vectors, 128), 32):
        for j in range(per):
            lanes = range(first, min(first + 32, vectors))
            words = {int(place[w * per + j]) // 4 for w in lanes}
            passes.append(max(sum(1 for v in words if v % 32 == b) for b in range(32)))
    return sum(passes) / len(passes) if passes else 0.0


@pytest.mark.parametrize("e", [1, 2, 4, 8])
def test_the_conflict_model_counts_each_warps_banks(e: int):
    """`gather_conflicts` (vectorised: it runs for every box a plan tries) gives what a
    lane-by-lane count gives, dense and padded, on random permutes' boxes."""
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    checked = 0
    for _ in range(40):
        shape, axes = _random_problem(rng, e)
        dims = plan_permute(shape, axes, e).dims
        for box in itertools.islice(grown_boxes(dims, e, 4096), 3):
            for vout in {max(4, e), 16}:
                for pad in (0, 16, 64):
                    want = _ways(dims, box, e, vout, pad)
                    got = gather_conflicts(dims, box, e, vout, pad)
                    assert got == pytest.approx(want), (seed, dims, box, vout, pad)
                    checked += 1
    assert checked >= 40


# --- the kernel itself, on the CPU -------------------------------------------------------------
_CXX = CXX


def _library(spec: VBoxKernel, tmp: Path) -> ctypes.CDLL:
    """The rendered kernel and a launcher, built with the emulator (cached per source)."""
    return library(
        render_vbox(spec), spec.name, dict(_ELEMENT_TYPES)[spec.elem_bytes], THREADS, tmp
    )


def _strided(rng, shape, e, pad_last):
    """A view of `shape` whose rows are `pad_last` elements longer (16-byte multiples keep
    vectors), at a 16-byte offset into its buffer."""
    full = (*shape[:-1], shape[-1] + pad_last)
    base = rng.integers(0, 256, 16 + math.prod(full) * e + 64, dtype=np.uint8)
    arr = base[16 : 16 + math.prod(full) * e].view(f"V{e}").reshape(full)
    return base, arr[..., : shape[-1]]


def _cut(q: Pass) -> Pass:
    """`q` with one box dim cut short so that an edge cuts it (the same vectors and the same
    strategy): the element path of the boxes the edge cuts, on a box the plan would not
    pick."""
    for k, (d, b) in enumerate(zip(q.dims, q.box, strict=True)):
        for part in range(b - 1, 1, -1):
            box = (*q.box[:k], part, *q.box[k + 1 :])
            if not d.extent % part:
                continue
            if q.scatter:
                try:
                    vbox_spec(q.elem_bytes, q.dims, box, q.vectors, scatter=q.scatter)
                except ShapeError:
                    continue
                return dataclasses.replace(q, box=box)
            if vector_widths(q.dims, box, q.elem_bytes) == q.vectors:
                return dataclasses.replace(q, box=box)
    raise AssertionError(f"no box of {q.describe()} can be cut")


# (shape, axes, element bytes, padding of the input's rows, whether the box scatters)
CASES = [
    ((1, 3, 14, 16, 14, 16), (0, 2, 4, 3, 5, 1), 2, 0, False),  # ViT p = 16
    ((2, 3, 16, 14, 16, 14), (0, 2, 4, 3, 5, 1), 2, 0, False),  # ViT p = 14
    ((2, 3, 40, 104), (0, 2, 3, 1), 1, 0, False),  # CHW -> HWC, an edge box
    ((3, 2, 48, 96), (0, 2, 3, 1), 1, 0, False),
    ((2, 4, 24, 200), (0, 2, 3, 1), 1, 16, False),  # padded rows in
    ((3, 64, 20, 8), (3, 1, 0, 2), 2, 0, False),
    ((40, 16, 36, 4), (3, 1, 0, 2), 4, 0, False),  # 4-byte elements: the vectors an alternative
    ((24, 18, 32, 2), (3, 0, 2, 1), 8, 0, False),
    # HWC -> CHW: the gather would conflict, the box scatters on the load side
    ((3, 40, 104, 3), (0, 3, 1, 2), 1, 0, True),
    ((3, 40, 104, 2), (0, 3, 1, 2), 1, 0, True),
    ((3, 40, 104, 4), (0, 3, 1, 2), 1, 0, True),
    ((3, 40, 104, 3), (0, 3, 1, 2), 2, 0, True),
    ((3, 40, 104, 4), (0, 3, 1, 2), 2, 0, True),
    ((3, 40, 104, 2, 3), (0, 4, 3, 1, 2), 1, 0, True),  # an inner block of two dims
]


@pytest.mark.skipif(_CXX is None, reason="needs g++ (C++20) to run the kernel on the CPU")
@pytest.mark.parametrize("smem_pad", [0, 16, 128], ids=["dense", "pad16", "pad128"])
@pytest.mark.parametrize("cut", [False, True], ids=["whole", "cut"])
@pytest.mark.parametrize("shape, axes, e, pad, scatter", CASES)
def test_the_kernel_on_the_cpu_matches_numpy(
    shape, axes, e, pad, scatter, cut, smem_pad, tmp_path_factory, any_vectors
):
    """The rendered kernel, run by the emulator on a small grid (each block walks several
    boxes), moves every element where np.transpose puts it, writes nothing else (poison and
    guard bytes intact), and never touches a vector at an address its type forbids; the
    gather's shared box dense or padded (`VBoxKernel.pad`)."""
    if smem_pad and scatter:
        pytest.skip("the scatter's box lies in the output's order: no pad")
    rng = np.random.default_rng([e, *shape])
    base, x = _strided(rng, shape, e, pad)
    want = np.ascontiguousarray(np.transpose(x, axes))
    out_base = np.full(16 + want.nbytes + 64, 0xA5, dtype=np.uint8)
    out = out_base[16 : 16 + want.nbytes].view(f"V{e}").reshape(want.shape)
    strides = tuple(s // e for s in x.strides)
    p = plan_permute(
        shape,
        axes,
        e,
        strides,
        contiguous_strides(want.shape),
        in_ptr=x.ctypes.data,
        out_ptr=out.ctypes.data,
    )
    q = next((a for a in (*p.passes, *p.alternatives) if a.vectors[0]), None)
    assert q is not None, p.describe()
    if cut:
        q = _cut(q)
    if smem_pad % q.vectors[0]:
        pytest.skip(f"{q.vectors[0]}-byte input vectors do not divide a pad every {smem_pad}")
    try:
        spec, values = vbox_spec(
            e, q.dims, q.box, q.vectors, x.ctypes.data, out.ctypes.data, q.scatter, smem_pad
        )
    except ShapeError as exc:
        if smem_pad and "shared memory" in str(exc):
            pytest.skip(f"the padded box does not fit: {exc}")
        raise
    assert any(spec.checked) == cut, spec
    assert spec.pad == smem_pad
    assert bool(spec.scatter) == scatter, p.describe()
    import struct

    from autotranspose.kernels.packed import ARG_FORMAT

    args = struct.pack(ARG_FORMAT, *values)
    tiles = values[-2]
    lib = _library(spec, tmp_path_factory.getbasetemp())
    lib.at_emu_run(
        ctypes.c_uint(min(tiles, 3)),
        ctypes.c_void_p(x.ctypes.data),
        ctypes.c_void_p(out.ctypes.data),
        ctypes.c_char_p(args),
    )
    assert out.tobytes() == want.tobytes(), f"{spec.name}\n{p.describe()}"
    assert (out_base[:16] == 0xA5).all() and (out_base[16 + want.nbytes :] == 0xA5).all()
    del base


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_kernels_compile_without_spills(any_vectors):
    """Each workload's kernel on sm_90: no local memory, the shared memory the spec counts,
    registers for its blocks an SM of THREADS (the launch bounds hold them: 64 for the
    gather's four, 40 and 32 for its six and eight, 64 for the scatter's four)."""
    from autotranspose.runtime.compiler import source_resources

    specs = {}
    for shape, axes, e in [
        ((64, 3, 14, 16, 14, 16), (0, 2, 4, 3, 5, 1), 2),
        ((64, 3, 16, 14, 16, 14), (0, 2, 4, 3, 5, 1), 2),
        ((8, 3, 1080, 1920), (0, 2, 3, 1), 1),  # edge boxes
        ((8, 1080, 1920, 3), (0, 3, 1, 2), 1),  # the scatter from here on
        ((8, 1080, 1920, 2), (0, 3, 1, 2), 1),
        ((8, 1080, 1920, 4), (0, 3, 1, 2), 1),
        ((8, 1080, 1920, 3), (0, 3, 1, 2), 2),
        ((8, 1080, 1920, 4), (0, 3, 1, 2), 2),
        ((200, 64, 112, 8), (3, 1, 0, 2), 4),
        ((8, 696, 1, 312, 3), (1, 4, 0, 3, 2), 8),
        ((176, 5, 144, 8, 16), (1, 2, 4, 0, 3), 4),  # boxes of 8 KB and less: 6 and 8 blocks
        ((4, 32, 3, 197, 2), (1, 4, 3, 2, 0), 2),
        ((3, 7, 64, 2), (1, 0, 3, 2), 2),
    ]:
        p = plan_permute(shape, axes, e)
        q = next(a for a in (*p.passes, *p.alternatives) if a.vectors[0])
        spec, _ = vbox_spec(e, q.dims, q.box, q.vectors, scatter=q.scatter)
        specs[spec.name] = spec
    assert {k.elem_bytes for k in specs.values()} == {1, 2, 4, 8}
    assert sum(bool(k.scatter) for k in specs.values()) == 5
    assert {6, 8} <= {k.blocks_per_sm for k in specs.values()}
    assert any(any(k.checked) for k in specs.values())
    for spec in specs.values():
        assert_nvcc_silent(render_vbox(spec))
        res = source_resources(render_vbox(spec), "sm_90")[spec.name]
        assert res.spill_bytes == 0 and res.stack_bytes == 0, f"{spec.name}: {res}"
        assert res.smem_bytes == spec.smem_bytes, f"{spec.name}: {res}"
        assert res.registers * THREADS * spec.blocks_per_sm <= 65536, f"{spec.name}: {res}"

"""The gather kernel (templates/gather/) without a GPU: a Python model of its index walk,
thread by thread (the first index decomposed by 32-bit division, then the grid stride added
by the mixed-radix carry, UNROLL indices per round), run on the very arguments the host packs
(`gather.gather_args`) and checked against np.transpose for random permutes and grid sizes;
the arguments' layout against the template's struct; and the rendered source."""

from __future__ import annotations

import ctypes
import dataclasses
import math
import re

import numpy as np
import pytest
from _packed_emu import CXX, library

from autotranspose import errors
from autotranspose.kernels.codegen import (
    _ELEMENT_TYPES,
    GATHER_THREADS,
    GATHER_UNROLL,
    render_gather,
)
from autotranspose.kernels.gather import ARG_BYTES, ARG_FORMAT, MAX_DIMS, GatherArgs, gather_args
from autotranspose.plans.boxes import GATHER_MAX_EXTENT, Dim
from autotranspose.plans.layout import contiguous_strides
from autotranspose.plans.permute import plan_permute

U32 = 2**32


def _first(a: GatherArgs, g: int) -> tuple[list[int], int, int]:
    """What a thread does before its loop: digits (innermost first) and offsets of index g."""
    assert 0 <= g < U32, "the first index is a u32"
    digit, at_in, at_out, rest = [0] * (MAX_DIMS - 1), 0, 0, g
    for k in range(MAX_DIMS):
        x = 0
        if k + 1 < a.ndim:
            q = rest // a.extent[k]  # u32 / u32
            x = rest - q * a.extent[k]
            rest = q
        elif k + 1 == a.ndim:
            x = rest
        at_in += x * a.in_stride[k]
        at_out += x * a.out_stride[k]
        if k < MAX_DIMS - 1:
            digit[k] = x
    return digit, at_in, at_out


def _advance(a: GatherArgs, digit: list[int], at_in: int, at_out: int) -> tuple[int, int]:
    """at_gather_advance: the grid stride's digits added with a carry, offsets incremental."""
    at_in += a.in_step
    at_out += a.out_step
    carry = 0
    for k in range(MAX_DIMS - 1):
        if k + 1 < a.ndim:
            v = digit[k] + a.step[k] + carry
            assert v < U32, "a digit sum overflows its u32"
            carry = int(v >= a.extent[k])
            digit[k] = v - a.extent[k] if carry else v
            if carry:
                at_in += a.in_carry[k]
                at_out += a.out_carry[k]
    return at_in, at_out


def walk(a: GatherArgs, stride: int) -> list[tuple[int, int]]:
    """(output offset, input offset) of every element each of `stride` threads moves, in the
    kernel's order: UNROLL indices walked, then loaded, then stored, round after round."""
    moved = []
    for g in range(min(stride, a.total)):
        digit, at_in, at_out = _first(a, g)
        at = g
        while at < a.total:
            for _ in range(GATHER_UNROLL):
                if at < a.total:
                    moved.append((at_out, at_in))
                at += stride
                at_in, at_out = _advance(a, digit, at_in, at_out)
    return moved


def _random_dims(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...], list[Dim]]:
    """A random permute of a random shape (up to 8 dims, a few thousand elements), as the
    plan's fused dims, outermost output dim first."""
    nd = int(rng.integers(1, MAX_DIMS + 1))
    top = max(2, round(3000 ** (1 / nd)))
    shape = tuple(int(v) for v in rng.integers(1, top + 1, nd))
    axes = tuple(int(a) for a in rng.permutation(nd))
    return shape, axes, list(plan_permute(shape, axes, 1).dims)


@pytest.mark.parametrize("seed", range(12))
def test_the_walk_moves_what_np_transpose_moves(seed: int):
    """Random permutes, each on grids of one thread, a few, a warp and a half, more threads
    than elements: every output element is written once, from the input element
    np.transpose puts there."""
    rng = np.random.default_rng([seed, 5150])
    for _ in range(20):
        shape, axes, dims = _random_dims(rng)
        x = np.arange(math.prod(shape)).reshape(shape)
        want = np.transpose(x, axes).ravel()
        if not dims:  # one element
            continue
        total = math.prod(d.extent for d in dims)
        for stride in {1, 3, 48, int(rng.integers(1, total + 1)), total, total + 7}:
            a = gather_args(dims, stride)
            out = np.full(total, -1)
            flat = x.ravel()
            for o, i in walk(a, stride):
                assert out[o] == -1, f"{shape} by {axes}, stride {stride}: {o} written twice"
                out[o] = flat[i]
            assert np.array_equal(out, want), f"{shape} by {axes}, stride {stride}"


def test_the_walk_takes_strided_views():
    """Dims with gaps on both sides (a view in, a padded out): offsets, not indices."""
    dims = [Dim(4, 3, 200), Dim(5, 1000, 40), Dim(3, 50, 13), Dim(6, 7000, 2), Dim(2, 1, 1)]
    got = sorted(walk(gather_args(dims, 37), 37))
    idx = np.indices([d.extent for d in dims]).reshape(len(dims), -1).T
    want = sorted(
        (int(k @ [d.out_stride for d in dims]), int(k @ [d.in_stride for d in dims])) for k in idx
    )
    assert got == want


@pytest.mark.parametrize("seed", range(6))
def test_the_walk_takes_any_strides(seed: int):
    """What permute() now hands the gather for layouts with no stride-1 axis (plan.STRIDED):
    input strides of any size, 0 (broadcast) included, and an output whose innermost
    stride is not 1. Each output place is written once, from the input place its index
    names, whatever the grid."""
    rng = np.random.default_rng([seed, 4242])
    for _ in range(15):
        nd = int(rng.integers(1, MAX_DIMS + 1))
        shape = tuple(int(v) for v in rng.integers(1, max(2, round(2000 ** (1 / nd))) + 1, nd))
        axes = tuple(int(a) for a in rng.permutation(nd))
        xs = tuple(int(rng.choice([0, 2, 3, 7, 1000])) for _ in range(nd))
        out_shape = tuple(shape[a] for a in axes)
        os_, acc = [0] * nd, int(rng.integers(2, 4))  # out: row-major with gaps, inner step 2-3
        for k in reversed(range(nd)):
            os_[k] = acc
            acc *= out_shape[k] + int(rng.integers(0, 2))
        plan = plan_permute(shape, axes, 4, xs, tuple(os_))
        if not plan.dims:
            continue
        assert plan.passes[0].kind == "gather", plan.describe()
        dims = list(plan.passes[0].dims)
        total = math.prod(d.extent for d in dims)
        idx = np.indices([d.extent for d in dims]).reshape(len(dims), -1).T
        want = sorted(
            (int(k @ [d.out_stride for d in dims]), int(k @ [d.in_stride for d in dims]))
            for k in idx
        )
        for stride in {1, 5, 33, total, total + 3}:
            got = walk(gather_args(dims, stride), stride)
            assert len({o for o, _ in got}) == total, plan.describe()
            assert sorted(got) == want, plan.describe()


@pytest.mark.parametrize("seed", range(4))
def test_a_thread_of_a_huge_problem_walks_exactly(seed: int):
    """Past 2**31 (and 2**32) elements: one thread's first hundred elements, carried, equal
    the direct decomposition of its indices (64-bit offsets, 32-bit digits)."""
    rng = np.random.default_rng([seed, 77])
    extents = [int(v) for v in rng.integers(2, 3000, 4)] + [int(rng.integers(2**20, 2**22))]
    rng.shuffle(extents)
    shape = tuple(extents)
    axes = tuple(int(a) for a in rng.permutation(len(shape)))
    xs, os_ = contiguous_strides(shape), contiguous_strides(tuple(shape[a] for a in axes))
    dims = [Dim(shape[a], xs[a], os_[k]) for k, a in enumerate(axes)]  # unfused: any order
    total = math.prod(d.extent for d in dims)
    assert total > 2**32
    stride = int(rng.integers(1000, 2**31))
    a = gather_args(dims, stride)
    g = int(rng.integers(0, stride))
    digit, at_in, at_out = _first(a, g)
    for step in range(100):
        index = g + step * stride
        rest, want_in, want_out = index, 0, 0
        for d in reversed(dims):
            rest, k = divmod(rest, d.extent)
            want_in += k * d.in_stride
            want_out += k * d.out_stride
        assert rest == 0 and (at_in, at_out) == (want_in, want_out), f"step {step}"
        at_in, at_out = _advance(a, digit, at_in, at_out)


def test_arguments_of_a_known_problem():
    """(2, 3, 4) by (2, 0, 1) on 5 threads: the digits of 5 are (1, 1, 0) innermost first."""
    dims = list(plan_permute((2, 3, 4), (2, 0, 1), 4).dims)
    assert dims == [Dim(4, 1, 6), Dim(6, 4, 1)]
    a = gather_args(dims, 5)
    assert (a.ndim, a.total) == (2, 24)
    assert a.extent[:2] == (6, 4) and a.step[:2] == (5, 0)
    assert (a.in_step, a.out_step) == (20, 5)
    assert a.in_carry[0] == 1 - 6 * 4 and a.out_carry[0] == 6 - 6 * 1
    assert a.extent[2:] == (1,) * 6 and a.in_stride[2:] == (0,) * 6 and a.step[2:] == (0,) * 6
    assert len(a.pack()) == ARG_BYTES == 352


@pytest.mark.parametrize(
    "dims, stride, words",
    [
        ([], 1, "1 to 8 dims"),
        ([Dim(2, 1, 1)] * 9, 1, "1 to 8 dims"),
        ([Dim(2, 1, 1)], 0, "grid of 0"),
        ([Dim(2, 1, 1)], 2**31, "grid of"),
        ([Dim(GATHER_MAX_EXTENT + 1, 1, 1)], 5, "32-bit"),
    ],
)
def test_what_the_kernel_cannot_take_is_refused(dims, stride, words):
    with pytest.raises(errors.ShapeError, match=words):
        gather_args(dims, stride)


def test_the_struct_matches_the_template():
    """The packed fields are the C struct's, in its order (a swap of two same-size arrays
    would pass sizeof), and the template checks sizeof against ARG_BYTES when compiled."""
    src = render_gather()
    body = re.search(r"struct at_gather_dims \{(.*?)\};", src, re.S).group(1)
    fields = re.findall(r"^\s*(?:u64|i64|u32) ([\w, ]+?)(?:\[AT_GATHER_DIMS\])?;", body, re.M)
    names = [n.strip() for f in fields for n in f.split(",")]
    assert names == [f.name for f in dataclasses.fields(GatherArgs)] + ["unused"]
    assert f"sizeof(at_gather_dims) == {ARG_BYTES}" in src
    assert ARG_FORMAT.startswith("<") and f"#define AT_GATHER_DIMS {MAX_DIMS}" in src


def test_one_kernel_per_element_size():
    src = render_gather()
    for s, t in [
        (1, "unsigned char"),
        (2, "unsigned short"),
        (4, "u32"),
        (8, "uint2"),
        (16, "uint4"),
    ]:
        assert f"at_gather_s{s}(const {t}* __restrict__ in, {t}* __restrict__ out," in src
    assert src.count("__global__") == 5


def test_contiguous_permutes_have_stride_one_output_inner_dims():
    """The kernel's stores coalesce because the last fused dim has output stride 1."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        shape, axes, dims = _random_dims(rng)
        if dims:
            assert dims[-1].out_stride == 1
            assert contiguous_strides(tuple(shape[a] for a in axes))[-1] == 1


# (shape, axes, element bytes, x's strides (elements), out's strides (None: contiguous))
STRIDED_CASES = [
    ((37,), (0,), 4, (2,), None),  # a 1-D stride-2 view
    ((6, 9), (1, 0), 4, (20, 2), None),  # z.real of a complex64 (6, 10) array, transposed
    ((5, 7), (1, 0), 2, (0, 0), None),  # a broadcast scalar
    ((3, 4, 5), (2, 0, 1), 8, (0, 15, 3), None),  # broadcast and gaps
    ((4, 6), (1, 0), 16, (6, 1), (2, 12)),  # out's innermost stride 2
    ((3, 5, 2), (1, 2, 0), 1, (33, 3, 1000), (13, 6, 2)),  # gaps on both sides
]


@pytest.mark.skipif(CXX is None, reason="needs g++ (C++20) to run the kernel on the CPU")
@pytest.mark.parametrize("shape, axes, e, xs, os_", STRIDED_CASES)
def test_the_kernel_on_the_cpu_moves_any_strides(shape, axes, e, xs, os_, tmp_path_factory):
    """The rendered gather, run by the emulator (tests/_cuda_emulator.h) on grids smaller
    and larger than the problem, for the layouts permute() gives it that no other kernel
    takes: every output element from where np.transpose reads it, nothing else written."""
    rng = np.random.default_rng([e, *shape])
    span = 1 + sum((n - 1) * s for n, s in zip(shape, xs, strict=True))
    src = rng.integers(0, 256, 64 + span * e, dtype=np.uint8)
    x = np.lib.stride_tricks.as_strided(
        src[16 : 16 + span * e].view(f"V{e}"), shape, tuple(s * e for s in xs)
    )
    out_shape = tuple(shape[a] for a in axes)
    os_ = os_ or contiguous_strides(out_shape)
    out_span = 1 + sum((n - 1) * s for n, s in zip(out_shape, os_, strict=True))
    plan = plan_permute(shape, axes, e, xs, os_)
    (p,) = plan.passes
    assert p.kind == "gather", plan.describe()
    source = render_gather()
    lib = library(
        source,
        f"at_gather_s{e}",
        dict(_ELEMENT_TYPES)[e],
        GATHER_THREADS,
        tmp_path_factory.getbasetemp(),
        "at_gather_dims",
    )
    want = np.ascontiguousarray(np.transpose(x, axes)).view(np.uint8).reshape(*out_shape, e)
    for grid in (1, 2):
        dst = np.full(64 + out_span * e, 0xA5, dtype=np.uint8)
        out = np.lib.stride_tricks.as_strided(
            dst[16 : 16 + out_span * e].view(f"V{e}"), out_shape, tuple(s * e for s in os_)
        )
        args = gather_args(p.dims, grid * GATHER_THREADS).pack()
        lib.at_emu_run(
            ctypes.c_uint(grid),
            ctypes.c_void_p(x.ctypes.data),
            ctypes.c_void_p(out.ctypes.data),
            ctypes.c_char_p(args),
        )
        got = np.ascontiguousarray(out).view(np.uint8).reshape(*out_shape, e)
        assert np.array_equal(got, want), plan.describe()
        touched = np.zeros(dst.size, bool)
        places = np.lib.stride_tricks.as_strided(
            np.arange(dst.size)[16:], out_shape, tuple(s * e * 8 for s in os_)
        )
        for b in range(e):
            touched[places.ravel() + b] = True
        assert (dst[~touched] == 0xA5).all(), "bytes outside out were written"

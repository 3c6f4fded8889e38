"""permute() without a GPU: every refusal that can be made before a GPU is touched (NumPy
goes through the host path, which validates first), N-D views, and the executor's steps run
by the NumPy stand-in for the kernels (tests/_plan_ref.py) against np.transpose, byte for
byte, with views on both sides. The row-copy kernel's indexing is checked by emulating its
threads; its source compiles with nvcc where nvcc exists. (The gather kernel's index walk is
modelled in tests/test_gather.py.)"""

from __future__ import annotations

import itertools
import re
import shutil
import struct
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from _plan_ref import _indices

import autotranspose as at
from autotranspose import errors
from autotranspose.dispatch import picker as dispatch
from autotranspose.kernels.codegen import (
    GATHER_BLOCKS_PER_SM,
    GATHER_THREADS,
    GATHER_UNROLL,
    OUTER_ARG_BYTES,
    OUTER_ARG_FORMAT,
    OUTER_SUFFIX,
    ROW_KERNELS,
    ROWS_THREADS,
    ROWS_UNROLL,
    kernel_name,
    render_rows,
    row_kernel_name,
)
from autotranspose.kernels.config import default_config
from autotranspose.kernels.gather import ARG_BYTES, gather_args
from autotranspose.kernels.shapes import pass_vec
from autotranspose.plans.boxes import Dim
from autotranspose.plans.dtypes import ElementType, element_type
from autotranspose.plans.permute import COPY, GATHER, PACKED, TRANSPOSE, Pass, plan_permute
from autotranspose.runtime import launch
from autotranspose.runtime.arrays import NDView, View, check_permute_output, nd_view
from autotranspose.runtime.compiler import Kernel

SIZES = {1: "uint8", 2: "float16", 4: "float32", 8: "float64", 16: "complex128"}


# --- refusals, before any GPU use --------------------------------------------------------------
@pytest.mark.parametrize(
    ("axes", "words"),
    [
        ((0, 1), "name 2 axes but the array has 3"),
        ((0, 1, 1), "repeat axis 1"),
        ((0, 1, 3), "out of range"),
        ((0, 1, "2"), "sequence of ints"),
        (None, "sequence of ints"),
    ],
)
def test_axes_that_are_not_a_permutation(axes, words):
    with pytest.raises(errors.AxesError, match=words) as caught:
        at.permute(np.zeros((2, 3, 4), np.float32), axes)
    assert "permutation" in str(caught.value) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("out", "words"),
    [
        (np.zeros((2, 3, 4), np.float32), r"needs out of shape \(2, 4, 3\)"),
        (np.zeros((2, 4, 3), np.float64), "dtype float64; x has float32"),
        (np.zeros((2, 4), np.float32), "shape"),
        ([[0.0]], r"out is a builtins\.list"),
    ],
)
def test_a_wrong_out_is_refused_and_left_untouched(out, words):
    x = np.ones((2, 3, 4), np.float32)
    before = np.array(out, copy=True)
    with pytest.raises((errors.OutputError, errors.InputTypeError), match=words):
        at.permute(x, (0, 2, 1), out)
    assert np.array_equal(np.asarray(out), before)


def test_an_out_overlapping_x_is_refused():
    buf = np.zeros((2, 4, 4), np.float32)
    with pytest.raises(errors.OutputError, match="overlaps x"):
        at.permute(buf[0], (1, 0), buf[0].T)
    with pytest.raises(errors.OutputError, match="overlaps x"):
        at.permute(buf[:, :2], (0, 2, 1), buf[:, :, :2])
    assert not buf.any()


def test_more_than_eight_dimensions():
    with pytest.raises(errors.ShapeError, match="at most 8"):
        at.permute(np.zeros((1,) * 9, np.int8), tuple(range(9))[::-1])


@pytest.mark.parametrize("dtype", ["object", "U4", "V12"])
def test_unsupported_dtype(dtype):
    with pytest.raises(errors.UnsupportedDtypeError):
        at.permute(np.zeros((2, 2, 2), dtype), (2, 1, 0))


def test_not_an_array_and_a_bad_stream():
    with pytest.raises(errors.InputTypeError, match=r"np\.asarray"):
        at.permute([[1, 2]], (1, 0))
    with pytest.raises(errors.InputTypeError, match="stream must be"):
        at.permute(np.zeros((2, 2)), (1, 0), stream="fast")


@pytest.mark.parametrize("shape", [(0,), (2, 0, 3), (0, 5, 1, 7), (3, 0)])
def test_empty_arrays_need_no_gpu(rng, shape):
    axes = tuple(int(a) for a in rng.permutation(len(shape)))
    want = tuple(shape[a] for a in axes)
    x = np.empty(shape, np.float16)
    y = at.permute(x, axes)
    assert type(y) is np.ndarray and y.shape == want and y.dtype == x.dtype
    out = np.empty(want, np.float16)
    assert at.permute(x, axes, out) is out
    with pytest.raises(errors.OutputError, match="shape"):
        at.permute(x, axes, np.empty(tuple(d + 1 for d in want), np.float16))


# --- N-D views ---------------------------------------------------------------------------------
class _Cai:
    def __init__(self, shape, strides, typestr="<f4", ptr=0x7000_0000):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "strides": strides,
            "typestr": typestr,
            "data": (ptr, False),
            "version": 3,
        }


@pytest.mark.parametrize("shape", [(0,), (2, 0, 3), (0, 5, 1, 7), (3, 0), (4, 1, 0, 2, 3)])
@pytest.mark.parametrize("typestr", ["|b1", "<f2", "<c8"])
def test_empty_cai_arrays_with_no_memory_need_no_gpu(rng, shape, typestr):
    """Pointer 0 (allowed for an empty array): nothing to move, `out` checked as usual and
    left untouched, whatever the axes."""
    axes = tuple(int(a) for a in rng.permutation(len(shape)))
    want = tuple(shape[a] for a in axes)
    x, out = _Cai(shape, None, typestr, ptr=0), _Cai(want, None, typestr, ptr=0)
    assert at.permute(x, axes, out) is out
    wrong = (*want, 0)  # empty too (no memory), of another shape
    with pytest.raises(errors.OutputError, match=r"out has shape .* needs out of shape"):
        at.permute(x, axes, _Cai(wrong, None, typestr, ptr=0))
    with pytest.raises(errors.OutputError, match=r"dtype .* must match"):
        at.permute(x, axes, _Cai(want, None, "<i8", ptr=0))
    with pytest.raises(errors.OutputError, match="both be GPU arrays or both NumPy arrays"):
        at.permute(x, axes, np.empty(want, np.dtype(typestr)))
    with pytest.raises(errors.AxesError):
        at.permute(x, (*axes, len(shape)), out)


def test_strides_of_part_elements_are_refused_before_any_driver_call():
    with pytest.raises(errors.LayoutError, match="whole 4-byte elements"):
        nd_view(_Cai((2, 3, 4), (48, 18, 4)))
    with pytest.raises(errors.InputTypeError):
        nd_view(object())


def test_nd_view_of_numpy_has_element_strides(rng):
    base = rng.standard_normal((5, 6, 7, 8)).astype(np.float32)
    x = base[1:4, ::2, :, 3:7]
    v = nd_view(x)
    assert v.kind == "numpy" and v.shape == x.shape and v.ndim == 4 and v.size == x.size
    assert v.strides == tuple(s // 4 for s in x.strides) and v.et.name == "float32"
    assert nd_view(np.zeros(()))[3:5] == ((), ())


def _dev(shape, strides, ptr=0x10000, dtype="float32", device=0, ctx=None, kind="cupy"):
    et = element_type(dtype)
    return NDView(kind, None, ptr, tuple(shape), tuple(strides), None, et, device, ctx)


def test_extent_covers_what_a_strided_view_touches():
    v = _dev((3, 4, 5), (40, 8, 1), ptr=1000)
    assert v.extent() == (1000, 1000 + (2 * 40 + 3 * 8 + 4 + 1) * 4)
    assert _dev((3, 0), (5, 1)).extent() == (0x10000, 0x10000)
    assert _dev((3, 4), (0, 1), ptr=64).extent() == (64, 64 + 16)  # broadcast rows


def test_device_outputs_are_checked_for_device_context_and_overlap():
    x = _dev((4, 6), (6, 1), ptr=0x10000)
    ok = _dev((6, 4), (4, 1), ptr=0x20000)
    check_permute_output(x, ok, (6, 4), (1, 0))
    cases = [
        (ok._replace(device=1), "on GPU 1 but x is on GPU 0"),
        (ok._replace(device=None, kind="numpy"), "both be GPU arrays or both NumPy"),
        (ok._replace(ptr=0x10000 + 20 * 4), "overlaps x"),
        (ok._replace(ctx=7), None),  # x in the primary context: nothing to compare
        (ok._replace(kind="jax"), "immutable"),
    ]
    for out, words in cases:
        if words is None:
            check_permute_output(x, out, (6, 4), (1, 0))
        else:
            with pytest.raises(errors.OutputError, match=words):
                check_permute_output(x, out, (6, 4), (1, 0))
    with pytest.raises(errors.OutputError, match="different CUDA contexts"):
        check_permute_output(x._replace(ctx=5), ok._replace(ctx=7), (6, 4), (1, 0))


@pytest.mark.parametrize(
    ("x", "out_strides", "words"),
    [
        (_dev((4, 6), (-6, 1), ptr=0x10000 + 18 * 4), None, "negative strides"),
        (_dev((4, 6), (6, 1)), (2, 1), "overlap"),
        (_dev((4, 6), (6, 1)), (0, 1), "overlap"),
    ],
)
def test_layouts_the_kernels_cannot_take_are_refused_by_the_plan(x, out_strides, words):
    with pytest.raises(errors.LayoutError, match=words):
        dispatch.permute.plan_of(x, (1, 0), out_strides, 0x40000)


@pytest.mark.parametrize(
    ("x", "out_strides"),
    [
        (_dev((4, 6), (12, 2)), None),  # no axis of stride 1
        (_dev((4, 6), (0, 0)), None),  # a broadcast scalar
        (_dev((4, 6), (6, 1)), (2, 12)),  # out's innermost stride is 2
    ],
)
def test_layouts_without_a_stride_one_axis_are_one_gather(x, out_strides):
    plan = dispatch.permute.plan_of(x, (1, 0), out_strides, 0x40000)
    assert [p.kind for p in plan.passes] == ["gather"]


# --- the executor on the NumPy stand-in ------------------------------------------------------------
class _Memory:
    """One flat byte buffer standing for device memory: pointers are indices into it."""

    def __init__(self, nbytes: int) -> None:
        self.bytes = np.zeros(nbytes, np.uint8)
        self.launched: list[tuple[str, int, int]] = []
        self.made: list[tuple[int, int]] = []

    def launch(self, p: Pass) -> _FakeLaunch:
        return _FakeLaunch(self, p)

    def memcpy(self, dst: int, src: int, nbytes: int, stream, ctx) -> None:
        assert (stream, ctx) == ("s", "c")
        self.launched.append(("memcpy", src, dst))
        self.bytes[dst : dst + nbytes] = self.bytes[src : src + nbytes].copy()


class _FakeLaunch:
    def __init__(self, mem: _Memory, p: Pass) -> None:
        self.mem, self.p = mem, p

    def run(self, src: int, dst: int, stream, ctx) -> None:
        """What the kernel does (the contract of launch.make_launch / make_row_copy)."""
        assert (stream, ctx) == ("s", "c")
        e = self.p.elem_bytes
        assert src % e == 0 and dst % e == 0, "a launch at pointers its elements do not align to"
        self.mem.launched.append((self.p.kind, src, dst))
        si, di = _indices(self.p, src, dst)
        self.mem.bytes[di] = self.mem.bytes[si]


def _run_steps(mem: _Memory, plan, src: int, dst: int, monkeypatch) -> tuple:
    def make_transpose(e, shape, strides, s, d, outer):
        mem.made.append((s, d))
        (b, m, n), (li, lo, bi, bo), (o, o2) = shape, strides, outer
        return mem.launch(Pass(TRANSPOSE, e, m, n, li, lo, b, bi, bo, outer=o, outer2=o2))

    def make_copy(e, b, m, n, li, lo, bi, bo, outer, oi, oo, outer2, o2i, o2o, realign=False):
        return mem.launch(
            Pass(
                COPY,
                e,
                m,
                n,
                li,
                lo,
                b,
                bi,
                bo,
                outer=Dim(outer, oi, oo),
                outer2=Dim(outer2, o2i, o2o),
                realign=realign,
            )
        )

    def make_gather(e, dims):
        return mem.launch(Pass(GATHER, e, 1, 0, 0, 0, dims=dims))

    def make_packed(e, dims, box, s, d, pipelined, vectors, scatter, pad, realign_out):
        mem.made.append((s, d))
        return mem.launch(
            Pass(
                PACKED,
                e,
                1,
                0,
                0,
                0,
                dims=dims,
                box=box,
                pipelined=pipelined,
                vectors=vectors,
                scatter=scatter,
                pad=pad,
                realign_out=realign_out,
            )
        )

    monkeypatch.setattr(dispatch.permute._driver, "memcpy_dtod_async", mem.memcpy)
    steps = dispatch.permute.build_steps(
        plan, src, dst, make_transpose, make_copy, make_gather, make_packed
    )
    for step in steps:
        step.run(src, dst, "s", "c")
    return steps


def _random_case(rng, e: int):
    """A random 1- to 6-D permute of views: x sliced (steps and offsets) out of a larger
    array, out either contiguous or a window of a padded buffer; pointers at element but not
    necessarily 16-byte alignment."""
    nd = int(rng.integers(1, 7))
    shape = tuple(int(v) for v in rng.integers(1, 6, nd))
    axes = tuple(int(a) for a in rng.permutation(nd))
    pad = [int(rng.integers(0, 3)) for _ in shape]
    parent = tuple(s + p for s, p in zip(shape, pad, strict=True))
    step = [1] * nd
    if nd > 1 and rng.random() < 0.5:  # a step on an outer axis
        k = int(rng.integers(0, nd - 1))
        step[k] = 2
        parent = tuple(p * 2 if i == k else p for i, p in enumerate(parent))
    xs = np.array(_strides(parent))
    in_strides = tuple(int(s * st) for s, st in zip(xs, step, strict=True))
    start = sum(
        int(rng.integers(0, p - s * st + 1)) * int(x)
        for p, s, st, x in zip(parent, shape, step, xs, strict=True)
    )
    want = tuple(shape[a] for a in axes)
    if rng.random() < 0.5:
        out_parent = tuple(w + int(rng.integers(0, 3)) for w in want)
    else:
        out_parent = want
    out_strides = _strides(out_parent)
    return (
        shape,
        axes,
        in_strides,
        start,
        int(np.prod(parent)),
        want,
        out_strides,
        int(np.prod(out_parent)),
    )


def _strides(shape):
    acc, out = 1, []
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


@pytest.fixture(params=["gather", "no_gather"])
def gathers(request: pytest.FixtureRequest) -> bool:
    """As planned (gather passes where the plan picks them), and with the batched passes only."""
    if request.param == "no_gather":
        request.getfixturevalue("no_gather")
    return request.param == "gather"


@pytest.mark.parametrize("e", sorted(SIZES))
def test_steps_match_numpy_for_random_views(rng, e, monkeypatch, gathers):
    refused = 0
    for _ in range(60):
        shape, axes, xst, start, x_elems, want, ost, o_elems = _random_case(rng, e)
        x_at = 4096 + e * int(rng.integers(0, 4))  # element-aligned, not always 16-byte aligned
        o_at = x_at + x_elems * e + 256 + e * int(rng.integers(0, 4))
        mem = _Memory(o_at + o_elems * e + 256)
        mem.bytes[:] = rng.integers(0, 256, mem.bytes.size, dtype=np.uint8)
        before = mem.bytes.copy()
        src, dst = x_at + start * e, o_at
        try:
            plan = plan_permute(shape, axes, e, xst, ost, in_ptr=src, out_ptr=dst)
        except errors.LayoutError:  # padding after trailing size-1 axes: no stride-1 axis
            refused += 1
            continue
        _run_steps(mem, plan, src, dst, monkeypatch)
        x = np.lib.stride_tricks.as_strided(
            before[src:].view(np.uint8), shape=(*shape, e), strides=(*(s * e for s in xst), 1)
        )
        got = np.lib.stride_tricks.as_strided(
            mem.bytes[dst:], shape=(*want, e), strides=(*(s * e for s in ost), 1)
        )
        case = f"{shape} by {axes}, {e}-byte, x strides {xst}, out strides {ost}"
        assert np.array_equal(got, np.transpose(x, (*axes, len(axes)))), case
        touched = np.zeros(mem.bytes.size, bool)
        idx = np.lib.stride_tricks.as_strided(
            np.arange(mem.bytes.size)[dst:],
            shape=(*want, e),
            strides=(*(s * e * 8 for s in ost), 8),
        )
        touched[idx.ravel()] = True
        assert np.array_equal(mem.bytes[~touched], before[~touched]), f"{case}: wrote outside out"
    assert refused < 20


def test_an_identity_is_one_memcpy_and_a_transpose_one_launch_per_loop_index(
    monkeypatch, no_gather
):
    mem = _Memory(1 << 16)
    plan = plan_permute((4, 8), (0, 1), 4)
    steps = _run_steps(mem, plan, 0, 4096, monkeypatch)
    assert [s.launch for s in steps] == [None] and mem.launched == [("memcpy", 0, 4096)]
    mem = _Memory(1 << 16)
    plan = plan_permute((2, 3, 5, 7), (3, 1, 0, 2), 16)  # outer dims the launch walks itself
    (p,) = plan.passes
    assert not p.loops and p.outer.extent * p.outer2.extent > 1
    steps = _run_steps(mem, plan, 0, 8192, monkeypatch)
    assert len(mem.launched) == plan.launches == len(steps[0].offsets) == 1
    mem = _Memory(1 << 20)
    plan = plan_permute((2, 3, 5, 7, 8, 9), (3, 2, 1, 0, 5, 4), 16)  # and a host loop left over
    assert [d.extent for d in plan.passes[0].loops] == [2]
    steps = _run_steps(mem, plan, 0, 1 << 19, monkeypatch)
    assert len(mem.launched) == plan.launches == len(steps[0].offsets) == 2
    assert {k for k, _, _ in mem.launched} == {TRANSPOSE} and len(mem.made) == 1


@pytest.mark.parametrize("kind", [PACKED, GATHER])
def test_a_gather_is_one_launch(monkeypatch, kind, request):
    """The same permute as above, planned as it is by default: many small launches become
    one packed launch over every fused dim (or one gather, where no box is taken)."""
    if kind == GATHER:
        request.getfixturevalue("no_packed")
    mem = _Memory(1 << 16)
    plan = plan_permute((2, 3, 5, 7), (3, 1, 0, 2), 2)
    (p,) = plan.passes
    assert p.kind == kind and plan.launches == 1
    steps = _run_steps(mem, plan, 0, 8192, monkeypatch)
    assert mem.launched == [(kind, 0, 8192)] and steps[0].offsets == ((0, 0),)


@pytest.mark.parametrize(
    "shape, axes",
    [
        ((3, 17, 4, 19), (2, 0, 3, 1)),  # the outer dim's out stride is odd elements
        ((3, 5, 4, 6), (2, 0, 3, 1)),  # narrow matrices: a host loop's is
    ],
)
def test_the_kernel_is_chosen_for_the_least_aligned_launch(monkeypatch, no_gather, shape, axes):
    """Host loops and outer dims move the pointers by their strides: the launch made must
    run at all of them. It is made at the worst-aligned real launch start (a first call
    measures that whole launch there), and the vector it may use is derived from every
    matrix's pointers, outer dims included, as `shapes.pass_vec` says for the pass."""
    mem = _Memory(1 << 20)
    plan = plan_permute(shape, axes, 4)
    p = plan.passes[0]
    assert p.outer.extent > 1 or p.loops
    _run_steps(mem, plan, 0, 1 << 19, monkeypatch)
    ((s, d),) = mem.made

    def alignment(v: int) -> int:
        v &= 15
        return v & -v if v else 16

    starts = list(p.offsets())
    assert (s, d - (1 << 19)) in starts, "a launch is made at a real launch's pointers"
    assert alignment(s | d) == min(alignment(i | (o + (1 << 19))) for i, o in starts)
    x = View(
        "device",
        None,
        s,
        3,
        p.batch,
        p.m,
        p.n,
        p.ld_in,
        p.bs_in,
        None,
        ElementType("4-byte word", 4, False),
        0,
    )
    o = x._replace(ptr=d, m=p.n, n=p.m, ld=p.ld_out, bs=p.bs_out)
    got = dispatch.transpose.vec_of(x, o, (p.outer, p.outer2))
    if not p.loops:
        assert got == pass_vec(p), "the launch's vector is the pass's"
    assert got < 4 and got <= dispatch.transpose.vec_of(x, o), (
        "the outer dims' strides cap the vector"
    )
    assert dispatch.permute.weakest([(0, 0), (4, 8), (16, 32)], 0, 0) == (4, 8)


# --- a transpose launch that walks outer dims ----------------------------------------------------
@pytest.fixture
def tile_launch(monkeypatch):
    def kernel(state, cfg, *, outer=False):
        return Kernel(kernel_name(cfg, outer), 1, 1)

    monkeypatch.setattr(launch, "get_kernel", kernel)
    state = SimpleNamespace(info=SimpleNamespace(multiprocessors=132))
    return lambda *args: launch.make_launch(state, *args)


def _outer_offsets(more: tuple[int, ...], b: int, bs_in: int, bs_out: int) -> tuple[int, int]:
    """templates/common/outer.cu.j2's at_outer_offsets, in Python (32-bit unsigned division)."""
    _, batch, os_in, os_out, os2_in, os2_out, outer2, _ = more
    q, b0 = divmod(b, batch)
    b2, b1 = divmod(q, outer2)
    return b0 * bs_in + b1 * os2_in + b2 * os_in, b0 * bs_out + b1 * os2_out + b2 * os_out


@pytest.mark.parametrize(("e", "vec"), [(1, 16), (1, 1), (2, 1), (4, 16), (16, 1)])
def test_an_outer_launch_finds_every_matrix_once(tile_launch, e, vec, rng):
    """The outer variant takes the plain launch's first ten arguments and, where the plain
    one has tiles_total (the launcher's last offset), a struct that carries it; each batch
    index of the launch is one matrix of (outer, outer2, batch), at its own offsets."""
    cfg = default_config(e, max_vector=vec)
    batch, m, n = (int(v) for v in rng.integers(1, 9, 3))
    o, o2 = Dim(int(rng.integers(2, 6)), 1000003, 7), Dim(int(rng.integers(2, 6)), 11, 999983)
    v = 1 if cfg.any_offset else cfg.vec
    o, o2 = (Dim(d.extent, d.in_stride * v, d.out_stride * v) for d in (o, o2))
    args = (cfg, batch, m * v, n * v, n * v, m * v, m * n * v * v, m * n * v * v)
    plain, walked = tile_launch(*args), tile_launch(*args, o, o2)
    assert walked.kernel.name == cfg.kernel_name + OUTER_SUFFIX
    head, tail = bytes(16) + plain.tail, bytes(16) + walked.tail
    assert len(tail) == 72 + OUTER_ARG_BYTES and tail[:72] == head[:72]
    more = struct.unpack_from(OUTER_ARG_FORMAT, tail, 72)
    assert more[0] == plain.scalars[-1] * o.extent * o2.extent  # tiles_total
    bs_in, bs_out = plain.scalars[4:6]
    seen = {_outer_offsets(more, b, bs_in, bs_out) for b in range(batch * o.extent * o2.extent)}
    want = {
        (
            (k * o.in_stride + j * o2.in_stride) // v + i * bs_in,
            (k * o.out_stride + j * o2.out_stride) // v + i * bs_out,
        )
        for k in range(o.extent)
        for j in range(o2.extent)
        for i in range(batch)
    }
    assert seen == want and len(want) == batch * o.extent * o2.extent


# --- the row copy kernel --------------------------------------------------------------------------
@pytest.fixture
def row_copy(monkeypatch):
    monkeypatch.setattr(
        launch,
        "get_row_kernel",
        lambda state, e, skew=False: Kernel(row_kernel_name(e, skew), 1, 1),
    )

    state = SimpleNamespace(info=SimpleNamespace(multiprocessors=132))
    return lambda *args: launch.make_row_copy(state, *args)


def _emulate(
    lc, batch: int, m: int, n: int, out_base: int = 0, starts: list | None = None
) -> np.ndarray:
    """How many times each (z, b, i, j) is copied by the launch's threads (the kernel's index
    arithmetic, thread by thread; z is blockIdx.z, the outer dims), with `out` at word
    `out_base` of the address space (the stores' skew depends on where the rows fall).
    `starts` collects, for each warp, pass and row, the word address of its first store and
    whether that store is the first of its chunk."""
    (
        m_,
        n_,
        _,
        ld_out,
        _,
        bs_out,
        _,
        os_out,
        _,
        os2_out,
        lanes,
        b_,
        chunk,
        outer2,
        per_block,
        line,
    ) = lc.scalars
    assert (m_, n_, b_) == (m, n, batch) and per_block == lc.block[0] // lanes
    word = int(re.fullmatch(r"at_copy_rows_s(\d+)(_skew)?", lc.kernel.name)[1])
    assert lc.kernel.name.endswith("_skew") == (line > 0)  # the unskewed kernel reads no line
    mask = line // word - 1 if line else 0
    hits = np.zeros((lc.grid[2], batch, m, n), np.int64)
    assert lc.grid[1] * chunk >= n and (lc.grid[1] - 1) * chunk < n
    for block, y, z in itertools.product(*(range(g) for g in lc.grid)):
        base = out_base + (z // outer2) * os_out + (z % outer2) * os2_out
        j0, j1 = y * chunk, min(n, (y + 1) * chunk)
        for t in range(lc.block[0]):
            slot, lane = divmod(t, lanes)
            if slot >= per_block:
                continue
            first = block * per_block * ROWS_UNROLL + slot
            rows = [
                (u, *divmod(r, m))
                for u in range(ROWS_UNROLL)
                if (r := first + u * per_block) < batch * m
            ]
            skew = {u: (base + b * bs_out + i * ld_out + j0) & mask for u, b, i in rows}
            for jj in range(j0 + lane, j1 + max(skew.values(), default=0), lanes):
                for u, b, i in rows:
                    if j0 <= (j := jj - skew[u]) < j1:
                        hits[z, b, i, j] += 1
                        if starts is not None and (lane % 32 == 0 or j == j0):
                            starts.append((base + b * bs_out + i * ld_out + j, j == j0))
    return hits


@pytest.mark.parametrize(
    ("batch", "m", "n"),
    [
        (1, 1, 1),
        (1, 7, 3),
        (3, 5, 16),
        (2, 9, 300),
        (1, 70, 33),
        (4, 1, 1),
        (2, 3, 9000),
        (5, 13, 19),
        (3, 4, 129),
        (1, 2, 200),
        (2, 1, 70001),
    ],
)
def test_row_copy_covers_every_word_once(row_copy, batch, m, n):
    lc = row_copy(4, batch, m, n, n + 1, n + 2, m * (n + 1), m * (n + 2))
    assert lc.config is None and lc.block == (ROWS_THREADS, 1, 1) and lc.grid[2] == 1
    assert np.all(_emulate(lc, batch, m, n) == 1)


@pytest.mark.parametrize("min_steps", [4, 10**6])  # chunks of 4 passes; one chunk a row
@pytest.mark.parametrize("word", [1, 2, 4, 8, 16])
@pytest.mark.parametrize(("batch", "m", "n"), [(2, 3, 2000), (1, 3, 1100), (3, 2, 1500)])
def test_long_rows_store_from_line_starts_at_any_offset(
    row_copy, rng, monkeypatch, min_steps, word, batch, m, n
):
    """Rows of whole warps are skewed across the lanes: each warp's stores of a pass start on
    a line (or, for runs shorter than a line, a sector), wherever out and the rows fall;
    only a chunk's first store does not. Every word is still copied once."""
    monkeypatch.setattr(launch, "ROWS_MIN_STEPS", min_steps)
    ld_out = n + int(rng.integers(0, 9))
    lc = row_copy(word, batch, m, n, n, ld_out, m * n, m * ld_out + int(rng.integers(0, 9)))
    line = lc.scalars[-1]
    assert line == launch.ROWS_STORE_LINE and lc.kernel.name == row_kernel_name(word, skew=True)
    starts: list = []
    base = int(rng.integers(0, 10**6))
    assert np.all(_emulate(lc, batch, m, n, base, starts) == 1)
    run = min(line, 32 * word) // word if line else 1
    assert [a for a, first in starts if not first and a % run] == []


@pytest.mark.parametrize("n", [1, 7, 31, 300, 1000])
def test_rows_under_a_warp_or_four_passes_are_not_skewed(row_copy, n):
    """Under a warp, a warp spans several rows (no skew lines them all up); under four
    passes, the skew's arithmetic costs more than whole-line stores gain (H200: 2-6 points lost)."""
    lc = row_copy(8, 2, 3, n, n, n, 3 * n, 3 * n)
    assert lc.scalars[-1] == 0 and lc.kernel.name == row_kernel_name(8)
    assert np.all(_emulate(lc, 2, 3, n) == 1)


@pytest.mark.parametrize(
    ("rows", "n", "cut"),
    [(80, 66176, True), (192, 378132, True), (9440, 879, False), (2160 * 10, 5695, False)],
)
def test_a_cut_row_copy_is_cut_for_more_waves(rows, n, cut):
    """A launch that ROWS_WAVES leaves whole stays whole; one it cuts is cut for
    ROWS_CUT_WAVES waves (or into chunks at their shortest), so its last wave's tail is a
    small share of it."""
    sms = 132
    g = launch.row_geometry(rows, n, sms)
    assert (g.chunks > 1) == cut
    if cut:
        waves = launch.ROWS_CUT_WAVES * sms * launch.ROWS_BLOCKS_PER_SM
        # (chunks are whole passes of the lanes: the count may fall short by a pass)
        assert (
            g.blocks * g.chunks * (g.chunk + g.lanes) >= waves * g.chunk
            or g.chunk <= g.lanes * launch.ROWS_MIN_STEPS
        )


@pytest.mark.parametrize(
    ("n", "chunk", "lanes", "line"),
    [
        (100000, 4096, 256, 128),
        (300, 512, 256, 0),
        (1024, 1024, 256, 128),
        (1023, 2048, 256, 0),
        (5000, 512, 256, 0),
        (40, 64, 64, 0),
        (124, 124, 31, 0),
        (2000, 1024, 128, 128),
    ],
)
def test_chunks_of_four_passes_of_whole_warps_are_skewed(n, chunk, lanes, line):
    assert launch.row_store_line(n, chunk, lanes) == line


@pytest.mark.parametrize("outer", [2, 3])
def test_row_copy_walks_the_outer_dim_in_one_launch(row_copy, outer):
    batch, m, n = 2, 5, 16
    lc = row_copy(
        4, batch, m, n, n, n, m * n, m * n, outer, batch * m * n + 7, batch * m * n + 9, 3, 5, 6
    )
    assert lc.grid[2] == outer * 3 and lc.scalars[6:10] == (
        batch * m * n + 7,
        batch * m * n + 9,
        5,
        6,
    )
    assert lc.scalars[13] == 3
    assert np.all(_emulate(lc, batch, m, n) == 1)


@pytest.mark.parametrize("n", [*range(1, 300), 1000, 4095, 70001])
def test_row_lanes_keep_the_block_busy(n):
    """Rows under a warp take their own word count of lanes (no idle lane, warps spanning
    rows), longer ones the power of two over them, up to the block (one pass of whole warps)."""
    lanes = launch.row_lanes(n)
    assert 1 <= lanes <= ROWS_THREADS and ROWS_THREADS // lanes >= 1
    if n <= 32:
        assert lanes == n
    else:
        assert (
            lanes % 32 == 0 and lanes & (lanes - 1) == 0 and (lanes >= n or lanes == ROWS_THREADS)
        )


@pytest.mark.parametrize(
    ("rows", "n"), [(96, 131871), (768, 16052), (21600, 5695), (10**6, 16), (3, 10**8)]
)
def test_row_geometry_fills_the_gpu(rows, n):
    """Long rows are cut until the launch has several waves of blocks (or chunks are at
    their shortest), and never into more chunks than blockIdx.y takes."""
    sms = 132
    g = launch.row_geometry(rows, n, sms)
    assert (
        launch.row_geometry(rows, n, sms, 10**4).chunks == 1 or n > 65535 * g.lanes
    )  # enough blocks over z
    assert g.chunk % g.lanes == 0 and (g.chunks - 1) * g.chunk < n <= g.chunks * g.chunk
    assert g.chunks <= 65535 and g.blocks * g.per_block * ROWS_UNROLL >= rows
    waves = launch.ROWS_WAVES * sms * launch.ROWS_BLOCKS_PER_SM
    # (chunks are whole passes of the lanes: the count may fall short of the waves by a pass)
    assert (
        g.blocks * g.chunks * (g.chunk + g.lanes) >= waves * g.chunk
        or g.chunk <= g.lanes * launch.ROWS_MIN_STEPS
    )


@pytest.mark.parametrize("args", [(2**32, 2, 1, 1, 1, 2, 2), (2, 2, 1, 1, 1, 2, 2, 2**16, 4, 4)])
def test_row_copy_refuses_what_one_launch_cannot_take(row_copy, args):
    with pytest.raises(errors.ShapeError, match="split"):
        row_copy(1, *args)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_row_copy_compiles_without_spills(tmp_path: Path, arch):
    src = tmp_path / "rows.cu"
    src.write_text(render_rows())
    run = subprocess.run(
        [
            "nvcc",
            "-cubin",
            f"-arch={arch}",
            "-O3",
            "-Xptxas",
            "-v",
            str(src),
            "-o",
            str(tmp_path / "rows.cubin"),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    for name in ROW_KERNELS:
        assert f"'{name}'" in run.stderr
    spills = [line for line in run.stderr.splitlines() if "spill" in line]
    assert len(spills) == len(ROW_KERNELS) == 2 * len(SIZES) + 1  # and the realigning one
    assert all("0 bytes spill stores, 0 bytes spill loads" in line for line in spills), spills


# --- the gather launch --------------------------------------------------------------------------
class _GatherState:
    """What make_gather reads of a device: its SM count."""

    def __init__(self, sms: int) -> None:
        self.info = type("Info", (), {"multiprocessors": sms})()


@pytest.mark.parametrize(
    ("dims", "sms", "blocks"),
    [
        ((Dim(3, 1, 5), Dim(5, 3, 1)), 132, 1),  # 15 elements: one block
        ((Dim(300, 1, 300), Dim(300, 300, 1)), 132, -(-90000 // (GATHER_THREADS * GATHER_UNROLL))),
        ((Dim(10**5, 1, 10**5), Dim(10**5, 10**5, 1)), 132, 132 * GATHER_BLOCKS_PER_SM),
        ((Dim(10**5, 1, 10**5), Dim(10**5, 10**5, 1)), 16, 16 * GATHER_BLOCKS_PER_SM),
    ],
)
def test_make_gather_sizes_the_grid_and_packs_the_struct(monkeypatch, dims, sms, blocks):
    """One block per GATHER_THREADS x GATHER_UNROLL elements, at most GATHER_BLOCKS_PER_SM per
    SM (then the threads loop); the arguments are the struct for that grid's stride, after
    the two pointers."""
    monkeypatch.setattr(
        launch, "get_gather_kernel", lambda state, e: Kernel(f"at_gather_s{e}", 1, 1)
    )
    lc = launch.make_gather(_GatherState(sms), 4, dims)
    assert lc.config is None and lc.kernel.name == "at_gather_s4"
    assert lc.grid == (blocks, 1, 1) and lc.block == (GATHER_THREADS, 1, 1)
    assert (
        lc.tail == gather_args(dims, blocks * GATHER_THREADS).pack() and len(lc.tail) == ARG_BYTES
    )


# --- the first call's race, on a simulated GPU clock ------------------------------------------
class _Clock:
    """A GPU that runs what is queued at once: each runner adds its seconds (and noise) to
    the clock; events read it; a spin adds its wait."""

    def __init__(self, rng: np.random.Generator, noise: float) -> None:
        self.t, self.rng, self.noise, self.spins = 0.0, rng, noise, []

    def event(self):
        clock = self

        class Event:
            def record(self, stream=None):
                self.t = clock.t
                return self

            def synchronize(self):
                pass

            def ms_since(self, start):
                return (self.t - start.t) * 1e3

        return Event()

    def runner(self, seconds: float, fails: bool = False):
        clock = self

        class Runner:
            def run(self, src, dst, stream, ctx):
                if fails:
                    raise errors.KernelLaunchError("launch failed")
                clock.t += seconds * (1 + clock.noise * clock.rng.standard_normal())

        return Runner()


@pytest.fixture
def gpu_clock(monkeypatch: pytest.MonkeyPatch):
    import contextlib

    from autotranspose.dispatch import firstcall

    clock = _Clock(np.random.default_rng(7), 0.0)
    monkeypatch.setattr(firstcall._driver, "Event", clock.event)
    monkeypatch.setattr(firstcall._driver, "on_context", lambda ctx: contextlib.nullcontext())
    monkeypatch.setattr(firstcall._driver, "synchronize", lambda ctx: None)
    spin = SimpleNamespace(call=lambda grid, block, fmt, ns, stream: clock.spins.append(ns))
    monkeypatch.setattr(firstcall, "spinner", lambda state: spin)
    return clock


def _passes(k: int) -> list[Pass]:
    return [Pass(GATHER, 1, 1, n + 1, n + 1, n + 1) for n in range(k)]


@pytest.mark.parametrize(
    "rival, noise, wins",
    [
        (0.995, 0.002, False),  # 0.5% faster: within the confirmation's margin, the plan's stays
        (0.98, 0.002, True),  # 2% faster, every time: it replaces the plan's pass
        (0.90, 0.01, True),
        (1.05, 0.02, False),  # slower
        (1.0, 0.04, False),  # equal, noisy: noise alone never replaces the plan's pass
    ],
)
def test_the_race_keeps_the_plans_pass_unless_beaten_clearly(gpu_clock, rival, noise, wins):
    from autotranspose.dispatch import firstcall

    gpu_clock.noise = noise
    guess, alt, slow = _passes(3)
    runners = {
        guess: gpu_clock.runner(10e-6),
        alt: gpu_clock.runner(10e-6 * rival),
        slow: gpu_clock.runner(14e-6),
    }
    out = firstcall.race(runners, guess, None, 0, 0, None, 0)
    assert out.best == (alt if wins else guess), out.seconds
    assert set(out.seconds) == set(runners) and all(out.seconds.values())
    # every timed batch waited behind a spin (warm-ups do not): rounds, then pairs if a rival
    # led the rounds
    assert len(gpu_clock.spins) >= firstcall.ROUNDS * len(runners)
    assert all(
        firstcall.SPIN_MIN_S * 1e9 <= ns <= firstcall.SPIN_MAX_S * 1e9 for ns in gpu_clock.spins
    )


def test_a_runner_that_fails_to_launch_is_left_out(gpu_clock):
    from autotranspose.dispatch import firstcall

    guess, alt = _passes(2)
    runners = {guess: gpu_clock.runner(10e-6, fails=True), alt: gpu_clock.runner(12e-6)}
    out = firstcall.race(runners, guess, None, 0, 0, None, 0)
    assert out.best == alt and out.seconds[guess] is None
    runners = {guess: gpu_clock.runner(10e-6, fails=True)}
    assert firstcall.race(runners, guess, None, 0, 0, None, 0) is None


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_races_spin_kernel_compiles_silently():
    """`at_spin` (the race's wait, in the support kernels): one thread, no local memory, and
    nvcc says nothing (pycuda turns what it says into a warning at a user's first call)."""
    from _nvcc import assert_nvcc_silent

    from autotranspose.kernels.codegen import render_support
    from autotranspose.runtime.compiler import source_resources

    assert_nvcc_silent(render_support())
    res = source_resources(render_support(), "sm_90")["at_spin"]
    assert res.spill_bytes == 0 and res.stack_bytes == 0 and res.smem_bytes == 0, res

"""The vector box pass (templates/vbox/vbox.cu.j2) on a real GPU: random permutes that take it, at
pointer offsets that allow 16-, 8- and 4-byte vectors, boxes whole and cut at the edges, into
output windows with poison before and after, against NumPy on fresh random bits; and the ML
workloads it serves (ViT patchify, images HWC <-> CHW of 1 to 4 channels, odd image sizes
that leave narrower vectors or none) through PyTorch, as permute() serves them."""

from __future__ import annotations

import math

import numpy as np
import pytest

import autotranspose as at
from autotranspose.plans.permute import PACKED, Pass, plan_permute, vector_launch

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("pycuda_primary")]

DTYPES = {1: "uint8", 2: "float16", 4: "float32", 8: "complex64"}
POISON = 0xA5


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Every bit of every element random (so a wrong byte shows)."""
    dt = np.dtype(dtype)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    return raw.view(dt).reshape(shape)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _vector_problem(rng, e: int, big: bool, lead_in: int, lead_out: int, cut: bool = False):
    """A random 3- to 6-D permute of `e`-byte elements whose sides are mostly multiples of 4
    or 8 (some odd: edge boxes), up to millions of elements when `big` (many boxes a block),
    with a vector box at inputs `lead_in` and outputs `lead_out` bytes past 16 (one that an
    edge cuts, if `cut`: the plan prefers whole boxes, so those are rarer)."""
    while True:
        nd = int(rng.integers(3, 7))
        total = (3e7 if big else 1e6) / e
        cap = max(2, round(total ** (1 / nd)))
        mult = [int(rng.choice([4, 8])) if rng.random() < 0.6 else 1 for _ in range(nd)]
        shape = tuple(
            max(1, int(v) // m) * m
            for v, m in zip(rng.integers(max(1, cap // 2), 2 * cap + 1, nd), mult, strict=True)
        )
        if math.prod(shape) * e > (64 << 20):
            continue
        axes = tuple(int(a) for a in rng.permutation(nd))
        dims = plan_permute(shape, axes, e).dims
        if len(dims) > 8:
            continue
        p = vector_launch(Pass(PACKED, e, 1, 0, 0, 0, dims=dims), lead_in, lead_out)
        if p is not None and p.elem_bytes == e:
            if cut and not any(d.extent % b for d, b in zip(p.dims, p.box, strict=True)):
                continue
            return shape, axes, p


@pytest.mark.parametrize("e", sorted(DTYPES))
def test_vector_boxes_into_poisoned_windows(rng, e):
    """The kernel on its own (`vbox.make_vbox`): random permutes at input and output offsets
    of 0, 4 and 8 bytes past 16 (so each vector width runs, where two elements fit it), small
    and big, boxes whole and cut; equal to np.transpose, the poison before and after the
    output untouched."""
    cupy = pytest.importorskip("cupy")
    from autotranspose.runtime.compiler import device_state
    from autotranspose.runtime.launch import make_vbox

    state, dtype = device_state(0), DTYPES[e]
    stream = cupy.cuda.get_current_stream()
    widths, cut = set(), 0
    for case in range(20):
        if case >= 10 and cut >= 2 and len(widths) >= (2 if e < 8 else 1):
            break
        # offsets that leave vectors of two elements: 0, 4 and 8 bytes past 16 where they do
        leads = [v for v in (0, 0, 4, 8) if v % (2 * e) == 0]
        lead_in, lead_out = (int(v) for v in rng.choice(leads, 2))
        shape, axes, p = _vector_problem(
            rng, e, case % 3 == 2, lead_in, lead_out, cut=case >= 8 and cut < 2
        )
        host = random_array(rng, shape, dtype)
        big = cupy.zeros(host.nbytes + 64, np.uint8)
        x = big[16 + lead_in : 16 + lead_in + host.nbytes].view(dtype).reshape(shape)
        x[...] = cupy.asarray(host)
        want = np.transpose(host, axes)
        raw = cupy.full(want.nbytes + 64 + 4096, POISON, np.uint8)
        out = raw[16 + lead_out : 16 + lead_out + want.nbytes].view(dtype).reshape(want.shape)
        q = vector_launch(Pass(PACKED, e, 1, 0, 0, 0, dims=p.dims), x.data.ptr, out.data.ptr)
        assert q == p, (shape, axes)
        # the rule's resident blocks, or others (the grid, and each block's walk, change)
        blocks = int(rng.choice([0, 0, 2, 5, 8]))
        lc = make_vbox(state, e, p.dims, p.box, p.vectors, x.data.ptr, out.data.ptr, blocks=blocks)
        lc.run(x.data.ptr, out.data.ptr, stream.ptr, state.ctx)
        stream.synchronize()
        widths.add(p.vectors)
        cut += any(d.extent % b for d, b in zip(p.dims, p.box, strict=True))
        assert same_bits(cupy.asnumpy(out), want), (shape, axes, p.box, p.vectors, lead_in, blocks)
        assert bool((raw[: 16 + lead_out] == POISON).all()) and bool(
            (raw[16 + lead_out + want.nbytes :] == POISON).all()
        ), (shape, axes, p.box, p.vectors)
    assert cut >= 2 and len(widths) >= (2 if e < 8 else 1), (cut, widths)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("p", [16, 14])
def test_vit_patchify_through_torch(p, dtype):
    """(B, 3, H/p, p, W/p, p) -> (B, H/p, W/p, p, p, 3): the vector box, into a new tensor
    and into a window of a poisoned buffer, equal to PyTorch's own permute."""
    torch = pytest.importorskip("torch")
    g = 224 // p
    x = torch.randn(5, 3, g, p, g, p, device="cuda").to(getattr(torch, dtype))
    axes = (0, 2, 4, 3, 5, 1)
    plan = plan_permute(tuple(x.shape), axes, 2, in_ptr=x.data_ptr())
    assert plan.passes[0].vectors[0] == 16, plan.describe()
    want = x.permute(axes).contiguous()
    assert torch.equal(at.permute(x, axes).view(torch.int16), want.view(torch.int16))
    raw = torch.full((want.numel() + 64,), -23131, dtype=torch.int16, device="cuda")  # 0xA5A5
    out = raw[8 : 8 + want.numel()].view(getattr(torch, dtype)).view(want.shape)
    at.permute(x, axes, out=out)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))
    assert bool((raw[:8] == -23131).all()) and bool((raw[8 + want.numel() :] == -23131).all())


@pytest.mark.parametrize("c", [1, 2, 3, 4])
@pytest.mark.parametrize("hw", [(1080, 1920), (270, 481), (45, 77)])
def test_images_hwc_chw_both_ways_through_torch(c, hw):
    """uint8 images HWC -> CHW and back: vector boxes where H x W allows (16-byte vectors at
    1080 x 1920, 8-byte at 270 x 481 ... none at 45 x 77), the packed kernels elsewhere;
    equal to PyTorch's permute."""
    torch = pytest.importorskip("torch")
    h, w = hw
    hwc = torch.randint(0, 256, (3, h, w, c), dtype=torch.uint8, device="cuda")
    chw = at.permute(hwc, (0, 3, 1, 2))
    assert torch.equal(chw, hwc.permute(0, 3, 1, 2).contiguous())
    back = at.permute(chw, (0, 2, 3, 1))
    assert torch.equal(back, hwc)


@pytest.mark.parametrize("e", [1, 2])
@pytest.mark.parametrize("c", [2, 3, 4])
def test_scattered_boxes_into_poisoned_windows(rng, c, e):
    """The scatter (images HWC -> CHW, `plan.scatter_chunk`) on its own: an odd number of
    images of fresh random bits whose sizes leave boxes an edge cuts, at input and output
    offsets of 0, 4 and 8 bytes past 16 (loads and stores of 16, 8 and 4 bytes where the
    offsets allow them), equal to np.transpose, the poison before and after the output
    untouched. Offsets that leave only narrow vectors may take a gather box instead: those
    are skipped (the test above covers them)."""
    cupy = pytest.importorskip("cupy")
    from autotranspose.runtime.compiler import device_state
    from autotranspose.runtime.launch import make_vbox

    state, dtype = device_state(0), DTYPES[e]
    stream = cupy.cuda.get_current_stream()
    shape, axes = (3, 136, 248, c), (0, 3, 1, 2)
    host = random_array(rng, shape, dtype)
    want = np.transpose(host, axes)
    scattered, cut = 0, 0
    for lead_in, lead_out in ((0, 0), (4, 0), (8, 4), (0, 8)):
        big = cupy.zeros(host.nbytes + 64, np.uint8)
        x = big[16 + lead_in : 16 + lead_in + host.nbytes].view(dtype).reshape(shape)
        x[...] = cupy.asarray(host)
        raw = cupy.full(want.nbytes + 64, POISON, np.uint8)
        out = raw[16 + lead_out : 16 + lead_out + want.nbytes].view(dtype).reshape(want.shape)
        plan = plan_permute(shape, axes, e, in_ptr=x.data.ptr, out_ptr=out.data.ptr)
        p = vector_launch(Pass(PACKED, e, 1, 0, 0, 0, dims=plan.dims), x.data.ptr, out.data.ptr)
        assert p is not None, plan.describe()
        if not p.scatter:
            continue
        lc = make_vbox(state, e, p.dims, p.box, p.vectors, x.data.ptr, out.data.ptr, p.scatter)
        lc.run(x.data.ptr, out.data.ptr, stream.ptr, state.ctx)
        stream.synchronize()
        scattered += 1
        cut += any(d.extent % b for d, b in zip(p.dims, p.box, strict=True))
        assert same_bits(cupy.asnumpy(out), want), (lead_in, lead_out, p.describe())
        assert bool((raw[: 16 + lead_out] == POISON).all()), (lead_in, lead_out)
        assert bool((raw[16 + lead_out + want.nbytes :] == POISON).all()), (lead_in, lead_out)
    assert scattered >= 2 and cut >= 1, (scattered, cut)


@pytest.mark.parametrize("dtype", ["uint8", "float16"])
@pytest.mark.parametrize("c", [2, 3, 4])
def test_images_hwc_to_chw_scatter_through_torch(c, dtype):
    """permute() of PyTorch images HWC -> CHW: the plan's pass scatters; into a new tensor
    and into a window of a poisoned buffer, equal to PyTorch's own permute, twice (the
    first call's choice, then the kept steps)."""
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, dtype)
    x = torch.randint(0, 256, (3, 540, 960, c), device="cuda").to(tdt)
    axes = (0, 3, 1, 2)
    plan = plan_permute(tuple(x.shape), axes, x.element_size(), in_ptr=x.data_ptr())
    assert plan.passes[0].scatter, plan.describe()
    want = x.permute(axes).contiguous()
    view = torch.int16 if x.element_size() == 2 else torch.uint8
    for _ in range(2):
        assert torch.equal(at.permute(x, axes).view(view), want.view(view))
    raw = torch.full((want.numel() + 64,), 0x5A, dtype=tdt, device="cuda")
    out = raw[8 : 8 + want.numel()].view(want.shape)
    for _ in range(2):
        at.permute(x, axes, out=out)
        assert torch.equal(out.view(view), want.view(view))
    assert bool((raw[:8] == 0x5A).all()) and bool((raw[8 + want.numel() :] == 0x5A).all())

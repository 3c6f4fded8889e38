"""PyTorch integration on a GPU: the custom ops under torch.compile (fullgraph, CUDA graphs),
torch.export, autograd and opcheck, and the eager fast path that skips the dispatcher."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import autotranspose as at
from autotranspose import errors

pytestmark = pytest.mark.gpu

DTYPES = ["float32", "bfloat16", "float16", "int8", "float64"]


def torch_module():
    import torch

    return torch


def _random(torch, shape, dtype, rng):
    data = rng.standard_normal(shape) * 100
    t = torch.as_tensor(data, device="cuda")
    return t.to(getattr(torch, dtype))


def _permutes(rng, count=4):
    """(shape, axes) with sides tensors have: small odd ones among powers of two."""
    sides = [1, 3, 7, 14, 16, 64, 197]
    for _ in range(count):
        nd = int(rng.integers(2, 6))
        shape = tuple(int(rng.choice(sides)) for _ in range(nd))
        axes = tuple(int(a) for a in rng.permutation(nd))
        yield shape, axes


@pytest.mark.parametrize("dtype", DTYPES)
def test_fullgraph_compile_has_no_graph_break_and_matches_eager(torch, dtype, rng):
    torch._dynamo.reset()
    for shape, axes in _permutes(rng, 3):
        x = _random(torch, shape, dtype, rng)

        def f(x, axes=axes):
            y = at.permute(x * 2, axes)
            return at.transpose(y.reshape(y.shape[0], -1)) + 1

        compiled = torch.compile(f, fullgraph=True)
        want = (x * 2).permute(axes).reshape(shape[axes[0]], -1).t() + 1
        assert torch.equal(compiled(x), want)
        assert torch.equal(f(x), want)
        explained = torch._dynamo.explain(f)(x)
        assert explained.graph_break_count == 0, explained.break_reasons


def test_compiled_with_out_matches_eager(torch, rng):
    x = _random(torch, (7, 197, 16), "bfloat16", rng)

    def f(x, out):
        at.permute(x, (2, 0, 1), out)
        return out * 1

    out = torch.empty(16, 7, 197, dtype=x.dtype, device="cuda")
    got = torch.compile(f, fullgraph=True)(x, out)
    assert torch.equal(got, x.permute(2, 0, 1))
    assert torch.equal(out, x.permute(2, 0, 1))


def test_reduce_overhead_replays_the_cuda_graph_on_refilled_input(torch, rng):
    torch._dynamo.reset()
    static = _random(torch, (64, 3, 14, 14), "float16", rng)

    def f(x):
        return at.permute(x, (0, 2, 3, 1)) * 3

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        compiled = torch.compile(f, mode="reduce-overhead", fullgraph=True)
        for _ in range(5):  # warm-up runs, the recording, then replays
            static.copy_(_random(torch, static.shape, "float16", rng))
            got = compiled(static).clone()
            assert torch.equal(got, static.permute(0, 2, 3, 1) * 3)
    assert not [w for w in seen if "empty" in str(w.message).lower()], [
        str(w.message) for w in seen
    ]


def test_torch_export_captures_the_op(torch, rng):
    class M(torch.nn.Module):
        def forward(self, x):
            return at.permute(x, (1, 0, 2)) + 1

    x = _random(torch, (5, 197, 8), "float32", rng)
    ep = torch.export.export(M(), (x,))
    assert "autotranspose.permute" in str(ep.graph)
    y = _random(torch, (5, 197, 8), "float32", rng)
    assert torch.equal(ep.module()(y), y.permute(1, 0, 2) + 1)


def test_gradients_through_a_small_model_match_pytorchs_permute(torch, rng):
    torch.manual_seed(int(rng.integers(1 << 31)))
    lin1, lin2 = torch.nn.Linear(16, 12).cuda(), torch.nn.Linear(7, 5).cuda()
    x = torch.randn(3, 7, 16, device="cuda", requires_grad=True)

    def model(permute):
        h = permute(lin1(x), (0, 2, 1))  # (3, 12, 7)
        return lin2(h).square().mean()

    ours = model(at.permute)
    grads = torch.autograd.grad(ours, [x, *lin1.parameters(), *lin2.parameters()])
    theirs = model(lambda t, a: t.permute(a).contiguous())
    want = torch.autograd.grad(theirs, [x, *lin1.parameters(), *lin2.parameters()])
    assert ours.grad_fn is not None
    for g, w in zip(grads, want, strict=True):
        torch.testing.assert_close(g, w)


def test_gradcheck_in_float64(torch, rng):
    x = torch.randn(3, 5, 7, 2, device="cuda", dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: at.permute(t, (3, 1, 0, 2)), (x,))
    m = torch.randn(6, 9, device="cuda", dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(at.transpose, (m,))
    c = torch.randn(4, 6, device="cuda", dtype=torch.complex128, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: at.transpose(t, conjugate=True), (c,))


def test_backward_of_a_sum_reads_a_broadcast_gradient(torch):
    x = torch.randn(4, 6, 5, device="cuda", requires_grad=True)
    at.permute(x, (2, 0, 1)).sum().backward()  # the gradient arrives with stride 0
    assert torch.equal(x.grad, torch.ones_like(x))
    m = torch.randn(6, 9, device="cuda", requires_grad=True)
    at.transpose(m).sum().backward()  # read in place by the gather, no copy first
    assert torch.equal(m.grad, torch.ones_like(m))


def test_opcheck_passes(torch, rng):
    ops = torch.ops.autotranspose
    x = _random(torch, (3, 14, 5), "float32", rng)
    torch.library.opcheck(ops.permute.default, (x, [2, 0, 1]))
    torch.library.opcheck(
        ops.permute_out.default, (x, [2, 0, 1], torch.empty(5, 3, 14, device="cuda"))
    )
    torch.library.opcheck(ops.transpose.default, (x, False))
    c = torch.randn(2, 7, 3, device="cuda", dtype=torch.complex64)
    torch.library.opcheck(ops.transpose.default, (c, True))
    torch.library.opcheck(
        ops.transpose_out.default, (c, torch.empty(2, 3, 7, device="cuda", dtype=c.dtype), True)
    )
    g = torch.randn(3, 14, 5, device="cuda", dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(ops.permute.default, (g, [1, 2, 0]))


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda x: at.permute(x, (0, 0, 1)), errors.AxesError),
        (lambda x: at.permute(x, (0, 1)), errors.AxesError),
        (lambda x: at.transpose(x.reshape(-1)), errors.ShapeError),
        (lambda x: at.transpose(x.sum(-1), conjugate=True), errors.UnsupportedDtypeError),
        (
            lambda x: at.transpose(x.to(torch_module().complex32), conjugate=True),
            errors.UnsupportedDtypeError,
        ),
    ],
)
def test_errors_are_raised_at_trace_time_with_the_eager_message(torch, call, error):
    torch._dynamo.reset()
    x = torch.randn(4, 6, 5, device="cuda")
    with pytest.raises(error) as eager:
        call(x)
    with pytest.raises(Exception, match=re.escape(str(eager.value))):
        torch.compile(call, fullgraph=True)(x)


def test_out_with_grad_is_refused_and_eager_no_grad_skips_the_dispatcher(torch):
    x = torch.randn(4, 6, device="cuda", requires_grad=True)
    with pytest.raises(errors.OutputError, match="does not support automatic differentiation"):
        at.transpose(x, torch.empty(6, 4, device="cuda"))
    with torch.no_grad():
        y = at.transpose(x)
    assert y.grad_fn is None and torch.equal(y, x.t())
    z = at.transpose(x)
    assert z.grad_fn is not None and "autotranspose" in type(z.grad_fn).__name__.lower() + str(
        z.grad_fn
    )


def test_lazily_conjugated_and_negated_views_give_their_values(torch, rng):
    c = torch.randn(5, 9, dtype=torch.complex64, device="cuda")
    assert torch.equal(at.transpose(c.conj()), c.conj().t().resolve_conj())
    assert torch.equal(at.permute(c.conj(), (1, 0)), c.conj().t().resolve_conj())
    neg = c.conj().imag  # a float view with the negative bit
    assert neg.is_neg()
    for _ in range(2):  # the second call is the fast path's
        assert torch.equal(at.permute(neg, (1, 0)), neg.t().resolve_neg())
        plain = c.imag.contiguous()
        assert torch.equal(at.permute(plain, (1, 0)), plain.t())
        assert torch.equal(at.permute(c.imag, (1, 0)), c.imag.t())  # stride 2: the gather


def test_eager_permute_of_many_shapes_is_exact(torch, rng):
    for shape, axes in _permutes(rng, 12):
        dtype = str(rng.choice(DTYPES))
        x = _random(torch, shape, dtype, rng)
        out = torch.empty([shape[a] for a in axes], dtype=x.dtype, device="cuda")
        for _ in range(3):  # the first call, then the fast path
            assert torch.equal(at.permute(x, axes), x.permute(axes))
            assert at.permute(x, list(axes), out) is out
            assert torch.equal(out, x.permute(axes))
        np.testing.assert_array_equal(
            at.permute(x, axes).float().cpu().numpy(), x.permute(axes).float().cpu().numpy()
        )

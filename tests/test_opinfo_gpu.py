"""PyTorch's own OpInfo samples of its axis-permuting views (permute, transpose, movedim, t, T,
mT, H, mH) through autotranspose on a GPU: every dtype the ops support plus complex32 and the
float8/float4 formats, each sample as given, as a strided copy (every axis at a step, so no
axis of stride 1: the gather) and in reversed memory order (a stride-1 axis elsewhere: the
tile kernels), compared with the op's result bit for bit (through same-size integer views,
so NaN payloads and negative zeros count). Nothing may be refused but what docs/api.md
refuses (a conjugate transpose of complex32); JAX arrays likewise against jnp.transpose."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import autotranspose as at
from autotranspose import errors

pytestmark = pytest.mark.gpu

OPS = ("permute", "transpose", "movedim", "t", "T", "mT", "H", "mH")
CONJUGATING = ("H", "mH")
# dtypes no OpInfo lists (samples of float32's shapes, filled with random bytes)
EXTRA = (
    "complex32",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn_x2",
    "uint16",
    "uint32",
    "uint64",
)


@pytest.fixture(scope="module")
def op_db(torch):
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except ImportError as exc:  # expecttest, hypothesis... absent
        pytest.skip(f"PyTorch's testing package is not importable here: {exc}")
    return op_db


@pytest.fixture
def served():
    """The kernels lookup serves, not a first-call race per shape: hundreds of tiny calls,
    each checked bit for bit (which kernel runs a class is test_firstcall_gpu's business)."""
    from autotranspose.dispatch import firstcall, picker as dispatch

    firstcall.set_enabled(False)
    dispatch.clear()
    yield
    firstcall.set_enabled(None)
    dispatch.clear()


def _raw_dtype(torch, size: int) -> Any:
    """A dtype of `size` bytes whose copies every PyTorch build has (bits preserved)."""
    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(
        size, torch.complex128
    )


def _raw(torch, t) -> Any:
    return t.view(_raw_dtype(torch, t.element_size()))


def _bytes(torch, t) -> Any:
    """Every byte of `t`'s elements in logical order (a conjugated view resolved first)."""
    if t.is_conj():
        t = t.resolve_conj()
    return _raw(torch, t).contiguous().reshape(-1).view(torch.uint8)


def _random(torch, shape: tuple[int, ...], dtype: Any) -> Any:
    e = torch.empty((), dtype=dtype).element_size()
    b = torch.randint(0, 256, (*shape, e), dtype=torch.uint8, device="cuda")
    return b.view(dtype).reshape(shape)


def _layouts(torch, x) -> Iterator[tuple[str, Any]]:
    """x as given, every axis at a step of 2 (no stride 1), and in reversed memory order."""
    yield "given", x
    if x.dim() == 0 or x.numel() < 2:
        return
    big = _random(torch, tuple(2 * n for n in x.shape), x.dtype)
    gappy = big[(slice(None, None, 2),) * x.dim()]
    _raw(torch, gappy).copy_(_raw(torch, x))
    yield "strided", gappy
    rev = tuple(reversed(range(x.dim())))
    flipped = _raw(torch, x).permute(rev).contiguous().permute(rev).view(x.dtype)
    yield "reversed", flipped


def _axes(torch, op, sample) -> tuple[int, ...]:
    """The permutation `op` applies with the sample's arguments: found on a tensor of the
    same shape whose elements are their own indices."""
    shape = tuple(sample.input.shape)
    marks = torch.arange(math.prod(shape), dtype=torch.int64).reshape(shape)
    y = op(marks, *sample.args, **sample.kwargs)
    y = y.resolve_conj() if y.is_conj() else y
    free = list(range(marks.dim()))
    axes = []
    for k in range(y.dim()):
        a = next(
            (a for a in free if marks.shape[a] == y.shape[k] and marks.stride(a) == y.stride(k)),
            None,
        )
        if a is None:
            break
        axes.append(a)
        free.remove(a)
    if len(axes) == y.dim() and torch.equal(marks.permute(axes), y):
        return tuple(axes)
    for cand in itertools.permutations(range(marks.dim())):  # not a view: try them all
        if torch.equal(marks.permute(cand), y):
            return cand
    raise AssertionError(f"{op.name} with {sample.args} {sample.kwargs} is no permutation")


def _ours(torch, x, axes: tuple[int, ...], conjugate: bool) -> Any:
    if not conjugate:
        return at.permute(x, axes)
    # a conjugate transpose: transpose(conjugate=True) of the last two axes (of a 2-D or
    # batched 3-D view; a vector as one row)
    if x.dim() < 2:
        return at.transpose(x.reshape(1, x.numel()), conjugate=True).reshape(x.shape)
    assert axes == (*range(x.dim() - 2), x.dim() - 1, x.dim() - 2), axes
    m, n = x.shape[-2:]
    y = at.transpose(x.reshape(math.prod(x.shape[:-2]), m, n), conjugate=True)
    return y.reshape(*x.shape[:-2], n, m)


def _samples(torch, op, dtype) -> Iterator[Any]:
    """The op's samples for `dtype`, or for a dtype no OpInfo lists float32's samples with
    fresh random bytes of `dtype`."""
    supported = op.supported_dtypes("cuda")
    if dtype in supported:
        yield from op.sample_inputs("cuda", dtype)
        return
    for s in op.sample_inputs("cuda", torch.float32):
        yield s.transform(lambda t: _random(torch, tuple(t.shape), dtype))


def test_opinfo_samples_match_pytorch_bit_for_bit(torch, op_db, served):
    ops = [op for op in op_db if op.name in OPS]
    assert {op.name for op in ops} >= {"permute", "transpose", "movedim", "t"}, [
        o.name for o in ops
    ]
    refused, wrong, crashed, allowed = [], [], [], []
    counted = 0
    for op in ops:
        dtypes = set(op.supported_dtypes("cuda"))
        dtypes |= {getattr(torch, n) for n in EXTRA if hasattr(torch, n)}
        for dtype in sorted(dtypes, key=str):
            conj = op.name in CONJUGATING and dtype.is_complex
            for i, sample in enumerate(_samples(torch, op, dtype)):
                axes = _axes(torch, op, sample)
                if conj and dtype == torch.complex32:
                    with pytest.raises(errors.UnsupportedDtypeError, match="complex32"):
                        _ours(torch, sample.input, axes, True)
                    allowed.append(f"{op.name} {dtype} #{i}")
                    continue
                want = _bytes(torch, op(sample.input, *sample.args, **sample.kwargs))
                for layout, x in _layouts(torch, sample.input):
                    what = f"{op.name} {dtype} #{i} {layout} {tuple(x.shape)} {x.stride()}"
                    counted += 1
                    try:
                        got = _ours(torch, x, axes, conj)
                    except errors.AutotransposeError as exc:
                        refused.append(f"{what}: {type(exc).__name__}: {exc}")
                        continue
                    except Exception as exc:  # a crash is reported with the others, not raised
                        crashed.append(f"{what}: {type(exc).__name__}: {exc}")
                        continue
                    if got.dtype != dtype or not torch.equal(_bytes(torch, got), want):
                        wrong.append(what)
    torch.cuda.synchronize()
    report = "\n".join(
        [f"{counted} calls"]
        + [f"refused: {r}" for r in refused]
        + [f"crashed: {c}" for c in crashed]
        + [f"wrong: {w}" for w in wrong]
    )
    print(report, f"\nexpected refusals (complex32 conjugate): {len(allowed)}")
    assert not refused and not crashed and not wrong, report
    assert counted > 300, report


# --- JAX ------------------------------------------------------------------------------------------
JAX_CASES = [
    ((3, 7), (1, 0)),
    ((5, 3, 197), (2, 0, 1)),
    ((2, 3, 5, 7), (3, 1, 0, 2)),
    ((64, 33), (1, 0)),
    ((1, 9, 1, 4), (3, 1, 2, 0)),
]
JAX_DTYPES = ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "int8", "float32"]


@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    if not any(d.platform in ("gpu", "cuda") for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    return jax


@pytest.mark.parametrize("dtype", JAX_DTYPES)
def test_jax_arrays_match_jnp_transpose(jax, rng, dtype):
    jnp = jax.numpy
    if not hasattr(jnp, dtype):
        pytest.skip(f"this jax has no {dtype}")
    dt = np.dtype(getattr(jnp, dtype))
    for shape, axes in JAX_CASES:
        host = rng.integers(0, 256, int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
        x = jnp.asarray(host.view(dt).reshape(shape))
        want = np.asarray(jnp.transpose(x, axes))
        results = [jax.jit(lambda a, ax=axes: at.permute(a, ax))(x)]  # the FFI primitive
        try:
            results.append(at.permute(x, axes))  # eager: DLPack in and out
        except errors.UnsupportedDtypeError as exc:  # a jaxlib without DLPack 1.1's float8
            assert "DLPack" in str(exc) and dtype.startswith("float8"), exc
        for got in results:
            got = np.asarray(got)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.view(np.uint8).tobytes() == want.view(np.uint8).tobytes(), (shape, axes)


def test_jax_packed_int4_is_refused_with_what_to_do(jax):
    jnp = jax.numpy
    x = jnp.zeros((4, 6), jnp.int4)
    for call in (lambda: at.permute(x, (1, 0)), lambda: jax.jit(at.transpose)(x)):
        with pytest.raises(errors.UnsupportedDtypeError, match=r"packed.*astype"):
            call()

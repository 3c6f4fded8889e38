"""`autotranspose bench`'s PyTorch peer on a real GPU for the dtypes it failed on: bool (the
check fed it random bytes, which are not bools) and bfloat16 (no NumPy typestr to hand
torch.as_tensor)."""

from __future__ import annotations

import numpy as np
import pytest

from autotranspose.bench.peers import _torch_wrapper
from autotranspose.bench.runners import bench_case, bench_permute_case

pytestmark = pytest.mark.gpu

DTYPES = ["bool", "bfloat16"]


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")
    return torch


def _random_tensor(torch, rng, shape: tuple[int, ...], dtype: str):
    """Fresh random values of `dtype` on the GPU (bools 0 or 1, bfloat16 any finite value)."""
    if dtype == "bool":
        return torch.as_tensor(rng.integers(0, 2, size=shape).astype(np.bool_), device="cuda")
    return torch.as_tensor(rng.standard_normal(shape).astype(np.float32), device="cuda").to(
        torch.bfloat16
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_wrapper_sees_the_very_tensor(rng, dtype):
    torch = _torch()
    shape = tuple(int(v) for v in rng.integers(1, 300, 3))
    x = _random_tensor(torch, rng, shape, dtype)
    wrap, why = _torch_wrapper(torch, dtype)
    assert wrap is not None, why
    y = wrap(x.data_ptr(), shape)
    assert y.dtype == x.dtype and tuple(y.shape) == shape and y.data_ptr() == x.data_ptr()
    assert torch.equal(y, x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 517, 301), (3, 129, 257)])
def test_the_torch_peer_is_timed_on_bool_and_bfloat16(dtype, shape):
    """Checked bit for bit on fresh random input (bools 0 or 1), then timed."""
    _torch()
    rows = {r.peer: r for r in bench_case(shape, dtype, peers=("copy", "torch"), repeats=3)}
    torch_row = rows["torch"]
    assert torch_row.gbps is not None and torch_row.gbps > 0, torch_row.note
    assert torch_row.note == "out.copy_(a.transpose(-1, -2))"


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_torch_permute_peer_is_timed_on_bool_and_bfloat16(rng, dtype):
    _torch()
    shape = tuple(int(v) for v in rng.integers(2, 40, 4))
    axes = tuple(int(a) for a in rng.permutation(4))
    rows = bench_permute_case(shape, axes, dtype, peers=("copy", "torch"), repeats=3)
    torch_row = {r.peer: r for r in rows}["torch"]
    assert torch_row.gbps is not None and torch_row.gbps > 0, torch_row.note


@pytest.mark.parametrize("warm", [False, True])
def test_cases_are_checked_then_timed_cold_or_warm(rng, warm):
    """--warm times the same checked peers on the same buffers every call: every row a time."""
    shape = (1, int(rng.integers(100, 900)), int(rng.integers(100, 900)))
    rows = bench_case(shape, "int8", peers=("copy", "autotranspose", "seed"), repeats=3, warm=warm)
    assert [r.peer for r in rows] == ["copy", "autotranspose", "seed"]
    assert all(r.gbps is not None and r.gbps > 0 and r.of_copy > 0 for r in rows), rows
    axes = tuple(int(a) for a in rng.permutation(3))
    prow = bench_permute_case((7, 33, 129), axes, "bfloat16", peers=("copy", "autotranspose"),
                              repeats=3, warm=warm)  # fmt: skip
    assert all(r.gbps is not None and r.gbps > 0 for r in prow), prow

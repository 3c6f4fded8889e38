"""The fast path of transpose(): a call signature validated once goes straight to its launch,
on the caller's current stream; anything that changes what was validated (pointers
overlapping, shapes, alignment, new tuning results, another device) goes back through full
validation. No GPU needed: the launch is recorded."""

from __future__ import annotations

import types

import numpy as np
import pytest

from autotranspose import errors
from autotranspose.calls import transpose as api
from autotranspose.dispatch import fastpath, lookup
from autotranspose.runtime import streams


class _Mem:
    def __init__(self, ptr: int, device: int = 0) -> None:
        self.ptr, self.device_id = ptr, device


class FakeCupyArray:
    """Shaped like a CuPy array as far as the fast path reads it."""

    def __init__(self, ptr: int, shape: tuple[int, int], dtype: str = "float32") -> None:
        self.data, self.shape, self.dtype = _Mem(ptr), shape, np.dtype(dtype)
        self.strides = (shape[1] * self.dtype.itemsize, self.dtype.itemsize)


class _RecordingLaunch:
    """Stands in for the prepared launch and the driver call the fast path makes."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int, int]] = []
        self.state = types.SimpleNamespace(ordinal=0)

    def __call__(self, prep, src: int, dst: int, stream: int, *restore) -> None:
        self.calls.append((src, dst, stream, prep.ctx))


CTX = 0x7F00_0000
STREAM = 0x5EED


@pytest.fixture
def registered(monkeypatch):
    rec = _RecordingLaunch()
    monkeypatch.setitem(fastpath.BY_TYPE, FakeCupyArray, fastpath.fast_cupy)
    monkeypatch.setattr(fastpath, "_fast", {})
    monkeypatch.setattr(fastpath, "_launch", rec)
    monkeypatch.setattr(streams, "cupy_current", lambda device: STREAM + device)
    x, out = FakeCupyArray(1 << 20, (64, 32)), FakeCupyArray(1 << 24, (32, 64))
    key = fastpath.cupy_key(x, out, x.data.ptr, out.data.ptr)
    fastpath._fast[key] = fastpath.Hit(0, types.SimpleNamespace(ctx=CTX), 8192, 8192, (32, 64))
    return rec, x, out


def test_a_validated_signature_launches_directly_on_the_current_stream(registered, rng):
    rec, x, out = registered
    for _ in range(3):
        ptr_x, ptr_o = (int(v) * 256 for v in rng.integers(1 << 12, 1 << 16, 2) * [1, 1 << 8])
        x.data.ptr, out.data.ptr = ptr_x, ptr_o
        assert api.transpose(x, out) is out
        assert rec.calls[-1] == (ptr_x, ptr_o, STREAM, CTX)


def test_overlap_goes_back_to_full_validation(registered):
    rec, x, out = registered
    out.data.ptr = x.data.ptr + 4096  # inside x's 8 KiB
    with pytest.raises(TypeError):  # the full path does not know this fake type
        api.transpose(x, out)
    assert rec.calls == []


@pytest.mark.parametrize(
    "change",
    [
        lambda x, out: setattr(out, "dtype", np.dtype("int32")),
        lambda x, out: setattr(x, "shape", (32, 64)),
        lambda x, out: setattr(x.data, "ptr", x.data.ptr + 2),  # another alignment class
        lambda x, out: setattr(lookup, "generation", lookup.generation + 1),
        lambda x, out: setattr(x.data, "device_id", 1),  # same pointer value, other GPU
        lambda x, out: setattr(out.data, "device_id", 1),
    ],
)
def test_anything_validated_that_changes_misses(registered, monkeypatch, change):
    rec, x, out = registered
    monkeypatch.setattr(lookup, "generation", lookup.generation)
    change(x, out)
    with pytest.raises(TypeError):
        api.transpose(x, out)
    assert rec.calls == []


def test_streams_configs_and_conjugates_take_the_full_path(registered):
    rec, x, out = registered
    from autotranspose.kernels.config import KernelConfig

    for kwargs in ({"stream": object()}, {"config": KernelConfig(4)}, {"conjugate": True}):
        with pytest.raises(TypeError):  # the full path rejects the fake stream or array
            api.transpose(x, out, **kwargs)
    assert rec.calls == []


def test_an_out_of_another_kind_takes_the_full_path(registered):
    rec, x, _ = registered
    other = types.SimpleNamespace(data=_Mem(1 << 24), shape=(32, 64), dtype=np.dtype("float32"))
    other.strides = (256, 4)
    with pytest.raises(TypeError):
        api.transpose(x, other)
    assert rec.calls == []


class FakeGPUArray:
    """Shaped like a pycuda GPUArray as the fast and full paths read it: an empty one has no
    memory (gpudata None), and its .ptr raises, as pycuda's does."""

    __module__ = "pycuda.gpuarray"

    def __init__(self, shape: tuple[int, ...], dtype: str = "float32") -> None:
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.strides = (shape[1] * self.dtype.itemsize, self.dtype.itemsize)
        self.gpudata = None

    @property
    def ptr(self) -> int:
        return self.gpudata.__int__()


@pytest.mark.parametrize("shape", [(0, 5), (7, 0), (0, 0)])
def test_an_empty_gpuarray_takes_the_full_path(monkeypatch, shape):
    """An empty GPUArray's .ptr raises: once GPUArrays have a fast path, the empty one must
    still reach the full path (which moves nothing and returns out untouched)."""
    rec = _RecordingLaunch()
    monkeypatch.setitem(fastpath.BY_TYPE, FakeGPUArray, fastpath.fast_gpuarray)
    monkeypatch.setattr(fastpath, "_launch", rec)
    x, out = FakeGPUArray(shape), FakeGPUArray(shape[::-1])
    assert api.transpose(x, out) is out
    with pytest.raises(errors.OutputError, match="shape"):
        api.transpose(x, FakeGPUArray((shape[1] + 1, 0)))
    assert rec.calls == []


def test_the_launch_argument_offsets_match_the_kernel_signature():
    """The hot path writes arguments at fixed offsets (kernelParams); they must be where
    compiler.ARG_FORMAT puts them, with natural alignment, as nvcc lays out parameters."""
    import struct

    from autotranspose.runtime import driver as _driver
    from autotranspose.runtime.compiler import ARG_FORMAT

    offsets, at = [], 0
    for code in ARG_FORMAT:
        size = struct.calcsize(code)
        at = -(-at // size) * size
        offsets.append(at)
        at += size
    assert tuple(offsets) == _driver.TRANSPOSE_OFFSETS
    assert struct.calcsize(ARG_FORMAT) == at == _driver.TRANSPOSE_BYTES


def test_permute_takes_the_fast_path_only_for_its_own_axes(registered, monkeypatch):
    """permute()'s signatures share transpose()'s table, told apart by the axes as given."""
    from autotranspose.calls import permute as permuter

    rec, x, out = registered
    x3 = FakeCupyArray(1 << 20, (64, 32))
    key = fastpath.cupy_key(x3, out, x3.data.ptr, out.data.ptr, (1, 0))
    fastpath._fast[key] = fastpath.Hit(0, types.SimpleNamespace(ctx=CTX + 1), 8192, 8192, (32, 64))
    assert permuter.permute(x3, (1, 0), out) is out
    assert permuter.permute(x3, [1, 0], out) is out  # a list of the same axes: the same call
    assert rec.calls == [(x3.data.ptr, out.data.ptr, STREAM, CTX + 1)] * 2
    for other in ((-1, 0), (0, 1)):  # another spelling or another permute: full validation
        with pytest.raises(TypeError):
            permuter.permute(x3, other, out)
    assert api.transpose(x, out) is out  # transpose's own entry is untouched
    assert rec.calls[-1] == (x.data.ptr, out.data.ptr, STREAM, CTX)

"""The fast path of transpose(): a call signature validated once goes straight to its launch;
anything that changes what was validated (pointers overlapping, new tuning results, another
thread's context) goes back through full validation. No GPU needed: the launch is recorded."""

from __future__ import annotations

import types

import numpy as np
import pytest

from autotranspose import api, compiler, lookup
from autotranspose.config import KernelConfig


class _Mem:
    def __init__(self, ptr: int) -> None:
        self.ptr, self.device_id = ptr, 0


class FakeDeviceArray:
    """Shaped like a CuPy array as far as the fast path reads it."""

    def __init__(self, ptr: int, shape: tuple[int, int], dtype: str = "float32") -> None:
        self.data, self.shape, self.dtype = _Mem(ptr), shape, np.dtype(dtype)
        self.strides = (shape[1] * self.dtype.itemsize, self.dtype.itemsize)


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def _launch_kernel(self, grid, block, params, shared, stream) -> None:
        self.calls.append(np.frombuffer(params[:16], np.uint64).tolist())


@pytest.fixture
def registered(monkeypatch):
    rec = _Recorder()
    state = types.SimpleNamespace(ordinal=0)
    launch = api.Launch(KernelConfig(4), rec, (4, 1, 1), (256, 1, 1), (64, 64, 16, 16, 0, 0, 2, 2, 4), state)
    monkeypatch.setitem(api._PARTS, FakeDeviceArray, api._parts_cupy)
    monkeypatch.setattr(api, "_fast", {})
    monkeypatch.setattr(compiler._tls, "ordinal", 0, raising=False)
    x, out = FakeDeviceArray(1 << 20, (64, 32)), FakeDeviceArray(1 << 24, (32, 64))
    px, po = api._parts_cupy(x), api._parts_cupy(out)
    api._fast[(px[1:], po[1:], (px[0] | po[0]) & 15, lookup.generation)] = (
        rec._launch_kernel, launch.grid, launch.block, launch.tail, 0, 8192, 8192
    )
    return rec, x, out


def test_a_validated_signature_launches_directly(registered, rng):
    rec, x, out = registered
    for _ in range(3):
        ptr_x, ptr_o = (int(v) * 256 for v in rng.integers(1 << 12, 1 << 16, 2) * [1, 1 << 8])
        x.data.ptr, out.data.ptr = ptr_x, ptr_o
        assert api.transpose(x, out) is out
        assert rec.calls[-1] == [ptr_x, ptr_o]


def test_overlap_goes_back_to_full_validation(registered):
    rec, x, out = registered
    out.data.ptr = x.data.ptr + 4096  # inside x's 8 KiB
    with pytest.raises(TypeError):  # the slow path does not know this fake type
        api.transpose(x, out)
    assert rec.calls == []


@pytest.mark.parametrize(
    "change",
    [
        lambda x, out: setattr(out, "dtype", np.dtype("int32")),
        lambda x, out: setattr(x, "shape", (32, 64)),
        lambda x, out: setattr(x.data, "ptr", x.data.ptr + 2),  # another alignment class
        lambda x, out: setattr(lookup, "generation", lookup.generation + 1),
        lambda x, out: setattr(compiler._tls, "ordinal", 1),
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
    for kwargs in ({"stream": 7}, {"config": KernelConfig(4)}, {"conjugate": True}):
        with pytest.raises(TypeError):
            api.transpose(x, out, **kwargs)
    assert rec.calls == []

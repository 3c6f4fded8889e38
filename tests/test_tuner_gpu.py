"""The real tuning path on a GPU: worker process, study, database, and transpose() using it."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import autotranspose as at
from autotranspose.kernels.config import KernelConfig

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("pycuda_primary")]


@pytest.fixture
def store(tmp_path):
    from autotranspose.store import Store

    s = Store.open(f"sqlite:///{tmp_path / 'tuning.db'}")
    yield s
    s.close()


def test_worker_measures_and_survives_a_killed_process():
    from autotranspose.tuner.worker import GpuObjective

    configs = [
        KernelConfig(4, 32, 32),
        KernelConfig(4, 64, 64, 2, 4),
        KernelConfig(4, 64, 128, 2, 4, 0, "swizzle"),
    ]
    with GpuObjective("float32", (1, 1024, 2048)) as obj:
        assert obj.device.name and obj.device.multiprocessors > 0
        first = obj(configs)
        # no timing bound (a unit test's GPU may be shared): each result is whole and its
        # ratio is its own GB/s over the copy's
        assert all(m.ok and m.gbps > 0 and m.copy_gbps > 0 for m in first), first
        assert all(m.ratio == pytest.approx(m.gbps / m.copy_gbps) for m in first), first
        os.kill(obj._proc.pid, signal.SIGKILL)  # a worker gone between two calls
        obj._proc.join(10)  # dead before the next call: the pipe to it is broken
        second = obj(configs)
        # no config killed it, so none is blamed: a fresh worker measures them all
        assert all(m.ok for m in second), second
        assert obj.restarts == 1


@pytest.mark.parametrize(
    ("dtype", "shape"), [("float32", (1, 2048, 4096)), ("int8", (1, 4096, 4096))]
)
def test_short_real_tune_lands_in_the_database_and_transpose_uses_it(
    store, dtype, shape, monkeypatch
):
    from autotranspose.dispatch import lookup
    from autotranspose.tuner.study import tune
    from autotranspose.tuner.worker import GpuObjective

    with GpuObjective(dtype, shape) as obj:
        result = tune(
            dtype, shape, objective=obj, store=store, device=obj.device, trials=12, batch=6, seed=1
        )
    assert result.measurement.ok and result.measurement.ratio > 0.5
    entries = store.entries(obj.device.name)
    assert [e.config for e in entries if e.elem_bytes == np.dtype(dtype).itemsize] == [
        result.config
    ]

    # transpose() now serves the tuned kernel from the default database
    monkeypatch.setenv("AUTOTRANSPOSE_DB", store.url)
    lookup.clear_cache()
    choice = lookup.choose(obj.device, np.dtype(dtype).itemsize, result.shape_class)
    assert choice.source == "tuned" and choice.config == result.config
    import pycuda.gpuarray as gpuarray

    from autotranspose.dispatch import picker as dispatch

    host = np.random.default_rng().integers(-100, 100, size=shape[1:]).astype(dtype)
    x = gpuarray.to_gpu(host)
    y = at.transpose(x)
    assert np.array_equal(y.get(), host.T)
    used = [launch.config for key, launch in dispatch.caches.launches.items() if key[4:7] == shape]
    assert used == [result.config]


def test_tune_gpu_from_python_resumes_its_study(tmp_path, monkeypatch):
    """The Python entry point tunes into the database it is given; a second call with a
    larger trial budget resumes the same study instead of starting over."""
    from autotranspose.dispatch import lookup

    url = f"sqlite:///{tmp_path / 'py.db'}"
    first = at.tune_gpu("float16", (1536, 2560), db=url, trials=6, seed=3)
    assert first.trials == 6 and first.measurement.ok
    second = at.tune_gpu("float16", (1536, 2560), db=url, trials=10, seed=3)
    assert second.trials == 4 and second.study_name == first.study_name
    assert second.measurement.gbps >= first.measurement.gbps
    monkeypatch.setenv("AUTOTRANSPOSE_DB", url)
    lookup.clear_cache()
    x = np.random.default_rng().standard_normal((1536, 2560)).astype(np.float16)
    assert np.array_equal(at.transpose(x), x.T)


def test_the_strided_bench_checks_against_the_layouts_reference():
    """On a permute pass's strides the check passes the launch with those strides and catches
    one with the contiguous strides (wrong places, and writes into the layout's gaps)."""
    from autotranspose.runtime.compiler import activate
    from autotranspose.runtime.launch import contiguous_launch, make_launch
    from autotranspose.tuner.measure import Bench
    from autotranspose.tuner.study import permute_target

    state = activate(0)
    target = permute_target("float32", (256, 32, 512), (2, 1, 0))
    shape, layout = target.shape, target.layout
    assert layout is not None and shape is not None
    cfg = KernelConfig(4, 64, 64, 2, 4)
    bench = Bench(state, 4, shape, layout)
    try:
        assert bench.check(make_launch(state, cfg, *shape, *layout)) is None
        assert "wrong output" in bench.check(contiguous_launch(state, cfg, *shape))
    finally:
        bench.close()


def test_tune_gpu_of_a_strided_permute_is_what_permute_then_runs(tmp_path, monkeypatch):
    """A permute whose transpose pass is strided (a reversed 3-D array): the worker measures
    the pass on its own strides, the result lands in the pass's class, and permute() then
    runs the tuned kernel and matches NumPy."""
    from autotranspose.dispatch import lookup, picker as dispatch
    from autotranspose.tuner.study import permute_target
    from autotranspose.tuner.worker import GpuObjective

    shape, axes = (256, 32, 512), (2, 1, 0)
    target = permute_target("float32", shape, axes)
    assert target.layout is not None and target.shape == (32, 256, 512)
    with GpuObjective("float32", target.shape, layout=target.layout) as obj:
        got = obj([KernelConfig(4, 32, 32), KernelConfig(4, 64, 64, 2, 4)])
    assert all(m.ok and m.gbps > 0 for m in got), got

    url = f"sqlite:///{tmp_path / 'permute.db'}"
    result = at.tune_gpu("float32", shape, axes=axes, db=url, trials=6, seed=2)
    assert result is not None and result.measurement.ok and result.trials == 6
    assert (result.layout, result.shape_class) == (target.layout, target.shape_class)
    assert at.tune_gpu("float16", (8, 4096, 32, 128), axes=(0, 2, 1, 3), db=url) is None

    monkeypatch.setenv("AUTOTRANSPOSE_DB", url)
    dispatch.clear()
    choice = lookup.choose(obj.device, 4, target.shape_class)
    assert (choice.source, choice.config) == ("tuned", result.config)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    assert np.array_equal(at.permute(x, axes), np.transpose(x, axes))
    used = [s.launch.config for steps in dispatch.caches.steps.values() for s in steps if s.launch]
    assert used == [result.config]

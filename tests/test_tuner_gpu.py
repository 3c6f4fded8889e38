"""The real tuning path on a GPU: worker process, study, database, and transpose() using it."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import autotranspose as at
from autotranspose.config import KernelConfig

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("pycuda_primary")]


@pytest.fixture
def store(tmp_path):
    from autotranspose.store import Store

    s = Store.open(f"sqlite:///{tmp_path / 'tuning.db'}")
    yield s
    s.close()


def test_worker_measures_and_survives_a_killed_process():
    from autotranspose.worker import GpuObjective

    configs = [KernelConfig(4, 32, 32), KernelConfig(4, 64, 64, 2, 4), KernelConfig(4, 64, 128, 2, 4, 0, "swizzle")]
    with GpuObjective("float32", (1, 1024, 2048)) as obj:
        assert obj.device.name and obj.device.multiprocessors > 0
        first = obj(configs)
        assert all(m.ok and m.gbps > 0 and 0 < m.ratio < 1.5 for m in first), first
        os.kill(obj._proc.pid, signal.SIGKILL)  # as if a kernel had killed its context
        second = obj(configs)
        assert second[0].status == "fail" and "died" in second[0].error
        assert all(m.ok for m in second[1:]) and obj.restarts == 1


@pytest.mark.parametrize(("dtype", "shape"), [("float32", (1, 2048, 4096)), ("int8", (1, 4096, 4096))])
def test_short_real_tune_lands_in_the_database_and_transpose_uses_it(store, dtype, shape, monkeypatch):
    from autotranspose import lookup
    from autotranspose.tuner import tune
    from autotranspose.worker import GpuObjective

    with GpuObjective(dtype, shape) as obj:
        result = tune(dtype, shape, objective=obj, store=store, device=obj.device, trials=12, batch=6, seed=1)
    assert result.measurement.ok and result.measurement.ratio > 0.5
    entries = store.entries(obj.device.name)
    assert [e.config for e in entries if e.elem_bytes == np.dtype(dtype).itemsize] == [result.config]

    # transpose() now serves the tuned kernel from the default database
    monkeypatch.setenv("AUTOTRANSPOSE_DB", store.url)
    lookup.clear_cache()
    choice = lookup.choose(obj.device, np.dtype(dtype).itemsize, result.shape_class)
    assert choice.source == "tuned" and choice.config == result.config
    import pycuda.gpuarray as gpuarray

    from autotranspose import api

    host = np.random.default_rng().integers(-100, 100, size=shape[1:]).astype(dtype)
    x = gpuarray.to_gpu(host)
    y = at.transpose(x)
    assert np.array_equal(y.get(), host.T)
    used = [launch.config for key, launch in api._launches.items() if key[4:7] == shape]
    assert used == [result.config]


def test_tune_gpu_from_python_resumes_its_study(tmp_path, monkeypatch):
    """The Python entry point tunes into the database it is given; a second call with a
    larger trial budget resumes the same study instead of starting over."""
    from autotranspose import lookup

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

"""transpose() inside real programs: any thread, the caller's stream, CUDA graphs, JAX,
several GPUs, and a caller's own CUDA context left as it was."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import autotranspose as at
from autotranspose.dispatch import picker as dispatch
from autotranspose.errors import DeviceError
from autotranspose.runtime import driver as _driver, native as _native

pytestmark = pytest.mark.gpu


def _gpus() -> int:
    from autotranspose.runtime.compiler import driver

    return driver().Device.count()


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")
    return torch


def _ints(rng, shape: tuple[int, ...]) -> np.ndarray:
    """Integer-valued float32: sums are exact, so a result either is right or is not."""
    return rng.integers(-1000, 1000, size=shape).astype(np.float32)


def _in_new_thread(fn):
    """fn() run on a fresh thread (which starts with no CUDA context current); its result.
    An exception in the thread fails the test here."""
    box: list = []
    t = threading.Thread(target=lambda: box.append(fn()))
    t.start()
    t.join()
    assert box, "the thread raised (see its traceback above)"
    return box[0]


def _random_shape(rng, batch: bool = False) -> tuple[int, ...]:
    m, n = (int(v) for v in rng.integers(1, 700, 2))
    return (int(rng.integers(2, 5)), m, n) if batch else (m, n)


# --- any thread ---------------------------------------------------------------------------------
def test_eight_threads_at_once_on_one_gpu(rng):
    torch = _torch()
    cupy = pytest.importorskip("cupy")
    seeds = rng.integers(0, 2**32, 8)
    errors: list[str] = []
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        r = np.random.default_rng(int(seeds[i]))
        barrier.wait()
        for k in range(20):
            shape = _random_shape(r, batch=k % 3 == 0)
            host = r.standard_normal(shape).astype(np.float32)
            x = torch.as_tensor(host, device="cuda:0") if i % 2 else cupy.asarray(host)
            before = _driver.current()  # what the library made current in this thread
            y = at.transpose(x)
            if _driver.current() != before:
                errors.append(f"thread {i}: transpose() changed its current context")
            got = y.cpu().numpy() if i % 2 else cupy.asnumpy(y)
            if not np.array_equal(got, np.swapaxes(host, -1, -2)):
                errors.append(f"thread {i} call {k} {shape}: wrong result")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_pool_of_four_workers_runs_64_calls_each(rng):
    torch = _torch()
    host = rng.standard_normal((4, 64, 301, 517)).astype(np.float32)
    xs = torch.as_tensor(host, device="cuda")

    def work(w: int) -> int:
        wrong = 0
        for k in range(64):
            x = xs[w, k % 64]
            out = torch.empty(517, 301, device="cuda")
            y = at.transpose(x, out if k % 2 else None)
            torch.cuda.current_stream().synchronize()
            wrong += not torch.equal(y, x.t())
        return wrong

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(work, range(4))) == [0, 0, 0, 0]


@pytest.mark.parametrize("native", ["1", "0"], ids=["compiled-launcher", "ctypes-launch"])
@pytest.mark.parametrize("kind", ["torch", "cupy", "gpuarray", "numpy"])
def test_a_thread_that_calls_once_and_exits_then_the_interpreter_exits_cleanly(kind, native):
    script = textwrap.dedent(f"""
        import threading, numpy as np, autotranspose as at
        kind = {kind!r}
        host = np.random.default_rng().standard_normal((129, 67)).astype(np.float32)
        res = {{}}
        def work():
            if kind == "torch":
                import torch
                res["y"] = at.transpose(torch.as_tensor(host, device="cuda")).cpu().numpy()
            elif kind == "cupy":
                import cupy
                res["y"] = cupy.asnumpy(at.transpose(cupy.asarray(host)))
            elif kind == "gpuarray":
                import pycuda.gpuarray as ga
                from autotranspose.runtime import driver as _driver
                from autotranspose.runtime.compiler import device_state
                ctx = device_state(0).ctx
                with _driver.on_context(ctx):  # pycuda's GPUArray() asks the current context
                    x = ga.GPUArray(host.shape, host.dtype, gpudata=_driver.Allocation(host.nbytes, ctx))
                    x.set(host)
                y = at.transpose(x)  # from a thread with no context current
                with _driver.on_context(ctx):
                    res["y"] = y.get()
            else:
                res["y"] = at.transpose(host)
        t = threading.Thread(target=work)
        t.start(); t.join()
        assert np.array_equal(res["y"], host.T), "wrong result"
        print("ok")
    """)
    env = {**os.environ, _native.ENV_VAR: native}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("ok")
    assert "context stack" not in proc.stderr


def test_the_compiled_launcher_is_in_use_where_a_compiler_exists():
    if _native.compiler() is None:
        pytest.skip("no C compiler: the ctypes launch path is the one in use")
    assert _native.launcher() is not None


@pytest.mark.parametrize("native", [True, False], ids=["compiled-launcher", "ctypes-launch"])
def test_both_launch_paths_are_correct_and_restore_the_context(rng, monkeypatch, native):
    torch = _torch()
    cupy = pytest.importorskip("cupy")
    monkeypatch.setenv(_native.ENV_VAR, "1" if native else "0")
    _native.reset()
    dispatch.clear()
    try:
        for k in range(12):
            shape = _random_shape(rng, batch=k % 4 == 0)
            host = _ints(rng, shape)
            x = torch.as_tensor(host, device="cuda") if k % 2 else cupy.asarray(host)
            outshape = (*shape[:-2], shape[-1], shape[-2])
            if k % 3:
                out = None
            elif k % 2:
                out = torch.empty(outshape, device="cuda")
            else:
                out = cupy.empty(outshape, np.float32)
            before = _driver.current()
            y = at.transpose(x, out)
            assert _driver.current() == before
            got = y.cpu().numpy() if k % 2 else cupy.asnumpy(y)
            assert np.array_equal(got, np.swapaxes(host, -1, -2)), shape
        preps = [
            p for launch in dispatch.caches.launches.values() for p in launch.in_context.values()
        ]
        assert preps and all(bool(p.address) == native for p in preps)
    finally:
        _native.reset()
        dispatch.clear()


def test_the_callers_own_context_is_left_current(rng):
    """A thread with another context current (a pycuda-made one, say) gets it back."""
    from autotranspose.runtime.compiler import driver

    drv = driver()
    cupy = pytest.importorskip("cupy")
    x = cupy.asarray(rng.standard_normal((300, 200)).astype(np.float32))

    def in_thread() -> tuple[int | None, int | None, object]:
        own = drv.Device(0).make_context()  # a separate context, pushed on this thread
        try:
            before = _driver.current()
            y = at.transpose(x)
            cupy.cuda.runtime.deviceSynchronize()
            after = _driver.current()
            return before, after, y
        finally:
            own.pop()
            own.detach()

    before, after, y = _in_new_thread(in_thread)
    # checked here: CuPy's own kernels (the comparison) cannot run while a foreign context is
    # current (CUDA_ERROR_INVALID_HANDLE once CuPy has loaded them in the primary context)
    assert before is not None and after == before and bool((y == x.T).all())


def test_gpuarray_in_a_pycuda_context_of_its_own(rng):
    """GPUArrays made under pycuda.autoinit live in a context that is not the primary one:
    the kernel runs in the context that owns the memory."""
    from autotranspose.runtime.compiler import driver

    drv = driver()
    import pycuda.gpuarray as gpuarray

    def work() -> bool:
        own = drv.Device(0).make_context()
        try:
            host = rng.standard_normal((2, 333, 257)).astype(np.float32)
            x = gpuarray.to_gpu(host)
            ok = np.array_equal(at.transpose(x).get(), np.swapaxes(host, 1, 2))
            out = gpuarray.empty((2, 257, 333), np.float32)
            at.transpose(x, out)
            at.transpose(x, out)  # the fast path, in the same foreign context
            ok &= np.array_equal(out.get(), np.swapaxes(host, 1, 2))
            del x, out
            return ok
        finally:
            own.pop()
            own.detach()

    assert _in_new_thread(work) is True


# --- the caller's stream ------------------------------------------------------------------------
def test_torch_current_stream_orders_the_call_with_no_synchronize(rng):
    torch = _torch()
    for _ in range(5):
        x = torch.as_tensor(_ints(rng, (4096, 4096)), device="cuda")
        expected = (x + 20).t().cpu()
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            for _ in range(20):
                x.add_(1)  # queued on s, still running when transpose() is called
            y = at.transpose(x)
            z = y * 2  # queued after our kernel on s
            got_y, got_z = y.cpu(), z.cpu()
        assert torch.equal(got_y, expected)
        assert torch.equal(got_z, expected * 2)


def test_cupy_current_stream_orders_the_call(rng):
    cupy = pytest.importorskip("cupy")
    x = cupy.asarray(_ints(rng, (4096, 4096)))
    expected = cupy.asnumpy(x + 20).T
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        for _ in range(20):
            x += 1
        out = cupy.empty((4096, 4096), cupy.float32)
        at.transpose(x, out)
        z = out * 2
    s.synchronize()
    assert np.array_equal(cupy.asnumpy(out), expected)
    assert np.array_equal(cupy.asnumpy(z), expected * 2)


def test_torch_cuda_graph_captures_the_call(rng):
    torch = _torch()
    x = torch.empty(1000, 1500, device="cuda")
    out = torch.empty(1500, 1000, device="cuda")
    x.copy_(torch.as_tensor(rng.standard_normal((1000, 1500)).astype(np.float32)))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, as PyTorch's graph docs ask
        at.transpose(x, out)
        at.transpose(x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        at.transpose(x, out)
        y = at.transpose(x)  # allocated from the graph's pool
    for _ in range(3):
        x.copy_(torch.as_tensor(rng.standard_normal((1000, 1500)).astype(np.float32)))
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, x.t())
        assert torch.equal(y, x.t())


def test_torch_cuda_graph_captures_a_first_call(rng):
    """No warm-up: the kernel is compiled and loaded while PyTorch is capturing."""
    torch = _torch()
    shape = (int(rng.integers(100, 400)) * 2 + 1, 377)  # a signature no other test used
    x = torch.empty(shape, dtype=torch.float64, device="cuda")
    out = torch.empty(shape[::-1], dtype=torch.float64, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        at.transpose(x, out)
    x.copy_(torch.as_tensor(rng.standard_normal(shape)))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, x.t())


def test_cupy_stream_capture(rng):
    cupy = pytest.importorskip("cupy")
    x = cupy.asarray(rng.standard_normal((3, 333, 444)).astype(np.float32))
    out = cupy.empty((3, 444, 333), cupy.float32)
    at.transpose(x, out)  # warm-up
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        at.transpose(x, out)
        graph = s.end_capture()
    for _ in range(3):
        x[...] = cupy.asarray(rng.standard_normal((3, 333, 444)).astype(np.float32))
        cupy.cuda.Device().synchronize()
        graph.launch(s)
        s.synchronize()
        assert bool((out == x.swapaxes(1, 2)).all())


def test_cuda_array_interface_v3_stream_is_honoured(rng):
    torch = _torch()
    s = torch.cuda.Stream()
    x = torch.as_tensor(_ints(rng, (4096, 4096)), device="cuda")
    expected = (x + 20).t().cpu()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        for _ in range(20):
            x.add_(1)

    class Producer:  # a library that says: my data is ready on stream s
        __cuda_array_interface__ = {  # noqa: RUF012
            "shape": (4096, 4096),
            "typestr": "<f4",
            "data": (x.data_ptr(), False),
            "strides": None,
            "version": 3,
            "stream": s.cuda_stream,
        }

    y = at.transpose(Producer())
    s.synchronize()
    assert np.array_equal(y.get(), expected.numpy())


def test_a_stream_of_another_device_is_refused_and_nothing_runs(rng):
    if _gpus() < 2:
        pytest.skip("needs two GPUs")
    torch = _torch()
    x = torch.as_tensor(rng.standard_normal((64, 32)).astype(np.float32), device="cuda:0")
    out = torch.full((32, 64), 7.0, device="cuda:0")
    other = torch.cuda.Stream(device=1)
    for given in (other, other.cuda_stream):
        with pytest.raises(DeviceError, match=r"GPU 1.*GPU 0"):
            at.transpose(x, out, stream=given)
    assert bool((out == 7.0).all())


# --- JAX ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "complex64"])
def test_jax_in_jax_out(rng, dtype):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    if not any(d.platform in ("gpu", "cuda") for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    host = rng.standard_normal((3, 301, 517)).astype(np.float32)
    x = jnp.asarray(host).astype(dtype)
    y = at.transpose(x)
    assert isinstance(y, jax.Array) and y.dtype == x.dtype and y.shape == (3, 517, 301)
    assert np.array_equal(np.asarray(y), np.swapaxes(np.asarray(x), 1, 2))
    z = jax.jit(lambda a: a * 2)(y)  # JAX keeps using the result
    assert np.array_equal(np.asarray(z), np.swapaxes(np.asarray(x * 2), 1, 2))
    del y, z  # our buffer goes back through the DLPack deleter
    with pytest.raises(at.errors.OutputError, match="immutable"):
        at.transpose(x, jnp.empty((3, 517, 301), x.dtype))


def test_jax_after_pending_work(rng):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x = jnp.asarray(rng.standard_normal((4096, 4096)).astype(np.float32))
    for _ in range(10):
        x = jnp.sin(x) + 1  # async: still running when transpose() is called
    y = at.transpose(x)
    assert np.array_equal(np.asarray(y), np.asarray(x).T)


# --- several GPUs -------------------------------------------------------------------------------
def test_one_thread_per_gpu(rng):
    n = _gpus()
    if n < 2:
        pytest.skip("needs two GPUs")
    torch = _torch()
    seeds = rng.integers(0, 2**32, n)
    results: dict[int, bool] = {}

    def work(d: int) -> None:
        r = np.random.default_rng(int(seeds[d]))
        ok = True
        for k in range(30):
            host = r.standard_normal(_random_shape(r, batch=k % 2 == 0)).astype(np.float32)
            x = torch.as_tensor(host, device=f"cuda:{d}")
            y = at.transpose(x)
            ok &= y.device.index == d and np.array_equal(y.cpu().numpy(), np.swapaxes(host, -1, -2))
        results[d] = ok

    threads = [threading.Thread(target=work, args=(d,)) for d in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == dict.fromkeys(range(n), True)


def test_gpuarray_on_every_gpu_and_on_the_fast_path(rng):
    from autotranspose.runtime.compiler import driver

    drv = driver()
    import pycuda.gpuarray as gpuarray

    for d in range(_gpus()):
        ctx = drv.Device(d).retain_primary_context()
        ctx.push()
        try:
            host = rng.standard_normal((257, 129)).astype(np.float32)
            x = gpuarray.to_gpu(host)
            out = gpuarray.empty((129, 257), np.float32)
            for _ in range(3):  # the second and third calls take the fast path
                at.transpose(x, out)
                assert np.array_equal(out.get(), host.T)
                assert np.array_equal(at.transpose(x).get(), host.T)
        finally:
            ctx.pop()

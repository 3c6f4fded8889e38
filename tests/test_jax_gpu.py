"""autotranspose's JAX primitive on a real GPU: jit, grad, vmap, jvp and their nesting run our
kernels through the XLA FFI handler and give jnp.transpose's results on fresh random data
(every bit compared) for 1- to 2-byte floats, int8, float32 and complex64 (with conjugate),
odd sides (3, 7, 197) and 2-D to 5-D; eager calls keep working; the custom call is really in
the compiled program; a second GPU gets its own launches."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import autotranspose as at

pytestmark = pytest.mark.gpu

DTYPES = ["float32", "bfloat16", "float16", "int8", "complex64"]
# (shape, axes): odd sides, 2-D to 5-D, axes of one element, one large enough for real tiles
PROBLEMS = [
    ((3, 7), (1, 0)),
    ((197, 3), (1, 0)),
    ((7, 197, 3), (0, 2, 1)),
    ((3, 7, 197), (2, 0, 1)),
    ((5, 3, 7, 197), (3, 1, 0, 2)),
    ((2, 3, 7, 5, 197), (4, 2, 0, 3, 1)),
    ((1, 197, 1, 7), (3, 1, 2, 0)),
    ((3, 197, 7, 1, 5), (0, 4, 2, 3, 1)),
    ((1031, 997), (1, 0)),
    ((8, 197, 64, 7), (0, 2, 1, 3)),
]


@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    if not any(d.platform in ("gpu", "cuda") for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    return jax


@pytest.fixture(scope="module")
def ops(jax):
    from autotranspose.frameworks import jax_ops

    return jax_ops


def _host(rng, shape, dtype) -> np.ndarray:
    """Fresh values of `dtype` (as JAX stores it): every bit random for integers, normal
    values for floats (no NaN, so the references can compute with them)."""
    import ml_dtypes

    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    if dt.kind in "iu":
        return (
            rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
            .view(dt)
            .reshape(shape)
        )
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return rng.standard_normal(shape).astype(dt)


def _same(got, want) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype)
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_jit_permute(jax, ops, rng, dtype):
    for shape, axes in PROBLEMS:
        host = _host(rng, shape, dtype)
        got = jax.jit(lambda a, ax=axes: ops.permute(a, ax))(jax.numpy.asarray(host))
        _same(got, np.transpose(host, axes))


@pytest.mark.parametrize("dtype", DTYPES)
def test_jit_transpose(jax, ops, rng, dtype):
    for shape in [(3, 7), (197, 3), (1031, 997), (5, 7, 197), (3, 197, 1)]:
        host = _host(rng, shape, dtype)
        got = jax.jit(ops.transpose)(jax.numpy.asarray(host))
        _same(got, np.swapaxes(host, -1, -2))


def test_jit_conjugate_transpose(jax, ops, rng):
    for shape in [(3, 7), (197, 3), (1031, 997), (5, 7, 197), (2, 3, 7, 197)]:
        host = _host(rng, shape, "complex64")
        x = jax.numpy.asarray(host)
        if len(shape) == 4:  # batched twice over: vmap of the 3-D call
            got = jax.jit(jax.vmap(lambda a: ops.transpose(a, conjugate=True)))(x)
        else:
            got = jax.jit(lambda a: ops.transpose(a, conjugate=True))(x)
        _same(got, np.conj(np.swapaxes(host, -1, -2)))


def test_the_custom_call_is_what_runs(jax, ops):
    x = jax.numpy.zeros((3, 197, 7))
    text = jax.jit(lambda a: ops.permute(a, (2, 0, 1))).lower(x).as_text()
    assert f"stablehlo.custom_call @{ops.NAME}" in text and "stablehlo.transpose" not in text
    compiled = jax.jit(lambda a: ops.permute(a, (2, 0, 1))).lower(x).compile().as_text()
    assert ops.NAME in compiled


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("in_axis", [0, 1, -1])
def test_vmap(jax, ops, rng, dtype, in_axis):
    for shape, axes in [((7, 197, 3), (2, 0, 1)), ((3, 7), (1, 0)), ((5, 3, 7, 197), (3, 1, 0, 2))]:
        host = _host(rng, (4, *shape), dtype)
        host = np.moveaxis(host, 0, in_axis).copy()
        f = jax.vmap(lambda a, ax=axes: ops.permute(a, ax), in_axes=in_axis)
        ref = jax.vmap(lambda a, ax=axes: jax.numpy.transpose(a, ax), in_axes=in_axis)
        x = jax.numpy.asarray(host)
        _same(jax.jit(f)(x), ref(x))
        _same(f(x), ref(x))  # vmap outside jit: the batched primitive bound eagerly


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_grad(jax, ops, rng, dtype):
    jnp = jax.numpy
    for shape, axes in PROBLEMS[:8]:
        x = jnp.asarray(_host(rng, shape, dtype))
        w = jnp.asarray(_host(rng, tuple(shape[a] for a in axes), dtype))

        def loss(a, f, ax=axes, w=w):
            return (f(a, ax) * w).astype(jnp.float32).sum()

        got = jax.jit(jax.grad(lambda a: loss(a, ops.permute)))(x)
        _same(got, jax.grad(lambda a: loss(a, jnp.transpose))(x))


def test_grad_of_the_conjugate_transpose(jax, ops, rng):
    jnp = jax.numpy
    x = jnp.asarray(_host(rng, (5, 7, 197), "complex64"))
    w = jnp.asarray(_host(rng, (5, 197, 7), "complex64"))
    ours = jax.jit(jax.grad(lambda a: jnp.abs(ops.transpose(a, conjugate=True) * w).sum()))(x)
    ref = jax.grad(lambda a: jnp.abs(jnp.conj(jnp.swapaxes(a, 1, 2)) * w).sum())(x)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=1e-5, atol=1e-6)


def test_jvp(jax, ops, rng):
    jnp = jax.numpy
    x = jnp.asarray(_host(rng, (3, 7, 197), "float32"))
    t = jnp.asarray(_host(rng, (3, 7, 197), "float32"))
    y, ty = jax.jit(lambda a, b: jax.jvp(lambda c: ops.permute(c, (2, 0, 1)), (a,), (b,)))(x, t)
    _same(y, jnp.transpose(x, (2, 0, 1)))
    _same(ty, jnp.transpose(t, (2, 0, 1)))


def test_nested_jit_vmap_grad(jax, ops, rng):
    jnp = jax.numpy
    x = jnp.asarray(_host(rng, (6, 7, 197, 3), "float32"))
    w = jnp.asarray(_host(rng, (3, 7, 197), "float32"))

    def loss(f):
        return lambda a: (f(a, (2, 0, 1)) ** 2 * w).sum()

    got = jax.jit(jax.vmap(jax.grad(loss(ops.permute))))(x)
    want = jax.jit(jax.vmap(jax.grad(loss(jnp.transpose))))(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    vv = jax.jit(jax.vmap(jax.vmap(lambda a: ops.transpose(a), in_axes=2), in_axes=0))(x)
    _same(vv, jax.vmap(jax.vmap(lambda a: a.T, in_axes=2), in_axes=0)(x))


def test_inside_a_larger_program_after_pending_work(jax, ops, rng):
    jnp = jax.numpy
    x = jnp.asarray(_host(rng, (4096, 4096), "float32"))
    for _ in range(5):
        x = jnp.sin(x) + 1  # still running when the jitted call is queued
    f = jax.jit(lambda a: ops.transpose(jnp.cos(a)) * 2 + ops.permute(a, (1, 0)))
    np.testing.assert_allclose(np.asarray(f(x)), np.asarray(jnp.cos(x).T * 2 + x.T), rtol=1e-6)


def test_eager_calls_still_work(jax, ops, rng):
    jnp = jax.numpy
    host = _host(rng, (3, 197, 7), "bfloat16")
    x = jnp.asarray(host)
    _same(at.transpose(x), np.swapaxes(host, 1, 2))  # DLPack
    _same(at.permute(x, (2, 0, 1)), np.transpose(host, (2, 0, 1)))
    _same(ops.transpose(x), np.swapaxes(host, 1, 2))  # the primitive, bound on a concrete array
    _same(ops.permute(x, (2, 0, 1)), np.transpose(host, (2, 0, 1)))
    c = _host(rng, (7, 197), "complex64")
    _same(at.transpose(jnp.asarray(c), conjugate=True), np.conj(c.T))
    _same(ops.transpose(jnp.asarray(c), conjugate=True), np.conj(c.T))


def test_launches_are_made_once_per_signature(jax, ops, rng):
    x = jax.numpy.asarray(_host(rng, (5, 7, 197), "float16"))
    jax.jit(lambda a: ops.permute(a, (1, 2, 0)))(x).block_until_ready()
    before = dict(ops._programs)
    jax.jit(lambda a: ops.permute(a, (1, 2, 0)) + 0)(x).block_until_ready()  # a new jit
    jax.jit(lambda a: ops.permute(a.reshape(5, 7, 197, 1), (1, 3, 2, 0)))(x).block_until_ready()
    assert ops._programs == before  # the same bytes moved the same way: the same launches


def test_public_api_under_transformations(jax, rng):
    if importlib.util.find_spec("autotranspose._api") is None:
        pytest.skip("autotranspose.transpose does not dispatch tracers yet (no autotranspose._api)")
    jnp = jax.numpy
    host = _host(rng, (3, 197, 7), "float32")
    x = jnp.asarray(host)
    _same(jax.jit(at.transpose)(x), np.swapaxes(host, 1, 2))
    _same(jax.jit(lambda a: at.permute(a, (2, 0, 1)))(x), np.transpose(host, (2, 0, 1)))
    _same(jax.vmap(at.transpose)(x), np.swapaxes(host, 1, 2))
    g = jax.grad(lambda a: (at.permute(a, (2, 0, 1)) * 3).sum())(x)
    _same(g, np.full(host.shape, 3, np.float32))


def test_second_gpu(jax, ops, rng):
    gpus = [d for d in jax.devices() if d.platform in ("gpu", "cuda")]
    if len(gpus) < 2:
        pytest.skip("needs two GPUs")
    host = _host(rng, (5, 197, 7), "float32")
    for device in gpus[:2]:
        x = jax.device_put(host, device)
        y = jax.jit(lambda a: ops.permute(a, (2, 0, 1)))(x)
        assert y.devices() == {device}
        _same(y, np.transpose(host, (2, 0, 1)))
    fused = ops.fused((5, 197, 7), (2, 0, 1))[0]
    made_on = {
        device
        for kind, device, shape, _axes, dtype, *_ in ops._programs
        if kind == "permute" and shape == fused and dtype == "float32"
    }
    assert made_on >= {gpus[0].local_hardware_id, gpus[1].local_hardware_id}


def test_eager_results_are_released(jax, rng):
    """The DLPack exports of eager results go back (through the compiled release) once JAX
    drops them: what Python held for them does not pile up."""
    import gc
    import time

    from autotranspose.runtime import dlpack as _dlpack

    x = jax.numpy.asarray(_host(rng, (197, 7), "float32"))
    baseline = len(_dlpack._live)
    for _ in range(50):
        y = at.transpose(x)
        y.block_until_ready()
        del y
    gc.collect()
    deadline = time.monotonic() + 10
    while len(_dlpack._live) > baseline + 2 and time.monotonic() < deadline:
        at.transpose(x).block_until_ready()  # each export takes the released ones
        gc.collect()
        time.sleep(0.05)
    assert len(_dlpack._live) <= baseline + 2

"""cast_transpose() of JAX arrays on a real GPU: eager and jitted calls run the eager call's
kernels through the XLA FFI handler's cast target and give, for every pair, the reference
bits (tests/_cast_data.py, computed on the host) on fresh data holding infinities, NaN,
subnormals and rounding midpoints; odd shapes, batches, permutes (host loops, two passes),
both=True, float and array scales, vmap, and the new amax against jnp.max(jnp.abs(x)) with NaN
propagating."""

from __future__ import annotations

import time

import _cast_data as data
import numpy as np
import pytest

import autotranspose as at
from autotranspose.kinds import cast

pytestmark = pytest.mark.gpu

PAIRS = sorted(cast.PAIRS)
SHAPES = [((37, 131), None), ((1031, 997), None), ((3, 197, 65), None), ((7, 1, 33), (2, 0, 1))]


@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    if not any(d.platform in ("gpu", "cuda") for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    return jax


def _formats(code: str) -> tuple[cast.Format, cast.Format]:
    src, dst = code.split("_")
    by_code = {f.code: f for f in cast.FORMATS.values()}
    return by_code[src], by_code[dst]


def _order(ndim: int, axes) -> tuple[int, ...]:
    return tuple(axes) if axes is not None else (*range(ndim - 2), ndim - 1, ndim - 2)


def _check(y, x_host, scale, dst, axes=None, what="y"):
    want = data.reference(x_host, scale, dst)
    if axes is not None:
        want = np.transpose(want, axes)
    assert np.dtype(y.dtype) == data.np_type(dst)
    data.assert_same_bits(np.asarray(y), want, dst, what)


def _amax_check(jnp, got, x, prior):
    ref = jnp.maximum(jnp.float32(prior), jnp.max(jnp.abs(x.astype(jnp.float32))))
    np.testing.assert_array_equal(np.asarray(got).reshape(()), np.asarray(ref))
    np.testing.assert_array_equal(
        np.asarray(got).reshape(()), data.amax_reference(np.asarray(x), prior)
    )


@pytest.mark.parametrize("code", PAIRS)
@pytest.mark.parametrize("shape, axes", SHAPES)
@pytest.mark.parametrize("scale", ["float", "array"])
def test_every_pair_eager_and_jitted(jax, rng, code, shape, axes, scale):
    jnp = jax.numpy
    src, dst = _formats(code)
    s = float(np.float32(rng.uniform(0.25, 4)))
    x_host = data.make_input(rng, shape, src, dst, s)
    x = jax.device_put(jnp.asarray(x_host), jax.devices("cuda")[0])
    given = jnp.full((1,), s, jnp.float32) if scale == "array" else s
    order = _order(len(shape), axes)
    y = at.cast_transpose(x, dst.name, scale=given, axes=axes)
    _check(y, x_host, s, dst, order)
    f = jax.jit(
        lambda a, m: at.cast_transpose(a, dst.name, scale=given, axes=axes, both=True, amax=m)
    )
    z, y, new = f(x, jnp.zeros((1,), jnp.float32))
    _check(y, x_host, s, dst, order)
    _check(z, x_host, s, dst, None, "z")
    _amax_check(jnp, new, x, 0.0)


def test_the_custom_call_is_in_the_compiled_program(jax):
    jnp = jax.numpy
    x = jnp.zeros((64, 96), jnp.float32)
    text = jax.jit(lambda a: at.cast_transpose(a, "e4m3")).lower(x).as_text()
    assert "autotranspose_cast_transpose" in text and "stablehlo.convert" not in text


@pytest.mark.parametrize("prior", [0.0, 1e30, -3.0, np.nan])
def test_amax_propagates_nan(jax, rng, prior):
    jnp = jax.numpy
    e4m3 = cast.FORMATS["float8_e4m3fn"]
    x_host = rng.standard_normal((129, 67)).astype(np.float32) * 50
    x_host[rng.integers(0, 129), rng.integers(0, 67)] = np.nan if prior == 0.0 else 1.0
    x = jnp.asarray(x_host)
    y, new = jax.jit(lambda a, m: at.cast_transpose(a, "e4m3", amax=m))(
        x, jnp.full((1,), prior, jnp.float32)
    )
    _check(y, x_host, 1.0, e4m3, (1, 0))
    _amax_check(jnp, new, x, prior)


@pytest.mark.parametrize("in_axis", [0, 1, 2])
def test_vmap_is_one_call_over_the_batch(jax, rng, in_axis):
    jnp = jax.numpy
    e5m2 = cast.FORMATS["float8_e5m2"]
    x_host = data.make_input(rng, (5, 33, 47), cast.FORMATS["bfloat16"], e5m2, 2.0)
    x = jnp.asarray(x_host)
    f = jax.jit(
        jax.vmap(
            lambda v, m: at.cast_transpose(v, "e5m2", scale=2.0, both=True, amax=m),
            in_axes=(in_axis, None),
        )
    )
    z, y, new = f(x, jnp.zeros((1,), jnp.float32))
    per = np.moveaxis(x_host, in_axis, 0)
    want_y = np.stack([np.transpose(data.reference(v, 2.0, e5m2)) for v in per])
    data.assert_same_bits(np.asarray(y), want_y, e5m2)
    want_z = np.stack([data.reference(v, 2.0, e5m2) for v in per])
    data.assert_same_bits(np.asarray(z), want_z, e5m2, "z")
    np.testing.assert_array_equal(np.asarray(new), np.full(new.shape, data.amax_reference(x_host)))


def test_vmap_of_a_scale_per_example(jax, rng):
    jnp = jax.numpy
    bf16 = cast.FORMATS["bfloat16"]
    x_host = data.make_input(rng, (3, 19, 41), cast.FLOAT32, bf16, 1.0)
    scales = np.array([[0.5], [2.0], [3.0]], np.float32)
    y = jax.jit(jax.vmap(lambda v, s: at.cast_transpose(v, "bf16", scale=s)))(
        jnp.asarray(x_host), jnp.asarray(scales)
    )
    for k in range(3):
        data.assert_same_bits(
            np.asarray(y[k]), np.transpose(data.reference(x_host[k], scales[k, 0], bf16)), bf16
        )


def test_two_passes_and_host_loops(jax, rng):
    jnp = jax.numpy
    e4m3 = cast.FORMATS["float8_e4m3fn"]
    for shape, axes in [
        ((3, 5, 3, 5, 3, 5, 2), (6, 4, 2, 0, 5, 3, 1)),  # two passes
        ((4, 6, 5, 7), (1, 3, 0, 2)),  # host loops
    ]:
        x_host = data.make_input(rng, shape, cast.FLOAT32, e4m3, 1.0)
        z, y = jax.jit(lambda a, ax=axes: at.cast_transpose(a, "e4m3", axes=ax, both=True))(
            jnp.asarray(x_host)
        )
        _check(y, x_host, 1.0, e4m3, axes)
        _check(z, x_host, 1.0, e4m3, None, "z")


def test_empty_and_one_element(jax):
    jnp = jax.numpy
    y, new = at.cast_transpose(jnp.zeros((0, 5)), "e4m3", amax=jnp.full((1,), 2.0))
    assert y.shape == (5, 0) and float(new[0]) == 2.0
    y = at.cast_transpose(jnp.full((1, 1), 1000.0), "e4m3")
    assert float(y.astype(jnp.float32)[0, 0]) == 448.0


def test_timing_of_a_jitted_cast(jax, capsys):
    """Not a check: the time of a jitted cast of a 4096 x 4096 float32 matrix to e4m3, ours
    against XLA's own clamp-convert-transpose (printed with -s)."""
    jnp = jax.numpy
    x = jax.random.normal(jax.random.key(0), (4096, 4096), jnp.float32)
    ours = jax.jit(lambda a: at.cast_transpose(a, "e4m3", scale=2.0))
    xla = jax.jit(lambda a: jnp.clip(a * 2.0, -448.0, 448.0).astype(jnp.float8_e4m3fn).T)
    times = {}
    for name, f in (("autotranspose", ours), ("xla", xla)):
        f(x).block_until_ready()
        start = time.perf_counter()
        for _ in range(50):
            y = f(x)
        y.block_until_ready()
        times[name] = (time.perf_counter() - start) / 50 * 1e6
    with capsys.disabled():
        print(f"\njitted 4096x4096 f32->e4m3 cast-transpose: {times} (us per call)")

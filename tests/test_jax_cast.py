"""cast_transpose() of JAX arrays without a GPU: the primitive's shapes and dtypes, its
trace-time errors (the eager call's), the values of XLA's CPU lowering bit for bit against the
NumPy / ml_dtypes reference (tests/_cast_data.py) on fresh data holding infinities, NaN,
subnormals, rounding midpoints and saturating values, amax returned, jit and vmap (one call,
the batch axis in front; a scale or amax per example), grad refused, the CUDA lowering with
stand-in launches, and the handler's cast target run on XLA's CPU backend with launcher
structs whose driver entry points are host functions (the pointer codes relocated)."""

from __future__ import annotations

import ctypes

import _cast_data as data
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

import autotranspose as at  # noqa: E402
from autotranspose import errors  # noqa: E402
from autotranspose.calls import cast as _cast  # noqa: E402
from autotranspose.frameworks import _jax_handler, jax_cast, jax_ops  # noqa: E402
from autotranspose.kinds import cast  # noqa: E402
from autotranspose.runtime import native as _native  # noqa: E402

NAME = jax_cast.NAME
PAIRS = sorted(cast.PAIRS)


def _formats(code: str) -> tuple[cast.Format, cast.Format]:
    src, dst = code.split("_")
    by_code = {f.code: f for f in cast.FORMATS.values()}
    return by_code[src], by_code[dst]


def _ours(fn, *args) -> list[dict]:
    """The params of every cast primitive in fn's jaxpr (jit bodies included)."""
    found = []

    def walk(jaxpr):
        for e in getattr(jaxpr, "jaxpr", jaxpr).eqns:
            if e.primitive.name == NAME:
                found.append(dict(e.params))
            for p in e.params.values():
                for sub in p if isinstance(p, (list, tuple)) else [p]:
                    if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                        walk(sub)

    walk(jax.make_jaxpr(fn)(*args))
    return found


def _x(rng, shape, src, dst, scale=1.0):
    """x in `src` on the CPU: the hard cases of the pair and random magnitudes."""
    return jnp.asarray(data.make_input(rng, shape, src, dst, scale))


def _want(x, scale, dst, axes=None):
    """The reference bits of the permuted cast (axes None: x's order), as XLA's CPU backend
    gives them: with a scale other than 1, a float32 product below 2**-126 flushed to a zero
    of its sign (only a bfloat16 output can tell; jax_cast's docstring says so)."""
    x = np.asarray(x)
    ref = data.reference(x, scale, dst)
    if dst.name == "bfloat16" and np.float32(scale) != 1:
        with np.errstate(over="ignore", invalid="ignore"):
            p = x.astype(np.float32) * np.float32(scale)
        tiny = (np.abs(p) < np.float32(2.0**-126)) & (p != 0)
        ref = np.where(tiny, np.where(np.signbit(p), 0x8000, 0).astype(np.uint16), ref)
    return ref if axes is None else np.transpose(ref, axes)


def _same(got, want, dst, what="y"):
    assert np.dtype(got.dtype) == data.np_type(dst), (got.dtype, dst.name)
    data.assert_same_bits(np.asarray(got), want, dst, what)


# --- shapes, dtypes and the jaxpr -------------------------------------------------------------------
@pytest.mark.parametrize("code", PAIRS)
def test_abstract_eval_gives_the_permuted_shape_in_the_output_dtype(code):
    src, dst = _formats(code)
    x = jax.ShapeDtypeStruct((2, 3, 5), data.np_type(src))
    a = jax.ShapeDtypeStruct((1,), np.float32)
    y = jax.eval_shape(lambda x: at.cast_transpose(x, dst.name), x)
    assert (y.shape, np.dtype(y.dtype)) == ((2, 5, 3), data.np_type(dst))
    z, y, m = jax.eval_shape(
        lambda x, a: at.cast_transpose(x, dst.name, axes=(2, 0, 1), both=True, amax=a), x, a
    )
    assert (z.shape, y.shape, m.shape) == ((2, 3, 5), (5, 2, 3), (1,))
    assert np.dtype(z.dtype) == np.dtype(y.dtype) == data.np_type(dst)
    assert np.dtype(m.dtype) == np.float32


def test_the_jaxpr_holds_one_call_with_its_params():
    x = jnp.zeros((4, 3, 5), jnp.bfloat16)
    params = _ours(
        lambda x, s: at.cast_transpose(x, "e4m3", scale=s, axes=(-1, 0, 1)), x, jnp.ones(1)
    )
    assert params == [
        dict(dtype="float8_e4m3fn", axes=(2, 0, 1), both=False, scale=None, amax=False)
    ]
    params = _ours(lambda x: at.cast_transpose(x, jnp.float8_e5m2, scale=3), x)
    assert params[0]["scale"] == 3.0 and params[0]["axes"] == (0, 2, 1)


def test_a_float_scale_is_rounded_to_float32():
    x = jnp.zeros((2, 2))
    (params,) = _ours(lambda x: at.cast_transpose(x, "bf16", scale=0.1), x)
    assert params["scale"] == float(np.float32(0.1))


def test_transpose_and_permute_with_dtype_take_jax_arrays(rng):
    x = _x(rng, (3, 5), cast.FLOAT32, cast.FORMATS["bfloat16"])
    bf16 = cast.FORMATS["bfloat16"]
    _same(at.transpose(x, dtype="bf16"), _want(x, 1.0, bf16, (1, 0)), bf16)
    y = jax.jit(lambda a: at.permute(a, (1, 0), dtype=jnp.bfloat16))(x)
    _same(y, _want(x, 1.0, bf16, (1, 0)), bf16)


# --- values on XLA's CPU backend ----------------------------------------------------------------------
@pytest.mark.parametrize("code", PAIRS)
@pytest.mark.parametrize("scale", [None, 0.75, "array"])
def test_values_are_the_reference_bit_for_bit(rng, code, scale):
    src, dst = _formats(code)
    s = {None: 1.0, 0.75: 0.75, "array": float(np.float32(rng.uniform(0.3, 3)))}[scale]
    given = jnp.full((1,), s, jnp.float32) if scale == "array" else scale
    x = _x(rng, (37, 131), src, dst, s)
    _same(at.cast_transpose(x, dst.name, scale=given), _want(x, s, dst, (1, 0)), dst)
    z, y = jax.jit(lambda a: at.cast_transpose(a, dst.name, scale=given, both=True))(x)
    _same(y, _want(x, s, dst, (1, 0)), dst)
    _same(z, _want(x, s, dst), dst, "z")


@pytest.mark.parametrize(
    "shape, axes",
    [((3, 1, 7), (2, 1, 0)), ((5, 3, 7, 2), (3, 1, 0, 2)), ((7,), (0,)), ((1, 1), None)],
)
def test_values_of_permutes_and_odd_shapes(rng, shape, axes):
    dst = cast.FORMATS["float8_e5m2"]
    x = _x(rng, shape, cast.FLOAT32, dst)
    order = axes if axes is not None else (*range(len(shape) - 2), len(shape) - 1, len(shape) - 2)
    z, y = at.cast_transpose(x, dst.name, axes=axes, both=True)
    _same(y, _want(x, 1.0, dst, order), dst)
    _same(z, _want(x, 1.0, dst), dst, "z")


@pytest.mark.parametrize("prior", [0.0, 5e3, -1.0, np.nan])
def test_amax_is_returned_as_the_new_amax(rng, prior):
    e4m3 = cast.FORMATS["float8_e4m3fn"]
    x = jnp.asarray(rng.standard_normal((9, 13)).astype(np.float32) * 100)
    amax = jnp.full((1,), prior, jnp.float32)
    y, new = at.cast_transpose(x, "e4m3", amax=amax)
    _same(y, _want(x, 1.0, e4m3, (1, 0)), e4m3)
    want = data.amax_reference(np.asarray(x), prior)
    assert new.shape == (1,) and new.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(new)[0], want)
    assert float(amax[0]) == prior or np.isnan(prior)  # the given one is left as it was


def test_amax_propagates_nan_and_keeps_its_shape(rng):
    x = np.asarray(rng.standard_normal((4, 6)), np.float32)
    x[2, 3] = np.nan
    *_, new = at.cast_transpose(jnp.asarray(x), "bf16", both=True, amax=jnp.zeros(()))
    assert new.shape == () and np.isnan(float(new))


def test_amax_of_an_empty_x_is_the_given_one():
    y, new = at.cast_transpose(jnp.zeros((0, 3)), "e4m3", amax=jnp.full((1,), -2.0))
    assert y.shape == (3, 0) and float(new[0]) == -2.0


def test_subnormals_and_rounding_boundaries_of_every_pair(rng):
    """The special values alone (none of the random half), in both orders."""
    for code in PAIRS:
        src, dst = _formats(code)
        vals = data.special_values(src, dst, 1.0)
        vals = rng.permutation(vals)[: (len(vals) // 8) * 8].reshape(8, -1)
        x = jnp.asarray(vals.astype(data.np_type(src)))
        z, y = at.cast_transpose(x, dst.name, both=True)
        _same(y, _want(x, 1.0, dst, (1, 0)), dst, code)
        _same(z, _want(x, 1.0, dst), dst, code)


# --- jit and vmap -----------------------------------------------------------------------------------------
def test_jit_and_eager_agree(rng):
    e5m2 = cast.FORMATS["float8_e5m2"]
    x = _x(rng, (6, 10, 12), cast.FORMATS["bfloat16"], e5m2, 4.0)
    f = jax.jit(lambda x, s, a: at.cast_transpose(x, "e5m2", scale=s, amax=a, axes=(1, 2, 0)))
    s, a = jnp.full((1,), 4.0), jnp.zeros((1,))
    y1, m1 = f(x, s, a)
    y2, m2 = at.cast_transpose(x, "e5m2", scale=s, amax=a, axes=(1, 2, 0))
    _same(y1, np.asarray(y2).view(np.uint8), e5m2)
    _same(y1, _want(x, 4.0, e5m2, (1, 2, 0)), e5m2)
    want = data.amax_reference(np.asarray(x))
    np.testing.assert_array_equal(np.asarray([m1[0], m2[0]]), [want, want])


@pytest.mark.parametrize("in_axis", [0, 1, 2, -1])
def test_vmap_is_one_call_with_the_batch_axis_in_front(rng, in_axis):
    e4m3 = cast.FORMATS["float8_e4m3fn"]
    x = _x(rng, (4, 5, 6), cast.FLOAT32, e4m3)
    a = jnp.zeros((1,))
    f = jax.vmap(lambda v: at.cast_transpose(v, "e4m3", both=True, amax=a), in_axes=in_axis)
    (params,) = _ours(f, x)
    d = in_axis % 3
    assert params["axes"] == (d, *[k for k in range(3) if k != d][::-1])
    z, y, new = f(x)
    per = np.moveaxis(np.asarray(x), d, 0)
    _same(y, np.stack([_want(v, 1.0, e4m3, (1, 0)) for v in per]), e4m3)
    _same(z, np.stack([_want(v, 1.0, e4m3) for v in per]), e4m3, "z")
    assert new.shape == (per.shape[0], 1)  # the one amax, over the whole batch
    np.testing.assert_array_equal(new, np.full(new.shape, data.amax_reference(np.asarray(x))))


def test_vmap_of_a_scale_and_amax_per_example(rng):
    bf16 = cast.FORMATS["bfloat16"]
    x = _x(rng, (3, 4, 5), cast.FLOAT32, bf16)
    scales = jnp.asarray([[0.5], [2.0], [3.0]], jnp.float32)
    amaxes = jnp.asarray([[0.0], [1e9], [np.nan]], jnp.float32)
    y, new = jax.vmap(lambda v, s, a: at.cast_transpose(v, "bf16", scale=s, amax=a))(
        x, scales, amaxes
    )
    for k in range(3):
        s = float(scales[k, 0])
        _same(y[k], _want(x[k], s, bf16, (1, 0)), bf16)
        want = data.amax_reference(np.asarray(x[k]), float(amaxes[k, 0]))
        np.testing.assert_array_equal(np.asarray(new[k, 0]), want)


def test_vmap_of_a_batched_scale_with_a_shared_x(rng):
    bf16 = cast.FORMATS["bfloat16"]
    x = _x(rng, (4, 5), cast.FLOAT32, bf16)
    scales = jnp.asarray([[0.5], [2.0]], jnp.float32)
    y = jax.vmap(lambda s: at.cast_transpose(x, "bf16", scale=s))(scales)
    for k in range(2):
        _same(y[k], _want(x, float(scales[k, 0]), bf16, (1, 0)), bf16)


# --- not differentiable; errors -------------------------------------------------------------------------
def test_grad_raises_a_clear_error():
    f = lambda x: at.cast_transpose(x, "bf16").astype(jnp.float32).sum()  # noqa: E731
    with pytest.raises(errors.InputTypeError, match=r"not differentiable.*stop_gradient"):
        jax.grad(f)(jnp.ones((3, 4)))
    g = lambda s: at.cast_transpose(jnp.ones((3, 4)), "bf16", scale=s).astype(float).sum()  # noqa: E731
    with pytest.raises(errors.InputTypeError, match="not differentiable"):
        jax.grad(g)(jnp.ones((1,)))
    stopped = lambda x: at.cast_transpose(jax.lax.stop_gradient(x), "bf16").astype(float).sum()  # noqa: E731
    assert float(jax.grad(lambda x: stopped(x) + x.sum())(jnp.ones((3, 4))).sum()) == 12.0


def test_out_and_out_t_are_refused_with_the_fix():
    x = jnp.zeros((3, 4))
    with pytest.raises(errors.OutputError, match=r"immutable.*new amax is returned"):
        at.cast_transpose(x, "bf16", out_t=jnp.zeros((4, 3), jnp.bfloat16))
    with pytest.raises(errors.OutputError, match="out= is given"):
        jax.jit(lambda a: at.cast_transpose(a, "bf16", both=True, out=a))(x)


def test_stream_and_config_are_refused():
    x = jnp.zeros((3, 4))
    with pytest.raises(errors.InputTypeError, match="stream= cannot be used with JAX"):
        at.cast_transpose(x, "bf16", stream=0)
    with pytest.raises(errors.InputTypeError, match="config= cannot be used with JAX"):
        jax_cast.cast_transpose(x, "bf16", config=object())


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (lambda x: at.cast_transpose(x.astype(jnp.int32), "e4m3"), "UnsupportedDtypeError", "reads"),
        (lambda x: at.cast_transpose(x, "int8"), "UnsupportedDtypeError", "not a format"),
        (lambda x: at.cast_transpose(x.astype(jnp.bfloat16), "f32"), "UnsupportedDtypeError", "writes"),
        (lambda x: at.cast_transpose(x, "e4m3", axes=(0, 0)), "AxesError", "permutation"),
        (lambda x: at.cast_transpose(x[0], "e4m3"), "ShapeError", "default axes"),
        (lambda x: at.cast_transpose(x, "e4m3", both=1), "InputTypeError", "True or False"),
        (lambda x: at.cast_transpose(x, "e4m3", scale=True), "InputTypeError", "Python float"),
        (lambda x: at.cast_transpose(x, "e4m3", scale="2"), "InputTypeError", "Python float"),
        (lambda x: at.cast_transpose(x, "e4m3", scale=np.ones(1, np.float32)), "InputTypeError", "JAX array"),
        (lambda x: at.cast_transpose(x, "e4m3", scale=jnp.ones(2)), "InputTypeError", "2 element"),
        (lambda x: at.cast_transpose(x, "e4m3", amax=jnp.ones(1, jnp.bfloat16)), "InputTypeError", "bfloat16"),
        (lambda x: at.cast_transpose(x, "e4m3", amax=1.0), "InputTypeError", "amax must be"),
    ],
)  # fmt: skip
def test_errors_are_the_eager_call_s_eagerly_and_traced(call, exc, message):
    x = jnp.zeros((3, 4))
    for fn in (call, jax.jit(call)):
        with pytest.raises(getattr(errors, exc), match=message):
            fn(x)


def test_only_jax_values_are_taken_here():
    with pytest.raises(errors.InputTypeError, match="JAX arrays and tracers"):
        jax_cast.cast_transpose(np.zeros((3, 4), np.float32), "bf16")


# --- the CUDA lowering, with stand-in programs ----------------------------------------------------------
class _Stand:
    def __init__(self, address: int) -> None:
        self.address = address


@pytest.fixture
def cuda_lowering(monkeypatch):
    """Lower for CUDA here: programs made by a stand-in device_program (recorded), two local
    GPUs, nothing registered with XLA."""
    made: list[tuple] = []

    def device_program(device, shape, axes, src, dst, both, scale, amax):
        made.append((device, shape, axes, src.name, dst.name, both, scale, amax))
        return _Stand(0x20000 + 0x100 * len(made))

    monkeypatch.setattr(jax_cast, "device_program", device_program)
    monkeypatch.setattr(_jax_handler, "register", lambda: None)
    monkeypatch.setattr(jax_ops, "lowering_devices", lambda ctx: [0, 1])
    monkeypatch.setattr(jax_ops, "_programs", {})

    def lower(fn, *args):
        return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()

    return made, lower


def test_cuda_lowering_is_one_custom_call(cuda_lowering):
    made, lower = cuda_lowering
    x, s, a = jnp.zeros((2, 3, 5), jnp.bfloat16), jnp.ones(1), jnp.zeros(1)
    text = lower(lambda x, s, a: at.cast_transpose(x, "e4m3", scale=s, amax=a, both=True), x, s, a)
    assert text.count(f"stablehlo.custom_call @{NAME}") == 1
    assert "stablehlo.transpose" not in text and "stablehlo.convert" not in text
    assert "programs = dense<[131328, 131584]> : tensor<2xui64>" in text
    assert "launches = dense<0> : tensor<2xi32>" in text
    # x, scale, amax in; z, y, amax out
    assert "sizes = dense<[60, 4, 4, 30, 30, 4]> : tensor<6xui64>" in text
    assert "align = dense<[16, 4, 4, 16, 16, 4]> : tensor<6xui64>" in text
    assert made == [
        (d, (2, 3, 5), (0, 2, 1), "bfloat16", "float8_e4m3fn", True, None, True) for d in (0, 1)
    ]
    lower(lambda x, s, a: at.cast_transpose(x, "e4m3", scale=s, amax=a, both=True), x, s, a)
    assert len(made) == 2  # made once per signature


def test_buffers_are_numbered_operands_first():
    assert jax_cast.buffers(False, 1.0, False) == {"x": 1, "y": 2}
    assert jax_cast.buffers(True, None, True) == {
        "x": 1, "scale": 2, "amax_in": 3, "z": 4, "y": 5, "amax": 6,
    }  # fmt: skip


def test_cuda_lowering_of_an_empty_x_is_xla(cuda_lowering):
    made, lower = cuda_lowering
    text = lower(lambda x: at.cast_transpose(x, "e4m3"), jnp.zeros((0, 3)))
    assert NAME not in text and made == []


def test_cuda_lowering_of_two_passes_is_a_cast_then_a_permute(cuda_lowering, monkeypatch):
    made, lower = cuda_lowering
    monkeypatch.setattr(
        "autotranspose.calls.permute.device_program", lambda *a, **k: _Stand(0x30000)
    )
    shape, axes = (
        (3, 5, 3, 5, 3, 5, 2),
        (6, 4, 2, 0, 5, 3, 1),
    )  # more host loops than one pass takes
    assert _cast.contiguous_plan(shape, axes, True).two_pass
    text = lower(lambda x: at.cast_transpose(x, "e4m3", axes=axes, both=True), jnp.zeros(shape))
    assert text.count(f"stablehlo.custom_call @{NAME}") == 1
    assert text.count(f"stablehlo.custom_call @{jax_ops.NAME}") == 1
    assert made[0][2] == tuple(range(7))


def test_cuda_lowering_without_the_compiled_launcher(cuda_lowering, monkeypatch):
    _, lower = cuda_lowering
    monkeypatch.setattr(jax_cast, "device_program", lambda *a: _Stand(0))
    monkeypatch.setenv(_native.ENV_VAR, "0")
    with pytest.raises(errors.KernelLaunchError, match=f"{_native.ENV_VAR}=0"):
        lower(lambda a: at.cast_transpose(a, "bf16"), jnp.zeros((3, 4)))


def test_cuda_export_is_refused(cuda_lowering):
    with pytest.raises(errors.InputTypeError, match="cannot be exported"):
        jax.export.export(jax.jit(lambda a: at.cast_transpose(a, "bf16")), platforms=["cuda"])(
            jnp.zeros((3, 4))
        )


# --- the handler's cast target on XLA's CPU backend -------------------------------------------------------
GET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
COPY = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p
)
LAUNCH = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_void_p,
    *[ctypes.c_uint] * 7,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.c_void_p,
)


class HostDriver:
    """The driver's entry points on host memory; the "kernel" takes the cast kernel's argument
    block (x, y, z, scale, amax, M, ...) and writes y = x * scale and z = -x over M float32
    elements, and raises amax to max |x|: what the relocated pointers point at is checked by
    the values it writes."""

    def __init__(self) -> None:
        self.current, self.calls = 0, []
        self.get, self.set = GET(self._get), SET(self._set)
        self.copy, self.launch = COPY(self._copy), LAUNCH(self._launch)

    def _get(self, out):
        out[0] = self.current or None
        return 0

    def _set(self, ctx):
        self.current = ctx or 0
        return 0

    def _copy(self, dst, src, nbytes, stream):
        self.calls.append("copy")
        ctypes.memmove(dst, src, nbytes)
        return 0

    def _launch(self, func, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        self.calls.append("launch")
        words = (ctypes.c_uint64 * 6).from_address(params[0])
        x, y, z, scale, amax, m = words
        arr = lambda p: np.ctypeslib.as_array((ctypes.c_float * m).from_address(p))  # noqa: E731
        one = lambda p: np.ctypeslib.as_array((ctypes.c_float * 1).from_address(p))  # noqa: E731
        arr(y)[:] = arr(x) * one(scale)[0]
        arr(z)[:] = -arr(x)
        one(amax)[0] = max(one(amax)[0], np.abs(arr(x)).max())
        return 0

    @staticmethod
    def address(fn) -> int:
        return ctypes.cast(fn, ctypes.c_void_p).value


def _program(driver: HostDriver, m: int, names: dict[str, int]):
    """A program as device_program makes it for (x, scale, amax_in) -> (z, y, amax): the amax
    copy, then one launch whose pointer words are codes."""
    code = lambda n: names[n] << _jax_handler.RELOC_SHIFT  # noqa: E731
    spec = _native.Spec()
    spec.get, spec.set, spec.launch = (
        driver.address(f) for f in (driver.get, driver.set, driver.launch)
    )
    spec.func, spec.ctx = 0xF00, 0xC7C
    spec.dims[:] = [1] * 7
    spec.nbytes = 48
    spec.offsets[:] = [0] * 11
    spec.params[:6] = [code("x"), code("y"), code("z"), code("scale"), code("amax"), m]
    steps = (_native.Step * 2)()
    steps[0].launch, steps[0].in_off, steps[0].out_off = None, code("amax_in"), code("amax")
    steps[0].nbytes = 4
    steps[1].launch, steps[1].nbytes = ctypes.addressof(spec), 40
    prog = _native.CProgram()
    prog.get, prog.set, prog.copy = (
        driver.address(f) for f in (driver.get, driver.set, driver.copy)
    )
    prog.ctx, prog.count = 0xC7C, 2
    prog.steps = ctypes.cast(steps, ctypes.POINTER(_native.Step))
    return prog, (spec, steps)


@pytest.fixture(scope="module")
def host_handler():
    if _jax_handler.cxx() is None:
        pytest.skip("no C++ compiler")
    _jax_handler.register_host()


def _host_call(prog_address, m, sizes=None):
    names = jax_cast.buffers(True, None, True)
    f32 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)  # noqa: E731
    avals = [f32(m), f32(1), f32(1), f32(m), f32(m), f32(1)]
    attrs = jax_cast.attributes([jax_ops.Entry(0, prog_address, False)], names, avals)
    if sizes is not None:
        attrs["sizes"] = np.array(sizes, np.uint64)
    call = jax.ffi.ffi_call(_jax_handler.HOST_CAST_TARGET, (f32(m), f32(m), f32(1)))
    return jax.jit(lambda x, s, a: call(x, s, a, **attrs))


def test_handler_relocates_every_pointer(host_handler, rng):
    driver = HostDriver()
    prog, _keep = _program(driver, 24, jax_cast.buffers(True, None, True))
    x = jnp.asarray(rng.standard_normal(24).astype(np.float32))
    z, y, amax = _host_call(ctypes.addressof(prog), 24)(x, jnp.full((1,), 3.0), jnp.full((1,), 0.5))
    np.testing.assert_array_equal(y, np.asarray(x) * 3)
    np.testing.assert_array_equal(z, -np.asarray(x))
    assert float(amax[0]) == max(0.5, float(np.abs(x).max()))
    assert driver.calls == ["copy", "launch"] and driver.current == 0


def test_handler_refuses_other_sizes(host_handler):
    driver = HostDriver()
    prog, _keep = _program(driver, 24, jax_cast.buffers(True, None, True))
    sizes = [96, 4, 4, 96, 100, 4]
    with pytest.raises(Exception, match="result 1 of 96 bytes; the kernels were made for 100"):
        _host_call(ctypes.addressof(prog), 24, sizes)(
            jnp.zeros(24), jnp.ones(1), jnp.zeros(1)
        ).block_until_ready()
    assert driver.calls == []


def test_handler_refuses_a_code_of_no_buffer(host_handler):
    driver = HostDriver()
    prog, _keep = _program(driver, 24, {**jax_cast.buffers(True, None, True), "y": 9})
    with pytest.raises(Exception, match="CUresult 1"):
        _host_call(ctypes.addressof(prog), 24)(
            jnp.zeros(24), jnp.ones(1), jnp.zeros(1)
        ).block_until_ready()
    assert driver.calls == ["copy"]

"""autotranspose's JAX primitive without a GPU: what jit, grad, vmap and jvp make of it (its
params in the jaxpr, the shapes, and on XLA's CPU backend, where it lowers to XLA's own
transpose, the values of its differentiation and batching rules against jnp's), the trace-time
errors (the eager calls' own), the CUDA lowering (with stand-in launches), and the FFI
handler: built against the installed jaxlib's headers and run on XLA's CPU backend with
launcher structs whose driver entry points are host functions."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

import autotranspose as at  # noqa: E402
from autotranspose import errors  # noqa: E402
from autotranspose.calls import permute as permuter  # noqa: E402
from autotranspose.frameworks import _jax_handler, jax_ops  # noqa: E402
from autotranspose.plans.dtypes import element_type  # noqa: E402
from autotranspose.runtime import native as _native  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NAME = jax_ops.NAME


def _eqns(jaxpr) -> list:
    """Every equation of a (closed) jaxpr and of the jaxprs inside it (jit, custom rules)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    found = []
    for eqn in jaxpr.eqns:
        found.append(eqn)
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                    found.extend(_eqns(sub))
    return found


def _ours(jaxpr) -> list[tuple[tuple[int, ...], bool]]:
    return [
        (e.params["axes"], e.params["conjugate"]) for e in _eqns(jaxpr) if e.primitive.name == NAME
    ]


def _random(rng, shape, dtype):
    if np.dtype(dtype).kind == "c":
        return jnp.asarray(rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(
            dtype
        )
    if np.dtype(dtype).kind in "iu":
        return jnp.asarray(rng.integers(-100, 100, shape)).astype(dtype)
    return jnp.asarray(rng.standard_normal(shape)).astype(dtype)


# --- tracing -------------------------------------------------------------------------------------
def test_is_traced_needs_no_jax_import():
    script = (
        "import sys\n"
        "from autotranspose.frameworks import jax_ops\n"
        "import numpy as np\n"
        "assert not jax_ops.is_traced(np.zeros(3)) and not jax_ops.is_traced(1)\n"
        "assert 'jax' not in sys.modules, 'jax was imported'\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr


def test_is_traced():
    x = jnp.ones((2, 3))
    assert not jax_ops.is_traced(x)
    seen = []
    jax.jit(lambda a: seen.append(jax_ops.is_traced(a)) or a)(x)
    jax.grad(lambda a: seen.append(jax_ops.is_traced(a)) or a.sum())(x)
    jax.vmap(lambda a: seen.append(jax_ops.is_traced(a)) or a)(x)
    assert seen == [True, True, True]


def test_jit_holds_the_primitive_with_normalised_axes():
    x = jnp.ones((2, 3, 4, 5))
    assert _ours(jax.make_jaxpr(jax.jit(lambda a: jax_ops.permute(a, [-1, 0, 2, 1])))(x)) == [
        ((3, 0, 2, 1), False)
    ]
    assert _ours(jax.make_jaxpr(lambda a: jax_ops.transpose(a))(jnp.ones((3, 4)))) == [
        ((1, 0), False)
    ]
    c = jnp.ones((2, 3, 4), jnp.complex64)
    assert _ours(jax.make_jaxpr(lambda a: jax_ops.transpose(a, conjugate=True))(c)) == [
        ((0, 2, 1), True)
    ]


@pytest.mark.parametrize("axes", [(2, 0, 1), (1, 2, 0), (0, 2, 1), (2, 1, 0)])
def test_grad_holds_the_inverse_permute(axes):
    x = jnp.ones((2, 3, 4))
    w = jnp.arange(24.0).reshape(tuple(x.shape[a] for a in axes))
    jaxpr = jax.make_jaxpr(jax.grad(lambda a: (jax_ops.permute(a, axes) * w).sum()))(x)
    inverse = tuple(int(i) for i in np.argsort(axes))
    assert _ours(jaxpr) == [(axes, False), (inverse, False)]


def test_grad_of_the_conjugate_transpose_is_the_conjugate_transpose():
    c = jnp.ones((3, 4), jnp.complex64)
    f = lambda a: jnp.abs(jax_ops.transpose(a, conjugate=True) * (1 + 2j)).sum()  # noqa: E731
    assert _ours(jax.make_jaxpr(jax.grad(f))(c)) == [((1, 0), True), ((1, 0), True)]


@pytest.mark.parametrize("in_axis", [0, 1, 2, -1])
def test_vmap_keeps_one_permute_and_moves_the_batch_to_the_front(in_axis):
    x = jnp.ones((2, 3, 4))
    f = jax.vmap(lambda a: jax_ops.permute(a, (1, 0)), in_axes=in_axis)
    jaxpr = jax.make_jaxpr(f)(x)
    d = in_axis % 3
    logical = [a for a in range(3) if a != d]  # the unbatched array's axes in x
    assert _ours(jaxpr) == [((d, logical[1], logical[0]), False)]
    unbatched = tuple(x.shape[a] for a in logical)
    assert jax.eval_shape(f, x).shape == (x.shape[d], unbatched[1], unbatched[0])


def test_vmap_out_axes_and_nesting():
    x = jnp.ones((5, 2, 3, 4))
    f = jax.vmap(jax.vmap(lambda a: jax_ops.permute(a, (1, 0)), in_axes=1), in_axes=0, out_axes=2)
    assert jax.eval_shape(f, x).shape == (3, 4, 5, 2)
    np.testing.assert_array_equal(
        f(x), jax.vmap(jax.vmap(lambda a: a.T, in_axes=1), in_axes=0, out_axes=2)(x)
    )


def test_vmap_of_the_conjugate_transpose():
    c = jnp.ones((2, 3, 4), jnp.complex64)
    front = jax.make_jaxpr(jax.vmap(lambda a: jax_ops.transpose(a, conjugate=True)))(c)
    assert _ours(front) == [((0, 2, 1), True)]  # still a conjugate transpose: one call
    middle = jax.make_jaxpr(jax.vmap(lambda a: jax_ops.transpose(a, conjugate=True), in_axes=1))(c)
    assert _ours(middle) == [((1, 2, 0), False)]
    assert "conj" in {e.primitive.name for e in _eqns(middle)}


def test_nested_jit_vmap_grad():
    x = jnp.ones((6, 3, 4, 5))
    w = jnp.arange(60.0).reshape(5, 3, 4)
    f = jax.jit(jax.vmap(jax.grad(lambda a: (jax_ops.permute(a, (2, 0, 1)) * w).sum())))
    found = _ours(jax.make_jaxpr(f)(x))
    # the forward permute batched (batch to the front); the cotangent (w) is the same for
    # every batch element, so its inverse permute stays unbatched
    assert found == [((0, 3, 1, 2), False), ((1, 2, 0), False)]
    np.testing.assert_allclose(f(x), jnp.broadcast_to(jnp.transpose(w, (1, 2, 0)), x.shape))
    g = jax.jit(jax.vmap(jax.grad(lambda a: (jax_ops.permute(a, (2, 0, 1)) ** 2 * w).sum())))
    assert _ours(jax.make_jaxpr(g)(x)) == [((0, 3, 1, 2), False), ((0, 2, 3, 1), False)]
    np.testing.assert_allclose(g(x), 2 * x * jnp.transpose(w, (1, 2, 0)))


def test_jvp_and_linear_transpose():
    x = jnp.arange(24.0).reshape(2, 3, 4)
    t = jnp.ones_like(x) * 3
    y, ty = jax.jvp(lambda a: jax_ops.permute(a, (2, 0, 1)), (x,), (t,))
    np.testing.assert_array_equal(y, jnp.transpose(x, (2, 0, 1)))
    np.testing.assert_array_equal(ty, jnp.transpose(t, (2, 0, 1)))
    (back,) = jax.linear_transpose(lambda a: jax_ops.permute(a, (2, 0, 1)), x)(y)
    np.testing.assert_array_equal(back, x)


def test_integer_inputs_differentiate_to_zero_tangents():
    x = jnp.arange(6, dtype=jnp.int8).reshape(2, 3)
    y, ty = jax.jvp(lambda a: jax_ops.transpose(a), (x,), (np.zeros(x.shape, jax.dtypes.float0),))
    np.testing.assert_array_equal(y, x.T)
    assert ty.dtype == jax.dtypes.float0 and ty.shape == (3, 2)


# --- values on XLA's CPU backend (the rules; the lowering there is XLA's transpose) ------------
DTYPES = ["float32", "bfloat16", "float16", "int8", "complex64"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_values_under_jit_vmap_and_grad(rng, dtype):
    for shape, axes in [
        ((3, 7), (1, 0)),
        ((3, 7, 197), (2, 0, 1)),
        ((2, 3, 5, 7), (3, 1, 0, 2)),
        ((1, 3, 1, 5, 2), (4, 0, 3, 2, 1)),
    ]:
        x = _random(rng, shape, dtype)
        np.testing.assert_array_equal(
            jax.jit(lambda a, ax=axes: jax_ops.permute(a, ax))(x), jnp.transpose(x, axes)
        )
        batched = jnp.stack([x, x + 1])
        got = jax.vmap(lambda a, ax=axes: jax_ops.permute(a, ax), in_axes=0, out_axes=1)(batched)
        np.testing.assert_array_equal(
            got, jax.vmap(lambda a, ax=axes: jnp.transpose(a, ax), out_axes=1)(batched)
        )
    if np.dtype(dtype).kind == "f" or dtype == "bfloat16":
        x = _random(rng, (3, 7, 5), dtype)
        w = _random(rng, (5, 3, 7), dtype)
        ours = jax.grad(lambda a: (jax_ops.permute(a, (2, 0, 1)) * w).astype(jnp.float32).sum())(x)
        ref = jax.grad(lambda a: (jnp.transpose(a, (2, 0, 1)) * w).astype(jnp.float32).sum())(x)
        np.testing.assert_array_equal(ours, ref)


def test_values_of_the_conjugate_transpose(rng):
    c = _random(rng, (4, 7, 3), "complex64")
    np.testing.assert_array_equal(
        jax.jit(lambda a: jax_ops.transpose(a, conjugate=True))(c), jnp.conj(jnp.swapaxes(c, 1, 2))
    )
    w = _random(rng, (4, 3, 7), "complex64")
    f = lambda a: jnp.abs(jax_ops.transpose(a, conjugate=True) * w).sum() ** 2  # noqa: E731
    g = lambda a: jnp.abs(jnp.conj(jnp.swapaxes(a, 1, 2)) * w).sum() ** 2  # noqa: E731
    np.testing.assert_allclose(jax.grad(f)(c), jax.grad(g)(c), rtol=1e-5)
    for axis in (0, 1, 2):
        ours = jax.vmap(lambda a: jax_ops.transpose(a, conjugate=True), in_axes=axis)(c)
        ref = jax.vmap(lambda a: jnp.conj(a.T), in_axes=axis)(c)
        np.testing.assert_array_equal(ours, ref)


def test_eager_binds_on_concrete_arrays(rng):
    x = _random(rng, (3, 5, 7), "float32")
    np.testing.assert_array_equal(jax_ops.transpose(x), jnp.swapaxes(x, 1, 2))
    np.testing.assert_array_equal(jax_ops.permute(x, (1, 2, 0)), jnp.transpose(x, (1, 2, 0)))
    assert jax_ops.permute(jnp.ones((0, 3)), (1, 0)).shape == (3, 0)


# --- errors at trace time: the eager calls' own ----------------------------------------------------
def _eager_error(call):
    with pytest.raises(errors.AutotransposeError) as info:
        call()
    return type(info.value), str(info.value)


def _traced_error(fn, x):
    with pytest.raises(errors.AutotransposeError) as info:
        jax.make_jaxpr(jax.jit(fn))(x)
    return type(info.value), str(info.value)


@pytest.mark.parametrize("axes", [(0, 0, 1), (0, 1), (0, 1, 3), ("a", 0, 1), (0, 1, 2, 3)])
def test_bad_axes_raise_as_eager(axes):
    eager = _eager_error(lambda: at.permute(np.zeros((2, 3, 4), np.float32), axes))
    assert _traced_error(lambda a: jax_ops.permute(a, axes), jnp.zeros((2, 3, 4))) == eager
    assert eager[0] is errors.AxesError


@pytest.mark.parametrize("dtype", ["int4", "uint4", "float4_e2m1fn"])
def test_packed_dtypes_are_refused_at_trace_time(dtype):
    """JAX packs these two values to a byte on the GPU: moving bytes would move pairs. NumPy
    keeps one a byte, so its arrays of them are moved (as their bytes)."""
    x = jnp.zeros((2, 3), getattr(jnp, dtype))
    for fn in (jax_ops.transpose, lambda a: jax_ops.permute(a, (1, 0))):
        kind, text = _traced_error(fn, x)
        assert kind is errors.UnsupportedDtypeError and "packed" in text and dtype in text
    assert element_type(np.dtype(getattr(jnp, dtype))).size == 1


@pytest.mark.parametrize(
    "dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e8m0fnu"]
)
def test_narrow_float_dtypes_trace(dtype):
    """Every 1- or 2-byte float JAX has is moved by its size: the primitive binds."""
    if not hasattr(jnp, dtype):
        pytest.skip(f"this jax has no {dtype}")
    x = jnp.zeros((2, 3, 4), getattr(jnp, dtype))
    jaxpr = jax.make_jaxpr(lambda a: jax_ops.permute(a, (2, 0, 1)))(x)
    assert jaxpr.out_avals[0].shape == (4, 2, 3)
    assert jaxpr.out_avals[0].dtype == x.dtype


def test_conjugate_of_real_raises_as_eager():
    eager = _eager_error(lambda: at.transpose(np.zeros((2, 3), np.float32), conjugate=True))
    traced = _traced_error(lambda a: jax_ops.transpose(a, conjugate=True), jnp.zeros((2, 3)))
    assert traced == eager and eager[0] is errors.UnsupportedDtypeError


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4, 5), ()])
def test_transpose_of_other_ranks_raises_as_eager(shape):
    eager = _eager_error(lambda: at.transpose(np.zeros(shape, np.float32)))
    assert _traced_error(lambda a: jax_ops.transpose(a), jnp.zeros(shape)) == eager
    assert eager[0] is errors.ShapeError


def test_more_than_eight_dims_raise_as_eager():
    shape = (1,) * 9
    axes = tuple(range(9))[::-1]
    eager = _eager_error(lambda: at.permute(np.zeros(shape, np.float32), axes))
    assert _traced_error(lambda a: jax_ops.permute(a, axes), jnp.zeros(shape)) == eager
    assert eager[0] is errors.ShapeError


def test_only_jax_values_are_taken():
    with pytest.raises(errors.InputTypeError, match="JAX arrays and tracers"):
        jax_ops.transpose(np.zeros((2, 3)))


# --- the CUDA lowering, with stand-in launches -------------------------------------------------------
class _Stand:
    """What permuter.device_program returns, reduced to what the lowering reads."""

    def __init__(self, address: int) -> None:
        self.address = address


@pytest.fixture
def cuda_lowering(monkeypatch):
    """Lower for CUDA on this machine: launches made by a stand-in device_program (recorded),
    two local GPUs, no registration with XLA (nothing is compiled)."""
    made: list[tuple] = []

    def device_program(device, shape, axes, dtype, *, conjugate=False):
        made.append((device, shape, axes, np.dtype(dtype).name, conjugate))
        return _Stand(0x10000 + 0x100 * len(made))

    monkeypatch.setattr(permuter, "device_program", device_program)
    monkeypatch.setattr(_jax_handler, "register", lambda: None)
    monkeypatch.setattr(jax_ops, "lowering_devices", lambda ctx: [0, 1])
    monkeypatch.setattr(jax_ops, "_programs", {})

    def lower(fn, x):
        return jax.jit(fn).trace(x).lower(lowering_platforms=("cuda",)).as_text()

    return made, lower


def test_cuda_lowering_is_one_custom_call_per_permute(cuda_lowering):
    made, lower = cuda_lowering
    text = lower(lambda a: jax_ops.permute(a, (0, 2, 1)), jnp.zeros((2, 3, 4), jnp.bfloat16))
    assert text.count(f"stablehlo.custom_call @{NAME}") == 1
    assert "stablehlo.transpose" not in text
    assert "programs = dense<[65792, 66048]> : tensor<2xui64>" in text
    assert "devices = dense<[0, 1]> : tensor<2xi32>" in text
    assert "launches = dense<0> : tensor<2xi32>" in text
    assert "nbytes = 48 : ui64" in text
    assert made == [
        (0, (2, 3, 4), (0, 2, 1), "bfloat16", False),
        (1, (2, 3, 4), (0, 2, 1), "bfloat16", False),
    ]


def test_cuda_lowering_fuses_and_reuses(cuda_lowering):
    made, lower = cuda_lowering
    x = jnp.zeros((6, 1, 5, 7, 2))
    lower(lambda a: jax_ops.permute(a, (3, 4, 1, 0, 2)), x)  # (6*5, 7*2) swapped
    lower(lambda a: jax_ops.permute(a, (3, 4, 0, 1, 2)), x)  # the same bytes, the same launches
    assert made == [
        (0, (30, 14), (1, 0), "float32", False),
        (1, (30, 14), (1, 0), "float32", False),
    ]


def test_cuda_lowering_of_the_conjugate_transpose(cuda_lowering):
    made, lower = cuda_lowering
    c = jnp.zeros((2, 5, 3, 4), jnp.complex64)
    text = lower(jax.vmap(lambda a: jax_ops.transpose(a, conjugate=True)), c)
    assert text.count(f"stablehlo.custom_call @{NAME}") == 1 and "conj" not in text
    assert made[0] == (0, (10, 3, 4), (0, 2, 1), "complex64", True)


@pytest.mark.parametrize(
    "shape, axes", [((0, 3), (1, 0)), ((3, 1, 5), (1, 0, 2)), ((4, 5), (0, 1)), ((), ())]
)
def test_cuda_lowering_of_calls_that_move_nothing_is_xla(cuda_lowering, shape, axes):
    made, lower = cuda_lowering
    text = lower(lambda a: jax_ops.permute(a, axes), jnp.zeros(shape))
    assert NAME not in text and made == []


def test_cuda_lowering_without_the_compiled_launcher(cuda_lowering, monkeypatch):
    _, lower = cuda_lowering
    monkeypatch.setattr(permuter, "device_program", lambda *a, **k: _Stand(0))
    monkeypatch.setenv(_native.ENV_VAR, "0")
    with pytest.raises(errors.KernelLaunchError, match=f"{_native.ENV_VAR}=0"):
        lower(lambda a: jax_ops.transpose(a), jnp.zeros((3, 4)))


def test_cuda_export_is_refused(cuda_lowering):
    with pytest.raises(errors.InputTypeError, match="cannot be exported"):
        jax.export.export(jax.jit(lambda a: jax_ops.transpose(a)), platforms=["cuda"])(
            jnp.zeros((3, 4))
        )


def test_fused():
    assert jax_ops.fused((2, 3, 4), (0, 2, 1)) == ((2, 3, 4), (0, 2, 1))
    assert jax_ops.fused((2, 3, 4), (1, 2, 0)) == ((2, 12), (1, 0))
    assert jax_ops.fused((5, 1, 7), (0, 2, 1)) == ((35,), (0,))
    assert jax_ops.fused((1, 1), (1, 0)) == ((), ())
    assert jax_ops.fused((2, 3, 4, 5), (2, 3, 0, 1)) == ((6, 20), (1, 0))
    assert jax_ops.fused((2, 3, 4, 5), (3, 1, 2, 0)) == ((2, 12, 5), (2, 1, 0))


# --- the FFI handler ----------------------------------------------------------------------------------
needs_cxx = pytest.mark.skipif(_jax_handler.cxx() is None, reason="no C++ compiler")


@needs_cxx
def test_handler_builds_against_the_installed_jaxlib(tmp_path, monkeypatch):
    monkeypatch.setattr(_native, "cache_dir", lambda: tmp_path)
    path = _jax_handler.library_path()
    import jaxlib

    assert path.parent == tmp_path and jaxlib.__version__ in path.name
    lib = _jax_handler.load(_jax_handler.build(path))
    for symbol in ("AtJaxPermute", "AtJaxPermuteHost", "at_jax_bind", "at_transpose", "at_run"):
        assert getattr(lib, symbol)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # nothing left beside it


def test_handler_build_failure_names_the_compiler_output(tmp_path, monkeypatch):
    fake = tmp_path / "fakecxx"
    fake.write_text("#!/bin/sh\necho 'fatal: no such header' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(_native, "cache_dir", lambda: tmp_path)
    with pytest.raises(errors.KernelCompileError, match="no such header") as info:
        _jax_handler.build(tmp_path / "x.so", str(fake))
    assert "no such header" in info.value.log


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
    """cuCtxGetCurrent / cuCtxSetCurrent / cuMemcpyDtoDAsync / cuLaunchKernel on host memory:
    the "kernel" transposes an (m, n) float32 matrix whose sides are its first two scalars."""

    def __init__(self, fail: int = 0) -> None:
        self.current, self.fail, self.calls = 0, fail, []
        self.get, self.set = GET(self._get), SET(self._set)
        self.copy, self.launch = COPY(self._copy), LAUNCH(self._launch)

    def _get(self, out):
        out[0] = self.current or None
        return 0

    def _set(self, ctx):
        self.current = ctx or 0
        return 0

    def _copy(self, dst, src, nbytes, stream):
        self.calls.append(("copy", self.current))
        ctypes.memmove(dst, src, nbytes)
        return 0

    def _launch(self, func, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        self.calls.append(("launch", self.current))
        if self.fail:
            return self.fail
        src, dst = (ctypes.c_uint64.from_address(params[i]).value for i in (0, 1))
        m, n = (ctypes.c_int64.from_address(params[i]).value for i in (2, 3))
        a = np.ctypeslib.as_array((ctypes.c_float * (m * n)).from_address(src)).reshape(m, n)
        np.ctypeslib.as_array((ctypes.c_float * (m * n)).from_address(dst))[:] = a.T.ravel()
        return 0

    @staticmethod
    def address(fn) -> int:
        return ctypes.cast(fn, ctypes.c_void_p).value


def _launch_struct(driver: HostDriver, m: int, n: int) -> _native.Spec:
    spec = _native.Spec()
    spec.get, spec.set, spec.launch = (
        driver.address(f) for f in (driver.get, driver.set, driver.launch)
    )
    spec.func, spec.ctx = 0xF00, 0xC7C
    spec.dims[:] = [1] * 7
    spec.nbytes = 32
    spec.offsets[:] = [0, 8, 16, 24, 32, 40, 48, 56, 64, 68, 72]
    spec.params[2], spec.params[3] = m, n
    return spec


def _copy_program(driver: HostDriver, nbytes: int) -> tuple[_native.CProgram, object]:
    steps = (_native.Step * 2)()
    half = nbytes // 2
    for k, (off, size) in enumerate([(half, nbytes - half), (0, half)]):  # two copies, out of order
        steps[k].launch, steps[k].in_off, steps[k].out_off, steps[k].nbytes = None, off, off, size
    prog = _native.CProgram()
    prog.get, prog.set, prog.copy = (
        driver.address(f) for f in (driver.get, driver.set, driver.copy)
    )
    prog.ctx, prog.count = 0xC7C, 2
    prog.steps = ctypes.cast(steps, ctypes.POINTER(_native.Step))
    return prog, steps


def _host_call(out_shape, entries, nbytes, dtype=jnp.float32):
    call = jax.ffi.ffi_call(_jax_handler.HOST_TARGET, jax.ShapeDtypeStruct(out_shape, dtype))
    return jax.jit(lambda a: call(a, **jax_ops.attributes(entries, nbytes)))


@pytest.fixture(scope="module")
def host_handler():
    if _jax_handler.cxx() is None:
        pytest.skip("no C++ compiler")
    _jax_handler.register_host()


def test_handler_runs_a_launch(host_handler, rng):
    driver = HostDriver()
    spec = _launch_struct(driver, 5, 7)
    x = jnp.asarray(rng.standard_normal((5, 7)).astype(np.float32))
    entry = jax_ops.Entry(3, ctypes.addressof(spec), True)
    y = _host_call((7, 5), [entry], 140)(x)
    np.testing.assert_array_equal(y, np.asarray(x).T)
    assert driver.calls == [("launch", 0xC7C)] and driver.current == 0  # the caller's put back


def test_handler_runs_a_program(host_handler, rng):
    driver = HostDriver()
    prog, _steps = _copy_program(driver, 96)
    x = jnp.asarray(rng.standard_normal(24).astype(np.float32))
    y = _host_call((24,), [jax_ops.Entry(0, ctypes.addressof(prog), False)], 96)(x)
    np.testing.assert_array_equal(y, x)
    assert driver.calls == [("copy", 0xC7C)] * 2 and driver.current == 0


def test_handler_refuses_other_sizes(host_handler):
    driver = HostDriver()
    spec = _launch_struct(driver, 5, 7)
    entry = jax_ops.Entry(0, ctypes.addressof(spec), True)
    with pytest.raises(Exception, match="made for 144 bytes") as info:
        _host_call((7, 5), [entry], 144)(jnp.zeros((5, 7), jnp.float32)).block_until_ready()
    assert "input of 140 bytes" in str(info.value) and driver.calls == []


def test_handler_names_a_failed_launch(host_handler):
    driver = HostDriver(fail=700)
    spec = _launch_struct(driver, 5, 7)
    entry = jax_ops.Entry(2, ctypes.addressof(spec), True)
    with pytest.raises(Exception, match=r"launching on CUDA device 2 failed: CUresult 700"):
        _host_call((7, 5), [entry], 140)(jnp.zeros((5, 7), jnp.float32)).block_until_ready()


def test_handler_needs_a_stream_to_choose_between_devices(host_handler):
    driver = HostDriver()
    a, b = _launch_struct(driver, 5, 7), _launch_struct(driver, 5, 7)
    entries = [
        jax_ops.Entry(0, ctypes.addressof(a), True),
        jax_ops.Entry(1, ctypes.addressof(b), True),
    ]
    with pytest.raises(Exception, match=r"several \(CUDA devices \[0, 1\]\)"):
        _host_call((7, 5), entries, 140)(jnp.zeros((5, 7), jnp.float32)).block_until_ready()

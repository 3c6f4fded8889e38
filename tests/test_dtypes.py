"""Which dtypes are moved, by their size, and which are refused with what message: NumPy and
ml_dtypes here, PyTorch's where PyTorch is installed (no GPU needed), JAX's packed types, and
the DLPack codes our JAX exports carry."""

from __future__ import annotations

import numpy as np
import pytest

from autotranspose import errors
from autotranspose.plans.dtypes import ELEMENT_SIZES, element_type
from autotranspose.runtime.dlpack import dl_dtype

ml_dtypes = pytest.importorskip("ml_dtypes")


@pytest.mark.parametrize(
    "dtype, size, complex_",
    [
        (np.bool_, 1, False),
        (np.uint64, 8, False),
        (np.complex64, 8, True),
        (np.complex128, 16, True),
        ("datetime64[ns]", 8, False),
        ("V1", 1, False),  # raw bytes, e.g. a __cuda_array_interface__ typestr '<V1'
        ("V16", 16, False),
        ("bfloat16", 2, False),
    ],
)
def test_numpy_dtypes_by_size(dtype, size, complex_):
    et = element_type(dtype)
    assert (et.size, et.complex, et.bits) == (size, complex_, 0)


def test_every_ml_dtypes_type_is_moved_by_its_size():
    """No list of names: any ml_dtypes type (float8/6/4 formats, int4/2, complex32...)
    resolves by its itemsize, whatever kind NumPy gives it ('V', 'f', 'W')."""
    seen = 0
    for name in dir(ml_dtypes):
        t = getattr(ml_dtypes, name)
        if not isinstance(t, type) or t.__module__ != "ml_dtypes":
            continue
        try:
            dt = np.dtype(t)
        except TypeError:
            continue
        et = element_type(dt)
        assert et.size == dt.itemsize in ELEMENT_SIZES and et.name == dt.name
        assert et.complex == ("complex" in name)
        seen += 1
    assert seen >= 10
    assert element_type(ml_dtypes.int4).bits == 4 and element_type(ml_dtypes.int2).bits == 2
    assert element_type(ml_dtypes.float4_e2m1fn).bits == 4
    assert element_type(ml_dtypes.float8_e4m3fn).bits == 0


@pytest.mark.parametrize(
    "dtype, words",
    [
        (object, "not plain bytes"),
        ("i4,i4", "not plain bytes"),
        ("(2,)i2", "not plain bytes"),
        ("U4", "string type"),
        ("S3", "string type"),
        ("V3", "3-byte elements"),
        ("V32", "32-byte elements"),
        ("nonsense", "not a dtype"),
    ],
)
def test_what_is_not_bytes_of_a_kernel_size_is_refused_with_what_to_do(dtype, words):
    with pytest.raises(errors.UnsupportedDtypeError, match=words) as info:
        element_type(dtype)
    assert "convert" in str(info.value) or "pass a" in str(info.value)


def test_packed_types_are_refused_where_jax_packs_them():
    element_type(ml_dtypes.float8_e5m2).check_whole_values("JAX")  # one a byte: fine
    with pytest.raises(errors.UnsupportedDtypeError, match=r"int4 .*packed.*astype"):
        element_type(ml_dtypes.int4).check_whole_values("JAX")


def test_conjugate_needs_a_conjugating_kernel():
    element_type(np.complex64).check_conjugable()
    with pytest.raises(errors.UnsupportedDtypeError, match=r"complex32.*bitwise_xor_"):
        element_type(ml_dtypes.complex32).check_conjugable()
    with pytest.raises(errors.UnsupportedDtypeError, match="already the conjugate"):
        element_type(np.float32).check_conjugable()


def test_dlpack_codes_of_our_exports():
    """DLPack 1.1's codes where it has one (what JAX exports the float8 formats as), the
    classic ones by name, raw unsigned bytes for the rest."""
    assert dl_dtype("float8_e4m3fn", 1) == (10, 8)
    assert dl_dtype("float8_e5m2", 1) == (12, 8)
    assert dl_dtype("float8_e8m0fnu", 1) == (14, 8)
    assert dl_dtype("bfloat16", 2) == (4, 16)
    assert dl_dtype("complex64", 8) == (5, 64)
    assert dl_dtype("uint32", 4) == (1, 32)
    assert dl_dtype("int8", 1) == (0, 8)
    assert dl_dtype("bool", 1) == (6, 8)
    assert dl_dtype("datetime64[ns]", 8) == (1, 64)
    assert dl_dtype("void8", 1) == (1, 8)


def test_jax_exports_the_codes_we_export():
    jnp = pytest.importorskip("jax.numpy")
    from autotranspose.runtime.dlpack import _capsule_get_pointer, _DLManagedTensor

    for name in ("float8_e4m3fn", "float8_e5m2", "bfloat16", "float16"):
        if not hasattr(jnp, name):
            continue
        x = jnp.zeros((2, 3), getattr(jnp, name))
        try:
            capsule = x.__dlpack__()
        except Exception as exc:  # an older jaxlib without DLPack 1.1's float8 codes
            pytest.skip(f"this jaxlib exports no {name}: {exc}")
        t = _DLManagedTensor.from_address(_capsule_get_pointer(capsule, b"dltensor")).dl_tensor
        size = np.dtype(x.dtype).itemsize
        assert (t.dtype.code, t.dtype.bits) == dl_dtype(name, size), name


# --- PyTorch (CPU is enough: dtypes only) ---------------------------------------------------------
TORCH_SIZES = {
    "bool": 1,
    "uint8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1,
    "bits8": 1,
    "int16": 2,
    "uint16": 2,
    "bfloat16": 2,
    "bits16": 2,
    "complex32": 4,
    "uint32": 4,
    "float32": 4,
    "uint64": 8,
    "complex64": 8,
    "complex128": 16,
}


@pytest.mark.parametrize("name", sorted(TORCH_SIZES))
def test_torch_dtypes_by_itemsize(name):
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, name, None)
    if dtype is None:
        pytest.skip(f"this PyTorch has no {name}")
    et = element_type(dtype)
    assert (et.name, et.size, et.complex) == (name, TORCH_SIZES[name], dtype.is_complex)


def test_torch_quantized_dtypes_are_refused():
    torch = pytest.importorskip("torch")
    with pytest.raises(errors.UnsupportedDtypeError, match=r"quantized.*int_repr"):
        element_type(torch.qint8)

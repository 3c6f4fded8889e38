"""Bad input gets an autotranspose error that names the problem and the fix, before anything
touches a GPU or an output buffer. These run without a GPU (and without pycuda)."""

from __future__ import annotations

import numpy as np
import pytest

import autotranspose as at
from autotranspose import errors
from autotranspose.runtime.arrays import check_output, view


def test_one_dimensional_input():
    with pytest.raises(errors.ShapeError, match=r"1 dimension\(s\).*2-D matrix"):
        at.transpose(np.arange(10.0))


def test_four_dimensional_input():
    with pytest.raises(errors.ShapeError, match="reshape"):
        at.transpose(np.zeros((2, 2, 2, 2)))


@pytest.mark.parametrize("dtype", ["object", "U4", "S3", "V12"])
def test_unsupported_dtype(dtype):
    with pytest.raises(errors.UnsupportedDtypeError, match=r"supported|convert"):
        at.transpose(np.zeros((4, 4), dtype=dtype))


def test_column_major_layout_names_the_free_alternative():
    """A forced config is a matrix kernel, whose rows are runs of consecutive elements (any
    other layout is served through permute(): tests/test_strided_gpu.py)."""
    x = _Cai((8, 6), (8, 64), "<c8")
    with pytest.raises(errors.LayoutError, match=r"innermost stride .*\.T view"):
        at.transpose(x, config=at.KernelConfig(8))


def test_strided_columns():
    with pytest.raises(errors.LayoutError, match="innermost stride 2"):
        at.transpose(_Cai((8, 4), (128, 16), "<c8"), config=at.KernelConfig(8))


def test_negative_row_stride():
    with pytest.raises(errors.LayoutError, match="negative"):
        at.transpose(
            _Cai((8, 8), (-64, 8), "<c8", ptr=0x7000_0000 + 7 * 64), config=at.KernelConfig(8)
        )


def test_numpy_arrays_of_any_layout_pass_the_matrix_checks():
    """NumPy arrays are copied contiguously to the GPU: their strides are never read."""
    for x in (np.zeros((8, 6), order="F"), np.zeros((8, 8))[:, ::2], np.zeros((8, 8))[::-1]):
        assert view(x).ld == x.shape[1]


def test_conjugate_of_a_real_array():
    with pytest.raises(errors.UnsupportedDtypeError, match="complex64 or complex128"):
        at.transpose(np.zeros((4, 4), np.float32), conjugate=True)


def test_config_of_the_wrong_element_size():
    with pytest.raises(errors.ConfigError, match="4-byte elements but x holds 2-byte float16"):
        at.transpose(np.zeros((4, 4), np.float16), config=at.KernelConfig(4))
    with pytest.raises(errors.ConfigError, match=r"must be an autotranspose\.KernelConfig"):
        at.transpose(np.zeros((4, 4), np.float16), config={"elem_bytes": 2})


def test_bad_stream_object():
    with pytest.raises(errors.InputTypeError, match="stream must be") as caught:
        at.transpose(np.zeros((4, 4), np.float32), stream="fast")
    assert isinstance(caught.value, TypeError)


@pytest.mark.parametrize(
    "x", [[[1, 2], [3, 4]], [[1, 2]], ((1.0,),), "ab", 3.5, None, {"a": 1}, range(4)]
)
def test_not_an_array(x):
    """What the README promises: an autotranspose.errors exception (still a TypeError)."""
    with pytest.raises(
        errors.InputTypeError, match=r"takes a pycuda GPUArray.*np\.asarray"
    ) as caught:
        at.transpose(x)
    assert isinstance(caught.value, TypeError)


def test_an_out_that_is_not_an_array(rng):
    x = rng.standard_normal((3, 5)).astype(np.float32)
    with pytest.raises(errors.InputTypeError, match=r"out is a builtins\.list"):
        at.transpose(x, x.T.tolist())


_EMPTY = [(0, 5), (5, 0), (0, 0), (2, 0, 5), (2, 5, 0), (0, 3, 4)]


@pytest.mark.parametrize("shape", _EMPTY)
@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "complex128"])
def test_an_empty_numpy_array_transposes_to_an_empty_array(shape, dtype):
    """NumPy 2 gives empty arrays zero strides; nothing needs a GPU."""
    x = np.empty(shape, dtype)
    y = at.transpose(x)
    want = (*shape[:-2], shape[-1], shape[-2])
    assert type(y) is np.ndarray and y.shape == want and y.dtype == x.dtype
    out = np.empty(want, dtype)
    assert at.transpose(x, out) is out
    with pytest.raises(errors.OutputError, match="shape"):
        at.transpose(x, np.empty(tuple(d + 1 for d in want), dtype))


def test_an_empty_view_of_a_strided_array(rng):
    """An empty slice keeps its parent's strides, column steps included."""
    x = rng.standard_normal((6, 8))
    assert at.transpose(x[3:3]).shape == (8, 0)
    assert at.transpose(x[:, 2:2]).shape == (0, 6)
    assert at.transpose(x[3:3, ::2]).shape == (4, 0)


@pytest.mark.parametrize(
    ("out", "message"),
    [
        (np.zeros((5, 4), np.float32), "shape"),
        (np.zeros((6, 4), np.float64), "dtype float64; x has float32"),
    ],
)
def test_wrong_out_is_rejected_and_left_untouched(out, message):
    x = np.ones((4, 6), np.float32)
    before = out.copy()
    with pytest.raises(errors.OutputError, match=message):
        at.transpose(x, out)
    assert np.array_equal(out, before)


def test_out_overlapping_x():
    buf = np.zeros((2, 8, 8), np.float32)
    with pytest.raises(errors.OutputError, match="overlaps"):
        check_output(view(buf[0]), view(buf[0]))
    check_output(view(buf[0]), view(buf[1]))  # a separate buffer is fine


class _Cai:
    def __init__(self, shape, strides, typestr="<f4", ptr=0x7000_0000):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "strides": strides,
            "typestr": typestr,
            "data": (ptr, False),
            "version": 3,
        }


def test_cuda_array_interface_layouts_are_checked_before_any_driver_call():
    with pytest.raises(errors.LayoutError, match="innermost stride 3"):
        view(_Cai((4, 4), (48, 12)))
    with pytest.raises(errors.LayoutError, match="whole 4-byte elements"):
        view(_Cai((4, 4), (18, 4)))
    with pytest.raises(errors.ShapeError):
        view(_Cai((4,), None))


def _emptier(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Another empty shape of as many dimensions: a wrong `out` that has no memory either."""
    return (*(d + 1 for d in shape[:-1]), 0)


@pytest.mark.parametrize("shape", _EMPTY)
@pytest.mark.parametrize("typestr", ["|b1", "|i1", "<f2", "<f4", "<c16"])
def test_an_empty_cai_array_with_no_memory_needs_no_gpu(shape, typestr):
    """The CUDA Array Interface allows pointer 0 for an empty array: there is no device to
    ask about, nothing to move, and `out` is checked as usual and comes back untouched."""
    x = _Cai(shape, None, typestr, ptr=0)
    want = (*shape[:-2], shape[-1], shape[-2])
    out = _Cai(want, None, typestr, ptr=0)
    assert at.transpose(x, out) is out
    with pytest.raises(errors.OutputError, match=r"out has shape .* needs out of shape"):
        at.transpose(x, _Cai(_emptier(want), None, typestr, ptr=0))
    other = "<f8" if typestr != "<f8" else "<f4"
    with pytest.raises(errors.OutputError, match=r"dtype .* must match"):
        at.transpose(x, _Cai(want, None, other, ptr=0))
    with pytest.raises(errors.OutputError, match="both be GPU arrays or both NumPy arrays"):
        at.transpose(x, np.empty(want, np.dtype(typestr)))
    with pytest.raises(errors.OutputError, match="both be GPU arrays or both NumPy arrays"):
        at.transpose(np.empty(shape, np.dtype(typestr)), out)


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (2, 4, 7)])
def test_a_null_pointer_with_elements_is_refused(shape):
    """Pointer 0 is for empty arrays only; with elements it is the producer's bug, refused
    before any driver call, as x or as out."""
    with pytest.raises(errors.DeviceError, match=r"x has data pointer 0 .*only an empty array"):
        at.transpose(_Cai(shape, None, ptr=0))
    with pytest.raises(errors.DeviceError, match=r"x has data pointer 0 .*only an empty array"):
        at.permute(_Cai(shape, None, ptr=0), tuple(reversed(range(len(shape)))))
    want = (*shape[:-2], shape[-1], shape[-2])
    with pytest.raises(errors.DeviceError, match=r"out has data pointer 0 .*NumPy array"):
        at.transpose(np.ones(shape, np.float32), _Cai(want, None, ptr=0))


def test_no_gpu_stack_says_what_to_install():
    """On a machine without pycuda (or without a driver) the error names the fix."""
    try:
        import pycuda.driver as drv

        drv.init()
        if drv.Device.count():
            pytest.skip("this machine has a working CUDA device")
    except ImportError:
        pass
    except Exception:
        pass
    with pytest.raises(errors.DeviceError, match=r"autotranspose\[cuda\]|driver|nvidia-smi"):
        at.transpose(np.ones((4, 4), np.float32))


def test_every_error_is_an_autotranspose_error():
    for name in dir(errors):
        obj = getattr(errors, name)
        if (
            isinstance(obj, type)
            and issubclass(obj, Exception)
            and obj.__module__ == errors.__name__
        ):
            assert issubclass(obj, errors.AutotransposeError)

"""transpose() on a real GPU: every dtype, awkward shapes, batches, pitched slices, peers'
arrays, poisoned outputs, a sample of the whole config space, and one case past 2**31."""

from __future__ import annotations

import numpy as np
import pytest
from _gpu import assert_match_reference, reference_problems

import autotranspose as at
from autotranspose.kernels.config import KernelConfig, config_space

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("pycuda_primary")]

DTYPES = [
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "float16",
    "int32",
    "uint32",
    "float32",
    "int64",
    "uint64",
    "float64",
    "complex64",
    "complex128",
]


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Random values covering every bit of the element (so a wrong byte shows)."""
    dt = np.dtype(dtype)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    if dt == np.bool_:
        raw = raw & 1
    arr = raw.view(dt).reshape(shape)
    return arr


def expected(x: np.ndarray, conj: bool = False) -> np.ndarray:
    y = np.swapaxes(x, -1, -2)
    return np.conj(y) if conj else y


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality: NaN payloads and -0.0 must survive a transpose."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and a.view(np.uint8).tobytes() == b.view(np.uint8).tobytes()
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (1, 77), (77, 1), (257, 1031), (256, 512), (3, 67, 129)])
def test_numpy_roundtrip_every_dtype(rng, dtype, shape):
    x = random_array(rng, shape, dtype)
    assert same_bits(at.transpose(x), expected(x))


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_prime_sized_matrix(rng, dtype):
    x = random_array(rng, (4099, 6007), dtype)
    assert same_bits(at.transpose(x), expected(x))


def test_bfloat16_through_torch():
    torch = pytest.importorskip("torch")
    x = torch.randn(301, 517, device="cuda").to(torch.bfloat16)
    y = at.transpose(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16
    assert torch.equal(y, x.t())


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_conjugate_transpose(rng, dtype):
    x = random_array(rng, (2, 131, 67), dtype)
    assert same_bits(at.transpose(x, conjugate=True), expected(x, conj=True))


def test_gpuarray_in_gpuarray_out(rng):
    import pycuda.gpuarray as gpuarray

    x = random_array(rng, (300, 200), "float32")
    y = at.transpose(gpuarray.to_gpu(x))
    assert isinstance(y, gpuarray.GPUArray)
    assert same_bits(y.get(), x.T)


def test_cupy_in_cupy_out_and_pitched_slice(rng):
    cupy = pytest.importorskip("cupy")
    big = cupy.asarray(random_array(rng, (4, 500, 700), "float16"))
    x = big[1:3, 7:407, 13:613]  # batch, row and column offsets: pitched, unaligned
    y = at.transpose(x)
    assert isinstance(y, cupy.ndarray)
    assert same_bits(cupy.asnumpy(y), np.swapaxes(cupy.asnumpy(x), -1, -2))


def test_torch_in_torch_out_on_a_stream(rng):
    torch = pytest.importorskip("torch")
    x = torch.as_tensor(random_array(rng, (3, 640, 384), "int16"), device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = at.transpose(x, stream=s)
        z = y * 1  # queued after our kernel on the same stream
    s.synchronize()
    assert torch.equal(z.cpu(), x.transpose(1, 2).cpu())


def test_out_into_a_pitched_view_leaves_the_rest_untouched(rng):
    cupy = pytest.importorskip("cupy")
    x = cupy.asarray(random_array(rng, (96, 160), "float64"))
    poison = np.frombuffer(b"\xa5" * 8, np.float64)[0]
    buf = cupy.full((200, 128), poison)
    out = buf[17:177, 9:105]
    res = at.transpose(x, out)
    assert res is out
    host = cupy.asnumpy(buf)
    assert same_bits(host[17:177, 9:105], cupy.asnumpy(x).T)
    mask = np.ones(host.shape, bool)
    mask[17:177, 9:105] = False
    assert np.all(host.view(np.uint64)[mask] == np.uint64(0xA5A5A5A5A5A5A5A5))


class _Cai:
    """A bare __cuda_array_interface__ object (as Numba and others export)."""

    def __init__(self, ptr, shape, strides, typestr):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "strides": strides,
            "typestr": typestr,
            "data": (ptr, False),
            "version": 3,
        }


def test_cuda_array_interface_input(rng):
    import pycuda.gpuarray as gpuarray

    host = random_array(rng, (50, 80), "uint32")
    dev = gpuarray.to_gpu(host)
    # a 40x60 window with the parent's row pitch
    view = _Cai(dev.ptr + (5 * 80 + 3) * 4, (40, 60), (80 * 4, 4), "<u4")
    y = at.transpose(view)
    assert same_bits(y.get(), host[5:45, 3:63].T)


_EMPTY = [(0, 5), (5, 0), (0, 0), (2, 0, 5), (2, 5, 0), (0, 3, 4)]


def _transposed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (*shape[:-2], shape[-1], shape[-2])


def _in_new_thread(fn):
    """fn() on a fresh thread (no CUDA context current); its exception is raised here."""
    import threading

    box: list = []

    def run() -> None:
        try:
            box.append(("ok", fn()))
        except BaseException as exc:  # handed back to the test
            box.append(("raised", exc))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    how, value = box[0]
    if how == "raised":
        raise value
    return value


@pytest.mark.parametrize("shape", _EMPTY)
def test_empty_gpuarrays_and_cai_arrays_with_no_memory(rng, shape):
    """An empty GPUArray has no memory (gpudata None) and an empty CAI array may say pointer
    0: no device to ask about, nothing to move. The result is an empty array of the same
    kind (a GPUArray for a bare CAI object), transposed; `out` comes back untouched; a wrong
    out is still refused; the GPUArray fast path (registered by a first, non-empty call)
    hands the empty one to the full path."""
    import pycuda.gpuarray as gpuarray

    want = _transposed(shape)
    warm = gpuarray.to_gpu(random_array(rng, (33, 17), "float32"))
    assert same_bits(at.transpose(at.transpose(warm)).get(), warm.get())
    x = gpuarray.empty(shape, np.float32)
    y = at.transpose(x)
    assert isinstance(y, gpuarray.GPUArray) and y.shape == want and y.dtype == np.float32
    out = gpuarray.empty(want, np.float32)
    assert at.transpose(x, out) is out
    with pytest.raises(at.errors.OutputError, match="dtype float64"):
        at.transpose(x, gpuarray.empty(want, np.float64))
    with pytest.raises(at.errors.OutputError, match="shape"):
        at.transpose(x, gpuarray.empty((*want[:-2], want[-2] + 1, 0), np.float32))
    cai = _Cai(0, shape, None, "<c8")
    y = _in_new_thread(lambda: at.transpose(cai))  # no context current: the first GPU's
    assert isinstance(y, gpuarray.GPUArray) and y.shape == want and y.dtype == np.complex64
    out = gpuarray.empty(want, np.complex64)
    assert at.transpose(cai, out) is out


@pytest.mark.parametrize("shape", _EMPTY)
def test_empty_torch_arrays(shape):
    """A library that knows its empty array's device: the same kind, dtype and device back;
    an out with no memory, of another library, is accepted (nothing is moved)."""
    import pycuda.gpuarray as gpuarray

    torch = pytest.importorskip("torch")
    want = _transposed(shape)
    x = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
    y = at.transpose(x)
    assert isinstance(y, torch.Tensor) and tuple(y.shape) == want and y.device == x.device
    assert y.dtype == torch.bfloat16
    out = torch.empty(want, dtype=torch.bfloat16, device="cuda")
    assert at.transpose(x, out) is out
    with pytest.raises(at.errors.OutputError, match="shape"):
        at.transpose(
            x, torch.empty((*want[:-2], want[-2] + 1, 0), dtype=torch.bfloat16, device="cuda")
        )
    g = gpuarray.empty(want, np.float32)
    assert at.transpose(torch.empty(shape, device="cuda"), g) is g


@pytest.mark.parametrize("shape", _EMPTY)
def test_empty_cupy_arrays(shape):
    cupy = pytest.importorskip("cupy")
    want = _transposed(shape)
    x = cupy.empty(shape, cupy.int16)
    y = at.transpose(x)
    assert isinstance(y, cupy.ndarray) and y.shape == want and y.dtype == cupy.int16
    out = cupy.empty(want, cupy.int16)
    assert at.transpose(x, out) is out


def test_rejected_out_is_not_written(rng):
    import pycuda.gpuarray as gpuarray

    x = gpuarray.to_gpu(random_array(rng, (64, 32), "float32"))
    out = gpuarray.to_gpu(np.full((64, 32), 7.0, np.float32))  # wrong shape
    with pytest.raises(at.errors.OutputError, match="shape"):
        at.transpose(x, out)
    assert np.all(out.get() == 7.0)
    with pytest.raises(at.errors.OutputError, match="overlaps"):
        at.transpose(x, x.reshape(32, 64))


@pytest.mark.parametrize("elem_bytes", [1, 2, 4, 8, 16])
def test_sample_of_the_config_space(rng, elem_bytes):
    """A random sample of every element size's space, checked on fresh data with a poisoned
    output and a guard region, on a batched shape with partial tiles."""
    from autotranspose.runtime.compiler import activate, precompile

    dtype = {1: "int8", 2: "float16", 4: "float32", 8: "complex64", 16: "complex128"}[elem_bytes]
    space = list(config_space(dtype))
    picks = [space[i] for i in rng.choice(len(space), size=24, replace=False)]
    picks.append(max(space, key=lambda c: (c.tile_m * c.tile_n, c.vec)))  # the extremes
    picks.append(min(space, key=lambda c: (c.tile_m * c.tile_n, -c.vec)))
    if elem_bytes >= 8:
        picks.append(picks[0].replace(conjugate=True) if elem_bytes in (8, 16) else picks[0])
    state = activate(0)
    assert not precompile(state, picks)
    for cfg, problem in reference_problems(state, elem_bytes, (2, 304, 528), picks):
        if cfg.conjugate:
            assert problem and "differ" in problem  # a conjugate is not the plain transpose
        else:
            assert problem is None, f"{cfg.key}: {problem}"


@pytest.mark.parametrize("elem_bytes", [1, 2, 4, 8])
def test_realigning_kernels_on_unaligned_rows(rng, elem_bytes):
    """Rows whose starts fall at every offset from vector alignment, odd extents, partial
    tiles: the realigning kernels against the reference, on fresh data each time."""
    from autotranspose.runtime.compiler import activate, precompile

    dtype = {1: "int8", 2: "float16", 4: "float32", 8: "complex64"}[elem_bytes]
    space = [c for c in config_space(dtype, max_vector=1) if c.realign]
    picks = [space[i] for i in rng.choice(len(space), size=20, replace=False)]
    state = activate(0)
    assert not precompile(state, picks)
    for shape in [(1, 301, 517), (3, 255, 259), (1, 4099, 6007)]:
        assert_match_reference(state, elem_bytes, shape, picks[:8] if shape[1] > 1000 else picks)


def test_realigned_view_with_odd_offsets(rng):
    import pycuda.gpuarray as gpuarray

    host = random_array(rng, (300, 301), "uint8")
    dev = gpuarray.to_gpu(host)
    cfg = KernelConfig(1, 128, 64, 4, 2, 0, "swizzle", "col", realign=True)
    for r0, c0 in [(1, 3), (7, 0), (0, 5)]:
        view = _Cai(dev.ptr + r0 * 301 + c0, (250, 263), (301, 1), "|u1")
        y = at.transpose(view, config=cfg)
        assert same_bits(y.get(), host[r0 : r0 + 250, c0 : c0 + 263].T)


def test_forced_config_and_default_agree(rng):
    x = random_array(rng, (512, 768), "uint8")
    cfg = KernelConfig(1, 64, 128, 16, 1, 0, "swizzle", "col", "stream")
    assert same_bits(at.transpose(x, config=cfg), x.T)
    with pytest.raises(at.errors.ConfigError, match="vec"):
        at.transpose(random_array(rng, (511, 768), "uint8"), config=cfg)


def test_past_2_31_elements():
    """int8 40000 x 53700 = 2.148e9 elements: offsets need 64-bit indexing."""
    from autotranspose.dispatch.transpose import choose_config
    from autotranspose.kernels.shapes import max_vec
    from autotranspose.runtime.compiler import activate

    shape = (1, 40000, 53700)
    assert shape[1] * shape[2] > 2**31
    state = activate(0)
    cfg = choose_config(state, 1, *shape, max_vec(1, 40000, 53700), False)
    assert_match_reference(state, 1, shape, [cfg])


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int16", "float32", "float64"])
@pytest.mark.parametrize("shift", [0, 1, 3])
def test_runs_of_any_offset_and_batch_spacing_are_copied_exactly(rng, dtype, shift):
    """Matrices of one column (or one row) moved as runs at any byte offset, back to back
    or with gaps between batches, into an output with gaps: every byte of every run lands
    (realigned in 16-byte words where the words are under 8 bytes) and nothing else in the
    poisoned buffers changes."""
    cupy = pytest.importorskip("cupy")
    e = np.dtype(dtype).itemsize
    if shift % e:
        pytest.skip("a pointer off its element's alignment is refused")
    m = int(rng.integers(5000, 60000)) | 1
    for batch, gap_in, gap_out in ((1, 0, 0), (7, 0, 0), (5, 3, 0), (4, 0, 9)):
        host = random_array(rng, (batch, m + gap_in, 1), dtype)
        buf = cupy.asarray(random_array(rng, (host.nbytes + 64,), "uint8"))
        x = cupy.ndarray(host.shape, dtype, cupy.cuda.MemoryPointer(buf.data.mem, shift))
        x.set(host)
        x = x[:, :m, :]  # batches m + gap_in apart
        pool = cupy.asarray(random_array(rng, ((batch * (m + gap_out) + 64) * e,), "uint8"))
        before = cupy.asnumpy(pool)
        base = cupy.ndarray((batch, 1, m + gap_out), dtype, pool.data)
        out = base[:, :, :m]
        at.transpose(x, out)
        assert same_bits(cupy.asnumpy(out), expected(cupy.asnumpy(x)))
        after = cupy.asnumpy(pool).reshape(-1)
        rest = np.ones(after.size, bool)
        for b in range(batch):
            lo = b * (m + gap_out) * e
            rest[lo : lo + m * e] = False
        assert (after[rest] == before[rest]).all(), (batch, gap_in, gap_out)


@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "complex128"])
def test_one_column_or_row_is_moved_as_a_copy(rng, dtype):
    """Nx1 with a contiguous column and 1xN into a contiguous column: one run a matrix, moved
    by the row copy (no transpose kernel); a strided column still goes through a transpose
    kernel. Batches, fresh data, the poisoned rest of a bigger output left alone."""
    cupy = pytest.importorskip("cupy")
    from autotranspose.dispatch import picker as dispatch

    m = int(rng.integers(1000, 90000)) | 1
    for host in (
        random_array(rng, (m, 1), dtype),
        random_array(rng, (1, m), dtype),
        random_array(rng, (3, m, 1), dtype),
    ):
        y = at.transpose(cupy.asarray(host))
        assert same_bits(cupy.asnumpy(y), expected(host))
    copies = [lc for lc in dispatch.caches.launches.values() if lc.config is None]
    assert copies, "no row copy was prepared"
    wide = cupy.asarray(random_array(rng, (m, 3), dtype))
    col = wide[:, 1:2]  # a column 3 elements apart: not a copy
    out = cupy.asarray(random_array(rng, (1, m + 5), dtype))
    before = cupy.asnumpy(out)
    at.transpose(col, out[:, 2 : m + 2])
    want = before.copy()
    want[:, 2 : m + 2] = expected(cupy.asnumpy(col))
    assert same_bits(cupy.asnumpy(out), want)

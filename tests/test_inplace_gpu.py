"""transpose_() on a real GPU: bit-exact on random data for square, rectangular (primes,
skinny, one row or column, gcd > 1), batched and long-row shapes and every element size,
conjugate; guard bytes around the matrix stay poisoned; the result is a view of x's memory
in each library; bad calls leave x as it was; PyTorch's op under torch.compile, autograd's
refusal, the caller's stream and CUDA graph capture; repeated calls through the fast path,
one scratch per stream."""

from __future__ import annotations

import numpy as np
import pytest

import autotranspose as at
from autotranspose import errors

pytestmark = pytest.mark.gpu

GUARD, POISON = 256, 0xA5
DTYPES = ["bool", "uint8", "float16", "float32", "float64", "complex128"]
SHAPES = [
    (1, 1),
    (1, 77),
    (77, 1),
    (96, 96),  # square: tile pairs
    (131, 131),  # square, cut tiles
    (257, 1031),  # primes
    (1031, 257),
    (120, 84),  # gcd 12
    (6, 4000),  # skinny, gcd 2
    (4000, 6),
    (2, 97, 3),  # batched
    (3, 64, 64),  # batched square
    (2, 40, 60),  # batched, gcd 20
]


@pytest.fixture(scope="module")
def cupy():
    return pytest.importorskip("cupy")


def random_array(rng, shape, dtype):
    """Random bytes in every element (a wrong byte shows)."""
    dt = np.dtype(dtype)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    if dt == np.bool_:
        raw = raw & 1
    return raw.view(dt).reshape(shape)


def same_bits(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.view(np.uint8).tobytes() == b.view(np.uint8).tobytes()


def guarded(cupy, host, shift=0):
    """`host` copied into the middle of a poisoned device buffer, `shift` bytes past a
    256-byte line: (buffer, x over it)."""
    nbytes, start = host.nbytes, GUARD + shift
    buf = cupy.full(start + nbytes + GUARD, POISON, cupy.uint8)
    buf[start : start + nbytes] = cupy.asarray(host.view(np.uint8).ravel())
    return buf, buf[start : start + nbytes].view(host.dtype).reshape(host.shape)


def guards_intact(cupy, buf, shift=0):
    host = cupy.asnumpy(buf)
    return bool((host[: GUARD + shift] == POISON).all() and (host[-GUARD:] == POISON).all())


def transposed_shape(shape):
    return (*shape[:-2], shape[-1], shape[-2])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_bit_exact_in_place_with_guards(cupy, rng, dtype, shape):
    host = random_array(rng, shape, dtype)
    buf, x = guarded(cupy, host)
    y = at.transpose_(x)
    assert isinstance(y, cupy.ndarray) and y.data.ptr == x.data.ptr
    assert y.shape == transposed_shape(shape)
    assert same_bits(cupy.asnumpy(y), np.swapaxes(host, -1, -2))
    assert guards_intact(cupy, buf)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("shape", [(1, 9), (64, 64), (2, 33, 33), (30, 45), (2, 7, 13)])
def test_conjugate(cupy, rng, dtype, shape):
    host = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    buf, x = guarded(cupy, host)
    y = at.transpose_(x, conjugate=True)
    assert same_bits(cupy.asnumpy(y), np.conj(np.swapaxes(host, -1, -2)))
    assert guards_intact(cupy, buf)


@pytest.mark.parametrize("shape", [(3, 60000), (2, 2, 59999)])
def test_rows_longer_than_shared_memory_go_through_one_row_of_scratch(cupy, rng, shape):
    """Rows of 240 kB: past an H200's 227 kB a block may hold, so SHUFFLE copies each row
    to a stream-ordered scratch row and gathers it back."""
    host = random_array(rng, shape, "float32")
    buf, x = guarded(cupy, host)
    y = at.transpose_(x)
    assert same_bits(cupy.asnumpy(y), np.swapaxes(host, -1, -2))
    assert guards_intact(cupy, buf)


@pytest.mark.parametrize(
    "shape, dtype",
    [
        ((12, 8000), "float32"),  # COLS on the 12-row columns, gcd 4: COLS_DOWN first
        ((8000, 12), "float32"),  # the 8000 rows pass a block: the 12 x 8000 view, inverted
        ((3, 7302, 6), "int16"),  # batched, inverted
        ((5, 60000), "float32"),  # COLS and rows through the scratch, gathered from runs
        ((60000, 5), "float32"),  # inverted, the view's rows through the scratch
        ((70, 60000), "float32"),  # 70 rows through the scratch: gathered element by element
        ((7300, 7301), "uint8"),  # past a block's 32-byte band: cols_slide's bands of 16 bytes
        ((7320, 7400), "int8"),  # the same, gcd 40: the rotations too
        ((9700, 9701), "uint8"),  # past its 9685 rows too: bands of 8 bytes
        ((9720, 9800), "int8"),  # the same, gcd 40
        ((14600, 14601), "uint8"),  # past the 14528 rows of those: through the scratch
        ((14620, 14660), "int8"),  # the same, gcd 20: the rotations through the scratch too
        ((1021, 4093), "complex128"),  # 16-byte elements
        ((18, 100001), "uint8"),  # few rows off 4-byte words: COLS in 16-byte lines
        ((100001, 18), "int16"),  # the same on the 18 x 100001 view, inverted
        ((5003, 3001), "int8"),  # taller grids of rows off 4-byte words: 4-byte words
        ((3001, 5003), "uint8"),  # the gather; gcd 1
        ((2, 1503, 2505), "int8"),  # gcd 501: both rotations, batched
        ((6001, 4001), "bool"),  # the 4001 x 6001 view, the scatter
        ((6001, 4001), "bfloat16"),  # 2-byte elements
        # rows of whole 16-byte words of 1- and 2-byte elements: compiled per rule
        ((4001, 6000), "uint8"),  # the gather, each word's elements on one line
        ((6000, 4001), "int8"),  # the scatter on the 4001 x 6000 view
        ((3, 1200, 2000), "uint8"),  # gcd 400, b 5: the rotation walked, batched
        ((2400, 2720), "float16"),  # gcd 160, b 17: the rotation down on one line
        ((2720, 2400), "bfloat16"),  # the rotation up, the scatter
    ],
)
def test_column_passes_on_either_side(cupy, rng, shape, dtype):
    """Where a side's columns fit a block's shared memory the column passes run as COLS
    passes, on the n x m view where only its columns fit; bit-exact, guards intact."""
    host = random_array(rng, shape, dtype)
    buf, x = guarded(cupy, host)
    y = at.transpose_(x)
    assert same_bits(cupy.asnumpy(y), np.swapaxes(host, -1, -2))
    assert guards_intact(cupy, buf)


@pytest.mark.parametrize(
    "shape, dtype",
    [
        ((8280, 7320), "float16"),  # gcd 40: the rotation up (after the scatter)
        ((7320, 8280), "float16"),  # the rotation down (before the gather)
        ((7504, 7500), "uint8"),  # 16 elements a word
    ],
)
@pytest.mark.parametrize("shift", [0, 8])
def test_column_passes_over_clusters(cupy, rng, shape, dtype, shift):
    """Columns taller than a block's band holds, whose rows are whole 16-byte words, run
    their rotations over thread-block clusters on sm_90 (each block a part of the band's
    rows, every load of the band done before any block writes it); x 8 bytes off its line
    takes narrower words. Bit-exact, guards intact."""
    from autotranspose.calls.common import call_target
    from autotranspose.dispatch import inplace as programs
    from autotranspose.runtime.arrays import view

    host = random_array(rng, shape, dtype)
    buf, x = guarded(cupy, host, shift)
    xv = view(x)
    state = call_target(xv, None)[0]
    prog = programs.program(state, xv.batch, xv.m, xv.n, xv.et.size)
    rotations = {s.how.spec.piece for s in prog.steps if s.how.args.get("split") in (0, 1)}
    if state.info.compute_capability >= (9, 0):
        assert rotations == {"cols_cluster"}
    y = at.transpose_(x)
    assert same_bits(cupy.asnumpy(y), np.swapaxes(host, -1, -2))
    assert guards_intact(cupy, buf, shift)


@pytest.mark.parametrize(
    "shape, dtype",
    [
        ((1029, 1029), "uint8"),  # rows one line and 5 bytes: every offset in a line
        ((3, 197, 197), "float16"),
        ((515, 515), "int16"),
        ((2, 301, 301), "float32"),
        ((259, 259), "float64"),
        ((131, 131), "complex64"),
    ],
)
@pytest.mark.parametrize("shift", [0, 8])
def test_squares_in_lines(cupy, rng, monkeypatch, shape, dtype, shift):
    """swap_lines (kernels/inplace.py: SWAP_LINES) on squares whose rows are not whole
    16-byte words, x on its line and 8 bytes off it: the one pass, bit-exact, guards intact."""
    from autotranspose.calls.common import call_target
    from autotranspose.dispatch import inplace as programs, switches
    from autotranspose.kernels import inplace as kernels
    from autotranspose.runtime.arrays import view

    monkeypatch.setattr(kernels, "SWAP_LINES", True)
    switches.clear_caches()  # the programs built with SWAP
    try:
        host = random_array(rng, shape, dtype)
        buf, x = guarded(cupy, host, shift)
        xv = view(x)
        prog = programs.program(call_target(xv, None)[0], xv.batch, xv.m, xv.n, xv.et.size)
        assert [s.how.spec.piece for s in prog.steps] == ["swap_lines"]
        y = at.transpose_(x)
        assert same_bits(cupy.asnumpy(y), np.swapaxes(host, -1, -2))
        assert guards_intact(cupy, buf, shift)
    finally:
        monkeypatch.undo()
        switches.clear_caches()


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "float64"])
@pytest.mark.parametrize("shape", [(257, 1032), (1032, 257), (120, 84), (2, 64, 40)])
def test_x_off_its_16_byte_line_takes_narrower_words(cupy, rng, dtype, shape):
    """x one element past a 16-byte line: COLS moves its bands in the widest words x, the
    rows and the bands divide (1032 4-byte elements a row: 16-byte words when aligned)."""
    host = random_array(rng, shape, dtype)
    e = np.dtype(dtype).itemsize
    buf, x = guarded(cupy, host, shift=e)
    y = at.transpose_(x)
    assert same_bits(cupy.asnumpy(y), np.swapaxes(host, -1, -2))
    assert guards_intact(cupy, buf, shift=e)


def test_twice_is_the_identity_and_empty_arrays_reshape(cupy, rng):
    host = random_array(rng, (2, 123, 45), "int32")
    x = cupy.asarray(host)
    y = at.transpose_(at.transpose_(x))
    assert y.shape == host.shape and same_bits(cupy.asnumpy(y), host)
    e = cupy.empty((0, 5), cupy.float32)
    assert at.transpose_(e).shape == (5, 0)


def test_bad_calls_leave_x_as_it_was(cupy, rng):
    host = random_array(rng, (8, 12), "float32")
    x = cupy.asarray(host)
    with pytest.raises(errors.LayoutError, match="contiguous"):
        at.transpose_(x[:, :6])
    with pytest.raises(errors.UnsupportedDtypeError, match="complex64 or complex128"):
        at.transpose_(x, conjugate=True)
    with pytest.raises(errors.ShapeError):
        at.transpose_(x.reshape(2, 2, 2, 12))
    assert same_bits(cupy.asnumpy(x), host)


def test_cupy_current_stream_orders_the_call(cupy, rng):
    host = rng.integers(0, 1000, (1000, 1500)).astype(np.float32)
    x = cupy.asarray(host)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        for _ in range(10):
            x += 1  # queued on s, maybe still running when transpose_() is called
        y = at.transpose_(x)
        z = y * 2
    s.synchronize()
    assert np.array_equal(cupy.asnumpy(y), (host + 10).T)
    assert np.array_equal(cupy.asnumpy(z), (host + 10).T * 2)


def test_gpuarray_and_cuda_array_interface_views(rng, pycuda_primary):
    import pycuda.gpuarray as gpuarray

    host = random_array(rng, (37, 91), "float64")
    x = gpuarray.to_gpu(host)
    y = at.transpose_(x)
    assert isinstance(y, gpuarray.GPUArray) and int(y.gpudata) == int(x.gpudata)
    assert same_bits(y.get(), host.T)

    cupy = pytest.importorskip("cupy")

    class Cai:
        def __init__(self, a):
            self.a = a
            self.__cuda_array_interface__ = a.__cuda_array_interface__

    c = cupy.asarray(host)
    r = at.transpose_(Cai(c))
    assert r.__cuda_array_interface__["shape"] == (91, 37)
    assert same_bits(cupy.asnumpy(cupy.asarray(r)), host.T)


def test_numpy_goes_through_the_gpu_into_its_own_memory(rng):
    x = random_array(rng, (3, 17, 29), "uint16")
    want = np.swapaxes(x, 1, 2).copy()
    y = at.transpose_(x)
    assert y.base is x or y.base is x.base or np.shares_memory(x, y)
    assert same_bits(y, want)


# --- PyTorch ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    at.transpose_(torch.zeros(2, 3, device="cuda"))  # loads the PyTorch integration (its ops)
    return torch


def test_torch_result_is_a_view_of_the_same_storage(torch):
    x = torch.randn(3, 70, 50, device="cuda")
    want = x.transpose(1, 2).clone()
    y = at.transpose_(x)
    assert y.data_ptr() == x.data_ptr() and y.shape == (3, 50, 70)
    assert torch.equal(y, want)


def test_torch_requires_grad_is_refused_untouched(torch):
    x = torch.randn(6, 10, device="cuda", requires_grad=True)
    before = x.detach().clone()
    with pytest.raises(errors.InputTypeError, match="requires grad"):
        at.transpose_(x)
    assert torch.equal(x.detach(), before)
    with torch.no_grad():
        y = at.transpose_(x.detach())
    assert torch.equal(y, before.t())


def test_torch_compile_fullgraph_runs_the_mutating_op(torch):
    torch._dynamo.reset()

    def f(x):
        y = at.transpose_(x)
        return y * 2

    x = torch.randn(30, 45, device="cuda")
    want = x.t().clone()
    got = torch.compile(f, fullgraph=True)(x)
    assert torch.equal(got, want * 2)
    assert torch.equal(x.view(45, 30), want)  # x's own memory was transposed


def test_torch_opcheck_schema_and_fake(torch):
    x = torch.randn(7, 13, device="cuda")
    torch.library.opcheck(
        torch.ops.autotranspose.transpose_inplace.default,
        (x, False),
        test_utils=("test_schema", "test_faketensor"),
    )


def test_torch_explicit_stream(torch):
    s = torch.cuda.Stream()
    x = torch.randn(333, 222, device="cuda")
    want = x.t().clone()
    s.wait_stream(torch.cuda.current_stream())
    y = at.transpose_(x, stream=s)
    s.synchronize()
    assert torch.equal(y, want)


def test_torch_cuda_graph_capture_after_a_warm_up(torch):
    shape = (300, 140)  # rectangular, gcd 20: every pass, PERMUTE's table included
    warm = torch.randn(shape, device="cuda")
    at.transpose_(warm)  # compiles the kernels and uploads the table, outside capture
    static = torch.empty(shape, device="cuda")
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = at.transpose_(static)
    for _ in range(3):
        fresh = torch.randn(shape, device="cuda")
        static.copy_(fresh)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, fresh.t())


def test_torch_cuda_graph_capture_of_a_staged_shape(torch):
    """Columns past a block go band by band through the scratch: under capture, the graph's
    own stream-ordered scratch, its band launches made ready for it."""
    shape = (14620, 14660)  # gcd 20, both sides past the 14528 rows a COLS block holds
    warm = torch.randint(0, 255, shape, dtype=torch.uint8, device="cuda")
    at.transpose_(warm)
    static = torch.empty(shape, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = at.transpose_(static)
    for _ in range(2):
        fresh = torch.randint(0, 255, shape, dtype=torch.uint8, device="cuda")
        static.copy_(fresh)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, fresh.t())


@pytest.mark.parametrize("shape", [(300, 140), (1031, 257), (7300, 7301)])
def test_the_unfused_passes_still_transpose(cupy, rng, shape):
    """REVERSE, SPLIT and PERMUTE (what columns past the scratch take, and what `bench
    --inplace` times beside the fused passes), run as the call runs a program."""
    from autotranspose.calls import inplace as call
    from autotranspose.calls.common import call_target
    from autotranspose.dispatch import inplace as programs
    from autotranspose.runtime.arrays import view

    host = random_array(rng, shape, "int16")
    buf, x = guarded(cupy, host)
    xv = view(x)
    state, ctx, handle = call_target(xv, None)
    prog = programs.program(state, xv.batch, xv.m, xv.n, xv.et.size, fused=False)
    assert "cols" not in {s.how.kind for s in prog.steps}
    call.run(prog, xv.ptr, ctx, handle)
    cupy.cuda.runtime.deviceSynchronize()
    assert same_bits(cupy.asnumpy(x).reshape(transposed_shape(shape)), np.swapaxes(host, -1, -2))
    assert guards_intact(cupy, buf)


def test_torch_repeated_calls_hit_the_fast_path_and_share_one_scratch(torch):
    """A signature's second call runs its prepared program (a dict hit); every call on one
    stream shares one scratch (rows past shared memory go through it), grown as shapes need
    it; clear_caches() frees it."""
    from autotranspose.calls import inplace as call

    at.clear_caches()
    shapes = [(300, 140), (3, 60000), (257, 1031), (96, 96), (2, 40, 60), (5, 61000), (300, 140)]
    for shape in shapes:
        for _ in range(3):
            x = torch.randint(-(2**31), 2**31 - 1, shape, dtype=torch.int32, device="cuda")
            want = x.transpose(-1, -2).clone()
            y = at.transpose_(x)
            assert y.data_ptr() == x.data_ptr() and torch.equal(y, want)
    assert len(call._HITS) == len(set(shapes))
    stream = torch.cuda.current_stream().cuda_stream
    assert {key[1] for key in call._SCRATCH} == {stream}  # one stream, one scratch
    s = torch.cuda.Stream()  # another stream: a scratch of its own, the same program
    x = torch.randn(3, 60000, device="cuda")
    want = x.t().clone()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = at.transpose_(x)
    s.synchronize()
    assert torch.equal(y, want) and len(call._SCRATCH) == 2
    at.clear_caches()
    assert not call._HITS and not call._SCRATCH and not call._RETIRED


def test_cupy_repeated_calls_hit_the_fast_path(cupy, rng):
    from autotranspose.calls import inplace as call

    host = random_array(rng, (3, 131, 77), "float16")
    for _ in range(3):
        buf, x = guarded(cupy, host)
        y = at.transpose_(x)
        assert same_bits(cupy.asnumpy(y), np.swapaxes(host, -1, -2))
        assert guards_intact(cupy, buf)
    assert any(key[0] == "cupy" and key[1] == (3, 131, 77) for key in call._HITS)


def test_a_result_recorded_in_this_process_serves_the_next_call(cupy, rng, tmp_path, monkeypatch):
    """A tuned in-place result of a class the fast path holds: the next call of that
    signature is chosen again and runs the tuned parameters, bit-exact."""
    from autotranspose.calls import inplace as calls
    from autotranspose.dispatch import lookup, policy
    from autotranspose.kinds import inplace as inplace_kind
    from autotranspose.runtime.compiler import activate
    from autotranspose.store import Store, urls
    from autotranspose.store.measurement import Measurement

    monkeypatch.setattr(urls, "default_path", lambda: tmp_path / "tuning.db")
    monkeypatch.delenv(urls.ENV_VAR, raising=False)
    at.clear_caches()
    m, n = int(rng.integers(200, 700)), int(rng.integers(200, 700))
    n += n == m
    host = random_array(rng, (m, n), "float16")
    x = cupy.asarray(host)
    for _ in range(2):  # the second call runs from the fast path
        y = at.transpose_(x)
        x = at.transpose_(y)
    default = inplace_kind.default(2)
    tuned = inplace_kind.InplaceParams(default.tile, 128, 2, 8, 4)
    assert tuned != default
    device = activate(x.device.id).info
    with Store.open(tmp_path / "tuning.db") as store:
        store.record(
            None, device, "float16", 2, (1, m, n), policy.inplace_class(1, m, n),
            policy.inplace_config(2, tuned), Measurement("ok", 1000.0, 3000.0, 10.0),
            problem=policy.inplace_problem(m, n),
        )  # fmt: skip
    assert lookup.inplace_choice(device, 2, 1, m, n).source == "tuned"
    y = at.transpose_(x)
    assert same_bits(cupy.asnumpy(y), host.T)
    hits = [h for h in calls._HITS.values() if h.shape == (n, m)]
    assert hits and hits[-1].prog.params == tuned
    at.clear_caches()

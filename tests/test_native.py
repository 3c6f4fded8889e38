"""The compiled launcher (autotranspose.runtime.native), built with the system C compiler and driven
through stand-in driver entry points (C callbacks into Python), so its context handling and
argument packing are checked on machines without a GPU."""

from __future__ import annotations

import ctypes
import random
import re
import struct

import pytest

from autotranspose.kernels import codegen, gather
from autotranspose.kernels.config import config_space
from autotranspose.plans.boxes import Dim
from autotranspose.runtime import driver as _driver, native as _native
from autotranspose.runtime.compiler import ARG_FORMAT

pytestmark = pytest.mark.skipif(_native.compiler() is None, reason="no C compiler")

GET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
LAUNCH = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_void_p,
    *[ctypes.c_uint] * 7,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.c_void_p,
)


class FakeDriver:
    """cuCtxGetCurrent / cuCtxSetCurrent / cuLaunchKernel that record what they were given."""

    def __init__(self, current: int | None, launch_error: int = 0, set_error: int = 0) -> None:
        self.current = current
        self.sets: list[int | None] = []
        self.launches: list[dict] = []
        self.launch_error, self.set_error = launch_error, set_error
        self.get = GET(self._get)
        self.set = SET(self._set)
        self.launch = LAUNCH(self._launch)

    def _get(self, out):
        out[0] = self.current
        return 0

    def _set(self, ctx):
        self.sets.append(ctx)
        if self.set_error:
            return self.set_error
        self.current = ctx
        return 0

    def _launch(self, func, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        offsets = _driver.TRANSPOSE_OFFSETS
        sizes = [struct.calcsize(c) for c in ARG_FORMAT]
        values = [
            struct.unpack(c, ctypes.string_at(params[i], size))[0]
            for i, (c, size) in enumerate(zip(ARG_FORMAT, sizes, strict=True))
        ]
        assert len(values) == len(offsets)
        self.launches.append(
            dict(
                func=func,
                dims=(gx, gy, gz, bx, by, bz, smem),
                stream=stream,
                ctx=self.current,
                values=values,
                extra=extra,
            )
        )
        return self.launch_error


@pytest.fixture(scope="module", params=_native.KINDS)
def built(request, tmp_path_factory):
    """Each form of the launcher this machine can build (the module form needs Python.h)."""
    kind = request.param
    if kind not in _native.kinds():
        pytest.skip(f"no Python headers for the {kind} form")
    path = tmp_path_factory.mktemp("native") / _native.library_path(kind).name
    _native.build(path, _native.compiler(), kind)
    launcher = _native.load(path, kind)
    assert launcher.kind == kind
    return launcher


@pytest.fixture(scope="module")
def at_transpose(built):
    return built.transpose


def make_spec(fake: FakeDriver, ctx: int, rng: random.Random) -> tuple[_native.Spec, tuple]:
    scalars = tuple(rng.randrange(1, 2**40) for _ in range(6)) + tuple(
        rng.randrange(1, 2**31) for _ in range(3)
    )
    spec = _native.Spec()
    spec.get, spec.set, spec.launch = (
        ctypes.cast(f, ctypes.c_void_p).value for f in (fake.get, fake.set, fake.launch)
    )
    spec.func, spec.ctx = rng.randrange(1, 2**47), ctx
    dims = (*(rng.randrange(1, 2**16) for _ in range(6)), 0)
    spec.dims[:] = list(dims)
    spec.offsets[:] = list(_driver.TRANSPOSE_OFFSETS)
    tail = struct.pack(ARG_FORMAT[2:], *scalars)
    spec.nbytes = _driver.TRANSPOSE_BYTES
    ctypes.memmove(ctypes.addressof(spec.params), bytes(16) + tail, _driver.TRANSPOSE_BYTES)
    return spec, (spec.func, dims, scalars)


def test_layout_matches_the_kernels_argument_format():
    assert struct.calcsize(ARG_FORMAT) == _driver.TRANSPOSE_BYTES == _native.NBYTES
    assert len(ARG_FORMAT) == len(_driver.TRANSPOSE_OFFSETS) == _native.NARGS
    offs = [struct.calcsize(ARG_FORMAT[:i]) for i in range(len(ARG_FORMAT))]
    assert tuple(offs) == _driver.TRANSPOSE_OFFSETS
    # the gathers: in, out, then their struct at the transpose layout's third offset
    assert _driver.TRANSPOSE_OFFSETS[2] == 16 and 16 + gather.ARG_BYTES <= _native.CAPACITY
    assert _native.CAPACITY % 8 == 0 and _native.CAPACITY >= _native.NBYTES


def _parameters(source: str) -> dict[str, list[str]]:
    """Each kernel's parameter list in a generated source: name -> parameters."""
    found = {}
    source = re.sub(r"//[^\n]*", "", source)
    pattern = r'extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)'
    for m in re.finditer(pattern, source):
        found[m.group(1)] = [p.strip() for p in m.group(2).split(",")]
    assert len(found) == source.count("__global__"), "a kernel signature the pattern missed"
    return found


@pytest.mark.parametrize(
    "render",
    [
        codegen.render_rows,
        codegen.render_gather,
        codegen.render_seed,
        lambda: codegen.render_many(
            [
                c
                for dt in ("int8", "float16", "complex128")
                for c in config_space(dt, short_side=16)
            ][::61]
        ),
    ],
    ids=["rows", "gather", "seed", "tuned"],
)
def test_every_kernel_takes_the_arguments_the_launcher_hands_over(render):
    """The launcher hands a kernel NARGS parameters at TRANSPOSE_OFFSETS, and the driver reads
    as many as the kernel declares: a kernel with more would read garbage pointers (a row
    kernel with 13 scalars crashed the process on the H200). A kernel of more scalars takes
    a struct as its third argument (the gathers, the row copies)."""
    kernels = _parameters(render())
    assert kernels
    for name, params in kernels.items():
        assert 3 <= len(params) <= _native.NARGS, (name, params)
        if len(params) == 3:  # in, out and one struct at the third offset
            assert params[2].split()[-2].endswith(("_args", "_dims")), (name, params)


def test_a_gather_launch_hands_its_whole_struct_over(at_transpose):
    """A gather's argument block (two pointers and a 352-byte struct) is longer than the
    transpose kernels': the launcher copies all of it, and the driver finds the struct where
    the third argument pointer says."""
    rng = random.Random()
    seen = []

    def launch(func, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        ptrs = [struct.unpack("P", ctypes.string_at(params[i], 8))[0] for i in range(2)]
        seen.append((ptrs, ctypes.string_at(params[2], gather.ARG_BYTES)))
        return 0

    fake = FakeDriver(None)
    fake.launch = LAUNCH(launch)
    # strides under 2**30: the grid stride's outermost digit (up to 2**31) times a stride
    # must fit the struct's 64-bit step (strides of 2**40 overflowed it now and then)
    dims = [
        Dim(rng.randrange(2, 9), rng.randrange(1, 2**30), rng.randrange(1, 2**30)) for _ in range(5)
    ]
    tail = gather.gather_args(dims, rng.randrange(1, 2**31)).pack()
    spec = _native.Spec()
    spec.get, spec.set, spec.launch = (
        ctypes.cast(f, ctypes.c_void_p).value for f in (fake.get, fake.set, fake.launch)
    )
    spec.func, spec.ctx = 1, rng.randrange(2, 2**47)
    spec.dims[:] = [1, 1, 1, 256, 1, 1, 0]
    spec.offsets[:] = list(_driver.TRANSPOSE_OFFSETS)
    spec.nbytes = 16 + len(tail)
    ctypes.memmove(ctypes.addressof(spec.params), bytes(16) + tail, spec.nbytes)
    src, dst = rng.randrange(2**48), rng.randrange(2**48)
    assert at_transpose(ctypes.addressof(spec), src, dst, 0, _native.SAME) == 0
    assert seen == [([src, dst], tail)]


@pytest.mark.parametrize(
    "had, restore, expect_sets",
    [
        ("ctx", "same", []),  # already current: no context call at all
        ("none", "same", ["ctx", "none"]),  # made current for the launch, then put back
        ("other", "same", ["ctx", "other"]),
        ("other", "prev", ["ctx", "prev"]),  # the caller's saved context wins
        ("ctx", "prev", ["prev"]),
        ("none", "none", ["ctx", "none"]),
        ("ctx", "ctx", []),
    ],
)
def test_launch_switches_to_the_arrays_context_and_restores(
    at_transpose, had, restore, expect_sets
):
    rng = random.Random()
    names = {
        "ctx": rng.randrange(2, 2**47),
        "other": rng.randrange(2, 2**47),
        "prev": rng.randrange(2, 2**47),
        "none": None,
    }
    fake = FakeDriver(names[had])
    spec, (func, dims, scalars) = make_spec(fake, names["ctx"], rng)
    src, dst, stream = rng.randrange(2**48), rng.randrange(2**48), rng.randrange(3, 2**47)
    r = _native.SAME if restore == "same" else names[restore]
    assert at_transpose(ctypes.addressof(spec), src, dst, stream, r) == 0
    assert fake.sets == [names[n] for n in expect_sets]
    (call,) = fake.launches
    assert call["ctx"] == names["ctx"]
    assert call["func"] == func and call["dims"] == dims and call["stream"] == stream
    assert call["values"] == [src, dst, *scalars] and call["extra"] is None
    # the prepared block is untouched: a second call with other pointers sees only its own
    src2, dst2 = rng.randrange(2**48), rng.randrange(2**48)
    assert at_transpose(ctypes.addressof(spec), src2, dst2, None, _native.SAME) == 0
    assert fake.launches[1]["values"] == [src2, dst2, *scalars]
    assert fake.launches[1]["stream"] is None


def test_errors_come_back_and_the_context_is_still_restored(at_transpose):
    rng = random.Random()
    had, ctx = rng.randrange(2, 2**47), rng.randrange(2, 2**47)
    fake = FakeDriver(had, launch_error=700)
    spec, _ = make_spec(fake, ctx, rng)
    assert at_transpose(ctypes.addressof(spec), 1 << 20, 2 << 20, 0, _native.SAME) == 700
    assert fake.sets == [ctx, had] and fake.current == had


def test_a_context_that_cannot_be_made_current_launches_nothing(at_transpose):
    rng = random.Random()
    fake = FakeDriver(None, set_error=201)
    spec, _ = make_spec(fake, rng.randrange(2, 2**47), rng)
    assert at_transpose(ctypes.addressof(spec), 1 << 20, 2 << 20, 0, _native.SAME) == 201
    assert fake.launches == []


def test_module_form_reads_the_current_context(built):
    if built.current is None:
        assert built.kind == "ctypes"
        return
    rng = random.Random()
    fake = FakeDriver(None)
    built.bind(ctypes.cast(fake.get, ctypes.c_void_p).value)
    assert built.current() is None
    fake.current = rng.randrange(2, 2**47)
    assert built.current() == fake.current


def test_module_form_refuses_what_is_not_a_pointer(built):
    if built.kind != "module":
        pytest.skip("ctypes does its own conversion")
    with pytest.raises(TypeError):
        built.transpose(0, "src", 0, 0, 1)
    with pytest.raises(TypeError):
        built.transpose(0, 0, 0)
    with pytest.raises(OverflowError):
        built.transpose(0, -1, 0, 0, 1)


def test_prefers_the_module_form_and_falls_back_to_ctypes(monkeypatch, tmp_path):
    monkeypatch.setattr(_native, "cache_dir", lambda: tmp_path)
    _native.reset()
    try:
        assert _native.launcher().kind == _native.kinds()[0]
        monkeypatch.setattr(_native, "python_headers", lambda: None)
        _native.reset()
        assert _native.launcher().kind == "ctypes"
    finally:
        _native.reset()


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv(_native.ENV_VAR, "0")
    _native.reset()
    try:
        assert _native.launcher() is None
    finally:
        monkeypatch.delenv(_native.ENV_VAR)
        _native.reset()


def test_no_compiler_means_the_ctypes_path(monkeypatch, tmp_path):
    monkeypatch.setattr(_native, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(_native, "compiler", lambda: None)
    _native.reset()
    try:
        assert _native.launcher() is None
    finally:
        _native.reset()


def test_builds_once_into_the_cache_and_reloads(monkeypatch, tmp_path):
    monkeypatch.setattr(_native, "cache_dir", lambda: tmp_path)
    _native.reset()
    try:
        assert _native.launcher() is not None
        (built,) = tmp_path.iterdir()  # the fastest form only
        stamp = built.stat().st_mtime_ns
        _native.reset()
        assert _native.launcher() is not None
        assert built.stat().st_mtime_ns == stamp  # loaded, not rebuilt
    finally:
        _native.reset()


def test_a_damaged_cached_library_is_built_again(monkeypatch, tmp_path):
    monkeypatch.setattr(_native, "cache_dir", lambda: tmp_path)
    _native.library_path().write_bytes(b"not a shared library")
    _native.reset()
    try:
        assert _native.launcher() is not None
        assert _native.library_path().read_bytes()[:4] == b"\x7fELF"
    finally:
        _native.reset()


COPY = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p
)


def make_program(
    fake: FakeDriver, ctx: int, steps, copies: list
) -> tuple[_native.CProgram, object]:
    """An at_program of `steps` [(spec or None, in_off, out_off, nbytes)], copies recorded."""

    def copy(dst, src, nbytes, stream):
        copies.append((dst, src, nbytes, stream, fake.current))
        return 0

    arr = (_native.Step * len(steps))()
    for k, (spec, i, o, nbytes) in enumerate(steps):
        arr[k].launch = ctypes.addressof(spec) if spec is not None else None
        arr[k].in_off, arr[k].out_off, arr[k].nbytes = i, o, nbytes
    prog = _native.CProgram()
    cb = COPY(copy)
    prog.get, prog.set, prog.copy = (
        ctypes.cast(f, ctypes.c_void_p).value for f in (fake.get, fake.set, cb)
    )
    prog.ctx, prog.count = ctx, len(steps)
    prog.steps = ctypes.cast(arr, ctypes.POINTER(_native.Step))
    return prog, (arr, cb)


def test_a_program_runs_every_step_at_its_offsets_in_one_context_switch(built):
    """A permute of several launches (host-loop offsets) and copies is one C call: the
    context is made current once, each launch gets its own scalars and shifted pointers,
    copies go to the driver's async copy on the same stream, and the context is restored."""
    rng = random.Random()
    had, ctx = rng.randrange(2, 2**47), rng.randrange(2, 2**47)
    fake = FakeDriver(had)
    specs = [make_spec(fake, ctx, rng) for _ in range(rng.randrange(2, 6))]
    steps, want = [], []
    for spec, (func, _dims, scalars) in specs:
        i, o = rng.randrange(0, 2**30), rng.randrange(0, 2**30)
        steps.append((spec, i, o, 0))
        want.append(("launch", func, i, o, scalars))
    i, o, nbytes = rng.randrange(0, 2**30), rng.randrange(0, 2**30), rng.randrange(1, 2**30)
    at = rng.randrange(len(steps) + 1)
    steps.insert(at, (None, i, o, nbytes))
    want.insert(at, ("copy", i, o, nbytes))
    copies: list = []
    prog, _keep = make_program(fake, ctx, steps, copies)
    src, dst, stream = rng.randrange(2**48), rng.randrange(2**48), rng.randrange(3, 2**47)
    assert built.run(ctypes.addressof(prog), src, dst, stream, _native.SAME) == 0
    assert fake.sets == [ctx, had]
    launches = iter(fake.launches)
    for w in want:
        if w[0] == "copy":
            assert copies.pop(0) == (dst + w[2], src + w[1], w[3], stream, ctx)
            continue
        call = next(launches)
        _, func, i, o, scalars = w
        assert call["func"] == func and call["ctx"] == ctx and call["stream"] == stream
        assert call["values"] == [src + i, dst + o, *scalars]
    assert next(launches, None) is None and copies == []


def test_a_program_stops_at_the_first_failed_step_and_restores(built):
    rng = random.Random()
    had, ctx = rng.randrange(2, 2**47), rng.randrange(2, 2**47)
    fake = FakeDriver(had, launch_error=719)
    steps = [(make_spec(fake, ctx, rng)[0], 0, 0, 0) for _ in range(3)]
    prog, _keep = make_program(fake, ctx, steps, [])
    assert built.run(ctypes.addressof(prog), 1 << 20, 2 << 20, 0, _native.SAME) == 719
    assert len(fake.launches) == 1 and fake.current == had


def _coded(k: int, offset: int = 0) -> int:
    return k << _native.RELOC_SHIFT | offset


def test_a_relocated_program_fills_each_coded_word_from_the_calls_buffers(built):
    """cast_transpose's launches take five pointers and a scale: each leading word a step
    names is a code (buffer k << RELOC_SHIFT | offset) for bases[k - 1] + offset, 0 stays 0,
    a float base is its float32's bits; the words after them, and a copy step's coded
    addresses, come through as the driver needs them, in one context switch."""
    rng = random.Random()
    had, ctx = rng.randrange(2, 2**47), rng.randrange(2, 2**47)
    fake = FakeDriver(had)
    spec, (func, _dims, scalars) = make_spec(fake, ctx, rng)
    offs = [rng.randrange(0, 2**30) for _ in range(3)]
    codes = [_coded(1, offs[0]), _coded(2, offs[1]), 0, _coded(4), _coded(5, offs[2]), _coded(6)]
    ctypes.memmove(ctypes.addressof(spec.params), struct.pack("<6Q", *codes), 48)
    copies: list = []
    nbytes = rng.randrange(1, 2**20)
    steps = [(None, _coded(3, 8), _coded(2), nbytes), (spec, 0, 0, 48)]
    prog, _keep = make_program(fake, ctx, steps, copies)
    bases = [rng.randrange(2**20, 2**47) for _ in range(5)]
    scale = rng.uniform(-1e3, 1e3)
    stream = rng.randrange(3, 2**47)
    assert built.relocated(ctypes.addressof(prog), stream, _native.SAME, *bases, scale) == 0
    assert fake.sets == [ctx, had]
    assert copies == [(bases[1], bases[2] + 8, nbytes, stream, ctx)]
    (call,) = fake.launches
    bits = struct.unpack("<I", struct.pack("<f", scale))[0]  # rounded to nearest, as NumPy
    want = [bases[0] + offs[0], bases[1] + offs[1], 0, bases[3], bases[4] + offs[2], bits]
    assert call["func"] == func and call["ctx"] == ctx and call["stream"] == stream
    assert call["values"] == [*want, *scalars[4:]]


@pytest.mark.parametrize("code", [_coded(3), _coded(0, 16)])
def test_a_code_of_no_buffer_launches_nothing_and_restores(built, code):
    rng = random.Random()
    had, ctx = rng.randrange(2, 2**47), rng.randrange(2, 2**47)
    fake = FakeDriver(had)
    spec, _ = make_spec(fake, ctx, rng)
    ctypes.memmove(ctypes.addressof(spec.params), struct.pack("<2Q", _coded(1), code), 16)
    prog, _keep = make_program(fake, ctx, [(spec, 0, 0, 16)], [])
    assert built.relocated(ctypes.addressof(prog), 0, _native.SAME, 1 << 20, 2 << 20) == 1
    assert fake.launches == [] and fake.current == had


def test_more_bases_than_the_launcher_holds_are_refused(built):
    with pytest.raises(TypeError, match=f"at most {_native.MAX_BASES}"):
        built.relocated(0, 0, _native.SAME, *range(1, _native.MAX_BASES + 2))


def test_the_driver_runs_a_relocated_program_and_restores_the_threads_context(built, monkeypatch):
    """`_driver.run_relocated` (the eager cast's fast path) hands its bases to the launcher
    as given and, unless told otherwise, leaves the thread's own context current."""
    import types

    rng = random.Random()
    had, ctx = rng.randrange(2, 2**47), rng.randrange(2, 2**47)
    fake = FakeDriver(had)
    spec, _ = make_spec(fake, ctx, rng)
    ctypes.memmove(ctypes.addressof(spec.params), struct.pack("<2Q", _coded(2, 8), _coded(1)), 16)
    prog, _keep = make_program(fake, ctx, [(spec, 0, 0, 16)], [])
    monkeypatch.setattr(_driver, "_at_relocated", built.relocated)
    program = types.SimpleNamespace(address=ctypes.addressof(prog))
    _driver.run_relocated(program, 7, 1 << 20, 3 << 20)
    (call,) = fake.launches
    assert call["values"][:2] == [(3 << 20) + 8, 1 << 20] and call["stream"] == 7
    assert fake.current == had

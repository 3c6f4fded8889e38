"""In-place transposes tuned like the rest: the space a study searches (squares apart from
rectangles), studies that store their best under the case's problem and class where lookup
then serves it to transpose_(), resumed without measuring anything twice; `tune --inplace`;
and on a GPU, the measuring bench's check and a real study."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
from store_data import H100 as _H100

from autotranspose.dispatch import lookup, policy
from autotranspose.errors import TuningError
from autotranspose.kernels.config import KernelConfig
from autotranspose.kinds import inplace as inplace_kind
from autotranspose.kinds.inplace import InplaceParams
from autotranspose.runtime.device import DeviceInfo
from autotranspose.store import Store, untrusted
from autotranspose.store.measurement import Measurement
from autotranspose.tuner.inplacemeasure import transposed_bytes
from autotranspose.tuner.study.inplace import (
    inplace_known_good,
    inplace_space,
    inplace_study_name,
    inplace_target,
    tune_inplace,
)
from autotranspose.tuner.study.settings import TuneSettings

pytestmark = pytest.mark.usefixtures("isolated_home")
pytest_plugins = ("store_fixtures",)

# a GPU model no shipped file is for: what lookup serves comes from the test's store alone
GPU = DeviceInfo.from_dict({**_H100.to_dict(), "name": "In-place Tuning Test GPU"})
DTYPES = {1: "int8", 2: "float16", 4: "float32", 8: "float64", 16: "complex128"}


def _sides(rng, square: bool) -> tuple[int, int, int]:
    """A random (batch, m, n): a square or a rectangle."""
    m = n = int(rng.integers(2, 5000))
    while n == m and not square:
        n = int(rng.integers(2, 5000))
    return (int(rng.integers(1, 4)), m, n)


def _ok(rng) -> Measurement:
    copy = float(rng.uniform(2500, 3200))
    return Measurement("ok", float(rng.uniform(0.1, 0.95)) * copy, copy, 10.0)


# --- the space -----------------------------------------------------------------------------------
@pytest.mark.parametrize("elem_bytes", sorted(DTYPES))
@pytest.mark.parametrize("square", [False, True])
def test_the_space_is_the_kinds_for_the_case(rng, elem_bytes, square):
    """Every config is an in-place one of the element size that fits the device, the
    default among them, no two alike; a square's vary its SWAP tile and block only, a
    rectangle's everything but the tile; each is stored under the case's problem and class."""
    target = inplace_target(DTYPES[elem_bytes], _sides(rng, square))
    space = inplace_space(GPU, target)
    configs = space.configs
    default = policy.inplace_config(elem_bytes, policy.inplace_default(elem_bytes, square))
    assert default in space and target.default == default
    assert all(c.kind == inplace_kind.NAME and c.elem_bytes == elem_bytes for c in configs)
    assert all(c.fits(GPU.limits) and not c.conjugate for c in configs)
    assert len({c.params for c in configs}) == len(configs)
    base = inplace_kind.default(elem_bytes, square)
    if square:
        fixed = {(c.params.unroll, c.params.lane_bytes, c.params.blocks_per_sm) for c in configs}
        assert fixed == {(base.unroll, base.lane_bytes, base.blocks_per_sm)}
        assert len({c.params.tile for c in configs}) > 1
    else:
        assert {c.params.tile for c in configs} == {base.tile}
        assert len({c.params.unroll for c in configs}) == len(inplace_kind.UNROLLS)
    _, m, n = target.shape
    assert target.square == square and target.problem == inplace_kind.problem(square)
    assert target.problem == policy.inplace_problem(m, n)
    assert target.shape_class == policy.inplace_class(*target.shape)
    for c in configs:  # what the store checks on the way in and out
        assert untrusted.check_problem(target.problem, c) == target.problem
    for c in configs:  # Optuna's parameters find each config again
        assert space.config_for(space.params_of(c)) == c


def test_squares_and_rectangles_have_studies_of_their_own(rng):
    m = int(rng.integers(600, 1000))
    square, wide = inplace_target("float32", (m, m)), inplace_target("float32", (m, m + 1))
    assert square.shape_class == wide.shape_class  # one class: the problem keeps them apart
    names = [inplace_study_name(GPU, t, inplace_space(GPU, t)) for t in (square, wide)]
    assert names[0] != names[1]
    assert "inplace:square" in names[0] and ":inplace:" in names[1]
    assert all(str(square.shape_class) in n and ":s4:" in n for n in names)


def test_neighbours_step_one_parameter_within_the_space(rng):
    target = inplace_target("float16", _sides(rng, False))
    space = inplace_space(GPU, target)
    c = space.configs[int(rng.integers(len(space)))]
    found = space.neighbours(c)
    assert found and all(n in space for n in found)
    fields = inplace_kind.field_names()
    for n in found:
        changed = [f for f in fields if getattr(n.params, f) != getattr(c.params, f)]
        assert len(changed) == 1


@pytest.mark.parametrize("shape", [(1, 5000), (7, 1), (2, 1, 9)])
def test_a_side_of_one_has_nothing_to_tune(shape):
    with pytest.raises(TuningError, match="nothing to tune"):
        inplace_target("float32", shape)


@pytest.mark.parametrize("elem_bytes", sorted(DTYPES))
def test_the_reference_is_numpys_transpose_of_the_bytes(rng, elem_bytes):
    b, m, n = _sides(rng, False)
    m, n = m % 97 + 2, n % 89 + 2
    data = rng.integers(0, 256, b * m * n * elem_bytes, dtype=np.uint8)
    got = transposed_bytes(data, elem_bytes, (b, m, n)).reshape(b, n, m, elem_bytes)
    want = data.reshape(b, m, n, elem_bytes).transpose(0, 2, 1, 3)
    assert np.array_equal(got, want)


# --- the bench on a stand-in device ----------------------------------------------------------------
class _Memory:
    """Device memory as one host array: pointers are offsets from BASE."""

    BASE = 1 << 40

    def __init__(self) -> None:
        self.bytes = np.zeros(0, np.uint8)

    def alloc(self, nbytes: int) -> int:
        at = len(self.bytes)
        self.bytes = np.concatenate([self.bytes, np.zeros(-(-nbytes // 256) * 256, np.uint8)])
        return self.BASE + at

    def at(self, ptr: int, nbytes: int) -> np.ndarray:
        start = ptr - self.BASE
        assert 0 <= start and start + nbytes <= len(self.bytes), "outside the allocations"
        return self.bytes[start : start + nbytes]


@pytest.fixture
def device(monkeypatch):
    """The driver calls InplaceBench makes, on host memory (`device.mem`), its support fill
    bytes drawn from the seed, and timing a few runs; `device.program(ptr)` stands in for
    every config's in-place program on the matrix at `ptr` (an exception it returns is
    raised, as a failed launch), the pointers it ran on kept in `device.pointers`."""
    import ctypes
    import types

    from autotranspose.runtime import driver as drv, inplace as runtime_inplace
    from autotranspose.tuner import measure

    mem = _Memory()

    class Allocation(int):
        def __new__(cls, nbytes, ctx):
            self = super().__new__(cls, mem.alloc(nbytes))
            self.ptr, self.nbytes, self.freed = int(self), nbytes, False
            return self

        def free(self):
            self.freed = True

    def to_host(dst, src, n):
        ctypes.memmove(dst, mem.at(src, n).ctypes.data, n)

    def fill(grid, block, fmt, ptr, words, seed, mask):
        mem.at(ptr, 4 * words)[:] = np.random.default_rng(seed).integers(0, 256, 4 * words)

    state = types.SimpleNamespace(
        ctx=7, info=types.SimpleNamespace(l2_bytes=1 << 20), synchronize=lambda: None
    )
    ns = types.SimpleNamespace(mem=mem, state=state, program=None, pointers=[], built=[])

    def build(st, b, m, n, e, conjugate, params, fused, cycles):
        ns.built.append(params)
        return types.SimpleNamespace(steps=(), scratch_bytes=0)

    def native(prog, tables, ctx, scratch):
        def run(src, dst, stream):
            ns.pointers.append(src)
            got = ns.program(src)
            if isinstance(got, Exception):
                raise got

        return types.SimpleNamespace(run=run)

    monkeypatch.setattr(drv, "Allocation", Allocation)
    monkeypatch.setattr(drv, "memset_d8", lambda ptr, v, n: mem.at(ptr, n).fill(v))
    monkeypatch.setattr(drv, "memcpy_dtoh", to_host)
    monkeypatch.setattr(
        drv, "memcpy_dtod", lambda d, s, n: mem.at(d, n).__setitem__(..., mem.at(s, n))
    )
    monkeypatch.setattr(
        measure, "_support", lambda st: types.SimpleNamespace(fill=types.SimpleNamespace(call=fill))
    )
    monkeypatch.setattr(measure, "spin_hold", lambda st: None)
    monkeypatch.setattr(
        measure, "time_rotating", lambda d, run, **kw: [run(k) for k in range(5)] and 1e-4
    )
    monkeypatch.setattr(runtime_inplace, "build", build)
    monkeypatch.setattr(runtime_inplace, "native", native)
    monkeypatch.setattr(runtime_inplace, "passes", lambda *a: (None, []))
    monkeypatch.setattr("autotranspose.runtime.compiler.precompile_specs", lambda st, specs: None)
    return ns


@pytest.mark.parametrize("square", [False, True])
def test_the_bench_checks_bit_for_bit_between_guards(device, rng, square):
    """A program that transposes passes and times on rotated sets; one that leaves the bytes,
    changes one, writes a byte past the matrix or before it, or raises, is caught."""
    from autotranspose.tuner.inplacemeasure import (
        GUARD_BYTES,
        MAX_SETS,
        InplaceBench,
        measure_inplace,
    )

    e = int(rng.choice(sorted(DTYPES)))
    b, m, n = _sides(rng, square)
    m, n = (m % 300 + 2, n % 300 + 2) if not square else (m % 300 + 2,) * 2
    mem, nbytes = device.mem, b * m * n * e
    bench = InplaceBench(device.state, e, (b, m, n))
    # past 4x the L2, at most MAX_SETS (matrices of a few hundred bytes)
    sets = 1 if nbytes > 1 << 20 else min(MAX_SETS, -(-4 * (1 << 20) // nbytes))
    assert bench.nbytes == nbytes and bench.sets == sets
    assert bench.stride >= nbytes + GUARD_BYTES and bench.stride % 256 == 0
    assert len({bench.matrix(k) % 256 for k in range(bench.sets)}) == 1

    def transpose(ptr):
        x = mem.at(ptr, nbytes)
        x[:] = x.reshape(b, m, n, e).transpose(0, 2, 1, 3).reshape(-1).copy()

    def poke(offset):
        def run(ptr):
            transpose(ptr)
            mem.at(ptr + offset, 1)[0] ^= 0xFF

        return run

    cfg = inplace_target(DTYPES[e], (b, m, n)).default
    assert bench.precompile([cfg]) == {} and device.built == [cfg.params]
    for program, want in [
        (transpose, None),
        (lambda ptr: None, "wrong output"),
        (poke(int(rng.integers(nbytes))), f"wrong output: 1 of {nbytes} bytes differ"),
        (poke(nbytes + int(rng.integers(GUARD_BYTES))), "wrote past the end"),
        (poke(-1 - int(rng.integers(GUARD_BYTES))), "wrote before the matrix"),
    ]:
        device.program = program
        got = bench.check(bench.launcher(cfg))
        if want is None:
            assert got is None
        else:
            assert got is not None and got.startswith(want), got
    device.program, device.pointers[:] = transpose, []
    copy = bench.gbps(bench.copy_time())
    m_ok = measure_inplace(bench, cfg, copy)
    assert m_ok.ok and m_ok.gbps == pytest.approx(2 * nbytes / 1e-4 / 1e9)
    assert m_ok.copy_gbps == copy
    timed = device.pointers[1:]  # after the check's run on set 0
    assert timed == [bench.matrix(k) for k in range(5)]
    assert len(set(timed)) == min(5, bench.sets)
    device.program = lambda ptr: RuntimeError("launch failed")
    failed = measure_inplace(bench, cfg, copy)
    assert failed.status == "fail" and "launch failed" in failed.error
    bench.close()


def test_a_matrix_past_the_l2_is_one_set(device):
    from autotranspose.tuner.inplacemeasure import InplaceBench

    bench = InplaceBench(device.state, 1, (1, 1100, 1000))  # past the 1 MiB L2
    assert bench.sets == 1 and bench.matrix(3) == bench.matrix(0)
    assert InplaceBench(device.state, 1, (1, 1000, 1000)).sets == 5  # 4 MiB or more


# --- studies -------------------------------------------------------------------------------------
class _InplaceObjective:
    """Deterministic GB/s from an in-place config's parameters; `favour` picks which ones
    win (so a square's study and a rectangle's find other bests)."""

    def __init__(self, favour: str = "unroll") -> None:
        self.measured: list[KernelConfig] = []
        self.favour = favour

    def gbps(self, c: KernelConfig) -> float:
        p = c.params
        gbps = 1000.0 + p.threads / 8 + 5 * p.blocks_per_sm
        return gbps + 40 * (p.unroll if self.favour == "unroll" else 64 // p.tile)

    def __call__(self, configs):
        self.measured += configs
        return [Measurement("ok", self.gbps(c), 3000.0, 10.0) for c in configs]


def _tune(db, dtype, shape, objective, trials=6, seed=3):
    return tune_inplace(
        dtype, shape, objective=objective, store=db, device=GPU,
        settings=TuneSettings(trials=trials, seed=seed, batch=3),
    )  # fmt: skip


def test_a_study_stores_its_best_where_lookup_serves_it_and_resumes(db, rng, quiet_optuna):
    shape = (int(rng.integers(600, 1500)), int(rng.integers(1600, 3000)))
    objective = _InplaceObjective()
    result = _tune(db, "float16", shape, objective)
    target = inplace_target("float16", shape)
    assert objective.measured[0] == target.default  # measured first
    assert len(objective.measured) == 6 and result.config in objective.measured
    assert len(set(objective.measured)) == 6
    want = max(objective.measured, key=objective.gbps)
    assert result.config == want
    assert result.shape_class == target.shape_class
    best = db.best(GPU.name, 2, target.shape_class, inplace_kind.RECTANGLE)
    assert best.config == result.config
    assert db.entries(problem="") == [] and db.entries(problem=inplace_kind.SQUARE) == []
    lookup.clear_cache()
    choice = lookup.inplace_choice(GPU, 2, 1, *shape, store=db)
    assert (choice.config, choice.source) == (result.config, "tuned")
    # another shape of the class is served it too; another element size is not
    other = (shape[0] + 1, shape[1] - 1)
    if policy.inplace_class(1, *other) == target.shape_class:
        assert lookup.inplace_choice(GPU, 2, 1, *other, store=db).config == result.config
    assert lookup.inplace_choice(GPU, 4, 1, *shape, store=db).source == "default"
    # resumed: nothing measured twice, the same answer
    again = _InplaceObjective()
    resumed = _tune(db, "float16", shape, again)
    assert again.measured == [] and resumed.config == result.config
    # more trials: only configs not measured before
    more = _InplaceObjective()
    _tune(db, "float16", shape, more, trials=9)
    assert len(more.measured) == 3 and not set(more.measured) & set(objective.measured)


def test_a_square_and_a_rectangle_of_one_class_keep_their_own_bests(db, rng, quiet_optuna):
    m = int(rng.integers(600, 1000))
    square, wide = (m, m), (m, m + 1)
    sq = _tune(db, "float32", square, _InplaceObjective("tile"), trials=9)
    rect_objective = _InplaceObjective("unroll")
    rect = _tune(db, "float32", wide, rect_objective, trials=6)
    assert sq.shape_class == rect.shape_class
    assert {c.params.tile for c in rect_objective.measured} == {inplace_kind.default(4).tile}
    assert sq.config.params.tile == 16  # every square config measured: SWAP's tile won
    assert rect.config == max(rect_objective.measured, key=rect_objective.gbps)
    lookup.clear_cache()
    assert lookup.inplace_choice(GPU, 4, 1, *square, store=db).config == sq.config
    assert lookup.inplace_choice(GPU, 4, 1, *wide, store=db).config == rect.config
    problems = {e.problem: e.config for e in db.entries(GPU.name)}
    assert problems == {inplace_kind.SQUARE: sq.config, inplace_kind.RECTANGLE: rect.config}


def test_a_study_starts_from_the_default_then_its_problems_neighbours(db, rng):
    """Warm starts: the default, then the results of the same problem and element size for
    other classes, nearest first; never another problem's or another element size's."""
    target = inplace_target("float16", (1000, 3000))
    space = inplace_space(GPU, target)
    configs = [c for c in space.configs if c != target.default]
    near, far, wider = (configs[i] for i in rng.choice(len(configs), 3, replace=False))

    def record(cfg, e, shape, problem):
        cls = policy.inplace_class(*shape)
        db.record(None, GPU, "uint8", e, shape, cls, cfg, _ok(rng), problem=problem)

    rect, sq = inplace_kind.RECTANGLE, inplace_kind.SQUARE
    record(near, 2, (1, 1000, 1500), rect)
    record(far, 2, (1, 60, 90), rect)
    record(policy.inplace_config(2, InplaceParams(tile=16)), 2, (1, 999, 999), sq)
    record(policy.inplace_config(4, wider.params), 4, (1, 1000, 3000), rect)
    lookup.clear_cache()
    assert inplace_known_good(GPU, target, space, db) == [target.default, near, far]
    # what lookup serves the class itself comes second
    record(wider, 2, (1, 1000, 3000), rect)
    lookup.clear_cache()
    assert inplace_known_good(GPU, target, space, db)[:2] == [target.default, wider]


# --- the command line ----------------------------------------------------------------------------
def _cli(*argv: str) -> tuple[int, str, str, list]:
    from _synthetic import DEVICE

    from autotranspose import cli

    calls = []

    def factory(dtype, shape, device, conjugate, layout=None, cast=None, inplace=False):
        calls.append((dtype, shape, device, conjugate, layout, cast, inplace))
        objective = _InplaceObjective()
        objective.device = DEVICE
        return objective

    out, err = io.StringIO(), io.StringIO()
    rc = cli.run(list(argv), make_objective=factory, stdout=out, stderr=err)
    return rc, out.getvalue(), err.getvalue(), calls


def test_tune_inplace_stores_each_dtype_and_shape_under_its_problem(tmp_path, quiet_optuna):
    from _synthetic import DEVICE

    db = str(tmp_path / "t.db")
    rc, out, err, calls = _cli(
        "tune", "--inplace", "--dtypes", "float16", "bfloat16",
        "--shapes", "8192x7168", "3x1000x999", "512x512", "--trials", "3", "--seed", "5",
        "--db", db,
    )  # fmt: skip
    assert rc == 0, err
    assert len(calls) == 6 and all(c[-1] is True and c[3] is False for c in calls)
    assert {c[1] for c in calls} == {(1, 8192, 7168), (3, 1000, 999), (1, 512, 512)}
    assert "inplace:square" in out and out.count("inplace ") >= 4
    assert "tuned 6 of 6 in-place transposes" in err
    with Store.open(db) as store:
        entries = store.entries(DEVICE.name)
    assert {(e.problem, e.elem_bytes) for e in entries} == {
        (inplace_kind.RECTANGLE, 2),
        (inplace_kind.SQUARE, 2),
    }
    assert all(e.config.kind == inplace_kind.NAME for e in entries)
    classes = {str(e.shape_class) for e in entries}
    assert len(classes) == 3  # the bests of float16 and bfloat16 are one element size's
    rc, out, _, _ = _cli("show", "--db", db, "--device", DEVICE.name)
    assert rc == 0 and "inplace:square" in out and out.count("inplace") == 3


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--cast", "bf16:e4m3"), "--cast is not for them"),
        (("--both",), "--both is not for them"),
        (("--axes", "1,0"), "--axes is not for them"),
        (("--conjugate",), "--conjugate is not for them"),
        (("--devices", "0"), "--devices is not for them"),
    ],
)
def test_tune_inplace_refuses_what_is_not_for_it(tmp_path, extra, message):
    rc, _, err, calls = _cli(
        "tune", "--inplace", "--shapes", "1024x1000", "--db", str(tmp_path / "t.db"), *extra
    )
    assert rc == 2 and message in err and not calls


def test_tune_inplace_refuses_a_shape_with_nothing_to_tune(tmp_path):
    rc, _, err, calls = _cli(
        "tune", "--inplace", "--shapes", "1024x1000", "1x4096", "--db", str(tmp_path / "t.db")
    )
    assert rc == 2 and "nothing to tune" in err and not calls


def test_tune_help_names_inplace():
    from autotranspose import cli

    sub = cli.build_parser()._subparsers._group_actions[0].choices["tune"]
    text = " ".join(sub.format_help().split())
    assert "--inplace" in text and "transpose_()" in text


# --- on a GPU ------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("square", [False, True])
def test_the_bench_checks_programs_and_catches_wrong_ones(rng, square):
    """The default program is right on fresh random bytes and times against the copy; a
    wrong reference, a changed byte of the matrix and a byte written past it are caught."""
    from autotranspose.runtime import driver as drv
    from autotranspose.runtime.compiler import activate
    from autotranspose.tuner.inplacemeasure import GUARD_BYTES, InplaceBench, measure_inplace

    state = activate(0)
    e = int(rng.choice(sorted(DTYPES)))
    m = int(rng.integers(100, 2000))
    n = m if square else m + int(rng.integers(1, 1500))
    shape = (int(rng.integers(1, 4)), *((m, n) if rng.random() < 0.5 else (n, m)))
    bench = InplaceBench(state, e, shape)
    try:
        cfg = inplace_target(DTYPES[e], shape).default
        assert not bench.precompile([cfg])
        run = bench.launcher(cfg)
        assert bench.check(run) is None
        assert bench.check(run) is None  # again, on other fresh bytes
        wrong = bench.check(run, reference=lambda data: data.copy())
        assert wrong is not None and wrong.startswith("wrong output:")
        at = int(rng.integers(bench.nbytes))

        def changed(k):
            run(k)
            drv.memset_d8(bench.matrix(0) + at, 0, 1)

        got = bench.check(changed)
        # a byte already 0 after the transpose is a right result: the check is bit for bit
        assert (
            got is None
            or got
            == f"wrong output: 1 of {bench.nbytes} bytes differ from the transpose of the input"
        )

        def past(k):
            run(k)
            drv.memset_d8(bench.matrix(0) + bench.nbytes + int(rng.integers(GUARD_BYTES)), 0, 1)

        assert "past the end" in bench.check(past)

        def before(k):
            run(k)
            drv.memset_d8(bench.matrix(0) - 1 - int(rng.integers(GUARD_BYTES)), 0, 1)

        assert "before the matrix" in bench.check(before)
        copy_gbps = bench.gbps(bench.copy_time())
        m = measure_inplace(bench, cfg, copy_gbps)
        assert m.ok and m.gbps > 0 and m.copy_gbps == copy_gbps, m.error
    finally:
        bench.close()


@pytest.mark.gpu
def test_an_inplace_study_runs_on_the_gpu(tmp_path, quiet_optuna):
    from autotranspose.tuner.study.inplace import tune_inplace_gpu

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = tune_inplace_gpu(
            "float16", (1000, 1536), db=str(tmp_path / "t.db"),
            settings=TuneSettings(trials=4, seed=int(np.random.default_rng().integers(1000))),
        )  # fmt: skip
    assert result.measurement.ok and result.config.kind == inplace_kind.NAME
    assert result.trials == 4 and result.measured + result.reused == 4
    with Store.open(tmp_path / "t.db") as store:
        device = store.devices()[0]
        best = store.best(device.name, 2, result.shape_class, inplace_kind.RECTANGLE)
        assert best is not None and best.config == result.config
        lookup.clear_cache()
        choice = lookup.inplace_choice(device, 2, 1, 1000, 1536, store=store)
    assert (choice.config, choice.source) == (result.config, "tuned")

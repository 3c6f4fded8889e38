"""transpose_()'s host side without a GPU: dispatch/inplace.py builds a program from a device's
facts (a real DeviceInfo) and calls/inplace.py queues it in order: tables and scratch before any
pass, each pass's second pointer, long rows in groups, one scratch kept per stream. The GPU
itself is a recorder standing in for the driver and the prepared launches
(tests/test_inplace_gpu.py runs the real ones)."""

from __future__ import annotations

import itertools
import struct

import pytest

from autotranspose.calls import inplace as call
from autotranspose.dispatch import inplace as programs
from autotranspose.kernels.inplace import ARG_FORMAT, ARG_NAMES, STAGED_ZERO
from autotranspose.runtime import driver as _driver, inplace as _inplace
from autotranspose.runtime.compiler import DeviceState
from autotranspose.runtime.device import DeviceInfo

H200 = DeviceInfo("NVIDIA H200", (9, 0), multiprocessors=132)


class _Launch:
    """What dispatch would prepare: the launch's arguments, and its runs recorded."""

    def __init__(self, log, spec, blocks, args, smem):
        self.log, self.spec, self.blocks, self.smem = log, spec, blocks, smem
        self.scalars = tuple(int(args.get(k, 0)) for k in ARG_NAMES)
        self.grid, self.block, self.shared, self.optin = (blocks, 1, 1), (256, 1, 1), smem, 0

    def prepared(self, ctx):
        return _Prepared(self.spec.piece, ctx, self.grid, self.block, b"")


class _Prepared:
    """A prepared launch: its kernel (the piece's name) and its argument block's tail."""

    def __init__(self, func, ctx, grid, block, tail, shared=0):
        self.args, self.piece, self.tail = (func,), func, tail

    def values(self):
        return dict(zip(ARG_NAMES, struct.unpack(ARG_FORMAT, self.tail), strict=True))


@pytest.fixture
def gpu(monkeypatch):
    """A recording stand-in for the driver calls the in-place path makes."""
    log: list[tuple] = []
    monkeypatch.setattr(
        _inplace,
        "make_inplace",
        lambda state, spec, blocks, args, smem=0: _Launch(log, spec, blocks, args, smem),
    )
    monkeypatch.setattr(_inplace, "precompile_specs", lambda state, specs: None)
    monkeypatch.setattr(_driver, "current", lambda: 7)
    monkeypatch.setattr(_driver, "set_current", lambda ctx: None)
    monkeypatch.setattr(
        _driver, "is_capturing", lambda stream: log.append(("capturing?",)) or False
    )
    monkeypatch.setattr(
        _driver,
        "mem_alloc_async",
        lambda nbytes, stream, ctx: log.append(("alloc", nbytes, stream)) or 0x5000_0000,
    )
    monkeypatch.setattr(
        _driver, "mem_free_async", lambda ptr, stream, ctx: log.append(("free", ptr, stream))
    )
    monkeypatch.setattr(
        _driver,
        "memcpy_dtod_async",
        lambda dst, src, n, stream, ctx: log.append(("copy", dst, src, n, stream)),
    )
    monkeypatch.setattr(_driver, "Prepared", _Prepared)
    monkeypatch.setattr(_driver, "allow_function_dynamic_shared", lambda func, nbytes, ctx: None)
    monkeypatch.setattr(
        _driver,
        "launch_transpose",
        lambda prep, src, dst, stream, *_: log.append(("run", prep.piece, src, dst, stream, prep)),
    )

    class _Allocation(int):
        def __new__(cls, nbytes, ctx):
            log.append(("allocation", nbytes))
            self = super().__new__(cls, 0x6000_0000 + 0x1000 * len(log))
            self.ptr, self.nbytes, self.ctx = int(self), nbytes, ctx
            return self

    monkeypatch.setattr(_driver, "Allocation", _Allocation)
    monkeypatch.setattr(_driver, "memcpy_htod", lambda dst, src, n: log.append(("upload", n)))
    monkeypatch.setattr(call, "_TABLES", {})
    monkeypatch.setattr(call, "_SCRATCH", {})
    monkeypatch.setattr(call, "_RETIRED", [])
    programs.clear()
    yield log
    programs.clear()


def _state() -> DeviceState:
    return DeviceState(0, 0xC0, H200)


def test_a_rectangular_program_queues_tables_and_scratch_before_any_pass(gpu):
    prog = programs.program(_state(), 1, 4099, 6007, 4, fused=False)
    assert [s.how.spec.piece for s in prog.steps] == [
        "shuffle",
        "split_band",
        "permute_save",
        "permute_pieces",
    ]
    assert 0 < prog.scratch_bytes <= (32 << 20) + 4 * 4099 * 3
    call.run(prog, 0x1000_0000, 0xC0, 0x33)
    kinds = [e[0] for e in gpu]
    first_run = kinds.index("run")
    assert kinds.index("upload") < first_run
    table, scratch = (e[1] for e in gpu[:first_run] if e[0] == "allocation")
    assert table == call._TABLES[next(iter(call._TABLES))].nbytes
    assert scratch == prog.scratch_bytes  # the stream's scratch, kept: no free per call
    assert "free" not in kinds and "copy" not in kinds  # no copy of the table per call
    saved = call._SCRATCH[(0xC0, 0x33, 0)].ptr
    for piece in ("permute_save", "permute_pieces"):  # the table, the scratch `offset` past it
        run = next(e for e in gpu if e[:2] == ("run", piece))
        tab = run[3]
        assert (
            run[2] == 0x1000_0000
            and run[4] == 0x33
            and tab == next(iter(call._TABLES.values())).ptr
        )
        assert run[5].values()["offset"] == saved - tab
    gpu.clear()
    call.run(prog, 0x1000_0000, 0xC0, 0x33)  # the table and the scratch are kept
    assert not [e for e in gpu if e[0] in ("upload", "allocation", "alloc", "free")]
    call.run(prog, 0x1000_0000, 0xC0, 0x44)  # another stream: a scratch of its own
    assert [e[0] for e in gpu].count("allocation") == 1 and len(call._SCRATCH) == 2


@pytest.mark.parametrize(
    "m, n, pieces, rules",
    [
        # the columns of 900 and 4099 rows: a block's band (rows of 12014 bytes as they lie
        # in 8-byte words), and of 6007 rows (their 40 bytes a row past 227 KiB: bands of 24)
        (900, 6007, ["shuffle", "cols_slide"], [2]),
        (4099, 6007, ["shuffle", "cols_slide"], [2]),
        (6007, 6011, ["shuffle", "cols_slide"], [2]),
        # rows of whole 16-byte words: compiled per rule
        (4099, 6008, ["shuffle", "cols_rule"], [2]),
        (9000, 6000, ["cols_rule", "shuffle_inv", "cols_rule"], [3, 1]),  # n x m, gcd 3000
        # past a block's 32-byte band: bands of 16 bytes (24 a row), up to 9685 rows
        (7400, 7501, ["shuffle", "cols_slide"], [2]),
        (8282, 7322, ["cols_slide", "shuffle_inv", "cols_slide"], [3, 1]),  # view, gcd 2
        (9800, 9901, ["shuffle", "cols_slide"], [2]),  # past them: bands of 8 (16 a row)
        (9988, 9702, ["cols_slide", "shuffle_inv", "cols_slide"], [3, 1]),  # view, gcd 22
        (14600, 14601, ["shuffle", "cols_staged"], [2]),  # past 14528: through the scratch
        (14802, 14630, ["cols_staged", "shuffle_inv", "cols_staged"], [3, 1]),  # view, gcd 2
        # past a block, rows of whole 16-byte words: over clusters of blocks (sm_90)
        (8280, 7320, ["cols_staged", "shuffle_inv", "cols_cluster"], [3, 1]),  # gcd 40
    ],
)
def test_column_passes_fuse_on_the_side_whose_columns_fit(gpu, m, n, pieces, rules):
    """Every column pass is one COLS pass, on the shorter columns' side: a block's band of
    them where a block holds them (7264 rows of 32 bytes in the H200's 227 KiB; for
    "cols_slide", 9685 of 24 bytes in bands of 16 and 14528 of 16 in bands of 8), else (the
    rotations, rows of whole 16-byte words) over a cluster of blocks, else band by band
    through the scratch, in one launch after the one that zeroes its counters; the table
    (h of every row of the grid) uploaded before the first pass, the scratch `offset` past
    it."""
    prog = programs.program(_state(), 1, m, n, 2)
    got = [s.how.spec.piece for s in prog.steps]
    assert got == pieces
    cols = [s.how for s in prog.steps if s.how.kind == "cols"]
    assert [h.args["split"] for h in cols] == rules
    assert all(h.smem <= H200.limits.max_shared_optin for h in cols)
    call.run(prog, 0x1000_0000, 0xC0, 0x33)
    kinds = [e[0] for e in gpu]
    assert kinds.index("upload") < kinds.index("run")
    grid_rows = m if prog.plan.m == m else n
    assert ("upload", 4 * grid_rows) in gpu and prog.plan.flipped == (grid_rows == n)
    table = next(iter(call._TABLES.values())).ptr
    tabled = rules.index(2 if 2 in rules else 3)
    piece = cols[tabled].spec.piece
    runs = [e for e in gpu if e[:2] == ("run", piece)]
    if piece in ("cols", "cols_words", "cols_slide", "cols_rule", "cols_cluster"):
        assert runs[tabled][3] == table
        return
    scratch = call._SCRATCH[(0xC0, 0x33, 0)].ptr
    staged = [h for h in cols if h.spec.piece == piece]
    assert len(runs) == 2 * len(staged)
    for k, h in enumerate(staged):
        mine = runs[2 * k : 2 * k + 2]
        values = [r[5].values() for r in mine]
        assert [v["segs"] for v in values] == [STAGED_ZERO, 0]
        assert all(v["items"] == h.args["items"] >= 1 for v in values)
        second = table if h.table is not None else scratch
        assert all(
            r[3] == second and v["offset"] == scratch - second
            for r, v in zip(mine, values, strict=True)
        )


def test_an_unprepared_shape_is_refused_under_capture_before_anything_runs(gpu, monkeypatch):
    prog = programs.program(_state(), 2, 300, 140, 4)
    monkeypatch.setattr(_driver, "is_capturing", lambda stream: True)
    with pytest.raises(call.InputTypeError, match="warm-up"):
        call.run(prog, 0x1000_0000, 0xC0, 0x33)
    assert not [e for e in gpu if e[0] in ("run", "alloc", "launch")]


def test_square_runs_one_swap_and_needs_nothing(gpu):
    prog = programs.program(_state(), 3, 96, 96, 16, conjugate=True)
    assert [s.how.spec.piece for s in prog.steps] == ["swap"] and prog.scratch_bytes == 0
    call.run(prog, 0x1000_0000, 0xC0, None)
    assert [e[:5] for e in gpu] == [("run", "swap", 0x1000_0000, 0, None)]


def test_long_rows_go_through_the_scratch_in_groups(gpu):
    # rows of 1.2 MB: past the 227 kB a block may hold; the n x m view's columns too tall to
    # go through the scratch
    m, n, e = 300, 300_001, 4
    prog = programs.program(_state(), 1, m, n, e)
    shuffle = next(s for s in prog.steps if s.how.kind == "shuffle")
    group = (32 << 20) // (n * e)
    assert shuffle.how.spec.piece == "shuffle_global" and shuffle.how.rows_per == group
    call.run(prog, 0x1000_0000, 0xC0, 0x33)
    scratch = call._SCRATCH[(0xC0, 0x33, 0)].ptr
    copies = [x for x in gpu if x[0] == "copy" and x[1] == scratch]
    launches = [x for x in gpu if x[:2] == ("run", "shuffle_global")]
    assert len(launches) == -(-m // group) == len(copies)
    firsts = []
    for copy, run in zip(copies, launches, strict=True):
        values = run[5].values()
        assert run[2:5] == (0x1000_0000, scratch, 0x33)
        assert copy[2] == 0x1000_0000 + values["row"] * n * e
        assert copy[3] == values["rows_per"] * n * e
        firsts.append((values["row"], values["rows_per"]))
    assert firsts[0] == (0, group) and sum(k for _, k in firsts) == m
    assert all(b == a + k for (a, k), (b, _) in itertools.pairwise(firsts))


def test_grids_and_shared_memory_fit_the_device(gpu):
    for shape in [(1, 1000, 600), (4, 37, 5003), (1, 64, 3), (2, 5000, 70)]:
        prog = programs.program(_state(), *shape, 8)
        for s in prog.steps:
            assert 1 <= s.launch.blocks <= H200.multiprocessors * s.how.spec.params.blocks_per_sm
            assert s.launch.smem <= H200.limits.max_shared_optin


def test_gpus_before_sm_90_take_no_clusters(gpu):
    """An A100 (sm_80, no thread-block clusters) runs the rotations of columns past a block
    through the scratch, where an H200 runs them over clusters; the same shape, the same
    plan."""
    a100 = DeviceInfo("NVIDIA A100-SXM4-80GB", (8, 0), multiprocessors=108)
    assert _inplace.cluster_max((8, 0)) == 0 and _inplace.cluster_max((9, 0)) == 8
    on_a100 = programs.program(DeviceState(1, 0xC1, a100), 1, 8280, 7320, 2)  # GPU 1
    on_h200 = programs.program(_state(), 1, 8280, 7320, 2)
    assert on_a100.plan == on_h200.plan
    assert not [s for s in on_a100.steps if s.how.spec.piece == "cols_cluster"]
    assert [s.how.spec.cluster for s in on_h200.steps if s.how.spec.piece == "cols_cluster"]


@pytest.mark.parametrize("seed", range(4))
def test_a_staged_layout_fits_the_scratch_for_every_column_it_takes(seed):
    """Any grid whose columns a staged pass may take (up to staged_rows rows, 1- to 16-byte
    elements, any batch and width of up to 2**40 bytes in all: a band holds 10 MiB or a SKEW
    tile of every row, so the counters stay under STAGE_COUNTERS_MOST): whole SKEW tiles a
    band, the bands cover every column, one to STAGE_BUFFERS buffers, and counters and
    buffers within the scratch."""
    import numpy as np

    from autotranspose.kernels import inplace as k

    rng = np.random.default_rng([seed, 20261202])
    for _ in range(200):
        e = int(rng.choice([1, 2, 4, 8, 16]))
        m = int(rng.integers(k.cols_rows(227 << 10), k.staged_rows() + 1))
        n = int(rng.integers(1, 1 << int(rng.integers(1, 20))))
        batch = int(rng.integers(1, 1 << int(rng.integers(1, 12))))
        batch = max(1, min(batch, (1 << 40) // (m * n * e)))
        if batch * m * n * e > 1 << 40:
            continue
        lay = k.staged_layout(batch, m, n, e, k.STAGE_BYTES, k.SCRATCH_BYTES)
        assert lay is not None, (batch, m, n, e)
        assert lay.width % k.skew_cols(e) == 0 and lay.bands * lay.width >= n
        assert (lay.bands - 1) * lay.width < n
        assert 1 <= lay.buffers <= min(k.STAGE_BUFFERS, batch * lay.bands)
        assert lay.counters >= 4 * (2 + 2 * batch * lay.bands) and lay.counters % 256 == 0
        assert lay.buffer >= m * lay.width * e and lay.scratch <= k.SCRATCH_BYTES

"""transpose_()'s kernels (templates/inplace/) run on the CPU by tests/_cuda_emulator.h,
launched exactly as kernels/inplace.py's `pass_launches` says: every element size, square,
rectangular (primes, skinny, gcd > 1), batched, conjugate and rows too long for shared
memory land where `x.T` has them, and nothing outside the matrices is written."""

from __future__ import annotations

import ctypes
import hashlib
import math
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from _packed_emu import CXX, FLAGS, HERE

from autotranspose.kernels import inplace as inplace_kernels
from autotranspose.kernels.inplace import (
    ARG_FORMAT,
    ARG_NAMES,
    BAND_PAIRS,
    BAND_ROWS,
    COLS_WORDS_THREADS,
    RUN_MIN_BYTES,
    SCRATCH_BYTES,
    SHUFFLE_PAD,
    STAGED_ZERO,
    InplaceKernel,
    band_cols,
    pass_launches,
    render_inplace,
    split_cols_width,
    staged_layout,
)
from autotranspose.kinds.inplace import InplaceParams
from autotranspose.plans.inplace import PERMUTE, plan_inplace, row_cycles, split_point

pytestmark = pytest.mark.skipif(CXX is None, reason="needs g++ (C++20) to run kernels on the CPU")
# small blocks and grids: every grid-stride loop walks several items, tiles of 16 cut edges
PARAMS = InplaceParams(tile=16, threads=128, blocks_per_sm=2, unroll=2)
GUARD = 64
POISON = 0xA5
_DYNAMIC = "extern __shared__ __align__(16) unsigned char smem[];"
_EMU_SMEM = 227 << 10
# shared-memory atomics and warp reductions the banded SPLIT takes, for the emulator's threads
_ATOMICS = """
inline int atomicMin(int* p, int v) {
    std::atomic_ref<int> a(*p);
    int old = a.load();
    while (v < old && !a.compare_exchange_weak(old, v)) {}
    return old;
}
inline int atomicMax(int* p, int v) {
    std::atomic_ref<int> a(*p);
    int old = a.load();
    while (v > old && !a.compare_exchange_weak(old, v)) {}
    return old;
}
// a warp's reduction (every thread of the block calls it, as the kernel does): the values
// meet in a block-wide array between two barriers
inline int at_emu_warp_reduce(int v, bool least) {
    static int vals[1024];
    vals[threadIdx.x] = v;
    __syncthreads();
    const unsigned base = threadIdx.x & ~31u;
    int r = vals[base];
    for (unsigned i = base + 1; i < base + 32 && i < blockDim.x; ++i)
        r = least ? (vals[i] < r ? vals[i] : r) : (vals[i] > r ? vals[i] : r);
    __syncthreads();
    return r;
}
inline int __reduce_min_sync(unsigned, int v) { return at_emu_warp_reduce(v, true); }
inline int __reduce_max_sync(unsigned, int v) { return at_emu_warp_reduce(v, false); }
"""


def _library(k: InplaceKernel, smem: int, tmp: Path) -> ctypes.CDLL:
    source = render_inplace(k)
    if _DYNAMIC in source:  # each block's buffer, of the launch's size (at_emu_run's smem)
        assert smem <= _EMU_SMEM
        source = source.replace(_DYNAMIC, "unsigned char* const smem = at_emu_smem;")
    src = (
        '#include <atomic>\n#include <cmath>\n#include "_cuda_emulator.h"\n'
        + _ATOMICS
        + source
        + f"""
extern "C" void at_emu_run(unsigned grid, void* x, const void* aux, const void* args,
                           unsigned long smem) {{
    const at_inplace_args a = *(const at_inplace_args*)args;
    at_emu_launch(grid, {k.params.threads}, [&] {{ {k.name}((at_elem*)x, aux, a); }},
                  {max(1, k.cluster)}, smem);
}}
extern "C" void at_emu_run_all(unsigned grid, void* x, const void* aux, const void* args,
                               unsigned long smem) {{
    const at_inplace_args a = *(const at_inplace_args*)args;
    at_emu_launch_all(grid, {k.params.threads}, [&] {{ {k.name}((at_elem*)x, aux, a); }}, smem);
}}
"""
    )
    digest = hashlib.sha256(src.encode()).hexdigest()[:16]
    lib = tmp / f"inplace_{digest}.so"
    if not lib.exists():
        cpp = tmp / f"inplace_{digest}.cpp"
        cpp.write_text(src)
        subprocess.run(
            [CXX, *FLAGS, f"-I{HERE}", str(cpp), "-o", str(lib)], check=True, capture_output=True
        )
    return ctypes.CDLL(str(lib))


def _run(
    x,
    batch,
    m,
    n,
    conjugate,
    optin,
    tmp,
    scratch_limit=SCRATCH_BYTES,
    band_rows=0,
    staged=None,
    params=PARAMS,
    cluster=0,
):
    """x's bytes (a flat view inside a guarded buffer) transposed by the emulated passes, the
    scratch and tables handled as calls/inplace.py handles them; columns of up to
    `band_rows` rows by COLS, through the scratch where `staged` (staged_from, stage_bytes)
    says, over clusters of up to `cluster` blocks where `cluster_band` takes them."""
    e = x.dtype.itemsize
    plan = plan_inplace(batch, m, n, conjugate, band_rows, (optin - SHUFFLE_PAD) // e)
    permutes = any(p.kind == PERMUTE for p in plan.passes)
    cycles = row_cycles(m, n, plan.a) if permutes else None
    hows = pass_launches(
        plan, e, params, 2, optin, cycles, scratch_limit, *(staged or (None, None)), cluster
    )
    # past the largest scratch a pass takes, a guard its kernels must leave alone
    scratch = np.zeros(max((h.scratch for h in hows), default=0) + 4096, np.uint8)
    data = x.view(np.uint8)
    pieces = None
    for how in hows:
        lib = _library(how.spec, how.smem, tmp)
        values = {**how.args}
        table = None if how.table is None else np.ascontiguousarray(how.table, np.uint32)
        aux = 0
        if how.aux == "leaders":
            aux = table.ctypes.data
        elif how.aux == "scratch":  # PERMUTE's pieces: their table, the scratch `offset` past it
            pieces = table if table is not None else pieces
            aux = pieces.ctypes.data
            values["offset"] = scratch.ctypes.data - aux
        elif how.aux == "rows":
            aux = scratch.ctypes.data
        elif how.aux == "bands":  # the table, the scratch `offset` past it; or the scratch
            aux = scratch.ctypes.data if table is None else table.ctypes.data
            values["offset"] = scratch.ctypes.data - aux

        def launch(values=values, lib=lib, how=how, aux=aux, together=False):
            args = struct.pack(ARG_FORMAT, *(values.get(k, 0) for k in ARG_NAMES))
            (lib.at_emu_run_all if together else lib.at_emu_run)(
                ctypes.c_uint(how.blocks),
                ctypes.c_void_p(x.ctypes.data),
                ctypes.c_void_p(aux),
                ctypes.c_char_p(args),
                ctypes.c_ulong(max(how.smem, 16)),
            )

        if how.aux == "bands":  # the counters zeroed (over poison), then every band's parts
            scratch[:] = POISON
            values["segs"] = STAGED_ZERO
            launch()
            values["segs"] = 0
            launch(together=True)  # its blocks all at once: items wait on other blocks'
            # the kernel's counters and buffers lie within the scratch the host sized
            assert (scratch[how.scratch :] == POISON).all()
            continue
        groups = range(0, how.rows, how.rows_per) if how.rows else [None]
        for r0 in groups:
            if r0 is not None:  # the host's copy of a group of rows (cuMemcpyDtoDAsync)
                k, row = min(how.rows_per, how.rows - r0), how.args["n"] * e  # the grid's rows
                scratch[: k * row] = data[r0 * row : (r0 + k) * row]
                values["row"], values["rows_per"] = r0, k
            launch()
    return hows


_DTYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.complex128}


def _check(
    batch,
    m,
    n,
    e,
    tmp,
    conjugate=False,
    optin=227 << 10,
    scratch_limit=SCRATCH_BYTES,
    shift=0,
    band_rows=0,
    staged=None,
    params=PARAMS,
    cluster=0,
):
    rng = np.random.default_rng([batch, m, n, e, conjugate])
    if conjugate:
        dt = np.complex64 if e == 8 else np.complex128
        x0 = (rng.standard_normal((batch, m, n)) + 1j * rng.standard_normal((batch, m, n))).astype(
            dt
        )
    else:
        x0 = rng.integers(0, 256, (batch, m, n, e), dtype=np.uint8).view(f"V{e}")[..., 0]
    nbytes = x0.nbytes
    # x `shift` bytes past a 16-byte line: the row-run swaps pick their words by alignment
    start = GUARD + shift
    buf = np.full(start + nbytes + GUARD, POISON, np.uint8)
    buf[start : start + nbytes] = x0.view(np.uint8).ravel()
    x = buf[start : start + nbytes].view(x0.dtype)
    hows = _run(
        x, batch, m, n, conjugate, optin, tmp, scratch_limit, band_rows, staged, params, cluster
    )
    want = np.swapaxes(x0, 1, 2)
    if conjugate:
        want = np.conj(want)
    got = x.reshape(batch, n, m)
    assert got.view(np.uint8).tobytes() == np.ascontiguousarray(want).view(np.uint8).tobytes()
    assert (buf[:start] == POISON).all() and (buf[start + nbytes :] == POISON).all()
    return hows


SHAPES = [
    (1, 40, 40),  # square: tiles of 16 cut at the edge
    (1, 70, 100),  # SPLIT through bands (100 columns), gcd 10
    (2, 150, 37),  # bands whose split wraps (m < the band's columns' splits)
    (2, 17, 17),
    (1, 7, 13),  # primes
    (2, 13, 7),
    (1, 12, 18),  # gcd 6
    (1, 18, 12),
    (1, 3, 97),  # skinny
    (2, 97, 3),
    (1, 1, 9),
    (1, 2, 64),
]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("inplace_emu")


@pytest.mark.parametrize("batch, m, n", SHAPES)
def test_the_passes_transpose_4_byte_elements(batch, m, n, tmp):
    _check(batch, m, n, 4, tmp)


@pytest.mark.parametrize("e", [1, 2, 8, 16])
@pytest.mark.parametrize("batch, m, n", [(1, 20, 20), (2, 6, 10), (1, 11, 5)])
def test_every_element_size(batch, m, n, e, tmp):
    _check(batch, m, n, e, tmp)


@pytest.mark.parametrize("e", [8, 16])
@pytest.mark.parametrize("batch, m, n", [(1, 18, 18), (2, 6, 9), (1, 1, 7)])
def test_conjugate(batch, m, n, e, tmp):
    _check(batch, m, n, e, tmp, conjugate=True)


@pytest.mark.parametrize("limit", [16, 50, 1 << 20])
@pytest.mark.parametrize("batch, m, n", [(1, 5, 24), (2, 4, 6), (1, 7, 13), (1, 70, 9)])
def test_rows_past_shared_memory_go_through_the_scratch_in_groups(batch, m, n, limit, tmp):
    """Shared memory of 16 bytes: every row is shuffled through the scratch, in groups of
    as many rows as `limit` bytes hold (one at least): in chunks of 4 elements gathered from
    runs where the rows are few, element by element otherwise."""
    hows = _check(batch, m, n, 4, tmp, optin=16, scratch_limit=limit)
    shuffle = next(h for h in hows if h.kind == "shuffle")
    assert shuffle.aux == "rows" and shuffle.rows_per == max(1, min(limit // (4 * n), batch * m))
    assert shuffle.spec.piece == ("shuffle_runs" if m <= 64 else "shuffle_global")


@pytest.mark.parametrize("limit", [0, 1 << 20])
@pytest.mark.parametrize("batch, m, n", [(1, 13, 7), (2, 29, 5), (1, 12, 18), (3, 40, 9)])
def test_permute_by_leaders_or_by_pieces(batch, m, n, limit, tmp):
    """No scratch: a warp a whole cycle (leaders); room for it: pieces of the few cycles
    walked side by side, their first rows saved first."""
    hows = _check(batch, m, n, 8, tmp, scratch_limit=limit)
    kinds = [h.spec.piece for h in hows]
    if limit:
        assert "permute_save" in kinds and "permute_pieces" in kinds
    else:
        assert "permute" in kinds


def _banded(m: int, n: int, e: int, rule: int) -> float:
    """The share of split_band's blocks (of their pairs) that swap through the bands, by the
    kernel's rule: both bands of at most BAND_ROWS rows."""
    plan = plan_inplace(1, m, n)
    w = band_cols(e)
    banded = total = 0
    for t0 in range(0, m // 2, BAND_PAIRS):
        for j0 in range(0, n, w):
            t = np.arange(t0, min(t0 + BAND_PAIRS, m // 2))[:, None]
            j = np.arange(j0, min(j0 + w, n))[None, :]
            s = split_point(j, rule, m, plan.b)
            first = t < s // 2
            u = t - s // 2
            live = first | (u < (m - s) // 2)
            lo = np.where(first, t, s + u)[live]
            hi = np.where(first, s - 1 - t, m - 1 - u)[live]
            if lo.size:
                total += 1
                fits = lo.max() - lo.min() < BAND_ROWS and hi.max() - hi.min() < BAND_ROWS
                banded += bool(fits)
    return banded / max(1, total)


def _split_piece(m: int, n: int, e: int, rule: int) -> str:
    """The kernel a SPLIT by `rule` (0: at j // b, 1: at j mod m) takes."""
    if rule == 0 and n // math.gcd(m, n) * e >= RUN_MIN_BYTES:
        return "split_rows"  # whole runs of b elements
    if split_cols_width(m, e):
        return "split_cols"  # few rows: whole columns in shared memory
    return "split_band" if n >= band_cols(e) else "split"


@pytest.mark.parametrize("e", [4, 16])
@pytest.mark.parametrize(
    "batch, m, n", [(1, 300, 64), (1, 130, 33), (2, 31, 64), (1, 20, 200), (1, 360, 96)]
)
def test_split_through_bands(batch, m, n, e, tmp):
    """Tall enough matrices take the bands in most blocks (short ones, or blocks whose pairs
    straddle a column's split, swap in global memory): both paths end bit-exact."""
    hows = _check(batch, m, n, e, tmp)
    splits = [h for h in hows if h.kind == "split"]
    c = math.gcd(m, n)
    assert [h.spec.piece for h in splits] == [_split_piece(m, n, e, 0)] * (c > 1) + [
        _split_piece(m, n, e, 1)
    ]
    banded = [h for h in splits if h.spec.piece == "split_band"]
    if m >= 300:
        assert min(_banded(m, n, e, h.args["split"]) for h in banded) > 0.5


@pytest.mark.parametrize(
    "batch, m, n, e", [(1, 15, 700, 2), (2, 27, 1000, 1), (1, 10, 5000, 4), (2, 6, 2000, 8)]
)
def test_split_of_few_rows_takes_whole_columns(batch, m, n, e, tmp):
    """Skinny matrices: each SPLIT (both rules) reads all m rows of a block's columns into
    shared memory and writes them back from their source rows; blocks walk several tiles,
    the last cut at n."""
    hows = _check(batch, m, n, e, tmp)
    splits = [h.spec.piece for h in hows if h.kind == "split"]
    assert "split_cols" in splits
    w = split_cols_width(m, e)
    assert w >= 256 and m * w * e <= 48 << 10


@pytest.mark.parametrize("e", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("batch, m, n", [(1, 20, 64), (2, 30, 96), (1, 36, 150), (3, 8, 40)])
def test_reverse_and_split_swap_row_runs_in_the_widest_words(batch, m, n, e, tmp):
    """REVERSE (gcd > 1) and the SPLIT at j / b (runs of b elements, at least RUN_MIN_BYTES)
    swap two rows' runs as bytes, in 16-, 8-, 4-, 2- or 1-byte words as x, the rows and the
    runs are aligned: x on a 16-byte line and one element past it."""
    for shift in sorted({0, e % 16}):
        hows = _check(batch, m, n, e, tmp, shift=shift)
        kinds = [h.spec.piece for h in hows]
        assert kinds[0] == "reverse" or math.gcd(m, n) == 1
        if math.gcd(m, n) > 1 and n // math.gcd(m, n) * e >= RUN_MIN_BYTES:
            assert "split_rows" in kinds


def test_grids_are_capped_and_every_kernel_has_its_name():
    plan = plan_inplace(3, 1000, 600)
    hows = pass_launches(plan, 4, PARAMS, 2, 227 << 10, row_cycles(1000, 600, plan.a))
    assert [h.kind for h in hows][:4] == ["reverse", "split", "shuffle", "split"]
    assert all(1 <= h.blocks <= 2 * PARAMS.blocks_per_sm for h in hows)
    assert len({h.spec.name for h in hows}) == len(hows) - 1  # SPLIT twice, one kernel


@pytest.mark.parametrize(
    "batch, m, n, e, conjugate",
    [
        (1, 7, 1031, 4, False),
        (2, 13, 300, 2, False),
        (1, 31, 129, 8, True),
        (2, 5, 257, 16, True),
        (1, 3, 70001, 1, False),  # b past 2**16: the 64-bit product
    ],
)
def test_shuffle_of_gcd_1_carries_the_source_column(batch, m, n, e, conjugate, tmp, monkeypatch):
    """gcd 1 and rows of at least a block's threads: SHUFFLE walks a row at a time, each
    thread's source column carried from one of its columns to the next (few long rows too,
    which are served by runs: RUNS_FROM_BYTES off here)."""
    monkeypatch.setattr(inplace_kernels, "RUNS_FROM_BYTES", 1 << 62)
    hows = _check(batch, m, n, e, tmp, conjugate=conjugate)
    shuffle = next(h for h in hows if h.kind == "shuffle")
    assert shuffle.spec.piece == "shuffle" and math.gcd(m, n) == 1 and n >= PARAMS.threads


@pytest.mark.parametrize(
    "batch, m, n, e, piece",
    [
        (1, 97, 131, 1, "shuffle"),  # gcd 1, the gather, x one byte off its word: a head
        (1, 131, 97, 1, "shuffle_inv"),  # flipped: the 97 x 131 view, inverted
        (2, 9, 1001, 1, "shuffle"),  # rows of 1001: a thread's next word past the wrap at n
        (1, 99, 136, 2, "shuffle"),  # 2-byte elements
        (1, 1001, 9, 2, "shuffle_inv"),
        (1, 3, 70001, 1, "shuffle"),  # b past 2**16: the 64-bit product for the hop
        (1, 96, 160, 1, "shuffle"),  # gcd 32, b 5: words in a block of c, across iota or not
        (1, 12, 300, 2, "shuffle"),  # gcd 12, b 25
        (2, 120, 280, 1, "shuffle"),  # gcd 40, b 7
        (1, 6, 303, 1, "shuffle"),  # gcd 3: most words cross a block of c
        (1, 160, 96, 1, "shuffle_inv"),  # the 96 x 160 view inverted: runs of C mod b = 5
        (1, 330, 200, 2, "shuffle_inv"),  # gcd 10, b 33
        (2, 1000, 136, 1, "shuffle_inv"),  # gcd 8, b 125
    ],
)
@pytest.mark.parametrize("step", [True, False])
def test_shuffle_steps_its_source_column(step, batch, m, n, e, piece, tmp, monkeypatch):
    """SHUFFLE_STEP (served): 1- and 2-byte rows step each element's source column where a
    word's columns allow (gcd 1: a_inv, or a inverted, mod n; else -b within a block of c on
    one side of iota, or inverted +m mod n within a run of C mod b), carried elsewhere; both
    forms, x on its word and past it. Off, every word is carried, and transposes the same.
    (Few long rows are served by runs: RUNS_FROM_BYTES off here.)"""
    monkeypatch.setattr(inplace_kernels, "SHUFFLE_STEP", step)
    monkeypatch.setattr(inplace_kernels, "RUNS_FROM_BYTES", 1 << 62)
    assert ("element is an add and a wrap" in render_inplace(InplaceKernel(piece, e))) == step
    for shift in (0, e):
        hows = _check(batch, m, n, e, tmp, shift=shift, band_rows=200)
        assert piece in [h.spec.piece for h in hows]


@pytest.mark.parametrize(
    "batch, m, n, e",
    [
        (2, 12, 18, 4),  # gcd 6: COLS_DOWN, SHUFFLE, COLS_GATHER
        (1, 7, 300, 1),  # gcd 1: SHUFFLE carried, COLS_GATHER; bands of 16-byte words
        (3, 9, 6, 16),
        (1, 45, 30, 2),  # flipped (45 rows past band_rows): COLS_SCATTER, inverse SHUFFLE, COLS_UP
        (2, 301, 7, 8),  # flipped, gcd 1, rows of 301 (the carried inverse SHUFFLE)
        (1, 12, 300, 4),  # gcd 12, rows of 300: SHUFFLE carried with gcd > 1
        (1, 330, 30, 2),  # flipped, gcd 30, the view's rows of 330: carried, inverted
        (1, 3, 5000, 1),  # bands of 1024 bytes
        (1, 4, 602, 16),  # bands of 2048 bytes of 16-byte elements, the last one cut
        (1, 7, 301, 1),  # rows off 4-byte words, few of them: COLS in 16-byte lines
        (2, 3, 5001, 1),  # in lines, bands of 1024 bytes: 65 lines a row over warps
        (1, 6, 303, 2),  # in lines, gcd 3
        (1, 301, 7, 1),  # flipped, in lines: the scatter
    ],
)
def test_fused_column_passes(batch, m, n, e, tmp):
    """Columns of up to band_rows rows: every column pass is one COLS pass, a band of whole
    columns through shared memory, on the side whose columns fit; with x on a 16-byte line
    and one element past it (narrower words) and, for one case, rows through the scratch."""
    for shift in sorted({0, e % 16}):
        hows = _check(batch, m, n, e, tmp, shift=shift, band_rows=40, conjugate=False)
        kinds = [h.kind for h in hows]
        flipped = m > 40
        c = math.gcd(m, n)
        if flipped:
            assert kinds == ["cols", "shuffle"] + ["cols"] * (c > 1)
            assert [h.args["split"] for h in hows if h.kind == "cols"] == [3, 1][: 1 + (c > 1)]
        else:
            assert kinds == ["cols"] * (c > 1) + ["shuffle", "cols"]
        assert all(h.smem <= 227 << 10 for h in hows)
        grid_m, grid_n = (n, m) if flipped else (m, n)
        lines = e < 4 and grid_n * e % 4 and grid_m <= 64
        assert {h.spec.piece for h in hows if h.kind == "cols"} == {
            "cols_lines" if lines else "cols"
        }


@pytest.mark.parametrize(
    "batch, m, n, e",
    [
        (1, 97, 131, 1),  # gcd 1, the gather: 97 rows of 131 bytes, bands of 32 (one cut)
        (1, 131, 97, 1),  # flipped: the scatter over the 97 x 131 view
        (2, 99, 165, 2),  # gcd 33: rotations, the gather; rows of 330 bytes
        (1, 165, 99, 1),  # flipped, gcd 33: the scatter and the rotation up
        (1, 70, 1001, 1),  # bands of 32 bytes, 32 of them
        (1, 99, 297, 1),  # gcd 99, b 3: a word's rotation turns twice within its 4 elements
        (2, 65, 130, 1),  # gcd 65, b 2: a turn at every other element
        (1, 99, 66, 2),  # 2-byte, flipped 66 x 99 view, gcd 33, b 3: scatter, rotation up
        (1, 1001, 77, 1),  # 77 x 1001 flipped: segments of many rows, three bands, one cut
        (3, 77, 1001, 2),  # batched 2-byte gather, bands of 32 bytes
    ],
)
@pytest.mark.parametrize("slide", [False, True])
def test_tall_column_passes_of_narrow_rows_in_4_byte_words(batch, m, n, e, slide, tmp, monkeypatch):
    """Grids of more than 64 rows of 1- or 2-byte elements whose rows are not whole 4-byte
    words: every COLS pass in aligned 4-byte words, the rows realigned in shared memory
    ("cols_words"; "cols_slide" where COLS_SLIDE is on: each column's rotation carried by a
    window of rows), x on its line and one element past it."""
    monkeypatch.setattr(inplace_kernels, "COLS_SLIDE", slide)
    piece = "cols_slide" if slide else "cols_words"
    for shift in (0, e):
        hows = _check(batch, m, n, e, tmp, shift=shift, band_rows=200)
        cols = {h.spec.piece for h in hows if h.kind == "cols"}
        assert cols == {piece}, [(h.kind, h.spec.piece) for h in hows]
        assert all(h.spec.params.threads == COLS_WORDS_THREADS for h in hows if h.kind == "cols")


@pytest.mark.parametrize(
    "batch, m, n, e",
    [
        (1, 97, 164, 1),  # gcd 1, the gather: rows of 41 4-byte words
        (1, 164, 97, 1),  # flipped: the scatter over the 97 x 164 view
        (1, 120, 172, 1),  # gcd 4, b 43: the rotation down
        (1, 172, 120, 1),  # flipped: the rotation up
        (2, 99, 138, 2),  # 2-byte, gcd 3, batched
        (1, 138, 99, 2),  # flipped
        (1, 111, 296, 1),  # gcd 37, b 8: two turns of the rotation in a band's 32 bytes
    ],
)
def test_cols_slide_takes_rows_of_whole_4_byte_words(batch, m, n, e, tmp, monkeypatch):
    """COLS_SLIDE_WHOLE: "cols_slide" for 1- and 2-byte rows of whole 4-byte words too (not
    whole 16-byte words: "cols_rule"'s), x on its line and one element past it; off, "cols"."""
    for whole in ((1, 2), ()):
        monkeypatch.setattr(inplace_kernels, "COLS_SLIDE_WHOLE", whole)
        for shift in (0, e):
            hows = _check(batch, m, n, e, tmp, shift=shift, band_rows=200)
            cols = {h.spec.piece for h in hows if h.kind == "cols"}
            want = "cols_slide" if whole else "cols"
            assert cols == {want}, [(h.kind, h.spec.piece) for h in hows]


@pytest.mark.parametrize(
    "batch, m, n, e",
    [
        (1, 97, 131, 1),  # gcd 1, the gather: bands of 24 bytes, the last of 11
        (1, 131, 97, 1),  # flipped: the scatter over the 97 x 131 view
        (2, 99, 165, 2),  # gcd 33: rotations, the gather; bands of 12 elements
        (1, 165, 99, 1),  # flipped, gcd 33: the scatter and the rotation up
        (1, 99, 297, 1),  # gcd 99, b 3: a word's rotation turns twice within its 4 elements
        (1, 97, 164, 1),  # rows of whole 4-byte words (COLS_SLIDE_WHOLE)
        (1, 138, 99, 2),  # 2-byte, flipped 99 x 138 view
    ],
)
@pytest.mark.parametrize(
    "narrow, pieces, xor", [((), (), ()), ((24,), (), ()), ((24,), (1, 2), ()), ((24,), (), (1, 2))]
)
def test_cols_slide_narrows_bands_whose_32_byte_rows_pass_shared_memory(
    batch, m, n, e, narrow, pieces, xor, tmp, monkeypatch
):
    """COLS_SLIDE_NARROW: where a column's m rows of 32 bytes (40 in shared memory) pass the
    opt-in but rows of 24 bytes (32) fit, "cols_slide" takes bands of 24 bytes; off, the
    grid keeps "cols_words" (rows off 4-byte words) or "cols" (whole 4-byte words) in bands
    of 32. The words a band shares with its neighbour by atomics, (COLS_SLIDE_PIECES) in
    aligned pieces, or (COLS_SLIDE_XOR) by one XOR of their bytes as loaded with the written
    ones. x on its line and one element past it."""
    monkeypatch.setattr(inplace_kernels, "COLS_SLIDE_NARROW", narrow)
    monkeypatch.setattr(inplace_kernels, "COLS_SLIDE_PIECES", pieces)
    monkeypatch.setattr(inplace_kernels, "COLS_SLIDE_XOR", xor)
    grid_m = min(m, n) if m > n else m  # the view's rows: the plan flips tall grids
    optin = 36 * grid_m  # between 32 and 40 bytes a row
    for shift in (0, e):
        hows = _check(batch, m, n, e, tmp, shift=shift, band_rows=200, optin=optin)
        cols = [h for h in hows if h.kind == "cols"]
        whole = (max(m, n) if m > n else n) * e % 4 == 0
        want = "cols_slide" if narrow else "cols" if whole else "cols_words"
        assert {h.spec.piece for h in cols} == {want}, [(h.kind, h.spec.piece) for h in hows]
        assert {h.args["tiles"] * e for h in cols} == {24 if narrow else 32}
        assert all(h.smem <= optin for h in cols)


@pytest.mark.parametrize(
    "batch, m, n, e",
    [
        (1, 97, 131, 1),  # gcd 1, the gather: bands of 16 bytes, the last of 3
        (1, 131, 97, 1),  # flipped: the scatter
        (2, 99, 165, 2),  # gcd 33: rotations, the gather; bands of 8 elements
        (1, 99, 297, 1),  # gcd 99, b 3
        (1, 101, 203, 2),  # 2-byte, gcd 1, rows off 4-byte words (406 bytes)
    ],
)
@pytest.mark.parametrize("band", [0, 16, 8])
def test_cols_slide_holds_columns_past_a_block_in_narrow_bands(
    batch, m, n, e, band, tmp, monkeypatch
):
    """With 16 (and 8) in COLS_SLIDE_NARROW, columns whose band rows of 24 bytes (and 16) pass
    the opt-in but rows of 16 bytes (8) fit it run "cols_slide" in bands of 16 bytes (8), 24
    (16) bytes a row of shared memory; without, they go through the scratch ("cols_staged").
    x on its line and one element past."""
    narrow = {0: (24,), 16: (24, 16), 8: (24, 16, 8)}[band]
    monkeypatch.setattr(inplace_kernels, "COLS_SLIDE_NARROW", narrow)
    grid_m = min(m, n) if m > n else m
    # between 16 and 24 bytes a row (bands of 8 bytes), else between 24 and 32 (of 16)
    optin = (20 if band == 8 else 28) * grid_m
    for shift in (0, e):
        hows = _check(batch, m, n, e, tmp, shift=shift, band_rows=200, optin=optin)
        cols = [h for h in hows if h.kind == "cols"]
        want = "cols_slide" if band else "cols_staged"
        assert {h.spec.piece for h in cols} == {want}, [(h.kind, h.spec.piece) for h in hows]
        if band:
            assert {h.args["tiles"] * e for h in cols} == {band}
            assert all(h.smem <= optin for h in cols)


@pytest.mark.parametrize(
    "batch, m, n, e",
    [
        (1, 97, 160, 1),  # gcd 1, the gather: rows of ten 16-byte words, each on one line
        (1, 160, 97, 1),  # flipped: the scatter over the 97 x 160 view
        (1, 120, 176, 1),  # gcd 8, b 22: the rotation down, a word's line turning at C / b
        (1, 176, 120, 1),  # flipped: the rotation up
        (2, 144, 96, 1),  # gcd 48, b 2 (under a word's 16): the rotation walked
        (2, 8, 208, 1),  # 8 rows, under a word's 16 elements: walked, the wrap past m twice
        (1, 99, 136, 2),  # 2-byte, gcd 1
        (2, 72, 120, 2),  # 2-byte, gcd 24, b 5: walked
        (1, 136, 99, 2),  # 2-byte, flipped
    ],
)
def test_column_passes_of_rows_of_whole_16_byte_words_compiled_per_rule(batch, m, n, e, tmp):
    """Grids of 1- and 2-byte elements whose rows are whole 16-byte words: every COLS pass
    compiled per rule ("cols_rule"), each element's cell found from its word's first where
    m and b allow, walked where not; x on its line (16-byte words) and one element past it
    (element by element)."""
    for shift in (0, e):
        hows = _check(batch, m, n, e, tmp, shift=shift, band_rows=200)
        cols = {h.spec.piece for h in hows if h.kind == "cols"}
        assert cols == {"cols_rule"}, [(h.kind, h.spec.piece) for h in hows]


@pytest.mark.parametrize(
    "batch, m, n, e",
    [(2, 3, 300, 1), (1, 300, 4, 2), (2, 6, 150, 8), (1, 17, 160, 8), (2, 40, 3, 16)],
)
@pytest.mark.parametrize("batched", [1, 4, 8])
def test_fused_column_passes_with_rows_through_the_scratch(
    batch, m, n, e, batched, tmp, monkeypatch
):
    """Rows longer than shared memory (256 bytes here) go through the scratch, both forms,
    in chunks of 256 bytes gathered from runs (gcd 1, 6 and 3), a thread's words of runs
    loaded one at a time or (SHUFFLE_RUNS_BATCH) several before their stores."""
    monkeypatch.setattr(inplace_kernels, "SHUFFLE_RUNS_BATCH", batched)
    hows = _check(batch, m, n, e, tmp, optin=256, band_rows=8, scratch_limit=700)
    piece = "shuffle_runs_inv" if m > n else "shuffle_runs"
    assert piece in [h.spec.piece for h in hows]


@pytest.mark.parametrize("e", [1, 2, 4, 8, 16])
@pytest.mark.parametrize(
    "batch, few, long_bytes, inverted",
    [
        (1, 28, 2603, False),  # runs of about 92 bytes' words at every offset
        (2, 32, 2600, False),  # m a power of two: the runs' places a multiple of 32 apart
        (1, 64, 2611, False),  # the most runs a chunk
        (1, 2, 3001, False),  # two long runs
        (1, 3, 2999, False),
        (1, 28, 2603, True),  # inverted: the runs written to x
        (2, 32, 2600, True),
        (1, 64, 2611, True),
        (1, 2, 3001, True),
    ],
)
def test_long_row_runs_move_in_16_byte_words(batch, few, long_bytes, inverted, e, tmp):
    """SHUFFLE of rows past shared memory (2560 bytes here) by "shuffle_runs" in 16-byte
    words: chunks of 2560 bytes, runs starting at every offset in a word, x on a 16-byte
    line and one element past it, groups of rows through the scratch; each run's and the
    chunk's cut words written element by element (the guards, and the neighbouring runs and
    chunks, stay as they were). The long side: rows of about `long_bytes` bytes."""
    long = long_bytes // e | 1
    m, n = (long, few) if inverted else (few, long)
    for shift in (0, e):
        hows = _check(
            batch, m, n, e, tmp, optin=2560, band_rows=64, scratch_limit=50000, shift=shift
        )
        runs = [h for h in hows if h.spec.piece.startswith("shuffle_runs")]
        assert runs and runs[0].spec.piece == ("shuffle_runs_inv" if inverted else "shuffle_runs")
        assert "at_rot16" in render_inplace(runs[0].spec)


@pytest.mark.parametrize(
    "batch, m, n, e, runs",
    [
        (1, 3, 32771, 1, True),  # rows of 32 KiB that shared memory holds: by runs
        (2, 5, 4099, 8, True),  # ten rows in all
        (1, 3, 4099, 4, False),  # rows of 16 KiB: shared memory, several a block
        (13, 5, 4099, 8, False),  # 65 rows in all: a block a row fills the GPU
    ],
)
def test_few_long_rows_go_by_runs_even_where_shared_memory_holds_them(batch, m, n, e, runs, tmp):
    """A grid whose rows are at least RUNS_FROM_BYTES and few in all (every matrix's, at
    most RUNS_MAX_ROWS) is shuffled by runs through the scratch, not a block a row."""
    hows = _check(batch, m, n, e, tmp, band_rows=64)
    shuffle = next(h for h in hows if h.kind == "shuffle")
    assert shuffle.spec.piece == ("shuffle_runs" if runs else "shuffle")
    assert (shuffle.scratch > 0) == runs


def test_every_block_computes_its_chunks_runs_a_thread_a_run():
    """shuffle_runs' table of a chunk's runs is computed a thread a run: every block of the
    space has a thread for each of the most runs a chunk has (RUNS_MAX_ROWS)."""
    from autotranspose.kinds.inplace import THREADS

    assert min(THREADS) >= inplace_kernels.RUNS_MAX_ROWS


@pytest.mark.parametrize("e", [8, 16])
@pytest.mark.parametrize("batch, m, n", [(1, 28, 401), (2, 401, 28)])
def test_long_row_runs_conjugate(batch, m, n, e, tmp):
    hows = _check(
        batch, m, n, e, tmp, conjugate=True, optin=2560, band_rows=64, scratch_limit=50000
    )
    assert any(h.spec.piece.startswith("shuffle_runs") and h.spec.conjugate for h in hows)


@pytest.mark.parametrize("e", [8, 16])
def test_fused_column_passes_conjugate(e, tmp):
    for m, n in ((6, 9), (50, 6)):
        _check(2, m, n, e, tmp, conjugate=True, band_rows=40)


@pytest.mark.parametrize("m, e", [(48, 1), (40, 2), (36, 4), (34, 8)])
def test_swap_moves_16_byte_words_where_x_and_the_rows_allow(m, e, tmp):
    """Square matrices whose rows are whole 16-byte words: SWAP loads and stores words (tiles
    cut at the edge, batched); x one element off its line: element by element."""
    for shift in (0, e):
        hows = _check(2, m, m, e, tmp, shift=shift)
        assert [h.kind for h in hows] == ["swap"]


@pytest.mark.parametrize(
    "m, e, tile, threads",
    [
        (144, 1, 64, 128),  # three tiles a side, the last cut at 16 rows
        (208, 1, 64, 256),
        (136, 2, 64, 128),  # 256 row pairs' words a tile: two a thread
        (72, 2, 32, 128),  # three tiles a side, the last cut at 8 rows
        (272, 1, 128, 512),  # tiles of 128 one-byte elements (whole lines), the last cut
    ],
)
def test_swap_writes_narrow_elements_from_4_byte_shared_words(m, e, tile, threads, tmp):
    """1- and 2-byte squares of whole 16-byte rows: SWAP's written words gathered from
    4-byte shared words by byte permutes (tiles of 64, and 32 for 2 bytes), several tiles a
    side, cut at the edge, batched; the same tiles one element off the line go element by
    element."""
    params = InplaceParams(tile=tile, threads=threads, blocks_per_sm=2, unroll=2)
    assert "at_swap_gather" in render_inplace(InplaceKernel("swap", e, False, params))
    for shift in (0, e):
        hows = _check(2, m, m, e, tmp, shift=shift, params=params)
        assert [h.kind for h in hows] == ["swap"]


@pytest.mark.parametrize(
    "m, e, tile, threads",
    [
        (45, 1, 16, 128),  # rows of 45 bytes: every offset in a line, tiles cut at 13
        (53, 1, 64, 256),  # one tile cut at 53: its rows' words shared with no neighbour
        (141, 1, 64, 128),  # three tiles a side, the last cut at 13 rows
        (131, 1, 128, 512),  # tiles of 128 one-byte elements, the last cut at 3
        (3, 1, 64, 128),  # rows shorter than a word
        (37, 2, 16, 128),
        (75, 2, 32, 128),  # three tiles a side
        (130, 2, 64, 256),  # rows whole 4-byte words, not 16-byte ones
        (19, 4, 16, 128),
        (38, 4, 32, 256),  # rows of 152 bytes: 8 bytes off a line every other row
        (33, 8, 16, 128),
        (17, 8, 32, 128),
    ],
)
def test_swap_in_lines_where_the_rows_are_not_whole_16_byte_words(
    m, e, tile, threads, tmp, monkeypatch
):
    """Squares whose rows are not whole 16-byte words in lines (swap_lines), x on its line and
    off it: every global access an aligned 16-byte word (UBSan checks the alignment), the
    words shared with a neighbouring tile written element by element, 1- and 2-byte elements
    packed; bit-exact, batched, tiles cut at the edge, nothing outside x written."""
    from autotranspose.kernels import inplace as kernels

    monkeypatch.setattr(kernels, "SWAP_LINES", True)
    params = InplaceParams(tile=tile, threads=threads, blocks_per_sm=2, unroll=2)
    for shift in {0, e, 16 - e, 8}:
        hows = _check(2, m, m, e, tmp, shift=shift, params=params)
        assert [h.spec.piece for h in hows] == ["swap_lines"]


def test_swap_in_lines_conjugates(tmp, monkeypatch):
    from autotranspose.kernels import inplace as kernels

    monkeypatch.setattr(kernels, "SWAP_LINES", True)
    params = InplaceParams(tile=16, threads=128, blocks_per_sm=2, unroll=2)
    for shift in (0, 8):
        _check(2, 35, 35, 8, tmp, conjugate=True, shift=shift, params=params)


@pytest.mark.parametrize("on", [False, True])
def test_swap_lines_serves_only_rows_not_of_whole_words_and_only_when_on(on, monkeypatch):
    """swap_lines takes a square whose rows are not whole 16-byte words, and only with
    SWAP_LINES on (off, no square program runs it, so no config's source names it); rows of
    whole words stay SWAP's; 16-byte elements have no lines kernel."""
    from autotranspose.errors import ShapeError
    from autotranspose.kernels import inplace as kernels
    from autotranspose.kernels.inplace import program_kernels
    from autotranspose.kinds.inplace import SQUARE
    from autotranspose.plans.inplace import plan_inplace

    monkeypatch.setattr(kernels, "SWAP_LINES", on)
    for m, e in ((45, 1), (100, 2), (37, 4), (35, 8), (48, 1), (40, 2), (36, 4), (34, 8), (9, 16)):
        plan = plan_inplace(1, m, m, False, 0, 1 << 20)
        (swap,) = pass_launches(plan, e, PARAMS, 132, 227 << 10, None)
        lines = on and (m * e) % 16 != 0 and e < 16
        assert swap.spec.piece == ("swap_lines" if lines else "swap"), (m, e)
        pieces = {k.piece for k in program_kernels(e, False, PARAMS, SQUARE)}
        assert ("swap_lines" in pieces) == (on and e < 16)
    with pytest.raises(ShapeError, match="swap_lines moves elements of 1 to 8 bytes"):
        InplaceKernel("swap_lines", 16, False, PARAMS)


@pytest.mark.parametrize(
    "batch, m, n, e",
    [
        (1, 70, 45, 4),  # flipped (the 45-row view): the scatter and COLS_UP, gcd 5
        (1, 45, 70, 4),  # COLS_DOWN and the gather, gcd 5
        (2, 37, 300, 1),  # gcd 1; SKEW tiles of 128 one-byte columns, bands of 256
        (1, 300, 37, 2),  # flipped, gcd 1
        (2, 24, 90, 8),  # gcd 6: the rotations' k steps every b = 15 columns
        (1, 33, 21, 16),  # gcd 3, 16-byte elements (no wider word)
        (1, 600, 9, 4),  # a SKEW tile's window wrapping over the 9-row view's columns
    ],
)
@pytest.mark.parametrize("buffers", [3, 2, 1])
def test_staged_column_passes(batch, m, n, e, buffers, tmp, monkeypatch):
    """COLS through the scratch (staged_from 2): bands of a few SKEW tiles (stage_bytes 8 KiB)
    in up to `buffers` buffers, every band's two parts taken by ticket in one launch (one
    buffer: band by band; more: a band's first part ahead of the last one's second), x on a
    16-byte line and one element past it (narrower words): every column pass is one staged
    pass, and its scratch is its counters and buffers. The pass's blocks run at once, so its
    items wait on other blocks' (without either wait most of these shapes come out wrong)."""
    monkeypatch.setattr(inplace_kernels, "STAGE_BUFFERS", buffers)
    for shift in sorted({0, e % 16}):
        hows = _check(batch, m, n, e, tmp, shift=shift, band_rows=1 << 20, staged=(2, 8 << 10))
        cols = [h for h in hows if h.kind == "cols"]
        assert cols and {h.spec.piece for h in cols} == {"cols_staged"}
        assert all(h.aux == "bands" and h.rows >= 1 for h in cols)
        for h in cols:
            lay = staged_layout(batch, h.args["m"], h.args["n"], e, 8 << 10, SCRATCH_BYTES)
            assert h.args["tiles"] == lay.width and h.rows == batch * lay.bands
            assert h.args["items"] == lay.buffers == min(buffers, h.rows)
            assert h.scratch == lay.counters + lay.buffers * lay.buffer


@pytest.mark.parametrize(
    "batch, m, n, e, k",
    [
        (1, 64, 300, 4, 4),  # gcd 4: rotation down, then the gather by the table
        (1, 300, 64, 4, 4),  # flipped: the scatter by the table, then the rotation up
        (2, 96, 240, 4, 8),  # bands of 256 bytes
        (1, 160, 256, 1, 2),  # 16 elements a word: each word's elements on 16 rows
        (1, 256, 160, 2, 2),
        (1, 48, 200, 16, 4),  # a word an element
        (2, 320, 32, 8, 4),
        (1, 97, 128, 4, 2),  # gcd 1: the gather alone, the last block's rows fewer
        (1, 128, 97, 4, 8),  # gcd 1, flipped: the scatter alone
    ],
)
def test_column_passes_over_clusters(batch, m, n, e, k, tmp, monkeypatch):
    """Columns a cluster's blocks hold between them: every COLS pass runs over a cluster,
    the band's words exchanged between the blocks' shared memory, for every COLS form; with
    x on a 16-byte line and off it (narrower words, the element order not turned)."""
    from autotranspose.kernels import inplace as kernels

    monkeypatch.setattr(kernels, "CLUSTER_MIN_ROWS", 0)  # the emulator's columns are short
    monkeypatch.setattr(kernels, "CLUSTER_RULES", (0, 1, 2, 3))  # the table's forms too
    monkeypatch.setattr(kernels, "CLUSTER_SIZES", (k,))
    monkeypatch.setattr(kernels, "CLUSTER_BYTES", (256, 128, 64))
    for shift in sorted({0, e % 16}):
        hows = _check(batch, m, n, e, tmp, shift=shift, band_rows=10**6, cluster=8)
        cols = [h for h in hows if h.kind == "cols"]
        assert cols and {(h.spec.piece, h.spec.cluster) for h in cols} == {("cols_cluster", k)}
        assert all(h.blocks % h.spec.cluster == 0 for h in cols)
        c = math.gcd(m, n)
        assert len(cols) == 1 + (c > 1)


def test_clusters_take_columns_past_a_block_of_rows_of_whole_16_byte_words():
    from autotranspose.kernels.inplace import cluster_band, cluster_smem, cols_rows

    optin = 227 << 10
    tallest = cols_rows(optin)  # what a block's 32-byte band holds
    assert cluster_band(8280, 7320, 2, optin, 8) == (8, 32)  # 64 bytes a row, 8 blocks
    assert cluster_band(tallest, 7320, 2, optin, 8) is None  # a block's band holds it
    assert cluster_band(8280, 7321, 2, optin, 8) is None  # rows of 14642 bytes
    assert cluster_band(8280, 7320, 2, optin, 0) is None  # no clusters on the device
    assert cluster_band(8280, 7320, 1, optin, 8, threads=32) is None  # a word column a thread
    k, w = cluster_band(20011, 1024, 2, optin, 8)
    assert cluster_smem(20011, k, w, 2) <= optin
    assert cluster_band(40000, 1024, 2, optin, 8) is None  # past what 8 blocks hold


@pytest.mark.parametrize("e, side, one_wave", [(1, 4096, True), (1, 8192, False), (2, 2816, True)])
def test_swap_takes_one_wave_where_a_block_would_have_one_pair(e, side, one_wave):
    """A square whose tile pairs the blocks_per_sm grid would give one a block runs the
    blocks an SM holds at once, walking more pairs each (a next pair's loads in flight while
    it writes this one); larger squares keep blocks_per_sm blocks an SM."""
    from autotranspose.kernels.inplace import swap_blocks
    from autotranspose.kinds import inplace as kind

    params, sms = kind.default(e, square=True), 132
    plan = plan_inplace(1, side, side, False, 0, (227 << 10) // e)
    (swap,) = pass_launches(plan, e, params, sms, 227 << 10, None)
    cap = sms * params.blocks_per_sm
    assert swap.args["items"] <= cap if one_wave else swap.args["items"] > cap
    want = sms * swap_blocks(params, e) if one_wave else cap
    assert swap.blocks == want and swap.args["items"] > want  # blocks walk more than one

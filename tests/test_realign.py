"""The realigning row copy (templates/rows/ `at_copy_runs`) without a GPU: a Python model
of every thread of the launch, run on the very arguments the host packs
(`launch.runs_args`), for random row copies at every byte offset and for the passes
`plan.realigned` makes of random permutes, against NumPy. The model also checks the kernel's
promises: each output byte written by exactly one thread, nothing outside the output's rows
written, and no aligned 16-byte input word read that holds none of the rows' bytes."""

from __future__ import annotations

import numpy as np
import pytest
from _plan_ref import _indices

from autotranspose.kernels.codegen import ROWS_THREADS
from autotranspose.kernels.packed import divide
from autotranspose.plans.boxes import Dim
from autotranspose.plans.layout import contiguous_strides
from autotranspose.plans.permute import (
    COPY,
    REALIGN_MIN_RUN_BYTES,
    Pass,
    plan_permute,
    realigned,
    runs_of,
)
from autotranspose.runtime.launch import RunsGeometry, runs_args, runs_geometry

FIELDS = (
    "n in0 in1 rin_i rout_i rin_b rout_b os_in os_out os2_in os2_out run s0 ri rb outer2 "
    "lanes per_block chunk words n_magic n_shift s0_magic s0_shift pad"
).split()


def _div(x: int, magic: int, shift: int) -> int:
    return x if magic == 0 else divide(x, magic, shift)


def run_model(
    mem: np.ndarray,
    src: int,
    dst: int,
    g: RunsGeometry,
    scalars: tuple[int, ...],
    wanted: np.ndarray,
) -> np.ndarray:
    """Run the kernel's threads on flat byte memory `mem` (pointers are indices); returns how
    many times each byte was written. Asserts every aligned input word read holds a byte of
    `wanted` (the rows' input bytes)."""
    a = dict(zip(FIELDS, scalars, strict=True))
    writes = np.zeros(mem.size, np.int64)
    before = mem.copy()  # the kernel reads only input, which no launch writes

    def load(at: int) -> np.ndarray:
        assert at % 16 == 0 and wanted[at : at + 16].any(), (
            f"read a word holding no wanted byte at {at}"
        )
        return before[at : at + 16]

    for bz in range(g.walked):
        z, y = divmod(bz, a["outer2"])
        for by in range(g.chunks):
            for bx in range(g.blocks):
                for tid in range(ROWS_THREADS):
                    slot, lane = divmod(tid, a["lanes"])
                    r = bx * a["per_block"] + slot
                    if slot >= a["per_block"] or r >= a["ri"] * a["rb"]:
                        continue
                    rb, ri = divmod(r, a["ri"])
                    s_at = (
                        src + z * a["os_in"] + y * a["os2_in"] + rb * a["rin_b"] + ri * a["rin_i"]
                    )
                    o = (
                        dst
                        + z * a["os_out"]
                        + y * a["os2_out"]
                        + rb * a["rout_b"]
                        + ri * a["rout_i"]
                    )
                    base, end = o & ~15, o + a["run"]
                    k0 = by * a["chunk"]
                    for k in range(k0 + lane, min(a["words"], k0 + a["chunk"]), a["lanes"]):
                        at = base + 16 * k
                        if at >= end:
                            break
                        lo_p = o - base if k == 0 else 0
                        hi_p = min(16, end - at)
                        q = at + lo_p - o
                        assert 0 <= q < 2**32
                        s = _div(q, a["n_magic"], a["n_shift"])
                        off = q - s * a["n"]
                        k1s = _div(s, a["s0_magic"], a["s0_shift"])
                        k0s = s - k1s * a["s0"]
                        w = np.zeros(16, np.uint8)
                        p = lo_p
                        while True:
                            length = min(a["n"] - off, hi_p - p)
                            t = s_at + k1s * a["in1"] + k0s * a["in0"] + off - p
                            d, aligned = t & 15, t & ~15
                            pair = np.zeros(32, np.uint8)
                            if p + d < 16:
                                pair[:16] = load(aligned)
                            if p + length + d > 16:
                                pair[16:] = load(aligned + 16)
                            w[p:] = pair[d : d + 16][p:]
                            p += length
                            if p >= hi_p:
                                break
                            off = 0
                            k0s += 1
                            if k0s == a["s0"]:
                                k0s, k1s = 0, k1s + 1
                        mem[at + lo_p : at + hi_p] = w[lo_p:hi_p]
                        writes[at + lo_p : at + hi_p] += 1
    return writes


def _check(p: Pass, src: int, dst: int, mem_bytes: int, rng: np.random.Generator) -> None:
    """Run `p` (a byte copy pass, host loops included) through the model and compare."""
    mem = rng.integers(0, 256, mem_bytes, dtype=np.uint8)
    want = mem.copy()
    wanted = np.zeros(mem_bytes, bool)
    expect = np.zeros(mem_bytes, np.int64)
    for i0, o0 in p.offsets():
        si, di = _indices(p, src + i0, dst + o0)
        want[di] = mem[si]
        wanted[si] = True
        expect[di] += 1
    assert expect.max() == 1, "the contract writes a byte twice: not a valid test case"
    writes = np.zeros(mem_bytes, np.int64)
    word, *args = p.copy_args()
    assert word == 1  # a realigned copy counts bytes
    g, scalars = runs_args(*args, multiprocessors=2)
    for i0, o0 in p.offsets():  # one launch, made once, at each host-loop index
        writes += run_model(mem, src + i0, dst + o0, g, scalars, wanted)
    np.testing.assert_array_equal(writes, expect)  # each output byte once, nothing else
    np.testing.assert_array_equal(mem, want)


def _layout(rng: np.random.Generator, extents: list[int], first: int) -> list[int]:
    """Strides (bytes) of a non-overlapping layout of dims `extents` around rows of `first`
    bytes: nested in a random order, with random gaps."""
    order = [int(k) for k in rng.permutation(len(extents))]
    strides = [0] * len(extents)
    acc = first
    for k in order:
        strides[k] = acc + int(rng.integers(0, 3)) * int(rng.integers(1, 9))
        acc = strides[k] * extents[k]
    return strides


@pytest.mark.parametrize("fused", ["rows", "matrices", "none"])
def test_row_copies_at_every_offset_match_numpy(rng, fused):
    """Rows of 1 to 90 bytes, every input and output offset mod 16, output rows side by side
    (runs of m rows, or of whole matrices) or apart, inputs nested in any order."""
    for _ in range(24):
        n = int(rng.integers(1, 91))
        m, batch, outer, outer2 = (int(v) for v in rng.integers(1, 6, 4))
        m = max(m, 2)
        ld_in, bs_in, os_in, os2_in = _layout(rng, [m, batch, outer, outer2], n)
        if fused == "none":
            ld_out, bs_out, os_out, os2_out = _layout(
                rng, [m, batch, outer, outer2], n + 1 + int(rng.integers(0, 20))
            )
        else:
            ld_out = n
            bs_out = m * n + (0 if fused == "matrices" else 1 + int(rng.integers(0, 20)))
            os_out = bs_out * batch + int(rng.integers(0, 9))
            os2_out = os_out * outer
        p = Pass(
            COPY,
            1,
            m,
            n,
            ld_in,
            ld_out,
            batch,
            bs_in,
            bs_out,
            outer=Dim(outer, os_in, os_out),
            outer2=Dim(outer2, os2_in, os2_out),
            realign=True,
        )
        run, s0, s1 = runs_of(m, n, ld_out, batch, bs_out)
        assert run == s0 * s1 * n
        assert (s0 > 1) == (fused != "none") and (s1 > 1) == (fused == "matrices" and batch > 1)
        in_bytes = max(os2_in * outer2, os_in * outer, bs_in * batch, ld_in * m, n) + 64
        out_bytes = max(os2_out * outer2, os_out * outer, bs_out * batch, ld_out * m, n) + 64
        src = 64 + int(rng.integers(0, 16))
        dst = 64 + in_bytes + 16 * int(rng.integers(0, 4)) + int(rng.integers(0, 16))
        _check(p, src, dst, dst + out_bytes + 64, rng)


@pytest.mark.parametrize("e", [1, 2, 4, 8])
def test_realigned_passes_of_random_permutes_match_numpy(rng, e):
    """Permutes that keep the innermost axis innermost, with rows whose bytes, strides or
    pointers leave no 16-byte word: the pass `plan.realigned` makes (dims re-picked so that
    rows side by side fuse) moves exactly np.transpose's bytes."""
    done = 0
    while done < 10:
        nd = int(rng.integers(3, 5))
        shape = [int(v) for v in rng.integers(1, 7, nd)]
        shape[-1] = int(rng.integers(1, 40))
        axes = (*(int(a) for a in rng.permutation(nd - 1)), nd - 1)
        src = 256 + e * int(rng.integers(0, 16 // e))
        dst = 256 + int(np.prod(shape)) * e + 64 + e * int(rng.integers(0, 16 // e))
        plan = plan_permute(shape, axes, e, in_ptr=src, out_ptr=dst)
        p = plan.passes[0] if plan.passes else None
        if p is None or not p.realign:
            continue
        done += 1
        assert p.elem_bytes == 1 and p.run_bytes >= REALIGN_MIN_RUN_BYTES
        mem_bytes = dst + int(np.prod(shape)) * e + 64
        mem = np.random.default_rng(done).integers(0, 256, mem_bytes, dtype=np.uint8)
        x = np.lib.stride_tricks.as_strided(
            mem[src:], shape=(*shape, e), strides=(*(s * e for s in contiguous_strides(shape)), 1)
        ).copy()
        _check(p, src, dst, mem_bytes, np.random.default_rng(done))
        # _check compared against the pass's own contract; the contract against NumPy:
        got = mem.copy()
        for i0, o0 in p.offsets():
            si, di = _indices(p, src + i0, dst + o0)
            got[di] = mem[si]
        out_shape = tuple(shape[a] for a in axes)
        y = got[dst : dst + int(np.prod(shape)) * e].reshape(*out_shape, e)
        np.testing.assert_array_equal(y, np.transpose(x, (*axes, nd)))


def test_sixteen_byte_words_and_short_runs_keep_the_word_copy():
    """Rows of whole 16-byte words keep `_copy`'s word copy, and so do runs under
    REALIGN_MIN_RUN_BYTES (mostly the words a run's ends cut); odd rows that the output lays
    side by side run realigned, with the word copy as a first call's alternative."""
    assert not plan_permute((64, 50, 32), (1, 0, 2), 1).passes[0].realign  # 32-byte rows
    apart = plan_permute((64, 50, 5), (1, 0, 2), 1, out_strides=(64 * 8, 8, 1))
    assert apart.passes[0].kind == COPY and not apart.passes[0].realign  # runs of 5 bytes
    odd = plan_permute((8192, 50, 33), (1, 0, 2), 1)  # over ALT_MIN_BYTES
    p = odd.passes[0]
    assert p.realign and p.run_bytes == 8192 * 50 * 33  # rows and matrices side by side: one run
    assert "realigned into 16-byte words" in odd.describe()
    words = [a for a in odd.alternatives if a.kind == COPY]
    assert len(words) == 1 and not words[0].realign and words[0].elem_bytes == 1
    assert realigned(words[0]) == p


def test_runs_geometry_covers_every_word():
    """A run's words (its cut first one included) fall in the chunks and lanes exactly."""
    for m, n, ld_out, batch, bs_out in [
        (7, 21, 21, 5, 147),
        (7, 21, 30, 5, 400),
        (1000, 29034, 29034, 3, 29034000),
    ]:
        g = runs_geometry(m, n, ld_out, batch, bs_out, 132)
        assert g.words == -(-g.run // 16) + 1
        assert g.chunks * g.chunk >= g.words and g.chunk % g.lanes == 0
        assert g.per_block * g.lanes <= ROWS_THREADS
        assert g.blocks * g.per_block >= g.ri * g.rb


def test_short_rows_and_long_rows_of_8_byte_words_keep_the_word_copy():
    """Rows under REALIGN_MIN_ROW_BYTES keep the word copy; rows of 8-byte words from
    REALIGN_WORDS_FIRST_BYTES up keep it as the plan's pass, the realigned copy racing it."""
    from autotranspose.plans.permute import REALIGN_MIN_ROW_BYTES, REALIGN_WORDS_FIRST_BYTES

    short = plan_permute((20000, 100, REALIGN_MIN_ROW_BYTES - 1), (1, 0, 2), 1)
    assert not short.passes[0].realign and not any(a.realign for a in short.alternatives)
    rows = REALIGN_WORDS_FIRST_BYTES // 8 + 1  # odd: 8-byte words at most
    long8 = plan_permute((3000, 400, rows), (1, 0, 2), 8)
    p = long8.passes[0]
    assert p.kind == COPY and p.elem_bytes == 8 and not p.realign
    assert realigned(p) in long8.alternatives
    short8 = plan_permute((3000, 400, 3), (1, 0, 2), 8)  # 24-byte rows in 8-byte words
    assert short8.passes[0].realign


@pytest.mark.parametrize("e", [2, 4])
def test_fusing_runs_never_costs_host_loops(e):
    """Rows side by side in the output along two small dims (9 and 2), two large dims
    (386 x 254, over blockIdx.z's 65535 together): fusing the small ones into runs would
    leave a host loop of 254 launches where the word copy walks everything in one, so the
    realigned copy takes the word copy's dims instead: runs of one row, kept where a row is
    REALIGN_MIN_RUN_BYTES or more (4-byte: 168 bytes, an alternative), else not realigned
    (2-byte: 84 bytes)."""
    plan = plan_permute((9, 2, 386, 254, 42), (3, 2, 1, 0, 4), e)
    passes = (*plan.passes, *plan.alternatives)
    assert plan.passes[0].kind == COPY and all(p.launches == 1 for p in passes), plan.describe()
    realigns = [p for p in passes if p.realign]
    assert len(realigns) == (1 if 42 * e >= REALIGN_MIN_RUN_BYTES else 0), plan.describe()
    assert all(p.run_bytes == 42 * e for p in realigns)

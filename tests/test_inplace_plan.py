"""transpose_()'s passes (plans/inplace.py) on the CPU: the very formulas the kernels compute,
run by tests/_inplace_ref.py on NumPy arrays, land every element where `x.T` has it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _inplace_ref import run_plan

from autotranspose.errors import ShapeError
from autotranspose.plans.inplace import (
    COLS,
    COLS_DOWN,
    COLS_GATHER,
    COLS_SCATTER,
    COLS_UP,
    CONJ,
    PERMUTE,
    REVERSE,
    SHUFFLE,
    SKEW,
    SPLIT,
    SWAP,
    cols_row,
    cycle_leaders,
    pieces_of,
    plan_inplace,
    row_cycles,
    row_offset,
    row_source,
    skew_shift,
    staged_phases,
    triangle,
)

SHAPES = [
    (1, 1),
    (1, 7),
    (7, 1),
    (2, 3),
    (3, 2),
    (4, 6),  # gcd 2
    (6, 4),
    (12, 18),  # gcd 6
    (18, 12),
    (8, 12),
    (7, 13),  # primes
    (13, 7),
    (31, 37),
    (2, 64),  # skinny
    (64, 2),
    (97, 3),
    (3, 97),
    (5, 5),
    (33, 33),
    (30, 45),  # gcd 15
    (45, 30),
]


def _check(
    batch: int,
    m: int,
    n: int,
    rng: np.random.Generator,
    conjugate: bool = False,
    most: int | None = None,
    band_rows: int = 0,
    row_elems: int = 0,
    runs_rows: int = 0,
) -> None:
    if conjugate:
        x = (rng.standard_normal((batch, m, n)) + 1j * rng.standard_normal((batch, m, n))).astype(
            np.complex64
        )
    else:
        x = rng.integers(0, 2**31, (batch, m, n), dtype=np.int64)
    buf = x.copy().ravel()
    plan = plan_inplace(batch, m, n, conjugate, band_rows, row_elems, runs_rows)
    pieces = None
    if most is not None and any(p.kind == PERMUTE for p in plan.passes):
        cycles = row_cycles(m, n, plan.a)
        pieces = pieces_of(m, n, plan.a, cycles, max(most, len(cycles.leaders)))
    run_plan(plan, buf, tile=8, pieces=pieces)
    want = np.swapaxes(x, 1, 2)
    if conjugate:
        want = np.conj(want)
    np.testing.assert_array_equal(buf.reshape(batch, n, m), want)


@pytest.mark.parametrize("m, n", SHAPES)
@pytest.mark.parametrize("batch", [1, 3])
def test_the_passes_transpose(batch, m, n):
    _check(batch, m, n, np.random.default_rng([batch, m, n]))


def test_random_shapes_transpose():
    rng = np.random.default_rng()
    for _ in range(40):
        m, n = (int(v) for v in rng.integers(1, 80, 2))
        if rng.random() < 0.3:  # a common factor
            f = int(rng.integers(2, 9))
            m, n = m * f, n * f
        _check(int(rng.integers(1, 3)), m, n, rng)


@pytest.mark.parametrize("m, n", SHAPES)
def test_fused_column_passes_transpose_on_either_side(m, n):
    """COLS where the m rows fit (band_rows = m), or only the n x m view's (band_rows = n <
    m), or both with the rows' length deciding (row_elems)."""
    rng = np.random.default_rng([m, n])
    for band_rows, row_elems in ((m, 0), (n, 0), (max(m, n), min(m, n)), (max(m, n), 0)):
        _check(2, m, n, rng, band_rows=band_rows, row_elems=row_elems)
        plan = plan_inplace(2, m, n, False, band_rows, row_elems)
        if m != n and min(m, n) > 1:
            assert COLS in [p.kind for p in plan.passes]
            assert not {PERMUTE, SPLIT, REVERSE} & {p.kind for p in plan.passes}
            assert len(plan.passes) == 2 + (math.gcd(m, n) > 1)
    _check(1, m, n, rng, conjugate=True, band_rows=max(m, n))


def test_fused_plans_pick_their_side():
    assert not plan_inplace(1, 40, 60, band_rows=50).flipped  # only m fits
    assert plan_inplace(1, 60, 40, band_rows=50).flipped  # only n fits
    assert plan_inplace(1, 60, 40, band_rows=90).flipped  # both: the shorter column
    assert not plan_inplace(1, 60, 40, band_rows=90, row_elems=45).flipped  # rows of 40 fit
    assert plan_inplace(1, 60, 70, band_rows=50).passes[-1].kind == PERMUTE  # neither


@pytest.mark.parametrize("m, n", [(6, 90), (90, 6), (8, 64), (72, 9), (5, 200)])
def test_a_side_of_few_rows_comes_first_where_told(m, n):
    """runs_rows: a side of that few rows is taken even where the other side's rows fit
    shared memory (row_elems) and its columns a block (band_rows), flipped or not, and the
    plan still transposes; without it the side whose rows fit shared memory."""
    rng = np.random.default_rng([m, n])
    few = min(m, n)
    plan = plan_inplace(2, m, n, False, band_rows=max(m, n), row_elems=few, runs_rows=few)
    assert (plan.m, plan.flipped) == (few, m > n)
    assert plan_inplace(2, m, n, False, band_rows=max(m, n), row_elems=few).m == max(m, n)
    _check(2, m, n, rng, band_rows=max(m, n), row_elems=few, runs_rows=few)
    _check(1, m, n, rng, conjugate=True, band_rows=max(m, n), row_elems=few, runs_rows=few)


@pytest.mark.parametrize("m, n", [(1, 5), (6, 4), (9, 9), (7, 13)])
def test_conjugate_conjugates_once(m, n):
    _check(2, m, n, np.random.default_rng(), conjugate=True)


def test_pass_structure():
    kinds = lambda p: [q.kind for q in p.passes]  # noqa: E731
    assert kinds(plan_inplace(1, 7, 13)) == [SHUFFLE, SPLIT, PERMUTE]
    assert kinds(plan_inplace(2, 6, 4)) == [REVERSE, SPLIT, SHUFFLE, SPLIT, PERMUTE]
    assert kinds(plan_inplace(3, 9, 9)) == [SWAP]
    assert kinds(plan_inplace(1, 1, 9)) == []
    assert kinds(plan_inplace(1, 9, 1, conjugate=True)) == [CONJ]
    assert kinds(plan_inplace(0, 9, 4)) == []
    assert sum(q.conjugate for q in plan_inplace(1, 6, 4, True).passes) == 1


def test_moved_bytes():
    p = plan_inplace(2, 6, 4)
    by = {q.kind + str(q.split): q.moved_bytes(p, 4) for q in p.passes}
    assert by["shuffle0"] == 2 * 2 * 6 * 4 * 4
    assert by["reverse0"] == 2 * 2 * 6 * 4 * 4  # even m: every row moves
    assert plan_inplace(1, 7, 3).passes[1].moved_bytes(plan_inplace(1, 7, 3), 1) == 2 * 6 * 3


def test_cycle_leaders_cover_every_moved_row_once():
    for m, n in [(7, 13), (64, 48), (1000, 3), (3, 1000), (360, 84)]:
        c = math.gcd(m, n)
        a = m // c
        seen = np.zeros(m, bool)
        for lead in cycle_leaders(m, n, a):
            r = int(lead)
            while True:
                assert not seen[r]
                seen[r] = True
                r = int(row_source(np.int64(r), m, n, a))
                if r == lead:
                    break
        fixed = row_source(np.arange(m), m, n, a) == np.arange(m)
        assert (seen == ~fixed).all()


def test_triangle_walks_every_pair_once():
    k = np.arange(200_000, dtype=np.int64)
    j, i = triangle(k)
    assert (j <= i).all() and (i * (i + 1) // 2 + j == k).all()


@pytest.mark.parametrize("bad", [-1, 2**31, 1.5, True])
def test_bad_sides_are_refused(bad):
    with pytest.raises(ShapeError, match="in-place"):
        plan_inplace(1, bad, 4)


@pytest.mark.parametrize("most", [1, 2, 3, 7, 64, 10_000])
@pytest.mark.parametrize("m, n", [(7, 13), (13, 7), (31, 37), (97, 3), (3, 97), (45, 30), (64, 48)])
def test_permute_by_pieces_transposes(m, n, most):
    _check(2, m, n, np.random.default_rng([m, n, most]), most=most)


def test_pieces_cover_every_moved_row_once_and_chain_within_their_cycle():
    for m, n, most in [(1009, 3, 50), (4099, 6007, 300), (360, 84, 40), (97, 89, 97)]:
        a = m // math.gcd(m, n)
        cycles = row_cycles(m, n, a)
        pc = pieces_of(m, n, a, cycles, max(most, len(cycles.leaders)))
        assert len(pc) <= max(most, len(cycles.leaders))
        seen = np.zeros(m, int)
        for p in range(len(pc)):
            r = int(pc.starts[p])
            for _ in range(int(pc.lengths[p])):
                seen[r] += 1
                r = int(row_source(np.int64(r), m, n, a))
            assert r == int(pc.starts[int(pc.nexts[p])])  # the next piece starts where it ends
        fixed = row_source(np.arange(m), m, n, a) == np.arange(m)
        assert (seen == ~fixed).all()
        assert cycles.moved_rows == int((~fixed).sum())
        assert len(pc.table()) == 3 * len(pc) and pc.table().dtype == np.uint32


@pytest.mark.parametrize("rule", [COLS_DOWN, COLS_UP, COLS_GATHER, COLS_SCATTER])
@pytest.mark.parametrize("m, n", [(6, 9), (9, 6), (35, 14), (13, 97), (97, 13), (1, 5), (64, 64)])
def test_staged_phases_compose_to_the_cols_permutation(rule, m, n):
    """A staged COLS pass (SKEW and ROWS in `staged_phases` order, each out of place) moves
    every cell where `cols_row` sends it."""
    c = math.gcd(m, n)
    a, b = m // c, n // c
    rng = np.random.default_rng([rule, m, n])
    g = rng.integers(0, 2**31, (m, n))
    r = np.arange(m)[:, None]
    col = np.arange(n)[None, :]
    want = np.empty_like(g)
    rows = cols_row(r, col, rule, m, n, a, b)
    if rule == COLS_SCATTER:
        want[rows, col] = g
    else:
        want[...] = g[rows, col]
    h = row_offset(np.arange(m), m, n, a) if rule in (COLS_GATHER, COLS_SCATTER) else np.arange(m)
    k = skew_shift(np.arange(n), rule, m, b)
    got = g
    for phase in staged_phases(rule):
        if phase == SKEW:  # row i of column C from row (i + k(C)) mod m
            got = got[(r + k[None, :]) % m, col]
        elif rule == COLS_SCATTER:  # ROWS: row R to row h(R)
            moved = np.empty_like(got)
            moved[h] = got
            got = moved
        else:  # ROWS: row R from row h(R)
            got = got[h]
    np.testing.assert_array_equal(got, want)

"""transpose_()'s passes run on NumPy arrays exactly as the kernels run them
(autotranspose/plans/inplace.py's formulas; the kernels' pairs, gathers and cycle walks), so
tests check the index math against `x.T` on the CPU."""

from __future__ import annotations

import numpy as np

from autotranspose.plans.inplace import (
    COLS,
    COLS_SCATTER,
    CONJ,
    PERMUTE,
    REVERSE,
    SHUFFLE,
    SPLIT,
    SWAP,
    InplacePlan,
    Pieces,
    cols_row,
    cycle_leaders,
    row_source,
    shuffle_dest,
    shuffle_source,
    split_point,
    triangle,
)


def run_plan(
    plan: InplacePlan, buf: np.ndarray, tile: int = 32, pieces: Pieces | None = None
) -> None:
    """Run `plan`'s passes on `buf` (batch * m * n elements, flat) in place; PERMUTE by
    `pieces` where given (saved first rows, then every piece walked)."""
    for p in plan.passes:
        for z in range(plan.batch):
            g = buf[z * plan.m * plan.n : (z + 1) * plan.m * plan.n].reshape(plan.m, plan.n)
            if p.kind == PERMUTE and pieces is not None:
                _pieces(plan, pieces, g)
            else:
                _PASSES[p.kind](plan, p, g, tile)
            if p.conjugate:
                g[...] = np.conj(g)


def _pieces(plan: InplacePlan, pieces: Pieces, g: np.ndarray) -> None:
    saved = g[pieces.starts.astype(np.int64)].copy()  # PERMUTE_SAVE
    for p in range(len(pieces)):  # PERMUTE_PIECES: any order, as the warps run
        cur = int(pieces.starts[p])
        for k in range(int(pieces.lengths[p])):
            if k == int(pieces.lengths[p]) - 1:
                g[cur] = saved[int(pieces.nexts[p])]
            else:
                nxt = int(row_source(np.int64(cur), plan.m, plan.n, plan.a))
                g[cur] = g[nxt]
                cur = nxt


def _swap(plan: InplacePlan, p, g: np.ndarray, tile: int) -> None:
    tiles = -(-plan.m // tile)
    for k in range(tiles * (tiles + 1) // 2):
        jj, ii = (int(v) for v in triangle(np.array(k)))
        a = g[ii * tile : (ii + 1) * tile, jj * tile : (jj + 1) * tile].copy()
        b = g[jj * tile : (jj + 1) * tile, ii * tile : (ii + 1) * tile].copy()
        g[ii * tile : (ii + 1) * tile, jj * tile : (jj + 1) * tile] = b.T
        g[jj * tile : (jj + 1) * tile, ii * tile : (ii + 1) * tile] = a.T


def _pairs(lo: np.ndarray, hi: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return lo + t, hi - 1 - t


def _reverse(plan: InplacePlan, p, g: np.ndarray, tile: int) -> None:
    m = plan.m
    for t in range(m // 2):  # thread (t, j): cells t and m-1-t of column j
        row = g[t].copy()
        g[t] = g[m - 1 - t]
        g[m - 1 - t] = row


def _split(plan: InplacePlan, p, g: np.ndarray, tile: int) -> None:
    m, n = plan.m, plan.n
    j = np.arange(n, dtype=np.int64)
    s = split_point(j, p.split, m, plan.b)
    for t in range(m // 2):  # thread (t, j): t-th pair of [0, s) or else of [s, m)
        first = t < s // 2
        u = t - s // 2
        second = ~first & (u < (m - s) // 2)
        lo = np.where(first, t, s + u)
        hi = np.where(first, s - 1 - t, m - 1 - u)
        live = first | second
        cols = j[live]
        a = g[lo[live], cols].copy()
        g[lo[live], cols] = g[hi[live], cols]
        g[hi[live], cols] = a


def _shuffle(plan: InplacePlan, p, g: np.ndarray, tile: int) -> None:
    col = np.arange(plan.n, dtype=np.int64)
    for i in range(plan.m):
        row = g[i].copy()  # the row through shared memory
        if p.inverse:
            g[i] = row[shuffle_dest(np.int64(i), col, plan.m, plan.c, plan.a, plan.b)]
        else:
            g[i] = row[shuffle_source(np.int64(i), col, plan.m, plan.c, plan.b, plan.a_inv)]


def _cols(plan: InplacePlan, p, g: np.ndarray, tile: int) -> None:
    """A block's band of whole columns through shared memory: every cell read, then written
    from (or, COLS_SCATTER, to) its row in the column."""
    r = np.arange(plan.m, dtype=np.int64)[:, None]
    col = np.arange(plan.n, dtype=np.int64)[None, :]
    rows = cols_row(r, col, p.split, plan.m, plan.n, plan.a, plan.b)
    band = g.copy()
    if p.split == COLS_SCATTER:
        g[rows, col] = band
    else:
        g[...] = band[rows, col]


def _permute(plan: InplacePlan, p, g: np.ndarray, tile: int) -> None:
    m, n, a = plan.m, plan.n, plan.a
    for lead in cycle_leaders(m, n, a):
        lead = int(lead)
        saved = g[lead].copy()
        cur = lead
        while True:
            nxt = int(row_source(np.int64(cur), m, n, a))
            if nxt == lead:
                g[cur] = saved
                break
            g[cur] = g[nxt]
            cur = nxt


def _conj(plan: InplacePlan, p, g: np.ndarray, tile: int) -> None:
    pass  # the conjugation itself is run_plan's, for every conjugating pass


_PASSES = {
    SWAP: _swap,
    REVERSE: _reverse,
    SPLIT: _split,
    SHUFFLE: _shuffle,
    PERMUTE: _permute,
    CONJ: _conj,
    COLS: _cols,
}

"""transpose_()'s passes, planned before any kernel: which passes an in-place transpose of a
(batch, m, n) array runs, and the index formulas each pass's kernel computes. Pure (NumPy
only): tests/_inplace_ref.py runs exactly these passes on NumPy arrays against `x.T`.

The memory of one matrix is viewed as an m x n row-major grid throughout (m, n: the input's
rows and columns). A transpose sends the element at (i, j) to linear index d = j*m + i, that
is to grid cell (d // n, d % n). Catanzaro, Keller and Garland ("A decomposition for in-place
matrix transposition", PPoPP 2014) split that permutation into passes that each move
elements only within a column or only within a row. With c = gcd(m, n), a = m/c, b = n/c
and a_inv the inverse of a modulo b, our derivation (gather form: each pass says where a
cell's new value comes from) is:

1. ROTATE_Q (only when c > 1): column j rotated down by q_j = j // b:
   new[r][j] = old[(r - q_j) mod m][j]. After it, the elements of a row have distinct
   destination columns.
2. SHUFFLE: row i gathered: new[i][C] = old[i][src(i, C)] with q = (i - C) mod c,
   i0 = (i - q) mod m, r = ((C//c - i0//c) * a_inv) mod b, src = q*b + r. After it, every
   element is in its destination column.
3. ROTATE_K: column C rotated up by k_C = C mod m: new[r][C] = old[(r + k_C) mod m][C].
4. PERMUTE: whole rows permuted: new[R] = old[h(R)], h(R) = (R*n + R//a) mod m. After it,
   every element is in its destination cell.

A rotation moves elements of one column only. In place and with no scratch it is three
reversals (rotate up by k: reverse [0, k) and [k, m), then all of [0, m)); the kernels
reverse pairs of cells, in parallel, in a launch of their own:
`REVERSE` (every column's [0, m)) and `SPLIT` (every column's [0, s_j) and [s_j, m) for its
split s_j). So ROTATE_Q is REVERSE then SPLIT at s_j = q_j (rotating down by q is up by m-q),
and ROTATE_K is SPLIT at s_j = k_j then REVERSE; that last REVERSE is a row permutation
(R -> m-1-R) and is folded into PERMUTE, whose gather becomes g(R) = m - 1 - h(R).

PERMUTE follows g's cycles: a warp walks one cycle for one segment of columns, carrying the
cycle's first row in registers; the host hands it the cycles' first rows (`row_cycles`).
Where the cycles are few (g's are often one or two of about m rows), warps walk pieces of
them side by side instead (`pieces_of`): each piece's first row is saved first (PERMUTE_SAVE,
a scratch row a piece), then every piece moves its rows up the cycle and its last row takes
the next piece's saved first row (PERMUTE_PIECES).

Fused column passes (`COLS`). Every column pass above moves cells within their column, so
consecutive ones compose into one permutation of each column: ROTATE_Q is one, and ROTATE_K
then PERMUTE is new[R][C] = old[(h(R) + C mod m) mod m][C]. A block that holds a band of
whole columns (all m rows) in shared memory runs either as one read and one write of its
cells: SHUFFLE plus one COLS pass (c = 1), or two (c > 1), where the columns fit a block
(`band_rows`). Where the rows m do not fit but the columns n do, the plan runs on the n x m
view: an m x n transpose is the inverse of the n x m one, so the n x m grid's passes run
inverted and in reverse order: COLS scattering each column by the same (h(R) + C mod n') mod
n' (`COLS_SCATTER`), SHUFFLE in its inverse form (`shuffle_dest`: a gather as well), and
ROTATE_Q's inverse (`COLS_UP`), every formula with the n x m grid's m', n', c, a, b
(`InplacePlan.flipped`; the plan's m and n are then the view's).

Columns too tall for a block (`staged`): a COLS pass runs band by band through the scratch
(a band of whole columns a few MiB wide, all m rows; read back while the L2 still holds it)
in two launches, each coalesced along the rows: its column part, a rotation of every column
by k(C) (`skew_shift`; SKEW, through shared-memory tiles of a window of rows), and its row
part, whole band rows moved by the table h (ROWS). COLS_GATHER is SKEW (x to the scratch)
then ROWS (gathering row h(R)); COLS_SCATTER is ROWS (scattering to row h(R)) then SKEW;
the rotations copy the band with ROWS and rotate it back with SKEW (`staged_phases`).

Square matrices skip all this: tile pairs (I, J), (J, I) swap through shared memory (SWAP).
A matrix with one row or one column is already its transpose in memory (no pass, or CONJ
alone for a conjugate transpose).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ShapeError

SWAP, REVERSE, SPLIT, SHUFFLE, PERMUTE, CONJ, COLS = (
    "swap",
    "reverse",
    "split",
    "shuffle",
    "permute",
    "conj",
    "cols",
)
# PERMUTE's kernels where it walks pieces of cycles: the pieces' first rows saved, then walked
PERMUTE_SAVE, PERMUTE_PIECES = "permute_save", "permute_pieces"
PASS_KINDS = (SWAP, REVERSE, SPLIT, SHUFFLE, PERMUTE, CONJ, COLS)
# SPLIT's split of column j: its q_j (ROTATE_Q) or its k_j (ROTATE_K)
SPLIT_Q, SPLIT_K = 0, 1
# COLS's permutation of column C: row R from row (R - C//b) mod m (ROTATE_Q), from (R + C//b)
# mod m (its inverse), from (h(R) + C mod m) mod m (ROTATE_K then PERMUTE), or row R to that
# row (its inverse, a scatter)
COLS_DOWN, COLS_UP, COLS_GATHER, COLS_SCATTER = 0, 1, 2, 3
# rows, columns and a batch's matrices the kernels index with 32-bit row numbers
MAX_SIDE = 2**31 - 1


@dataclass(frozen=True)
class InplacePass:
    """One pass of an in-place transpose: its kernel's kind, SPLIT's split rule (COLS: its
    rule), whether it conjugates (the one pass that touches every element once does), and
    for SHUFFLE whether it runs inverted (`shuffle_dest`, a flipped plan's)."""

    kind: str
    split: int = 0
    conjugate: bool = False
    inverse: bool = False

    def moved_bytes(self, plan: InplacePlan, elem_bytes: int) -> int:
        """Bytes the pass reads plus writes (what a copy at the same speed would move):
        a reversal's middle row stays, PERMUTE's fixed rows stay; the rest moves once."""
        p = plan
        total = p.batch * p.m * p.n * elem_bytes
        if self.kind in (REVERSE, SPLIT):
            return 2 * p.batch * 2 * (p.m // 2) * p.n * elem_bytes
        if self.kind == PERMUTE:
            return 2 * p.batch * p.moved_rows * p.n * elem_bytes
        return 2 * total  # SWAP, SHUFFLE, CONJ, COLS: every cell read and written once


@dataclass(frozen=True)
class InplacePlan:
    """The passes of an in-place transpose of `batch` m x n matrices, and the numbers their
    formulas use (c = gcd(m, n), a = m/c, b = n/c, a_inv = a^-1 mod b)."""

    batch: int
    m: int
    n: int
    c: int
    a: int
    b: int
    a_inv: int
    passes: tuple[InplacePass, ...]
    moved_rows: int = 0  # rows PERMUTE moves (those on cycles longer than one)
    flipped: bool = False  # the passes run on the n x m view (m, n here are the view's)

    @property
    def square(self) -> bool:
        return self.m == self.n


def plan_inplace(
    batch: int,
    m: int,
    n: int,
    conjugate: bool = False,
    band_rows: int = 0,
    row_elems: int = 0,
    runs_rows: int = 0,
) -> InplacePlan:
    """The passes transposing `batch` row-major m x n matrices in their own memory. Where a
    column of m (or n) elements fits a COLS block (`band_rows`, 0: none does) the column
    passes fuse into COLS passes: on a side of at most `runs_rows` rows if one is (its rows
    gathered by runs where they pass shared memory, the other side's columns then far
    taller than a block holds), else on the side whose rows SHUFFLE holds in shared memory
    (`row_elems`, 0: any) if one is, the shorter column otherwise."""
    for name, v in (("batch", batch), ("rows", m), ("columns", n)):
        if type(v) is not int or v < 0:
            raise ShapeError(
                f"an in-place transpose's {name} must be a non-negative int, got {v!r}"
            )
        if v > MAX_SIDE:
            raise ShapeError(
                f"an in-place transpose of {v} {name}: at most {MAX_SIDE}; split the array"
            )
    if batch == 0 or m == 0 or n == 0:
        return InplacePlan(batch, m, n, 1, m, n, 0, ())
    c = math.gcd(m, n)
    a, b = m // c, n // c
    a_inv = pow(a, -1, b) if b > 1 else 0
    if m == 1 or n == 1:
        passes: tuple[InplacePass, ...] = (InplacePass(CONJ, conjugate=True),) if conjugate else ()
        return InplacePlan(batch, m, n, c, a, b, a_inv, passes)
    if m == n:
        return InplacePlan(batch, m, n, c, a, b, a_inv, (InplacePass(SWAP, conjugate=conjugate),))
    sides = [(rows, cols) for rows, cols in ((m, n), (n, m)) if rows <= band_rows]
    if sides:
        rows, cols = min(
            sides, key=lambda s: (s[0] > runs_rows, bool(row_elems) and s[1] > row_elems, s[0])
        )
        return _fused(batch, rows, cols, conjugate, flipped=(rows, cols) != (m, n))
    rotate_q = (InplacePass(REVERSE), InplacePass(SPLIT, SPLIT_Q)) if c > 1 else ()
    rest = (
        InplacePass(SHUFFLE, conjugate=conjugate),
        InplacePass(SPLIT, SPLIT_K),
        InplacePass(PERMUTE),
    )
    moved = m - int(
        np.count_nonzero(row_source(np.arange(m, dtype=np.int64), m, n, a) == np.arange(m))
    )
    return InplacePlan(batch, m, n, c, a, b, a_inv, (*rotate_q, *rest), moved)


def _fused(batch: int, m: int, n: int, conjugate: bool, flipped: bool) -> InplacePlan:
    """The COLS form on the m x n grid: ROTATE_Q, SHUFFLE, COLS_GATHER; or (`flipped`: this
    grid is the n x m view of the input) their inverses in reverse order."""
    c = math.gcd(m, n)
    a, b = m // c, n // c
    a_inv = pow(a, -1, b) if b > 1 else 0
    shuffle = InplacePass(SHUFFLE, conjugate=conjugate, inverse=flipped)
    if flipped:
        rot = (InplacePass(COLS, COLS_UP),) if c > 1 else ()
        passes = (InplacePass(COLS, COLS_SCATTER), shuffle, *rot)
    else:
        rot = (InplacePass(COLS, COLS_DOWN),) if c > 1 else ()
        passes = (*rot, shuffle, InplacePass(COLS, COLS_GATHER))
    return InplacePlan(batch, m, n, c, a, b, a_inv, passes, flipped=flipped)


# --- the formulas the kernels compute (vectorised over NumPy int64 arrays) ----------------


def split_point(j: np.ndarray, rule: int, m: int, b: int) -> np.ndarray:
    """SPLIT's split of column j: q_j = j // b (ROTATE_Q) or k_j = j mod m (ROTATE_K)."""
    return j // b if rule == SPLIT_Q else j % m


def shuffle_source(
    i: np.ndarray, col: np.ndarray, m: int, c: int, b: int, a_inv: int
) -> np.ndarray:
    """SHUFFLE: the column of row i whose element lands in column `col`."""
    q = (i - col) % c
    i0 = (i - q) % m
    r = ((col // c - i0 // c) * a_inv) % b
    return q * b + r


def shuffle_dest(i: np.ndarray, col: np.ndarray, m: int, c: int, a: int, b: int) -> np.ndarray:
    """SHUFFLE inverted: the column of row i whose element lands in column `col` (the
    column SHUFFLE moves col's element to): q = col // b, r = col mod b, i0 = (i - q) mod m,
    ((i0//c + r*a) mod b) * c + i0 mod c. No modular inverse."""
    q, r = col // b, col % b
    i0 = (i - q) % m
    return ((i0 // c + r * a) % b) * c + i0 % c


def row_offset(r: np.ndarray, m: int, n: int, a: int) -> np.ndarray:
    """COLS_GATHER's part of row r, h(r) = (r*n + r//a) mod m (the table the kernel reads)."""
    return (r * n + r // a) % m


def cols_row(
    r: np.ndarray, col: np.ndarray, rule: int, m: int, n: int, a: int, b: int
) -> np.ndarray:
    """COLS: the row of column `col` whose cell row r takes (COLS_DOWN, COLS_UP, COLS_GATHER),
    or the row that row r's cell goes to (COLS_SCATTER): a row part plus a column part, mod m."""
    if rule in (COLS_GATHER, COLS_SCATTER):
        return (row_offset(r, m, n, a) + col % m) % m
    q = col // b
    return (r - q) % m if rule == COLS_DOWN else (r + q) % m


# A staged COLS pass's two launches, in order: SKEW (its column part) and ROWS (its row part)
SKEW, ROWS = "skew", "rows"


def staged_phases(rule: int) -> tuple[str, str]:
    """The order of a staged COLS pass's launches: the first moves x's band into the scratch,
    the second moves it back. A gather's row part is read last (ROWS gathers from the
    scratch), a scatter's written first; the rotations have no row part (ROWS copies)."""
    return (SKEW, ROWS) if rule == COLS_GATHER else (ROWS, SKEW)


def skew_shift(col: np.ndarray, rule: int, m: int, b: int) -> np.ndarray:
    """SKEW's rotation of column `col`: row i of its output takes row (i + k) mod m of its
    input, k = C mod m (COLS_GATHER), -(C mod m) (COLS_SCATTER), -(C // b) (COLS_DOWN) or
    C // b (COLS_UP), taken mod m. With ROWS (row R from row h(R), or to it) in
    `staged_phases` order, it is `cols_row`'s permutation."""
    part = col % m if rule in (COLS_GATHER, COLS_SCATTER) else col // b
    return (part if rule in (COLS_GATHER, COLS_UP) else -part) % m


def row_table(m: int, n: int, a: int) -> np.ndarray:
    """COLS_GATHER's and COLS_SCATTER's table: h(r) of every row, uint32."""
    return _per_row(m, np.uint32, lambda r: row_offset(r, m, n, a))


def inverse_table(table: np.ndarray) -> np.ndarray:
    """The inverse of a permutation of rows given as a table (uint32): the row r that
    table[r] names, for each row."""
    out = np.empty_like(table)
    out[table] = np.arange(len(table), dtype=table.dtype)
    return out


def _per_row(m: int, dtype: Any, fn: Any) -> np.ndarray:
    """fn of every row 0..m-1 as `dtype`, computed on int64 rows in chunks (r*n passes 32
    bits; the chunks bound the int64 temporaries)."""
    out = np.empty(m, dtype)
    chunk = 1 << 22
    for lo in range(0, m, chunk):
        r = np.arange(lo, min(m, lo + chunk), dtype=np.int64)
        out[lo : lo + len(r)] = fn(r)
    return out


def row_source(r: np.ndarray, m: int, n: int, a: int) -> np.ndarray:
    """PERMUTE: the row whose contents row r receives, g(r) = m - 1 - ((r*n + r//a) mod m)."""
    return m - 1 - ((r * n + r // a) % m)


@dataclass(frozen=True)
class RowCycles:
    """PERMUTE's cycles longer than one row: each one's smallest row (`leaders`, uint32,
    sorted) and its length."""

    leaders: np.ndarray
    lengths: np.ndarray

    @property
    def moved_rows(self) -> int:
        return int(self.lengths.sum())


@dataclass(frozen=True)
class Pieces:
    """PERMUTE's cycles cut into pieces that warps walk side by side: piece p starts at row
    `starts[p]`, writes `lengths[p]` rows, and its last row takes the saved first row of piece
    `nexts[p]` (the next piece of its cycle; a cycle of one piece is its own next)."""

    starts: np.ndarray
    lengths: np.ndarray
    nexts: np.ndarray

    def table(self) -> np.ndarray:
        """What the kernels read: starts, lengths and nexts, uint32, one after another."""
        return np.concatenate([self.starts, self.lengths, self.nexts]).astype(np.uint32)

    def __len__(self) -> int:
        return len(self.starts)


def row_cycles(m: int, n: int, a: int) -> RowCycles:
    """The cycles of PERMUTE's g longer than one row. Pointer doubling labels every row with
    its cycle's smallest row in O(m log m) NumPy steps."""
    step = _steps(m, n, a)
    rows = np.arange(m, dtype=step.dtype)
    label = np.minimum(rows, step)
    jump = step
    span = 1
    while span < m:
        label = np.minimum(label, label[jump])
        jump = jump[jump]
        span *= 2
    moving = step != rows
    leaders = np.flatnonzero((label == rows) & moving)
    lengths = np.bincount(label[moving], minlength=m)[leaders]
    return RowCycles(leaders.astype(np.uint32), lengths.astype(np.int64))


def _steps(m: int, n: int, a: int) -> np.ndarray:
    """g of every row, as int32 (rows are below 2**31: half the host memory of int64 for the
    O(m log m) walks), computed in int64 chunks (r*n passes 32 bits)."""
    return _per_row(m, np.int32, lambda r: row_source(r, m, n, a))


def cycle_leaders(m: int, n: int, a: int) -> np.ndarray:
    """The smallest row of each cycle of PERMUTE's g longer than one row (uint32, sorted)."""
    return row_cycles(m, n, a).leaders


def pieces_of(m: int, n: int, a: int, cycles: RowCycles, most: int) -> Pieces:
    """`cycles` cut into at most `most` pieces (at least one a cycle: `most` >= cycles), all of
    one power-of-two length s but each cycle's last: s the least that keeps to `most`. The
    starts are found with g^s, made by squaring g (O(m log s) NumPy steps), then walked once
    per piece."""
    if most < len(cycles.leaders):
        raise ValueError(f"{len(cycles.leaders)} cycles do not fit {most} pieces")
    s = 1
    while int(np.sum(-(-cycles.lengths // s))) > most:
        s *= 2
    jump = _steps(m, n, a)
    span = 1
    while span < s:
        jump = jump[jump]
        span *= 2
    counts = -(-cycles.lengths // s)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    total = int(counts.sum())
    starts = np.zeros(total, np.int64)
    lengths = np.full(total, s, np.int64)
    cur = cycles.leaders.astype(np.int64)
    for k in range(int(counts.max(initial=0))):
        live = k < counts
        starts[first[live] + k] = cur[live]
        cur = jump[cur]
    last = first + counts - 1
    lengths[last] = cycles.lengths - s * (counts - 1)
    nexts = np.arange(1, total + 1, dtype=np.int64)
    nexts[last] = first
    return Pieces(starts.astype(np.uint32), lengths.astype(np.uint32), nexts.astype(np.uint32))


def triangle(k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SWAP's k-th tile pair (J, I), J <= I, of the tiles on and below the diagonal, in
    order I = 0, 1, ...: k = I*(I+1)/2 + J. The kernel's float square root, then a step
    either way to correct its rounding."""
    i = np.floor((np.sqrt(8.0 * k + 1.0) - 1.0) / 2.0).astype(np.int64)
    i = np.where(i * (i + 1) // 2 > k, i - 1, i)
    i = np.where((i + 1) * (i + 2) // 2 <= k, i + 1, i)
    return k - i * (i + 1) // 2, i

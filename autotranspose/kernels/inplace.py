"""transpose_()'s kernels (templates/inplace/): one kernel per pass kind, element size,
conjugation and parameters, and the `at_inplace_args` struct every one of them takes.

Pure (no CUDA): `runtime/launch.make_inplace` packs the struct, `runtime/compiler` compiles
what `render_inplace` renders, and tests/test_inplace_kernels.py runs the rendered kernels on
the CPU (tests/_cuda_emulator.h) against plans/inplace.py's NumPy reference.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .._version import __version__
from ..errors import ShapeError
from ..kinds.base import WORD_TYPES
from ..kinds.inplace import (
    DEFAULT,
    NAME as KIND_NAME,
    RECTANGLE,
    SQUARE,
    InplaceParams,
    swap_pad,
)
from ..plans.dtypes import ELEMENT_SIZES
from ..plans.inplace import (
    COLS,
    COLS_DOWN,
    COLS_GATHER,
    COLS_SCATTER,
    COLS_UP,
    CONJ,
    PASS_KINDS,
    PERMUTE,
    PERMUTE_PIECES,
    PERMUTE_SAVE,
    REVERSE,
    SHUFFLE,
    SPLIT,
    SWAP,
    InplacePass,
    InplacePlan,
    RowCycles,
    inverse_table,
    pieces_of,
    row_table,
)
from . import codegen
from .codegen import _DTYPES_BY_SIZE, _environment
from .packed import divisor

# SWAP for squares whose rows are not whole 16-byte words (SWAP_LINES, below)
SWAP_LINES_PIECE = "swap_lines"
# COLS of tall grids of 1- and 2-byte elements whose rows are not whole 4-byte words, in
# aligned 4-byte words (COLS_WORDS, below)
COLS_WORDS_PIECE = "cols_words"
# the same grids' COLS with each column's rotation carried by a window of rows (COLS_SLIDE)
COLS_SLIDE_PIECE = "cols_slide"
# COLS of rows of whole 16-byte words of narrow elements compiled per rule (COLS_RULE, below)
COLS_RULE_PIECE = "cols_rule"

# at_inplace_args: m, n, batch, items, c, a, b, a_inv, tiles, split, row, segs, cycles (or
# pieces), lanes, rows_per, offset (where the scratch's rows start, after a table) and the
# (magic, shift) of dividing by c, b, m and n, all 64-bit (standard sizes, no padding, as C
# lays it out)
ARG_FORMAT = "<24q"
ARG_BYTES = struct.calcsize(ARG_FORMAT)
ARG_NAMES = (
    "m",
    "n",
    "batch",
    "items",
    "c",
    "a",
    "b",
    "a_inv",
    "tiles",
    "split",
    "row",
    "segs",
    "cycles",
    "lanes",
    "rows_per",
    "offset",
    "c_magic",
    "c_shift",
    "b_magic",
    "b_shift",
    "m_magic",
    "m_shift",
    "n_magic",
    "n_shift",
)
# SHUFFLE's variants: rows read into shared memory, or (rows longer than shared memory
# holds) one row read from a global copy of it
PIECES = (
    SWAP,
    SWAP_LINES_PIECE,
    REVERSE,
    SPLIT,
    "split_band",
    "split_rows",
    "split_cols",
    SHUFFLE,
    "shuffle_global",
    "shuffle_inv",
    "shuffle_global_inv",
    "shuffle_runs",
    "shuffle_runs_inv",
    COLS,
    "cols_lines",
    COLS_WORDS_PIECE,
    COLS_SLIDE_PIECE,
    COLS_RULE_PIECE,
    "cols_staged",
    "cols_cluster",
    PERMUTE,
    PERMUTE_SAVE,
    PERMUTE_PIECES,
    CONJ,
)
_FILES = {
    SWAP: "swap",
    SWAP_LINES_PIECE: "swap_lines",
    REVERSE: "reverse",
    SPLIT: "reverse",
    "split_band": "band",
    "split_rows": "reverse",
    "split_cols": "band",
    SHUFFLE: "shuffle",
    "shuffle_global": "shuffle",
    "shuffle_inv": "shuffle",
    "shuffle_global_inv": "shuffle",
    "shuffle_runs": "shuffle_runs",
    "shuffle_runs_inv": "shuffle_runs",
    COLS: "cols",
    "cols_lines": "cols_lines",
    COLS_WORDS_PIECE: "cols_words",
    COLS_SLIDE_PIECE: "cols_slide",
    COLS_RULE_PIECE: "cols_rule",
    "cols_staged": "cols_staged",
    "cols_cluster": "cols_cluster",
    PERMUTE: "cycles",
    PERMUTE_SAVE: "cycles",
    PERMUTE_PIECES: "cycles",
    CONJ: "conj",
}
assert set(PASS_KINDS) <= set(PIECES)
# SHUFFLE: rows a block holds at once fill up to this much shared memory (one row at least,
# up to the device's opt-in): short rows several to a block, so that a block has work
SHUFFLE_BLOCK_BYTES = 32 << 10
# ... plus this much: the rows sit in shared memory at their address's offset in its 16-byte
# line, so that they are copied in 16-byte words
SHUFFLE_PAD = 16
# SPLIT through shared memory ("split_band"): a block takes BAND_PAIRS pair indices of
# `band_cols` adjacent columns (a row of them 128 to 256 bytes), its pairs' rows in two bands of
# up to BAND_ROWS rows; the per-element kernel ("split") takes matrices of fewer columns
BAND_ROWS, BAND_PAIRS = 64, 32
# SPLIT at j / b as swaps of whole runs of b elements ("split_rows") where a run is at least
# this many bytes (shorter ones: the bands)
RUN_MIN_BYTES = 64


# SPLIT of matrices of few rows ("split_cols"): a block takes all m rows of as many columns
# as this much dynamic shared memory holds, at least SPLIT_COLS_MIN (a thread a column)
SPLIT_COLS_BYTES, SPLIT_COLS_MIN = 48 << 10, 256


def split_cols_width(m: int, elem_bytes: int) -> int:
    """Columns a split_cols block takes: what SPLIT_COLS_BYTES holds of m rows, a multiple of
    32; 0 where fewer than SPLIT_COLS_MIN fit (then the bands take the SPLIT)."""
    w = SPLIT_COLS_BYTES // (m * elem_bytes) // 32 * 32
    return min(w, 4096) if w >= SPLIT_COLS_MIN else 0


def run_lanes(run_bytes: int, threads: int) -> int:
    """Threads that swap a pair of runs of `run_bytes` (REVERSE's rows, split_rows' runs): a
    16-byte word each, at most a block (a power of two, so a block holds whole pairs)."""
    words = max(1, -(-run_bytes // 16))
    return min(threads, 1 << (words - 1).bit_length())


def band_cols(elem_bytes: int) -> int:
    """Columns a split_band block takes: 32, or 16 of 16-byte elements (two bands of 64 rows
    then fit 48 KiB of static shared memory)."""
    return 16 if elem_bytes == 16 else 32


# COLS: a block holds a band of whole columns, all m rows: bands of up to COLS_MAX_BYTES a
# row, as wide as a budget holds (COLS_BLOCK_BYTES: two blocks an SM, so that one reads while
# another writes; LINES_BLOCK_BYTES for "cols_lines"), else COLS_MIN_BYTES (a 32-byte sector)
# a row up to the device's opt-in (one block). "cols" moves the widest words x, the rows and
# the bands divide. Where the rows of 1- or 2-byte elements are not whole 4-byte words (so
# that "cols" would move single elements), every global access is an aligned word of the
# line `cols_line` gives, whatever the rows' alignment: "cols_lines" 16-byte lines for grids
# of at most LINES_MAX_ROWS rows (on the H200 10-19% of a copy in single elements against
# 33-53% in lines, with 18 and 22 rows; with taller columns, bands of 32-64 bytes, 16-byte
# lines measured slower than "cols": most of a row's lines are cut at the band's edges),
# "cols_words" 4-byte words for taller ones, each row realigned in shared memory, of the
# element sizes in COLS_WORDS ("cols" takes the others). On the H200 (dev/cols_ab.py, one
# process) 1-byte COLS passes went from 7-16% of a copy to 15-30% (int8 997x30011 16 -> 30,
# uint8 3001x1999 14 -> 25), 2-byte ones from 15-27% to 19-31%, no case slower.
COLS_BLOCK_BYTES, COLS_MIN_BYTES, COLS_MAX_BYTES = 96 << 10, 32, 4096
LINES_BLOCK_BYTES, LINES_MAX_ROWS = 110 << 10, 64
COLS_WORDS: tuple[int, ...] = (1, 2)
COLS_WORDS_THREADS = 512
_COLS_LINE_PIECES = {0: COLS, 16: "cols_lines", 4: COLS_WORDS_PIECE, 8: COLS_SLIDE_PIECE}
# "cols_slide" (line 8) for the grids of "cols_words" whose band rows fit shared memory as
# they lie in 8-byte words: every row's words loaded by cp.async, all issued before the block
# waits; a column's rotation moves its rows by at most one from a column to the next, so a
# band word's elements come from 4 / e consecutive rows, and a thread walking down a column of
# written words keeps the last 4 / e rows' words in registers and builds each word by masks,
# where "cols_words" finds every element's row and reads it alone.
COLS_SLIDE = True
# The element sizes whose rows of whole 4-byte words "cols_slide" takes too, where "cols"
# would (not "cols_rule"'s rows of whole 16-byte words). H200, dev/cols_ab.py --variants
# slide slide-whole, the same parameters in one process, % of a copy of a COLS pass: uint8
# 5003x16388 20 -> 27, float16 3x2670x1395 37, 43 -> 39, 44; against "cols_rule" it lost
# (uint8 5003x16384 36 -> 26, int8 16x1024x768 35, 42 -> 27, bfloat16 3001x5000 51 -> 37),
# and against "cols" of 4-byte elements it won two and lost three (float32 1125x2579 31 ->
# 39, 10007x2039 36 -> 40; 4099x6008 53 -> 40, 7919x2039 36 -> 30, 13x2572x886 67-75 ->
# 47-52; that form, since removed, took 4-byte elements as one-element words), so 4-byte
# elements stay with "cols".
COLS_SLIDE_WHOLE: tuple[int, ...] = (1, 2)
# Band rows (bytes, under COLS_MIN_BYTES) "cols_slide" narrows to where m rows of 32 bytes
# pass the opt-in (more than 5811 rows on an H200), widest first: 24 bytes take 32 a row of
# shared memory, so every grid up to the 7264 rows a COLS pass holds (`cols_rows`), where
# "cols_words" (rows off 4-byte words) and "cols" took them in 32-byte bands. H200,
# dev/cols_ab.py --variants slide-whole slide-narrow, the same parameters in one process, %
# of a copy of a COLS pass: uint8 6007x12289 16 -> 19, bfloat16 6203x6997 16 -> 21, int16
# 5900x13001 16 -> 21, float16 7001x9001 15 -> 18, int8 2x6100x7000 (whole words, gcd 100)
# 28, 21 -> 30, 28; uint8 6792x7320 (whole words, gcd 24) 27, 22 -> 24, 23, its call 8.9 ->
# 8.7% of a copy, the one grid of eight slower. With 16, "cols_slide" also holds columns past
# the 7264 rows of a block's 32-byte band (24 bytes a row of shared memory: 9685 rows), which
# went through the scratch ("cols_staged", 6-11% of a copy for 1- and 2-byte rows off 16-byte
# words). H200, dev/cols_ab.py --variants served slide-tall, one process, two rounds: the COLS
# pass 11 -> 20% (float16 7919x10007), 7 -> 18 (uint8 8111x9973), 11 -> 15 (int16
# 9001x12007), 6 -> 18 (bool 7500x20011), 6 -> 14 (uint8 9600x15001); the calls 9.1 -> 15.0,
# 5.9 -> 13.4, 9.5 -> 12.4, 5.5 -> 13.0, 5.4 -> 11.0% of a copy; grids of whole 16-byte rows
# (bfloat16 8400x9000) and under 7265 rows (uint8 6007x8191) unchanged. With 8, columns of up
# to 14528 rows in bands of 8 bytes (16 a row): the COLS pass 7 -> 12% (uint8 9800x9901), 6
# -> 11 (int8 11003x14009), 6 -> 9 (uint8 14001x20011), 11 -> 12 (bfloat16 10007x12011,
# float16 12011x13001), 14 -> 16 (bool 10500x10007), 10, 10 -> 11, 10 (uint8 13020x16002,
# gcd 42: the rotations too); the calls 5.8 -> 9.6, 5.6 -> 8.9, 5.4 -> 7.8, 9.5 -> 10.4, 9.5 ->
# 9.9, 10.8 -> 11.9, 4.2 -> 4.3% of a copy; a grid of 16-byte bands unchanged.
COLS_SLIDE_NARROW: tuple[int, ...] = (24, 16, 8)
# The element sizes whose "cols_slide" writes a word its band shares with the neighbour's in
# aligned pieces (for 2-byte elements one half-word store), where the others take an atomic
# AND and an atomic OR. H200, dev/cols_ab.py --variants slide-narrow slide-pieces: 2-byte
# passes +1-3 points (bfloat16 6203x6997 21 -> 24, int16 5900x13001 21 -> 24, float16
# 5003x3001 27 -> 28, bfloat16 2x3001x4097 29 -> 31); 1-byte ones level but int8 997x30011
# (64-byte bands) 41 -> 37: a 1-byte piece is a byte and a half-word store, and Nsight Compute
# (uint8 6007x8191) counted twice the written L2 sectors (7.2M against 3.4M) for the 4.1M
# atomic requests they replace.
COLS_SLIDE_PIECES: tuple[int, ...] = (2,)
# The element sizes whose "cols_slide" writes such a word (where not in pieces) by one atomic
# XOR of the band's bytes as loaded (in shared memory) with the written ones, where the
# others take an atomic AND and an atomic OR. H200, dev/cols_ab.py --variants served
# slide-xor: 1-byte passes in bands of 24 and 32 bytes +3-6 points (uint8 6007x8191 19 ->
# 24, 5815x9193 20 -> 25, 3001x1999 33 -> 39, 5003x16381 20 -> 23, 6096x15666 22, 21 -> 25,
# 24); where a band has few cut words or none it lost 0-2 (int8 997x30011, 64-byte bands, 41
# -> 39; int8 2x6100x7000, rows of whole words, 30, 28 -> 29, 27), in a form that spilled 8
# bytes on sm_90 at the 64-register cap (the served one, the loaded word's address passed
# whole, spills none). 2-byte elements keep their pieces (the XOR was +1 on two calls).
COLS_SLIDE_XOR: tuple[int, ...] = (1,)
# Where the rows are whole 16-byte words (line 0), "cols" walks a word's 16 / e elements one
# row step after another under a rule read at run time; "cols_rule" (the element sizes in
# COLS_RULE) is compiled per rule and finds each element's row from its word's first, so that
# a word's shared loads wait on nothing but the word's first row. On the H200 (dev/cols_ab.py,
# one process, the same parameters): 1-byte COLS passes 29-31% of a copy -> 31-36% (uint8
# 5003x16384 31 -> 36, 8192x7168 31 -> 35), 2-byte 34-50% -> 36-52%, no case slower; 4-byte
# 53 -> 55-56% and 8-byte level, which "cols" keeps (their shipped results were not measured
# again).
COLS_RULE: tuple[int, ...] = (1, 2)


def cols_pitch(width: int, elem_bytes: int, line: int = 0) -> int:
    """Shared bytes a band row of `width` elements takes: its bytes ("cols", line 0); in
    16-byte lines, its bytes rounded up to 16 and 4 more (the row's offset in its 4-byte
    word); in 4-byte words (rows realigned), its bytes rounded up to 4; as the row lies in
    8-byte words ("cols_slide"), its 4-byte words and 8 bytes more (its offset in its 8-byte
    word, and a band word's second), rounded up to 8."""
    row = width * elem_bytes
    if line == 16:
        return _words(row) + 4
    if line == 8:
        return (4 * -(-row // 4) + 15) // 8 * 8
    return -(-row // 4) * 4 if line else row


def cols_rows(shared_optin: int) -> int:
    """The longest column a COLS block holds: a 32-byte band row of it in the opt-in."""
    return shared_optin // COLS_MIN_BYTES


def cols_min_width(line: int) -> int:
    """The narrowest band row (bytes) of a COLS pass in `line`: COLS_MIN_BYTES, or for
    "cols_slide" (line 8) the narrowest of COLS_SLIDE_NARROW."""
    return min((COLS_MIN_BYTES, *COLS_SLIDE_NARROW)) if line == 8 else COLS_MIN_BYTES


def cols_line(m: int, n: int, elem_bytes: int, shared_optin: int) -> int:
    """The word (bytes) a COLS pass of an m x n grid aligns its accesses to where its rows are
    1- or 2-byte elements and not whole 4-byte words: 16 ("cols_lines") for at most
    LINES_MAX_ROWS rows; for more, of the element sizes in COLS_WORDS, where the narrowest
    band's rows fit the opt-in, 8 ("cols_slide", where COLS_SLIDE is on) or 4 ("cols_words");
    else 0 ("cols": the widest word x, the rows and the band divide). Rows of whole 4-byte
    words (not "cols_rule"'s 16-byte ones) of the sizes in COLS_SLIDE_WHOLE: 8 where
    "cols_slide" serves and fits, else 0."""

    def fits(line: int) -> bool:  # the narrowest band's m rows in the opt-in
        return m * cols_pitch(cols_min_width(line) // elem_bytes, elem_bytes, line) <= shared_optin

    slide = COLS_SLIDE and m > LINES_MAX_ROWS and fits(8)
    if elem_bytes >= 4 or (n * elem_bytes) % 4 == 0:
        rule = elem_bytes in COLS_RULE and (n * elem_bytes) % 16 == 0  # "cols_rule"'s
        return 8 if slide and elem_bytes in COLS_SLIDE_WHOLE and not rule else 0
    if m <= LINES_MAX_ROWS:
        return 16
    if elem_bytes not in COLS_WORDS:
        return 0
    return 8 if slide else 4 if fits(4) else 0


def cols_piece(line: int, n: int, elem_bytes: int) -> str:
    """The COLS kernel of a line `cols_line` gave for an m x n grid: in line 0, "cols_rule"
    where the rows are whole 16-byte words of an element size in COLS_RULE."""
    if line == 0 and elem_bytes in COLS_RULE and (n * elem_bytes) % 16 == 0:
        return COLS_RULE_PIECE
    return _COLS_LINE_PIECES[line]


# SHUFFLE of 1- and 2-byte rows in shared memory with each element's source column a step
# from the one before, where the general carry (at_carry) takes about a dozen instructions
# an element: gcd 1 (b = n) every word, a_inv or (inverted) a mod n; otherwise a word whose
# columns stay in one block of c on one side of the row's iota (-b), or inverted in one run
# of C mod b (+m mod n). H200, the same matrices and parameters in one process
# (dev/cols_ab.py --variants rule no-step): 1-byte SHUFFLE 42-49% -> 53-66% of a copy
# (8192x7168, 3123x8555, 997x30011, 3001x1999), 2-byte 56-78% -> 61-82%; one batched 1-byte
# grid whose rows are short (11x2656x1904) 36% -> 34%. Off, the carry serves every word.
SHUFFLE_STEP = True

# SWAP's grid where blocks_per_sm blocks an SM would give each block one pair (its next
# pair's loads, issued while it writes this one, then hide nothing): the blocks an SM holds
# at once (one wave, `swap_blocks`), two pairs or more a block. On an H200 (the tuner's
# bench): 1-byte 4096x4096 68% -> 74% of a copy, 3x2048x2048 76% -> 78%; where the grid's
# blocks had more than one pair one wave gained nothing (1-byte 8192x8192 80.4% against
# 79.3%, 6976x6976 70.3% against 67.6%, 8-byte 4096x4096 91.1% against 89.1%), so those keep
# blocks_per_sm blocks an SM.
SWAP_RESIDENT = True

# SWAP of squares whose rows are not whole 16-byte words (odd sides) in lines
# (SWAP_LINES_PIECE, templates/inplace/swap_lines.cu.j2): every global access an aligned
# 16-byte word, the words a tile row shares with its neighbour written element by element,
# where SWAP moves element by element. H200, served tiles, the same matrices in one process
# (dev/swap_ab.py, cut edge words in aligned pieces, every thread an item): 1-byte
# 8191x8191 13.3 -> 28.5% of a copy, 2-byte 4099x4099 32.0 -> 50.3, 64x197x197 25.5 -> 46.6,
# 4-byte 4099x4099 38.2 -> 54.5, 8-byte 4097x4097 56.2 -> 57.2 (docs/inplace.md).
# Off, SWAP serves every square (x off its line with rows of whole words stays SWAP's).
SWAP_LINES = True


def swap_min_blocks(params: InplaceParams, elem_bytes: int, lines: bool = False) -> int:
    """The blocks an SM SWAP's registers are capped for (its __launch_bounds__): 1024
    threads an SM, 768 for 16-byte elements and for 1- and 2-byte ones in lines (whose
    written words are cut from two packed words a row: about 80 registers at 256 threads)."""
    narrow_lines = lines and elem_bytes <= 2
    return max(1, (768 if elem_bytes == 16 or narrow_lines else 1024) // params.threads)


def swap_blocks(params: InplaceParams, elem_bytes: int, lines: bool = False) -> int:
    """SWAP blocks an SM runs at once: what its register cap holds, at most blocks_per_sm."""
    return max(1, min(params.blocks_per_sm, swap_min_blocks(params, elem_bytes, lines)))


def swap_lines(m: int, elem_bytes: int) -> bool:
    """Whether a square's SWAP runs in lines: rows not whole 16-byte words, SWAP_LINES on."""
    return SWAP_LINES and elem_bytes < 16 and (m * elem_bytes) % 16 != 0


def cols_params(params: InplaceParams, line: int = 0) -> InplaceParams:
    """COLS's parameters: twice the threads (512 by default) for "cols" (a block of the
    tallest bands is alone on its SM, and its loads in flight are what keep the memory busy);
    COLS_WORDS_THREADS for "cols_words" (line 4); the pass's own for "cols_lines" (line 16:
    two blocks of 256 an SM)."""
    if line == 16:
        return params
    return replace(
        params, threads=COLS_WORDS_THREADS if line in (4, 8) else min(512, 2 * params.threads)
    )


def cols_width(
    m: int, n: int, batch: int, elem_bytes: int, shared_optin: int, sms: int, line: int = 0
) -> int:
    """Columns of a COLS band: the widest power of two of bytes (32 to 4096) whose m rows fit
    the budget (else 32 bytes, in the opt-in; "cols_slide" the widest of COLS_SLIDE_NARROW
    whose rows fit it), narrowed while the bands would leave SMs without two blocks; all n
    where that is fewer."""
    width = COLS_MAX_BYTES
    budget = LINES_BLOCK_BYTES if line == 16 else COLS_BLOCK_BYTES

    def held(width: int) -> int:
        return m * cols_pitch(max(1, width // elem_bytes), elem_bytes, line)

    while width > COLS_MIN_BYTES and held(width) > min(budget, shared_optin):
        width //= 2
    while width > COLS_MIN_BYTES and batch * -(-n * elem_bytes // width) < 2 * sms:
        width //= 2
    for narrow in sorted(COLS_SLIDE_NARROW, reverse=True) if line == 8 else ():
        if held(width) <= shared_optin:
            break
        width = narrow
    if held(width) > shared_optin:
        raise ShapeError(
            f"a COLS band of {m} rows of {width} bytes passes {shared_optin} bytes of shared "
            "memory; plan it with band_rows = cols_rows(shared_optin)"
        )
    return min(n, max(1, width // elem_bytes))


# SHUFFLE of long rows of a grid of at most RUNS_MAX_ROWS rows: chunks of RUNS_CHUNK_BYTES
# of a row through shared memory, their sources runs of about a chunk / m elements
RUNS_MAX_ROWS, RUNS_CHUNK_BYTES = 64, 16 << 10
# A skinny matrix's plan on its side of few rows (its long rows by runs, its short columns in
# a block) where the other side's rows would fit shared memory but its columns only the
# scratch's bands (staged): H200, dev/cols_ab.py --variants served no-runs-side
RUNS_SIDE = True


def runs_side_rows() -> int:
    """`plan_inplace`'s runs_rows: the rows of a side it takes first (0: none)."""
    return RUNS_MAX_ROWS if RUNS_SIDE else 0


# SHUFFLE of long rows of few rows in 16-byte words (templates/inplace/shuffle_runs.cu.j2): a
# thread moves a run's aligned word of the copy or of x, and the chunk moves in aligned words.
# An element a thread on both sides (the kernel before) issued 36 instructions a byte (Nsight
# Compute, H200, uint8 11x1898324: issue 70% busy, DRAM 19%). Measured (dev/cols_ab.py,
# H200, the two trees in one call, the SHUFFLE pass against a copy of its bytes): 1- and
# 2-byte 12-27% -> 23-41% (uint8 64x300007 12 -> 37, int16 37x501001 18 -> 37, uint8
# 7644496x28 inverted 14 -> 23), 4- to 16-byte 29-43% -> 37-58% (docs/inplace.md).
# A thread loads SHUFFLE_RUNS_BATCH words before its first store (eight were no faster)
SHUFFLE_RUNS_BATCH = 4
# ... and the block's shared memory past the chunk: 16 bytes for the chunk's offset in its
# line, and the chunk's table of runs (three 4-byte words a run)
RUNS_TABLE_BYTES = 12 * RUNS_MAX_ROWS
# ... and registers capped for this many threads an SM (64 a thread at 1024): uncapped, the
# inverted 1-byte kernel took 78 (Nsight Compute, uint8 7644496x28: 36% of an SM's warps)
RUNS_MIN_THREADS = 1024
# Rows of at least this many bytes (a block holds one: SHUFFLE_BLOCK_BYTES), where all the
# matrices have at most RUNS_MAX_ROWS rows between them, go through the scratch by runs even
# where shared memory holds a row: a block a row left most SMs idle. Measured (H200,
# dev/cols_ab.py --variants served runs-from-32k runs-from-128k, two rounds): uint8
# 20x200003 10.8% -> 16.7% of a copy, int8 5x150001 10.0 -> 18.4, float16 12x100003 13.7 ->
# 22.7, float32 50000x17 23.1 -> 31.2, complex128 7x12007 31.4 -> 35.6; 12 of 13 grids of one
# matrix faster, complex64 3x9001 level; batches of 160 and 192 rows slower (uint8
# 8x20x60001 16.9 -> 14.6, float32 16x12x20000 19.1 -> 16.0): they keep shared memory
RUNS_FROM_BYTES = 32 << 10


def runs_rather(rows: int, row_bytes: int) -> bool:
    """Whether SHUFFLE of `rows` rows in all (every matrix's) of `row_bytes` each, rows that
    shared memory holds, goes by runs through the scratch instead."""
    return rows <= RUNS_MAX_ROWS and row_bytes >= RUNS_FROM_BYTES


def runs_shared(chunk_bytes: int) -> int:
    """Dynamic shared memory of a "shuffle_runs" block whose chunk is `chunk_bytes`."""
    return _words(16 + chunk_bytes) + RUNS_TABLE_BYTES


# The fixed scratch a call may take besides one row: rows too long for shared memory are
# shuffled through it in groups (fewer launches), and PERMUTE saves its pieces' first rows
# in it (cycles cut into pieces that warps walk side by side, where the cycles are few)
SCRATCH_BYTES = 32 << 20


# COLS through the scratch ("cols_staged"; plans/inplace.py, "staged"): columns taller than a
# block holds (`cols_rows`: 7264 rows of a 32-byte band in the H200's 227 KiB), which would
# otherwise take the unfused passes, go band by band through the scratch: bands of whole
# columns of about STAGE_BYTES, up to STAGE_BUFFERS of them in the scratch at once, so that
# the L2 keeps a band between its two parts and the next band's first part runs beside this
# one's second (one launch a pass: templates/inplace/cols_staged.cu.j2); SKEW's tiles
# SKEW_BYTES of columns by SKEW_ROWS rows (their window: SKEW_ROWS plus the tile's columns
# less one rows in shared memory). Shorter columns stay in a block's band (docs/inplace.md,
# "Staged").
# STAGED_MIN_ROWS: columns at least this tall are staged even where a block holds them.
STAGED_MIN_ROWS, STAGE_BYTES, STAGE_BUFFERS = 1 << 31, 10 << 20, 3
STAGED_ZERO = 2  # `segs` of the launch that zeroes a staged pass's counters
STAGED_HEAD = 16  # bytes of a staged block's shared memory before SKEW's window: its item
SKEW_BYTES, SKEW_ROWS = 128, 256


def skew_cols(elem_bytes: int) -> int:
    """Columns of a SKEW tile: SKEW_BYTES of them."""
    return SKEW_BYTES // elem_bytes


def skew_pitch(elem_bytes: int) -> int:
    """Elements a SKEW window's shared row takes: its columns and a pad to an odd number of
    4-byte words (as SWAP's tiles, `swap_pad`)."""
    return skew_cols(elem_bytes) + swap_pad(elem_bytes)


def skew_smem(elem_bytes: int) -> int:
    """SKEW's dynamic shared memory: its window of SKEW_ROWS + columns - 1 rows."""
    return (SKEW_ROWS + skew_cols(elem_bytes) - 1) * skew_pitch(elem_bytes) * elem_bytes


# COLS over a thread-block cluster ("cols_cluster", sm_90 on): a cluster of K blocks holds a
# band of each of m rows, ceil(m / K) rows a block, and exchanges whole 16-byte words of band
# rows over distributed shared memory. Taken for the rotations (CLUSTER_RULES) of columns
# taller than a block's 32-byte band holds (`cols_rows`: those went through the scratch)
# whose rows are whole 16-byte words, in clusters of 8 blocks of 256 threads holding 64 bytes
# of each row. Measured on an H200 against a block's band and the scratch
# (dev/cluster_ab.py, every K of CLUSTER_SIZES and band of 64-256 bytes): the rotations of
# columns past a block 38-47% of a copy against the scratch's 29-32% (uint8 7504x7500,
# float16 8280x7320, 7320x8280, 12000x7424); where a block holds the column, its band ran
# ahead of every cluster shape on gathers (float32 2039x3008: 68% against 36-53%), within a
# few points on rotations and 16-byte elements, and 1-byte elements at half its speed (each
# word's 16 elements placed one by one).
CLUSTER_SIZES: tuple[int, ...] = (8, 4, 2)  # tried in order, as the band widths
CLUSTER_BYTES: tuple[int, ...] = (64, 128, 256)
CLUSTER_MIN_ROWS: int | None = None  # None: columns past a block's band (cols_rows)
CLUSTER_THREADS = 256
# shared memory a cluster's block should stay within where it can (two blocks an SM), and
# the blocks an SM its registers are capped for (__launch_bounds__: 256 threads of ~100
# registers run two an SM uncapped; capped for three they spilled)
CLUSTER_BLOCK_BYTES = 112 << 10
CLUSTER_MIN_BLOCKS = 1
# the COLS forms that run over clusters: the rotations (COLS_DOWN, COLS_UP); the gather and
# scatter by the table moved 7/8 of their words between blocks and ran behind the scratch's
# (float32 7321x7400: 27% of a copy against 34%)
CLUSTER_RULES: tuple[int, ...] = (COLS_DOWN, COLS_UP)
# rows of whole 16-byte words only (the kernel takes any: narrower words where x, the rows or
# the band are not on 16-byte lines)
CLUSTER_WORDS = 16


def cluster_params(params: InplaceParams) -> InplaceParams:
    """A cluster COLS block's parameters: CLUSTER_THREADS threads (0: COLS's)."""
    return replace(params, threads=CLUSTER_THREADS or cols_params(params).threads)


def cluster_smem(m: int, cluster: int, width: int, elem_bytes: int) -> int:
    """A cluster COLS block's dynamic shared memory: its ceil(m / K) rows of the band, and
    (a scatter's window) a word's elements less one more."""
    return (-(-m // cluster) + max(1, 16 // elem_bytes) - 1) * width * elem_bytes


def cluster_band(
    m: int, n: int, elem_bytes: int, shared_optin: int, cluster_max: int, threads: int = 0
) -> tuple[int, int] | None:
    """(blocks a cluster, band columns) of a cluster COLS pass of an m x n grid, or None where
    it takes none: no clusters (`cluster_max` < 2), rows not whole 16-byte words, columns a
    block's band holds (CLUSTER_MIN_ROWS, where set: shorter ones) or past what the largest
    cluster holds. The first of CLUSTER_BYTES, then CLUSTER_SIZES, whose block stays within
    CLUSTER_BLOCK_BYTES, else within the opt-in, and whose band's columns are at most the
    block's `threads` (a thread keeps a word column; 0: the default parameters')."""
    threads = threads or cluster_params(DEFAULT).threads
    least = cols_rows(shared_optin) + 1 if CLUSTER_MIN_ROWS is None else CLUSTER_MIN_ROWS
    if cluster_max < 2 or (n * elem_bytes) % CLUSTER_WORDS or m < least:
        return None
    sizes = [k for k in CLUSTER_SIZES if k <= cluster_max]
    for budget in (min(CLUSTER_BLOCK_BYTES, shared_optin), shared_optin):
        for width in CLUSTER_BYTES:
            cols = width // elem_bytes
            for k in sizes:
                fits = cluster_smem(m, k, cols, elem_bytes) <= budget
                if fits and -(-m // k) + cols + 16 <= m and cols <= min(n, threads):
                    return k, cols
    return None


def staged_width(m: int, n: int, elem_bytes: int, stage_bytes: int) -> int:
    """Columns of a staged band: what `stage_bytes` holds of m rows, a whole number of SKEW
    tiles (one at least), no more tiles than n needs."""
    wt = skew_cols(elem_bytes)
    w = max(1, stage_bytes // (m * elem_bytes) // wt) * wt
    return min(w, -(-n // wt) * wt)


def _line(nbytes: int) -> int:
    """`nbytes` rounded up to a 256-byte line."""
    return -(-nbytes // 256) * 256


def _words(nbytes: int) -> int:
    """`nbytes` rounded up to whole 16-byte words."""
    return -(-nbytes // 16) * 16


# The counters a staged pass may take (a ticket and two words a band): room for 131070 bands
STAGE_COUNTERS_MOST = 1 << 20


def staged_rows(scratch_limit: int = SCRATCH_BYTES) -> int:
    """The tallest column a staged COLS pass takes: one SKEW tile's width of it in the scratch
    beside its counters."""
    return (scratch_limit - STAGE_COUNTERS_MOST) // SKEW_BYTES


@dataclass(frozen=True)
class StagedLayout:
    """A staged COLS pass's scratch: its counters (a ticket, a word, two a band), then
    `buffers` buffers of a band (m rows of `width` elements, each rounded up to 16 bytes),
    each on a 256-byte line (templates/inplace/cols_staged.cu.j2 reads it so)."""

    width: int
    bands: int  # a matrix's
    buffers: int
    counters: int  # bytes, the buffers' offset
    buffer: int  # bytes a buffer takes

    @property
    def scratch(self) -> int:
        return self.counters + self.buffers * self.buffer


def staged_layout(
    batch: int, m: int, n: int, elem_bytes: int, stage_bytes: int, scratch_limit: int
) -> StagedLayout | None:
    """The staged layout of a COLS pass of `batch` m x n grids: bands of about `stage_bytes`,
    as many buffers as STAGE_BUFFERS, the bands and `scratch_limit` allow (None where not
    one band of one SKEW tile's width fits)."""
    for stage in (min(stage_bytes, scratch_limit), 0):  # the widest band, else the narrowest
        w = staged_width(m, n, elem_bytes, stage)
        bands = -(-n // w)
        counters = _line(4 * (2 + 2 * batch * bands))
        buffer = _line(m * _words(w * elem_bytes))
        fit = (scratch_limit - counters) // buffer
        if fit >= 1:
            buffers = min(STAGE_BUFFERS, batch * bands, fit)
            return StagedLayout(w, bands, buffers, counters, buffer)
    return None


@dataclass(frozen=True)
class InplaceKernel:
    """One in-place pass kernel: its piece, element size, whether it conjugates (complex64
    and complex128 only) and its parameters. Everything here reaches CUDA source, so it is
    all checked."""

    piece: str
    elem_bytes: int
    conjugate: bool = False
    params: InplaceParams = DEFAULT
    cluster: int = 0  # cols_cluster: blocks a cluster (CLUSTER_SIZES); 0 for every other piece

    def __post_init__(self) -> None:
        if self.piece not in PIECES:
            raise ShapeError(f"in-place piece {self.piece!r}: one of {PIECES}")
        if self.elem_bytes not in ELEMENT_SIZES:
            raise ShapeError(
                f"in-place kernels of {self.elem_bytes}-byte elements; sizes are {ELEMENT_SIZES}"
            )
        if (
            self.piece in ("cols_lines", COLS_WORDS_PIECE, COLS_SLIDE_PIECE)
            and self.elem_bytes >= 4
        ):
            raise ShapeError(
                f"{self.piece} moves 1- or 2-byte elements, not {self.elem_bytes}-byte ones; "
                "use the piece 'cols'"
            )
        if self.piece == COLS_RULE_PIECE and self.elem_bytes == 16:
            raise ShapeError(
                "cols_rule moves elements of 1 to 8 bytes (a 16-byte word of 16-byte elements "
                "is one element); use the piece 'cols'"
            )
        if self.piece == SWAP_LINES_PIECE and self.elem_bytes == 16:
            raise ShapeError(
                "swap_lines moves elements of 1 to 8 bytes (16-byte rows are always whole "
                "16-byte words); use the piece 'swap'"
            )
        if (self.piece == "cols_cluster") != (self.cluster != 0) or (
            self.cluster and self.cluster not in CLUSTER_SIZES
        ):
            raise ShapeError(
                f"in-place piece {self.piece!r} with clusters of {self.cluster!r} blocks: "
                f"cols_cluster takes one of {CLUSTER_SIZES}, every other piece 0"
            )
        if type(self.conjugate) is not bool or (self.conjugate and self.elem_bytes not in (8, 16)):
            raise ShapeError("a conjugating in-place kernel moves 8- or 16-byte complex elements")
        if not isinstance(self.params, InplaceParams):
            raise ShapeError("an in-place kernel's params are an InplaceParams")
        if self.piece in (SWAP, SWAP_LINES_PIECE) and not self.params.fits(self.elem_bytes):
            raise ShapeError(
                f"SWAP tiles of {self.params.tile} {self.elem_bytes}-byte elements need "
                f"{self.params.swap_smem(self.elem_bytes)} bytes of static shared memory; "
                "use a smaller tile"
            )

    @property
    def name(self) -> str:
        conj = "_c" if self.conjugate else ""
        key = self.params.key.replace(".", "_")
        k = f"_k{self.cluster}" if self.cluster else ""
        return f"at_inplace_{self.piece}{k}_s{self.elem_bytes}{conj}_{key}"


def render_inplace(k: InplaceKernel) -> str:
    """CUDA source of kernel `k` (`k.name`)."""
    if not isinstance(k, InplaceKernel):  # checked specs only reach CUDA
        raise TypeError("render_inplace() takes an InplaceKernel")
    p = k.params
    return (
        _environment()
        .get_template("inplace/inplace.cu.j2")
        .render(
            version=__version__,
            name=k.name,
            piece=k.piece,
            file=_FILES[k.piece],
            split=k.piece == SPLIT,
            from_global=k.piece in ("shuffle_global", "shuffle_global_inv"),
            inverse=k.piece.endswith("_inv"),
            words=[(WORD_TYPES[w], w) for w in (16, 8, 4, 2) if w > k.elem_bytes],
            s=k.elem_bytes,
            t=WORD_TYPES[k.elem_bytes],
            dtypes=_DTYPES_BY_SIZE[k.elem_bytes],
            conjugate=k.conjugate,
            imag_word="y" if k.elem_bytes == 8 else "w",
            threads=p.threads,
            tile=p.tile,
            pad=swap_pad(k.elem_bytes),
            skew_pad=swap_pad(k.elem_bytes),
            staged_head=STAGED_HEAD,
            band=BAND_ROWS,
            band_w=band_cols(k.elem_bytes),
            band_t=BAND_PAIRS,
            band_per=BAND_PAIRS * band_cols(k.elem_bytes) // p.threads,
            unroll=p.unroll,
            per_lane=p.per_lane(k.elem_bytes),
            key=p.key,
            cluster=k.cluster,
            cluster_min_blocks=CLUSTER_MIN_BLOCKS,
            swap_min_blocks=swap_min_blocks(p, k.elem_bytes, k.piece == SWAP_LINES_PIECE),
            shuffle_step=SHUFFLE_STEP,
            slide_pieces=k.elem_bytes in COLS_SLIDE_PIECES,
            slide_xor=k.elem_bytes in COLS_SLIDE_XOR,
            runs_batch=SHUFFLE_RUNS_BATCH,
            runs_min_blocks=max(1, RUNS_MIN_THREADS // p.threads),
            runs_max=RUNS_MAX_ROWS,
            args_bytes=ARG_BYTES,
        )
    )


# The pieces a square's program may run (SWAP; CONJ alone for a 1 x 1) and a rectangle's
_PROBLEM_PIECES = {
    SQUARE: (SWAP, SWAP_LINES_PIECE, CONJ),
    RECTANGLE: tuple(p for p in PIECES if p not in (SWAP, SWAP_LINES_PIECE)),
}


def program_kernels(
    elem_bytes: int, conjugate: bool, params: InplaceParams, problem: str = ""
) -> list[InplaceKernel]:
    """Every pass kernel an in-place program of these parameters may run (those the element
    size admits): a square's (`problem` "inplace:square"), a rectangle's ("inplace"), or
    either's ("")."""
    found = []
    for piece in _PROBLEM_PIECES.get(problem, PIECES):
        if piece == SWAP_LINES_PIECE and not SWAP_LINES:
            continue  # not served: its source is no config's yet
        if piece == COLS_RULE_PIECE and elem_bytes not in COLS_RULE:
            continue  # likewise, for the element sizes it does not serve
        if piece == COLS_SLIDE_PIECE and not COLS_SLIDE:
            continue  # not served (with it on, "cols_words" still takes rows past its fit)
        for k in CLUSTER_SIZES if piece == "cols_cluster" else (0,):
            try:
                found.append(InplaceKernel(piece, elem_bytes, conjugate, params, k))
            except ShapeError:  # cols_lines, cols_words past 2 bytes, SWAP tiles too large
                continue
    return found


def program_source(config: Any, problem: str = "") -> str:
    """An in-place config's source (`codegen.kernel_source`: what its stored results'
    version hashes): every pass kernel its programs of `problem` may run, the derived COLS
    parameters included, so that a change to any of them makes its results stale and a
    change to the other problem's kernels does not (SWAP runs squares only, the rest
    rectangles only); problem "": both problems' kernels (what results stored before the
    versions were per problem hashed)."""
    p = config.params
    kernels = program_kernels(config.elem_bytes, config.conjugate, p, problem)
    cols = [k for k in kernels if k.piece in _COLS_PIECES and not k.cluster]
    kernels += [replace(k, params=cols_params(p, line)) for k in cols for line in (0, 16, 4)]
    kernels += [replace(k, params=cluster_params(p)) for k in kernels if k.cluster]
    return "\n".join(render_inplace(k) for k in dict.fromkeys(kernels))


@dataclass(frozen=True)
class PassLaunch:
    """One pass's launch: its kernel, blocks, `at_inplace_args` values by name and dynamic
    shared bytes, and what its second pointer is (`aux`): "" nothing; "leaders" PERMUTE's
    table of cycle leaders (`table`, uploaded once); "scratch" the call's scratch, into
    whose start `table` (PERMUTE's pieces) is copied first where there is one; "rows" the
    scratch holding rows a long-row SHUFFLE gathers from, the launch repeated for groups of
    `rows_per` of the `rows` rows (each group copied there first, the `row` and `rows_per`
    arguments set per group); "bands" a staged COLS pass, launched twice for each of its
    `rows` bands (`row` the band, `segs` 0 then 1: into the scratch, then back), its second
    pointer its table (`offset`: the scratch's distance from it) or the scratch itself.
    `scratch`: the bytes of scratch the pass needs."""

    kind: str
    spec: InplaceKernel
    blocks: int
    args: dict[str, int] = field(compare=False)
    smem: int
    aux: str
    moved_bytes: int
    rows: int = 0
    rows_per: int = 0
    scratch: int = 0
    table: np.ndarray | None = field(default=None, compare=False)


def pass_launches(
    plan: InplacePlan,
    elem_bytes: int,
    params: InplaceParams,
    multiprocessors: int,
    shared_optin: int,
    cycles: RowCycles | None,
    scratch_limit: int = SCRATCH_BYTES,
    staged_from: int | None = None,
    stage_bytes: int | None = None,
    cluster: int = 0,
) -> tuple[PassLaunch, ...]:
    """How `plan`'s passes launch on a GPU of `multiprocessors` SMs that lets a block opt in
    to `shared_optin` bytes of shared memory, PERMUTE walking `cycles` (pure: the CPU tests
    launch exactly these on the emulator). Every grid is at most blocks_per_sm blocks an SM;
    the kernels walk their items by the grid stride. The row passes may use `scratch_limit`
    bytes of scratch (or one row, where a row is longer); COLS passes of columns of at least
    `staged_from` rows (or more than a block holds) go through it in bands of about
    `stage_bytes` (default: STAGED_MIN_ROWS and STAGE_BYTES, read per call), where a SKEW
    tile's width of their rows fits it. `cluster`: the most blocks a cluster of the device
    may have (0: none); COLS passes `cluster_band` takes run over clusters ("cols_cluster")."""
    staged_from = STAGED_MIN_ROWS if staged_from is None else staged_from
    stage_bytes = STAGE_BYTES if stage_bytes is None else stage_bytes
    cap = multiprocessors * params.blocks_per_sm
    clustered = cluster_params(params)
    batch, m, n = plan.batch, plan.m, plan.n
    row_bytes = n * elem_bytes
    common = {"m": m, "n": n, "batch": batch, "c": plan.c, "a": plan.a, "b": plan.b}
    common["a_inv"] = plan.a_inv
    for name, d in (("c", plan.c), ("b", plan.b), ("m", m), ("n", n)):
        common[f"{name}_magic"], common[f"{name}_shift"] = (0, 0) if d <= 1 else divisor(d)
    out: list[PassLaunch] = []

    def cols_table(p: InplacePass, piece: str = COLS) -> dict[str, Any]:
        """A COLS pass's table h (its gather and scatter; "cols_slide" its inverse),
        uploaded once: PERMUTE's "leaders" slot."""
        if p.split not in (COLS_GATHER, COLS_SCATTER):
            return {"aux": ""}
        table = row_table(m, n, plan.a)
        if piece == COLS_SLIDE_PIECE:
            table = inverse_table(table)
        return {"aux": "leaders", "table": table}

    def add(
        p: InplacePass, spec: InplaceKernel, blocks: int, args: dict[str, int], **kw: Any
    ) -> None:
        moved = kw.pop("moved", p.moved_bytes(plan, elem_bytes))
        blocks = max(1, min(blocks, cap))
        if spec.cluster:  # whole clusters
            blocks = max(spec.cluster, blocks // spec.cluster * spec.cluster)
        out.append(
            PassLaunch(
                p.kind,
                spec,
                blocks,
                {**common, **args},
                aux=kw.pop("aux", ""),
                moved_bytes=moved,
                smem=kw.pop("smem", 0),
                **kw,
            )
        )

    for p in plan.passes:
        spec = InplaceKernel(p.kind, elem_bytes, p.conjugate, params)
        if p.kind == SWAP:
            lines = swap_lines(m, elem_bytes)
            if lines:
                spec = InplaceKernel(SWAP_LINES_PIECE, elem_bytes, p.conjugate, params)
            tiles = -(-m // params.tile)
            items = batch * tiles * (tiles + 1) // 2
            blocks = items
            if SWAP_RESIDENT and items <= cap:  # one wave: a block has two pairs, not one
                blocks = min(items, multiprocessors * swap_blocks(params, elem_bytes, lines))
            add(p, spec, blocks, {"items": items, "tiles": tiles})
        elif p.kind == REVERSE:
            lanes = run_lanes(row_bytes, params.threads)
            items = batch * (m // 2)
            blocks = -(-items // (params.threads // lanes))
            add(p, spec, blocks, {"items": items, "lanes": lanes})
        elif p.kind == SPLIT and p.split == 0 and plan.b * elem_bytes >= RUN_MIN_BYTES:
            spec = InplaceKernel("split_rows", elem_bytes, False, params)
            lanes = run_lanes(plan.b * elem_bytes, params.threads)
            items = batch * plan.c * (m // 2)
            blocks = -(-items // (params.threads // lanes))
            add(p, spec, blocks, {"items": items, "lanes": lanes, "split": p.split})
        elif p.kind == SPLIT and split_cols_width(m, elem_bytes):
            spec = InplaceKernel("split_cols", elem_bytes, False, params)
            w = split_cols_width(m, elem_bytes)
            items = batch * -(-n // w)
            args = {"items": items, "tiles": w, "split": p.split}
            add(p, spec, items, args, smem=m * w * elem_bytes)
        elif p.kind == SPLIT and n >= band_cols(elem_bytes):
            spec = InplaceKernel("split_band", elem_bytes, False, params)
            w = band_cols(elem_bytes)
            items = batch * -(-(m // 2) // BAND_PAIRS) * -(-n // w)
            add(p, spec, items, {"items": items, "split": p.split})
        elif p.kind == SPLIT:
            lanes = min(params.threads, 1 << (n - 1).bit_length())
            items = batch * (m // 2)
            blocks = -(-items // (params.threads // lanes))
            add(p, spec, blocks, {"items": items, "lanes": lanes, "split": p.split})
        elif (
            p.kind == COLS
            and m < staged_from
            and p.split in CLUSTER_RULES
            and (shape := cluster_band(m, n, elem_bytes, shared_optin, cluster, clustered.threads))
            is not None
        ):
            k, w = shape
            spec = InplaceKernel("cols_cluster", elem_bytes, False, clustered, k)
            smem = cluster_smem(m, k, w, elem_bytes)
            # a cluster per blocks_per_sm blocks an SM that shared memory holds (the items
            # walked by the clusters' stride; fewer, two an SM as their registers allow, ran
            # the rotations slower: float16 8280x7320 47% against 38% of a copy)
            per_sm = max(1, min(params.blocks_per_sm, (shared_optin + 1024) // (smem + 1024)))
            items = batch * -(-n // w)
            blocks = k * min(items, max(1, multiprocessors * per_sm // k))
            args = {"items": items, "tiles": w, "split": p.split}
            add(p, spec, blocks, args, smem=smem, **cols_table(p))
        elif (
            p.kind == COLS
            and (
                m >= staged_from
                # past a block's 32-byte band, unless "cols_slide" holds it in a narrower one
                or (m > cols_rows(shared_optin) and cols_line(m, n, elem_bytes, shared_optin) != 8)
            )
            and (lay := staged_layout(batch, m, n, elem_bytes, stage_bytes, scratch_limit))
        ):
            spec = InplaceKernel("cols_staged", elem_bytes, False, params)
            table = p.split in (COLS_GATHER, COLS_SCATTER)
            args = {"tiles": lay.width, "split": p.split, "cycles": lay.bands}
            args |= {"items": lay.buffers, "lanes": skew_cols(elem_bytes), "rows_per": SKEW_ROWS}
            # the whole grid: its blocks take the pass's items by ticket
            add(
                p,
                spec,
                cap,
                args,
                smem=STAGED_HEAD + skew_smem(elem_bytes),
                aux="bands",
                rows=batch * lay.bands,
                scratch=lay.scratch,
                table=row_table(m, n, plan.a) if table else None,
            )
        elif p.kind == COLS:
            line = cols_line(m, n, elem_bytes, shared_optin)
            piece = cols_piece(line, n, elem_bytes)
            spec = InplaceKernel(piece, elem_bytes, False, cols_params(params, line))
            w = cols_width(m, n, batch, elem_bytes, shared_optin, multiprocessors, line)
            items = batch * -(-n // w)
            args = {"items": items, "tiles": w, "split": p.split}
            smem = m * cols_pitch(w, elem_bytes, line)
            add(p, spec, items, args, smem=smem, **cols_table(p, piece))
        elif (
            p.kind == SHUFFLE
            and row_bytes + SHUFFLE_PAD <= shared_optin
            and not runs_rather(batch * m, row_bytes)
        ):
            piece = "shuffle_inv" if p.inverse else SHUFFLE
            spec = InplaceKernel(piece, elem_bytes, p.conjugate, params)
            # rows a block: what SHUFFLE_BLOCK_BYTES holds, fewer where that would leave
            # SMs without a block
            spread = -(-(batch * m) // (2 * multiprocessors))
            rows_per = max(1, min(SHUFFLE_BLOCK_BYTES // row_bytes, spread))
            items = -(-(batch * m) // rows_per)
            args = {"items": items, "rows_per": rows_per}
            add(p, spec, items, args, smem=rows_per * row_bytes + SHUFFLE_PAD)
        elif p.kind == SHUFFLE:  # groups of rows through the scratch
            runs = m <= RUNS_MAX_ROWS
            piece = "shuffle_runs" if runs else "shuffle_global"
            spec = InplaceKernel(piece + "_inv" * p.inverse, elem_bytes, p.conjugate, params)
            group = max(1, min(scratch_limit // row_bytes, batch * m))
            chunk = max(1, min(n, min(RUNS_CHUNK_BYTES, shared_optin) // elem_bytes))
            blocks = group * -(-n // chunk) if runs else -(-(group * n) // params.threads)
            add(
                p,
                spec,
                blocks,
                {"tiles": chunk} if runs else {},
                smem=runs_shared(chunk * elem_bytes) if runs else 0,
                aux="rows",
                rows=batch * m,
                rows_per=group,
                # whole 16-byte words: the runs' kernel reads the copy in aligned words
                scratch=_words(group * row_bytes),
            )
        elif p.kind == PERMUTE and cycles is not None and len(cycles.leaders):
            _permute(add, p, plan, elem_bytes, params, cap, cycles, scratch_limit)
        elif p.kind == CONJ:
            items = batch * m * n
            add(p, spec, -(-items // params.threads), {"items": items})
    return tuple(out)


def _permute(
    add: Any,
    p: InplacePass,
    plan: InplacePlan,
    elem_bytes: int,
    params: InplaceParams,
    cap: int,
    cycles: RowCycles,
    scratch_limit: int,
) -> None:
    """PERMUTE's launches: a warp a cycle (leaders in a table) where the cycles alone give the
    grid's warps work, else pieces of them walked side by side (their first rows saved to the
    scratch first) as many as the grid holds and the scratch keeps."""
    batch, n = plan.batch, plan.n
    segs = -(-n // (32 * params.per_lane(elem_bytes)))
    count = len(cycles.leaders)
    resident = cap * params.warps  # warps the grid runs at once
    room = scratch_limit // (batch * n * elem_bytes)  # saved rows the scratch holds
    if count * batch * segs >= resident or room <= count:
        items = batch * count * segs
        table = cycles.leaders
        args = {"items": items, "segs": segs, "cycles": count}
        add(
            p,
            InplaceKernel(PERMUTE, elem_bytes, False, params),
            -(-items // params.warps),
            args,
            aux="leaders",
            table=table,
        )
        return
    wanted = -(-resident // (batch * segs))
    pieces = pieces_of(plan.m, n, plan.a, cycles, min(room, max(wanted, count)))
    table = pieces.table()
    offset = _line(table.nbytes)  # the saved rows start on a 256-byte line
    items = batch * len(pieces) * segs
    args = {"items": items, "segs": segs, "cycles": len(pieces), "offset": offset}
    scratch = offset + batch * len(pieces) * n * elem_bytes
    blocks = -(-items // params.warps)
    saved = 2 * batch * len(pieces) * n * elem_bytes  # what PERMUTE_SAVE moves
    for piece in (PERMUTE_SAVE, PERMUTE_PIECES):
        add(
            p,
            InplaceKernel(piece, elem_bytes, False, params),
            blocks,
            args,
            aux="scratch",
            scratch=scratch,
            table=table if piece == PERMUTE_SAVE else None,
            **({"moved": saved} if piece == PERMUTE_SAVE else {}),
        )


_COLS_PIECES = tuple(p for p in PIECES if p.startswith(COLS))  # the COLS pass's kernels
codegen.PROGRAM_SOURCES[KIND_NAME] = program_source  # an in-place config's version

"""Packed passes (templates/packed/, cuTT's Packed method): the kernel a box shape
needs, and the `at_packed_args` struct a launch passes it.

Pure (no CUDA): `launch.make_packed` packs these, `codegen.render_packed` renders a
`PackedKernel`, and tests/test_packed.py runs the kernel's index walk in Python against
np.transpose.

A packed pass moves a fused permute problem (`plan.Pass.dims`, output memory order) in boxes
(`plan.Pass.box`): a block reads one box into shared memory in the input's memory order and
writes it out in the output's, so both sides move in the runs `plan.packed_box` made long.
The kernel is compiled per box: its extents, the order the input walks them in and which of
them need an edge check are compile-time constants (a division by a constant is a multiply),
while every stride is a runtime argument, so one kernel serves every problem with that box.

1- and 2-byte elements move one at a time through global memory in that walk (instruction
bound: 15-50 instructions a byte by Nsight Compute on an H200). Where both sides' innermost dims
and every offset allow 4-byte words (`word_aligned`), the `words` kernel moves K x K blocks
instead (K = 4 / element bytes): K aligned words of K input rows are transposed in registers
by byte permutes and stored as K words of the output's innermost dim, and the output moves
in aligned words from shared memory. Where only the output side allows words (`words_mode`),
the `funnel` variant takes each load's 4 bytes from the one or two aligned words holding them.
Where the output's innermost dim is not whole words but the box's output run is
(`spread_mode`), the `spread` kernel loads words along the input's innermost dim (funnel-shifted
where needed), stores their elements one by one into shared memory in output order, and writes
the output's run in aligned words, where the element kernel would move them one at a time.
Where the output's runs start at offsets that are not whole words (odd output strides: a
reversal's rows of 459 halves), the spread kernel's `realign_out` variant writes each run in
the aligned words it covers, whole words funnel-shifted out of the shared run and the run's
cut first and last words element by element (`spread_mode(realign=True)`); a first call
races it against the element kernel (`plan.Pass.realign_out`).

4- to 16-byte boxes of up to PIPELINE_MAX_BYTES also have a `pipelined` kernel: two shared
buffers, the next box's elements copied into one by cp.async while the block writes the box
in the other. It is a plan alternative (`plan.Pass.pipelined`) that a first call races.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ShapeError
from ..plans.boxes import (
    PACKED_MAX_BOX_DIMS,
    PACKED_MAX_BYTES,
    PACKED_MAX_TILES,
    PACKED_PIPELINE_MAX_BYTES,
    PACKED_PIPELINE_MIN_ELEM_BYTES,
    PACKED_WORD_BYTES,
    Dim,
    out_run_dims,
    pipeline_fits,
    realigned_out,
    vector_widths,
)
from ..plans.dtypes import ELEMENT_SIZES
from ..plans.layout import MAX_NDIM

MAX_BOX_DIMS = PACKED_MAX_BOX_DIMS
MAX_GRID_DIMS = MAX_NDIM  # every dim of the problem walks boxes, box dims included
OFFSET_LIMIT = 2**31 - 1  # a box spanning less than this (elements) uses 32-bit offsets
# at_packed_args: in_stride, out_stride (MAX_BOX_DIMS each); tile_in, tile_out (MAX_GRID_DIMS
# each); tiles_of, div_magic, div_shift (MAX_GRID_DIMS each); extent (MAX_BOX_DIMS); tiles;
# ngrid. Standard sizes and no padding, as C lays the struct out (every field naturally
# aligned).
ARG_FORMAT = (
    f"<{MAX_BOX_DIMS}q{MAX_BOX_DIMS}q{MAX_GRID_DIMS}q{MAX_GRID_DIMS}q"
    f"{MAX_GRID_DIMS}I{MAX_GRID_DIMS}I{MAX_GRID_DIMS}I{MAX_BOX_DIMS}III"
)
ARG_BYTES = struct.calcsize(ARG_FORMAT)
# Threads per block, and the most elements a thread may have in a box for the table path (a
# box no edge cuts moves with offsets and slots a thread computed once: 3 registers per
# element, 5 with 64-bit offsets).
THREADS = 256
TABLE_STEPS, TABLE_STEPS_WIDE = 16, 8
# A block's box loads in flight: a 4 KB box (1024 4-byte elements) at 3 blocks per SM left
# ~12 KB per SM where ~22 KB keep an H200's 4.8 TB/s busy (~600 ns of latency), so a kernel
# asks for the blocks per SM (__launch_bounds__, the grid) that hold FLIGHT_BYTES of boxes:
# at least MIN_BLOCKS (80 registers a thread), at most MAX_BLOCKS (64 registers) and that only
# for a table of at most TABLE_STEPS_AT_MAX elements (the split path's eight loads in flight,
# or a bigger table, spill at 64: nvcc's report over the plan's boxes, tests/test_packed.py).
FLIGHT_BYTES = 24 << 10
MIN_BLOCKS, MAX_BLOCKS, TABLE_STEPS_AT_MAX = 3, 4, 8
# The words kernel (1- and 2-byte elements): a global word holds WORD_BYTES, a block K x K
# elements (K = WORD_BYTES // element bytes). Its table holds a thread's block offsets (at
# most WORDS_TABLE_READS block steps, two registers each) and output word offsets (at most
# WORDS_TABLE_WRITES); a thread issues WORDS_LOAD_BATCH block steps' loads before it stores.
WORD_BYTES = PACKED_WORD_BYTES
WORDS_TABLE_READS, WORDS_TABLE_WRITES, WORDS_LOAD_BATCH = 8, 16, 2
# The pipelined element kernel (4- to 16-byte elements): a block's next box streams into a
# second shared buffer (cp.async, no registers) while the block writes the current one.
# Profiled on an H200, the element kernel waited on its loads (long-scoreboard stalls half
# its cycles, DRAM 55-73%), and a block had no load in flight while it wrote a box. Two
# buffers of a box up to PIPELINE_MAX_BYTES fit the 48 KB of static shared memory. It wins
# on some boxes and loses on others, so a first call races it (plan.PACKED_PIPELINE_*; the
# plan's rule is the one rule: `pipelines`).
PIPELINE_MIN_ELEM_BYTES, PIPELINE_MAX_BYTES = (
    PACKED_PIPELINE_MIN_ELEM_BYTES,
    PACKED_PIPELINE_MAX_BYTES,
)
pipelines = pipeline_fits


def word_elems(elem_bytes: int) -> int:
    """Elements of `elem_bytes` bytes a WORD_BYTES word holds (1 for words and wider)."""
    return max(1, WORD_BYTES // elem_bytes)


def divisor(d: int) -> tuple[int, int]:
    """(magic, shift) for dividing any 32-bit n by `d` (2 <= d < 2**32) as the kernel does:
    t = umulhi(n, magic); n / d == (t + ((n - t) >> 1)) >> shift (Granlund and Montgomery,
    "Division by invariant integers using multiplication", 1994, fig. 4.1): a multiply and
    four cheap instructions where a runtime division costs about twenty."""
    if type(d) is not int or not 2 <= d < 2**32:
        raise ShapeError(f"a packed grid dim of {d!r} boxes: 2 to 2**32 - 1")
    el = (d - 1).bit_length()  # ceil(log2 d)
    return ((1 << 32) * ((1 << el) - d)) // d + 1, el - 1


def divide(n: int, magic: int, shift: int) -> int:
    """The kernel's division of the 32-bit `n` by (magic, shift), in Python (for the tests)."""
    t = (n * magic) >> 32
    return (t + ((n - t) >> 1)) >> shift


@dataclass(frozen=True)
class PackedKernel:
    """What a packed kernel is compiled for. Box dims are in the output's memory order,
    innermost first (shared memory holds a box densely in that order); `in_order` lists
    them in the input's order, innermost first (the order a block reads them); `checked`
    says which can be cut short at the problem's edge; `wide` takes 64-bit offsets within a
    box. Everything here flows into CUDA source: `__post_init__` checks it all."""

    elem_bytes: int
    box: tuple[int, ...]
    in_order: tuple[int, ...]
    checked: tuple[bool, ...]
    wide: bool = False
    words: bool = False
    pipelined: bool = False
    funnel: bool = False
    spread: bool = False
    out_run: int = 0
    realign_out: bool = False

    def __post_init__(self) -> None:
        n = len(self.box)
        if self.elem_bytes not in ELEMENT_SIZES:
            raise ShapeError(
                f"a packed kernel of {self.elem_bytes}-byte elements; sizes are {ELEMENT_SIZES}"
            )
        if not 1 <= n <= MAX_BOX_DIMS or not all(type(b) is int and b >= 1 for b in self.box):
            raise ShapeError(f"a packed box {self.box!r}: 1 to {MAX_BOX_DIMS} positive int extents")
        if sorted(self.in_order) != list(range(n)) or not all(
            type(k) is int for k in self.in_order
        ):
            raise ShapeError(
                f"packed box order {self.in_order!r} is not a permutation of range({n})"
            )
        if len(self.checked) != n or not all(type(c) is bool for c in self.checked):
            raise ShapeError(f"packed box checks {self.checked!r}: one bool per box dim")
        if type(self.wide) is not bool or self.volume * self.elem_bytes > PACKED_MAX_BYTES:
            raise ShapeError(
                f"a packed box of {self.volume} {self.elem_bytes}-byte elements: at most "
                f"{PACKED_MAX_BYTES} bytes of shared memory"
            )
        if type(self.words) is not bool or type(self.pipelined) is not bool:
            raise ShapeError(f"packed words {self.words!r}, pipelined {self.pipelined!r}: bools")
        if self.pipelined and (self.words or not pipelines(self.elem_bytes, self.volume)):
            raise ShapeError(
                f"a pipelined packed kernel of {self.elem_bytes}-byte elements in boxes of {self.box}: "
                f"elements of {PIPELINE_MIN_ELEM_BYTES} bytes or more, boxes of at most "
                f"{PIPELINE_MAX_BYTES} bytes, not the words kernel"
            )
        if type(self.funnel) is not bool or (self.funnel and not (self.words or self.spread)):
            raise ShapeError(
                f"packed funnel {self.funnel!r}: a bool, and only for the words or spread kernel"
            )
        if self.spread is not False or self.out_run != 0 or self.realign_out is not False:
            self._check_spread()
        if self.words:
            k = self.block
            i0_odd = self.box[self.in_order[0]] % k if n >= 2 else 1
            if (
                k < 2
                or n < 2
                or self.in_order[0] == 0
                or self.box[0] % k
                or (i0_odd and not self.funnel)
            ):
                raise ShapeError(
                    f"a packed words kernel of {self.elem_bytes}-byte elements in boxes of {self.box}: "
                    f"1- or 2-byte elements, the output's and the input's innermost box dims "
                    f"different, the output's a multiple of {max(k, 2)} (the input's too unless funnel)"
                )

    def _check_spread(self) -> None:
        k, n = self.block, len(self.box)
        run = math.prod(self.box[: self.out_run]) if type(self.out_run) is int else 0
        realign = self.realign_out
        if (
            self.spread is not True
            or type(realign) is not bool
            or self.words
            or self.pipelined
            or k < 2
            or n < 2
            or type(self.out_run) is not int
            or not 1 <= self.out_run <= n
            or (run % k and not realign)
            or (realign and self.in_order[0] < self.out_run)
            or self.box[self.in_order[0]] < 2
            or (self.box[self.in_order[0]] % k and not self.funnel)
        ):
            raise ShapeError(
                f"a packed spread kernel of {self.elem_bytes}-byte elements in boxes of {self.box} "
                f"(output run of {self.out_run} box dims, realigned {realign!r}): 1- or 2-byte "
                f"elements, not words or pipelined, the output run's leading 1 to {n} box dims "
                f"holding a multiple of {max(k, 2)} elements (realigned: any, and the run not "
                f"reaching the input's innermost box dim), the input's innermost box extent 2 "
                f"or more (a multiple of {max(k, 2)} unless funnel)"
            )

    @property
    def volume(self) -> int:
        return math.prod(self.box)

    @property
    def block(self) -> int:
        """K: elements a global word holds, and the side of a words kernel's K x K blocks."""
        return word_elems(self.elem_bytes)

    @property
    def read_blocks(self) -> int:
        """Words kernel: the K x K blocks of a box (the input's innermost dim in K-element
        words, its last one part-filled where the box extent is not a multiple of K)."""
        k, i0 = self.block, self.in_order[0]
        return math.prod(
            -(-b // k) if d == i0 else b // k if d == 0 and self.words else b
            for d, b in enumerate(self.box)
        )

    @property
    def steps(self) -> int:
        """Elements a thread moves per box (words: K x K blocks a thread reads per box)."""
        return -(-(self.read_blocks if self.words or self.spread else self.volume) // THREADS)

    @property
    def run_words(self) -> int:
        """Realigned spread kernel: the most aligned words one output run covers (a run of
        R elements starting at any element of a word: ceil((R + K - 1) / K))."""
        run = math.prod(self.box[: self.out_run])
        return (run + 2 * self.block - 2) // self.block

    @property
    def write_steps(self) -> int:
        """Elements (words: words) a thread writes per box."""
        if self.realign_out:
            runs = self.volume // math.prod(self.box[: self.out_run])
            return -(-self.run_words * runs // THREADS)
        return -(-self.volume // (THREADS * (self.block if self.words or self.spread else 1)))

    @property
    def table(self) -> bool:
        """Whether whole boxes move by the table of a thread's offsets (registers allowing)."""
        if (
            self.words or self.spread
        ):  # funnel with 64-bit offsets: its table and realigning loads spill at 80 registers
            # the realigned spread kernel writes by digits: no table of output words
            fits = self.steps <= WORDS_TABLE_READS and (
                self.realign_out or self.write_steps <= WORDS_TABLE_WRITES
            )
            return fits and not (self.funnel and self.wide)
        return self.steps <= (TABLE_STEPS_WIDE if self.wide else TABLE_STEPS)

    @property
    def blocks_per_sm(self) -> int:
        """Resident blocks the kernel is compiled and launched for: FLIGHT_BYTES of boxes."""
        small = (
            self.write_steps <= TABLE_STEPS_AT_MAX
            if self.words or self.spread
            else self.steps <= TABLE_STEPS_AT_MAX
        )
        most = MAX_BLOCKS if self.table and small else MIN_BLOCKS
        return min(most, max(MIN_BLOCKS, -(-FLIGHT_BYTES // (self.volume * self.elem_bytes))))

    @property
    def name(self) -> str:
        """The kernel's `extern "C"` name: everything it is compiled for."""
        box = "x".join(map(str, self.box))
        order = "".join(map(str, self.in_order))
        checks = "".join("c" if c else "f" for c in self.checked)
        words = (
            ("_kf" if self.funnel else "_k")
            if self.words
            else f"_r{self.out_run}{'f' if self.funnel else ''}{'a' if self.realign_out else ''}"
            if self.spread
            else "_p"
            if self.pipelined
            else ""
        )
        return f"at_packed_s{self.elem_bytes}_b{box}_i{order}_{checks}_{'w' if self.wide else 'n'}{words}"


@dataclass(frozen=True)
class PackedArgs:
    """A launch's `at_packed_args`, and the kernel it runs."""

    kernel: PackedKernel
    in_stride: tuple[int, ...]
    out_stride: tuple[int, ...]
    tile_in: tuple[int, ...]
    tile_out: tuple[int, ...]
    tiles_of: tuple[int, ...]
    div_magic: tuple[int, ...]
    div_shift: tuple[int, ...]
    extent: tuple[int, ...]
    tiles: int
    ngrid: int

    def values(self) -> tuple[int, ...]:
        """The struct's fields, flat, in ARG_FORMAT's order."""
        return (
            *self.in_stride,
            *self.out_stride,
            *self.tile_in,
            *self.tile_out,
            *self.tiles_of,
            *self.div_magic,
            *self.div_shift,
            *self.extent,
            self.tiles,
            self.ngrid,
        )

    def pack(self) -> bytes:
        return struct.pack(ARG_FORMAT, *self.values())


def words_mode(
    elem_bytes: int, dims: Sequence[Dim], box: Sequence[int], in_ptr: int, out_ptr: int
) -> tuple[bool, bool]:
    """(words, funnel): whether the words kernel can move `dims` in boxes of `box` between
    pointers of these addresses (only their value mod WORD_BYTES is read), and whether its
    loads must realign (funnel). The output side must be word-aligned: the output's innermost
    dim (stride 1) a box dim whose extent and box extent are multiples of K, every other
    output stride a multiple of K, the output pointer word-aligned. Where the input side is
    too (the same rules for the input's innermost dim, its strides and pointer), every load is
    an aligned word; else each K-element load is funnel-shifted from the two aligned words
    holding it, and a block's last K elements along the input's innermost dim may be fewer."""
    k = word_elems(elem_bytes)
    if k < 2 or out_ptr % WORD_BYTES:
        return False, False
    o0 = next((j for j, d in enumerate(dims) if d.out_stride == 1 and d.extent > 1), None)
    i0 = next((j for j, d in enumerate(dims) if d.in_stride == 1 and d.extent > 1), None)
    if o0 is None or i0 is None or o0 == i0 or box[i0] < 2:
        return False, False
    if dims[o0].extent % k or box[o0] % k:
        return False, False
    if any(j != o0 and d.extent > 1 and d.out_stride % k for j, d in enumerate(dims)):
        return False, False
    return True, not _input_in_words(k, dims, box, i0, in_ptr)


def word_aligned(
    elem_bytes: int, dims: Sequence[Dim], box: Sequence[int], in_ptr: int, out_ptr: int
) -> bool:
    """Whether the words kernel moves `dims` in boxes of `box` with every load and store an
    aligned word (`words_mode` without funnel: both sides word-aligned)."""
    return words_mode(elem_bytes, dims, box, in_ptr, out_ptr) == (True, False)


def spread_mode(
    elem_bytes: int,
    dims: Sequence[Dim],
    box: Sequence[int],
    in_ptr: int,
    out_ptr: int,
    *,
    realign: bool = False,
) -> tuple[int, bool]:
    """(out_run, funnel) of the spread kernel for `dims` in boxes of `box` between pointers of
    these addresses (only their value mod WORD_BYTES is read); out_run 0 where it cannot take
    them. The spread kernel (templates/packed/spread.cu.j2) is for 1- and 2-byte boxes the words
    kernel cannot move because the output's innermost dim is not whole words (extents of 2, 3,
    5, 25, ...): it loads K-element words along the input's innermost dim (funnel-shifted where
    the input side is not word-aligned), stores their elements one by one to shared memory in
    the output's order, and writes the output in aligned words. So the output side must take
    words: the box's leading dims in the output's order form one contiguous run (each one's
    stride the product of the box extents before it, from stride 1; `out_run` of them) of a
    multiple of K elements, and every other box dim's stride, every box step along a dim of more
    than one box and the output pointer are multiples of K: `plan.vector_widths` allows
    words on the output side.

    With `realign`, the realigned variant's instead, only where the output side does not take
    words: its runs may start at any element (odd output strides, an odd pointer), and each
    is written in the aligned words it covers (`plans.boxes.realigned_out`)."""
    k = word_elems(elem_bytes)
    if k < 2:
        return 0, False
    if realign:
        if not realigned_out(dims, box, elem_bytes, out_ptr):
            return 0, False
    elif vector_widths(dims, box, elem_bytes, 0, out_ptr)[1] < WORD_BYTES:
        return 0, False
    i0 = next((j for j, d in enumerate(dims) if d.in_stride == 1 and box[j] > 1), None)
    if i0 is None or box[i0] < 2:
        return 0, False
    if sum(b > 1 for b in box) < 2:  # one run both sides: a copy, not a box
        return 0, False
    # the output's run: its leading box dims (whole words unless realigned, by the rules above)
    t = len(out_run_dims(dims, box))
    if t == 0:
        return 0, False
    return t, not _input_in_words(k, dims, box, i0, in_ptr)


def _input_in_words(k: int, dims: Sequence[Dim], box: Sequence[int], i0: int, in_ptr: int) -> bool:
    """Whether every K-element load along the input's innermost dim `i0` is an aligned word
    (else the words and spread kernels funnel-shift each from the aligned words holding it):
    the pointer, i0's extent and box extent, and every other input stride whole words."""
    return (
        in_ptr % WORD_BYTES == 0
        and dims[i0].extent % k == 0
        and box[i0] % k == 0
        and all(j == i0 or d.extent == 1 or d.in_stride % k == 0 for j, d in enumerate(dims))
    )


def packed_args(
    elem_bytes: int,
    dims: Sequence[Dim],
    box: Sequence[int],
    in_ptr: int = 0,
    out_ptr: int = 0,
    *,
    words: bool | None = None,
    pipelined: bool = False,
    spread: bool | None = None,
    realign_out: bool = False,
) -> PackedArgs:
    """The kernel and arguments that move `dims` (output memory order, outermost first, the
    innermost output stride 1) in boxes of `box` (one extent per dim; a plan's PACKED pass)
    between pointers of addresses `in_ptr` and `out_ptr` (only their alignment is read). The
    words kernel where `words_mode` allows it (`words`: None for that rule, False never),
    else for 1- and 2-byte elements the spread kernel where `spread_mode` allows it, with its
    output words aligned, or else with `realign_out` realigned (`spread` likewise: None for
    that rule, False never; `realign_out` is a plan's `Pass.realign_out`); the pipelined
    element kernel if `pipelined` (a plan's `Pass.pipelined`; `pipelines` must allow it).

    The grid walks the dims of more than one box: first the box dims the edge cuts, in the
    kernel's order (so the kernel knows at compile time where each one's box index is), then
    the other box dims, then the dims outside the box. Raises ShapeError for what the kernel
    cannot take (the plan never makes such a box)."""
    if len(box) != len(dims) or not 1 <= len(dims) <= MAX_GRID_DIMS:
        raise ShapeError(
            f"a packed box {tuple(box)} for {len(dims)} dims: one extent per dim, at most {MAX_GRID_DIMS}"
        )
    if any(not 1 <= b <= d.extent for b, d in zip(box, dims, strict=True)):
        raise ShapeError(f"packed box {tuple(box)} does not fit dims {[d.extent for d in dims]}")
    inside = sorted((k for k, b in enumerate(box) if b > 1), key=lambda k: dims[k].out_stride)
    if not inside:
        raise ShapeError("a packed box of one element; use a gather")
    outside = [k for k in reversed(range(len(dims))) if box[k] == 1 and dims[k].extent > 1]
    in_order = tuple(sorted(range(len(inside)), key=lambda j: (dims[inside[j]].in_stride, j)))
    span = [
        sum((box[k] - 1) * abs(getattr(dims[k], s)) for k in inside)
        for s in ("in_stride", "out_stride")
    ]
    cut = [k for k in inside if dims[k].extent % box[k]]
    can_words, funnel = words_mode(elem_bytes, dims, box, in_ptr, out_ptr)
    if words is None:
        words = can_words
    elif words and not can_words:
        raise ShapeError(
            f"packed words for dims {[(d.extent, d.in_stride, d.out_stride) for d in dims]} in boxes {tuple(box)} at pointers "
            f"{in_ptr} and {out_ptr}: the output side is not word-aligned (packed.words_mode); leave words=None"
        )
    out_run, spread_funnel, realign = 0, False, False
    if not (words or pipelined):
        out_run, spread_funnel = spread_mode(elem_bytes, dims, box, in_ptr, out_ptr)
        if not out_run and realign_out:
            out_run, spread_funnel = spread_mode(
                elem_bytes, dims, box, in_ptr, out_ptr, realign=True
            )
            realign = out_run > 0
    if spread is None:
        spread = out_run > 0
    elif spread and not out_run:
        raise ShapeError(
            f"a packed spread kernel for dims {[(d.extent, d.in_stride, d.out_stride) for d in dims]} in boxes "
            f"{tuple(box)} at pointers {in_ptr} and {out_ptr}: packed.spread_mode says no; leave spread=None"
        )
    volume = math.prod(box[k] for k in inside)
    if pipelined and (words or not pipelines(elem_bytes, volume)):
        raise ShapeError(
            f"a pipelined packed kernel for {elem_bytes}-byte elements in boxes {tuple(box)}"
            f"{' (the words kernel)' if words else ''}: packed.pipelines says no; pass pipelined=False"
        )
    kernel = PackedKernel(
        elem_bytes,
        tuple(box[k] for k in inside),
        in_order,
        tuple(k in cut for k in inside),
        max(span) > OFFSET_LIMIT,
        words,
        pipelined,
        bool(words and funnel) or bool(spread and spread_funnel),
        bool(spread),
        out_run if spread else 0,
        bool(spread and realign),
    )
    whole = [k for k in inside if k not in cut and dims[k].extent > box[k]]
    grid = [*cut, *whole, *outside]
    tiles_of = [-(-dims[k].extent // box[k]) for k in grid]
    tiles = math.prod(tiles_of)
    if tiles > PACKED_MAX_TILES:
        raise ShapeError(
            f"{tiles} packed boxes: at most {PACKED_MAX_TILES} (32-bit box index); use a gather"
        )
    magic = [divisor(t) for t in tiles_of]
    pad_b, pad_g = MAX_BOX_DIMS - len(inside), MAX_GRID_DIMS - len(grid)
    return PackedArgs(
        kernel,
        in_stride=(*(dims[k].in_stride for k in inside), *[0] * pad_b),
        out_stride=(*(dims[k].out_stride for k in inside), *[0] * pad_b),
        tile_in=(*(box[k] * dims[k].in_stride for k in grid), *[0] * pad_g),
        tile_out=(*(box[k] * dims[k].out_stride for k in grid), *[0] * pad_g),
        tiles_of=(*tiles_of, *[1] * pad_g),
        div_magic=(*(m for m, _ in magic), *[0] * pad_g),
        div_shift=(*(sh for _, sh in magic), *[0] * pad_g),
        extent=(*(dims[k].extent for k in inside), *[1] * pad_b),
        tiles=tiles,
        ngrid=len(grid),
    )

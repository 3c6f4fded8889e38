"""Plans for permute(): any axis permutation of a 0- to 8-D array as one pass: a batched 2-D
transpose, a copy, or one gather launch.

A pure function of shapes, strides (elements) and pointer alignment: no CUDA, no lookup, no
store. The executor turns a :class:`Plan` into launches; everything it must decide is here, so
that it is a loop over `Pass.offsets()` and nothing else. The steps (docs/permute-plan.md
says what we took from cuTT's planner and what not):

1. normalise the axes (NumPy semantics, negative allowed), drop size-1 axes (their strides
   never matter) and answer an empty array with no pass at all;
2. fuse axes that stay adjacent and in order in the output *and* whose strides chain on both
   sides (outer stride = inner stride x inner extent): the problem shrinks to the fewest dims,
   and views of any strides fuse exactly where their memory allows;
3. classify the fused problem, always as ONE pass (a layout with no input axis of stride 1,
   or an output innermost stride other than 1, is STRIDED: one gather launch, below):
   - the output's innermost axis is also the input's stride-1 axis: its run of R bytes moves
     as a whole. One contiguous block is a plain copy. If R is 1, 2, 4, 8 or 16 bytes and the
     pointers and strides are whole R-byte elements, the rest is a transpose of R-byte
     elements ("wide"); otherwise a copy of rows of R bytes ("runs");
   - otherwise a batched transpose of the elements: m is the output's innermost axis, n the
     input's, the largest other axis is the kernel's batch and the remaining ones are host
     loops, one launch per index;
4. if that pass would be many small launches, or a transpose of tiles too small for any
   tile kernel (`gather_reason`), run the whole fused problem in ONE launch instead: a packed
   pass where a box of the problem's dims holds runs long enough on both sides
   (`packed_box`; templates/packed/: cuTT's Packed method, a shared-memory tile that
   spans several small dims, read and written in whole runs), else a gather
   (templates/gather/: an element-wise kernel over up to 8 dims, stores coalesced along
   the output, reads gathered);
5. name the alternatives (`alternatives`, ALT_*): other passes of the same bytes that no rule
   of sizes ranks against the chosen one, which permute()'s first call times and chooses
   between (the plan stays pure: it names candidates, the executor measures).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from ..errors import LayoutError, UnsupportedDtypeError
from .boxes import (
    GATHER_MAX_EXTENT,
    NO_DIM,
    VECTOR_MAX_CONFLICTS as VECTOR_MAX_CONFLICTS,
    VECTOR_SCATTER_MAX_CHUNK as VECTOR_SCATTER_MAX_CHUNK,
    Dim,
    packed_box,
    packed_runs,
    pipeline_fits,
    vector_box,
)
from .dtypes import ELEMENT_SIZES
from .layout import MAX_NDIM, _check_layout, _shape, _strides, normalize_axes

COPY, TRANSPOSE, GATHER, PACKED = "copy", "transpose", "gather", "packed"
# Plan.case: why the pass is what it is (the pass kind alone does not say)
EMPTY, CONTIGUOUS, RUNS, WIDE, ELEMENTS = "empty", "copy", "runs", "wide", "transpose"
# Plan.case of a layout the tile and row kernels cannot read or write: an input with no axis
# of stride 1 (a 1-D stride-2 view, z.real of a complex array, x[..., ::2], a broadcast
# scalar) or an output whose innermost stride is not 1. The gather takes any element strides
# (its offsets are 64-bit sums of index x stride, per dim, on both sides), so it moves these in
# one launch; its stores stay coalesced where the output's innermost stride is 1.
STRIDED = "strided"

# When a transpose or row-copy pass becomes one gather launch (`gather_reason`). First guesses,
# to be calibrated with `autotranspose bench --random-permute` on the GPU:
# - a launch costs a few microseconds of host and GPU issue time however little it moves, and
#   a tile kernel ramps up and drains around each one. Past 8 launches that overhead piles up
#   (random 3-6-D permutes on an H200 made up to 16000), while one gather launch pays it once;
GATHER_MAX_LAUNCHES = 8
# - under 4 MiB a launch moves its bytes (read and written) in about 2 us at an H200's
#   4.8 TB/s, no longer than its overhead: its host loops cost more than the gather's lower
#   bandwidth (gathered reads, index arithmetic per element) does;
GATHER_MIN_LAUNCH_BYTES = 4 << 20
# - a transpose whose two sides are both under 8 elements has tiles of a few elements: no tile
#   kernel fills a warp's accesses there (a 2x3 transpose moves 6 elements per matrix), while
#   the gather's stores are coalesced whatever the shape; likewise a batch of matrices with
#   one side under 8 (H200, int64 696 x 312x3 in 8 launches: 23% of copy, CuPy's and
#   PyTorch's gathers 73% and 83%); a single skinny matrix keeps its tuned kernels (90%+);
GATHER_MIN_SIDE = 8
# A row copy walks two more dims of its rows inside the launch (blockIdx.z, at most 65535 in
# all): the (8, 4096, 32, 128) bfloat16 head swap was 8 launches of 32 MiB and reached 79.6% of
# copy on an H200, each launch paying its ramp-up and drain; in one launch they overlap.
ROWS_MAX_OUTER = 65535
# A row copy's blocks take consecutive rows along m, so of its two largest dims m is the one
# whose rows lie side by side in the output (out stride = the row), where either does: a
# block's stores are then one contiguous run. Measured on an H200 (dev/rowgrid_check.py, the same
# two dims walked the other way round): float64 36x3359x7x29 by (2,1,0,3) 74.4 -> 85.3, int64
# 8x8x4x8x10320x4 by (2,4,3,0,1,5) 77.9 -> 84.1, int64 rows of 17280 bytes 90.2 -> 94.2;
# where m's rows were already side by side in the output, turning the walk to make the input
# side contiguous gained nothing (head swap 96.2 -> 95.8, complex128 2944-byte rows 92.1 ->
# 92.3).
# A transpose pass's launch walks two more batch dims in the same way (a tuned kernel's outer
# variant, templates/common/outer.cu.j2: the batch index split into three dims per tile):
# host loops of many small launches had made such permutes gathers, e.g. float32
# (200, 64, 112, 8) by (3, 1, 0, 2), 64 launches of 0.7 MB, 32.7% of copy as a gather on an
# H200. The launch's tiles must fit one grid (2**31 - 1) for any config: a matrix has at most
# `max_tiles` of them, tiles of the smallest side (config.TILE_SIZES[0], which the plan, below
# the configs, does not import) and one row more for a staged kernel's windows.
GRID_TILES = 2**31 - 1
MIN_TILE_SIDE = 16
# ... but only for matrices whose two sides are both at least this many bytes: a tile then
# holds one narrow matrix, its rows a few sectors each, and the launch gains nothing over
# host loops or the gather. H200, bench --random-permute 40 --seed 7, gather -> outer launch:
# float32 200 x 112x8 x 64 (32-byte rows) 32.7 -> 13.9% of copy, int32 101 x 14x12 x 93 x 3
# (48) 16.3 -> 3.8, int32 30 x 14x318 x 12 x 8 (56) 29.8 -> 27.1; while uint16 55 x 137x32
# (64) 14.2 -> 21.8, complex128 2398 x 13x16 (208) 60.4 -> 73.5, 296 x 16x56 (256)
# 36.2 -> 81.4 and complex64 14 x 114x7850 38.1 -> 86.2.
OUTER_MIN_ROW_BYTES = 64
# Other passes that move the same problem, which the first call of a call signature times
# against the plan's own pass, keeping the fastest (`Plan.alternatives`, `permuter`). No rule
# of sizes ranked these right on an H200 (dev/packed_check.py, random permute seeds 7 and 11,
# % of copy): the winner depends on how much of the array sits in L2 and on the box's
# shape. So the plan names the candidates and a measurement picks:
# - where the plan runs one packed launch: the gather (faster in 7 of 22 such cases, e.g.
#   float64 2x16x1197x44x3 84.6 vs 68.2, float32 2x15x4302x69x1 61.3 vs 38.1: its reads 2-3
#   elements apart hit L2), and a box of PACKED_BIG_ELEMS elements (2-D problems: int32
#   546x24x835 49.8 -> 82.2, 2x64x2x8x27832 55.3 -> 92.8; multi-dim ones lose: 200x64x112x8
#   67.1 -> 51.4);
# - where it runs one launch instead of a batched pass of at most ALT_MAX_LAUNCHES host-loop
#   launches: that batched pass (GATHER_MAX_LAUNCHES and GATHER_MIN_LAUNCH_BYTES are first
#   guesses that no run has calibrated);
# - a row copy of rows under ALT_ROW_BYTES: a packed launch (int32 4x225440x72 78.7 -> 92.4,
#   float64 96x8x5120x1x8 85.0 -> 92.6; but int16 25x3x8x1276x42 54.1 -> 40.4), and for rows
#   under ALT_GATHER_ROW_BYTES the gather too (H200, random permute seed 20261818: uint8
#   12x25121x184, rows of 184 bytes, copy 70.0, packed 74.5, gather 92.1; complex128 rows of
#   48 bytes 54.0 / 83.2 / 78.9; but rows of 128 bytes 93.0 / 94.8 / 84.8);
# - a transpose with a side under ALT_SIDE_BYTES: a packed launch (complex128
#   13x11x218x28x16 73.9 -> 92.5, complex64 8x3x181x15x865 36.9 -> 66.8; most others lose);
# - where a one-launch pass replaced a batch of matrices with a side under GATHER_MIN_SIDE
#   whose other side is at least ALT_NARROW_LONG_BYTES: that batched transpose, in its own
#   launch. Its few-rows and few-columns kernels (kinds/regt.py) move a single such matrix
#   near the copy ceiling, and a batch of a few long matrices is the same work (uint8 images
#   (8, 1080, 1920, c) HWC <-> CHW: the vector box ran c = 2 and 3 at 64-84% of copy on an
#   H200, where one 2073600 x c image runs at 90+); short long sides keep the rule above
#   (int64 696 x 312x3: 23% of copy in that batched pass).
# A plan whose pass is a contiguous copy, a wide row copy or a transpose of two wide sides
# has none: the tuned kernels run those near the copy ceiling, and a first call there costs
# nothing extra. Nor has an array under ALT_MIN_BYTES: it moves in a few microseconds, about
# a launch's overhead, so no choice saves much, while a first call that builds an
# alternative compiles its kernel (about 1 s of nvcc for a new box shape).
PACKED_BIG_ELEMS = 4096
# ... and for 1- and 2-byte elements a box of PACKED_WORDS_BYTES too: the words kernel
# (autotranspose/packed.py) moves 16 bytes a thread per block step, so a 4096-element box of
# bytes keeps one block step a thread in flight where 16 KB keeps four.
PACKED_WORDS_BYTES = 16 << 10
ALT_MIN_BYTES = 8 << 20
ALT_MAX_LAUNCHES = 64
ALT_ROW_BYTES = 1024
ALT_GATHER_ROW_BYTES = 256
ALT_SIDE_BYTES = 512
ALT_NARROW_LONG_BYTES = 64 << 10
# A row copy whose rows, strides or pointers leave no word of 16 bytes moves in narrower
# words (`_copy`): 1-2 bytes a thread for odd rows, which is 8-16x the instructions and
# requests a byte of 16-byte accesses (H200, a random permute mix: bool rows of 29034
# bytes in 2-byte words 56.0% of copy, uint8 rows of 21 bytes 15.6%, behind PyTorch). Such a
# copy can run realigned (`realigned`, templates/rows/ `at_copy_runs`): the output cut
# into runs of contiguous bytes (a row, or the rows that lie side by side in the output), each
# written in aligned 16-byte words whose bytes are funnel-shifted out of aligned 16-byte
# loads. H200, word copy against realigned in one process (dev/realign_check.py, %
# of copy): uint8 rows of 21 bytes 9.5 -> 78.4, of 333 bytes 21.0 -> 77.3, bool 29034 56.2 ->
# 87.0, int16 222 29.9 -> 81.8, uint16 108 57.0 -> 81.5, float32 4004 81.3 -> 93.4, float16
# rows of 24 bytes in 8-byte words 20.7 -> 83.3; but rows under REALIGN_MIN_ROW_BYTES lost or
# stayed low (uint8 3 bytes 17.8 -> 6.5, uint16 6 bytes 29.6 -> 9.0, uint8 5 bytes 13.3 ->
# 18.6: a word then takes 3-16 rows, one loop turn each), and rows of 8-byte words from
# REALIGN_WORDS_FIRST_BYTES up kept the word copy's pace or lost (float64 6216 bytes 87.1 ->
# 87.9, complex64 104 bytes 91.0 -> 73.1). So the realigned copy is the plan's pass for rows
# of REALIGN_MIN_ROW_BYTES or more in words under 8 bytes, or in 8-byte words under
# REALIGN_WORDS_FIRST_BYTES; for longer rows of 8-byte words it is a first call's
# alternative; either way the other one is too. Runs under REALIGN_MIN_RUN_BYTES (output rows
# apart and short: mostly the head and tail words a run's ends cut, stored bytewise) keep the
# word copy. A run's bytes are counted in 32 bits (REALIGN_MAX_RUN_BYTES).
REALIGN_MIN_ROW_BYTES = 16
REALIGN_WORDS_FIRST_BYTES = 64
REALIGN_MIN_RUN_BYTES = 128
REALIGN_MAX_RUN_BYTES = 2**32 - 1
# The vector box is the plan's pass for elements up to this size (where the packed kernels
# move bytes and halves one at a time) and an alternative for wider ones.
VECTOR_OWN_MAX_ELEM_BYTES = 2


def max_tiles(m: int, n: int) -> int:
    """The most tiles any config cuts an m x n matrix into (`KernelConfig.tiles`)."""
    t = MIN_TILE_SIDE
    return (-(-m // t) + 1) * -(-n // t)


@dataclass(frozen=True)
class Pass:
    """One logical kernel: `launches` launches, one per index of the host loops.

    A launch at byte offsets (i0, o0) from the two pointers (see `offsets()`) moves, in
    `elem_bytes`-byte elements, for b < batch, i < m, j < n:

    - transpose: ``out[o0 + b*bs_out + j*ld_out + i] = in[i0 + b*bs_in + i*ld_in + j]``
      (exactly `launch.make_launch(state, cfg, batch, m, n, ld_in, ld_out, bs_in, bs_out,
      outer, outer2)`, which walks the outer dims too);
    - copy:      ``out[o0 + b*bs_out + i*ld_out + j] = in[i0 + b*bs_in + i*ld_in + j]``
      (`batch` x `m` rows of `n` elements; m = batch = 1 without loops: one contiguous block);
    - gather:    for every index (k_1, ..., k_d) of `dims`, ``out[sum k*out_stride] =
      in[sum k*in_stride]`` in one launch (`launch.make_gather(state, elem_bytes, dims)`);
      m = 1 and n, ld_in, ld_out are the element count, batch 1, no loops;
    - packed:    the same as a gather, moved in boxes of `box` (one extent per dim of `dims`)
      through shared memory (`launch.make_packed(state, elem_bytes, dims, box)`).
    """

    kind: str  # COPY, TRANSPOSE, GATHER or PACKED
    elem_bytes: int  # the element the pass moves: a kernel's key (1, 2, 4, 8 or 16)
    m: int  # transpose: the output's innermost axis; copy: rows
    n: int  # transpose: the input's innermost axis; copy: elements per row
    ld_in: int
    ld_out: int
    batch: int = 1
    bs_in: int = 0
    bs_out: int = 0
    loops: tuple[Dim, ...] = ()  # host loops, outermost first (output order)
    dims: tuple[Dim, ...] = ()  # gather, packed: the problem, output memory order, outermost first
    box: tuple[int, ...] = ()  # packed: the box's extent along each of `dims`
    pipelined: bool = False  # packed: the pipelined kernel (`can_pipeline`, PACKED_PIPELINE_*)
    realign: bool = False  # copy: in bytes, realigned into 16-byte words (`realigned`)
    # packed: the vector box's (input, output) vector bytes (`vector_widths`); (0, 0): the
    # packed kernels of templates/packed.cu.j2
    vectors: tuple[int, int] = (0, 0)
    # packed with vectors: the vector box scatters on the load side, this many of the
    # output's innermost indices a thread's chunk (`scatter_chunk`); 0: it gathers on the
    # store side through its table
    scatter: int = 0
    # copy and transpose: up to two more batch dims that the launch itself walks (the row
    # kernel's blockIdx.z, outer's index times outer2's extent plus outer2's index; a tile
    # kernel's batch index, `batch` innermost, then outer2, then outer)
    outer: Dim = NO_DIM
    outer2: Dim = NO_DIM

    @property
    def launches(self) -> int:
        return math.prod(d.extent for d in self.loops)

    @property
    def contiguous(self) -> bool:
        """A copy of one contiguous block: a plain device-to-device copy."""
        walked = self.m * self.batch * self.outer.extent * self.outer2.extent
        return self.kind == COPY and walked == 1 and not self.loops

    @property
    def launch_bytes(self) -> int:
        """Bytes one launch moves (each read once and written once)."""
        return (
            self.outer.extent * self.outer2.extent * self.batch * self.m * self.n * self.elem_bytes
        )

    def problem(self) -> tuple[Dim, ...]:
        """Everything the pass moves as dims of its elements, in output memory order
        (outermost first), size-1 dims dropped: the host loops, the batch and the two sides
        of a launch together. A gather pass of these dims moves exactly the same bytes."""
        if self.kind in (GATHER, PACKED):
            return self.dims
        if self.kind == TRANSPOSE:
            sides = [Dim(self.n, 1, self.ld_out), Dim(self.m, self.ld_in, 1)]
        else:
            sides = [Dim(self.m, self.ld_in, self.ld_out), Dim(self.n, 1, 1)]
        every = [
            *self.loops,
            self.outer,
            self.outer2,
            Dim(self.batch, self.bs_in, self.bs_out),
            *sides,
        ]
        return tuple(_fuse(sorted((d for d in every if d.extent > 1), key=lambda d: -d.out_stride)))

    def offsets(self) -> Iterator[tuple[int, int]]:
        """(input, output) byte offsets of each launch from the two pointers, in loop order."""
        e = self.elem_bytes
        for index in itertools.product(*(range(d.extent) for d in self.loops)):
            yield (
                e * sum(k * d.in_stride for k, d in zip(index, self.loops, strict=True)),
                e * sum(k * d.out_stride for k, d in zip(index, self.loops, strict=True)),
            )

    def describe(self) -> str:
        e = self.elem_bytes
        if self.kind in (GATHER, PACKED):
            text = (
                f"{self.kind} {' x '.join(str(d.extent) for d in self.dims)} of {e}-byte "
                f"elements in one launch (in strides {tuple(d.in_stride for d in self.dims)}, "
                f"out strides {tuple(d.out_stride for d in self.dims)})"
            )
            if self.kind == PACKED:
                runs = packed_runs(self.dims, self.box)
                text += (
                    f" in boxes of {' x '.join(map(str, self.box))} (runs of {runs[0] * e} "
                    f"bytes read, {runs[1] * e} written)"
                    + (", pipelined" if self.pipelined else "")
                    + (
                        f", in {self.vectors[0]}-byte vectors in and {self.vectors[1]}-byte out"
                        if self.vectors[0]
                        else ""
                    )
                    + (
                        f", scattered in chunks of {self.scatter} output-innermost indices"
                        if self.scatter
                        else ""
                    )
                )
            return text
        if self.contiguous:
            text = f"copy {self.n * e} contiguous bytes"
        elif self.kind == COPY and self.realign:
            text = (
                f"copy {self.batch} x {self.m} rows of {self.n} bytes realigned into 16-byte "
                f"words (runs of {self.run_bytes} bytes; ld_in {self.ld_in}, ld_out "
                f"{self.ld_out}, bs_in {self.bs_in}, bs_out {self.bs_out} bytes)"
            )
        elif self.kind == COPY:
            text = (
                f"copy {self.batch} x {self.m} rows of {self.n * e} bytes ({self.n} {e}-byte "
                f"words; ld_in {self.ld_in}, ld_out {self.ld_out}, bs_in {self.bs_in}, "
                f"bs_out {self.bs_out} words)"
            )
        else:
            text = (
                f"transpose {self.batch} x {self.m}x{self.n} of {e}-byte elements (ld_in "
                f"{self.ld_in}, ld_out {self.ld_out}, bs_in {self.bs_in}, bs_out {self.bs_out})"
            )
        unit = (" bytes" if self.realign else " words") if self.kind == COPY else ""
        for o in (self.outer, self.outer2):
            if o.extent > 1:
                text += (
                    f" x {o.extent} in the launch (in +{o.in_stride}, out +{o.out_stride}{unit})"
                )
        if self.loops:
            text += "; host loops " + ", ".join(
                f"{d.extent} (in +{d.in_stride}, out +{d.out_stride})" for d in self.loops
            )
            text += (" bytes" if self.realign else " words") if self.kind == COPY else " elements"
        return text

    @property
    def run_bytes(self) -> int:
        """A realigned copy's runs: its rows, times m where the output's rows lie side by
        side (ld_out == n), times the batch where its matrices do too (bs_out == m n);
        the same rule as `launch.make_runs_copy`'s."""
        return runs_of(self.m, self.n, self.ld_out, self.batch, self.bs_out)[0]


@dataclass(frozen=True)
class Plan:
    """How to permute an array of `shape` by `axes`: at most one pass."""

    shape: tuple[int, ...]
    axes: tuple[int, ...]  # normalised: out.shape[k] == shape[axes[k]]
    elem_bytes: int
    in_strides: tuple[int, ...]  # elements
    out_strides: tuple[int, ...]  # elements, of the output (out_shape)
    case: str  # EMPTY, CONTIGUOUS, RUNS, WIDE, ELEMENTS or STRIDED
    dims: tuple[Dim, ...]  # the fused problem, outermost output axis first (array elements)
    passes: tuple[Pass, ...]  # () for an empty array, else one
    why_one_launch: str = ""  # a gather or packed pass: what the pass it replaced would have been
    # other passes that move exactly the same bytes, which the first call of the signature
    # times against passes[0] (the guess), keeping the fastest (permuter; ALT_* above)
    alternatives: tuple[Pass, ...] = ()

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[a] for a in self.axes)

    @property
    def launches(self) -> int:
        return sum(p.launches for p in self.passes)

    def taking(self, p: Pass) -> Plan:
        """This plan run by `p`, one of its alternatives, instead of its own pass."""
        if p not in self.alternatives and p not in self.passes:
            raise ValueError(f"{p} is not one of this plan's passes or alternatives")
        return dataclasses.replace(self, passes=(p,), alternatives=())

    def describe(self) -> str:
        """A few lines for people (`autotranspose lookup --axes`): the call, the fused
        problem, the pass and the number of launches."""
        lines = [
            f"permute {self.shape} by {self.axes}, {self.elem_bytes}-byte elements "
            f"-> {self.out_shape}"
        ]
        if self.case == EMPTY:
            return "\n".join([*lines, "empty: nothing to move, 0 launches"])
        lines.append(
            "fused (output order): "
            + (" x ".join(str(d.extent) for d in self.dims) or "one element")
            + f"; in strides {tuple(d.in_stride for d in self.dims)}, out strides "
            f"{tuple(d.out_stride for d in self.dims)}"
        )
        why = {
            RUNS: "runs (a strided copy, or the innermost axis stays innermost): ",
            WIDE: "wide elements (the innermost axis stays innermost): ",
            STRIDED: "strided (no input axis of stride 1, or no output one): ",
        }.get(self.case, "")
        lines += [why + p.describe() for p in self.passes]
        if self.why_one_launch:
            kind = self.passes[0].kind
            lines.append(f"why {kind}: the batched pass would be {self.why_one_launch}")
        for p in self.alternatives:
            lines.append("a first call also times: " + p.describe())
        n = self.launches
        lines.append(f"{len(self.passes)} pass, {n} launch{'es' if n != 1 else ''}")
        return "\n".join(lines)


def plan_permute(
    shape: Sequence[int],
    axes: Sequence[int],
    elem_bytes: int,
    in_strides: Sequence[int] | None = None,
    out_strides: Sequence[int] | None = None,
    *,
    in_ptr: int = 0,
    out_ptr: int = 0,
) -> Plan:
    """Plan ``out = x.transpose(axes)`` for x of `shape` and `elem_bytes`-byte elements.

    Strides are in elements (None: row-major); `out_strides` are those of the output, whose
    shape is ``shape[axes[k]]``. Only the pointers' alignment (address mod 16) is read, so a
    plan may be cached by it. Raises AxesError, LayoutError, ShapeError or
    UnsupportedDtypeError, each saying how to fix the call.
    """
    shape = _shape(shape)
    axes = normalize_axes(axes, len(shape))
    if elem_bytes not in ELEMENT_SIZES:
        raise UnsupportedDtypeError(
            f"{elem_bytes}-byte elements: the kernels move elements of "
            f"{', '.join(map(str, ELEMENT_SIZES))} bytes; view the array as one of those"
        )
    out_shape = tuple(shape[a] for a in axes)
    xs = _strides(in_strides, shape, "x")
    os_ = _strides(out_strides, out_shape, "out")
    if 0 in shape:
        return Plan(shape, axes, elem_bytes, xs, os_, EMPTY, (), ())
    dims = [Dim(shape[a], xs[a], os_[k]) for k, a in enumerate(axes) if shape[a] > 1]
    _check_layout(dims, shape, xs, out_shape, os_, elem_bytes, in_ptr, out_ptr)
    fused = _fuse(sorted(dims, key=lambda d: -d.out_stride))  # output memory order
    if fused and (all(d.in_stride != 1 for d in fused) or min(d.out_stride for d in fused) != 1):
        strided = _strided(fused, elem_bytes, shape, xs, out_shape, os_)
        return Plan(shape, axes, elem_bytes, xs, os_, STRIDED, tuple(fused), (strided,))
    case, one = _classify(fused, elem_bytes, in_ptr, out_ptr)
    why = gather_reason(one)
    chosen = (one_launch(one, PACKED) or one_launch(one, GATHER) or one) if why else one
    if chosen is one and realign_first(one):
        chosen = realigned(one) or one
    alts = alternatives(one, chosen)
    vector = vector_launch(one, in_ptr, out_ptr) if why else None
    if vector is not None:  # VECTOR_*: the plan's pass for 1- and 2-byte elements
        if vector.elem_bytes <= VECTOR_OWN_MAX_ELEM_BYTES:
            chosen, alts = vector, _distinct(vector, (chosen, *alts))
        elif math.prod(d.extent for d in vector.dims) * vector.elem_bytes >= ALT_MIN_BYTES:
            alts = _distinct(chosen, (*alts, vector))
    return Plan(shape, axes, elem_bytes, xs, os_, case, tuple(fused), (chosen,), why, alts)


def _distinct(chosen: Pass, found: Iterable[Pass | None]) -> tuple[Pass, ...]:
    """`found` without None, `chosen` and repeats, in order."""
    picked: list[Pass] = []
    for p in found:
        if p is not None and p != chosen and p not in picked:
            picked.append(p)
    return tuple(picked)


def one_launch(p: Pass, kind: str, min_elems: int | None = None) -> Pass | None:
    """`p`'s whole problem as one launch of `kind` (PACKED: in `packed_box`'s box for
    `min_elems`), or None where that kernel cannot take it."""
    problem = p.problem()
    if not 1 <= len(problem) <= MAX_NDIM or any(d.extent > GATHER_MAX_EXTENT for d in problem):
        return None
    box: tuple[int, ...] | None = ()
    if kind == PACKED:
        box = packed_box(problem, p.elem_bytes, min_elems)
        if box is None:
            return None
    total = math.prod(d.extent for d in problem)
    return Pass(kind, p.elem_bytes, 1, total, total, total, dims=problem, box=box or ())


def can_pipeline(p: Pass) -> bool:
    """Whether packed pass `p`'s box can take the pipelined kernel."""
    return p.kind == PACKED and pipeline_fits(p.elem_bytes, math.prod(p.box))


def alternatives(batched: Pass, chosen: Pass) -> tuple[Pass, ...]:
    """The passes a first call times against `chosen` (the plan's pass; `batched` is the
    batched transpose or row copy it was classified as, the same where no one-launch pass
    replaced it): each moves exactly the same bytes. The rules and the measurements behind
    them are at ALT_* above."""
    e = chosen.elem_bytes
    if math.prod(d.extent for d in chosen.problem()) * e < ALT_MIN_BYTES:
        return ()
    found: list[Pass | None] = []
    if chosen.kind in (PACKED, GATHER):
        if can_pipeline(chosen):
            found.append(dataclasses.replace(chosen, pipelined=True))
        found += [one_launch(chosen, GATHER), one_launch(chosen, PACKED, PACKED_BIG_ELEMS)]
        if e <= 2:
            found.append(one_launch(chosen, PACKED, PACKED_WORDS_BYTES // e))
        if (batched.loops or narrow_batch(batched)) and batched.launches <= ALT_MAX_LAUNCHES:
            found.append(batched)
    elif chosen.kind == COPY and not chosen.contiguous:
        # the word copy and the realigned one race each other (REALIGN_*); the one-launch
        # passes take the word copy's elements, not bytes
        found.append(batched if chosen.realign else realigned(batched))
        row = batched.n * batched.elem_bytes
        if row < ALT_ROW_BYTES:
            found += [one_launch(batched, PACKED), one_launch(batched, PACKED, PACKED_BIG_ELEMS)]
        if row < ALT_GATHER_ROW_BYTES:
            found.append(one_launch(batched, GATHER))
    elif chosen.kind == TRANSPOSE and min(chosen.m, chosen.n) * e < ALT_SIDE_BYTES:
        found += [one_launch(chosen, PACKED), one_launch(chosen, PACKED, PACKED_BIG_ELEMS)]
    return _distinct(chosen, found)


def narrow_batch(p: Pass) -> bool:
    """Whether `p` is a batch of matrices with one side under GATHER_MIN_SIDE and the other
    of ALT_NARROW_LONG_BYTES or more: the one-launch pass that replaces it races it."""
    return _narrow_matrices(p) and max(p.m, p.n) * p.elem_bytes >= ALT_NARROW_LONG_BYTES


def vector_launch(p: Pass, in_ptr: int = 0, out_ptr: int = 0) -> Pass | None:
    """`p`'s whole problem as one vector box launch (`vector_box`), or None."""
    problem = p.problem()
    if not 1 <= len(problem) <= MAX_NDIM:
        return None
    found = vector_box(problem, p.elem_bytes, in_ptr, out_ptr)
    if found is None:
        return None
    box, widths, scatter = found
    total = math.prod(d.extent for d in problem)
    return Pass(
        PACKED,
        p.elem_bytes,
        1,
        total,
        total,
        total,
        dims=problem,
        box=box,
        vectors=widths,
        scatter=scatter,
    )


def gather_reason(p: Pass) -> str:
    """Why the one pass `p` should run as one gather launch instead ("" to keep it): the
    single place the plan chooses between the batched kernels and the gather.

    The batched transpose and row copy move big problems near the copy ceiling, but their
    host loops launch once per index, and a tile kernel needs sides of a tile's size. So a
    gather takes the problem when `p` needs host loops that launch more than
    GATHER_MAX_LAUNCHES times or move fewer than GATHER_MIN_LAUNCH_BYTES each, or when it is
    a transpose with both sides under GATHER_MIN_SIDE elements, or a batch of matrices with
    one side under it. Never a plain contiguous copy,
    and never dims the gather kernel cannot count (an extent over GATHER_MAX_EXTENT). The
    text says what `p` would have been, for `Plan.describe()`."""
    if p.kind == GATHER or p.contiguous:
        return ""
    dims = p.problem()
    if not 1 <= len(dims) <= MAX_NDIM or any(d.extent > GATHER_MAX_EXTENT for d in dims):
        return ""
    if p.kind == TRANSPOSE:
        what = f"transpose {p.batch} x {p.m}x{p.n}"
    else:
        what = f"copy {p.batch} x {p.m} rows of {p.n * p.elem_bytes} bytes"
    if p.loops and (p.launches > GATHER_MAX_LAUNCHES or p.launch_bytes < GATHER_MIN_LAUNCH_BYTES):
        return f"{p.launches} launches of {p.launch_bytes} bytes ({what})"
    if p.kind == TRANSPOSE and p.m < GATHER_MIN_SIDE and p.n < GATHER_MIN_SIDE:
        return f"{what} (both sides under {GATHER_MIN_SIDE}: tiles too small)"
    if _narrow_matrices(p):
        return f"{what} (a batch of matrices with a side under {GATHER_MIN_SIDE})"
    return ""


def _narrow_matrices(p: Pass) -> bool:
    """Whether `p` transposes a batch of matrices (in the launch or by host loops) with a side
    under GATHER_MIN_SIDE."""
    matrices = p.batch * p.outer.extent * p.outer2.extent
    return (
        p.kind == TRANSPOSE and min(p.m, p.n) < GATHER_MIN_SIDE and (matrices > 1 or bool(p.loops))
    )


def _strided(
    fused: list[Dim],
    eb: int,
    shape: tuple[int, ...],
    xs: tuple[int, ...],
    out_shape: tuple[int, ...],
    os_: tuple[int, ...],
) -> Pass:
    """The STRIDED case's pass: the whole fused problem as one gather launch (the only kernel
    whose reads and writes both take any element strides). LayoutError where a fused dim is
    longer than its 32-bit digits take (GATHER_MAX_EXTENT)."""
    pass_ = one_launch(Pass(GATHER, eb, 1, 1, 1, 1, dims=tuple(fused)), GATHER)
    if pass_ is None:
        side = (
            "x has no axis of stride 1"
            if all(d.in_stride != 1 for d in fused)
            else "out's innermost stride is not 1"
        )
        raise LayoutError(
            f"{side} (x strides {xs} for shape {shape}, out strides {os_} for shape "
            f"{out_shape}, in elements), and such layouts are moved by the gather kernel, "
            f"whose dims hold at most {GATHER_MAX_EXTENT} elements each; make the array "
            "contiguous first (e.g. ascontiguousarray / .contiguous())"
        )
    return pass_


def _fuse(dims: list[Dim]) -> list[Dim]:
    """Merge each axis into the one outside it in the output where both sides' strides chain."""
    fused: list[Dim] = []
    for d in dims:
        if fused:
            a = fused[-1]
            if a.in_stride == d.in_stride * d.extent and a.out_stride == d.out_stride * d.extent:
                fused[-1] = Dim(a.extent * d.extent, d.in_stride, d.out_stride)
                continue
        fused.append(d)
    return fused


def _classify(dims: list[Dim], eb: int, in_ptr: int, out_ptr: int) -> tuple[str, Pass]:
    inner = dims[-1] if dims else Dim(1, 1, 1)
    if inner.in_stride != 1:
        t = _transpose(dims, eb)
        assert t is not None  # _check_layout saw a stride-1 input axis, and inner's out_stride is 1
        return ELEMENTS, t
    run, rest = inner.extent, dims[:-1]
    wide = run * eb
    if not rest:
        return CONTIGUOUS, _copy([], wide, eb, in_ptr, out_ptr)
    if (
        wide in ELEMENT_SIZES
        and (in_ptr | out_ptr) % wide == 0
        and all(d.in_stride % run == 0 and d.out_stride % run == 0 for d in rest)
    ):
        in_wide = [Dim(d.extent, d.in_stride // run, d.out_stride // run) for d in rest]
        t = _transpose(in_wide, wide)
        if t is not None:
            return WIDE, t
    return RUNS, _copy(rest, wide, eb, in_ptr, out_ptr)


def _transpose(dims: list[Dim], e: int) -> Pass | None:
    """The batched transpose of these dims (output order), or None when their layout is not
    one: the output's innermost axis must have stride 1 and another axis input stride 1."""
    if len(dims) < 2 or dims[-1].out_stride != 1:
        return None
    i = dims[-1]
    others = dims[:-1]
    js = [k for k, d in enumerate(others) if d.in_stride == 1]
    if not js:
        return None
    k = max(js, key=lambda k: (others[k].extent, k))  # an input read twice may have two
    j = others[k]
    b, loops = _largest(others[:k] + others[k + 1 :])
    room = GRID_TILES // (max_tiles(i.extent, j.extent) * (b.extent if b else 1))
    if min(i.extent, j.extent) * e < OUTER_MIN_ROW_BYTES:
        room = 1  # narrow matrices: host loops (or, by gather_reason, the gather) as before
    o, o2, loops = _walked(loops, room)
    return Pass(
        TRANSPOSE,
        e,
        i.extent,
        j.extent,
        i.in_stride,
        j.out_stride,
        b.extent if b else 1,
        b.in_stride if b else i.extent * i.in_stride,
        b.out_stride if b else j.extent * j.out_stride,
        tuple(loops),
        outer=o,
        outer2=o2,
    )


def _copy(rows: list[Dim], row_bytes: int, eb: int, in_ptr: int, out_ptr: int) -> Pass:
    """Rows of `row_bytes` contiguous bytes at the places `rows` (array elements) say, moved
    as the widest word that the row length, every stride and both pointers allow. The launch
    walks four dims of rows (m, batch, and outer and outer2 over blockIdx.z: the largest ones
    that fit); any others are host loops. Of the two largest, m (the one a block's rows run
    along) is the one whose rows lie side by side in the output, if either does."""
    strides = [s * eb for d in rows for s in (d.in_stride, d.out_stride)]
    w = next(
        w
        for w in reversed(ELEMENT_SIZES)
        if row_bytes % w == 0 and (in_ptr | out_ptr) % w == 0 and all(s % w == 0 for s in strides)
    )
    n = row_bytes // w
    words = [Dim(d.extent, d.in_stride * eb // w, d.out_stride * eb // w) for d in rows]
    m, rest = _largest(words)
    if m is None:
        return Pass(COPY, w, 1, n, n, n, 1, n, n)
    b, loops = _largest(rest)
    if b is not None and b.out_stride == n and m.out_stride != n and m.extent < 2**32:
        m, b = b, m  # the same two dims walked, so the same launches (at ROWS_MAX_OUTER)
    o, o2, loops = _walked(loops, ROWS_MAX_OUTER)
    return Pass(
        COPY,
        w,
        m.extent,
        n,
        m.in_stride,
        m.out_stride,
        b.extent if b else 1,
        b.in_stride if b else m.extent * m.in_stride,
        b.out_stride if b else m.extent * m.out_stride,
        tuple(loops),
        outer=o,
        outer2=o2,
    )


def runs_of(m: int, n: int, ld_out: int, batch: int, bs_out: int) -> tuple[int, int, int]:
    """(run bytes, rows fused into a run, matrices fused into a run) of a realigned copy of
    `batch` x `m` rows of `n` bytes: m rows where the output's rows lie side by side, then
    the batch where its matrices do too, while the run stays within REALIGN_MAX_RUN_BYTES."""
    s0 = m if m > 1 and ld_out == n and m * n <= REALIGN_MAX_RUN_BYTES else 1
    s1 = (
        batch
        if s0 == m and batch > 1 and bs_out == m * n and batch * m * n <= REALIGN_MAX_RUN_BYTES
        else 1
    )
    return s1 * s0 * n, s0, s1


def realign_first(p: Pass) -> bool:
    """Whether word copy `p` should run realigned as the plan's own pass, not only as an
    alternative: rows of words under 8 bytes, or of 8-byte words under
    REALIGN_WORDS_FIRST_BYTES (the measurements at REALIGN_*)."""
    return p.elem_bytes < 8 or p.n * p.elem_bytes < REALIGN_WORDS_FIRST_BYTES


def realigned(p: Pass) -> Pass | None:
    """Copy pass `p` in bytes, realigned into 16-byte words (REALIGN_*), or None where it
    keeps its words: a word of 16 bytes already, rows under REALIGN_MIN_ROW_BYTES, runs
    under REALIGN_MIN_RUN_BYTES, or a row over REALIGN_MAX_RUN_BYTES. The rows' dims are
    re-picked so that those the output lays side by side fuse into runs: m the dim whose rows
    are adjacent (out stride n), the batch the one whose matrices then are (out stride m n);
    the launch walks two more, as `_copy`'s does. Where that would leave more host loops
    than `p` has (its large dims over blockIdx.z's limit), the dims are `p`'s own."""
    if p.kind != COPY or p.contiguous or p.realign or p.elem_bytes == 16:
        return None
    w = p.elem_bytes
    *words, row = p.problem()
    rows = [Dim(d.extent, d.in_stride * w, d.out_stride * w) for d in words]
    n = row.extent * w
    if (
        row.in_stride != 1
        or row.out_stride != 1
        or not REALIGN_MIN_ROW_BYTES <= n <= REALIGN_MAX_RUN_BYTES
    ):
        return None
    for fuse in (True, False):  # unfused, the word copy's own dims: never more launches
        m, b, rest = _run_dims(rows, n, fuse)
        o, o2, loops = _walked(rest, ROWS_MAX_OUTER)
        if math.prod(d.extent for d in loops) <= p.launches:
            break
    if runs_of(m.extent, n, m.out_stride, b.extent, b.out_stride)[0] < REALIGN_MIN_RUN_BYTES:
        return None
    return Pass(
        COPY,
        1,
        m.extent,
        n,
        m.in_stride,
        m.out_stride,
        b.extent,
        b.in_stride,
        b.out_stride,
        tuple(loops),
        outer=o,
        outer2=o2,
        realign=True,
    )


def _run_dims(rows: list[Dim], n: int, fuse: bool) -> tuple[Dim, Dim, list[Dim]]:
    """A realigned copy's m and batch dims (bytes) and the rest: with `fuse`, the dim whose
    rows of `n` bytes lie side by side in the output and then the one whose matrices do (or
    the largest, where none does), else the largest two, largest first: the same two dims as
    `_copy`'s (which may walk them the other way round), so the same launches."""
    m = next((d for d in rows if d.out_stride == n), None) if fuse else None
    if m is None:
        m, rest = _largest(rows)
        assert m is not None  # a copy that is not one contiguous block has rows
    else:
        rest = [d for d in rows if d is not m]
    b = next((d for d in rest if d.out_stride == m.extent * n), None) if fuse else None
    if b is None:
        b, rest = _largest(rest)
    else:
        rest = [d for d in rest if d is not b]
    return m, b or Dim(1, m.extent * m.in_stride, m.extent * m.out_stride), rest


def _walked(loops: list[Dim], room: int) -> tuple[Dim, Dim, list[Dim]]:
    """The two loop dims a launch walks itself (the largest whose extents multiply to at most
    `room`; extent 1 where none fits) and the host loops left, in order."""
    o, _ = _largest([d for d in loops if d.extent <= room])
    loops = [d for d in loops if d is not o]
    room //= o.extent if o else 1
    o2, _ = _largest([d for d in loops if d.extent <= room])
    loops = [d for d in loops if d is not o2]
    return o or NO_DIM, o2 or NO_DIM, loops


def _largest(dims: list[Dim]) -> tuple[Dim | None, list[Dim]]:
    """The dim of largest extent (the innermost of equals), and the others in order: the
    kernel takes the largest so that the host loops launch the fewest times."""
    if not dims:
        return None, []
    k = max(range(len(dims)), key=lambda k: (dims[k].extent, k))
    return dims[k], dims[:k] + dims[k + 1 :]

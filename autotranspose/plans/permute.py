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
    VECTOR_MAX_SMEM_BYTES,
    VECTOR_SCATTER_MAX_CHUNK as VECTOR_SCATTER_MAX_CHUNK,
    VECTOR_SMALL_BOX_BYTES,
    Dim,
    edge_cut,
    long_out_box,
    packed_box,
    packed_runs,
    pipeline_fits,
    realigned_out,
    vector_box,
    whole_box,
    word_box,
)
from .dtypes import ELEMENT_SIZES
from .layout import MAX_NDIM, _check_layout, _shape, _strides, normalize_axes
from .thresholds import (
    ALT_GATHER_ROW_BYTES,
    ALT_MAX_LAUNCHES,
    ALT_MIN_BYTES,
    ALT_NARROW_LONG_BYTES,
    ALT_ROW_BYTES,
    ALT_SIDE_BYTES,
    GATHER_MAX_LAUNCHES,
    GATHER_MIN_LAUNCH_BYTES,
    GATHER_MIN_SIDE,
    GRID_TILES,
    MIN_TILE_SIDE,
    OUTER_MIN_ROW_BYTES,
    PACKED_BIG_ELEMS,
    PACKED_WORDS_BYTES,
    REALIGN_MAX_RUN_BYTES,
    REALIGN_MIN_ROW_BYTES,
    REALIGN_MIN_RUN_BYTES,
    REALIGN_WORDS_FIRST_BYTES,
    ROWS_MAX_OUTER,
    VECTOR_OWN_MAX_ELEM_BYTES,
)

COPY, TRANSPOSE, GATHER, PACKED = "copy", "transpose", "gather", "packed"
# Plan.case: why the pass is what it is (the pass kind alone does not say)
EMPTY, CONTIGUOUS, RUNS, WIDE, ELEMENTS = "empty", "copy", "runs", "wide", "transpose"
# Plan.case of a layout the tile and row kernels cannot read or write: an input with no axis
# of stride 1 (a 1-D stride-2 view, z.real of a complex array, x[..., ::2], a broadcast
# scalar) or an output whose innermost stride is not 1. The gather takes any element strides
# (its offsets are 64-bit sums of index x stride, per dim, on both sides), so it moves these in
# one launch; its stores stay coalesced where the output's innermost stride is 1.
STRIDED = "strided"


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
    # packed, 1- and 2-byte elements whose output runs start off a word: the spread kernel's
    # realigned variant (`realigned_out`) instead of the element kernel
    realign_out: bool = False
    realign: bool = False  # copy: in bytes, realigned into 16-byte words (`realigned`)
    # packed: the vector box's (input, output) vector bytes (`vector_widths`); (0, 0): the
    # packed kernels of templates/packed.cu.j2
    vectors: tuple[int, int] = (0, 0)
    # packed with vectors: the vector box scatters on the load side, this many of the
    # output's innermost indices a thread's chunk (`scatter_chunk`); 0: it gathers on the
    # store side through its table
    scatter: int = 0
    # packed with vectors, gathering: its shared box padded with a word after every this many
    # bytes (`VBoxKernel.pad`, VECTOR_PAD_EVERY); 0: dense
    pad: int = 0
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

    def copy_args(self) -> tuple[int, ...]:
        """A COPY pass's row-copy arguments (`runtime.launch.make_row_copy`'s after the
        state; `make_runs_copy`'s where it is realigned): its word, the batch x m rows of n
        words, their strides, and the two outer dims the launch walks."""
        o, o2 = self.outer, self.outer2
        return (
            self.elem_bytes,
            self.batch,
            self.m,
            self.n,
            self.ld_in,
            self.ld_out,
            self.bs_in,
            self.bs_out,
            o.extent,
            o.in_stride,
            o.out_stride,
            o2.extent,
            o2.in_stride,
            o2.out_stride,
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
                    + (", output runs realigned into words" if self.realign_out else "")
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
                    + (f", shared box padded every {self.pad} bytes" if self.pad else "")
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
    # VECTOR_*: the plan's pass for 1- and 2-byte elements where a one-launch pass replaces
    # the batched one, else an alternative wherever the first call races a packed box
    racing = any(a.kind == PACKED for a in alts)
    vector = vector_launch(one, in_ptr, out_ptr) if why or racing else None
    if vector is not None:
        raced = math.prod(d.extent for d in vector.dims) * vector.elem_bytes >= ALT_MIN_BYTES
        small = _small_vector(one, vector, in_ptr, out_ptr) if raced else None
        if why and vector.elem_bytes <= VECTOR_OWN_MAX_ELEM_BYTES:
            chosen, alts = vector, _distinct(vector, (chosen, *alts, small))
        elif raced:
            alts = _distinct(chosen, (*alts, vector, small))
    if alts:
        alts = _distinct(chosen, (*alts, *_realigned_twins((chosen, *alts), out_ptr)))
    return Plan(shape, axes, elem_bytes, xs, os_, case, tuple(fused), (chosen,), why, alts)


def _realigned_twins(passes: Iterable[Pass], out_ptr: int) -> list[Pass]:
    """Each packed pass of `passes` whose box writes output runs off a word that the spread
    kernel's realigned variant takes, through that kernel: a first call races the two, since
    which is faster depends on the box (`realigned_out`)."""
    return [
        dataclasses.replace(p, realign_out=True)
        for p in passes
        if p.kind == PACKED
        and not (p.vectors[0] or p.pipelined or p.realign_out)
        and realigned_out(p.dims, p.box, p.elem_bytes, out_ptr)
    ]


def _distinct(chosen: Pass, found: Iterable[Pass | None]) -> tuple[Pass, ...]:
    """`found` without None, `chosen` and repeats, in order."""
    picked: list[Pass] = []
    for p in found:
        if p is not None and p != chosen and p not in picked:
            picked.append(p)
    return tuple(picked)


def one_launch(
    p: Pass,
    kind: str,
    min_elems: int | None = None,
    *,
    whole: bool = False,
    long_out: bool = False,
) -> Pass | None:
    """`p`'s whole problem as one launch of `kind` (PACKED: in `packed_box`'s box for
    `min_elems`, with `whole` in `whole_box`'s, which no edge cuts, or with `long_out` in
    `long_out_box`'s, which writes one long run), or None where that kernel cannot take it."""
    problem = p.problem()
    if not 1 <= len(problem) <= MAX_NDIM or any(d.extent > GATHER_MAX_EXTENT for d in problem):
        return None
    box: tuple[int, ...] | None = ()
    if kind == PACKED:
        if whole:
            box = whole_box(problem, p.elem_bytes)
        elif long_out:
            box = long_out_box(problem, p.elem_bytes)
        else:
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
        packed = one_launch(chosen, PACKED)
        found += _reshaped(chosen, packed)
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
            packed = one_launch(batched, PACKED)
            found += [packed, one_launch(batched, PACKED, PACKED_BIG_ELEMS)]
            found += _reshaped(batched, packed)
        if row < ALT_GATHER_ROW_BYTES:
            found.append(one_launch(batched, GATHER))
    elif chosen.kind == TRANSPOSE and min(chosen.m, chosen.n) * e < ALT_SIDE_BYTES:
        packed = one_launch(chosen, PACKED)
        found += [packed, one_launch(chosen, PACKED, PACKED_BIG_ELEMS)]
        found += _reshaped(chosen, packed)
    return _distinct(chosen, found)


def _reshaped(p: Pass, packed: Pass | None) -> list[Pass | None]:
    """The other boxes a first call races beside `packed` (`p`'s launch in `packed_box`'s
    box): one that no edge cuts, one whose output moves in words, one that writes one long
    run (None where a box does not apply)."""
    return [_whole(p, packed), _worded(packed), one_launch(p, PACKED, long_out=True)]


def _whole(p: Pass, packed: Pass | None) -> Pass | None:
    """`p`'s problem as one packed launch in a box that no edge cuts (`whole_box`), where
    `packed` (its launch in `packed_box`'s box) leaves cut boxes at an edge; else None
    (nothing more to race)."""
    if packed is None or not edge_cut(packed.dims, packed.box):
        return None
    return one_launch(p, PACKED, whole=True)


def _worded(packed: Pass | None) -> Pass | None:
    """`packed` (1- or 2-byte elements) in a box whose output moves in aligned words
    (`word_box`), where its own box leaves the output misaligned and moved byte by byte;
    else None."""
    if packed is None:
        return None
    box = word_box(packed.dims, packed.elem_bytes, packed.box)
    return None if box is None else dataclasses.replace(packed, box=box)


def narrow_batch(p: Pass) -> bool:
    """Whether `p` is a batch of matrices with one side under GATHER_MIN_SIDE and the other
    of ALT_NARROW_LONG_BYTES or more: the one-launch pass that replaces it races it."""
    return _narrow_matrices(p) and max(p.m, p.n) * p.elem_bytes >= ALT_NARROW_LONG_BYTES


def _small_vector(p: Pass, vector: Pass, in_ptr: int, out_ptr: int) -> Pass | None:
    """Where `vector` (`p`'s vector box launch) holds more than VECTOR_SMALL_BOX_BYTES, the
    best box of at most that, which a first call races it; else None."""
    if math.prod(vector.box) * vector.elem_bytes <= VECTOR_SMALL_BOX_BYTES:
        return None
    return vector_launch(p, in_ptr, out_ptr, most_bytes=VECTOR_SMALL_BOX_BYTES)


def vector_launch(
    p: Pass, in_ptr: int = 0, out_ptr: int = 0, most_bytes: int = VECTOR_MAX_SMEM_BYTES
) -> Pass | None:
    """`p`'s whole problem as one vector box launch (`vector_box`, its boxes of at most
    `most_bytes`), or None."""
    problem = p.problem()
    if not 1 <= len(problem) <= MAX_NDIM:
        return None
    found = vector_box(problem, p.elem_bytes, in_ptr, out_ptr, most_bytes)
    if found is None:
        return None
    box, widths, scatter, pad = found
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
        pad=pad,
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
    that fit); any others are host loops. m (the one a block's rows run along) is the dim
    whose rows lie side by side in the output where there is one and taking it leaves no
    more host loops and a batch within 32 bits, else the larger of the two largest."""
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
    b, rest = _largest(rest)
    o, o2, loops = _walked(rest, ROWS_MAX_OUTER)
    side = next((d for d in words if d.out_stride == n and d.extent > 1), None)
    if side is not None and side is not m:
        # the rows the output lays side by side walked by m, so that a block's consecutive
        # rows store one run, where that takes no more host loops and the batch (the largest
        # other dim) fits the kernel's 32 bits. Walking the two largest dims instead stored
        # each row alone, cut sectors at both ends (H200: int16 99x266x27x3x2x108 by
        # (3,1,4,0,2,5), 216-byte rows, 42% of a copy, now 78%)
        b2, rest2 = _largest([d for d in words if d is not side])
        o_2, o2_2, loops2 = _walked(rest2, ROWS_MAX_OUTER)
        fits = b2 is None or b2.extent < 2**32
        if fits and math.prod(d.extent for d in loops2) <= math.prod(d.extent for d in loops):
            m, b, o, o2, loops = side, b2, o_2, o2_2, loops2
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


def run_copy(
    batch: int, run: int, elem_bytes: int, bs_in: int, bs_out: int, in_ptr: int, out_ptr: int
) -> Pass:
    """transpose()'s copy of matrices that are each one contiguous run of `run` elements (a
    side of 1), `batch` of them bs_in / bs_out elements apart: planned as permute() plans a
    row copy (`_copy`: the widest word the run, the strides and both pointers allow), in
    bytes realigned into 16-byte words where permute()'s rule takes that (`realign_first`).
    One contiguous block, which permute() hands to the driver's copy, is a realigned copy of
    one run here (transpose() runs one kernel a call): 1-byte words moved 1 byte a thread,
    bool 202x1571295x1 ran at 21% of a copy."""
    rows = [Dim(batch, bs_in, bs_out)] if batch > 1 else []
    p = _copy(rows, run * elem_bytes, elem_bytes, in_ptr, out_ptr)
    if not realign_first(p):
        return p
    nbytes = p.launch_bytes
    one_block = len(p.problem()) == 1  # the runs lie back to back, in and out
    if one_block and REALIGN_MIN_RUN_BYTES <= nbytes <= REALIGN_MAX_RUN_BYTES:
        return Pass(COPY, 1, 1, nbytes, nbytes, nbytes, 1, nbytes, nbytes, (), realign=True)
    return p if one_block else realigned(p) or p


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

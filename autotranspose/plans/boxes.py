"""A permute pass's dims and its boxes: the packed box (element runs of a box in shared memory) and the
vector box (whole vectors, gathered through a table or scattered by byte permutes), their limits,
and the bank conflicts of a gather. Pure; the planner (permute.py) decides when a box is used."""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# - the kernel counts each dim's index in 32 bits (a digit plus a step digit plus a carry must
#   fit): a fused dim longer than this keeps the transpose or copy pass.
GATHER_MAX_EXTENT = 2**31 - 1


# A packed pass (`packed_box`) moves the problem in boxes: a box takes whole or partial dims so
# that the input's and the output's contiguous runs inside it are both long (cuTT's Packed
# method). Run targets from 128 bytes (a full line on both sides, as a 32x32 tile of 4-byte
# elements has) upwards are tried in turn until a box holds PACKED_MIN_ELEMS elements (a
# 256-thread block with 4 each). A box takes at most PACKED_MAX_BYTES of shared memory (so 6
# blocks fit an H100's or H200's 228 KB per SM) and spans at most PACKED_MAX_BOX_DIMS dims
# (the kernel decomposes each element's box index once per dim, at compile-time extents).
PACKED_RUN_BYTES = tuple(128 << k for k in range(9))


# A box whose runs on either side are under one 32-byte sector moves no more whole sectors
# than the gather does: the gather takes it.
PACKED_MIN_RUN_BYTES = 32


PACKED_MIN_ELEMS = 1024


# A box that no edge cuts (`whole_box`) is good once its shorter run is this long: two
# 128-byte lines (float64 3x33x5478x2x63 by (4,2,0,3,1), H200: runs of 504 and 264 bytes
# 65.1% of copy, 168 and 264 67.6, 1008 and 528 69.7, where boxes with edges ran 37-56).
PACKED_WHOLE_RUN_BYTES = 256


PACKED_MAX_BYTES = 32 << 10


PACKED_MAX_BOX_DIMS = 6


PACKED_MAX_TILES = 2**32 - 1  # the kernel counts boxes in 32 bits


# The packed kernels' words for 1- and 2-byte elements (templates/packed/words.cu.j2 and
# spread.cu.j2): both write the output in aligned words of this size (`word_box`).
PACKED_WORD_BYTES = 4


# ... and where the plan's own pass is packed, the same box through the pipelined kernel
# (`Pass.pipelined`: the next box streams into a second shared buffer while a block writes
# this one; elements of PACKED_PIPELINE_MIN_ELEM_BYTES or more, boxes of at most
# PACKED_PIPELINE_MAX_BYTES so that two fit 48 KB of shared memory). On an H200, the same
# box both ways in one process (dev/packed_variants.py): it won on the multi-dim boxes plans make
# (float32 16x8x3x38608 79.1 -> 87.6, float64 16x336x1x72x8x3 71.9 -> 78.9, float32
# 5x16x288x8x40x3 69.4 -> 76.2, complex64 72x176x1344x4 86.1 -> 89.4) and lost on others
# (int32 304x8x61288 in 32x32 boxes 76.7 -> 66.7, int32 2x3808x32x2x32x8 85.8 -> 78.8,
# complex128 192x48x329 92.9 -> 80.7), with no rule of box sizes that split them.
PACKED_PIPELINE_MIN_ELEM_BYTES, PACKED_PIPELINE_MAX_BYTES = 4, 16 << 10


# A packed box of 1- or 2-byte elements moved element by element costs 20-50 instructions a
# byte (Nsight Compute on an H200: the ViT patchify (B, 3, 14, 16, 14, 16) -> (B, 14, 14, 16,
# 16, 3) in float16 40.8, uint8 images CHW -> HWC 19.0), where the copy ceiling leaves about
# 15 at full issue: 21-40% of copy. Where both sides of a box are runs that whole vectors of
# VECTOR_MIN_BYTES or more tile (`vector_widths`: the runs, their starts, the box corners and
# the pointers all aligned), the vector box (templates/vbox/vbox.cu.j2, `Pass.vectors`) moves it
# in those vectors on both sides: loads land in shared memory in the input's order, and each
# output vector gathers its elements there through a table of shared offsets built once per
# block (2 bytes an element), so an element costs a shared load and a share of a pack.
# Boxes of at least VECTOR_MIN_BOX_BYTES (every thread moves a 16-byte vector), preferably
# VECTOR_GOOD_BOX_BYTES (a block's loads in flight), at most VECTOR_MAX_SMEM_BYTES of
# elements and table together (static shared memory), and at most VECTOR_MAX_STEPS vectors
# a thread on either side (its offsets stay in registers).
VECTOR_WIDTHS = (16, 8, 4)


VECTOR_MIN_BYTES = 4


VECTOR_MIN_BOX_BYTES = 4 << 10


VECTOR_GOOD_BOX_BYTES = 8 << 10


# Where a plan's vector box holds more than this, the first call also races the best box of
# at most this (`vector_box(most_bytes=)`): a smaller box puts more blocks on an SM and
# leaves less of a wave idle, which a bigger box's longer runs do not always make up for
# (H200: float32 2448x1x16x8x32x2 by (5,1,2,0,4,3) 86.5% of a copy in vector boxes of 16 KB,
# 92.6 in the raced box of 4 KB).
VECTOR_SMALL_BOX_BYTES = VECTOR_MIN_BOX_BYTES


VECTOR_MAX_SMEM_BYTES = 40 << 10


VECTOR_TABLE_BYTES = 2  # a table entry: an element's byte offset in the box (under 64 KiB)


VECTOR_MAX_STEPS = 8


VECTOR_THREADS = 256


# A vector box's gather from shared memory conflicting more ways than this loses to the
# packed kernels (H100, uint8 HWC -> CHW: 2 channels 8 ways 50.2% of copy, 3 channels 4 ways
# 74.9, 4 channels 16 ways 29.8, where the words kernel ran at 99-103; the ViT patchify's
# 2.75 ways ran at 88-93); and boxes with at least this share of them whole are preferred
# (an edge box moves element by element), then runs of VECTOR_GOOD_RUN_BYTES.
VECTOR_MAX_CONFLICTS = 3.5


VECTOR_MIN_WHOLE = 0.9


VECTOR_GOOD_RUN_BYTES = 512


# The gather's shared box may be padded (`VBoxKernel.pad`): a word (an 8-byte element) after
# every P bytes of the box in the input's order, P one of these, so that the output vectors'
# elements, which lie a power of two of words apart in the dense box, fall into other banks.
# The input's vectors then go into shared memory as 4-byte words.
VECTOR_PAD_EVERY = (16, 32, 64, 128)


def vector_pad_bytes(elem_bytes: int, pad: int) -> int:
    """Bytes of each pad of a box padded every `pad` bytes (0: dense): an element of 8 or
    16 bytes, else a 4-byte word, so every element and gathered word stays aligned."""
    return max(4, elem_bytes) if pad else 0


def padded_offset(offset: Any, elem_bytes: int, pad: int) -> Any:
    """Where byte `offset` (an int or a numpy array of them) of a box in the input's order
    lies in shared memory when the box is padded every `pad` bytes (0: dense)."""
    return offset + vector_pad_bytes(elem_bytes, pad) * (offset // pad) if pad else offset


def vector_table_entries(volume: int) -> int:
    """Entries of a gathering vector box's table for a box of `volume` elements: an entry an
    element, in whole 16-byte rows (the kernel copies the table in them)."""
    per_row = 16 // VECTOR_TABLE_BYTES
    return -(-volume // per_row) * per_row


def vector_smem_bytes(volume: int, elem_bytes: int, pad: int, scatter: bool = False) -> int:
    """Shared memory a vector box kernel holds for a box of `volume` elements: the box
    (padded every `pad` bytes) in whole 16-byte rows and, for the gather, its table
    (`vector_table_entries`)."""
    data = -(-padded_offset(volume * elem_bytes, elem_bytes, pad) // 16) * 16
    return data + (0 if scatter else vector_table_entries(volume) * VECTOR_TABLE_BYTES)


# Where the gather conflicts (uint8 HWC -> CHW: a lane's 16 pixels of one channel lie c bytes
# apart), the box can be scattered on the load side instead (`scatter_chunk`,
# templates/vbox/scatter.cu.j2, `Pass.scatter`): shared memory holds the box in the output's
# order, each thread loads a chunk of the input run (`scatter` indices of the output's
# innermost dim times every element the input holds inside it: c channels of 16 pixels),
# turns it into the output's words by byte permutes in registers and stores each row's
# 4-16 bytes whole, consecutive lanes side by side (no conflicts); the output then leaves
# shared memory in whole vectors, without a table. A chunk is at most
# VECTOR_SCATTER_MAX_CHUNK bytes (its words stay in registers), a thread holds at most
# VECTOR_SCATTER_MAX_STEPS of them, and a warp's chunks lie in one row of the box (its
# innermost extent at least 32 chunks).
VECTOR_SCATTER_MAX_CHUNK = 64


VECTOR_SCATTER_MAX_STEPS = 2


VECTOR_SCATTER_ROW_BYTES = (4, 8, 16)


@dataclass(frozen=True)
class Dim:
    """One axis of the problem: `extent` indices, `in_stride` and `out_stride` apart (in
    elements of the plan or pass that holds it)."""

    extent: int
    in_stride: int
    out_stride: int


NO_DIM = Dim(1, 0, 0)  # an outer dim a launch does not walk


def pipeline_fits(elem_bytes: int, volume: int) -> bool:
    """Whether boxes of `volume` `elem_bytes`-byte elements can take the pipelined kernel
    (PACKED_PIPELINE_*; `packed.pipelines` is this rule)."""
    return (
        elem_bytes >= PACKED_PIPELINE_MIN_ELEM_BYTES
        and volume * elem_bytes <= PACKED_PIPELINE_MAX_BYTES
    )


def vector_widths(
    dims: Sequence[Dim], box: Sequence[int], elem_bytes: int, in_ptr: int = 0, out_ptr: int = 0
) -> tuple[int, int]:
    """The widest vectors (bytes, of VECTOR_WIDTHS; 0 for none) that move boxes of `box` of
    `dims` on the input and on the output side, between pointers of these addresses (only
    their value mod 16 is read): a vector is consecutive elements of the box in that side's
    memory order, so it must lie in one contiguous run and start aligned. On each side: the
    box's dims in the side's order (strides ascending) form a run while each stride is the
    run so far (a dim cut short ends it); the vector's elements must divide the run, every
    other box dim's stride and every dim's step from one box to the next (box extent x
    stride, where a dim has more than one box), and the pointer must be aligned to it.
    The vector box kernel (templates/vbox/vbox.cu.j2) relies on exactly this; tests/test_plan.py
    checks it against every vector's addresses."""
    e = elem_bytes
    found = []
    for side, ptr in (("in_stride", in_ptr), ("out_stride", out_ptr)):
        stride = operator.attrgetter(side)
        inside = sorted((k for k, b in enumerate(box) if b > 1), key=lambda k: (stride(dims[k]), k))
        run, prefix = 1, set()
        for k in inside:
            if stride(dims[k]) != run:
                break
            prefix.add(k)
            run *= box[k]
        width = 0
        for w in VECTOR_WIDTHS:
            n = w // e
            if w % e or n < 1 or ptr % w or run % n:
                continue
            if any(stride(dims[k]) % n for k in inside if k not in prefix):
                continue
            if any(
                box[k] * stride(d) % n
                for k, d in enumerate(dims)
                if 1 < d.extent and box[k] < d.extent
            ):
                continue
            width = w
            break
        found.append(width)
    return found[0], found[1]


def vector_box(
    dims: Sequence[Dim],
    elem_bytes: int,
    in_ptr: int = 0,
    out_ptr: int = 0,
    most_bytes: int = VECTOR_MAX_SMEM_BYTES,
) -> tuple[tuple[int, ...], tuple[int, int], int, int] | None:
    """The box and vector widths of a vector box pass (VECTOR_*) for `dims` (output memory
    order, outermost first), or None where none is worth one. Boxes grow along both sides'
    contiguous chains as `packed_box`'s do (run targets from 128 bytes up); a dim the box
    takes in part is also tried at the largest divisor of its extent under that part and
    taken whole (an edge box moves element by element: ViT's 14-element rows cut in boxes
    of 8 left half the boxes on that path, 21% of copy on an H100). A box is kept if both
    sides take vectors of VECTOR_MIN_BYTES and two elements or more, its runs are whole
    sectors (PACKED_MIN_RUN_BYTES), it holds VECTOR_MIN_BOX_BYTES, a thread moves at most
    VECTOR_MAX_STEPS vectors, and the output's gather conflicts in shared memory at most
    VECTOR_MAX_CONFLICTS ways (`gather_conflicts`, dense or padded), unless the box can be
    scattered on the load side instead (`scatter_chunk`: where the gather conflicts at all,
    the scatter takes it, without conflicts). Of those: the most boxes whole (at least VECTOR_MIN_WHOLE of
    them), then the widest vectors, then VECTOR_GOOD_BOX_BYTES, then runs of
    VECTOR_GOOD_RUN_BYTES, then the fewest conflicts and the smallest box. A gathering box
    is padded where that conflicts less (`_least_conflicts`). Returns the box, the vector
    widths (for a scattered box, its chunk's loads and the output's vectors), the scatter's
    chunk (0: the gather) and the pad (0: dense). `most_bytes`: only boxes of at most that
    many bytes of elements (VECTOR_SMALL_BOX_BYTES)."""
    e = elem_bytes
    chains = _chain(dims, "in_stride"), _chain(dims, "out_stride")
    if not all(chains) or any(d.extent > GATHER_MAX_EXTENT for d in dims) or _broadcast(dims):
        return None
    cap = VECTOR_MAX_SMEM_BYTES // (e + VECTOR_TABLE_BYTES)
    best, best_key = None, None
    for box in grown_boxes(dims, e, cap):
        volume = math.prod(box)
        widths = vector_widths(dims, box, e, in_ptr, out_ptr)
        if not (
            VECTOR_MIN_BOX_BYTES <= volume * e <= most_bytes
            and min(widths) >= max(VECTOR_MIN_BYTES, 2 * e)
            and _packable(dims, box, e)
            and all(-(-volume * e // w) <= VECTOR_MAX_STEPS * VECTOR_THREADS for w in widths)
        ):
            continue
        conflicts = gather_conflicts(dims, box, e, widths[1])
        scatter, loads = scatter_chunk(dims, box, e, widths[0]) if conflicts > 1 else (0, 0)
        pad = 0
        if scatter:
            widths, conflicts = (loads, widths[1]), 1.0
        else:
            conflicts, pad = _least_conflicts(dims, box, e, widths, conflicts)
            if conflicts > VECTOR_MAX_CONFLICTS:
                continue
        whole = math.prod(d.extent // b / -(-d.extent // b) for d, b in zip(dims, box, strict=True))
        key = (
            whole >= VECTOR_MIN_WHOLE,
            min(widths),
            min(volume * e, VECTOR_GOOD_BOX_BYTES),
            whole,
            min(min(packed_runs(dims, box)) * e, VECTOR_GOOD_RUN_BYTES),
            -conflicts,
            -volume,
        )
        if best_key is None or key > best_key:
            best, best_key = (tuple(box), widths, scatter, pad), key
    return best


def _least_conflicts(
    dims: Sequence[Dim], box: Sequence[int], e: int, widths: tuple[int, int], dense: float
) -> tuple[float, int]:
    """(ways, pad): the gather's conflicts in the box dense (`dense`, pad 0) or padded every
    P bytes (VECTOR_PAD_EVERY, where the input's vectors divide P and the padded box and its
    table fit VECTOR_MAX_SMEM_BYTES), the least; a pad only where it saves half a way."""
    volume = math.prod(box)
    best = (dense, 0)
    for pad in VECTOR_PAD_EVERY:
        if (
            pad % widths[0]
            or padded_offset(volume * e, e, pad) >= 1 << 16
            or vector_smem_bytes(volume, e, pad) > VECTOR_MAX_SMEM_BYTES
        ):
            continue
        ways = gather_conflicts(dims, box, e, widths[1], pad)
        if ways < best[0] - 0.5:
            best = (ways, pad)
    return best


def scatter_chunk(
    dims: Sequence[Dim], box: Sequence[int], elem_bytes: int, vin: int
) -> tuple[int, int]:
    """(q, loads): a thread's chunk of the scattering vector box (VECTOR_SCATTER_*) for boxes
    of `box` of `dims` whose input side takes `vin`-byte vectors (`vector_widths`), or (0, 0)
    where it cannot scatter (`scatter_options`). Of the chunks that fit: the widest loads,
    then enough chunks for every thread of a block, then the longest rows (the fewest shared
    stores)."""
    options = scatter_options(dims, box, elem_bytes, vin)
    if not options:
        return 0, 0
    volume = math.prod(box)

    def key(option: tuple[int, int, int]) -> tuple[int, bool, int]:
        q, loads, chunk = option
        return loads, volume * elem_bytes // chunk >= VECTOR_THREADS, q

    q, loads, _ = max(options, key=key)
    return q, loads


def scatter_options(
    dims: Sequence[Dim], box: Sequence[int], elem_bytes: int, vin: int
) -> list[tuple[int, int, int]]:
    """Every (q, loads, chunk bytes) the scattering vector box can move boxes of `box` of
    `dims` in. The output's innermost box dim x must lie in the input's run right after the
    dims before it there (the inner block: a pixel's channels), and not first; a chunk is q
    indices of x times the inner block, contiguous in the input, loaded in `loads`-byte
    vectors (dividing the chunk and `vin`); each of its rows (q elements of one inner
    index) is a whole 4-, 8- or 16-byte word of the box in the output's order; a warp's
    chunks lie in one row of the box (x's extent is 32 chunks or more)."""
    e = elem_bytes
    inside = [k for k, b in enumerate(box) if b > 1]
    if e > 2 or len(inside) < 2 or not vin:
        return []
    x = min(inside, key=lambda k: (dims[k].out_stride, k))
    in_order = sorted(inside, key=lambda k: (dims[k].in_stride, k))
    at = in_order.index(x)
    if at == 0:
        return []
    run = 1
    for k in in_order[: at + 1]:
        if dims[k].in_stride != run:
            return []
        run *= box[k]
    inner, volume = run // box[x], math.prod(box)
    found = []
    for row in VECTOR_SCATTER_ROW_BYTES:
        q = row // e
        chunk = q * inner * e
        if box[x] % q or box[x] < 32 * q or chunk > VECTOR_SCATTER_MAX_CHUNK:
            continue
        if -(-(volume * e // chunk) // VECTOR_THREADS) > VECTOR_SCATTER_MAX_STEPS:
            continue
        loads = next((w for w in VECTOR_WIDTHS if chunk % w == 0 and vin % w == 0), 0)
        if loads:
            found.append((q, loads, chunk))
    return found


def _divisor_under(extent: int, part: int) -> int:
    """The largest divisor of `extent` of at most `part` (1 at worst)."""
    found = _divisors(extent)
    return found[bisect.bisect_right(found, part) - 1]


@functools.lru_cache(maxsize=1024)
def _divisors(extent: int) -> tuple[int, ...]:
    """Every divisor of `extent`, ascending (trial division to its square root: a few
    milliseconds for the largest extents, once per extent in a process)."""
    low = [d for d in range(1, math.isqrt(extent) + 1) if extent % d == 0]
    return tuple(low + [extent // d for d in reversed(low) if d * d != extent])


def gather_conflicts(
    dims: Sequence[Dim], box: Sequence[int], elem_bytes: int, vout: int, pad: int = 0
) -> float:
    """How many ways a warp's shared loads of the vector box's output gather conflict, on
    average over a vector's elements and the first warps of a box: lane w gathers output
    vector w, element k of each lane at its offset in the box held in the input's order
    (templates/vbox/vbox.cu.j2); lanes reading one 4-byte word share it, words in one of the 32
    banks take a pass each. A box whose output order walks the input's order in long
    strides (uint8 HWC -> CHW: 16 pixels of one channel, 4 bytes apart, a lane 64 bytes
    from the next: 16 ways) waits on its shared loads. `pad`: the box padded as
    `VBoxKernel.pad` pads it (a word, or an 8-byte element, after every `pad` bytes)."""
    e = elem_bytes
    inside = [k for k, b in enumerate(box) if b > 1]
    out_order = sorted(inside, key=lambda k: (dims[k].out_stride, k))
    in_order = sorted(inside, key=lambda k: (dims[k].in_stride, k))
    dense, step = {}, 1
    for k in in_order:
        dense[k] = step
        step *= box[k]
    per = vout // e
    vectors = math.prod(box) // per
    if not vectors:
        return 0.0
    # the first four warps' vectors, element j of each: a row of 32 lanes per (warp, j)
    warps = -(-min(vectors, 4 * 32) // 32)
    lane = np.arange(warps * 32).reshape(warps, 1, 32)
    i = lane * per + np.arange(per).reshape(1, per, 1)
    at = np.zeros(i.shape, dtype=np.int64)
    for k in out_order:
        at += (i % box[k]) * dense[k]
        i = i // box[k]
    at = padded_offset(at * e, e, pad)
    word = np.sort(np.where(lane.reshape(warps, 1, 32) < vectors, at // 4, -1).reshape(-1, 32))
    # a bank's pass per distinct word: count each row's distinct words by bank, take the most
    fresh = np.ones(word.shape, dtype=bool)
    fresh[:, 1:] = word[:, 1:] != word[:, :-1]
    fresh &= word >= 0
    rows = np.nonzero(fresh)[0]
    per_bank = np.bincount(rows * 32 + word[fresh] % 32, minlength=word.shape[0] * 32)
    return float(per_bank.reshape(-1, 32).max(axis=1).mean())


def _chain(dims: Sequence[Dim], side: str) -> list[int]:
    """Indices of the dims that make one contiguous run on `side` ("in_stride" or
    "out_stride"), innermost first: the stride-1 dim, then each dim whose stride is the run
    so far, while there is one."""
    stride = operator.attrgetter(side)
    k = next((k for k, d in enumerate(dims) if stride(d) == 1 and d.extent > 1), None)
    chain = [] if k is None else [k]
    while chain:
        last = dims[chain[-1]]
        nxt = [
            j
            for j, d in enumerate(dims)
            if j not in chain and stride(d) == stride(last) * last.extent
        ]
        if not nxt:
            break
        chain.append(nxt[0])
    return chain


def _grow(dims: Sequence[Dim], chain: list[int], box: list[int], need: int) -> None:
    """Widen `box` along `chain` until its run there holds `need` elements (or the chain ends,
    or a dim is taken only in part: the run stops at it). A dim taken in part is taken to a
    power of two: its digit is then a shift and a mask, and boxes of many shapes share one
    kernel."""
    run = 1
    for k in chain:
        part = 1 << (-(-need // run) - 1).bit_length()
        box[k] = max(box[k], min(dims[k].extent, part))
        run *= box[k]
        if run >= need or box[k] < dims[k].extent:
            return


def packed_runs(dims: Sequence[Dim], box: Sequence[int]) -> tuple[int, int]:
    """The contiguous runs (elements) a box of `box` reads and writes: along each side's
    chain, the box's extents while the dims are taken whole, times the first partial one."""
    runs = []
    for side in ("in_stride", "out_stride"):
        run = 1
        for k in _chain(dims, side):
            run *= box[k]
            if box[k] < dims[k].extent:
                break
        runs.append(run)
    return runs[0], runs[1]


def grown_boxes(
    dims: Sequence[Dim], elem_bytes: int, cap: int, *, stop: bool = True
) -> Iterator[tuple[int, ...]]:
    """The boxes of at most `cap` elements the box searches try, each once: for each run
    target (PACKED_RUN_BYTES) the box grown along both sides' contiguous chains (`_grow`),
    and with each dim it takes in part also at the largest divisor of its extent under that
    part and whole; with `stop`, until a target's grown box holds more than `cap` (without,
    a longer target's divisors may still fit)."""
    chains = _chain(dims, "in_stride"), _chain(dims, "out_stride")
    seen: set[tuple[int, ...]] = set()
    for target in PACKED_RUN_BYTES:
        grown = [1] * len(dims)
        for chain in chains:
            _grow(dims, chain, grown, -(-target // elem_bytes))
        if stop and math.prod(grown) > cap:
            return
        cut = [k for k, d in enumerate(dims) if d.extent % grown[k]]
        options = [
            sorted({grown[k], _divisor_under(dims[k].extent, grown[k]), dims[k].extent})
            for k in cut
        ]
        for choice in itertools.product(*options):
            box = list(grown)
            for k, b in zip(cut, choice, strict=True):
                box[k] = b
            if tuple(box) not in seen and math.prod(box) <= cap:
                seen.add(tuple(box))
                yield tuple(box)


def whole_box(dims: Sequence[Dim], elem_bytes: int) -> tuple[int, ...] | None:
    """A packed box that no edge cuts, or None: `packed_box` takes dims in parts of powers of
    two, so where an extent is odd (63, 33) a box is cut short at every edge along it and
    those boxes move element by element (float64 3x33x5478x2x63 by (4,2,0,3,1) in boxes of
    32 x 32: 37.6% of copy on an H200; in 63 x 33, 65.1%). For each run target the box grown
    as `packed_box` grows it has each dim it takes in part also at the largest divisor of its
    extent under that part and whole (`vector_box`'s options); of the boxes that divide every
    extent, within PACKED_MAX_BYTES, with runs of PACKED_MIN_RUN_BYTES, the one whose shorter
    run is longest up to PACKED_WHOLE_RUN_BYTES, then the smallest of PACKED_MIN_ELEMS or
    more (a block's threads each moving a few), else the largest."""
    e = elem_bytes
    chains = _chain(dims, "in_stride"), _chain(dims, "out_stride")
    if not all(chains) or _broadcast(dims) or any(d.extent > GATHER_MAX_EXTENT for d in dims):
        return None
    best, best_key = None, None
    for box in grown_boxes(dims, e, PACKED_MAX_BYTES // e, stop=False):
        if edge_cut(dims, box):
            continue
        if not _packable(dims, box, e):
            continue
        volume = math.prod(box)
        run = min(packed_runs(dims, box)) * e
        key = (min(run, PACKED_WHOLE_RUN_BYTES), min(volume, PACKED_MIN_ELEMS), -volume)
        if best_key is None or key > best_key:
            best, best_key = tuple(box), key
    return best


# A box whose written run takes the output's inner dims whole (`long_out_box`): its reads
# are runs of one 128-byte line (PACKED_RUN_BYTES[0]) and it holds at most this many bytes.
# Where the output's innermost dims are short and odd (37 x 3 floats), the grown boxes cut
# them and leave each box's written runs sharing their edge sectors with another box's: H200,
# float32 180x37x3x3326 by (0,3,2,1), boxes of 32 x 1 x 32 31.8% of a copy and 64 x 2 x 37
# 38.2 (the batched transpose served 39.7, torch.compile 61.6), 32 x 3 x 37 (13 KB, one
# written run) 73.9 and 16 x 3 x 37 75.3, 64 x 3 x 37 (27 KB, fewer blocks) 51.0.
LONG_OUT_MAX_BYTES = 16 << 10


def long_out_box(dims: Sequence[Dim], elem_bytes: int) -> tuple[int, ...] | None:
    """A packed box that reads runs of a line and writes one long run: grown along the
    input's chain to PACKED_RUN_BYTES[0], then each dim of the output's chain taken whole,
    innermost first, while the box stays within LONG_OUT_MAX_BYTES (the first dim that does
    not fit ends the written run). None where that box writes runs no longer than the box a
    first call already races (`packed_box`'s), or the box kernels cannot take it."""
    e = elem_bytes
    chains = _chain(dims, "in_stride"), _chain(dims, "out_stride")
    if not all(chains) or _broadcast(dims) or any(d.extent > GATHER_MAX_EXTENT for d in dims):
        return None
    box = [1] * len(dims)
    _grow(dims, chains[0], box, -(-PACKED_RUN_BYTES[0] // e))
    for k in chains[1]:
        whole = [*box[:k], dims[k].extent, *box[k + 1 :]]
        if math.prod(whole) * e > LONG_OUT_MAX_BYTES:
            break
        box = whole
    raced = packed_box(dims, e)
    if raced is None or packed_runs(dims, box)[1] <= packed_runs(dims, raced)[1]:
        return None
    return tuple(box) if _packable(dims, box, e) else None


def word_box(
    dims: Sequence[Dim], elem_bytes: int, box: Sequence[int], out_ptr: int = 0
) -> tuple[int, ...] | None:
    """`box` (of 1- or 2-byte elements) with its output run taken on along the output's
    contiguous chain until the output side moves in aligned words, or None where it already
    does or cannot. The packed kernels write words only where every box starts a whole word
    from the last (`vector_widths`: box steps and strides outside the run whole words); an
    output row of odd bytes (bool 2x13x84x130x1098 by (0,3,2,4,1): rows of 13 x 1098 bytes)
    leaves every box's run misaligned, so the box moves byte by byte (20.7% of copy on an
    H200). Taking the chain's next dim in a part that makes its step whole words (2 of 84
    rows there), or whole and then the next, puts both rows in one run of whole words: the
    spread and words kernels take it. The dim the run ends at takes the smallest divisor of
    its extent (no smaller than its part) whose step is whole words, else its whole extent
    and the chain goes on; the box stays within PACKED_MAX_BYTES."""
    e = elem_bytes
    if e > 2 or vector_widths(dims, box, e, 0, out_ptr)[1] >= PACKED_WORD_BYTES:
        return None
    grown = list(box)
    for k in _chain(dims, "out_stride"):
        d = dims[k]
        if grown[k] == d.extent:
            continue
        part = next(
            (
                b
                for b in _divisors(d.extent)
                if b >= grown[k] and b * d.out_stride * e % PACKED_WORD_BYTES == 0
            ),
            None,
        )
        grown[k] = part or d.extent
        if part:
            break
    grown_t = tuple(grown)
    if (
        grown_t == tuple(box)
        or math.prod(grown) * e > PACKED_MAX_BYTES
        or vector_widths(dims, grown_t, e, 0, out_ptr)[1] < PACKED_WORD_BYTES
        or not _packable(dims, grown_t, e)
    ):
        return None
    return grown_t


def realigned_out(
    dims: Sequence[Dim], box: Sequence[int], elem_bytes: int, out_ptr: int = 0
) -> bool:
    """Whether boxes of `box` (1- or 2-byte elements) write output runs that start off a
    word (odd output strides or pointer: `vector_widths` gives the output side no words) and
    the spread kernel's realigned variant can take them: the run (the box's leading dims in
    the output's order, one contiguous run) ends before the input's innermost box dim, so it
    lies whole in one slab of the kernel's shared box. Such a box otherwise moves element by
    element, and which is faster depends on the box (H200: bool 20861x308x6x3x1 by
    (3,1,0,2,4) 16.8 -> 37.8% of a copy, uint8 2637x3025x4x2 by (3,1,2,0) 19.6 -> 26.9, but
    float16 70x47x21x55x9 by (0,2,4,3,1), input rows of 18 bytes, 46.3 -> 39.2), so a first
    call races the two."""
    e = elem_bytes
    if e > 2 or vector_widths(dims, box, e, 0, out_ptr)[1] >= PACKED_WORD_BYTES:
        return False
    i0 = next((j for j, d in enumerate(dims) if d.in_stride == 1 and box[j] > 1), None)
    run = out_run_dims(dims, box)
    return i0 is not None and sum(b > 1 for b in box) >= 2 and bool(run) and i0 not in run


def out_run_dims(dims: Sequence[Dim], box: Sequence[int]) -> list[int]:
    """The box dims (indices into `dims`, innermost first) whose elements form one contiguous
    run of the output: in the output's order, each dim's stride is the product of the box
    extents before it, from stride 1 (a dim taken in part ends the run after it)."""
    inside = sorted((j for j, b in enumerate(box) if b > 1), key=lambda j: (dims[j].out_stride, j))
    run, taken = 1, []
    for j in inside:
        if dims[j].out_stride != run:
            break
        run *= box[j]
        taken.append(j)
    return taken


def edge_cut(dims: Sequence[Dim], box: Sequence[int]) -> bool:
    """Whether boxes of `box` leave a cut box at the edge of some dim of `dims`."""
    return any(d.extent % b for d, b in zip(dims, box, strict=True))


def _broadcast(dims: Sequence[Dim]) -> bool:
    """Whether an input dim is broadcast (stride 0): the box kernels' tables and runs assume
    each box element is read from its own place, so such inputs keep the tile, row and gather
    kernels, which take stride 0 as any other stride."""
    return any(d.in_stride == 0 and d.extent > 1 for d in dims)


def packed_box(
    dims: Sequence[Dim], elem_bytes: int, min_elems: int | None = None
) -> tuple[int, ...] | None:
    """The box a packed pass moves `dims` (output memory order, outermost first) in: one
    extent per dim, or None where no box is worth one (runs under PACKED_MIN_RUN_BYTES on
    either side, more than PACKED_MAX_BOX_DIMS dims in it, or too many boxes to count).

    For each run target in PACKED_RUN_BYTES, the box takes dims along the input's
    contiguous chain until its read run is that long, and likewise along the output's; dims
    on both chains count once (the larger extent). The first box of `min_elems` elements
    (PACKED_MIN_ELEMS unless given) is taken, else the largest within PACKED_MAX_BYTES."""
    e = elem_bytes
    min_elems = PACKED_MIN_ELEMS if min_elems is None else min_elems
    chains = _chain(dims, "in_stride"), _chain(dims, "out_stride")
    if not all(chains) or _broadcast(dims):
        return None
    best = None
    for target in PACKED_RUN_BYTES:
        box = [1] * len(dims)
        for chain in chains:
            _grow(dims, chain, box, -(-target // e))
        volume = math.prod(box)
        if volume * e > PACKED_MAX_BYTES:
            break
        best = tuple(box)
        if volume >= min_elems:
            break
    if best is None:
        return None
    if not _packable(dims, best, e) or any(d.extent > GATHER_MAX_EXTENT for d in dims):
        return None
    return best


def _packable(dims: Sequence[Dim], box: Sequence[int], elem_bytes: int) -> bool:
    """Whether the box kernels take boxes of `box`: runs of PACKED_MIN_RUN_BYTES on both
    sides, at most PACKED_MAX_BOX_DIMS dims in the box, at most PACKED_MAX_TILES boxes."""
    tiles = math.prod(-(-d.extent // b) for d, b in zip(dims, box, strict=True))
    return (
        min(packed_runs(dims, box)) * elem_bytes >= PACKED_MIN_RUN_BYTES
        and sum(b > 1 for b in box) <= PACKED_MAX_BOX_DIMS
        and tiles <= PACKED_MAX_TILES
    )

"""The vector box pass (templates/vbox/vbox.cu.j2): a packed pass whose boxes move in whole vectors
on both sides, for the boxes `plan.vector_box` finds (plan.VECTOR_* says why and when).

Two strategies, one template piece each. The gather (templates/vbox/gather.cu.j2): a block
loads its box in the input's vectors into shared memory, where it lies in the input's order,
then writes it in the output's vectors, gathering each vector's elements from shared memory
at the offsets of a table (one 2-byte entry per element, in output order). The table depends
only on the box's shape and orders, so it is computed here and compiled into the kernel; a
block copies it into shared memory once. The scatter (templates/vbox/scatter.cu.j2, where the
gather would conflict: `plan.scatter_chunk`): each thread loads a chunk of the input's run,
permutes its bytes into rows of the output's order in registers (`_scatter_lines`) and stores
them whole into shared memory, which then holds the box in the output's order; output vectors
leave it as they lie. Boxes an edge cuts move element by element.

The kernel takes the packed kernels' `at_packed_args` (`packed.packed_args` computes them),
so the grid walk, the box corners and the edge limits are theirs. Pure (no CUDA), as
`_packed` is: `render_vbox` turns a spec into source, `launch.make_vbox` into a launch, and
tests/test_vbox.py runs the rendered kernel on the CPU against NumPy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._version import __version__
from ..errors import ShapeError
from ..plans.boxes import (
    VECTOR_MAX_SMEM_BYTES,
    VECTOR_MAX_STEPS,
    VECTOR_PAD_EVERY,
    VECTOR_SCATTER_MAX_CHUNK,
    VECTOR_SCATTER_MAX_STEPS,
    VECTOR_SCATTER_ROW_BYTES,
    VECTOR_TABLE_BYTES,
    VECTOR_THREADS,
    VECTOR_WIDTHS,
    Dim,
    padded_offset,
    scatter_options,
    vector_pad_bytes,
    vector_smem_bytes,
    vector_table_entries,
    vector_widths,
)
from .codegen import _ELEMENT_TYPES, VBOX_TEMPLATE, _environment
from .packed import ARG_BYTES, MAX_BOX_DIMS, MAX_GRID_DIMS, packed_args

THREADS = VECTOR_THREADS
# Resident blocks a kernel is compiled for (__launch_bounds__: at most 64 registers a thread)
# and the grid is made of: a box of up to VECTOR_MAX_SMEM_BYTES with its table leaves room for
# five an SM, and four keep about 40 KB of loads in flight an SM.
BLOCKS_PER_SM = 4
# The scatter has no table: its box alone in shared memory (at most 12 KB for the images) and
# 26-40 registers a thread leave room for six or eight blocks an SM, whose loads would overlap
# the other blocks' stores. Tried on an H100 (uint8 HWC -> CHW, the plan's pass, 2 / 3 / 4
# channels, % of copy): four blocks 85.6 / 84.2 / 94.0, six 85.9 / 83.3 / 90.6, eight 86.8 /
# 83.1 / 92.2; so four, as the gather.
SCATTER_BLOCKS_PER_SM = 4
# The gather's boxes in flight an SM: a box of 9.6 KB or less gets more than BLOCKS_PER_SM
# blocks, up to VECTOR_BLOCKS_MAX (their registers capped at 40 and 32). H200, float32 permutes, % of a
# copy at 4 / 6 / 8 blocks (dev/box_sweep.py --vbox-blocks): a 2 KB box 52.5 / 66.4 / 74.6,
# 4 KB boxes 77.1 / 87.3 / 94.6 and 75.7 / 85.7 / 92.6, an 8 KB box 91.5 / 94.4 / 91.7, boxes
# of 16 and 22 KB 87.2 / 85.6 / 87.5 and 87.9 / 84.7 / 87.3. As served, 5 blocks of an 11.5 KB
# box lost (int16 2x665960x9x8 92.2 -> 87.5), so the flight is a cap: 4 blocks from 9.6 KB.
VECTOR_FLIGHT_BYTES = 48 << 10
# what `VBoxKernel.blocks` may ask for (8 blocks of 256 threads leave a thread 32 registers)
VECTOR_BLOCKS_MIN, VECTOR_BLOCKS_MAX = 2, 8
# vectors a thread moves a box (in and out) that fit 32 registers: on sm_90 none of 34 random
# boxes with 4 or fewer spilled at 8 blocks, 4 of 16 with 6 to 12 did (8-112 bytes); at 6
# blocks (40 registers) none of the 50 did. Boxes that move more stop at VECTOR_BLOCKS_MANY.
VECTOR_STEPS_AT_MAX = 4
VECTOR_BLOCKS_MANY = 6
_VECTOR_TYPES = {4: "u32", 8: "uint2", 16: "uint4"}
_ROW = 16  # the table is copied in 16-byte rows


@dataclass(frozen=True)
class VBoxKernel:
    """What a vector box kernel is compiled for: `elem_bytes`-byte elements in boxes of `box`
    (the output's memory order, innermost first), read in `in_order` (the box dims in the
    input's order, innermost first), `checked` dims cut at an edge, `wide` 64-bit offsets in
    a box, `vin` / `vout` bytes a vector on the input / output side; `scatter`: the
    scatter's chunks of that many indices of the output's innermost dim, loaded in `vin`-byte
    vectors (0: the gather). Everything here flows into CUDA source: `__post_init__` checks
    it all."""

    elem_bytes: int
    box: tuple[int, ...]
    in_order: tuple[int, ...]
    checked: tuple[bool, ...]
    wide: bool
    vin: int
    vout: int
    scatter: int = 0
    pad: int = 0
    blocks: int = 0  # resident blocks an SM, compiled and launched for (0: `blocks_per_sm`'s rule)

    def __post_init__(self) -> None:
        n, e = len(self.box), self.elem_bytes
        if e not in (1, 2, 4, 8):
            raise ShapeError(f"a vector box of {e!r}-byte elements: 1, 2, 4 or 8")
        if not 1 <= n <= MAX_BOX_DIMS or not all(type(b) is int and b >= 1 for b in self.box):
            raise ShapeError(f"a vector box {self.box!r}: 1 to {MAX_BOX_DIMS} positive extents")
        if sorted(self.in_order) != list(range(n)) or not all(
            type(k) is int for k in self.in_order
        ):
            raise ShapeError(
                f"vector box order {self.in_order!r} is not a permutation of range({n})"
            )
        if len(self.checked) != n or not all(type(c) is bool for c in (*self.checked, self.wide)):
            raise ShapeError(f"vector box checks {self.checked!r}, wide {self.wide!r}: bools")
        for w in (self.vin, self.vout):
            if w not in VECTOR_WIDTHS or w < 2 * e or self.volume % (w // e):
                raise ShapeError(
                    f"{w!r}-byte vectors of {e}-byte elements in a box of {self.volume}: "
                    f"one of {VECTOR_WIDTHS} bytes, two elements or more, dividing the box"
                )
        if type(self.scatter) is not int or self.scatter < 0:
            raise ShapeError(f"a vector box's scatter {self.scatter!r}: a count of indices")
        if self.scatter and not (
            e <= 2
            and self.in_order[0] != 0
            and self.scatter * e in VECTOR_SCATTER_ROW_BYTES
            and self.box[0] % self.scatter == 0
            and self.chunk_bytes <= VECTOR_SCATTER_MAX_CHUNK
            and self.chunk_bytes % self.vin == 0
            and self.steps[0] <= VECTOR_SCATTER_MAX_STEPS
        ):
            raise ShapeError(
                f"a vector box of {self.box} in the input's order {self.in_order} cannot scatter "
                f"chunks of {self.scatter} in {self.vin}-byte loads ({e}-byte elements): see "
                "plan.scatter_options"
            )
        if type(self.pad) is not int or (
            self.pad and (self.scatter or self.pad not in VECTOR_PAD_EVERY or self.pad % self.vin)
        ):
            raise ShapeError(
                f"a vector box's pad every {self.pad!r} bytes: 0, or for the gather one of "
                f"{VECTOR_PAD_EVERY} that its {self.vin}-byte input vectors divide"
            )
        if type(self.blocks) is not int or not (
            self.blocks == 0 or VECTOR_BLOCKS_MIN <= self.blocks <= VECTOR_BLOCKS_MAX
        ):
            raise ShapeError(
                f"a vector box's blocks an SM {self.blocks!r}: 0 (the default) or "
                f"{VECTOR_BLOCKS_MIN} to {VECTOR_BLOCKS_MAX}"
            )
        if self.smem_bytes > VECTOR_MAX_SMEM_BYTES or self.padded(self.volume * e) >= 1 << 16:
            raise ShapeError(
                f"a vector box of {self.volume} {e}-byte elements: its elements and table take "
                f"{self.smem_bytes} bytes of shared memory, at most {VECTOR_MAX_SMEM_BYTES}"
            )
        if max(self.steps) > VECTOR_MAX_STEPS:
            raise ShapeError(
                f"a vector box of {self.volume} {e}-byte elements in {self.vin}- and "
                f"{self.vout}-byte vectors: {max(self.steps)} vectors a thread, at most "
                f"{VECTOR_MAX_STEPS}"
            )

    @property
    def volume(self) -> int:
        return math.prod(self.box)

    @property
    def inner(self) -> int:
        """The scatter's inner block: elements the input holds inside each index of the
        output's innermost dim (the box dims before it in the input's order)."""
        return math.prod(self.box[d] for d in self.in_order[: self.in_order.index(0)])

    @property
    def chunk_bytes(self) -> int:
        """Bytes of a scatter's chunk (0 for the gather)."""
        return self.scatter * self.inner * self.elem_bytes

    @property
    def vectors(self) -> tuple[int, int]:
        """Vectors of a box on the input side (the scatter's chunks) and on the output side."""
        v = self.volume * self.elem_bytes
        return v // (self.chunk_bytes or self.vin), v // self.vout

    @property
    def steps(self) -> tuple[int, int]:
        """Vectors a thread moves per box, in and out."""
        return -(-self.vectors[0] // THREADS), -(-self.vectors[1] // THREADS)

    @property
    def pad_bytes(self) -> int:
        """Bytes of each pad (`plan.vector_pad_bytes`)."""
        return vector_pad_bytes(self.elem_bytes, self.pad)

    def padded(self, offset: int) -> int:
        """Where byte `offset` of the box in the input's order lies in shared memory
        (`plan.padded_offset`)."""
        return padded_offset(offset, self.elem_bytes, self.pad)

    @property
    def table_entries(self) -> int:
        return 0 if self.scatter else vector_table_entries(self.volume)

    @property
    def smem_bytes(self) -> int:
        return vector_smem_bytes(self.volume, self.elem_bytes, self.pad, bool(self.scatter))

    @property
    def blocks_per_sm(self) -> int:
        """Resident blocks an SM the kernel is compiled and launched for: `blocks` where
        given; for the gather, as many as VECTOR_FLIGHT_BYTES of boxes an SM holds, from
        BLOCKS_PER_SM to VECTOR_BLOCKS_MAX (VECTOR_BLOCKS_MANY where a thread moves more
        than VECTOR_STEPS_AT_MAX vectors a box); for the scatter, SCATTER_BLOCKS_PER_SM."""
        if self.blocks or self.scatter:
            return self.blocks or SCATTER_BLOCKS_PER_SM
        fit = VECTOR_FLIGHT_BYTES // (self.volume * self.elem_bytes)
        most = VECTOR_BLOCKS_MAX if sum(self.steps) <= VECTOR_STEPS_AT_MAX else VECTOR_BLOCKS_MANY
        return min(most, max(BLOCKS_PER_SM, fit))

    @property
    def name(self) -> str:
        """The kernel's `extern "C"` name: everything it is compiled for."""
        box = "x".join(map(str, self.box))
        order = "".join(map(str, self.in_order))
        checks = "".join("c" if c else "f" for c in self.checked)
        return (
            f"at_vbox_s{self.elem_bytes}_b{box}_i{order}_{checks}_"
            f"{'w' if self.wide else 'n'}_v{self.vin}x{self.vout}"
            + (f"_q{self.scatter}_k{self.blocks_per_sm}" if self.scatter else "")
            + (f"_p{self.pad}" if self.pad else "")
            + (f"_k{self.blocks}" if self.blocks and not self.scatter else "")
        )


def table(k: VBoxKernel) -> list[int]:
    """The kernel's table: for each element of a box in output order, its byte offset in the
    box as shared memory holds it (in the input's order, dense or padded: `VBoxKernel.pad`);
    zeros pad it to whole rows. The scatter has none (its box lies in the output's order)."""
    if k.scatter:
        return []
    dense = [0] * len(k.box)
    step = 1
    for d in k.in_order:
        dense[d] = step
        step *= k.box[d]
    out = []
    for i in range(k.volume):
        offset = 0
        for d, b in enumerate(k.box):  # output order, innermost first
            offset += (i % b) * dense[d]
            i //= b
        out.append(k.padded(offset * k.elem_bytes))
    return out + [0] * (k.table_entries - len(out))


def vbox_spec(
    elem_bytes: int,
    dims: Sequence[Dim],
    box: Sequence[int],
    vectors: tuple[int, int],
    in_ptr: int = 0,
    out_ptr: int = 0,
    scatter: int = 0,
    pad: int = 0,
    blocks: int = 0,
) -> tuple[VBoxKernel, tuple[int, ...]]:
    """The kernel and the `at_packed_args` values that move `dims` (output memory order,
    outermost first) in boxes of `box` in vectors of `vectors` bytes (in, out) between
    pointers of these addresses, scattering chunks of `scatter` (0: gathering), the
    gather's shared box padded every `pad` bytes (0: dense), `blocks` resident an SM (0: the
    default). Raises ShapeError where the vectors do not fit the box or the pointers
    (`plan.vector_widths`: each width must divide the widest that does), or the box cannot
    scatter so (`plan.scatter_options`)."""
    widest = vector_widths(dims, box, elem_bytes, in_ptr, out_ptr)
    if any(not w or m % w for w, m in zip(vectors, widest, strict=True)):
        raise ShapeError(
            f"{vectors[0]}- and {vectors[1]}-byte vectors for dims "
            f"{[(d.extent, d.in_stride, d.out_stride) for d in dims]} in boxes {tuple(box)} at "
            f"pointers {in_ptr % 16} and {out_ptr % 16} (mod 16): at most {widest}"
        )
    if scatter and scatter not in {
        q for q, *_ in scatter_options(dims, box, elem_bytes, widest[0])
    }:
        raise ShapeError(
            f"a vector box of {tuple(box)} for dims "
            f"{[(d.extent, d.in_stride, d.out_stride) for d in dims]} cannot scatter chunks of "
            f"{scatter}: plan.scatter_options allows "
            f"{[q for q, *_ in scatter_options(dims, box, elem_bytes, widest[0])]}"
        )
    args = packed_args(elem_bytes, dims, box, in_ptr, out_ptr, words=False, spread=False)
    p = args.kernel
    spec = VBoxKernel(
        elem_bytes, p.box, p.in_order, p.checked, p.wide, *vectors, scatter, pad, blocks
    )
    return spec, args.values()


def _gather_lines(e: int, nout: int, vout: int) -> list[str]:
    """C statements that gather output vector `w`'s `nout` elements from shared memory at
    the table's offsets into `r` (a `vout`-byte vector)."""
    lines = []
    entries = []  # C expressions of the table's entries, as 16-bit halves of 32-bit words
    if nout >= 8:
        for q in range(nout // 8):
            lines.append(f"const uint4 q{q} = *(const uint4*)(tab + w * {nout}u + {8 * q}u);")
            entries += [f"q{q}.{c}" for c in "xyzw"]
    elif nout == 4:
        lines.append("const uint2 q0 = *(const uint2*)(tab + w * 4u);")
        entries += ["q0.x", "q0.y"]
    else:
        lines.append(f"const u32 q0 = *(const u32*)(tab + w * {nout}u);")
        entries.append("q0")
    offs = [f"({entries[k // 2]} {'& 0xffffu' if k % 2 == 0 else '>> 16'})" for k in range(nout)]
    words = []
    if e == 1:
        lines += [f"const u32 b{k} = box[{o}];" for k, o in enumerate(offs)]
        for m in range(nout // 4):
            b = [f"b{4 * m + j}" for j in range(4)]
            words.append(
                f"__byte_perm(__byte_perm({b[0]}, {b[1]}, 0x0040), "
                f"__byte_perm({b[2]}, {b[3]}, 0x0040), 0x5410)"
            )
    elif e == 2:
        lines += [
            f"const u32 h{k} = *(const unsigned short*)(box + {o});" for k, o in enumerate(offs)
        ]
        words = [f"__byte_perm(h{2 * m}, h{2 * m + 1}, 0x5410)" for m in range(nout // 2)]
    elif e == 4:
        lines += [f"const u32 u{k} = *(const u32*)(box + {o});" for k, o in enumerate(offs)]
        words = [f"u{k}" for k in range(nout)]
    else:
        lines += [f"const uint2 u{k} = *(const uint2*)(box + {o});" for k, o in enumerate(offs)]
        words = [f"u{k}.{c}" for k in range(nout) for c in "xy"]
    if vout == 4:
        lines.append(f"const u32 r = {words[0]};")
    else:
        lines.append(f"{_VECTOR_TYPES[vout]} r;")
        lines += [f"r.{c} = {w};" for c, w in zip("xyzw", words, strict=False)]
    return lines


def _permutes(
    targets: Sequence[Sequence[int]], word: Callable[[int], str]
) -> tuple[list[str], list[str]]:
    """Byte permutes that build words from a chunk's bytes: for each target (the chunk's byte
    positions of its 4 bytes, lowest first) a C expression, after the returned statements.
    A target from one or two of the chunk's words is one permute; from three or four, one of
    the first two words' bytes (shared with other targets from the same two where 4 bytes
    hold them all: a 4 x 4 byte transpose takes 8 permutes, not 12) and one with the rest."""
    slots: list[tuple[tuple[int, int], list[int]]] = []  # intermediates: (words, byte positions)

    def held(pair: tuple[int, int], want: list[int]) -> int:
        for n, (key, got) in enumerate(slots):
            if key == pair and len(set(got) | set(want)) <= 4:
                got += [p for p in want if p not in got]
                return n
        slots.append((pair, list(dict.fromkeys(want))))
        return len(slots) - 1

    def select(positions: Sequence[int], lo: Callable[[int], int], hi: Callable[[int], int]) -> str:
        sel = 0
        for b, pos in enumerate(positions):
            sel |= (lo(pos) if lo(pos) >= 0 else 4 + hi(pos)) << (4 * b)
        return f"0x{sel:04x}"

    finals: list[tuple[str, Any]] = []
    for target in targets:
        words = sorted({p // 4 for p in target})
        if len(words) == 1 and list(target) == [4 * words[0] + b for b in range(4)]:
            finals.append(("word", words[0]))
        elif len(words) <= 2:
            finals.append(("pair", (words[0], words[-1], tuple(target))))
        else:
            first, rest = (words[0], words[1]), words[2:]
            a = held(first, [p for p in target if p // 4 in first])
            b = (
                held((rest[0], rest[-1]), [p for p in target if p // 4 in rest])
                if len(rest) == 2
                else None
            )
            finals.append(("two", (a, b, rest[0], tuple(target))))
    lines = [
        f"const u32 t{n} = __byte_perm({word(pair[0])}, {word(pair[1])}, "
        + select(got, lambda p, w=pair[0]: p % 4 if p // 4 == w else -1, lambda p: p % 4)
        + ");"
        for n, (pair, got) in enumerate(slots)
    ]
    exprs = []
    for how, what in finals:
        if how == "word":
            exprs.append(word(what))
        elif how == "pair":
            lo_w, hi_w, target = what
            exprs.append(
                f"__byte_perm({word(lo_w)}, {word(hi_w)}, "
                + select(target, lambda p, w=lo_w: p % 4 if p // 4 == w else -1, lambda p: p % 4)
                + ")"
            )
        else:
            a, b, single, target = what
            got_a = slots[a][1]
            if b is None:
                hi_name, hi_at = word(single), (lambda p: p % 4)
            else:
                got_b = slots[b][1]
                hi_name, hi_at = f"t{b}", got_b.index
            exprs.append(
                f"__byte_perm(t{a}, {hi_name}, "
                + select(target, lambda p, g=got_a: g.index(p) if p in g else -1, hi_at)
                + ")"
            )
    return lines, exprs


def _scatter_lines(k: VBoxKernel) -> list[str]:
    """C statements that turn chunk `v[j]` (`k.vin`-byte vectors) into its rows in the
    output's order and store each whole at `box + tdst[j]` plus the row's place: row i holds
    element i of the inner block for the chunk's `k.scatter` indices of the output's
    innermost dim."""
    e, q, inner = k.elem_bytes, k.scatter, k.inner
    per = k.vin // 4  # 4-byte words a load vector holds

    def word(w: int) -> str:
        return f"v[j][{w // per}]" + (f".{'xyzw'[w % per]}" if per > 1 else "")

    pre = k.in_order[: k.in_order.index(0)]
    dense = [math.prod(k.box[:d]) for d in range(len(k.box))]
    row_words = q * e // 4
    targets, places = [], []
    for i in range(inner):
        rest, place = i, 0
        for d in pre:
            place += (rest % k.box[d]) * dense[d] * e
            rest //= k.box[d]
        places.append(place)
        for r in range(row_words):
            targets.append([((4 * r + b) // e * inner + i) * e + (4 * r + b) % e for b in range(4)])
    lines, exprs = _permutes(targets, word)
    row_type = _VECTOR_TYPES[q * e]
    for i, place in enumerate(places):
        words = exprs[i * row_words : (i + 1) * row_words]
        value = words[0] if row_words == 1 else f"make_{row_type}({', '.join(words)})"
        lines.append(f"*({row_type}*)(box + tdst[j] + {place}u) = {value};")
    return lines


def render_vbox(k: VBoxKernel) -> str:
    """The CUDA source of vector box kernel `k` (`k.name`)."""
    if not isinstance(k, VBoxKernel):  # checked specs only reach CUDA
        raise TypeError("render_vbox() takes a VBoxKernel")
    e, n = k.elem_bytes, len(k.box)
    dims = list(range(n))
    nin, nout = k.vin // e, k.vout // e
    sin, sout = k.steps
    nvin, nvout = k.vectors
    tab = table(k)
    dense = [math.prod(k.box[:d]) for d in dims]  # the box in the output's order (elements)
    pre = k.in_order[: k.in_order.index(0)] if k.scatter else ()
    return (
        _environment()
        .get_template(VBOX_TEMPLATE)
        .render(
            k=k,
            piece="scatter" if k.scatter else "gather",
            version=__version__,
            threads=THREADS,
            min_blocks=k.blocks_per_sm,
            max_box=MAX_BOX_DIMS,
            max_grid=MAX_GRID_DIMS,
            args_bytes=ARG_BYTES,
            etype=dict(_ELEMENT_TYPES)[e],
            vin_type=_VECTOR_TYPES[k.vin],
            vout_type=_VECTOR_TYPES[k.vout],
            dims=dims,
            checked=[d for d in dims if k.checked[d]],
            inside=" && ".join(f"d{d} < lim{d}" for d in dims if k.checked[d]) or "true",
            full=" && ".join(f"lim{d} == {k.box[d]}u" for d in dims if k.checked[d]) or "true",
            in_offset=" + ".join(f"(off_t)d{d} * is{d}" for d in dims),
            out_offset=" + ".join(f"(off_t)d{d} * os{d}" for d in dims),
            nin=nin,
            nout=nout,
            sin=sin,
            sout=sout,
            nvin=nvin,
            nvout=nvout,
            in_ragged=sin * THREADS != nvin,
            out_ragged=sout * THREADS != nvout,
            table=tab,
            pad_bytes=k.pad_bytes,
            table_rows=len(tab) * VECTOR_TABLE_BYTES // _ROW,
            data_bytes=k.smem_bytes - len(tab) * VECTOR_TABLE_BYTES,
            gather=[] if k.scatter else _gather_lines(e, nout, k.vout),
            scatter=_scatter_lines(k) if k.scatter else [],
            inner=k.inner if k.scatter else 0,
            chunk_bytes=k.chunk_bytes,
            chunk_elems=k.chunk_bytes // e,
            row_bytes=k.scatter * e,
            loads=k.chunk_bytes // k.vin,
            dense_offset=" + ".join(f"d{d} * {dense[d] * e}u" for d in dims if d not in pre),
            edge_dense=" + ".join(f"d{d} * {dense[d]}u" for d in dims),
        )
    )

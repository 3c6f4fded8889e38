"""Shape classes: the key under which tuning results are stored and looked up.

A class buckets each of batch, rows and columns to the next power of two and records the
widest vector the call allows, so a tuned config is only ever served to calls it can run.
The strides of a call (its `Layout`) are not part of the key: they decide the widest vector,
which is, and nothing else about which configs fit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import LayoutError, ShapeError
from ..plans.layout import disjoint
from ..plans.permute import Pass
from .config import KernelConfig


def max_vec(elem_bytes: int, *extents_and_strides: int, pointers: Iterable[int] = ()) -> int:
    """Largest usable `vec` for a call: every row length, pitch and pointer must be a whole
    number of vectors, and every vector aligned to its width."""
    v = 16 // elem_bytes
    while v > 1:
        w = v * elem_bytes
        if (
            (v * elem_bytes >= 4)
            and all(x % v == 0 for x in extents_and_strides)
            and all(p % w == 0 for p in pointers)
        ):
            return v
        v //= 2
    return 1


_MAX_BUCKET = 1 << 24
_PATTERN = re.compile(r"(\d+)x(\d+)x(\d+)/v(\d+)")


def _bucket(x: int) -> int:
    return min(_MAX_BUCKET, 1 << max(0, math.ceil(math.log2(max(x, 1)))))


@dataclass(frozen=True, order=True)
class ShapeClass:
    """(batch, rows, columns) bucketed to powers of two, and the widest usable `vec`."""

    batch: int
    m: int
    n: int
    vec: int

    def __post_init__(self) -> None:
        for name in ("batch", "m", "n", "vec"):
            v = getattr(self, name)
            if type(v) is not int or v < 1 or v & (v - 1) or v > _MAX_BUCKET:
                raise ShapeError(f"shape class field {name}={v!r} must be a power of two >= 1")
        if self.vec > 16:
            raise ShapeError(f"shape class vec={self.vec} must be at most 16")

    def __str__(self) -> str:
        return f"{self.batch}x{self.m}x{self.n}/v{self.vec}"

    @classmethod
    def parse(cls, text: str) -> ShapeClass:
        """Parse '1x8192x8192/v4' (untrusted input: anything else is rejected)."""
        m = _PATTERN.fullmatch(text) if isinstance(text, str) else None
        if m is None:
            raise ShapeError(
                f"{text!r:.60} is not a shape class; expected BATCHxMxN/vV with powers of "
                "two, e.g. '1x8192x8192/v4'"
            )
        b, rows, cols, v = (int(g) for g in m.groups())
        return cls(b, rows, cols, v)

    def distance(self, other: ShapeClass) -> float:
        """How far apart two classes are, for serving one's tuned kernel to the other: the
        difference in total size (a batch of 64 1024x1024 matrices moves what one 8192x8192
        does) plus half the differences in rows and columns (tile fit), in doublings."""
        lg = math.log2
        volume = abs(lg(self.batch * self.m * self.n) - lg(other.batch * other.m * other.n))
        return volume + 0.5 * (abs(lg(self.m) - lg(other.m)) + abs(lg(self.n) - lg(other.n)))


def shape_class(batch: int, m: int, n: int, max_vec: int) -> ShapeClass:
    """The class of a (batch, m, n) call whose widest usable vector is `max_vec` elements."""
    return ShapeClass(_bucket(batch), _bucket(m), _bucket(n), max_vec)


def call_vec(
    elem_bytes: int,
    batch: int,
    m: int,
    n: int,
    ld_in: int,
    ld_out: int,
    bs_in: int,
    bs_out: int,
    pointers: tuple[int, ...] = (),
) -> int:
    """The widest vector (in elements) a (batch, m, n) call with these strides (elements) and
    pointers allows: what transpose() keys its class and kernel choice by, and what
    `autotranspose lookup --axes` shows for a permute's transpose pass."""
    strides = [n, m, ld_in, ld_out]
    if batch > 1:
        strides += [bs_in, bs_out]
    return max_vec(elem_bytes, *strides, pointers=pointers)


def pass_vec(p: Pass) -> int:
    """The widest vector permute()'s launches of the transpose pass `p` allow, as
    `_dispatch.permute.build_steps` and `_dispatch.transpose.batched_launch` derive it for a contiguous input: the
    pass's sizes and strides, and the pointers of its least aligned host-loop launch or
    outer matrix
    (allocations are 256-byte aligned, so a launch's pointers are as aligned as its byte
    offsets, and the least aligned offset is that of the least aligned loop stride)."""
    e = p.elem_bytes
    walked = [*p.loops, p.outer, p.outer2]  # a launch's matrices start at its outer offsets too
    pointers = [e * s for d in walked if d.extent > 1 for s in (d.in_stride, d.out_stride)]
    return call_vec(e, p.batch, p.m, p.n, p.ld_in, p.ld_out, p.bs_in, p.bs_out, tuple(pointers))


def flat_fits(config: KernelConfig, m: int, n: int, ld_in: int, ld_out: int) -> bool:
    """Whether flat `config` runs an m x n call with these row pitches (elements): a flat
    kernel moves whole short rows as one block, so the side it spans must be short and its
    rows contiguous (input rows when N is short, output rows when M is). A register
    transpose's side is exact (`config.applies`)."""
    if config.kind in ("prmt", "regt"):  # tall: input rows one run; wide: output rows one run
        return config.applies(m, n) and (ld_out == m if config.params.wide else ld_in == n)
    if n <= config.tile_n:
        return ld_in == n
    return m <= config.tile_n and ld_out == m


class Layout(NamedTuple):
    """The strides (elements) of one batched-transpose launch: ``out[b*bs_out + j*ld_out + i]
    = in[b*bs_in + i*ld_in + j]`` for b < batch, i < m, j < n. A permute's transpose pass
    has one (`plan.Pass`); a contiguous (batch, m, n) call is `Layout.contiguous(shape)`.

    The tuner measures a strided pass on its own layout (what permute() runs), in a study of
    its own, but stores the winner under the pass's shape class like a contiguous call's."""

    ld_in: int
    ld_out: int
    bs_in: int
    bs_out: int

    @classmethod
    def contiguous(cls, shape: tuple[int, int, int]) -> Layout:
        _, m, n = shape
        return cls(n, m, m * n, m * n)

    def spans(self, shape: tuple[int, int, int]) -> tuple[int, int]:
        """Elements from the first to one past the last that a launch reads, and writes."""
        b, m, n = shape
        return (
            (b - 1) * self.bs_in + (m - 1) * self.ld_in + n,
            (b - 1) * self.bs_out + (n - 1) * self.ld_out + m,
        )

    @property
    def text(self) -> str:
        """'ld_in,ld_out,bs_in,bs_out': how studies, results and tables name a layout."""
        return ",".join(map(str, self))


def check_layout(shape: tuple[int, int, int], strides: object) -> Layout | None:
    """`strides` (ld_in, ld_out, bs_in, bs_out) for a (batch, m, n) launch, checked and made
    canonical: None for a contiguous layout (and for None), the batch strides of a batch of
    one set to the next matrix's (they are never used). Raises LayoutError unless every
    stride is an int, the row pitches are at least the rows (ld_in >= n, ld_out >= m: the
    contiguous minimum) and no two elements share a place on either side, within the
    64-bit indices the kernels use."""
    if strides is None:
        return None
    b, m, n = shape
    values = tuple(strides) if isinstance(strides, (tuple, list)) else ()
    if len(values) != 4 or not all(type(v) is int for v in values):
        raise LayoutError(
            f"layout must be 4 ints (ld_in, ld_out, bs_in, bs_out) in elements, got "
            f"{strides!r:.80}; e.g. {tuple(Layout.contiguous(shape))} for contiguous {b}x{m}x{n}"
        )
    lay = Layout(*values)
    if lay.ld_in < n or lay.ld_out < m:
        raise LayoutError(
            f"layout {lay.text}: rows overlap; the row pitches must be at least the rows "
            f"(ld_in >= n = {n}, ld_out >= m = {m}), as in contiguous "
            f"{Layout.contiguous(shape).text}"
        )
    if b == 1:
        lay = lay._replace(bs_in=m * lay.ld_in, bs_out=n * lay.ld_out)
    for side, dims in (
        ("input", ((n, 1), (m, lay.ld_in), (b, lay.bs_in))),
        ("output", ((m, 1), (n, lay.ld_out), (b, lay.bs_out))),
    ):
        if not disjoint(dims):
            raise LayoutError(
                f"layout {lay.text}: batches of the {side} overlap each other or its rows; "
                "give batch strides that keep each element in a place of its own (a "
                f"contiguous {b}x{m}x{n} batch is {Layout.contiguous(shape).text})"
            )
    if max(lay.spans(shape)) > _MAX_ELEMENTS:
        raise LayoutError(
            f"layout {lay.text} reaches past 2**63-1 elements; no buffer is that large"
        )
    return None if lay == Layout.contiguous(shape) else lay


# Kernels index with 64-bit integers; a side or a total past this is a typo, not a matrix.
_MAX_ELEMENTS = 2**63 - 1
_SIDE = re.compile(r"0*[1-9][0-9]*")  # ASCII only: int() would take '٣' and choke on '²'


def parse_shape(text: str) -> tuple[int, int, int]:
    """'8192x8192' -> (1, 8192, 8192); '64x1024x1024' -> (64, 1024, 1024)."""
    dims = _sides(text, (2, 3), "MxN or BATCHxMxN", "8192x8192 or 64x1024x1024")
    return (1, *dims) if len(dims) == 2 else dims  # type: ignore[return-value]


def parse_dims(text: str, most: int = 8) -> tuple[int, ...]:
    """'64x256x56x56' -> (64, 256, 56, 56): an array's shape for permute, 1 to `most` sides."""
    return _sides(
        text,
        tuple(range(1, most + 1)),
        f"1 to {most} sides like AxBxC",
        "64x256x56x56 or 8x4096x32x128",
    )


def _sides(text: str, counts: tuple[int, ...], form: str, example: str) -> tuple[int, ...]:
    parts = text.strip().lower().split("x")
    if len(parts) not in counts or not all(_SIDE.fullmatch(p) for p in parts):
        raise ShapeError(
            f"{text!r:.40} is not a shape; write {form} with positive integers, e.g. {example}"
        )
    # Checked by length first: int() refuses (slowly) numbers of thousands of digits.
    if any(len(p.lstrip("0")) > 19 for p in parts) or math.prod(map(int, parts)) > _MAX_ELEMENTS:
        raise ShapeError(
            f"{text!r:.40} is too large: a shape holds at most 2**63-1 elements; write the "
            f"array's real sides, e.g. {example}"
        )
    return tuple(int(p) for p in parts)

"""Shape classes: the key under which tuning results are stored and looked up.

A class buckets each of batch, rows and columns to the next power of two and records the
widest vector the call allows, so a tuned config is only ever served to calls it can run.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .config import max_vec
from .errors import ShapeError

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
    elem_bytes: int, batch: int, m: int, n: int, ld_in: int, ld_out: int, bs_in: int,
    bs_out: int, pointers: tuple[int, ...] = (),
) -> int:  # fmt: skip
    """The widest vector (in elements) a (batch, m, n) call with these strides (elements) and
    pointers allows: what transpose() keys its class and kernel choice by, and what
    `autotranspose lookup --axes` shows for a permute's transpose pass."""
    strides = [n, m, ld_in, ld_out]
    if batch > 1:
        strides += [bs_in, bs_out]
    return max_vec(elem_bytes, *strides, pointers=pointers)


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
        text, tuple(range(1, most + 1)), f"1 to {most} sides like AxBxC",
        "64x256x56x56 or 8x4096x32x128",
    )  # fmt: skip


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

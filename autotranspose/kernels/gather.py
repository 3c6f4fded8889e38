"""The gather kernels' arguments (templates/gather/): a fused permute of up to 8 dims,
and the grid stride of its launch, as the `at_gather_dims` struct the kernel takes by value.

Pure (no CUDA): `launch.make_gather` packs these, and tests/test_gather.py walks the same
values the way the kernel does, in Python, against np.transpose, so the carry logic is
checked without a GPU.

The kernel walks output indices: thread g starts at index g (decomposed into digits once)
and moves on by the grid stride G, adding G's digits with a mixed-radix carry. Everything it
needs that does not change per element is computed here: G's digits, the offsets G moves by
when no digit wraps, and the correction for each digit that wraps.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ShapeError
from ..plans.boxes import GATHER_MAX_EXTENT, Dim
from ..plans.layout import MAX_NDIM

MAX_DIMS = MAX_NDIM  # the struct's arrays: any plan of an 8-D array fits
MAX_STRIDE = 2**31 - 1  # the grid's threads: a first index must fit 32 bits (one u32 division)
# at_gather_dims: total; in_step, out_step; in_stride, out_stride, in_carry, out_carry
# (MAX_DIMS each); extent, step (MAX_DIMS each); ndim; one unused word. Standard sizes
# without padding: every field is naturally aligned, as the C struct lays them out.
ARG_FORMAT = f"<Qqq{MAX_DIMS}q{MAX_DIMS}q{MAX_DIMS}q{MAX_DIMS}q{MAX_DIMS}I{MAX_DIMS}III"
ARG_BYTES = struct.calcsize(ARG_FORMAT)


@dataclass(frozen=True)
class GatherArgs:
    """The kernel's `at_gather_dims`; per-dim tuples are innermost first, MAX_DIMS long."""

    total: int
    in_step: int
    out_step: int
    in_stride: tuple[int, ...]
    out_stride: tuple[int, ...]
    in_carry: tuple[int, ...]
    out_carry: tuple[int, ...]
    extent: tuple[int, ...]
    step: tuple[int, ...]
    ndim: int

    def values(self) -> tuple[int, ...]:
        """The struct's fields, flat, in ARG_FORMAT's order."""
        return (
            self.total,
            self.in_step,
            self.out_step,
            *self.in_stride,
            *self.out_stride,
            *self.in_carry,
            *self.out_carry,
            *self.extent,
            *self.step,
            self.ndim,
            0,
        )

    def pack(self) -> bytes:
        return struct.pack(ARG_FORMAT, *self.values())


def gather_args(dims: Sequence[Dim], stride: int) -> GatherArgs:
    """The arguments for moving `dims` (output memory order, outermost first, strides in
    elements: any that do not overlap on the output side, 0 and gaps included on the input
    side; the stores coalesce where the innermost output stride is 1) on a grid of `stride`
    threads.

    Raises ShapeError for what the kernel cannot take; the plan never hands it such dims
    (`plan.gather_reason` checks the same limits)."""
    n = len(dims)
    if not 1 <= n <= MAX_DIMS:
        raise ShapeError(f"a gather takes 1 to {MAX_DIMS} dims, got {n}; split the permute")
    if not 1 <= stride <= MAX_STRIDE:
        raise ShapeError(f"a gather grid of {stride} threads: it takes 1 to {MAX_STRIDE}")
    big = [d.extent for d in dims if not 1 <= d.extent <= GATHER_MAX_EXTENT]
    if big:
        raise ShapeError(
            f"a gather dim of extent {big[0]}: each must be 1 to {GATHER_MAX_EXTENT} (its "
            "digits are 32-bit); use the batched transpose or row copy for this permute"
        )
    inner = list(reversed(dims))  # innermost first, as the kernel counts
    ext = [d.extent for d in inner]
    step, radix = [], 1
    for k in range(n):
        q = stride // radix
        step.append(q % ext[k] if k + 1 < n else q)  # the outermost digit is never wrapped
        radix *= ext[k]
    ins = [d.in_stride for d in inner]
    outs = [d.out_stride for d in inner]
    in_carry = [ins[k + 1] - ext[k] * ins[k] for k in range(n - 1)]
    out_carry = [outs[k + 1] - ext[k] * outs[k] for k in range(n - 1)]
    pad = MAX_DIMS - n
    return GatherArgs(
        total=math.prod(ext),
        in_step=sum(s * d for s, d in zip(step, ins, strict=True)),
        out_step=sum(s * d for s, d in zip(step, outs, strict=True)),
        in_stride=(*ins, *[0] * pad),
        out_stride=(*outs, *[0] * pad),
        in_carry=(*in_carry, *[0] * (pad + 1)),
        out_carry=(*out_carry, *[0] * (pad + 1)),
        extent=(*ext, *[1] * pad),
        step=(*step, *[0] * pad),
        ndim=n,
    )

"""An N-D call's axes, shape and strides checked before anything is planned: NumPy axes, at most
MAX_NDIM dims, element strides, outputs that overlap nothing. Pure."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence

from ..errors import AxesError, LayoutError, ShapeError
from .boxes import Dim

MAX_NDIM = 8  # what permute() promises, and what a gather pass takes in one launch


def normalize_axes(axes: Sequence[int], ndim: int) -> tuple[int, ...]:
    """`axes` as non-negative ints, checked to be a permutation of range(ndim)."""
    try:
        given = [operator.index(a) for a in axes]
    except TypeError as exc:
        raise AxesError(
            f"axes must be a sequence of ints, got {axes!r}; pass a permutation of "
            f"range({ndim}), e.g. {tuple(range(ndim))[::-1]}"
        ) from exc
    if len(given) != ndim:
        raise AxesError(
            f"axes {tuple(given)} name {len(given)} axes but the array has {ndim}; give one "
            f"entry per dimension, a permutation of {tuple(range(ndim))}"
        )
    bad = [a for a in given if not -ndim <= a < ndim]
    if bad:
        raise AxesError(
            f"axes {tuple(given)}: {bad[0]} is out of range for a {ndim}-D array; give a "
            f"permutation of {tuple(range(ndim))} (negative ones count from the end)"
        )
    norm = tuple(a % ndim for a in given)
    if len(set(norm)) != ndim:
        twice = sorted({a for a in norm if norm.count(a) > 1})
        raise AxesError(
            f"axes {tuple(given)} repeat axis {twice[0]}; give a permutation of "
            f"{tuple(range(ndim))}: each axis exactly once"
        )
    return norm


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides in elements."""
    strides, acc = [], 1
    for extent in reversed(shape):
        strides.append(acc)
        acc *= max(extent, 1)
    return tuple(reversed(strides))


def _shape(shape: Sequence[int]) -> tuple[int, ...]:
    try:
        dims = tuple(operator.index(s) for s in shape)
    except TypeError as exc:
        raise ShapeError(f"shape must be a sequence of ints, got {shape!r}") from exc
    if len(dims) > MAX_NDIM:
        raise ShapeError(
            f"the array has {len(dims)} dimensions; permute takes at most {MAX_NDIM}: reshape "
            "it first, merging axes that stay together"
        )
    if any(s < 0 for s in dims):
        raise ShapeError(f"shape {dims} has a negative extent")
    return dims


def _strides(strides: Sequence[int] | None, shape: tuple[int, ...], what: str) -> tuple[int, ...]:
    if strides is None:
        return contiguous_strides(shape)
    got = tuple(operator.index(s) for s in strides)
    if len(got) != len(shape):
        raise ShapeError(f"{what} has {len(got)} strides {got} for {len(shape)}-D shape {shape}")
    return got


def _check_layout(
    dims: list[Dim],
    shape: tuple[int, ...],
    xs: tuple[int, ...],
    out_shape: tuple[int, ...],
    os_: tuple[int, ...],
    eb: int,
    in_ptr: int,
    out_ptr: int,
) -> None:
    """The layouts permute() takes (docs/api.md, strides), for every axis of size > 1: strides
    are not negative, and the output's elements do not overlap (no stride 0 either: two
    threads would write one place). An input may overlap itself (stride 0: broadcast):
    reading twice is harmless. Layouts without an input axis of stride 1, or with an output
    innermost stride other than 1, are the gather's (STRIDED)."""
    if (in_ptr | out_ptr) % eb:
        raise LayoutError(
            f"the {'input' if in_ptr % eb else 'output'} pointer is not aligned to its "
            f"{eb}-byte elements; copy the array into a fresh allocation first"
        )
    for what, ext, strides in (("x", shape, xs), ("out", out_shape, os_)):
        if any(s < 0 for s, n in zip(strides, ext, strict=True) if n > 1):
            raise LayoutError(
                f"{what} has negative strides {strides} (elements) for shape {ext}; make it "
                "contiguous first (e.g. ascontiguousarray / .contiguous())"
            )
    if not disjoint((d.extent, d.out_stride) for d in dims):
        raise LayoutError(
            f"out has strides {os_} (elements) for shape {out_shape}: its elements overlap "
            "(a stride 0, or strides that put two indices at one place), so writes would "
            "race; pass an out whose elements are distinct, e.g. a contiguous one (or leave "
            "out=None)"
        )


def disjoint(dims: Iterable[tuple[int, int]]) -> bool:
    """Whether (extent, stride) dims put every index at its own place: each stride past the
    furthest place the smaller ones reach (permute()'s rule for `out`, and a tuned layout's)."""
    span = 0
    for extent, stride in sorted((d for d in dims if d[0] > 1), key=lambda d: d[1]):
        if stride <= span:
            return False
        span += (extent - 1) * stride
    return True

"""The cases `autotranspose bench` draws: --random (transposes), --random-permute (permutes)
and --small (small calls), each from its stated distribution, of the --dtypes given only.
Pure NumPy: the same seed draws the same cases on any machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedDtypeError
from ..plans.dtypes import SUPPORTED_NAMES, element_type

# --- random workloads (`bench --random N --seed S`) ---------------------------------------------
# The stated distribution: element size uniform over 1, 2, 4, 8, 16 bytes (then a dtype of that
# size); total bytes log-uniform in [32 MB, 1 GB]; a quarter each square, rectangular (aspect
# log-uniform in 1/16..16), skinny (a side uniform in 1..200, either orientation) and batched
# (batch log-uniform in 2..512, matrices square, rectangular or skinny); each side is a
# multiple of 64 half the time and any length (mostly odd) otherwise.
RANDOM_DTYPES: dict[int, tuple[str, ...]] = {
    1: ("int8", "uint8", "bool"),
    2: ("float16", "int16", "uint16"),
    4: ("float32", "int32"),
    8: ("float64", "complex64", "int64"),
    16: ("complex128",),
}
RANDOM_BYTES = (32 << 20, 1 << 30)
RANDOM_KINDS = ("square", "rectangular", "skinny", "batched")


def draw_dtypes(names: Sequence[str]) -> tuple[str, ...]:
    """The element types a random draw may take (`bench --dtypes` with --random,
    --random-permute or --small), as canonical names, each once. A name that is not one of
    SUPPORTED_NAMES raises UnsupportedDtypeError naming the accepted ones: a draw must not
    reach a type no peer was written for (float128, say, which NumPy has)."""
    found: list[str] = []
    for name in names:
        try:
            canonical: str | None = element_type(name).name
        except UnsupportedDtypeError:
            canonical = None
        if canonical not in SUPPORTED_NAMES:
            raise UnsupportedDtypeError(
                f"{name!r:.40} is not a dtype the random cases can draw; accepted: "
                f"{', '.join(SUPPORTED_NAMES)}"
            )
        found.append(str(canonical))
    if not found:
        raise UnsupportedDtypeError(f"no dtype given; accepted: {', '.join(SUPPORTED_NAMES)}")
    return tuple(dict.fromkeys(found))


def dtype_pool(dtypes: Sequence[str] | None) -> dict[int, tuple[str, ...]]:
    """element size -> the dtypes a draw picks among: RANDOM_DTYPES when `dtypes` is None
    (so a seed draws what it always drew), else `dtypes` grouped by size. The draws pick a
    size uniformly, then a dtype of that size."""
    if dtypes is None:
        return RANDOM_DTYPES
    pool: dict[int, list[str]] = {}
    for name in draw_dtypes(dtypes):
        pool.setdefault(element_type(name).size, []).append(name)
    return {size: tuple(pool[size]) for size in sorted(pool)}


def random_cases(
    count: int, seed: int, dtypes: Sequence[str] | None = None
) -> list[tuple[tuple[int, int, int], str]]:
    """`count` (shape (batch, m, n), dtype) cases drawn from the stated distribution, of
    `dtypes` only where given; the same seed gives the same cases on any machine."""
    rng = np.random.default_rng(seed)
    pool = dtype_pool(dtypes)
    cases = []
    for _ in range(count):
        size = int(rng.choice(sorted(pool)))
        dtype = str(rng.choice(pool[size]))
        lo, hi = (np.log(v / size) for v in RANDOM_BYTES)
        elems = float(np.exp(rng.uniform(lo, hi)))
        kind = str(rng.choice(RANDOM_KINDS))
        batch = int(np.exp(rng.uniform(np.log(2), np.log(512)))) if kind == "batched" else 1
        per = elems / batch
        shape_kind = str(rng.choice(RANDOM_KINDS[:3])) if kind == "batched" else kind
        if shape_kind == "skinny":
            small = int(rng.integers(1, 201))
            m, n = small, max(1, round(per / small))
            if rng.random() < 0.5:
                m, n = n, m
        elif shape_kind == "square":
            m = n = _side(rng, per**0.5)
        else:
            aspect = float(np.exp(rng.uniform(-1, 1) * np.log(16)))
            m, n = _side(rng, (per * aspect) ** 0.5), _side(rng, (per / aspect) ** 0.5)
        if kind == "batched":  # rounding small sides to 64 can be far off: the batch absorbs it
            batch = max(1, round(elems / (m * n)))
        cases.append(((batch, int(m), int(n)), dtype))
    return cases


def _side(rng: np.random.Generator, x: float) -> int:
    """A side near `x`: a multiple of 64 half the time, any length otherwise."""
    if rng.random() < 0.5:
        return max(64, round(x / 64) * 64)
    return max(1, round(x) | 1 if rng.random() < 0.8 else round(x))  # mostly odd


# --- permutes (`bench --random-permute N --seed S`, `bench --shapes AxBxCxD --axes ...`) ----------
# The stated distribution: 3 to 6 dimensions (uniform); element size uniform over 1, 2, 4, 8,
# 16 bytes (then a dtype of that size); total bytes log-uniform in [32 MB, 1 GB], shared out
# over the sides at random (a side log-uniform share of the total); each side a multiple of 8
# half the time and any length otherwise; any permutation but the identity (a plain copy).


PERMUTE_DIMS = (3, 6)


def random_permute_cases(
    count: int, seed: int, dtypes: Sequence[str] | None = None
) -> list[tuple[tuple[int, ...], tuple[int, ...], str]]:
    """`count` (shape, axes, dtype) permute cases drawn from the stated distribution, of
    `dtypes` only where given; the same seed gives the same cases on any machine."""
    rng = np.random.default_rng([seed, 0x9E3])  # a stream of its own: not --random's cases
    pool = dtype_pool(dtypes)
    cases = []
    for _ in range(count):
        nd = int(rng.integers(PERMUTE_DIMS[0], PERMUTE_DIMS[1] + 1))
        size = int(rng.choice(sorted(pool)))
        dtype = str(rng.choice(pool[size]))
        lo, hi = (np.log(v / size) for v in RANDOM_BYTES)
        elems = float(np.exp(rng.uniform(lo, hi)))
        share = rng.dirichlet(np.full(nd, 1.5)) * np.log(elems)
        sides = [max(1, round(float(np.exp(v)))) for v in share]
        aligned = rng.random() < 0.5
        if aligned:
            sides = [max(8, round(v / 8) * 8) if v >= 6 else v for v in sides]
        big = int(np.argmax(sides))  # the largest side absorbs the rounding
        rest = int(np.prod([v for k, v in enumerate(sides) if k != big]))
        sides[big] = max(1, round(elems / rest))
        if aligned and sides[big] >= 8:
            sides[big] = round(sides[big] / 8) * 8
        axes = tuple(int(a) for a in rng.permutation(nd))
        while axes == tuple(range(nd)):
            axes = tuple(int(a) for a in rng.permutation(nd))
        cases.append((tuple(sides), axes, dtype))
    return cases


# --- small calls (`bench --small N --seed S`) ---------------------------------------------------
# The stated distribution: total bytes log-uniform in [4 KB, 16 MB]; 2 to 6 dimensions
# (uniform); the dtypes below, a 1- or 2-byte type twice as likely as a wider one (halves,
# bfloat16 and bytes are what models move most); sides drawn as real tensors have them: a
# power of two, a common odd or small side (3 channels, 7x7 and 14x14 patches, 197 tokens,
# 768 features, ...) or any length, the largest side taking what the total leaves (a multiple
# of 8 half the time); a 2- or 3-D case is autotranspose.transpose() half the time (the last
# two axes swapped), everything else autotranspose.permute() by random axes, never the
# identity.
SMALL_BYTES = (4 << 10, 16 << 20)
SMALL_DIMS = (2, 6)
SMALL_DTYPES = (
    "float16",
    "bfloat16",
    "int8",
    "uint8",
    "bool",
    "int16",
    "float32",
    "int32",
    "float64",
    "int64",
    "complex64",
    "complex128",
)
NARROW_WEIGHT = 2.0  # a 1- or 2-byte type's weight in the draw; a wider one's is 1
TYPICAL_SIDES = (3, 5, 7, 12, 14, 24, 28, 49, 56, 96, 112, 196, 197, 384, 768, 1000, 1536, 3072)


@dataclass(frozen=True)
class SmallCase:
    """One call: `op` is "transpose" (autotranspose.transpose, the last two axes swapped) or
    "permute" (autotranspose.permute by `axes`)."""

    op: str
    shape: tuple[int, ...]
    axes: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * element_type(self.dtype).size

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[a] for a in self.axes)

    def text(self) -> str:
        """'transpose 64x197' or 'permute 8x12x197x64/0,2,1,3'."""
        shape = "x".join(map(str, self.shape))
        if self.op == "transpose":
            return f"transpose {shape}"
        return f"permute {shape}/{','.join(map(str, self.axes))}"


def small_cases(count: int, seed: int, dtypes: Sequence[str] | None = None) -> list[SmallCase]:
    """`count` cases drawn from the stated distribution, of `dtypes` only where given; the
    same seed gives the same cases on any machine."""
    rng = np.random.default_rng([seed, 0x5A11])  # a stream of its own: not --random's cases
    names = SMALL_DTYPES if dtypes is None else draw_dtypes(dtypes)
    weights = np.array([NARROW_WEIGHT if element_type(d).size <= 2 else 1.0 for d in names])
    weights /= weights.sum()
    cases = []
    for _ in range(count):
        dtype = str(names[int(rng.choice(len(names), p=weights))])
        nd = int(rng.integers(SMALL_DIMS[0], SMALL_DIMS[1] + 1))
        op = "transpose" if nd <= 3 and rng.random() < 0.5 else "permute"
        shape = _small_shape(rng, nd, element_type(dtype).size)
        if op == "transpose":
            axes = (*range(nd - 2), nd - 1, nd - 2)
        else:
            axes = tuple(range(nd))
            while axes == tuple(range(nd)):
                axes = tuple(int(a) for a in rng.permutation(nd))
        cases.append(SmallCase(op, shape, axes, dtype))
    return cases


def _small_shape(rng: np.random.Generator, nd: int, size: int) -> tuple[int, ...]:
    """`nd` sides of at least 2 whose total lies in SMALL_BYTES: a log-uniform total shared
    out at random, each side made a real one, the largest taking what the others leave
    (redrawn in the rare case it cannot)."""
    lo, hi = SMALL_BYTES
    for _ in range(1000):
        elems = float(np.exp(rng.uniform(np.log(lo), np.log(hi)))) / size
        share = rng.dirichlet(np.full(nd, 2.0)) * np.log(elems)
        sides = [_real_side(rng, float(np.exp(v))) for v in share]
        big = int(np.argmax(sides))
        rest = math.prod(v for k, v in enumerate(sides) if k != big)
        sides[big] = max(2, round(elems / rest))
        if sides[big] >= 16 and rng.random() < 0.5:
            sides[big] = round(sides[big] / 8) * 8
        if lo <= math.prod(sides) * size <= hi:
            return tuple(sides)
    raise RuntimeError(f"no {nd}-D shape of {size}-byte elements fits {SMALL_BYTES} bytes")


def _real_side(rng: np.random.Generator, x: float) -> int:
    """A side near `x` as tensors have them: a power of two, a typical side, or any length."""
    r = rng.random()
    if r < 0.4:
        return max(2, 2 ** round(math.log2(max(x, 1.0))))
    if r < 0.75:
        return min(TYPICAL_SIDES, key=lambda v: abs(math.log(v / max(x, 1.0))))
    return max(2, round(x))

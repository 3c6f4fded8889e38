"""Test data and the reference for cast_transpose(): values that probe every rounding and
saturation rule of a pair (infinities, NaN, zeros of both signs, subnormals, the output
format's rounding midpoints and its largest finite value), and the expected bits computed in
NumPy exactly as ``torch.clamp(x.float() * scale, -max, max).to(dtype)`` does (float32
product rounded to nearest even, clamp that keeps NaN, round to nearest even)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from autotranspose.kinds.cast import Format

NP_TYPES = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
}
BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def np_type(f: Format) -> np.dtype:
    return NP_TYPES[f.name]


def _grid(dst: Format) -> np.ndarray:
    """Every finite value of `dst` (float8: all of them; 16-bit: a sample of exponents)."""
    bits = np.arange(2 ** (8 * dst.size), dtype=BITS[dst.size])
    if dst.size == 2:
        bits = bits[(bits >> 4) % 97 == 0]  # a spread of every exponent, still many values
    vals = bits.view(np_type(dst)).astype(np.float64)
    return np.unique(vals[np.isfinite(vals)])


def special_values(src: Format, dst: Format, scale: float) -> np.ndarray:
    """Inputs (float64, exactly representable in `src` where the format allows) whose scaled
    value lands on the hard cases of `dst`: midpoints between its neighbouring values (ties
    round to even), one step either side of them, its largest finite value and beyond,
    subnormals, signed zeros, infinities and NaN."""
    grid = _grid(dst)
    mids = (grid[1:] + grid[:-1]) / 2
    dmax = dst.max
    cases = [grid, mids, np.nextafter(mids.astype(np.float32), np.float32(np.inf))]
    cases.append(np.nextafter(mids.astype(np.float32), np.float32(-np.inf)))
    cases.append(
        np.array([dmax, dmax * 1.0625, dmax * 1.03, dmax * 2, 1e30, 3.0e38, 6e4, 7e4, 65520.0])
    )
    cases = [_divided(c, scale) for c in cases]
    cases.append(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-40, -1e-45, 1e-39]))
    vals = np.concatenate([c.ravel() for c in cases] + [-c.ravel() for c in cases])
    with np.errstate(over="ignore"):
        return vals.astype(np_type(src)).astype(np.float64)


def _divided(c: np.ndarray, scale: float) -> np.ndarray:
    """`c / scale` in c's own precision (float32 steps by a float32 scale, as before), less the
    quotients past that precision's range: each would be an overflow to infinity, a case
    `special_values` has already."""
    fits = np.abs(c.astype(np.float64) / scale) <= np.finfo(c.dtype).max
    return c[fits] / scale


def make_input(
    rng: np.random.Generator, shape: tuple[int, ...], src: Format, dst: Format, scale: float
) -> np.ndarray:
    """x of `shape` in `src`'s NumPy type: half of it the special values (shuffled), half
    random magnitudes over the output's whole range."""
    size = int(np.prod(shape))
    special = special_values(src, dst, scale)
    wide = rng.standard_normal(size) * np.exp2(rng.uniform(-20, np.log2(dst.max) + 2, size))
    vals = np.where(
        rng.random(size) < 0.5, rng.choice(special, size) if size else special[:0], wide / scale
    )
    with np.errstate(over="ignore"):
        return vals.astype(np_type(src)).reshape(shape)


def reference(x: np.ndarray, scale: float, dst: Format) -> np.ndarray:
    """cast(x * scale) as `dst`'s bits (the NumPy view of its integer type)."""
    with np.errstate(over="ignore", invalid="ignore"):
        v = x.astype(np.float32) * np.float32(scale)
        v = np.clip(v, np.float32(-dst.max), np.float32(dst.max))
    return v.astype(np_type(dst)).view(BITS[dst.size])


def amax_reference(x: np.ndarray, prior: float = 0.0) -> np.float32:
    """max(prior, max |x|), NaN if any is NaN (as torch.amax and torch.maximum give it)."""
    a = np.abs(x.astype(np.float32))
    m = np.float32(np.max(a)) if a.size else np.float32(0)
    if np.isnan(a).any() or np.isnan(prior):
        return np.float32(np.nan)
    return np.float32(max(m, np.float32(prior)))


def assert_same_bits(got: np.ndarray, want: np.ndarray, dst: Format, what: str = "y") -> None:
    """Equal bit for bit, except that any NaN matches any NaN."""
    got = np.ascontiguousarray(got).view(BITS[dst.size])
    want = np.ascontiguousarray(want).view(BITS[dst.size])
    assert got.shape == want.shape, (got.shape, want.shape)
    gnan = np.isnan(got.view(np_type(dst)).astype(np.float32))
    wnan = np.isnan(want.view(np_type(dst)).astype(np.float32))
    bad = (got != want) & ~(gnan & wnan)
    if bad.any():
        idx = tuple(np.argwhere(bad)[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.size} elements differ; first at {idx}: got "
            f"{int(got[idx]):#x}, want {int(want[idx]):#x}"
        )

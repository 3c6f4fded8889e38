"""cast_transpose()'s problem, pure (no CUDA): which formats a call casts between, how its
axes reduce to launches of the cast kernel (templates/cast/cast.cu.j2), and the kernel's
argument block.

The kernel moves `batch` x `m` x `n` input elements (n along the input's rows, stride 1) and
writes, each optional, the cast transposed (`y`: m along its rows, stride 1) and the cast in
the input's order (`z`: n along its rows). A permute reduces to such launches when, after
fusing the axes that stay together, the input's stride-1 axis (n) and the output's (m) are
two axes (a transpose, y written) or one (the innermost axis stays innermost: a strided cast,
written through z); one more axis is the launch's batch, and the others are host loops, one
launch per index. `plan_cast` says which launches run a call.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import LayoutError, UnsupportedDtypeError
from ..kinds.cast import FORMATS, INPUTS, OUTPUTS, PAIRS, Format, pair_code
from .layout import normalize_axes

# the kernel's `at_cast_args`: x, y, z, scale_ptr, amax; scale (a word of its own, so that the
# eager fast path can write it as one of a call's coded addresses, `_driver.run_relocated`); M,
# N, ld_x, ld_y, ld_z, bs_x, bs_y, bs_z; tiles_m, tiles_n; the magic numbers of tiles_m and
# tiles_n and their shifts (`divisor`); standard sizes, laid out as C does (the struct's
# size a multiple of its 8-byte alignment)
ARG_FORMAT = "<5QfI8q2I3I4x"
ARG_WORDS = 6  # the leading 8-byte words a call fills in: five pointers and the scale
ARGS = struct.Struct(ARG_FORMAT)
_WORD = struct.Struct("<Q")
# host loops a call may take before it is run as two passes (a cast into a contiguous
# buffer, then permute()): each loop index is a launch
MAX_LOOP_LAUNCHES = 64
MAX_GRID = 2**31 - 1

_ALIASES = {
    "e4m3": "float8_e4m3fn",
    "float8_e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
    "bf16": "bfloat16",
    "half": "float16",
    "f16": "float16",
    "fp16": "float16",
    "f32": "float32",
    "float": "float32",
}


def format_of(dtype: Any, what: str = "dtype") -> Format:
    """The format a dtype names: a torch dtype, a NumPy or ml_dtypes dtype, or a name
    ('float8_e4m3fn', 'e4m3', 'float8_e5m2', 'bfloat16', 'float16', 'float32')."""
    name: str | None = None
    if type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype":
        name = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        name = _ALIASES.get(dtype.lower(), dtype.lower())
    else:
        try:
            import numpy as np

            name = np.dtype(dtype).name
        except (TypeError, ValueError):
            name = None
    fmt = FORMATS.get(name or "")
    if fmt is None:
        raise UnsupportedDtypeError(
            f"{what}={dtype!r:.60} is not a format cast_transpose() reads or writes; it casts "
            f"{'/'.join(f.name for f in INPUTS)} to {'/'.join(f.name for f in OUTPUTS)}"
        )
    return fmt


def pair(src: Format, dst: Format) -> str:
    """The pair's code, or UnsupportedDtypeError naming the pairs there are."""
    code = pair_code(src, dst)
    if code not in PAIRS:
        ins = ", ".join(f.name for f in INPUTS)
        outs = ", ".join(f.name for f in OUTPUTS)
        if src not in INPUTS:
            raise UnsupportedDtypeError(
                f"cast_transpose() reads {ins}; x is {src.name}: cast it to one of those first "
                f"(e.g. x.float())"
            )
        raise UnsupportedDtypeError(
            f"cast_transpose() writes {outs}; {dst.name} was asked for: pick one of those"
        )
    return code


@dataclass(frozen=True)
class Axis:
    """One axis of the fused problem: its extent and its strides in x, y and z (elements of
    each; z's 0 where no z is written)."""

    extent: int
    x: int
    y: int
    z: int = 0


@dataclass(frozen=True)
class Launch:
    """One launch of the cast kernel, writing `target` ('y' or 'z'): for b < batch, i < m,
    j < n, the input element at x0 + b*bs_x + i*ld_x + j goes, where `transpose`, to
    o0 + b*bs_o + j*ld_o + i of the target, else to o0 + b*bs_o + i*ld_o + j; where `rides`
    (a transpose writing y), also to r0 + b*bs_r + i*ld_r + j of z. Offsets and strides in
    elements of each array."""

    batch: int
    m: int
    n: int
    ld_x: int
    bs_x: int
    ld_o: int
    bs_o: int
    transpose: bool
    target: str = "y"
    rides: bool = False
    ld_r: int = 0
    bs_r: int = 0
    x0: int = 0
    o0: int = 0
    r0: int = 0


@dataclass(frozen=True)
class CastPlan:
    """The launches of a call, in order: `launches` of the kernel (one per host-loop index),
    or, where `two_pass`, a same-order cast of x into a contiguous buffer followed by
    permute() of it into y (and z written by the first pass where both outputs are asked)."""

    launches: tuple[Launch, ...]
    two_pass: bool = False
    why: str = ""


def _fuse(axes: list[Axis]) -> list[Axis]:
    """Adjacent axes (outermost first) that chain in every array become one."""
    out: list[Axis] = []
    for a in axes:
        if out:
            o = out[-1]
            if o.x == a.x * a.extent and o.y == a.y * a.extent and o.z == a.z * a.extent:
                out[-1] = Axis(o.extent * a.extent, a.x, a.y, a.z)
                continue
        out.append(a)
    return out


def _moving(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, ...]:
    return tuple(s if n > 1 else 0 for n, s in zip(shape, strides, strict=True))


def plan_cast(
    shape: Sequence[int],
    axes: Sequence[int],
    x_strides: Sequence[int],
    y_strides: Sequence[int] | None,
    z_strides: Sequence[int] | None,
) -> CastPlan:
    """The launches that cast x (`shape`, `x_strides`) into y = x permuted by `axes`
    (`y_strides`, of the permuted shape; None: y not written) and z in x's order
    (`z_strides`; None: not written). Strides in elements of each array; y's and z's have an
    axis of stride 1 (the caller checked them). LayoutError if x has no axis of stride 1."""
    shape = tuple(int(n) for n in shape)
    order = normalize_axes(axes, len(shape))
    if math.prod(shape) == 0:
        return CastPlan(())
    xs = _moving(shape, x_strides)
    if not any(s == 1 for n, s in zip(shape, xs, strict=True) if n > 1) and math.prod(shape) > 1:
        raise LayoutError(
            f"x has strides {tuple(x_strides)} (elements) and no axis of stride 1 among those "
            "of more than one element; the kernels read rows of consecutive elements: make "
            "it contiguous first (e.g. .contiguous())"
        )
    launches: list[Launch] = []
    zs = _moving(shape, z_strides) if z_strides is not None else None
    rides = False
    if y_strides is not None:
        ys_out = _moving([shape[a] for a in order], y_strides)
        ys = [0] * len(shape)
        for k, a in enumerate(order):
            ys[a] = ys_out[k]
        # z rides along a transpose where its innermost axis is x's (else its own launches)
        rides = zs is not None and _innermost(shape, zs) == _innermost(shape, xs)
        found = _launches(shape, order, xs, tuple(ys), zs if rides else None, "y")
        if found is None:
            return CastPlan((), True, f"more than {MAX_LOOP_LAUNCHES} launches")
        rides = rides and all(lc.rides for lc in found)
        launches += found
    if zs is not None and not rides:
        found = _launches(shape, tuple(range(len(shape))), xs, zs, None, "z")
        if found is None:
            return CastPlan((), True, f"more than {MAX_LOOP_LAUNCHES} launches")
        launches += found
    return CastPlan(tuple(launches))


def _innermost(shape: Sequence[int], strides: Sequence[int]) -> int | None:
    """The axis of stride 1 among those of more than one element (None: a single element)."""
    for a, (n, s) in enumerate(zip(shape, strides, strict=True)):
        if n > 1 and s == 1:
            return a
    return None


def _launches(
    shape: tuple[int, ...],
    order: tuple[int, ...],
    xs: tuple[int, ...],
    os_: tuple[int, ...],
    rs: tuple[int, ...] | None,
    target: str,
) -> list[Launch] | None:
    """Launches writing `target` (strides `os_` per x axis, its axes in `order`) and, where it
    is a transpose, z riding along (strides `rs` per x axis, its innermost axis x's): a
    transpose where the target's stride-1 axis is not x's, else a strided cast. None where
    more than MAX_LOOP_LAUNCHES launches would be needed."""
    axes = [
        Axis(shape[a], xs[a], os_[a], rs[a] if rs is not None else 0) for a in order if shape[a] > 1
    ]
    fused = _fuse(axes) or [Axis(1, 1, 1, 1)]  # one element
    one = Axis(1, 0, 0, 0)
    n_axis = next((a for a in fused if a.x == 1), fused[-1])
    m_axis = next((a for a in fused if a.y == 1), fused[-1])
    transpose = n_axis is not m_axis
    if not transpose:  # the innermost axis stays innermost: rows of it, cast in order
        rest = [a for a in fused if a is not n_axis]
        m_axis = rest.pop() if rest else one
    else:
        rest = [a for a in fused if a is not n_axis and a is not m_axis]
    batch = rest.pop() if rest else one
    if _count(rest) > MAX_LOOP_LAUNCHES:
        return None
    ride = transpose and rs is not None
    return [
        Launch(
            batch.extent,
            m_axis.extent,
            n_axis.extent,
            m_axis.x,
            batch.x,
            n_axis.y if transpose else m_axis.y,
            batch.y,
            transpose,
            target,
            ride,
            m_axis.z if ride else 0,
            batch.z if ride else 0,
            x0,
            o0,
            r0,
        )
        for x0, o0, r0 in _offsets(rest)
    ]


def _count(loops: list[Axis]) -> int:
    return math.prod(a.extent for a in loops)


def _offsets(loops: list[Axis]) -> list[tuple[int, int, int]]:
    """(x, y, z) element offsets of every index of the host loops, outermost first."""
    offsets = [(0, 0, 0)]
    for a in loops:
        offsets = [
            (x + k * a.x, y + k * a.y, z + k * a.z) for x, y, z in offsets for k in range(a.extent)
        ]
    return offsets


@functools.lru_cache(maxsize=1024)
def divisor(d: int) -> tuple[int, int]:
    """(magic, shift) with n // d == umulhi(2 n, magic) >> shift for every n < 2**31 (d from 1
    to 2**31): the kernel divides its block index by the tile counts with them. magic =
    ceil(2**(31 + s) / d), s = ceil(log2 d), is below 2**32, and the error it adds to n / d is
    under n / 2**(31 + s) < 1 / d, so the floor is exact."""
    s = (d - 1).bit_length()
    return -(-(1 << (31 + s)) // d), s


def tiles(launch: Launch, tile_m: int, tile_n: int) -> tuple[int, int]:
    return (-(-launch.m // tile_m), -(-launch.n // tile_n))


def pack_args(
    launch: Launch,
    tile_m: int,
    tile_n: int,
    src: Format,
    dst: Format,
    x: int,
    y: int,
    z: int,
    scale_ptr: int,
    amax: int,
    scale: float,
) -> tuple[bytes, int]:
    """The kernel's argument block for `launch` on base pointers x, y and z (the launch's
    offsets are added here) and its grid."""
    tm, tn = tiles(launch, tile_m, tile_n)
    grid = tm * tn * launch.batch
    if grid > MAX_GRID:
        raise LayoutError(
            f"a batch of {launch.batch} {launch.m}x{launch.n} matrices needs {grid} tiles of "
            f"{tile_m}x{tile_n}, more than a launch allows ({MAX_GRID}); split the batch"
        )
    (magic_m, shift_m), (magic_n, shift_n) = divisor(tm), divisor(tn)
    out = (y if launch.target == "y" else z) + launch.o0 * dst.size
    if launch.transpose:
        ky, ld_y, bs_y = out, launch.ld_o, launch.bs_o
        kz, ld_z, bs_z = (z + launch.r0 * dst.size if launch.rides else 0), launch.ld_r, launch.bs_r
    else:
        ky, ld_y, bs_y = 0, 0, 0
        kz, ld_z, bs_z = out, launch.ld_o, launch.bs_o
    args = ARGS.pack(
        x + launch.x0 * src.size,
        ky,
        kz,
        scale_ptr,
        amax,
        scale,
        0,
        launch.m,
        launch.n,
        launch.ld_x,
        ld_y,
        ld_z,
        launch.bs_x,
        bs_y,
        bs_z,
        tm,
        tn,
        magic_m,
        magic_n,
        shift_n | shift_m << 8,
    )
    return args, grid


def coded_args(
    launch: Launch,
    tile_m: int,
    tile_n: int,
    src: Format,
    dst: Format,
    codes: tuple[int, int, int, int, int, int],
) -> tuple[bytes, int]:
    """`pack_args` for a program whose leading `ARG_WORDS` words are codes for a call's
    buffers (`_driver.run_relocated`): x, y, z, the scale's pointer, amax, and the scale
    itself, whose code stands for its float32 bits. The launch's offsets are added to the
    pointers' codes here, as to pointers."""
    args, grid = pack_args(launch, tile_m, tile_n, src, dst, *codes[:5], 0.0)
    return args[:40] + _WORD.pack(codes[5]) + args[48:], grid

"""Which config a cast-transpose runs: its pair's tuned result for the call's class
(`lookup.cast_choice`: tuned, nearest tuned, shipped, else `kinds.cast.default`).

`_cast` asks once per signature, when it prepares the signature's launches; a hit of its
fast path runs what was prepared (no lookup). The class is the first launch's (batch, m, n)
with the widest vector its input side allows (sizes, pitches and pointer in input
elements, `shapes.call_vec`), as `autotranspose tune --cast` keys what it measures.
"""

from __future__ import annotations

from .. import _lookup as lookup
from .._castplan import CastPlan
from .._compiler import DeviceState
from .._config import KernelConfig
from .._shapes import ShapeClass, call_vec, shape_class
from ..kinds.cast import Format, pair_code


def cast_class(plan: CastPlan, src: Format, x_ptr: int) -> ShapeClass:
    """The class a cast call's results are keyed by: its first launch (a host loop's launches
    share sizes and strides) as a batched transpose of input elements."""
    lc = plan.launches[0]
    pointer = x_ptr + lc.x0 * src.size
    vec = call_vec(src.size, lc.batch, lc.m, lc.n, lc.ld_x, lc.ld_o, lc.bs_x, lc.bs_o, (pointer,))
    return shape_class(lc.batch, lc.m, lc.n, vec)


def choose_config(
    state: DeviceState,
    plan: CastPlan,
    src: Format,
    dst: Format,
    x_ptr: int,
    both: bool,
    aligned_out: bool,
) -> KernelConfig:
    """The config a cast call with no config given runs. A call whose launches do not
    transpose (a strided cast of the same order) runs the default: what is tuned and keyed
    are transposing launches."""
    from ..kinds.cast import default

    if not plan.launches[0].transpose:
        return default(KernelConfig, src, dst, aligned_out)
    cls = cast_class(plan, src, x_ptr)
    code = pair_code(src, dst)
    return lookup.cast_choice(state.info, code, cls, both=both, aligned_out=aligned_out).config

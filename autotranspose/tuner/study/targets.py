"""What tuning a permute means (`tune --axes`): the transpose pass of its plan, with the (batch,
m, n), strides and shape class permute() serves that pass by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...kernels.shapes import Layout, ShapeClass, check_layout, pass_vec, shape_class
from ...plans.dtypes import element_type
from ...plans.permute import TRANSPOSE, Pass, Plan, plan_permute

# The dtype a pass of words of each size is tuned as, when the permute's own dtype is of
# another size (a pass of "wide" elements moves runs of several array elements as one word).
_WORD_DTYPES = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64", 16: "complex128"}


@dataclass(frozen=True)
class PermuteTarget:
    """What tuning the permute of a contiguous array means: its plan and, for a transpose
    pass, the (batch, m, n), strides and shape class permute() serves that pass by (tuned
    exactly like a transpose of that class, measured on those strides). The pass is the
    plan's own, or else a batched transpose among its alternatives (which permute()'s first
    call times against the plan's pass: tuned, it competes at its best). A copy, packed or
    gather pass with no transpose alternative runs an untuned kernel: nothing to tune."""

    plan: Plan
    dtype: str  # the pass's element type: the permute's, or a word of the pass's size
    shape: tuple[int, int, int] | None = None  # the transpose pass's; None: nothing to tune
    layout: Layout | None = None  # its strides; None: contiguous (the class's own study)
    shape_class: ShapeClass | None = None
    tuned: Pass | None = None  # the transpose pass tuned: passes[0] or an alternative

    @property
    def untuned(self) -> str:
        """Why there is nothing to tune, or "" when there is a transpose pass."""
        if self.shape is not None:
            return ""
        if not self.plan.passes:
            return "nothing to tune: nothing to move"
        return f"nothing to tune: {self.plan.passes[0].kind} pass"

    def describe(self) -> str:
        """The pass on one line (`Pass.describe`), and the alternative tuned if it is one."""
        if not self.plan.passes:
            return "an empty array"
        text = self.plan.passes[0].describe()
        if self.tuned is not None and self.tuned != self.plan.passes[0]:
            text += f"; tuned: its alternative {self.tuned.describe()}"
        return text


def permute_target(dtype: Any, shape: Sequence[int], axes: Sequence[int]) -> PermuteTarget:
    """Plan the permute of a contiguous `dtype` array of `shape` by `axes` (`plan_permute`;
    its errors name the fix) and say what tuning it means: the transpose pass's (batch, m,
    n), strides (None when contiguous: the NCHW <-> NHWC permutes are plain batched
    transposes) and class, whose vec is what `_dispatch.transpose.batched_launch` derives for permute()'s
    launches (`shapes.pass_vec`)."""
    et = element_type(dtype)
    plan = plan_permute(tuple(shape), axes, et.size)
    p = next((q for q in (*plan.passes, *plan.alternatives) if q.kind == TRANSPOSE), None)
    if p is None:
        return PermuteTarget(plan, et.name)
    dims = (p.batch, p.m, p.n)
    layout = check_layout(dims, (p.ld_in, p.ld_out, p.bs_in, p.bs_out))
    name = et.name if p.elem_bytes == et.size else _WORD_DTYPES[p.elem_bytes]
    return PermuteTarget(plan, name, dims, layout, shape_class(*dims, pass_vec(p)), p)

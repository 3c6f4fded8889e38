"""Time (and, under Nsight Compute, profile) one packed pass with each packed kernel variant
on the same box, in one process (device only):

    python3 dev/packed_variants.py complex128:192x48x329/0,2,1 float32:5x16x288x8x40x3/5,3,2,1,4,0
    ncu --profile-from-start off ... python3 dev/packed_variants.py --profile CASES

A case is the plan's packed pass where the plan packs it, else the whole problem as one
packed launch (`plan.one_launch`). Variants: pipelined (two shared buffers, cp.async) and
sync (one buffer), each checked against np.transpose and timed as % of a device-to-device
copy of the same bytes. What it is for: the pipelined kernel loses on some boxes and wins on
others; this shows both on the same box, and their counters side by side.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import math
import sys

import numpy as np
from _sweep import event_seconds


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument(
        "--profile",
        action="store_true",
        help="one launch of each variant between cuProfilerStart/Stop",
    )
    args = ap.parse_args()

    import cupy

    from autotranspose.runtime.compiler import activate

    state = activate(0)
    cuda = ctypes.CDLL("libcuda.so.1")
    for case in args.cases:
        _one_case(case, args, state, cuda)
        cupy.get_default_memory_pool().free_all_blocks()
    return 0


def _one_case(case: str, args: argparse.Namespace, state, cuda) -> None:
    import cupy

    from autotranspose.plans.permute import PACKED, can_pipeline, one_launch, plan_permute
    from autotranspose.runtime import launch

    name, rest = case.split(":")
    dims_text, axes_text = rest.split("/")
    shape = tuple(int(v) for v in dims_text.split("x"))
    axes = tuple(int(v) for v in axes_text.split(","))
    dtype = np.dtype(name)
    x = cupy.asarray(np.random.default_rng(1).integers(0, 100, shape).astype(dtype))
    out = cupy.empty(tuple(shape[a] for a in axes), dtype)
    want = cupy.transpose(x, axes)
    plan = plan_permute(shape, axes, dtype.itemsize, in_ptr=x.data.ptr, out_ptr=out.data.ptr)
    p = plan.passes[0] if plan.passes[0].kind == PACKED else one_launch(plan.passes[0], PACKED)
    if p is None or not can_pipeline(p):
        print(f"{case}: no packed pass the pipelined kernel takes", flush=True)
        return
    copy_s = event_seconds(
        lambda: cupy.cuda.runtime.memcpyAsync(out.data.ptr, x.data.ptr, x.nbytes, 3, 0),
        args.repeats,
    )
    for variant, pipelined in (("pipelined", True), ("sync", False)):
        lc = launch.make_packed(
            state, p.elem_bytes, p.dims, p.box, x.data.ptr, out.data.ptr, pipelined
        )
        out.fill(0)
        run = functools.partial(lc.run, x.data.ptr, out.data.ptr, 0, state.ctx)
        run()
        ok = bool(cupy.array_equal(out, want))
        s = event_seconds(run, args.repeats)
        print(
            f"{case} box {'x'.join(map(str, p.box))} {lc.kernel.name} ({variant}): "
            f"{100 * copy_s / s:.1f}% of copy, {2 * x.nbytes / s / 1e9:.0f} GB/s, "
            f"grid {lc.grid[0]}, {math.prod(shape) * dtype.itemsize >> 20} MB, "
            f"{'ok' if ok else 'WRONG'}",
            flush=True,
        )
        if args.profile:
            cupy.cuda.runtime.deviceSynchronize()
            cuda.cuProfilerStart()
            run()
            cupy.cuda.runtime.deviceSynchronize()
            cuda.cuProfilerStop()


if __name__ == "__main__":
    sys.exit(main())

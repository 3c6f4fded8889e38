"""Time a permute's boxes (device only): the packed and vector boxes a permute could be moved
in, beside what permute() serves and `torch.compile`, each checked bit-exact against
np.transpose and timed as `bench --random-permute` times (rotated buffers, % of a
device-to-device copy of the same bytes), in one process:

    python3 dev/box_sweep.py [--max-kb 48] float64:3x33x5478x2x63:4,2,0,3,1 ...

The boxes: those the planner's box searches try (`boxes.grown_boxes`: each run target's box
grown along both sides' contiguous chains, and each dim it takes in part also at the largest
divisor of its extent under that part and whole), up to --max-kb of
shared memory (the packed kernels' own limit is raised for this process); each box through
the packed kernel (and the pipelined one where it fits), and through the vector box where
both sides take vectors. What it is for: which box a tail permute wants, before a rule for
the planner's candidates is written (docs/perf-notes.md, "Permute: choosing a pass on the first call")."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import sys


def boxes(dims, e: int, max_bytes: int) -> list[tuple[int, ...]]:
    from autotranspose.plans.boxes import grown_boxes

    return list(grown_boxes(dims, e, max_bytes // e))


def _timed(bench, check, copy_s: float, repeat: int, fn, what: str) -> None:
    """Check `fn` bit-exact, then print its time as % of the copy's."""
    try:
        problem = check(fn, bench.ALL_BITS)
    except Exception as exc:  # a box the kernels refuse
        problem = f"{type(exc).__name__}: {exc}"[:160]
    if problem:
        print(f"  {what}: {problem}", flush=True)
        return
    t = bench.time(fn, repeats=repeat)
    print(f"  {100 * copy_s / t:6.1f}  {what}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "cases",
        nargs="+",
        help="dtype:shape:axes[:box/box...], e.g. int16:2x665960x9x8:3,1,0,2 (boxes to time "
        "too, in the fused problem's dims, e.g. bool:2x13x84x130x1098:0,3,2,4,1:1x1x2x1098x13)",
    )
    ap.add_argument("--max-kb", type=int, default=48)
    ap.add_argument("--most", type=int, default=14, help="boxes a case at most (the largest)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--full-grid",
        action="store_true",
        help="also time each packed and pipelined box launched one box a block (a block for "
        "every box, no walk), as Inductor's kernels run",
    )
    ap.add_argument(
        "--vbox-blocks",
        default="0",
        help="resident blocks an SM to time each vector box at (VBoxKernel.blocks; 0: default)",
    )
    args = ap.parse_args()
    vbox_blocks = [int(b) for b in args.vbox_blocks.split(",")]

    import numpy as np

    import autotranspose.kernels.packed as packed_kernels
    from autotranspose.bench.peers import ServedSteps, permute_peers
    from autotranspose.bench.runners import PermuteCheck
    from autotranspose.dispatch.permute import build
    from autotranspose.plans.boxes import (
        PACKED_MIN_RUN_BYTES,
        VECTOR_MAX_SMEM_BYTES,
        VECTOR_PAD_EVERY,
        VECTOR_TABLE_BYTES,
        gather_conflicts,
        packed_runs,
        pipeline_fits,
        vector_widths,
    )
    from autotranspose.plans.dtypes import element_type
    from autotranspose.plans.layout import contiguous_strides
    from autotranspose.plans.permute import PACKED, Pass, plan_permute
    from autotranspose.runtime.compiler import activate
    from autotranspose.runtime.launch import make_vbox
    from autotranspose.tuner.measure import Bench

    packed_kernels.PACKED_MAX_BYTES = args.max_kb << 10
    state = activate(0)
    for case in args.cases:
        dtype, shape_t, axes_t, *extra = case.split(":")
        shape = tuple(int(v) for v in shape_t.split("x"))
        axes = tuple(int(v) for v in axes_t.split(","))
        e = element_type(dtype).size
        total = int(np.prod(shape))
        bench = Bench(state, e, (1, 1, total))
        try:
            check = PermuteCheck(bench, shape, axes, dtype)
            copy_s = bench.copy_time(repeats=args.repeat)

            timed = functools.partial(_timed, bench, check, copy_s, args.repeat)

            print(f"{case} ({total * e >> 20} MB)", flush=True)
            peers = permute_peers(bench, shape, axes, dtype)
            for peer in ("autotranspose", "compile"):
                fn, note = peers.get(peer, (None, "-"))
                if fn is not None:
                    timed(fn, f"{peer}: {note[:100]}")
            src0, dst0 = bench.pointers(0)
            plan = plan_permute(shape, axes, e, contiguous_strides(shape), None,
                                in_ptr=src0, out_ptr=dst0)  # fmt: skip
            dims = plan.passes[0].problem()
            e = plan.passes[0].elem_bytes  # a row copy's problem is in words, not elements
            cands = boxes(dims, e, args.max_kb << 10)
            cands = sorted(cands, key=math.prod)[-args.most :]
            cands += [tuple(int(v) for v in b.split("x")) for b in "/".join(extra).split("/") if b]
            total_elems = math.prod(d.extent for d in dims)
            for box in cands:
                runs = packed_runs(dims, box)
                if min(runs) * e < PACKED_MIN_RUN_BYTES:
                    continue
                try:
                    kernel = packed_kernels.packed_args(e, dims, box, src0, dst0).kernel
                    how = "words" if kernel.words else "spread" if kernel.spread else "element"
                    how += " funnel" if kernel.funnel else ""
                    how += " realigned" if kernel.realign_out else ""
                except Exception as exc:  # a box the packed kernels refuse
                    how = f"{type(exc).__name__}: {exc}"[:120]
                label = f"box {'x'.join(map(str, box))} ({math.prod(box) * e >> 10} KB, runs {runs[0] * e}/{runs[1] * e} B, {how})"
                base = Pass(PACKED, e, 1, total_elems, total_elems, total_elems, dims=dims,
                            box=box)  # fmt: skip
                variants = [("packed", base)]
                if pipeline_fits(e, math.prod(box)):
                    variants.append(("pipelined", dataclasses.replace(base, pipelined=True)))
                widths = vector_widths(dims, box, e, src0, dst0)
                smem = math.prod(box) * (e + VECTOR_TABLE_BYTES)
                if min(widths) >= max(4, 2 * e) and smem <= VECTOR_MAX_SMEM_BYTES:
                    ways = gather_conflicts(dims, box, e, widths[1])
                    vbox = dataclasses.replace(base, vectors=widths)
                    variants.append((f"vbox {widths[0]}/{widths[1]} B, {ways:.1f} ways", vbox))
                for name, p in variants:
                    mine = dataclasses.replace(plan, passes=(p,), alternatives=())
                    try:
                        steps = build(mine, state, src0, dst0, None, state.ctx)
                    except Exception as exc:
                        print(f"  {label} {name}: {type(exc).__name__}: {exc}"[:200], flush=True)
                        continue
                    timed(ServedSteps(steps, state.ctx, mine), f"{label} {name}")
                    if args.full_grid and not p.vectors[0] and len(steps) == 1:
                        # the same launch, a block for every box (the kernel's grid-stride
                        # loop then runs once a block)
                        tiles = math.prod(-(-d.extent // b) for d, b in zip(dims, box, strict=True))
                        launch = dataclasses.replace(
                            steps[0].launch, grid=(tiles, 1, 1), in_context={}
                        )
                        full = dataclasses.replace(steps[0], launch=launch)
                        timed(ServedSteps((full,), state.ctx, mine), f"{label} {name} full grid")
                    if not p.vectors[0]:
                        continue
                    # the same vector box with its shared box padded (VBoxKernel.pad), and
                    # at other resident blocks an SM (VBoxKernel.blocks)
                    for pad in (0, *VECTOR_PAD_EVERY):
                        if pad % p.vectors[0]:
                            continue
                        ways = gather_conflicts(dims, box, e, p.vectors[1], pad)
                        for k in vbox_blocks:
                            if not pad and not k:
                                continue  # the vector box as built above
                            what = f"{label} vbox pad {pad}" + (f" blocks {k}" if k else "")
                            try:
                                lc = make_vbox(state, e, dims, box, p.vectors, src0, dst0, 0,
                                               pad, k)  # fmt: skip
                            except Exception as exc:
                                print(f"  {what}: {type(exc).__name__}: {exc}"[:200])
                                continue
                            timed(ServedSteps((lc,), state.ctx, mine), f"{what}, {ways:.1f} ways")
        finally:
            bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

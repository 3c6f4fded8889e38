"""Time permute's passes on random permute mixes (device only): for each case of
`bench --random-permute N --seed S`, the plan's own pass, each alternative a first call
times against it (`Plan.alternatives`: the gather, another box, the batched pass, a packed
launch), the whole problem as one packed launch and as one gather where the plan names
neither, and what permute() serves after its first call (`_dispatch.permute.served`), each checked
against np.transpose first, each as % of a copy of the same bytes.

    python3 dev/packed_check.py --seeds 7 11 --count 40 [--json out.json]

What it is for: the data behind the plan's one-launch rule and its alternatives
(docs/perf-notes.md), on seeds they were and were not calibrated on.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[7])
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--budget", type=float, default=1e9, help="stop after this many seconds")
    args = ap.parse_args()

    from _sweep import permute_case, print_summaries, time_steps, within_budget

    from autotranspose.bench.cases import random_permute_cases
    from autotranspose.bench.runners import PermuteCheck
    from autotranspose.kernels.packed import packed_args
    from autotranspose.runtime import launch

    @contextlib.contextmanager
    def kernel_off(**off):
        """Launches made inside take packed kernels with `off` (words=False: the element
        kernel, the words kernel off), to time both on the same box. (The pipelined kernel
        is a plan alternative of its own: `Pass.pipelined`.)"""
        launch.packed_args = functools.partial(packed_args, **off)
        try:
            yield
        finally:
            launch.packed_args = packed_args

    from autotranspose.dispatch.permute import build, served
    from autotranspose.plans.permute import GATHER, PACKED, one_launch
    from autotranspose.runtime.compiler import activate

    state = activate(0)
    rows = []
    cases = ((seed, case) for seed in args.seeds for case in random_permute_cases(args.count, seed))
    for seed, (shape, axes, dtype) in within_budget(cases, args.budget):
        with permute_case(state, shape, axes, dtype, f"{seed} ") as (bench, plan, src0, dst0):
            p = plan.passes[0]
            variants = {"plan": plan}
            for q in plan.alternatives:
                name = (
                    q.kind
                    + ("x".join(map(str, q.box)) if q.box else "")
                    + ("/pipe" if q.pipelined else "")
                )
                variants[name] = plan.taking(q)
            named = {q.kind for q in (p, *plan.alternatives)}
            for kind in (PACKED, GATHER):  # the one-launch passes the plan names neither of
                q = one_launch(p, kind) if kind not in named else None
                if q is not None:
                    variants[kind] = dataclasses.replace(plan, passes=(q,), alternatives=())
            box = next(
                (v.passes[0].box for v in variants.values() if v.passes[0].kind == PACKED), None
            )
            copy_s = bench.copy_time(repeats=args.repeats)
            check = PermuteCheck(bench, shape, axes, dtype)
            row = {
                "seed": seed,
                "shape": list(shape),
                "axes": list(axes),
                "dtype": dtype,
                "kind": p.kind,
                "box": list(box) if box else None,
                "plan_text": p.describe(),
            }
            served_plan, served_steps, _ = served(plan, state, src0, dst0, 0, state.ctx)
            runs = {name: build(v, state, src0, dst0, 0, state.ctx) for name, v in variants.items()}
            for name, v in list(variants.items()):  # the same box without the words kernel
                q = v.passes[0]
                k = (
                    packed_args(
                        q.elem_bytes, q.dims, q.box, src0, dst0, pipelined=q.pipelined
                    ).kernel
                    if q.kind == PACKED
                    else None
                )
                if k is not None and k.words:
                    with kernel_off(words=False):
                        runs[name + "/elem"] = build(v, state, src0, dst0, 0, state.ctx)
            runs["served"] = served_steps
            row["served_kind"] = served_plan.passes[0].kind
            row["served_box"] = list(served_plan.passes[0].box)
            time_steps(state, bench, check, copy_s, runs, row, args.repeats)
            row["timed"] = list(runs)
            rows.append(row)
            others = " ".join(f"{k} {row[k]}" for k in runs if k not in ("plan", "served"))
            print(
                f"{seed:>3} {dtype:>10} {'x'.join(map(str, shape)):>22} {axes!s:>20} "
                f"{p.kind:>9} plan {row['plan']!s:>6} served {row['served']!s:>6} "
                f"({row['served_kind']}) | {others}",
                flush=True,
            )
    print_summaries(rows, ("plan", "served", "best"), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time permute's one-launch passes against the plan on random permute mixes (device only):
for each case of `bench --random-permute N --seed S`, the plan as permute() runs it, the
whole problem as one packed launch (where `plan.packed_box` takes it) and as one gather,
each checked against np.transpose first, each as % of a copy of the same bytes.

    python3 tools/packed_check.py --seeds 7 11 --count 40 [--json out.json]

What it is for: the data behind the plan's rule for when a problem is one packed launch
(docs/perf-notes.md), on seeds the rule was and was not calibrated on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[7])
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--budget", type=float, default=1e9, help="stop after this many seconds")
    ap.add_argument("--min-elems", type=int, nargs="*", default=[],
                    help="also time boxes grown to these PACKED_MIN_ELEMS")
    args = ap.parse_args()

    from autotranspose import plan as plan_module
    from autotranspose.bench import _PermuteCheck, random_permute_cases
    from autotranspose.compiler import activate
    from autotranspose.dtypes import element_type
    from autotranspose.measure import Bench
    from autotranspose.permuter import build
    from autotranspose.plan import (
        GATHER,
        PACKED,
        Pass,
        contiguous_strides,
        packed_box,
        plan_permute,
    )

    state = activate(0)
    rows = []
    started = time.monotonic()
    for seed in args.seeds:
        for shape, axes, dtype in random_permute_cases(args.count, seed):
            if time.monotonic() - started > args.budget:
                break
            e = element_type(dtype).size
            bench = Bench(state, e, (1, 1, math.prod(shape)))
            try:
                src0, dst0 = bench.pointers(0)
                plan = plan_permute(shape, axes, e, contiguous_strides(shape), None, in_ptr=src0, out_ptr=dst0)
                p = plan.passes[0]
                problem = p.problem()
                total = math.prod(d.extent for d in problem)
                variants = {"plan": plan}
                box = packed_box(problem, p.elem_bytes) if len(problem) <= 8 else None
                if box is not None:
                    q = Pass(PACKED, p.elem_bytes, 1, total, total, total, dims=problem, box=box)
                    variants["packed"] = dataclasses.replace(plan, passes=(q,))
                default = plan_module.PACKED_MIN_ELEMS
                for n in args.min_elems:
                    plan_module.PACKED_MIN_ELEMS = n
                    try:
                        b = packed_box(problem, p.elem_bytes) if len(problem) <= 8 else None
                    finally:
                        plan_module.PACKED_MIN_ELEMS = default
                    if b is not None and b != box:
                        q = Pass(PACKED, p.elem_bytes, 1, total, total, total, dims=problem, box=b)
                        variants[f"packed{n}"] = dataclasses.replace(plan, passes=(q,))
                if len(problem) <= 8:
                    q = Pass(GATHER, p.elem_bytes, 1, total, total, total, dims=problem)
                    variants["gather"] = dataclasses.replace(plan, passes=(q,))
                copy_s = bench.copy_time(repeats=args.repeats)
                check = _PermuteCheck(bench, shape, axes, dtype)
                row = {"seed": seed, "shape": list(shape), "axes": list(axes), "dtype": dtype,
                       "kind": p.kind, "box": list(box) if box else None, "plan_text": p.describe()}
                for name, v in variants.items():
                    steps = build(v, state, src0, dst0, 0, state.ctx)

                    def run(src, dst, _s, steps=steps):
                        for s in steps:
                            s.run(src, dst, 0, state.ctx)

                    bad = check(run, Bench.ALL_BITS)
                    row[name] = None if bad else round(100 * copy_s / bench.time(run, repeats=args.repeats), 1)
                    if bad:
                        row[name + "_error"] = bad
                rows.append(row)
                print(f"{seed:>3} {dtype:>10} {'x'.join(map(str, shape)):>22} {axes!s:>20} "
                      f"{p.kind:>9} plan {row['plan']!s:>6} packed {row.get('packed')!s:>6} "
                      f"gather {row.get('gather')!s:>6} box {box}", flush=True)
            except Exception as exc:  # one case's failure is a line, not the end of the run
                print(f"{seed} {dtype} {shape} {axes}: {type(exc).__name__}: {exc}", flush=True)
            finally:
                bench.close()
    for key in ("plan", "packed", "gather", *(f"packed{n}" for n in args.min_elems)):
        vals = [r[key] for r in rows if r.get(key) is not None]
        if vals:
            print(f"{key}: n={len(vals)} median {np.median(vals):.1f} p10 {np.percentile(vals, 10):.1f} "
                  f"min {min(vals):.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

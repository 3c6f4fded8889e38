"""Byte-permute tiles past 48 KiB (dynamic shared memory) against those within it, per case.

For each case, every non-persistent byte-permute config of the kind that serves it (tiled for
a matrix with both sides long, flat for a short side of at most 256 bytes) that this GPU runs,
checked on fresh data with a poisoned output and a guard region, then timed on rotated buffers
(`measure.Bench`); prints the best static and the best dynamic config and what each is:

    python3 dev/dynamic_sweep.py bool:2528978x182 int8:28881x28881 uint8:130x4304117
"""

from __future__ import annotations

import json

from _sweep import measure_ranked, results_log, start, sweep_parser, within_budget


def candidates(state, elem_bytes: int, m: int, n: int) -> list:
    from autotranspose.kernels.config import flat_prmt_space, prmt_space

    limits = state.info.limits
    short = min(m, n)
    if short * elem_bytes <= 256:
        space = flat_prmt_space(elem_bytes, limits, short)
        return [c for c in space if not c.persistent and c.cache == "default" and c.applies(m, n)]
    return [c for c in prmt_space(elem_bytes, limits) if not c.persistent and c.cache == "default"]


def main() -> None:
    from autotranspose.plans.dtypes import element_type

    ap = sweep_parser()
    ap.add_argument("cases", nargs="+", help="DTYPE:MxN or DTYPE:BxMxN")
    args = ap.parse_args()
    state = start()
    log = []
    for case in within_budget(args.cases, args.budget):
        name, dims = case.split(":")
        shape = tuple(int(v) for v in dims.split("x"))
        shape = (1, *shape) if len(shape) == 2 else shape
        s = element_type(name).size  # bfloat16 too
        cands = candidates(state, s, shape[1], shape[2])
        ranked = measure_ranked(state, s, shape, cands)
        ok = [(c, r) for c, r in ranked if r.ok]
        static = next(((c, r) for c, r in ok if not c.dynamic_smem), None)
        dynamic = next(((c, r) for c, r in ok if c.dynamic_smem), None)
        bad = [(c.key, r.status) for c, r in ranked if not r.ok]
        line = f"=== {case}: {len(cands)} configs"
        for label, best in (("static", static), ("dynamic", dynamic)):
            if best:
                c, r = best
                line += f" | best {label} {100 * r.ratio:.1f}% {c.key} ({c.smem_bytes} B)"
        print(line + (f" | FAILED {bad[:3]}" if bad else ""), flush=True)
        log.append({"case": case, "results": results_log(ranked)})
    with open(f"{args.out}/dynamic_sweep.json", "w") as f:
        json.dump(log, f)


if __name__ == "__main__":
    main()

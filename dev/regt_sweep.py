"""Register transposes by side: for each case, the regt configs of its side (every block size)
against the other kinds' configs a call of that side is served or raced (the narrow direct
tiles, the tall, wide and flat defaults), each checked on fresh data with a poisoned output
and a guard region, then timed on rotated buffers (`measure.Bench`); prints the best of each
(docs/perf-notes.md, "Register transposes": which sides the register transpose serves):

    python3 dev/regt_sweep.py int8:5x16000001 int8:16000001x5 float16:3x16000001
    python3 dev/regt_sweep.py --sides 1:2-16 2:2-8   # every side, both directions
"""

from __future__ import annotations

import json

from _sweep import measure_ranked, results_log, start, sweep_parser, within_budget

LONG_BYTES = 80_000_000  # a case's bytes, about (its long side is odd)


def candidates(state, s: int, m: int, n: int) -> tuple[list, list]:
    """(regt configs, others) for an m x n call of `s`-byte elements."""
    from autotranspose.kernels.config import (
        flat_default,
        narrow_configs,
        regt_space,
        tall_default,
        wide_default,
    )

    limits = state.info.limits
    side = min(m, n)
    regt = [
        c
        for c in regt_space(s, limits, side)
        if c.applies(m, n) and not c.persistent and c.cache == "default"
    ]
    others = [*narrow_configs(s, m, n)]
    others += [wide_default(s, m) if m < n else tall_default(s, n), flat_default(s, side)]
    others = [
        c for c in dict.fromkeys(others) if c is not None and c.fits(limits) and c.applies(m, n)
    ]
    return regt, others


def cases_of(args) -> list[str]:
    names = {1: "int8", 2: "float16"}
    out = list(args.cases)
    for spec in args.sides:
        s, rng = spec.split(":")
        lo, hi = (int(v) for v in rng.split("-"))
        for side in range(lo, hi + 1):
            long = (LONG_BYTES // (side * int(s))) | 1
            out += [f"{names[int(s)]}:{side}x{long}", f"{names[int(s)]}:{long}x{side}"]
    return out


def main() -> None:
    from autotranspose.plans.dtypes import element_type
    from autotranspose.runtime.compiler import precompile

    ap = sweep_parser()
    ap.add_argument("cases", nargs="*", help="DTYPE:MxN or DTYPE:BxMxN")
    ap.add_argument("--sides", nargs="*", default=[], help="SIZE:LO-HI: every side, both ways")
    args = ap.parse_args()
    state = start()
    cases = cases_of(args)
    parsed = []
    for case in cases:
        name, dims = case.split(":")
        shape = tuple(int(v) for v in dims.split("x"))
        shape = (1, *shape) if len(shape) == 2 else shape
        s = element_type(name).size
        parsed.append((case, s, shape, *candidates(state, s, shape[1], shape[2])))
    precompile(state, list(dict.fromkeys(c for p in parsed for c in p[3] + p[4])))
    log = []
    for case, s, shape, regt, others in within_budget(parsed, args.budget):
        ranked = measure_ranked(state, s, shape, regt + others)
        ok = [(c, r) for c, r in ranked if r.ok]
        best_r = next(((c, r) for c, r in ok if c.kind == "regt" and not c.flag("staged")), None)
        best_s = next(((c, r) for c, r in ok if c.kind == "regt" and c.flag("staged")), None)
        best_o = next(((c, r) for c, r in ok if c.kind != "regt"), None)
        bad = [(c.key, r.status) for c, r in ranked if not r.ok]
        line = f"=== {case}"
        for label, best in (("regt", best_r), ("staged", best_s), ("other", best_o)):
            if best:
                line += f" | {label} {100 * best[1].ratio:5.1f}% {best[0].key}"
        regt_all = " ".join(
            f"{'sg' if c.flag('staged') else ''}{c.threads}{f'b{c.min_blocks}' if c.min_blocks else ''}:{100 * r.ratio:.1f}"
            for c, r in ranked
            if c.kind == "regt"
        )
        print(
            line + f" | regt by threads {regt_all}" + (f" | FAILED {bad[:3]}" if bad else ""),
            flush=True,
        )
        log.append({"case": case, "results": results_log(ranked)})
    with open(f"{args.out}/regt_sweep.json", "w") as f:
        json.dump(log, f)


if __name__ == "__main__":
    main()

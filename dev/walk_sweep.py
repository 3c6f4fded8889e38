"""Walking byte-permute tiles (walk=True: a block's consecutive tiles down a column strip, the
halo carried in shared memory, output windows on 32-byte sectors) against the tiles that
load every tile whole, per case.

For each case: every tiled byte-permute config of one cache hint that this GPU runs, not
walking (one block a tile) and walking (every grid), checked on fresh data with a poisoned
output and a guard region, then timed on rotated buffers (`measure.Bench`); prints the
untuned default, the best of each and the top few:

    python3 dev/walk_sweep.py uint8:8487x8487 bfloat16:14185x14185 --top 6
"""

from __future__ import annotations

import json

from _sweep import measure_ranked, print_ranked, results_log, start, sweep_parser, within_budget


def candidates(state, elem_bytes: int) -> list:
    from autotranspose._config import prmt_space

    return [
        c
        for c in prmt_space(elem_bytes, state.info.limits)
        if c.cache == "default" and (c.walk or not c.persistent)
    ]


def main() -> None:
    from autotranspose._config import prmt_default
    from autotranspose._dtypes import element_type

    ap = sweep_parser()
    ap.add_argument("cases", nargs="+", help="DTYPE:MxN or DTYPE:BxMxN")
    ap.add_argument("--top", type=int, default=5)
    args = ap.parse_args()
    state = start()
    log = []
    for case in within_budget(args.cases, args.budget):
        name, dims = case.split(":")
        shape = tuple(int(v) for v in dims.split("x"))
        shape = (1, *shape) if len(shape) == 2 else shape
        s = element_type(name).size
        ranked = measure_ranked(state, s, shape, candidates(state, s))
        ok = [(c, r) for c, r in ranked if r.ok]
        line = f"=== {case}: {len(ranked)} configs"
        default = prmt_default(s)
        for label, pick in (
            ("default", next(((c, r) for c, r in ok if c == default), None)),
            ("best loading", next(((c, r) for c, r in ok if not c.walk), None)),
            ("best walking", next(((c, r) for c, r in ok if c.walk), None)),
        ):
            if pick:
                line += f" | {label} {100 * pick[1].ratio:.1f}% {pick[0].key}"
        print(line, flush=True)
        print_ranked(ranked, args.top)
        log.append({"case": case, "results": results_log(ranked)})
        with open(f"{args.out}/walk_sweep.json", "w") as f:
            json.dump(log, f)


if __name__ == "__main__":
    main()

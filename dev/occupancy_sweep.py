"""Developer tool: what `min_blocks` (the `__launch_bounds__` blocks per SM a tiled or staged
kernel asks for) buys. Per case: `bench` (every peer, the seed kernel and what `transpose()`
serves after its first call), then a few base configs (the lookup's answer, the tiled rendering
of the seed documents' config, the few-rows and staged defaults, tiles that fit the short side),
each at its own bounds (min_blocks=0) and at every min_blocks its threads allow, checked on
fresh data and timed, as % of copy.

    python dev/occupancy_sweep.py --out DIR [--budget SECONDS] [--cases BYTES:BxMxN ...]

Writes occupancy_sweep.json to DIR (each config's key ends in _bN for min_blocks N).
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

from _sweep import (
    measure_ranked,
    print_ranked,
    results_log,
    runnable_tiles,
    start,
    sweep_parser,
    within_budget,
)

from autotranspose.bench.reports import format_table
from autotranspose.bench.runners import bench_case
from autotranspose.dispatch.policy import few_rows_default
from autotranspose.dispatch.transpose import choose_config
from autotranspose.kernels.config import (
    MAX_THREADS_PER_SM,
    ConfigError,
    KernelConfig,
    seed_config,
    staged_default,
)
from autotranspose.kernels.shapes import max_vec
from autotranspose.runtime.compiler import precompile

DT = {1: "int8", 2: "float16", 4: "float32", 8: "float64", 16: "complex128"}
# (batch, m, n), element bytes: the fixed list's few long rows and tall shapes first, then the odd
# and aligned squares that the whole mix holds most of
CASES = [
    ((1, 20, 7081411), 4),
    ((1, 20, 7081411), 8),
    ((1, 24, 2000003), 8),
    ((1, 18, 1267567), 4),
    ((1, 116, 259791), 4),
    ((1, 20, 7081411), 16),
    ((1, 7081411, 20), 8),
    ((1, 7081411, 20), 4),
    ((1, 471466, 129), 4),
    ((1, 4099, 6007), 4),
    ((1, 10923, 10923), 8),
    ((6, 3603, 3603), 4),
    ((1, 8192, 8192), 8),
    ((1, 8192, 8192), 4),
]


LADDER = (2, 3, 4, 5, 6, 8, 12, 16)  # min_blocks tried besides 0


def ladder(c: KernelConfig) -> list[KernelConfig]:
    """`c` at its own bounds and at each min_blocks of LADDER its threads allow."""
    out = [c.replace(min_blocks=0)]
    for b in LADDER:
        if b * c.threads <= MAX_THREADS_PER_SM:
            try:
                out.append(c.replace(min_blocks=b))
            except ConfigError:
                pass
    return out


def small_tiles(s: int, m: int, n: int, v: int) -> list[KernelConfig]:
    """A few tiled configs whose tile fits the short side (or 32x32 for squares)."""
    short = min(m, n)
    tms = [t for t in (16, 32, 64) if t <= max(short, 16)][-1:] if short < 64 else [32, 64]
    tn = 32 if s >= 8 else 64
    return runnable_tiles(
        s, m, n, ((tm, tn, v, pt, 1, "pad", "col") for tm, pt in itertools.product(tms, (1, 2, 4)))
    )


def main() -> None:
    ap = sweep_parser()
    ap.add_argument("--first", type=int, default=len(CASES), help="only the first N cases")
    ap.add_argument(
        "--cases", nargs="*", help="instead of CASES: element bytes and shape, e.g. 2:1x11407x11407"
    )
    args = ap.parse_args()
    cases = CASES[: args.first]
    if args.cases:
        cases = [
            (tuple(int(x) for x in shape.split("x")), int(s))
            for s, shape in (c.split(":") for c in args.cases)
        ]
    state = start()
    log = []
    for shape, s in within_budget(cases, args.budget):
        t0 = time.time()
        b, m, n = shape
        rows = bench_case(shape, DT[s], repeats=3)
        print(format_table(rows), flush=True)
        vmax = max_vec(s, m, n)
        served = choose_config(state, s, b, m, n, vmax, False)
        v1 = min(vmax, 16 // s)
        staged = staged_default(s) if vmax * s < 16 else None
        near = (
            [
                staged.replace(**f)
                for f in ({"tile_m": 64}, {"tile_n": 32}, {"per_thread": 2}, {"raster": "row"})
            ]
            if staged
            else []
        )
        base = [
            served,
            seed_config(s),
            few_rows_default(s, min(m, n), max(m, n), vmax),
            staged,
            *near,
            *small_tiles(s, m, n, v1),
        ]
        base = [
            c
            for c in dict.fromkeys(base)
            if c is not None and not (c.spans_short_side or c.kind == "prmt")
        ]
        cands = [c for c in dict.fromkeys(x for c in base for x in ladder(c)) if c.applies(m, n)]
        if served not in cands:
            cands.insert(0, served)
        failed = precompile(state, cands)
        cands = [c for c in cands if c not in failed]
        ranked = measure_ranked(state, s, shape, cands)
        by = {c.key: r.ratio * 100 for c, r in ranked}
        print(
            f"=== {b}x{m}x{n} {DT[s]} ({len(cands)} configs, {time.time() - t0:.0f} s): served "
            f"{served.key} {by.get(served.key, 0):.1f}%",
            flush=True,
        )
        for c in base:
            lad = "  ".join(
                f"b{x.min_blocks}:{by.get(x.key, 0):.1f}" for x in ladder(c) if x.key in by
            )
            print(f"  {c.key:50s} {lad}", flush=True)
        print_ranked(ranked, 5)
        log.append(
            {
                "shape": shape,
                "elem_bytes": s,
                "served": served.key,
                "bench": [str(r) for r in rows],
                "results": results_log(ranked),
            }
        )
        Path(args.out, "occupancy_sweep.json").write_text(json.dumps(log, default=str))


if __name__ == "__main__":
    main()

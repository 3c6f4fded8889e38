"""Developer tool: few long rows of 4-, 8- and 16-byte elements (the random mixes' m x n with
m from 9 to 200 and n in the hundreds of thousands), where the seed documents' kernel beat
what `transpose()` served (H200: complex64 16x548100 97.1 against 79.6).

    python dev/few_rows_sweep.py --out DIR [--budget SECONDS] [--columns]

Per case: `bench` (every peer, the seed kernel included, and what `transpose()` serves after
its first call), then the served guess and a grid of tiled configs whose tile_m fits the rows
(`tile_m` <= m: full tiles, no element-wise edge path; with `--columns` the transposed
cases and `tile_n` <= n) with the flat and staged defaults,
each checked on fresh data and timed, as % of copy. Writes few_rows_sweep.json to DIR.
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

from autotranspose._compiler import precompile
from autotranspose._config import (
    PER_THREAD,
    TILE_SIZES,
    KernelConfig,
    flat_default,
    max_vec,
    seed_config,
    staged_default,
)
from autotranspose._dispatch.transpose import choose_config
from autotranspose.bench.reports import format_table
from autotranspose.bench.runners import bench_case

DT = {4: "float32", 8: "complex64", 16: "complex128"}
CASES = [
    ((1, 16, 548100), 8),
    ((1, 18, 1267567), 4),
    ((1, 44, 240408), 16),
    ((1, 115, 81771), 8),
    ((1, 140, 1843254), 4),
    ((1, 24, 2000003), 8),
    ((1, 16, 1048576), 16),
    ((1, 60, 1988362), 8),
]


def grid(s: int, m: int, n: int, vmax: int) -> list[KernelConfig]:
    """Tiled configs with full tiles along the short side: tile_m <= m, or tile_n <= n for
    few columns (at least the smallest tile)."""
    tms = [t for t in TILE_SIZES if t <= max(min(m, n), TILE_SIZES[0])][-2:]
    vecs = sorted({v for v in (vmax, max(1, vmax // 2)) if v == 1 or v * s >= 4})
    fields = itertools.product(
        tms, (32, 64, 128, 256), vecs, PER_THREAD, (("pad", 1), ("swizzle", 0)), ("row", "col")
    )
    return runnable_tiles(
        s, m, n, ((tm, tn, v, pt, pad, lay, ras) for tm, tn, v, pt, (lay, pad), ras in fields)
    )


def main() -> None:
    ap = sweep_parser()
    ap.add_argument(
        "--columns", action="store_true", help="few columns instead: each case transposed"
    )
    args = ap.parse_args()
    state = start()
    log = []
    cases = [((b, n, m), s) for (b, m, n), s in CASES] if args.columns else CASES
    for shape, s in within_budget(cases, args.budget):
        t0 = time.time()
        b, m, n = shape
        rows = bench_case(shape, DT[s], repeats=3)
        print(format_table(rows), flush=True)
        vmax = max_vec(s, m, n)
        served = choose_config(state, s, b, m, n, vmax, False)
        cands = [
            served,
            seed_config(s),
            *grid(s, m, n, vmax),
            *(c for c in (flat_default(s, min(m, n)), staged_default(s)) if c is not None),
        ]
        cands = [c for c in dict.fromkeys(cands) if c.applies(m, n)]
        failed = precompile(state, cands)
        cands = [c for c in cands if c not in failed]
        ranked = measure_ranked(state, s, shape, cands)
        by = {c: r for c, r in ranked}
        print(
            f"=== {m}x{n} {DT[s]} ({len(cands)} configs, {time.time() - t0:.0f} s): served "
            f"{served.key} {by[served].ratio * 100:.1f}%, tiled seed config "
            f"{by[seed_config(s)].ratio * 100:.1f}%",
            flush=True,
        )
        print_ranked(ranked, 8)
        log.append(
            {
                "shape": shape,
                "elem_bytes": s,
                "served": served.key,
                "bench": [str(r) for r in rows],
                "results": results_log(ranked),
            }
        )
        name = "few_columns_sweep.json" if args.columns else "few_rows_sweep.json"
        Path(args.out, name).write_text(json.dumps(log, default=str))


if __name__ == "__main__":
    main()

"""Developer tool: direct kernels (`kind="direct"`, the seed documents' strategy with
the tiled kernel's parameters) against the seed kernel and what `transpose()` serves, on the
cases where the seed kernel won (docs/perf-notes.md, "Direct tiles"): few long rows, few columns
and odd squares of 4- to 16-byte elements.

    python dev/direct_sweep.py --out DIR [--budget SECONDS] [--cases 1x21x7536398:float64 ...]

Per case: `bench` with the seed kernel and autotranspose only (what `transpose()` serves),
then the served config, the tiled rendering of the seed's config and a grid of direct configs
(tiles 16-64 a side, per_thread 2-8, both rasters, uncapped and at each register cap), each
checked on fresh data and timed in one process, as % of copy. Writes direct_sweep.json.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

from _sweep import measure_ranked, print_ranked, results_log, start, sweep_parser, within_budget

from autotranspose.bench.reports import format_table
from autotranspose.bench.runners import bench_case
from autotranspose.dispatch.transpose import choose_config
from autotranspose.kernels.config import (
    DIRECT_TILES,
    ConfigError,
    KernelConfig,
    cap_steps,
    seed_config,
)
from autotranspose.kernels.shapes import max_vec
from autotranspose.plans.dtypes import element_type
from autotranspose.runtime.compiler import precompile

CASES = [
    ((1, 20, 7081411), "float64"),
    ((1, 21, 7536398), "float64"),
    ((1, 18, 1267567), "float64"),
    ((1, 40, 1500007), "float64"),
    ((1, 100, 600011), "float64"),
    ((1, 140, 400009), "float64"),
    ((1, 200, 300007), "float64"),
    ((1, 9, 5303956), "float64"),
    ((1, 13, 3000017), "float64"),
    ((1, 7081411, 20), "float64"),
    ((1, 574153, 13), "complex64"),
    ((1, 16, 548100), "complex64"),
    ((1, 21, 3768199), "complex128"),
    ((1, 5, 10000019), "complex128"),
    ((1, 2304, 2304), "int64"),
    ((1, 7040, 777), "float64"),
    ((1, 81288, 116), "int64"),
    ((1, 10923, 10923), "float64"),
    ((1, 20, 7081411), "float32"),
    ((1, 18, 1267567), "float32"),
    ((1, 15, 16642555), "float32"),
    ((1, 47, 1060938), "float32"),
    ((1, 9, 5303956), "float32"),
    ((1, 64, 2000003), "float32"),
    ((1, 7081411, 20), "float32"),
    ((1, 1048576, 32), "float32"),
    ((1, 32, 1048576), "float32"),
]


def direct_grid(s: int, conjugate: bool = False) -> list[KernelConfig]:
    """Direct configs: every tile of DIRECT_TILES, per_thread 2-8, pad 1, both rasters,
    uncapped and at each register cap."""
    out = []
    for tm, tn, pt, raster in itertools.product(
        DIRECT_TILES, DIRECT_TILES, (2, 4, 8), ("row", "col")
    ):
        try:
            c = KernelConfig(s, tm, tn, 1, pt, 1, "pad", raster, conjugate=conjugate, kind="direct")
        except ConfigError:
            continue
        out += [c, *(c.replace(min_blocks=b) for b in cap_steps(c))]
    return out


def parse_case(text: str) -> tuple[tuple[int, int, int], str]:
    dims, dtype = text.split(":")
    b, m, n = (int(x) for x in dims.split("x"))
    return (b, m, n), dtype


def main() -> None:
    ap = sweep_parser()
    ap.add_argument("--cases", nargs="*", help="BxMxN:dtype (default: the built-in list)")
    args = ap.parse_args()
    state = start()
    cases = [parse_case(c) for c in args.cases] if args.cases else CASES
    log = []
    for shape, dtype in within_budget(cases, args.budget):
        t0 = time.time()
        b, m, n = shape
        s = element_type(dtype).size
        rows = bench_case(shape, dtype, peers=("copy", "autotranspose", "seed"), repeats=3)
        print(format_table(rows), flush=True)
        seed_pct = next((r.of_copy for r in rows if r.peer == "seed" and r.of_copy), None)
        served = choose_config(state, s, b, m, n, max_vec(s, m, n), False)
        seed_tiled = seed_config(s)
        seed_direct = seed_tiled.replace(direct=True)
        cands = list(dict.fromkeys([served, seed_tiled, *direct_grid(s)]))
        cands = [c for c in cands if c.applies(m, n)]
        failed = precompile(state, cands)
        cands = [c for c in cands if c not in failed]
        ranked = measure_ranked(state, s, shape, cands)
        by = {c: r for c, r in ranked}
        best_c, best_r = next(((c, r) for c, r in ranked if c.kind == "direct"), (None, None))

        def pct(c: KernelConfig, by: dict = by) -> str:
            return f"{by[c].ratio * 100:.1f}" if c in by else "-"

        print(
            f"=== {m}x{n} {dtype} ({len(cands)} configs, {time.time() - t0:.0f} s): seed kernel "
            f"{seed_pct if seed_pct is None else f'{seed_pct:.1f}'}, served {served.key} {pct(served)}, "
            f"tiled seed config {pct(seed_tiled)}, direct seed config {pct(seed_direct)}, best direct "
            f"{best_c.key if best_c else '-'} {best_r.ratio * 100 if best_r else 0:.1f}",
            flush=True,
        )
        print_ranked(ranked, 6)
        log.append(
            {
                "shape": shape,
                "dtype": dtype,
                "served": served.key,
                "seed": seed_pct,
                "bench": [str(r) for r in rows],
                "results": results_log(ranked),
            }
        )
        Path(args.out, "direct_sweep.json").write_text(json.dumps(log, default=str))


if __name__ == "__main__":
    main()

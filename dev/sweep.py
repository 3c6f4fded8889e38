"""Developer tool: measure a grid of configs on the device for a few cases, with the peers.

    python dev/sweep.py --out DIR [--quick]

Prints, per case, the best configs and the peers as % of copy; writes sweep.json to DIR.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

from autotranspose.bench.reports import format_table
from autotranspose.bench.runners import bench_case
from autotranspose.kernels.config import NEWEST, ConfigError, KernelConfig
from autotranspose.kernels.shapes import max_vec
from autotranspose.runtime.compiler import activate
from autotranspose.tuner.measure import Bench, measure_configs

DT = {1: "int8", 2: "float16", 4: "float32", 8: "float64", 16: "complex128"}


def candidates(s: int, vmax: int, quick: bool) -> list[KernelConfig]:
    """Stage 1: tiles, vectors, work per thread, layouts and rasters (no launch options)."""
    vecs = [(v, False) for v in (vmax, vmax // 2) if v >= 1 and (v == 1 or v * s >= 4)]
    if vmax < 16 // s:  # rows not aligned to the widest vectors: try realigning kernels
        vecs += [(v, True) for v in (16 // s, 8 // s, 4 // s) if v >= 2]
    tiles = [
        (32, 32),
        (64, 64),
        (32, 64),
        (64, 32),
        (128, 64),
        (64, 128),
        (128, 128),
        (32, 128),
        (128, 32),
        (256, 128),
        (128, 256),
    ]
    pts = [1, 2, 4, 8] if quick else [1, 2, 4, 8, 16, 32]
    layouts = [("pad", 1), ("swizzle", 0)]
    out = []
    for (v, ra), (tm, tn), pt, (lay, pad), ras in itertools.product(
        vecs, tiles, pts, layouts, ("row", "col")
    ):
        try:
            c = KernelConfig(s, tm, tn, v, pt, pad, lay, ras, realign=ra)
        except ConfigError:
            continue
        if 64 <= c.threads <= 512 and c.fits(NEWEST):
            out.append(c)
    return out


def refinements(best: list[KernelConfig]) -> list[KernelConfig]:
    """Stage 2: the best stage-1 configs with cache hints and persistent grids."""
    out = []
    for c in best:
        for cache, persistent in itertools.product(("default", "stream"), (0, 1, 2, 4, 8)):
            out.append(c.replace(cache=cache, persistent=persistent))
    return list(dict.fromkeys(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cases", default="all")
    args = ap.parse_args()
    state = activate(0)
    print(state.info, flush=True)
    cases = [((1, 8192, 8192), s) for s in (1, 2, 4, 8, 16)]
    cases += [
        ((1, 4099, 6007), 4),
        ((1, 4099, 6007), 1),
        ((1, 1048576, 32), 4),
        ((1, 32, 1048576), 4),
        ((64, 1024, 1024), 2),
    ]
    cases += [((1, 16384, 16384), s) for s in (1, 2, 4, 8, 16)]
    if args.cases != "all":
        cases = [cases[int(i)] for i in args.cases.split(",")]
    log = []
    top: dict[int, list[KernelConfig]] = {}
    for shape, s in cases:
        t0 = time.time()
        _b, m, n = shape
        vmax = max_vec(s, m, n)
        bench = Bench(state, s, shape)
        try:
            copy_s = bench.copy_time()
            if shape[1] == 16384 and s in top:
                cands = refinements(top[s][:4])
                res = measure_configs(bench, cands, copy_s)
            else:
                cands = candidates(s, vmax, args.quick)
                res = measure_configs(bench, cands, copy_s)
                first = sorted(zip(cands, res, strict=False), key=lambda cr: -cr[1].gbps)
                extra = [c for c in refinements([c for c, _ in first[:6]]) if c not in set(cands)]
                cands += extra
                res += measure_configs(bench, extra, copy_s)
        finally:
            bench.close()
        ranked = sorted(zip(cands, res, strict=False), key=lambda cr: -cr[1].gbps)
        best = ranked[0][0]
        if shape[1] == 8192:
            top[s] = [c.replace(cache="default", persistent=0) for c, _ in ranked[:12]]
            top[s] = list(dict.fromkeys(top[s]))
        rows = bench_case(shape, DT[s], config=best)
        print(f"\n=== {shape} {DT[s]}: {len(cands)} configs in {time.time() - t0:.1f}s", flush=True)
        for c, r in ranked[:10]:
            print(f"  {r.ratio * 100:6.1f}%  {r.gbps:7.0f} GB/s  {c.key}")
        bad = [(c, r) for c, r in ranked if not r.ok]
        for c, r in bad[:5]:
            print(f"  {r.status}: {c.key}: {r.error}")
        print(format_table(rows), flush=True)
        log.append(
            {
                "shape": shape,
                "dtype": DT[s],
                "results": [{"config": c.to_dict(), **r.to_dict()} for c, r in ranked],
                "peers": [r.__dict__ for r in rows],
            }
        )
        Path(args.out, "sweep.json").write_text(json.dumps(log, default=str))


if __name__ == "__main__":
    main()

"""Developer tool: staged kernels against what `transpose()` serves today, on unaligned cases.

    python dev/staged_sweep.py --out DIR [--random N] [--seed S]

Per case: copy, the served config, the staged default, the candidate defaults (CANDIDATES) and
N random staged configs (checked on fresh data, then timed), as % of copy; then, per element
size, each candidate's geometric mean over the cases. Writes staged_sweep.json to DIR.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _sweep import case_ratio as _ratio, measure_ranked, print_ranked, results_log

from autotranspose.dispatch.transpose import choose_config
from autotranspose.kernels.config import KernelConfig, staged_default, staged_space
from autotranspose.kernels.shapes import max_vec
from autotranspose.runtime.compiler import activate

CASES = [((1, 4099, 6007), s) for s in (1, 2, 4, 8)]
CASES += [((1, 6007, 4099), s) for s in (1, 2, 4, 8)]
CASES += [
    ((1, 26085, 26085), 1),
    ((1, 26085, 26085), 2),
    ((1, 68451, 4969), 1),
    ((46, 342, 16751), 1),
]
CASES += [((1, 10923, 10923), 8), ((1, 12001, 9001), 4), ((7, 1531, 2047), 2)]


def _c(
    s: int, tm: int, tn: int, v: int, pt: int, raster: str, cache: str = "default"
) -> KernelConfig:
    return KernelConfig(s, tm, tn, v, pt, 0, "pad", raster, cache, kind="staged")


CANDIDATES = {
    1: [
        _c(1, 128, 64, 16, 2, "col"),
        _c(1, 128, 64, 16, 4, "col"),
        _c(1, 256, 32, 16, 4, "col"),
        _c(1, 128, 32, 16, 2, "col"),
        _c(1, 64, 64, 16, 2, "col"),
        _c(1, 256, 64, 16, 4, "col"),
    ],
    2: [
        _c(2, 128, 64, 8, 4, "col", "stream"),
        _c(2, 128, 64, 8, 2, "col"),
        _c(2, 64, 32, 8, 2, "col"),
        _c(2, 128, 32, 8, 2, "col", "stream"),
        _c(2, 128, 64, 8, 4, "col"),
    ],
    4: [
        _c(4, 128, 32, 4, 4, "col"),
        _c(4, 64, 16, 4, 4, "col"),
        _c(4, 128, 16, 4, 2, "col", "stream"),
        _c(4, 128, 32, 4, 4, "row", "stream"),
        _c(4, 64, 64, 4, 2, "col"),
    ],
    8: [
        _c(8, 64, 16, 2, 4, "row"),
        _c(8, 128, 16, 2, 4, "col", "stream"),
        _c(8, 64, 32, 2, 4, "col"),
        _c(8, 32, 64, 2, 2, "col"),
        _c(8, 64, 16, 2, 2, "row"),
    ],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--random", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    state = activate(0)
    print(state.info, flush=True)
    log = []
    for shape, s in CASES:
        t0 = time.time()
        b, m, n = shape
        served = choose_config(state, s, b, m, n, max_vec(s, m, n), False)
        space = [c for c in staged_space(s, state.info.limits) if not c.persistent]
        picks = [space[i] for i in rng.choice(len(space), args.random, replace=False)]
        cands = list(dict.fromkeys([served, staged_default(s), *CANDIDATES[s], *picks]))
        ranked = measure_ranked(state, s, shape, cands)
        by = dict(ranked)
        print(
            f"\n=== {shape} {s} B: served {by[served].ratio * 100:.1f}% ({served.key}), "
            f"staged default {by[staged_default(s)].ratio * 100:.1f}%, "
            f"best {ranked[0][1].ratio * 100:.1f}% ({ranked[0][0].key}) [{time.time() - t0:.0f}s]",
            flush=True,
        )
        print_ranked(ranked, 6)
        log.append(
            {"shape": shape, "elem_bytes": s, "served": served.key, "results": results_log(ranked)}
        )
        Path(args.out, "staged_sweep.json").write_text(json.dumps(log))
    print("\n=== candidate defaults: geometric mean % of copy over each element size's cases")
    for s, cands in CANDIDATES.items():
        rows = [case for case in log if case["elem_bytes"] == s]
        served = np.exp(np.mean([np.log(max(_ratio(case, case["served"]), 1e-3)) for case in rows]))
        print(f"  {s} B, {len(rows)} cases: served {served * 100:.1f}%")
        for c in cands:
            g = np.exp(np.mean([np.log(max(_ratio(case, c.key), 1e-3)) for case in rows]))
            worst = min(_ratio(case, c.key) for case in rows)
            print(f"    {g * 100:5.1f}% (worst {worst * 100:5.1f}%)  {c.key}")


if __name__ == "__main__":
    main()

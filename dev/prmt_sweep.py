"""Developer tool: byte-permute kernels (prmt) against what `transpose()` serves today, on
1-, 2- and 4-byte cases whose rows are at odd offsets.

    python dev/prmt_sweep.py --out DIR [--budget SECONDS]

Per case: the served config, the staged default and every non-persistent prmt config of the
element size (each checked on fresh data, then timed), as % of copy; then, per element size,
each prmt config's geometric mean and worst over the cases. Writes prmt_sweep.json to DIR.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from _sweep import (
    case_ratio as _ratio,
    measure_ranked,
    print_ranked,
    results_log,
    start,
    sweep_parser,
    within_budget,
)

from autotranspose.dispatch.transpose import choose_config
from autotranspose.kernels.config import KernelConfig, prmt_space, staged_default
from autotranspose.kernels.shapes import max_vec

CASES = [
    ((1, 4099, 6007), 1),
    ((1, 20647, 20647), 1),
    ((1, 39552, 17095), 1),
    ((67, 768, 1173), 1),
    ((1, 6007, 4099), 1),
    ((46, 342, 16751), 1),
    ((1, 26085, 26085), 1),
    ((1, 4099, 6007), 2),
    ((1, 11407, 11407), 2),
    ((7, 138, 110387), 2),
    ((2, 12639, 12639), 2),
    ((1, 6007, 4099), 2),
    ((1, 15001, 777), 2),
    ((1, 4099, 6007), 4),
    ((1, 6007, 4099), 4),
    ((1, 26085, 26085), 4),
    ((1, 11049, 11049), 4),
    ((25, 189, 8313), 4),
]


def main() -> None:
    ap = sweep_parser()
    args = ap.parse_args()
    state = start()
    log = []
    for shape, s in within_budget(CASES, args.budget):
        t0 = time.time()
        b, m, n = shape
        served = choose_config(state, s, b, m, n, max_vec(s, m, n), False)
        space = [c for c in prmt_space(s, state.info.limits) if not c.persistent]
        cands = list(dict.fromkeys([served, staged_default(s), *space]))
        ranked = measure_ranked(state, s, shape, cands)
        by = dict(ranked)
        best_pm = next((c, r) for c, r in ranked if c.kind == "prmt")
        print(
            f"\n=== {shape} {s} B: served {by[served].ratio * 100:.1f}% ({served.key}), "
            f"staged default {by[staged_default(s)].ratio * 100:.1f}%, best prmt "
            f"{best_pm[1].ratio * 100:.1f}% ({best_pm[0].key}) [{time.time() - t0:.0f}s]",
            flush=True,
        )
        print_ranked(ranked, 8)
        log.append(
            {"shape": shape, "elem_bytes": s, "served": served.key, "results": results_log(ranked)}
        )
        Path(args.out, "prmt_sweep.json").write_text(json.dumps(log))
    print("\n=== prmt configs: geometric mean % of copy over each element size's cases (top 8)")
    for s in (1, 2, 4):
        rows = [case for case in log if case["elem_bytes"] == s]
        if not rows:
            continue
        keys = {KernelConfig.from_dict(r["config"]).key for case in rows for r in case["results"]}
        scored = []
        for key in keys:
            vals = [_ratio(case, key) for case in rows]
            scored.append((float(np.exp(np.mean(np.log(np.maximum(vals, 1e-3))))), min(vals), key))
        served = np.exp(np.mean([np.log(max(_ratio(case, case["served"]), 1e-3)) for case in rows]))
        print(f"  {s} B, {len(rows)} cases: served {served * 100:.1f}%")
        for g, worst, key in sorted(scored, reverse=True)[:8]:
            print(f"    {g * 100:5.1f}% (worst {worst * 100:5.1f}%)  {key}")


if __name__ == "__main__":
    main()

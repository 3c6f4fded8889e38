"""Developer tool: tall byte-permute kernels (flat and prmt) against what `transpose()`
serves today, on tall matrices of 1-, 2- and 4-byte elements (rows of 15 to 195 elements:
issue 8's 7081411x20 and 1048576x32, and the tall cases of the random mixes).

    python tools/tall_sweep.py --out DIR [--budget SECONDS] [--sizes 1 2 4]

Per case: the served config, the flat default, the tiled byte-permute default and every
non-persistent tall config whose tile spans the rows (each checked on fresh data, then
timed), as % of copy; then, per element size, each tall config's geometric mean and worst
over the cases it runs. Writes tall_sweep.json to DIR.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _sweep import case_ratio as _ratio
from _sweep import measure_ranked, print_ranked, results_log

from autotranspose.api import choose_config
from autotranspose.compiler import activate
from autotranspose.config import flat_default, max_vec, prmt_default, tall_default, tall_space

CASES = [((1, 7081411, 20), 1), ((1, 1048576, 32), 1), ((1, 4957161, 157), 1), ((1, 433081, 195), 1),
         ((1, 1404139, 165), 1),
         ((1, 7081411, 20), 2), ((1, 23079386, 15), 2), ((1, 4791597, 102), 2), ((1, 611077, 122), 2),
         ((1, 1048576, 32), 2),
         ((1, 7081411, 20), 4), ((1, 1137141, 21), 4), ((1, 608863, 52), 4), ((1, 1048576, 32), 4)]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--budget", type=float, default=1e9, help="stop starting cases after this many seconds")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4])
    args = ap.parse_args()
    state = activate(0)
    print(state.info, flush=True)
    log = []
    t_start = time.time()
    for shape, s in [(sh, s) for sh, s in CASES if s in args.sizes]:
        if time.time() - t_start > args.budget:
            print(f"budget spent: {shape} {s} B and later not measured")
            break
        t0 = time.time()
        b, m, n = shape
        served = choose_config(state, s, b, m, n, max_vec(s, m, n), False)
        space = [c for c in tall_space(s, state.info.limits, n) if not c.persistent]
        others = [c for c in (flat_default(s, n), prmt_default(s)) if c is not None and c.applies(m, n)]
        cands = list(dict.fromkeys([served, *others, *space]))
        ranked = measure_ranked(state, s, shape, cands)
        by = dict(ranked)
        tall = tall_default(s, n)
        best = next(((c, r) for c, r in ranked if c.flat and c.prmt), (None, None))
        print(f"\n=== {shape} {s} B: served {by[served].ratio * 100:.1f}% ({served.key}), tall default "
              f"{by[tall].ratio * 100 if tall in by else 0:.1f}%, best tall "
              f"{best[1].ratio * 100 if best[1] else 0:.1f}% ({best[0].key if best[0] else '-'}) "
              f"[{time.time() - t0:.0f}s]", flush=True)  # fmt: skip
        print_ranked(ranked, 6)
        log.append({"shape": shape, "elem_bytes": s, "served": served.key, "results": results_log(ranked)})
        Path(args.out, "tall_sweep.json").write_text(json.dumps(log))
    print("\n=== tall configs: geometric mean % of copy over each element size's cases (top 6)")
    for s in (1, 2, 4):
        rows = [case for case in log if case["elem_bytes"] == s]
        if not rows:
            continue
        served = np.exp(np.mean([np.log(max(_ratio(case, case["served"]), 1e-3)) for case in rows]))
        dflt = [_ratio(case, tall_default(s, case["shape"][2]).key) for case in rows]
        print(f"  {s} B, {len(rows)} cases: served {served * 100:.1f}%, tall default "
              f"{np.exp(np.mean(np.log(np.maximum(dflt, 1e-3)))) * 100:.1f}%")  # fmt: skip
        for tm in sorted({r["config"]["tile_m"] for case in rows for r in case["results"]}):
            for pt in (1, 2):
                for cache in ("default", "stream"):
                    # per case: the narrowest tall tile of this window, per_thread and hint
                    vals = []
                    for case in rows:
                        n = case["shape"][2]
                        tn = min((c.tile_n for c in tall_space(s, state.info.limits, n)), default=None)
                        key = f"s{s}_m{tm}_n{tn}_v{4 // s}_t{pt}_pad0_row_{cache}_flat_pm"
                        vals.append(_ratio(case, key))
                    if max(vals) > 0:
                        g = float(np.exp(np.mean(np.log(np.maximum(vals, 1e-3)))))
                        print(f"    m{tm} t{pt} {cache}: {g * 100:5.1f}% (worst {min(vals) * 100:5.1f}%)")


if __name__ == "__main__":
    main()

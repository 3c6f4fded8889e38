"""Developer tool: flat kernels (skinny matrices) against what `transpose()` serves.

    python dev/flat_sweep.py --out DIR [--sizes 1 2 4 8 16]

Per case (the fixed list's skinny shapes and a few skinny cases of random mixes): copy, the served
config (lookup's answer, no first-call measurement), the seed kernel, the flat default and
every flat config of the narrowest tile that spans the short side (each checked on fresh data,
then timed), as % of copy. Writes flat_sweep.json to DIR.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _sweep import measure_ranked, print_ranked, results_log

from autotranspose._compiler import activate
from autotranspose._config import flat_default, flat_space, max_vec, seed_config
from autotranspose._dispatch.transpose import choose_config

SHAPES = [(1, 7081411, 20), (1, 20, 7081411), (1, 1048576, 32), (1, 32, 1048576)]
EXTRA = [
    ((1, 21, 7536398), 1),
    ((1, 1642055, 47), 1),
    ((1, 138102664, 6), 1),
    ((1, 10803978, 5), 2),
    ((1, 1199100, 61), 2),
    ((4, 9, 8585044), 2),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    args = ap.parse_args()
    state = activate(0)
    print(state.info, flush=True)
    cases = [(shape, s) for s in args.sizes for shape in SHAPES]
    cases += [(shape, s) for shape, s in EXTRA if s in args.sizes]
    log = []
    for shape, s in cases:
        t0 = time.time()
        b, m, n = shape
        short = min(m, n)
        served = choose_config(state, s, b, m, n, max_vec(s, m, n), False)
        default = flat_default(s, short)
        tw = default.tile_n if default else short
        space = [
            c
            for c in flat_space(s, state.info.limits, short)
            if c.tile_n == tw and not c.persistent and c.cache == "default"
        ]
        cands = list(
            dict.fromkeys([served, seed_config(s), *([default] if default else []), *space])
        )
        ranked = measure_ranked(state, s, shape, cands)
        by = dict(ranked)

        print(
            f"\n=== {'x'.join(map(str, shape))} {s} B: served {_pct(by, served)} ({served.key}), "
            f"seed {_pct(by, seed_config(s))}, flat default {_pct(by, default)}, best "
            f"{ranked[0][1].ratio * 100:.1f}% ({ranked[0][0].key}) [{time.time() - t0:.0f}s]",
            flush=True,
        )
        print_ranked(ranked, 5)
        log.append(
            {
                "shape": shape,
                "elem_bytes": s,
                "served": served.key,
                "default": default.key if default else None,
                "results": results_log(ranked),
            }
        )
        Path(args.out, "flat_sweep.json").write_text(json.dumps(log))


def _pct(by: dict, c: object) -> str:
    return f"{by[c].ratio * 100:.1f}%" if c in by and by[c].ok else "-"


if __name__ == "__main__":
    main()

"""Developer tool: flat byte-permute kernels (flat and prmt) against what `transpose()`
serves today, on tall and wide matrices of 1-, 2- and 4-byte elements (the fixed list's
7081411x20, 20x7081411, 1048576x32, 32x1048576, and the skinny cases of the random mixes).

    python dev/flat_prmt_sweep.py --out DIR [--budget SECONDS] [--sizes 1 2 4] [--wide]
        [--cases BxMxN:BYTES ...] [--rows-to 512] [--tiled]

Per case: the served config, the flat default, the tiled byte-permute default and every
non-persistent flat byte-permute config that runs the case (each checked on fresh data,
then timed), as % of copy; with `--rows-to` also wide tiles of rows past the space's 256 bytes,
with `--tiled` the tiled byte-permute space and the staged default. Writes
flat_prmt_sweep.json to DIR.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _sweep import measure_ranked, print_ranked, results_log, within_budget

from autotranspose.dispatch.transpose import choose_config
from autotranspose.kernels.config import (
    TALL_PER_THREAD,
    TALL_ROWS,
    TALL_WINDOWS,
    ConfigError,
    KernelConfig,
    flat_default,
    flat_prmt_space,
    prmt_default,
    prmt_space,
    staged_default,
    tall_default,
    wide_default,
)
from autotranspose.kernels.shapes import max_vec
from autotranspose.kinds.prmt import PrmtParams
from autotranspose.runtime.compiler import activate

CASES = [
    ((1, 7081411, 20), 1),
    ((1, 1048576, 32), 1),
    ((1, 4957161, 157), 1),
    ((1, 433081, 195), 1),
    ((1, 1404139, 165), 1),
    ((1, 7081411, 20), 2),
    ((1, 23079386, 15), 2),
    ((1, 4791597, 102), 2),
    ((1, 611077, 122), 2),
    ((1, 1048576, 32), 2),
    ((1, 7081411, 20), 4),
    ((1, 1137141, 21), 4),
    ((1, 608863, 52), 4),
    ((1, 1048576, 32), 4),
]
WIDE = [
    ((1, 20, 7081411), 1),
    ((1, 32, 1048576), 1),
    ((1, 21, 7536398), 1),
    ((1, 47, 3000017), 1),
    ((1, 20, 7081411), 2),
    ((1, 3, 53414884), 2),
    ((1, 9, 5303956), 2),
    ((1, 47, 1060938), 2),
    ((1, 82, 2602960), 2),
    ((1, 32, 1048576), 2),
    ((1, 20, 7081411), 4),
    ((1, 32, 1048576), 4),
    ((1, 66, 881899), 4),
    ((1, 5, 23148327), 1),
    ((1, 43, 618881), 2),
    ((1, 18, 1267567), 4),
    ((140, 7, 7513), 1),
]


def _wide_beyond(s: int, rows_to: int) -> list[KernelConfig]:
    """Wide configs (ordered and run store) of rows from 257 to `rows_to` bytes, which the
    space leaves out."""
    out = []
    for tm in (b // s for b in TALL_WINDOWS if 256 < b <= rows_to):
        for tn in (b // s for b in TALL_ROWS if b // s >= 8):
            for ordered in (False, True):
                for pt in TALL_PER_THREAD:
                    try:
                        out.append(
                            KernelConfig(
                                s,
                                tm,
                                tn,
                                4 // s,
                                pt,
                                0,
                                "pad",
                                "row",
                                kind="prmt",
                                params=PrmtParams(flat=True, wide=True, ordered=ordered),
                            )
                        )
                    except ConfigError:
                        pass
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument(
        "--budget", type=float, default=1e9, help="stop starting cases after this many seconds"
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--wide", action="store_true", help="the wide cases (few long rows) instead")
    ap.add_argument(
        "--cases", nargs="*", help="BxMxN:elem_bytes cases instead of the built-in lists"
    )
    ap.add_argument(
        "--rows-to",
        type=int,
        default=256,
        help="wide tiles of rows up to this many bytes (the space holds 256)",
    )
    ap.add_argument(
        "--tiled",
        action="store_true",
        help="the tiled byte-permute space and the staged default too",
    )
    args = ap.parse_args()
    state = activate(0)
    print(state.info, flush=True)
    log = []
    cases = [(sh, s) for sh, s in (WIDE if args.wide else CASES) if s in args.sizes]
    if args.cases:
        cases = [
            (tuple(int(x) for x in c.split(":")[0].split("x")), int(c.split(":")[1]))
            for c in args.cases
        ]
    for shape, s in within_budget(cases, args.budget):
        t0 = time.time()
        b, m, n = shape
        served = choose_config(state, s, b, m, n, max_vec(s, m, n), False)
        short = min(m, n)
        space = [
            c
            for c in flat_prmt_space(s, state.info.limits, short)
            if not c.persistent and c.applies(m, n)
        ]
        space += [
            c
            for c in _wide_beyond(s, args.rows_to)
            if c.applies(m, n) and c.fits(state.info.limits)
        ]
        others = [
            c
            for c in (flat_default(s, short), prmt_default(s))
            if c is not None and c.applies(m, n)
        ]
        if args.tiled:
            others += [c for c in prmt_space(s, state.info.limits) if not c.persistent]
            others += [c for c in (staged_default(s),) if c is not None]
        cands = list(dict.fromkeys([served, *others, *space]))
        ranked = measure_ranked(state, s, shape, cands)
        by = dict(ranked)
        tall = tall_default(s, n) if n < m else wide_default(s, m)
        best = next(((c, r) for c, r in ranked if c.kind == "prmt" and c.params.flat), (None, None))
        print(
            f"\n=== {shape} {s} B: served {by[served].ratio * 100:.1f}% ({served.key}), flat prmt default "
            f"{by[tall].ratio * 100 if tall in by else 0:.1f}%, best flat prmt "
            f"{best[1].ratio * 100 if best[1] else 0:.1f}% ({best[0].key if best[0] else '-'}) "
            f"[{time.time() - t0:.0f}s]",
            flush=True,
        )
        if n > m:  # wide: the best with the run store and with the ordered buffer
            for label, want in (("run store", False), ("ordered", True)):
                c, r = next(
                    ((c, r) for c, r in ranked if c.flag("wide") and c.flag("ordered") == want),
                    (None, None),
                )
                print(
                    f"    best wide, {label}: {r.ratio * 100 if r else 0:.1f}% ({c.key if c else '-'})"
                )
        print_ranked(ranked, 6)
        log.append(
            {"shape": shape, "elem_bytes": s, "served": served.key, "results": results_log(ranked)}
        )
        Path(args.out, "flat_prmt_sweep.json").write_text(json.dumps(log))


if __name__ == "__main__":
    main()

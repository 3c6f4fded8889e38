"""Time given permutes as `bench --random-permute` times them (device only), one process per
tree, so an older tree (PYTHONPATH) and this one can be compared on the same machine: each case
is checked against np.transpose, then autotranspose (first call on, shipped results) and the
peers are timed on the same buffers, as a ratio to a device-to-device copy of the same bytes.

    python3 dev/permute_ab.py --json out.json [--peers copy autotranspose torch compile] \\
        int8:2x34x62x6x1554:4,2,3,1,0 bool:15x12x2x2x49199:4,0,1,3,2 ...

What it is for: before / after figures of a permute kernel change (docs/perf-notes.md)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", help="dtype:shape:axes, e.g. int8:2x34x1554:2,1,0")
    ap.add_argument("--peers", nargs="+", default=["copy", "autotranspose", "torch"])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    from autotranspose.bench.runners import bench_permute_case

    rows = []
    for case in args.cases:
        dtype, shape, axes = case.split(":")
        shape_t = tuple(int(v) for v in shape.split("x"))
        axes_t = tuple(int(v) for v in axes.split(","))
        got = bench_permute_case(shape_t, axes_t, dtype, peers=args.peers, repeats=args.repeat)
        cells = {r.peer: r for r in got}
        line = f"{dtype:9s} {shape:24s} {axes:12s}"
        for p in args.peers[1:]:
            r = cells.get(p)
            line += f" {p} {100 * r.of_copy:6.1f}" if r and r.of_copy else f" {p}      -"
        a = cells.get("autotranspose")
        print(line, "|", (a.note if a else "")[:90], flush=True)
        rows += [dataclasses.asdict(r) for r in got]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time permute's row copies (device only): for each case of `bench --random-permute` mixes
whose plan is a strided row copy (plus --shapes cases), the copy pass with the grid of
`launch.row_geometry` ("rows"), with the same chunks but session 16's first lane rule (any
lane count, warps spanning rows: "rows_any"), with the grid before session 16 (power-of-two
lanes, chunks of 16 passes: "rows_old"), and what permute() serves after its first call
("served"), each checked against np.transpose first, each as % of a copy of the same bytes.

    python3 tools/rows_check.py --seeds 7 11 23 --count 40 [--shapes float64:10x144x15x5695/0,2,1,3]

What it is for: the row-copy changes of docs/perf-notes.md (session 16), old and new in one
process.
"""

from __future__ import annotations

import argparse
import sys
import time


def old_geometry(rows: int, n: int, multiprocessors: int, walked: int = 1):
    """The grid before session 16: power-of-two lanes, chunks of 16 passes of the lanes."""
    from autotranspose import launch

    lanes = min(launch.ROWS_THREADS, 1 << max(0, (n - 1).bit_length()))
    per_block = launch.ROWS_THREADS // lanes
    blocks = max(1, -(-rows // (per_block * launch.ROWS_UNROLL)))
    chunk = max(lanes * 16, -(-n // 65535))
    chunk = -(-chunk // lanes) * lanes
    return launch.RowGeometry(lanes, per_block, chunk, max(1, -(-n // chunk)), blocks)


def any_lanes_geometry(rows: int, n: int, multiprocessors: int, walked: int = 1):
    """Today's chunks with session 16's first lane rule: the lane count of up to 4 passes that
    leaves the fewest threads idle, warps spanning rows (19-word rows: 13 rows of 19 lanes)."""
    from autotranspose import launch

    g = _NEW_GEOMETRY(rows, n, multiprocessors, walked)
    if n >= launch.ROWS_THREADS:
        return g
    best, lanes = 0.0, n
    for passes in range(1, 5):
        k = -(-n // passes)
        if passes > 1 and k < 32:
            break
        busy = (launch.ROWS_THREADS // k) * n / (launch.ROWS_THREADS * passes)
        if busy > best + 1e-9:
            best, lanes = busy, k
    per_block = launch.ROWS_THREADS // lanes
    chunk = -(-max(g.chunk, lanes) // lanes) * lanes
    return launch.RowGeometry(lanes, per_block, chunk, max(1, -(-n // chunk)),
                              max(1, -(-rows // (per_block * launch.ROWS_UNROLL))))  # fmt: skip


_NEW_GEOMETRY = None


def _cases(args) -> list[tuple[tuple[int, ...], tuple[int, ...], str]]:
    from autotranspose.bench import random_permute_cases
    from autotranspose.dtypes import element_type
    from autotranspose.plan import COPY, plan_permute

    out = []
    for text in args.shapes:
        dtype, rest = text.split(":")
        shape, axes = rest.split("/")
        out.append((tuple(map(int, shape.split("x"))), tuple(map(int, axes.split(","))), dtype))
    for seed in args.seeds:
        for shape, axes, dtype in random_permute_cases(args.count, seed):
            p = plan_permute(shape, axes, element_type(dtype).size).passes[0]
            if p.kind == COPY and not p.contiguous:
                out.append((shape, axes, dtype))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="*", default=[7])
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--shapes", nargs="*", default=[], help="DTYPE:AxBxC/I,J,K cases to add")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--budget", type=float, default=1e9, help="stop after this many seconds")
    args = ap.parse_args()

    from _sweep import permute_case, print_summaries, time_steps

    from autotranspose import launch
    from autotranspose.bench import _PermuteCheck
    from autotranspose.compiler import activate
    from autotranspose.permuter import build, served

    state = activate(0)
    rows, started = [], time.monotonic()
    global _NEW_GEOMETRY
    new_geometry = _NEW_GEOMETRY = launch.row_geometry
    for shape, axes, dtype in _cases(args):
        if time.monotonic() - started > args.budget:
            break
        with permute_case(state, shape, axes, dtype, "") as (bench, plan, src0, dst0):
            p = plan.passes[0]
            runs = {"rows": build(plan, state, src0, dst0, 0, state.ctx)}
            try:
                for name, geometry in (("rows_any", any_lanes_geometry), ("rows_old", old_geometry)):
                    launch.row_geometry = geometry
                    runs[name] = build(plan, state, src0, dst0, 0, state.ctx)
            finally:
                launch.row_geometry = new_geometry
            served_plan, runs["served"], _ = served(plan, state, src0, dst0, 0, state.ctx)
            copy_s = bench.copy_time(repeats=args.repeats)
            check = _PermuteCheck(bench, shape, axes, dtype)
            g = new_geometry(p.batch * p.m, p.n, state.info.multiprocessors, p.outer.extent * p.outer2.extent)
            row = {"shape": list(shape), "axes": list(axes), "dtype": dtype, "plan_text": p.describe(),
                   "word": p.elem_bytes, "row_bytes": p.n * p.elem_bytes, "lanes": g.lanes,
                   "chunks": g.chunks, "blocks": g.blocks,
                   "served_kind": served_plan.passes[0].kind}  # fmt: skip
            time_steps(state, bench, check, copy_s, runs, row, args.repeats)
            rows.append(row)
            print(f"{dtype:>10} {'x'.join(map(str, shape)):>22} {axes!s:>20} word {p.elem_bytes:>2} "
                  f"row {row['row_bytes']:>8} B lanes {g.lanes:>3} chunks {g.chunks:>4} | rows_old "
                  f"{row['rows_old']!s:>6} rows_any {row['rows_any']!s:>6} rows {row['rows']!s:>6} "
                  f"served {row['served']!s:>6} "
                  f"({row['served_kind']})", flush=True)
    print_summaries(rows, ("rows_old", "rows_any", "rows", "served"), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

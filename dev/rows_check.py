"""Time permute's row copies (device only): for each case of `bench --random-permute` mixes
whose plan is a strided row copy (plus --shapes cases), the copy pass as permute() builds it
("rows": stores skewed to start on a line where `launch.row_store_line` says so), unskewed
("rows_16": the row kernel without the skew), skewed wherever rows are whole warps ("rows_skew"), and
what permute() serves after its first call ("served"), each checked against np.transpose
first, each as % of a copy of the same bytes.

    python3 dev/rows_check.py --seeds 7 11 23 --count 40 [--shapes float64:10x144x15x5695/0,2,1,3]

What it is for: the row-copy changes of docs/perf-notes.md ("Permute: row copies"), old
and new in one process. (The lane and chunk rules against the ones before them: this
file's history.)
"""

from __future__ import annotations

import sys


def _row_copy(plan) -> bool:
    from autotranspose._plan import COPY

    return plan.passes[0].kind == COPY and not plan.passes[0].contiguous


def main() -> int:
    from _sweep import (
        permute_case,
        permute_cases,
        permute_cases_parser,
        print_summaries,
        time_steps,
        within_budget,
    )

    args = permute_cases_parser([7]).parse_args()

    from autotranspose import _launch as launch
    from autotranspose._compiler import activate
    from autotranspose._dispatch.permute import build, served
    from autotranspose.bench.runners import PermuteCheck

    state = activate(0)
    rows = []
    line, passes = launch.ROWS_STORE_LINE, launch.ROWS_SKEW_PASSES
    for shape, axes, dtype in within_budget(permute_cases(args, _row_copy), args.budget):
        with permute_case(state, shape, axes, dtype, "") as (bench, plan, src0, dst0):
            p = plan.passes[0]
            runs = {"rows": build(plan, state, src0, dst0, 0, state.ctx)}
            try:
                launch.ROWS_STORE_LINE = 0
                runs["rows_16"] = build(plan, state, src0, dst0, 0, state.ctx)
                launch.ROWS_STORE_LINE, launch.ROWS_SKEW_PASSES = line, 0
                runs["rows_skew"] = build(plan, state, src0, dst0, 0, state.ctx)
            finally:
                launch.ROWS_STORE_LINE, launch.ROWS_SKEW_PASSES = line, passes
            served_plan, runs["served"], _ = served(plan, state, src0, dst0, 0, state.ctx)
            copy_s = bench.copy_time(repeats=args.repeats)
            check = PermuteCheck(bench, shape, axes, dtype)
            g = launch.row_geometry(
                p.batch * p.m, p.n, state.info.multiprocessors, p.outer.extent * p.outer2.extent
            )
            skew = runs["rows"][0].launch.scalars[-1]
            row = {
                "shape": list(shape),
                "axes": list(axes),
                "dtype": dtype,
                "plan_text": p.describe(),
                "word": p.elem_bytes,
                "row_bytes": p.n * p.elem_bytes,
                "lanes": g.lanes,
                "chunks": g.chunks,
                "blocks": g.blocks,
                "line": skew,
                "served_kind": served_plan.passes[0].kind,
            }
            time_steps(state, bench, check, copy_s, runs, row, args.repeats)
            rows.append(row)
            print(
                f"{dtype:>10} {'x'.join(map(str, shape)):>22} {axes!s:>20} word {p.elem_bytes:>2} "
                f"row {row['row_bytes']:>8} B lanes {g.lanes:>3} chunks {g.chunks:>4} line {skew:>3} | "
                f"rows_16 {row['rows_16']!s:>6} rows_skew {row['rows_skew']!s:>6} rows {row['rows']!s:>6} "
                f"served {row['served']!s:>6} ({row['served_kind']})",
                flush=True,
            )
    print_summaries(rows, ("rows_16", "rows_skew", "rows", "served"), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time permute's realigned row copies against the word copies they replace (device only):
for each case of `bench --random-permute` mixes whose plan realigns a row copy
(`plan.realigned`), plus --shapes cases (any row copy: its plan's pass and the rival it names), the word copy (`plan._copy`'s widest word, what
was served before), the realigned copy, and what permute() serves after its first call,
each checked against np.transpose first, each as % of a copy of the same bytes.

    python3 dev/realign_check.py --seeds 20262601 --count 40 [--shapes uint8:11618x18x232x21/0,2,1,3]

What it is for: the realigned row copies (docs/perf-notes.md, "Permute: realigned row
copies"), old and new in one process.
"""

from __future__ import annotations

import sys


def main() -> int:
    from _sweep import (
        permute_case,
        permute_cases,
        permute_cases_parser,
        print_summaries,
        time_steps,
        within_budget,
    )

    args = permute_cases_parser([]).parse_args()

    from autotranspose.bench.runners import PermuteCheck
    from autotranspose.dispatch.permute import build, served
    from autotranspose.plans.permute import COPY
    from autotranspose.runtime.compiler import activate

    state = activate(0)
    rows = []
    for shape, axes, dtype in within_budget(
        permute_cases(args, lambda plan: plan.passes[0].realign), args.budget
    ):
        with permute_case(state, shape, axes, dtype, "") as (bench, plan, src0, dst0):
            p = plan.passes[0]
            # the plan's own pass and its rival (the word copy or the realigned one), where named
            other = next(
                (a for a in plan.alternatives if a.kind == COPY and a.realign != p.realign), None
            )
            word = other if p.realign else p
            runs = {
                "realigned" if p.realign else "words": build(plan, state, src0, dst0, 0, state.ctx)
            }
            if other is not None:
                runs["words" if p.realign else "realigned"] = build(
                    plan.taking(other), state, src0, dst0, 0, state.ctx
                )
            served_plan, runs["served"], _ = served(plan, state, src0, dst0, 0, state.ctx)
            copy_s = bench.copy_time(repeats=args.repeats)
            check = PermuteCheck(bench, shape, axes, dtype)
            row = {
                "shape": list(shape),
                "axes": list(axes),
                "dtype": dtype,
                "plan_text": p.describe(),
                "word": word.elem_bytes if word else None,
                "row_bytes": p.n * p.elem_bytes,
                "run_bytes": p.run_bytes if p.realign else None,
                "served_kind": served_plan.passes[0].kind
                + ("/realigned" if served_plan.passes[0].realign else ""),
            }
            time_steps(state, bench, check, copy_s, runs, row, args.repeats)
            rows.append(row)
            print(
                f"{dtype:>10} {'x'.join(map(str, shape)):>24} {axes!s:>20} word {row['word']!s:>4} "
                f"row {row['row_bytes']:>8} B run {row['run_bytes']!s:>10} B | words {row.get('words')!s:>6} "
                f"realigned {row.get('realigned')!s:>6} served {row['served']!s:>6} ({row['served_kind']})",
                flush=True,
            )
    print_summaries(rows, ("words", "realigned", "served"), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

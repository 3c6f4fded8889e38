"""Time permute's realigned row copies against the word copies they replace (device only):
for each case of `bench --random-permute` mixes whose plan realigns a row copy
(`plan.realigned`), plus --shapes cases, the word copy (`plan._copy`'s widest word, what
was served before), the realigned copy, and what permute() serves after its first call,
each checked against np.transpose first, each as % of a copy of the same bytes.

    python3 tools/realign_check.py --seeds 20262601 --count 40 [--shapes uint8:11618x18x232x21/0,2,1,3]

What it is for: session 26's realigned row copies (docs/perf-notes.md), old and new in one
process.
"""

from __future__ import annotations

import argparse
import sys


def _cases(args) -> list[tuple[tuple[int, ...], tuple[int, ...], str]]:
    from autotranspose.bench import random_permute_cases
    from autotranspose.dtypes import element_type
    from autotranspose.plan import plan_permute

    out = []
    for text in args.shapes:
        dtype, rest = text.split(":")
        shape, axes = rest.split("/")
        out.append((tuple(map(int, shape.split("x"))), tuple(map(int, axes.split(","))), dtype))
    for seed in args.seeds:
        for shape, axes, dtype in random_permute_cases(args.count, seed):
            if plan_permute(shape, axes, element_type(dtype).size).passes[0].realign:
                out.append((shape, axes, dtype))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="*", default=[])
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--shapes", nargs="*", default=[], help="DTYPE:AxBxC/I,J,K cases to add")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--budget", type=float, default=1e9, help="stop after this many seconds")
    args = ap.parse_args()

    from _sweep import permute_case, print_summaries, time_steps, within_budget

    from autotranspose.bench import _PermuteCheck
    from autotranspose.compiler import activate
    from autotranspose.permuter import build, served
    from autotranspose.plan import COPY

    state = activate(0)
    rows = []
    for shape, axes, dtype in within_budget(_cases(args), args.budget):
        with permute_case(state, shape, axes, dtype, "") as (bench, plan, src0, dst0):
            p = plan.passes[0]
            word = next((a for a in plan.alternatives if a.kind == COPY and not a.realign), None)
            runs = {}
            if word is not None:
                runs["words"] = build(plan.taking(word), state, src0, dst0, 0, state.ctx)
            runs["realigned"] = build(plan, state, src0, dst0, 0, state.ctx)
            served_plan, runs["served"], _ = served(plan, state, src0, dst0, 0, state.ctx)
            copy_s = bench.copy_time(repeats=args.repeats)
            check = _PermuteCheck(bench, shape, axes, dtype)
            row = {"shape": list(shape), "axes": list(axes), "dtype": dtype, "plan_text": p.describe(),
                   "word": word.elem_bytes if word else None, "row_bytes": p.n, "run_bytes": p.run_bytes,
                   "served_kind": served_plan.passes[0].kind + ("/realigned" if served_plan.passes[0].realign else "")}  # fmt: skip
            time_steps(state, bench, check, copy_s, runs, row, args.repeats)
            rows.append(row)
            print(f"{dtype:>10} {'x'.join(map(str, shape)):>24} {axes!s:>20} word {row['word']!s:>4} "
                  f"row {p.n:>8} B run {p.run_bytes:>10} B | words {row.get('words')!s:>6} "
                  f"realigned {row['realigned']!s:>6} served {row['served']!s:>6} ({row['served_kind']})", flush=True)
    print_summaries(rows, ("words", "realigned", "served"), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time permute's word row copies under other grids (device only): for each case of
`bench --random-permute` mixes whose plan is a word row copy (plus --shapes cases), the copy
as permute() builds it ("rows"), with blocks of exactly `lanes * per_block` threads ("tight":
today's block is always ROWS_THREADS, the leftover threads return at once), with rows over a
warp on the warp multiple over them instead of the power of two, in such tight blocks
("warp"), and with 2 or 8 rows a thread instead of ROWS_UNROLL ("u2", "u8": the kernel
rendered again), long rows cut into chunks for N waves of blocks instead of ROWS_WAVES ("waves8"), under a
register cap ("lb6", "lb8": `__launch_bounds__(256, 6 or 8)`), and with the row copy's two row dims swapped ("swap": a block's rows then
run along the batch dim, so whichever side was strided at the row length becomes contiguous
and the other strided), each checked against np.transpose first, each as % of a copy of the same
bytes.

    python3 dev/rowgrid_check.py --seeds 20262621 7 --count 40 \
        --shapes bfloat16:8x4096x32x128/0,2,1,3

What it is for: a question of docs/perf-notes.md, "Permute: row copies" (are the idle lanes of 33-255
word rows and the short blocks of 16-word rows what keeps complex128 rows of 184 words and
the head swap under 97?).
"""

from __future__ import annotations

import dataclasses
import sys


def _word_rows(plan) -> bool:
    from autotranspose.plans.permute import COPY

    p = plan.passes[0]
    return p.kind == COPY and not p.contiguous and not p.realign


def _regrid(steps, lanes_of):
    """`steps` with each launch's lanes (scalar 10), rows side by side (14) and blocks
    (grid x) remade by `lanes_of(n)` and its block cut to lanes * per_block threads."""
    from autotranspose.runtime import launch

    out = []
    for s in steps:
        lc = s.launch
        m, n, *_ = lc.scalars
        batch = lc.scalars[11]
        lanes = lanes_of(n)
        per_block = launch.ROWS_THREADS // lanes
        blocks = max(1, -(-(batch * m) // (per_block * launch.ROWS_UNROLL)))
        sc = list(lc.scalars)
        sc[10], sc[14] = lanes, per_block
        lc = dataclasses.replace(
            lc, scalars=tuple(sc), grid=(blocks, *lc.grid[1:]), block=(lanes * per_block, 1, 1)
        )
        out.append(dataclasses.replace(s, launch=lc))
    return tuple(out)


def _swapped(steps, state, word: int):
    """`steps` with each launch's rows walked the other way round: its M rows of each batch
    and its batch swapped (with their strides), the same bytes moved."""
    from autotranspose.runtime import launch

    out = []
    for s in steps:
        lc = s.launch
        m, n, ld_in, ld_out, bs_in, bs_out, os_in, os_out, os2_in, os2_out = lc.scalars[:10]
        batch, outer2 = lc.scalars[11], lc.scalars[13]
        outer = lc.grid[2] // outer2
        lc = launch.make_row_copy(
            state,
            word,
            m,
            batch,
            n,
            bs_in,
            bs_out,
            ld_in,
            ld_out,
            outer,
            os_in,
            os_out,
            outer2,
            os2_in,
            os2_out,
        )
        out.append(dataclasses.replace(s, launch=lc))
    return tuple(out)


def _rerendered(plan, state, src0, dst0, unroll: int | None = None, min_blocks: int | None = None):
    """permute()'s steps for `plan` with the row kernels rendered again: for `unroll` rows a
    thread, or with `__launch_bounds__(ROWS_THREADS, min_blocks)` (a register cap)."""
    from autotranspose.dispatch.permute import build
    from autotranspose.kernels import codegen
    from autotranspose.runtime import compiler, launch

    keep, render = codegen.ROWS_UNROLL, codegen.render_rows

    def drop() -> None:
        for name in codegen.ROW_KERNELS:
            compiler._kernels.pop((state.arch, name), None)

    def capped() -> str:
        bounds = f"__launch_bounds__({codegen.ROWS_THREADS})"
        return render().replace(bounds, f"__launch_bounds__({codegen.ROWS_THREADS}, {min_blocks})")

    try:
        if unroll:
            codegen.ROWS_UNROLL = launch.ROWS_UNROLL = unroll
        if min_blocks:
            codegen.render_rows = compiler.render_rows = capped
        drop()
        return build(plan, state, src0, dst0, 0, state.ctx)
    finally:
        codegen.ROWS_UNROLL = launch.ROWS_UNROLL = keep
        codegen.render_rows = compiler.render_rows = render
        drop()


def _variant(name: str, base, plan, state, src0: int, dst0: int):
    """The steps of variant `name` of the row copy `base` (permute()'s steps for `plan`)."""
    from autotranspose.runtime import launch

    if name == "tight":
        return _regrid(base, launch.row_lanes)
    if name == "warp":
        return _regrid(base, lambda n: n if n <= 32 else min(launch.ROWS_THREADS, -(-n // 32) * 32))
    if name in ("u2", "u8"):
        return _rerendered(plan, state, src0, dst0, unroll=int(name[1:]))
    if name.startswith("lb"):
        return _rerendered(plan, state, src0, dst0, min_blocks=int(name[2:]))
    if name == "swap":
        return _swapped(base, state, plan.passes[0].elem_bytes)
    if name.startswith("waves"):  # long rows cut for this many waves instead of ROWS_WAVES
        from autotranspose.dispatch.permute import build

        keep = launch.ROWS_WAVES
        try:
            launch.ROWS_WAVES = int(name[5:])
            return build(plan, state, src0, dst0, 0, state.ctx)
        finally:
            launch.ROWS_WAVES = keep
    raise ValueError(f"unknown variant {name!r}")


def main() -> int:
    from _sweep import (
        permute_case,
        permute_cases,
        permute_cases_parser,
        print_summaries,
        time_steps,
        within_budget,
    )

    ap = permute_cases_parser([20262621])
    ap.add_argument("--variants", nargs="*", default=["tight", "warp", "u2", "u8", "swap"])
    args = ap.parse_args()

    from autotranspose.bench.runners import PermuteCheck
    from autotranspose.dispatch.permute import build
    from autotranspose.runtime import launch
    from autotranspose.runtime.compiler import activate

    state = activate(0)
    rows = []
    keys = ("rows", *args.variants)
    for shape, axes, dtype in within_budget(permute_cases(args, _word_rows), args.budget):
        with permute_case(state, shape, axes, dtype, "") as (bench, plan, src0, dst0):
            p = plan.passes[0]
            base = build(plan, state, src0, dst0, 0, state.ctx)
            runs = {
                "rows": base,
                **{k: _variant(k, base, plan, state, src0, dst0) for k in args.variants},
            }
            copy_s = bench.copy_time(repeats=args.repeats)
            check = PermuteCheck(bench, shape, axes, dtype)
            lanes = launch.row_lanes(p.n)
            row = {
                "shape": list(shape),
                "axes": list(axes),
                "dtype": dtype,
                "plan_text": p.describe(),
                "word": p.elem_bytes,
                "row_words": p.n,
                "lanes": lanes,
            }
            time_steps(state, bench, check, copy_s, runs, row, args.repeats)
            rows.append(row)
            print(
                f"{dtype:>10} {'x'.join(map(str, shape)):>22} {axes!s:>20} word {p.elem_bytes:>2} "
                f"row {p.n:>7} words lanes {lanes:>3} | "
                + " ".join(f"{k} {row[k]!s:>6}" for k in keys),
                flush=True,
            )
    print_summaries(rows, keys, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The `autotranspose bench` command (`run_from_args`), once the command line is checked
(`autotranspose.cli.bench`): the cases drawn or given, each timed and printed as it finishes,
then the whole table, the summary, and the files --json, --markdown and --png ask for.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..kernels.shapes import parse_shape
from .cases import random_cases, random_permute_cases
from .reports import (
    format_ceiling,
    format_host_costs,
    format_summary,
    format_table,
    markdown_table,
    plot,
    summarize,
)
from .runners import PATTERN, Row, bench_case, bench_permute_case, host_costs


def run_from_args(args: Any) -> int:
    """The `autotranspose bench` command: with --db, the calls it times serve that database's
    results (as transpose() would with AUTOTRANSPOSE_DB set), for this command only."""
    import os

    db = getattr(args, "db", None)
    before = os.environ.get("AUTOTRANSPOSE_DB")
    if db:
        os.environ["AUTOTRANSPOSE_DB"] = db
    try:
        return _run(args)
    finally:
        if db:  # a caller in the same process keeps its own database
            if before is None:
                os.environ.pop("AUTOTRANSPOSE_DB", None)
            else:
                os.environ["AUTOTRANSPOSE_DB"] = before


def _run(args: Any) -> int:
    if getattr(args, "small", None):
        from .small import run_small

        return run_small(args)
    repeats = getattr(args, "repeat", None) or 7
    warm = bool(getattr(args, "warm", False))
    ceiling = bool(getattr(args, "ceiling", False))
    if getattr(args, "random_permute", None) or getattr(args, "axes", None):
        return _run_permutes(args, repeats, warm, ceiling)
    if getattr(args, "random", None):
        drawn = _drawn_dtypes(args)
        cases = random_cases(args.random, args.seed, drawn)
        print(f"{len(cases)} random cases, seed {args.seed}{_of(drawn)}{_warm(warm)}", flush=True)
    else:
        cases = [(parse_shape(s), d) for s in args.shapes for d in args.dtypes]
    rows, summary = _measure_cases(
        [
            lambda shape=shape, dtype=dtype: bench_case(
                shape, dtype, device=args.device, repeats=repeats, warm=warm, **_ceiling(ceiling)
            )
            for shape, dtype in cases
        ]
    )
    costs = host_costs()
    print()
    print(format_host_costs(costs))
    _write(
        args,
        rows,
        {
            "summary": summary,
            "call_us": costs,
            "random": getattr(args, "random", None),
            "seed": getattr(args, "seed", None),
            "dtypes": _drawn_dtypes(args),
            "warm": warm,
            "ceiling": ceiling,
        },
    )
    return 0


def _ceiling(on: bool) -> dict[str, bool]:
    """The runners' `ceiling` argument, given only when asked for (`--ceiling`)."""
    return {"ceiling": True} if on else {}


def _drawn_dtypes(args: Any) -> list[str] | None:
    """The dtypes a random draw is limited to (`--dtypes` given with --random,
    --random-permute or --small), or None: every type of the stated distribution."""
    drawing = any(getattr(args, k, None) for k in ("random", "random_permute", "small"))
    dtypes = getattr(args, "dtypes", None)
    return list(dtypes) if drawing and dtypes is not None else None


def _of(dtypes: Sequence[str] | None) -> str:
    return "" if dtypes is None else f", dtypes {' '.join(dtypes)}"


def _warm(warm: bool) -> str:
    return ", L2-warm (every call on the same buffers)" if warm else ""


def _measure_cases(cases: list[Callable[[], list[Row]]]) -> tuple[list[Row], dict[str, Any]]:
    """Run each case (printing its rows as it finishes), then print all rows and the summary."""
    rows: list[Row] = []
    for run in cases:
        case = run()
        rows.extend(case)
        print(format_table(case), flush=True)
    print()
    print(format_table(rows))
    if any(r.peer == PATTERN for r in rows):
        print()
        print("the access pattern's ceiling (bench --ceiling; docs/perf-notes.md):")
        print(format_ceiling(rows))
    summary = summarize(rows)
    print()
    print(format_summary(summary))
    return rows, summary


def _write(args: Any, rows: list[Row], extra: dict[str, Any]) -> None:
    """The files `--json`, `--markdown` and `--png` ask for."""
    if args.json:
        Path(args.json).write_text(
            json.dumps({"rows": [asdict(r) for r in rows], **extra}, indent=1)
        )
    if getattr(args, "markdown", None):
        Path(args.markdown).write_text(markdown_table(rows) + "\n")
    if getattr(args, "png", None) and not plot(rows, args.png):
        print("matplotlib is not installed: no chart written")


def _run_permutes(args: Any, repeats: int, warm: bool = False, ceiling: bool = False) -> int:
    """`bench --random-permute N` or `bench --shapes ... --axes ...`: every case against copy,
    CuPy, PyTorch and cuTENSOR, then the summary."""
    if getattr(args, "random_permute", None):
        drawn = _drawn_dtypes(args)
        cases = random_permute_cases(args.random_permute, args.seed, drawn)
        print(
            f"{len(cases)} random permute cases, seed {args.seed}{_of(drawn)}{_warm(warm)}",
            flush=True,
        )
    else:
        cases = [(tuple(s), tuple(args.axes), d) for s in args.shapes for d in args.dtypes]
    rows, summary = _measure_cases(
        [
            lambda shape=shape, axes=axes, dtype=dtype: bench_permute_case(
                shape,
                axes,
                dtype,
                device=args.device,
                repeats=repeats,
                warm=warm,
                **_ceiling(ceiling),
            )
            for shape, axes, dtype in cases
        ]
    )
    _write(
        args,
        rows,
        {
            "summary": summary,
            "random_permute": getattr(args, "random_permute", None),
            "seed": args.seed,
            "dtypes": _drawn_dtypes(args),
            "warm": warm,
            "ceiling": ceiling,
        },
    )
    return 0

"""What the sweep tools share: measure candidate configs on one case, print and log them."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from autotranspose.tuner.measure import Bench, measure_configs


def sweep_parser() -> argparse.ArgumentParser:
    """The options every sweep takes: where its log goes, and how long it may start cases."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument(
        "--budget", type=float, default=1e9, help="stop starting cases after this many seconds"
    )
    return ap


def start() -> Any:
    """The device the sweep measures on (its first GPU), named in the log."""
    from autotranspose.runtime.compiler import activate

    state = activate(0)
    print(state.info, flush=True)
    return state


def runnable_tiles(s: int, m: int, n: int, fields: Any) -> list[Any]:
    """Tiled configs of `s`-byte elements from (tile_m, tile_n, vec, per_thread, pad, layout,
    raster) tuples, tile sides swapped for few columns (n < m), that are valid and run on the
    newest GPUs."""
    from autotranspose.kernels.config import NEWEST, ConfigError, KernelConfig

    out = []
    for tm, tn, v, pt, pad, lay, ras in fields:
        if n < m:  # few columns: the short tile side is tile_n
            tm, tn = tn, tm
        try:
            c = KernelConfig(s, tm, tn, v, pt, pad, lay, ras)
        except ConfigError:
            continue
        if c.fits(NEWEST):
            out.append(c)
    return out


def permute_cases_parser(default_seeds: list[int]) -> argparse.ArgumentParser:
    """The options of the tools that time permute cases of random mixes: --seeds, --count,
    --shapes (DTYPE:AxBxC/I,J,K cases added), --repeats, --json, --budget."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="*", default=default_seeds)
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--shapes", nargs="*", default=[], help="DTYPE:AxBxC/I,J,K cases to add")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--budget", type=float, default=1e9, help="stop after this many seconds")
    return ap


def permute_cases(args: Any, keep: Any) -> list[tuple[tuple[int, ...], tuple[int, ...], str]]:
    """The --shapes cases, then each case of `random_permute_cases(args.count, seed)` for the
    --seeds whose plan `keep(plan)` accepts."""
    from autotranspose.bench.cases import random_permute_cases
    from autotranspose.plans.dtypes import element_type
    from autotranspose.plans.permute import plan_permute

    out = []
    for text in args.shapes:
        dtype, rest = text.split(":")
        shape, axes = rest.split("/")
        out.append((tuple(map(int, shape.split("x"))), tuple(map(int, axes.split(","))), dtype))
    for seed in args.seeds:
        for shape, axes, dtype in random_permute_cases(args.count, seed):
            if keep(plan_permute(shape, axes, element_type(dtype).size)):
                out.append((shape, axes, dtype))
    return out


def within_budget(cases: Any, budget_s: float) -> Any:
    """The cases, one at a time, until `budget_s` seconds have passed since the first (the
    rest are named as not measured): a device call has a hard time limit."""
    import time

    start = time.time()
    for case in cases:
        if time.time() - start > budget_s:
            print(f"budget spent: {case} and later not measured", flush=True)
            return
        yield case


def measure_ranked(
    state: Any, elem_bytes: int, shape: tuple[int, int, int], cands: list[Any]
) -> list[tuple[Any, Any]]:
    """Each candidate checked on fresh data and timed on one Bench of `shape`; fastest first."""
    bench = Bench(state, elem_bytes, shape)
    try:
        res = measure_configs(bench, cands, bench.copy_time())
    finally:
        bench.close()
    return sorted(zip(cands, res, strict=True), key=lambda cr: -cr[1].gbps)


def print_ranked(ranked: list[tuple[Any, Any]], top: int) -> None:
    """The `top` fastest, then up to five that failed or were wrong."""
    for c, r in ranked[:top]:
        print(f"  {r.ratio * 100:6.1f}%  {c.key}")
    for c, r in [(c, r) for c, r in ranked if not r.ok][:5]:
        print(f"  {r.status}: {c.key}: {r.error}")


def results_log(ranked: list[tuple[Any, Any]]) -> list[dict[str, Any]]:
    """The ranked results as JSON-ready rows."""
    return [
        {
            "config": c.to_dict(),
            "status": r.status,
            "ratio": r.ratio,
            "gbps": r.gbps,
            "error": r.error,
        }
        for c, r in ranked
    ]


def case_ratio(case: dict[str, Any], key: str) -> float:
    """A logged case's ratio to copy for the config whose key is `key` (0 if it failed or
    was not measured)."""
    from autotranspose.kernels.config import KernelConfig

    for r in case["results"]:
        if KernelConfig.from_dict(r["config"]).key == key:
            return r["ratio"] if r["status"] == "ok" else 0.0
    return 0.0


def config_by_key(key: str, dtype: Any) -> Any:
    """The config of `dtype`'s spaces (unaligned and skinny, then aligned) whose key is `key`."""
    import re

    from autotranspose.kernels.config import config_space

    if re.search(r"_rg(_p\d+)?$", key):  # a register transpose: rendered for its exact side
        from autotranspose.kernels.config import NEWEST, regt_space
        from autotranspose.plans.dtypes import element_type

        size = element_type(dtype).size
        for side in range(2, 17):
            for c in regt_space(size, NEWEST, side):
                if c.key == key:
                    return c
    for side in (64, 32, 16):  # a flat tile's short side spans the call's
        for c in config_space(dtype, max_vector=1, short_side=side):
            if c.key == key:
                return c
    for c in config_space(dtype):
        if c.key == key:
            return c
    import re

    capped = re.search(r"_b(\d+)(?=_p\d+$|$)", key)  # a register cap the space does not hold
    if capped:
        base = config_by_key(key[: capped.start()] + key[capped.end() :], dtype)
        return base.replace(min_blocks=int(capped.group(1)))
    raise SystemExit(f"no config {key} for {dtype}")


def event_seconds(fn: Any, n: int) -> float:
    """Seconds per call of `fn`, over `n` calls after one warm-up, by CUDA events on the
    current stream (a launch's whole time on the GPU, the host's share overlapped)."""
    import cupy

    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    fn()
    start.record()
    for _ in range(n):
        fn()
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / n / 1e3


def time_steps(
    state: Any,
    bench: Any,
    check: Any,
    copy_s: float,
    runs: dict[str, Any],
    row: dict[str, Any],
    repeats: int,
) -> None:
    """Each runner of `runs` (name: permute steps) checked against NumPy, then timed into
    `row[name]` as % of copy (None and `row[name + '_error']` when it moved wrong bytes)."""
    for name, steps in runs.items():

        def run(src: int, dst: int, _s: Any, steps: Any = steps) -> None:
            for s in steps:
                s.run(src, dst, 0, state.ctx)

        bad = check(run, Bench.ALL_BITS)
        row[name] = None if bad else round(100 * copy_s / bench.time(run, repeats=repeats), 1)
        if bad:
            row[name + "_error"] = bad


def print_summaries(rows: list[dict[str, Any]], keys: Any, path: str | None) -> None:
    """Median, 10th percentile and minimum of each key over the rows ("best": each row's best
    of its timed runners); then the rows as JSON at `path`, if given."""
    import json

    import numpy as np

    for key in keys:
        if key == "best":  # the best pass measured for each case: what a perfect choice gets
            best = (
                max((r[k] for k in r["timed"] if r.get(k) is not None), default=None) for r in rows
            )
            vals = [b for b in best if b is not None]
        else:
            vals = [r[key] for r in rows if r.get(key) is not None]
        if vals:
            print(
                f"{key}: n={len(vals)} median {np.median(vals):.1f} p10 {np.percentile(vals, 10):.1f} "
                f"min {min(vals):.1f}"
            )
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)


@contextmanager
def permute_case(
    state: Any, shape: tuple[int, ...], axes: tuple[int, ...], dtype: str, label: str = ""
) -> Iterator[tuple[Any, Any, int, int]]:
    """(bench, plan, src, dst) of a contiguous permute of `shape` by `axes`: a Bench of its
    bytes and the plan at the Bench's first pointers, the Bench closed after. A failure in the
    body (or the plan) is printed after `label`, not raised: one case's failure is a line, not
    the end of the run."""
    import math

    from autotranspose.plans.dtypes import element_type
    from autotranspose.plans.layout import contiguous_strides
    from autotranspose.plans.permute import plan_permute

    e = element_type(dtype).size
    bench = Bench(state, e, (1, 1, math.prod(shape)))
    try:
        src0, dst0 = bench.pointers(0)
        yield (
            bench,
            plan_permute(
                shape, axes, e, contiguous_strides(shape), None, in_ptr=src0, out_ptr=dst0
            ),
            src0,
            dst0,
        )
    except Exception as exc:
        print(f"{label}{dtype} {shape} {axes}: {type(exc).__name__}: {exc}", flush=True)
    finally:
        bench.close()

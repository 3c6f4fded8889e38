"""What the sm_90 copy-engine probes (`bulk_tile.py`, `tma_tile.py`) share: the mbarrier and
bulk-copy helpers their kernels start with, and the loop that checks and times each case's
launches beside the served kernel and the copy in one process."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

# CUDA every probe kernel starts with: shared addresses, mbarriers (init, arrive with the
# bytes expected, try-wait on a phase) and a bulk copy completing on an mbarrier
PTX = r"""
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u32 sa(const void* p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive_tx(u32 bar, u32 tx) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(tx) : "memory");
}
__device__ __forceinline__ bool bar_try(u32 bar, u32 parity) {
    u32 ok;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
    return ok != 0;
}
__device__ __forceinline__ void bulk_load(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
"""

# a case's launches: (label, launch(src, dst, stream), whether to check it)
Runs = list[tuple[str, Callable[..., None], bool]]


def parse(case: str) -> tuple[str, tuple[int, int, int]]:
    """DTYPE:MxN or DTYPE:BxMxN -> (dtype name, (B, M, N))."""
    name, dims = case.split(":")
    shape = tuple(int(v) for v in dims.split("x"))
    return name, (1, *shape) if len(shape) == 2 else shape


def within_budget(cases: list[str], budget: float, start: float):
    """Each case with its (dtype name, shape) until `budget` seconds from `start` are spent."""
    for case in cases:
        if time.time() - start > budget:
            print(f"budget spent: {case} and later not measured", flush=True)
            return
        yield case, *parse(case)


def arguments(doc: str) -> argparse.ArgumentParser:
    """The options every probe takes; a probe adds its own."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("cases", nargs="+", help="uint8:MxN")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budget", type=float, default=240.0, help="seconds before skipping cases")
    ap.add_argument("--no-served", action="store_true", help="not the served kernel")
    ap.add_argument("--out", default=".")
    return ap


def measure(args: Any, name: str, runs_for: Callable[[Any, Any, int, int], Runs]) -> None:
    """For each 1-byte case: the served launch and `runs_for(state, bench, m, n)`'s, checked
    bit-exact on fresh data where asked, then timed over `args.rounds` rounds against the
    copy of the same bytes; rows to `{args.out}/{name}.json`."""
    from autotranspose.dispatch.transpose import served
    from autotranspose.plans.dtypes import element_type
    from autotranspose.runtime.compiler import activate
    from autotranspose.runtime.launch import make_launch
    from autotranspose.tuner.measure import Bench

    state = activate(0)
    print(state.info, flush=True)
    start, log = time.time(), []
    for case, dtype, shape in within_budget(args.cases, args.budget, start):
        et = element_type(dtype)
        if et.size != 1:
            print(f"{case}: 1-byte elements only", flush=True)
            continue
        b, m, n = shape
        bench = Bench(state, 1, shape)
        try:
            runs: Runs = []
            if not args.no_served:
                cfg = served(state, et, shape, *bench.pointers(0)).config
                launch = make_launch(state, cfg, b, m, n, n, m, m * n, m * n)
                runs.append(("served " + cfg.key, launch, True))
            runs += runs_for(state, bench, m, n)
            problems = {lab: bench.check(fn) if chk else None for lab, fn, chk in runs}
            print(f"=== {case} ({m * n / 1e6:.1f} MB)", flush=True)
            for rnd in range(args.rounds):
                copy_s = bench.copy_time(repeats=args.repeats)
                for lab, fn, _chk in runs:
                    if problems[lab]:
                        if rnd == 0:
                            print(f"     -   {lab}: {problems[lab]}", flush=True)
                        continue
                    secs = bench.time(fn, repeats=args.repeats)
                    pct = 100 * copy_s / secs
                    log.append({"case": case, "what": lab, "round": rnd, "pct": pct,
                                "us": secs * 1e6})  # fmt: skip
                    print(f"  {pct:6.1f}%  {secs * 1e6:9.1f} us  {lab}", flush=True)
        except Exception as exc:  # a case that fails is a row, not a lost run
            print(f"  FAILED {case}: {type(exc).__name__}: {exc}"[:600], flush=True)
        finally:
            bench.close()
    with open(f"{args.out}/{name}.json", "w") as f:
        json.dump(log, f)
    print(f"done in {time.time() - start:.0f} s", flush=True)

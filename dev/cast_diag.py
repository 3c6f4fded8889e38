"""Where a cast-transpose call of the bench's mix spends its time: the same calls timed as the
bench times them (CUDA events around 20 host-queued calls) and replayed from a CUDA graph
(the host left out), each against a copy of the same bytes launched as the bench does, with
the config the call was served. A call whose queued figure is far under its graph's is bound by the host.

    python3 dev/cast_diag.py [--count 40] [--seed 12979] [--min-mb 0] [--max-mb 1e9]
        [--only 1024x21888,4965x12288] [--profile]

--profile runs one call of each case between cudaProfilerStart and cudaProfilerStop instead of
timing it (for `ncu --profile-from-start off`).
"""

from __future__ import annotations

import argparse
import functools
import statistics

import torch

import autotranspose as at
from autotranspose.bench.cast import _describe, _time, _traffic, cast_cases
from autotranspose.dispatch import caches

CALLS = 20


def queued(fn, repeats: int = 5) -> float:
    """Seconds a call, as `bench --cast` times it."""
    return _time(torch, fn, repeats)


def replayed(fn, repeats: int = 5) -> float:
    """Seconds a call, CALLS calls captured in one CUDA graph and replayed."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / CALLS)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--seed", type=int, default=12979)
    ap.add_argument("--min-mb", type=float, default=0)
    ap.add_argument("--max-mb", type=float, default=1e9)
    ap.add_argument("--only", default="", help="comma-separated shapes (MxN) to run")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}; seed {args.seed}")
    print(
        f"{'case':36s} {'MB':>6s} {'queued%':>8s} {'graph%':>7s} {'q us':>7s} {'g us':>7s} "
        f"{'copy us':>7s}  config"
    )
    for case in cast_cases(args.count, args.seed):
        traffic = _traffic(case)
        if not args.min_mb <= traffic / 1e6 <= args.max_mb:
            continue
        only = set(filter(None, args.only.split(",")))
        if only and f"{case.shape[0]}x{case.shape[1]}" not in only:
            continue
        dt = getattr(torch, case.dst)
        x = torch.randn(case.shape, device="cuda").mul_(300).to(getattr(torch, case.src))
        s = torch.tensor([0.75], device="cuda")
        amax = torch.zeros(1, device="cuda")

        def ours(x=x, dt=dt, s=s, amax=amax, both=case.both):
            return at.cast_transpose(x, dt, scale=s, amax=amax, both=both)

        ours()
        torch.cuda.synchronize()
        prep = [v for k, v in caches.launches.items() if k[0] == "cast"][-1]  # its CastLaunch
        if args.profile:
            ours()
            torch.cuda.synchronize()
            print(f"profile {_describe(case)} {prep.config.key}", flush=True)
            torch.cuda.profiler.start()
            ours()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            continue
        half = torch.empty(traffic // 2, dtype=torch.uint8, device="cuda")
        other = torch.empty_like(half)
        copy = functools.partial(other.copy_, half)
        copy_q = queued(copy)  # in a graph a copy is a memcpy node, a third slower on an H200
        q, g = queued(ours), replayed(ours)
        print(
            f"{_describe(case):36s} {traffic / 1e6:6.0f} {100 * copy_q / q:8.1f} "
            f"{100 * copy_q / g:7.1f} {q * 1e6:7.1f} {g * 1e6:7.1f} {copy_q * 1e6:7.1f}  "
            f"{prep.config.key}",
            flush=True,
        )
        del x, half, other, copy
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

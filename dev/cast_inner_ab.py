"""Developer tool: cast-transposes with and without `realign` (whole tiles of rows off their
word boundary in a function of their own), each beside its access pattern's ceiling and the
public call as the bench times it, in one process.

For each case (the `bench --cast N --seed S` mix, then `--also` cases): kernels only
(`tuner.castmeasure.CastBench`: rotated L2-cold buffers, device scale and amax) the pair's
default with realign=False and with realign=True, checked bit for bit against each other, timed
interleaved over `--rounds`, with the default's pattern kernel (`bench.ceiling.cast_ceiling`:
the same grid and words, no exchange) on the same buffer sets, each as % of a device-to-device
copy of the same bytes; then the default and its pattern on one buffer set, repeated (L2-warm
as the bench's calls are), and `cast_transpose()` itself queued as `bench --cast` times it
(host included: the served config, first call raced), against the bench's copy.

    python3 dev/cast_inner_ab.py --cast 16 --seed 52817 \\
        --also 8576x1024:f32_e5m2,16384x688:f32_e5m2 [--deadline 120] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

import autotranspose as at
from autotranspose.bench.cast import CastCase, _time, _traffic, cast_cases
from autotranspose.bench.ceiling import cast_ceiling
from autotranspose.kernels.config import KernelConfig
from autotranspose.kinds import cast as cast_kind
from autotranspose.runtime.compiler import activate
from autotranspose.tuner.castmeasure import CastBench

NAMES = {f.code: f.name for f in (*cast_kind.INPUTS, *cast_kind.OUTPUTS)}


def parse_also(text: str) -> list[CastCase]:
    """`MxN:pair[:both]` comma-separated."""
    out = []
    for item in filter(None, text.split(",")):
        shape, pair, *rest = item.split(":")
        m, n = (int(v) for v in shape.split("x"))
        src, dst = pair.split("_")
        out.append(CastCase((m, n), NAMES[src], NAMES[dst], bool(rest and rest[0] == "both")))
    return out


def public_queued(case: CastCase) -> tuple[float, float, str]:
    """% of copy of cast_transpose() queued as the bench times it, its copy's seconds, and the
    config it was served."""
    from autotranspose.calls import cast as _cast

    dt = getattr(torch, case.dst)
    x = torch.randn(case.shape, device="cuda").mul_(300).to(getattr(torch, case.src))
    s = torch.tensor([0.75], device="cuda")
    amax = torch.zeros(1, device="cuda")

    def ours() -> object:
        return at.cast_transpose(x, dt, scale=s, amax=amax, both=case.both)

    ours()
    torch.cuda.synchronize()
    served = "?"
    try:  # lookup's choice from now on (a first call's winner), as the bench's --ceiling reads it
        from autotranspose.dispatch.cast import choose_config

        src, dst = cast_kind.FORMATS[case.src], cast_kind.FORMATS[case.dst]
        y = torch.empty(case.shape[::-1], dtype=dt, device="cuda")
        plan = _cast.contiguous_plan(case.shape, (1, 0), case.both)
        state = activate(torch.cuda.current_device())
        aligned = y.data_ptr() % 16 == 0 and case.shape[0] * dst.size % 16 == 0
        served = choose_config(state, plan, src, dst, x.data_ptr(), case.both, aligned)[0].key
        del y
    except Exception as exc:  # a note, not a failed case
        served = f"? {type(exc).__name__}"
    traffic = _traffic(case)
    half = torch.empty(traffic // 2, dtype=torch.uint8, device="cuda")
    other = torch.empty_like(half)
    copy_s = _time(torch, lambda: other.copy_(half), 3)
    ours_s = _time(torch, ours, 3)
    return copy_s / ours_s, copy_s, served


def run_case(state: object, case: CastCase, rounds: int) -> dict[str, object]:
    src, dst = cast_kind.FORMATS[case.src], cast_kind.FORMATS[case.dst]
    code = cast_kind.pair_code(src, dst)
    base = cast_kind.default(KernelConfig, src, dst).replace(realign=False)
    variant = base.replace(realign=True)
    bench = CastBench(state, code, (1, *case.shape), case.both)
    row: dict[str, object] = {
        "case": f"{case.shape[0]}x{case.shape[1]} {code}{' both' if case.both else ''}",
        "mb": round(bench.traffic / 1e6),
        "config": variant.key,
    }
    try:
        row["wrong"] = bench.check(variant, base)
        copy = bench.gbps(bench.copy_time())
        pats = []
        for k in range(bench.sets):
            x = int(bench.x) + k * bench.in_stride
            y = int(bench.y) + k * bench.out_stride
            z = int(bench.z) + k * bench.out_stride if bench.z is not None else 0
            pats.append(cast_ceiling(state, base, bench.plan, x, y, z).run)

        def pattern(k: int) -> None:
            pats[k % len(pats)]()

        runs = {"off": bench.launcher(base), "on": bench.launcher(variant)}
        runs["pattern"] = pattern
        got: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(rounds):
            for name, fn in runs.items():
                got[name].append(bench.gbps(bench.time(fn)) / copy)
        for name, values in got.items():
            row[name] = round(100 * statistics.median(values), 1)
            row[name + "_spread"] = round(100 * (max(values) - min(values)), 1)
        warm = {}
        for name in ("off", "on", "pattern"):
            fn = runs[name]
            warm[name] = bench.gbps(bench.time(lambda k, fn=fn: fn(0)))
        copy_warm = bench.gbps(
            bench.time(
                lambda k: bench.drv.memcpy_dtod(int(bench.y), int(bench.x), bench.traffic // 2)
            )
            if bench.traffic // 2
            <= min(bench.in_stride * bench.sets, bench.out_stride * bench.sets)
            else bench.copy_time()
        )
        row["off_warm"] = round(100 * warm["off"] / copy_warm, 1)
        row["on_warm"] = round(100 * warm["on"] / copy_warm, 1)
        row["pattern_warm"] = round(100 * warm["pattern"] / copy_warm, 1)
    finally:
        bench.close()
    q, copy_s, served = public_queued(case)
    torch.cuda.empty_cache()
    row["queued"] = round(100 * q, 1)
    row["queued_copy_us"] = round(copy_s * 1e6, 1)
    row["served"] = served
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cast", type=int, default=16)
    ap.add_argument("--seed", type=int, default=52817)
    ap.add_argument("--also", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds: start no case after")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    state = activate(torch.cuda.current_device())
    print(f"{state.info.name}: % of copy; kernels L2-cold unless 'warm'; seed {args.seed}")
    head = (
        f"{'case':34s} {'MB':>4s} {'dflt':>6s} {'on':>7s} {'r/d':>6s} {'patt':>6s} "
        f"{'off/p':>6s} {'on/p':>6s} {'offWarm':>7s} {'onWarm':>6s} {'pWarm':>6s} {'queued':>6s}  spread off/on/p"
    )
    print(head, flush=True)
    start, rows = time.monotonic(), []
    for case in parse_also(args.also) + cast_cases(args.cast, args.seed):
        if time.monotonic() - start > args.deadline:
            print(f"deadline: stopped before {case}", flush=True)
            break
        try:
            r = run_case(state, case, args.rounds)
        except Exception as exc:  # a line, not a crashed run
            print(f"{case}: {type(exc).__name__}: {exc}"[:300], flush=True)
            continue
        rows.append(r)
        d, v, p = r["off"], r["on"], r["pattern"]
        print(
            f"{r['case']:34s} {r['mb']:4d} {d:6.1f} {v:6.1f} {v / d:6.3f} {p:6.1f} "
            f"{100 * d / p:6.1f} {100 * v / p:6.1f} {r['off_warm']:7.1f} {r['on_warm']:6.1f} "
            f"{r['pattern_warm']:6.1f} {r['queued']:6.1f}  {r['off_spread']}/"
            f"{r['on_spread']}/{r['pattern_spread']}"
            f"{'  WRONG: ' + str(r['wrong']) if r['wrong'] else ''}",
            flush=True,
        )
    if rows:
        med = statistics.median
        ratio = [r["on"] / r["off"] for r in rows]
        print(
            f"realign=False median {med(r['off'] for r in rows):.1f} lowest "
            f"{min(r['off'] for r in rows):.1f}; realign=True median "
            f"{med(r['on'] for r in rows):.1f} lowest {min(r['on'] for r in rows):.1f}; "
            f"on/off median {med(ratio):.3f} [{min(ratio):.3f}, {max(ratio):.3f}]; "
            f"off % pattern median {med(100 * r['off'] / r['pattern'] for r in rows):.1f}, "
            f"on % pattern median {med(100 * r['on'] / r['pattern'] for r in rows):.1f}"
        )
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "cast_inner_ab.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

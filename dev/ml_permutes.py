"""Time permutes of ML workloads as a user calls them (device only): ViT patchify, the
grouped-query K/V head swap, a 2-D int8 weight, uint8 images HWC <-> CHW, each through
`autotranspose.permute` on PyTorch tensors (shipped results and the first call's measurement,
as a user gets them), against a device-to-device copy of the same bytes, PyTorch's
``x.permute(axes).contiguous()`` and torch.compile of the same; then each pass the plan could
run (its own, every alternative, the one-launch passes it names neither of) on the same
buffers. Calls repeat on the same buffers (L2-warm, as a model's steady state runs them); each
timing is the median of `--rounds` event-timed batches of calls.

    python3 dev/ml_permutes.py [--only vit,gqa,int8,img] [--no-compile] [--json out.json]
    python3 dev/ml_permutes.py --int8-order transpose   # transpose() first, then permute()
    python3 dev/ml_permutes.py --host                    # host cost of a contiguous-copy call

What it is for: docs/perf-notes.md ("Permute: ML workloads"); every figure as % of the copy.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time


def cases(only: set[str]) -> list[tuple[str, str, tuple[int, ...], tuple[int, ...], str]]:
    """(group, name, shape, axes, dtype) of every workload."""
    out = []
    for b in (64, 256):
        for p in (16, 14):
            g = 224 // p
            for dt in ("float16", "bfloat16") if b == 64 else ("bfloat16",):
                out.append(
                    ("vit", f"vit B{b} p{p} {dt}", (b, 3, g, p, g, p), (0, 2, 4, 3, 5, 1), dt)
                )
    for h in range(1, 9):
        out.append(("gqa", f"gqa 8x4096 h{h}", (8, 4096, h, 128), (0, 2, 1, 3), "bfloat16"))
    out.append(("gqa", "gqa 1x32768 h8", (1, 32768, 8, 128), (0, 2, 1, 3), "bfloat16"))
    out.append(("int8", "int8 w 11008x4096", (11008, 4096), (1, 0), "int8"))
    out.append(("int8", "int8 8192x8192", (8192, 8192), (1, 0), "int8"))
    for c in (1, 2, 3, 4):
        out.append(("img", f"img hwc->chw c{c}", (8, 1080, 1920, c), (0, 3, 1, 2), "uint8"))
        out.append(("img", f"img chw->hwc c{c}", (8, c, 1080, 1920), (0, 2, 3, 1), "uint8"))
    out.append(("rand", "rand uint8 25x655x15x147", (25, 655, 15, 147), (3, 2, 1, 0), "uint8"))
    out.append(("rand", "rand int8 4676x2x987x58", (4676, 2, 987, 58), (3, 0, 2, 1), "int8"))
    out.append(("rand", "rand int32 258x830x15x15", (258, 830, 15, 15), (3, 0, 2, 1), "int32"))
    return [c for c in out if not only or c[0] in only]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-passes", action="store_true")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json")
    ap.add_argument("--int8-order", choices=("permute", "transpose"))
    ap.add_argument("--budget", type=float, default=1e9)
    ap.add_argument("--race", default="", help="names: the first call's race from idle")
    ap.add_argument("--host", action="store_true", help="host cost of head-swap h=1 calls")
    ap.add_argument(
        "--scatter-blocks",
        default="",
        help="e.g. 4,6: a scattering vector box pass also timed at these blocks an SM",
    )
    ap.add_argument(
        "--profile",
        default="",
        help="names (comma-separated): run each twice, no timing (under ncu)",
    )
    args = ap.parse_args()

    import torch

    import autotranspose as at
    from autotranspose.dispatch import firstcall as _firstcall, permute as _permuter
    from autotranspose.plans.dtypes import element_type
    from autotranspose.plans.permute import GATHER, PACKED, one_launch, plan_permute
    from autotranspose.runtime.compiler import activate

    torch.manual_seed(0)
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):  # one compiled function a case, not eager after 8
            setattr(torch._dynamo.config, knob, 4096)
    state = activate(0)
    dev = torch.device("cuda", 0)
    print(f"device {torch.cuda.get_device_name(0)}", flush=True)

    def timed(fn, calls: int) -> float:
        """Median seconds per call of `fn` over the rounds, on the current stream."""
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(args.rounds):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(calls):
                fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) / 1e3 / calls)
        return statistics.median(ts)

    def raw(t):
        return t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int16)

    if args.int8_order:  # one fresh process: which first call serves the int8 weight
        w = torch.randint(-128, 127, (11008, 4096), dtype=torch.int8, device=dev)
        o = torch.empty((4096, 11008), dtype=torch.int8, device=dev)
        calls = [
            ("permute", lambda: at.permute(w, (1, 0), out=o)),
            ("transpose", lambda: at.transpose(w, out=o)),
        ]
        if args.int8_order == "transpose":
            calls.reverse()
        cp = torch.empty_like(w)
        copy_s = timed(lambda: cp.copy_(w), 20)
        for name, fn in calls:
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            first = time.perf_counter() - t0
            ok = torch.equal(o, w.t())
            s = timed(fn, 20)
            print(
                f"{name:>9}: first call {first * 1e3:.0f} ms, ok {ok}, {100 * copy_s / s:.1f}% of copy",
                flush=True,
            )
        for _dev, e, cls, outcome in _firstcall.history:
            print(f"first call {e}-byte {cls}: best {outcome.best.key}", flush=True)
            for c, sec in sorted(outcome.seconds.items(), key=lambda kv: kv[1] or 1e9):
                print(f"   {c.key}: {'failed' if sec is None else f'{100 * copy_s / sec:.1f}%'}")
        from autotranspose.dispatch import caches as _caches

        for key, launch in list(_caches.launches.items()):
            cfg = launch.config
            print(f"launch {key[4:11]}: {cfg.key if cfg else None} grid {launch.grid}")
        return 0

    if args.race:  # the first call's race from an idle GPU against each pass's steady state
        from autotranspose.dispatch import firstcall

        names = set(args.race.split(","))
        out_rows = []
        for _, name, shape, axes, dtype in cases(set()):
            if name not in names:
                continue
            x = torch.randint(0, 100, shape, device=dev).to(getattr(torch, dtype))
            out = torch.empty(tuple(shape[a] for a in axes), dtype=x.dtype, device=dev)
            src, dst = x.data_ptr(), out.data_ptr()
            stream = torch.cuda.current_stream().cuda_stream
            plan = plan_permute(shape, axes, x.element_size(), in_ptr=src, out_ptr=dst)
            runners = {
                q: _permuter.Steps(
                    _permuter.build(plan.taking(q), state, src, dst, stream, state.ctx)
                )
                for q in (plan.passes[0], *plan.alternatives)
            }
            tag = {
                q: f"{k}:{q.kind}{'/v' if q.vectors[0] else ''}{q.box}"
                for k, q in enumerate(runners)
            }
            cp = torch.empty_like(x)
            copy_s = timed(lambda cp=cp, x=x: cp.copy_(x), 50)
            steady = {
                tag[q]: round(
                    100
                    * copy_s
                    / timed(lambda r=r, s=src, d=dst, h=stream: r.run(s, d, h, state.ctx), 50),
                    1,
                )
                for q, r in runners.items()
            }
            row = {"name": name, "steady": steady, "races": []}
            guess = plan.passes[0]
            for _ in range(3):
                time.sleep(1.5)  # an idle GPU, as after compiling a first call's kernels
                oc = firstcall.race(runners, guess, state, src, dst, stream, state.ctx)
                row["races"].append(
                    {
                        "best": tag[oc.best],
                        "pct": {
                            tag[q]: round(100 * copy_s / t, 1) for q, t in oc.seconds.items() if t
                        },
                    }
                )
            time.sleep(1.5)
            r0 = runners[guess]
            curve = []
            for _ in range(48):  # each call of the guess timed alone, from idle
                a_, b_ = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a_.record()
                r0.run(src, dst, stream, state.ctx)
                b_.record()
                b_.synchronize()
                curve.append(round(100 * copy_s / (a_.elapsed_time(b_) / 1e3), 1))
            row["ramp_curve"] = curve
            out_rows.append(row)
            print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out_rows, f, indent=1)
        return 0

    def tag_of(q) -> str:
        return (
            q.kind
            + ("x".join(map(str, q.box)) if q.box else "")
            + ("/pipe" if q.pipelined else "")
            + ("/realign" if q.realign else "")
            + (f"/v{q.vectors[0]}x{q.vectors[1]}" if q.vectors[0] else "")
            + (f"/s{q.scatter}" if getattr(q, "scatter", 0) else "")
        )

    if args.host:  # what a contiguous-copy call costs the host, against PyTorch's copy
        for shape in ((8, 4096, 1, 128), (1, 16, 1, 128)):
            x = torch.randn(shape, device=dev).to(torch.bfloat16)
            out = torch.empty((shape[0], 1, shape[1], 128), dtype=x.dtype, device=dev)
            cp = torch.empty_like(x)
            fns = {
                "permute out=": lambda x=x, out=out: at.permute(x, (0, 2, 1, 3), out=out),
                "permute new": lambda x=x: at.permute(x, (0, 2, 1, 3)),
                "torch copy_": lambda cp=cp, x=x: cp.copy_(x),
                "torch permute": lambda x=x: x.permute(0, 2, 1, 3).contiguous(),
            }
            res = {}
            for k, fn in fns.items():
                for _ in range(50):
                    fn()
                torch.cuda.synchronize()
                ts = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    for _ in range(200):
                        fn()
                    t1 = time.perf_counter()
                    torch.cuda.synchronize()
                    ts.append((t1 - t0) / 200)
                res[k] = round(statistics.median(ts) * 1e6, 2)
            gpu = round(timed(fns["permute out="], 200) * 1e6, 2)
            print(json.dumps({"shape": shape, "host_us": res, "event_us_permute": gpu}))
        return 0

    if args.profile:  # each named case's permute twice (under ncu: AUTOTRANSPOSE_FIRST_CALL=0)
        names = set(args.profile.split(","))
        for _, name, shape, axes, dtype in cases(set()):
            if name in names:
                x = torch.randint(0, 100, shape, device=dev).to(getattr(torch, dtype))
                for _ in range(2):
                    at.permute(x, axes)
                torch.cuda.synchronize()
                print(
                    f"profiled {name}: {plan_permute(shape, axes, x.element_size()).passes[0].describe()}"
                )
        return 0

    def measure(group, name, shape, axes, dtype):
        row = {"name": name, "shape": list(shape), "axes": list(axes), "dtype": dtype}
        try:
            tdt = getattr(torch, dtype)
            if tdt.is_floating_point:
                x = torch.randn(shape, device=dev).to(tdt)
            else:
                x = torch.randint(0, 255 if dtype == "uint8" else 127, shape, device=dev).to(tdt)
            want = x.permute(axes).contiguous()
            out = torch.empty_like(want)
            cp = torch.empty_like(x)
            nbytes = x.numel() * x.element_size()
            calls = max(3, min(200, int(2e9 // (4 * nbytes)) + 1))
            row["mb"] = round(nbytes / 2**20, 1)
            copy_s = timed(lambda: cp.copy_(x), calls)
            row["copy_tbs"] = round(2 * nbytes / copy_s / 1e12, 2)
            raw(out).fill_(0x5A)
            t0 = time.perf_counter()
            at.permute(x, axes, out=out)
            torch.cuda.synchronize()
            row["first_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
            row["ok"] = bool(torch.equal(raw(out), raw(want)))
            row["ours"] = round(
                100 * copy_s / timed(lambda: at.permute(x, axes, out=out), calls), 1
            )
            row["ours_new"] = round(100 * copy_s / timed(lambda: at.permute(x, axes), calls), 1)
            row["torch"] = round(
                100 * copy_s / timed(lambda: x.permute(axes).contiguous(), calls), 1
            )
            if group == "int8":
                o2 = torch.empty((shape[1], shape[0]), dtype=tdt, device=dev)
                row["transpose"] = round(
                    100 * copy_s / timed(lambda: at.transpose(x, out=o2), calls), 1
                )
            if not args.no_compile:
                try:
                    fn = torch.compile(lambda t, a=axes: t.permute(a).contiguous(), dynamic=False)
                    t0 = time.perf_counter()
                    got = fn(x)
                    row["compile_s"] = round(time.perf_counter() - t0, 1)
                    row["compile_ok"] = bool(torch.equal(raw(got), raw(want)))
                    row["compiled"] = round(100 * copy_s / timed(lambda: fn(x), calls), 1)
                except Exception as exc:  # a peer that fails is a note
                    row["compiled_error"] = f"{type(exc).__name__}: {exc}"[:200]
            served = [
                h
                for h in _permuter.history
                if h[1].shape == tuple(shape) and h[1].axes == tuple(axes)
            ]
            e = element_type(dtype).size
            plan = plan_permute(shape, axes, e, in_ptr=x.data_ptr(), out_ptr=out.data_ptr())
            row["plan"] = plan.passes[0].describe()
            if served:
                oc = served[-1][2]
                row["served"] = oc.best.describe()
                row["race"] = {
                    tag_of(q): round(100 * copy_s / t, 1) for q, t in oc.seconds.items() if t
                }
            if not args.no_passes:
                p = plan.passes[0]
                variants = {"plan": plan}
                for q in plan.alternatives:
                    variants[tag_of(q)] = plan.taking(q)
                named = {q.kind for q in (p, *plan.alternatives)}
                for kind in (PACKED, GATHER):
                    q = one_launch(p, kind) if kind not in named else None
                    if q is not None:
                        variants[kind] = dataclasses.replace(plan, passes=(q,), alternatives=())
                src, dst = x.data_ptr(), out.data_ptr()
                stream = torch.cuda.current_stream().cuda_stream
                passes = {}
                for tag, v in variants.items():
                    try:
                        steps = _permuter.build(v, state, src, dst, stream, state.ctx)

                        def run(steps=steps):
                            for st in steps:
                                st.run(src, dst, stream, state.ctx)

                        raw(out).fill_(0x5A)
                        run()
                        if not torch.equal(raw(out), raw(want)):
                            passes[tag] = "WRONG"
                            continue
                        passes[tag] = round(100 * copy_s / timed(run, calls), 1)
                    except Exception as exc:
                        passes[tag] = f"{type(exc).__name__}: {exc}"[:160]
                if args.scatter_blocks and getattr(p, "scatter", 0):
                    from autotranspose.kernels import vbox as _vbox

                    keep = _vbox.SCATTER_BLOCKS_PER_SM
                    for k in map(int, args.scatter_blocks.split(",")):
                        _vbox.SCATTER_BLOCKS_PER_SM = k
                        try:
                            steps = _permuter.build(plan, state, src, dst, stream, state.ctx)

                            def run(steps=steps):
                                for st in steps:
                                    st.run(src, dst, stream, state.ctx)

                            raw(out).fill_(0x5A)
                            run()
                            ok = torch.equal(raw(out), raw(want))
                            passes[f"plan/k{k}"] = (
                                round(100 * copy_s / timed(run, calls), 1) if ok else "WRONG"
                            )
                        finally:
                            _vbox.SCATTER_BLOCKS_PER_SM = keep
                row["passes"] = passes
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        return row

    rows = []
    start = time.time()
    for group, name, shape, axes, dtype in cases(set(filter(None, args.only.split(",")))):
        if time.time() - start > args.budget:
            print(f"budget spent: {name} and later not measured", flush=True)
            continue
        row = measure(group, name, shape, axes, dtype)
        torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print(
        f"{'case':<24} {'MB':>7} {'ours':>6} {'torch':>6} {'compile':>7} {'best pass':>10}  served"
    )
    for r in rows:
        ps = [v for v in (r.get("passes") or {}).values() if isinstance(v, float)]
        print(
            f"{r['name']:<24} {r.get('mb', 0):>7} {r.get('ours', '-')!s:>6} {r.get('torch', '-')!s:>6} "
            f"{r.get('compiled', '-')!s:>7} {max(ps, default='-')!s:>10}  {r.get('served', r.get('plan', r.get('error', '')))[:60]}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

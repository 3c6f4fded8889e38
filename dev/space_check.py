"""Developer tool: what the tuner finds and what a call is served, against the best
config of the whole search space, measured on the device in one process.

    python dev/space_check.py tuner --cases float32:8192x8192,int8:4099x6007 --out $OUT
    python dev/space_check.py serving --random 12 --seed 8675309 --out $OUT

For each case the whole space (exactly the tuner's: `config_space` with the class's vector
cap and short side) is compiled and *screened*: every config timed once on the case's
buffers (one warm launch, two timed), without a correctness check. The fastest
`--finalists` of the screen, plus the configs under test, are then checked on fresh data and
timed in full (`measure_one`), twice in opposite orders; a config's figure is the mean of its
two timings. "Space best" is the best finalist that is correct. `--screen-s S` screens a
random sample for S seconds instead (cases of a GB and more take minutes in full); the row's
"screened" says how many of the "space" configs were timed.

- `tuner`: the tuner (40 trials, fresh database) runs first, leave-one-out: the shipped
  entry of the case's own class on this GPU is hidden, so the tuner must find the config
  rather than read it back. `--baseline` also runs the tuner without warm starts from other
  classes and without the local search (the tuner before those two), for the comparison.
- `serving`: what `transpose()` serves a call of a class nobody tuned on this GPU (no
  database; a first call measures as a user's would), and the robust default for it;
  `--no-shipped` hides this GPU's shipped results too, as for a GPU model nothing ships for.

Results go to `<out>/space_check.json` after every case (a run cut short keeps them).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from autotranspose.bench.cases import random_cases
from autotranspose.dispatch import lookup, policy
from autotranspose.dispatch.transpose import served
from autotranspose.kernels.config import config_space, seed_config
from autotranspose.kernels.shapes import max_vec, parse_shape, shape_class
from autotranspose.plans.dtypes import element_type
from autotranspose.runtime.compiler import activate, precompile
from autotranspose.runtime.launch import contiguous_launch
from autotranspose.store import Store
from autotranspose.tuner import study as tuner
from autotranspose.tuner.measure import Bench, measure_one
from autotranspose.tuner.study import loop as tuner_loop
from autotranspose.tuner.worker import GpuObjective


def screen(bench: Bench, configs: list[Any], budget_s: float | None = None) -> dict[Any, float]:
    """Seconds per call of each config, from one warm launch and two timed ones (rotating
    buffers as the full timing does); configs that fail to launch are left out. With
    `budget_s`, a random sample: configs in a shuffled order until the budget is spent (a
    1 GB case screens about 60 configs a second)."""
    drv = bench.drv
    start, end = drv.Event(), drv.Event()
    times = {}
    if budget_s is not None:
        configs = random.Random(len(configs)).sample(configs, len(configs))
    t0 = time.monotonic()
    for cfg in configs:
        if budget_s is not None and time.monotonic() - t0 > budget_s:
            break
        try:
            launch = contiguous_launch(bench.state, cfg, bench.batch, bench.m, bench.n)
            launch(*bench.pointers(0), None)
            start.record()
            launch(*bench.pointers(1), None)
            launch(*bench.pointers(2), None)
            end.record()
            end.synchronize()
        except Exception:
            bench.state.synchronize()
            continue
        times[cfg] = end.ms_since(start) / 2e3
    return times


def finalists_measured(bench: Bench, configs: list[Any], copy_gbps: float) -> dict[Any, Any]:
    """Each config checked and timed in full, then timed again in reverse order: the mean."""
    first = {c: measure_one(bench, c, copy_gbps) for c in configs}
    out = {}
    for c in reversed(configs):
        m = first[c]
        if m.ok:
            launch = contiguous_launch(bench.state, c, bench.batch, bench.m, bench.n)
            t = (m.time_us / 1e6 + bench.time(launch)) / 2
            m = type(m)("ok", bench.gbps(t), copy_gbps, t * 1e6)
        out[c] = m
    return out


def whole_space(
    state: Any,
    dtype: str,
    shape: tuple[int, int, int],
    extra: dict[str, Any],
    finalists: int,
    screen_s: float | None = None,
    only: str | None = None,
) -> dict[str, Any]:
    """Screen every config of the case's space (or a random sample of it, `screen_s`; or the
    configs of one kind, `only`: a flag field such as "direct"), then measure the top
    `finalists` and the `extra` configs (by role) in full. Returns the figures of the
    report row."""
    et = element_type(dtype)
    cls = shape_class(*shape, max_vec(et.size, shape[1], shape[2]))
    space = list(
        config_space(et.name, state.info.limits, max_vector=cls.vec, short_side=min(cls.m, cls.n))
    )
    if only:
        space = [c for c in space if getattr(c, only)]
    t0 = time.monotonic()
    failed = precompile(state, space)
    compiled = time.monotonic() - t0
    bench = Bench(state, et.size, shape)
    try:
        t0 = time.monotonic()
        times = screen(bench, [c for c in space if c not in failed], screen_s)
        screened = time.monotonic() - t0
        ranked = sorted(times, key=times.get)
        picked = list(dict.fromkeys(ranked[:finalists] + [c for c in extra.values() if c]))
        copy_gbps = bench.gbps(bench.copy_time())
        full = finalists_measured(bench, picked, copy_gbps)
    finally:
        bench.close()
    ok = sorted((c for c in full if full[c].ok), key=lambda c: -full[c].gbps)
    best = ok[0]

    def fig(c: Any) -> dict[str, Any] | None:
        if c is None:
            return None
        m = full[c]
        rank = ranked.index(c) + 1 if c in times else None
        return {
            "config": c.key,
            "status": m.status,
            "ratio": m.ratio,
            "gbps": m.gbps,
            "of_best": m.gbps / full[best].gbps if m.ok else 0.0,
            "screen_rank": rank,
        }

    return {
        "class": str(cls),
        "space": len(space),
        "screened": len(times),
        "compile_failed": len(failed),
        "compile_s": round(compiled, 1),
        "screen_s": round(screened, 1),
        "copy_gbps": copy_gbps,
        "best": fig(best),
        "best_screen_rank": ranked.index(best) + 1 if best in times else None,  # served, unscreened
        "wrong_in_finalists": [c.key for c in picked if not full[c].ok],
        **{role: fig(c) for role, c in extra.items()},
    }


def _hide_shipped(device_name: str, hidden: Any) -> None:
    """Hide the shipped entries `hidden(entry)` selects (lookup's in-process copy only).
    After `clear_cache()`, which forgets shipped files: the other order would reload them."""
    lookup.clear_cache()
    entries = lookup.shipped(device_name)
    lookup._shipped[device_name] = tuple(e for e in entries if not hidden(e))
    assert not any(hidden(e) for e in lookup.shipped(device_name)), "shipped entries not hidden"


def _leave_one_out(device_name: str, elem_bytes: int, cls: Any) -> None:
    """Hide the shipped entry of exactly this class."""
    _hide_shipped(device_name, lambda e: e.elem_bytes == elem_bytes and e.shape_class == cls)


def run_tuner(
    dtype: str, shape: tuple[int, int, int], seed: int, baseline: bool, device_name: str
) -> Any:
    """One 40-trial tune into a fresh database, leave-one-out; `baseline`: the tuner
    without warm starts from other classes and without the local search."""
    saved = (tuner_loop.LOCAL_SEARCH, lookup.warm_starts)
    if baseline:
        tuner_loop.LOCAL_SEARCH = 0
        lookup.warm_starts = lambda *a, **k: []  # type: ignore[assignment]
    try:
        store = Store.open(f"sqlite:///{tempfile.mkdtemp()}/tune.db")
        t0 = time.monotonic()
        with GpuObjective(dtype, shape) as obj:
            started = time.monotonic() - t0
            et = element_type(dtype)
            _leave_one_out(device_name, et.size, shape_class(*shape, max_vec(et.size, *shape[1:])))
            res = tuner.tune(
                dtype, shape, objective=obj, store=store, device=obj.device, trials=40, seed=seed
            )
        return res, started
    finally:
        tuner_loop.LOCAL_SEARCH, lookup.warm_starts = saved


def check_tuner(state: Any, dtype: str, shape: tuple[int, int, int], args: Any) -> dict[str, Any]:
    et = element_type(dtype)
    res, started = run_tuner(dtype, shape, args.seed, False, state.info.name)
    row: dict[str, Any] = {
        "tune_s": round(res.elapsed_s, 1),
        "worker_start_s": round(started, 1),
        "tuner_own_ratio": res.measurement.ratio,
        "trials": res.trials,
    }
    extra = {"tuner": res.config, "seed": seed_config(et.size)}
    if args.baseline:
        old, _ = run_tuner(dtype, shape, args.seed, True, state.info.name)
        row["baseline_tune_s"] = round(old.elapsed_s, 1)
        extra["baseline"] = old.config
    lookup.clear_cache()  # shipped files come back whole
    return {
        **row,
        **whole_space(state, dtype, shape, extra, args.finalists, args.screen_s, args.only),
    }


def check_serving(state: Any, dtype: str, shape: tuple[int, int, int], args: Any) -> dict[str, Any]:
    et = element_type(dtype)
    cls = shape_class(*shape, max_vec(et.size, shape[1], shape[2]))
    bench = Bench(state, et.size, shape)
    try:
        t0 = time.monotonic()
        choice = served(state, et, shape, *bench.pointers(0))
        first_call_s = time.monotonic() - t0
    finally:
        bench.close()
    if choice is None:  # one column or row a matrix: transpose() copies it
        raise SystemExit(
            f"{dtype} {shape} is served as a copy, not a kernel config: pick another shape"
        )
    default = policy.default_choice(et.size, cls, state.info.limits).config
    extra = {"served": choice.config, "default": default, "seed": seed_config(et.size)}
    row = {"source": choice.source, "first_call_wall_s": round(first_call_s, 2)}
    return {
        **row,
        **whole_space(state, dtype, shape, extra, args.finalists, args.screen_s, args.only),
    }


def _cases(args: Any, state: Any) -> list[tuple[str, tuple[int, int, int]]]:
    if args.cases:
        out = []
        for item in args.cases.split(","):
            dtype, _, text = item.partition(":")
            out.append((dtype, parse_shape(text)))
        return out
    shipped = {(e.elem_bytes, e.shape_class) for e in lookup.shipped(state.info.name)}
    picked: list[tuple[str, tuple[int, int, int]]] = []
    seen = set()
    for shape, dtype in random_cases(10 * args.random, args.seed):
        s = element_type(dtype).size
        cls = shape_class(*shape, max_vec(s, shape[1], shape[2]))
        if (s, cls) in shipped or (s, cls) in seen or dtype == "bool":
            continue
        seen.add((s, cls))
        picked.append((dtype, shape))
        if len(picked) == args.random:
            break
    return picked


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("tuner", "serving"))
    ap.add_argument("--cases", help="dtype:shape,... (else --random)")
    ap.add_argument("--random", type=int, default=12, help="serving: random untuned classes")
    ap.add_argument("--seed", type=int, default=8675309)
    ap.add_argument("--finalists", type=int, default=32)
    ap.add_argument(
        "--screen-s",
        type=float,
        help="screen a random sample for this long (s) "
        "instead of the whole space: for cases of a GB and more",
    )
    ap.add_argument(
        "--only",
        choices=("direct", "flat", "staged", "prmt", "realign", "persistent", "regt"),
        help="screen the configs of this kind only (the case's served and default still timed)",
    )
    ap.add_argument("--baseline", action="store_true")
    ap.add_argument(
        "--no-shipped",
        action="store_true",
        help="serving: hide this GPU's shipped results (a model nothing ships for)",
    )
    ap.add_argument("--deadline", type=float, default=540, help="start no case after this (s)")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    os.environ["AUTOTRANSPOSE_DB"] = f"sqlite:///{tempfile.mkdtemp()}/none.db"  # never created
    state = activate(0)
    t_start = time.monotonic()
    rows = []
    cases = _cases(args, state)
    if args.no_shipped:
        _hide_shipped(state.info.name, lambda e: True)
    for dtype, shape in cases:
        if time.monotonic() - t_start > args.deadline:
            print(f"deadline: skipped {dtype} {shape}", flush=True)
            continue
        check = check_tuner if args.mode == "tuner" else check_serving
        t0 = time.monotonic()
        row = {"dtype": dtype, "shape": shape, **check(state, dtype, shape, args)}
        row["case_s"] = round(time.monotonic() - t0, 1)
        rows.append(row)
        under = row.get("tuner") or row.get("served")
        print(
            f"{dtype:>10} {'x'.join(map(str, shape)):>16}  best {100 * row['best']['ratio']:5.1f}% "
            f"{row['best']['config']} (screen rank {row['best_screen_rank'] or '-'})  "
            f"{args.mode} {100 * under['ratio']:5.1f}% = {100 * under['of_best']:5.1f}% of best "
            f"{under['config']}  [{row['case_s']} s: compile {row['compile_s']}, "
            f"screen {row['screen_s']} ({row['screened']} of {row['space']})]",
            flush=True,
        )
        Path(args.out, "space_check.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

"""Developer tool: the device campaign that produces the shipped tuning results.

    python dev/campaign.py tune --db sqlite:///$OUT/h100.db --cases 0-7 --out $OUT
    python dev/campaign.py exhaustive --dtype float32 --shape 1x4096x4096 --out $OUT
    python dev/campaign.py export --db sqlite:///$OUT/h100.db --out tuning_db

`tune` runs the Optuna tuner (40 trials) for each target case and records how long each took;
`exhaustive` measures every config of one case's space, to check the tuner's best is within 2%
of the space's best; `export` writes the shipped text form.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from autotranspose.kernels.config import config_space
from autotranspose.kernels.shapes import max_vec, parse_shape, shape_class
from autotranspose.store import Store, textio
from autotranspose.tuner.study import DEFAULT_BATCH, tune
from autotranspose.tuner.worker import GpuObjective

CASES = [
    ("int8", "8192x8192"),
    ("float16", "8192x8192"),
    ("float32", "8192x8192"),
    ("float64", "8192x8192"),
    ("complex128", "8192x8192"),
    ("int8", "16384x16384"),
    ("float16", "16384x16384"),
    ("float32", "16384x16384"),
    ("float64", "16384x16384"),
    ("complex128", "16384x16384"),
    ("float32", "4099x6007"),
    ("int8", "4099x6007"),
    ("float32", "1048576x32"),
    ("float32", "32x1048576"),
    ("float16", "64x1024x1024"),
    ("float32", "4096x4096"),
    ("complex64", "8192x8192"),
    ("float32", "1024x1024"),
    ("int8", "4096x4096"),
    ("int8", "1048576x32"),
    ("float16", "1048576x32"),
    ("complex128", "1048576x32"),
    ("float16", "32x1048576"),
    ("int8", "32x1048576"),
    ("float16", "4099x6007"),
    ("float64", "4099x6007"),
    ("float32", "64x1024x1024"),
    ("int8", "64x1024x1024"),
]
# Odd and skinny shapes for every element size (the fixed list of BENCHMARKS.md).
_SIZES = ("int8", "float16", "float32", "float64", "complex64", "complex128")
CASES += [
    (d, s)
    for d in ("complex64", "complex128")
    for s in ("4099x6007", "8192x8192")
    if (d, s) not in CASES
]
CASES += [(d, "6007x4099") for d in _SIZES]
CASES += [(d, s) for s in ("7081411x20", "20x7081411") for d in _SIZES]
CASES += [(d, s) for s in ("1048576x32", "32x1048576") for d in _SIZES if (d, s) not in CASES]
CASES += [(d, "26085x26085") for d in _SIZES]
CASES += [(d, "16384x16384") for d in ("complex64",)]


def _cases(spec: str) -> list[tuple[str, str]]:
    picked: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        picked += range(int(lo), int(hi or lo) + 1)
    return [CASES[i] for i in picked]


def cmd_tune(args: argparse.Namespace) -> None:
    store = Store.open(args.db)
    log = []
    for dtype, text in _cases(args.cases):
        shape = parse_shape(text)
        t0 = time.monotonic()
        with GpuObjective(dtype, shape) as obj:
            started = time.monotonic() - t0
            res = tune(
                dtype,
                shape,
                objective=obj,
                store=store,
                device=obj.device,
                trials=args.trials,
                batch=args.batch,
                seed=args.seed,
            )
        m = res.measurement
        row = {
            "dtype": dtype,
            "shape": shape,
            "class": str(res.shape_class),
            "config": res.config.key,
            "ratio": m.ratio,
            "gbps": m.gbps,
            "tune_s": res.elapsed_s,
            "worker_start_s": started,
            "trials": res.trials,
            "measured": res.measured,
            "failed": res.failed,
        }
        log.append(row)
        print(
            f"{dtype:>10} {text:>14}  {100 * m.ratio:5.1f}% of copy  {m.gbps:6.0f} GB/s  "
            f"tuned in {res.elapsed_s:5.1f} s (+{started:.1f} s worker start), "
            f"{res.measured} measured, {res.failed} failed  {res.config.key}",
            flush=True,
        )
        Path(args.out, "tune.json").write_text(json.dumps(log, indent=1))


def cmd_exhaustive(args: argparse.Namespace) -> None:
    shape = parse_shape(args.shape)
    from autotranspose.plans.dtypes import element_type

    s = element_type(args.dtype).size
    cls = shape_class(*shape, max_vec(s, shape[1], shape[2]))
    space = list(config_space(args.dtype, max_vector=cls.vec))
    store = Store.open(args.db) if args.db else None
    t0 = time.monotonic()
    results = []
    with GpuObjective(args.dtype, shape, timeout_s=600) as obj:
        for i in range(0, len(space), 256):
            chunk = space[i : i + 256]
            obj.precompile(chunk)
            measured = list(zip(chunk, obj(chunk), strict=True))
            results += measured
            for cfg, m in measured if store else ():  # the tuner reuses these; best is kept
                store.record(None, obj.device, args.dtype, s, shape, cls, cfg, m)
            print(
                f"  {i + len(chunk)}/{len(space)} configs, {time.monotonic() - t0:.0f} s",
                flush=True,
            )
            _exhaustive_report(args, shape, len(space), results, time.monotonic() - t0)


def _exhaustive_report(
    args: argparse.Namespace, shape: tuple[int, int, int], total: int, results: list, seconds: float
) -> None:
    """Written after every chunk, so a run cut short still leaves what it measured."""
    ok = sorted((r for r in results if r[1].ok), key=lambda r: -r[1].gbps)
    best_cfg, best = ok[0]
    print(
        f"exhaustive {args.dtype} {args.shape}: {len(results)} of {total} configs, {len(ok)} ok, "
        f"best {100 * best.ratio:.1f}% of copy ({best.gbps:.0f} GB/s) {best_cfg.key}; "
        f"{seconds:.0f} s",
        flush=True,
    )
    Path(args.out, "exhaustive.json").write_text(
        json.dumps(
            {
                "dtype": args.dtype,
                "shape": shape,
                "configs": total,
                "measured": len(results),
                "ok": len(ok),
                "seconds": seconds,
                "top": [{"config": c.key, "gbps": m.gbps, "ratio": m.ratio} for c, m in ok[:20]],
            },
            indent=1,
        )
    )


def cmd_export(args: argparse.Namespace) -> None:
    store = Store.open(args.db)
    for path in textio.dump(store, args.out):
        print("wrote", path)


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tune")
    t.add_argument("--db", required=True)
    t.add_argument("--cases", default=f"0-{len(CASES) - 1}")
    t.add_argument("--trials", type=int, default=40)
    t.add_argument("--batch", type=int, default=DEFAULT_BATCH)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", default=".")
    e = sub.add_parser("exhaustive")
    e.add_argument("--dtype", required=True)
    e.add_argument("--shape", required=True)
    e.add_argument("--out", default=".")
    e.add_argument("--db", help="also record every measurement in this tuning database")
    x = sub.add_parser("export")
    x.add_argument("--db", required=True)
    x.add_argument("--out", default="tuning_db")
    args = ap.parse_args()
    {"tune": cmd_tune, "exhaustive": cmd_exhaustive, "export": cmd_export}[args.cmd](args)


if __name__ == "__main__":
    main()

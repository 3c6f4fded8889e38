"""The in-place tuning campaign behind the shipped files' in-place entries.

    python dev/inplace_campaign.py tune --db sqlite:////tmp/c.db --budget 240
    python dev/cast_campaign.py merge --shipped tuning_db/X.json --export X.json --out X.json

`tune` runs `autotranspose tune --inplace`'s study (`tuner.study.inplace.tune_inplace`, one
measuring worker a case) for each of DTYPES x SHAPES: a square, a rectangle of LLM sides, one
of odd sides, a skinny one and a batch (five classes), for every element size, the square
first. Cases stop starting once `--budget` seconds have passed; `--shapes` tunes some of
SHAPES alone (those dev/restamp.py says to measure again); `--problems square` (or
`rectangle`) tunes one problem's cases alone, as after an edit of its kernels only (an
in-place result's version hashes its problem's kernels: the other problem's shipped results
stay current and are merged back).
Each line says the best config, its % of a copy of the same bytes and the kind's default's
on the same case (the study measures the default first).
`cast_campaign.py merge` puts the export's entries that name a problem (casts and in-place
transposes) into the shipped file, its transposes' entries left byte for byte: import the
GPU's shipped file into the database first (`bash dev/device.sh inplace-campaign` does).
"""

from __future__ import annotations

import argparse
import time

from autotranspose.errors import TuningError
from autotranspose.store import Store
from autotranspose.tuner.study.inplace import inplace_target, tune_inplace
from autotranspose.tuner.study.settings import TuneSettings
from autotranspose.tuner.worker import GpuObjective

DTYPES = ("uint8", "float16", "float32", "float64", "complex128")
SHAPES = ((1, 8192, 8192), (1, 8192, 7168), (1, 3001, 1999), (1, 24, 1000003), (16, 1024, 768))


def cmd_tune(args: argparse.Namespace) -> None:
    store = Store.open(args.db)
    started = time.monotonic()
    for shape in SHAPES:
        square = shape[1] == shape[2]
        if ("square" if square else "rectangle") not in args.problems:
            continue
        if args.shapes and "x".join(map(str, shape)) not in args.shapes:
            continue
        for dtype in args.dtypes:
            if time.monotonic() - started > args.budget:
                print(f"budget spent: {dtype} {shape} not tuned", flush=True)
                continue
            _tune_one(args, store, dtype, shape)


def _tune_one(args: argparse.Namespace, store: Store, dtype: str, shape: tuple[int, ...]) -> None:
    target = inplace_target(dtype, shape)
    t0 = time.monotonic()
    try:
        with GpuObjective(target.dtype, target.shape, 0, inplace=True) as obj:
            r = tune_inplace(
                dtype, shape, objective=obj, store=store, device=obj.device, device_index=0,
                settings=TuneSettings(trials=args.trials, batch=args.batch),
            )  # fmt: skip
    except TuningError as exc:
        print(f"{target.problem} {dtype} {shape}: {exc}", flush=True)
        return
    default = target.default
    d = store.measured(
        obj.device.name, target.elem_bytes, target.shape, default, problem=target.problem
    )
    of_default = f", default {100 * d.ratio:.1f}%" if d is not None and d.ok else ""
    print(
        f"{target.problem} {dtype} {'x'.join(map(str, shape))} {r.shape_class}: "
        f"{r.config.params.key} {r.measurement.gbps:.0f} GB/s, "
        f"{100 * r.measurement.ratio:.1f}% of copy{of_default} "
        f"({r.trials} trials, {r.failed} failed, {time.monotonic() - t0:.1f}s)",
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tune")
    t.add_argument("--db", required=True)
    t.add_argument("--dtypes", nargs="+", default=list(DTYPES))
    t.add_argument(
        "--shapes",
        nargs="+",
        metavar="BxMxN",
        help="only these of SHAPES (e.g. 1x8192x7168): the entries dev/restamp.py says to "
        "measure again",
    )
    t.add_argument("--trials", type=int, default=8)
    t.add_argument("--batch", type=int, default=8)
    t.add_argument("--budget", type=float, default=240.0, help="seconds before no case starts")
    t.add_argument(
        "--problems",
        nargs="+",
        choices=("square", "rectangle"),
        default=["square", "rectangle"],
        help="the cases to tune: squares (after a SWAP change), rectangles (after a change "
        "of their passes' kernels); the other problem's shipped results stay current",
    )
    args = p.parse_args()
    {"tune": cmd_tune}[args.cmd](args)


if __name__ == "__main__":
    main()

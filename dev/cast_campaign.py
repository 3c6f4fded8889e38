"""Developer tool: the device campaign behind the cast-transpose entries of tuning_db/.

    python dev/cast_campaign.py tune --db sqlite:////tmp/cast.db --trials 10 --budget 150
    python dev/campaign.py export --db sqlite:////tmp/cast.db --out $OUT/tuning_db

`tune` runs `autotranspose tune --cast`'s study (`_tuner.cast.tune_cast`, one measuring worker
a case) for each of PAIRS x SHAPES: the pairs `bench --cast` draws, on an aligned and an odd
shape (classes v8/v4 and v1), without the same-order output (calls with it are served the
pair's results when none of their own exist: `lookup.cast_choice`). Cases stop starting once
`--budget` seconds have passed. Import the GPU's shipped file into the database first, so the
export keeps every shipped transpose result (dev/device_cast_campaign.sh does).
"""

from __future__ import annotations

import argparse
import time

from autotranspose._tuner.cast import cast_target, parse_pair, tune_cast
from autotranspose._tuner.settings import TuneSettings
from autotranspose._worker import GpuObjective
from autotranspose.errors import TuningError
from autotranspose.store import Store

PAIRS = ("bf16:e4m3", "f32:e4m3", "bf16:e5m2", "f32:e5m2", "f32:bf16")
SHAPES = ((1, 8192, 8192), (1, 4099, 6007))


def cmd_tune(args: argparse.Namespace) -> None:
    store = Store.open(args.db)
    started = time.monotonic()
    for pair in args.pairs:
        src, dst = parse_pair(pair)
        for shape in SHAPES:
            if time.monotonic() - started > args.budget:
                print(f"budget spent: {pair} {shape} not tuned", flush=True)
                continue
            target = cast_target(src, dst, shape, args.both)
            t0 = time.monotonic()
            try:
                with GpuObjective(src.name, target.shape, 0, cast=(target.code, args.both)) as obj:
                    r = tune_cast(
                        src, dst, shape, objective=obj, store=store, device=obj.device,
                        both=args.both, device_index=0,
                        settings=TuneSettings(trials=args.trials, batch=args.batch),
                    )  # fmt: skip
            except TuningError as exc:
                print(f"{target.problem} {shape}: {exc}", flush=True)
                continue
            print(
                f"{target.problem} {'x'.join(map(str, shape))} {r.shape_class}: {r.config.key} "
                f"{r.measurement.gbps:.0f} GB/s, {100 * r.measurement.ratio:.1f}% of copy "
                f"({r.trials} trials, {r.failed} failed, {time.monotonic() - t0:.1f}s)",
                flush=True,
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tune")
    t.add_argument("--db", required=True)
    t.add_argument("--pairs", nargs="+", default=list(PAIRS))
    t.add_argument("--trials", type=int, default=10)
    t.add_argument("--batch", type=int, default=5)
    t.add_argument("--both", action="store_true")
    t.add_argument("--budget", type=float, default=150.0, help="seconds before no case starts")
    args = p.parse_args()
    cmd_tune(args)


if __name__ == "__main__":
    main()

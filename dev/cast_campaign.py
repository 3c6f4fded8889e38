"""Developer tool: the device campaign behind the cast-transpose entries of tuning_db/.

    python dev/cast_campaign.py tune --db sqlite:////tmp/cast.db --trials 10 --budget 150
    python dev/campaign.py export --db sqlite:////tmp/cast.db --out $OUT/tuning_db
    python dev/cast_campaign.py merge --shipped tuning_db/X.json --export $OUT/tuning_db/X.json \
        --out tuning_db/X.json

`tune` runs `autotranspose tune --cast`'s study (`_tuner.cast.tune_cast`, one measuring worker
a case) for each of PAIRS x SHAPES: the pairs `bench --cast` draws, on an aligned and an odd
shape (classes v8/v4 and v1), without and with the same-order output (`--both`: calls
with it are served only their own results, `lookup.cast_choice`). Cases stop starting once
`--budget` seconds have passed. `merge` puts the export's cast entries into the shipped file
(its transposes' entries left byte for byte). Import the GPU's shipped file into the database first, so the
export keeps every shipped transpose result (`bash dev/device.sh cast-campaign` does).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from autotranspose.errors import TuningError
from autotranspose.kernels.config import KernelConfig
from autotranspose.kinds import cast as cast_kind
from autotranspose.store import Store
from autotranspose.tuner.study.cast import cast_target, parse_pair, tune_cast
from autotranspose.tuner.study.settings import TuneSettings
from autotranspose.tuner.worker import GpuObjective

PAIRS = ("bf16:e4m3", "f32:e4m3", "bf16:e5m2", "f32:e5m2", "f32:bf16")
SHAPES = ((1, 8192, 8192), (1, 4099, 6007))


def cmd_tune(args: argparse.Namespace) -> None:
    store = Store.open(args.db)
    started = time.monotonic()
    boths = {"no": (False,), "yes": (True,), "each": (True, False)}[args.both]
    for both in boths:
        for pair in args.pairs:
            for shape in SHAPES:
                if time.monotonic() - started > args.budget:
                    print(f"budget spent: {pair} {shape} both={both} not tuned", flush=True)
                    continue
                _tune_one(args, store, pair, shape, both)


def _tune_one(
    args: argparse.Namespace, store: Store, pair: str, shape: tuple[int, int, int], both: bool
) -> None:
    src, dst = parse_pair(pair)
    target = cast_target(src, dst, shape, both)
    t0 = time.monotonic()
    try:
        with GpuObjective(src.name, target.shape, 0, cast=(target.code, both)) as obj:
            r = tune_cast(
                src, dst, shape, objective=obj, store=store, device=obj.device, both=both,
                device_index=0, settings=TuneSettings(trials=args.trials, batch=args.batch),
            )  # fmt: skip
    except TuningError as exc:
        print(f"{target.problem} {shape}: {exc}", flush=True)
        return
    default = cast_kind.default(KernelConfig, src, dst)
    d = store.measured(obj.device.name, src.size, target.shape, default, problem=target.problem)
    of_default = f", default {100 * d.ratio:.1f}%" if d is not None and d.ok else ""
    print(
        f"{target.problem} {'x'.join(map(str, shape))} {r.shape_class}: {r.config.key} "
        f"{r.measurement.gbps:.0f} GB/s, {100 * r.measurement.ratio:.1f}% of copy{of_default} "
        f"({r.trials} trials, {r.failed} failed, {time.monotonic() - t0:.1f}s)",
        flush=True,
    )


def cmd_merge(args: argparse.Namespace) -> None:
    """The shipped file as it is (its transposes' entries byte for byte) with the export's
    entries of a problem (casts, in-place transposes) in place of its own, sorted as an export
    sorts them; checked by parsing. A shipped entry of a problem whose class the export lacks
    (an export leaves out what a kernel change made stale) is kept as it was, for
    dev/restamp.py or the next campaign."""
    from autotranspose.kernels.shapes import ShapeClass
    from autotranspose.store import textio

    shipped = json.loads(Path(args.shipped).read_text())
    exported = json.loads(Path(args.export).read_text())
    if shipped["device"]["name"] != exported["device"]["name"]:
        raise SystemExit("the two files are of different GPU models")

    def key(e: dict) -> tuple:
        return e["elem_bytes"], e["shape_class"], e.get("problem", "")

    fresh = [e for e in exported["entries"] if e.get("problem")]
    exported_keys = {key(e) for e in fresh}
    kept = [e for e in shipped["entries"] if e.get("problem") and key(e) not in exported_keys]
    entries = [e for e in shipped["entries"] if not e.get("problem")] + fresh + kept
    entries.sort(
        key=lambda e: (e["elem_bytes"], ShapeClass.parse(e["shape_class"]), e.get("problem", ""))
    )
    doc = {**shipped, "entries": entries}
    textio.parse(doc, args.out)
    Path(args.out).write_text(textio.dumps(doc))
    print(
        f"wrote {args.out}: {sum(1 for e in entries if e.get('problem'))} entries of a problem "
        f"({len(kept)} kept from the shipped file: none exported)"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tune")
    t.add_argument("--db", required=True)
    t.add_argument("--pairs", nargs="+", default=list(PAIRS))
    t.add_argument("--trials", type=int, default=10)
    t.add_argument("--batch", type=int, default=5)
    t.add_argument("--both", choices=("no", "yes", "each"), default="each")
    t.add_argument("--budget", type=float, default=150.0, help="seconds before no case starts")
    m = sub.add_parser("merge")
    m.add_argument("--shipped", required=True)
    m.add_argument("--export", required=True)
    m.add_argument("--out", required=True)
    args = p.parse_args()
    {"tune": cmd_tune, "merge": cmd_merge}[args.cmd](args)


if __name__ == "__main__":
    main()

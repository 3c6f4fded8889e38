"""Developer tool: the cast-transposes of `bench --cast N --seed S`, each timed with the config
lookup serves it (tuned, nearest or shipped) against the pair's default, in one process,
interleaved, kernels only (`_castmeasure.CastBench`: rotated buffers, device scale and amax),
as % of a device-to-device copy of the same bytes. The served config is first checked bit for
bit against the default on the case's own shape.

    AUTOTRANSPOSE_DB=/tmp/none/x.db python dev/cast_ab.py --cast 16 --seed 77801
"""

from __future__ import annotations

import argparse
import statistics

from autotranspose.bench.cast import cast_cases
from autotranspose.dispatch import lookup
from autotranspose.kernels.config import KernelConfig
from autotranspose.kinds import cast as cast_kind
from autotranspose.runtime.compiler import activate
from autotranspose.tuner.castmeasure import CastBench
from autotranspose.tuner.study.cast import cast_target, parse_pair


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cast", type=int, default=16)
    p.add_argument("--seed", type=int, default=77801)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    state = activate(0)
    print(f"{state.info.name}: served config against the default, % of copy", flush=True)
    gains = []
    for case in cast_cases(args.cast, args.seed):
        src, dst = parse_pair(f"{case.src}:{case.dst}")
        t = cast_target(src, dst, (1, *case.shape), case.both)
        choice = lookup.cast_choice(state.info, t.code, t.shape_class, both=case.both)
        default = cast_kind.default(KernelConfig, src, dst)
        bench = CastBench(state, t.code, t.shape, case.both)
        try:
            wrong = bench.check(choice.config, default)
            copy = bench.gbps(bench.copy_time())
            runs = {"default": [], "served": []}
            for _ in range(args.rounds):
                for name, cfg in (("default", default), ("served", choice.config)):
                    runs[name].append(bench.gbps(bench.time(bench.launcher(cfg))) / copy)
        finally:
            bench.close()
        d, s = statistics.median(runs["default"]), statistics.median(runs["served"])
        gains.append(s / d)
        print(
            f"{case.shape[0]}x{case.shape[1]} {t.problem:24s} {t.shape_class!s:18s} "
            f"{choice.source:8s} default {100 * d:5.1f}%  served {100 * s:5.1f}%  "
            f"{s / d:5.3f}x  {choice.config.key}{'  WRONG: ' + wrong if wrong else ''}",
            flush=True,
        )
    print(
        f"served / default: median {statistics.median(gains):.3f}x, lowest {min(gains):.3f}x, "
        f"highest {max(gains):.3f}x"
    )


if __name__ == "__main__":
    main()

"""What a cast's first call races and chooses, repeated: for each case, `--rounds` first calls
(caches cleared between them, no database), each printing every candidate's median GPU
microseconds as the race timed them and the one chosen; then every candidate timed the way
dev/cast_check.py times (CUDA graphs, L2-cold), to see whether the race ranks them so.
    python3 dev/cast_race.py --cases f32_e5m2:685x58973:both [--rounds 3]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("AUTOTRANSPOSE_DB", "/tmp/none/user.db")  # nothing stored or served

import torch

import autotranspose as at
from autotranspose.dispatch import cast as cast_dispatch
from autotranspose.kinds import cast


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cases", required=True, help="pair:MxN[:both],...")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    at.set_keep_winners(False)
    for item in args.cases.split(","):
        code, mn, *flag = item.split(":")
        m, n = (int(v) for v in mn.split("x"))
        src, dst = cast.PAIRS[code]
        both = "both" in flag
        x = torch.randn(m, n, device="cuda").mul_(100).to(getattr(torch, src.name))
        amax = torch.zeros(1, device="cuda")
        s = torch.tensor([0.75], device="cuda")
        moved = m * n * (src.size + dst.size * (2 if both else 1))
        for r in range(args.rounds):
            at.clear_caches()
            at.cast_transpose(x, getattr(torch, dst.name), scale=s, amax=amax, both=both)
            torch.cuda.synchronize()
            outcome = cast_dispatch.history[-1][-1]
            print(f"{item} round {r}: chose {outcome.best.key}")
            for c, sec in sorted(outcome.seconds.items(), key=lambda kv: kv[1] or 1e9):
                mark = "*" if c == outcome.best else " "
                us = f"{sec * 1e6:8.1f} us {moved / sec / 1e9:7.0f} GB/s" if sec else "failed"
                print(f"   {mark} {c.key:60s} {us}")


if __name__ == "__main__":
    main()

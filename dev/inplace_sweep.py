"""Developer tool: transpose_()'s parameters (`InplaceParams`: tile, threads, unroll, lane
bytes, blocks per SM) against the served default, each pass timed on its own, as a first step
towards tuning the in-place kind (the tuner does not search it yet).

    python dev/inplace_sweep.py [--cases 4099x6007:float32 ...] [--repeat 5] [--out FILE]

Candidates: the default for the element size, and the default with one parameter changed to
each of its other values (a coordinate sweep: a dozen programs a case, not the whole grid).
Per case: every candidate's program runs on fresh data (checked bit for bit against PyTorch's
out-of-place transpose), then each pass is timed with CUDA events between the passes of one
call (the median of --repeat calls), as % of a device-to-device copy of the bytes that pass
moves. Prints each pass's best parameters against the default's; --out writes every
measurement as JSON. Needs PyTorch on a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

CASES = ["4099x6007:float32", "8192x8192:float32", "3x60000x97:float16", "20000x24:float64"]
GRID = {
    "tile": (16, 32, 64),
    "threads": (128, 256, 512),
    "unroll": (2, 4, 8),
    "lane_bytes": (4, 8, 16),
    "blocks_per_sm": (4, 8, 16),
}


def _candidates(default: Any) -> list[Any]:
    """The default, then each parameter moved to its other values, one at a time."""
    from dataclasses import replace

    out = [default]
    for field, values in GRID.items():
        out += [replace(default, **{field: v}) for v in values if v != getattr(default, field)]
    return out


def _case(text: str) -> tuple[tuple[int, ...], str]:
    shape, dtype = text.split(":")
    return tuple(int(v) for v in shape.split("x")), dtype


def _copy_gbps(torch: Any, nbytes: int, repeat: int) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeat + 1):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * nbytes / statistics.median(times[1:]) / 1e9


def measure(torch: Any, shape: tuple[int, ...], dtype: str, params: Any, repeat: int) -> Any:
    """(right, [(pass, us, moved bytes)]) of one candidate, or None where it cannot run."""
    from autotranspose.calls import inplace
    from autotranspose.calls.common import call_target
    from autotranspose.dispatch import inplace as programs
    from autotranspose.errors import AutotransposeError
    from autotranspose.runtime.arrays import view

    x0 = torch.randn(shape, device="cuda").to(getattr(torch, dtype))
    want = x0.transpose(-1, -2).contiguous()
    x = x0.clone()
    xv = view(x)
    state, ctx, handle = call_target(xv, None)
    try:
        prog = programs.program(state, xv.batch, xv.m, xv.n, xv.et.size, False, params)
    except AutotransposeError:
        return None
    inplace.run(prog, xv.ptr, ctx, handle)
    right = torch.equal(x.view(want.shape), want)
    per: list[list[float]] = [[] for _ in prog.steps]
    for _ in range(repeat):
        x.copy_(x0)
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(prog.steps) + 1)]
        inplace.run(prog, xv.ptr, ctx, handle, lambda k, ev=events: ev[k].record())
        events[-1].synchronize()
        for k in range(len(prog.steps)):
            per[k].append(events[k].elapsed_time(events[k + 1]) * 1e3)
    return right, [
        (s.how.spec.piece, statistics.median(t), s.how.moved_bytes)
        for s, t in zip(prog.steps, per, strict=True)
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=CASES, metavar="SHAPE:DTYPE")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", type=Path)
    args = p.parse_args()

    import torch

    from autotranspose.kinds import inplace as kind

    log = []
    for text in args.cases:
        shape, dtype = _case(text)
        e = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
        nbytes = e * int(torch.tensor(shape).prod())
        copy = _copy_gbps(torch, nbytes, args.repeat)
        default = kind.default(e)
        best: dict[str, tuple[float, str]] = {}
        served: dict[str, float] = {}
        for params in _candidates(default):
            if not params.fits(e):
                continue
            found = measure(torch, shape, dtype, params, args.repeat)
            if found is None:
                continue
            right, passes = found
            for piece, us, moved in passes:
                of_copy = moved / (us * 1e-6) / 1e9 / copy if us else 0.0
                log.append({"case": text, "params": params.key, "pass": piece, "us": us,
                            "of_copy": of_copy, "right": right})  # fmt: skip
                if right and of_copy > best.get(piece, (0.0, ""))[0]:
                    best[piece] = (of_copy, params.key)
                if params == default:
                    served[piece] = of_copy
        print(f"{text}: copy {copy:.0f} GB/s")
        for piece, (of_copy, key) in best.items():
            print(f"  {piece:16s} default {100 * served.get(piece, 0):5.1f}%  best "
                  f"{100 * of_copy:5.1f}% {key}")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(log, indent=1) + "\n")


if __name__ == "__main__":
    main()

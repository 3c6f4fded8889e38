"""Developer tool: what transpose_()'s first call buys a class nobody tuned, on the same
matrices in one process: each case served with first-call measurement off (lookup's guess,
the kind's default) and on (the portfolio raced on the call's own matrix, the winner served),
the two alternating over rounds, each call checked bit for bit and timed as `bench --inplace`
times transpose_() (device time, x reset before each call) against a copy of its bytes.

    python dev/inplace_firstcall_ab.py [--cases 19907x19907:uint8 ...] [--rounds 2]
                                       [--repeat 5]

Run it without a tuning database (AUTOTRANSPOSE_DB pointing nowhere): a stored result would
be served in both. Needs PyTorch on a CUDA GPU.
"""

from __future__ import annotations

import argparse
import time

CASES = [
    "19907x19907:uint8",  # odd squares in lines, no shipped class
    "9623x9623:bool",
    "4099x4099:float32",
    "6007x6007:bfloat16",
    "5003x16381:uint8",  # rectangles
    "997x30011:int8",
    "2x3001x4097:bfloat16",
    "2754x3036:float16",
]


def main() -> None:
    from autotranspose.dispatch import firstcall

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=CASES, metavar="SHAPE:DTYPE")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    for text in args.cases:
        _case(text, args.rounds, args.repeat)
    firstcall.set_enabled(None)


def _case(text: str, rounds: int, repeat: int) -> None:
    """One case, first-call measurement off and on alternating over `rounds`: a line each."""
    import torch

    import autotranspose as at
    from autotranspose.bench.inplace import _median_us
    from autotranspose.dispatch import firstcall, inplace as programs, lookup
    from autotranspose.runtime.compiler import device_state

    info = device_state(0).info
    dims, dtype = text.split(":")
    shape = tuple(int(v) for v in dims.split("x"))
    b, m, n = (1, *shape) if len(shape) == 2 else shape
    dt = getattr(torch, dtype)
    raw = torch.randint(0, 256, (b * m * n * dt.itemsize,), dtype=torch.uint8, device="cuda")
    if dt == torch.bool:
        raw &= 1  # a bool's byte is 0 or 1: PyTorch's own copies keep no other
    x0 = raw.view(dt).view(shape)
    want = x0.transpose(-1, -2).contiguous()
    flat, other = x0.view(torch.uint8).view(-1), torch.empty_like(raw)
    copy_us = _median_us(torch, lambda: other.copy_(flat), repeat)
    x = x0.clone()

    def reset() -> None:
        x.copy_(x0)

    for rnd in range(rounds):
        for mode in ("off", "on") if rnd % 2 == 0 else ("on", "off"):
            at.clear_caches()
            firstcall.set_enabled(mode == "on")
            before = len(programs.history)
            reset()
            t0 = time.perf_counter()
            got = at.transpose_(x)
            first_s = time.perf_counter() - t0
            right = torch.equal(got.view(torch.uint8), want.view(torch.uint8))
            us = _median_us(torch, lambda: at.transpose_(x), repeat, reset)
            choice = lookup.inplace_choice(info, dt.itemsize, b, m, n)
            raced = len(programs.history) - before
            print(
                f"{text:22s} {mode:3s} {'ok' if right else 'WRONG'} {us:9.1f} us "
                f"{100 * copy_us / us:5.1f}% of copy  {choice.source:8s} "
                f"{choice.config.params.key}  first call {first_s:5.2f} s, raced {raced}",
                flush=True,
            )


if __name__ == "__main__":
    main()

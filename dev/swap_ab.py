"""Developer tool: in-place squares whose rows are not whole 16-byte words by SWAP (element by
element) and by swap_lines (kernels/inplace.py: SWAP_LINES), on the same matrices in one
process.

    python dev/swap_ab.py [--cases 4099x4099:float16 ...] [--params 64x256 ...] [--rounds 2]
                          [--variants elements lines] [--repeat 5] [--out FILE]

Per case, parameters (what lookup serves the class, then each TILExTHREADS given), round and
variant ("elements": element by element; "lines": aligned 16-byte words)
the program is rebuilt, the call checked bit for bit against PyTorch's out-of-place transpose
and timed (dev/staged_ab.py's timing) against a copy of x and transpose(); the rounds
alternate the variants' order. Needs PyTorch on a CUDA GPU.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from staged_ab import matrix, measured, report, write_rows

CASES = [
    "8191x8191:uint8",  # rows one byte short of whole lines
    "5003x5003:uint8",
    "16x1025x1025:int8",
    "4099x4099:float16",  # 32% of a copy element by element
    "6007x6007:bfloat16",
    "64x197x197:float16",  # attention maps of 197 tokens
    "4099x4099:float32",
    "3x2049x2049:float32",
    "4097x4097:float64",
    "2047x2047:complex64",
    "8192x8192:float16",  # rows of whole lines: the same kernel either way (a control)
]
VARIANTS = ("elements", "lines")


def main() -> None:
    import torch

    import autotranspose as at
    from autotranspose.dispatch import inplace as programs
    from autotranspose.kernels import inplace as kernels

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=CASES, metavar="SHAPE:DTYPE")
    p.add_argument("--params", nargs="*", default=["64x256"], metavar="TILExTHREADS")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    saved = kernels.SWAP_LINES
    rows = []
    for text in args.cases:
        case = matrix(torch, text, args.repeat)
        state, xv = case[-2:]
        served = programs.program(state, xv.batch, xv.m, xv.n, xv.et.size).steps[0].how
        choices = [served.spec.params]
        for given in args.params:
            tile, threads = (int(v) for v in given.split("x"))
            given_params = replace(served.spec.params, tile=tile, threads=threads)
            if given_params.fits(xv.et.size):  # a tile's shared memory holds its elements
                choices.append(given_params)
        for params in dict.fromkeys(choices):
            for rnd in range(args.rounds):
                for name in args.variants if rnd % 2 == 0 else args.variants[::-1]:
                    kernels.SWAP_LINES = name == "lines"
                    at.clear_caches()
                    prog = programs.program(state, xv.batch, xv.m, xv.n, xv.et.size, params=params)
                    right, us, passes = measured(
                        torch, prog, case, args.repeat, lambda how: f"/{how.spec.params.key}"
                    )
                    rows.append(report(text, name, right, us, case[3], case[4], passes))
    kernels.SWAP_LINES = saved
    at.clear_caches()
    write_rows(args.out, rows)


if __name__ == "__main__":
    main()

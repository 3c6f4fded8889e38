"""Developer tool: in-place rectangles by the COLS kernels a switch of kernels/inplace.py
chooses, on the same matrices in one process: "cols" (every COLS pass by "cols", the widest
words x, the rows and the bands divide, one row step after another), "words" (1- and 2-byte
rows that are not whole 4-byte words in aligned 4-byte words: "cols_words", COLS_WORDS),
"rule" (also rows of whole 16-byte words of 1- and 2-byte elements compiled per rule:
"cols_rule", COLS_RULE), "slide" (the grids of "cols_words" by "cols_slide": each
column's rotation carried by a window of rows, COLS_SLIDE), "slide-whole" (also 1- and 2-byte
rows of whole 4-byte words, not 16-byte ones: COLS_SLIDE_WHOLE), "slide-narrow" (also grids
whose 32-byte band rows pass the opt-in, in bands of 24 bytes: COLS_SLIDE_NARROW),
"slide-pieces" (also the words a band shares with its neighbour in aligned pieces, not by
atomics, for 1- and 2-byte elements: COLS_SLIDE_PIECES; served: 2-byte only), "slide-xor"
(every shared edge word by one atomic XOR of its bytes as loaded with the written ones,
COLS_SLIDE_XOR; served: 1-byte only); "slide" to "slide-pieces" leave the XOR off;
"slide-tall" (columns of up to 9685 rows in bands of 16 bytes: COLS_SLIDE_NARROW (24, 16)),
"no-tall" (columns past 7264 rows through the scratch, "cols_staged": (24,)), "slide-8" (and
columns of up to 14528 rows in bands of 8 bytes: (24, 16, 8), as served), "wide-bands" (COLS
bands as wide as the opt-in holds, one block an SM, where served bands stop at 96 KiB:
COLS_BLOCK_BYTES),
"rule-wide" (COLS_RULE for 4- and 8-byte elements too), "no-step" (SHUFFLE of 1- and 2-byte
rows carrying every source column, where the served kernel steps it: kernels/inplace.py
SHUFFLE_STEP off), "runs-one" (SHUFFLE of long rows through the scratch, "shuffle_runs", one
word's loads at a time a thread: SHUFFLE_RUNS_BATCH 1), "runs-4" (four words' loads at a
time), "runs-8" (eight), "runs-8k" and "runs-32k" (its chunks of 8 or 32 KiB,
RUNS_CHUNK_BYTES), "runs-uncapped" (its registers not capped for 1024 threads an SM:
RUNS_MIN_THREADS 0), "no-runs-side" (a skinny matrix planned on the side whose rows fit
shared memory, its long columns staged, not on its side of few rows: RUNS_SIDE off),
"runs-from-32k", "runs-from-128k" and "no-runs-from" (rows of at least 32 or 128 KiB, or
none, of grids of few rows by runs through the scratch even where shared memory holds one:
RUNS_FROM_BYTES; served: 32 KiB).

    python dev/cols_ab.py [--cases 10007x5003:float16 ...] [--variants cols words rule]
                          [--rounds 2] [--repeat 5] [--out FILE]
    python dev/cols_ab.py --profile M N DTYPE [--variants V]   (under ncu --profile-from-start off)

Per case, round and variant the program is rebuilt,
the call checked bit for bit against PyTorch's out-of-place transpose and timed, each pass
against a copy of the bytes it moves (dev/staged_ab.py's timing), the whole call against a
copy of x and transpose(); the rounds alternate the variants' order. Needs PyTorch on a CUDA
GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from staged_ab import matrix, measured, report, write_rows

CASES = [
    "10007x5003:float16",  # the 5003 x 10007 view: bands of 32 bytes, 5003 rows
    "5003x3001:float16",
    "3001x1999:int16",
    "11x2656x1904:uint8",
    "5003x16381:uint8",
    "3001x1999:uint8",  # the H200 file's tuned 1-byte rectangle
    "7919x2039:float16",
    "3123x8555:uint8",
    "2x3001x4097:bfloat16",
    "997x30011:int8",
    "18625x6903:float16",  # 6903 rows: past what a 36-byte band row holds, "cols" either way
    "8192x7168:uint8",  # rows of whole words: "cols" either way (a control)
]
# name: the switches of kernels/inplace.py it sets ("served": none, as they are)
_OFF = {
    "COLS_SLIDE": False,
    "COLS_SLIDE_WHOLE": (),
    "COLS_SLIDE_NARROW": (),
    "COLS_SLIDE_PIECES": (),
    "COLS_SLIDE_XOR": (),
}
_RULE = {"COLS_WORDS": (1, 2), "COLS_RULE": (1, 2)}
_SLIDE = {"COLS_SLIDE": True, "COLS_SLIDE_WHOLE": (1, 2), "COLS_SLIDE_NARROW": (24,)}
VARIANTS = {
    "served": {},
    "cols": {"COLS_WORDS": (), "COLS_RULE": (), **_OFF},
    "words": {"COLS_WORDS": (1, 2), "COLS_RULE": (), **_OFF},
    "rule": {"COLS_WORDS": (1, 2), "COLS_RULE": (1, 2), **_OFF},
    "rule-wide": {"COLS_WORDS": (1, 2), "COLS_RULE": (1, 2, 4, 8), **_OFF},
    "no-step": {"COLS_WORDS": (1, 2), "COLS_RULE": (1, 2), "SHUFFLE_STEP": False, **_OFF},
    # each "slide" variant adds one switch of cols_slide's to the one before (the rest off)
    "slide": {**_RULE, **_OFF, "COLS_SLIDE": True},
    "slide-whole": {**_RULE, **_OFF, "COLS_SLIDE": True, "COLS_SLIDE_WHOLE": (1, 2)},
    "slide-narrow": {**_RULE, **_SLIDE, "COLS_SLIDE_PIECES": (), "COLS_SLIDE_XOR": ()},
    "slide-pieces": {**_RULE, **_SLIDE, "COLS_SLIDE_PIECES": (1, 2), "COLS_SLIDE_XOR": ()},
    "slide-xor": {"COLS_SLIDE_XOR": (1, 2), "COLS_SLIDE_PIECES": ()},
    "slide-tall": {"COLS_SLIDE_NARROW": (24, 16)},
    "no-tall": {"COLS_SLIDE_NARROW": (24,)},
    "slide-8": {"COLS_SLIDE_NARROW": (24, 16, 8)},
    "wide-bands": {"COLS_BLOCK_BYTES": 227 << 10},
    "runs-one": {"SHUFFLE_RUNS_BATCH": 1},
    "runs-4": {"SHUFFLE_RUNS_BATCH": 4},
    "runs-8k": {"RUNS_CHUNK_BYTES": 8 << 10},
    "runs-32k": {"RUNS_CHUNK_BYTES": 32 << 10},
    "runs-uncapped": {"RUNS_MIN_THREADS": 0},
    "no-runs-side": {"RUNS_SIDE": False},
    "runs-from-32k": {"RUNS_FROM_BYTES": 32 << 10},
    "runs-from-128k": {"RUNS_FROM_BYTES": 128 << 10},
    "no-runs-from": {"RUNS_FROM_BYTES": 1 << 62},
    "runs-8": {"SHUFFLE_RUNS_BATCH": 8},
}
# what a variant may set
SWITCHES = (
    "COLS_WORDS",
    "COLS_RULE",
    "SHUFFLE_STEP",
    "COLS_SLIDE",
    "COLS_SLIDE_WHOLE",
    "COLS_SLIDE_NARROW",
    "COLS_SLIDE_PIECES",
    "COLS_SLIDE_XOR",
    "SHUFFLE_RUNS_BATCH",
    "RUNS_CHUNK_BYTES",
    "RUNS_MIN_THREADS",
    "RUNS_SIDE",
    "RUNS_FROM_BYTES",
    "COLS_BLOCK_BYTES",
)


def _switch(kernels, compiler, saved: dict, switches: dict) -> None:
    """Set a variant's switches (the others as `saved`: as they were) and forget the compiled
    in-place kernels (SHUFFLE_STEP changes a kernel's source, not its name)."""
    for k in SWITCHES:
        setattr(kernels, k, switches.get(k, saved[k]))
    for key in [k for k in compiler._kernels if k[1].startswith("at_inplace_")]:
        del compiler._kernels[key]


def main() -> None:
    import torch

    import autotranspose as at
    from autotranspose.dispatch import inplace as programs, lookup
    from autotranspose.kernels import inplace as kernels
    from autotranspose.runtime import compiler

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=CASES, metavar="SHAPE:DTYPE")
    p.add_argument("--variants", nargs="+", default=["cols", "words"], choices=list(VARIANTS))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", type=Path)
    p.add_argument(
        "--profile",
        nargs=3,
        metavar=("M", "N", "DTYPE"),
        help="instead: one transpose_() of an M x N matrix (after one that compiles its "
        "kernels) between cudaProfilerStart and Stop, by the served kernels",
    )
    args = p.parse_args()
    saved = {k: getattr(kernels, k) for k in SWITCHES}
    if args.profile:  # under the first variant's switches
        _switch(kernels, compiler, saved, VARIANTS[args.variants[0]])
        _profile(torch, at, *args.profile)
        return
    variants = [(name, VARIANTS[name]) for name in args.variants]
    rows = []
    for text in args.cases:
        case = matrix(torch, text, args.repeat)
        xv = case[-1]
        # every variant at the parameters lookup serves under the first one's kernels: a
        # switch that changes a class's kernels makes its stored result stale, and lookup
        # would serve the kind's default under the other
        _switch(kernels, compiler, saved, variants[0][1])
        at.clear_caches()
        params = lookup.inplace_choice(case[-2].info, xv.et.size, xv.batch, xv.m, xv.n)
        params = params.config.params
        print(f"{text}: parameters {params.key}", flush=True)
        for rnd in range(args.rounds):
            for name, switches in variants if rnd % 2 == 0 else variants[::-1]:
                _switch(kernels, compiler, saved, switches)
                at.clear_caches()
                prog = programs.program(case[-2], xv.batch, xv.m, xv.n, xv.et.size, params=params)
                right, us, passes = measured(torch, prog, case, args.repeat, _label)
                rows.append(report(text, name, right, us, case[3], case[4], passes))
    _switch(kernels, compiler, saved, saved)
    at.clear_caches()
    write_rows(args.out, rows)


def _profile(torch, at, m: str, n: str, dtype: str) -> None:
    """One served in-place call of an m x n matrix, alone between the profiler's marks."""
    shape = (int(m), int(n))
    x = torch.zeros(shape, dtype=getattr(torch, dtype), device="cuda")
    at.transpose_(x.view(shape[1], shape[0]))  # compiles the n x m call's kernels
    y = at.transpose_(x)  # and the m x n call's
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    at.transpose_(y.view(shape))
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def _label(how) -> str:
    """A COLS pass's threads and band bytes."""
    return f"/{how.spec.params.threads}/{how.args.get('tiles', 0) * how.spec.elem_bytes}B"


if __name__ == "__main__":
    main()

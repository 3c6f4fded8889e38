"""Developer tool: COLS over thread-block clusters ("cols_cluster") against a block's band
("cols", or through the scratch past a block), and the cluster's shape, on the same matrices
in one process.

    python dev/cluster_ab.py [--cases 2039x3008:float32 ...] [--variants block auto k4_w128]
                             [--repeat 5] [--out FILE]

Variants: "block" (no clusters), "auto" (kernels/inplace.py's `cluster_band` as shipped) and
"kK_wW[_tT][_mB]" (clusters of K blocks, bands of W bytes, within the opt-in, every COLS form
and rows of any alignment: `_set`). Per case and variant the
programs are rebuilt, the call checked bit for bit against PyTorch's out-of-place transpose,
each pass timed between the passes of one call behind a sleep kernel (dev/staged_ab.py's
timing) and set against a copy of the bytes it moves. Needs PyTorch on a CUDA GPU (sm_90
for the clusters).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from staged_ab import matrix, pass_figures, report, run_passes

CASES = [
    "2039x3008:float32",  # gcd 1, the gather
    "3008x2039:float32",  # the scatter
    "2748x4404:float64",  # gcd 4: rotation and gather
    "4404x2748:float64",
    "5003x8192:uint8",
    "3001x5120:float16",
    "1765x5125:complex128",
    "6007x10016:float16",
    "7488x4032:float32",
    "2760x7980:float32",
    "8280x7320:float16",  # past a block's band: staged today
    "4099x20000:uint8",
    "6x1500x2048:float32",
]
VARIANTS = ["block", "auto"] + [
    f"k{k}_w{w}" for w in (256, 128, 64) for k in (2, 4, 8) if (k, w) != (2, 64)
]


def _set(kernels, name: str, saved: dict) -> None:
    """kernels/inplace.py's cluster rule for variant `name`: "block" none, "auto" as shipped,
    kK_wW[_tT][_mB] that one shape (T threads a block, registers capped for B blocks an SM)
    for every COLS form and rows of any alignment, wherever its blocks hold the columns."""
    for key, value in saved.items():
        setattr(kernels, key, value)
    if name == "block":
        kernels.CLUSTER_MIN_ROWS = 1 << 40
    elif name != "auto":
        parts = dict((p[0], int(p[1:])) for p in name.split("_"))
        kernels.CLUSTER_SIZES, kernels.CLUSTER_BYTES = (parts["k"],), (parts["w"],)
        kernels.CLUSTER_MIN_ROWS, kernels.CLUSTER_BLOCK_BYTES = 0, 1 << 30
        kernels.CLUSTER_RULES, kernels.CLUSTER_WORDS = (0, 1, 2, 3), 1
        kernels.CLUSTER_MIN_BLOCKS = parts.get("m", kernels.CLUSTER_MIN_BLOCKS)
        kernels.CLUSTER_THREADS = parts.get("t", kernels.CLUSTER_THREADS)


def main() -> None:
    import torch

    import autotranspose as at
    from autotranspose.dispatch import inplace as programs
    from autotranspose.kernels import inplace as kernels

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=CASES, metavar="SHAPE:DTYPE")
    p.add_argument("--variants", nargs="+", default=VARIANTS)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    from autotranspose.runtime import compiler

    names = ("CLUSTER_MIN_ROWS", "CLUSTER_SIZES", "CLUSTER_BYTES", "CLUSTER_BLOCK_BYTES")
    names += ("CLUSTER_MIN_BLOCKS", "CLUSTER_THREADS", "CLUSTER_RULES", "CLUSTER_WORDS")
    saved = {key: getattr(kernels, key) for key in names}
    rows = []
    for text in args.cases:
        x0, x, want, copy_us, oop_us, state, xv = matrix(torch, text, args.repeat)
        nbytes = x0.numel() * x0.element_size()
        for name in args.variants:
            _set(kernels, name, saved)
            at.clear_caches()
            compiler._kernels.clear()  # a kernel's name does not say its register cap
            try:
                prog = programs.program(state, xv.batch, xv.m, xv.n, xv.et.size)
            except Exception as exc:  # a forced shape the columns do not fit
                print(f"{text:>22} {name:>8} skipped: {exc}", flush=True)
                continue
            right, us, per = run_passes(torch, prog, x, x0, want, args.repeat)
            passes = pass_figures(
                prog,
                per,
                copy_us,
                nbytes,
                lambda how: (
                    f"/k{how.spec.cluster}w{how.args['tiles'] * how.spec.elem_bytes}"
                    if how.spec.cluster
                    else ""
                ),
            )
            rows.append(report(text, name, right, us, copy_us, oop_us, passes))
    _set(kernels, "auto", saved)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

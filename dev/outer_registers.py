"""Registers of permute()'s outer variants against their plain kernels (nvcc only, no GPU):
which configs' outer variants need more registers than their plain kernel, and which lose
resident blocks per SM by it (a possible bandwidth cost on outer launches, to be measured on
the device).

    python3 dev/outer_registers.py --sizes 4 --archs sm_80 [--sample 120] [--seed 1]

Why a tool and not a unit test: ptxas reallocates each variant's registers anew under the
kernels' "1 block per SM" launch bounds, and a few configs (8 micro-blocks per thread,
persistent grids) grow by 34-40 registers where most move by -32 to +24; a bound on that in
CI failed at random on whichever configs a run sampled (docs/perf-notes.md, "Permute: transpose passes with outer dims").
"""

from __future__ import annotations

import argparse
import random
import sys


def resident(registers: int, threads: int, smem: int) -> int:
    """Blocks per SM of an sm_80/sm_90 GPU: registers are allocated per warp in units of 256,
    65536 per SM; at most 2048 threads, 32 blocks and 228 KB of shared memory (1 KB reserved
    per block)."""
    per_warp = -(-registers * 32 // 256) * 256
    blocks = min(65536 // (per_warp * (threads // 32)), 2048 // threads, 32)
    return min(blocks, (228 << 10) // (smem + 1024)) if smem else blocks


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--archs", nargs="+", default=["sm_80", "sm_90"])
    ap.add_argument("--sample", type=int, default=0, help="configs per size (0: all)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    from autotranspose.kernels.codegen import kernel_name
    from autotranspose.kernels.config import config_space
    from autotranspose.runtime.compiler import nvcc_resources

    dtypes = {1: "int8", 2: "float16", 4: "float32", 8: "complex64", 16: "complex128"}
    rng = random.Random(args.seed)
    for e in args.sizes:
        space = list({c.kernel_name: c for c in config_space(dtypes[e])}.values())
        if args.sample:
            space = rng.sample(space, min(args.sample, len(space)))
        for arch in args.archs:
            plain = nvcc_resources(space, arch)
            outer = nvcc_resources(space, arch, outer=True)
            growth, lost = [], []
            for c in space:
                p, o = plain[c.kernel_name].registers, outer[kernel_name(c, True)].registers
                growth.append(o - p)
                before, after = (
                    resident(p, c.threads, c.smem_bytes),
                    resident(o, c.threads, c.smem_bytes),
                )
                if after < before:
                    lost.append(f"{c.key}: {p} -> {o} registers, {before} -> {after} blocks per SM")
            growth.sort()
            print(
                f"{e}-byte {arch}: {len(space)} configs, outer - plain registers min "
                f"{growth[0]} median {growth[len(growth) // 2]} max {growth[-1]}; "
                f"{len(lost)} lose a resident block",
                flush=True,
            )
            for line in lost:
                print("   ", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

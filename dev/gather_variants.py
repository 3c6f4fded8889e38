"""Time permute()'s gather kernel with other launch shapes on whole problems, against what
permute() serves and torch.compile's kernel, in one process (device only):

    python3 dev/gather_variants.py int32:62x5x4x38578/1,0,3,2 float32:6x199x68132/1,2,0
    python3 dev/gather_variants.py --render-only   # nvcc's registers and spills, no GPU

Each variant is the gather template rendered with its own threads a block, elements a thread
(`unroll`) and __launch_bounds__ blocks, launched either as the shipped grid (the blocks an SM
the bounds allow, each thread walking many elements) or as a full grid (every thread its
`unroll` elements once, as Inductor's pointwise kernels run: 128 threads, 8 elements,
tens of thousands of blocks). Each is checked against np.transpose, then timed on the same
buffers as % of a device-to-device copy of the same bytes.

What it is for: on 4- to 8-byte permutes `torch.compile`'s one-dimensional kernel ran
97-100% of copy where the packed and vector boxes ran 82-92 (docs/perf-notes.md, "Permutes of
4- to 16-byte elements where `torch.compile` leads"); this asks whether the gather, launched
the same way, gets there too.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys

import numpy as np
from _sweep import event_seconds

# (threads, unroll, min_blocks, full grid): the shipped gather first
VARIANTS = (
    (256, 4, 4, False),
    (256, 4, 4, True),
    (128, 4, 8, True),
    (128, 2, 8, True),
    (128, 1, 16, True),
)


def _name(v: tuple[int, int, int, bool]) -> str:
    threads, unroll, blocks, full = v
    return f"t{threads}_u{unroll}_b{blocks}_{'full' if full else 'walk'}"


def _source(threads: int, unroll: int, blocks: int) -> str:
    from autotranspose.kernels.codegen import render_gather

    return render_gather(threads, unroll, blocks)


def render_only(arch: str) -> int:
    """Registers and spills of every variant's kernels (nvcc's report, no GPU)."""
    from autotranspose.runtime.compiler import source_resources

    for v in VARIANTS:
        report = source_resources(_source(*v[:3]), arch)
        regs = sorted(r.registers for r in report.values())
        spills = {k: r.spill_bytes for k, r in report.items() if r.spill_bytes or r.stack_bytes}
        print(
            f"{_name(v)}: {regs[0]}-{regs[-1]} registers over the 1- to 16-byte kernels, "
            f"{spills or 'no spills'}"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*", help="dtype:shape/axes, e.g. int32:62x5x4x38578/1,0,3,2")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--render-only", action="store_true")
    ap.add_argument("--arch", default="sm_90")
    args = ap.parse_args()
    if args.render_only:
        return render_only(args.arch)

    import cupy

    from autotranspose.runtime.compiler import activate

    state = activate(0)
    for case in args.cases:
        _one_case(case, args, state)
        cupy.get_default_memory_pool().free_all_blocks()
    return 0


def _one_case(case: str, args: argparse.Namespace, state) -> None:
    import cupy

    import autotranspose as at
    from autotranspose.kernels.gather import ARG_FORMAT, MAX_STRIDE, gather_args
    from autotranspose.plans.permute import GATHER, one_launch, plan_permute
    from autotranspose.runtime.compiler import load_source
    from autotranspose.runtime.launch import Launch

    name, rest = case.split(":")
    dims_text, axes_text = rest.split("/")
    shape = tuple(int(v) for v in dims_text.split("x"))
    axes = tuple(int(v) for v in axes_text.split(","))
    dtype = np.dtype(name)
    e = dtype.itemsize
    x = cupy.asarray(np.random.default_rng(1).integers(0, 100, shape).astype(dtype))
    out = cupy.empty(tuple(shape[a] for a in axes), dtype)
    want = cupy.transpose(x, axes)
    plan = plan_permute(shape, axes, e, in_ptr=x.data.ptr, out_ptr=out.data.ptr)
    g = one_launch(plan.passes[0], GATHER)
    if g is None:
        print(f"{case}: no gather takes it", flush=True)
        return
    total = math.prod(d.extent for d in g.dims)
    copy_s = event_seconds(
        lambda: cupy.cuda.runtime.memcpyAsync(out.data.ptr, x.data.ptr, x.nbytes, 3, 0),
        args.repeats,
    )
    line = f"{case} ({x.nbytes >> 20} MB, {len(g.dims)} dims):"
    served = functools.partial(at.permute, x, axes, out)
    line += f" served {100 * copy_s / event_seconds(served, args.repeats):.1f}"
    try:
        import torch

        from autotranspose.bench.peers import compile_peer

        run, _note = compile_peer(torch, shape, axes, name)
        if run is not None:
            stream = cupy.cuda.get_current_stream().ptr
            line += f" compile {100 * copy_s / event_seconds(lambda: run(x.data.ptr, out.data.ptr, stream), args.repeats):.1f}"
    except ImportError:
        pass
    for v in VARIANTS:
        threads, unroll, blocks, full = v
        kernel = load_source(state.arch, _source(threads, unroll, blocks), [f"at_gather_s{e}"])[
            f"at_gather_s{e}"
        ]
        grid = (
            -(-total // (threads * unroll))
            if full
            else min(-(-total // (threads * unroll)), state.info.multiprocessors * blocks)
        )
        grid = max(1, min(grid, MAX_STRIDE // threads))
        values = gather_args(g.dims, grid * threads).values()
        lc = Launch(None, kernel, (grid, 1, 1), (threads, 1, 1), values, state, ARG_FORMAT)
        launch = functools.partial(lc.run, x.data.ptr, out.data.ptr, 0, state.ctx)
        out.fill(0)
        launch()
        ok = bool(cupy.array_equal(out, want))
        s = event_seconds(launch, args.repeats)
        line += f" | {_name(v)} {100 * copy_s / s:.1f}{'' if ok else ' WRONG'} (grid {grid})"
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())

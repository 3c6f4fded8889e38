"""Developer tool: COLS through the scratch ("cols_staged") against a block's band of whole
columns ("cols", or the unfused passes where no block holds a column), and the staged band's
size (a buffer's, of up to kernels/inplace.py's STAGE_BUFFERS), on the same matrices in one
process; "served" is the defaults (staged only where no block holds the columns).

    python dev/staged_ab.py [--cases 5345x11747:float32 ...] [--repeat 5] [--out FILE]

Per case and variant (kernels/inplace.py's STAGED_MIN_ROWS and STAGE_BYTES set for it, the
programs rebuilt): the call checked bit for bit against PyTorch's out-of-place transpose, then
each pass timed with CUDA events between the passes of one call behind a sleep kernel (the
host queues the launches while the GPU sleeps), the median of --repeat calls; the whole call
against a device-to-device copy of the matrix and against transpose() out of place; and the
whole call made as a user makes it (a PyTorch tensor's second call: the fast path). Needs
PyTorch on a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

CASES = [
    "5345x11747:float32",
    "2039x7919:float32",
    "3123x8555:uint8",
    "5029x6113:float32",
    "8280x7320:float16",
    "10007x6007:float16",
    "4093x10007:float32",
    "7488x4032:float32",
    "2760x7980:float32",
    "1908x3252:float32",
    "7919x2039:float16",
    "2139x1759:float64",
    "2313x617:complex128",
    "1299x3839:float64",
    "12289x8191:uint8",
]
# (name, STAGED_MIN_ROWS, STAGE_BYTES: a buffer's, of up to kernels/inplace.py's STAGE_BUFFERS
# in the scratch)
VARIANTS = [
    ("served", 1 << 31, 10 << 20),
    ("block", 1 << 40, 8 << 20),
    ("staged4M", 1024, 4 << 20),
    ("staged8M", 1024, 8 << 20),
    ("staged10M", 1024, 10 << 20),
    ("staged16M", 1024, 16 << 20),
]
SLEEP = 2_000_000


def _case(text: str) -> tuple[tuple[int, ...], str]:
    shape, dtype = text.split(":")
    return tuple(int(v) for v in shape.split("x")), dtype


def _timed(torch: Any, fn: Any, repeat: int, before: Any = None) -> float:
    times = []
    for _ in range(repeat + 1):
        if before is not None:
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SLEEP)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times[1:])


def matrix(torch: Any, text: str, repeat: int):
    """Case "SHAPE:DTYPE" on the GPU: x0 (random), x (its copy, transposed in place), want
    (x0's transpose), a copy's and transpose()'s times (us), x's device state and view."""
    import autotranspose as at
    from autotranspose.calls.common import call_target
    from autotranspose.runtime.arrays import view

    shape, dtype = _case(text)
    dt = getattr(torch, dtype)
    if dt.is_floating_point or dt.is_complex:
        x0 = torch.randn(shape, device="cuda").to(dt)
    else:
        x0 = torch.randint(0, 256, shape, device="cuda", dtype=torch.int32).to(dt)
    want = x0.transpose(-1, -2).contiguous()
    x = x0.clone()
    copy_us = _timed(torch, lambda: x.copy_(x0), repeat)
    out = torch.empty_like(want)
    oop_us = _timed(torch, lambda: at.transpose(x0, out=out), repeat)
    xv = view(x)
    return x0, x, want, copy_us, oop_us, call_target(xv, None)[0], xv


def report(
    text: str,
    name: str,
    right: bool,
    us: float,
    copy_us: float,
    oop_us: float,
    passes: list[str],
    note: str = "",
    **extra: float,
) -> dict:
    """A variant's row (printed): the call's time against a copy's and transpose()'s, and
    each pass's figure."""
    row = {"case": text, "variant": name, "right": right, "us": us, **extra}
    row |= {"copy_pct": 100 * copy_us / us, "vs_transpose": 100 * oop_us / us, "passes": passes}
    print(
        f"{text:>22} {name:>10} {'ok' if right else 'WRONG'} {us:9.1f} us "
        f"{row['copy_pct']:5.1f}% of copy {row['vs_transpose']:5.1f}% of transpose() {note}"
        + " ".join(passes),
        flush=True,
    )
    return row


def pass_figures(prog: Any, per: list[float], copy_us: float, nbytes: int, label: Any) -> list[str]:
    """Each pass of `prog` as "piece<label(how)>:P%", P its time `per[k]` (us) as a % of a
    copy of the bytes it moves (`copy_us`: a copy of x's `nbytes`)."""
    return [
        f"{s.how.spec.piece}{label(s.how)}:{100 * (s.how.moved_bytes / 2 / nbytes) * copy_us / t:.0f}%"
        for s, t in zip(prog.steps, per, strict=True)
    ]


def measured(torch: Any, prog: Any, case: tuple, repeat: int, label: Any) -> tuple:
    """`prog` on a `matrix` case: whether it is right, its time (us) and `pass_figures`."""
    x0, x, want, copy_us, _, _, _ = case
    right, us, per = run_passes(torch, prog, x, x0, want, repeat)
    return right, us, pass_figures(prog, per, copy_us, x0.numel() * x0.element_size(), label)


def write_rows(path: Path | None, rows: list[dict]) -> None:
    """The rows as JSON at `path`, where one was given."""
    if path:
        path.write_text(json.dumps(rows, indent=1))


def run_passes(torch: Any, prog: Any, x: Any, x0: Any, want: Any, repeat: int):
    """`prog` run on x (a copy of x0 each time): whether it leaves `want`, then the median of
    `repeat` calls' times and of each pass's (us), CUDA events between the passes of one call
    queued behind a sleep kernel."""
    from autotranspose.calls import inplace
    from autotranspose.calls.common import call_target
    from autotranspose.runtime.arrays import view

    xv = view(x)
    _, ctx, handle = call_target(xv, None)
    x.copy_(x0)
    inplace.run(prog, xv.ptr, ctx, handle)
    right = torch.equal(x.view(want.shape), want)
    per: list[list[float]] = [[] for _ in prog.steps]
    whole = []
    for _ in range(repeat):
        x.copy_(x0)
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(prog.steps) + 1)]
        torch.cuda._sleep(SLEEP)
        inplace.run(prog, xv.ptr, ctx, handle, lambda k, ev=events: ev[k].record())
        events[-1].synchronize()
        for k in range(len(prog.steps)):
            per[k].append(events[k].elapsed_time(events[k + 1]) * 1e3)
        whole.append(events[0].elapsed_time(events[-1]) * 1e3)
    return right, statistics.median(whole), [statistics.median(t) for t in per]


def main() -> None:
    import torch

    import autotranspose as at
    from autotranspose.dispatch import inplace as programs
    from autotranspose.kernels import inplace as kernels

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=CASES, metavar="SHAPE:DTYPE")
    p.add_argument("--variants", nargs="+", default=[v[0] for v in VARIANTS])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", type=Path)
    p.add_argument(
        "--profile",
        nargs=4,
        metavar=("M", "N", "DTYPE", "STAGE_MIB"),
        help="instead: one in-place call of M x N, bands of STAGE_MIB, between "
        "cudaProfilerStart and Stop (run under ncu --profile-from-start off)",
    )
    args = p.parse_args()
    if args.profile:
        _profile(torch, at, kernels, *args.profile)
        return
    rows = []
    for text in args.cases:
        x0, x, want, copy_us, oop_us, state, xv = matrix(torch, text, args.repeat)
        nbytes = x0.numel() * x0.element_size()
        for name, frm, stage in VARIANTS:
            if name not in args.variants:
                continue
            kernels.STAGED_MIN_ROWS, kernels.STAGE_BYTES = frm, stage
            at.clear_caches()
            # the whole call as a user makes it: the second call of a signature runs its
            # launches as one program (calls/inplace.py's fast path)
            x.copy_(x0)
            at.transpose_(x)
            fast_us = _timed(
                torch, lambda x=x: at.transpose_(x), args.repeat, lambda x=x, x0=x0: x.copy_(x0)
            )
            prog = programs.program(state, xv.batch, xv.m, xv.n, xv.et.size)
            right, us, per = run_passes(torch, prog, x, x0, want, args.repeat)
            passes = pass_figures(
                prog,
                per,
                copy_us,
                nbytes,
                lambda how: f"/{how.rows}b" if how.aux == "bands" else "",
            )
            fast = f"(fast path {fast_us:8.1f} us, {100 * copy_us / fast_us:5.1f}% of copy) "
            rows.append(
                report(text, name, right, us, copy_us, oop_us, passes, fast, fast_us=fast_us)
            )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


def _profile(torch: Any, at: Any, kernels: Any, m: str, n: str, dtype: str, mib: str) -> None:
    """One call of transpose_() on a warm signature, alone between the profiler's start and
    stop; checked against PyTorch after."""
    kernels.STAGE_BYTES = int(mib) << 20
    x0 = torch.randn(int(m), int(n), device="cuda").to(getattr(torch, dtype))
    x = x0.clone()
    at.transpose_(x)  # compiles, uploads the tables; the next call runs the fast path
    x.copy_(x0)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    at.transpose_(x)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print("right:", torch.equal(x.view(int(n), int(m)), x0.t().contiguous()))


if __name__ == "__main__":
    main()

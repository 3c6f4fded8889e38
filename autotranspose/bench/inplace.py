"""`autotranspose bench --inplace N`: N random in-place transposes (seeded: square, odd, prime,
gcd > 1, skinny and batched shapes of 1- to 16-byte elements, 8 to 256 MB), each checked bit
for bit against PyTorch's out-of-place transpose, then timed against transpose() into a
preallocated output and a device-to-device copy of the same bytes (read plus written), with
each pass timed on its own against a copy of the bytes that pass moves. Needs PyTorch on a
CUDA GPU (the arrays and events are PyTorch's; the kernels run on its current stream).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .reports import write_reports

SIZES = (1, 2, 4, 8, 16)
_TORCH_TYPES = {1: "uint8", 2: "int16", 4: "int32", 8: "int64", 16: "complex128"}
MIN_BYTES, MAX_BYTES = 8 << 20, 256 << 20
SHAPE_KINDS = ("square", "odd", "prime", "gcd", "skinny", "batched")
_PRIMES = (2039, 3001, 4093, 5003, 6007, 7919, 8191, 10007, 12289, 16381)


@dataclass(frozen=True)
class InplaceCase:
    kind: str
    shape: tuple[int, ...]
    elem_bytes: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.elem_bytes


@dataclass(frozen=True)
class InplaceRow:
    case: InplaceCase
    us: float  # transpose_()
    of_copy: float  # its GB/s (2 x bytes) against a copy of the same bytes
    out_of_place_of_copy: float  # transpose() into a preallocated out
    passes: list[dict[str, Any]] = field(default_factory=list)  # kind, us, MB, % of copy
    note: str = ""


def inplace_cases(count: int, seed: int) -> list[InplaceCase]:
    """`count` random cases: a shape kind, an element size, 8 to 256 MB."""
    rng = np.random.default_rng(seed)
    cases = []
    while len(cases) < count:
        kind = SHAPE_KINDS[int(rng.integers(len(SHAPE_KINDS)))]
        e = int(rng.choice(SIZES))
        elems = int(np.exp(rng.uniform(np.log(MIN_BYTES), np.log(MAX_BYTES)))) // e
        side = max(2, int(math.sqrt(elems)))
        if kind == "square":
            shape: tuple[int, ...] = (side // 32 * 32 or 32,) * 2
        elif kind == "odd":
            m = int(rng.integers(side // 2, side * 2)) | 1
            shape = (m, max(3, elems // m) | 1)
        elif kind == "prime":
            m = int(rng.choice(_PRIMES))
            shape = (m, max(2, elems // m))
            shape = (shape[0], min(_PRIMES, key=lambda p: abs(p - shape[1])))
        elif kind == "gcd":
            g = int(rng.choice([6, 12, 60, 96, 120]))
            a, b = (int(v) for v in rng.integers(max(2, side // g // 3), max(3, side // g * 2), 2))
            shape = (a * g, b * g)
        elif kind == "skinny":
            short = int(rng.integers(2, 33))
            shape = (short, max(2, elems // short))
        else:
            batch = int(rng.integers(2, 17))
            m = int(rng.integers(16, max(17, int(math.sqrt(elems / batch)) * 2)))
            shape = (batch, m, max(2, elems // batch // m))
        if rng.random() < 0.5 and len(shape) == 2:
            shape = shape[::-1]
        case = InplaceCase(kind, shape, e)
        if MIN_BYTES // 2 <= case.nbytes <= MAX_BYTES * 2:
            cases.append(case)
    return cases


def _random(torch: Any, case: InplaceCase) -> Any:
    raw = torch.randint(0, 256, (case.nbytes,), dtype=torch.uint8, device="cuda")
    return raw.view(getattr(torch, _TORCH_TYPES[case.elem_bytes])).view(case.shape)


def _median_us(torch: Any, fn: Any, repeats: int, reset: Any = None) -> float:
    """Median microseconds of `fn` between two events, `reset` (untimed) before each."""
    times = []
    for _ in range(repeats + 1):
        if reset is not None:
            reset()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times[1:])  # the first call compiles, plans and uploads


def bench_inplace_case(torch: Any, case: InplaceCase, repeats: int) -> InplaceRow:
    import autotranspose as at
    from autotranspose.calls import inplace
    from autotranspose.calls.common import call_target
    from autotranspose.dispatch import inplace as programs
    from autotranspose.runtime.arrays import view

    x0 = _random(torch, case)
    want = x0.transpose(-1, -2).contiguous()
    x = x0.clone()
    got = at.transpose_(x)
    note = "" if torch.equal(got.view(torch.uint8), want.view(torch.uint8)) else "WRONG OUTPUT"

    def reset() -> None:
        x.copy_(x0)

    ours = _median_us(torch, lambda: at.transpose_(x), repeats, reset)
    flat = x0.view(torch.uint8).view(-1)
    other = torch.empty_like(flat)
    copy_us = _median_us(torch, lambda: other.copy_(flat), repeats)
    out = torch.empty_like(want)
    oop = _median_us(torch, lambda: at.transpose(x0, out), repeats)

    # each pass timed on its own: events recorded between the passes of one call
    xv = view(x)
    state, ctx, handle = call_target(xv, None)
    prog = programs.program(state, xv.batch, xv.m, xv.n, xv.et.size)
    per: list[list[float]] = [[] for _ in prog.steps]
    for _ in range(repeats):
        reset()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(prog.steps) + 1)]
        inplace.run(prog, xv.ptr, ctx, handle, lambda k, ev=events: ev[k].record())
        events[-1].synchronize()
        for k in range(len(prog.steps)):
            per[k].append(events[k].elapsed_time(events[k + 1]) * 1e3)
    copy_bps = 2 * case.nbytes / (copy_us * 1e-6)
    passes = []
    for step, times in zip(prog.steps, per, strict=True):
        us = statistics.median(times)
        moved = step.how.moved_bytes
        passes.append(
            {
                "kind": step.how.spec.piece,
                "us": us,
                "MB": moved / 1e6,
                "of_copy": (moved / (us * 1e-6)) / copy_bps if us else 0.0,
            }
        )
    return InplaceRow(case, ours, copy_us / ours, copy_us / oop, passes, note)


def run_inplace(args: Any) -> int:
    """The `bench --inplace N` command: a line per case as it finishes, then Markdown and
    JSON. Exit status 1 if any case's output was wrong."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("bench --inplace needs PyTorch with a CUDA GPU")
    torch.cuda.set_device(args.device)
    repeats = getattr(args, "repeat", None) or 5
    cases = inplace_cases(args.inplace, args.seed)
    name = torch.cuda.get_device_name(args.device)
    print(f"{len(cases)} random in-place transposes, seed {args.seed}, {name}", flush=True)
    rows = []
    for case in cases:
        row = bench_inplace_case(torch, case, repeats)
        rows.append(row)
        print(_line(row), flush=True)
    table = markdown(rows, name)
    write_reports(args, table, rows)
    return 1 if any(r.note for r in rows) else 0


def _describe(case: InplaceCase) -> str:
    return f"{'x'.join(map(str, case.shape))} {case.elem_bytes}B {case.kind}"


def _passes(row: InplaceRow) -> str:
    return " ".join(f"{p['kind']}:{100 * p['of_copy']:.0f}%" for p in row.passes)


def _line(row: InplaceRow) -> str:
    return (
        f"{_describe(row.case):36s} {row.case.nbytes / 1e6:8.1f} MB  in place "
        f"{100 * row.of_copy:5.1f}% of copy  out of place {100 * row.out_of_place_of_copy:5.1f}%"
        f"  passes {_passes(row)}{' ' + row.note if row.note else ''}"
    )


def markdown(rows: list[InplaceRow], device: str) -> str:
    """One line per case: MB, transpose_() and transpose() as % of a copy of the same bytes,
    and each pass as % of a copy of the bytes it moves."""
    lines = [
        f"In-place transposes on {device}: % of a device-to-device copy of the same bytes "
        "(each pass: of the bytes it moves)",
        "",
        "| case | MB | transpose_() us | transpose_() | transpose() | passes |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {_describe(r.case)} | {r.case.nbytes / 1e6:.0f} | {r.us:.0f} | "
            f"{100 * r.of_copy:.1f}% | {100 * r.out_of_place_of_copy:.1f}% | {_passes(r)}"
            f"{' ' + r.note if r.note else ''} |"
        )
    if rows:
        lines += [
            "",
            f"transpose_(): median {100 * statistics.median(r.of_copy for r in rows):.1f}% of "
            f"copy, lowest {100 * min(r.of_copy for r in rows):.1f}%",
        ]
    return "\n".join(lines)

"""`autotranspose bench --inplace N`: N random in-place transposes (seeded: square, odd, prime,
gcd > 1, skinny and batched shapes of 1- to 16-byte elements, 8 to 256 MB), each checked bit
for bit against PyTorch's out-of-place transpose, then timed against transpose() into a
preallocated output and a device-to-device copy of the same bytes (read plus written), with
each pass timed on its own against a copy of the bytes that pass moves, and the unfused
passes (REVERSE, SPLIT, PERMUTE: `fused=False`) timed the same way beside them. Every time is
the device's: a sleep kernel queued before the start event keeps the GPU busy while the host
queues the call (the call's own host time, without the sleep, is `call_us`). With
`--inplace-peer DIR` (a checkout of bryancatanzaro/inplace, built here for this GPU:
`inplace_peer`), its in-place transpose of the same matrices (4- and 8-byte elements, one
matrix a call) is checked and timed beside ours. Needs PyTorch on a CUDA GPU (the arrays and
events are PyTorch's; the kernels run on its current stream).
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
    call_us: float = 0.0  # transpose_() with the host's time in it (no sleep before)
    unfused_us: float = 0.0  # the unfused passes, run as one program
    unfused: list[dict[str, Any]] = field(default_factory=list)
    peer_of_copy: float | None = None  # bryancatanzaro/inplace (None: not run, or n/a)
    peer_note: str = ""  # "n/a" (a case it does not take), "wrong output", or its error


def inplace_cases(count: int, seed: int) -> list[InplaceCase]:
    """`count` random cases: a shape kind, an element size, 8 to 256 MB. Squares' sides are a
    multiple of 32 half the time and anything the other half (rows that are not whole 16-byte
    words go another way)."""
    rng = np.random.default_rng(seed)
    cases = []
    while len(cases) < count:
        kind = SHAPE_KINDS[int(rng.integers(len(SHAPE_KINDS)))]
        e = int(rng.choice(SIZES))
        elems = int(np.exp(rng.uniform(np.log(MIN_BYTES), np.log(MAX_BYTES)))) // e
        side = max(2, int(math.sqrt(elems)))
        if kind == "square":  # half of sides a multiple of 32, half any (odd sides, 197)
            aligned = rng.random() < 0.5
            shape: tuple[int, ...] = ((side // 32 * 32 or 32) if aligned else side,) * 2
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


# GPU cycles of the sleep queued before a timed call (about half a millisecond): the host
# queues the call meanwhile, so the events time the device's work alone
BUSY_CYCLES = 1_000_000


def _median_us(torch: Any, fn: Any, repeats: int, reset: Any = None, busy: bool = True) -> float:
    """Median microseconds of `fn` between two events, `reset` (untimed) before each; with
    `busy`, the start event queued behind a sleep kernel (the device's time only)."""
    times = []
    for _ in range(repeats + 1):
        if reset is not None:
            reset()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if busy:
            torch.cuda._sleep(BUSY_CYCLES)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times[1:])  # the first call compiles, plans and uploads


def bench_inplace_case(torch: Any, case: InplaceCase, repeats: int, peer: Any = None) -> InplaceRow:
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
    call = _median_us(torch, lambda: at.transpose_(x), repeats, reset, busy=False)
    flat = x0.view(torch.uint8).view(-1)
    other = torch.empty_like(flat)
    copy_us = _median_us(torch, lambda: other.copy_(flat), repeats)
    out = torch.empty_like(want)
    oop = _median_us(torch, lambda: at.transpose(x0, out), repeats)
    copy_bps = 2 * case.nbytes / (copy_us * 1e-6)

    xv = view(x)
    state, ctx, handle = call_target(xv, None)
    timed = []
    for fused in (True, False):
        prog = programs.program(state, xv.batch, xv.m, xv.n, xv.et.size, fused=fused)
        x.copy_(x0)
        inplace.run(prog, xv.ptr, ctx, handle)
        right = torch.equal(x.view(torch.uint8).reshape(-1), want.view(torch.uint8).reshape(-1))
        note += "" if right else f" WRONG OUTPUT ({'fused' if fused else 'unfused'} program)"
        whole = _median_us(
            torch, lambda p=prog: inplace.run(p, xv.ptr, ctx, handle), repeats, reset
        )
        timed.append(
            (whole, _pass_times(torch, prog, xv.ptr, ctx, handle, repeats, reset, copy_bps))
        )
    (_, passes), (unfused_us, unfused) = timed
    peer_of_copy, peer_note = (
        _peer(torch, peer, case, x0, want, repeats, copy_us) if peer is not None else (None, "")
    )
    return InplaceRow(
        case, ours, copy_us / ours, copy_us / oop, passes, note.strip(), call, unfused_us,
        unfused, peer_of_copy, peer_note,
    )  # fmt: skip


def _peer(
    torch: Any, peer: Any, case: InplaceCase, x0: Any, want: Any, repeats: int, copy_us: float
) -> tuple[float | None, str]:
    """The peer's in-place transpose of x0's matrix, checked bit for bit against `want`, then
    timed as ours is (its own scratch allocation in every call, as its users get it):
    (% of copy, "") or (None, why not)."""
    from .inplace_peer import SIZES

    if case.elem_bytes not in SIZES or len(case.shape) != 2:
        return None, "n/a"
    m, n = case.shape
    xp = x0.clone()

    def run() -> None:
        peer.transpose(xp.data_ptr(), m, n, case.elem_bytes)

    try:
        run()
        torch.cuda.synchronize()
    except RuntimeError as exc:
        return None, str(exc)
    if not torch.equal(xp.view(torch.uint8).reshape(-1), want.view(torch.uint8).reshape(-1)):
        return None, "wrong output"
    us = _median_us(torch, run, repeats, lambda: xp.copy_(x0))
    return copy_us / us, ""


def _pass_times(
    torch: Any, prog: Any, ptr: int, ctx: int, handle: int, repeats: int, reset: Any, bps: float
) -> list[dict[str, Any]]:
    """Each pass of `prog` timed on its own (events recorded between the passes of one run,
    behind a sleep), against a copy at `bps` of the bytes it moves."""
    from autotranspose.calls import inplace

    per: list[list[float]] = [[] for _ in prog.steps]
    for _ in range(repeats):
        reset()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(prog.steps) + 1)]
        torch.cuda._sleep(BUSY_CYCLES)
        inplace.run(prog, ptr, ctx, handle, lambda k, ev=events: ev[k].record())
        events[-1].synchronize()
        for k in range(len(prog.steps)):
            per[k].append(events[k].elapsed_time(events[k + 1]) * 1e3)
    passes = []
    for step, times in zip(prog.steps, per, strict=True):
        us = statistics.median(times)
        moved = step.how.moved_bytes
        passes.append(
            {
                "kind": step.how.spec.piece,
                "us": us,
                "MB": moved / 1e6,
                "of_copy": (moved / (us * 1e-6)) / bps if us else 0.0,
            }
        )
    return passes


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
    peer = _load_peer(torch, args)
    rows = []
    for case in cases:
        row = bench_inplace_case(torch, case, repeats, peer)
        rows.append(row)
        print(_line(row), flush=True)
    table = markdown(rows, name)
    write_reports(args, table, rows)
    return 1 if any(r.note for r in rows) else 0


def _load_peer(torch: Any, args: Any) -> Any:
    """bryancatanzaro/inplace built for this GPU from `--inplace-peer DIR`, or None."""
    source = getattr(args, "inplace_peer", None)
    if not source:
        return None
    from autotranspose.runtime.native import cache_dir

    from .inplace_peer import Peer, PeerBuildError, build

    major, minor = torch.cuda.get_device_capability(args.device)
    try:
        lib = build(source, f"sm_{major}{minor}", cache_dir() / "peers")
    except PeerBuildError as exc:
        raise SystemExit(f"--inplace-peer: {exc}") from None
    print(f"peer: bryancatanzaro/inplace from {source} ({lib})", flush=True)
    return Peer(lib)


def _peer_cell(row: InplaceRow) -> str:
    if row.peer_of_copy is not None:
        return f"{100 * row.peer_of_copy:.1f}%"
    return row.peer_note or "-"


def _describe(case: InplaceCase) -> str:
    return f"{'x'.join(map(str, case.shape))} {case.elem_bytes}B {case.kind}"


def _passes(passes: list[dict[str, Any]]) -> str:
    return " ".join(f"{p['kind']}:{100 * p['of_copy']:.0f}%" for p in passes)


def _of_oop(row: InplaceRow) -> float:
    """transpose_()'s speed against transpose()'s."""
    return row.of_copy / row.out_of_place_of_copy if row.out_of_place_of_copy else 0.0


def _line(row: InplaceRow) -> str:
    copy_us = row.us * row.of_copy
    return (
        f"{_describe(row.case):36s} {row.case.nbytes / 1e6:8.1f} MB  in place "
        f"{100 * row.of_copy:5.1f}% of copy ({row.us:.0f} us, call {row.call_us:.0f} us; "
        f"unfused {100 * copy_us / row.unfused_us if row.unfused_us else 0:.1f}%)  out of place "
        f"{100 * row.out_of_place_of_copy:5.1f}%  in place / out of place {100 * _of_oop(row):.0f}%"
        f"  passes {_passes(row.passes)}  unfused {_passes(row.unfused)}"
        f"{'  peer ' + _peer_cell(row) if row.peer_of_copy is not None or row.peer_note else ''}"
        f"{' ' + row.note if row.note else ''}"
    )


def markdown(rows: list[InplaceRow], device: str) -> str:
    """One line per case: MB, transpose_() and transpose() as % of a copy of the same bytes
    (device time), transpose_() against transpose(), the unfused passes' program, and each
    pass as % of a copy of the bytes it moves."""
    peer = any(r.peer_of_copy is not None or r.peer_note for r in rows)
    lines = [
        f"In-place transposes on {device}: % of a device-to-device copy of the same bytes, "
        "device time (each pass: of the bytes it moves)"
        + ("; peer: bryancatanzaro/inplace, its float and double transposes" if peer else ""),
        "",
        "| case | MB | transpose_() us | call us | transpose_() | transpose() | in/out of place "
        "| unfused | passes | unfused passes |" + (" peer |" if peer else ""),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        + (" --- |" if peer else ""),
    ]
    for r in rows:
        copy_us = r.us * r.of_copy
        unfused = copy_us / r.unfused_us if r.unfused_us else 0.0
        lines.append(
            f"| {_describe(r.case)} | {r.case.nbytes / 1e6:.0f} | {r.us:.0f} | {r.call_us:.0f} | "
            f"{100 * r.of_copy:.1f}% | {100 * r.out_of_place_of_copy:.1f}% | "
            f"{100 * _of_oop(r):.0f}% | {100 * unfused:.1f}% | {_passes(r.passes)} | "
            f"{_passes(r.unfused)}{' ' + r.note if r.note else ''} |"
            + (f" {_peer_cell(r)} |" if peer else "")
        )
    if rows:
        rect = [r for r in rows if r.case.kind != "square"]
        square = [r for r in rows if r.case.kind == "square"]
        lines += [
            "",
            f"transpose_(): median {100 * statistics.median(r.of_copy for r in rows):.1f}% of "
            f"copy, lowest {100 * min(r.of_copy for r in rows):.1f}%",
        ]
        if rect:
            lines.append(
                f"rectangular: median {100 * statistics.median(_of_oop(r) for r in rect):.0f}% "
                f"of transpose()'s speed, lowest {100 * min(_of_oop(r) for r in rect):.0f}%"
            )
        if square:
            lines.append(f"square: lowest {100 * min(r.of_copy for r in square):.1f}% of copy")
        both = [r for r in rows if r.peer_of_copy]
        if both:
            ratio = statistics.median(r.of_copy / r.peer_of_copy for r in both)
            lines.append(
                f"against bryancatanzaro/inplace on its {len(both)} cases: median "
                f"{ratio:.2f}x its speed (it: median "
                f"{100 * statistics.median(r.peer_of_copy for r in both):.1f}% of copy)"
            )
    return "\n".join(lines)

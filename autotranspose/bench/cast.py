"""`autotranspose bench --cast N`: N random cast-transposes (seeded: float32 or bfloat16 in,
float8 e4m3 or e5m2 or bfloat16 out, aligned and odd sides, 32 MB or more, with and without
the same-order output), each checked bit for bit and for its amax, then timed against a
device-to-device copy of the same bytes (read plus written), `torch.compile` of the same
computation and eager PyTorch. Needs PyTorch on a CUDA GPU.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .reports import write_reports

# (input, output) pairs drawn, and the sides: powers of two and their multiples, and odd ones
PAIRS = (
    ("bfloat16", "float8_e4m3fn"),
    ("bfloat16", "float8_e5m2"),
    ("float32", "float8_e4m3fn"),
    ("float32", "float8_e5m2"),
    ("float32", "bfloat16"),
)
ALIGNED_SIDES = (1024, 2048, 3072, 4096, 5120, 6144, 8192, 12288, 16384)
MIN_BYTES, MAX_BYTES = 32 << 20, 512 << 20  # the input's size
PEERS = ("autotranspose", "torch.compile", "eager")


@dataclass(frozen=True)
class CastCase:
    shape: tuple[int, int]
    src: str
    dst: str
    both: bool


@dataclass(frozen=True)
class CastRow:
    case: CastCase
    peer: str
    us: float | None
    gbps: float | None  # bytes read + written per second
    of_copy: float | None
    note: str = ""
    # the pattern's row (`--ceiling`): sector bytes read and written per byte of the call
    read_per_byte: float | None = None
    written_per_byte: float | None = None


PATTERN = "pattern"  # the peer name of a case's pattern ceiling (`bench.ceiling`)


def cast_cases(count: int, seed: int) -> list[CastCase]:
    """`count` random cases: a pair, two sides (each aligned or odd), with or without the
    same-order output; inputs of 32 to 512 MB."""
    rng = np.random.default_rng(seed)
    cases = []
    while len(cases) < count:
        src, dst = PAIRS[int(rng.integers(len(PAIRS)))]
        size = 4 if src == "float32" else 2
        elems = int(np.exp(rng.uniform(np.log(MIN_BYTES), np.log(MAX_BYTES)))) // size
        if rng.random() < 0.5:
            m = int(rng.choice(ALIGNED_SIDES))
        else:
            m = int(rng.integers(257, 20000)) | 1
        n = max(1, elems // m)
        if rng.random() < 0.5:
            n |= 1  # odd
        else:
            n = max(16, n // 16 * 16)
        if m * n * size < MIN_BYTES:
            continue
        shape = (m, n) if rng.random() < 0.5 else (n, m)
        cases.append(CastCase(shape, src, dst, bool(rng.random() < 0.4)))
    return cases


def _traffic(case: CastCase) -> int:
    m, n = case.shape
    src = 4 if case.src == "float32" else 2
    dst = 1 if case.dst.startswith("float8") else 2
    return m * n * (src + dst * (2 if case.both else 1))


# cycles of `torch.cuda._sleep` a second, at least (no GPU here clocks its SMs faster): a
# sleep of twice the host's seconds at this rate outlasts the host's queueing
_SLEEP_CYCLES_PER_S = 2.5e9


def _time(torch: Any, fn: Any, repeats: int) -> float:
    """Median seconds of one call, timed with CUDA events over several calls a repeat, each
    repeat queued behind a sleep of the GPU twice as long as the host took to queue one
    (`tuner.measure.time_rotating`: the GPU's time alone, whatever the host's share)."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls = 20
    torch.cuda._sleep(int(20e-3 * _SLEEP_CYCLES_PER_S))
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host_s = time.perf_counter() - t0
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        torch.cuda._sleep(int(min(2 * host_s + 20e-6, 50e-3) * _SLEEP_CYCLES_PER_S))
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return statistics.median(times)


def _same(torch: Any, got: Any, want: Any) -> bool:
    bits = torch.uint8 if got.element_size() == 1 else torch.int16
    nan = torch.isnan(got.float()) & torch.isnan(want.float())
    return bool(((got.contiguous().view(bits) == want.contiguous().view(bits)) | nan).all())


def bench_cast_case(
    torch: Any, case: CastCase, repeats: int, ceiling: bool = False
) -> list[CastRow]:
    """Check ours against eager PyTorch, then time ours, torch.compile and eager against
    the copy of the same bytes; with `ceiling`, the served launches' pattern too."""
    import autotranspose as at

    dt = getattr(torch, case.dst)
    fmax = float(torch.finfo(dt).max)
    x = torch.randn(case.shape, device="cuda").mul_(300).to(getattr(torch, case.src))
    x.view(-1)[::9973] = float("inf")  # saturation on every call
    s = torch.tensor([0.75], device="cuda")
    amax = torch.zeros(1, device="cuda")

    def eager(x: Any, s: Any) -> Any:
        c = torch.clamp(x.float() * s, -fmax, fmax).to(dt)
        t = c.t().contiguous()
        a = torch.amax(x.abs()).float()
        return (c, t, a) if case.both else (t, a)

    def ours() -> Any:
        return at.cast_transpose(x, dt, scale=s, amax=amax, both=case.both)

    # every case's `eager` shares one code object: past dynamo's recompile limit a
    # fullgraph compile fails (and without fullgraph would run eagerly without a word), so
    # its caches start over for each case, compiled for this case's static shapes
    torch._dynamo.reset()
    compiled = torch.compile(eager, fullgraph=True, dynamic=False)
    want = eager(x, s)
    got = ours()
    got = got if case.both else (got,)
    note = ""
    if not all(_same(torch, g, w) for g, w in zip(got, want[:-1], strict=True)):
        note = "WRONG OUTPUT"
    elif not torch.equal(amax, want[-1].reshape(1)):
        note = "WRONG AMAX"
    compiled_out = compiled(x, s)
    compiled_note = (
        ""
        if all(_same(torch, g, w) for g, w in zip(compiled_out[:-1], want[:-1], strict=True))
        else "WRONG OUTPUT"
    )
    traffic = _traffic(case)
    half = torch.empty(traffic // 2, dtype=torch.uint8, device="cuda")
    other = torch.empty_like(half)
    copy_s = _time(torch, lambda: other.copy_(half), repeats)
    copy_gbps = traffic / copy_s / 1e9
    rows = []
    for peer, fn, peer_note in (
        ("autotranspose", ours, note),
        ("torch.compile", lambda: compiled(x, s), compiled_note),
        ("eager", lambda: eager(x, s), ""),
    ):
        secs = _time(torch, fn, repeats)
        gbps = traffic / secs / 1e9
        rows.append(CastRow(case, peer, secs * 1e6, gbps, gbps / copy_gbps, peer_note))
    if ceiling:
        try:
            rows.append(_pattern_row(torch, case, x, repeats, copy_gbps))
        except Exception as exc:  # a note, not a crashed run
            note = f"no pattern: {type(exc).__name__}: {exc}"[:200]
            rows.append(CastRow(case, PATTERN, None, None, None, note))
    return rows


def _pattern_row(torch: Any, case: CastCase, x: Any, repeats: int, copy_gbps: float) -> CastRow:
    """The served launches' pattern (`bench.ceiling.cast_ceiling`) on outputs of the case's
    shapes, timed as the peers are: the config is what the call just ran (a first call's
    winner is lookup's choice from then on)."""
    from ..calls.cast import contiguous_plan
    from ..dispatch.cast import choose_config
    from ..kinds.cast import FORMATS
    from ..runtime.compiler import activate
    from .ceiling import cast_ceiling

    state = activate(torch.cuda.current_device())
    src, dst = FORMATS[case.src], FORMATS[case.dst]
    m, n = case.shape
    y = torch.empty((n, m), dtype=getattr(torch, case.dst), device="cuda")
    z = torch.empty((m, n), dtype=y.dtype, device="cuda") if case.both else None
    plan = contiguous_plan(case.shape, (1, 0), case.both)
    aligned = all(
        not lc.transpose or ((y.data_ptr() + lc.o0 * dst.size) | lc.ld_o * dst.size | lc.bs_o * dst.size) % 16 == 0
        for lc in plan.launches
    )  # fmt: skip
    cfg, _ = choose_config(state, plan, src, dst, x.data_ptr(), case.both, aligned)
    zp = z.data_ptr() if z is not None else 0
    found = cast_ceiling(state, cfg, plan, x.data_ptr(), y.data_ptr(), zp)
    t = found.traffic
    per = (t.read_per_byte, t.written_per_byte) if t is not None else (None, None)
    if found.run is None:
        return CastRow(case, PATTERN, None, None, None, found.note, *per)
    try:
        secs = _time(torch, found.run, repeats)
    except Exception as exc:  # a note, not a crashed run
        return CastRow(case, PATTERN, None, None, None, f"{type(exc).__name__}: {exc}"[:200], *per)
    gbps = _traffic(case) / secs / 1e9
    note = f"{cfg.key}" + (f"; {found.note}" if found.note else "")
    return CastRow(case, PATTERN, secs * 1e6, gbps, gbps / copy_gbps, note, *per)


def run_cast(args: Any) -> int:
    """The `bench --cast N` command: a table as cases finish, then Markdown and JSON."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("bench --cast needs PyTorch with a CUDA GPU")
    torch.cuda.set_device(args.device)
    repeats = getattr(args, "repeat", None) or 7
    ceiling = bool(getattr(args, "ceiling", False))
    cases = cast_cases(args.cast, args.seed)
    name = torch.cuda.get_device_name(args.device)
    print(f"{len(cases)} random cast-transposes, seed {args.seed}, {name}", flush=True)
    rows: list[CastRow] = []
    for case in cases:
        found = bench_cast_case(torch, case, repeats, ceiling)
        rows += found
        print(_line(case, found), flush=True)
    table = markdown(rows, name)
    write_reports(args, table, rows)
    return 1 if any(r.note and r.peer != PATTERN for r in rows) else 0


def _describe(case: CastCase) -> str:
    src = {"float32": "f32", "bfloat16": "bf16"}[case.src]
    dst = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2", "bfloat16": "bf16"}[case.dst]
    return f"{case.shape[0]}x{case.shape[1]} {src}->{dst}{' both' if case.both else ''}"


def _line(case: CastCase, rows: list[CastRow]) -> str:
    cells = [
        f"{r.peer} {100 * (r.of_copy or 0):.1f}%{' ' + r.note if r.note else ''}"
        for r in rows
        if r.peer != PATTERN
    ]
    cells += [
        f"pattern {100 * (r.of_copy or 0):.1f}% (sectors/byte read {r.read_per_byte or 0:.3f} "
        f"written {r.written_per_byte or 0:.3f})"
        for r in rows
        if r.peer == PATTERN
    ]
    return f"{_describe(case):36s} {_traffic(case) / 1e6:8.1f} MB  " + "  ".join(cells)


def _ceiling_cells(peers: dict[str, CastRow]) -> list[str]:
    """pattern % copy, ours % pattern, and the pattern's sectors per byte read and written."""
    ours, pat = peers.get("autotranspose"), peers.get(PATTERN)
    o = ours.of_copy if ours is not None else None
    p = pat.of_copy if pat is not None else None
    per = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    return [
        "-" if p is None else f"{100 * p:.1f}",
        "-" if o is None or p is None else f"{100 * o / p:.1f}",
        per(pat.read_per_byte if pat is not None else None),
        per(pat.written_per_byte if pat is not None else None),
    ]


def markdown(rows: list[CastRow], device: str) -> str:
    """One line per case: MB moved, and each peer's GB/s with its % of copy."""
    by_case: dict[CastCase, dict[str, CastRow]] = {}
    for r in rows:
        by_case.setdefault(r.case, {})[r.peer] = r
    ceiling = any(r.peer == PATTERN for r in rows)  # `--ceiling`: its columns last
    extra = " | pattern % copy | ours % pattern | read sectors/B | written sectors/B |"
    head = (
        f"Cast-transposes on {device}: GB/s of bytes read + written (% of a device-to-device "
        "copy of the same bytes)\n\n| case | MB | "
        + " | ".join(PEERS)
        + " | ours / compile |"
        + (extra[2:] if ceiling else "")
    )
    lines = [head, "|" + " --- |" * (len(PEERS) + 3 + (4 if ceiling else 0))]
    ratios = []
    for case, peers in by_case.items():
        cells = []
        for p in PEERS:
            r = peers.get(p)
            cell = "-" if r is None or r.gbps is None else f"{r.gbps:.0f} ({100 * r.of_copy:.1f}%)"
            cells.append(cell + (f" {r.note}" if r is not None and r.note else ""))
        ours, comp = peers.get("autotranspose"), peers.get("torch.compile")
        ratio = ours.gbps / comp.gbps if ours and comp and ours.gbps and comp.gbps else None
        if ratio:
            ratios.append(ratio)
        lines.append(
            f"| {_describe(case)} | {_traffic(case) / 1e6:.0f} | "
            + " | ".join(cells)
            + f" | {f'{ratio:.2f}x' if ratio else '-'} |"
            + (" " + " | ".join(_ceiling_cells(peers)) + " |" if ceiling else "")
        )
    ofc = [r.of_copy for r in rows if r.peer == "autotranspose" and r.of_copy]
    if ofc:
        lines.append("")
        lines.append(
            f"autotranspose: median {100 * statistics.median(ofc):.1f}% of copy, lowest "
            f"{100 * min(ofc):.1f}%; against torch.compile median "
            f"{statistics.median(ratios):.2f}x, lowest {min(ratios):.2f}x"
            if ratios
            else ""
        )
    ceil = [
        (c["autotranspose"].of_copy, c[PATTERN].of_copy)
        for c in by_case.values()
        if "autotranspose" in c
        and PATTERN in c
        and c["autotranspose"].of_copy
        and c[PATTERN].of_copy
    ]
    if ceil:
        of_pattern = [o / p for o, p in ceil]
        lines.append(
            f"the access pattern alone: median {100 * statistics.median(p for _, p in ceil):.1f}% "
            f"of copy; autotranspose median {100 * statistics.median(of_pattern):.1f}% of the "
            f"pattern, lowest {100 * min(of_pattern):.1f}%"
        )
    return "\n".join(lines)

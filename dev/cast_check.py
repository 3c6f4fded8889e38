"""Time the cast-transpose kernels on the GPU: each pair's default config and the variants
proposed beside it, on the shapes of the bench's cast mix, after checking each result bit for
bit against PyTorch (`torch.clamp(x.float() * s, -max, max).to(dtype)`, amax included).

    python3 dev/cast_check.py [--reps 20] [--only f32_e4m3,bf16_e4m3]
        [--cases bf16_e4m3:8192x8192:both,f32_e4m3:4099x6007:both:zpad] [--variants default,b0]

Run it under another checkout's PYTHONPATH (e.g. `git archive REV autotranspose templates`
unpacked) for that version's kernels and defaults: old and new, each against its own copy.

Speed is bytes read + written per second as a percentage of a device-to-device copy of the
same total bytes, timed with CUDA events over `--reps` calls, the casts captured in a CUDA graph
(the host's cost of a call left out), the copy launched (in a graph it is a slower memcpy node),
L2-cold: each call reads and writes its own buffers out
of enough rotating sets (at least two) to exceed the L2. Run it on
the current checkout (PYTHONPATH=. where another copy is installed); one table is printed.
"""

from __future__ import annotations

import argparse

import torch

from autotranspose.calls.cast import cast_transpose
from autotranspose.errors import ConfigError
from autotranspose.kernels.config import KernelConfig
from autotranspose.kinds import cast

# (input, output, M, N, both): the bench's cast mix (bench --cast, seed 4177) and odd sides
SHAPES = [
    ("f32", "e4m3", 4096, 17808, False),
    ("f32", "e4m3", 4096, 10592, False),
    ("f32", "e5m2", 5120, 7488, False),
    ("f32", "e4m3", 12288, 4209, True),
    ("f32", "e4m3", 34069, 3072, False),
    ("f32", "bf16", 1024, 15552, False),
    ("f32", "bf16", 4096, 14765, True),
    ("bf16", "e4m3", 7295, 9280, False),
    ("bf16", "e5m2", 15223, 4096, False),
    ("bf16", "e4m3", 118549, 2048, False),
    ("bf16", "e4m3", 8711, 14529, True),
    ("bf16", "e4m3", 4099, 6007, True),
]
TORCH = {
    "f32": torch.float32,
    "bf16": torch.bfloat16,
    "f16": torch.float16,
    "e4m3": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
}
L2_SETS_BYTES = 400 << 20  # rotating buffers: several times any L2


def variants(src: cast.Format, dst: cast.Format) -> list[tuple[str, KernelConfig]]:
    """The default and the variants worth timing beside it (within 48 KiB, and the wide tiles
    past it): more words
    a thread (n128, m256, t8: the block's prologue over twice the bytes) or more, smaller
    blocks an SM (m64)."""
    base = cast.default(KernelConfig, src, dst)
    out = [("default", base)]
    for name, fields in [
        ("n128", {"tile_n": 128, "per_thread": 8, "min_blocks": 0}),
        ("m256", {"tile_m": 256, "per_thread": 8, "min_blocks": 0}),
        ("t8", {"per_thread": 8, "min_blocks": 0}),
        # half the tile, half the threads: twice the blocks an SM, their phases overlapping
        ("m64", {"tile_m": 64, "min_blocks": 2 * base.min_blocks}),
        ("b0", {"min_blocks": 0}),  # the default's registers uncapped
        # z's rows written 128 columns a tile (half the tile boundaries inside z's rows)
        ("m128n128", {"tile_m": 128, "tile_n": 128, "per_thread": 8, "min_blocks": 0}),
        ("m64n128", {"tile_m": 64, "tile_n": 128, "per_thread": 4, "min_blocks": 0}),
        # more warps an SM (registers capped at 64): for calls bound by memory latency
        ("b4", {"min_blocks": 4}),
        ("m128b4", {"tile_m": 128, "per_thread": 4, "min_blocks": 4}),
        ("m64b8", {"tile_m": 64, "per_thread": 4, "min_blocks": 8}),
    ]:
        try:
            c = base.replace(**fields)
            if name.endswith("n128") and c.threads == 256:
                c = c.replace(min_blocks=3)  # 80 registers, as the 256-row default
        except (ConfigError, ValueError):
            continue
        if c.min_blocks * c.threads > 1024:
            continue  # capped under 64 registers: spills
        if c.smem_bytes <= 48 * 1024 and c.threads <= 1024 and c not in dict(out).values():
            out.append((name, c))
    # tiles past 48 KiB (dynamic shared memory, opted in): "w<tile_n>t<per_thread>"
    for c in cast.wide_tiles(KernelConfig, src, dst):
        out.append((f"w{c.tile_n}t{c.per_thread}", c))
    return out


def reference(x: torch.Tensor, dst: cast.Format, scale: float) -> torch.Tensor:
    return torch.clamp(x.float() * scale, -dst.max, dst.max).to(TORCH[dst.code])


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int16)


def time_it(fn, reps: int, graph: bool = True) -> float:
    """Seconds a call: `reps` calls captured in one CUDA graph, its replay timed with CUDA events
    (the median of 5), so the host's cost of a call is not in it; plain launches where the
    capture fails or `graph` is off (the copy: a device-to-device copy captured in a graph
    is a memcpy node, which the H200 ran a third slower than the same copy launched)."""
    fn(0)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    try:
        if not graph:
            raise RuntimeError("not asked for")
        with torch.cuda.graph(g):
            for i in range(reps):
                fn(i)
        run = g.replay
    except RuntimeError as e:  # not capturable: time the launches themselves
        if graph:
            print(f"  (no CUDA graph: {e}; host time may be in the numbers)")

        def run() -> None:
            for i in range(reps):
                fn(i)

    run()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3 / reps)
    return sorted(times)[2]


def _rows(m: int, n: int, dtype: torch.dtype, padded: bool) -> torch.Tensor:
    """An (m, n) matrix, contiguous or (`padded`) with rows 64 elements apart at most, so
    that every row starts on a 64-byte boundary."""
    if not padded:
        return torch.empty(m, n, device="cuda", dtype=dtype)
    return torch.empty(m, -(-n // 64) * 64, device="cuda", dtype=dtype)[:, :n]


def run_case(
    s_code: str,
    d_code: str,
    m: int,
    n: int,
    both: bool,
    reps: int,
    flags: frozenset[str] = frozenset(),
) -> None:
    """One shape: the copy, then each config checked and timed; one line each. `flags`:
    xpad, zpad: x's or z's rows padded to 64-element pitches (aligned rows in an odd shape)."""
    src, dst = cast.PAIRS[f"{s_code}_{d_code}"]
    scale = 2.0
    moved = m * n * (src.size + dst.size * (2 if both else 1))
    sets = max(2, min(16, L2_SETS_BYTES // moved + 1))
    xs = [_rows(m, n, TORCH[s_code], "xpad" in flags) for _ in range(sets)]
    for x in xs:
        x.copy_(torch.randn(m, n, device="cuda"))
    ys = [torch.empty(n, m, device="cuda", dtype=TORCH[d_code]) for _ in range(sets)]
    zs = [_rows(m, n, TORCH[d_code], "zpad" in flags) for _ in range(sets)]
    amax = torch.zeros(1, device="cuda")
    cp_a = [torch.empty(moved // 2, dtype=torch.uint8, device="cuda") for _ in range(sets)]
    cp_b = [torch.empty(moved // 2, dtype=torch.uint8, device="cuda") for _ in range(sets)]
    copy_s = time_it(lambda i: cp_b[i % sets].copy_(cp_a[i % sets]), reps, graph=False)
    want = reference(xs[0], dst, scale)
    want_amax = xs[0].float().abs().max()
    case = f"{s_code}->{d_code}{' both' if both else ''} {m}x{n} {' '.join(sorted(flags))}"
    for name, cfg in variants(src, dst):

        def call(i: int, cfg: KernelConfig = cfg) -> None:
            k = i % sets
            cast_transpose(xs[k], TORCH[d_code], scale=scale, amax=amax, out_t=ys[k],
                           out=zs[k] if both else None, both=both, config=cfg)  # fmt: skip

        for t in (*ys, *zs):
            bits(t).fill_(0x5A)
        amax.zero_()
        call(0)
        torch.cuda.synchronize()
        ok = torch.equal(bits(ys[0]), bits(want.t().contiguous()))
        if both:
            ok = ok and torch.equal(bits(zs[0]), bits(want))
        ok = ok and bool(amax[0] == want_amax)
        sec = time_it(call, reps)
        print(
            f"{case:44s} {name:8s} {sec * 1e6:9.1f} {moved / sec / 1e9:7.1f} "
            f"{100 * copy_s / sec:6.1f}  {'ok' if ok else 'WRONG'}",
            flush=True,
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", default="", help="comma-separated pairs, e.g. f32_e4m3")
    ap.add_argument("--cases", default="", help="pair:MxN[:both],... instead of the mix")
    ap.add_argument("--variants", default="", help="the variants to time, e.g. default,b0")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    shapes = SHAPES
    if args.cases:
        shapes = []
        for item in args.cases.split(","):
            code, mn, *flag = item.split(":")
            s_code, d_code = code.split("_")
            m, n = (int(v) for v in mn.split("x"))
            shapes.append((s_code, d_code, m, n, "both" in flag, frozenset(flag) - {"both"}))
    if args.variants:
        global variants
        names, full = args.variants.split(","), variants
        variants = lambda src, dst: [v for v in full(src, dst) if v[0] in names]  # noqa: E731
    import autotranspose

    print(f"device: {torch.cuda.get_device_name()}; {autotranspose.__file__}")
    print(f"{'case':44s} {'config':8s} {'us':>9s} {'GB/s':>7s} {'copy%':>6s}  check")
    for s_code, d_code, m, n, both, *flags in shapes:
        if not only or f"{s_code}_{d_code}" in only:
            run_case(s_code, d_code, m, n, both, args.reps, *flags)
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Row-walking tiles for odd-sided 1- and 2-byte transposes: a prototype kernel, its sectors
and its time against the copy and the served kernel (H200, one process a run).

Why. The served byte-permute tiles of odd sides read about 1.26 sectors a byte and write 1.13
(BENCHMARKS.md, "The access pattern's ceiling"): every tile cuts a sector at each end of each
input row segment and of each output window, so no kernel walking them passes about 84% of a
copy. Here a block takes a strip of TM = 496 / e rows (and the 16 / e before it, its halo) and
walks along it, 32 bytes of columns a step: each row's 32-byte sectors are loaded whole and
once, the sector the last step cut kept in shared memory (a ring of two sectors a row), so a
row's reads are cut only where the block's walk starts. Each output row gets the 31 aligned
16-byte words from the one at or before its element r0 (the halo supplies the elements
before r0): every store is a whole word, and a sector two strips share is written by both in
halves. The next step's sectors are loaded while this step's windows are stored.

The first form (a strip of 512 / e rows, 512-byte windows cut at both ends and stored in
pieces, in the history as "dev/rowwalk.py: the first and last cut words ...") read 1.061
sectors a byte as modelled but wrote 1.24 and ran at 36-60% of copy (docs/perf-notes.md,
"Row-walking tiles").

    step s of a block:   ring (2 sectors a row, rows swizzled)  ->  4 x 4-byte units transposed
                         by byte permutes (rows read at their own byte offset)  ->  out (512
                         bytes per output row, 16-byte chunks swizzled)  ->  31 aligned 16-byte
                         stores an output row, realigned by funnel shifts

Not served: a prototype measured against the served kernels (`main`); the CPU emulator test
(tests/test_dev_rowwalk.py) checks it on odd shapes, offsets and pitches.

    python3 dev/rowwalk.py --paper uint8:30073x30073          # sectors a byte, no GPU
    python3 dev/rowwalk.py uint8:30073x30073 bfloat16:15283x15283 --steps 8 16 32
"""

from __future__ import annotations

import argparse
import struct
import time

NT = 256  # threads a block
ARG_FORMAT = "qqqqqqiii"  # m, n, ld_in, ld_out, bs_in, bs_out, strips, chunks, steps

SOURCE = r"""
// e = {E}-byte elements: R ring rows, WC columns (32 bytes) a step, K elements a word
#define RW_E {E}
#define RW_R (512 / RW_E)           // ring rows: the strip's and the halo before it
#define RW_H (16 / RW_E)            // halo rows: output windows start on a 16-byte word
#define RW_TM (RW_R - RW_H)         // the strip's own rows
#define RW_WC (32 / RW_E)
#define RW_K (4 / RW_E)
#define RW_NT 256
#define RW_MIN_BLOCKS {MIN_BLOCKS}  // blocks an SM the registers are capped for
#define RW_ASYNC {ASYNC}  // 1: sectors copied straight into the ring (cp.async), no registers
#define RW_LW (2 * RW_R / RW_NT)  // 16-byte words a thread loads a step

// A ring row's place: rows K apart fall in different 8-word bank groups, so the lanes of a
// unit load (rows Kq + i of four q) hit 32 banks
__device__ __forceinline__ unsigned rw_phi(unsigned r) {{ return r ^ ((r / RW_K) & 3u); }}

__device__ __forceinline__ unsigned rw_pick(const unsigned (&w)[4], int i) {{
    return i == 0 ? w[0] : i == 1 ? w[1] : i == 2 ? w[2] : w[3];
}}

// Bytes [a, b) of the aligned 16-byte word at p from w: a head [a, 16) or a tail [0, b) in
// at most four aligned pieces (no loop: only a window's two end lanes run it); both ends
// cut (a window under 16 bytes) byte by byte
__device__ __forceinline__ void rw_put(unsigned char* p, const unsigned (&w)[4], int a, int b) {{
    if (a > 0 && b < 16) {{
        for (int i = a; i < b; ++i) p[i] = (unsigned char)(rw_pick(w, i >> 2) >> (8 * (i & 3)));
        return;
    }}
    if (a > 0) {{
        int x = a;
        if (x & 1) {{ p[x] = (unsigned char)(rw_pick(w, x >> 2) >> (8 * (x & 3))); x += 1; }}
        if ((x & 2) && x < 16) {{
            *reinterpret_cast<unsigned short*>(p + x) = (unsigned short)(rw_pick(w, x >> 2) >> (8 * (x & 3)));
            x += 2;
        }}
        if ((x & 4) && x < 16) {{ *reinterpret_cast<unsigned*>(p + x) = rw_pick(w, x >> 2); x += 4; }}
        if ((x & 8) && x < 16) *reinterpret_cast<uint2*>(p + x) = make_uint2(w[2], w[3]);
        return;
    }}
    if (b & 8) *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
    if (b & 4) *reinterpret_cast<unsigned*>(p + (b & 8)) = rw_pick(w, (b & 8) >> 2);
    if (b & 2) {{
        const int x = b & 12;
        *reinterpret_cast<unsigned short*>(p + x) = (unsigned short)rw_pick(w, x >> 2);
    }}
    if (b & 1) {{
        const int x = b & 14;
        p[x] = (unsigned char)(rw_pick(w, x >> 2) >> (8 * (x & 3)));
    }}
}}

// Words w .. w + 3 of cat, each shifted down by bs bits from the next (w a constant: the
// indices stay registers)
template <int w>
__device__ __forceinline__ void rw_shift(const unsigned (&cat)[9], int bs, unsigned (&res)[4]) {{
#pragma unroll
    for (int k = 0; k < 4; ++k) res[k] = __funnelshift_r(cat[w + k], cat[w + k + 1], bs);
}}

// A 16-byte word from global memory into the ring: by cp.async where RW_ASYNC (the copy
// lands before rw_landed returns), else through a register now
__device__ __forceinline__ void rw_fill(unsigned* dst, const unsigned char* src) {{
#if defined(__CUDA_ARCH__) && RW_ASYNC
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(d), "l"(src) : "memory");
#else
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#endif
}}

__device__ __forceinline__ void rw_landed() {{
#if defined(__CUDA_ARCH__) && RW_ASYNC
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}}

extern "C" __global__ void __launch_bounds__(RW_NT, RW_MIN_BLOCKS)
at_rowwalk_e{E}(const unsigned char* __restrict__ x, unsigned char* __restrict__ y,
               long long m, long long n, long long ld_in, long long ld_out,
               long long bs_in, long long bs_out, int strips, int chunks, int steps)
{{
    __shared__ __align__(16) unsigned ring[2][RW_R][8];
    __shared__ __align__(16) unsigned out[RW_WC][128];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    long long id = blockIdx.x;
    const int strip = (int)(id % strips);
    id /= strips;
    const int chunk = (int)(id % chunks);
    const long long b = id / chunks;
    const long long r0 = (long long)strip * RW_TM;
    const long long c0 = (long long)chunk * steps * RW_WC;
    const int cols = (int)min((long long)steps * RW_WC, n - c0);
    const int nsteps = (cols + RW_WC - 1) / RW_WC;
    // ring row i is input row r0 - H + i (the halo: rows of the strip before, read again so
    // that every output window starts on a 16-byte word); column c0
    const unsigned char* xs = x + (b * bs_in + (r0 - RW_H) * ld_in + c0) * RW_E;
    unsigned char* yb = y + b * bs_out * RW_E;
    const unsigned o0 = (unsigned)(reinterpret_cast<unsigned long long>(xs) & 31u);
    const unsigned ldb = (unsigned)((ld_in * RW_E) & 31);  // a row's step in the offset mod 32

    // Loads: word w = t + NT j is half w & 1 of row w >> 1's sector; sector k of a row is
    // loaded where it holds one of the block's bytes of that row
    const unsigned char* src[RW_LW];
    int lim[RW_LW];
#pragma unroll
    for (int j = 0; j < RW_LW; ++j) {{
        const int w = t + RW_NT * j, r = w >> 1;
        const unsigned char* p = xs + (long long)r * ld_in * RW_E;
        const unsigned o = (unsigned)(reinterpret_cast<unsigned long long>(p) & 31u);
        src[j] = p - o + 16 * (w & 1);
        const long long row = r0 - RW_H + r;
        lim[j] = row >= 0 && row < m ? (int)o + cols * RW_E : 0;
    }}
#if RW_ASYNC
#pragma unroll
    for (int k = 0; k < 2; ++k) {{
#pragma unroll
        for (int j = 0; j < RW_LW; ++j) {{
            const int w = t + RW_NT * j;
            if (32 * k < lim[j]) rw_fill(&ring[k][rw_phi(w >> 1)][4 * (w & 1)], src[j] + 32 * k);
        }}
    }}
#else
    uint4 pre[RW_LW];
#pragma unroll
    for (int j = 0; j < RW_LW; ++j) pre[j] = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < 2; ++k) {{
#pragma unroll
        for (int j = 0; j < RW_LW; ++j) {{
            const int w = t + RW_NT * j;
            if (32 * k < lim[j]) pre[j] = *reinterpret_cast<const uint4*>(src[j] + 32 * k);
            *reinterpret_cast<uint4*>(&ring[k][rw_phi(w >> 1)][4 * (w & 1)]) = pre[j];
        }}
    }}
#endif

    const int p = lane & 7;  // this thread's unit column: columns K p .. K p + K - 1 of a step
    // Units: rows K q .. K q + K - 1 x columns K p ..; q = 4 (warp + 8 jj) + lane / 8. Each
    // of its rows' places, fixed for the walk: its ring row's first word plus the word of the
    // step's 4 bytes (bits 0-12), their byte offset (13-14), the sector past the step's first
    // (15); the same for the next word in bits 16-31
    unsigned place[4][RW_K];
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {{
        const int q = 4 * (warp + 8 * jj) + (lane >> 3);
#pragma unroll
        for (int i = 0; i < RW_K; ++i) {{
            const unsigned r = RW_K * q + i;
            const unsigned o = (o0 + r * ldb) & 31u, f = (o + 4 * p) >> 2, g = f + 1;
            const unsigned pl = (8 * rw_phi(r) + (f & 7)) | ((o & 3) << 13) | ((f >> 3) << 15)
                              | ((8 * rw_phi(r) + (g & 7)) << 16) | ((g >> 3) << 31);
            // kept, not recomputed each step (the compiler otherwise sinks it into the walk)
#ifdef __CUDA_ARCH__
            asm volatile("mov.b32 %0, %1;" : "=r"(place[jj][i]) : "r"(pl));
#else
            place[jj][i] = pl;
#endif
        }}
    }}
    for (int s = 0; s < nsteps; ++s) {{
        rw_landed();
        __syncthreads();  // the ring holds sectors s and s + 1; out is free
        const unsigned par = (unsigned)s & 1u;
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {{
            const int q = 4 * (warp + 8 * jj) + (lane >> 3);
            unsigned v[RW_K];
#pragma unroll
            for (int i = 0; i < RW_K; ++i) {{
                const unsigned pl = place[jj][i];
                const unsigned* slot0 = &ring[(par ^ (pl >> 15)) & 1][0][0];
                const unsigned* slot1 = &ring[(par ^ (pl >> 31)) & 1][0][0];
                const unsigned w0 = slot0[pl & 0x1fffu], w1 = slot1[(pl >> 16) & 0x1fffu];
                v[i] = __byte_perm(w0, w1, 0x3210u + 0x1111u * ((pl >> 13) & 3));
            }}
            unsigned c[RW_K];
#if RW_E == 1
            const unsigned t0 = __byte_perm(v[0], v[1], 0x5140), t1 = __byte_perm(v[0], v[1], 0x7362);
            const unsigned t2 = __byte_perm(v[2], v[3], 0x5140), t3 = __byte_perm(v[2], v[3], 0x7362);
            c[0] = __byte_perm(t0, t2, 0x5410);
            c[1] = __byte_perm(t0, t2, 0x7632);
            c[2] = __byte_perm(t1, t3, 0x5410);
            c[3] = __byte_perm(t1, t3, 0x7632);
#else
            c[0] = __byte_perm(v[0], v[1], 0x5410);
            c[1] = __byte_perm(v[0], v[1], 0x7632);
#endif
            // column K p + k's word q, its 16-byte chunk q / 4 swizzled by p
#pragma unroll
            for (int k = 0; k < RW_K; ++k)
                out[RW_K * p + k][(((q >> 2) ^ p) << 2) | (q & 3)] = c[k];
        }}
        __syncthreads();  // out holds this step's windows; ring slot s & 1 is read
        const bool more = s + 2 <= nsteps;  // sector s + 2, for the next step
        if (more) {{
#pragma unroll
            for (int j = 0; j < RW_LW; ++j) {{
#if RW_ASYNC  // straight into slot s & 1, whose sector s the exchange above has read
                const int w = t + RW_NT * j;
                if (32 * (s + 2) < lim[j])
                    rw_fill(&ring[s & 1][rw_phi(w >> 1)][4 * (w & 1)], src[j] + 32 * (s + 2));
#else
                if (32 * (s + 2) < lim[j])
                    pre[j] = *reinterpret_cast<const uint4*>(src[j] + 32 * (s + 2));
#endif
            }}
        }}
        // Stores: output row c0 + WC s + cc, the aligned words from the one at or before its
        // element r0 to the one at or before its element r0 + TM, all whole (31 of them);
        // the matrix's first and last strips cut the output row's first and last word
        const bool first = strip == 0, last = r0 + RW_TM >= m;
        const long long end = last ? m : r0 + RW_TM;
        for (int cc = warp; cc < RW_WC; cc += 8) {{
            const long long col = c0 + (long long)RW_WC * s + cc;
            if (col - c0 >= cols) break;
            const unsigned long long d0 = reinterpret_cast<unsigned long long>(yb + (col * ld_out + r0) * RW_E);
            const unsigned long long de = reinterpret_cast<unsigned long long>(yb + (col * ld_out + end) * RW_E);
            const unsigned long long lo = first ? d0 : d0 & ~15ull, hi = last ? de : de & ~15ull;
            const unsigned long long a0 = lo & ~15ull;
            const int words = (int)((hi - a0 + 15) >> 4), sw = cc / RW_K;
            // word j holds out's bytes p0 + 16 j ..: out's byte i is ring row i's element
            const int p0 = (int)(a0 + 16 - d0), sh = p0 & 15, bs = 8 * (sh & 3);
            for (int j = lane; j < words; j += 32) {{  // a second round only at a matrix's end
                const int q = (p0 >> 4) + j;
                uint4 A = make_uint4(0, 0, 0, 0), B = make_uint4(0, 0, 0, 0);
                if (q < 32) A = *reinterpret_cast<const uint4*>(&out[cc][(q ^ sw) << 2]);
                if (q + 1 < 32) B = *reinterpret_cast<const uint4*>(&out[cc][((q + 1) ^ sw) << 2]);
                const unsigned cat[9] = {{A.x, A.y, A.z, A.w, B.x, B.y, B.z, B.w, 0u}};
                unsigned res[4];
                switch (sh >> 2) {{  // the same for the warp: no divergence
                case 0: rw_shift<0>(cat, bs, res); break;
                case 1: rw_shift<1>(cat, bs, res); break;
                case 2: rw_shift<2>(cat, bs, res); break;
                default: rw_shift<3>(cat, bs, res);
                }}
                unsigned char* at = reinterpret_cast<unsigned char*>(a0 + 16ull * j);
                const long long from = (long long)lo - (long long)(a0 + 16ull * j);
                const long long to = (long long)hi - (long long)(a0 + 16ull * j);
                const int lo_b = from > 0 ? (int)from : 0, hi_b = to < 16 ? (int)to : 16;
                if (lo_b == 0 && hi_b == 16)
                    *reinterpret_cast<uint4*>(at) = make_uint4(res[0], res[1], res[2], res[3]);
                else
                    rw_put(at, res, lo_b, hi_b);
            }}
        }}
#if !RW_ASYNC
        if (more) {{
#pragma unroll
            for (int j = 0; j < RW_LW; ++j) {{
                const int w = t + RW_NT * j;
                *reinterpret_cast<uint4*>(&ring[s & 1][rw_phi(w >> 1)][4 * (w & 1)]) = pre[j];
            }}
        }}
#endif
    }}
}}
"""


def source(e: int, min_blocks: int = 3, async_loads: bool = False) -> str:
    """The kernel for `e`-byte elements (1 or 2): `at_rowwalk_e{e}`, its registers capped
    for `min_blocks` blocks an SM (at 4, 64 registers, ptxas recomputed each unit row's
    places every step: 3.7x the served kernel's instructions); `async_loads`: the next
    step's sectors copied into the ring by cp.async (sm_80+) instead of held in registers
    over the stores (16 registers fewer)."""
    if e not in (1, 2):
        raise ValueError(f"row-walking tiles move 1- and 2-byte elements, not {e}")
    return SOURCE.format(E=e, MIN_BLOCKS=min_blocks, ASYNC=int(async_loads))


def strip_rows(e: int) -> tuple[int, int]:
    """(rows, halo): a strip's own rows and the rows before it its ring also holds (the
    kernel's RW_TM and RW_H)."""
    return 512 // e - 16 // e, 16 // e


def grid(e: int, batch: int, m: int, n: int, steps: int) -> tuple[int, int]:
    """(strips, chunks): a block a strip of rows (`strip_rows`) and `steps` steps of 32
    bytes."""
    return -(-m // strip_rows(e)[0]), -(-n // (steps * (32 // e)))


def scalars(e: int, batch: int, m: int, n: int, strides: tuple[int, int, int, int], steps: int):
    strips, chunks = grid(e, batch, m, n, steps)
    return (m, n, *strides, strips, chunks, steps), batch * strips * chunks


def sectors(e: int, batch: int, m: int, n: int, steps: int) -> tuple[float, float]:
    """Sectors read and written a byte by the walk on a contiguous call: each strip's rows
    (its halo's too) from a block's first byte of them to its last; each output row's aligned
    words a strip writes."""
    import numpy as np

    (tm, halo), span = strip_rows(e), steps * (32 // e)
    r = w = 0
    for bi in range(batch):
        base = bi * m * n * e
        for r0 in range(0, m, tm):
            rows = np.arange(max(0, r0 - halo), min(m, r0 + tm), dtype=np.int64)
            for c in range(0, n, span):
                start = base + (rows * n + c) * e
                ln = min(span, n - c) * e
                r += int(((start + ln - 1) // 32 - start // 32 + 1).sum())
        out = base + np.arange(n, dtype=np.int64)[:, None] * m * e  # output rows' first bytes
        starts = np.arange(0, m, tm, dtype=np.int64)[None, :]
        d0 = out + starts * e
        de = out + np.minimum(starts + tm, m) * e
        lo = np.where(starts == 0, d0, d0 & ~15)
        hi = np.where(starts + tm >= m, de, de & ~15)
        w += int(((hi - 1) // 32 - lo // 32 + 1)[hi > lo].sum())
    nbytes = batch * m * n * e
    return r * 32 / nbytes, w * 32 / nbytes


class Walk:
    """A prepared launch of the row-walking kernel, run like a `runtime.launch.Launch`."""

    def __init__(self, state, e, batch, m, n, steps, min_blocks=3, async_loads=False) -> None:
        from autotranspose.runtime import driver
        from autotranspose.runtime.compiler import load_source

        name = f"at_rowwalk_e{e}"
        kernel = load_source(state.arch, source(e, min_blocks, async_loads), [name])[name]
        values, blocks = scalars(e, batch, m, n, (n, m, m * n, m * n), steps)
        self.tail = struct.pack(ARG_FORMAT, *values)
        self.args = driver.launch_args(kernel.handle, (blocks, 1, 1), (NT, 1, 1))
        self.driver = driver

    def __call__(self, src: int, dst: int, stream=None) -> None:
        self.driver.launch(self.args, stream, struct.pack("PP", src, dst) + self.tail)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="+", help="DTYPE:MxN or DTYPE:BxMxN (1- and 2-byte)")
    ap.add_argument("--steps", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument("--min-blocks", type=int, nargs="+", default=[3], help="register caps")
    ap.add_argument(
        "--loads",
        nargs="+",
        default=["registers"],
        choices=["registers", "async"],
        help="the next step's sectors held in registers, or copied by cp.async",
    )
    ap.add_argument("--paper", action="store_true", help="sectors a byte only, no GPU")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--budget", type=float, default=150.0)
    args = ap.parse_args()
    from narrow_ceiling import parse  # DTYPE:MxN or DTYPE:BxMxN (dev/ is the script's path)

    from autotranspose.plans.dtypes import element_type

    if args.paper:
        for case in args.cases:
            name, (b, m, n) = parse(case)
            e = element_type(name).size
            cells = []
            for st in args.steps:
                r, w = sectors(e, b, m, n, st)
                cells.append(f"steps {st}: {r:.3f}/{w:.3f} bound {200 / (r + w):.1f}")
            print(f"{case:28s} " + " | ".join(cells), flush=True)
        return
    from autotranspose.dispatch.transpose import served
    from autotranspose.runtime.compiler import activate
    from autotranspose.runtime.launch import make_launch
    from autotranspose.tuner.measure import Bench

    state = activate(0)
    print(state.info, flush=True)
    start = time.time()
    for case in args.cases:
        if time.time() - start > args.budget:
            print(f"budget spent: {case} and later not measured", flush=True)
            break
        name, (b, m, n) = parse(case)
        e = element_type(name).size
        bench = Bench(state, e, (b, m, n))
        try:
            copy_s = bench.copy_time(repeats=args.repeats)
            choice = served(state, element_type(name), (b, m, n), *bench.pointers(0))
            cfg = choice.config
            ours = make_launch(state, cfg, b, m, n, n, m, m * n, m * n)
            rows = [(f"served {cfg.key}", ours, None)]
            for st in args.steps:
                for mb in args.min_blocks:
                    for how in args.loads:
                        label = f"row walk, steps {st}, registers for {mb} blocks, {how} loads"
                        walk = Walk(state, e, b, m, n, st, mb, how == "async")
                        rows.append((label, walk, st))
            print(f"=== {case} ({b * m * n * e / 1e6:.0f} MB)", flush=True)
            for _round in range(2):
                for label, launch, st in rows if _round == 0 else rows[::-1]:
                    problem = bench.check(launch)
                    secs = None if problem else bench.time(launch, repeats=args.repeats)
                    pct = "   -  " if secs is None else f"{100 * copy_s / secs:6.1f}"
                    extra = ""
                    if st is not None:
                        r, w = sectors(e, b, m, n, st)
                        extra = f"  sectors {r:.3f}/{w:.3f} bound {200 / (r + w):.1f}"
                    print(
                        f"  {pct}%  {label}{extra}{'  ' + problem if problem else ''}", flush=True
                    )
        except Exception as exc:  # a case that fails is a line, not a lost run
            print(f"  FAILED {case}: {type(exc).__name__}: {exc}"[:500], flush=True)
        finally:
            bench.close()
    print(f"done in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()

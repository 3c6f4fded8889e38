"""Odd-sided 1-byte transposes by bulk-copied tiles (sm_90 probe, not served).

The served byte-permute tiles of odd 1-byte rows are bound by the L2 (reads 1.25-1.5x the
bytes, writes 1.15-1.3x): wider tiles would cut the sectors, but a wide tile fills shared
memory, one block an SM, and its load, exchange and store then run in turn (docs/perf-notes.md,
"Wider byte-permute tiles and prefetching walks"). Here a persistent block keeps the next
tiles' rows in flight by bulk copies (`cp.async.bulk`, completed on an mbarrier), which take
no registers and no issue slots: each tile row's 16-byte-aligned cover (the same 32-byte
sectors as the row's bytes) lands in shared memory at its global alignment, 4x4 byte blocks
are turned by byte permutes into an output tile, and each output row is stored as aligned
16-byte words, its cut head and tail in aligned pieces of 8, 4, 2 and 1 bytes. Every tile,
edge ones too, takes the same path (the loads and stores clamped to the matrix).

`--modes` times parts of the kernel alone (wrong output, the rest's traffic unchanged):
`no-exchange` (the bulk pattern's own ceiling), `loads`, `stores`, `no-pieces`, and
`issuers4` (four warps issue the bulk copies instead of one).

    python3 dev/bulk_tile.py --out $OUT uint8:8487x8487 uint8:19907x19907
"""

from __future__ import annotations

import struct

from _probe import PTX, arguments, measure

SOURCE = r"""
#define TM {tm}
#define TW {tw}
#define STAGES {stages}
#define THREADS {threads}
#define SI {si}
#define SO {so}
#define EXCHANGE {exchange}
#define LOADS {loads}
#define STORES {stores}
#define PIECES {pieces}
#define ISSUERS {issuers}

// the row's place in its stage: rows of a quad group spread over the banks (16-byte steps)
__device__ __forceinline__ u32 row_base(u32 r) {{ return r * SI + 16u * (((r >> 3) & 3u)); }}
// an output row's 16-byte chunk k, swizzled so a warp's quad stores fall on 32 banks
__device__ __forceinline__ u32 out_chunk(u32 cc, u32 k) {{ return cc * SO + 16u * (k ^ (((cc >> 2) & 3u) << 1)); }}

struct Tile {{ long long r0, c0; u32 tm, tw; }};

__device__ __forceinline__ Tile tile_of(long long t, long long tiles_m, long long M, long long N) {{
    Tile T;
    long long ti = t % tiles_m, tj = t / tiles_m;
    T.r0 = ti * TM; T.c0 = tj * TW;
    T.tm = (u32)min((long long)TM, M - T.r0);
    T.tw = (u32)min((long long)TW, N - T.c0);
    return T;
}}

// warp 0: the bulk copies of tile t's rows into a stage, completing on its barrier
__device__ __forceinline__ void issue(const unsigned char* x, long long t, long long tiles,
                                      long long tiles_m, long long M, long long N,
                                      u32 stage, u32 bar) {{
    if (t >= tiles) return;
    const u32 lane = threadIdx.x & 31, first = threadIdx.x & ~31u;
    Tile T = tile_of(t, tiles_m, M, N);
    u32 total = 0;
    for (u32 r = first + lane; r < T.tm; r += 32 * ISSUERS) {{
        u64 g = (u64)(T.r0 + r) * (u64)N + (u64)T.c0;
        u64 a = g & ~15ull, e = (g + T.tw + 15) & ~15ull;
        total += (u32)(e - a);
    }}
    total = LOADS ? __reduce_add_sync(0xffffffffu, total) : 0;
    if (lane == 0) bar_arrive_tx(bar, total);
    __syncwarp();
    if (!LOADS) return;
    for (u32 r = first + lane; r < T.tm; r += 32 * ISSUERS) {{
        u64 g = (u64)(T.r0 + r) * (u64)N + (u64)T.c0;
        u64 a = g & ~15ull, e = (g + T.tw + 15) & ~15ull;
        bulk_load(stage + row_base(r), x + a, (u32)(e - a), bar);
    }}
}}

__device__ __forceinline__ unsigned char out_byte(const unsigned char* ob, u32 cc, u32 b) {{
    return ob[out_chunk(cc, b >> 4) + (b & 15)];
}}

// bytes [p, end) of an output row from logical byte `from`, in aligned pieces of 8, 4, 2, 1
__device__ __forceinline__ void pieces(unsigned char* y, u64 p, u64 end, const unsigned char* ob,
                                       u32 cc, u32 from) {{
    while (p < end) {{
        u32 s = 8;
        while (s > 1 && ((p & (s - 1)) || p + s > end)) s >>= 1;
        u64 v = 0;
        for (u32 i = 0; i < s; ++i) v |= (u64)out_byte(ob, cc, from + i) << (8 * i);
        if (s == 8) *(u64*)(y + p) = v;
        else if (s == 4) *(u32*)(y + p) = (u32)v;
        else if (s == 2) *(unsigned short*)(y + p) = (unsigned short)v;
        else y[p] = (unsigned char)v;
        p += s; from += s;
    }}
}}

extern "C" __global__ void __launch_bounds__(THREADS)
bulk_tile(const unsigned char* __restrict__ x, unsigned char* __restrict__ y,
          long long M, long long N, long long tiles_m, long long tiles)
{{
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char* ins = smem + 128;                       // STAGES x TM rows of SI bytes
    unsigned char* ob = ins + (u32)STAGES * TM * SI;       // TW output rows of SO bytes
    const u32 bar0 = sa(smem), ins0 = sa(ins);
    const u32 tid = threadIdx.x, warp = tid >> 5;
    const long long G = gridDim.x;
    if (tid == 0) {{
        for (u32 s = 0; s < STAGES; ++s) bar_init(bar0 + 8 * s, ISSUERS);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }}
    __syncthreads();
    if (warp < ISSUERS)
        for (u32 s = 0; s < STAGES; ++s)
            issue(x, blockIdx.x + s * G, tiles, tiles_m, M, N, ins0 + s * TM * SI, bar0 + 8 * s);

    const u32 N15 = (u32)(N & 15), M15 = (u32)(M & 15);
    u32 k = 0;
    for (long long t = blockIdx.x; t < tiles; t += G, ++k) {{
        const u32 s = k % STAGES;
        const u32 bar = bar0 + 8 * s;
        while (!bar_try(bar, (k / STAGES) & 1)) {{}}
        Tile T = tile_of(t, tiles_m, M, N);
        const unsigned char* in = ins + s * TM * SI;
        (void)in;
#if EXCHANGE
        // quads of 4 rows x 4 columns: a warp 8 row quads x 4 column quads
        const u32 c15 = (u32)(T.c0 & 15), r15 = (u32)(T.r0 & 15);
        for (u32 q = tid; q < (TM / 4) * (TW / 4); q += THREADS) {{
            const u32 l = q & 31, grp = q >> 5;
            const u32 gc = grp % (TW / 16), gr = grp / (TW / 16);
            const u32 qc = gc * 4 + (l >> 3), qr = gr * 8 + (l & 7);
            const u32 C = qc * 4;
            u32 v[4];
#pragma unroll
            for (u32 i = 0; i < 4; ++i) {{
                const u32 R = qr * 4 + i;
                const u32 off = ((r15 + R) * N15 + c15) & 15;   // the row's global alignment
                const u32 p = row_base(R) + off + C;
                const u32* w = (const u32*)(in + (p & ~3u));
                v[i] = __funnelshift_r(w[0], w[1], (p & 3) * 8);
            }}
            const u32 t01 = __byte_perm(v[0], v[1], 0x5140), t23 = __byte_perm(v[2], v[3], 0x5140);
            const u32 u01 = __byte_perm(v[0], v[1], 0x7362), u23 = __byte_perm(v[2], v[3], 0x7362);
            const u32 o[4] = {{__byte_perm(t01, t23, 0x5410), __byte_perm(t01, t23, 0x7632),
                              __byte_perm(u01, u23, 0x5410), __byte_perm(u01, u23, 0x7632)}};
#pragma unroll
            for (u32 j = 0; j < 4; ++j)
                *(u32*)(ob + out_chunk(C + j, qr >> 2) + 4 * (qr & 3)) = o[j];
        }}
#endif
        __syncthreads();
        if (warp < ISSUERS) {{
            const long long tn = t + (long long)STAGES * G;
            issue(x, tn, tiles, tiles_m, M, N, ins0 + s * TM * SI, bar);
        }}
        // output rows: aligned 16-byte words, lanes along a row
        const u32 WPR = TM / 16;
        for (u32 idx = tid; STORES && idx < T.tw * WPR; idx += THREADS) {{
            const u32 cc = idx / WPR, kk = idx % WPR;
            const u64 gy = (u64)(T.c0 + cc) * (u64)M + (u64)T.r0;
            const u64 a0 = (gy + 15) & ~15ull, a1 = (gy + T.tm) & ~15ull;
            if (a0 + 16ull * kk + 16 > a1) continue;
            const u32 o = (u32)(a0 - gy) + 16 * kk;
            const uint4 A = *(const uint4*)(ob + out_chunk(cc, o >> 4));
            const uint4 B = *(const uint4*)(ob + out_chunk(cc, (o >> 4) + 1));
            const u32 q = (o >> 2) & 3, sh = (o & 3) * 8;
            const u32 w[8] = {{A.x, A.y, A.z, A.w, B.x, B.y, B.z, B.w}};
            u32 z[5];
#pragma unroll
            for (u32 i = 0; i < 5; ++i)
                z[i] = q == 0 ? w[i] : q == 1 ? w[i + 1] : q == 2 ? w[i + 2] : w[min(i + 3, 7u)];
            uint4 out;
            out.x = __funnelshift_r(z[0], z[1], sh);
            out.y = __funnelshift_r(z[1], z[2], sh);
            out.z = __funnelshift_r(z[2], z[3], sh);
            out.w = __funnelshift_r(z[3], z[4], sh);
            *(uint4*)(y + a0 + 16ull * kk) = out;
        }}
        // cut heads and tails: a thread a row
        for (u32 cc = tid; PIECES && cc < T.tw; cc += THREADS) {{
            const u64 gy = (u64)(T.c0 + cc) * (u64)M + (u64)T.r0, end = gy + T.tm;
            const u64 a0 = (gy + 15) & ~15ull, a1 = end & ~15ull;
            if (a1 > a0) {{
                pieces(y, gy, a0, ob, cc, 0);
                pieces(y, a1, end, ob, cc, (u32)(a1 - gy));
            }} else {{
                pieces(y, gy, end, ob, cc, 0);
            }}
        }}
        __syncthreads();
    }}
    (void)M15; (void)N15;
}}
"""

# (tile rows = output window bytes, tile columns = input segment bytes, stages, threads,
# blocks an SM)
VARIANTS = (
    (256, 128, 3, 512, 1),
    (256, 128, 2, 512, 1),
    (128, 256, 3, 512, 1),
    (128, 128, 3, 256, 2),
    (128, 128, 2, 256, 3),
)


def layout(tm: int, tw: int, stages: int) -> tuple[int, int, int]:
    """(SI, SO, dynamic shared bytes): input rows hold a 16-byte cover of TW bytes plus a
    word read past it, spread by up to 48 bytes; output rows TM bytes plus the swizzle's
    reach."""
    si = -(-(tw + 16 + 4 + 48) // 16) * 16
    so = tm + 128
    return si, so, 128 + stages * tm * si + tw * so


# what a variant leaves out (`--modes`): the parts of the kernel timed alone
MODES = {
    "full": {},
    "no-exchange": {"exchange": 0},
    "loads": {"exchange": 0, "stores": 0, "pieces": 0},
    "stores": {"exchange": 0, "loads": 0},
    "no-pieces": {"pieces": 0},
    "issuers4": {"issuers": 4},
}


def source(tm: int, tw: int, stages: int, threads: int, mode: str = "full") -> str:
    si, so, _ = layout(tm, tw, stages)
    flags = {"exchange": 1, "loads": 1, "stores": 1, "pieces": 1, "issuers": 1}
    flags.update(MODES[mode])
    return PTX + SOURCE.format(tm=tm, tw=tw, stages=stages, threads=threads, si=si, so=so, **flags)


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--modes", nargs="+", default=["full"], choices=sorted(MODES))
    ap.add_argument("--variants", nargs="+", type=int, help="indices into VARIANTS")
    args = ap.parse_args()
    chosen = [VARIANTS[i] for i in args.variants] if args.variants else VARIANTS

    def runs_for(state, bench, m: int, n: int) -> list:
        from autotranspose.runtime import driver as drv
        from autotranspose.runtime.compiler import load_source

        runs = []
        for tm, tw, st, th, bl in chosen:
            tiles_m = -(-m // tm)
            tiles = tiles_m * -(-n // tw)
            grid = (min(tiles, state.info.multiprocessors * bl), 1, 1)
            smem = layout(tm, tw, st)[2]
            tail = struct.pack("qqqq", m, n, tiles_m, tiles)
            for mode in args.modes:
                kern = load_source(state.arch, source(tm, tw, st, th, mode), ["bulk_tile"])
                handle = kern["bulk_tile"].handle
                drv.allow_dynamic_shared(handle, smem, state.ordinal)
                la = drv.launch_args(handle, grid, (th, 1, 1), smem)

                def run(src: int, dst: int, stream=None, la=la, tail=tail) -> None:
                    drv.launch(la, stream, struct.pack("PP", src, dst) + tail)

                label = f"bulk {tm}x{tw} s{st} t{th} b{bl} {mode}"
                runs.append((label, run, mode in ("full", "issuers4")))
        return runs

    measure(args, "bulk_tile", runs_for)


if __name__ == "__main__":
    main()

"""Odd-sided 1-byte transposes by TMA tensor boxes (sm_90 probe, not served).

A tensor map needs a 16-byte-aligned base and row strides that are multiples of 16 bytes, which
an odd row length is not. But the rows r = k, k + 16, k + 32, ... of an M x N byte matrix lie
16N bytes apart: each alignment class k (r mod 16) is a tensor of its own with a legal stride,
whose base is rounded down to 16 bytes and whose boxes start at any byte (TMA reads and writes
exactly the box's bytes, clipped to the tensor). So a tile of 128 x 128 bytes is 16 box loads
(8 rows of class k, 128 bytes each, landed aligned and 128-byte swizzled) and, once turned, 16
box stores of the output's classes: no realigning, no cut words, no byte pieces. A persistent
block keeps STAGES tiles in flight on mbarriers, and OUT_STAGES output tiles in flight as bulk
store groups.

`bulk_tile.py` measured the per-row bulk copies (`cp.async.bulk`, 128-256 a tile): their issue
bound the kernel at 17-28% of a copy. Here a tile is 32 tensor copies issued by one thread.

    python3 dev/tma_tile.py --out $OUT uint8:8487x8487 uint8:19907x19907
"""

from __future__ import annotations

import ctypes
import struct

from _probe import PTX, arguments, measure

SOURCE = r"""
#include <cstdio>
#define STAGES {stages}
#define OUT_STAGES {out_stages}
#define THREADS {threads}
#define EXCHANGE {exchange}
#ifndef ALIGN_BOXES
#define ALIGN_BOXES 0   // 1: every box start rounded down to 16 bytes (a pattern: wrong output)
#endif
#define BOX_X(v) (ALIGN_BOXES ? ((v) & ~15) : (v))
#ifndef PREFETCH
#define PREFETCH 1
#endif
#ifndef TMA_LOADS
#define TMA_LOADS 1
#endif
#ifndef TMA_STORES
#define TMA_STORES 1
#endif
#define TILE 128
#define BOX_BYTES 1024            // 8 rows of 128 bytes: one class's part of a tile
#define STAGE_BYTES 16384         // 16 classes

__device__ __forceinline__ void box_load(u32 dst, const void* map, int x, int y, u32 bar) {{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {{%2, %3}}], [%4];"
                 :: "r"(dst), "l"(map), "r"(x), "r"(y), "r"(bar) : "memory");
}}
__device__ __forceinline__ void box_store(const void* map, int x, int y, u32 src) {{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {{%1, %2}}], [%3];"
                 :: "l"(map), "r"(x), "r"(y), "r"(src) : "memory");
}}

struct __align__(64) Params {{
    unsigned char in_map[128];    // x as rows of 16N bytes: row j holds rows 16j .. 16j + 15
    unsigned char out_map[128];   // y as rows of 16M bytes
    const unsigned char* x; unsigned char* y;
    long long M, N, tiles_m, tiles, M_full, N_full;   // M_full, N_full: whole 16-row groups
    int in_x0, out_x0;            // x's and y's bytes past the 16-byte word the maps start at
}};

extern "C" __global__ void __launch_bounds__(THREADS)
tma_tile(const __grid_constant__ Params p)
{{
    extern __shared__ unsigned char raw[];
    __shared__ __align__(8) unsigned long long bars[STAGES];
    const u32 base = (sa(raw) + 1023u) & ~1023u;           // 128-byte swizzle: 1024-byte blocks
    const u32 ins = base, outs = base + STAGES * STAGE_BYTES;
    unsigned char* gen = raw + (base - sa(raw));             // the same bytes, generic
    const u32 tid = threadIdx.x;
    const long long G = gridDim.x, tiles = p.tiles, tiles_m = p.tiles_m;
    const int N = (int)p.N, M = (int)p.M;
#ifdef TMA_DEBUG
    if (tid == 0 && blockIdx.x == 0)
        printf("params %d: M %lld N %lld tiles_m %lld tiles %lld full %lld %lld x %p y %p x0 %d %d grid %d\n",
               (int)sizeof(Params), p.M, p.N, p.tiles_m, p.tiles, p.M_full, p.N_full, p.x, p.y,
               p.in_x0, p.out_x0, (int)gridDim.x);
#endif
    if (tid == 0) {{
        for (u32 s = 0; s < STAGES; ++s) bar_init(sa(&bars[s]), 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#if PREFETCH
        asm volatile("prefetch.tensormap [%0];" :: "l"(&p.in_map[0]) : "memory");
        asm volatile("prefetch.tensormap [%0];" :: "l"(&p.out_map[0]) : "memory");
#endif
    }}
    __syncthreads();
    // a whole tile: its 128 rows in whole 16-row groups of x, its 128 columns in whole groups
    // of y's rows (so no box store passes a row's end); the rest go by threads
    auto whole = [&](int r0, int c0) {{ return r0 + TILE <= p.M_full && c0 + TILE <= p.N_full; }};
    auto issue = [&](long long t, u32 s) {{
        const int r0 = (int)(t % tiles_m) * TILE, c0 = (int)(t / tiles_m) * TILE;
        const u32 bar = sa(&bars[s]);
        if (!whole(r0, c0) || !TMA_LOADS) {{ bar_arrive_tx(bar, 0); return; }}
        bar_arrive_tx(bar, STAGE_BYTES);
        for (u32 k = 0; k < 16; ++k)
            box_load(ins + s * STAGE_BYTES + k * BOX_BYTES, &p.in_map[0], BOX_X(p.in_x0 + k * N + c0), r0 / 16, bar);
    }};
    if (tid == 0)
        for (u32 s = 0; s < STAGES; ++s)
            if (blockIdx.x + s * G < tiles) issue(blockIdx.x + s * G, s);
    // the thread's unit: rows 16h .. 16h + 15 (one of each class), columns 4cq .. 4cq + 3
    u32 k = 0;
    for (long long t = blockIdx.x; t < tiles; t += G, ++k) {{
        const u32 s = k % STAGES, o = k % OUT_STAGES;
        const int r0 = (int)(t % tiles_m) * TILE, c0 = (int)(t / tiles_m) * TILE;
        const bool w = whole(r0, c0);
        if (tid == 0)  // the store that last read this output stage is done reading it
            asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(OUT_STAGES - 1) : "memory");
        while (!bar_try(sa(&bars[s]), (k / STAGES) & 1)) {{}}
        __syncthreads();
        if (w) {{
#if EXCHANGE
            const unsigned char* in = gen + s * STAGE_BYTES;
            unsigned char* out = gen + STAGES * STAGE_BYTES + o * STAGE_BYTES;
            for (u32 u = tid; u < 256; u += THREADS) {{
                const u32 l = u & 31, h = l & 7, cq = (u >> 5) * 4 + (l >> 3);
                // input: class k's box at k * 1024, its row h at + 128h, chunk c at (c ^ h)
                const u32 col = 16 * ((cq >> 2) ^ h) + 4 * (cq & 3);
                u32 v[16];
#pragma unroll
                for (u32 r = 0; r < 16; ++r) v[r] = *(const u32*)(in + r * BOX_BYTES + 128 * h + col);
                u32 q[4][4];
#pragma unroll
                for (u32 g = 0; g < 4; ++g) {{
                    const u32 t01 = __byte_perm(v[4 * g], v[4 * g + 1], 0x5140);
                    const u32 t23 = __byte_perm(v[4 * g + 2], v[4 * g + 3], 0x5140);
                    const u32 u01 = __byte_perm(v[4 * g], v[4 * g + 1], 0x7362);
                    const u32 u23 = __byte_perm(v[4 * g + 2], v[4 * g + 3], 0x7362);
                    q[0][g] = __byte_perm(t01, t23, 0x5410);
                    q[1][g] = __byte_perm(t01, t23, 0x7632);
                    q[2][g] = __byte_perm(u01, u23, 0x5410);
                    q[3][g] = __byte_perm(u01, u23, 0x7632);
                }}
                // output row C = 4cq + j: class C & 15, box row C >> 4, bytes 16h .. 16h + 15
#pragma unroll
                for (u32 j = 0; j < 4; ++j) {{
                    const u32 C = 4 * cq + j, i = C >> 4;
                    *(uint4*)(out + (C & 15) * BOX_BYTES + 128 * i + 16 * (h ^ i)) =
                        make_uint4(q[j][0], q[j][1], q[j][2], q[j][3]);
                }}
            }}
#endif
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        }} else {{
            // an edge tile, element by element
            const int tm = min(TILE, M - r0), tw = min(TILE, N - c0);
            for (int u = tid; u < tm * tw; u += THREADS) {{
                const int rr = u / tw, cc = u % tw;
                p.y[(long long)(c0 + cc) * M + r0 + rr] = p.x[(long long)(r0 + rr) * N + c0 + cc];
            }}
        }}
        __syncthreads();
        if (tid == 0) {{
            if (w && TMA_STORES) {{
                const u32 ob = outs + o * STAGE_BYTES;
                for (u32 k2 = 0; k2 < 16; ++k2)
                    box_store(&p.out_map[0], BOX_X(p.out_x0 + k2 * M + r0), c0 / 16, ob + k2 * BOX_BYTES);
            }}
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");  // empty for an edge tile
            const long long tn = t + (long long)STAGES * G;
            if (tn < tiles) issue(tn, s);
        }}
    }}
    if (tid == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}}
"""

# (stages, out stages, threads, blocks an SM)
VARIANTS = ((4, 2, 256, 1), (3, 2, 256, 2), (4, 2, 256, 2), (2, 2, 256, 3))
MODES = {"full": 1, "no-exchange": 0}


def smem(stages: int, out_stages: int) -> int:
    return 1024 + (stages + out_stages) * 16384


def source(stages: int, out_stages: int, threads: int, mode: str) -> str:
    return PTX + SOURCE.format(
        stages=stages, out_stages=out_stages, threads=threads, exchange=MODES[mode]
    )


def _encoder():
    dll = ctypes.CDLL("libcuda.so.1")
    fn = dll.cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    fn.argtypes = [
        ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
        ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
    ]  # fmt: skip
    return fn


SWIZZLE_128B, L2_PROMO_128B = 3, 2


def _launcher():
    fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_void_p]  # fmt: skip
    return fn


def encode(fn, base: int, rows: int, cols: int) -> tuple[bytes, int]:
    """The tensor map of a rows x cols byte matrix at `base` seen as rows of 16 rows (16 cols
    bytes each, a legal stride whatever cols is), from the 16-byte word at or before base, and
    base's offset into that word. Row r = 16j + k, column c is element (x0 + k cols + c, j)."""
    a = base & ~15
    x0 = base - a
    buf = (ctypes.c_uint64 * 32)()  # 128 bytes at a 64-byte boundary within
    addr = (ctypes.addressof(buf) + 63) & ~63
    dims = (ctypes.c_uint64 * 2)(x0 + 16 * cols, max(1, rows // 16))
    strides = (ctypes.c_uint64 * 1)(16 * cols)
    box = (ctypes.c_uint32 * 2)(128, 8)
    estr = (ctypes.c_uint32 * 2)(1, 1)
    err = fn(addr, 0, 2, a, dims, strides, box, estr, 0, SWIZZLE_128B, L2_PROMO_128B, 0)
    if err:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed ({err})")
    return ctypes.string_at(addr, 128), x0


def params(fn, src: int, dst: int, m: int, n: int, tiles_m: int, tiles: int) -> bytes:
    """The kernel's `Params` block (a __grid_constant__ argument)."""
    imap, ix0 = encode(fn, src, m, n)
    omap, ox0 = encode(fn, dst, n, m)
    body = (
        imap
        + omap
        + struct.pack(
            "QQqqqqqqii", src, dst, m, n, tiles_m, tiles, 16 * (m // 16), 16 * (n // 16), ix0, ox0
        )
    )
    return body + b"\0" * (-len(body) % 64)


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--modes", nargs="+", default=["full"], choices=sorted(MODES))
    ap.add_argument("--variants", nargs="+", type=int, help="indices into VARIANTS")
    ap.add_argument("--debug", action="store_true", help="block 0 prints its arguments")
    ap.add_argument("--without", nargs="*", default=[], help="PREFETCH TMA_LOADS TMA_STORES")
    ap.add_argument(
        "--aligned-pattern",
        action="store_true",
        help="box starts rounded down to 16 bytes (TMA faults on others): the traffic of a "
        "design that loads each class's 16-byte cover, not its output (unchecked)",
    )
    args = ap.parse_args()
    chosen = [VARIANTS[i] for i in args.variants] if args.variants else VARIANTS
    enc, launch_kernel = _encoder(), _launcher()
    head = (
        ("#define TMA_DEBUG 1\n" if args.debug else "")
        + ("#define ALIGN_BOXES 1\n" if args.aligned_pattern else "")
        + "".join(f"#define {d} 0\n" for d in args.without)
    )

    def runs_for(state, bench, m: int, n: int) -> list:
        from autotranspose.runtime import driver as drv
        from autotranspose.runtime.compiler import load_source

        tiles_m = -(-m // 128)
        tiles = tiles_m * -(-n // 128)
        # each rotating buffer set's argument block, kept alive beside its kernelParams:
        # by kernelParams, not `extra`, since the argument is 64-byte aligned and the
        # driver places it in the parameter bank itself (a raw block lands 48 bytes early)
        blocks = {}
        for k in range(bench.sets):
            src, dst = bench.pointers(k)
            buf = ctypes.create_string_buffer(params(enc, src, dst, m, n, tiles_m, tiles))
            blocks[(src, dst)] = (buf, (ctypes.c_void_p * 1)(ctypes.addressof(buf)))
        runs = []
        for st, ost, th, bl in chosen:
            grid, block, shared = (
                (min(tiles, state.info.multiprocessors * bl), 1, 1),
                (th, 1, 1),
                smem(st, ost),
            )
            for mode in args.modes:
                kern = load_source(state.arch, head + source(st, ost, th, mode), ["tma_tile"])
                handle = kern["tma_tile"].handle
                drv.allow_dynamic_shared(handle, shared, state.ordinal)

                def run(
                    src: int,
                    dst: int,
                    stream=None,
                    handle=handle,
                    grid=grid,
                    shared=shared,
                    block=block,
                ) -> None:
                    arr = blocks[(src, dst)][1]
                    err = launch_kernel(
                        handle, *grid, *block, shared, stream, ctypes.addressof(arr), None
                    )
                    if err:
                        raise RuntimeError(f"cuLaunchKernel failed ({err})")

                label = f"tma s{st} o{ost} t{th} b{bl} {mode}"
                runs.append((label, run, mode == "full" and not args.aligned_pattern))
        return runs

    measure(args, "tma_tile", runs_for)


if __name__ == "__main__":
    main()

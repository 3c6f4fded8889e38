"""Developer tool: the access pattern's ceiling of SWAP (in-place squares of whole 16-byte rows),
beside the served kernel, on the same matrices in one process.

    python dev/swap_ceiling.py [--cases 8192x8192:uint8 ...] [--tiles 128x256 256x512 ...]
                               [--barrier] [--repeats 7] [--rounds 2]

SWAP reads a tile pair (I, J), (J, I) and writes each transposed into the other's place: the
sectors a copy moves, once. Each row times, on the tuner's `InplaceBench` matrices (rotated
where they fit the L2 together) and as % of a device-to-device copy of the same bytes:

- served: transpose_()'s program for the case (the class's tuned or default parameters);
- pair, in place: a tile's grid and pair walk (the served tile, then each of `--tiles` that
  divides the side), every 16-byte word of both tiles loaded into registers, then each
  written to the other tile's same place, untransposed (no shared memory): the lines SWAP
  reads and writes at that tile; with `--barrier` also with a block barrier between a
  pair's loads and its stores;
- pair, out of place: the same words written to a second buffer;
- stream, in place / out of place: every 16-byte word of x read and written back to its own
  place, or to a second buffer (a copy kernel).

Measured on an H200 (docs/inplace.md, "SWAP's access pattern"): tile rows of 128 bytes held
the pattern itself to 79-85% of a copy, rows of 256 bytes reached 89-93.5%. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import time

CASES = [
    "8192x8192:uint8",
    "16384x16384:uint8",
    "8192x8192:float16",
    "9280x9280:bfloat16",
    "8192x8192:float32",
    "8192x8192:float64",
]

SOURCE = r"""
typedef long long i64;
// The k-th pair of a matrix of t x t tiles: tile (I, J), J <= I (SWAP's walk)
__device__ __forceinline__ void locate(i64 k, i64& ti, i64& tj)
{
    ti = (i64)((sqrt(8.0 * (double)k + 1.0) - 1.0) * 0.5);
    if (ti * (ti + 1) / 2 > k) --ti;
    if ((ti + 1) * (ti + 2) / 2 <= k) ++ti;
    tj = k - ti * (ti + 1) / 2;
}

// Both tiles' words (WPR 16-byte words a tile row, TILE rows) loaded, then written crosswise
// to y (y == x: in place); BAR: a block barrier between a pair's loads and its stores
template <int TILE, int WPR, int THREADS, bool BAR>
__device__ __forceinline__ void pairs(const uint4* x, uint4* y, i64 row_words, i64 items)
{
    static_assert(THREADS % WPR == 0, "a thread keeps its word of a row");
    constexpr int ITERS = (TILE * WPR + THREADS - 1) / THREADS, RS = THREADS / WPR;
    const i64 own = (threadIdx.x / WPR) * row_words + threadIdx.x % WPR, step = RS * row_words;
    for (i64 item = blockIdx.x; item < items; item += gridDim.x) {
        i64 ti, tj;
        locate(item, ti, tj);
        const bool diagonal = ti == tj;
        const i64 a0 = ti * TILE * row_words + tj * WPR + own;
        const i64 b0 = tj * TILE * row_words + ti * WPR + own;
        uint4 a[ITERS], b[ITERS];
#pragma unroll
        for (int it = 0; it < ITERS; ++it) {
            if (threadIdx.x + it * THREADS < TILE * WPR) {
                a[it] = x[a0 + it * step];
                if (!diagonal) b[it] = x[b0 + it * step];
            }
        }
        if (BAR) __syncthreads();
#pragma unroll
        for (int it = 0; it < ITERS; ++it) {
            if (threadIdx.x + it * THREADS < TILE * WPR) {
                y[(diagonal ? a0 : b0) + it * step] = a[it];
                if (!diagonal) y[a0 + it * step] = b[it];
            }
        }
        if (BAR) __syncthreads();
    }
}

// Every word of x, 4 a thread in flight, written to y (y == x: back to its own place)
extern "C" __global__ void __launch_bounds__(256)
stream(const uint4* x, uint4* y, i64 words)
{
    const i64 step = (i64)gridDim.x * 256;
    for (i64 i = blockIdx.x * 256 + threadIdx.x; i < words; i += 4 * step) {
        uint4 v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
            if (i + k * step < words) v[k] = x[i + k * step];
#pragma unroll
        for (int k = 0; k < 4; ++k)
            if (i + k * step < words) y[i + k * step] = v[k];
    }
}
"""

# One tile and block size's pair kernels (TILE elements a side, WPR words a tile row)
PAIRS = r"""
extern "C" __global__ void __launch_bounds__({threads}, 1)
pair_free_{tile}_{threads}(const uint4* x, uint4* y, i64 row_words, i64 items)
{{
    pairs<{tile}, {wpr}, {threads}, false>(x, y, row_words, items);
}}

extern "C" __global__ void __launch_bounds__({threads}, 1)
pair_bar_{tile}_{threads}(const uint4* x, uint4* y, i64 row_words, i64 items)
{{
    pairs<{tile}, {wpr}, {threads}, true>(x, y, row_words, items);
}}
"""


def parse(text: str) -> tuple[tuple[int, int, int], str]:
    shape, dtype = text.split(":")
    dims = [int(v) for v in shape.split("x")]
    b, m, n = [1, *dims][-3:]
    return (b, m, n), dtype


def rows_for(state, bench, second, prog, shapes, barrier) -> list[tuple[str, object]]:
    """The runs timed for one case: (label, run(k) on set k), the copy first, then the
    served program, then the pattern kernels at its tile and at each (tile, threads) of
    `shapes` whose tiles divide the side."""
    from autotranspose.kernels.config import KernelConfig
    from autotranspose.runtime import driver as drv
    from autotranspose.runtime.compiler import load_source

    b, m, _ = bench.shape
    e, how = bench.elem_bytes, prog.steps[0].how
    params = how.spec.params
    served = bench.launcher(KernelConfig(e, kind="inplace", params=params))
    sms = state.info.multiprocessors
    tiles = [(params.tile, params.threads, how.blocks)]
    for tile, threads in shapes:
        if m % tile == 0 and (tile * e) % 16 == 0 and (tile, threads) != tiles[0][:2]:
            t = m // tile
            tiles.append((tile, threads, min(b * t * (t + 1) // 2, sms * max(1, 2048 // threads))))
    src = SOURCE + "".join(PAIRS.format(tile=t, threads=th, wpr=t * e // 16) for t, th, _ in tiles)
    names = ["stream"] + [f"pair_{k}_{t}_{th}" for t, th, _ in tiles for k in ("free", "bar")]
    k = load_source(state.arch, src, names)
    row_words, words = m * e // 16, b * m * m * e // 16
    stream_grid = (min(sms * 8, -(-words // 1024)), 1, 1)

    def y_of(j: int, x: int, out_of_place: bool) -> int:
        return int(second) + (j % bench.sets) * bench.stride if out_of_place else x

    def pair(kernel, tile: int, threads: int, blocks: int, out_of_place: bool):
        t = m // tile
        items = b * t * (t + 1) // 2

        def run(j: int) -> None:
            x = bench.matrix(j)
            y = y_of(j, x, out_of_place)
            kernel.call((blocks, 1, 1), (threads, 1, 1), "PPqq", x, y, row_words, items)

        return run

    def streamed(out_of_place: bool):
        def run(j: int) -> None:
            x = bench.matrix(j)
            k["stream"].call(stream_grid, (256, 1, 1), "PPq", x, y_of(j, x, out_of_place), words)

        return run

    def copy(j: int) -> None:
        x = bench.matrix(j)
        drv.memcpy_dtod(y_of(j, x, True), x, bench.nbytes)

    rows = [
        ("copy (driver)", copy),
        (f"served {params.key} ({how.blocks} blocks)", served),
    ]
    for tile, threads, blocks in tiles:
        at = f"tile {tile} ({tile * e} B rows), {threads} threads, {blocks} blocks"
        for kind in ("free", "bar") if barrier else ("free",):
            kernel = k[f"pair_{kind}_{tile}_{threads}"]
            bar = ", barrier" if kind == "bar" else ""
            rows.append((f"pair, in place{bar}: {at}", pair(kernel, tile, threads, blocks, False)))
            rows.append(
                (f"pair, out of place{bar}: {at}", pair(kernel, tile, threads, blocks, True))
            )
    rows += [("stream, in place", streamed(False)), ("stream, out of place", streamed(True))]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=CASES, metavar="MxN:DTYPE")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--tiles",
        nargs="*",
        default=["64x256", "128x512", "256x1024", "128x1024"],
        metavar="TILExTHREADS",
        help="pattern kernels at these tiles too (where they divide the side)",
    )
    ap.add_argument("--barrier", action="store_true", help="the barrier variants too")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in t.split("x")) for t in args.tiles]

    from autotranspose.dispatch import inplace as programs
    from autotranspose.plans.dtypes import element_type
    from autotranspose.runtime import driver as drv
    from autotranspose.runtime.compiler import activate
    from autotranspose.tuner.inplacemeasure import InplaceBench
    from autotranspose.tuner.measure import time_rotating

    state = activate(0)
    print(state.info, flush=True)
    start = time.time()
    for text in args.cases:
        (b, m, n), dtype = parse(text)
        e = element_type(dtype).size
        if m != n or (m * e) % 16:
            print(f"{text}: not a square of whole 16-byte rows, skipped", flush=True)
            continue
        bench = InplaceBench(state, e, (b, m, n))
        second = drv.Allocation(bench.stride * bench.sets, state.ctx)
        try:
            prog = programs.program(state, b, m, n, e)
            rows = rows_for(state, bench, second, prog, shapes, args.barrier)
            problem = bench.check(rows[1][1])
            print(
                f"=== {text} ({bench.nbytes / 1e6:.0f} MB, {bench.sets} sets)"
                f"{'  WRONG: ' + problem if problem else ''}",
                flush=True,
            )
            for rnd in range(args.rounds):
                secs = {}
                for label, run in rows if rnd % 2 == 0 else rows[::-1]:
                    secs[label] = time_rotating(drv, run, repeats=args.repeats)
                for label, _ in rows:
                    print(f"  {100 * secs[rows[0][0]] / secs[label]:6.1f}%  {label}", flush=True)
                print("  --", flush=True)
        except Exception as exc:  # a case that fails is a line, not a lost run
            print(f"  FAILED {text}: {type(exc).__name__}: {exc}"[:500], flush=True)
        finally:
            second.free()
            bench.close()
    print(f"done in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()

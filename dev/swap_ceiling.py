"""Developer tool: the access pattern's ceiling of SWAP (in-place squares of whole 16-byte rows),
beside the served kernel, on the same matrices in one process.

    python dev/swap_ceiling.py [--cases 8192x8192:uint8 ...] [--tiles 128x256 256x512 ...]
                               [--walks 1 0 c4 ...] [--barrier] [--repeats 7] [--rounds 2]

SWAP reads a tile pair (I, J), (J, I) and writes each transposed into the other's place: the
sectors a copy moves, once. Each row times, on the tuner's `InplaceBench` matrices (rotated
where they fit the L2 together) and as % of a device-to-device copy of the same bytes:

- served: transpose_()'s program for the case (the class's tuned or default parameters);
- pair, in place: a tile's grid and pair walk (the served tile, then each of `--tiles`; a
  side the tile does not divide cuts its last tiles), every 16-byte word of both tiles
  loaded into registers, then each written to the other tile's same place, untransposed (no
  shared memory): the lines SWAP reads and writes at that tile; with `--barrier` also with a
  block barrier between a pair's loads and its stores; by each of `--walks` (SWAP's, then
  orders that keep tiles sharing a 128-byte line apart in time or in one block);
- pair, out of place: the same words written to a second buffer;
- stream, in place / out of place: every 16-byte word of x read and written back to its own
  place, or to a second buffer (a copy kernel).

Measured on an H200 (docs/inplace.md, "SWAP's access pattern"): tile rows of 128 bytes held
the pattern itself to 79-85% of a copy, rows of 256 bytes reached 89-93.5%; rows off
128-byte lines cost the pattern 6-22 points in place, whatever the walk. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import itertools
import math
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

// One pair's words (WPR 16-byte words a tile row, TILE rows): both tiles loaded, then written
// crosswise to y (y == x: in place); BAR: a block barrier between the loads and the stores
template <int TILE, int WPR, int THREADS, bool BAR>
__device__ __forceinline__ void pair(const uint4* x, uint4* y, i64 row_words, i64 m, i64 base,
                                     i64 ti, i64 tj)
{
    static_assert(THREADS % WPR == 0, "a thread keeps its word of a row");
    constexpr int ITERS = (TILE * WPR + THREADS - 1) / THREADS, RS = THREADS / WPR;
    const i64 own = (threadIdx.x / WPR) * row_words + threadIdx.x % WPR, step = RS * row_words;
    const int r = threadIdx.x / WPR, w = threadIdx.x % WPR;
    const bool diagonal = ti == tj;
    const i64 a0 = base + ti * TILE * row_words + tj * WPR + own;
    const i64 b0 = base + tj * TILE * row_words + ti * WPR + own;
    // a tile's word (row, word) lies in the matrix (sides not a multiple of the tile)
    const bool a_col = tj * WPR + w < row_words, b_col = ti * WPR + w < row_words;
    uint4 a[ITERS], b[ITERS];
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
        const i64 rr = r + it * RS;
        if (threadIdx.x + it * THREADS < TILE * WPR) {
            if (ti * TILE + rr < m && a_col) a[it] = x[a0 + it * step];
            if (!diagonal && tj * TILE + rr < m && b_col) b[it] = x[b0 + it * step];
        }
    }
    if (BAR) __syncthreads();
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
        const i64 rr = r + it * RS;
        if (threadIdx.x + it * THREADS < TILE * WPR) {
            const bool in_a = ti * TILE + rr < m && a_col;
            const bool in_b = tj * TILE + rr < m && b_col;
            if (diagonal) {
                if (in_a) y[a0 + it * step] = a[it];
            } else {
                if (in_b) y[b0 + it * step] = in_a ? a[it] : b[it];
                if (in_a) y[a0 + it * step] = in_b ? b[it] : a[it];
            }
        }
    }
    if (BAR) __syncthreads();
}

// SWAP's walk by the grid stride over items of G x G tile pairs: the k-th item of a matrix
// is the group (GI, GJ), GJ <= GI, of pairs (GI*G + di, GJ*G + dj), J <= I, taken row by row
// by one block (G = 1: SWAP's walk, a pair an item). A 128-byte line that two horizontally
// adjacent tiles share is then read and written by one block where both lie in its group.
template <int TILE, int WPR, int THREADS, bool BAR, int G>
__device__ __forceinline__ void pairs(const uint4* x, uint4* y, i64 row_words, i64 items, i64 m)
{
    const i64 tiles = (m + TILE - 1) / TILE, groups = (tiles + G - 1) / G;
    const i64 per = groups * (groups + 1) / 2;
    for (i64 item = blockIdx.x; item < items; item += gridDim.x) {
        i64 gi, gj;
        locate(item % per, gi, gj);
        const i64 base = (item / per) * m * row_words;  // the batch's matrix
#pragma unroll 1
        for (int d = 0; d < G * G; ++d) {
            const i64 ti = gi * G + d / G, tj = gj * G + d % G;
            if (tj <= ti && ti < tiles) pair<TILE, WPR, THREADS, BAR>(x, y, row_words, m, base, ti, tj);
        }
    }
}

// The same pairs walked by parity classes: the pairs (I, J) with I = 2i + pi, J = 2j + pj,
// class by class ((pi, pj) = (0, 0), (0, 1), (1, 0), (1, 1)), each class by the triangle of
// (i, j). Two tiles of one class never lie side by side in a row, so no 128-byte line is
// shared by two pairs walked at the same time (but at the classes' seams).
template <int TILE, int WPR, int THREADS, bool BAR>
__device__ __forceinline__ void pairs_parity(const uint4* x, uint4* y, i64 row_words, i64 items,
                                             i64 m)
{
    const i64 tiles = (m + TILE - 1) / TILE, half = (tiles + 1) / 2;
    const i64 per = half * (half + 1) / 2;  // (i, j), j <= i, of one class and matrix
    for (i64 item = blockIdx.x; item < items; item += gridDim.x) {
        const i64 c = (item / per) % 4, base = (item / (4 * per)) * m * row_words;
        i64 i, j;
        locate(item % per, i, j);
        const i64 ti = 2 * i + (c >> 1), tj = 2 * j + (c & 1);
        if (tj <= ti && ti < tiles) pair<TILE, WPR, THREADS, BAR>(x, y, row_words, m, base, ti, tj);
    }
}

// The pairs of G x G groups (SWAP's triangle of groups, a group's pairs row by row) cut into
// one run of consecutive pairs a block: a block walks its run, so the tiles that share a
// 128-byte line lie in one block's run but at its ends, and the runs' lengths differ by one.
template <int TILE, int WPR, int THREADS, bool BAR, int G>
__device__ __forceinline__ void pairs_runs(const uint4* x, uint4* y, i64 row_words, i64 items,
                                           i64 m)
{
    const i64 tiles = (m + TILE - 1) / TILE, groups = (tiles + G - 1) / G;
    const i64 per = groups * (groups + 1) / 2 * G * G;  // a matrix's slots, some empty
    const i64 run = (items + gridDim.x - 1) / gridDim.x;
    const i64 end = min(items, (blockIdx.x + 1) * run);
    for (i64 item = blockIdx.x * run; item < end; ++item) {
        const i64 slot = item % per, base = (item / per) * m * row_words;
        i64 gi, gj;
        locate(slot / (G * G), gi, gj);
        const int d = (int)(slot % (G * G));
        const i64 ti = gi * G + d / G, tj = gj * G + d % G;
        if (tj <= ti && ti < tiles) pair<TILE, WPR, THREADS, BAR>(x, y, row_words, m, base, ti, tj);
    }
}

// SWAP's pairs over thread-block clusters: a cluster of GR x GC blocks takes a group of GR x GC
// pairs (rows of pairs GI*GR.., columns GJ*GC..) at once, a pair a block, groups walked by the
// grid stride (groups wholly above the diagonal skipped). The tiles of a group that share
// 128-byte lines are then held by blocks of one GPC at the same time.
template <int TILE, int WPR, int THREADS, bool BAR, int GR, int GC>
__device__ __forceinline__ void pairs_cluster(const uint4* x, uint4* y, i64 row_words,
                                              i64 items, i64 m)
{
    const i64 tiles = (m + TILE - 1) / TILE;
    const i64 gr = (tiles + GR - 1) / GR, gc = (tiles + GC - 1) / GC, per = gr * gc;
    const int rank = blockIdx.x % (GR * GC);
    const i64 clusters = gridDim.x / (GR * GC);
    for (i64 item = blockIdx.x / (GR * GC); item < items; item += clusters) {
        const i64 g = item % per, base = (item / per) * m * row_words;
        const i64 ti = (g / gc) * GR + rank / GC, tj = (g % gc) * GC + rank % GC;
        if (tj <= ti && ti < tiles) pair<TILE, WPR, THREADS, BAR>(x, y, row_words, m, base, ti, tj);
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

# One walk's pattern kernel at one tile and block size (TILE elements a side, WPR words a tile
# row), free of barriers or with one between a pair's loads and stores
KERNEL = r"""
extern "C" __global__ void {cluster}__launch_bounds__({threads}, 1)
pair_{kind}_{tile}_{threads}_{tag}(const uint4* x, uint4* y, i64 row_words, i64 items, i64 m)
{{
    {walker}<{tile}, {wpr}, {threads}, {bar}{more}>(x, y, row_words, items, m);
}}
"""


def parse(text: str) -> tuple[tuple[int, int, int], str]:
    shape, dtype = text.split(":")
    dims = [int(v) for v in shape.split("x")]
    b, m, n = [1, *dims][-3:]
    return (b, m, n), dtype


def walk_source(walk: str, tile: int, threads: int, e: int) -> str:
    """A walk's pattern kernels: "G" (G x G pairs an item), "0" (parity classes), "cG" (a
    run of pairs a block, in G x G groups), "kRxC" (clusters of R x C blocks, a pair each)."""
    cluster, tag = "", f"g{walk}"
    if walk.startswith("k"):
        gr, gc = (int(v) for v in walk[1:].split("x"))
        walker, more, tag = "pairs_cluster", f", {gr}, {gc}", walk
        cluster = f"__cluster_dims__({gr * gc}, 1, 1) "
    elif walk.startswith("c"):
        walker, more, tag = "pairs_runs", f", {walk[1:]}", walk
    elif walk == "0":
        walker, more = "pairs_parity", ""
    else:
        walker, more = "pairs", f", {walk}"
    return "".join(
        KERNEL.format(
            cluster=cluster,
            threads=threads,
            kind=kind,
            tile=tile,
            tag=tag,
            walker=walker,
            wpr=tile * e // 16,
            bar=bar,
            more=more,
        )
        for kind, bar in (("free", "false"), ("bar", "true"))
    )


def walk_items(walk: str, b: int, side: int) -> int:
    """The items a walk's kernel takes for b matrices of side x side tiles."""
    if walk.startswith("k"):  # groups of R x C pairs, a cluster's
        gr, gc = (int(v) for v in walk[1:].split("x"))
        return b * -(-side // gr) * -(-side // gc)
    if walk == "0":  # four parity classes of a triangle of half the tiles a side
        half = (side + 1) // 2
        return b * 4 * half * (half + 1) // 2
    g = int(walk.lstrip("c"))
    t = -(-side // g)  # groups of g x g tiles a side
    return b * t * (t + 1) // 2 * (g * g if walk.startswith("c") else 1)


def walk_label(walk: str) -> str:
    if walk.startswith("k"):
        return f", clusters of {walk[1:]} blocks over as many pairs"
    if walk == "0":
        return ", by parity classes"
    if walk.startswith("c"):
        return f", a run of pairs a block in groups of {walk[1:]}x{walk[1:]}"
    return f", groups of {walk}x{walk} pairs" if walk != "1" else ""


def rows_for(state, bench, second, prog, shapes, barrier, walks=("1",)) -> list[tuple[str, object]]:
    """The runs timed for one case: (label, run(k) on set k), the copy first, then the
    served program, then the pattern kernels at its tile and at each (tile, threads) of
    `shapes`, by each of `walks`."""
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
        if (tile * e) % 16 == 0 and (tile, threads) != tiles[0][:2]:
            t = -(-m // tile)
            tiles.append((tile, threads, min(b * t * (t + 1) // 2, sms * max(1, 2048 // threads))))
    src = SOURCE + "".join(walk_source(w, t, th, e) for t, th, _ in tiles for w in walks)
    tag = {w: w if w[0] in "ck" else f"g{w}" for w in walks}
    names = ["stream"] + [
        f"pair_{k}_{t}_{th}_{tag[w]}" for t, th, _ in tiles for w in walks for k in ("free", "bar")
    ]
    k = load_source(state.arch, src, names)
    row_words, words = m * e // 16, b * m * m * e // 16
    stream_grid = (min(sms * 8, -(-words // 1024)), 1, 1)

    def y_of(j: int, x: int, out_of_place: bool) -> int:
        return int(second) + (j % bench.sets) * bench.stride if out_of_place else x

    def pair(kernel, tile: int, threads: int, blocks: int, walk: str, out_of_place: bool):
        items = walk_items(walk, b, -(-m // tile))
        blocks = min(blocks, items)
        if walk.startswith("k"):  # whole clusters, a group each at most
            c = math.prod(int(v) for v in walk[1:].split("x"))
            blocks = max(c, min(blocks, items * c) // c * c)

        def run(j: int) -> None:
            x = bench.matrix(j)
            y = y_of(j, x, out_of_place)
            kernel.call((blocks, 1, 1), (threads, 1, 1), "PPqqq", x, y, row_words, items, m)

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
    for (tile, threads, blocks), w in itertools.product(tiles, walks):
        at = f"tile {tile} ({tile * e} B rows), {threads} threads, {blocks} blocks"
        at += walk_label(w)
        for kind in ("free", "bar") if barrier else ("free",):
            kernel = k[f"pair_{kind}_{tile}_{threads}_{tag[w]}"]
            bar = ", barrier" if kind == "bar" else ""
            for place, out in (("in place", False), ("out of place", True)):
                rows.append(
                    (f"pair, {place}{bar}: {at}", pair(kernel, tile, threads, blocks, w, out))
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
        help="pattern kernels at these tiles too",
    )
    ap.add_argument(
        "--walks",
        nargs="*",
        default=["1"],
        metavar="WALK",
        help="the pattern kernels' walks: G (G x G tile pairs an item; 1: SWAP's walk, a pair"
        " an item), 0 (pairs by parity classes of (I, J), no two side by side at once), cG (a"
        " run of consecutive pairs a block, in G x G groups), kRxC (clusters of R x C blocks"
        " over groups of R x C pairs at once)",
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
            rows = rows_for(state, bench, second, prog, shapes, args.barrier, args.walks)
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

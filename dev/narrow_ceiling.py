"""Odd-sided 1- and 2-byte transposes: the sectors and the pattern ceiling of wider
byte-permute tiles, against the served kernel and the copy (H200, one process).

For each case: the copy; the served launch (transpose()'s choice, first call raced) and its
pattern kernel; each forced byte-permute config of TILES (checked on fresh data, timed) and
its pattern (--no-patterns: none); and pattern kernels of tile geometries no kernel has yet
(GEOMETRIES, output window bytes x input segment bytes, the byte-permute halo and 16-byte
windows; --no-geometries: none). With `--paper` only the sector counts (no GPU):

    python3 dev/narrow_ceiling.py --paper uint8:30073x30073 bfloat16:12445x12445
    python3 dev/narrow_ceiling.py --out $OUT uint8:30073x30073 ...
"""

from __future__ import annotations

import argparse
import json
import time

from _probe import parse, within_budget

# byte-permute tiles forced per element size (tile_m x tile_n elements, per_thread): the served
# ones and the widest the kind runs. The 1-byte 256x256 tile (148 KiB, one block an SM) and its
# prefetching walk were measured with this tool and not kept (docs/perf-notes.md, "Wider
# byte-permute tiles and prefetching walks")
TILES = {
    1: ((128, 256, 1), (256, 128, 1)),
    2: ((64, 128, 2), (128, 128, 1)),
}
# pattern-only geometries: output window bytes x input segment bytes
GEOMETRIES = ((128, 256), (256, 256), (256, 512), (512, 256), (512, 512), (1024, 1024))


def geometry(s: int, shape: tuple[int, int, int], window: int, segment: int):
    """The byte-permute TileAccess of a tile of `window` output bytes x `segment` input
    bytes on a contiguous call, one block a tile (512 threads)."""
    from autotranspose.bench.pattern import CHUNK, TileAccess

    b, m, n = shape
    tm, tn, halo = window // s, segment // s, CHUNK // s
    rt = -(-(m + halo - 1) // tm)
    tiles = rt * -(-n // tn) * b
    return TileAccess(
        s, s, m, n, n, m, b, m * n, m * n, tile_m=tm, tile_n=tn, m_tiles=rt, halo=halo,
        window=CHUNK, in_word=CHUNK, out_word=CHUNK, raster="col", threads=512,
        grid=(min(tiles, 2**31 - 1), 1, 1), kind="geometry",
    )  # fmt: skip


def bound(t) -> tuple[float, float, float]:
    r, w = t.read_per_byte, t.written_per_byte
    return r, w, 200 / (r + w)


class Timer:
    """Checks (where asked) and times launches of one case, a row each."""

    def __init__(self, bench, copy_s: float, case: str, rows: list, repeats: int) -> None:
        self.bench, self.copy_s, self.case, self.rows, self.repeats = (
            bench, copy_s, case, rows, repeats,
        )  # fmt: skip

    def __call__(self, label: str, launch, check: bool, a=None) -> None:
        from autotranspose.bench.pattern import traffic

        problem = self.bench.check(launch) if check else None
        secs = None if problem else self.bench.time(launch, repeats=self.repeats)
        r = w = b = None
        if a is not None:
            r, w, b = bound(traffic(a))
        pct = None if secs is None else 100 * self.copy_s / secs
        self.rows.append({
            "case": self.case, "what": label, "pct": pct,
            "us": None if secs is None else secs * 1e6, "read": r, "written": w, "bound": b,
            "problem": problem,
        })  # fmt: skip
        shown = "   -  " if pct is None else f"{pct:6.1f}"
        sect = "" if r is None else f"  sectors {r:.3f}/{w:.3f} bound {b:.1f}"
        print(f"  {shown}%  {label}{sect}{'  ' + problem if problem else ''}", flush=True)


def paper(cases: list[str]) -> None:
    from autotranspose.bench.pattern import traffic
    from autotranspose.plans.dtypes import element_type

    for case in cases:
        name, shape = parse(case)
        s = element_type(name).size
        cells = []
        for window, segment in GEOMETRIES:
            r, w, b = bound(traffic(geometry(s, shape, window, segment)))
            cells.append(f"{window}x{segment}: {r:.3f}/{w:.3f} {b:.1f}")
        print(f"{case:28s} " + " | ".join(cells), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", help="DTYPE:MxN or DTYPE:BxMxN")
    ap.add_argument("--paper", action="store_true", help="sector counts only, no GPU")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget", type=float, default=200.0, help="seconds before skipping cases")
    ap.add_argument("--out", default=".")
    ap.add_argument("--no-geometries", action="store_true", help="no pattern-only geometries")
    ap.add_argument("--no-patterns", action="store_true", help="no pattern of the forced tiles")
    args = ap.parse_args()
    if args.paper:
        paper(args.cases)
        return
    from autotranspose.bench.ceiling import pattern_launch
    from autotranspose.bench.pattern import launch_access
    from autotranspose.dispatch.transpose import served
    from autotranspose.kernels.config import KernelConfig
    from autotranspose.plans.dtypes import element_type
    from autotranspose.runtime.compiler import activate, precompile
    from autotranspose.runtime.launch import make_launch
    from autotranspose.tuner.measure import Bench

    state = activate(0)
    print(state.info, flush=True)
    start, log = time.time(), []
    for case, name, shape in within_budget(args.cases, args.budget, start):
        et = element_type(name)
        s = et.size
        bench = Bench(state, s, shape)
        rows = []
        try:
            copy_s = bench.copy_time(repeats=args.repeats)

            timed = Timer(bench, copy_s, case, rows, args.repeats)
            choice = served(state, et, shape, *bench.pointers(0))
            cfg = choice.config
            b_, m, n = shape
            forced = [
                KernelConfig(s, tm, tn, 4 // s, pt, 0, "pad", "col", kind="prmt")
                for tm, tn, pt in TILES.get(s, ())
            ]
            forced = [c for c in forced if c.fits(state.info.limits) and c != cfg]
            precompile(state, [cfg, *forced])
            print(f"=== {case} served {cfg.key} ({choice.source})", flush=True)
            for label, c in (("served " + cfg.key, cfg), *((c.key, c) for c in forced)):
                launch = make_launch(state, c, b_, m, n, n, m, m * n, m * n)
                timed(label, launch, True)
                if c is cfg or not args.no_patterns:
                    a = launch_access(c, launch.scalars, launch.grid)
                    timed("  pattern", pattern_launch(state, a, served=c.key), False, a)
            for window, segment in () if args.no_geometries else GEOMETRIES:
                a = geometry(s, shape, window, segment)
                timed(f"geometry {window}x{segment} B", pattern_launch(state, a), False, a)
        except Exception as exc:  # a case that fails is a row, not a lost run
            print(f"  FAILED {case}: {type(exc).__name__}: {exc}"[:500], flush=True)
        finally:
            bench.close()
        log.extend(rows)
    with open(f"{args.out}/narrow_ceiling.json", "w") as f:
        json.dump(log, f)
    print(f"done in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()

"""Register transposes (docs/perf-notes.md, "Register transposes") against what transpose()
served before them, what it serves now and PyTorch, per case, as % of a device-to-device
copy of the same bytes: L2-cold (buffer sets rotated past the L2) and L2-warm (one set
repeated). Every config is checked against CuPy's transpose on fresh data, with the output's
bytes around it poisoned, at the case's pointer offsets, before it is timed.

Two steps, two processes (kernels of other kinds render as before, so a config the earlier
code serves is timed here by this code's launch):

    # the earlier code (its package on the path): what it serves each case, first calls on
    python3 dev/regt_check.py --served-json today.json CASES...
    # this code: today's configs, the regt config, what is served now, PyTorch
    python3 dev/regt_check.py --today today.json --out DIR CASES...

A case is DTYPE:MxN or DTYPE:BxMxN, optionally @IN,OUT (byte offsets of the input and output
pointers, 0-15).
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np


def parse(case: str) -> tuple[str, tuple[int, int, int], int, int]:
    case, _, offs = case.partition("@")
    dtype, dims = case.split(":")
    shape = tuple(int(v) for v in dims.split("x"))
    b, m, n = (1, *shape) if len(shape) == 2 else shape
    off_in, off_out = (int(v) for v in offs.split(",")) if offs else (0, 0)
    return dtype, (b, m, n), off_in, off_out


class Buffers:
    """`sets` input and output buffers of a case (each set 256-byte aligned, the case's offsets
    inside it, 16 bytes of guard after the output)."""

    def __init__(self, nbytes: int, sets: int, off_in: int, off_out: int) -> None:
        import cupy

        self.nbytes, self.sets, self.off_in, self.off_out = nbytes, sets, off_in, off_out
        self.stride = -(-(nbytes + 32) // 256) * 256
        self.src = cupy.empty(self.stride * sets, np.uint8)
        self.dst = cupy.empty(self.stride * sets, np.uint8)

    def pointers(self, k: int) -> tuple[int, int]:
        k %= self.sets
        return (
            self.src.data.ptr + k * self.stride + self.off_in,
            self.dst.data.ptr + k * self.stride + self.off_out,
        )

    def view(self, which, k: int = 0):
        off = self.off_in if which is self.src else self.off_out
        return which[k * self.stride + off : k * self.stride + off + self.nbytes]


def served_today(cases: list[str], path: str) -> None:
    """What this package's transpose() serves each case (its first call measured on these
    buffers): the config as a dict, and where it came from."""
    from autotranspose._compiler import activate
    from autotranspose._dispatch.transpose import served
    from autotranspose._dtypes import element_type

    state = activate(0)
    found = {}
    for case in cases:
        dtype, shape, off_in, off_out = parse(case)
        et = element_type(dtype)
        buf = Buffers(math.prod(shape) * et.size, 1, off_in, off_out)
        ch = served(state, et, shape, *buf.pointers(0))
        found[case] = {"config": ch.config.to_dict(), "source": ch.source, "key": ch.config.key}
        print(f"{case}: {ch.source} {ch.config.key}", flush=True)
    with open(path, "w") as f:
        json.dump(found, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--served-json", help="write what this package serves each case, and stop")
    ap.add_argument("--today", help="the --served-json file of the earlier code")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    if args.served_json:
        served_today(args.cases, args.served_json)
        return
    measure(args.cases, args.today, args.out)


def measure(cases: list[str], today_path: str | None, out: str) -> None:
    import cupy

    from autotranspose._compiler import activate

    state = activate(0)
    print(state.info, flush=True)
    today = json.load(open(today_path)) if today_path else {}
    rows = []
    for i, case in enumerate(cases):
        rows.append(one_case(state, case, today.get(case), i))
        cupy.get_default_memory_pool().free_all_blocks()
    with open(f"{out}/regt_check.json", "w") as f:
        json.dump(rows, f, indent=1)


def one_case(state, case: str, today: dict | None, seed: int) -> dict:
    """One case's copy, configs and PyTorch, checked and timed; prints its line."""
    import cupy
    import torch

    from autotranspose import _driver as drv
    from autotranspose._config import KernelConfig, for_call, regt_default
    from autotranspose._dispatch.transpose import served
    from autotranspose._dtypes import element_type
    from autotranspose._launch import make_launch
    from autotranspose._measure import time_rotating

    dtype, (b, m, n), off_in, off_out = parse(case)
    s = element_type(dtype).size
    nbytes = b * m * n * s
    l2 = max(state.info.l2_bytes, 1 << 20)
    sets = max(1, min(64, -(-4 * l2 // (2 * nbytes))))
    buf = Buffers(nbytes, sets, off_in, off_out)
    word = {1: np.uint8, 2: np.uint16}[s]
    rng = cupy.random.default_rng(seed)
    buf.src[:] = (rng.random(buf.src.size, dtype=cupy.float32) * 256).astype(cupy.uint8)
    want = cupy.ascontiguousarray(buf.view(buf.src).view(word).reshape(b, m, n).transpose(0, 2, 1))

    def copy(k: int) -> None:
        src, dst = buf.pointers(k)
        drv.memcpy_dtod(dst, src, nbytes)

    copy_cold = time_rotating(drv, copy)
    copy_warm = time_rotating(drv, lambda k: copy(0))
    row: dict = {"case": case, "copy_cold_s": copy_cold, "copy_warm_s": copy_warm}
    regt = regt_default(s, m, n)
    configs = {
        "today": KernelConfig.from_dict(today["config"]) if today else None,
        "regt": for_call(regt, m, n) if regt is not None else None,
        "served": served(state, element_type(dtype), (b, m, n), *buf.pointers(0)).config,
    }
    line = f"=== {case}"
    for label, cfg in configs.items():
        if cfg is None:
            continue
        launch = make_launch(state, cfg, b, m, n, n, m, m * n, m * n)

        def run(k: int, launch=launch) -> None:
            launch(*buf.pointers(k), None)

        buf.dst[: buf.stride] = 0xA5
        run(0)
        cupy.cuda.Device().synchronize()
        got = buf.view(buf.dst).view(word).reshape(b, n, m)
        ok = bool(cupy.array_equal(got, want))
        guard = buf.dst[off_out + nbytes : buf.stride]
        ok = ok and bool((guard == 0xA5).all()) and bool((buf.dst[:off_out] == 0xA5).all())
        cold = time_rotating(drv, run)
        warm = time_rotating(drv, lambda k, run=run: run(0))
        row[label] = {"key": cfg.key, "ok": ok, "cold_s": cold, "warm_s": warm}
        line += (
            f" | {label} {100 * copy_cold / cold:5.1f}% / warm {100 * copy_warm / warm:5.1f}%"
            f"{'' if ok else ' WRONG'} {cfg.key}"
        )
    if not off_in and not off_out:  # PyTorch on its own aligned tensors
        tdt = {"bfloat16": torch.bfloat16, "bool": torch.bool}.get(dtype) or getattr(torch, dtype)
        ts = [
            torch.as_tensor(buf.view(buf.src, k), device="cuda").view(tdt).reshape(b, m, n)
            for k in range(sets)
        ]
        cold = time_rotating(drv, lambda k: ts[k % sets].transpose(-1, -2).contiguous())
        warm = time_rotating(drv, lambda k: ts[0].transpose(-1, -2).contiguous())
        row["torch"] = {"cold_s": cold, "warm_s": warm}
        line += f" | torch {100 * copy_cold / cold:5.1f}% / warm {100 * copy_warm / warm:5.1f}%"
    print(line, flush=True)
    return row


if __name__ == "__main__":
    main()

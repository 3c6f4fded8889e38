"""Measuring a cast-transpose config on the GPU (`tune --cast`): correctness first, then
CUDA-event timing against a device-to-device copy of the same bytes.

A case is a pair, a contiguous (batch, m, n) input and whether the same-order output is
written too (`both`); every launch takes a device scale and raises a device amax, as an FP8
recipe's calls do. A candidate is right when its outputs and amax equal, bit for bit, those
of the pair's default config (`kinds.cast.default`, which the cast tests check against
PyTorch's own casts) on fresh random input, and the bytes after each output are untouched.
Inputs are finite (the top exponent bit cleared) and scaled past the float8 formats' largest
values, so saturation runs in every check. Buffers rotate over enough sets that they do not
fit in L2 together, as `measure.Bench`'s do; the copy ceiling moves half the bytes a call
reads plus writes, as `bench --cast` counts them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..kinds.cast import PAIRS
from ..plans.cast import CastPlan, plan_cast
from ..store.measurement import Measurement

SCALE = 256.0  # with inputs below 2 in magnitude: up to 512, past e4m3's 448
GUARD_BYTES = 4096
POISON = 0xA5
_FINITE = {4: 0xBFFFFFFF, 2: 0xBFFFBFFF}  # clears each element's top exponent bit


def contiguous_plan(shape: tuple[int, int, int], both: bool) -> CastPlan:
    """The launches of a cast-transpose of a contiguous (batch, m, n) input into contiguous
    outputs (one launch: the batch is the kernel's)."""
    b, m, n = shape
    y = (m * n, m, 1)  # (batch, n, m)
    z = (m * n, n, 1) if both else None
    return plan_cast((b, m, n), (0, 2, 1), (m * n, n, 1), y, z)


class CastBench:
    """Buffers, reference and timing for one (device, pair, shape, both)."""

    def __init__(self, state: Any, code: str, shape: tuple[int, int, int], both: bool) -> None:
        from ..runtime import driver as drv
        from .measure import _support

        self.drv, self.state, self.code, self.both = drv, state, code, both
        self.src, self.dst = PAIRS[code]
        self.shape = shape
        self.count = math.prod(shape)
        self.plan = contiguous_plan(shape, both)
        self.in_bytes = self.count * self.src.size
        self.out_bytes = self.count * self.dst.size
        outputs = 2 if both else 1
        self.traffic = self.in_bytes + outputs * self.out_bytes  # read + written
        l2 = max(state.info.l2_bytes, 1 << 20)
        self.sets = max(1, min(4096, -(-4 * l2 // max(self.traffic, 1))))
        self.in_stride = -(-self.in_bytes // 256) * 256
        self.out_stride = -(-self.out_bytes // 256) * 256 + GUARD_BYTES
        self.x = drv.Allocation(self.in_stride * self.sets, state.ctx)
        self.y = drv.Allocation(self.out_stride * self.sets, state.ctx)
        self.z = drv.Allocation(self.out_stride * self.sets, state.ctx) if both else None
        self.scale = drv.Allocation(4, state.ctx)
        self.amax = drv.Allocation(4, state.ctx)
        self.sup = _support(state)
        scale = np.array([SCALE], np.float32)
        drv.memcpy_htod(int(self.scale), scale.ctypes.data, 4)
        self._seed = 0xCA57

    def close(self) -> None:
        for buf in (self.x, self.y, self.z, self.scale, self.amax):
            if buf is not None:
                buf.free()

    def gbps(self, seconds: float) -> float:
        return self.traffic / seconds / 1e9

    def launcher(self, cfg: Any) -> Any:
        """`run(k)`: every launch of the plan on buffer set `k`, on the default stream, its
        arguments packed once per set."""
        from ..runtime.compiler import get_kernel
        from ..runtime.launch import CastLaunch

        # the launch cast_transpose() runs, packed once per buffer set
        prepared = CastLaunch(
            cfg, get_kernel(self.state, cfg), self.plan, self.src, self.dst, self.state
        )
        per_set = []
        for k in range(self.sets):
            x = int(self.x) + k * self.in_stride
            y = int(self.y) + k * self.out_stride
            z = int(self.z) + k * self.out_stride if self.z is not None else 0
            ptrs = (x, y, z, int(self.scale), 1.0, int(self.amax))
            per_set.append(prepared.packed(self.state.ctx, *ptrs))
        launch, sets = self.drv.launch, self.sets

        def run(k: int) -> None:
            for head, args in per_set[k % sets]:
                launch(head, None, args)

        return run

    def _outputs(self) -> list[np.ndarray]:
        """Set 0's outputs with their guards, and the amax, as host bytes."""
        found = []
        for buf in (self.y, self.z):
            if buf is not None:
                host = np.empty(self.out_bytes + GUARD_BYTES, np.uint8)
                self.drv.memcpy_dtoh(host.ctypes.data, int(buf), host.nbytes)
                found.append(host)
        amax = np.empty(4, np.uint8)
        self.drv.memcpy_dtoh(amax.ctypes.data, int(self.amax), 4)
        found.append(amax)
        return found

    def _run_poisoned(self, cfg: Any) -> list[np.ndarray]:
        for buf in (self.y, self.z):
            if buf is not None:
                self.drv.memset_d8(int(buf), POISON, self.out_stride)
        self.drv.memset_d32(int(self.amax), 0, 1)
        self.launcher(cfg)(0)
        self.state.synchronize()
        return self._outputs()

    def check(self, cfg: Any, reference: Any) -> str | None:
        """None when `cfg` writes what `reference` writes on fresh input (outputs bit for bit,
        amax, guards), else what went wrong."""
        from .measure import _grid_for

        self._seed += 1
        words = self.in_stride * self.sets // 4
        self.sup.fill.call(
            _grid_for(words), (256, 1, 1), "PqII", int(self.x), words, self._seed,
            _FINITE[self.src.size],
        )  # fmt: skip
        want = self._run_poisoned(reference)
        got = self._run_poisoned(cfg)
        names = ("out_t", "out", "amax") if self.both else ("out_t", "amax")
        for name, g, w in zip(names, got, want, strict=True):
            if name == "amax":
                if not np.array_equal(g, w):
                    return "wrong amax: differs from the default config's"
                continue
            body = slice(0, self.out_bytes)
            if not np.array_equal(g[body], w[body]):
                bad = int(np.count_nonzero(g[body] != w[body]))
                return f"wrong output: {bad} of {self.out_bytes} bytes of {name} differ"
            if np.any(g[self.out_bytes :] != POISON):
                return f"wrote past the end of {name} (the guard region was overwritten)"
        return None

    def time(self, run: Any, *, repeats: int = 7, min_ms: float = 2.0) -> float:
        """Median seconds per call of `run(k)` over rotating sets, by CUDA events: the GPU's
        time alone (`measure.time_rotating`)."""
        from .measure import spin_hold, time_rotating

        hold = spin_hold(self.state)
        return time_rotating(self.drv, run, repeats=repeats, min_ms=min_ms, hold=hold)

    def copy_time(self) -> float:
        """Median seconds of a device-to-device copy of half the bytes a call moves (read +
        written), over the input and output sets."""
        half = self.traffic // 2
        span = self.in_stride * self.sets
        dst_span = self.out_stride * self.sets
        if half > min(span, dst_span):  # a set smaller than half the traffic: one region
            return self._copy_time_owned(half)
        sets = max(1, min(self.sets, span // half, dst_span // half))
        x, y = int(self.x), int(self.y)
        return self.time(
            lambda k: self.drv.memcpy_dtod(y + (k % sets) * half, x + (k % sets) * half, half)
        )

    def _copy_time_owned(self, half: int) -> float:
        a = self.drv.Allocation(half, self.state.ctx)
        b = self.drv.Allocation(half, self.state.ctx)
        try:
            return self.time(lambda k: self.drv.memcpy_dtod(int(b), int(a), half))
        finally:
            a.free()
            b.free()


def measure_cast(bench: CastBench, cfg: Any, reference: Any, copy_gbps: float) -> Measurement:
    """Check `cfg` against the reference config on fresh data, then time it (with scale and
    amax on the device): `measure.judged`."""
    from .measure import judged

    return judged(
        bench, lambda: bench.launcher(cfg), lambda run: bench.check(cfg, reference), copy_gbps
    )

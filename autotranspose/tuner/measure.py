"""Measuring a config on the GPU: correctness first, then CUDA-event timing against a copy.

The results are :class:`~autotranspose.store.measurement.Measurement` records (a module of their
own, so the store and the tuner need none of this). The GPU work lives in functions and the
Bench class, which run in a context the caller made current (`compiler.activate`); this
module's top level touches no GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kernels.shapes import Layout, check_layout
from ..store.measurement import Measurement

# --- on the GPU -------------------------------------------------------------------------------

_THREADS = 256


@dataclass
class _Support:
    fill: Any
    count: Any
    naive: dict[int, Any]
    naive_strided: dict[int, Any]


_support_cache: dict[str, _Support] = {}


def _support(state: Any) -> _Support:
    """The measuring helpers for `state`'s architecture, compiled and loaded once."""
    sup = _support_cache.get(state.arch)
    if sup is None:
        from ..kernels.codegen import render_support
        from ..runtime.compiler import load_source

        sizes = (1, 2, 4, 8, 16)
        names = [
            "at_fill_random",
            "at_count_mismatch",
            *(f"at_naive_s{s}" for s in sizes),
            *(f"at_naive_strided_s{s}" for s in sizes),
        ]
        k = load_source(state.arch, render_support(), names)
        naive = {s: k[f"at_naive_s{s}"] for s in sizes}
        strided = {s: k[f"at_naive_strided_s{s}"] for s in sizes}
        sup = _support_cache[state.arch] = _Support(
            k["at_fill_random"], k["at_count_mismatch"], naive, strided
        )
    return sup


def _grid_for(n: int) -> tuple[int, int, int]:
    return (max(1, min(65535 * 16, -(-n // _THREADS))), 1, 1)


class Bench:
    """Buffers and timing for one (device, element size, shape): the place every candidate,
    the copy ceiling and the peers are measured, so their figures are comparable.

    Inputs and outputs are rotated over enough sets that they do not fit in L2 together, so
    the cache cannot flatter small shapes. The output of the first set has a guard region
    after it; checks poison both and demand the guard comes back untouched.

    With a `layout` (strides, `shapes.Layout`; None: contiguous) each set spans the strided
    extent of one launch on either side, and the check compares that whole extent: the gaps
    between the launch's elements must keep their poison, as the guard does.
    """

    GUARD_BYTES = 4096
    POISON = 0xA5

    def __init__(
        self, state: Any, elem_bytes: int, shape: tuple[int, int, int], layout: Any = None
    ) -> None:
        from ..runtime import driver as drv

        self.drv = drv
        self.state = state
        self.elem_bytes = elem_bytes
        self.batch, self.m, self.n = shape
        self.strided = check_layout(shape, layout)  # None: contiguous
        self.layout = self.strided or Layout.contiguous(shape)
        self.nbytes = self.batch * self.m * self.n * elem_bytes  # what one launch moves
        in_span, out_span = self.layout.spans(shape)
        self.out_bytes = out_span * elem_bytes  # nbytes unless strided
        l2 = max(state.info.l2_bytes, 1 << 20)
        self.sets = max(1, min(4096, -(-4 * l2 // max(2 * self.nbytes, 1))))
        self.stride = -(-max(in_span, out_span) * elem_bytes // 256) * 256
        self.src = drv.Allocation(self.stride * self.sets, state.ctx)
        self.dst = drv.Allocation(self.stride * self.sets + self.GUARD_BYTES, state.ctx)
        self.ref = drv.Allocation(self.stride, state.ctx)
        self.counter = drv.Allocation(4, state.ctx)
        self.sup = _support(state)
        self._seed = 0x5EED

    def close(self) -> None:
        for buf in (self.src, self.dst, self.ref, self.counter):
            buf.free()

    @property
    def bytes_moved(self) -> int:
        """Bytes read plus bytes written by one transpose."""
        return 2 * self.nbytes

    def pointers(self, k: int) -> tuple[int, int]:
        k %= self.sets
        return int(self.src) + k * self.stride, int(self.dst) + k * self.stride

    # correctness ---------------------------------------------------------------------------
    # The fill is ANDed with one of these, word by word. ALL_BITS: every bit pattern (what our
    # kernels, which move bytes, are checked on). FINITE_MASK clears the sign and top exponent
    # bits of every float16/32/64: positive finite values only, so a peer that computes (geam:
    # 1*x + 0*y) cannot turn -0.0 into +0.0, NaN or inf. BOOL_MASK leaves each byte 0 or 1, the
    # only bytes a bool holds: a peer that moves bools as values need not keep any other byte
    # (PyTorch's copy_ failed the check on random ones).
    ALL_BITS = 0xFFFFFFFF
    FINITE_MASK = 0x3FFF3FFF
    BOOL_MASK = 0x01010101

    def refill(self, mask: int = ALL_BITS) -> None:
        """Fresh random input in every set (every bit pattern, or what `mask` keeps of it), and
        the naive reference of set 0."""
        self._seed += 1
        words = self.stride * self.sets // 4
        self.sup.fill.call(
            _grid_for(words), (_THREADS, 1, 1), "PqII", int(self.src), words, self._seed, mask
        )
        total = self.batch * self.m * self.n
        if self.strided is None:
            self.sup.naive[self.elem_bytes].call(
                _grid_for(total),
                (_THREADS, 1, 1),
                "PPqqq",
                int(self.src),
                int(self.ref),
                self.batch,
                self.m,
                self.n,
            )
            return
        self.drv.memset_d8(int(self.ref), self.POISON, self.out_bytes)  # the gaps stay poisoned
        self.sup.naive_strided[self.elem_bytes].call(
            _grid_for(total),
            (_THREADS, 1, 1),
            "PPqqqqqqq",
            int(self.src),
            int(self.ref),
            self.batch,
            self.m,
            self.n,
            *self.layout,
        )

    def check(self, launch: Any, *, mask: int = ALL_BITS) -> str | None:
        """Run `launch(src, dst, stream)` on fresh data (`refill(mask)`) into a poisoned
        output; None when the output equals the reference bit for bit and the guard is
        intact, else what went wrong."""
        drv = self.drv
        self.refill(mask)
        drv.memset_d8(int(self.dst), self.POISON, self.stride + self.GUARD_BYTES)
        src, dst = self.pointers(0)
        launch(src, dst, None)
        drv.memset_d32(int(self.counter), 0, 1)
        nbytes = self.out_bytes
        words = nbytes // 4
        if words:
            self.sup.count.call(
                _grid_for(words),
                (_THREADS, 1, 1),
                "PPqP",
                int(self.dst),
                int(self.ref),
                words,
                int(self.counter),
            )
        bad = np.zeros(1, np.uint32)
        drv.memcpy_dtoh(bad.ctypes.data, int(self.counter), 4)
        tail = nbytes - words * 4
        out_tail = np.empty(tail + self.GUARD_BYTES, np.uint8)
        drv.memcpy_dtoh(out_tail.ctypes.data, int(self.dst) + words * 4, out_tail.nbytes)
        ref_tail = np.empty(tail, np.uint8)
        if tail:
            drv.memcpy_dtoh(ref_tail.ctypes.data, int(self.ref) + words * 4, tail)
        if bad[0] or not np.array_equal(out_tail[:tail], ref_tail):
            return f"wrong output: {int(bad[0])} of {words} words differ from the reference"
        if np.any(out_tail[tail:] != self.POISON):
            return "wrote past the end of the output (the guard region was overwritten)"
        return None

    # timing --------------------------------------------------------------------------------
    def time(
        self, launch: Any, *, repeats: int = 7, min_ms: float = 2.0, warm: bool = False
    ) -> float:
        """Median seconds per call of `launch(src, dst, stream)`, timed with CUDA events after
        a warm-up: on rotating buffers (L2-cold), or with `warm` on the same buffers every
        call, as a program repeats a call (L2-warm where input and output fit the L2)."""
        return time_rotating(
            self.drv,
            lambda k: launch(*self.pointers(0 if warm else k), None),
            repeats=repeats,
            min_ms=min_ms,
            hold=spin_hold(self.state),
        )

    def copy_time(self, **kwargs: Any) -> float:
        """Median seconds of a device-to-device copy of the same bytes: the ceiling."""
        drv = self.drv
        return self.time(lambda s, d, _stream: drv.memcpy_dtod(d, s, self.nbytes), **kwargs)

    def gbps(self, seconds: float) -> float:
        return self.bytes_moved / seconds / 1e9


# A repeat's calls are queued behind a spin of the GPU (`at_spin`) twice as long as the host
# took to queue them, so the events around them time the GPU alone. Without it a call whose
# host side outlasts its kernel is timed at the host's launch rate: torch.compile's guards and
# wrapper (tens of microseconds) ran int32 32x72x8584 by (0,2,1), a 79 MB permute, at 49.0% of
# a copy in `bench`, and 98.9 behind the spin (H200; docs/perf-notes.md, "Methods"). A held
# repeat queues at most HOLD_MAX_REPS calls (the stream's queue holds them all while it
# spins), and spins at most HOLD_MAX_S.
HOLD_MAX_REPS = 256
HOLD_MAX_S, HOLD_MIN_S = 50e-3, 20e-6


def spin_hold(state: Any) -> Callable[[float], None]:
    """`hold(seconds)`: queue a spin of the GPU on the default stream (`time_rotating`), the
    kernel a first call's race spins with (`firstcall.spinner`)."""
    from ..dispatch.firstcall import spinner

    spin = spinner(state)

    def hold(seconds: float) -> None:
        wait = min(HOLD_MAX_S, max(HOLD_MIN_S, seconds))
        spin.call((1, 1, 1), (1, 1, 1), "<Q", int(wait * 1e9))

    return hold


def time_rotating(
    drv: Any,
    run: Any,
    *,
    repeats: int = 7,
    min_ms: float = 2.0,
    hold: Callable[[float], None] | None = None,
) -> float:
    """Median seconds per call of `run(k)` (k: the rotating buffer set), by CUDA events: a
    warm-up, one call to size a repeat to at least `min_ms`, then `repeats` repeats. With
    `hold` (`spin_hold`) each repeat waits behind a spin twice the host's time to queue it
    (HOLD_*), so the figure is the GPU's time, whatever the host's share of a call."""
    start, end = drv.Event(), drv.Event()
    for k in range(3):
        run(k)
    t0 = time.perf_counter()
    start.record()
    run(0)
    end.record()
    host_one = time.perf_counter() - t0
    end.synchronize()
    one = max(end.ms_since(start), 1e-3)
    reps = max(3, min(HOLD_MAX_REPS if hold else 10000, int(min_ms / one) + 1))
    host_s = 0.0
    if hold is not None:  # what queueing a repeat costs the host, the GPU behind a spin
        hold(4 * reps * host_one + 1e-3)
        t0 = time.perf_counter()
        for k in range(reps):
            run(k)
        host_s = time.perf_counter() - t0
        end.record()
        end.synchronize()
    samples = []
    for _ in range(repeats):
        if hold is not None:
            hold(2 * host_s)
        start.record()
        for k in range(reps):
            run(k)
        end.record()
        end.synchronize()
        samples.append(end.ms_since(start) / 1e3 / reps)
    return float(np.median(samples))


def context_is_dead(state: Any) -> bool:
    """After a failed launch: is the CUDA context unusable (illegal address and the like)?"""
    try:
        state.synchronize()
    except Exception:
        return True
    return False


def judged(
    bench: Any, prepare: Callable[[], Any], check: Callable[[Any], str | None], copy_gbps: float
) -> Measurement:
    """A config's run made by `prepare()`, checked on fresh data by `check(run)` (None: right,
    else what is wrong), then timed by `bench.time(run)` (GB/s by `bench.gbps`). A run that
    fails to compile, load or launch is a "fail", one that writes wrong bytes "wrong":
    results, not exceptions. Every bench (transposes, casts, in-place) measures this way."""
    try:
        run = prepare()
        problem = check(run)
        if problem:
            return Measurement("wrong", copy_gbps=copy_gbps, error=problem)
        t = bench.time(run)
    except Exception as exc:
        return Measurement("fail", copy_gbps=copy_gbps, error=f"{type(exc).__name__}: {exc}"[:2000])
    return Measurement("ok", bench.gbps(t), copy_gbps, t * 1e6)


def measure_one(bench: Bench, cfg: Any, copy_gbps: float) -> Measurement:
    """Check `cfg` on fresh data, then time it, on the bench's layout (one launch, as
    transpose() or a permute's transpose pass makes it): `judged`."""
    from ..runtime.launch import make_launch

    return judged(
        bench,
        lambda: make_launch(bench.state, cfg, bench.batch, bench.m, bench.n, *bench.layout),
        bench.check,
        copy_gbps,
    )


def measure_configs(
    bench: Bench, configs: list[Any], copy_seconds: float | None = None
) -> list[Measurement]:
    """Compile ahead (batched, parallel), then check and time each config on `bench`."""
    from ..runtime.compiler import precompile

    failed = precompile(bench.state, configs)
    copy_gbps = bench.gbps(copy_seconds if copy_seconds is not None else bench.copy_time())
    results = []
    for cfg in configs:
        if cfg in failed:
            results.append(Measurement("fail", copy_gbps=copy_gbps, error=str(failed[cfg])[:2000]))
        else:
            results.append(measure_one(bench, cfg, copy_gbps))
    return results

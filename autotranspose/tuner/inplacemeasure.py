"""Measuring an in-place transpose config on the GPU (`tune --inplace`): correctness first,
then CUDA-event timing against a device-to-device copy of the same bytes.

A case is a contiguous (batch, m, n) matrix of `elem_bytes`-byte elements; a config
(`kinds.inplace`: `KernelConfig(e, kind="inplace", params=...)`) is the program of passes
transpose_() runs with those parameters (`runtime.inplace.build`, as dispatch/inplace.py
builds it), made one native program over tables and a scratch of the bench's own. A
candidate is right when, on fresh random bytes (every bit pattern), the matrix afterwards
holds, bit for bit, NumPy's transpose of what it held, and the guard bytes before and after
it are untouched. Matrices rotate over enough sets that they do not fit in L2 together, as
`measure.Bench`'s do (one set where the matrix alone is larger than L2: its passes evict
it anyway). GB/s counts the matrix's bytes read and written once (2 x its bytes), as `bench
--inplace` does; the copy ceiling is a device-to-device copy of the matrix's bytes, counted
the same way.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..plans.inplace import row_cycles
from ..store.measurement import Measurement

GUARD_BYTES = 4096
POISON = 0xA5
MAX_SETS = 4096
_ALL_BITS = 0xFFFFFFFF
_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def transposed_bytes(data: np.ndarray, elem_bytes: int, shape: tuple[int, int, int]) -> np.ndarray:
    """The bytes of `shape` (batch, m, n) `elem_bytes`-byte elements (`data`, uint8)
    transposed to (batch, n, m): the reference an in-place program's result must equal."""
    dtype = np.dtype(_WORDS.get(elem_bytes, f"V{elem_bytes}"))
    elements = data.view(dtype).reshape(shape)
    return np.ascontiguousarray(elements.transpose(0, 2, 1)).view(np.uint8).reshape(-1)


class InplaceBench:
    """Buffers, programs and timing for one (device, element size, shape).

    The matrices of the sets lie `stride` bytes apart, each with GUARD_BYTES before and
    after it; set k's starts at `matrix(k)`. Each config's tables are uploaded when it is
    made ready (`launcher`) and freed with the next; the scratch is the bench's, grown as
    needed."""

    def __init__(self, state: Any, elem_bytes: int, shape: tuple[int, int, int]) -> None:
        from ..runtime import driver as drv
        from .measure import _support

        self.drv, self.state, self.elem_bytes = drv, state, elem_bytes
        self.shape = shape
        self.nbytes = math.prod(shape) * elem_bytes
        l2 = max(state.info.l2_bytes, 1 << 20)
        self.sets = 1 if self.nbytes > l2 else min(MAX_SETS, -(-4 * l2 // self.nbytes))
        self.stride = -(-(self.nbytes + GUARD_BYTES) // 256) * 256
        self.buf = drv.Allocation(GUARD_BYTES + self.stride * self.sets, state.ctx)
        self.sup = _support(state)
        self._programs: dict[Any, Any] = {}
        self._tables: list[Any] = []
        self._scratch: Any = None
        self._cycles = functools.cache(row_cycles)  # one shape: its cycles found once
        self._seed = 0x1A9C

    def close(self) -> None:
        self._free_tables()
        for buf in (self._scratch, self.buf):
            if buf is not None:
                buf.free()

    def matrix(self, k: int) -> int:
        """Where set k's matrix starts (256-byte aligned, GUARD_BYTES after the last)."""
        return int(self.buf) + GUARD_BYTES + (k % self.sets) * self.stride

    def gbps(self, seconds: float) -> float:
        return 2 * self.nbytes / seconds / 1e9

    # --- programs ------------------------------------------------------------------------------
    def program(self, cfg: Any) -> Any:
        """`cfg`'s program for the bench's shape (compiled and loaded on first use; raises
        what compiling or loading raises)."""
        from ..runtime.inplace import build

        found = self._programs.get(cfg.params)
        if found is None:
            b, m, n = self.shape
            found = build(
                self.state, b, m, n, self.elem_bytes, False, cfg.params, True, self._cycles
            )
            self._programs[cfg.params] = found
        return found

    def precompile(self, configs: Sequence[Any]) -> dict[Any, Exception]:
        """Compile every pass kernel of `configs`' programs (nvcc calls in parallel), then load
        each program; the configs that failed, with their errors."""
        from ..runtime.compiler import precompile_specs
        from ..runtime.inplace import passes

        b, m, n = self.shape
        specs = []
        for cfg in configs:
            try:
                _, hows = passes(
                    self.state, b, m, n, self.elem_bytes, False, cfg.params, True, self._cycles
                )
            except Exception:  # reported by program() below
                continue
            specs += [h.spec for h in hows]
        precompile_specs(self.state, specs)
        failed: dict[Any, Exception] = {}
        for cfg in configs:
            try:
                self.program(cfg)
            except Exception as exc:
                failed[cfg] = exc
        return failed

    def launcher(self, cfg: Any) -> Callable[[int], None]:
        """`run(k)`: `cfg`'s program on set k's matrix, on the default stream: its passes as one
        native program (transpose_()'s fast path), its tables uploaded here."""
        from ..runtime.inplace import native, upload_table

        prog = self.program(cfg)
        ctx = self.state.ctx
        self._free_tables()
        tables = []
        for step in prog.steps:
            if step.table_key is None:
                tables.append(0)
            else:
                self._tables.append(upload_table(step, ctx))
                tables.append(self._tables[-1].ptr)
        if prog.scratch_bytes and (
            self._scratch is None or self._scratch.nbytes < prog.scratch_bytes
        ):
            if self._scratch is not None:
                self.state.synchronize()  # work queued on it is done
                self._scratch.free()
                self._scratch = None
            self._scratch = self.drv.Allocation(prog.scratch_bytes, ctx)
        scratch = self._scratch.ptr if prog.scratch_bytes else 0
        runs = native(prog, tables, ctx, scratch).run
        matrix = self.matrix

        def run(k: int) -> None:
            runs(matrix(k), 0, None)

        return run

    def _free_tables(self) -> None:
        if self._tables:
            self.state.synchronize()  # work queued with them is done
        for table in self._tables:
            table.free()
        self._tables = []

    # --- checking ------------------------------------------------------------------------------
    def fill(self) -> np.ndarray:
        """Set 0's matrix filled with fresh random bytes (every bit pattern) between poisoned
        guards; returns those bytes as the host holds them."""
        from .measure import _grid_for

        drv, at = self.drv, self.matrix(0)
        self._seed += 1
        drv.memset_d8(at - GUARD_BYTES, POISON, GUARD_BYTES + self.stride)
        words = -(-self.nbytes // 4)
        self.sup.fill.call(_grid_for(words), (256, 1, 1), "PqII", at, words, self._seed, _ALL_BITS)
        drv.memset_d8(at + self.nbytes, POISON, GUARD_BYTES)  # the last word's spill
        data = np.empty(self.nbytes, np.uint8)
        drv.memcpy_dtoh(data.ctypes.data, at, self.nbytes)
        return data

    def result(self) -> np.ndarray:
        """Set 0's matrix with its guards, as host bytes (after the device's work)."""
        self.state.synchronize()
        found = np.empty(self.nbytes + 2 * GUARD_BYTES, np.uint8)
        self.drv.memcpy_dtoh(found.ctypes.data, self.matrix(0) - GUARD_BYTES, found.nbytes)
        return found

    def check(
        self,
        run: Callable[[int], None],
        reference: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> str | None:
        """None when `run(0)` leaves set 0's matrix holding the transpose of fresh random
        bytes, bit for bit, and both guards untouched; else what went wrong. `reference`
        (bytes in -> bytes expected; the NumPy transpose unless given) lets the tests check
        the check."""
        data = self.fill()
        want = (reference or self.reference)(data)
        run(0)
        found = self.result()
        got = found[GUARD_BYTES : GUARD_BYTES + self.nbytes]
        if not np.array_equal(got, want):
            bad = int(np.count_nonzero(got != want))
            return (
                f"wrong output: {bad} of {self.nbytes} bytes differ from the transpose of the input"
            )
        if np.any(found[:GUARD_BYTES] != POISON):
            return "wrote before the matrix (the guard region before it was overwritten)"
        if np.any(found[GUARD_BYTES + self.nbytes :] != POISON):
            return "wrote past the end of the matrix (the guard region after it was overwritten)"
        return None

    def reference(self, data: np.ndarray) -> np.ndarray:
        return transposed_bytes(data, self.elem_bytes, self.shape)

    # --- timing --------------------------------------------------------------------------------
    def time(self, run: Callable[[int], None], *, repeats: int = 7, min_ms: float = 2.0) -> float:
        """Median seconds per call of `run(k)` over rotating sets, by CUDA events (what the
        matrix holds does not change an in-place program's work), the GPU's time alone
        (`measure.time_rotating`)."""
        from .measure import spin_hold, time_rotating

        hold = spin_hold(self.state)
        return time_rotating(self.drv, run, repeats=repeats, min_ms=min_ms, hold=hold)

    def copy_time(self) -> float:
        """Median seconds of a device-to-device copy of the matrix's bytes: from set k to
        set k + 1, or (one set) into memory of its own."""
        drv, nbytes = self.drv, self.nbytes
        if self.sets > 1:
            return self.time(lambda k: drv.memcpy_dtod(self.matrix(k + 1), self.matrix(k), nbytes))
        other = drv.Allocation(nbytes, self.state.ctx)
        try:
            return self.time(lambda k: drv.memcpy_dtod(int(other), self.matrix(0), nbytes))
        finally:
            other.free()


def measure_inplace(bench: InplaceBench, cfg: Any, copy_gbps: float) -> Measurement:
    """Check `cfg`'s program on fresh data, then time it: `measure.judged`."""
    from .measure import judged

    return judged(bench, lambda: bench.launcher(cfg), bench.check, copy_gbps)

"""Timing and checking for `autotranspose bench`: each case's peers checked against the
reference on the same buffers, then timed with CUDA events against the copy of the same bytes
(`bench_case`, `bench_permute_case`), and the host's cost of small calls (`host_costs`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..plans.dtypes import element_type
from .peers import (
    HOST_COST_CASES,
    PEERS,
    PERMUTE_PEERS,
    host_cost_calls,
    peer_mask,
    permute_peers,
    transpose_peers,
)


@dataclass(frozen=True)
class Row:
    """One peer on one (shape, dtype)."""

    shape: tuple[int, ...]  # (batch, m, n) for a transpose, x's shape for a permute
    dtype: str
    peer: str
    us: float | None
    gbps: float | None
    of_copy: float | None
    note: str = ""
    axes: tuple[int, ...] | None = None  # a permute case: x of `shape` permuted by `axes`
    # the pattern's row (`bench --ceiling`): bytes of the 32-byte sectors its launches read
    # and write per byte of the call (1.0: not a byte more; None: not modelled)
    read_per_byte: float | None = None
    written_per_byte: float | None = None


PATTERN = "pattern"  # the peer name of a call's pattern ceiling (`bench.ceiling`)
# a call's pattern moved in aligned 16-byte words, where its served words are narrower
# (`ceiling.widened`: the same sectors, fewer instructions)
PATTERN_WIDE = "pattern16"


def ceiling_row(
    bench: Any,
    build: Callable[[], Any],
    shape: tuple[int, ...],
    dtype: str,
    copy_s: float,
    *,
    repeats: int,
    warm: bool,
    axes: tuple[int, ...] | None = None,
    peer: str = PATTERN,
) -> Row:
    """The pattern's row (`peer`: PATTERN, or PATTERN_WIDE): the `bench.ceiling.Ceiling` that `build` makes, its launches timed
    as every peer is (the same buffers, events and repeats), its sectors per byte; a note
    where it has no pattern kernel or could not be built or run (the run goes on)."""
    try:
        ceiling = build()
    except Exception as exc:
        note = f"no pattern: {type(exc).__name__}: {exc}"[:200]
        return Row(shape, dtype, peer, None, None, None, note, axes)
    t = ceiling.traffic
    per = (t.read_per_byte, t.written_per_byte) if t is not None else (None, None)
    if ceiling.run is None:
        return Row(shape, dtype, peer, None, None, None, ceiling.note, axes, *per)
    try:
        secs = bench.time(ceiling.run, repeats=repeats, warm=warm)
    except Exception as exc:  # a note, not a crashed run
        return Row(shape, dtype, peer, None, None, None, f"{type(exc).__name__}: {exc}"[:200], axes, *per)  # fmt: skip
    return Row(shape, dtype, peer, secs * 1e6, bench.gbps(secs), copy_s / secs, ceiling.note, axes, *per)  # fmt: skip


class PermuteCheck:
    """Correctness of a permute peer on `bench`'s buffers: input set 0 and the output (with
    its guard region) read back and compared with np.transpose, bit for bit."""

    def __init__(
        self, bench: Any, shape: tuple[int, ...], axes: tuple[int, ...], dtype: str
    ) -> None:
        self.bench, self.shape, self.axes, self.dtype = bench, shape, axes, dtype

    def __call__(self, fn: Callable, mask: int) -> str | None:
        b = self.bench
        drv = b.drv
        b.refill(mask)
        drv.memset_d8(int(b.dst), b.POISON, b.stride + b.GUARD_BYTES)
        src, dst = b.pointers(0)
        fn(src, dst, None)
        b.state.synchronize()
        x = np.empty((*self.shape, b.elem_bytes), np.uint8)  # elements as their bytes
        drv.memcpy_dtoh(x.ctypes.data, src, b.nbytes)
        got = np.empty(b.nbytes + b.GUARD_BYTES, np.uint8)
        drv.memcpy_dtoh(got.ctypes.data, dst, got.nbytes)
        want = np.transpose(x, (*self.axes, len(self.axes))).ravel()
        bad = int(np.count_nonzero(got[: b.nbytes] != want))
        if bad:
            return f"wrong output: {bad} of {b.nbytes} bytes differ from np.transpose"
        if np.any(got[b.nbytes :] != b.POISON):
            return "wrote past the end of the output (the guard region was overwritten)"
        return None


def bench_permute_case(
    shape: tuple[int, ...],
    axes: tuple[int, ...],
    dtype: str,
    *,
    device: int = 0,
    peers: Sequence[str] = PERMUTE_PEERS,
    repeats: int = 7,
    warm: bool = False,
    ceiling: bool = False,
) -> list[Row]:
    """Time every peer on one permute (shape, axes, dtype) against the copy of the same
    bytes; each is checked against np.transpose first (a peer that fails is a note, not a
    time). `warm`: every call on the same buffers (`Bench.time`). `ceiling`: the served
    steps' pattern too, a row of its own (`bench.ceiling`)."""
    from ..runtime.compiler import activate
    from ..tuner.measure import Bench

    state = activate(device)
    total = int(np.prod(shape))
    bench = Bench(state, element_type(dtype).size, (1, 1, total))
    check = PermuteCheck(bench, shape, axes, dtype)
    rows: list[Row] = []

    def row(peer: str, t: float | None, note: str) -> Row:
        if t is None:
            return Row(shape, dtype, peer, None, None, None, note, axes)
        return Row(shape, dtype, peer, t * 1e6, bench.gbps(t), copy_s / t, note, axes)

    try:
        launches = permute_peers(bench, shape, axes, dtype)
        copy_s = bench.copy_time(repeats=repeats, warm=warm)
        for peer in peers:
            fn, note = launches.get(peer, (None, "unknown peer"))
            if fn is None:
                rows.append(row(peer, None, note))
                continue
            mask = Bench.ALL_BITS if peer == "autotranspose" else peer_mask(dtype)
            try:
                problem = None if peer == "copy" else check(fn, mask)
            except Exception as exc:  # a peer that cannot take this case (cuTENSOR's limits)
                problem = f"{type(exc).__name__}: {exc}"[:200]
            if problem:
                rows.append(row(peer, None, f"{note}: {problem}"))
                continue
            t = copy_s if peer == "copy" else bench.time(fn, repeats=repeats, warm=warm)
            rows.append(row(peer, t, note))
        ours = launches.get("autotranspose", (None, ""))[0]
        if ceiling and ours is not None:
            from .ceiling import permute_ceiling, widens

            build = lambda: permute_ceiling(state, ours.plan, ours.steps)  # noqa: E731
            rows.append(ceiling_row(bench, build, shape, dtype, copy_s, repeats=repeats,
                                    warm=warm, axes=axes))  # fmt: skip
            if widens(ours.plan, ours.steps):
                wide = lambda: permute_ceiling(state, ours.plan, ours.steps, wide=True)  # noqa: E731
                rows.append(ceiling_row(bench, wide, shape, dtype, copy_s, repeats=repeats,
                                        warm=warm, axes=axes, peer=PATTERN_WIDE))  # fmt: skip
    finally:
        bench.close()
    return rows


def bench_case(
    shape: tuple[int, int, int],
    dtype: str,
    *,
    device: int = 0,
    config: Any = None,
    peers: Sequence[str] = PEERS,
    repeats: int = 7,
    warm: bool = False,
    ceiling: bool = False,
) -> list[Row]:
    """Time every peer on one (shape, dtype); each is checked against the reference first.
    Without `config`, autotranspose runs what transpose() would choose for this call.
    `warm`: every call on the same buffers (`Bench.time`). `ceiling`: the served launch's
    pattern too, a row of its own (`bench.ceiling`)."""
    from ..dispatch.transpose import served
    from ..runtime.compiler import activate
    from ..tuner.measure import Bench

    state = activate(device)
    s = element_type(dtype).size
    source = "given"
    bench = Bench(state, s, shape)
    rows: list[Row] = []
    try:
        if config is None:  # as transpose() would serve it (a first call measures if untuned)
            choice = served(state, element_type(dtype), shape, *bench.pointers(0))
            config, source = (choice.config, choice.source) if choice else (None, "copy")
        launches = transpose_peers(bench, dtype, config)
        name = config.key if config is not None else "row copy (one column or row a matrix)"
        launches["autotranspose"] = (launches["autotranspose"][0], f"{name} ({source})")
        copy_s = bench.copy_time(repeats=repeats, warm=warm)
        for peer in peers:
            fn, note = launches.get(peer, (None, "unknown peer"))
            if fn is None:
                rows.append(Row(shape, dtype, peer, None, None, None, note))
                continue
            if peer != "copy":
                values = peer in ("geam", "cupy", "torch")  # they move values, not bytes
                mask = peer_mask(dtype) if values else Bench.ALL_BITS
                try:
                    problem = bench.check(fn, mask=mask)
                except Exception as exc:
                    if peer == "autotranspose":
                        raise
                    problem = f"{type(exc).__name__}: {exc}"[:200]  # a note, not a crashed run
                if problem:
                    rows.append(Row(shape, dtype, peer, None, None, None, f"{note}: {problem}"))
                    continue
            t = copy_s if peer == "copy" else bench.time(fn, repeats=repeats, warm=warm)
            rows.append(Row(shape, dtype, peer, t * 1e6, bench.gbps(t), copy_s / t, note))
        if ceiling:
            from .ceiling import transpose_ceiling, transpose_widens

            served = launches["autotranspose"][0]
            build = lambda: transpose_ceiling(state, served, bench.nbytes)  # noqa: E731
            rows.append(ceiling_row(bench, build, shape, dtype, copy_s, repeats=repeats, warm=warm))
            if transpose_widens(served):
                wide = lambda: transpose_ceiling(state, served, bench.nbytes, wide=True)  # noqa: E731
                rows.append(ceiling_row(bench, wide, shape, dtype, copy_s, repeats=repeats,
                                        warm=warm, peer=PATTERN_WIDE))  # fmt: skip
    finally:
        bench.close()
    return rows


HOST_COST_CHUNK = 200  # calls timed between two synchronizations: well under the driver's
# launch-queue depth (about 1000), so no launch ever waits for the GPU to drain the queue


def host_costs(
    shape: tuple[int, int] = (64, 64), calls: int = 5000, rounds: int = 3
) -> dict[str, float | None]:
    """Host-timed microseconds per call of a small float32 transpose, ours and CuPy's and
    PyTorch's own, into a preallocated out ("<who>/<lib>/out") and into a new output
    ("<who>/<lib>/new"). All in one process, interleaved, each the best of `rounds`.

    Only the host's time is counted: calls run in chunks of HOST_COST_CHUNK and the GPU
    drains between chunks, outside the clock. Back-to-back calls without that would measure
    the GPU's rate of tiny kernels instead, once the launch queue fills."""
    from ..runtime.compiler import activate

    activate(0)
    fns: dict[str, tuple[Any, Any]] = {}
    costs: dict[str, float | None] = {}
    for who, lib in HOST_COST_CASES:
        found = host_cost_calls(who, lib, shape)
        for i, mode in enumerate(("out", "new")):
            key = f"{who}/{lib}/{mode}"
            costs[key] = None
            if found is not None:
                fns[key] = (found[i], found[2])
    for _ in range(rounds):
        for key, (fn, sync) in fns.items():
            for _ in range(100):
                fn()
            sync()
            spent, done = 0.0, 0
            while done < calls:
                t0 = time.perf_counter()
                for _ in range(HOST_COST_CHUNK):
                    fn()
                spent += time.perf_counter() - t0
                done += HOST_COST_CHUNK
                sync()
            us = spent / done * 1e6
            costs[key] = us if costs[key] is None else min(costs[key], us)
    return costs

"""Calls nobody tuned: the first call of a class times a small portfolio and keeps the fastest.

Lookup answers every call, but for a class nobody tuned on this GPU its answer is a guess (the
nearest class's result, a kernel kind's default) that can lose tens of points to another
config the space holds (H200: complex128 32x1048576 was served 67.8% of copy where the space
holds 98%). So the first call of such a class, before its launch, times a few candidates on
the call's own buffers and stream (`policy.candidates` lists them):

- the guess itself (so the result is never slower than what lookup would have served),
- the defaults of every kernel kind that can run the call (tiled, staged, byte-permute, flat),
- the nearest tuned and shipped results of other classes (`lookup.neighbours`),
- the direct kernel for the call's shape (`config.direct_default`: the seed documents'
  strategy, for 4- to 16-byte elements) and the seed documents' config (32x32 tile, +1
  padding) as a tiled kernel, robust on every shape;
- for few columns, a tiled tile of 16 or 32 columns (`config.few_cols_default`);
- for a side of 2 to 8 elements, the narrow direct tiles (`config.narrow_configs`);
- for the short sides of 1- and 2-byte elements where it won, the register transpose
  rendered for the call's side (`config.regt_default`);

then up to `REFINE_ROUNDS` rounds of the winner's one-step neighbours (`config.neighbours`),
while the winner keeps changing and the budget lasts: on the H200 the best config of an
untuned class was mostly a tile or per_thread step or two from the portfolio's winner.
It keeps the fastest for every later call of the class (`lookup.remember`), and `winners`
records it in the tuning database, where other processes find it. The measurement
costs at most `BUDGET_S` seconds of GPU time (rounds stop when the next would exceed it);
kernels not yet compiled are compiled first, in parallel, once per machine (nvcc's disk cache).

Switch it off with ``AUTOTRANSPOSE_FIRST_CALL=0`` or :func:`set_enabled` (then calls get
lookup's guess). It is skipped, and tried again on a later call, while the stream is being
captured into a CUDA graph (timing needs a synchronisation, which capture forbids).
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from ..errors import AutotransposeError, KernelLaunchError
from ..kernels.codegen import render_support
from ..kernels.config import KernelConfig, neighbours, pair_steps
from ..runtime import driver as _driver
from ..runtime.compiler import DeviceState, Kernel, _cached, load_source, precompile
from ..runtime.env import Switch
from ..runtime.launch import Launch

ENV_VAR = "AUTOTRANSPOSE_FIRST_CALL"
BUDGET_S = 0.2  # GPU seconds one first call may spend measuring
ROUNDS = 5  # each candidate is timed this often (median), budget permitting
MIN_TIMED_S = 200e-6  # a timing covers at least this much GPU time (small calls repeat):
# event timings of one short call scatter by several microseconds
REFINE_ROUNDS = 2  # rounds of the winner's neighbours after the portfolio
REFINE_STEPS = 8  # neighbours timed per round (with the winner again, as the new guess)
MARGIN = 0.01  # another candidate replaces the guess only when faster by more than this:
# the guess was chosen for a reason, and noise must not trade it for a slower config
# The race (`race`), for transposes' portfolios, permute's passes and casts. Timing a few microseconds of kernels by events around
# calls queued from Python measures the host's launch rate where the host is the slower
# side: the K/V head swap (16 MB, L2-resident, ~6 us a call) ranked its passes 2-6 points
# apart by noise and served a packed box at 77.9% of copy where the row copy ran at 95.2 (an
# H100). So each timed batch waits behind a spin of the GPU (`at_spin`, twice the host's time
# to queue the batch, at most SPIN_MAX_S) and times the GPU alone; the candidates are timed
# in ROUNDS rounds, each round in another order; and the fastest rival replaces the
# guess only if it then wins again head to head: CONFIRM_ROUNDS pairs of batches, the
# order alternating, its median faster by CONFIRM_MARGIN and faster in CONFIRM_WINS of the
# pairs (the guess was chosen for a reason; the outcome's seconds for the two are
# those of the pairs). Timed so, one pass's figure repeated within 0.7 points over three
# first calls (H100: the h = 2 swap's row copy 110.8 / 110.1 / 110.4% of copy), while the
# packed box beat the row copy of h = 4-7 by 1.6-2.4 points in the steady state: a 2%
# margin kept the row copy in 9 of 12 such first calls, so the margin is 1%.
CONFIRM_ROUNDS, CONFIRM_WINS, CONFIRM_MARGIN = 8, 6, 0.01
SPIN_MAX_S, SPIN_MIN_S = 2e-3, 20e-6

K = TypeVar("K", bound=Hashable)  # what a race ranks: a config, or a permute's pass

_switch = Switch(ENV_VAR)  # set_enabled() overrides the environment
# The latest measurements of this process, newest last: (device name, element bytes, shape
# class, Outcome). For looking into what a first call found (`autotranspose lookup` shows the
# stored result); bounded, so a long-running service does not grow it.
history: deque[tuple[str, int, object, Outcome[KernelConfig]]] = deque(maxlen=256)


def set_enabled(on: bool | None) -> None:
    """Turn first-call measurement on or off for this process (None: back to the
    environment variable, on by default)."""
    _switch.set(on)


def enabled() -> bool:
    return _switch.on() and not getattr(_held, "off", False)


def globally_enabled() -> bool:
    """Whether first calls measure in this process (whatever this thread holds off)."""
    return _switch.on()


_held = threading.local()


@contextlib.contextmanager
def held_off() -> Iterator[None]:
    """No first-call measurement in this thread while inside (a call prepared without
    buffers to measure on); other threads are not affected."""
    before = getattr(_held, "off", False)
    _held.off = True
    try:
        yield
    finally:
        _held.off = before


@dataclass(frozen=True)
class Outcome(Generic[K]):
    """What a first-call measurement found: the fastest candidate (a config, or a permute's
    pass) and every candidate's median seconds per call (None: it failed to compile or
    launch)."""

    best: K
    seconds: dict[K, float | None]
    gpu_s: float  # GPU time spent timing


class Runner(Protocol):
    """What a race times: a Launch, or a permute's steps."""

    def run(self, src: int, dst: int, stream: int | None, ctx: int) -> None: ...


_measuring = threading.Lock()  # one measurement at a time per process: they share the GPU


def measure(
    state: DeviceState,
    configs: Sequence[KernelConfig],
    make: Callable[[KernelConfig], Runner],
    src: int,
    dst: int,
    stream: int | None,
    ctx: int,
    budget_s: float = BUDGET_S,
) -> Outcome[KernelConfig] | None:
    """Time `configs` (prepared by `make`: a transpose's Launch, a cast's launches) on the
    call's buffers and stream; None when the stream is being captured into a graph or
    nothing could run. The first config is the
    guess: another must beat it by more than MARGIN."""
    if _driver.is_capturing(stream):
        return None
    failed = precompile(state, configs)
    launches: dict[KernelConfig, Runner] = {}
    for c in configs:
        if c in failed:
            continue
        try:
            launches[c] = make(c)
        except AutotransposeError:  # e.g. a grid too large for this shape: skipped
            continue
    outcome = race(launches, configs[0], state, src, dst, stream, ctx, budget_s)
    if outcome is None:
        return None
    return Outcome(outcome.best, {c: outcome.seconds.get(c) for c in configs}, outcome.gpu_s)


def spinner(state: DeviceState) -> Kernel:
    """`at_spin` (templates/common/support.cu.j2) on `state`'s architecture, loaded once."""
    return _cached(
        state.arch,
        "at_spin",
        lambda: load_source(state.arch, render_support(), ["at_spin"])["at_spin"],
    )


def race(
    runners: Mapping[K, Runner],
    guess: K,
    state: DeviceState,
    src: int,
    dst: int,
    stream: int | None,
    ctx: int,
    budget_s: float = BUDGET_S,
) -> Outcome[K] | None:
    """Time each of `runners` (`guess` and its rivals: configs, a permute's passes) on the
    call's buffers and stream and return the fastest, the GPU's time only (ROUNDS,
    CONFIRM_*, SPIN_*: why and how). A runner whose launch fails is left out; None when none ran. The
    caller checks that the stream is not being captured (timing synchronises)."""
    if not runners:
        return None
    spin = spinner(state)
    gpu: dict[K, float] = {}
    host: dict[K, float] = {}
    reps: dict[K, int] = {}
    spent = 0.0
    with _measuring, _driver.on_context(ctx):
        start, end = _driver.Event(), _driver.Event()

        def waits(p: K) -> float:
            """The spin before a batch of `p`: twice the host's time to queue the batch."""
            return min(SPIN_MAX_S, max(SPIN_MIN_S, 2 * reps[p] * host[p]))

        def timed(p: K) -> float:
            """Seconds a call of `p` takes the GPU: a batch of reps[p] calls behind a spin."""
            nonlocal spent
            wait = waits(p)
            spin.call((1, 1, 1), (1, 1, 1), "<Q", int(wait * 1e9), stream=stream)
            start.record(stream)
            for _ in range(reps[p]):
                runners[p].run(src, dst, stream, ctx)
            end.record(stream)
            end.synchronize()
            t = end.ms_since(start) / 1e3
            spent += t + wait
            return t / reps[p]

        for p, runner in runners.items():  # warm-up: what a call costs the host and the GPU
            try:
                runner.run(src, dst, stream, ctx)
                _driver.synchronize(ctx)
                t0 = time.perf_counter()
                start.record(stream)
                runner.run(src, dst, stream, ctx)
                end.record(stream)
                host[p] = time.perf_counter() - t0
                end.synchronize()
            except KernelLaunchError:
                continue
            gpu[p] = end.ms_since(start) / 1e3
            spent += 2 * gpu[p]
            reps[p] = max(1, min(64, int(MIN_TIMED_S / max(gpu[p], 1e-7))))
        if not gpu:
            return None
        order = list(gpu)
        times: dict[K, list[float]] = {p: [] for p in order}
        round_s = sum(reps[p] * gpu[p] + waits(p) for p in order)
        for r in range(ROUNDS):
            if spent + round_s > budget_s:
                break
            for p in order[r % len(order) :] + order[: r % len(order)]:
                times[p].append(timed(p))
        medians = {p: statistics.median(v) if v else gpu[p] for p, v in times.items()}
        best = min(medians, key=medians.__getitem__)
        if guess in medians and best != guess:
            best, rival = guess, best
            if medians[rival] * (1 + MARGIN) < medians[guess]:
                pair_s = sum(reps[p] * gpu[p] + waits(p) for p in (guess, rival))
                head: dict[K, list[float]] = {guess: [], rival: []}
                for r in range(CONFIRM_ROUNDS):
                    if spent + pair_s > budget_s:
                        break
                    for p in (guess, rival) if r % 2 == 0 else (rival, guess):
                        head[p].append(timed(p))
                if len(head[rival]) == CONFIRM_ROUNDS:
                    wins = sum(a < g for a, g in zip(head[rival], head[guess], strict=True))
                    medians = {**medians, **{p: statistics.median(v) for p, v in head.items()}}
                    if wins >= CONFIRM_WINS and medians[rival] < medians[guess] * (
                        1 - CONFIRM_MARGIN
                    ):
                        best = rival
    return Outcome(best, {p: medians.get(p) for p in runners}, spent)


def search(
    state: DeviceState,
    configs: Sequence[KernelConfig],
    make: Callable[[KernelConfig], Launch],
    src: int,
    dst: int,
    stream: int | None,
    ctx: int,
    runnable: Callable[[KernelConfig], bool],
    budget_s: float = BUDGET_S,
) -> Outcome[KernelConfig] | None:
    """`measure` the portfolio `configs` (the guess first), then refine: time the winner
    again with up to REFINE_STEPS of its runnable neighbours, the winner standing as the
    guess (MARGIN), for up to REFINE_ROUNDS rounds while a quarter of the budget is left; a
    round where no single step beat the winner is followed by one of its two-field steps
    (`config.pair_steps`). One Outcome for all of it; `gpu_s` counts every round."""
    outcome = measure(state, configs, make, src, dst, stream, ctx, budget_s)
    if outcome is None:
        return None
    seconds = dict(outcome.seconds)
    best, spent = outcome.best, outcome.gpu_s
    pairs = False  # the next round times the winner's two-field steps
    for _ in range(REFINE_ROUNDS):
        near = pair_steps(best) if pairs else neighbours(best)
        steps = [c for c in near if c not in seconds and runnable(c)]
        if not steps or budget_s - spent < budget_s / 4:
            break
        more = measure(
            state, [best, *steps[:REFINE_STEPS]], make, src, dst, stream, ctx, budget_s - spent
        )
        if more is None:
            break
        spent += more.gpu_s
        seconds.update(more.seconds)
        if more.best == best and pairs:
            break
        # no single step helped: two fields at once next (a tile and per_thread, often)
        pairs, best = more.best == best, more.best
    return Outcome(best, seconds, spent)

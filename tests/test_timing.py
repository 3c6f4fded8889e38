"""The bench's and tuner's timing protocol (`tuner.measure.time_rotating`) on a simulated GPU
queue, no GPU needed: events around calls queued by a host that is slower than the GPU time the
host's launch rate, and the spin before each repeat (`hold`) makes them time the GPU's work."""

from __future__ import annotations

import types

import numpy as np
import pytest

from autotranspose.tuner import measure


class _Queue:
    """One stream: work queued at the host's clock starts when the GPU is free and the host has
    queued it; an event's time is when the GPU reaches it."""

    def __init__(self) -> None:
        self.host = 0.0  # the host's clock (what time.perf_counter reads)
        self.free = 0.0  # when the GPU finishes what is queued

    def queue(self, seconds: float) -> float:
        self.free = max(self.free, self.host) + seconds
        return self.free

    def driver(self) -> types.SimpleNamespace:
        q = self

        class Event:
            t = 0.0

            def record(self, stream: int | None = 0) -> Event:
                self.t = q.queue(0.0)
                return self

            def synchronize(self) -> None:
                q.host = max(q.host, self.t)

            def ms_since(self, start: Event) -> float:
                return (self.t - start.t) * 1e3

        return types.SimpleNamespace(Event=Event)


def _time(host_s: float, gpu_s: float, hold: bool, monkeypatch: pytest.MonkeyPatch):
    q = _Queue()
    monkeypatch.setattr(measure, "time", types.SimpleNamespace(perf_counter=lambda: q.host))
    holds: list[float] = []
    runs: list[int] = []

    def run(k: int) -> None:  # the host spends host_s queueing a kernel of gpu_s
        q.host += host_s
        q.queue(gpu_s)
        runs.append(k)

    def spin(seconds: float) -> None:
        holds.append(seconds)
        q.queue(min(measure.HOLD_MAX_S, max(measure.HOLD_MIN_S, seconds)))

    got = measure.time_rotating(q.driver(), run, repeats=5, min_ms=2.0, hold=spin if hold else None)
    return got, holds, runs


@pytest.mark.parametrize("trial", range(4))
def test_a_repeat_behind_the_spin_times_the_gpu_not_the_host(trial, monkeypatch):
    rng = np.random.default_rng()
    gpu_s = float(rng.uniform(2e-6, 40e-6))
    host_s = gpu_s * float(rng.uniform(2.0, 20.0))  # the host is the slower side
    # events around calls alone: the host's launch rate
    without, _, _ = _time(host_s, gpu_s, False, monkeypatch)
    assert without == pytest.approx(host_s, rel=0.1)
    # behind the spin: the GPU's own time, each repeat held twice the host's queueing time
    held, holds, runs = _time(host_s, gpu_s, True, monkeypatch)
    assert held == pytest.approx(gpu_s, rel=1e-6)
    reps = (len(runs) - 4) // 6  # 3 warm-up calls and one sizing call, then 1 + 5 repeats
    assert 3 <= reps <= measure.HOLD_MAX_REPS
    assert len(holds) == 6
    assert all(h == pytest.approx(2 * reps * host_s) for h in holds[1:])


def test_where_the_gpu_is_the_slower_side_the_spin_changes_nothing(monkeypatch):
    rng = np.random.default_rng()
    gpu_s = float(rng.uniform(50e-6, 500e-6))
    host_s = gpu_s / float(rng.uniform(2.0, 20.0))
    without, _, _ = _time(host_s, gpu_s, False, monkeypatch)
    held, _, _ = _time(host_s, gpu_s, True, monkeypatch)
    # without: the GPU's time plus the first call's host latency spread over a repeat
    assert gpu_s <= without <= gpu_s + host_s
    assert held == pytest.approx(gpu_s, rel=1e-6)

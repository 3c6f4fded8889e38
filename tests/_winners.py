"""Processes of the first-call persistence tests (module level: spawned processes import them).

A child settles one class through `winners.settle` with a stand-in measurement that logs each
time it runs (one line per measurement, with the process id), as the GPU measurement would run
its portfolio; the parent counts the lines.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from autotranspose import _winners as winners
from autotranspose._config import KernelConfig, default_config, seed_config
from autotranspose._device import DeviceInfo
from autotranspose._shapes import shape_class

DEVICE = DeviceInfo("Test GPU 4242", (9, 0), multiprocessors=132)
SHAPE = (1, 3000, 5000)
CLS = shape_class(*SHAPE, 4)
CALL = winners.Call(DEVICE, "float32", 4, SHAPE, CLS, False)
GUESS = default_config(4, max_vector=4)
WINNER = seed_config(4)  # the measurement's winner, a real config of the space


def logging_measure(
    log: str | os.PathLike[str],
    config: KernelConfig = WINNER,
    gbps: float = 2500.0,
    delay: float = 0.0,
):
    """A measurement stand-in: logs that it ran, takes `delay` seconds, finds `config`."""

    def measure() -> winners.Winner:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(delay)
        return winners.Winner(config, gbps, seconds=2 * SHAPE[1] * SHAPE[2] * 4 / gbps / 1e9)

    return measure


def measured(log: str | os.PathLike[str]) -> list[str]:
    p = Path(log)
    return p.read_text().split() if p.exists() else []


def settle_in_child(url: str, log: str, delay: float, start: Any, out: Any) -> None:
    """Settle CALL's class against the database at `url` once every process is ready."""
    os.environ["AUTOTRANSPOSE_DB"] = url
    os.environ.pop(winners.ENV_VAR, None)
    winners.writer()  # open the writer before the race: the race is for the claim
    start.wait(60)
    choice = winners.settle(CALL, logging_measure(log, delay=delay))
    out.put((os.getpid(), None if choice is None else (choice.source, choice.config.key)))


def claim_and_die(url: str, claimed: Any) -> None:
    """Claim CALL's class as a first call would, then die without releasing it (a crash
    mid-measurement)."""
    os.environ["AUTOTRANSPOSE_DB"] = url
    store = winners.writer()
    assert store is not None
    assert store.claim(winners.STUDY, winners.claim_key(CALL), winners.owner())
    claimed.set()
    time.sleep(600)  # killed by the parent

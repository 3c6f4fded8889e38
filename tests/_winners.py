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

from autotranspose.dispatch import winners
from autotranspose.kernels.config import KernelConfig, default_config, seed_config
from autotranspose.kernels.shapes import shape_class
from autotranspose.runtime.device import DeviceInfo

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


# --- eight processes making their first calls at once (tests/test_winners.py) -------------------
def race_classes(n: int) -> list[winners.Call]:
    """CALL's class and n - 1 others (more rows), as a program's first calls meet them."""
    calls = []
    for k in range(n):
        shape = (1, SHAPE[1] * 2**k, SHAPE[2])
        calls.append(CALL._replace(shape=shape, cls=shape_class(*shape, 4)))
    return calls


def own_winner(index: int) -> KernelConfig:
    """What process `index`'s measurement finds: a config of its own, so that a result served
    from another process's measurement is told apart from one measured here."""
    from itertools import islice

    from autotranspose.kernels.config import config_space

    return next(islice(config_space("float32"), 3 * index, None))


def race_child() -> None:
    """One of several processes (run as a script: argv = database URL, log, index, folder of
    the start barrier, the measurement's seconds per class). Each makes the first call of the
    same classes once all are ready, as `dispatch` does: lookup's guess first, then
    `winners.settle` with a measurement that takes its seconds and finds `own_winner(index)`.
    Prints one JSON line: per class the seconds the call took, whether this process measured
    it and the config served (None: lookup's guess), then for a class served the guess, the
    config lookup serves once the class is no longer pending; and every warning."""
    import json
    import sys
    import warnings

    from autotranspose.dispatch import lookup
    from autotranspose.kernels import codegen

    url, log, index, barrier = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    delays = [float(d) for d in sys.argv[5].split(",")]
    os.environ["AUTOTRANSPOSE_DB"] = url
    mine = own_winner(index)
    calls = race_classes(len(delays))
    codegen.kernel_version(mine)  # what a GPU process has done before it measures
    winners.writer()
    for call in calls:  # as `dispatch.pick` does before a first call: the guess is cached
        lookup.choose(DEVICE, 4, call.cls)
    (barrier / f"ready-{index}").touch()
    deadline = time.monotonic() + 120
    while not (barrier / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    report: dict[str, Any] = {"calls": [], "later": {}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k, (call, delay) in enumerate(zip(calls, delays, strict=True)):
            ran = []

            def measure(delay: float = delay, ran: list[float] = ran, k: int = k) -> winners.Winner:
                ran.append(delay)
                return logging_measure(f"{log}.{k}", mine, delay=delay)()

            started = time.monotonic()
            choice = winners.settle(call, measure)
            took = time.monotonic() - started
            served = None if choice is None else choice.config.key
            report["calls"].append({"class": k, "s": took, "measured": bool(ran), "served": served})
        generation = lookup.generation
        deadline = time.monotonic() + 20
        while winners.pending() and time.monotonic() < deadline:
            time.sleep(0.02)
        report["pending"] = len(winners.pending())
        report["generation_moved"] = lookup.generation != generation
        for k, call in enumerate(calls):
            if report["calls"][k]["served"] is None:
                choice = lookup.choose(DEVICE, 4, call.cls)
                report["later"][str(k)] = [choice.source, choice.config.key]
    report["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    print(json.dumps(report))

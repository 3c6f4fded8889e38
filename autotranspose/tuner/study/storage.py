"""Optuna's storage for the tuner's studies, and the heartbeat that tells live trials from those of
a killed process.

The storage itself is opened by the store (`store.studies.optuna_storage`: our engine arguments,
the retries while Optuna creates its tables); this module adds what the tuner wants of it.
"""

from __future__ import annotations

import copy
import threading
import warnings
from collections.abc import Iterable

import optuna
from optuna.trial import FrozenTrial, Trial

from ...store.studies import optuna_storage

# A process's running trials are marked alive every HEARTBEAT_INTERVAL seconds; one silent for
# GRACE_PERIOD seconds belongs to a killed process and is failed and retried. A batch may spend
# a while in nvcc, but the heartbeat runs on its own thread, so the grace period need not
# cover a batch, only a stalled process.
HEARTBEAT_INTERVAL = 5
GRACE_PERIOD = 30


def open_storage(
    url: str, *, heartbeat_interval: int = HEARTBEAT_INTERVAL, grace_period: int = GRACE_PERIOD
) -> optuna.storages.RDBStorage:
    """Optuna's storage on our database URL, with the heartbeat that finds dead trials.

    A trial whose heartbeat stopped (its process was killed) is failed by the next process
    that looks and, unless it was measured, enqueued again, so its config is retried
    (`RetryUnmeasured`); a live process's trials keep beating and are left alone.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna_storage(
            url,
            heartbeat_interval=heartbeat_interval,
            grace_period=grace_period,
            heartbeat_stale_trial_callback=RetryUnmeasured(max_retry=2),
        )


def was_measured(trial: Trial | FrozenTrial) -> bool:
    """Whether a trial got a measurement (its status, set before Optuna is told): what counts
    toward a shape's budget, and what a stale trial's retry would only repeat."""
    return "status" in trial.user_attrs


# What a stale trial's retry is queued with: what it is to measure. The rest (its status,
# ratio, error, the GPU it ran on) belonged to the attempt that died.
RETRIED_ATTRS = ("shape", "config")


class RetryUnmeasured(optuna.storages.RetryHeartbeatStaleTrialCallback):
    """Optuna's retry of a stale trial (queued again with its parameters), for a trial with no
    measurement only, and with its shape and config alone. A trial whose process died after
    setting its status but before telling Optuna was measured (the store has the result) and
    counts, failed, as it is; Optuna's copy would carry that status, and count while it
    waited and again once run, for nothing new."""

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if was_measured(trial):
            return
        retried = copy.copy(trial)
        retried.user_attrs = {k: v for k, v in trial.user_attrs.items() if k in RETRIED_ATTRS}
        super().__call__(study, retried)


def trial_id(trial: Trial | FrozenTrial) -> int:
    """The storage's id of a trial, unique across the whole database (unlike its number)."""
    # Optuna has no public accessor for it, which the heartbeat and the claims need.
    return trial._trial_id


class Heartbeat:
    """Marks this process's running trials alive. Optuna beats only inside study.optimize(),
    and the tuner asks and tells trials itself."""

    def __init__(self, storage: optuna.storages.RDBStorage, interval: int) -> None:
        self._storage = storage
        self._interval = interval
        self._ids: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="autotranspose-heartbeat", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def add(self, trial_id: int) -> None:
        self._storage.record_heartbeat(trial_id)  # at once: a trial with no beat is never stale
        with self._lock:
            self._ids.add(trial_id)

    def discard(self, ids: Iterable[int]) -> None:
        with self._lock:
            self._ids.difference_update(ids)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                ids = sorted(self._ids)
            for trial_id in ids:
                try:
                    self._storage.record_heartbeat(trial_id)
                except Exception:  # a missed beat is retried next interval
                    pass

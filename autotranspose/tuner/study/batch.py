"""One round of a run: up to k trials asked of the sampler, each mapped to a config nobody has tried
on the shape, then measured here (claimed), answered from the store (measured already) or taken
from the process that holds its claim; on any interrupt, every trial of the round that has no
measurement is abandoned and every claim it made is released.

Trials are asked in batches so that the objective can compile a whole batch in one nvcc call
before it measures any of it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator

import optuna
from optuna.trial import Trial, TrialState

from ...errors import AutotransposeError, TuningError
from ...kernels.config import KernelConfig
from ...store.measurement import Measurement
from .run import POLL_S, Run
from .storage import HEARTBEAT_INTERVAL, trial_id

Pair = tuple[Trial, KernelConfig]
_CTRL_C = threading.Event()  # a Ctrl-C reached a process that `remember_ctrl_c` set up


def remember_ctrl_c() -> None:
    """In a tuning process's main thread: a Ctrl-C raises KeyboardInterrupt as Python's own
    handler does, and is remembered, so that `check_ctrl_c` raises it again where Python
    swallowed it. Raised inside a weakref callback or a __del__ (the garbage collector runs
    those anywhere), a KeyboardInterrupt is only printed: a GPU's process of `tune --devices`,
    told once by its parent, kept tuning until the parent killed it, its trials left RUNNING
    and its claims held (tests/test_multigpu.py's Ctrl-C test, under load)."""

    def interrupted(signum: int, frame: object) -> None:
        _CTRL_C.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)


def check_ctrl_c() -> None:
    """Raise the KeyboardInterrupt of a remembered Ctrl-C (`remember_ctrl_c`), at a point
    where it unwinds the run: every trial then abandoned, every claim released."""
    if _CTRL_C.is_set():
        raise KeyboardInterrupt


@contextlib.contextmanager
def holding_ctrl_c() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) until the block ends, then deliver it. Optuna's ask writes the
    new trial's row, RUNNING, before it returns the trial: an interrupt in between left a
    trial no handler knew to abandon. Off the main thread (Python raises KeyboardInterrupt
    only there) or under a handler set outside Python, it holds nothing."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    held: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            signal.raise_signal(signal.SIGINT)


class Batch:
    """One round of `run`'s trials, and what it must undo if it is interrupted. `taken` holds
    the keys of configs tried or being tried on the shape; the batch adds its own."""

    def __init__(self, run: Run, taken: set[str]) -> None:
        self.run = run
        self.taken = taken
        self.asked: list[Pair] = []
        self.finished: set[int] = set()  # trial numbers told a measurement or abandoned
        self.claimed: dict[str, Trial] = {}  # config key -> the trial holding its claim
        self.recorded: set[str] = set()  # config keys measured and stored by this batch
        self.current: Trial | None = None  # asked and owned, not yet in `asked`

    def ask_and_measure(self, k: int) -> None:
        """Ask up to `k` trials and see each one finished."""
        try:
            self._ask(k)
            self._settle()
        except BaseException as exc:
            self._undo(f"interrupted: {type(exc).__name__}: {exc}"[:500])
            raise
        finally:
            if self.run.heartbeat is not None:
                self.run.heartbeat.discard(trial_id(t) for t, _ in self.asked)

    # --- asking ---------------------------------------------------------------------------------
    def _ask(self, k: int) -> None:
        run = self.run
        heartbeat = run.heartbeat
        assert heartbeat is not None
        for _ in range(k):
            check_ctrl_c()
            with holding_ctrl_c():  # ask writes the RUNNING row before it returns it
                try:
                    trial = run.study.ask(run.space.distributions)
                except optuna.exceptions.UpdateFinishedTrialError:
                    # a queued trial another process ended (failed as stale, or dropped as
                    # over the budget) before this ask had written its parameters: ask again
                    continue
                if not run.owns(trial):
                    continue
                self.current = trial  # an interrupt from here on abandons it too
            heartbeat.add(trial_id(trial))
            try:
                trial.set_user_attr("shape", run.shape_text)
                every = run.study.get_trials(deepcopy=False)
                if not run.within_budget(trial.number, every):
                    run.abandon(trial, "over the trial budget: other processes filled it first")
                    heartbeat.discard([trial_id(trial)])
                    break
                # What other processes started since this batch began is taken too.
                self.taken.update(
                    key
                    for t in every
                    if t.state == TrialState.RUNNING
                    and t.number != trial.number
                    and t.user_attrs.get("shape") == run.shape_text
                    and (key := t.user_attrs.get("config")) is not None
                )
                config = run.space.config_for(trial.params, self.taken)
                trial.set_user_attr("config", config.key)
                if run.device_index is not None:
                    trial.set_user_attr("device_index", run.device_index)
            except optuna.exceptions.UpdateFinishedTrialError:
                # Another process ended the trial between this ask and now (a queued trial
                # it dropped as over the budget, or one failed as stale): it is not this
                # run's to measure. Ask again.
                heartbeat.discard([trial_id(trial)])
                self.current = None
                continue
            self.taken.add(config.key)
            self.asked.append((trial, config))
            self.current = None

    # --- measuring, or taking the result from the store ----------------------------------------
    def _settle(self) -> None:
        """Measure what this batch claimed, wait for what others hold, then answer the trials
        that repeat a config of the batch from its one measurement."""
        leaders: dict[str, Trial] = {}
        followers: list[Pair] = []
        to_measure: list[Pair] = []
        waiting: list[Pair] = []
        for trial, config in self.asked:
            if config.key in leaders:  # the same config twice in a batch: measure it once
                followers.append((trial, config))
                continue
            leaders[config.key] = trial
            state = self._take(trial, config)
            if state == "claimed":
                to_measure.append((trial, config))
            elif state == "busy":
                waiting.append((trial, config))

        self._measure(to_measure)
        self._wait_for_others(waiting)
        for trial, config in followers:
            known = self.run.measured(config)
            if known is not None:
                self.run.finish(trial, config, known, reused=True)
            else:
                self.run.abandon(trial, "its config was measured by an unfinished trial")
            self.finished.add(trial.number)

    def _take(self, trial: Trial, config: KernelConfig) -> str:
        """What to do with `config`: "claimed" (this process measures it now), "reused" (it
        was measured for this shape already; the trial is finished from the store) or "busy"
        (another process holds the claim: look again later)."""
        known = self.run.measured(config)
        if known is not None:
            self.run.finish(trial, config, known, reused=True)
            self.finished.add(trial.number)
            return "reused"
        # noted before the claim is made: an interrupt after the database took it but before
        # this frame learned so still releases it (tests/test_multigpu.py's Ctrl-C test saw
        # such a claim outlive its run under load)
        self.claimed[config.key] = trial
        if self.run.claims.config(trial, config):
            return "claimed"
        del self.claimed[config.key]
        return "busy"

    def _measure(self, pairs: list[Pair]) -> None:
        """Compile the batch ahead, measure it in one call, record each result, tell each trial."""
        if not pairs:
            return
        objective = self.run.objective
        configs = [c for _, c in pairs]
        precompile = getattr(objective, "precompile", None)
        if precompile is not None:
            try:
                precompile(configs)
            except AutotransposeError:
                pass  # measuring compiles each config again and reports which one fails
        results = list(objective(configs))
        if len(results) != len(configs) or not all(isinstance(m, Measurement) for m in results):
            raise TuningError(
                f"the objective returned {len(results)} results for {len(configs)} configs; "
                "it must return one Measurement per config, in order"
            )
        for (trial, config), m in zip(pairs, results, strict=True):
            self.run.record(config, m)
            self.recorded.add(config.key)
            self.run.finish(trial, config, m, reused=False)
            self.finished.add(trial.number)
        check_ctrl_c()  # an interrupt the measuring swallowed: what it measured is kept

    def _wait_for_others(self, waiting: list[Pair]) -> None:
        """Configs another process claimed: take its result when it is stored; if that process
        died (its trial failed by the heartbeat check), claim the config and measure it here."""
        deadline = time.monotonic() + self.run.grace_period + 2 * HEARTBEAT_INTERVAL
        while waiting:
            still: list[Pair] = []
            takeover: list[Pair] = []
            optuna.storages.fail_stale_trials(self.run.study)
            for trial, config in waiting:
                state = self._take(trial, config)
                if state == "claimed":
                    takeover.append((trial, config))
                elif state == "busy":
                    still.append((trial, config))
            self._measure(takeover)
            waiting = still
            if waiting and time.monotonic() >= deadline:
                for trial, _ in waiting:
                    self.run.abandon(
                        trial, "another process is measuring its config and gave no result in time"
                    )
                    self.finished.add(trial.number)
                return
            if waiting:
                time.sleep(POLL_S)
                check_ctrl_c()

    # --- an interrupt ---------------------------------------------------------------------------
    def _undo(self, reason: str) -> None:
        """Abandon every trial of the batch that has no measurement yet, and release every
        claim whose config was not measured, so that another process may measure it."""
        current = [self.current] if self.current is not None else []
        for trial in [t for t, _ in self.asked] + current:
            if trial.number not in self.finished:
                self.run.abandon(trial, reason)
        for key, trial in self.claimed.items():
            if key not in self.recorded:
                self.run.claims.release(key, trial)

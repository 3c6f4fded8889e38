"""One tune() call's run of its study: the shape's trials in it, which of them this process may
run (its own, within the budget), what the store has measured, telling Optuna what each trial
measured, and the answer. The loop over batches is `loop.search`; one batch is `batch.Batch`.

Processes sharing a study spend its budget once: a trial runs only if fewer than `total` trials
of its shape (finished, running or queued) have lower numbers (`Run.within_budget`).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from ...errors import TuningError
from ...kernels.config import KernelConfig
from ...kernels.shapes import Layout, ShapeClass
from ...runtime.device import DeviceInfo
from ...store.measurement import Measurement
from .claims import Claims
from .results import Objective, TrialReport, TuneResult
from .space import SearchSpace
from .storage import Heartbeat, was_measured

if TYPE_CHECKING:
    from ...store import Store

POLL_S = 0.2  # how often a run waiting on other processes' trials looks again


class Run:
    """The state of one tune() call: which study, which shape, and what it has done so far."""

    def __init__(
        self,
        *,
        study: optuna.Study,
        storage: optuna.storages.RDBStorage,
        store: Store,
        objective: Objective,
        device: DeviceInfo,
        dtype: str,
        elem_bytes: int,
        shape: tuple[int, int, int],
        cls: ShapeClass,
        space: SearchSpace,
        progress: Callable[[TrialReport], None] | None,
        grace_period: int,
        device_index: int | None = None,
        layout: Layout | None = None,
        problem: str = "",
    ) -> None:
        self.study = study
        self.storage = storage
        self.store = store
        self.objective = objective
        self.device = device
        self.dtype = dtype
        self.elem_bytes = elem_bytes
        self.shape = shape
        self.shape_text = "x".join(map(str, shape))
        self.cls = cls
        self.space = space
        self.progress = progress
        self.grace_period = grace_period
        self.device_index = device_index
        self.layout = layout
        self.problem = problem  # "": a transpose; a cast-transpose's `kinds.cast.problem`
        self.run_id: int | None = None
        self.heartbeat: Heartbeat | None = None
        self.claims = Claims(store, study, self.shape_text)
        self.counts = {"trials": 0, "measured": 0, "reused": 0, "failed": 0}
        self.done = 0
        self.total = 0
        self.best_gbps = 0.0

    # --- the study's view of this shape ---------------------------------------------------------
    def mine(self, trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
        """Finished trials of this shape: told with a measurement (a stale or interrupted trial
        has no status and is not counted: its config is retried)."""
        return [
            t
            for t in trials
            if t.state in (TrialState.COMPLETE, TrialState.FAIL)
            and t.user_attrs.get("shape") == self.shape_text
            and was_measured(t)
        ]

    @functools.cached_property
    def _queue_owner(self) -> str:
        return f"queue-{uuid.uuid4().hex}"

    def enqueue(self, configs: Sequence[KernelConfig]) -> None:
        """Queue configs to measure next (warm starts, local-search steps), once per shape (a
        resumed run finds them queued or done)."""
        have = {
            t.user_attrs.get("config")
            for t in self.study.get_trials(deepcopy=False)
            if t.user_attrs.get("shape") == self.shape_text
        }
        for c in configs:
            if c.key not in have and self.claims.queue(c.key, self._queue_owner):
                self.study.enqueue_trial(
                    self.space.params_of(c), user_attrs={"config": c.key, "shape": self.shape_text}
                )

    # --- which trials this run may run, and what the store knows ------------------------------
    def owns(self, trial: Trial) -> bool:
        """Whether `trial` is this run's alone. A queued trial (a known-good config, or one
        retried after its process died) is popped by reading it WAITING and then marking it
        RUNNING, in one transaction that locks the row (PostgreSQL) or the database (SQLite,
        `store.engine.serialize_sqlite_transactions`); were two processes to get the same
        trial anyway, both would hold its claims. The first to claim the trial keeps it; the
        other forgets it and asks again. A new trial is a new row: nobody else has it."""
        if "config" not in trial.user_attrs:
            return True
        return self.claims.trial(trial, f"run-{self.run_id}")

    def within_budget(self, number: int, every: Sequence[FrozenTrial]) -> bool:
        """Whether trial `number` fits the budget: fewer than `total` trials of this shape come
        before it (counted, running or queued). Processes that share the study ask at the
        same moment; the trial numbers order them the same way in every process, so together
        they run `total` trials, not one batch each beyond it. A running trial not yet marked
        with its shape counts as this shape's: at worst a batch is cut short and asked again."""
        ahead = 0
        for t in every:
            if t.number >= number:
                continue
            shape = t.user_attrs.get("shape")
            if t.state in (TrialState.RUNNING, TrialState.WAITING):
                ahead += shape == self.shape_text or (
                    shape is None and t.state == TrialState.RUNNING
                )
            elif t.state in (TrialState.COMPLETE, TrialState.FAIL):
                ahead += shape == self.shape_text and was_measured(t)
        return ahead < self.total

    def measured(self, config: KernelConfig) -> Measurement | None:
        """The store's measurement of `config` on this shape and layout, if any."""
        return self.store.measured(
            self.device.name, self.elem_bytes, self.shape, config, self.layout, self.problem
        )

    def record(self, config: KernelConfig, m: Measurement) -> None:
        """Store a measurement made by this run: before its trial is told (`finish`), so a
        config measured once is never measured again, whatever happens next."""
        self.store.record(
            self.run_id,
            self.device,
            self.dtype,
            self.elem_bytes,
            self.shape,
            self.cls,
            config,
            m,
            layout=self.layout,
            problem=self.problem,
        )
        self.counts["measured"] += 1

    # --- telling Optuna ---------------------------------------------------------------------------
    def finish(self, trial: Trial, config: KernelConfig, m: Measurement, *, reused: bool) -> None:
        """Tell a trial its measurement: GB/s if correct, FAIL with the reason otherwise."""
        attrs: dict[str, Any] = {"status": m.status}
        if reused:
            attrs["reused"] = True
        if m.ok:
            attrs["ratio"] = round(m.ratio, 4)
        else:
            default = "wrong output" if m.status == "wrong" else "failed, no reason given"
            attrs["error"] = (m.error or default)[:1000]
        try:
            for k, v in attrs.items():
                trial.set_user_attr(k, v)
            if m.ok:
                self.study.tell(trial, m.gbps, skip_if_finished=True)
            else:
                self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # failed as stale by another process meanwhile: the store has the result
        self.counts["trials"] += 1
        if reused:
            self.counts["reused"] += 1
        if not m.ok:
            self.counts["failed"] += 1
        self.done += 1
        if m.ok and m.gbps > self.best_gbps:
            self.best_gbps = m.gbps
        if self.progress is not None:
            self.progress(
                TrialReport(trial.number, config, m, reused, self.done, self.total, self.best_gbps)
            )

    def abandon(self, trial: Trial, reason: str) -> None:
        """End a trial with no measurement: FAIL without a status, so it is not counted."""
        try:
            trial.set_user_attr("error", reason)
            self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass

    # --- the answer ---------------------------------------------------------------------------
    def result(self, stopped_by: str, elapsed: float) -> TuneResult:
        """The best correct config of the shape in the study, with the store's measurement of
        it and what this run did; a TuningError when no config ran correctly."""
        mine = self.mine(self.study.get_trials(deepcopy=False))
        ok = [t for t in mine if t.state == TrialState.COMPLETE and t.value is not None]
        for t in sorted(ok, key=lambda t: (-(t.value or 0.0), t.number)):
            config = self.space.by_key(t.user_attrs.get("config", ""))
            m = self.measured(config) if config is not None else None
            if config is not None and m is not None and m.ok:
                return TuneResult(
                    study_name=self.study.study_name,
                    dtype=self.dtype,
                    shape=self.shape,
                    shape_class=self.cls,
                    config=config,
                    measurement=m,
                    trials=self.counts["trials"],
                    measured=self.counts["measured"],
                    reused=self.counts["reused"],
                    failed=self.counts["failed"],
                    elapsed_s=elapsed,
                    stopped_by=stopped_by,
                    layout=self.layout,
                )
        errors = sorted({str(t.user_attrs.get("error")) for t in mine if "error" in t.user_attrs})
        raise TuningError(
            f"no config ran correctly for {self.dtype} {self.shape_text} on {self.device.name} "
            f"({len(mine)} trials in study {self.study.study_name!r}); errors: "
            + ("; ".join(errors[:3]) if errors else "none recorded")
            + ". Check the GPU and driver, or raise --trials."
        )

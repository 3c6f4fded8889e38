"""The search of one run: batches asked and measured until the study holds the budget's trials of
the shape, the timeout or the patience runs out, or every config was tried; its last trials step
from the best config so far (the local search) instead of sampling.
"""

from __future__ import annotations

import time

import optuna
from optuna.trial import FrozenTrial, TrialState

from .batch import Batch, check_ctrl_c
from .run import POLL_S, Run
from .settings import TuneSettings
from .storage import trial_id

# The last trials of a run step from the best config so far to its untried neighbours (one
# field one step away) instead of sampling: TPE finds the right region of these discrete
# spaces but often stops one tile size or per_thread step short of its best.
LOCAL_SEARCH = 16


def search(run: Run, settings: TuneSettings, started: float) -> str:
    """Ask and measure batches until the study holds `settings.trials` finished trials of
    this shape, the timeout (counted from `started`) or the patience runs out, or every
    config was tried; returns which (`TuneResult.stopped_by`)."""
    trials, timeout, patience = settings.trials, settings.timeout, settings.patience
    run.total = trials
    while True:
        check_ctrl_c()
        optuna.storages.fail_stale_trials(run.study)
        every = run.study.get_trials(deepcopy=False)
        mine = run.mine(every)
        run.done = len(mine)
        ok = [t for t in mine if t.state == TrialState.COMPLETE and t.value is not None]
        best = max(ok, key=lambda t: (t.value, -t.number), default=None)
        run.best_gbps = float(best.value) if best is not None else 0.0  # type: ignore[arg-type]
        stall = sum(1 for t in mine if best is None or t.number > best.number)
        tried = {t.user_attrs.get("config") for t in mine}
        if run.done >= trials:
            _drop_queued(run)
            return "trials"
        if timeout is not None and time.monotonic() - started >= timeout and mine:
            return "timeout"  # not before one batch ran: a result, not "no config ran"
        if patience is not None and stall >= patience:
            return "patience"
        if all(c.key in tried for c in run.space.configs):
            return "exhausted"
        running = [
            t.user_attrs.get("config")
            for t in every
            if t.state == TrialState.RUNNING and t.user_attrs.get("shape") == run.shape_text
        ]
        # Trials other processes are running count toward the goal: wait for them rather
        # than overshoot it.
        k = min(settings.batch, trials - run.done - len(running))
        if patience is not None:
            k = min(k, patience - stall)
        if k <= 0:
            time.sleep(POLL_S)
            continue
        if best is not None and trials - run.done <= min(LOCAL_SEARCH, trials // 2):
            _step_from(run, best, min(k, trials - run.done - len(running)), tried.union(running))
        taken = {key for key in tried.union(running) if key is not None}
        Batch(run, taken).ask_and_measure(k)


def _step_from(run: Run, best: FrozenTrial, k: int, tried: set[str | None]) -> None:
    """Queue up to `k` untried neighbours of the best config so far (`LOCAL_SEARCH`),
    then, where fewer than `k` are left (the single steps are running out without beating
    it), its two-field steps."""
    config = run.space.by_key(best.user_attrs.get("config", ""))
    if config is None:
        return
    queued = {
        t.user_attrs.get("config")
        for t in run.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        if t.user_attrs.get("shape") == run.shape_text
    }
    fresh = [c for c in run.space.neighbours(config) if c.key not in tried]
    if len(fresh) < k:
        fresh += [c for c in run.space.pair_steps(config) if c.key not in tried]
    if any(c.key in queued for c in fresh):
        return  # the last batch's neighbours are still waiting their turn
    # What is queued already fills part of the budget left (`k` counts only what runs).
    run.enqueue(fresh[: k - len(queued)])


def _drop_queued(run: Run) -> None:
    """End this shape's queued trials once its budget is spent: processes that share the
    study may each have queued steps for the last places, and what none of them popped
    would otherwise wait in the study, to be run by the next tune beyond its own plan.
    A trial is claimed first (as `owns` does), so one another process just popped is
    left to it."""
    owner = f"run-{run.run_id}"
    storage = run.storage  # a study cannot end a waiting trial; its storage can
    for t in run.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if t.user_attrs.get("shape") != run.shape_text:
            continue
        if not run.claims.trial(t, owner):
            continue
        tid = trial_id(t)
        try:
            storage.set_trial_user_attr(
                tid, "error", "over the trial budget: queued after it was spent"
            )
            storage.set_trial_state_values(tid, TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass

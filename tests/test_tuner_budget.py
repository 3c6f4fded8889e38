"""The trial budget of a study that several processes share, with their interleavings forced
(no timing luck): a queued trial two processes pop at once, processes that check the budget at
the same moment, and the trials of a process that died, measured or not.

Each process is stood in for by its own storage (its own engine on the database) or its own
tune() on a thread: real SQLite files or PostgreSQL databases, real Optuna.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import optuna
import pytest
from _synthetic import DEVICE, SyntheticObjective, score
from optuna.trial import FrozenTrial, TrialState

from autotranspose.kernels.config import KernelConfig, config_space
from autotranspose.kernels.shapes import max_vec
from autotranspose.store import Store
from autotranspose.tuner.study import SearchSpace, TuneResult, open_storage, tune
from autotranspose.tuner.study.batch import Batch
from autotranspose.tuner.study.claims import trial_owner
from autotranspose.tuner.study.storage import trial_id

pytest_plugins = ("store_fixtures",)
pytestmark = pytest.mark.usefixtures("quiet_optuna")

SHAPE = (1, 2048, 2048)
SHAPE_TEXT = "1x2048x2048"
STALE_AFTER_S = 1  # the grace period of the storage that finds a killed process's trials


def _space() -> SearchSpace:
    return SearchSpace(config_space("float32", DEVICE.limits, max_vector=max_vec(4, *SHAPE[1:])))


def _tune(store: Store, objective: SyntheticObjective, **kw: Any) -> TuneResult:
    return tune("float32", SHAPE, objective=objective, store=store, device=DEVICE, **kw)


def _trials(url: str, name: str) -> list[FrozenTrial]:
    return optuna.load_study(study_name=name, storage=url).trials


def _counted(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Trials that count toward the budget: those told a measurement (see `Run.mine`)."""
    return [t for t in trials if "status" in t.user_attrs]


def _url(db_url: str) -> str:
    """The database's URL, with our tables made (as the first tune makes them)."""
    with Store.open(db_url) as store:
        return store.url


@pytest.fixture
def storages(db_url: str) -> Iterator[Callable[..., optuna.storages.RDBStorage]]:
    """Opens Optuna's storage on the test's database as the tuner does, one engine each
    (one per process sharing the study); all are closed at the end."""
    url = _url(db_url)
    opened: list[optuna.storages.RDBStorage] = []

    def open_one(**kw: Any) -> optuna.storages.RDBStorage:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opened.append(open_storage(url, **kw))
        return opened[-1]

    yield open_one
    for storage in opened:
        storage.remove_session()
        storage.engine.dispose()


# --- a queued trial popped by two processes at once ----------------------------------------------
@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # the tuner asks and tells itself too
def test_a_queued_trial_two_processes_pop_at_once_is_run_by_one_of_them(
    db_url: str,
    storages: Callable[..., optuna.storages.RDBStorage],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Process B reads the queued trial WAITING; before B marks it RUNNING, process A pops
    it, runs it and tells it. B must then ask another trial: on SQLite B marked the trial A
    had finished RUNNING again (CI: `tune --devices all` counted a trial twice: the
    resurrected trial went stale, and Optuna queued it again with its measurement)."""
    distributions = {"x": optuna.distributions.IntDistribution(0, 9)}
    study_a = optuna.create_study(storage=storages(), study_name="popped-twice")
    study_b = optuna.load_study(study_name="popped-twice", storage=storages())
    study_a.enqueue_trial({"x": 3})
    finder = optuna.storages._rdb.models.TrialModel.find_or_raise_by_id
    in_a: list[int] = []

    def a_runs_it() -> None:
        trial = study_a.ask(distributions)
        study_a.tell(trial, 1.0)
        in_a.append(trial.number)

    def b_reads_then_a_runs(cls: Any, tid: int, session: Any, for_update: bool = False) -> Any:
        found = finder(tid, session, for_update)
        if for_update and threading.current_thread() is threading.main_thread() and not in_a:
            in_a.append(-1)  # once
            a = threading.Thread(target=a_runs_it)
            a.start()
            a.join(2.0)  # A may wait for B's transaction: then B goes first
            threads.append(a)
        return found

    threads: list[threading.Thread] = []
    monkeypatch.setattr(
        optuna.storages._rdb.models.TrialModel,
        "find_or_raise_by_id",
        classmethod(b_reads_then_a_runs),
    )
    trial_b = study_b.ask(distributions)
    study_b.tell(trial_b, 2.0)
    for a in threads:
        a.join(60)
    number_a = in_a[-1]
    assert number_a >= 0, "process A did not finish its trial"
    assert trial_b.number != number_a, f"trial {number_a} was run by both processes"
    trials = _trials(_url(db_url), "popped-twice")
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE]
    assert sorted(t.value for t in trials) == [1.0, 2.0]


# --- processes that check the budget at the same moment ------------------------------------------
@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # threads: see below
def test_processes_that_check_the_budget_at_once_spend_it_once(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both processes see the same study when they work out how many trials to ask (the
    whole budget), and only then ask: together they still run the budget, not twice it.
    (tune() silences Optuna's experimental warnings with `warnings.catch_warnings`, which
    is not thread-safe: one thread's exit lets the other's through.)"""
    trials = 6
    url = _url(db_url)
    both_looked = threading.Barrier(2, timeout=60)
    ask_and_measure = Batch.ask_and_measure
    first = threading.local()

    def after_both_looked(self: Batch, k: int) -> None:
        if not getattr(first, "done", False):
            first.done = True
            assert k == trials, "the other process had asked already"
            both_looked.wait()
        ask_and_measure(self, k)

    monkeypatch.setattr(Batch, "ask_and_measure", after_both_looked)
    results: list[TuneResult] = []
    errors: list[BaseException] = []

    def process() -> None:
        try:
            with Store.open(url) as store:
                results.append(_tune(store, SyntheticObjective(), trials=trials, batch=trials))
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
            both_looked.abort()

    threads = [threading.Thread(target=process) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors
    every = _trials(url, results[0].study_name)
    counted = _counted(every)
    assert len(counted) == trials, f"{len(counted)} trials counted for a budget of {trials}"
    assert sum(r.trials for r in results) == trials
    assert max(Counter(t.user_attrs["config"] for t in counted).values()) == 1
    assert all(
        "over the trial budget" in t.user_attrs.get("error", "") for t in every if t not in counted
    )


# --- the trials of a process that died -----------------------------------------------------------
@dataclass(frozen=True)
class Killed:
    """A study of SHAPE tuned to 4 trials, then a fifth trial left by a killed process and
    found stale by the next process to look (`killed`)."""

    study_name: str
    config: KernelConfig  # the killed trial's
    trial: FrozenTrial  # the killed trial, once found stale
    queued: list[FrozenTrial]  # the study's WAITING trials then


def _killed(
    store: Store, storages: Callable[..., optuna.storages.RDBStorage], *, measured: bool
) -> Killed:
    """Leave a trial as a process killed during it does: RUNNING, its config claimed, its GPU
    noted, and, where `measured`, its measurement stored and its status set (the process died
    before it told Optuna); then let its heartbeat go stale and fail it as the next process
    to look does."""
    first = _tune(store, SyntheticObjective(), trials=4, seed=0)
    tried = {t.user_attrs.get("config") for t in _trials(store.url, first.study_name)}
    space = _space()
    config = next(c for c in space.configs if c.key not in tried and score(c).ok)
    storage = storages(heartbeat_interval=1, grace_period=STALE_AFTER_S)
    study = optuna.load_study(study_name=first.study_name, storage=storage)
    study.enqueue_trial(
        space.params_of(config), user_attrs={"config": config.key, "shape": SHAPE_TEXT}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trial = study.ask(space.distributions)
        storage.record_heartbeat(trial_id(trial))
        trial.set_user_attr("device_index", 1)
        store.claim(first.study_name, f"{SHAPE_TEXT}:{config.key}", trial_owner(trial_id(trial)))
        if measured:
            run_id = store.begin_run(DEVICE, {"study": first.study_name})
            m = score(config)
            store.record(run_id, DEVICE, "float32", 4, SHAPE, first.shape_class, config, m)
            trial.set_user_attr("status", m.status)
        time.sleep(STALE_AFTER_S + 1.0)
        optuna.storages.fail_stale_trials(study)
    trials = _trials(store.url, first.study_name)
    queued = [t for t in trials if t.state == TrialState.WAITING]
    return Killed(first.study_name, config, trials[trial.number], queued)


def test_a_trial_measured_by_a_process_killed_before_it_told_optuna_counts_once(
    store: Store, storages: Callable[..., optuna.storages.RDBStorage]
) -> None:
    """Its measurement is stored and its trial counts: it is not queued again (queued with
    its status, the copy counted before it ran, and once more if it did)."""
    killed = _killed(store, storages, measured=True)
    assert killed.trial.state == TrialState.FAIL and "status" in killed.trial.user_attrs
    assert killed.queued == []
    objective = SyntheticObjective()
    again = _tune(store, objective, trials=8, seed=1)
    counted = _counted(_trials(store.url, killed.study_name))
    assert len(counted) == 8 and again.trials == 3
    assert max(Counter(t.user_attrs["config"] for t in counted).values()) == 1
    assert killed.config not in objective.calls


def test_a_trial_a_process_was_killed_measuring_is_run_again_within_the_budget(
    store: Store, storages: Callable[..., optuna.storages.RDBStorage]
) -> None:
    """It is queued again with its config and shape (not what the dead attempt noted), its
    config's claim is taken over, and the next run fills the budget with it: the dead
    process's trial took no place of the budget for good."""
    killed = _killed(store, storages, measured=False)
    assert killed.trial.state == TrialState.FAIL and "status" not in killed.trial.user_attrs
    retry = {"config": killed.config.key, "shape": SHAPE_TEXT}
    assert [t.user_attrs for t in killed.queued] == [retry]
    objective = SyntheticObjective()
    again = _tune(store, objective, trials=8, seed=1)
    every = _trials(store.url, killed.study_name)
    counted = _counted(every)
    assert len(counted) == 8 and again.stopped_by == "trials" and again.trials == 4
    assert killed.config in objective.calls
    assert max(Counter(t.user_attrs["config"] for t in counted).values()) == 1
    assert not [t for t in every if t.state in (TrialState.RUNNING, TrialState.WAITING)]

"""Claims: rows in the store, unique per study and key, that let exactly one process act on a thing
several processes sharing a study may reach at once (measure a config, queue it, keep a queued
trial).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from ...kernels.config import KernelConfig
from .storage import trial_id, was_measured

if TYPE_CHECKING:
    from ...store import Store


def trial_owner(tid: int) -> str:
    """Claim owner of a trial: Optuna trial ids are unique across the whole database."""
    return f"optuna-trial-{tid}"


class Claims:
    """The claims of one study for one shape of its class. One study serves every shape of its
    class; a config's claim is for one config on one shape."""

    def __init__(self, store: Store, study: optuna.Study, shape_text: str) -> None:
        self.store = store
        self.study = study
        self.shape_text = shape_text

    def key(self, config_key: str) -> str:
        return f"{self.shape_text}:{config_key}"

    def queue(self, config_key: str, owner: str) -> bool:
        """Whether `owner` may queue this config (processes enqueue warm starts and local-search
        steps at the same moment: duplicates would outlive the budget, or spend it twice)."""
        return self.store.claim(self.study.study_name, f"queued:{self.key(config_key)}", owner)

    def trial(self, trial: Trial | FrozenTrial, owner: str) -> bool:
        """Whether `owner` keeps a queued trial (two processes may pop the same one)."""
        return self.store.claim(self.study.study_name, f"trial-{trial_id(trial)}", owner)

    def config(self, trial: Trial, config: KernelConfig) -> bool:
        """Claim `config` for `trial`; a claim left by a dead trial is released first."""
        name, key = self.study.study_name, self.key(config.key)
        if self.store.claim(name, key, trial_owner(trial_id(trial))):
            return True
        dead = [
            t
            for t in self.study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
            if t.user_attrs.get("config") == config.key
            and t.user_attrs.get("shape") == self.shape_text
            and not was_measured(t)
        ]
        if not any(self.store.release(name, key, trial_owner(trial_id(t))) for t in dead):
            return False
        return self.store.claim(name, key, trial_owner(trial_id(trial)))

    def release(self, config_key: str, trial: Trial) -> None:
        """Give up `trial`'s claim on a config it did not measure: another process may."""
        self.store.release(
            self.study.study_name, self.key(config_key), trial_owner(trial_id(trial))
        )

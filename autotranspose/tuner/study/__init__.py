"""The Optuna study: the config space -> batches of trials -> measured configs -> the best, stored.

One study per (device, element size, conjugate or not, shape class) lives in Optuna's own tables
in the tuning database, so ``optuna-dashboard <url>`` shows it, an interrupted run resumes it, and
several processes (or hosts, on PostgreSQL) can work on it together. Three rules keep the GPU's
time well spent:

- every measurement goes to the store before its trial is told, and a config the store has
  measured for this shape is answered from the store, never measured again;
- a claim row in the store (unique per study and config) lets exactly one process measure a
  config at a time; the others wait for its result;
- only configs from :func:`~autotranspose.kernels.config.config_space` reach the objective: Optuna's
  parameters are mapped to the nearest valid config, so nothing invalid is ever launched.

One idea a module, in import order:

- `sampler`: the Optuna samplers by name;
- `settings`: `TuneSettings`, the budget and search every entry point shares, checked once;
- `space`: `SearchSpace` (configs <-> Optuna parameters), the tuned class, `study_name`;
- `results`: the `Objective` measured through, `TrialReport` and `TuneResult` handed back;
- `storage`: Optuna's storage (opened by the store) and the heartbeat of running trials;
- `claims`: the store's claims that let one process act on a config or trial;
- `warm`: `known_good`, the configs a study measures first;
- `run`: `Run`, one call's trials, budget and answers; `batch`: one round of trials (and
  `remember_ctrl_c`: a Ctrl-C that Python swallowed raised again between trials);
- `loop`: `search`, the rounds until a stop, with the local search at the end;
- `targets`: `permute_target`, what tuning a permute means;
- `cast`, `inplace`: what tuning a cast-transpose (`tune_cast`) and an in-place transpose
  (`tune_inplace`) mean, each a study of its own problem (imported from their modules);
- `study`: `tune` and `tune_gpu`, the entry points.
"""

from __future__ import annotations

from .batch import remember_ctrl_c
from .results import Objective, TrialReport, TuneResult
from .sampler import SAMPLERS, make_sampler
from .settings import DEFAULT_BATCH, SEED_LIMIT, TuneSettings
from .space import SearchSpace, check_shape, study_name
from .storage import GRACE_PERIOD, HEARTBEAT_INTERVAL, open_storage
from .study import tune, tune_gpu
from .targets import PermuteTarget, permute_target
from .warm import known_good

__all__ = [
    "DEFAULT_BATCH",
    "GRACE_PERIOD",
    "HEARTBEAT_INTERVAL",
    "SAMPLERS",
    "SEED_LIMIT",
    "Objective",
    "PermuteTarget",
    "SearchSpace",
    "TrialReport",
    "TuneResult",
    "TuneSettings",
    "check_shape",
    "known_good",
    "make_sampler",
    "open_storage",
    "permute_target",
    "remember_ctrl_c",
    "study_name",
    "tune",
    "tune_gpu",
]

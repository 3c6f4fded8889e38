"""How a study is searched: the settings `tune`, `tune_gpu` and `tune_devices` share, checked
once, before a study, a worker or a process starts (a bad seed used to fail only deep inside
NumPy, once the sampler was made).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import TuningError
from .sampler import SAMPLERS

DEFAULT_BATCH = 8  # configs asked of the sampler, compiled together and measured per round
SEED_LIMIT = 2**32  # NumPy's RandomState, under Optuna's samplers, takes seeds below this


@dataclass(frozen=True)
class TuneSettings:
    """The budget and the search of one tuning run: stop at `trials` finished trials of the
    shape's study, after `timeout` seconds or after `patience` trials without a better one;
    sample with `sampler` (`make_sampler`) from `seed` (None: a random one), `batch` configs
    a round. Invalid values are a TuningError that says what to give."""

    trials: int = 40
    timeout: float | None = None
    patience: int | None = None
    sampler: str = "tpe"
    seed: int | None = None
    batch: int = DEFAULT_BATCH

    def __post_init__(self) -> None:
        if type(self.trials) is not int or self.trials < 1:
            raise TuningError(f"trials must be a positive int, got {self.trials!r}")
        if self.timeout is not None and not (
            isinstance(self.timeout, (int, float)) and self.timeout > 0
        ):
            raise TuningError(f"timeout must be a positive number of seconds, got {self.timeout!r}")
        if self.patience is not None and (type(self.patience) is not int or self.patience < 1):
            raise TuningError(f"patience must be a positive int, got {self.patience!r}")
        if type(self.batch) is not int or self.batch < 1:
            raise TuningError(f"batch must be a positive int, got {self.batch!r}")
        if self.sampler not in SAMPLERS:
            raise TuningError(
                f"unknown sampler {self.sampler!r}; choose one of: {', '.join(SAMPLERS)}"
            )
        if self.seed is not None and (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, (int, np.integer))
            or not 0 <= self.seed < SEED_LIMIT
        ):
            raise TuningError(
                f"seed must be an int from 0 to 2**32-1 (what the samplers' NumPy generator "
                f"takes), or None for a random one; got {self.seed!r:.40}"
            )

    @classmethod
    def of(cls, settings: TuneSettings | None, **given: Any) -> TuneSettings:
        """A call's settings: `settings`, or else its keywords (`given`, the fields' names).
        Both at once are refused unless the keywords are all at their defaults: which would
        win is not for us to guess."""
        built = cls(**given)
        if settings is None:
            return built
        if not isinstance(settings, TuneSettings):
            raise TuningError(f"settings must be a TuneSettings, got {type(settings).__name__}")
        default = cls()
        changed = [
            f.name
            for f in dataclasses.fields(cls)
            if getattr(built, f.name) != getattr(default, f.name)
        ]
        if changed:
            raise TuningError(
                "give the tuning settings either as settings=TuneSettings(...) or as keywords, "
                f"not both (settings and {', '.join(changed)} were given)"
            )
        return settings

    def for_process(self, position: int) -> TuneSettings:
        """These settings for the `position`-th of several processes sharing studies: one seed
        per process, since the same seed would propose the same trials twice (wrapping: the
        samplers take seeds below 2**32)."""
        if self.seed is None:
            return self
        return dataclasses.replace(self, seed=(int(self.seed) + position) % SEED_LIMIT)

    def record(self) -> dict[str, Any]:
        """The settings as the store records them with a run."""
        return dataclasses.asdict(self)

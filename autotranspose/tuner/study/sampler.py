"""The Optuna samplers a study can search with, by name."""

from __future__ import annotations

import optuna

from ...errors import TuningError

SAMPLERS: tuple[str, ...] = ("tpe", "random", "gp")


def make_sampler(name: str, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """The sampler called `name`: "tpe" (default), "random", or "gp" (needs torch).

    TPE runs multivariate (tile, vector and per-thread sizes interact) and with the constant
    liar, so trials asked while others are running, in this process's batch or another
    process's, are spread out rather than piled on one point.
    """
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        try:
            import scipy  # noqa: F401
            import torch  # noqa: F401
        except ImportError as exc:
            raise TuningError(
                f"the gp sampler needs torch and scipy ({exc.name} is missing): "
                "pip install torch scipy, or use --sampler tpe"
            ) from exc
        return optuna.samplers.GPSampler(seed=seed)
    raise TuningError(f"unknown sampler {name!r}; choose one of: {', '.join(SAMPLERS)}")

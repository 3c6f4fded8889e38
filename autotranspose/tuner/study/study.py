"""tune(): one case's study opened (or resumed), warm-started, searched and recorded in the store;
tune_gpu(): the same on a local GPU's measuring worker, for a transpose or a permute's pass.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import optuna

from ...errors import TuningError
from ...kernels.config import KernelConfig
from ...kernels.shapes import Layout, ShapeClass, check_layout
from ...plans.dtypes import element_type
from ...runtime.device import DeviceInfo
from .loop import search
from .results import Objective, TrialReport, TuneResult
from .run import Run
from .sampler import make_sampler
from .settings import DEFAULT_BATCH, TuneSettings
from .space import SearchSpace, check_shape, study_configs, study_name, tuned_class
from .storage import GRACE_PERIOD, HEARTBEAT_INTERVAL, Heartbeat, open_storage
from .targets import permute_target
from .warm import known_good

if TYPE_CHECKING:
    from ...store import Store


def tune(
    dtype: Any,
    shape: Sequence[int],
    *,
    objective: Objective,
    store: Store,
    device: DeviceInfo,
    trials: int = 40,
    timeout: float | None = None,
    patience: int | None = None,
    sampler: str = "tpe",
    seed: int | None = None,
    batch: int = DEFAULT_BATCH,
    conjugate: bool = False,
    progress: Callable[[TrialReport], None] | None = None,
    heartbeat_interval: int = HEARTBEAT_INTERVAL,
    grace_period: int = GRACE_PERIOD,
    device_index: int | None = None,
    layout: Layout | Sequence[int] | None = None,
    max_vector: int | None = None,
    settings: TuneSettings | None = None,
) -> TuneResult:
    """Tune the transpose of `dtype` arrays of `shape` (batch, m, n) on `device`.

    Stops when this shape's study holds `trials` finished trials (trials of earlier,
    interrupted or concurrent runs count, so running again resumes rather than repeats, and
    processes tuning together spend `trials` between them),
    after `timeout` seconds (a batch under way completes, and one batch finishes first however
    short the timeout: setup on a busy machine can take longer), or when `patience` trials in a row
    did not beat the best, whichever comes first. Returns the best config of the study for
    this shape; raises :class:`TuningError` if no config ran correctly. `device_index`, the
    local GPU the objective measures on, is recorded on the run and on each trial asked here.
    `settings` gives trials, timeout, patience, sampler, seed and batch as one `TuneSettings`
    instead of as keywords.

    `layout` (ld_in, ld_out, bs_in, bs_out, in elements; None: contiguous) is what the
    objective measures on: a permute's transpose pass (`permute_target`), so that what is
    tuned is what permute() runs. `max_vector` caps the class's vector (a permute's host-loop
    launches may be less aligned than its strides). A strided layout has a study of its own
    and its measurements are kept apart from the contiguous ones, but its best goes under
    the class (batch, m, n, vec) like a contiguous call's: the class is what decides which
    configs fit (tile fit, alignment), and its vec already reflects the strides' alignment,
    so every config of the class runs any call of it (a flat config only where the strides
    keep its rows contiguous: `transpose()` serves the tiled default otherwise).
    """
    started = time.monotonic()
    et = element_type(dtype)
    dims = check_shape(shape)
    settings = TuneSettings.of(
        settings,
        trials=trials,
        timeout=timeout,
        patience=patience,
        sampler=sampler,
        seed=seed,
        batch=batch,
    )
    lay = check_layout(dims, layout)
    cls = tuned_class(et.size, dims, lay, max_vector)
    space = SearchSpace(study_configs(et.name, device, cls, conjugate, dims, lay))
    name = study_name(device, et.size, cls, space, conjugate, lay)
    return run_study(
        name=name,
        space=space,
        store=store,
        objective=objective,
        device=device,
        dtype=et.name,
        dims=dims,
        cls=cls,
        settings=settings,
        started=started,
        warm=lambda: known_good(
            et.size,
            cls,
            space,
            device=device,
            store=store,
            conjugate=conjugate,
            sides=(dims[1], dims[2]),
        ),
        recorded={
            "conjugate": conjugate,
            "layout": list(lay) if lay is not None else None,
            "max_vector": max_vector,
        },
        progress=progress,
        heartbeat_interval=heartbeat_interval,
        grace_period=grace_period,
        device_index=device_index,
        layout=lay,
    )


def run_study(
    *,
    name: str,
    space: SearchSpace,
    store: Store,
    objective: Objective,
    device: DeviceInfo,
    dtype: str,
    dims: tuple[int, int, int],
    cls: ShapeClass,
    settings: TuneSettings,
    started: float,
    warm: Callable[[], Sequence[KernelConfig]],
    recorded: dict[str, Any],
    progress: Callable[[TrialReport], None] | None = None,
    heartbeat_interval: int = HEARTBEAT_INTERVAL,
    grace_period: int = GRACE_PERIOD,
    device_index: int | None = None,
    layout: Layout | None = None,
    problem: str = "",
) -> TuneResult:
    """One case's study opened (or resumed), its `warm` configs queued, searched within
    `settings`, every measurement recorded under (device, element size, `cls`, `problem`):
    what `tune` and `cast.tune_cast` share. `recorded`: what the run's settings add."""
    elem_bytes = space.configs[0].elem_bytes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # ask() warns that the heartbeat expects optimize(): the tuner beats itself.
        warnings.filterwarnings("ignore", message="Heartbeat of storage")
        storage = open_storage(
            store.url, heartbeat_interval=heartbeat_interval, grace_period=grace_period
        )
        study = optuna.create_study(
            storage=storage,
            study_name=name,
            direction="maximize",
            sampler=make_sampler(settings.sampler, settings.seed),
            load_if_exists=True,
        )
        run = Run(
            study=study,
            storage=storage,
            store=store,
            objective=objective,
            device=device,
            dtype=dtype,
            elem_bytes=elem_bytes,
            shape=dims,
            cls=cls,
            space=space,
            progress=progress,
            grace_period=grace_period,
            device_index=device_index,
            layout=layout,
            problem=problem,
        )
        # no more than the budget: queued trials nobody asks would outlive the run
        run.enqueue(list(warm())[: settings.trials])
        run_id = store.begin_run(
            device,
            {
                "study": name,
                "dtype": dtype,
                "shape": list(dims),
                "shape_class": str(cls),
                **settings.record(),
                "space": len(space),
                "device_index": device_index,
                **recorded,
            },
        )
        run.run_id = run_id
        status = "failed"
        try:
            with Heartbeat(storage, heartbeat_interval) as heartbeat:
                run.heartbeat = heartbeat
                stopped_by = search(run, settings, started)
            status = "done"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            store.finish_run(run_id, status)
            storage.remove_session()
            from ...dispatch import lookup

            lookup.clear_cache()
        return run.result(stopped_by, time.monotonic() - started)


def tune_gpu(
    dtype: Any,
    shape: Sequence[int],
    *,
    db: str | None = None,
    device: int = 0,
    trials: int = 40,
    timeout: float | None = None,
    patience: int | None = None,
    sampler: str = "tpe",
    seed: int | None = None,
    conjugate: bool = False,
    axes: Sequence[int] | None = None,
    settings: TuneSettings | None = None,
) -> TuneResult | None:
    """Tune one (dtype, shape) on local GPU `device` into the tuning database (`db` URL, else
    AUTOTRANSPOSE_DB, else the user default): `autotranspose tune` for one case, from Python.
    The next `transpose()` of that class uses the result. `settings` gives the search's
    settings as one `TuneSettings` instead of as keywords (its batch is then used too).

    With `axes`, `shape` is an array's (1 to 8 sides) and what is tuned is the permute of a
    contiguous one by `axes` (`autotranspose tune --axes`): its transpose pass, measured on
    the pass's own strides, into the pass's shape class, which the next permute() (and
    transpose() of that class) uses. Returns None when the permute's pass is a copy or a
    gather: those kernels are not tuned (`permute_target` says which).
    """
    from ...store import Store
    from ..worker import GpuObjective, refuse_unguarded_main

    refuse_unguarded_main()  # before the database is opened again by a re-imported script
    et = element_type(dtype)
    layout: Layout | None = None
    max_vector: int | None = None
    if axes is None:
        dims = check_shape(shape)
    else:
        if conjugate:
            raise TuningError("conjugate is for transposes; a permute (axes) has none")
        target = permute_target(et.name, shape, axes)
        if target.shape is None or target.shape_class is None:
            return None
        et = element_type(target.dtype)
        dims, layout, max_vector = target.shape, target.layout, target.shape_class.vec
    settings = TuneSettings.of(  # before a worker starts
        settings, trials=trials, timeout=timeout, patience=patience, sampler=sampler, seed=seed
    )
    with (
        Store.open(db) as store,
        GpuObjective(et.name, dims, device, conjugate=conjugate, layout=layout) as objective,
    ):
        return tune(
            et.name,
            dims,
            objective=objective,
            store=store,
            device=objective.device,
            settings=settings,
            conjugate=conjugate,
            device_index=device,
            layout=layout,
            max_vector=max_vector,
        )

"""What tuning an in-place transpose means (`tune --inplace`): one Optuna study per (GPU,
element size, problem, shape class) over `kinds.inplace.space`, its measurements and best
stored under the problem (`policy.inplace_problem`: "inplace:square" for a square, whose one
SWAP pass takes other parameters than a rectangle's passes, else "inplace"), which
transpose_() is served by (`lookup.inplace_choice`: this device's result of exactly the
call's class, else the shipped one, else the default).

The case is a contiguous (batch, m, n) matrix transposed in its own memory
(`inplacemeasure`); its class is `policy.inplace_class` (the sides bucketed, vector 1), as
lookup keys a call.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...dispatch import policy
from ...errors import TuningError
from ...kernels.codegen import kernel_version
from ...kernels.config import KernelConfig
from ...kernels.shapes import ShapeClass
from ...kinds import inplace as inplace_kind
from ...plans.dtypes import element_type
from ...runtime.device import DeviceInfo
from .results import Objective, TrialReport, TuneResult
from .settings import TuneSettings
from .space import SearchSpace, check_shape
from .storage import GRACE_PERIOD, HEARTBEAT_INTERVAL
from .warm import WARM_STARTS, problem_neighbours

if TYPE_CHECKING:
    from ...store import Store


@dataclass(frozen=True)
class InplaceTarget:
    """One in-place transpose case: the dtype's name and element size, the (batch, m, n)
    measured, and (derived) its class and the problem its results are keyed by."""

    dtype: str
    elem_bytes: int
    shape: tuple[int, int, int]

    @property
    def square(self) -> bool:
        return self.shape[1] == self.shape[2]

    @property
    def shape_class(self) -> ShapeClass:
        return policy.inplace_class(*self.shape)

    @property
    def problem(self) -> str:
        return policy.inplace_problem(self.shape[1], self.shape[2])

    @property
    def default(self) -> KernelConfig:
        """What transpose_() runs where nothing tuned or shipped serves the class."""
        return policy.inplace_config(
            self.elem_bytes, policy.inplace_default(self.elem_bytes, self.square)
        )


def inplace_target(dtype: Any, shape: Sequence[int]) -> InplaceTarget:
    """The case of transposing a contiguous (batch, m, n) (or (m, n)) `dtype` array in place;
    a TuningError where it moves nothing (a side of 1: transpose_() only reshapes)."""
    et = element_type(dtype)
    dims = check_shape(shape)
    if min(dims[1:]) < 2:
        raise TuningError(
            f"a {dims[1]}x{dims[2]} matrix's in-place transpose moves nothing (transpose_() "
            "only reshapes it): there is nothing to tune; give both sides at least 2"
        )
    return InplaceTarget(et.name, et.size, dims)


def inplace_space(device: DeviceInfo, target: InplaceTarget) -> SearchSpace:
    """The study's configs: the kind's variants for the case's element size and shape
    (`kinds.inplace.space`: a square's SWAP tiles and blocks, a rectangle's blocks, grids,
    rows ahead and bytes a lane) this device runs, and the default."""
    e = target.elem_bytes
    configs = [
        c for c in inplace_kind.space(KernelConfig, e, target.square) if c.fits(device.limits)
    ]
    if target.default.fits(device.limits):
        configs.append(target.default)
    return SearchSpace(configs)


def inplace_study_name(device: DeviceInfo, target: InplaceTarget, space: SearchSpace) -> str:
    """The Optuna study of one (device, element size, problem, class). Its last part names
    the in-place kernels (the default program's version: every pass kernel the problem's
    programs may run for the element size, so that any change to them starts the study
    over) and the space."""
    kernels = kernel_version(target.default, target.problem)
    version = hashlib.sha256(f"{kernels}:{space.digest()}".encode()).hexdigest()[:10]
    return (
        f"autotranspose:{device.slug}:s{target.elem_bytes}:{target.problem}:"
        f"{target.shape_class}:{version}"
    )


def inplace_known_good(
    device: DeviceInfo, target: InplaceTarget, space: SearchSpace, store: Store | None
) -> list[KernelConfig]:
    """The configs an in-place study measures first: the default, what lookup serves the
    class today, then the results of the same problem and element size for the
    `WARM_STARTS` nearest other classes (stored or shipped, this GPU model's first): lookup
    serves none of them to this class, but they won their neighbours."""
    from ...dispatch import lookup

    e = target.elem_bytes
    found = [target.default]
    found.append(lookup.inplace_choice(device, e, *target.shape, store=store).config)
    found += problem_neighbours(device, target.shape_class, target.problem, store, e)
    return [c for c in dict.fromkeys(found) if c in space][: 2 + WARM_STARTS]


def tune_inplace(
    dtype: Any,
    shape: Sequence[int],
    *,
    objective: Objective,
    store: Store,
    device: DeviceInfo,
    settings: TuneSettings | None = None,
    progress: Callable[[TrialReport], None] | None = None,
    heartbeat_interval: int = HEARTBEAT_INTERVAL,
    grace_period: int = GRACE_PERIOD,
    device_index: int | None = None,
) -> TuneResult:
    """Tune the in-place transpose of a contiguous `dtype` array of `shape` on `device`, as
    `tune` tunes a transpose (same budget, resume, claims and store rules); results go
    under the case's problem and class, which transpose_() then runs. `objective` measures
    in-place configs of this case (`GpuObjective(..., inplace=True)` on a GPU)."""
    from .study import run_study

    started = time.monotonic()
    settings = TuneSettings.of(settings)
    target = inplace_target(dtype, shape)
    space = inplace_space(device, target)
    return run_study(
        name=inplace_study_name(device, target, space),
        space=space,
        store=store,
        objective=objective,
        device=device,
        dtype=target.dtype,
        dims=target.shape,
        cls=target.shape_class,
        settings=settings,
        started=started,
        warm=lambda: inplace_known_good(device, target, space, store),
        recorded={"inplace": target.problem},
        progress=progress,
        heartbeat_interval=heartbeat_interval,
        grace_period=grace_period,
        device_index=device_index,
        problem=target.problem,
    )


def tune_inplace_gpu(
    dtype: Any,
    shape: Sequence[int],
    *,
    db: str | None = None,
    device: int = 0,
    settings: TuneSettings | None = None,
    progress: Callable[[TrialReport], None] | None = None,
) -> TuneResult:
    """Tune one dtype and shape's in-place transpose on local GPU `device` into the tuning
    database (`db` URL, else AUTOTRANSPOSE_DB, else the user default): `autotranspose tune
    --inplace` for one case, from Python. The next transpose_() of that class uses the
    result."""
    from ...store import Store
    from ..worker import GpuObjective, refuse_unguarded_main

    refuse_unguarded_main()
    target = inplace_target(dtype, shape)
    settings = TuneSettings.of(settings)
    with (
        Store.open(db) as store,
        GpuObjective(target.dtype, target.shape, device, inplace=True) as objective,
    ):
        return tune_inplace(
            target.dtype,
            target.shape,
            objective=objective,
            store=store,
            device=objective.device,
            settings=settings,
            progress=progress,
            device_index=device,
        )

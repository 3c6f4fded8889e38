"""What tuning a cast-transpose means (`tune --cast IN:OUT`): one Optuna study per (GPU, pair,
output set, shape class) over `kinds.cast.space`, its measurements and best stored under
the pair's problem (`kinds.cast.problem`), which `cast_transpose()` is served by
(`lookup.cast_choice`).

The case is a contiguous (batch, m, n) input cast and transposed into contiguous outputs,
with a device scale and amax (`_castmeasure`); its class is the launch's (batch, m, n) and
input vector (`shapes.call_vec`), as `_dispatch.cast.cast_class` keys a call.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import TuningError, UnsupportedDtypeError
from ...kernels.codegen import template_version
from ...kernels.config import KernelConfig
from ...kernels.shapes import ShapeClass
from ...kinds import cast as cast_kind
from ...kinds.cast import Format
from ...runtime.device import DeviceInfo
from .results import Objective, TrialReport, TuneResult
from .settings import TuneSettings
from .space import SearchSpace, check_shape, tuned_class
from .storage import GRACE_PERIOD, HEARTBEAT_INTERVAL
from .warm import WARM_STARTS, problem_neighbours

if TYPE_CHECKING:
    from ...store import Store


@dataclass(frozen=True)
class CastTarget:
    """One cast-transpose case: the pair, whether the same-order output is written, the
    (batch, m, n) measured, its class and the problem its results are keyed by."""

    src: Format
    dst: Format
    both: bool
    shape: tuple[int, int, int]
    shape_class: ShapeClass

    @property
    def code(self) -> str:
        return cast_kind.pair_code(self.src, self.dst)

    @property
    def problem(self) -> str:
        return cast_kind.problem(self.code, self.both)


def parse_pair(text: str) -> tuple[Format, Format]:
    """'IN:OUT' (dtype names or short names: 'bfloat16:float8_e4m3fn', 'bf16:e4m3') -> the
    formats, or a TuningError naming the pairs there are."""
    from ...plans.cast import format_of

    parts = text.split(":") if isinstance(text, str) else []
    if len(parts) != 2:
        raise TuningError(
            f"a cast pair is IN:OUT (e.g. bfloat16:float8_e4m3fn or bf16:e4m3), got {text!r:.60}"
        )
    try:
        src, dst = format_of(parts[0], "input"), format_of(parts[1], "output")
    except UnsupportedDtypeError as exc:
        raise TuningError(str(exc)) from None
    if cast_kind.pair_code(src, dst) not in cast_kind.PAIRS:
        pairs = ", ".join(f"{i.name}:{o.name}" for i, o in cast_kind.PAIRS.values())
        raise TuningError(f"{src.name}:{dst.name} is not a cast pair; the pairs are {pairs}")
    return src, dst


def cast_target(src: Format, dst: Format, shape: Sequence[int], both: bool = False) -> CastTarget:
    """The case of casting a contiguous (batch, m, n) (or (m, n)) `src` input to `dst`."""
    if type(both) is not bool:
        raise TuningError(f"both must be True or False, got {type(both).__name__}")
    dims = check_shape(shape)
    return CastTarget(src, dst, both, dims, tuned_class(src.size, dims, None, None))


def cast_space(device: DeviceInfo, target: CastTarget) -> SearchSpace:
    """The study's configs: the pair's variants (`kinds.cast.space`) this device runs, and
    its defaults (the register-capped ones included, which `space` does not vary)."""
    configs = [
        c for c in cast_kind.space(KernelConfig, target.src, target.dst) if c.fits(device.limits)
    ]
    for aligned in (True, False):
        d = cast_kind.default(KernelConfig, target.src, target.dst, aligned)
        if d.fits(device.limits):
            configs.append(d)
    return SearchSpace(configs)


def cast_study_name(device: DeviceInfo, target: CastTarget, space: SearchSpace) -> str:
    """The Optuna study of one (device, problem, class); its last part names the templates
    and the space, as `space.study_name` does for transposes."""
    version = hashlib.sha256(f"{template_version()}:{space.digest()}".encode()).hexdigest()[:10]
    return f"autotranspose:{device.slug}:{target.problem}:{target.shape_class}:{version}"


def cast_known_good(
    device: DeviceInfo, target: CastTarget, space: SearchSpace, store: Store | None
) -> list[KernelConfig]:
    """The configs a cast study measures first: the pair's default, what lookup serves the
    class today, then the results of the same problem for the `WARM_STARTS` nearest other
    classes (stored or shipped, this GPU model's first): lookup serves none of them to this
    class, but they are measured winners of the pair's neighbours."""
    from ...dispatch import lookup

    found = [cast_kind.default(KernelConfig, target.src, target.dst)]
    choice = lookup.cast_choice(
        device, target.code, target.shape_class, both=target.both, store=store
    )
    found.append(choice.config)
    found += problem_neighbours(device, target.shape_class, target.problem, store)
    return [c for c in dict.fromkeys(found) if c in space][: 2 + WARM_STARTS]


def tune_cast(
    src: Format,
    dst: Format,
    shape: Sequence[int],
    *,
    objective: Objective,
    store: Store,
    device: DeviceInfo,
    both: bool = False,
    settings: TuneSettings | None = None,
    progress: Callable[[TrialReport], None] | None = None,
    heartbeat_interval: int = HEARTBEAT_INTERVAL,
    grace_period: int = GRACE_PERIOD,
    device_index: int | None = None,
) -> TuneResult:
    """Tune the cast-transpose of `src` to `dst` of a contiguous `shape` on `device`, as
    `tune` tunes a transpose (same budget, resume, claims and store rules); results go
    under the pair's problem. `objective` measures cast configs of this case
    (`GpuObjective(..., cast=(code, both))` on a GPU)."""
    from .study import run_study

    started = time.monotonic()
    settings = TuneSettings.of(settings)
    target = cast_target(src, dst, shape, both)
    space = cast_space(device, target)
    recorded: dict[str, Any] = {"cast": target.code, "both": target.both}
    return run_study(
        name=cast_study_name(device, target, space),
        space=space,
        store=store,
        objective=objective,
        device=device,
        dtype=src.name,
        dims=target.shape,
        cls=target.shape_class,
        settings=settings,
        started=started,
        warm=lambda: cast_known_good(device, target, space, store),
        recorded=recorded,
        progress=progress,
        heartbeat_interval=heartbeat_interval,
        grace_period=grace_period,
        device_index=device_index,
        problem=target.problem,
    )


def tune_cast_gpu(
    pair: str,
    shape: Sequence[int],
    *,
    both: bool = False,
    db: str | None = None,
    device: int = 0,
    settings: TuneSettings | None = None,
    progress: Callable[[TrialReport], None] | None = None,
) -> TuneResult:
    """Tune one cast pair ('IN:OUT') and shape on local GPU `device` into the tuning database
    (`db` URL, else AUTOTRANSPOSE_DB, else the user default): `autotranspose tune --cast`
    for one case, from Python. The next `cast_transpose()` of that class uses the result."""
    from ...store import Store
    from ..worker import GpuObjective, refuse_unguarded_main

    refuse_unguarded_main()
    src, dst = parse_pair(pair)
    target = cast_target(src, dst, shape, both)
    settings = TuneSettings.of(settings)
    with (
        Store.open(db) as store,
        GpuObjective(src.name, target.shape, device, cast=(target.code, target.both)) as objective,
    ):
        return tune_cast(
            src,
            dst,
            target.shape,
            objective=objective,
            store=store,
            device=objective.device,
            both=both,
            settings=settings,
            progress=progress,
            device_index=device,
        )

"""The Optuna study: the config space -> batches of trials -> measured configs -> the best, stored.

One study per (device, element size, conjugate or not, shape class) lives in Optuna's own tables
in the tuning database, so ``optuna-dashboard <url>`` shows it, an interrupted run resumes it, and
several processes (or hosts, on PostgreSQL) can work on it together. Three rules keep the GPU's
time well spent:

- every measurement goes to the store before its trial is told, and a config the store has
  measured for this shape is answered from the store, never measured again;
- a claim row in the store (unique per study and config) lets exactly one process measure a
  config at a time; the others wait for its result;
- only configs from :func:`~autotranspose._config.config_space` reach the objective: Optuna's
  parameters are mapped to the nearest valid config, so nothing invalid is ever launched.

Trials are asked in batches so that the objective can compile a whole batch in one nvcc call
before it measures any of it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import signal
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import optuna
import sqlalchemy
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial, Trial, TrialState

from ._codegen import template_version
from ._config import (
    OPTIONAL_FIELDS,
    KernelConfig,
    config_space,
    default_config,
    direct_default,
    few_cols_default,
    few_rows_default,
    narrow_configs,
    neighbours,
    pair_steps,
    prmt_alternative,
    prmt_default,
    seed_config,
    staged_default,
    tall_default,
    wide_default,
)
from ._device import DeviceInfo
from ._dtypes import element_type
from ._measurement import Measurement
from ._plan import TRANSPOSE, Pass, Plan, plan_permute
from ._shapes import Layout, ShapeClass, call_vec, check_layout, flat_fits, pass_vec, shape_class
from .errors import AutotransposeError, ShapeError, StoreError, TuningError

if TYPE_CHECKING:
    from .store import Store

SAMPLERS: tuple[str, ...] = ("tpe", "random", "gp")
# A process's running trials are marked alive every HEARTBEAT_INTERVAL seconds; one silent for
# GRACE_PERIOD seconds belongs to a killed process and is failed and retried. A batch may spend
# a while in nvcc, but the heartbeat runs on its own thread, so the grace period need not
# cover a batch, only a stalled process.
HEARTBEAT_INTERVAL = 5
GRACE_PERIOD = 30
_POLL_S = 0.2
DEFAULT_BATCH = 8  # configs asked of the sampler, compiled together and measured per round
WARM_STARTS = 6  # nearest classes' bests per GPU model group (this one, the others) queued first
# The last trials of a run step from the best config so far to its untried neighbours (one
# field one step away) instead of sampling: TPE finds the right region of these discrete
# spaces but often stops one tile size or per_thread step short of its best.
LOCAL_SEARCH = 16


class Objective(Protocol):
    """Measures configs: one Measurement per config, in order. Failures are Measurements too."""

    def __call__(self, configs: Sequence[KernelConfig], /) -> list[Measurement]: ...


@dataclass(frozen=True)
class TrialReport:
    """One finished trial, for a progress display."""

    number: int  # the Optuna trial number
    config: KernelConfig
    measurement: Measurement
    reused: bool  # answered from the store, not measured
    done: int  # finished trials of this shape in the study
    total: int  # the number of trials asked for
    best_gbps: float  # best so far for this shape (0 when nothing ran correctly yet)


@dataclass(frozen=True)
class TuneResult:
    """What a tuning run found: the best config of this shape's study and what the run did."""

    study_name: str
    dtype: str
    shape: tuple[int, int, int]
    shape_class: ShapeClass
    config: KernelConfig
    measurement: Measurement
    trials: int  # trials this call finished (measured + reused, failed ones included)
    measured: int  # configs this call measured on the device
    reused: int  # trials answered from the store
    failed: int  # trials that ended FAIL: did not compile/launch, or gave wrong output
    elapsed_s: float
    stopped_by: str  # "trials", "timeout", "patience" or "exhausted" (every config tried)
    layout: Layout | None = None  # the strides measured on (a permute's pass); None: contiguous


def study_name(
    device: DeviceInfo,
    elem_bytes: int,
    cls: ShapeClass,
    space: SearchSpace,
    conjugate: bool = False,
    layout: Layout | None = None,
) -> str:
    """The Optuna study of one (device, element size, conjugate, shape class), and for a
    strided layout (a permute's pass) of that layout too: its measurements differ from a
    contiguous call's, so the sampler must not mix them (its results still compete for the
    class's best).

    Its last part names the kernel templates and the search space: trials measured with
    other kernels would mislead the sampler (and the store no longer serves their results),
    and Optuna cannot change a study's parameters.
    """
    conj = ":conj" if conjugate else ""
    strides = f":layout={layout.text}" if layout is not None else ""
    version = hashlib.sha256(f"{template_version()}:{space.digest()}".encode()).hexdigest()[:10]
    return f"autotranspose:{device.slug}:s{elem_bytes}{conj}:{cls}{strides}:{version}"


# --- the search space as Optuna parameters -------------------------------------------------------
# Every field of KernelConfig that varies within a study is one parameter. Integer fields are
# searched by their rank among the study's choices (TPE then sees 64 between 32 and 128, and
# there are no gaps where a size is invalid for this element type); other fields are
# categorical. Layout and padding form one categorical parameter, since padding means nothing
# with the swizzle. The choices come from the study's valid configs, so every trial has the
# same distributions, as Optuna requires.
_STUDY_FIELDS = ("elem_bytes", "conjugate")  # fixed by the study itself


def _field_values(config: KernelConfig) -> dict[str, Any]:
    """The config's parameters: its stored fields (OPTIONAL_FIELDS at their default left
    out, so a space without them keeps its parameters and study), layout and pad as one."""
    values = config.to_dict()
    for name in _STUDY_FIELDS:
        values.pop(name)
    values["smem"] = f"{values.pop('layout')}{values.pop('pad')}"
    return values


def _filled(values: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """`values` with the optional fields of `fields` it lacks at their default: a tall
    and a wide config that differ only in `wide` are two points of a space, not one."""
    return {f: values[f] if f in values else OPTIONAL_FIELDS[f] for f in fields}


class SearchSpace:
    """The valid configs of one study and the map between Optuna parameters and them.

    A parameter combination that is not a valid config (a tile too small for the vector, too
    many threads, ...) is repaired to the nearest valid config: fewest rank steps, then
    fewest changed choices, ties broken by the space's own order. Nothing invalid is launched.

    The tuner also repairs away from configs already tried on the shape (or being tried by
    another trial): Optuna's samplers may propose a point again, and TPE ignores failed
    trials, so it would propose a failing config over and over. Each trial thus measures a
    config nobody has measured, the nearest one to where the sampler wants to look.
    """

    def __init__(self, configs: Iterable[KernelConfig]) -> None:
        self.configs: tuple[KernelConfig, ...] = tuple(dict.fromkeys(configs))
        if not self.configs:
            raise TuningError("the search space is empty: no config fits this device and shape")
        rows = [_field_values(c) for c in self.configs]
        self._fields = tuple(dict.fromkeys(f for r in rows for f in r))
        rows = [_filled(r, self._fields) for r in rows]
        self._choices: dict[str, list[Any]] = {}
        self.distributions: dict[str, BaseDistribution] = {}
        self._ordinal: list[bool] = []
        for f in self._fields:
            choices = sorted({r[f] for r in rows}, key=lambda v: (str(type(v)), v))
            self._choices[f] = choices
            ordinal = all(type(v) is int for v in choices)
            self._ordinal.append(ordinal)
            if ordinal:
                self.distributions[f"{f}_rank"] = IntDistribution(0, len(choices) - 1)
            else:
                self.distributions[f] = CategoricalDistribution(choices)
        self._names = tuple(self.distributions)
        self._index = {f: {v: i for i, v in enumerate(ch)} for f, ch in self._choices.items()}
        points = [self._point(r) for r in rows]
        self._by_point = {p: c for p, c in zip(points, self.configs, strict=True)}
        self._by_key = {c.key: c for c in self.configs}
        self._position = {c.key: i for i, c in enumerate(self.configs)}
        self._matrix = np.array(points, dtype=float)
        self._is_choice = ~np.array(self._ordinal)

    def _point(self, values: Mapping[str, Any]) -> tuple[int, ...]:
        return tuple(self._index[f][values[f]] for f in self._fields)

    def __len__(self) -> int:
        return len(self.configs)

    def __contains__(self, config: object) -> bool:
        return isinstance(config, KernelConfig) and self._by_key.get(config.key) == config

    def by_key(self, key: str) -> KernelConfig | None:
        return self._by_key.get(key)

    def digest(self) -> str:
        """Identifies the parameters and their choices: a study cannot change them."""
        text = repr(sorted((n, repr(d)) for n, d in self.distributions.items()))
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    def params_of(self, config: KernelConfig) -> dict[str, Any]:
        """The Optuna parameters of a config of this space (for enqueueing it)."""
        if config not in self:
            raise TuningError(f"config {config.key} is not in this study's search space")
        point = self._point(_filled(_field_values(config), self._fields))
        return {
            name: (i if ordinal else self._choices[f][i])
            for name, f, ordinal, i in zip(
                self._names, self._fields, self._ordinal, point, strict=True
            )
        }

    def neighbours(self, config: KernelConfig) -> list[KernelConfig]:
        """The configs of this space one step from `config` (`config.neighbours`)."""
        return [c for c in neighbours(config) if c in self]

    def pair_steps(self, config: KernelConfig) -> list[KernelConfig]:
        """The configs of this space a step away in two size fields (`config.pair_steps`)."""
        return [c for c in pair_steps(config) if c in self]

    def config_for(self, params: Mapping[str, Any], taken: Collection[str] = ()) -> KernelConfig:
        """The config of a trial's parameters: exact if valid and not `taken` (keys of configs
        tried already), else the nearest valid one that is not taken (if any is left)."""
        point = tuple(
            int(params[name]) if ordinal else self._index[f][params[name]]
            for name, f, ordinal in zip(self._names, self._fields, self._ordinal, strict=True)
        )
        exact = self._by_point.get(point)
        if exact is not None and exact.key not in taken:
            return exact
        diff = np.abs(self._matrix - np.array(point, dtype=float))
        steps = np.where(self._is_choice, 0.0, diff).sum(axis=1)
        changed = np.where(self._is_choice, diff > 0, False).sum(axis=1)
        excluded = [self._position[k] for k in taken if k in self._position]
        if len(excluded) < len(self.configs):
            steps[excluded] = np.inf
        best = np.lexsort((np.arange(len(self.configs)), changed, steps))[0]
        return self.configs[int(best)]


# --- Optuna plumbing --------------------------------------------------------------------------------
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


def open_storage(
    url: str, *, heartbeat_interval: int = HEARTBEAT_INTERVAL, grace_period: int = GRACE_PERIOD
) -> optuna.storages.RDBStorage:
    """Optuna's storage on our database URL, with the heartbeat that finds dead trials.

    A trial whose heartbeat stopped (its process was killed) is failed by the next process
    that looks and enqueued again, so its config is retried; a live process's trials keep
    beating and are left alone.
    """
    from .store.engine import shared_engine_kwargs

    # Several processes share one SQLite file; a PostgreSQL server that never answers fails.
    engine_kwargs = shared_engine_kwargs(url)
    # Optuna creates its tables on first use without a lock: of two processes starting on a
    # new database, one may fail ("already exists"); it succeeds once the other is done.
    for attempt in range(8):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=heartbeat_interval,
                    grace_period=grace_period,
                    heartbeat_stale_trial_callback=(
                        optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=2)
                    ),
                )
        except sqlalchemy.exc.SQLAlchemyError as exc:
            if attempt == 7:
                display = sqlalchemy.make_url(url).render_as_string(hide_password=True)
                reason = " ".join(str(getattr(exc, "orig", exc)).split())[:300]
                raise StoreError(
                    f"cannot open Optuna's storage in the tuning database {display}: {reason}"
                ) from exc
            time.sleep(0.05 * 2**attempt)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def _holding_ctrl_c() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) until the block ends, then deliver it. Optuna's ask writes the
    new trial's row, RUNNING, before it returns the trial: an interrupt in between left a
    trial no handler knew to abandon. Off the main thread (Python raises KeyboardInterrupt
    only there) or under a handler set outside Python, it holds nothing."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    held: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            signal.raise_signal(signal.SIGINT)


def _trial_id(trial: Trial | FrozenTrial) -> int:
    # Optuna has no public accessor for the storage's trial id, which the heartbeat needs.
    return trial._trial_id


def _owner(trial_id: int) -> str:
    """Claim owner of a trial: Optuna trial ids are unique across the whole database."""
    return f"optuna-trial-{trial_id}"


class _Heartbeat:
    """Marks this process's running trials alive. Optuna beats only inside study.optimize(),
    and the tuner asks and tells trials itself."""

    def __init__(self, storage: optuna.storages.RDBStorage, interval: int) -> None:
        self._storage = storage
        self._interval = interval
        self._ids: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="autotranspose-heartbeat", daemon=True
        )

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def add(self, trial_id: int) -> None:
        self._storage.record_heartbeat(trial_id)  # at once: a trial with no beat is never stale
        with self._lock:
            self._ids.add(trial_id)

    def discard(self, ids: Iterable[int]) -> None:
        with self._lock:
            self._ids.difference_update(ids)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                ids = sorted(self._ids)
            for trial_id in ids:
                try:
                    self._storage.record_heartbeat(trial_id)
                except Exception:  # a missed beat is retried next interval
                    pass


# --- the tuning loop ---------------------------------------------------------------------------------
def _check_shape(shape: Sequence[int]) -> tuple[int, int, int]:
    dims = tuple(shape)
    if len(dims) == 2:
        dims = (1, *dims)
    if len(dims) != 3 or not all(type(d) is int and d >= 1 for d in dims):
        raise ShapeError(
            f"shape must be (batch, m, n) or (m, n) of positive ints, got {tuple(shape)!r}"
        )
    return dims  # type: ignore[return-value]


SEED_LIMIT = 2**32  # NumPy's RandomState, under Optuna's samplers, takes seeds below this


def _check_settings(
    trials: int,
    timeout: float | None,
    patience: int | None,
    batch: int,
    sampler: str,
    seed: int | None = None,
) -> None:
    """Refuse bad settings before a study, a worker or a process starts (a bad seed failed
    only deep inside NumPy, once the sampler was made)."""
    if type(trials) is not int or trials < 1:
        raise TuningError(f"trials must be a positive int, got {trials!r}")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise TuningError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if patience is not None and (type(patience) is not int or patience < 1):
        raise TuningError(f"patience must be a positive int, got {patience!r}")
    if type(batch) is not int or batch < 1:
        raise TuningError(f"batch must be a positive int, got {batch!r}")
    if sampler not in SAMPLERS:
        raise TuningError(f"unknown sampler {sampler!r}; choose one of: {', '.join(SAMPLERS)}")
    if seed is not None and (
        isinstance(seed, bool)
        or not isinstance(seed, (int, np.integer))
        or not 0 <= seed < SEED_LIMIT
    ):
        raise TuningError(
            f"seed must be an int from 0 to 2**32-1 (what the samplers' NumPy generator "
            f"takes), or None for a random one; got {seed!r:.40}"
        )


def known_good(
    elem_bytes: int,
    cls: ShapeClass,
    space: SearchSpace,
    *,
    device: DeviceInfo,
    store: Store | None = None,
    conjugate: bool = False,
    sides: tuple[int, int] | None = None,
) -> list[KernelConfig]:
    """Configs worth measuring first: the seed documents' kernel, the defaults (tiled, and
    the kind lookup serves this class by default; for few long rows, the tiles that fit the
    tuned shape's rows, from its `sides` (m, n)), what the lookup would serve today, and
    the bests of the nearest classes of this and every other GPU model we have results for
    (`lookup.warm_starts`), if this study can run them."""
    from . import _lookup as lookup

    seed = seed_config(elem_bytes)
    if conjugate:
        seed = seed.replace(conjugate=True)
    found = [
        seed,
        default_config(elem_bytes, max_vector=cls.vec, conjugate=conjugate),
        # the flat kernel for a skinny class, the staged one for an unaligned class: on the
        # H200 the best of float32 4099x6007 is a staged kernel (85.7% of copy) that 40
        # trials started from tiled warm starts never reached (76.8%)
        lookup.default_choice(elem_bytes, cls, device.limits, conjugate).config,
        # the other kinds for rows at any offset (only an unaligned class's space has them)
        staged_default(elem_bytes, conjugate),
        prmt_default(elem_bytes, conjugate),
        prmt_alternative(elem_bytes, conjugate),
        # tall rows: the tall byte-permute kernel (only a class of short rows has it)
        None if conjugate else tall_default(elem_bytes, cls.n),
        # few long rows: with the class's rows taken as the call's, the ordered wide kernel for
        # 1-byte rows too (the lookup default above is the class's run store)
        None if conjugate else wide_default(elem_bytes, cls.m),
        few_rows_default(elem_bytes, *sides, cls.vec, conjugate) if sides else None,
        # the direct kernel for the tuned shape (the seed documents' strategy, capped)
        direct_default(elem_bytes, *sides, conjugate) if sides else None,
        # few columns: the narrow tiled tile
        few_cols_default(elem_bytes, *sides, cls.vec, conjugate) if sides else None,
        # a side of 2-8 elements: the narrow direct tile
        *(narrow_configs(elem_bytes, *sides, conjugate) if sides else ()),
    ]
    if store is not None:
        try:
            choice = lookup.choose(device, elem_bytes, cls, store=store, conjugate=conjugate)
        except AutotransposeError:
            choice = None
        if choice is not None and choice.source != "default":
            found.append(choice.config)
    found += [
        c.replace(conjugate=conjugate)
        for c in lookup.warm_starts(device, elem_bytes, cls, WARM_STARTS, store=store)
    ]
    return [c for c in dict.fromkeys(found) if c in space]


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
    dims = _check_shape(shape)
    _check_settings(trials, timeout, patience, batch, sampler, seed)
    lay = check_layout(dims, layout)
    cls = _tuned_class(et.size, dims, lay, max_vector)
    space = SearchSpace(_configs(et.name, device, cls, conjugate, dims, lay))
    name = study_name(device, et.size, cls, space, conjugate, lay)
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
            sampler=make_sampler(sampler, seed),
            load_if_exists=True,
        )
        run = _Run(
            study=study,
            storage=storage,
            store=store,
            objective=objective,
            device=device,
            dtype=et.name,
            elem_bytes=et.size,
            shape=dims,
            cls=cls,
            space=space,
            progress=progress,
            grace_period=grace_period,
            device_index=device_index,
            layout=lay,
        )
        # no more than the budget: queued trials nobody asks would outlive the run
        run.enqueue(
            known_good(
                et.size,
                cls,
                space,
                device=device,
                store=store,
                conjugate=conjugate,
                sides=(dims[1], dims[2]),
            )[:trials]
        )
        settings = {
            "study": name,
            "dtype": et.name,
            "shape": list(dims),
            "shape_class": str(cls),
            "trials": trials,
            "timeout": timeout,
            "patience": patience,
            "sampler": sampler,
            "seed": seed,
            "batch": batch,
            "conjugate": conjugate,
            "space": len(space),
            "device_index": device_index,
            "layout": list(lay) if lay is not None else None,
            "max_vector": max_vector,
        }
        run_id = store.begin_run(device, settings)
        run.run_id = run_id
        status = "failed"
        try:
            with _Heartbeat(storage, heartbeat_interval) as heartbeat:
                run.heartbeat = heartbeat
                stopped_by = run.loop(
                    trials=trials, timeout=timeout, patience=patience, batch=batch, started=started
                )
            status = "done"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            store.finish_run(run_id, status)
            storage.remove_session()
            from . import _lookup as lookup

            lookup.clear_cache()
        return run.result(stopped_by, time.monotonic() - started)


def _tuned_class(
    elem_bytes: int, dims: tuple[int, int, int], layout: Layout | None, max_vector: int | None
) -> ShapeClass:
    """The class a tune's results go under: the widest vector its sizes and strides allow,
    as transpose() and permute() derive it for their calls, capped by `max_vector`."""
    b, m, n = dims
    vec = call_vec(elem_bytes, b, m, n, *(layout or Layout.contiguous(dims)))
    if max_vector is not None:
        if type(max_vector) is not int or max_vector not in (1, 2, 4, 8, 16):
            raise TuningError(
                f"max_vector must be 1, 2, 4, 8 or 16 (elements), got {max_vector!r:.40}"
            )
        vec = min(vec, max_vector)
    return shape_class(b, m, n, vec)


def _configs(
    dtype: str,
    device: DeviceInfo,
    cls: ShapeClass,
    conjugate: bool,
    dims: tuple[int, int, int],
    layout: Layout | None,
) -> list[KernelConfig]:
    """The study's search space: the class's configs, less the flat ones whose rows the
    layout's strides break (a strided call never runs them: `_dispatch.transpose.flat_fits_call`)."""
    configs = config_space(
        dtype, device.limits, conjugate=conjugate, max_vector=cls.vec, short_side=min(cls.m, cls.n)
    )
    if layout is None:
        return list(configs)
    _, m, n = dims
    return [c for c in configs if not c.flat or flat_fits(c, m, n, layout.ld_in, layout.ld_out)]


class _Run:
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
        self.run_id: int | None = None
        self.heartbeat: _Heartbeat | None = None
        self.counts = {"trials": 0, "measured": 0, "reused": 0, "failed": 0}
        self.done = 0
        self.total = 0
        self.best_gbps = 0.0

    # --- the study's view of this shape ---------------------------------------------------------
    def _mine(self, trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
        """Finished trials of this shape: told with a measurement (a stale or interrupted trial
        has no status and is not counted: its config is retried)."""
        return [
            t
            for t in trials
            if t.state in (TrialState.COMPLETE, TrialState.FAIL)
            and t.user_attrs.get("shape") == self.shape_text
            and "status" in t.user_attrs
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
            # Processes sharing the study enqueue at the same moment: a claim lets one of
            # them queue each config (duplicates would outlive the budget, or spend it twice).
            if c.key not in have and self.store.claim(
                self.study.study_name, f"queued:{self._claim_key(c.key)}", self._queue_owner
            ):
                self.study.enqueue_trial(
                    self.space.params_of(c), user_attrs={"config": c.key, "shape": self.shape_text}
                )

    def loop(
        self,
        *,
        trials: int,
        timeout: float | None,
        patience: int | None,
        batch: int,
        started: float,
    ) -> str:
        self.total = trials
        while True:
            optuna.storages.fail_stale_trials(self.study)
            every = self.study.get_trials(deepcopy=False)
            mine = self._mine(every)
            self.done = len(mine)
            ok = [t for t in mine if t.state == TrialState.COMPLETE and t.value is not None]
            best = max(ok, key=lambda t: (t.value, -t.number), default=None)
            self.best_gbps = float(best.value) if best is not None else 0.0  # type: ignore[arg-type]
            stall = sum(1 for t in mine if best is None or t.number > best.number)
            tried = {t.user_attrs.get("config") for t in mine}
            if self.done >= trials:
                self._drop_queued()
                return "trials"
            if timeout is not None and time.monotonic() - started >= timeout and mine:
                return "timeout"  # not before one batch ran: a result, not "no config ran"
            if patience is not None and stall >= patience:
                return "patience"
            if all(c.key in tried for c in self.space.configs):
                return "exhausted"
            running = [
                t.user_attrs.get("config")
                for t in every
                if t.state == TrialState.RUNNING and t.user_attrs.get("shape") == self.shape_text
            ]
            # Trials other processes are running count toward the goal: wait for them rather
            # than overshoot it.
            k = min(batch, trials - self.done - len(running))
            if patience is not None:
                k = min(k, patience - stall)
            if k <= 0:
                time.sleep(_POLL_S)
                continue
            if best is not None and trials - self.done <= min(LOCAL_SEARCH, trials // 2):
                self._step_from(
                    best, min(k, trials - self.done - len(running)), tried.union(running)
                )
            self._batch(k, taken={key for key in tried.union(running) if key is not None})

    def _step_from(self, best: FrozenTrial, k: int, tried: set[str | None]) -> None:
        """Queue up to `k` untried neighbours of the best config so far (`LOCAL_SEARCH`),
        then, where fewer than `k` are left (the single steps are running out without beating
        it), its two-field steps."""
        config = self.space.by_key(best.user_attrs.get("config", ""))
        if config is None:
            return
        queued = {
            t.user_attrs.get("config")
            for t in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
            if t.user_attrs.get("shape") == self.shape_text
        }
        fresh = [c for c in self.space.neighbours(config) if c.key not in tried]
        if len(fresh) < k:
            fresh += [c for c in self.space.pair_steps(config) if c.key not in tried]
        if any(c.key in queued for c in fresh):
            return  # the last batch's neighbours are still waiting their turn
        # What is queued already fills part of the budget left (`k` counts only what runs).
        self.enqueue(fresh[: k - len(queued)])

    def _drop_queued(self) -> None:
        """End this shape's queued trials once its budget is spent: processes that share the
        study may each have queued steps for the last places, and what none of them popped
        would otherwise wait in the study, to be run by the next tune beyond its own plan.
        A trial is claimed first (as `_own` does), so one another process just popped is
        left to it."""
        owner = f"run-{self.run_id}"
        storage = self.storage  # a study cannot end a waiting trial; its storage can
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            if t.user_attrs.get("shape") != self.shape_text:
                continue
            trial_id = _trial_id(t)
            if not self.store.claim(self.study.study_name, f"trial-{trial_id}", owner):
                continue
            try:
                storage.set_trial_user_attr(
                    trial_id, "error", "over the trial budget: queued after it was spent"
                )
                storage.set_trial_state_values(trial_id, TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass

    # --- one batch ------------------------------------------------------------------------------
    def _batch(self, k: int, taken: set[str]) -> None:
        asked: list[tuple[Trial, KernelConfig]] = []
        finished: set[int] = set()
        claimed: dict[str, Trial] = {}
        recorded: set[str] = set()
        current: Trial | None = None  # asked and owned, not yet in `asked`
        try:
            for _ in range(k):
                with _holding_ctrl_c():  # ask writes the RUNNING row before it returns it
                    trial = self.study.ask(self.space.distributions)
                    if not self._own(trial):
                        continue
                    current = trial  # an interrupt from here on abandons it too
                assert self.heartbeat is not None
                self.heartbeat.add(_trial_id(trial))
                try:
                    trial.set_user_attr("shape", self.shape_text)
                    every = self.study.get_trials(deepcopy=False)
                    if not self._within_budget(trial.number, every):
                        self._abandon(
                            trial, "over the trial budget: other processes filled it first"
                        )
                        self.heartbeat.discard([_trial_id(trial)])
                        break
                    # What other processes started since this batch began is taken too.
                    taken.update(
                        key
                        for t in every
                        if t.state == TrialState.RUNNING
                        and t.number != trial.number
                        and t.user_attrs.get("shape") == self.shape_text
                        and (key := t.user_attrs.get("config")) is not None
                    )
                    config = self.space.config_for(trial.params, taken)
                    trial.set_user_attr("config", config.key)
                    if self.device_index is not None:
                        trial.set_user_attr("device_index", self.device_index)
                except optuna.exceptions.UpdateFinishedTrialError:
                    # Another process ended the trial between this ask and now (a queued
                    # trial two processes popped at once, ended by the one that kept it, or
                    # one failed as stale): it is not this run's to measure. Ask again.
                    self.heartbeat.discard([_trial_id(trial)])
                    current = None
                    continue
                taken.add(config.key)
                asked.append((trial, config))
                current = None

            leaders: dict[str, Trial] = {}
            followers: list[tuple[Trial, KernelConfig]] = []
            to_measure: list[tuple[Trial, KernelConfig]] = []
            waiting: list[tuple[Trial, KernelConfig]] = []
            for trial, config in asked:
                if config.key in leaders:  # the same config twice in a batch: measure it once
                    followers.append((trial, config))
                    continue
                leaders[config.key] = trial
                state = self._take(trial, config, finished, claimed)
                if state == "claimed":
                    to_measure.append((trial, config))
                elif state == "busy":
                    waiting.append((trial, config))

            self._measure(to_measure, finished, recorded)
            self._wait_for_others(waiting, finished, claimed, recorded)
            for trial, config in followers:
                known = self._measured(config)
                if known is not None:
                    self._finish(trial, config, known, reused=True)
                else:
                    self._abandon(trial, "its config was measured by an unfinished trial")
                finished.add(trial.number)
        except BaseException as exc:
            reason = f"interrupted: {type(exc).__name__}: {exc}"[:500]
            for trial in [t for t, _ in asked] + ([current] if current is not None else []):
                if trial.number not in finished:
                    self._abandon(trial, reason)
            for key, trial in claimed.items():
                if key not in recorded:  # let another process measure it
                    self.store.release(
                        self.study.study_name, self._claim_key(key), _owner(_trial_id(trial))
                    )
            raise
        finally:
            if self.heartbeat is not None:
                self.heartbeat.discard(_trial_id(t) for t, _ in asked)

    def _own(self, trial: Trial) -> bool:
        """Whether `trial` is this run's alone. A queued trial (a known-good config, or one
        retried after its process died) is popped by reading it WAITING and then marking it
        RUNNING; on SQLite two processes can both do so and get the same trial, and would
        then both hold its claims. The first to claim the trial keeps it; the other forgets
        it and asks again. A new trial is a new row: nobody else has it."""
        if "config" not in trial.user_attrs:
            return True
        owner = f"run-{self.run_id}"
        return self.store.claim(self.study.study_name, f"trial-{_trial_id(trial)}", owner)

    def _within_budget(self, number: int, every: Sequence[FrozenTrial]) -> bool:
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
                ahead += shape == self.shape_text and "status" in t.user_attrs
        return ahead < self.total

    def _measure(
        self,
        pairs: list[tuple[Trial, KernelConfig]],
        finished: set[int],
        recorded: set[str],
    ) -> None:
        """Compile the batch ahead, measure it in one call, record each result, tell each trial."""
        if not pairs:
            return
        configs = [c for _, c in pairs]
        precompile = getattr(self.objective, "precompile", None)
        if precompile is not None:
            try:
                precompile(configs)
            except AutotransposeError:
                pass  # measuring compiles each config again and reports which one fails
        results = list(self.objective(configs))
        if len(results) != len(configs) or not all(isinstance(m, Measurement) for m in results):
            raise TuningError(
                f"the objective returned {len(results)} results for {len(configs)} configs; "
                "it must return one Measurement per config, in order"
            )
        for (trial, config), m in zip(pairs, results, strict=True):
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
            )
            recorded.add(config.key)
            self.counts["measured"] += 1
            self._finish(trial, config, m, reused=False)
            finished.add(trial.number)

    def _wait_for_others(
        self,
        waiting: list[tuple[Trial, KernelConfig]],
        finished: set[int],
        claimed: dict[str, Trial],
        recorded: set[str],
    ) -> None:
        """Configs another process claimed: take its result when it is stored; if that process
        died (its trial failed by the heartbeat check), claim the config and measure it here."""
        deadline = time.monotonic() + self.grace_period + 2 * HEARTBEAT_INTERVAL
        while waiting:
            still: list[tuple[Trial, KernelConfig]] = []
            takeover: list[tuple[Trial, KernelConfig]] = []
            optuna.storages.fail_stale_trials(self.study)
            for trial, config in waiting:
                state = self._take(trial, config, finished, claimed)
                if state == "claimed":
                    takeover.append((trial, config))
                elif state == "busy":
                    still.append((trial, config))
            self._measure(takeover, finished, recorded)
            waiting = still
            if waiting and time.monotonic() >= deadline:
                for trial, _ in waiting:
                    self._abandon(
                        trial, "another process is measuring its config and gave no result in time"
                    )
                    finished.add(trial.number)
                return
            if waiting:
                time.sleep(_POLL_S)

    # --- store and claims -------------------------------------------------------------------------
    def _take(
        self, trial: Trial, config: KernelConfig, finished: set[int], claimed: dict[str, Trial]
    ) -> str:
        """What to do with `config`: "claimed" (this process measures it now), "reused" (it
        was measured for this shape already; the trial is finished from the store and added
        to `finished`) or "busy" (another process holds the claim: look again later)."""
        known = self._measured(config)
        if known is not None:
            self._finish(trial, config, known, reused=True)
            finished.add(trial.number)
            return "reused"
        # noted before the claim is made: an interrupt after the database took it but before
        # this frame learned so still releases it (tests/test_multigpu.py's Ctrl-C test saw
        # such a claim outlive its run under load)
        claimed[config.key] = trial
        if self._claim(trial, config):
            return "claimed"
        del claimed[config.key]
        return "busy"

    def _measured(self, config: KernelConfig) -> Measurement | None:
        return self.store.measured(
            self.device.name, self.elem_bytes, self.shape, config, self.layout
        )

    def _claim_key(self, config_key: str) -> str:
        # One study serves every shape of its class; a claim is for one config on one shape.
        return f"{self.shape_text}:{config_key}"

    def _claim(self, trial: Trial, config: KernelConfig) -> bool:
        """Claim `config` for `trial`; a claim left by a dead trial is released first."""
        name, key = self.study.study_name, self._claim_key(config.key)
        if self.store.claim(name, key, _owner(_trial_id(trial))):
            return True
        dead = [
            t
            for t in self.study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
            if t.user_attrs.get("config") == config.key
            and t.user_attrs.get("shape") == self.shape_text
            and "status" not in t.user_attrs
        ]
        if not any(self.store.release(name, key, _owner(_trial_id(t))) for t in dead):
            return False
        return self.store.claim(name, key, _owner(_trial_id(trial)))

    # --- telling Optuna ---------------------------------------------------------------------------
    def _finish(self, trial: Trial, config: KernelConfig, m: Measurement, *, reused: bool) -> None:
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

    def _abandon(self, trial: Trial, reason: str) -> None:
        """End a trial with no measurement: FAIL without a status, so it is not counted."""
        try:
            trial.set_user_attr("error", reason)
            self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass

    # --- the answer ---------------------------------------------------------------------------
    def result(self, stopped_by: str, elapsed: float) -> TuneResult:
        mine = self._mine(self.study.get_trials(deepcopy=False))
        ok = [t for t in mine if t.state == TrialState.COMPLETE and t.value is not None]
        for t in sorted(ok, key=lambda t: (-(t.value or 0.0), t.number)):
            config = self.space.by_key(t.user_attrs.get("config", ""))
            m = self._measured(config) if config is not None else None
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


# --- permutes ----------------------------------------------------------------------------------
# The dtype a pass of words of each size is tuned as, when the permute's own dtype is of
# another size (a pass of "wide" elements moves runs of several array elements as one word).
_WORD_DTYPES = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64", 16: "complex128"}


@dataclass(frozen=True)
class PermuteTarget:
    """What tuning the permute of a contiguous array means: its plan and, for a transpose
    pass, the (batch, m, n), strides and shape class permute() serves that pass by (tuned
    exactly like a transpose of that class, measured on those strides). The pass is the
    plan's own, or else a batched transpose among its alternatives (which permute()'s first
    call times against the plan's pass: tuned, it competes at its best). A copy, packed or
    gather pass with no transpose alternative runs an untuned kernel: nothing to tune."""

    plan: Plan
    dtype: str  # the pass's element type: the permute's, or a word of the pass's size
    shape: tuple[int, int, int] | None = None  # the transpose pass's; None: nothing to tune
    layout: Layout | None = None  # its strides; None: contiguous (the class's own study)
    shape_class: ShapeClass | None = None
    tuned: Pass | None = None  # the transpose pass tuned: passes[0] or an alternative

    @property
    def untuned(self) -> str:
        """Why there is nothing to tune, or "" when there is a transpose pass."""
        if self.shape is not None:
            return ""
        if not self.plan.passes:
            return "nothing to tune: nothing to move"
        return f"nothing to tune: {self.plan.passes[0].kind} pass"

    def describe(self) -> str:
        """The pass on one line (`Pass.describe`), and the alternative tuned if it is one."""
        if not self.plan.passes:
            return "an empty array"
        text = self.plan.passes[0].describe()
        if self.tuned is not None and self.tuned != self.plan.passes[0]:
            text += f"; tuned: its alternative {self.tuned.describe()}"
        return text


def permute_target(dtype: Any, shape: Sequence[int], axes: Sequence[int]) -> PermuteTarget:
    """Plan the permute of a contiguous `dtype` array of `shape` by `axes` (`plan_permute`;
    its errors name the fix) and say what tuning it means: the transpose pass's (batch, m,
    n), strides (None when contiguous: the NCHW <-> NHWC permutes are plain batched
    transposes) and class, whose vec is what `_dispatch.transpose.batched_launch` derives for permute()'s
    launches (`shapes.pass_vec`)."""
    et = element_type(dtype)
    plan = plan_permute(tuple(shape), axes, et.size)
    p = next((q for q in (*plan.passes, *plan.alternatives) if q.kind == TRANSPOSE), None)
    if p is None:
        return PermuteTarget(plan, et.name)
    dims = (p.batch, p.m, p.n)
    layout = check_layout(dims, (p.ld_in, p.ld_out, p.bs_in, p.bs_out))
    name = et.name if p.elem_bytes == et.size else _WORD_DTYPES[p.elem_bytes]
    return PermuteTarget(plan, name, dims, layout, shape_class(*dims, pass_vec(p)), p)


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
) -> TuneResult | None:
    """Tune one (dtype, shape) on local GPU `device` into the tuning database (`db` URL, else
    AUTOTRANSPOSE_DB, else the user default): `autotranspose tune` for one case, from Python.
    The next `transpose()` of that class uses the result.

    With `axes`, `shape` is an array's (1 to 8 sides) and what is tuned is the permute of a
    contiguous one by `axes` (`autotranspose tune --axes`): its transpose pass, measured on
    the pass's own strides, into the pass's shape class, which the next permute() (and
    transpose() of that class) uses. Returns None when the permute's pass is a copy or a
    gather: those kernels are not tuned (`permute_target` says which).
    """
    from ._worker import GpuObjective, refuse_unguarded_main
    from .store import Store

    refuse_unguarded_main()  # before the database is opened again by a re-imported script
    et = element_type(dtype)
    layout: Layout | None = None
    max_vector: int | None = None
    if axes is None:
        dims = _check_shape(shape)
    else:
        if conjugate:
            raise TuningError("conjugate is for transposes; a permute (axes) has none")
        target = permute_target(et.name, shape, axes)
        if target.shape is None or target.shape_class is None:
            return None
        et = element_type(target.dtype)
        dims, layout, max_vector = target.shape, target.layout, target.shape_class.vec
    _check_settings(
        trials, timeout, patience, DEFAULT_BATCH, sampler, seed
    )  # before a worker starts
    store = Store.open(db)
    with GpuObjective(et.name, dims, device, conjugate=conjugate, layout=layout) as objective:
        return tune(
            et.name,
            dims,
            objective=objective,
            store=store,
            device=objective.device,
            trials=trials,
            timeout=timeout,
            patience=patience,
            sampler=sampler,
            seed=seed,
            conjugate=conjugate,
            device_index=device,
            layout=layout,
            max_vector=max_vector,
        )

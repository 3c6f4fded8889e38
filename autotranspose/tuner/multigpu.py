"""Tuning on several local GPUs at once: one process per GPU, GPUs of one model sharing studies.

Each GPU gets its own process, spawned (never forked: a child must not inherit the parent's
CUDA state), which runs the ordinary tuning path, :func:`autotranspose.tuner.study.tune` with its own
measuring worker, over the same list of (dtype, shape) cases. Studies are named by GPU model,
so the processes of GPUs of one model work on one study per case and together spend its trial
budget once (the claims and the budget check in the tuner split the trials); a GPU of another
model has studies, and budgets, of its own.

A child runs in a process group of its own, so a Ctrl-C at the terminal reaches the parent
only; the parent passes it on to every child (and its measuring worker), which abandons its
running trials and releases its claims as a single `tune` does, then stops. A child whose
parent is gone stops the same way.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from ..errors import DeviceError, TuningError
from ..plans.dtypes import element_type
from .study import (
    DEFAULT_BATCH,
    TrialReport,
    TuneResult,
    TuneSettings,
    check_shape,
    remember_ctrl_c,
)

_CTX = mp.get_context("spawn")
_STOP_WAIT_S = 30.0  # after a Ctrl-C, how long children get to put their trials in order

ObjectiveFactory = Callable[[str, tuple[int, int, int], int, bool], Any]
Devices = str | int | Sequence[int]


@dataclass(frozen=True)
class CaseFailure:
    """A case one GPU could not tune (no config ran correctly, say); the others go on."""

    dtype: str
    shape: tuple[int, int, int]
    error: str


@dataclass(frozen=True)
class DeviceRun:
    """What one GPU's process did: a result or a failure per case it reached, and `error`,
    why the process itself stopped early (None when it went through every case)."""

    index: int
    device: str | None  # the GPU model, once its measuring worker started
    results: tuple[TuneResult, ...]
    failures: tuple[CaseFailure, ...]
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.failures


Event = TrialReport | TuneResult | CaseFailure


# --- which GPUs -----------------------------------------------------------------------------------
def local_device_count() -> int:
    """GPUs the CUDA driver sees (after CUDA_VISIBLE_DEVICES); initialises the driver but
    creates no context."""
    from ..runtime.driver import device_count

    return device_count()


def device_spec(spec: Devices) -> str | tuple[int, ...]:
    """ "all", or the GPU indices `spec` names ("0,2", 3, [0, 2]); a bad spec is an error."""
    if isinstance(spec, str):
        text = spec.strip()
        if text.lower() == "all":
            return "all"
        items = [item.strip() for item in text.split(",")]
        if not all(item.isdigit() for item in items):
            raise TuningError(
                f"devices {spec!r} is not a list of GPU indices: give all, or indices like "
                "0,2 (`autotranspose devices` lists them)"
            )
        indices = tuple(int(item) for item in items)
    elif type(spec) is int:
        indices = (spec,)
    elif isinstance(spec, Sequence) and all(type(i) is int for i in spec):
        indices = tuple(spec)
    else:
        raise TuningError(f"devices must be 'all', an index or a list of indices, not {spec!r}")
    if not indices:
        raise TuningError("devices is empty: give all, or GPU indices like 0,2")
    if any(i < 0 for i in indices):
        raise TuningError(f"devices {spec!r}: GPU indices start at 0")
    twice = sorted({i for i in indices if indices.count(i) > 1})
    if twice:
        raise TuningError(
            f"devices {spec!r} names GPU {twice[0]} more than once: list each GPU once"
        )
    return indices


def resolve_devices(spec: Devices, count: int) -> tuple[int, ...]:
    """The indices `spec` names on a machine with `count` GPUs."""
    parsed = device_spec(spec)
    if count < 1:
        raise DeviceError(
            "the CUDA driver sees no GPU; check `nvidia-smi` and that CUDA_VISIBLE_DEVICES "
            "names one"
        )
    if parsed == "all":
        return tuple(range(count))
    missing = [i for i in parsed if i >= count]
    if missing:
        raise DeviceError(
            f"GPU {missing[0]} is not on this machine, which has {count} (indices 0 to "
            f"{count - 1}); `autotranspose devices` lists them"
        )
    return parsed  # type: ignore[return-value]


# --- the parent -----------------------------------------------------------------------------------
def tune_devices(
    cases: Sequence[tuple[Any, Sequence[int]]],
    *,
    devices: Devices = "all",
    db: str | None = None,
    trials: int = 40,
    timeout: float | None = None,
    patience: int | None = None,
    sampler: str = "tpe",
    seed: int | None = None,
    batch: int = DEFAULT_BATCH,
    conjugate: bool = False,
    make_objective: ObjectiveFactory | None = None,
    progress: Callable[[int, Event], None] | None = None,
    settings: TuneSettings | None = None,
) -> tuple[DeviceRun, ...]:
    """Tune every (dtype, shape) of `cases` on each GPU of `devices` ("all", "0,2", [0, 2]) in
    parallel, one process per GPU, into the tuning database (`db` URL, else AUTOTRANSPOSE_DB,
    else the user default). GPUs of one model share one study per case, so `trials` is the
    budget of each case on that model, not on each GPU (`timeout` holds for each process;
    `patience` looks at the shared study). Returns one DeviceRun per GPU, in the order given.

    `progress(index, event)` hears each trial (TrialReport), each case done (TuneResult) or
    failed (CaseFailure) as it happens. `make_objective(dtype, shape, index, conjugate)`
    replaces the GPU worker (tests: a synthetic objective); it must be picklable, a
    module-level function, since it runs in each GPU's process. The processes are spawned:
    in a script, call this under ``if __name__ == "__main__":``, as for any multiprocessing.
    `settings` gives trials, timeout, patience, sampler, seed and batch as one `TuneSettings`
    instead of as keywords; each process searches from a seed of its own.
    """
    from ..store import Store
    from .study import open_storage

    indices = resolve_devices(devices, local_device_count())
    todo = [(element_type(dtype).name, check_shape(shape)) for dtype, shape in cases]
    if not todo:
        raise TuningError("no cases to tune: give at least one (dtype, shape)")
    settings = TuneSettings.of(
        settings,
        trials=trials,
        timeout=timeout,
        patience=patience,
        sampler=sampler,
        seed=seed,
        batch=batch,
    )
    with Store.open(db) as store:  # creates or upgrades the schema once, before the children
        url = store.url
    open_storage(url).remove_session()  # Optuna's tables too
    factory = make_objective or _gpu_objective
    children: dict[int, Any] = {}
    conns: dict[Connection, int] = {}
    state = {i: _State() for i in indices}
    try:
        for position, index in enumerate(indices):
            own = settings.for_process(position)
            parent, child = _CTX.Pipe(duplex=False)
            proc = _CTX.Process(
                target=_child_main,
                args=(child, index, todo, own, conjugate, url, factory, os.getpid()),
                name=f"autotranspose-tune-gpu{index}",
            )
            proc.start()
            child.close()
            children[index] = proc
            conns[parent] = index
        _collect(conns, state, progress)
        for proc in children.values():
            proc.join()
    except BaseException:
        _stop(children)
        raise
    runs = []
    for index in indices:
        s = state[index]
        error = s.error
        code = children[index].exitcode
        if error is None and (code != 0 or not s.finished):
            error = _exit_reason(code)
        runs.append(DeviceRun(index, s.device, tuple(s.results), tuple(s.failures), error))
    return tuple(runs)


class _State:
    """What the parent has heard from one child so far."""

    def __init__(self) -> None:
        self.device: str | None = None
        self.results: list[TuneResult] = []
        self.failures: list[CaseFailure] = []
        self.error: str | None = None
        self.finished = False


def _collect(
    conns: dict[Connection, int],
    state: dict[int, _State],
    progress: Callable[[int, Event], None] | None,
) -> None:
    """Read the children's messages until every pipe is closed (each child has ended)."""
    while conns:
        for conn in wait(list(conns)):
            index = conns[conn]  # type: ignore[index]
            try:
                kind, payload = conn.recv()  # type: ignore[union-attr]
            except (EOFError, OSError):
                conn.close()  # type: ignore[union-attr]
                del conns[conn]  # type: ignore[arg-type]
                continue
            s = state[index]
            if kind == "device":
                s.device = payload
            elif kind == "error":
                s.error = payload
            elif kind == "finished":
                s.finished = True
            else:
                if kind == "result":
                    s.results.append(payload)
                elif kind == "failed":
                    s.failures.append(payload)
                if progress is not None:
                    progress(index, payload)


def _stop(children: dict[int, Any]) -> None:
    """Interrupt every child (and its worker) as a Ctrl-C would, give them time to put their
    trials and claims in order, then kill what is left."""
    alive = [p for p in children.values() if p.is_alive()]
    try:
        for proc in alive:
            _signal_group(proc.pid, signal.SIGINT)
        deadline = time.monotonic() + _STOP_WAIT_S
        for proc in alive:
            proc.join(max(0.0, deadline - time.monotonic()))
    finally:  # a second Ctrl-C ends the waiting, not the cleanup
        for proc in alive:
            if proc.is_alive():
                _signal_group(proc.pid, signal.SIGKILL)
                proc.join(5)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the child and its measuring worker
    except (ProcessLookupError, PermissionError):
        try:  # not yet in a group of its own
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"its process was killed by {name}"
    return f"its process ended with exit code {code} before finishing its cases"


# --- a child: one GPU ---------------------------------------------------------------------------
def _gpu_objective(dtype: str, shape: tuple[int, int, int], device: int, conjugate: bool) -> Any:
    from .worker import GpuObjective

    return GpuObjective(dtype, shape, device, conjugate=conjugate)


def _child_main(
    conn: Connection,
    index: int,
    cases: list[tuple[str, tuple[int, int, int]]],
    settings: TuneSettings,
    conjugate: bool,
    url: str,
    make_objective: ObjectiveFactory,
    parent_pid: int,
) -> None:
    """Tune every case on GPU `index`, telling the parent what happens."""
    if hasattr(os, "setpgrp"):
        os.setpgrp()  # Ctrl-C at the terminal reaches the parent, which passes it on
    remember_ctrl_c()  # the parent's one SIGINT must stop this process, wherever it lands
    _watch_parent(parent_pid)
    try:
        _run_cases(conn, index, cases, settings, conjugate, url, make_objective)
        last, code = ("finished", None), 0
    except KeyboardInterrupt:
        last, code = ("error", "interrupted"), 130
    except Exception as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        last, code = ("error", message[:2000]), 1
    try:
        conn.send(last)
        conn.close()
    except OSError:
        pass  # the parent is gone: nobody to tell
    sys.exit(code)


def _run_cases(
    conn: Connection,
    index: int,
    cases: list[tuple[str, tuple[int, int, int]]],
    settings: TuneSettings,
    conjugate: bool,
    url: str,
    make_objective: ObjectiveFactory,
) -> None:
    import optuna

    from ..store import Store
    from .study import tune

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def report(r: TrialReport) -> None:
        conn.send(("trial", r))

    with Store.open(url) as store:
        for dtype, shape in cases:
            objective = make_objective(dtype, shape, index, conjugate)
            try:
                conn.send(("device", objective.device.name))
                result = tune(
                    dtype,
                    shape,
                    objective=objective,
                    store=store,
                    device=objective.device,
                    settings=settings,
                    conjugate=conjugate,
                    device_index=index,
                    progress=report,
                )
            except TuningError as exc:
                message = " ".join(str(exc).split())
                conn.send(("failed", CaseFailure(dtype, shape, message)))
            else:
                conn.send(("result", result))
            finally:
                close = getattr(objective, "close", None)
                if close is not None:
                    close()


def _watch_parent(parent_pid: int) -> None:
    """Interrupt this process if its parent dies (killed, say): nobody else would stop it."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, name="autotranspose-parent-watch", daemon=True).start()

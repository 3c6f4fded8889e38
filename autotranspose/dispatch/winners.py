"""First-call winners kept in the tuning database, so that no other process measures them again.

`firstcall` times a small portfolio on the first call of a class nobody tuned on this GPU. This
module keeps what it found beyond the process: it records the winner in the default tuning
database like a tuning result (source "measured": device, element size, shape class, config
with its conjugate flag, GB/s, the kernel's version, the time; a copy ratio only if one was
measured), and it makes concurrent processes measure a class once. It knows nothing of CUDA:
:func:`settle` takes the measurement as a function, so its rules run on any machine.

What is written, and where (the policy):

- Only the default database (``$AUTOTRANSPOSE_DB``, else the per-user file), and only while it
  already exists, is autotranspose's, is at this code's schema revision and can be written. A
  ``transpose()`` never creates, migrates or writes a database nobody made for autotranspose
  (as lookup never does): ``autotranspose tune`` or ``autotranspose db upgrade`` make one. The
  writer is opened lazily, once per process and database; a failure to open or write it is one
  RuntimeWarning and the winner stays in this process only, never an exception in the call.
- ``AUTOTRANSPOSE_FIRST_CALL_STORE=0`` or :func:`set_enabled` switch the database off: each
  process then measures for itself (first-call measurement itself has its own switch).
- A measured result never takes a tuned result's place, even a stale one (the store's rule,
  `store.writes.replaces`); `tune` replaces measured results of its class. A class whose tuned
  result is stale is therefore measured once per process, until it is tuned again.

Processes racing for a new class (`claim` rows of study ``first-call``, one per device, element
size and class: conjugate or not, one best row serves both): the first to claim measures and
records, then drops its claim; no transaction is open while it measures. The others do not
measure: each waits for its row, polling, at most WAIT_S (a second), and serves it. Past that
(the claimant is still compiling or timing) it serves lookup's guess for this call, records
nothing, and leaves the class pending: a thread of its own reads the database again after
RECHECK_S, then less and less often, until the claimant's row is there or its claim is gone
or stale; then lookup forgets that class's guess (`lookup.renew`, which moves its generation)
and the next call of the class serves the row, or measures where nobody does. The calls in
between stay on the fast path: nothing is checked per call. A claim older than CLAIM_EXPIRE_S
is stale (its process died measuring) and the next first call takes it over.

No first call waits long on the database: its writer's statements wait BUSY_S at most for a
lock (SQLite's busy timeout, PostgreSQL's lock timeout), and one SQLite refuses at once is
tried again within that time; a lock not had in time is a StoreBusyError, handled as any
failure to write (one RuntimeWarning, the winner kept in this process). Threads of one process
never race here: `api` prepares one launch at a time.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from ..errors import StoreBusyError, StoreError
from ..kernels.config import KernelConfig
from ..kernels.shapes import ShapeClass
from ..kinds import inplace as inplace_kind
from ..runtime.device import DeviceInfo
from ..runtime.env import Switch
from ..store import Store, TunedEntry, migrations, resolve_url, sqlite_path
from ..store.measurement import Measurement
from . import lookup, policy

T = TypeVar("T")

ENV_VAR = "AUTOTRANSPOSE_FIRST_CALL_STORE"
STUDY = "first-call"  # the claims' study name (the tuner's studies are named after shapes)
# A claim older than this is stale: a measurement takes well under it (at most 0.2 s of GPU
# time, plus compiling a few dozen kernels in parallel when nvcc's cache is cold). Taking over
# a live claim only costs a second measurement: both winners are offered, the faster stays.
# Nobody waits for it: while a claim is live, the other processes serve lookup's guess.
CLAIM_EXPIRE_S = 30.0
WAIT_S = 1.0  # a loser waits this long at most for the claimant's row
BUSY_S = 1.0  # a first call's statement waits this long at most for a lock
POLL_S = 0.02
RECHECK_S = (0.1, 1.0)  # a pending class is read again after 0.1 s, then 0.2, ... up to 1 s

_switch = Switch(ENV_VAR)  # set_enabled() overrides the environment
_writers: dict[str, Store | None] = {}
_warned: set[str] = set()
_lock = threading.RLock()  # writer() warns (under it) when it cannot open one
_owner = [""]
# Classes another process was still measuring when a first call stopped waiting: (claim key,
# conjugate) -> the call. Read again by the one thread in `_poller` while there are any.
_pending: dict[tuple[str, bool], Call] = {}
_poller: list[threading.Thread] = []


class Call(NamedTuple):
    """The call whose class is measured: what the database row is about."""

    device: DeviceInfo
    dtype: str
    elem_bytes: int
    shape: tuple[int, int, int]
    cls: ShapeClass
    conjugate: bool
    problem: str = ""  # a cast-transpose's or an in-place one's; "" for a transpose


@dataclass(frozen=True)
class Winner:
    """What a first-call measurement found: the config, its GB/s on the call (bytes read plus
    written), a copy's GB/s if one was timed (0: not measured), the seconds per call."""

    config: KernelConfig
    gbps: float
    copy_gbps: float = 0.0
    seconds: float | None = None


def set_enabled(on: bool | None) -> None:
    """Keep first-call winners in the database or not, for this process (None: back to the
    environment variable, on by default)."""
    _switch.set(on)


def enabled() -> bool:
    return _switch.on()


def owner() -> str:
    """This process's name in claims: host, pid and a random part (pids are reused)."""
    if not _owner[0]:
        _owner[0] = f"{socket.gethostname()[:100]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    return _owner[0]


def claim_key(call: Call) -> str:
    """The claim of a class: one per (device, element size, class), as the best row."""
    key = f"{call.device.name}|{call.elem_bytes}|{call.cls}"
    if call.problem:
        key += f"|{call.problem}"
    return key if len(key) <= 255 else hashlib.sha256(key.encode()).hexdigest()


# --- the writer ----------------------------------------------------------------------------------
def writer() -> Store | None:
    """The default database opened to write, or None where the policy (module docstring) says
    not to: switched off, missing, foreign, at another schema revision, not writable."""
    if not enabled():
        return None
    try:
        url = resolve_url(None)
    except StoreError:
        return None  # lookup warns about a bad $AUTOTRANSPOSE_DB
    if url in _writers:
        return _writers[url]
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        return None  # nothing made yet; not remembered, so a later `db upgrade` counts
    with _lock:
        if url not in _writers:
            _writers[url] = _open_writer(url, path)
        return _writers[url]


def _open_writer(url: str, path: Path | None) -> Store | None:
    try:
        # creates and migrates nothing
        with Store.open(url, readonly=True, busy_timeout_s=BUSY_S) as reader:
            revision = reader.schema_revision()
            display = reader.display
    except StoreError:
        return None  # unusable or foreign: lookup warns about it
    if revision != migrations.head():
        _warn_once(
            url,
            f"autotranspose: first-call results are not kept in {display}: its schema is at "
            f"revision {revision}, this autotranspose writes {migrations.head()}; run "
            f"`autotranspose db upgrade --db {display}` (or set {ENV_VAR}=0 to silence this)",
        )
        return None
    if path is not None and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
        return None  # a read-only database (shared, or mounted so) is read, not written
    try:
        # at the head revision already: no migration, no write; statements wait BUSY_S
        return Store.open(url, busy_timeout_s=BUSY_S)
    except StoreError as exc:
        _warn_once(url, f"autotranspose: first-call results are not kept: {exc}")
        return None


def _give_up(store: Store, exc: StoreError) -> None:
    """A write failed: one warning, and no more writes to that database in this process."""
    _warn_once(
        store.url,
        f"autotranspose: first-call results are kept in this process only: {exc} "
        f"(set {ENV_VAR}=0 to silence this)",
    )
    with _lock:
        _writers[store.url] = None
    store.close()


def _warn_once(key: str, message: str) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=4)


def forget() -> None:
    """Close the writers (a later first call opens them again), forget the warnings and the
    pending classes."""
    with _lock:
        for store in _writers.values():
            if store is not None:
                store.close()
        _writers.clear()
        _warned.clear()
        _pending.clear()


def _forget_in_child() -> None:
    # A forked child must not use its parent's connections, nor its parent's claim name; the
    # parent's poller thread is not in the child (its pending classes stay the parent's).
    global _lock
    _lock = threading.RLock()
    for store in _writers.values():
        if store is not None:
            store.forget_connections()
    _writers.clear()
    _owner[0] = ""
    _pending.clear()
    _poller.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


# --- settling a class ----------------------------------------------------------------------------
def settle(
    call: Call,
    measure: Callable[[], Winner | None],
    runnable: Callable[[KernelConfig], bool] = lambda c: True,
) -> lookup.Choice | None:
    """The config for every later call of `call`'s class in this process (also remembered by
    lookup), measured by `measure` here, or by another process; None: serve lookup's guess
    (`measure` found nothing, or another process is still measuring after WAIT_S: then a
    later call serves its winner, see the module docstring).

    `runnable`: whether a config another process stored can run this call (else this process
    measures for itself, and keeps its winner in-process)."""
    store = writer()
    if store is None:
        return _remember(call, measure())
    try:
        return _shared(store, call, measure, runnable)
    except StoreError as exc:
        _give_up(store, exc)
        return _remember(call, measure())


def _shared(
    store: Store,
    call: Call,
    measure: Callable[[], Winner | None],
    runnable: Callable[[KernelConfig], bool],
) -> lookup.Choice | None:
    key = claim_key(call)
    deadline = time.monotonic() + WAIT_S
    while True:
        entry = _best(store, call)
        if entry is not None:
            config = entry.config.replace(conjugate=call.conjugate)
            if not runnable(config) or _apart(call, entry.shape):
                # measured here for this call (kept in-process): the stored result cannot run
                # it, or ran other kernels than this call's
                return _remember(call, measure())
            choice = lookup.Choice(
                config, entry.source, call.cls, entry.gbps, entry.ratio or None, entry.shape
            )
            _remember_choice(call, choice)
            return choice
        if _free(store, key) and _patient(
            store.claim, STUDY, key, owner(), expire_s=CLAIM_EXPIRE_S
        ):
            # the holder before us may have recorded its winner and released the claim
            # between our read of the best and our claim: read again before measuring
            if _best(store, call) is None:
                return _measure_and_record(store, call, key, measure)
            _release(store, key)
            continue
        if time.monotonic() >= deadline:
            _wait_in_background(call)
            return None
        time.sleep(POLL_S)


def _apart(call: Call, shape: tuple[int, int, int] | None) -> bool:
    """Whether a result measured on `shape` ran other kernels than `call` would: for a
    transpose, other few rows (the kernels of few rows are rendered for them); for an
    in-place transpose, rows apart from the call's (`policy.lines_apart`), whatever the
    rows."""
    _, rows, cols = call.shape
    if inplace_kind.parse_problem(call.problem) is not None:
        return policy.lines_apart(shape, rows, cols, call.elem_bytes)
    return policy.other_rows(shape, rows, cols)


def _best(store: Store, call: Call) -> TunedEntry | None:
    return _patient(store.best, call.device.name, call.elem_bytes, call.cls, call.problem)


def _patient(op: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """op(...), tried again while the database says it is busy, for BUSY_S at most: a
    statement waits that long for a lock by itself (the writer's busy timeout), but SQLite
    refuses some at once (a reader's snapshot that a writer moved past)."""
    deadline = time.monotonic() + BUSY_S
    while True:
        try:
            return op(*args, **kwargs)
        except StoreBusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(POLL_S)


def _free(store: Store, key: str) -> bool:
    """Worth a claim: nobody holds `key`, we do, or its holder's claim is stale (a read first,
    so that waiting processes do not queue for the write lock)."""
    held = _patient(store.claim_holder, STUDY, key)
    if held is None or held[0] == owner():
        return True
    return _stale(held[1])


def _stale(since: datetime) -> bool:
    return (datetime.now(timezone.utc) - since).total_seconds() > CLAIM_EXPIRE_S


# --- pending classes: another process measures them ----------------------------------------------
def _wait_in_background(call: Call) -> None:
    """Leave `call`'s class pending: the poller reads the database again until the claimant's
    winner is there or its claim is gone, then lookup forgets this process's guess."""
    with _lock:
        _pending[(claim_key(call), call.conjugate)] = call
        if not _poller:
            thread = threading.Thread(target=_poll, name="autotranspose-winners", daemon=True)
            _poller.append(thread)
            thread.start()


def pending() -> list[Call]:
    """The classes this process serves lookup's guess for while another process measures."""
    with _lock:
        return list(_pending.values())


def _poll() -> None:
    """The poller thread: reads the pending classes again, less and less often, and ends when
    none is left (a fork's child has none). Should it fail, the next pending class starts
    another."""
    me = threading.current_thread()
    try:
        delay = RECHECK_S[0]
        while True:
            time.sleep(delay)
            delay = min(2 * delay, RECHECK_S[1])
            with _lock:
                calls = list(_pending.items())
                if not calls:  # under the lock that adds one: none is left unread
                    _poller.remove(me)
                    return
            for key, call in calls:
                if _decided(call):
                    # lookup forgets the guess before the class leaves `pending()`: once
                    # nothing is pending, the next call of the class asks the database (the
                    # other order left a moment where neither held, and a call served the guess)
                    lookup.renew(call.device, call.elem_bytes, call.cls, call.problem)
                    with _lock:
                        if _pending.get(key) is call:
                            del _pending[key]
    finally:
        with _lock:
            if me in _poller:
                _poller.remove(me)


def _decided(call: Call) -> bool:
    """Whether the next call of a pending class should ask again: the claimant's row is
    there, or nobody measures the class any more (its claim released or stale), or the
    database cannot tell (then the next call's own first call finds out)."""
    store = writer()
    if store is None:
        return True
    try:
        if _best(store, call) is not None:
            return True
        held = _patient(store.claim_holder, STUDY, claim_key(call))
    except StoreError:
        return True
    return held is None or _stale(held[1])


def _measure_and_record(
    store: Store, call: Call, key: str, measure: Callable[[], Winner | None]
) -> lookup.Choice | None:
    try:
        winner = measure()
        if winner is not None:
            try:
                _patient(record, store, call, winner)
            except StoreError as exc:
                _give_up(store, exc)
        return _remember(call, winner)
    finally:
        _release(store, key)


def _release(store: Store, key: str) -> None:
    if _writers.get(store.url) is store:  # not given up on (closed) meanwhile
        try:
            _patient(store.release, STUDY, key, owner())
        except StoreError as exc:  # the claim expires by itself
            _give_up(store, exc)


def record(store: Store, call: Call, winner: Winner) -> bool:
    """Store `winner` as the "measured" result of its class (a measurement row and, unless a
    tuned or faster result is there, the class's best). Returns whether it is the best now."""
    m = Measurement(
        "ok",
        gbps=winner.gbps,
        copy_gbps=winner.copy_gbps,
        time_us=winner.seconds * 1e6 if winner.seconds else float("inf"),
    )
    b, rows, cols = call.shape
    return store.record(
        None,
        call.device,
        call.dtype,
        call.elem_bytes,
        (b, rows, cols),
        call.cls,
        winner.config,
        m,
        source="measured",
        problem=call.problem,
    )


def _remember(call: Call, winner: Winner | None) -> lookup.Choice | None:
    if winner is None:
        return None
    ratio = winner.gbps / winner.copy_gbps if winner.copy_gbps > 0 else None
    choice = lookup.Choice(
        winner.config, "measured", call.cls, winner.gbps or None, ratio, tuple(call.shape)
    )
    _remember_choice(call, choice)
    return choice


def _remember_choice(call: Call, choice: lookup.Choice) -> None:
    if inplace_kind.parse_problem(call.problem) is not None:
        lookup.remember_inplace(call.device, call.elem_bytes, call.problem, call.cls, choice)
    elif call.problem:
        lookup.remember_cast(call.device, call.problem, call.cls, choice)
    else:
        lookup.remember(call.device, call.elem_bytes, call.cls, call.conjugate, choice)

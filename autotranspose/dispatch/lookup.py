"""Which config serves a call: the tuned one, the nearest tuned one, a shipped one, or a default.

For (device, element size, shape class) the choice falls through:

1. "tuned": this device's best entry for exactly this class in the tuning database;
   "measured" where that entry is a first call's winner (``winners``), unless a shipped file
   has a tuned entry of exactly this class (a tuned result always outranks a measured one);
2. "nearest": its tuned entry of the nearest class (``ShapeClass.distance``);
3. "shipped": the same two steps over ``tuning_db/<device slug>.json`` shipped with the package;
4. "default": ``policy.default_choice``, the untuned default.

Which classes take only their own class's entries (skinny, unaligned and few-row classes:
another class's kernel wastes its tile there) and what every call gets with none is
`policy`'s to decide; lookup reads the results.

Only entries whose kernel the running code renders identically are served, and only configs the call can run:
no wider vectors than the class allows, within the device's block limits. A choice is cached
in-process per (device model and limits, element size, class, conjugate, database), so
after the first call for a key no database is queried. When this process records a new best
the store tells lookup (:func:`best_changed`, registered with `store.hooks`): a tuning result
or an import clears the cache and moves :data:`generation` (every prepared call chooses
again, `_dispatch.caches`); a first call's winner drops only its own class's cached choice,
which `winners` then sets to the winner itself (the calls this process prepared stay as they
are). :func:`clear_cache` clears it explicitly (another process writing the database is seen
after a restart or a ``clear_cache()``).

Lookup must never break a user's ``transpose()``: the default database is opened read-only (it
is not created, migrated or written just to be read), and an unreadable or foreign one is
warned about once and skipped.
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AutotransposeError, StoreError
from ..kernels.config import NEWEST, DeviceLimits
from ..kernels.shapes import ShapeClass, pass_vec, shape_class
from ..plans.permute import GATHER, PACKED, TRANSPOSE, Pass, Plan
from ..runtime.device import DeviceInfo
from ..store import hooks as store_hooks
from . import policy
from .lru import LRU
from .policy import Choice

if TYPE_CHECKING:
    from ..kernels.config import KernelConfig
    from ..kernels.packed import PackedKernel
    from ..kernels.vbox import VBoxKernel
    from ..store import Store, TunedEntry

SOURCES = ("tuned", "nearest", "shipped", "default", "measured")


class _DefaultStore:
    def __repr__(self) -> str:
        return "<the default tuning database>"


DEFAULT_STORE: Any = _DefaultStore()

# Cached choices, one per (device, element size, class, conjugate, database) or cast
# problem's class: classes are buckets of a call's sides, so a real program has tens to
# hundreds; 8192 keeps them all while a service of ever-new shapes stays bounded (`_lru`). A
# first call's winner dropped here is read again from the database where one keeps it,
# else measured again when its class comes back.
CHOICES_LIMIT = 8192
_choices: LRU[tuple[Any, ...], Choice] = LRU(CHOICES_LIMIT)
_shipped: dict[str, tuple[TunedEntry, ...]] = {}
_models: dict[Path, str] = {}  # shipped file -> its GPU model (shipped_everywhere)
_stores: dict[str, Store | None] = {}
_warned: set[str] = set()
_lock = threading.Lock()


# Bumped by clear_cache(): the dispatch keeps prepared calls per signature and drops them
# when this changes (`_dispatch.caches`), so a finished tuning run is used by the next call.
generation = 0


def clear_cache() -> None:
    """Forget cached choices and shipped files (the default store stays open)."""
    global generation
    with _lock:
        _choices.clear()
        _shipped.clear()
        generation += 1


def best_changed(change: store_hooks.FirstCallBest | None) -> None:
    """A best recorded in this process (`store.hooks`). A tuning result or an import (None)
    may change any choice: everything is chosen again. A first call's winner changes its own
    class's best only, and the process that measured it serves it already (`winners`
    remembers it right after the write): only that class's cached choices are dropped, and
    the generation stays, so no prepared call of another class is dropped."""
    if change is None:
        clear_cache()
        return
    with _lock:
        _drop_class(change)


def _drop_class(change: store_hooks.FirstCallBest) -> None:
    """Drop every cached choice of `change`'s device, class and problem (both conjugate
    flags: one best row serves both). Called under `_lock`."""
    for key in [k for k in list(_choices) if _of_class(k, change)]:  # list(): one C call
        _choices.pop(key, None)


def _of_class(key: tuple[Any, ...], change: store_hooks.FirstCallBest) -> bool:
    """Whether a cached choice's key is of `change`'s device, class and problem."""
    if key[0] == "inplace":  # ("inplace", name, limits, problem, e, cls, store)
        _, name, _, problem, elem_bytes, cls, _ = key
        return (name, problem, elem_bytes, cls) == (
            change.device,
            change.problem,
            change.elem_bytes,
            change.shape_class,
        )
    if key[0] == "cast":  # ("cast", name, limits, code, both, cls, aligned_out, store)
        from ..kinds import cast as cast_kind

        _, name, _, code, both, cls, _, _ = key
        return (name, cls) == (change.device, change.shape_class) and cast_kind.problem(
            code, both
        ) == change.problem
    name, _, elem_bytes, cls, _, _ = key  # a transpose's: (name, limits, e, cls, conj, store)
    return not change.problem and (name, elem_bytes, cls) == (
        change.device,
        change.elem_bytes,
        change.shape_class,
    )


store_hooks.on_best_changed(best_changed)  # a best recorded in this process reaches lookup


def choose(
    device: DeviceInfo | str,
    elem_bytes: int,
    cls: ShapeClass,
    *,
    store: Store | None = DEFAULT_STORE,
    conjugate: bool = False,
) -> Choice:
    """The config for a call on `device` with `elem_bytes`-byte elements in class `cls`.

    `store`: the tuning database to consult; by default the one :func:`Store.open` would open
    (if it exists), None for none (shipped results and the default only).
    """
    name, limits = (device, NEWEST) if isinstance(device, str) else (device.name, device.limits)
    key = (name, limits, elem_bytes, cls, conjugate, _store_key(store))
    hit = _choices.recent(key)
    if hit is not None:
        return hit
    choice = _choose(name, limits, elem_bytes, cls, store, conjugate)
    with _lock:
        _choices.keep(key, choice)
    return choice


def _store_key(store: Any) -> Any:
    if store is DEFAULT_STORE:
        return ("default", os.environ.get("AUTOTRANSPOSE_DB", ""))
    return None if store is None else store.url


def _choose(
    name: str,
    limits: DeviceLimits,
    elem_bytes: int,
    cls: ShapeClass,
    store: Any,
    conjugate: bool,
) -> Choice:
    own_only = policy.own_class_only(elem_bytes, cls, conjugate)
    db = _default_store() if store is DEFAULT_STORE else store
    if db is not None:
        try:
            tuned = db.entries(name, include_stale=False, elem_bytes=elem_bytes, problem="")
        except StoreError as exc:
            _warn_once(db.url, f"autotranspose: not using tuning database {db.display}: {exc}")
            tuned = []
        found = _pick(tuned, elem_bytes, cls, limits)
        if found is not None and (found[1] or not own_only):
            entry, exact = found
            if not exact:
                return _choice(entry, "nearest", conjugate)
            if entry.source == "tuned":
                return _choice(entry, "tuned", conjugate)
            ship = _pick(shipped(name), elem_bytes, cls, limits)
            if ship is not None and ship[1] and ship[0].source == "tuned":
                shipped_choice = _choice(ship[0], "shipped", conjugate)
                # a first call's winner over a shipped result far below the ceiling (which
                # the first call races: `far_below`) serves where it ran faster
                if not (policy.far_below(shipped_choice) and entry.ratio > ship[0].ratio):
                    return shipped_choice
            return _choice(entry, "measured", conjugate)
    found = _pick(shipped(name), elem_bytes, cls, limits)
    if found is not None and (found[1] or not own_only):
        return _choice(found[0], "shipped", conjugate)
    return policy.default_choice(elem_bytes, cls, limits, conjugate)


def cast_choice(
    device: DeviceInfo | str,
    code: str,
    cls: ShapeClass,
    *,
    both: bool = False,
    aligned_out: bool = True,
    store: Store | None = DEFAULT_STORE,
) -> Choice:
    """The config for a cast-transpose of the pair `code` ("bf16_e4m3", `kinds.cast.PAIRS`)
    in class `cls` (its launch's (batch, m, n) and input vector, as `_shapes.call_vec`
    derives it), writing the same-order output too where `both`.

    Over the results of this pair and output set (the problem, `kinds.cast.problem`): this
    device's tuned (or measured) result of exactly `cls`, else the shipped file's of exactly
    `cls`, else `kinds.cast.default` (`aligned_out`: whether the transposed rows start on
    16-byte boundaries). Unlike a transpose's, no nearest class and no result of the pair's
    other output set: on the H100 (docs/perf-notes.md) winners of 10-trial studies that beat
    the default by 3-8% on their own class ran 0.89-1.18x the default on neighbouring
    classes, and bfloat16 -> float8 configs tuned without the same-order output lost to the
    default on calls with it. Cached per (device model and limits, problem, class,
    database) like `choose`'s choices, and cleared with them."""
    from ..kinds import cast as cast_kind

    name, limits = (device, NEWEST) if isinstance(device, str) else (device.name, device.limits)
    key = _cast_key(name, limits, code, both, cls, aligned_out, store)
    hit = _choices.recent(key)
    if hit is not None:
        return hit
    src, dst = cast_kind.PAIRS[code]
    problem = cast_kind.problem(code, both)
    choice = _exact_choice(name, limits, src.size, problem, cls, store)
    if choice is None:
        choice = Choice(policy.cast_default(src, dst, aligned_out), "default")
    with _lock:
        _choices.keep(key, choice)
    return choice


def _cast_key(
    name: str,
    limits: DeviceLimits,
    code: str,
    both: bool,
    cls: ShapeClass,
    aligned_out: bool,
    store: Store | None,
) -> tuple[Any, ...]:
    return ("cast", name, limits, code, both, cls, aligned_out, _store_key(store))


def remember_cast(device: DeviceInfo, problem: str, cls: ShapeClass, choice: Choice) -> None:
    """Serve `choice` to every later cast-transpose of `problem` (`kinds.cast.problem`) and
    class `cls` in this process, whatever its output's alignment (a first call's winner)."""
    from ..kinds import cast as cast_kind

    parsed = cast_kind.parse_problem(problem)
    if parsed is None:
        raise ValueError(f"not a cast-transpose problem: {problem!r}")
    code, both = parsed
    with _lock:
        for aligned_out in (True, False):
            key = _cast_key(device.name, device.limits, code, both, cls, aligned_out, DEFAULT_STORE)
            _choices.keep(key, choice)


def remember_inplace(
    device: DeviceInfo, elem_bytes: int, problem: str, cls: ShapeClass, choice: Choice
) -> None:
    """Serve `choice` to every later in-place transpose of `problem` (`kinds.inplace.problem`)
    and class `cls` in this process (a first call's winner)."""
    key = _inplace_key(device.name, device.limits, problem, elem_bytes, cls, DEFAULT_STORE)
    with _lock:
        _choices.keep(key, choice)


def _inplace_key(
    name: str,
    limits: DeviceLimits,
    problem: str,
    elem_bytes: int,
    cls: ShapeClass,
    store: Store | None,
) -> tuple[Any, ...]:
    return ("inplace", name, limits, problem, elem_bytes, cls, _store_key(store))


def inplace_choice(
    device: DeviceInfo | str,
    elem_bytes: int,
    batch: int,
    m: int,
    n: int,
    *,
    store: Store | None = DEFAULT_STORE,
) -> Choice:
    """The in-place config (`kinds.inplace`) for transposing `batch` m x n matrices of
    `elem_bytes`-byte elements in place: this device's tuned (or measured) result of exactly
    the call's class and problem (`policy.inplace_class`, `policy.inplace_problem`: squares
    apart from rectangles), else the shipped file's, else `policy.inplace_default`. Exact
    classes only, as for casts: a class's passes (which COLS band, which PERMUTE) change with
    its sides. Cached per (device model and limits, problem, element size, class, database)
    like `choose`'s choices, and cleared with them."""
    name, limits = (device, NEWEST) if isinstance(device, str) else (device.name, device.limits)
    cls, problem = policy.inplace_class(batch, m, n), policy.inplace_problem(m, n)
    key = _inplace_key(name, limits, problem, elem_bytes, cls, store)
    hit = _choices.recent(key)
    if hit is not None:
        return hit
    choice = _exact_choice(name, limits, elem_bytes, problem, cls, store)
    if choice is None:
        choice = Choice(
            policy.inplace_config(elem_bytes, policy.inplace_default(elem_bytes, m == n)),
            "default",
        )
    with _lock:
        _choices.keep(key, choice)
    return choice


def _exact_choice(
    name: str,
    limits: DeviceLimits,
    elem_bytes: int,
    problem: str,
    cls: ShapeClass,
    store: Any,
) -> Choice | None:
    """A problem's result of exactly `cls` (casts, in-place transposes): the database's
    ("tuned", or a first call's "measured"), else the shipped file's; a tuned shipped result
    outranks a measured one. None: neither has one."""
    db = _default_store() if store is DEFAULT_STORE else store
    found = _exact(_stored(db, name, elem_bytes, problem), elem_bytes, problem, cls, limits)
    ship = _exact(shipped(name), elem_bytes, problem, cls, limits)
    if found is not None and found.source != "tuned" and ship is not None:
        if ship.source == "tuned":
            found = None  # a tuned shipped result outranks a first call's
    if found is not None:
        return _choice(found, "tuned" if found.source == "tuned" else "measured", False)
    if ship is not None:
        return _choice(ship, "shipped", False)
    return None


def _exact(
    entries: Iterable[TunedEntry],
    elem_bytes: int,
    problem: str,
    cls: ShapeClass,
    limits: DeviceLimits,
) -> TunedEntry | None:
    """The current entry of `problem`, `elem_bytes` and exactly `cls` this device can run."""
    for e in entries:
        if (
            not e.stale
            and e.problem == problem
            and e.elem_bytes == elem_bytes
            and e.shape_class == cls
            and e.config.fits(limits)
        ):
            return e
    return None


def _usable(
    entries: Iterable[TunedEntry], elem_bytes: int, cls: ShapeClass, limits: DeviceLimits
) -> list[TunedEntry]:
    """The current entries whose config can run a call of `cls` on a device with `limits`."""
    return [
        e
        for e in entries
        if not e.stale
        and not e.problem  # a transpose's result (a cast's is served by `cast_choice`)
        and e.elem_bytes == elem_bytes
        and (e.config.vec <= cls.vec or e.config.any_offset)  # these fit any call
        # a flat kernel's tile must span the short side; a register transpose runs as the
        # call's side renders it (`for_call`)
        and policy.for_call(e.config, cls.m, cls.n).applies(cls.m, cls.n)
        and e.config.fits(limits)
        and not _aligned_transfer_of_flat_prmt(e, elem_bytes, cls)
    ]


def _aligned_transfer_of_flat_prmt(entry: TunedEntry, elem_bytes: int, cls: ShapeClass) -> bool:
    """A flat byte-permute result of another class, for a class whose rows allow 8-byte
    vectors: they run there but lose to the tiled kernels (H200: 66-81% against 89-95% on
    1048576x32 and 32x1048576 of 1, 2 and 4 bytes; a user's tuned 20x7081411 int8 result,
    served as the nearest to 32x1048576 int8, took 67% where the shipped tiled one gets 94.5%)."""
    c = entry.config
    return (
        c.kind == "prmt"
        and c.params.flat
        and cls.vec * elem_bytes >= 8
        and entry.shape_class != cls
    )


def _nearness(cls: ShapeClass) -> Callable[[TunedEntry], tuple[float, float, ShapeClass]]:
    def key(e: TunedEntry) -> tuple[float, float, ShapeClass]:
        vec_gap = abs(math.log2(e.shape_class.vec) - math.log2(cls.vec))
        return (cls.distance(e.shape_class), vec_gap, e.shape_class)

    return key


def _pick(
    entries: Iterable[TunedEntry], elem_bytes: int, cls: ShapeClass, limits: DeviceLimits
) -> tuple[TunedEntry, bool] | None:
    """The entry of exactly `cls`, else the nearest usable one; (entry, exact) or None."""
    usable = _usable(entries, elem_bytes, cls, limits)
    for e in usable:
        if e.shape_class == cls:
            return e, True
    if not usable:
        return None
    return min(usable, key=_nearness(cls)), False


@dataclass(frozen=True)
class PermuteKernel:
    """The kernel that serves a permute plan's pass (`permute_kernel`): `kernel` names it (a
    transpose pass's config key; "cuMemcpyDtoDAsync" for one contiguous block; "none" when
    there is no pass); a transpose pass carries its class and lookup's `choice` for it."""

    pass_: Pass | None
    kernel: str
    shape_class: ShapeClass | None = None
    choice: Choice | None = None

    def source(self) -> str:
        """The kernel's CUDA source ("" for the driver's copy, or when there is no pass)."""
        from ..kernels.codegen import render, render_gather, render_packed, render_rows
        from ..kernels.vbox import VBoxKernel, render_vbox

        p = self.pass_
        if self.choice is not None:
            return render(self.choice.config)
        if p is None or p.contiguous:
            return ""
        if p.kind == GATHER:
            return render_gather()
        if p.kind == PACKED:
            spec = packed_kernel(p)
            return render_vbox(spec) if isinstance(spec, VBoxKernel) else render_packed([spec])
        return render_rows()


def packed_kernel(p: Pass, in_ptr: int = 0, out_ptr: int = 0) -> PackedKernel | VBoxKernel:
    """The kernel spec packed pass `p` runs at pointers aligned as `in_ptr` and `out_ptr` (0
    for a plan made without pointers): the vector box's where the plan gave vectors, else the
    packed kernels' (`dispatch.permute.build`'s choice, through `make_vbox` or
    `make_packed`)."""
    from ..kernels.packed import packed_args
    from ..kernels.vbox import vbox_spec

    e = p.elem_bytes
    if p.vectors[0]:
        return vbox_spec(
            e, p.dims, p.box, p.vectors, in_ptr, out_ptr, scatter=p.scatter, pad=p.pad
        )[0]
    return packed_args(
        e, p.dims, p.box, in_ptr, out_ptr, pipelined=p.pipelined, realign_out=p.realign_out
    ).kernel


def chooses_per_device(plan: Plan) -> bool:
    """Whether the kernel of `plan`'s pass is chosen per GPU model (a transpose pass: a tuned
    config); every other pass's kernel is fixed by the plan alone."""
    return bool(plan.passes) and plan.passes[0].kind == TRANSPOSE


def permute_kernel(
    plan: Plan, device: DeviceInfo | str | None = None, *, store: Any = DEFAULT_STORE
) -> PermuteKernel:
    """The kernel permute() runs for `plan`'s pass on `device` (a GPU model's name will do),
    before any first-call measurement: for a transpose pass, the config `choose` picks for
    the class permute() and `tune --axes` key it by (`shapes.pass_vec`), from `store`; for
    any other pass, the untuned kernel the plan names (`device` may then be None)."""
    from ..kernels.codegen import RUNS_KERNEL, gather_kernel_name, row_kernel_name

    p = plan.passes[0] if plan.passes else None
    if p is None:
        return PermuteKernel(None, "none")
    if p.kind == TRANSPOSE:
        if device is None:
            raise ValueError("a transpose pass's config is chosen per GPU model: give device")
        cls = shape_class(p.batch, p.m, p.n, pass_vec(p))
        choice = choose(device, p.elem_bytes, cls, store=store)
        return PermuteKernel(p, choice.config.key, cls, choice)
    if p.contiguous:
        return PermuteKernel(p, "cuMemcpyDtoDAsync")
    if p.kind == GATHER:
        return PermuteKernel(p, gather_kernel_name(p.elem_bytes))
    if p.kind == PACKED:
        return PermuteKernel(p, packed_kernel(p).name)
    return PermuteKernel(p, RUNS_KERNEL if p.realign else row_kernel_name(p.elem_bytes))


def neighbours(
    device: DeviceInfo, elem_bytes: int, cls: ShapeClass, k: int = 3, *, store: Any = DEFAULT_STORE
) -> list[KernelConfig]:
    """The configs of the `k` nearest tuned and shipped classes that can run a call of `cls`
    (candidates for a first-call measurement), nearest first, each config once."""
    db = _default_store() if store is DEFAULT_STORE else store
    entries = list(shipped(device.name)) + _stored(db, device.name, elem_bytes)
    return _nearest(entries, elem_bytes, cls, device.limits, k)


def warm_starts(
    device: DeviceInfo, elem_bytes: int, cls: ShapeClass, k: int = 6, *, store: Any = DEFAULT_STORE
) -> list[KernelConfig]:
    """The tuner's first trials after the seed and default configs: the configs of the `k`
    nearest classes this GPU model has results for (tuned or shipped), then those of the `k`
    nearest classes of every other GPU model (stored or shipped). Tuned results transfer
    well between classes and GPUs of one generation: on the H200 the best config of a
    class is often another class's best, which 40 sampled trials need not find."""
    db = _default_store() if store is DEFAULT_STORE else store
    own = list(shipped(device.name)) + _stored(db, device.name, elem_bytes)
    others = [e for e in shipped_everywhere() if e.device != device.name]
    others += [e for e in _stored(db, None, elem_bytes) if e.device != device.name]
    found = _nearest(own, elem_bytes, cls, device.limits, k)
    found += _nearest(others, elem_bytes, cls, device.limits, k)
    return list(dict.fromkeys(found))


def _stored(
    db: Store | None, device_name: str | None, elem_bytes: int, problem: str = ""
) -> list[TunedEntry]:
    if db is None:
        return []
    try:
        return db.entries(device_name, include_stale=False, elem_bytes=elem_bytes, problem=problem)
    except StoreError:
        return []  # choose() has warned about this database already


def _nearest(
    entries: Iterable[TunedEntry], elem_bytes: int, cls: ShapeClass, limits: DeviceLimits, k: int
) -> list[KernelConfig]:
    """The configs of the `k` nearest usable entries, nearest first, each config once."""
    found: list[KernelConfig] = []
    for e in sorted(_usable(entries, elem_bytes, cls, limits), key=_nearness(cls)):
        if e.config not in found:
            found.append(e.config)
        if len(found) == k:
            break
    return found


def remember(
    device: DeviceInfo, elem_bytes: int, cls: ShapeClass, conjugate: bool, choice: Choice
) -> None:
    """Serve `choice` to every later call of `cls` in this process (a first-call
    measurement's winner); cleared with the rest of the cache."""
    key = (device.name, device.limits, elem_bytes, cls, conjugate, _store_key(DEFAULT_STORE))
    with _lock:
        _choices.keep(key, choice)


def renew(device: DeviceInfo, elem_bytes: int, cls: ShapeClass, problem: str = "") -> None:
    """Forget the choices cached for one class of transposes (`problem` ""), or of a
    cast-transpose's `problem`, and move the generation: the next call of the class asks the
    database again, where another process has since recorded its first call's winner
    (`winners`), while the other classes keep theirs."""
    global generation
    with _lock:
        _drop_class(store_hooks.FirstCallBest(device.name, elem_bytes, cls, problem))
        generation += 1


def _choice(entry: TunedEntry, source: str, conjugate: bool) -> Choice:
    return Choice(
        config=entry.config.replace(conjugate=conjugate),
        source=source,
        shape_class=entry.shape_class,
        gbps=entry.gbps,
        ratio=entry.ratio,
        shape=entry.shape,
    )


def _warn_once(key: str, message: str) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=4)


def _default_store() -> Store | None:
    """The default database if it exists (lookup never creates one); None if unusable."""
    from ..store import Store, resolve_url, sqlite_path

    try:
        url = resolve_url(None)
    except StoreError as exc:
        _warn_once("resolve", f"autotranspose: not using a tuning database: {exc}")
        return None
    if url in _stores:
        return _stores[url]
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        return None  # nothing tuned yet; not cached, so a later tune is picked up
    try:
        opened: Store | None = Store.open(url, readonly=True)  # never creates or migrates
    except StoreError as exc:
        _warn_once(url, f"autotranspose: not using tuning database: {exc}")
        opened = None
    with _lock:
        _stores[url] = opened
    return opened


def _forget_stores_in_child() -> None:
    # A forked child must not use its parent's pooled connections (SQLite forbids carrying
    # one across fork); it reopens the default database on its next cache miss.
    global _lock
    _lock = threading.Lock()  # in case a parent thread held it at the fork
    for store in _stores.values():
        if store is not None:
            store.forget_connections()
    _stores.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_stores_in_child)


# --- shipped results ---------------------------------------------------------------------------
def tuning_db_dir() -> Path | None:
    """The shipped results: inside the installed package, or `tuning_db/` of a checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "tuning_db", here.parent / "tuning_db"):
        if candidate.is_dir():
            return candidate
    return None


def shipped(device_name: str) -> Sequence[TunedEntry]:
    """The shipped entries for a GPU model (empty when none ship); a bad file is warned about
    and ignored."""
    hit = _shipped.get(device_name)
    if hit is not None:
        return hit
    entries = _load_shipped(device_name)
    with _lock:
        _shipped[device_name] = entries
    return entries


def shipped_everywhere() -> tuple[TunedEntry, ...]:
    """The shipped entries of every GPU model (bad files warned about when that model is
    looked up). A file's model is read once per process; its entries come from `shipped()`
    and its cache."""
    directory = tuning_db_dir()
    if directory is None:
        return ()
    from ..store import textio

    found: list[TunedEntry] = []
    for path in sorted(directory.glob("*.json")):
        name = _models.get(path)
        if name is None:
            try:
                tf = textio.load(path)
            except StoreError:
                continue
            name = _models[path] = tf.device.name
        found += shipped(name)
    return tuple(found)


def _load_shipped(device_name: str) -> tuple[TunedEntry, ...]:
    directory = tuning_db_dir()
    if directory is None:
        return ()
    try:
        slug = DeviceInfo(device_name, (0, 0)).slug
    except AutotransposeError:
        return ()
    path = directory / f"{slug}.json"
    if not path.is_file():
        return ()
    from ..store import textio

    try:
        tf = textio.load(path)
    except StoreError as exc:
        _warn_once(str(path), f"autotranspose: ignoring shipped tuning file: {exc}")
        return ()
    if tf.device.name != device_name:
        return ()  # another model with the same slug
    return tf.entries

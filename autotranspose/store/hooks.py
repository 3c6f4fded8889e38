"""What the code above the store hands it: how to version a kernel, and whom to tell when a
best changes.

The store judges a result stale by comparing its stored kernel version with the running
code's version of the same config, but it renders no kernels: ``autotranspose/__init__.py``
hands it ``codegen.kernel_version`` and ``codegen.template_version`` once, when the package
is imported (:func:`use_kernel_versions`), so every store opened in the process, by any
caller, judges by them. Likewise it knows nothing of lookup: a module that caches what the
store holds registers a callback (:func:`on_best_changed`), called after every write that may
have changed a best, with what changed: a :class:`FirstCallBest` where the write was a first
call's winner (one class's best, which the process that measured it already serves), None for
any other write (a tuning result, an import: any best may have changed). Lookup registers its
``best_changed`` when it is imported.

This module imports nothing of SQLAlchemy, so the package can hand over its functions without
loading the database code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from ..errors import StoreError

if TYPE_CHECKING:
    from ..kernels.config import KernelConfig
    from ..kernels.shapes import ShapeClass


class FirstCallBest(NamedTuple):
    """A first call's winner ("measured") became the best of one class: the class's key."""

    device: str
    elem_bytes: int
    shape_class: ShapeClass
    problem: str  # "" for a transpose, a cast-transpose's `kinds.cast.problem`


Listener = Callable[["FirstCallBest | None"], None]

_kernel_version: Callable[[KernelConfig, str], str] | None = None
_template_version: Callable[[], str] | None = None
_listeners: list[Listener] = []


def use_kernel_versions(
    kernel_version: Callable[[KernelConfig, str], str], template_version: Callable[[], str]
) -> None:
    """Judge staleness by `kernel_version(config, problem)` (the running code's version of a
    config's kernel, or of its problem's program) and record `template_version()` (all
    kernel templates) with each run."""
    global _kernel_version, _template_version
    _kernel_version, _template_version = kernel_version, template_version


def on_best_changed(callback: Listener) -> None:
    """Call `callback(change)` after each write that may have changed a best (once per
    callback, however often it is registered): `change` is the class a first call's winner
    became the best of, or None (a tuning result or an import: any best)."""
    if callback not in _listeners:
        _listeners.append(callback)


def kernel_version(config: KernelConfig, problem: str = "") -> str:
    """The running code's version of `config`'s kernel (of its programs of `problem`, for a
    program's config): what a result of it is stored with now."""
    if _kernel_version is None:
        raise StoreError(_NOT_GIVEN)
    return _kernel_version(config, problem)


def versions(config: KernelConfig, problem: str = "") -> tuple[str, ...]:
    """The stored versions under which a result of `config` for `problem` is current: its
    version now, and for a program's config the version of every kernel its programs of any
    problem may run (what such results were stored with before they were versioned per
    problem: still current while none of those kernels changed)."""
    now = kernel_version(config, problem)
    every = kernel_version(config)
    return (now,) if every == now else (now, every)


def is_current(stored: str | None, config: KernelConfig, problem: str = "") -> bool:
    """Whether a result of `config` for `problem` stored with version `stored` is current."""
    return stored in versions(config, problem)


def template_version() -> str:
    """The running code's kernel templates, recorded with each run (for the record only)."""
    if _template_version is None:
        raise StoreError(_NOT_GIVEN)
    return _template_version()


def best_changed(change: FirstCallBest | None = None) -> None:
    """Tell every registered callback that a best may have changed (`change`: only this
    class's, to a first call's winner; None: any)."""
    for callback in list(_listeners):
        callback(change)


_NOT_GIVEN = (
    "the tuning database was given no kernel versions to judge results by; import "
    "autotranspose (its __init__ hands them over) or call autotranspose.store.hooks."
    "use_kernel_versions(codegen.kernel_version, codegen.template_version)"
)

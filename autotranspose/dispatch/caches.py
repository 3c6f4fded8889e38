"""Every cache between a call and its kernel, and when each is dropped.

A call signature maps to what runs it: a transpose's prepared `Launch` or a cast-transpose's
`CastLaunch` (`launches`; a cast's keys start with "cast"), a permute plan's steps (`steps`),
the plan of a permute signature (`planned`, in dispatch/permute.py), and a whole call made
ready for the driver, keyed by the array's own attributes (`hits`: the fast path,
`fastpath`, for transpose(), permute() and eager PyTorch cast_transpose() alike). Each is
bounded (`lru.LRU`, the bounds below), so a process of ever-new signatures stays bounded.

The one invalidation rule: what a signature was prepared with stays until lookup's
generation moves or `clear()` is called.

- `clear()` (the user's `clear_caches()`) drops everything, lookup's choices included.
- Lookup's generation moves when this process records a tuning result or imports results
  (`tune`, `tune_gpu`, `import` in-process: `store.hooks` tells `lookup.best_changed`):
  The fast path's keys carry the generation, so the next call of every signature takes the
  full path, where `fresh()` drops the launches, steps and hits: it is chosen again and runs
  the new results.
- A first call's winner recorded in this process does not move it: the process serves that
  winner already (`winners` keeps it in lookup), and the signatures prepared before it, of
  other classes, are served what they were. Dropping them would put every prepared signature
  back on the full path each time any new class is measured.
- A class whose first call served lookup's guess while another process was measuring it
  (`winners`' pending classes) is renewed once that process's winner is in the database:
  `lookup.renew` drops the class's choice and moves the generation, so every signature is
  prepared again once (rare: a process that waited past `winners.WAIT_S`).
- Other results another process writes are seen after a restart or `clear()`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from ..runtime import driver as _driver
from . import lookup
from .lru import LRU

# Each cache holds at most this many signatures, the least recently used dropped first
# (`_lru`): a real program's calls are a few hundred signatures (a model's layers, its batch
# sizes), so they all fit many times over, while a service fed ever-new shapes stays bounded
# (a launch with its prepared arguments is about 2 KB of host memory: 4096 of them, 8 MB). A
# signature dropped and called again takes the full path once (its class's choice is still
# in lookup: nothing is measured again).
LIMIT = 4096
# The fast path keeps a key per way a signature is called (a new output or a given one, each
# pointer alignment, each array library), so twice the signatures.
HITS_LIMIT = 2 * LIMIT

launches: LRU[tuple[Any, ...], Any] = LRU(LIMIT)
steps: LRU[tuple[Any, ...], Any] = LRU(LIMIT)
hits: LRU[tuple[Any, ...], Any] = LRU(HITS_LIMIT)
lock = threading.Lock()  # held while a launch or a plan's steps are built: one build a key
_generation = [lookup.generation]
_also: list[Callable[[], None]] = []  # memoised functions cleared with the rest


def fresh() -> None:
    """Drop the launches, steps and fast-path hits an older lookup generation chose (a
    tuning run finished, or results were imported, in this process): the hits' keys carry
    the generation, so none of them is reached again."""
    if _generation[0] != lookup.generation:
        launches.clear()
        steps.clear()
        hits.clear()
        _generation[0] = lookup.generation


def also_clear(fn: Callable[[], None]) -> None:
    """Register a memoised function's cache_clear with `clear()`."""
    _also.append(fn)


def clear() -> None:
    """Forget every prepared call and lookup's cached choices: the next call of each
    signature chooses again (and reads the tuning database and shipped files again)."""
    lookup.clear_cache()
    with lock:
        launches.clear()
        steps.clear()
        hits.clear()
        for fn in _also:
            fn()


def _after_fork_in_child() -> None:
    # The lock a parent thread may have held; and after the parent used the GPU, what it
    # prepared in its contexts (the child cannot use them: `_driver` refuses every call there).
    global lock
    lock = threading.Lock()
    if _driver.forked():
        clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

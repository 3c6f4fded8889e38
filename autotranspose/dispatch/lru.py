"""A bounded cache of what a call signature was prepared with: the least recently used entry
goes first once the bound is passed.

Every per-signature cache (the dispatch's launches, steps and fast-path hits, cast
signatures' prepared launches and hits, lookup's choices) is one of these, so a process that
makes calls of ever-new signatures (a service fed arbitrary shapes) keeps its host memory
bounded. No entry owns device memory: a prepared launch or program is host structs (the
driver copies a launch's arguments when it is queued) and the kernels it names stay loaded
in `_compiler`, so evicting an entry while a kernel it launched is still queued frees nothing
the GPU reads.

Reads are a plain `get` (the C dict lookup, no lock: the fast path reads with it and does not
reorder, see `recent`); writes take the cache's lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(OrderedDict, Generic[K, V]):  # type: ignore[type-arg]
    """At most `limit` entries, oldest use first: `keep` adds an entry as the newest and
    drops the least recently used past the bound; `recent` reads and marks an entry used.
    A plain `get` reads without marking (the fast path's: one dict lookup, nothing more)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"an LRU cache holds at least 1 entry, not {limit}")
        super().__init__()
        self.limit = limit
        self._lock = threading.Lock()

    def keep(self, key: K, value: V) -> V:
        """Add (or replace) `key` as the most recently used; past the bound, drop the least
        recently used. Returns `value`."""
        with self._lock:
            self[key] = value
            self.move_to_end(key)
            while len(self) > self.limit:
                self.popitem(last=False)
        return value

    def recent(self, key: K) -> V | None:
        """The entry of `key` (None if absent), marked as the most recently used."""
        value = self.get(key)
        if value is not None:
            try:
                self.move_to_end(key)
            except KeyError:  # dropped by another thread meanwhile: still a valid value
                pass
        return value

"""The bound on every per-signature cache (`autotranspose.dispatch.lru`): filled past it, a cache keeps
its bound and drops the least recently used entries first."""

from __future__ import annotations

import itertools

import pytest

from autotranspose.calls import cast as _cast, castargs as _castargs
from autotranspose.dispatch import caches, fastpath as _fastpath, lookup
from autotranspose.dispatch.lru import LRU
from autotranspose.kernels.shapes import ShapeClass


def test_past_its_bound_the_least_recently_used_goes_first(rng):
    limit = int(rng.integers(3, 50))
    cache: LRU[int, int] = LRU(limit)
    keys = [int(k) for k in rng.permutation(10 * limit)]
    for k in keys[:limit]:
        assert cache.keep(k, -k) == -k
    used = keys[: limit // 2]  # read (and marked) in this order: now the newest
    for k in used:
        assert cache.recent(k) == -k
    unread = keys[limit // 2 : limit]
    assert cache.get(keys[limit // 2]) == -keys[limit // 2]  # a plain get marks nothing
    added = keys[limit : limit + len(unread)]
    for k in added:
        cache.keep(k, -k)
    assert len(cache) == limit
    assert list(cache) == used + added  # every unread one dropped, oldest first
    assert all(k not in cache for k in unread)
    assert cache.recent(unread[0]) is None
    for k in keys:  # many more: still the bound, the newest kept
        cache.keep(k, -k)
    assert len(cache) == limit and list(cache) == keys[-limit:]


def test_keeping_a_key_again_replaces_it_as_the_newest():
    cache: LRU[str, int] = LRU(2)
    cache.keep("a", 1)
    cache.keep("b", 2)
    cache.keep("a", 3)
    cache.keep("c", 4)
    assert dict(cache) == {"a": 3, "c": 4}


def test_a_bound_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        LRU(0)


@pytest.fixture
def emptied():
    """The process's caches emptied before and after (what filling them leaves is dropped)."""
    for cache in _every_cache():
        cache.clear()
    yield
    for cache in _every_cache():
        cache.clear()
    lookup.clear_cache()


def _every_cache() -> list[LRU]:
    return [
        caches.launches,
        caches.steps,
        caches.hits,
    ]


@pytest.mark.parametrize(
    "cache, limit",
    [
        (caches.launches, caches.LIMIT),
        (caches.steps, caches.LIMIT),
        (caches.hits, caches.HITS_LIMIT),
    ],
    ids=["launches", "steps", "fast-path hits"],
)
def test_each_per_signature_cache_holds_its_bound(emptied, cache, limit):
    assert isinstance(cache, LRU) and cache.limit == limit
    for i in range(limit + 100):
        cache.keep(("signature", i), i)
    assert len(cache) == limit
    assert next(iter(cache)) == ("signature", 100) and ("signature", 99) not in cache


def test_the_fast_path_reads_the_dispatchs_bounded_hits():
    assert _fastpath._fast is caches.hits


@pytest.mark.parametrize("module", [_cast, _castargs], ids=["cast", "castargs"])
def test_cast_transpose_keeps_no_per_signature_cache_of_its_own(module):
    """cast_transpose() prepares and remembers its calls in the dispatch's caches
    (`caches.launches`, `caches.hits`), under their one bound and invalidation rule."""
    own = [name for name, value in vars(module).items() if isinstance(value, LRU)]
    assert own == []


def test_lookups_cached_choices_hold_their_bound(emptied):
    lookup.clear_cache()
    classes = [
        ShapeClass(1 << b, 1 << m, 1 << n, v)
        for v, b, m, n in itertools.product((1, 2, 4), range(16), range(16), range(16))
    ][: lookup.CHOICES_LIMIT + 50]
    first = lookup.choose("NVIDIA H100 80GB HBM3", 4, classes[0], store=None)
    for cls in classes[1:]:
        lookup.choose("NVIDIA H100 80GB HBM3", 4, cls, store=None)
        lookup.choose("NVIDIA H100 80GB HBM3", 4, classes[0], store=None)  # kept in use
    assert len(lookup._choices) == lookup.CHOICES_LIMIT
    assert lookup.choose("NVIDIA H100 80GB HBM3", 4, classes[0], store=None) is first
    key = ("NVIDIA H100 80GB HBM3", lookup.NEWEST, 4, classes[1], False, None)
    assert key not in lookup._choices  # the least recently used went first


def test_a_new_lookup_generation_drops_every_prepared_call(emptied, monkeypatch):
    """Results tuned or imported in this process move lookup's generation: the next full
    path's `fresh()` drops the transpose and cast launches, the permute steps and the fast
    path's hits (whose keys carry the old generation, so none is reached again)."""
    caches.fresh()
    caches.launches.keep(("cast", 0, "bfloat16"), "a cast launch")
    caches.launches.keep((0, (1, 64, 64)), "a transpose launch")
    caches.steps.keep(("steps",), "a permute's steps")
    caches.hits.keep(("cast", lookup.generation), "an eager cast call")
    caches.hits.keep(("torch", lookup.generation), "a transpose call")
    caches.fresh()  # the same generation: all kept
    assert len(caches.launches) == 2 and len(caches.steps) == 1 and len(caches.hits) == 2
    monkeypatch.setattr(lookup, "generation", lookup.generation + 1)
    caches.fresh()
    assert not caches.launches and not caches.steps and not caches.hits

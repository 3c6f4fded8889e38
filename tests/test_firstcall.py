"""The first call of a class nobody tuned: its portfolio and its switch (CPU); the measurement
itself runs in tests/test_firstcall_gpu.py."""

from __future__ import annotations

import itertools
import random

import pytest

from autotranspose.dispatch import firstcall, policy
from autotranspose.kernels.config import (
    FLAT_SHORT_SIDE,
    NEWEST,
    config_space,
    default_config,
    flat_default,
    seed_config,
    staged_default,
)


def _any(c):
    return True


@pytest.mark.parametrize("elem_bytes", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("conjugate", [False, True])
def test_the_portfolio_starts_with_the_guess_and_holds_every_kind_once(elem_bytes, conjugate):
    if conjugate and elem_bytes < 8:
        pytest.skip("conjugate is for complex types")
    rng = random.Random()
    dtype = {1: "int8", 2: "float16", 4: "float32", 8: "complex64", 16: "complex128"}[elem_bytes]
    space = list(config_space(dtype, max_vector=1))
    guess, *near = rng.sample(space, 4)
    near.append(guess)  # duplicates are dropped
    m, n = rng.randrange(2, FLAT_SHORT_SIDE + 1), rng.randrange(10_000, 10**6)
    got = policy.candidates(guess, near, elem_bytes, m, n, 1, conjugate, _any)
    assert got[0] == guess.replace(conjugate=conjugate)
    assert len(got) == len(set(got)) <= policy.MAX_CANDIDATES
    assert all(c.conjugate == conjugate for c in got)
    wanted = [
        default_config(elem_bytes, max_vector=1),
        staged_default(elem_bytes),
        flat_default(elem_bytes, m),
        seed_config(elem_bytes),
    ]
    for c in wanted:
        if c is not None and len(got) < policy.MAX_CANDIDATES:
            assert c.replace(conjugate=conjugate) in got


def test_the_portfolio_keeps_only_what_can_run_the_call():
    rng = random.Random()
    guess = default_config(4, max_vector=1)
    near = rng.sample(list(config_space("float32", max_vector=4)), 6)

    def runnable(c):
        return c.vec == 1 and not c.spans_short_side

    got = policy.candidates(guess, near, 4, 5000, 7000, 1, False, runnable)
    assert got and all(runnable(c) for c in got)
    # no flat default for a call with no short side
    assert not any(
        c.spans_short_side for c in policy.candidates(guess, [], 4, 5000, 7000, 1, False, _any)
    )


@pytest.mark.parametrize(
    "m, n", [(2528978, 182), (1069425, 162), (130, 4304117), (28881, 28881), (20001, 20001)]
)
def test_byte_permute_tiles_past_48_kib_are_raced_where_the_gpu_has_the_room(m, n):
    """1-byte rows at odd offsets: a tile past the static limit joins the race right after
    the rules' picks on a GPU that can run it (an H100's 227 KiB), and not on one that
    cannot; the guess stays first."""
    from autotranspose.kernels.config import DeviceLimits, prmt_default
    from autotranspose.kinds.base import STATIC_SHARED_MAX, shared_optin

    h100 = DeviceLimits(1024, STATIC_SHARED_MAX, "H100", (9, 0), shared_optin((9, 0)))
    guess = prmt_default(1)
    got = policy.candidates(guess, [], 1, m, n, 1, False, lambda c: c.fits(h100))
    wider = [c for c in got if c.dynamic_smem]
    assert got[0] == guess and len(wider) == 1 and wider[0].kind == "prmt"
    static = policy.candidates(guess, [], 1, m, n, 1, False, lambda c: c.fits(NEWEST))
    assert static and not any(c.dynamic_smem for c in static)
    aligned = policy.candidates(default_config(1), [], 1, m, n, 16, False, _any)
    assert not any(c.dynamic_smem for c in aligned)  # whole 4-byte words: no byte permutes


@pytest.mark.parametrize(
    "value, on", [("0", False), ("off", False), ("no", False), ("1", True), ("", True)]
)
def test_switched_by_the_environment_and_the_api(monkeypatch, value, on):
    monkeypatch.setenv(firstcall.ENV_VAR, value)
    assert firstcall.enabled() is (on or value == "")
    firstcall.set_enabled(not on)
    try:
        assert firstcall.enabled() is (not on)
    finally:
        firstcall.set_enabled(None)
    monkeypatch.delenv(firstcall.ENV_VAR)
    assert firstcall.enabled()


# --- the refinement after the portfolio (its control flow; the timings are a synthetic
# landscape standing in for `measure`, which tests/test_firstcall_gpu.py runs for real) ----
def _fake_measure(calls, spent_each=0.01, gbps=None):
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from _synthetic import score

    def rate(c):
        if gbps is not None:
            return gbps(c)
        return score(c).gbps if score(c).ok else None

    def measure(state, configs, make, src, dst, stream, ctx, budget_s=firstcall.BUDGET_S):
        calls.append(list(configs))
        secs = {c: 1.0 / rate(c) if rate(c) else None for c in configs}
        ok = {c: t for c, t in secs.items() if t is not None}
        best = min(ok, key=ok.__getitem__)
        if configs[0] in ok and ok[configs[0]] <= ok[best] * (1 + firstcall.MARGIN):
            best = configs[0]
        return firstcall.Outcome(best, secs, spent_each)

    return measure


def test_refinement_climbs_from_the_portfolio_winner_through_its_neighbours(monkeypatch):
    from _synthetic import score

    calls = []
    monkeypatch.setattr(firstcall, "measure", _fake_measure(calls))
    guess = default_config(4, max_vector=4)
    runnable = lambda c: c.tile_m <= 128  # noqa: E731
    out = firstcall.search(None, [guess], None, 0, 0, None, 0, runnable)
    assert out is not None and score(out.best).gbps > score(guess).gbps
    assert 2 <= len(calls) <= 1 + firstcall.REFINE_ROUNDS
    for before, after in itertools.pairwise(calls):
        assert after[0] in before  # each round re-times the winner so far, as its guess
        assert len(after) <= 1 + firstcall.REFINE_STEPS
        assert all(runnable(c) for c in after)
    assert out.gpu_s == pytest.approx(0.01 * len(calls))
    assert set(out.seconds) == {c for round_ in calls for c in round_}


def test_refinement_takes_two_fields_at_once_when_no_single_step_helps(monkeypatch):
    """A winner every single step from which is slower, and a better config a tile step and a
    per_thread step away together: the second round times the two-field steps."""
    from autotranspose.kernels.config import pair_steps

    guess = default_config(4, max_vector=4)
    better = pair_steps(guess)[0]
    calls = []
    rates = {guess: 2000.0, better: 2600.0}
    monkeypatch.setattr(
        firstcall, "measure", _fake_measure(calls, gbps=lambda c: rates.get(c, 1000.0))
    )
    out = firstcall.search(None, [guess], None, 0, 0, None, 0, _any)
    assert out is not None and out.best == better
    assert len(calls) == 1 + firstcall.REFINE_ROUNDS
    assert better not in calls[1] and better in calls[2]  # singles first, then the pairs
    assert all(c in pair_steps(guess) for c in calls[2][1:])


def test_refinement_stops_when_the_budget_is_spent(monkeypatch):
    calls = []
    monkeypatch.setattr(firstcall, "measure", _fake_measure(calls, spent_each=firstcall.BUDGET_S))
    firstcall.search(None, [default_config(4, max_vector=4)], None, 0, 0, None, 0, _any)
    assert len(calls) == 1


def test_a_shipped_tile_taller_than_the_call_s_rows_is_raced_like_a_guess():
    """A class spans sides up to twice apart: a shipped tiled or direct tile that overhangs
    the call (a 32-row tile on 17-31 rows) is raced; one that fits, or a flat kernel, is not."""
    from autotranspose.dispatch.policy import overhangs
    from autotranspose.kernels.config import flat_default

    rng = random.Random()
    tile = default_config(16).replace(tile_m=32, tile_n=64, per_thread=8)
    assert tile.kind == "tiled"
    assert overhangs(tile, rng.randint(17, 31), 977100)
    assert overhangs(tile, 977100, rng.randint(33, 63))
    assert not overhangs(tile, 32, 1048576) and not overhangs(tile, rng.randint(64, 9999), 64)
    flat = flat_default(4, 9)
    assert flat is not None and flat.kind == "flat" and not overhangs(flat, 9, 2000000)

"""The first call of a class nobody tuned: its portfolio and its switch (CPU); the measurement
itself runs in tests/test_firstcall_gpu.py."""

from __future__ import annotations

import random

import pytest

from autotranspose import firstcall
from autotranspose.config import (
    FLAT_SHORT_SIDE,
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
    got = firstcall.candidates(guess, near, elem_bytes, m, n, 1, conjugate, _any)
    assert got[0] == guess.replace(conjugate=conjugate)
    assert len(got) == len(set(got)) <= firstcall.MAX_CANDIDATES
    assert all(c.conjugate == conjugate for c in got)
    wanted = [default_config(elem_bytes, max_vector=1), staged_default(elem_bytes),
              flat_default(elem_bytes, m), seed_config(elem_bytes)]  # fmt: skip
    for c in wanted:
        if c is not None and len(got) < firstcall.MAX_CANDIDATES:
            assert c.replace(conjugate=conjugate) in got


def test_the_portfolio_keeps_only_what_can_run_the_call():
    rng = random.Random()
    guess = default_config(4, max_vector=1)
    near = rng.sample(list(config_space("float32", max_vector=4)), 6)

    def runnable(c):
        return c.vec == 1 and not c.flat

    got = firstcall.candidates(guess, near, 4, 5000, 7000, 1, False, runnable)
    assert got and all(runnable(c) for c in got)
    # no flat default for a call with no short side
    assert not any(c.flat for c in firstcall.candidates(guess, [], 4, 5000, 7000, 1, False, _any))


@pytest.mark.parametrize("value, on", [("0", False), ("off", False), ("no", False), ("1", True), ("", True)])
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

"""Few long rows of 4- to 16-byte elements (`config.few_rows_default`): tiles no taller than
the rows, raced at a first call, served by default to classes nobody tuned, a tuner warm
start (CPU); nvcc's resource report; correctness on the GPU for rows of every count the rule
serves, fresh data, poisoned output and a guard region."""

from __future__ import annotations

import random
import shutil

import numpy as np
import pytest
from _gpu import assert_match_reference
from _nvcc import assert_compile_without_spills

from autotranspose import firstcall, lookup
from autotranspose.config import (
    FEW_ROWS_MAX,
    NEWEST,
    TILE_SIZES,
    config_space,
    default_config,
    few_rows_default,
    staged_default,
)
from autotranspose.shapes import shape_class

SIZES = (4, 8, 16)
DTYPES = {4: "float32", 8: "complex64", 16: "complex128"}


def _every_rule_config() -> list:
    found = {few_rows_default(s, rows, 10 * rows, vec, conj)
             for s in SIZES for vec in (1, 2, 4, 8) for rows in range(1, FEW_ROWS_MAX + 2)
             for conj in ((False, True) if s >= 8 else (False,))}  # fmt: skip
    return sorted((c for c in found if c is not None), key=lambda c: c.key)


# --- the rule ----------------------------------------------------------------------------------
@pytest.mark.parametrize("elem_bytes", SIZES)
def test_its_tiles_fit_the_rows_in_words_of_8_or_16_bytes(elem_bytes: int) -> None:
    rng = random.Random()
    for _ in range(200):
        rows, vec = rng.randrange(TILE_SIZES[0], FEW_ROWS_MAX), rng.choice((1, 2, 4, 8))
        c = few_rows_default(elem_bytes, rows, 10 * rows, vec)
        if min(vec, 2, 16 // elem_bytes) * elem_bytes < 8:
            assert c is None, (rows, vec)
            continue
        assert c is not None and not (c.flat or c.staged or c.prmt or c.realign)
        assert c.tile_m <= rows and c.vec <= vec and 8 <= c.word_bytes <= 16
        assert c.raster == "col" and c.applies(rows, 10 * rows) and c.fits(NEWEST)
        assert c in set(config_space(DTYPES[elem_bytes], max_vector=vec))  # the tuner's space


@pytest.mark.parametrize("rows", [0, 1, TILE_SIZES[0] - 1, FEW_ROWS_MAX, 10 * FEW_ROWS_MAX])
def test_none_where_no_tile_fits_or_rows_are_not_few(rows: int) -> None:
    assert few_rows_default(8, rows, 10 * rows + 1, 2) is None


def test_none_unless_fewer_rows_than_columns() -> None:
    assert few_rows_default(8, 100, 100, 2) is None and few_rows_default(8, 100, 99, 2) is None
    assert few_rows_default(8, 100, 101, 2) is not None


def test_none_for_narrow_elements_and_words() -> None:
    assert few_rows_default(1, 64, 1000, 16) is None and few_rows_default(2, 64, 1000, 8) is None
    assert few_rows_default(4, 64, 1000, 1) is None  # 4-byte words: the wide byte-permute kernel's


def test_a_conjugate_rule_config_is_the_same_tiles_conjugated() -> None:
    c = few_rows_default(8, 100, 1000, 2, conjugate=True)
    assert c.conjugate and c.replace(conjugate=False) == few_rows_default(8, 100, 1000, 2)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_rule_config_compiles_without_spills(arch: str) -> None:
    configs = _every_rule_config()
    assert len(configs) >= 10
    assert_compile_without_spills(configs, arch)


# --- where it is used --------------------------------------------------------------------------
@pytest.mark.parametrize("elem_bytes", [8, 16])
def test_the_first_call_races_it_right_after_the_guess(elem_bytes: int) -> None:
    rng = random.Random()
    dtype = DTYPES[elem_bytes]
    guess, *near = rng.sample(list(config_space(dtype)), 4)
    m, n = rng.randrange(16, FEW_ROWS_MAX), rng.randrange(100_000, 3_000_000)
    got = firstcall.candidates(guess, near, elem_bytes, m, n, 1, False, lambda c: True)
    rule = few_rows_default(elem_bytes, m, n, 1)
    assert got[0] == guess and (rule == guess or got[1] == rule)
    # few columns (the rule is for rows): the nearest classes' results follow the guess
    got = firstcall.candidates(guess, near, elem_bytes, n, m, 1, False, lambda c: True)
    assert got[:2] == [guess, near[0]]


@pytest.mark.parametrize("elem_bytes", SIZES)
def test_a_class_nobody_tuned_gets_it_with_tiles_its_fewest_rows_fill(elem_bytes: int) -> None:
    rng = random.Random()
    m, n = rng.randrange(17, FEW_ROWS_MAX), rng.randrange(100_000, 3_000_000)
    cls = shape_class(1, m, n, 2)
    choice = lookup.default_choice(elem_bytes, cls, NEWEST)
    rule = few_rows_default(elem_bytes, cls.m // 2 + 1, cls.n // 2 + 1, 2)
    assert rule is not None and choice.config == rule and choice.source == "default"
    assert choice.config.tile_m <= cls.m // 2 + 1  # every call of the class has full tiles
    # rows of single 8-byte elements: the staged default as before (rows need not fill tiles)
    if elem_bytes == 8:
        odd = shape_class(1, m, n | 1, 1)
        assert lookup.default_choice(8, odd, NEWEST).config == staged_default(8)
    # many rows: the default tiled config as before
    assert lookup.default_choice(elem_bytes, shape_class(1, n, n, 2), NEWEST).config == \
        default_config(elem_bytes, max_vector=2)  # fmt: skip


# --- on the GPU --------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("elem_bytes", SIZES)
def test_rule_configs_match_the_reference_on_few_rows(elem_bytes: int) -> None:
    from autotranspose.compiler import activate, precompile

    rng = np.random.default_rng()
    state = activate(0)
    for _ in range(4):
        m = int(rng.integers(TILE_SIZES[0], FEW_ROWS_MAX))
        n = int(rng.integers(20_000, 200_000))
        vec = 2 if m % 2 == 0 and n % 2 == 0 else 1
        cfgs = [c for c in (few_rows_default(elem_bytes, m, n, v) for v in (1, vec)) if c]
        assert not precompile(state, cfgs)
        for shape in ((1, m, n), (1, m, n + 1), (3, m, n // 8 * 2)):
            usable = [c for c in cfgs if c.vec == 1 or (shape[1] % 2 == 0 and shape[2] % 2 == 0)]
            assert_match_reference(state, elem_bytes, shape, usable)

"""Few long rows of 4- to 16-byte elements (`policy.few_rows_default`): direct tiles for 8-
and 16-byte elements, tiled ones no taller than the rows for 4-byte words; the direct
defaults by shape (`config.direct_default`); raced at a first call, served by default to classes nobody tuned, a tuner warm
start (CPU); nvcc's resource report; correctness on the GPU for rows of every count the rule
serves, fresh data, poisoned output and a guard region."""

from __future__ import annotations

import functools
import random
import shutil

import numpy as np
import pytest
from _gpu import assert_match_reference
from _nvcc import assert_compile_without_spills

from autotranspose.dispatch import policy
from autotranspose.dispatch.policy import FEW_ROWS_COVER_MAX, few_rows_cover, few_rows_default
from autotranspose.kernels.config import (
    DIRECT_FEW_ROWS_MIN,
    DIRECT_SIZES,
    FEW_COLS_MAX,
    FEW_COLS_RATIO,
    FEW_ROWS_MAX,
    NEWEST,
    TILE_SIZES,
    cap_steps,
    config_space,
    default_config,
    direct_default,
    few_cols_default,
    occupancy_steps,
    prmt_default,
    wide_rows,
)
from autotranspose.kernels.shapes import shape_class

SIZES = (4, 8, 16)
DTYPES = {2: "float16", 4: "float32", 8: "complex64", 16: "complex128"}


@functools.cache
def _space(elem_bytes: int, vec: int, short_side: int | None = None) -> frozenset:
    """The tuner's space for these calls, built once per key: the rule tests ask hundreds of
    times, and building it is most of what they cost."""
    return frozenset(config_space(DTYPES[elem_bytes], max_vector=vec, short_side=short_side))


def _in_space(config, elem_bytes: int, vec: int, short_side: int) -> bool:
    """Whether the tuner's space for these calls has `config`, searched up to it: the
    few-columns test draws a new (vec, short side) nearly every time, where building each
    whole space (`_space`) was most of what it cost."""
    space = config_space(DTYPES[elem_bytes], max_vector=vec, short_side=short_side)
    return any(c == config for c in space)


def _every_rule_config() -> list:
    found = {
        few_rows_default(s, rows, 10 * rows, vec, conj)
        for s in SIZES
        for vec in (1, 2, 4, 8)
        for rows in range(1, FEW_ROWS_MAX + 2)
        for conj in ((False, True) if s >= 8 else (False,))
    }
    found |= {few_rows_default(2, rows, 10 * rows, 2) for rows in range(1, FEW_ROWS_MAX + 2)}
    found |= {few_rows_cover(4, rows, 10 * rows, 2) for rows in range(1, FEW_ROWS_COVER_MAX + 2)}
    found |= {
        few_cols_default(s, 10**6, cols, vec, conj)
        for s in SIZES
        for vec in (1, 2, 4)
        for cols in (4, 16, 17, FEW_COLS_MAX)
        for conj in ((False, True) if s >= 8 else (False,))
    }
    return sorted((c for c in found if c is not None), key=lambda c: c.key)


# --- the rule ----------------------------------------------------------------------------------
@pytest.mark.parametrize("elem_bytes", [8, 16])
def test_eight_and_sixteen_byte_rows_get_direct_tiles_at_any_alignment(elem_bytes: int) -> None:
    rng = random.Random()
    for _ in range(200):
        rows, vec = rng.randrange(DIRECT_FEW_ROWS_MIN, FEW_ROWS_MAX), rng.choice((1, 2, 4, 8))
        c = few_rows_default(elem_bytes, rows, 10 * rows, vec)
        assert c == direct_default(elem_bytes, rows, 10 * rows) and c.kind == "direct"
        assert c.tile_m == (16 if rows < 16 else 32) and c.min_blocks in cap_steps(c)
        assert c.applies(rows, 10 * rows) and c.fits(NEWEST)
        assert c in _space(elem_bytes, vec)  # the tuner's space


def test_four_byte_rows_in_8_byte_words_get_tiles_no_taller_than_the_rows() -> None:
    rng = random.Random()
    for _ in range(200):
        rows, vec = rng.randrange(TILE_SIZES[0], FEW_ROWS_MAX), rng.choice((1, 2, 4))
        c = few_rows_default(4, rows, 10 * rows, vec)
        if vec == 1:
            assert c is None, rows  # 4-byte words: the wide byte-permute kernel's
            continue
        assert c is not None and c.kind == "tiled" and not c.realign
        assert c.tile_m <= rows and c.vec == 2 and c.raster == "col" and c.fits(NEWEST)
        assert c in _space(4, vec)


def test_two_byte_rows_in_4_byte_words_get_tiles_of_up_to_128_rows() -> None:
    """The tallest tile that fits the rows, up to 128, of 2-element words, 8 a thread and a
    cap of 64 registers; none in 2- or 8-byte words or for fewer than 64 rows."""
    rng = random.Random()
    for _ in range(200):
        rows = rng.randrange(64, FEW_ROWS_MAX)
        c = few_rows_default(2, rows, 10 * rows, 2)
        assert c is not None and c.kind == "tiled" and not c.realign
        assert c.tile_m <= min(rows, 128) < 2 * c.tile_m and c.vec == 2 and c.fits(NEWEST)
        assert (c.per_thread, c.raster, c.pad) == (8, "col", 1) and c.min_blocks * c.threads == 1024
        assert c in _space(2, 2)
    assert few_rows_default(2, 63, 1000, 2) is None
    assert few_rows_default(2, 100, 1000, 1) is None and few_rows_default(2, 100, 1000, 4) is None
    got = policy.candidates(prmt_default(2), [], 2, 134, 777624, 2, False, lambda c: True)
    assert few_rows_default(2, 134, 777624, 2) in got[:5]  # after the guess and staged tiles


def test_four_byte_rows_the_rule_leaves_an_edge_of_race_a_tile_that_covers_them() -> None:
    """The smallest tile at least as tall as the rows, in 8-byte words, 8 a thread, registers
    capped at 64; raced right after the rule's tile. None where the rule's tiles have no edge
    (a multiple of 16 rows), for 16 rows or fewer, from FEW_ROWS_COVER_MAX rows, in 4-byte
    words and for other element sizes."""
    rng = random.Random()
    for _ in range(200):
        rows, vec = rng.randrange(1, 2 * FEW_ROWS_COVER_MAX), rng.choice((1, 2, 4))
        n = rng.randrange(rows + 1, 100 * rows + 2)
        c = few_rows_cover(4, rows, n, vec)
        if vec == 1 or rows % 16 == 0 or not 16 < rows < FEW_ROWS_COVER_MAX:
            assert c is None, (rows, vec)
            continue
        assert c is not None and c.kind == "tiled" and c.tile_m >= rows > c.tile_m // 2
        assert (c.vec, c.per_thread, c.raster, c.tile_n) == (2, 8, "col", 64)
        assert c.min_blocks == occupancy_steps(c.threads, (64,))[0] and c.fits(NEWEST)
        assert c in _space(4, vec)  # the tuner can find it, and refine it
        rule, guess = few_rows_default(4, rows, n, vec), default_config(4, max_vector=vec)
        got = policy.candidates(guess, [], 4, rows, n, vec, False, lambda c: True)
        assert got[: 3 if rule else 2] == [guess, *([rule] if rule else []), c]
    for elem_bytes in (1, 2, 8, 16):
        assert few_rows_cover(elem_bytes, 18, 10**6, 2) is None
    assert few_rows_cover(4, 18, 18, 2) is None  # not fewer rows than columns
    assert few_rows_cover(4, 18, 10**6, 2, conjugate=True) is None  # no 4-byte complex type


@pytest.mark.parametrize("rows", [0, 1, DIRECT_FEW_ROWS_MIN - 1, FEW_ROWS_MAX, 10 * FEW_ROWS_MAX])
def test_none_where_rows_are_too_few_or_not_few(rows: int) -> None:
    assert few_rows_default(8, rows, 10 * rows + 1, 2) is None


def test_none_unless_fewer_rows_than_columns() -> None:
    assert few_rows_default(8, 100, 100, 2) is None and few_rows_default(8, 100, 99, 2) is None
    assert few_rows_default(8, 100, 101, 2) is not None


def test_none_for_narrow_elements_and_words() -> None:
    assert few_rows_default(1, 64, 1000, 16) is None and few_rows_default(2, 64, 1000, 8) is None
    assert few_rows_default(4, 64, 1000, 1) is None  # 4-byte words: the wide byte-permute kernel's


def test_direct_defaults_follow_the_call_s_shape() -> None:
    for s in DIRECT_SIZES:
        rows, cols, square = (
            direct_default(s, *mn) for mn in ((20, 10**6), (10**6, 20), (5000, 5001))
        )
        assert rows.raster == "col" and rows.per_thread == 8 and cols.tile_m == 64
        assert square.tile_m == square.tile_n == 32 and square.per_thread == 4
        assert all(
            c.kind == "direct" and c.min_blocks in cap_steps(c) for c in (rows, cols, square)
        )
    assert direct_default(2, 20, 10**6) is None and direct_default(1, 5000, 5000) is None


def test_a_conjugate_rule_config_is_the_same_tiles_conjugated() -> None:
    c = few_rows_default(8, 100, 1000, 2, conjugate=True)
    assert c.conjugate and c.replace(conjugate=False) == few_rows_default(8, 100, 1000, 2)


# --- few columns: the narrow tiled tile a first call races ---------------------------------------
@pytest.mark.parametrize("elem_bytes", SIZES)
def test_few_columns_get_a_tiled_tile_barely_wider_than_them(elem_bytes: int) -> None:
    rng = random.Random()
    for _ in range(100):
        cols, vec = rng.randrange(1, FEW_COLS_MAX + 1), rng.choice((1, 2, 4, 8, 16))
        rows = rng.randrange(FEW_COLS_RATIO * cols, 10**7)
        c = few_cols_default(elem_bytes, rows, cols, vec)
        assert c is not None and c.kind == "tiled" and not c.realign
        assert c.tile_n == (16 if cols <= 16 else 32) and c.tile_n >= cols
        assert c.vec <= vec and c.vec * elem_bytes <= 16 and c.cache == "stream"
        assert c.min_blocks in (0, *occupancy_steps(c.threads)) and c.fits(NEWEST)
        # in the space the tuner searches for the class (it is a warm start there)
        assert _in_space(c, elem_bytes, vec, cols)


@pytest.mark.parametrize(
    ("elem_bytes", "rows", "cols"),
    [
        (1, 10**6, 4),
        (2, 10**6, 4),  # the tall byte-permute kernels' calls
        (4, 10**6, FEW_COLS_MAX + 1),
        (8, FEW_COLS_RATIO * 10 - 1, 10),  # not few columns
    ],
)
def test_no_few_columns_tile_where_it_does_not_apply(elem_bytes: int, rows: int, cols: int) -> None:
    assert few_cols_default(elem_bytes, rows, cols, 1) is None


@pytest.mark.slow
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
    got = policy.candidates(guess, near, elem_bytes, m, n, 1, False, lambda c: True)
    rule = few_rows_default(elem_bytes, m, n, 1)
    assert got[0] == guess and (rule == guess or got[1] == rule)
    # few columns (the rule is for rows): the direct kernel for the shape, then the nearest
    # classes' results
    got = policy.candidates(guess, near, elem_bytes, n, m, 1, False, lambda c: True)
    cols = few_cols_default(elem_bytes, n, m, 1)  # and, for at most 32 columns, the narrow tile
    assert got[: 4 if cols else 3] == [
        guess,
        direct_default(elem_bytes, n, m),
        *([cols] if cols else []),
        near[0],
    ]


@pytest.mark.parametrize("elem_bytes", SIZES)
def test_a_class_nobody_tuned_gets_it_for_its_fewest_rows(elem_bytes: int) -> None:
    rng = random.Random()
    m, n = rng.randrange(17, FEW_ROWS_MAX), rng.randrange(100_000, 3_000_000)
    for vec in (2, 1):  # 8-byte words, and rows of single elements at any alignment
        cls = shape_class(1, m, n | (vec == 1), vec)
        choice = policy.default_choice(elem_bytes, cls, NEWEST)
        rule = few_rows_default(elem_bytes, cls.m // 2 + 1, cls.n // 2 + 1, vec)
        if elem_bytes == 4 and vec == 1:  # no rule: the few-long-rows default (lookup), if any
            assert rule is None
            if wide_rows(4, cls.m, cls.n):
                assert choice.config == direct_default(4, cls.m, cls.n)
            else:
                assert choice.config.kind != "direct"
            continue
        assert rule is not None and choice.config == rule and choice.source == "default"
        # direct tiles cost the same full or edge; tiled ones fit the class's fewest rows
        assert choice.config.kind == "direct" or choice.config.tile_m <= cls.m // 2 + 1
    # many rows: the default tiled config as before
    assert policy.default_choice(
        elem_bytes, shape_class(1, n, n, 2), NEWEST
    ).config == default_config(elem_bytes, max_vector=2)


# --- on the GPU --------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("elem_bytes", SIZES)
def test_rule_configs_match_the_reference_on_few_rows(elem_bytes: int) -> None:
    from autotranspose.runtime.compiler import activate, precompile

    rng = np.random.default_rng()
    state = activate(0)
    for _ in range(4):
        m = int(rng.integers(DIRECT_FEW_ROWS_MIN, FEW_ROWS_MAX))
        n = int(rng.integers(20_000, 200_000))
        vec = 2 if m % 2 == 0 and n % 2 == 0 else 1
        cfgs = [c for c in (few_rows_default(elem_bytes, m, n, v) for v in (1, vec)) if c]
        assert not precompile(state, cfgs)
        for shape in ((1, m, n), (1, m, n + 1), (3, m, n // 8 * 2)):
            usable = [c for c in cfgs if c.vec == 1 or (shape[1] % 2 == 0 and shape[2] % 2 == 0)]
            assert_match_reference(state, elem_bytes, shape, usable)
        if elem_bytes == 4:  # the cover tile, on rows in 8-byte words it leaves an edge of
            rows = int(rng.choice([r for r in range(18, FEW_ROWS_COVER_MAX, 2) if r % 16]))
            cover = few_rows_cover(4, rows, n, 2)
            assert not precompile(state, [cover])
            for shape in ((1, rows, n // 2 * 2), (3, rows, n // 16 * 2)):
                assert_match_reference(state, 4, shape, [cover])

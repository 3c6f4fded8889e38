"""Register transposes (regt=True, kinds/regt.py, templates/regt/): validation, the stored
form, the space, serving (lookup's default, the first call's candidates, dispatch rendering a
served config for the call's side), the byte permutes' plan, the kernel's own source run on
the CPU (tests/emu/cuda_emu.h: every side, pointer offsets 0-15, pitches, batches, edges),
nvcc for sm_80 and sm_90 without spills; on the GPU against the reference."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from _emu import gxx, transpose
from _gpu import assert_match_reference

from autotranspose.dispatch import lookup, policy
from autotranspose.dispatch.policy import candidates, for_call
from autotranspose.errors import ConfigError
from autotranspose.kernels.codegen import kernel_params, kernel_source, render_outer
from autotranspose.kernels.config import (
    NEWEST,
    REGT_LANES,
    REGT_LONG,
    KernelConfig,
    config_space,
    neighbours,
    regt_alternative,
    regt_default,
    regt_space,
    regt_window,
)
from autotranspose.kernels.shapes import flat_fits, shape_class
from autotranspose.kinds.regt import RegtParams, byte_sources, permutes, prmt_expression

SIDES = [(1, s) for s in range(2, 17)] + [(2, s) for s in range(2, 9)]


def rg(s: int, side: int, wide: bool = True, long: int | None = None, **kw) -> KernelConfig:
    long = long or 256 * regt_window(s)
    tm, tn = (side, long) if wide else (long, side)
    return KernelConfig(
        s,
        tm,
        tn,
        1,
        1,
        0,
        "pad",
        "row",
        kind="regt",
        params=RegtParams(wide=wide, staged=kw.pop("staged", False)),
        **kw,
    )


# --- the config -----------------------------------------------------------------------------------
def test_key_kind_and_stored_form():
    c = rg(1, 5)
    assert c.kind == "regt" and c.threads == 256 and c.smem_bytes == 0 and c.any_offset
    assert c.key == "s1_m5_n4096_v1_t1_pad0_row_default_flat_wd_rg"
    assert KernelConfig.from_dict(c.to_dict()) == c
    assert c.to_dict()["regt"] is True
    assert "regt" not in KernelConfig(1).to_dict()  # other configs' stored form is as it was


@pytest.mark.parametrize(
    "change, says",
    [
        ({"elem_bytes": 4, "tile_m": 3, "tile_n": 1024}, "1- or 2-byte"),
        ({"tile_m": 65}, "2 to 16 elements (16 bytes; staged few rows 256)"),
        ({"tile_m": 257, "staged": True, "tile_n": 128}, "tile_m=257 must be one of"),
        ({"tile_m": 65, "staged": True, "tile_n": 256}, "must be one of [64, 128]"),
        ({"tile_m": 17}, "2 to 16 elements (16 bytes; staged few rows 256)"),
        ({"tile_m": 17, "staged": True, "tile_n": 1024}, "must be one of [256, 512]"),
        ({"tile_m": 257, "elem_bytes": 2, "staged": True, "tile_n": 64}, "tile_m=257 must be one"),
        ({"tile_m": 9, "elem_bytes": 2, "tile_n": 2048}, "2 to 8 elements"),
        ({"tile_n": 256}, "tile_n=256"),
        ({"tile_n": 512}, "32 threads"),
        ({"vec": 4}, "vec=1"),
        ({"per_thread": 2}, "per_thread=1"),
        ({"flat": False}, "spell no kernel kind"),
        ({"prmt": True}, "spell no kernel kind"),
        ({"cache": "stream", "pad": 1}, "pad=0"),
    ],
)
def test_invalid_regt_configs_say_what_to_change(change, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        rg(1, 5).replace(**change)


@pytest.mark.parametrize("bad", [{"regt": 1}, {"regt": "yes"}, {"tile_m": 5.0}])
def test_untrusted_fields_are_rejected_before_rendering(bad):
    with pytest.raises(ConfigError):
        KernelConfig.from_dict({**rg(1, 5).to_dict(), **bad})


def test_min_blocks_and_ordered_are_not_a_register_transpose_s():
    for change in ({"min_blocks": 2}, {"ordered": True}, {"direct": True}, {"conjugate": True}):
        with pytest.raises(ConfigError):
            rg(1, 5).replace(**change)


# --- the kernel's plan -----------------------------------------------------------------------------
@pytest.mark.parametrize("s, side", SIDES)
@pytest.mark.parametrize("wide", [True, False])
def test_byte_permutes_move_every_byte_once_at_most_three_a_word(s, side, wide):
    """The permutes' plan, evaluated in NumPy on a thread's loaded words, is the transpose."""
    w = 16 // s
    if wide:  # side rows x w columns of the window
        block = np.arange(side * w * s, dtype=np.uint8).reshape(side, w * s)
        loaded = block.ravel()
        want = block.reshape(side, w, s).transpose(1, 0, 2).ravel()
    else:  # w rows of side elements
        block = np.arange(w * side * s, dtype=np.uint8).reshape(w, side * s)
        loaded = block.ravel()
        want = block.reshape(w, side, s).transpose(1, 0, 2).ravel()
    got = np.array([loaded[4 * wd + b] for word in byte_sources(s, side, wide) for wd, b in word])
    assert np.array_equal(got, want)
    words = [prmt_expression(word) for word in byte_sources(s, side, wide)]
    assert all(e.count("__byte_perm") <= 3 for e in words)
    assert permutes(s, side, wide) <= 3 * 4 * side


def _eval_perm(expr: str, x: list[int]) -> int:
    """Evaluate a rendered word expression in Python (the PRMT semantics)."""

    def byte_perm(a: int, b: int, sel: int) -> int:
        v = a | b << 32
        return sum(((v >> 8 * ((sel >> 4 * i) & 7)) & 0xFF) << 8 * i for i in range(4))

    return eval(
        expr.replace("__byte_perm", "byte_perm").replace("u)", ")").replace("0u", "0"),
        {
            "byte_perm": byte_perm,
            "x": x,
        },
    )


@pytest.mark.parametrize("s, side", [(1, 3), (1, 5), (1, 16), (2, 3), (2, 7)])
@pytest.mark.parametrize("wide", [True, False])
def test_rendered_words_are_the_plan(s, side, wide):
    rng = np.random.default_rng(side)
    x = [int(v) for v in rng.integers(0, 2**32, 4 * side, dtype=np.uint64)]
    for word in byte_sources(s, side, wide):
        got = _eval_perm(prmt_expression(word), x)
        want = sum(((x[wd] >> 8 * b) & 0xFF) << 8 * i for i, (wd, b) in enumerate(word))
        assert got == want


# --- the space and serving ------------------------------------------------------------------------
def test_the_space_holds_regt_configs_for_the_exact_short_side():
    for dtype, s in (("int8", 1), ("float16", 2)):
        found = [c for c in config_space(dtype, short_side=5) if c.kind == "regt"]
        assert found and all(5 in (c.tile_m, c.tile_n) for c in found)
        assert {c.flag("wide") for c in found} == {True, False}
        assert {c.threads for c in found} == {64, 128, 256, 512}
        assert any(c.persistent for c in found)
        assert found == [c for c in regt_space(s, NEWEST, 5)]
    wide13 = {
        c.threads
        for c in config_space("int8", short_side=13)
        if c.kind == "regt" and c.flag("wide")
    }
    assert wide13 == {64, 128, 256}  # 512 threads spilled
    # 17-64 bytes of rows: staged only, a 4-byte word a thread (64 and 128 threads)
    for dtype, side in (("int8", 17), ("int8", 64), ("float16", 9), ("float16", 32)):
        found = [c for c in config_space(dtype, short_side=side) if c.kind == "regt"]
        assert found and all(
            c.flag("staged") and c.flag("wide") and c.tile_m == side for c in found
        )
        assert {c.threads for c in found} <= {64, 128} and 64 in {c.threads for c in found}
    # 65-256 bytes of rows: staged tiles, a byte of columns a thread (64 and 128 threads)
    for dtype, side in (("int8", 65), ("int8", 256), ("float16", 33), ("float16", 128)):
        found = [c for c in config_space(dtype, short_side=side) if c.kind == "regt"]
        assert found and all(
            c.flag("staged") and c.flag("wide") and c.tile_m == side for c in found
        )
        assert {c.threads for c in found} <= {64, 128} and 64 in {c.threads for c in found}
    assert not [c for c in config_space("int8", short_side=257) if c.kind == "regt"]
    assert [c for c in config_space("float16", short_side=129) if c.kind == "regt"]  # 258 bytes
    assert not [c for c in config_space("float16", short_side=257) if c.kind == "regt"]
    assert not [c for c in config_space("float32", short_side=3) if c.kind == "regt"]
    assert not [c for c in config_space("int8") if c.kind == "regt"]


@pytest.mark.parametrize(
    "s, m, n, wide",
    [
        (1, 5, 20000003, True),
        (1, 20000003, 5, False),
        (1, 8, 8000001, True),
        (2, 3, 16777216, True),
    ],
)
def test_lookup_serves_the_class_a_regt_default_dispatch_renders_for_the_call(s, m, n, wide):
    cls = shape_class(1, m, n, 1)
    choice = policy.default_choice(s, cls)
    assert choice.config.kind == "regt" and choice.config.flag("wide") == wide
    cfg = for_call(choice.config, m, n)
    assert cfg.applies(m, n) and min(cfg.tile_m, cfg.tile_n) == min(m, n)
    assert cfg.replace(tile_m=cfg.tile_m) == cfg


def test_no_regt_default_past_16_bytes_or_for_wider_elements():
    # few rows of 17-64 bytes: raced (staged, a word a thread), not lookup's default
    assert regt_default(1, 17, 10**6).params.staged and regt_default(2, 32, 10**6).params.staged
    assert regt_default(1, 17, 10**6, exact=False) is None
    assert regt_default(2, 9, 10**6, exact=False) is None
    # few rows of 65-256 bytes: raced (staged tiles), not lookup's default
    assert regt_default(1, 65, 10**6).params.staged and regt_default(2, 128, 10**6).params.staged
    assert regt_default(1, 65, 10**6, exact=False) is None
    assert regt_default(2, 33, 10**6, exact=False) is None
    assert regt_default(1, 257, 10**6) is None and regt_default(2, 257, 10**6) is None
    assert regt_default(2, 131, 10**6).threads == 128  # rows, not bytes: 262 bytes
    # raced where 128 threads fit their shared memory (64 lost to the ordered wide kernel)
    assert regt_default(1, 191, 10**6).threads == 128 and not regt_default(1, 191, 10**6).realign
    # ... past it, the tile that loads its units straight from the rows (128 threads fit)
    assert regt_default(1, 192, 10**6).realign and regt_default(1, 256, 10**6).threads == 128
    # where both are raced: the same tile, its units straight from the rows
    other = regt_alternative(regt_default(1, 139, 10**6))
    assert other.realign and other.tile_m == 139 and other.smem_bytes < 20000
    assert (
        regt_alternative(regt_default(1, 192, 10**6)) is None
        and regt_alternative(regt_default(1, 40, 10**6)) is None
    )
    with pytest.raises(ConfigError, match="realign=True"):
        rg(1, 40, long=512, staged=True, realign=True)
    # raced where 128 threads fit the shared memory (64 lost on 48-58 rows of bytes)
    assert regt_default(1, 47, 10**6).threads == 128 and regt_default(1, 48, 10**6) is None
    assert regt_default(1, 10**6, 17) is None  # few columns: at most 16 bytes
    assert regt_default(4, 3, 10**6) is None
    assert policy.default_choice(1, shape_class(1, 20, 10**6, 1)).config.kind != "regt"
    assert policy.default_choice(4, shape_class(1, 3, 10**6, 1)).config.kind != "regt"


# (element bytes, few rows): the most rows or columns a first call races it for, and the
# largest class bound lookup serves it by default (the sweeps, kinds/regt.py)
RACED = {(1, True): 47, (1, False): 10, (2, True): 32, (2, False): 8}
DEFAULT = {(1, True): 16, (1, False): 8, (2, True): 8, (2, False): 8}


@pytest.mark.parametrize("s, side", SIDES)
@pytest.mark.parametrize("wide", [True, False])
def test_served_where_it_won(s, side, wide):
    m, n = (side, 10**7 + 1) if wide else (10**7 + 1, side)
    raced = regt_default(s, m, n)
    assert (raced is not None) == (side <= RACED[(s, wide)])
    if raced is not None:
        assert raced.flag("wide") == wide and raced.applies(m, n)
        assert raced.flag("staged") == (wide and side >= 3)
        if raced.flag(
            "staged"
        ):  # 128 threads where the static shared memory holds them, capped on few rows
            assert raced.threads == (128 if side <= 11 else 64) and raced.fits(NEWEST)
            assert raced.min_blocks == (8 if side <= 5 else 0)
        else:
            assert raced.threads == (64 if wide and side * s <= 6 else 256)
    cls = shape_class(1, m, n, 1)
    served = policy.default_choice(s, cls).config
    assert (served.kind == "regt") == (min(cls.m, cls.n) <= DEFAULT[(s, wide)]), (
        s,
        side,
        wide,
        served.key,
    )
    found = candidates(served, [], s, m, n, 1, False, lambda c: c.applies(m, n))
    assert any(c.kind == "regt" for c in found) == (
        side <= RACED[(s, wide)] or served.kind == "regt"
    )


def test_for_call_keeps_what_it_cannot_render():
    c = rg(1, 8)
    assert for_call(c, 5, 10**6).tile_m == 5
    # staged: the block and the register cap follow the rows (shared memory, registers)
    staged = regt_default(1, 8, 10**6)
    assert for_call(staged, 16, 10**6) == regt_default(1, 16, 10**6)
    assert for_call(staged, 4, 10**6) == regt_default(1, 4, 10**6)
    assert for_call(staged.replace(cache="stream"), 4, 10**6).cache == "stream"
    assert for_call(c, 20, 10**6) is c  # no regt kernel for 20 rows: not applicable, unchanged
    assert not c.applies(20, 10**6) and not c.applies(5, 10**6)
    tall = rg(2, 4, wide=False)
    assert for_call(tall, 10**6, 3).tile_n == 3


def test_the_first_call_races_the_regt_config_right_after_the_guess():
    guess = policy.default_choice(1, shape_class(1, 24000007, 5, 1)).config
    guess = for_call(guess, 24000007, 5)
    found = candidates(guess, [], 1, 24000007, 5, 1, False, lambda c: c.applies(24000007, 5))
    assert found[0] == guess and found[0].kind == "regt"
    # a guess of another kind: the regt config comes right after it
    other = KernelConfig(1, 256, 8, 1, 8, 1, "pad", "row", kind="direct")
    found = candidates(other, [], 1, 24000007, 5, 1, False, lambda c: c.applies(24000007, 5))
    assert found[0] == other and found[1].kind == "regt" and found[1].tile_n == 5


def test_strides_the_kernel_cannot_run_are_not_flat_fits():
    wide, tall = rg(1, 5), rg(1, 5, wide=False)
    assert flat_fits(wide, 5, 1000, 1003, 5) and not flat_fits(wide, 5, 1000, 1000, 6)
    assert flat_fits(tall, 1000, 5, 5, 1001) and not flat_fits(tall, 1000, 5, 6, 1000)
    assert not flat_fits(wide, 6, 1000, 1000, 6)


def test_neighbours_step_the_block_and_keep_the_side():
    c = rg(1, 5)
    near = neighbours(c)
    assert near and all(n.kind == "regt" and n.tile_m == 5 for n in near)
    assert {n.tile_n for n in near} >= {2048, 8192}


def test_grid_walks_warp_tiles():
    c = rg(1, 5)
    per = REGT_LANES * 16
    assert c.tiles(5, 10 * per + 1) == (1, 11)
    assert c.grid(5, 10 * per + 1, batch=3) == (-(-33 // 8), 1, 1)
    assert c.replace(persistent=2).grid(5, 10**8, multiprocessors=132) == (264, 1, 1)
    with pytest.raises(ConfigError):
        c.tiles(6, 1000)


def test_the_source_names_its_side_and_permutes():
    src = kernel_source(rg(1, 5))
    assert "5 rows exactly" in src and "__byte_perm" in src and "__shfl_down_sync" in src
    assert "__shared__" not in src
    assert kernel_params(rg(1, 5))["min_blocks"] == 1
    assert REGT_LONG[0] // 8 == 64


# --- the kernel's own source on the CPU ------------------------------------------------------------
needs_gxx = pytest.mark.skipif(gxx() is None, reason="needs g++ and CUDA's headers")


@needs_gxx
@pytest.mark.parametrize(
    "s, side", [(1, 2), (1, 3), (1, 5), (1, 8), (1, 13), (1, 16), (2, 3), (2, 8)]
)
@pytest.mark.parametrize("wide, staged", [(True, False), (True, True), (False, False)])
def test_the_kernel_on_the_cpu_at_pointer_offsets_pitches_and_batches(s, side, wide, staged):
    rng = np.random.default_rng(1000 * s + side + wide + 2 * staged)
    w = 16 // s
    cfg = rg(s, side, wide, long=64 * w, staged=staged)  # 64 threads: two warps a block
    for trial in range(4):
        long = int(rng.integers(2 * 32 * w, 5 * 32 * w)) | int(trial == 0)
        b = 1 + trial % 2
        off_in, off_out = (int(rng.integers(0, 16 // s)) * s for _ in range(2))
        if trial == 1:
            off_in = off_out = 0
        if wide:
            m, n = side, long
            ld_in, ld_out = n + int(rng.integers(0, 9)), m
        else:
            m, n = long, side
            ld_in, ld_out = n, m + int(rng.integers(0, 9))
        bs_in = m * ld_in + int(rng.integers(0, 5))
        bs_out = n * ld_out + int(rng.integers(0, 5))
        got, want = transpose(cfg, b, m, n, (ld_in, ld_out, bs_in, bs_out), (off_in, off_out), rng)
        assert np.array_equal(got, want), (cfg.key, trial, b, m, n, off_in, off_out)


@needs_gxx
@pytest.mark.parametrize("wide, staged", [(True, False), (True, True), (False, False)])
def test_the_kernel_on_the_cpu_on_short_long_sides_and_many_matrices(wide, staged):
    """Long sides under one warp tile (all edge), exactly one, and a batch of small matrices
    (staged: under one block tile, one, and past it)."""
    rng = np.random.default_rng(7)
    for long in (1, 17, 495, 496, 497, 512, 1008, 1024, 1025):
        cfg = rg(1, 7, wide, long=1024, staged=staged)
        m, n = (7, long) if wide else (long, 7)
        for b in (1, 3):
            got, want = transpose(cfg, b, m, n, (n, m, m * n, m * n), (3, 5), rng, grid_max=2)
            assert np.array_equal(got, want), (cfg.key, long, b)


def _staged_trials(cfg: KernelConfig, s: int, side: int, per_block: int, rng) -> None:
    """A staged config on the CPU: odd long sides over several tiles, batches, pitches and
    pointer offsets, and a last tile of a few columns (`per_block`: the columns of a tile)."""
    for trial in range(3):
        long = int(rng.integers(2 * per_block, 4 * per_block)) | 1
        if trial == 2:
            long = per_block + 3
        b = 1 + trial % 2
        off_in, off_out = (int(rng.integers(0, 16 // s)) * s for _ in range(2))
        ld_in = long + int(rng.integers(0, 9))
        bs_in = side * ld_in + int(rng.integers(0, 5))
        bs_out = long * side + int(rng.integers(0, 5))
        strides = (ld_in, side, bs_in, bs_out)
        got, want = transpose(cfg, b, side, long, strides, (off_in, off_out), rng)
        assert np.array_equal(got, want), (cfg.key, trial, b, long, off_in, off_out)


@needs_gxx
@pytest.mark.parametrize("s, side", [(1, 17), (1, 40), (1, 64), (2, 9), (2, 32)])
@pytest.mark.parametrize("threads", [64, 128])
def test_staged_rows_of_17_to_64_bytes_on_the_cpu(s, side, threads):
    """A word of every row a thread."""
    rng = np.random.default_rng(100 * s + side + threads)
    try:
        cfg = rg(s, side, long=threads * 4 // s, staged=True)
    except ConfigError:  # 128 threads: past the static shared memory for the most rows
        assert threads == 128 and side * s > 40
        return
    _staged_trials(cfg, s, side, threads * 4 // s, rng)


@needs_gxx
@pytest.mark.parametrize(
    "s, side",
    [(1, 65), (1, 101), (1, 139), (1, 256), (2, 33), (2, 51), (2, 128), (2, 131), (2, 191)],
)
@pytest.mark.parametrize("threads", [64, 128])
@pytest.mark.parametrize("direct", [False, True])
def test_staged_rows_of_more_than_64_bytes_on_the_cpu(s, side, threads, direct):
    """Units of 4x4 bytes a thread, from shared memory and straight from the rows (`direct`):
    every row count modulo 4, so every store alignment and last unit."""
    rng = np.random.default_rng(1000 * s + side + threads + direct)
    try:
        cfg = rg(s, side, long=threads // s, staged=True, realign=direct)
    except ConfigError:  # 128 threads: past the static shared memory for the most rows
        assert threads == 128 and side > 191 and not direct
        return
    assert cfg.threads == threads
    _staged_trials(cfg, s, side, threads // s, rng)


# --- nvcc ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_regt_kernels_compile_without_spills(arch):
    """Every side of both directions and element sizes at the default block, the largest and
    smallest blocks of each, streaming hints, and the staged configs served for few rows."""
    from autotranspose.runtime.compiler import nvcc_resources

    picks = []
    for s, side in SIDES:
        for wide in (True, False):
            picks.append(rg(s, side, wide))
            if side in (2, 12 // s, 13 // s + 1, 16 // s):
                for long in (REGT_LONG[0] * (2 // s), REGT_LONG[-1] // s, REGT_LONG[-2] // s):
                    try:
                        picks.append(rg(s, side, wide, long=long, cache="stream"))
                    except ConfigError:  # too many registers for 512 threads
                        assert wide and side * s > 12 and long // (16 // s) == 512
        picks.append(regt_default(s, side, 10**6))  # few rows: staged from 3 rows, as served
        if side in (3, 16 // s):
            picks.append(regt_default(s, side, 10**6).replace(cache="stream"))
    # few rows of 17-64 bytes, a word a thread, as raced
    picks += [regt_default(1, side, 10**6) for side in (17, 24, 33, 47)]
    picks += [rg(1, side, long=256, staged=True) for side in (48, 64)]
    picks += [regt_default(2, side, 10**6) for side in (9, 16, 32)]
    # few rows of 65-256 bytes, staged tiles, as raced (every row count modulo 4)
    picks += [regt_default(1, side, 10**6) for side in (65, 101, 139, 190, 191)]
    picks += [rg(1, side, long=64, staged=True) for side in (192, 255, 256)]  # 64 threads
    picks += [regt_default(2, side, 10**6) for side in (33, 95, 128, 131, 191)]
    picks += [
        regt_alternative(regt_default(s, side, 10**6)) for s, side in ((1, 65), (1, 139), (2, 191))
    ]
    picks = list(dict.fromkeys(picks))
    report = nvcc_resources(picks, arch)
    for cfg in picks:
        res = report[cfg.kernel_name]
        assert res.spill_bytes == 0 and res.stack_bytes == 0, f"{cfg.key} spills on {arch}: {res}"
        assert res.smem_bytes == cfg.smem_bytes
        assert res.registers * cfg.threads <= 65536, f"{cfg.key} cannot launch: {res}"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_outer_variants_compile():
    from _nvcc import assert_nvcc_silent

    assert_nvcc_silent(render_outer([rg(1, 5), rg(2, 3, wide=False)]))


# --- on the GPU ------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("s", [1, 2])
def test_regt_kernels_match_the_reference(rng, s):
    """Every side, both directions, several blocks, batches and edges: fresh data, a poisoned
    output and a guard region (measure.Bench.check)."""
    from autotranspose.runtime.compiler import activate, precompile

    state = activate(0)
    configs = []
    for side in [*range(2, 16 // s + 1), 20 // s, 64 // s, 68 // s + 1, 139 // s, 256 // s]:
        for wide, staged in ((True, False), (True, True), (False, False)):
            if side * s > 16 and not staged:
                continue
            long = REGT_LONG[int(rng.integers(0, len(REGT_LONG)))]
            cache = str(rng.choice(["default", "stream"]))
            try:
                configs.append(rg(s, side, wide, long=long, cache=cache, staged=staged))
            except ConfigError:  # a block the side does not take: the served one
                if staged:  # the served block, else 64 threads of words
                    served = regt_default(s, side, 10**6)
                    long = (64 if side * s > 64 else 256) // s  # 64 threads
                    configs.append(served or rg(s, side, long=long, staged=True))
                    other = regt_alternative(regt_default(s, side, 10**6))  # from the rows
                    configs += [other] if other else []
                else:
                    configs.append(rg(s, side, wide, REGT_LONG[1] // s))
    assert not precompile(state, configs)
    for cfg in configs:
        side = cfg.tile_m if cfg.flag("wide") else cfg.tile_n
        for b, long in ((1, int(rng.integers(20000, 300000)) | 1), (3, int(rng.integers(1, 3000)))):
            shape = (b, side, long) if cfg.flag("wide") else (b, long, side)
            assert_match_reference(state, s, shape, [cfg, cfg.replace(persistent=2)])


@pytest.mark.gpu
@pytest.mark.parametrize("s", [1, 2])
def test_every_pointer_offset_and_pitched_views(rng, s):
    """transpose() with regt configs forced, input and output at every offset (0-15), pitched
    rows on the side the kernel allows; the bytes around the output stay as they were."""
    cupy = pytest.importorskip("cupy")
    import autotranspose as at

    dtype = np.dtype({1: "uint8", 2: "float16"}[s])
    for offset_in in range(0, 16, s):
        offset_out = int(rng.integers(0, 16 // s)) * s
        side = int(rng.integers(2, 16 // s + 1))
        wide = bool(rng.integers(0, 2))
        staged = wide and bool(rng.integers(0, 2))
        long = int(rng.integers(2000, 90000)) | 1
        m, n = (side, long) if wide else (long, side)
        pin = n + (int(rng.integers(0, 9)) if wide else 0)
        pout = m + (0 if wide else int(rng.integers(0, 9)))
        host = rng.integers(0, 256, size=m * pin * s, dtype=np.uint8).view(dtype).reshape(m, pin)
        buf_in = cupy.zeros(m * pin * s + 32, np.uint8)
        buf_in[offset_in : offset_in + m * pin * s] = cupy.asarray(host.view(np.uint8).ravel())
        x = buf_in[offset_in : offset_in + m * pin * s].view(dtype).reshape(m, pin)[:, :n]
        fill = rng.integers(0, 256, size=n * pout * s + 64, dtype=np.uint8)
        buf_out = cupy.asarray(fill)
        out = buf_out[offset_out : offset_out + n * pout * s].view(dtype).reshape(n, pout)[:, :m]
        cfg = rg(s, side, wide, long=64 * 16 // s, staged=staged)
        assert at.transpose(x, out, config=cfg) is out
        want = fill.copy()
        region = want[offset_out : offset_out + n * pout * s].view(dtype).reshape(n, pout)
        region[:, :m] = host[:, :n].T
        assert np.array_equal(cupy.asnumpy(buf_out), want), (cfg.key, offset_in, offset_out, m, n)


@pytest.mark.gpu
def test_served_calls_run_the_regt_kernel_of_their_side(rng):
    """What lookup serves untuned calls whose short side the register transpose won: the
    regt kernel rendered for the call's side; the results are right."""
    cupy = pytest.importorskip("cupy")
    import autotranspose as at
    from autotranspose.dispatch.transpose import choose_config
    from autotranspose.runtime.compiler import activate

    state = activate(0)
    for dtype, m, n in (
        ("int8", 5, 200003),
        ("uint8", 100003, 7),
        ("float16", 3, 70001),
        ("bool", 7, 99991),
    ):
        s = np.dtype(dtype).itemsize
        cfg = choose_config(state, s, 1, m, n, 1, False)
        assert cfg.kind == "regt" and cfg.applies(m, n), (dtype, m, n, cfg.key)
        host = rng.integers(0, 2, (m, n)).astype(dtype)
        y = at.transpose(cupy.asarray(host))
        assert np.array_equal(cupy.asnumpy(y), host.T), (dtype, m, n)


@pytest.mark.gpu
def test_regt_past_2_31_elements():
    """A call of more than 2**31 int8 elements in five rows and in five columns, and in 67
    rows (a staged tile)."""
    from autotranspose.runtime.compiler import activate

    state = activate(0)
    long = 2**31 // 5 + 1001
    assert_match_reference(state, 1, (1, 5, long), [rg(1, 5), rg(1, 5, staged=True)])
    assert_match_reference(state, 1, (1, 67, 2**31 // 67 + 1001), [regt_default(1, 67, 10**9)])
    assert_match_reference(state, 1, (1, long, 5), [rg(1, 5, wide=False)])


@pytest.mark.gpu
def test_outer_variants_walk_two_more_batch_dims(rng):
    """permute()'s transpose passes with outer dims through the regt kernel's outer variant."""
    cupy = pytest.importorskip("cupy")
    from autotranspose.plans.boxes import Dim
    from autotranspose.runtime.compiler import activate
    from autotranspose.runtime.launch import make_launch

    state = activate(0)
    for s, cfg, (m, n) in ((1, rg(1, 5), (5, 3001)), (2, rg(2, 3, wide=False), (2001, 3))):
        dt = np.dtype({1: "uint8", 2: "uint16"}[s])
        b2, b1, b = 3, 2, 2
        host = rng.integers(0, 2**8, (b2, b1, b, m, n)).astype(dt)
        x = cupy.asarray(host)
        out = cupy.zeros((b2, b1, b, n, m), dt)
        launch = make_launch(
            state, cfg, b, m, n, n, m, m * n, m * n,
            Dim(b2, b1 * b * m * n, b1 * b * m * n), Dim(b1, b * m * n, b * m * n),
        )  # fmt: skip
        launch(x.data.ptr, out.data.ptr)
        cupy.cuda.Device().synchronize()
        assert np.array_equal(cupy.asnumpy(out), host.swapaxes(-1, -2)), cfg.key


# --- the store ---------------------------------------------------------------------------------
def test_a_stored_regt_result_round_trips_and_serves_its_class_at_any_side(tmp_path):
    """No schema change: the config is stored as its JSON (regt left out where False), read
    back through KernelConfig.from_dict, served to its class, and rendered for each call's
    side by dispatch (`for_call`)."""
    from store_data import H100, ok

    from autotranspose.store import Store

    lookup.clear_cache()
    cls = shape_class(1, 5, 20000003, 1)  # rows 5-8
    tuned = rg(1, 5, long=2048, cache="stream")
    with Store.open(tmp_path / "t.db") as store:
        store.record(None, H100, "int8", 1, (1, 5, 20000003), cls, tuned, ok(2500.0))
        (entry,) = store.entries(H100.name, elem_bytes=1)
        assert entry.config == tuned
        choice = lookup.choose(H100, 1, cls, store=store)
        assert choice.source == "tuned" and choice.config == tuned
        for rows in (5, 6, 7, 8):
            cfg = for_call(choice.config, rows, 20000003)
            assert cfg.applies(rows, 20000003) and cfg.threads == 128 and cfg.cache == "stream"
    lookup.clear_cache()


def test_a_tampered_regt_row_is_not_a_config():
    bad = {**rg(1, 5).to_dict(), "tile_m": 40}
    with pytest.raises(ConfigError):
        KernelConfig.from_dict(bad)
    with pytest.raises(ConfigError):
        KernelConfig.from_dict({**rg(1, 5).to_dict(), "elem_bytes": 4})


def test_a_study_s_space_renders_them_for_the_tuned_shape_s_side():
    """The class's bound (8 rows) is not the call's side (5): the study's regt configs are the
    call's, and its warm starts hold the call's regt default."""
    pytest.importorskip("optuna")
    from store_data import H100

    from autotranspose.tuner.study.space import SearchSpace, study_configs
    from autotranspose.tuner.study.warm import known_good

    cls = shape_class(1, 5, 20000003, 1)
    configs = study_configs("int8", H100, cls, False, (1, 5, 20000003), None)
    regt = [c for c in configs if c.kind == "regt"]
    assert regt and {c.tile_m for c in regt if c.flag("wide")} == {5}
    assert not [c for c in regt if not c.flag("wide")]  # 20000003 columns: no few-columns kernel
    good = known_good(1, cls, SearchSpace(configs), device=H100, sides=(5, 20000003))
    assert regt_default(1, 5, 20000003) in good

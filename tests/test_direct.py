"""Direct kernels (config.kind == "direct": the seed documents' strategy with the tiled kernel's
parameters): validation, keys and stored form, the grid, the space, compiling without spills
(CPU, nvcc), and correctness on the GPU: odd sizes, 1xN and Nx1, batches, every pointer
offset, pitched views, conjugation, grids looped past 65535 tiles or matrices, past 2**31
elements; fresh data, poisoned output and a guard region."""

from __future__ import annotations

import random
import shutil

import numpy as np
import pytest
from _gpu import assert_kind_at_every_offset, assert_kind_matches_reference, assert_match_reference
from _nvcc import assert_compile_without_spills

import autotranspose as at
from autotranspose.dispatch import lookup, policy
from autotranspose.errors import ConfigError
from autotranspose.kernels.codegen import kernel_source, render_outer
from autotranspose.kernels.config import (
    DIRECT_CAPS,
    DIRECT_LONG,
    DIRECT_MAX_PER_THREAD,
    DIRECT_NARROW,
    DIRECT_SIZES,
    MAX_GRID_YZ,
    NEWEST,
    KernelConfig,
    cap_steps,
    config_space,
    direct_default,
    direct_space,
    narrow_configs,
    narrow_default,
    neighbours,
    occupancy_steps,
    register_budget,
    regt_default,
    seed_config,
)
from autotranspose.kernels.shapes import shape_class

DTYPES = {4: "float32", 8: "float64", 16: "complex128"}


def seed_direct(elem_bytes: int, **kw) -> KernelConfig:
    """The seed documents' kernel as a direct config."""
    return seed_config(elem_bytes).replace(direct=True, **kw)


# --- the config --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "change, says",
    [
        ({"vec": 2}, "vec=1"),
        ({"layout": "swizzle", "pad": 0}, "layout='pad'"),
        ({"persistent": 2}, "persistent=0"),
        ({"staged": True}, "spell no kernel kind"),
        ({"realign": True}, "realign=False"),
        ({"per_thread": 2, "tile_m": 64, "tile_n": 64}, "threads"),
        ({"per_thread": 4, "tile_m": 12}, "tile_m"),
        ({"tile_m": 16, "tile_n": 16, "per_thread": 32}, "per_thread"),
        ({"conjugate": True, "elem_bytes": 4}, "complex64"),
        ({"min_blocks": 9}, "2048"),
    ],
)
def test_invalid_direct_configs_say_what_to_change(change, says):
    fields = {**seed_direct(8).to_dict(), **change}
    with pytest.raises(ConfigError, match=says):
        KernelConfig.from_dict(fields)


def test_a_thread_holds_at_most_its_elements_in_flight():
    with pytest.raises(ConfigError, match="lower per_thread"):
        seed_direct(8, tile_m=64, tile_n=64, per_thread=16)
    assert seed_direct(8, tile_m=64, tile_n=64, per_thread=DIRECT_MAX_PER_THREAD).threads == 512


def test_key_and_stored_form():
    c = seed_direct(8)
    assert c.key == seed_config(8).key + "_dr" and c.kernel_name.endswith("_dr")
    assert c.to_dict()["direct"] is True and KernelConfig.from_dict(c.to_dict()) == c
    assert "direct" not in seed_config(8).to_dict()  # what earlier versions stored and read
    with pytest.raises(ConfigError, match="must be bool"):
        KernelConfig.from_dict({**c.to_dict(), "direct": 1})


def test_threads_and_shared_memory_follow_the_tile():
    rng = random.Random()
    for c in rng.sample(list(direct_space(8, NEWEST)), 40):
        assert c.threads == c.tile_m * c.tile_n // c.per_thread and c.threads % 32 == 0
        assert c.smem_bytes == c.tile_m * (c.tile_n + c.pad) * 8


@pytest.mark.parametrize("raster", ["row", "col"])
def test_the_grid_puts_the_raster_s_fast_tiles_on_x_and_caps_y_and_z(raster):
    c = seed_direct(8, raster=raster, tile_m=16)
    rng = random.Random()
    for _ in range(50):
        b, m, n = rng.randrange(1, 9), rng.randrange(1, 5000), rng.randrange(1, 5000)
        tm, tn = -(-m // 16), -(-n // 32)
        assert c.tiles(m, n) == (tm, tn)
        assert c.grid(m, n, b) == ((tn, tm, b) if raster == "row" else (tm, tn, b))
    m = 16 * (MAX_GRID_YZ + 7)  # more row tiles than y takes: the kernel loops
    want = (1, MAX_GRID_YZ, MAX_GRID_YZ) if raster == "row" else (m // 16, 1, MAX_GRID_YZ)
    assert c.grid(m, 5, 70000) == want


def test_the_space_holds_direct_configs_for_4_to_16_byte_elements_only():
    for dtype in ("uint8", "float16", "float32", "float64", "complex128"):
        found = [c for c in config_space(dtype) if c.kind == "direct"]
        s = np.dtype(dtype).itemsize
        assert bool(found) == (s in DIRECT_SIZES), dtype
        assert all(c.fits(NEWEST) and not c.persistent for c in found)
    conj = [c for c in config_space("complex64", conjugate=True) if c.kind == "direct"]
    assert conj and all(c.conjugate for c in conj)


def _narrow(c: KernelConfig) -> bool:
    return min(c.tile_m, c.tile_n) in DIRECT_NARROW


def narrow_space(elem_bytes: int, limits) -> list[KernelConfig]:
    """The narrow direct tiles (a short side of 2-8) of every element size."""
    return [c for c in direct_space(elem_bytes, limits, short_side=DIRECT_NARROW[-1]) if _narrow(c)]


@pytest.mark.parametrize("s", [1, 2, 4, 8, 16])
def test_narrow_tiles_join_the_space_for_a_short_side_of_at_most_8(s):
    dtype = {1: "uint8", 2: "float16", **DTYPES}[s]
    for short in (1, 2, 5, DIRECT_NARROW[-1]):
        found = [
            c for c in config_space(dtype, short_side=short) if c.kind == "direct" and _narrow(c)
        ]
        assert found and all(c.fits(NEWEST) and c.threads % 32 == 0 for c in found)
        assert {c.pad for c in found} == {0, 1}
        assert {max(c.tile_m, c.tile_n) for c in found} == set(DIRECT_LONG)
        assert {(c.tile_m < c.tile_n) for c in found} == {True, False}  # few rows and few columns
    assert not any(
        _narrow(c)
        for c in config_space(dtype, short_side=DIRECT_NARROW[-1] + 1)
        if c.kind == "direct"
    )
    assert not any(_narrow(c) for c in config_space(dtype) if c.kind == "direct")


ANY_DTYPE = {1: "uint8", 2: "float16", **DTYPES}


def _spans_or_idles_least(side: int, short: int) -> bool:
    """`side` is the smallest narrow side spanning `short`, or the one leaving the fewest
    idle lanes past the last column (the wider of a tie)."""
    span = min(t for t in DIRECT_NARROW if t >= short)
    idle = min(DIRECT_NARROW, key=lambda t: ((-short) % t, -t))
    return side in (span, idle)


@pytest.mark.parametrize("s", [1, 2, 4, 8, 16])
def test_narrow_configs_for_a_side_of_2_to_8(s):
    rng = random.Random()
    dtype = {8: "complex64", 16: "complex128"}.get(s, ANY_DTYPE[s])  # conjugable where 8, 16
    spaces: dict[tuple[int, bool], set[KernelConfig]] = {}
    for _ in range(40):
        short, long = rng.randrange(2, DIRECT_NARROW[-1] + 1), rng.randrange(1000, 10**8)
        conj = s >= 8 and rng.random() < 0.5
        if (short, conj) not in spaces:
            spaces[short, conj] = {
                c
                for c in config_space(dtype, short_side=short, conjugate=conj)
                if c.kind == "direct"
            }
        space = spaces[short, conj]
        for m, n in ((long, short), (short, long)):
            found = narrow_configs(s, m, n, conj)
            assert (
                found
                and found[0] == narrow_default(s, m, n, conj)
                and len(set(found)) == len(found)
            )
            for c in found:
                assert c.kind == "direct" and _narrow(c) and c.conjugate == conj and c in space, (
                    c.key
                )
                side = c.tile_n if m > n else c.tile_m
                assert _spans_or_idles_least(side, short), (short, c.key)
                assert max(c.tile_m, c.tile_n) in DIRECT_LONG and c.per_thread == (
                    8 if s <= 4 else 4
                )
            first = found[0].tile_n if m > n else found[0].tile_m
            spans = first >= short
            # few columns of 1 and 2 bytes: the fewest idle lanes first; elsewhere spanning
            assert spans or (m > n and s <= 2), (s, m, n, found[0].key)


@pytest.mark.parametrize(
    ("short", "sides"),
    [(2, (2,)), (3, (4,)), (4, (4,)), (5, (8, 2)), (6, (8, 2)), (7, (8,)), (8, (8,))],
)
def test_narrow_sides_by_the_call_s_short_side(short, sides):
    assert (
        tuple(c.tile_m for c in narrow_configs(4, short, 10**6)) == sides
    )  # few rows: spanning first
    assert tuple(c.tile_n for c in narrow_configs(4, 10**6, short)) == sides
    assert set(c.tile_n for c in narrow_configs(2, 10**6, short)) == set(sides)
    assert narrow_configs(2, 10**6, short)[0].tile_n == (2 if short in (5, 6) else sides[0])


@pytest.mark.parametrize(("m", "n"), [(1, 10**6), (10**6, 1), (9, 10**6), (10**6, 9), (5000, 5000)])
def test_no_narrow_configs_outside_a_side_of_2_to_8(m, n):
    for s in (1, 2, 4, 8, 16):
        assert narrow_configs(s, m, n) == [] and narrow_default(s, m, n) is None


@pytest.mark.parametrize("s", [1, 2, 4, 8, 16])
def test_a_class_with_a_side_of_at_most_8_gets_the_narrow_tile_by_default(s):
    rng = random.Random()
    long = rng.randrange(10**5, 10**8)
    for short in (2, 3, 5, 8):
        for m, n in ((long, short), (short, long)):
            cls = shape_class(1, m, n, 1)
            choice = policy.default_choice(s, cls, NEWEST)
            # 1- and 2-byte sides of at most 16 bytes: the register transpose first
            want = regt_default(s, cls.m, cls.n, exact=False) or narrow_default(s, cls.m, cls.n)
            assert choice.source == "default" and choice.config == want
    assert (
        policy.default_choice(s, shape_class(1, long, 9, 1), NEWEST).config.tile_n
        not in DIRECT_NARROW
    )


@pytest.mark.parametrize("s", [1, 2, 4, 8, 16])
def test_the_first_call_races_the_narrow_tiles_right_after_the_guess(s):
    rng = random.Random()
    guess, *near = rng.sample(list(config_space(ANY_DTYPE[s])), 4)
    short, long = rng.randrange(2, 9), rng.randrange(10**5, 10**8)
    for m, n in ((long, short), (short, long)):
        got = policy.candidates(guess, near, s, m, n, 1, False, lambda c: True)
        want = [c for c in (regt_default(s, m, n), *narrow_configs(s, m, n)) if c is not None]
        assert got[0] == guess and got[1 : 1 + len(want)] == want
    got = policy.candidates(guess, near, s, long, 9, 1, False, lambda c: True)
    assert not any(c.kind == "direct" and _narrow(c) for c in got)


def test_a_narrow_tile_s_neighbours_step_its_sides_within_their_lists():
    c = KernelConfig(4, 256, 4, 1, 8, 1, "pad", "row", kind="direct")
    near = set(neighbours(c))
    assert {c.replace(tile_m=128), c.replace(tile_n=2), c.replace(tile_n=8)} <= near
    assert all(x.kind == "direct" and _narrow(x) for x in near)
    assert set(neighbours(seed_direct(4))).isdisjoint(narrow_space(4, NEWEST))  # not into them


@pytest.mark.parametrize(
    ("tm", "tn", "pt", "walks"), [(256, 4, 8, "store"), (2, 256, 4, "load"), (8, 64, 2, None)]
)
def test_a_block_with_fewer_threads_than_a_tile_side_walks_it(tm, tn, pt, walks):
    c = KernelConfig(4, tm, tn, 1, pt, 1, "pad", "col", kind="direct")
    src = kernel_source(c)
    assert c.smem_bytes == tm * (tn + 1) * 4 and f"tile[{tm}][{tn + 1}]" in src
    load_walks = f"columns t + {c.threads} (j % " in src
    store_walks = f"elements t + {c.threads} (j % " in src
    assert (load_walks, store_walks) == (walks == "load", walks == "store")
    assert c.threads < max(tm, tn) or walks is None


def test_caps_reach_the_seed_kernel_s_registers():
    c = seed_direct(8)
    assert cap_steps(c) == occupancy_steps(256, DIRECT_CAPS) and 8 in cap_steps(c)
    assert {x.min_blocks for x in direct_space(8, NEWEST) if x.replace(min_blocks=0) == c} == {
        0,
        *cap_steps(c),
    }


@pytest.mark.parametrize(
    ("threads", "blocks", "budget"),
    [
        (64, 25, 32),
        (64, 32, 32),
        (256, 8, 32),
        (256, 6, 40),
        (512, 4, 32),
        (1024, 2, 32),
        (128, 6, 80),
    ],
)
def test_register_budget_splits_the_sm_in_four_partitions(threads, blocks, budget):
    assert register_budget(threads, blocks) == budget


def test_no_streaming_16_byte_row_tile_is_capped_at_twice_its_elements_registers():
    # ptxas 13 spilled 8 bytes on sm_90 in exactly these (5 of the 2992 capped direct configs)
    for c in direct_space(16, NEWEST):
        if c.min_blocks and c.cache == "stream" and c.raster == "row":
            assert register_budget(c.threads, c.min_blocks) > 2 * c.per_thread * 4, c.key
    assert KernelConfig(
        16, 16, 16, 1, 4, 1, "pad", "row", "stream", kind="direct", min_blocks=25
    ) not in set(direct_space(16, NEWEST))


def test_neighbours_stay_direct_and_step_one_field():
    c = seed_direct(8)
    near = neighbours(c)
    assert near and all(x.kind == "direct" for x in near)
    assert (
        c.replace(tile_m=64) in near
        and c.replace(per_thread=8) in near
        and c.replace(raster="col") in near
    )
    assert c.replace(min_blocks=8) in near


def test_the_seed_config_s_source_divides_no_tile_index():
    src = kernel_source(seed_direct(8))
    body = src[src.index("for (unsigned int ts") :]
    assert " / " not in body and " % " not in body  # the tile's place comes from the grid
    assert "__launch_bounds__(256, 1)" in src and "tile[32][33]" in src


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_direct_kernels_compile_without_spills(arch):
    rng = random.Random()
    picks = [seed_direct(s) for s in DIRECT_SIZES]
    for s in DIRECT_SIZES:
        picks += rng.sample(list(direct_space(s, NEWEST)), 12)
    picks += [seed_direct(8, conjugate=True), seed_direct(16, conjugate=True, min_blocks=8)]
    # every config served by default (`direct_default` by shape), capped as served
    picks += [
        direct_default(s, m, n)
        for s in DIRECT_SIZES
        for m, n in ((5, 10**6), (20, 10**6), (47, 10**6), (100, 10**6), (10**6, 20), (5000, 5000))
    ]
    for s in (1, 2, *DIRECT_SIZES):  # narrow tiles, every element size
        picks += rng.sample(narrow_space(s, NEWEST), 8)
        # the tiles a first call races, and lookup's defaults (every side of 2-8, both ways)
        picks += [
            c
            for short in range(2, 9)
            for m, n in ((short, 10**6), (10**6, short))
            for c in narrow_configs(s, m, n)
        ]
    # every shipped direct result, as served (the narrow ones came from whole-space searches)
    picks += [e.config for e in lookup.shipped_everywhere() if e.config.kind == "direct"]
    assert_compile_without_spills(list(dict.fromkeys(picks)), arch)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_outer_variants_compile():
    from _nvcc import assert_nvcc_silent

    assert_nvcc_silent(
        render_outer([seed_direct(8), seed_direct(16, conjugate=True, raster="col")])
    )


# --- on the GPU ----------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("s", DIRECT_SIZES)
def test_direct_kernels_match_the_reference(rng, s):
    """Odd sizes, 1xN, Nx1, batches; fresh data, a poisoned output and a guard region after
    it (measure.Bench.check); random configs of the space and the seed's."""
    assert_kind_matches_reference(rng, s, direct_space, seed_direct(s))


@pytest.mark.gpu
@pytest.mark.parametrize("s", [1, 2, *DIRECT_SIZES])
def test_narrow_direct_tiles_match_the_reference(rng, s):
    """Narrow tiles (a short side of 2-8) on odd sizes, 1xN, Nx1, batches, and on few rows
    and few columns of 1 to 9 (an edge tile in the short side too)."""
    from autotranspose.runtime.compiler import activate

    assert_kind_matches_reference(
        rng, s, narrow_space, KernelConfig(s, 256, 4, 1, 8, 1, "pad", "col", kind="direct")
    )
    state = activate(0)
    picks = [
        narrow_space(s, state.info.limits)[i]
        for i in rng.choice(len(narrow_space(s, NEWEST)), 6, replace=False)
    ]
    for short in (1, 2, 3, 4, 5, 8, 9):
        long = int(rng.integers(1000, 300_000))
        batch = int(rng.integers(1, 4))
        assert_match_reference(state, s, (batch, long, short), picks)
        assert_match_reference(state, s, (batch, short, long), picks)


@pytest.mark.gpu
@pytest.mark.parametrize("s", [1, 2, *DIRECT_SIZES])
def test_narrow_tiles_at_every_pointer_offset_and_pitched_views(rng, s):
    pytest.importorskip("cupy")
    dtype = np.dtype({1: "uint8", 2: "float16", **DTYPES}[s])
    configs = narrow_space(s, NEWEST)
    assert_kind_at_every_offset(rng, s, dtype, configs, configs[0])


@pytest.mark.gpu
@pytest.mark.parametrize("s", DIRECT_SIZES)
def test_every_pointer_offset_and_pitched_views(rng, s):
    """Input and output at every offset the element size allows, rows of pitched views; the
    bytes around and between the output rows are left as they were."""
    pytest.importorskip("cupy")
    assert_kind_at_every_offset(
        rng, s, np.dtype(DTYPES[s]), list(direct_space(s, NEWEST)), seed_direct(s)
    )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_conjugate_direct(rng, dtype):
    cupy = pytest.importorskip("cupy")
    s = np.dtype(dtype).itemsize
    for cfg in (
        seed_direct(s, conjugate=True),
        seed_direct(s, conjugate=True, tile_m=16, raster="col"),
    ):
        for m, n in ((3001, 1777), (1, 999), (999, 1), (21, 4097)):
            host = (rng.standard_normal((m, n)) + 1j * rng.standard_normal((m, n))).astype(dtype)
            y = at.transpose(cupy.asarray(host), conjugate=True, config=cfg)
            assert np.array_equal(cupy.asnumpy(y), host.T.conj()), (cfg.key, m, n)


@pytest.mark.gpu
def test_grids_loop_past_65535_tiles_and_matrices(rng):
    """More tiles along the slow side than grid y takes, more matrices than z takes."""
    from autotranspose.runtime.compiler import activate

    state = activate(0)
    m = 16 * MAX_GRID_YZ + int(rng.integers(1, 40))  # row tiles past y with raster row
    assert_match_reference(state, 8, (1, m, 3), [seed_direct(8, tile_m=16)])
    assert_match_reference(state, 4, (1, 5, m), [seed_direct(4, tile_n=16, raster="col")])
    assert_match_reference(
        state, 8, (MAX_GRID_YZ + int(rng.integers(1, 999)), 3, 5), [seed_direct(8)]
    )


@pytest.mark.gpu
def test_direct_past_2_31_elements():
    from autotranspose.runtime.compiler import activate

    shape = (1, 46349, 46337)  # 2**31 + about 1.5M float32 elements, odd rows
    assert shape[1] * shape[2] > 2**31
    assert_match_reference(activate(0), 4, shape, [seed_direct(4, raster="col")])


@pytest.mark.gpu
def test_narrow_past_2_31_elements():
    """A call of 2**31 + 1 int8 elements in three columns: the narrow tile for them (the call
    itself is served the register transpose: tests/test_regt.py)."""
    from autotranspose.runtime.compiler import activate

    shape = (1, 715_827_883, 3)
    assert shape[1] * shape[2] > 2**31
    cfg = narrow_default(1, shape[1], shape[2])
    assert cfg.kind == "direct" and _narrow(cfg), cfg.key
    assert_match_reference(activate(0), 1, shape, [cfg])


@pytest.mark.gpu
@pytest.mark.parametrize("s", DIRECT_SIZES)
def test_outer_variants_walk_two_more_batch_dims(rng, s):
    """permute()'s transpose passes: the direct kernel's outer variant on a (b2, b1, batch, m,
    n) input, every matrix at its place, nothing written past the output."""
    cupy = pytest.importorskip("cupy")
    from autotranspose.plans.boxes import Dim
    from autotranspose.runtime.compiler import activate
    from autotranspose.runtime.launch import make_launch

    state = activate(0)
    dtype = np.dtype({4: "uint32", 8: "uint64", 16: "complex128"}[s])
    narrow = (
        KernelConfig(s, 256, 4, 1, 8, 1, "pad", "row", kind="direct"),
        KernelConfig(s, 2, 256, 1, 4, 1, "pad", "col", kind="direct"),
    )
    for cfg in (
        seed_direct(s),
        seed_direct(s, tile_m=16, tile_n=64, per_thread=8, raster="col"),
        *narrow,
    ):
        b2, b1, bt = (int(v) for v in rng.integers(1, 5, 3))
        m, n = int(rng.integers(1, 150)), int(rng.integers(1, 150))
        host = rng.integers(0, 2**31, size=b2 * b1 * bt * m * n * s // 4, dtype=np.uint32).view(
            dtype
        )
        x = cupy.asarray(host.reshape(b2, b1, bt, m, n))
        raw = cupy.full(x.nbytes + 256, 0xA5, dtype=np.uint8)
        mat = m * n
        launch = make_launch(
            state,
            cfg,
            bt,
            m,
            n,
            n,
            m,
            mat,
            mat,
            outer=Dim(b2, b1 * bt * mat, b1 * bt * mat),
            outer2=Dim(b1, bt * mat, bt * mat),
        )
        launch(x.data.ptr, raw.data.ptr)
        cupy.cuda.runtime.deviceSynchronize()
        got = cupy.asnumpy(raw[: x.nbytes])  # compared as bytes: random bits hold NaNs
        want = np.ascontiguousarray(host.reshape(b2, b1, bt, m, n).transpose(0, 1, 2, 4, 3))
        assert np.array_equal(got, want.view(np.uint8).ravel()), cfg.key
        assert bool((raw[x.nbytes :] == 0xA5).all()), "the guard region was written"

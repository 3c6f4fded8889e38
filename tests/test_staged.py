"""Staged kernels for rows at any offset (config.flag("staged")): validation, the space, compiling
without spills (CPU, nvcc), and correctness on the GPU at every pointer offset, odd sizes,
1xN and Nx1, batches, pitched views, conjugation, past 2**31 elements, poisoned output."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from _gpu import assert_kind_at_every_offset, assert_kind_matches_reference, assert_match_reference
from _nvcc import assert_compile_without_spills

import autotranspose as at
from autotranspose.errors import ConfigError
from autotranspose.kernels.config import (
    NEWEST,
    STAGED_MAX_THREADS,
    STAGED_SIZES,
    STAGED_WORDS_AT_MAX_THREADS,
    KernelConfig,
    config_space,
    staged_default,
    staged_loads,
    staged_space,
)

DTYPES = {1: "uint8", 2: "float16", 4: "float32", 8: "complex64"}


def staged(elem_bytes: int, **kw) -> KernelConfig:
    return staged_default(elem_bytes).replace(**kw)


# --- the config --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "change, says",
    [
        ({"layout": "swizzle"}, "layout='pad'"),
        ({"pad": 1}, "pad=0"),
        ({"realign": True}, "realign=False"),
        ({"vec": 2}, "words of 4, 8 or 16 bytes"),
        ({"per_thread": 16}, "lower per_thread"),
        ({"conjugate": True}, "complex64"),
    ],
)
def test_invalid_staged_configs_say_what_to_change(change, says):
    fields = {**staged(1).to_dict(), **change}
    with pytest.raises(ConfigError, match=says):
        KernelConfig.from_dict(fields)


def test_sixteen_byte_elements_are_left_to_the_tiled_kernels():
    assert staged_default(16) is None and 16 not in STAGED_SIZES
    with pytest.raises(ConfigError, match="elem_bytes in"):
        KernelConfig(16, 64, 64, 1, 2, 0, "pad", "col", kind="staged")
    assert not any(c.flag("staged") for c in config_space("complex128", max_vector=1))


@pytest.mark.parametrize("s", STAGED_SIZES)
def test_staged_configs_come_with_unaligned_calls_only(rng, s):
    dtype = DTYPES[s]
    assert not any(
        c.flag("staged") for c in config_space(dtype)
    )  # aligned calls: the tiled kernels
    space = [c for c in config_space(dtype, max_vector=1) if c.flag("staged")]
    assert space and all(c.any_offset and c.fits(NEWEST) for c in space)
    cfg = space[int(rng.integers(len(space)))]
    assert KernelConfig.from_dict(cfg.to_dict()) == cfg and "_sg" in cfg.key
    assert cfg.threads % 32 == 0 and cfg.threads <= 512


@pytest.mark.parametrize("s", STAGED_SIZES)
def test_tiles_cover_the_windows_that_start_early(rng, s):
    """An output window starts up to vec - 1 rows before its tile: one more row of tiles."""
    cfg = staged_default(s)
    m, n = int(rng.integers(1, 10**5)), int(rng.integers(1, 10**5))
    tm, tn = cfg.tiles(m, n)
    assert (tm - 1) * cfg.tile_m < m + cfg.vec - 1 <= tm * cfg.tile_m
    assert tn == -(-n // cfg.tile_n)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_staged_kernels_compile_without_spills(arch, rng):
    """The default and the extremes of every field of each element size's staged space."""
    picks = {}
    for s in STAGED_SIZES:
        space = [c for c in staged_space(s, NEWEST) if not c.persistent and not c.min_blocks]
        for key in ("threads", "smem_bytes", "per_thread", "tile_m", "tile_n", "vec"):
            for cfg in (
                min(space, key=lambda c: getattr(c, key)),
                max(space, key=lambda c: getattr(c, key)),
            ):
                picks[cfg.kernel_name] = cfg
        for i in rng.choice(len(space), 3, replace=False):
            picks[space[i].kernel_name] = space[i]
        picks[staged_default(s).kernel_name] = staged_default(s)
    conj = staged_default(8, conjugate=True)
    picks[conj.kernel_name] = conj
    assert_compile_without_spills(picks.values(), arch)


def _words_in_flight(c: KernelConfig) -> int:
    return c.per_thread + staged_loads(c)


def test_a_full_block_holds_at_most_the_words_its_registers_allow():
    """At 512 threads (128 registers a thread) 16 output plus 17 loaded words spilled on sm_90."""
    with pytest.raises(ConfigError, match="lower per_thread"):
        KernelConfig(1, 256, 128, 4, 16, 0, "pad", "col", kind="staged")
    full = [
        c for s in STAGED_SIZES for c in staged_space(s, NEWEST) if c.threads == STAGED_MAX_THREADS
    ]
    assert full and max(map(_words_in_flight, full)) <= STAGED_WORDS_AT_MAX_THREADS


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_full_blocks_with_the_most_words_in_flight_compile_without_spills(rng):
    from autotranspose.runtime.compiler import nvcc_resources

    full = [
        c
        for s in STAGED_SIZES
        for c in staged_space(s, NEWEST)
        if c.threads == STAGED_MAX_THREADS and not c.persistent and not c.min_blocks
    ]
    most = max(map(_words_in_flight, full))
    edge = [c for c in full if _words_in_flight(c) == most]
    picks = [edge[i] for i in rng.choice(len(edge), min(24, len(edge)), replace=False)]
    report = nvcc_resources(picks, "sm_90")
    for cfg in picks:
        res = report[cfg.kernel_name]
        assert res.spill_bytes == 0 and res.stack_bytes == 0, f"{cfg.key} spills on sm_90: {res}"


# --- on the GPU ----------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("s", STAGED_SIZES)
def test_staged_kernels_match_the_reference(rng, s):
    """Odd sizes, 1xN, Nx1, batches; fresh data, a poisoned output and a guard region after
    it (measure.Bench.check); random configs of the space, the default, a persistent grid."""
    assert_kind_matches_reference(rng, s, staged_space, staged_default(s))


@pytest.mark.gpu
@pytest.mark.parametrize("s", STAGED_SIZES)
def test_every_pointer_offset_and_pitched_views(rng, s):
    """Input and output at every byte offset the element size allows (0-15), rows of pitched
    views; the bytes around and between the output rows are left as they were."""
    pytest.importorskip("cupy")
    space = [c for c in staged_space(s, NEWEST) if not c.persistent]
    assert_kind_at_every_offset(rng, s, np.dtype(DTYPES[s]), space, staged_default(s))


@pytest.mark.gpu
def test_conjugate_staged(rng):
    cupy = pytest.importorskip("cupy")
    cfg = staged_default(8, conjugate=True)
    for m, n in ((3001, 1777), (1, 999), (999, 1)):
        host = (rng.standard_normal((m, n)) + 1j * rng.standard_normal((m, n))).astype(np.complex64)
        y = at.transpose(cupy.asarray(host), conjugate=True, config=cfg)
        assert np.array_equal(cupy.asnumpy(y), host.T.conj())


@pytest.mark.gpu
def test_staged_past_2_31_elements():
    from autotranspose.runtime.compiler import activate

    shape = (1, 46349, 46337)  # 2**31 + about 1.5M int8 elements, odd rows
    assert shape[1] * shape[2] > 2**31
    assert_match_reference(activate(0), 1, shape, [staged_default(1)])

"""Flat kernels for skinny matrices (config.spans_short_side): validation, rendering, compiling without
spills (CPU, nvcc), which calls are served one (lookup), and correctness on the GPU at every
pointer offset, odd sizes, batches, both orientations, past 2**31 elements, poisoned output."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from _gpu import assert_match_reference
from _nvcc import assert_compile_without_spills

import autotranspose as at
from autotranspose.dispatch import lookup
from autotranspose.errors import ConfigError
from autotranspose.kernels.config import (
    FLAT_SHORT_SIDE,
    NEWEST,
    KernelConfig,
    config_space,
    direct_default,
    flat_default,
    flat_space,
    narrow_default,
    regt_default,
    tall_default,
    wide_default,
    wide_rows,
)
from autotranspose.kernels.shapes import ShapeClass

SIZES = (1, 2, 4, 8, 16)
DTYPES = {1: "uint8", 2: "float16", 4: "float32", 8: "complex64", 16: "complex128"}


def flat(elem_bytes: int, tl: int = 256, tw: int = 32, pt: int = 16, **kw) -> KernelConfig:
    return KernelConfig(elem_bytes, tl, tw, 1, pt, 0, "pad", "row", kind="flat", **kw)


# --- the config --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "change, says",
    [
        ({"vec": 2}, "vec=1"),
        ({"pad": 1}, "pad=0"),
        ({"raster": "col"}, "raster='row'"),
        ({"layout": "swizzle"}, "layout='pad'"),
        ({"per_thread": 1, "tile_m": 2048}, "threads"),
        ({"tile_m": 32}, "tile_m=32 must be one of"),
    ],
)
def test_invalid_flat_configs_say_what_to_change(change, says):
    fields = {**flat(4).to_dict(), **change}
    with pytest.raises(ConfigError, match=says):
        KernelConfig.from_dict(fields)


def test_flat_configs_round_trip_and_are_keyed_apart(rng):
    space = list(flat_space(4, NEWEST, int(rng.integers(1, 65))))
    cfg = space[int(rng.integers(len(space)))]
    assert KernelConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.key.endswith("_flat") or "_flat_" in cfg.key
    assert not any("_flat" in c.key for c in config_space("float32") if c.tile_m == cfg.tile_m)
    with pytest.raises(ConfigError, match=r"flat.* must be bool"):
        KernelConfig.from_dict({**cfg.to_dict(), "flat": 1})


@pytest.mark.parametrize("s", SIZES)
def test_tiles_span_the_short_side(rng, s):
    cfg = flat_default(s, 32)
    assert cfg is not None and cfg.tile_n >= 32 and cfg.threads % 32 == 0
    long, short = int(rng.integers(1, 10**7)), int(rng.integers(1, 33))
    assert cfg.tiles(long, short) == (-(-long // cfg.tile_m), 1)
    assert cfg.tiles(short, long) == (1, -(-long // cfg.tile_m))
    assert cfg.applies(long, short) and cfg.applies(short, long)
    assert not cfg.applies(long, cfg.tile_n + 1 + int(rng.integers(0, 100)))
    with pytest.raises(ConfigError, match="tiled config"):
        cfg.tiles(cfg.tile_n + 1, cfg.tile_n + 1)


def test_space_includes_flat_configs_only_for_a_short_side(rng):
    short = int(rng.integers(1, 65))
    with_flat = list(config_space("float32", short_side=short))
    flats = [c for c in with_flat if c.spans_short_side]
    assert flats and all((c.tile_m if c.flag("wide") else c.tile_n) >= short for c in flats)
    assert not any(c.spans_short_side for c in config_space("float32"))


# --- which calls get one ------------------------------------------------------------------------
@pytest.mark.parametrize("s", SIZES)
def test_an_untuned_skinny_class_gets_the_flat_or_tall_kernel(rng, s):
    lookup.clear_cache()
    short = int(rng.integers(1, FLAT_SHORT_SIDE + 1))
    bucket = 1 << (short - 1).bit_length()
    cls = ShapeClass(1, 1 << 20, bucket, 1)
    choice = lookup.choose("no GPU we ship results for", s, cls, store=None)
    expect = flat_default(s, bucket)
    if tall_default(s, bucket) is not None:  # tall rows of 1-, 2- and 4-byte elements
        expect = tall_default(s, bucket)
    if narrow_default(s, cls.m, cls.n) is not None:  # a side of 2-8: the narrow direct tile
        expect = narrow_default(s, cls.m, cls.n)
    if regt_default(s, cls.m, cls.n, exact=False) is not None:  # where the register transpose won
        expect = regt_default(s, cls.m, cls.n, exact=False)
    if expect is None:
        assert not choice.config.spans_short_side
    else:
        assert choice.config == expect and choice.source == "default"
    # few long rows: flat only when no 8-byte vector fits them
    for vec in (1, 2, 4, 8, 16):
        if vec * s > 16 or (vec > 1 and vec * s < 4):
            continue
        wide = ShapeClass(1, bucket, 1 << 20, vec)
        got = lookup.choose("no GPU we ship results for", s, wide, store=None).config
        if regt_default(s, bucket, 1 << 20, exact=False) is not None:  # the register transpose
            assert got == regt_default(s, bucket, 1 << 20, exact=False), (s, vec, got.key)
        elif narrow_default(s, bucket, 1 << 20) is not None:  # 2-8 rows: the narrow direct tile
            assert got == narrow_default(s, bucket, 1 << 20), (s, vec, got.key)
        elif (
            vec * s < 8 and wide_rows(s, bucket, 1 << 20) and s == 4
        ):  # a direct tile spanning the rows
            assert got == direct_default(s, bucket, 1 << 20) and got.tile_m >= bucket, (
                vec,
                got.key,
            )
        elif vec * s < 8 and wide_rows(s, bucket, 1 << 20):  # the wide byte-permute kernel
            assert got == wide_default(s, bucket, exact=False), (s, vec, got.key)
        else:
            assert got.spans_short_side == (vec * s < 8 and flat_default(s, bucket) is not None), (
                s,
                vec,
                got.key,
            )
            assert got.kind != "prmt"  # few long rows: never the tall kernel


def test_a_square_class_keeps_the_tiled_default():
    lookup.clear_cache()
    choice = lookup.choose(
        "no GPU we ship results for", 4, ShapeClass(1, 8192, 8192, 4), store=None
    )
    assert not choice.config.spans_short_side


# --- nvcc ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("s", SIZES)
def test_flat_kernels_compile_without_spills(arch, s, rng):
    space = [c for c in flat_space(s, NEWEST, 1) if not c.persistent]
    picks = {
        c.kernel_name: c
        for c in (
            max(space, key=lambda c: c.threads),
            min(space, key=lambda c: c.threads),
            max(space, key=lambda c: c.smem_bytes),
        )
    }
    for i in rng.choice(len(space), min(10, len(space)), replace=False):
        picks[space[i].kernel_name] = space[i]
    if s in (8, 16):
        conj = space[int(rng.integers(len(space)))].replace(conjugate=True)
        picks[conj.kernel_name] = conj
    assert_compile_without_spills(picks.values(), arch)


# --- on the GPU ----------------------------------------------------------------------------------
def _skinny_shapes(rng) -> list[tuple[int, int, int]]:
    shapes = []
    for short in (1, 2, 3, 9, 20, 32, int(rng.integers(33, 65))):
        long = int(rng.integers(1000, 40000)) | 1
        shapes += [(1, long, short), (1, short, long)]
    shapes += [(3, 4999, 7), (5, 45, 1333), (2, 1, 777)]
    return shapes


@pytest.mark.gpu
@pytest.mark.parametrize("s", SIZES)
def test_flat_kernels_match_the_reference(rng, s):
    """Odd long sides, every short side class, batches, both orientations; fresh data, a
    poisoned output and a guard region after it (measure.Bench.check)."""
    from autotranspose.runtime.compiler import activate, precompile

    state = activate(0)
    for shape in _skinny_shapes(rng):
        short = min(shape[1:])
        space = [c for c in flat_space(s, state.info.limits, short) if not c.persistent]
        if not space:
            continue
        picks = [space[i] for i in rng.choice(len(space), min(3, len(space)), replace=False)]
        d = flat_default(s, short)
        picks += [d] if d is not None and d.fits(state.info.limits) else []
        picks.append(picks[0].replace(persistent=2))
        assert not precompile(state, picks)
        assert_match_reference(state, s, shape, picks)


@pytest.mark.gpu
@pytest.mark.parametrize("s", SIZES)
def test_every_pointer_offset(rng, s):
    """Input and output starting at every byte offset the element size allows (0-15), in
    both orientations; the bytes around the output are left as they were."""
    cupy = pytest.importorskip("cupy")
    dtype = np.dtype(DTYPES[s])
    for offset_in in range(0, 16, s):
        offset_out = int(rng.integers(0, 16 // s)) * s
        long, short = int(rng.integers(500, 3000)) | 1, int(rng.integers(1, 33))
        for m, n in ((long, short), (short, long)):
            host = rng.integers(0, 256, size=m * n * s, dtype=np.uint8).view(dtype).reshape(m, n)
            buf_in = cupy.zeros(m * n * s + 32, np.uint8)
            buf_in[offset_in : offset_in + m * n * s] = cupy.asarray(host.view(np.uint8).ravel())
            x = buf_in[offset_in : offset_in + m * n * s].view(dtype).reshape(m, n)
            fill = rng.integers(0, 256, size=m * n * s + 64, dtype=np.uint8)
            buf_out = cupy.asarray(fill)
            out = buf_out[offset_out : offset_out + m * n * s].view(dtype).reshape(n, m)
            y = at.transpose(x, out)
            assert y is out
            got = cupy.asnumpy(buf_out)
            want = fill.copy()
            want[offset_out : offset_out + m * n * s] = (
                np.ascontiguousarray(host.T).view(np.uint8).ravel()
            )
            assert np.array_equal(got, want), (s, offset_in, offset_out, m, n)


@pytest.mark.gpu
def test_strided_skinny_calls_take_the_tiled_path_and_stay_right(rng):
    cupy = pytest.importorskip("cupy")
    host = rng.standard_normal((20001, 40)).astype(np.float32)
    x = cupy.asarray(host)[:, 3:23]  # rows 40 elements apart: not one contiguous block
    assert np.array_equal(cupy.asnumpy(at.transpose(x)), host[:, 3:23].T)
    with pytest.raises(ConfigError, match="contiguous"):
        at.transpose(x, config=flat(4))


@pytest.mark.gpu
def test_conjugate_flat(rng):
    cupy = pytest.importorskip("cupy")
    for m, n in ((7777, 13), (13, 7777)):
        host = (rng.standard_normal((m, n)) + 1j * rng.standard_normal((m, n))).astype(np.complex64)
        y = at.transpose(cupy.asarray(host), conjugate=True)
        assert np.array_equal(cupy.asnumpy(y), host.T.conj())


@pytest.mark.gpu
def test_skinny_past_2_31_elements():
    from autotranspose.runtime.compiler import activate

    shape = (1, 715_827_883, 3)  # 2**31 + 1 int8 elements
    assert shape[1] * shape[2] > 2**31
    state = activate(0)
    cfg = flat_default(1, shape[2])  # three columns are served the narrow direct tile now
    assert cfg.spans_short_side and cfg.applies(*shape[1:])
    assert_match_reference(state, 1, shape, [cfg])

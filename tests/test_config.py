"""KernelConfig validation, derived launch shape, (de)serialisation and the config space."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import autotranspose as at
from autotranspose.errors import ConfigError, UnsupportedDtypeError
from autotranspose.kernels.config import (
    NEWEST,
    DeviceLimits,
    KernelConfig,
    config_space,
    default_config,
    seed_config,
)
from autotranspose.kernels.shapes import max_vec

SIZES = {1: "int8", 2: "float16", 4: "float32", 8: "float64", 16: "complex128"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"elem_bytes": 3}, "elem_bytes=3 must be one of"),
        ({"elem_bytes": 4, "tile_m": 48}, "tile_m=48"),
        ({"elem_bytes": 4, "vec": 8}, "at most 16 bytes"),
        ({"elem_bytes": 1, "vec": 2}, "use vec=1 or a vector of at least 4 bytes"),
        ({"elem_bytes": 4, "per_thread": 64}, "per_thread=64"),
        ({"elem_bytes": 4, "tile_m": 16, "tile_n": 16, "per_thread": 16}, "multiple of 32"),
        ({"elem_bytes": 4, "layout": "zigzag"}, "layout='zigzag' is not one of"),
        ({"elem_bytes": 4, "layout": "swizzle", "pad": 1}, "pad must be 0"),
        ({"elem_bytes": 4, "conjugate": True}, "needs complex64 or complex128"),
        ({"elem_bytes": 4, "tile_m": "32"}, "tile_m must be an int"),
        ({"elem_bytes": 4, "persistent": 3}, "persistent=3"),
        ({"elem_bytes": 4, "realign": True}, "realign=True needs vec >= 2"),
        ({"elem_bytes": 4, "vec": 2, "realign": 1}, "realign must be a bool"),
        ({"elem_bytes": 1, "tile_m": 64, "tile_n": 64, "vec": 4, "per_thread": 16}, "spill"),
    ],
)
def test_invalid_fields_name_the_field_and_what_is_allowed(fields, message):
    with pytest.raises(ConfigError, match=message):
        KernelConfig(**fields)


@pytest.mark.parametrize("elem_bytes", [1, 2, 4, 8, 16])
def test_derived_shape_is_consistent(elem_bytes):
    for cfg in config_space(SIZES[elem_bytes]):
        assert cfg.threads % 32 == 0 and 32 <= cfg.threads <= 1024
        assert cfg.block == (cfg.threads, 1, 1)
        assert cfg.threads * cfg.per_thread * cfg.vec**2 == cfg.tile_m * cfg.tile_n
        assert cfg.smem_bytes <= NEWEST.max_shared_per_block
        assert cfg.word_bytes <= 16 and cfg.block_bytes == cfg.vec * cfg.word_bytes


def test_grid_folds_batches_and_caps_persistent_grids():
    cfg = KernelConfig(4, 64, 32)
    assert cfg.tiles(100, 65) == (2, 3)
    assert cfg.grid(100, 65, batch=70000) == (2 * 3 * 70000, 1, 1)
    assert cfg.replace(persistent=2).grid(8192, 8192, 1, multiprocessors=132) == (264, 1, 1)
    assert cfg.replace(persistent=2).grid(64, 32, 1, multiprocessors=132) == (1, 1, 1)


def test_persistent_shares_the_compiled_kernel():
    cfg = KernelConfig(2, 64, 64, 4, 2)
    assert cfg.replace(persistent=4).kernel_name == cfg.kernel_name
    assert cfg.replace(persistent=4).key != cfg.key


def test_round_trip_through_json(rng):
    space = list(config_space("float32"))
    for i in rng.choice(len(space), 50, replace=False):
        cfg = space[i]
        assert KernelConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"elem_bytes": 4, "tile_m": "32; system('rm -rf /')"}, "must be int"),
        ({"elem_bytes": 4, "tile_m": 32.0}, "must be int"),
        ({"elem_bytes": 4, "conjugate": 1}, "must be bool"),
        ({"elem_bytes": 4, "tile_m": True}, "must be int"),
        ({"elem_bytes": 4, "launch": "now"}, "unknown KernelConfig field"),
        ({"elem_bytes": 4, "tile_m": 2**70}, "tile_m="),
        ({"tile_m": 32}, "needs 'elem_bytes'"),
        ({"elem_bytes": 4, "layout": "pad\n#include </etc/passwd>"}, "is not one of"),
        ([("elem_bytes", 4)], "must be a mapping"),
    ],
)
def test_from_dict_rejects_untrusted_values(data, message):
    with pytest.raises(ConfigError, match=message):
        KernelConfig.from_dict(data)


@pytest.mark.parametrize("dtype", ["bool", "int8", "float16", "float32", "int64", "complex128"])
def test_space_is_keyed_by_element_size(dtype):
    size = np.dtype(dtype).itemsize
    configs = list(config_space(dtype))
    assert configs and all(c.elem_bytes == size for c in configs)
    assert len(set(configs)) == len(configs)


def test_space_respects_device_limits_and_vector_cap():
    small = DeviceLimits(max_threads_per_block=256, max_shared_per_block=8 * 1024)
    configs = list(config_space("float32", small, max_vector=1))
    assert configs
    assert all(c.threads <= 256 and c.smem_bytes <= 8 * 1024 for c in configs)
    assert all(c.vec == 1 or c.any_offset for c in configs)
    assert any(c.realign for c in configs)  # unaligned calls get the realigning kernels
    assert any(c.flag("staged") for c in configs)  # and the staged ones
    assert not any(c.any_offset for c in config_space("float32"))
    assert len(configs) < len(list(config_space("float32")))


def test_space_for_conjugate_needs_complex():
    assert all(c.conjugate for c in config_space("complex64", conjugate=True))
    with pytest.raises(ConfigError, match="complex"):
        list(config_space("float32", conjugate=True))


@pytest.mark.parametrize(
    "dtype", ["object", "U3", "S5", np.dtype([("a", "i4"), ("b", "f4")]), "complex256"]
)
def test_unsupported_dtypes(dtype):
    with pytest.raises(UnsupportedDtypeError):
        list(config_space(dtype))


@pytest.mark.parametrize(
    "dtype",
    [
        "(-1,)i4",
        "(99999999999999,)f8",
        "(2,)i4",
        "i4,i4",
        pytest.param("x" * 5000, id="x*5000"),
        "\x1b[31m",
    ],
)
def test_malformed_dtype_strings_are_unsupported_dtype_errors(dtype):
    """NumPy raises ValueError for some dtype strings; every bad one is our error, short."""
    with pytest.raises(UnsupportedDtypeError, match="float32") as caught:
        list(config_space(dtype))
    assert len(str(caught.value)) < 400


@pytest.mark.parametrize("bad", [0, -1, -16, 0.5, "8", True])
def test_a_vector_cap_below_one_or_not_an_int_is_rejected(bad):
    """max_vector=0 used to yield the realigning space as if it meant something."""
    with pytest.raises(ConfigError, match="max_vector"):
        list(config_space("float32", max_vector=bad))
    with pytest.raises(ConfigError, match="max_vector"):
        default_config(4, max_vector=bad)


@pytest.mark.parametrize("bad", [0, -3, 2.5])
def test_a_short_side_below_one_is_rejected(bad):
    with pytest.raises(ConfigError, match="short_side"):
        list(config_space("float32", short_side=bad))


def test_a_vector_cap_above_the_widest_changes_nothing(rng):
    cap = int(rng.integers(16, 1 << 20))
    assert list(config_space("int8", max_vector=cap)) == list(config_space("int8"))


@pytest.mark.parametrize("elem_bytes", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("vec", [16, 8, 4, 2, 1])
def test_defaults_are_valid_and_respect_the_vector_cap(elem_bytes, vec):
    cfg = default_config(elem_bytes, vec)
    assert cfg.vec <= vec and cfg.fits(NEWEST)
    assert seed_config(elem_bytes).tile_m == 32


def test_max_vec_needs_every_extent_pitch_and_pointer_aligned():
    assert max_vec(1, 8192, 8192) == 16
    assert max_vec(4, 8192, 8192) == 4
    assert max_vec(4, 4099, 6007) == 1
    assert max_vec(2, 64, 64, pointers=(0x1000, 0x1004)) == 2
    assert max_vec(1, 64, 64, pointers=(0x1002,)) == 1  # 2-byte words are too narrow


def test_public_names_work_without_a_gpu():
    cfg = at.KernelConfig(4)
    assert "autotranspose_" + cfg.key in at.render(cfg)
    assert next(iter(at.config_space("float32"))).elem_bytes == 4


@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "complex128"])
def test_pair_steps_move_two_size_fields_one_step_each(dtype):
    import random

    from autotranspose.kernels.config import PER_THREAD, TILE_SIZES, VEC_SIZES, pair_steps

    steps = {"tile_m": TILE_SIZES, "tile_n": TILE_SIZES, "vec": VEC_SIZES, "per_thread": PER_THREAD}
    space = list(config_space(dtype, max_vector=4, short_side=32))
    seen = 0
    for config in random.sample(space, 30):
        pairs = pair_steps(config)
        assert config not in pairs and len(set(pairs)) == len(pairs)
        seen += len(pairs)
        for other in pairs:
            fields = [f.name for f in dataclasses.fields(config) if f.init]
            moved = [f for f in fields if getattr(other, f) != getattr(config, f)]
            assert len(moved) == 2 and set(moved) <= set(steps), (config.key, other.key)
            for f in moved:
                # the long side of a flat or regt tile steps along its kind's list
                values = (
                    config.policy.step_values(config, f, steps[f], pair=True)
                    if f == "tile_m"
                    else steps[f]
                )
                assert abs(values.index(getattr(config, f)) - values.index(getattr(other, f))) == 1
    assert seen, "no config of the sample had a valid two-field step"


@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "complex128"])
def test_neighbours_are_valid_configs_one_field_one_step_away(dtype):
    import random

    from autotranspose.kernels.config import (
        PER_THREAD,
        PERSISTENT,
        TILE_SIZES,
        VEC_SIZES,
        cap_steps,
        neighbours,
    )

    space = list(config_space(dtype, max_vector=4, short_side=32))
    steps = {
        "tile_m": TILE_SIZES,
        "tile_n": TILE_SIZES,
        "vec": VEC_SIZES,
        "per_thread": PER_THREAD,
        "persistent": PERSISTENT,
    }
    for config in random.sample(space, 30):
        near = neighbours(config)
        assert near and config not in near and len(set(near)) == len(near)
        for other in near:
            moved = [
                f
                for f in (
                    "tile_m",
                    "tile_n",
                    "vec",
                    "per_thread",
                    "persistent",
                    "raster",
                    "cache",
                    "kind",
                    "params",
                    "realign",
                    "elem_bytes",
                    "min_blocks",
                )
                if getattr(other, f) != getattr(config, f)
            ]
            smem = (other.layout, other.pad) != (config.layout, config.pad)
            assert len(moved) + smem == 1, (config.key, other.key)
            if moved == ["min_blocks"]:  # from uncapped: any cap; else the next cap either way
                caps = (0, *cap_steps(config))
                assert other.min_blocks in caps and not (
                    config.spans_short_side or config.kind == "prmt"
                )
                if config.min_blocks:
                    assert abs(caps.index(config.min_blocks) - caps.index(other.min_blocks)) == 1
            elif moved and moved[0] in steps:
                # each kind steps its sides along its own lists (flat and regt long sides)
                values = config.policy.step_values(config, moved[0], steps[moved[0]], pair=False)
                i, j = (
                    values.index(getattr(config, moved[0])),
                    values.index(getattr(other, moved[0])),
                )
                assert abs(i - j) == 1

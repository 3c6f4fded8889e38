"""cast_transpose() without a GPU: the cast kind's configs and validation, every pair's
kernel rendered and compiled (sm_80, sm_90: no spills, the predicted shared memory), how
axes reduce to launches, the argument block, and the errors a bad call gets before anything
touches a GPU."""

from __future__ import annotations

import random
import shutil
import struct

import numpy as np
import pytest
from _nvcc import assert_compile_without_spills, assert_nvcc_silent

import autotranspose as at
from autotranspose import errors, kinds
from autotranspose.kernels import codegen
from autotranspose.kernels.config import KernelConfig
from autotranspose.kinds import cast
from autotranspose.plans.cast import (
    ARG_WORDS,
    ARGS,
    MAX_LOOP_LAUNCHES,
    coded_args,
    divisor,
    format_of,
    pack_args,
    pair,
    plan_cast,
)

PAIRS = sorted(cast.PAIRS)
nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")


def defaults() -> list[KernelConfig]:
    return [
        cast.default(KernelConfig, s, d, aligned)
        for s, d in cast.PAIRS.values()
        for aligned in (True, False)
    ]


# --- the kind --------------------------------------------------------------------------------
def test_the_cast_kind_is_registered_and_named_by_its_pair():
    cfg = cast.default(KernelConfig, cast.BFLOAT16, cast.E4M3)
    assert kinds.get("cast") is cast.KIND and cfg.kind == "cast"
    assert "_xbf16_e4m3" in cfg.key and cfg.kernel_name.startswith("autotranspose_s2_")
    assert KernelConfig.from_dict(cfg.to_dict()) == cfg
    assert "cast" not in KernelConfig(4).to_dict()  # other configs are stored as they were


def test_cast_kernels_are_not_in_the_transpose_space():
    assert not any(c.kind == "cast" for c in at.config_space("float32"))


@pytest.mark.parametrize("code", PAIRS)
def test_every_pair_has_a_default_of_16_byte_loads_that_fits_a_block(code):
    src, dst = cast.PAIRS[code]
    cfg = cast.default(KernelConfig, src, dst)
    assert (cfg.elem_bytes, cfg.vec * src.size, cfg.params.pair) == (src.size, 16, code)
    assert cfg.threads <= 1024 and cfg.smem_bytes <= 48 * 1024
    assert cfg.tile_m % (16 // dst.size) == 0  # an output row's piece is whole 16-byte stores
    if cfg.min_blocks:  # a register cap, where there is one, keeps 768-1024 threads an SM
        assert cfg.threads * cfg.min_blocks in (768, 1024)
    assert cfg in set(cast.space(KernelConfig, src, dst)) or cfg.min_blocks
    assert len(PAIRS) == 12


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"cast": "f64_e4m3"}, "not a cast pair"),
        ({"elem_bytes": 4}, "set elem_bytes=2"),
        ({"vec": 1}, "2-byte words"),
        ({"tile_m": 32, "cast": "bf16_bf16", "per_thread": 1}, None),
        ({"per_thread": 16, "tile_m": 32, "tile_n": 32}, "threads"),
        ({"persistent": 2}, "persistent=0"),
        ({"conjugate": True}, "conjugate=False"),
        ({"realign": True}, None),
        ({"min_blocks": 16}, "exceed the 2048 threads"),
    ],
)
def test_config_validation_names_the_field_and_the_fix(fields, message):
    base = cast.default(KernelConfig, cast.BFLOAT16, cast.E4M3)
    if message is None:
        assert base.replace(**fields).kind == "cast"
        return
    with pytest.raises(errors.ConfigError, match=message):
        base.replace(**fields)


def test_the_space_is_small_valid_and_holds_the_default():
    for code in ("f32_e4m3", "bf16_e5m2", "f16_f16"):
        src, dst = cast.PAIRS[code]
        space = list(cast.space(KernelConfig, src, dst))
        assert 50 < len(space) < 2000 and all(c.params.pair == code for c in space)
        assert cast.default(KernelConfig, src, dst).replace(min_blocks=0) in space


# --- rendering and compiling -------------------------------------------------------------------
@pytest.mark.parametrize("code", PAIRS)
def test_every_pair_renders_its_conversion(code):
    src, dst = cast.PAIRS[code]
    text = at.render(cast.default(KernelConfig, src, dst))
    assert "#include <cuda_fp8.h>" in text and f"sizeof(at_cast_args) == {ARGS.size}" in text
    if dst.fp8:
        assert f"__NV_SATFINITE, {dst.fp8}" in text
    else:
        assert f"at_cast_clamp_{dst.code}(__fmul_rn(" in text
    assert ARGS.size == 136  # the C struct's size: a multiple of its 8-byte alignment


@nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_pair_s_defaults_compile_without_spills(arch):
    assert_compile_without_spills(defaults(), arch)


@nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_inner_tiles_of_odd_rows_compile_without_spills_in_a_function_of_their_own(arch):
    ours = [c.replace(realign=True) for c in defaults()[::2]]
    assert all("_inner(" in at.render(c) for c in ours)
    assert "_inner(" not in at.render(defaults()[0].replace(realign=False))
    assert_compile_without_spills(ours, arch)


@nvcc
def test_the_kernels_compile_silently():
    assert_nvcc_silent(codegen.render_many(defaults()[:6]), "sm_90")


@nvcc
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_a_sample_of_every_pair_s_space_compiles_without_spills(arch):
    rng = np.random.default_rng()
    picks = []
    for src, dst in cast.PAIRS.values():
        space = [c for c in cast.space(KernelConfig, src, dst) if c.threads <= 512]
        picks += [space[i] for i in rng.choice(len(space), 3, replace=False)]
    assert_compile_without_spills(picks, arch)


@nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_wide_tiles_past_48_kib_compile_without_spills_and_declare_it_dynamic(arch):
    wide = [c for src, dst in cast.PAIRS.values() for c in cast.wide_tiles(KernelConfig, src, dst)]
    assert wide and all(c.dynamic_smem > 48 * 1024 and c.static_smem_bytes == 0 for c in wide)
    assert all("extern __shared__" in at.render(c) for c in wide[:3])
    assert_compile_without_spills(wide, arch)


@nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_capped_race_candidates_compile_without_spills(arch):
    capped = [c for src, dst in cast.PAIRS.values() for c in cast.capped(KernelConfig, src, dst)]
    assert capped and all(c.min_blocks * c.threads <= 1024 for c in capped)
    for c in capped:  # each is its pair's default with one block more an SM, realign off
        src, dst = cast.PAIRS[c.params.pair]
        default = cast.default(KernelConfig, src, dst)
        assert c.replace(min_blocks=c.min_blocks - 1, realign=default.realign) == default
        assert not c.realign
        assert c in cast.race_candidates(KernelConfig, src, dst)
    assert_compile_without_spills(capped, arch)


def test_a_first_call_races_the_wide_tiles_only_where_a_block_may_opt_in():
    import dataclasses

    from autotranspose.kinds.base import NEWEST, shared_optin

    h100 = dataclasses.replace(NEWEST, max_shared_optin=shared_optin((9, 0)))
    for src, dst in cast.PAIRS.values():
        static = cast.race_candidates(KernelConfig, src, dst)
        opted = cast.race_candidates(KernelConfig, src, dst, h100)
        assert static[0] == opted[0] == cast.default(KernelConfig, src, dst)
        assert not any(c.dynamic_smem for c in static)
        assert opted[: len(static)] == static and len(set(opted)) == len(opted)
        assert set(opted[len(static) :]) == set(cast.wide_tiles(KernelConfig, src, dst))


# --- formats, pairs and launches ----------------------------------------------------------------
@pytest.mark.parametrize(
    "spelling, name",
    [
        ("e4m3", "float8_e4m3fn"),
        ("float8_e5m2", "float8_e5m2"),
        ("BF16", "bfloat16"),
        (np.float16, "float16"),
        ("float32", "float32"),
    ],
)
def test_formats_by_any_spelling(spelling, name):
    assert format_of(spelling).name == name


def test_unsupported_formats_and_pairs():
    with pytest.raises(errors.UnsupportedDtypeError, match="float32/bfloat16/float16 to"):
        format_of("int8")
    with pytest.raises(errors.UnsupportedDtypeError, match="writes float8_e4m3fn"):
        pair(cast.BFLOAT16, cast.FLOAT32)
    with pytest.raises(errors.UnsupportedDtypeError, match="reads float32"):
        pair(cast.E4M3, cast.BFLOAT16)


def test_a_matrix_is_one_launch_and_z_rides_along():
    (lc,) = plan_cast((4, 5), (1, 0), (5, 1), (4, 1), (5, 1)).launches
    assert (lc.batch, lc.m, lc.n, lc.ld_x, lc.ld_o, lc.transpose, lc.rides) == (
        1, 4, 5, 5, 4, True, True,
    )  # fmt: skip


def test_axes_that_stay_together_fuse_into_a_batched_transpose():
    (lc,) = plan_cast((3, 4, 37), (2, 0, 1), (148, 37, 1), (12, 4, 1), None).launches
    assert (lc.batch, lc.m, lc.n, lc.transpose) == (1, 12, 37, True)
    (lc,) = plan_cast((8, 30, 50), (0, 2, 1), (1500, 50, 1), (1500, 30, 1), None).launches
    assert (lc.batch, lc.bs_x, lc.bs_o) == (8, 1500, 1500)


def test_the_innermost_axis_staying_is_a_strided_cast_and_z_gets_its_own_launch():
    plan = plan_cast(
        (4, 6, 5, 33), (0, 2, 1, 3), (990, 165, 33, 1), (990, 198, 33, 1), (990, 165, 33, 1)
    )
    y = [lc for lc in plan.launches if lc.target == "y"]
    z = [lc for lc in plan.launches if lc.target == "z"]
    assert len(y) == 4 and not any(lc.transpose for lc in y)  # 4 host loops over the batch
    assert len(z) == 1 and z[0].m * z[0].n * z[0].batch == 4 * 6 * 5 * 33


def test_too_many_host_loops_take_two_passes():
    shape = (3, MAX_LOOP_LAUNCHES + 1, 5, 7)  # out (65, 3, 7, 5): 65 loops of 3 transposes
    y = (3 * 35, 35, 5, 1)
    plan = plan_cast(shape, (1, 0, 3, 2), (35 * 65, 35, 7, 1), y, None)
    assert plan.two_pass and not plan.launches
    plan = plan_cast(shape[1:], (0, 2, 1), (35, 7, 1), y[1:], None)
    assert len(plan.launches) == 1 and plan.launches[0].batch == MAX_LOOP_LAUNCHES + 1


def test_a_transposed_view_of_x_is_read_through_its_stride_1_axis():
    # x is the .T of a contiguous (5, 4): its transpose is that memory in order, one run
    (lc,) = plan_cast((4, 5), (1, 0), (1, 4), (4, 1), None).launches
    assert not lc.transpose and lc.m * lc.n * lc.batch == 20
    (lc,) = plan_cast((4, 5), (0, 1), (1, 4), (5, 1), None).launches  # a plain cast of it
    assert lc.transpose and (lc.m, lc.n, lc.ld_x, lc.ld_o) == (5, 4, 4, 5)


def test_x_with_no_stride_1_axis_is_refused():
    with pytest.raises(errors.LayoutError, match="no axis of stride 1"):
        plan_cast((4, 5), (1, 0), (10, 2), (4, 1), None)


def test_the_argument_block():
    (lc,) = plan_cast(
        (2, 300, 70), (0, 2, 1), (21000, 70, 1), (21000, 300, 1), (21000, 70, 1)
    ).launches
    args, grid = pack_args(lc, 128, 64, cast.BFLOAT16, cast.E4M3, 1000, 2000, 3000, 0, 4000, 0.5)
    f = struct.unpack(ARGS.format, args)
    assert grid == 2 * 3 * 2 and f[:7] == (1000, 2000, 3000, 0, 4000, 0.5, 0)
    assert f[7:15] == (300, 70, 70, 300, 70, 21000, 21000, 21000) and f[15:17] == (3, 2)
    assert f[17:20] == (*divisor(3)[:1], *divisor(2)[:1], divisor(2)[1] | divisor(3)[1] << 8)
    # the same block with the leading words coded for a relocated program's call
    codes = tuple(random.randrange(1, 2**48) for _ in range(ARG_WORDS))
    coded, same = coded_args(lc, 128, 64, cast.BFLOAT16, cast.E4M3, codes)
    assert same == grid and coded[48:] == args[48:]
    assert struct.unpack("<6Q", coded[:48]) == codes  # no offsets: this launch starts at 0


@pytest.mark.parametrize("d", [1, 2, 3, 5, 7, 64, 100, 927, 65535, 2**20 + 1, 2**30 + 3, 2**31])
def test_the_tile_divisors_are_exact_below_2_to_the_31(d):
    magic, shift = divisor(d)
    assert magic < 2**32
    rng = np.random.default_rng(d)
    ns = [0, 1, d - 1, d, d + 1, 2**31 - 1, *rng.integers(0, 2**31, 2000).tolist()]
    for n in ns:
        assert ((2 * n * magic) >> 32) >> shift == n // d, (n, d)


# --- the call's errors, before any GPU use ------------------------------------------------------
class FakeCuda:
    """A GPU array by the CUDA Array Interface: its checks need no driver until the pointer."""

    def __init__(self, shape, typestr="<f4", strides=None):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (0x10000, False),
            "strides": strides,
            "version": 3,
        }


def test_numpy_input_is_refused_with_the_fix():
    with pytest.raises(errors.InputTypeError, match="PyTorch tensor or CuPy array"):
        at.cast_transpose(np.zeros((4, 4), np.float32), "e4m3")


@pytest.mark.parametrize("typestr", ["<f8", "<i4", "|u1"])
def test_unsupported_inputs(typestr):
    with pytest.raises(errors.UnsupportedDtypeError, match="cast_transpose\\(\\) reads"):
        at.cast_transpose(FakeCuda((4, 4), typestr), "e4m3")


def test_unsupported_outputs():
    with pytest.raises(errors.UnsupportedDtypeError, match="is not a format"):
        at.cast_transpose(FakeCuda((4, 4)), np.int8)
    with pytest.raises(errors.UnsupportedDtypeError, match="writes"):
        at.cast_transpose(FakeCuda((4, 4)), "float32")


def test_bad_axes_and_shapes():
    with pytest.raises(errors.AxesError, match="repeat"):
        at.cast_transpose(FakeCuda((4, 4)), "e4m3", axes=(0, 0))
    with pytest.raises(errors.ShapeError, match="swap the last two"):
        at.cast_transpose(FakeCuda((4,)), "e4m3")


def test_out_without_both_and_bad_flags():
    with pytest.raises(errors.OutputError, match="only with both=True"):
        at.cast_transpose(FakeCuda((4, 4)), "e4m3", out=FakeCuda((4, 4), "|u1"))
    with pytest.raises(errors.InputTypeError, match="both must be"):
        at.cast_transpose(FakeCuda((4, 4)), "e4m3", both=1)


@pytest.mark.parametrize("scale", [True, "2.0"])
def test_a_scale_of_the_wrong_type(scale):
    with pytest.raises(errors.InputTypeError, match="scale must be"):
        at.cast_transpose(FakeCuda((4, 4)), "e4m3", scale=scale)


def test_transpose_and_permute_take_a_dtype():
    with pytest.raises(errors.InputTypeError, match="PyTorch tensor or CuPy array"):
        at.transpose(np.zeros((4, 4), np.float32), dtype="e4m3")
    with pytest.raises(errors.UnsupportedDtypeError, match="reads"):
        at.permute(FakeCuda((2, 4, 4), "<f8"), (1, 0, 2), dtype="bfloat16")
    with pytest.raises(errors.InputTypeError, match="config= and conjugate="):
        at.transpose(FakeCuda((4, 4)), dtype="e4m3", conjugate=True)


def test_a_forced_config_of_another_pair_is_refused():
    cfg = cast.default(KernelConfig, cast.FLOAT32, cast.E5M2)
    from autotranspose.calls.cast import cast_transpose

    with pytest.raises(errors.ConfigError, match="for the pair 'f32_e4m3'"):
        cast_transpose(FakeCuda((4, 4)), "e4m3", config=cfg)


# --- bench --cast ------------------------------------------------------------------------------
def test_bench_cases_are_seeded_large_and_mixed():
    from autotranspose.bench.cast import MIN_BYTES, PAIRS as BENCH_PAIRS, cast_cases

    cases = cast_cases(40, 3)
    assert cases == cast_cases(40, 3) and cases != cast_cases(40, 4)
    assert all((c.src, c.dst) in BENCH_PAIRS for c in cases)
    assert all(
        c.shape[0] * c.shape[1] * (4 if c.src == "float32" else 2) >= MIN_BYTES for c in cases
    )
    assert any(c.both for c in cases) and not all(c.both for c in cases)
    assert any(s % 2 for c in cases for s in c.shape) and any(c.shape[0] % 1024 == 0 for c in cases)


def test_bench_cast_command_line_is_checked_first(capsys):
    from autotranspose.cli import main

    assert main(["bench", "--cast", "2", "--random", "3"]) != 0
    assert "--cast N draws its own" in capsys.readouterr().err


# --- the eager PyTorch fast path's decisions, on stand-ins for tensors --------------------------
class _Tensor:
    """What the fast path reads of a torch.Tensor: shape, strides, dtype, device, pointer."""

    def __init__(self, ptr, shape, dtype, stride=None, neg=False):
        self.ptr, self.shape, self.dtype, self.neg = ptr, tuple(shape), dtype, neg
        self._stride = stride or tuple(int(np.prod(shape[k + 1 :])) for k in range(len(shape)))

    def data_ptr(self):
        return self.ptr

    def stride(self):
        return self._stride

    def get_device(self):
        return 0

    def is_neg(self):
        return self.neg

    def new_empty(self, shape, dtype):
        return _Tensor(0x100000, shape, dtype)


_Tensor.__name__ = _Tensor.__qualname__ = "Tensor"
_Tensor.__module__ = "torch"  # a plain tensor, as far as the signature can tell


class _Subclass(_Tensor):
    pass


def test_the_fast_path_runs_given_outputs_only_where_nothing_overlaps(monkeypatch):
    """A hit for a signature with given outputs launches into them; a call of the same
    signature whose x, outputs and amax overlap, or whose output is a lazily negated view,
    goes the full way (None), as does another layout, alignment or tensor type."""
    from autotranspose.dispatch import caches, fastpath
    from autotranspose.dispatch.lru import LRU

    launched = []

    class Launch:  # what a prepared cast launch does with a call's operands, recorded
        def run(self, ctx, stream, *operands):
            launched.append((ctx, stream, *operands))

    monkeypatch.setattr(fastpath.streams, "torch_current", lambda device: 7)
    monkeypatch.setattr(fastpath, "_fast", LRU(caches.HITS_LIMIT))
    dt = object()  # the output dtype as given (a torch dtype in a real call)
    x = _Tensor(0x10000, (64, 32), "bf16")  # 4096 bytes
    y = _Tensor(0x20000, (32, 64), "e4m3")  # 2048 bytes each
    z = _Tensor(0x30000, (64, 32), "e4m3")
    amax = _Tensor(0x40000, (1,), "f32")
    key = fastpath.cast_key(x, dt, 2.0, amax, None, True, z, y)
    hit = fastpath.CastHit(Launch(), None, 1, 0, (32, 64), "e4m3", 4096, 2048, 2048)
    fastpath.remember_cast(key, hit)
    fast = fastpath.fast_cast_torch
    assert fast(x, dt, 2.0, amax, None, True, z, y) == (z, y)
    assert launched == [(1, 7, 0x10000, 0x20000, 0x30000, 0, 2.0, 0x40000)]
    inside_x = _Tensor(0x10000 + 2048, (32, 64), "e4m3")
    assert fast(x, dt, 2.0, amax, None, True, z, inside_x) is None
    inside_y = _Tensor(0x20000 + 1024, (64, 32), "e4m3")
    assert fast(x, dt, 2.0, amax, None, True, inside_y, y) is None
    for ptr in (0x20000 + 2044, 0x30000, 0x10000 + 4092):  # amax inside y, z, x
        a = _Tensor(ptr, (1,), "f32")
        assert fast(x, dt, 2.0, a, None, True, z, y) is None
    neg = _Tensor(0x20000, (32, 64), "e4m3", neg=True)
    assert fast(x, dt, 2.0, amax, None, True, z, neg) is None
    strided = _Tensor(0x20000, (32, 64), "e4m3", stride=(128, 1))
    odd = _Tensor(0x20000 + 8, (32, 64), "e4m3")
    sub = _Subclass(0x20000, (32, 64), "e4m3")
    for other in (strided, odd, sub, np.zeros((32, 64), np.uint8)):  # a NumPy array too
        assert fast(x, dt, 2.0, amax, None, True, z, other) is None
    assert len(launched) == 1
    assert fastpath.cast_plain(y) and fastpath.cast_plain(None) and not fastpath.cast_plain(sub)
    # what enters no signature, for the full path that remembers and the fast path alike
    sign = fastpath.cast_signature
    assert sign(x, dt, 2.0, amax, None, True, z, y) == fastpath.cast_key(x, dt, 2.0, amax, None, True, z, y)  # fmt: skip
    for args in ((x, "e4m3", 2.0, amax, None, True, z, y), (x, dt, 2.0, amax, range(2), True, z, y),
                 (x, dt, 2.0, amax, None, 1, z, y), (x, dt, 2.0, amax, None, True, z, sub)):  # fmt: skip
        assert sign(*args) is None and fastpath.fast_cast_torch(*args) is None, args
    # a float scale reaches the launch rounded to float32, as the full path rounds it
    key = fastpath.cast_key(x, dt, 0.1, amax, None, True, z, y)
    fastpath.remember_cast(key, hit)
    assert fast(x, dt, 0.1, amax, None, True, z, y) == (z, y)
    assert launched[-1][-2] == float(np.float32(0.1)) != 0.1

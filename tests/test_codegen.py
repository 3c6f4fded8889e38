"""Rendering: every kernel of the space renders, names are stable, source is plain CUDA C."""

from __future__ import annotations

import re

import pytest

import autotranspose as at
from autotranspose.codegen import render_many, render_seed, render_support, template_version
from autotranspose.config import KernelConfig, config_space

DTYPES = ["int8", "float16", "float32", "float64", "complex128"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_kernel_of_the_space_renders(dtype):
    kernels = {c.kernel_name: c for c in config_space(dtype)}
    kernels.update({c.kernel_name: c for c in config_space(dtype, conjugate=True)} if dtype == "complex128" else {})
    source = render_many(kernels.values())
    for name in kernels:
        assert f"{name}(" in source
    assert source.count('extern "C" __global__') == len(kernels)
    assert "{{" not in source and "{%" not in source


def test_one_kernel_has_its_config_in_the_header():
    cfg = KernelConfig(2, 128, 64, 4, 2, 0, "swizzle", "col", "stream")
    src = at.render(cfg)
    assert re.search(rf'extern "C" __global__ void __launch_bounds__\({cfg.threads}, 1\)\s*\n{cfg.kernel_name}\(', src)
    assert "128x64 tile of 2-byte elements" in src
    assert "XOR-swizzled" in src and "__ldcs" in src and "__stcs" in src
    assert f"sm[{cfg.smem_bytes // cfg.chunk_bytes}]" in src
    assert template_version() in src


def test_no_dead_branches_in_generated_source():
    plain = at.render(KernelConfig(4, 32, 32, 1, 4, 1, "pad", "row", "default"))
    assert "__ldcs" not in plain and "__byte_perm" not in plain and "^ ((" not in plain
    assert "conjugate" not in plain
    conj = at.render(KernelConfig(16, 32, 32, 1, 4, 1, conjugate=True))
    assert "0x80000000u" in conj


def test_render_rejects_other_objects():
    with pytest.raises(TypeError, match="KernelConfig"):
        at.render({"elem_bytes": 4})


def test_names_and_version_are_stable():
    cfg = KernelConfig(8, 64, 32, 2, 2, 1, "pad", "col", "default", True)
    assert cfg.kernel_name == "autotranspose_s8_m64_n32_v2_t2_pad1_col_default_conj"
    assert template_version() == template_version() and len(template_version()) == 16


def test_support_and_seed_kernels_render():
    assert "at_naive_s16" in render_support()
    assert all(f"seed_transpose_s{s}" in render_seed() for s in (1, 2, 4, 8, 16))


SMEM_CASES = [
    KernelConfig(1, 256, 16, 4, 1, 0, "swizzle", "col", "stream", realign=True),
    KernelConfig(8, 32, 32, 2, 2, 1, realign=True),
    KernelConfig(2, 32, 64, 4, 1, 1, realign=True),
    KernelConfig(4, 64, 64, 4, 1, 0, "swizzle", realign=True),
    KernelConfig(1, 128, 64, 4, 2, 0, "swizzle", realign=True),
]


@pytest.mark.parametrize("cfg", SMEM_CASES, ids=lambda c: c.key)
def test_edge_path_and_vector_path_agree_on_shared_memory(cfg):
    """The element-by-element edge path computes each element's shared-memory byte address
    itself; evaluated for every element of the tile it must equal where the vector path's
    micro-block transpose puts that element, and no two elements may share a byte."""
    from autotranspose.codegen import kernel_params

    k = kernel_params(cfg)
    lines = at.render(cfg).splitlines()
    line = next(x for x in lines if "(smb + " in x and x.rstrip().endswith("= v;"))
    expr = line.split("(smb + ", 1)[1].rsplit(") = v;", 1)[0].replace("/", "//")
    v, w, s, a = k["v"], k["w"], k["s"], k["a"]
    seen = set()
    for r in range(cfg.tile_m):
        for c in range(cfg.tile_n):
            got = eval(expr, {"r": r, "c": c})
            row, col, off = c // v, r // v, (c % v) * w + (r % v) * s
            if cfg.layout == "swizzle":
                col ^= (row // k["swz_rows"]) & k["swz_mask"]
            want = ((off // a) * k["plane"] + row * k["pitch"] + col) * a + off % a
            assert got == want, (r, c)
            seen.add(got)
    assert len(seen) == cfg.tile_m * cfg.tile_n and max(seen) < cfg.smem_bytes

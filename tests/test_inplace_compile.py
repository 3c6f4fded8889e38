"""transpose_()'s kernels compile with nvcc for sm_80 and sm_90 with their default parameters:
no spills, no local memory, SWAP's shared memory as InplaceParams predicts, and nothing said
(pycuda turns what nvcc says into a warning at a user's first call). Needs nvcc, not a GPU."""

from __future__ import annotations

import shutil

import pytest
from _nvcc import assert_nvcc_silent

from autotranspose.kernels.inplace import (
    CLUSTER_SIZES,
    PIECES,
    InplaceKernel,
    cluster_params,
    cols_params,
    render_inplace,
)
from autotranspose.kinds import inplace as kind
from autotranspose.runtime.compiler import source_resources

pytestmark = [
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH"),
    pytest.mark.slow,
]


def _specs(elem_bytes: int, arch: str = "sm_90") -> list[InplaceKernel]:
    params = kind.default(elem_bytes)
    specs = [
        InplaceKernel(
            p,
            elem_bytes,
            False,
            cols_params(params)
            if p in ("cols", "cols_words", "cols_slide", "cols_rule")
            else cluster_params(params)
            if p[-1] == "r"
            else params,
            CLUSTER_SIZES[-1] if p == "cols_cluster" else 0,
        )
        for p in PIECES
        if p != "conj"
        and (p not in ("cols_lines", "cols_words", "cols_slide") or elem_bytes < 4)
        and (p not in ("swap_lines", "cols_rule") or elem_bytes < 16)
        # clusters are sm_90's: the host takes cols_cluster on no GPU before it
        and (p != "cols_cluster" or arch >= "sm_90")
    ]
    if elem_bytes in (8, 16):
        specs += [
            InplaceKernel(p, elem_bytes, True, params)
            for p in ("swap", "shuffle", "shuffle_inv", "conj")
        ]
    return specs


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("elem_bytes", [1, 2, 4, 8, 16])
def test_no_spills_and_predicted_shared_memory(arch, elem_bytes):
    for k in _specs(elem_bytes, arch):
        res = source_resources(render_inplace(k), arch)[k.name]
        assert res.spill_bytes == 0 and res.stack_bytes == 0, (k.name, res)
        assert res.registers * k.params.threads <= 65536, (k.name, res)
        if k.piece in ("swap", "swap_lines"):
            assert res.smem_bytes == k.params.swap_smem(elem_bytes), (k.name, res)
        if "extern __shared__" in render_inplace(k):
            # a launch of dynamic shared memory opts in to the device's most: no room is
            # left for static arrays (cuKernelSetAttribute refuses the opt-in)
            assert res.smem_bytes == 0, (k.name, res)


@pytest.mark.parametrize("piece", PIECES)
def test_nvcc_says_nothing(piece):
    e = 2 if piece in ("cols_lines", "cols_words", "cols_slide") else 8
    cluster = CLUSTER_SIZES[0] if piece == "cols_cluster" else 0
    assert_nvcc_silent(render_inplace(InplaceKernel(piece, e, piece == "conj", cluster=cluster)))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("elem_bytes", [1, 2, 4, 8])
def test_swap_in_lines_compiles_without_spills(arch, elem_bytes):
    """swap_lines at the squares' default parameters too (the rectangles' are the others'
    above), conjugating: no spills under its register cap, the shared memory predicted,
    nothing said."""
    for square in (False, True):
        params = kind.default(elem_bytes, square=square)
        for conjugate in (False, True) if elem_bytes == 8 else (False,):
            k = InplaceKernel("swap_lines", elem_bytes, conjugate, params)
            source = render_inplace(k)
            res = source_resources(source, arch)[k.name]
            assert res.spill_bytes == 0 and res.stack_bytes == 0, (k.name, res)
            assert res.smem_bytes == params.swap_smem(elem_bytes), (k.name, res)
            assert_nvcc_silent(source)

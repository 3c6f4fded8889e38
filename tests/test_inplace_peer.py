"""`bench --inplace --inplace-peer DIR`: bryancatanzaro/inplace built from a checkout with
nvcc (the build's steps run here on a stand-in checkout of the same layout and API, written
by the test), refused clearly when DIR is no checkout or --inplace is missing, and reported
beside transpose_()."""

from __future__ import annotations

import ctypes
import re
import shutil
from pathlib import Path

import pytest

from autotranspose.bench import inplace_peer
from autotranspose.bench.inplace import InplaceCase, InplaceRow, _line, markdown

# inplace::transpose's declarations as the checkout's inplace/transpose.h has them, and a
# definition of our own (the stand-in moves nothing: only the build and the symbol are tested)
_HEADER = """#pragma once
namespace inplace {
void transpose(bool row_major, float* data, int m, int n);
void transpose(bool row_major, double* data, int m, int n);
}
"""
_DEFINITION = """#include "transpose.h"
namespace inplace {
void transpose(bool, float*, int, int) {}
void transpose(bool, double*, int, int) {}
}
"""
# the one construct the build shims: a legacy warp vote in a kernel template instantiated
# in this file and launched from another (the stub's linkage the build keeps external)
_ROTATE = """#include "rotate.h"
template <typename T> __global__ void at_stand_in(T* d) { if (__ballot(d[threadIdx.x] > 0)) d[0] = 0; }
template __global__ void at_stand_in<float>(float*);
"""
_ROTATE_H = "#pragma once\ntemplate <typename T> __global__ void at_stand_in(T* d);\n"
_LAUNCH = """#include "rotate.h"
void at_launch_stand_in(float* d) { at_stand_in<float><<<1, 32>>>(d); }
"""


def _stand_in(root: Path) -> Path:
    src = root / "inplace"
    src.mkdir(parents=True)
    (src / "transpose.h").write_text(_HEADER)
    (src / "rotate.h").write_text(_ROTATE_H)
    (src / "rotate.cu").write_text(_ROTATE)
    for name in inplace_peer.SOURCES:
        text = {"enact.cu": _DEFINITION, "permute.cu": _LAUNCH}.get(name, "// empty unit\n")
        (src / name).write_text(text)
    return root


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


@needs_nvcc
def test_a_checkout_builds_into_a_library_with_the_entry_point_and_is_reused(tmp_path):
    root = _stand_in(tmp_path / "inplace")
    lib = inplace_peer.build(root, "sm_80", tmp_path / "cache")
    assert lib.is_file()
    dll = ctypes.CDLL(str(lib))  # loads without a GPU (the CUDA runtime is linked statically)
    assert hasattr(dll, "at_inplace_peer")
    peer = inplace_peer.Peer(lib)
    with pytest.raises(ValueError, match="4- or 8-byte"):
        peer.transpose(0, 3, 5, 2)  # refused before any CUDA call
    before = lib.stat().st_mtime_ns
    assert inplace_peer.build(root, "sm_80", tmp_path / "cache") == lib
    assert lib.stat().st_mtime_ns == before  # the same sources: not built again
    (root / "inplace" / "gcd.cpp").write_text("// changed\n")
    assert inplace_peer.build(root, "sm_80", tmp_path / "cache") != lib


@needs_nvcc
def test_a_build_failure_names_the_step_and_the_compilers_words(tmp_path):
    root = _stand_in(tmp_path / "inplace")
    (root / "inplace" / "skinny.cu").write_text("this is not C++;\n")
    with pytest.raises(inplace_peer.PeerBuildError, match=r"compiling skinny\.cu"):
        inplace_peer.build(root, "sm_80", tmp_path / "cache")


def test_a_directory_that_is_no_checkout_is_refused_with_how_to_get_one(tmp_path):
    (tmp_path / "inplace").mkdir()
    with pytest.raises(
        inplace_peer.PeerBuildError,
        match=re.escape("git clone https://github.com/bryancatanzaro/inplace"),
    ):
        inplace_peer.build(tmp_path, "sm_90", tmp_path / "cache")


def test_the_peer_needs_the_inplace_cases(capsys, tmp_path):
    from autotranspose.cli import main

    assert main(["bench", "--inplace-peer", str(tmp_path)]) != 0
    assert "add --inplace N" in capsys.readouterr().err


def test_the_report_puts_the_peer_beside_transpose_():
    rows = [
        InplaceRow(InplaceCase("odd", (301, 557), 4), 30.0, 0.25, 0.9, peer_of_copy=0.125),
        InplaceRow(InplaceCase("odd", (301, 557), 2), 30.0, 0.20, 0.9, peer_note="n/a"),
        InplaceRow(
            InplaceCase("prime", (2039, 7919), 8), 30.0, 0.30, 0.9, peer_note="wrong output"
        ),
    ]
    table = markdown(rows, "GPU").splitlines()
    head = [c.strip() for c in table[2].strip("|").split("|")]
    assert head[-1] == "peer" and len(head) == len(table[3].strip("|").split("|"))
    assert table[4].endswith("| 12.5% |") and table[5].endswith("| n/a |")
    assert table[6].endswith("| wrong output |")
    assert "median 2.00x its speed" in table[-1]
    assert "peer 12.5%" in _line(rows[0])
    plain = markdown([InplaceRow(InplaceCase("odd", (301, 557), 4), 30.0, 0.25, 0.9)], "GPU")
    assert "peer" not in plain

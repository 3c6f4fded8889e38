"""dev/rowwalk.py's prototype kernel (row-walking tiles for 1- and 2-byte transposes) run on
the CPU emulator: every element lands, nothing outside the output's elements is written, no
access is misaligned (UBSan), on odd sides, pitches, offsets, cut strips and cut walks."""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

import _emu
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(_emu.gxx() is None, reason="needs g++ and CUDA's headers")


def _rowwalk():
    spec = importlib.util.spec_from_file_location("rowwalk", ROOT / "dev" / "rowwalk.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GLUE = """struct rw_a { const unsigned char* x; unsigned char* y; long long m, n, ldi, ldo, bsi, bso;
    int strips, chunks, steps; };
static rw_a emu_args;
static void emu_one() {
    const rw_a& A = emu_args;
    at_rowwalk_eE(A.x, A.y, A.m, A.n, A.ldi, A.ldo, A.bsi, A.bso, A.strips, A.chunks, A.steps);
}
"""


class _Args(ctypes.Structure):
    _fields_ = [
        ("x", ctypes.c_void_p),
        ("y", ctypes.c_void_p),
        *[(f, ctypes.c_longlong) for f in ("m", "n", "ldi", "ldo", "bsi", "bso")],
        *[(f, ctypes.c_int) for f in ("strips", "chunks", "steps")],
    ]


@pytest.mark.parametrize(
    ("e", "b", "m", "n", "steps", "pad_in", "pad_out", "off_in", "off_out"),
    [
        (1, 1, 600, 150, 2, 7, 3, 5, 11),  # two strips (the second cut), three walks (cut)
        (1, 1, 1100, 40, 2, 3, 5, 7, 13),  # three strips: an interior one, halo on both sides
        (1, 2, 37, 70, 1, 0, 0, 0, 0),  # a batch of short strips, odd contiguous rows
        (1, 1, 96, 64, 4, 32, 16, 0, 0),  # rows of whole sectors, aligned windows
        (1, 1, 13, 3, 2, 1, 2, 31, 9),  # fewer columns than a step
        (2, 1, 300, 40, 2, 3, 1, 6, 2),  # 2-byte: two strips, a walk cut in its second step
        (2, 2, 45, 23, 1, 0, 0, 2, 14),
    ],
)
@pytest.mark.parametrize("async_loads", [False, True])
def test_the_row_walk_moves_every_element_and_only_those(
    e, b, m, n, steps, pad_in, pad_out, off_in, off_out, async_loads
):
    rw = _rowwalk()
    rng = np.random.default_rng([e, b, m, n, steps, off_in])
    ld_in, ld_out = n + pad_in, m + pad_out
    bs_in, bs_out = m * ld_in + 5, n * ld_out + 3
    dt = np.dtype(f"u{e}")
    in_elems = (b - 1) * bs_in + (m - 1) * ld_in + n
    out_elems = (b - 1) * bs_out + (n - 1) * ld_out + m
    src = _emu.shared(off_in + in_elems * e + 64)
    src[:] = rng.integers(0, 256, src.size, dtype=np.uint8)
    dst = _emu.shared(off_out + out_elems * e + 64)
    dst[:] = rng.integers(0, 256, dst.size, dtype=np.uint8)
    want = dst.copy()
    x = np.lib.stride_tricks.as_strided(
        src[off_in:].view(dt)[:in_elems], (b, m, n), (bs_in * e, ld_in * e, e)
    )
    np.lib.stride_tricks.as_strided(
        want[off_out:].view(dt)[:out_elems], (b, n, m), (bs_out * e, ld_out * e, e)
    )[...] = x.transpose(0, 2, 1)
    values, blocks = rw.scalars(e, b, m, n, (ld_in, ld_out, bs_in, bs_out), steps)
    args = _Args(_emu.address(src) + off_in, _emu.address(dst) + off_out, *values)
    name = f"at_rowwalk_e{e}"
    source = rw.source(e, async_loads=async_loads)  # cp.async is a plain copy on the CPU
    lib = _emu.emulated(name, source, "rw_a", GLUE.replace("eE", f"e{e}"))
    code = lib.emu_launch_isolated(ctypes.byref(args), blocks, rw.NT)
    assert code == 0, f"the emulated kernel failed ({code}: a signal where negative)"
    bad = np.flatnonzero(dst != want)
    assert bad.size == 0, f"{bad.size} bytes differ, first at {bad[:8]}"


def test_the_walk_cuts_fewer_sectors_than_the_served_tiles():
    """The walk's geometry on an odd 1-byte matrix at 16 steps. Each row is read whole between
    a block's ends, plus a halo of 16 rows a strip of 496, so under 1.10 sectors a byte.
    Each output row gets whole aligned words, so under 1.05. The served tiles' figures are
    1.26 and 1.13."""
    rw = _rowwalk()
    r, w = rw.sectors(1, 1, 4099, 6007, 16)
    assert 1.0 < r < 1.10 and 1.0 < w < 1.05
    r8, _ = rw.sectors(1, 1, 4099, 6007, 8)
    assert r8 > r  # shorter walks cut more rows

"""A NumPy stand-in for the GPU side of permute(): runs a `plan.Plan` on flat byte buffers
exactly as its launches would (the contract of `launch.make_launch`, `make_row_copy` and
`make_gather` and `make_packed`, on elements of the pass's size), so plans are checked on the CPU against
`np.transpose`.

Every access is checked as a kernel would need it: inside the buffers, no negative index, and
each launch's pointers aligned to the pass's elements. It returns how many times each
destination byte was written, so a test can demand exactly once inside `out` and never
outside.
"""

from __future__ import annotations

import numpy as np

from autotranspose.plans.permute import COPY, GATHER, PACKED, TRANSPOSE, Pass, Plan


def byte_index(at: int, elem_bytes: int, dims: list[tuple[int, int]]) -> np.ndarray:
    """Byte positions of the elements of a strided block: shape (*extents, elem_bytes)."""
    idx = np.array(at, dtype=np.int64)
    for extent, stride in dims:
        idx = idx[..., None] + np.arange(extent, dtype=np.int64) * (stride * elem_bytes)
    return idx[..., None] + np.arange(elem_bytes, dtype=np.int64)


def _indices(p: Pass, at_in: int, at_out: int) -> tuple[np.ndarray, np.ndarray]:
    """(source, destination) byte positions of one launch, element for element."""
    if p.kind in (GATHER, PACKED):  # out[sum k*out_stride] = in[sum k*in_stride] over every index
        return (
            byte_index(at_in, p.elem_bytes, [(d.extent, d.in_stride) for d in p.dims]),
            byte_index(at_out, p.elem_bytes, [(d.extent, d.out_stride) for d in p.dims]),
        )
    o, o2 = p.outer, p.outer2  # extent 1 unless the launch walks more batch dims itself
    outer_in = [(o.extent, o.in_stride), (o2.extent, o2.in_stride)]
    outer_out = [(o.extent, o.out_stride), (o2.extent, o2.out_stride)]
    src = byte_index(at_in, p.elem_bytes, [*outer_in, (p.batch, p.bs_in), (p.m, p.ld_in), (p.n, 1)])
    if p.kind == TRANSPOSE:  # out[b*bs_out + j*ld_out + i] = in[b*bs_in + i*ld_in + j]
        dims = [*outer_out, (p.batch, p.bs_out), (p.m, 1), (p.n, p.ld_out)]
    else:
        assert p.kind == COPY, p.kind
        dims = [*outer_out, (p.batch, p.bs_out), (p.m, p.ld_out), (p.n, 1)]
    return src, byte_index(at_out, p.elem_bytes, dims)


def execute(plan: Plan, src: np.ndarray, src_at: int, dst: np.ndarray, dst_at: int) -> np.ndarray:
    """Run `plan` from `src` (1-D uint8; x starts at byte `src_at`) into `dst` (1-D uint8,
    written in place; out starts at `dst_at`). Returns the write count of each byte of dst."""
    assert src.ndim == dst.ndim == 1 and src.dtype == dst.dtype == np.uint8
    hits = np.zeros(dst.size, dtype=np.int64)
    for p in plan.passes:
        e = p.elem_bytes
        for off_in, off_out in p.offsets():
            a, b = src_at + off_in, dst_at + off_out
            assert (src.ctypes.data + a) % e == 0, f"input of {p} not aligned to {e} bytes"
            assert (dst.ctypes.data + b) % e == 0, f"output of {p} not aligned to {e} bytes"
            si, di = _indices(p, a, b)
            for name, idx, buf in (("read", si, src), ("write", di, dst)):
                assert idx.min() >= 0 and idx.max() < buf.size, f"{p} {name}s outside the buffer"
            dst[di] = src[si]
            np.add.at(hits, di.ravel(), 1)
    return hits

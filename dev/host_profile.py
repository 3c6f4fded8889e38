"""Where a small transpose() call's host time goes: each piece of the fast path timed alone.

Run on a GPU machine: python dev/host_profile.py. Prints microseconds per call."""

from __future__ import annotations

import time

import numpy as np


def per_call(fn, n: int = 20000, chunk: int = 200) -> float:
    """Host microseconds per call: chunks of `chunk` calls, the GPU drained between chunks
    outside the clock (back-to-back launches would time the GPU's rate once the queue fills)."""
    import torch

    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    spent = 0.0
    for _ in range(n // chunk):
        t0 = time.perf_counter()
        for _ in range(chunk):
            fn()
        spent += time.perf_counter() - t0
        torch.cuda.synchronize()
    return spent / (n // chunk * chunk) * 1e6


def main() -> None:
    import cupy
    import torch

    import autotranspose as at
    from autotranspose import (
        _dispatch as dispatch,
        _driver,
        _fastpath as fastpath,
        _streams as streams,
    )

    a = np.random.default_rng().standard_normal((64, 64)).astype(np.float32)
    tx, tout = torch.as_tensor(a, device="cuda"), torch.empty(64, 64, device="cuda")
    cx, cout = cupy.asarray(a), cupy.empty((64, 64), np.float32)
    at.transpose(tx, tout)
    at.transpose(cx, cout)
    px, po = tx.data_ptr(), tout.data_ptr()
    import ctypes
    import struct

    from autotranspose._compiler import activate
    from autotranspose._dtypes import element_type
    from autotranspose._launch import contiguous_launch

    state = activate(0)
    # the launch transpose() prepared for these calls: the config it serves them, bound to
    # the same contiguous 64x64 problem
    choice = dispatch.transpose.served(state, element_type("float32"), (1, 64, 64), px, po)
    launch = contiguous_launch(state, choice.config, 1, 64, 64)
    fn = _driver.kernel_function(launch.kernel.handle, launch.state.ctx)
    fargs = _driver.launch_args(fn, launch.grid, launch.block)
    params = struct.pack("PP", px, po) + launch.tail
    vals = [ctypes.c_uint64(px), ctypes.c_uint64(po)]
    vals += [ctypes.c_int64(v) for v in launch.scalars[:6]]
    vals += [ctypes.c_uint32(v) for v in launch.scalars[6:]]
    kp = (ctypes.c_void_p * len(vals))(*(ctypes.addressof(v) for v in vals))
    raw = _driver.lib().dll["cuLaunchKernel"]
    raw.restype = ctypes.c_int
    ctx = launch.state.ctx
    prep = launch.prepared(ctx)
    plain = _driver.Prepared(fn, ctx, launch.grid, launch.block, launch.tail)
    plain.address = 0  # the ctypes launch path, for comparison
    rows = {
        "python: empty call": lambda: None,
        "driver: cuCtxGetCurrent": _driver.current,
        "torch: raw current stream": lambda: streams.torch_current(0),
        "cupy: current stream": lambda: streams.cupy_current(0),
        "torch: signature key": lambda: fastpath.torch_key(tx, tout, px, po),
        "cupy: signature key": lambda: fastpath.cupy_key(cx, cout, cx.data.ptr, cout.data.ptr),
        "launch only, CUkernel handle": lambda: launch(px, po, 0),
        "launch only, CUfunction handle": lambda: _driver.launch(fargs, 0, params),
        "launch only, CUfunction, kernelParams": lambda: raw(*fargs, None, kp, None),
        "launch.run (ctx check + launch + restore)": lambda: launch.run(px, po, 0, ctx),
        "  same, ctypes path": lambda: _driver.launch_transpose(plain, px, po, 0),
        "  compiled launcher alone": lambda: _driver._at_transpose(prep.address, px, po, 0, 1),
        "transpose(torch, out)": lambda: at.transpose(tx, tout),
        "transpose(cupy, out)": lambda: at.transpose(cx, cout),
        "transpose(torch)": lambda: at.transpose(tx),
        "transpose(cupy)": lambda: at.transpose(cx),
        "torch: out.copy_(x.t())": lambda: tout.copy_(tx.t()),
        "torch: x.new_empty": lambda: tx.new_empty((64, 64)),
        "cupy: empty": lambda: cupy.empty((64, 64), np.float32),
    }
    torch.cuda.synchronize()
    for name, fn in rows.items():
        us = min(per_call(fn) for _ in range(3))
        torch.cuda.synchronize()
        print(f"{name:45} {us:7.2f} us")


if __name__ == "__main__":
    main()

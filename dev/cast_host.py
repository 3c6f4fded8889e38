"""Host cost of a cast_transpose() call against permute()'s on the same small tensor: the
microseconds a call takes when the GPU work is negligible (2000 calls, one synchronize); then
the fast path's steps one by one (the signature, the allocation, the stream, the launch), so
that a call's cost can be read part by part.

    python3 dev/cast_host.py
"""

from __future__ import annotations

import time

import torch

import autotranspose as at


def per_call(fn, calls: int = 2000) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    x = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    s, a = torch.ones(1, device="cuda"), torch.zeros(1, device="cuda")
    out = torch.empty(64, 64, device="cuda", dtype=torch.float8_e4m3fn)
    same = torch.empty(64, 64, device="cuda", dtype=torch.float8_e4m3fn)
    cases = {
        "cast_transpose(x, e4m3, scale=tensor, amax=)": lambda: at.cast_transpose(
            x, torch.float8_e4m3fn, scale=s, amax=a
        ),
        "cast_transpose(x, e4m3, scale=2.0, out_t=)": lambda: at.cast_transpose(
            x, torch.float8_e4m3fn, scale=2.0, out_t=out
        ),
        "cast_transpose(x, e4m3, scale=tensor, amax=, out_t=)": lambda: at.cast_transpose(
            x, torch.float8_e4m3fn, scale=s, amax=a, out_t=out
        ),
        "cast_transpose(x, e4m3, scale=tensor, both, out=, out_t=)": lambda: at.cast_transpose(
            x, torch.float8_e4m3fn, scale=s, both=True, out=same, out_t=out
        ),
        "cast_transpose(x, e4m3, scale=tensor, both)": lambda: at.cast_transpose(
            x, torch.float8_e4m3fn, scale=s, both=True
        ),
        "permute(x, (1, 0))": lambda: at.permute(x, (1, 0)),
        "torch: x.t().contiguous()": lambda: x.t().contiguous(),
    }
    for name, fn in cases.items():
        print(f"{name:58s} {per_call(fn):7.1f} us a call")
    parts(x, s, a)


def parts(x, s, a) -> None:
    """The eager fast path of `cast_transpose(x, e4m3, scale=s, amax=a)` step by step."""
    from autotranspose.dispatch import caches, fastpath
    from autotranspose.frameworks import torch_cast
    from autotranspose.runtime import driver, streams

    dt = torch.float8_e4m3fn
    at.cast_transpose(x, dt, scale=s, amax=a)
    key = fastpath.cast_key(x, dt, s, a, None, False)
    hit = caches.hits.get(key)
    if hit is None:
        print("no fast-path hit for the call: the parts are not timed")
        return
    y = x.new_empty(hit.y_shape, dtype=hit.dtype)
    ordinal, program = hit.ordinal, hit.program
    px, py, ps, pa = x.data_ptr(), y.data_ptr(), s.data_ptr(), a.data_ptr()
    stream = streams.torch_current(ordinal)
    steps = {
        "the whole call (at.cast_transpose)": lambda: at.cast_transpose(x, dt, scale=s, amax=a),
        "torch_cast.cast_transpose (no _api)": lambda: torch_cast.cast_transpose(
            x, dt, s, a, None, None, None, False, None
        ),
        "fastpath.fast_cast_torch": lambda: fastpath.fast_cast_torch(x, dt, s, a, None, False),
        "cast_key": lambda: fastpath.cast_key(x, dt, s, a, None, False),
        "cast_key + dict get": lambda: caches.hits.get(fastpath.cast_key(x, dt, s, a, None, False)),
        "x.new_empty(y's shape, dtype)": lambda: x.new_empty(hit.y_shape, dtype=hit.dtype),
        "data_ptr x4": lambda: (x.data_ptr(), y.data_ptr(), s.data_ptr(), a.data_ptr()),
        "streams.torch_current": lambda: streams.torch_current(ordinal),
        "driver.run_relocated": (
            (lambda: driver.run_relocated(program, stream, px, py, 0, ps, pa, 1.0))
            if program is not None
            else None
        ),
    }
    for name, fn in steps.items():
        if fn is not None:
            print(f"  {name:56s} {per_call(fn):7.2f} us")


if __name__ == "__main__":
    main()

"""Host cost of a cast_transpose() call against permute()'s on the same small tensor: the
microseconds a call takes when the GPU work is negligible (2000 calls, one synchronize).

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


if __name__ == "__main__":
    main()

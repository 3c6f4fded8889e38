"""Host cost of small permute() and transpose() calls against PyTorch's own, and what the
registered op's dispatcher adds (a tensor that requires grad). Run on a GPU machine:
python dev/host_permute.py. Prints microseconds per call (300 calls, then one synchronize;
median of 7)."""

from __future__ import annotations

import statistics
import time


def per_call(fn, calls: int = 300, rounds: int = 7) -> float:
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def main() -> None:
    import torch

    import autotranspose as at

    cases = [
        ((64, 64), (1, 0), torch.float32),
        ((25, 1024), (1, 0), torch.float16),
        ((8, 56, 56), (0, 2, 1), torch.float16),
        ((4, 3, 64, 64), (0, 2, 3, 1), torch.bfloat16),
        ((2, 8, 128, 64), (0, 2, 1, 3), torch.bfloat16),
        ((16, 197, 64), (1, 0, 2), torch.float32),
        ((3, 7, 14, 14, 5), (4, 2, 0, 3, 1), torch.int8),
        ((512, 1024, 8), (1, 0, 2), torch.float32),
    ]
    print(f"{'case':40} {'ours out':>9} {'torch out':>9} {'ours new':>9} {'torch new':>9} {'op path':>8}")
    for shape, axes, dtype in cases:
        print(_row(torch, at, shape, axes, dtype))
    x = torch.randn(64, 64, device="cuda")
    out = torch.empty(64, 64, device="cuda")
    at.transpose(x, out)
    print(f"transpose 64x64 out: {per_call(lambda: at.transpose(x, out)):.2f}  torch: "
          f"{per_call(lambda: out.copy_(x.t())):.2f}")


def _row(torch, at, shape, axes, dtype) -> str:
    x = torch.randn(shape, device="cuda").to(dtype)
    out = torch.empty([shape[a] for a in axes], device="cuda", dtype=dtype)
    at.permute(x, axes, out)
    assert torch.equal(out, x.permute(axes))
    a = per_call(lambda: at.permute(x, axes, out))
    b = per_call(lambda: out.copy_(x.permute(axes)))
    c = per_call(lambda: at.permute(x, axes))
    d = per_call(lambda: x.permute(axes).contiguous())
    g = x.float().requires_grad_()
    at.permute(g, axes)
    e = per_call(lambda: at.permute(g, axes))
    name = f"{str(dtype)[6:]} {'x'.join(map(str, shape))} {axes}"
    return f"{name:40} {a:9.2f} {b:9.2f} {c:9.2f} {d:9.2f} {e:8.2f}"


if __name__ == "__main__":
    main()

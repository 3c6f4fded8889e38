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

    first_calls(torch, at)
    layers(torch, at)
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
    print(
        f"{'case':40} {'ours out':>9} {'torch out':>9} {'ours new':>9} {'torch new':>9} {'op path':>8}"
    )
    for shape, axes, dtype in cases:
        print(_row(torch, at, shape, axes, dtype))
    x = torch.randn(64, 64, device="cuda")
    out = torch.empty(64, 64, device="cuda")
    at.transpose(x, out)
    print(
        f"transpose 64x64 out: {per_call(lambda: at.transpose(x, out)):.2f}  torch: "
        f"{per_call(lambda: out.copy_(x.t())):.2f}"
    )


def first_calls(torch, at) -> None:
    """What the first call of a signature costs (lookup, compile or disk-cache load, the
    first-call measurement), then the second call, in this process."""
    for shape, axes, dtype in [
        ((4096, 4096), (1, 0), torch.float32),
        ((33, 1021, 517), (2, 0, 1), torch.bfloat16),
        ((8, 3, 224, 224), (0, 2, 3, 1), torch.uint8),
    ]:
        x = torch.randn(shape, device="cuda").to(dtype)
        torch.cuda.synchronize()
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            at.permute(x, axes)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        print(
            f"first call {str(dtype)[6:]} {shape} {axes}: {times[0]:.1f} ms, then {times[1]:.2f} ms"
        )


def layers(torch, at) -> None:
    """Each layer of a small eager permute without out, timed alone (host µs a call)."""
    from autotranspose.calls import permute as permuter
    from autotranspose.dispatch import fastpath
    from autotranspose.runtime import driver as _driver, streams

    x = torch.randn(8, 56, 56, device="cuda", dtype=torch.float16)
    axes = (0, 2, 1)
    at.permute(x, axes)
    hit = fastpath._fast[fastpath.torch_key(x, None, x.data_ptr(), 0, axes)]
    stream = streams.torch_current(0)
    out = x.new_empty(hit.out_shape)
    po = out.data_ptr()
    rows = {
        "at.permute (entry)": lambda: at.permute(x, axes),
        "permuter.permute": lambda: permuter.permute(x, axes),
        "fastpath.fast_torch": lambda: fastpath.fast_torch(x, None, axes),
        "torch x.permute().contiguous()": lambda: x.permute(axes).contiguous(),
        "x.new_empty": lambda: x.new_empty(hit.out_shape),
        "key + dict": lambda: fastpath._fast.get(
            fastpath.torch_key(x, None, x.data_ptr(), 0, axes)
        ),
        "torch_current": lambda: streams.torch_current(0),
        "launch only": lambda: _driver.launch_transpose(hit.prep, x.data_ptr(), po, stream),
        "compiler.is_compiling": torch.compiler.is_compiling,
    }
    for name, fn in rows.items():
        print(f"layer {name:32} {per_call(fn):6.2f} us")


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

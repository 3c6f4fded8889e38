"""Profile the kernel that transpose() serves for a few cases under Nsight Compute.

Each case is warmed up (lookup, first-call measurement, compiles) outside the profiled range;
then one call runs between cuProfilerStart and cuProfilerStop, so `ncu --profile-from-start
off` records exactly the kernel a user's call gets. Run on a GPU machine:

    ncu --clock-control none --profile-from-start off --section SpeedOfLight ... \
        python3 dev/profile_kernels.py uint8:22785x22785 float16:158x601100

Each case is DTYPE:MxN or DTYPE:BxMxN, optionally @KEY to run that config instead of the
served one (e.g. to profile the same config before and after a template change; @seed runs
the seed documents' kernel); the config is printed before its profile. DTYPE:AxBxC/I,J,K profiles permute() by those axes instead
(every launch of the steps it serves after its first call); DTYPE:AxBxC/I,J,K@torch profiles
PyTorch's `out.copy_(x.permute(axes))` on the same case instead (the peer's kernel), and
@compile torch.compile's kernel of the same (its generated code printed first).
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np


def main(cases: list[str]) -> None:
    import cupy
    from _sweep import config_by_key

    import autotranspose as at
    from autotranspose.dispatch import picker as dispatch

    cuda = ctypes.CDLL("libcuda.so.1")
    for case in cases:
        if "/" in case:
            _profile_permute(cuda, case)
            continue
        case, _, key = case.partition("@")
        name, dims = case.split(":")
        shape = tuple(int(v) for v in dims.split("x"))
        dtype = np.dtype(name)
        x = cupy.random.default_rng(1).integers(0, 100, shape).astype(dtype)
        out = cupy.empty(shape[:-2] + shape[:-3:-1], dtype)
        if key == "seed":  # the seed documents' kernel, as bench runs it
            _profiled(cuda, _seed_call(dtype.itemsize, shape), x.data.ptr, out.data.ptr)
            print(f"case {case}: the seed kernel", flush=True)
            assert cupy.array_equal(out, cupy.swapaxes(x, -1, -2)), case
            continue
        config = config_by_key(key, dtype) if key else None
        for _ in range(3):
            at.transpose(x, out, config=config)
        cupy.cuda.runtime.deviceSynchronize()
        print(f"case {case}: served {_served_key(x, out, config)}", flush=True)
        _profiled(cuda, at.transpose, x, out, config=config)
        assert cupy.array_equal(out, cupy.swapaxes(x, -1, -2)), case
        dispatch.clear()
        del x, out
        cupy.get_default_memory_pool().free_all_blocks()


def _served_key(x, out, config) -> str:
    """The config a call of `x` into `out` runs: `config` where one is given, else what
    transpose() serves the call (`_dispatch.transpose.served`, the question the bench asks)."""
    if config is not None:
        return config.key
    from autotranspose.dispatch.transpose import served
    from autotranspose.plans.dtypes import element_type
    from autotranspose.runtime.compiler import activate

    b, m, n = (1, *x.shape) if x.ndim == 2 else x.shape
    choice = served(activate(0), element_type(x.dtype), (b, m, n), x.data.ptr, out.data.ptr)
    return choice.config.key if choice is not None else "row copy (one column or row a matrix)"


def _seed_call(elem_bytes: int, shape: tuple[int, ...]):
    from autotranspose.bench.peers import seed_kernel
    from autotranspose.runtime.compiler import activate

    kernel = seed_kernel(activate(0), elem_bytes)
    m, n = shape[-2:]
    grid = (-(-n // 32), -(-m // 32), 1)
    return lambda src, dst: kernel.call(grid, (32, 8, 1), "PPqq", src, dst, m, n)


def _profiled(cuda: ctypes.CDLL, fn, *args, **kwargs) -> None:
    """One call of `fn` between cuProfilerStart and cuProfilerStop (what ncu records)."""
    import cupy

    cuda.cuProfilerStart()
    fn(*args, **kwargs)
    cupy.cuda.runtime.deviceSynchronize()
    cuda.cuProfilerStop()


def _profile_permute(cuda: ctypes.CDLL, case: str) -> None:
    import cupy

    import autotranspose as at
    from autotranspose.dispatch import picker as dispatch

    case, _, key = case.partition("@")
    name, rest = case.split(":")
    dims, axes_text = rest.split("/")
    shape = tuple(int(v) for v in dims.split("x"))
    axes = tuple(int(v) for v in axes_text.split(","))
    if key in ("torch", "compile"):
        _profile_torch(cuda, case, name, shape, axes, compiled=key == "compile")
        return
    x = cupy.random.default_rng(1).integers(0, 100, shape).astype(np.dtype(name))
    out = cupy.empty(tuple(shape[a] for a in axes), x.dtype)
    for _ in range(3):  # the first call chooses between passes; later calls serve its choice
        at.permute(x, axes, out)
    cupy.cuda.runtime.deviceSynchronize()
    print(f"case {case}: {x.nbytes} bytes each way", flush=True)
    _profiled(cuda, at.permute, x, axes, out)
    assert cupy.array_equal(out, cupy.transpose(x, axes)), case
    dispatch.clear()
    del x, out
    cupy.get_default_memory_pool().free_all_blocks()


def _profile_torch(
    cuda: ctypes.CDLL,
    case: str,
    name: str,
    shape: tuple[int, ...],
    axes: tuple[int, ...],
    compiled: bool = False,
) -> None:
    import torch

    x = torch.randint(0, 100, shape, device="cuda").to(getattr(torch, name))
    out = torch.empty(tuple(shape[a] for a in axes), dtype=x.dtype, device="cuda")

    def move(x, out):
        out.copy_(x.permute(axes))

    if compiled:  # as the bench's peer compiles it; Inductor's code printed on the first call
        torch._dynamo.reset()
        torch._logging.set_logs(output_code=True)
        move = torch.compile(move, fullgraph=True, dynamic=False)
    for _ in range(3):
        move(x, out)
    torch._logging.set_logs()
    torch.cuda.synchronize()
    print(
        f"case {case}@{'compile' if compiled else 'torch'}: {x.nbytes} bytes each way", flush=True
    )
    _profiled(cuda, move, x, out)
    assert torch.equal(out, x.permute(axes).contiguous()), case


if __name__ == "__main__":
    main(sys.argv[1:])

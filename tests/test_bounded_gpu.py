"""A long-lived process of ever-new call signatures keeps host and device memory bounded:
every per-signature cache (the dispatch's launches, steps and fast-path hits, which hold
cast signatures' too, and lookup's choices) holds at most its bound (`lru`), and no
entry owns device memory, so dropping one frees nothing a queued kernel reads."""

from __future__ import annotations

import os
import time

import pytest

import autotranspose as at
from autotranspose.dispatch import firstcall, lookup, picker as dispatch

pytestmark = pytest.mark.gpu

SIGNATURES = 100_000  # the aim; on a slow host, at least twice the warm-up's calls (below)
BUDGET_S = 45.0  # the calls after the warm-up stop past this, once as many as the warm-up ran
# Calls after the warm-up may grow the process by no more than these: every cache is full at
# its bound by then (the warm-up passes each bound), so what is left is allocator noise.
RSS_GROWTH = 64 << 20
DEVICE_GROWTH = 32 << 20
SIDE, STEP, SIDES = 256, 8, 320  # sides 256, 264, ... 2808: multiples of 8, every row aligned


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this PyTorch has no float8_e4m3fn")
    return torch


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _device_used(torch) -> int:
    """This process's device memory: NVML's count for its pid where the driver gives one (the
    GPU is shared with other test processes under pytest-xdist, so the device's free memory
    would count theirs too); else, alone on the GPU, the device's used memory."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            for k in range(pynvml.nvmlDeviceGetCount()):  # this process uses one GPU
                handle = pynvml.nvmlDeviceGetHandleByIndex(k)
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
                        return int(proc.usedGpuMemory)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML, or no per-process figure in this VM or container
        pass
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("no per-process device memory figure (NVML) while other tests share the GPU")
    free, total = torch.cuda.mem_get_info()
    return total - free


def _shapes() -> list[tuple[int, int]]:
    """Every (m, n) once: one of each class (the buckets of the sides) first, so that every
    kernel compiles and every class is chosen in the warm-up, then the rest in a fixed
    shuffled order. Few classes, few kernels, but every (m, n) a signature of its own."""
    import numpy as np

    from autotranspose.kernels.shapes import shape_class

    pairs = [(SIDE + STEP * i, SIDE + STEP * j) for i in range(SIDES) for j in range(SIDES)]
    firsts = list({shape_class(1, m, n, 4): (m, n) for m, n in reversed(pairs)}.values())
    rest = sorted(set(pairs) - set(firsts))
    order = np.random.default_rng(0).permutation(len(rest))
    return firsts + [rest[k] for k in order]


def test_calls_of_many_signatures_keep_host_and_device_memory_bounded():
    """Transposes, permutes and cast-transposes of ~100,000 distinct shapes, into views of
    buffers allocated once (so the framework's allocator adds nothing): past a warm-up that
    fills every cache to its bound, host RSS and the GPU's used memory stay within a few
    tens of MB, each cache within its bound, and signatures dropped long ago still run
    right. First-call measurement is off: it would time candidates on every new class (a
    few dozen here), which measures nothing about the caches and costs seconds."""
    torch = _torch()
    big = (SIDE + STEP * (SIDES - 1)) ** 2
    x32 = torch.randn(2 * big, device="cuda")
    o32 = torch.empty(2 * big, device="cuda")
    x16 = torch.randn(big, device="cuda").to(torch.bfloat16)
    o8 = torch.empty(big, device="cuda", dtype=torch.float8_e4m3fn)
    e4m3 = torch.float8_e4m3fn

    def call(k: int, m: int, n: int) -> None:
        if k % 3 == 0:
            at.transpose(x32[: m * n].view(m, n), o32[: m * n].view(n, m))
        elif k % 3 == 1:
            at.permute(x32[: 2 * m * n].view(2, m, n), (0, 2, 1), o32[: 2 * m * n].view(2, n, m))
        else:
            at.cast_transpose(x16[: m * n].view(m, n), e4m3, out_t=o8[: m * n].view(n, m))

    def check(k: int, m: int, n: int) -> None:
        call(k, m, n)
        if k % 3 == 0:
            want, got = x32[: m * n].view(m, n).t(), o32[: m * n].view(n, m)
        elif k % 3 == 1:
            want = x32[: 2 * m * n].view(2, m, n).transpose(1, 2)
            got = o32[: 2 * m * n].view(2, n, m)
        else:
            x = x16[: m * n].view(m, n)
            want = torch.clamp(x.float(), -448.0, 448.0).to(e4m3).t().view(torch.uint8)
            got = o8[: m * n].view(n, m).view(torch.uint8)
        assert torch.equal(got, want), (k, m, n)

    bounds = [dispatch.caches.HITS_LIMIT, lookup.CHOICES_LIMIT]
    warm = 3 * max(bounds) + 1000  # a third of the calls of each kind: past every bound
    shapes = _shapes()[:SIGNATURES]
    firstcall.set_enabled(False)
    at.clear_caches()
    try:
        first = [(k, *shapes[k]) for k in range(3)]
        for k, m, n in first:
            check(k, m, n)
        for k in range(warm):
            call(k, *shapes[k])
        torch.cuda.synchronize()
        rss, used = _rss(), _device_used(torch)
        start = time.perf_counter()
        done = warm
        minimum = 2 * warm  # as many calls after the warm-up as in it
        for k in range(warm, len(shapes)):
            call(k, *shapes[k])
            done = k + 1
            if done >= minimum and done % 1000 == 0 and time.perf_counter() - start > BUDGET_S:
                break
        torch.cuda.synchronize()
        rss_growth, device_growth = _rss() - rss, _device_used(torch) - used
        print(
            f"{done} signatures ({done - warm} after the warm-up, "
            f"{(time.perf_counter() - start) / (done - warm) * 1e6:.0f} us each): "
            f"RSS +{rss_growth / 2**20:.1f} MiB, device +{device_growth / 2**20:.1f} MiB"
        )
        for cache in (
            dispatch.caches.launches,
            dispatch.caches.steps,
            dispatch.caches.hits,
            lookup._choices,
        ):
            assert 0 < len(cache) <= cache.limit
        assert len(dispatch.caches.hits) == dispatch.caches.HITS_LIMIT  # its bound was passed
        # the cast calls' hits and launches share those bounds with the rest
        assert any(key[0] == "cast" for key in dispatch.caches.hits)
        assert any(key[0] == "cast" for key in dispatch.caches.launches)
        assert rss_growth < RSS_GROWTH, rss_growth
        assert device_growth < DEVICE_GROWTH, device_growth
        for k, m, n in first:  # dropped long ago: prepared again, and right
            check(k, m, n)
    finally:
        firstcall.set_enabled(None)
        at.clear_caches()

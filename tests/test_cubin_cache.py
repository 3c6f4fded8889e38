"""The cubin disk cache (`_compiler.nvcc_cubin`): whole files only, shared by processes.

The integrity check runs on cubins nvcc makes here (no GPU, no pycuda); the cache itself goes
through pycuda's compiler, so its tests need pycuda (the GPU machine's)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from autotranspose.runtime import compiler

REPO = Path(__file__).resolve().parent.parent


def _nvcc_cubin(tmp_path: Path) -> bytes:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on the PATH")
    src = tmp_path / "k.cu"
    src.write_text(
        f'extern "C" __global__ void k(float* p) {{ p[threadIdx.x] *= 2.f; }} // {uuid.uuid4()}\n'
    )
    subprocess.run(
        ["nvcc", "--cubin", "-arch", "sm_90", "-o", str(tmp_path / "k.cubin"), str(src)],
        check=True,
        capture_output=True,
    )
    return (tmp_path / "k.cubin").read_bytes()


def test_a_whole_cubin_passes_and_any_cut_of_it_fails(tmp_path, rng):
    data = _nvcc_cubin(tmp_path)
    assert compiler._whole_elf(data)
    for cut in {0, 3, 63, len(data) // 2, len(data) - 1, *rng.integers(1, len(data), 20)}:
        assert not compiler._whole_elf(data[: int(cut)]), cut
    assert not compiler._whole_elf(b"\x00" + data[1:])


def test_the_cache_is_autotransposes_own_and_can_be_switched_off(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("PYCUDA_DISABLE_CACHE", raising=False)
    folder = compiler.cubin_cache_dir()
    assert folder is not None and folder.name == compiler.CUBIN_CACHE
    assert "autotranspose" in folder.parts
    monkeypatch.setenv("PYCUDA_DISABLE_CACHE", "1")
    assert compiler.cubin_cache_dir() is None


_COMPILE = textwrap.dedent("""
    import hashlib, sys, time
    from autotranspose.runtime import compiler
    source, go = sys.argv[1], float(sys.argv[2])
    time.sleep(max(0.0, go - time.time()))  # all start together
    data = compiler.nvcc_cubin(source, "sm_90")
    print(hashlib.sha256(data).hexdigest(), compiler._whole_elf(data))
""")


@pytest.mark.gpu
def test_processes_compiling_one_kernel_at_once_each_get_a_whole_cubin(tmp_path):
    """Eight processes compile the same new source at once into one cache: each gets a whole
    cubin; the cache holds one whole file, one of theirs, and no temporary one; a ninth
    process gets that file's bytes (nvcc's cubins differ from run to run, so a compile
    instead of the cache's file would show)."""
    import time

    pytest.importorskip("pycuda.compiler")
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": path}
    env.pop("PYCUDA_DISABLE_CACHE", None)
    source = (
        'extern "C" __global__ void at_cache_probe(float* p) { p[threadIdx.x] += 1.f; }'
        f" // {uuid.uuid4()}\n"
    )
    go = time.time() + 3.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _COMPILE, source, str(go)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    got = {o.split()[0] for o, _ in outs}
    assert all(o.split()[1] == "True" for o, _ in outs), outs
    files = list((tmp_path / "autotranspose" / compiler.CUBIN_CACHE).iterdir())
    assert [f.suffix for f in files] == [".cubin"], files
    cached = hashlib.sha256(files[0].read_bytes()).hexdigest()
    assert compiler._whole_elf(files[0].read_bytes()) and cached in got
    ninth = subprocess.run(
        [sys.executable, "-c", _COMPILE, source, "0"], env=env, capture_output=True, text=True
    )
    assert ninth.returncode == 0 and ninth.stdout.split()[0] == cached, ninth.stderr


def _box_specs() -> list:
    """Three box kernels of one permute (two packed boxes and a vector box), made on the CPU."""
    from autotranspose.kernels.packed import packed_args
    from autotranspose.kernels.vbox import vbox_spec
    from autotranspose.plans.permute import plan_permute

    dims = plan_permute((8, 1080, 1920, 3), (0, 3, 1, 2), 1).dims
    return [
        packed_args(1, dims, (1, 3, 512)).kernel,
        packed_args(1, dims, (1, 3, 2048)).kernel,
        vbox_spec(1, dims, (1, 3, 4096), (16, 16), scatter=16)[0],
    ]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs to compile in parallel")
def test_a_races_box_kernels_compile_at_once(monkeypatch, tmp_path):
    """`precompile_specs` (a first call's race of boxes, an in-place program's passes) runs
    one nvcc a spec not yet loaded, at the same time: each call here waits at a barrier for
    the others, so run one after another they would time out. Each compiles exactly the text
    the kernel's own getter compiles (the cache's key)."""
    import threading
    from types import SimpleNamespace

    specs = _box_specs()
    loaded = specs[0]
    todo = specs[1:]
    barrier = threading.Barrier(len(todo), timeout=20)
    sources: list[str] = []

    def fake_nvcc(source: str, arch: str) -> bytes:
        sources.append(source)
        barrier.wait()  # BrokenBarrierError (caught as a failure the load reports) if serial
        return b""

    monkeypatch.setattr(compiler, "nvcc_cubin", fake_nvcc)
    monkeypatch.setattr(compiler, "cubin_cache_dir", lambda: tmp_path)
    monkeypatch.setitem(compiler._kernels, ("sm_90", loaded.name), object())
    compiler.precompile_specs(SimpleNamespace(arch="sm_90"), [*specs, specs[1]])
    assert not barrier.broken, "the nvcc calls ran one after another"
    assert sorted(sources) == sorted(compiler._spec_source(k) for k in todo)
    # one spec, or no disk cache to hand the cubins over: nothing to do ahead
    sources.clear()
    compiler.precompile_specs(SimpleNamespace(arch="sm_90"), todo[:1])
    monkeypatch.setattr(compiler, "cubin_cache_dir", lambda: None)
    compiler.precompile_specs(SimpleNamespace(arch="sm_90"), todo)
    assert sources == []

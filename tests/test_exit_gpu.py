"""Processes that use autotranspose exit cleanly: status 0 and nothing at all on stderr (no
traceback from a callback run during the interpreter's teardown, no crash), for JAX (eager
results exported through DLPack, jitted calls through the FFI handler), PyTorch, CuPy, pycuda
(its own context, destroyed at exit, and the primary one) and NumPy programs, with their
results still alive at exit: module globals, builtins (collected last of all), a reference
cycle. Each program skips (exit status 77) where its library or its GPU support is missing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent
SKIP = 77

PRELUDE = """
import builtins, importlib.util, sys
import numpy as np

def need(name):
    if importlib.util.find_spec(name) is None:
        print(f"{name} is not installed")
        sys.exit(77)

class Cycle:  # results held in a reference cycle: freed by the last collections
    def __init__(self, *values):
        self.values, self.me = values, self
"""

JAX_GPU = """
need("jax")
import jax, jax.numpy as jnp
if not any(d.platform in ("gpu", "cuda") for d in jax.devices()):
    print("JAX sees no GPU")
    sys.exit(77)
"""

PROGRAMS = {
    "jax-eager": JAX_GPU
    + """
import autotranspose as at
x = jnp.asarray(np.random.default_rng().standard_normal((197, 7)), jnp.float32)
y = at.transpose(x)
z = at.permute(x.reshape(197, 7, 1), (2, 1, 0))
c = at.transpose(jnp.ones((7, 3), jnp.complex64), conjugate=True)
assert (np.asarray(y) == np.asarray(x).T).all() and z.shape == (1, 7, 197)
w = jax.jit(lambda a: a * 2)(y)  # JAX keeps using our export
builtins.kept = at.transpose(x)
Cycle(at.transpose(x))
""",
    "jax-jit": JAX_GPU
    + """
from autotranspose.frameworks import jax_ops
x = jnp.asarray(np.random.default_rng().standard_normal((3, 197, 7)), jnp.float32)
f = jax.jit(lambda a: jax_ops.permute(a, (2, 0, 1)))
y = f(x)
g = jax.jit(jax.vmap(jax.grad(lambda a: (jax_ops.transpose(a) ** 2).sum())))(x)
assert (np.asarray(y) == np.transpose(np.asarray(x), (2, 0, 1))).all()
builtins.kept = f(x)
Cycle(y, g)
""",
    "jax-eager-and-jit": JAX_GPU
    + """
import autotranspose as at
from autotranspose.frameworks import jax_ops
x = jnp.asarray(np.random.default_rng().standard_normal((197, 7)), jnp.float32)
exported = at.transpose(x)                              # our memory, held by JAX
jitted = jax.jit(lambda a: jax_ops.transpose(a))(x)     # XLA's memory, our kernel
both = jax.jit(lambda a, b: jax_ops.transpose(a) + b)(exported, x)
builtins.kept = (exported, jitted)
Cycle(exported, jitted, both)
""",
    "torch": """
need("torch")
import torch
if not torch.cuda.is_available():
    print("PyTorch sees no GPU")
    sys.exit(77)
import autotranspose as at
x = torch.randn(197, 7, device="cuda")
y = at.transpose(x)
z = at.permute(x.view(197, 7, 1), (2, 1, 0))
assert torch.equal(y, x.T) and torch.equal(z, x.view(197, 7, 1).permute(2, 1, 0))
builtins.kept = at.transpose(torch.randn(3, 5, 7, device="cuda", dtype=torch.bfloat16))
Cycle(y, z)
""",
    "cupy": """
need("cupy")
import cupy
try:
    cupy.cuda.runtime.getDeviceCount()
except Exception as e:
    print(f"CuPy sees no GPU: {e}")
    sys.exit(77)
import autotranspose as at
x = cupy.asarray(np.random.default_rng().standard_normal((197, 7)))
y = at.transpose(x)
z = at.permute(x.reshape(197, 7, 1), (2, 1, 0))
assert bool((y == x.T).all())
builtins.kept = at.transpose(x)
Cycle(y, z)
""",
    "pycuda-own-context": """
need("pycuda")
import pycuda.autoinit  # a context of its own, destroyed at exit
import pycuda.gpuarray as gpuarray
import autotranspose as at
host = np.random.default_rng().standard_normal((197, 7)).astype(np.float32)
x = gpuarray.to_gpu(host)
y = at.transpose(x)
z = at.permute(x.reshape(197, 7, 1), (2, 1, 0))
assert (y.get() == host.T).all()
builtins.kept = at.transpose(x)
Cycle(y, z)
""",
    "pycuda-primary": """
need("pycuda")
import pycuda.autoprimaryctx
import pycuda.gpuarray as gpuarray
import autotranspose as at
host = np.random.default_rng().standard_normal((3, 197, 7)).astype(np.float32)
x = gpuarray.to_gpu(host)
y = at.transpose(x)
assert (y.get() == np.swapaxes(host, 1, 2)).all()
builtins.kept = y
""",
    "numpy": """
import autotranspose as at
host = np.random.default_rng().standard_normal((197, 7)).astype(np.float32)
y = at.transpose(host)
z = at.permute(host.reshape(197, 7, 1), (2, 1, 0))
assert (y == host.T).all()
""",
    "everything": JAX_GPU
    + """
need("torch")
need("cupy")
import torch, cupy
import autotranspose as at
from autotranspose.frameworks import jax_ops
rng = np.random.default_rng()
jx = jnp.asarray(rng.standard_normal((197, 7)), jnp.float32)
results = {
    "jax": at.transpose(jx),
    "jit": jax.jit(lambda a: jax_ops.permute(a, (1, 0)))(jx),
    "torch": at.transpose(torch.randn(197, 7, device="cuda")) if torch.cuda.is_available() else None,
    "cupy": at.transpose(cupy.ones((197, 7))),
    "numpy": at.transpose(rng.standard_normal((5, 7))),
}
builtins.kept = dict(results)
Cycle(results)
""",
}


def _run(body: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    script = textwrap.dedent(PRELUDE) + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=540,
    )


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_exits_cleanly(name):
    run = _run(PROGRAMS[name])
    if run.returncode == SKIP:
        pytest.skip(run.stdout.strip())
    assert run.returncode == 0 and run.stderr == "", (
        f"{name}: exit status {run.returncode}\n--- stderr ---\n{run.stderr}\n--- stdout ---\n{run.stdout}"
    )

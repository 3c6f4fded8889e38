"""Time cast_transpose() under jax.jit against XLA's own fused clamp-convert-transpose.

Two ways: one jitted call at a time from Python (host dispatch included: what a small eager
JAX program pays), and one jitted call over a stack of 16 inputs (vmap: one launch of
ours, one fusion of XLA's; the GPU's throughput). GB/s are bytes read plus written.
    python3 dev/jax_cast_time.py [--shapes 4096x4096 4099x6007 ...]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import ml_dtypes  # noqa: F401

import autotranspose as at

OUT = {"e4m3": (jnp.float8_e4m3fn, 448.0), "e5m2": (jnp.float8_e5m2, 57344.0)}


def _time(f, x, calls: int) -> float:
    f(x).block_until_ready()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            y = f(x)
        y.block_until_ready()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="+", default=["4096x4096", "8192x8192", "4099x6007"])
    p.add_argument("--pairs", nargs="+", default=["float32:e4m3", "bfloat16:e4m3", "float32:e5m2"])
    a = p.parse_args()
    print(jax.devices()[0].device_kind)
    for pair in a.pairs:
        src, dst = pair.split(":")
        dt, fmax = OUT[dst]
        for text in a.shapes:
            m, n = (int(v) for v in text.split("x"))
            x = jax.random.normal(jax.random.key(m * n), (m, n), jnp.float32).astype(src)
            nbytes = m * n * (jnp.dtype(src).itemsize + 1)
            ours = jax.jit(lambda v, dst=dst: at.cast_transpose(v, dst, scale=2.0))
            xla = jax.jit(
                lambda v, dt=dt, fmax=fmax: (
                    jnp.clip(v.astype(jnp.float32) * 2.0, -fmax, fmax).astype(dt).T
                )
            )
            row = [f"{src}->{dst} {text}"]
            for name, f in (("ours", ours), ("xla", xla)):
                t1 = _time(f, x, 50)
                stack = jnp.stack([x] * 16)
                fb = jax.jit(jax.vmap(f))
                tb = _time(fb, stack, 5) / 16
                row.append(
                    f"{name}: {t1 * 1e6:7.1f} us/call ({nbytes / t1 / 1e9:6.0f} GB/s), "
                    f"batched {tb * 1e6:7.1f} us ({nbytes / tb / 1e9:6.0f} GB/s)"
                )
            print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()

"""Sample devices, configs and results for the store and lookup tests, and the worker
processes of the concurrency tests (module level, so spawned processes can import them)."""

from __future__ import annotations

import functools
from typing import Any

import sqlalchemy as sa

from autotranspose.kernels.config import KernelConfig, config_space
from autotranspose.kernels.shapes import ShapeClass, shape_class
from autotranspose.runtime.device import DeviceInfo
from autotranspose.store import Store
from autotranspose.store.measurement import Measurement

H100 = DeviceInfo(
    "NVIDIA H100 80GB HBM3",
    (9, 0),
    multiprocessors=132,
    memory_clock_khz=2_619_000,
    bus_width_bits=5120,
    l2_bytes=52_428_800,
    driver_version=12040,
    cuda_version=12040,
)
A100 = DeviceInfo(
    "NVIDIA A100-SXM4-40GB",
    (8, 0),
    multiprocessors=108,
    memory_clock_khz=1_215_000,
    bus_width_bits=5120,
    l2_bytes=41_943_040,
    driver_version=12020,
    cuda_version=12020,
)


@functools.cache
def space(elem_bytes: int, max_vector: int = 16) -> tuple[KernelConfig, ...]:
    dtype = {1: "int8", 2: "float16", 4: "float32", 8: "float64", 16: "complex128"}[elem_bytes]
    return tuple(config_space(dtype, max_vector=max_vector))


def valid_config(elem_bytes: int = 4, vec: int = 4) -> KernelConfig:
    """Some valid config of exactly this vector width (whatever the config space holds)."""
    return next(c for c in space(elem_bytes) if c.vec == vec)


def random_config(rng: Any, elem_bytes: int, max_vector: int = 16) -> KernelConfig:
    configs = space(elem_bytes, max_vector)
    return configs[int(rng.integers(len(configs)))]


def sample_shape(rng: Any, vec: int = 4) -> tuple[tuple[int, int, int], ShapeClass]:
    """A random (batch, m, n) with rows and columns a multiple of `vec`, and its class."""
    b = int(rng.integers(1, 9))
    m = int(rng.integers(1, 600)) * vec
    n = int(rng.integers(1, 600)) * vec
    return (b, m, n), shape_class(b, m, n, vec)


def ok(gbps: float, copy_gbps: float = 3000.0) -> Measurement:
    return Measurement("ok", gbps, copy_gbps, time_us=12.5)


def count_queries(engine: sa.Engine) -> list[str]:
    """Every statement `engine` executes from now on (a list that grows)."""
    seen: list[str] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def _count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    return seen


# --- worker processes (module level: spawned processes import them from here) ---------------------
def write_results(url: str, seed: int, count: int, classes: int, start: Any, out: Any) -> None:
    """Record `count` random results over a few shared shape classes, report what was sent."""
    import time

    import numpy as np

    rng = np.random.default_rng(seed)
    shapes = [((1, 256 << i, 512), shape_class(1, 256 << i, 512, 4)) for i in range(classes)]
    sent = []
    with Store.open(url) as store:
        run_id = store.begin_run(H100, {"worker": seed})
        start.wait(60)  # a Barrier: all writers begin together
        for _ in range(count):
            shape, cls = shapes[int(rng.integers(len(shapes)))]
            config = random_config(rng, 4, 4)
            status = str(rng.choice(["ok", "ok", "ok", "wrong", "fail"]))
            gbps = float(rng.uniform(100, 3000))
            if status != "ok":
                gbps *= 10  # faster than anything correct: must never become best
            store.record(
                run_id,
                H100,
                "float32",
                4,
                shape,
                cls,
                config,
                Measurement(status, gbps, 3000.0, 10.0),
            )
            sent.append((str(cls), config.key, status, gbps))
            # A writer that never pauses keeps SQLite's write lock to itself (the others sleep
            # in the busy handler); the tuner pauses to measure, and so do we, to interleave.
            time.sleep(float(rng.uniform(0, 0.003)))
        store.finish_run(run_id, "done")
    out.put(sent)


def write_forever(url: str, progress: Any) -> None:
    """Record results until killed (the killed-writer test)."""
    import numpy as np

    rng = np.random.default_rng()
    shape, cls = (1, 1024, 1024), shape_class(1, 1024, 1024, 4)
    with Store.open(url) as store:
        run_id = store.begin_run(H100, {})
        i = 0
        while True:
            store.record(
                run_id,
                H100,
                "float32",
                4,
                shape,
                cls,
                random_config(rng, 4, 4),
                ok(float(rng.uniform(100, 3000))),
            )
            i += 1
            progress.value = i


# --- tuning files --------------------------------------------------------------------------------
def tuning_doc(rng: Any, count: int, device: DeviceInfo = H100, configs_per_kind: int = 4) -> dict:
    """A valid tuning document of `count` entries, each of its own (element size, class).

    Entries draw from a few configs per (element size, vector width), so that even tens of
    thousands of entries need few kernel versions (each one renders a kernel)."""
    from autotranspose.store import hooks, textio

    kinds = [(eb, v) for eb in (1, 2, 4, 8, 16) for v in (1, 2, 4, 8, 16) if eb * v <= 16]
    pools = {k: [random_config(rng, k[0], k[1]) for _ in range(configs_per_kind)] for k in kinds}
    seen: set[tuple[int, str]] = set()
    entries = []
    while len(entries) < count:
        eb, vec = kinds[int(rng.integers(len(kinds)))]
        exponents = rng.integers(0, 17, size=3)
        b, m, n = (1 << int(e) for e in exponents)
        cls = shape_class(b, m, n, vec)
        if (eb, str(cls)) in seen or int(exponents.sum()) + eb.bit_length() > 37:  # 64 GiB
            continue
        seen.add((eb, str(cls)))
        pool = pools[(eb, vec)]
        config = pool[int(rng.integers(len(pool)))]
        gbps, copy_gbps = float(rng.uniform(100, 3000)), float(rng.uniform(3000, 3300))
        entries.append(
            {
                "elem_bytes": eb,
                "shape_class": str(cls),
                "shape": [b, m, n],
                "config": config.to_dict(),
                "gbps": round(gbps, 3),
                "copy_gbps": round(copy_gbps, 3),
                "ratio": round(gbps / copy_gbps, 4),
                "dtype": f"uint{8 * eb}" if eb <= 8 else "complex128",
                "template_version": hooks.kernel_version(config),
                "measured_at": "2025-01-02T03:04:05.123456+00:00",
            }
        )
    return {"format": textio.FORMAT, "device": device.to_dict(), "entries": entries}


def import_file(url: str, path: str, writing: Any) -> None:
    """Import one tuning file, telling the parent when its first row is written (the kill
    test: a kill from then on lands inside the import's transaction)."""
    from autotranspose.store import textio

    tf = textio.load(path)
    with Store.open(url) as store:

        @sa.event.listens_for(store.engine, "before_cursor_execute")
        def _first_row(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if statement.lstrip().upper().startswith("INSERT"):
                writing.set()

        textio.import_into(store, tf)

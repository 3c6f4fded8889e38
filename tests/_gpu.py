"""GPU test helper: configs checked against the reference kernel (fresh random data, a
poisoned output and a guard region after it: `measure.Bench.check`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def reference_problems(
    state: Any, elem_bytes: int, shape: tuple[int, int, int], configs: Iterable[Any]
) -> list[tuple[Any, str | None]]:
    """(config, what differed or None) for each config launched on a contiguous `shape`."""
    from autotranspose.launch import contiguous_launch
    from autotranspose.measure import Bench

    bench = Bench(state, elem_bytes, shape)
    try:
        return [(cfg, bench.check(contiguous_launch(state, cfg, *shape))) for cfg in configs]
    finally:
        bench.close()


def assert_match_reference(
    state: Any, elem_bytes: int, shape: tuple[int, int, int], configs: Iterable[Any]
) -> None:
    for cfg, problem in reference_problems(state, elem_bytes, shape, configs):
        assert problem is None, f"{cfg.key} on {shape}: {problem}"

"""GPU test helper: configs checked against the reference kernel (fresh random data, a
poisoned output and a guard region after it: `measure.Bench.check`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def reference_problems(
    state: Any, elem_bytes: int, shape: tuple[int, int, int], configs: Iterable[Any]
) -> list[tuple[Any, str | None]]:
    """(config, what differed or None) for each config launched on a contiguous `shape`."""
    from autotranspose.runtime.launch import contiguous_launch
    from autotranspose.tuner.measure import Bench

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


def odd_shapes(rng: Any) -> list[tuple[int, int, int]]:
    """(batch, m, n) shapes whose rows start at odd offsets: odd sizes, 1xN, Nx1, thin,
    batched, tiny, one even side; fresh sizes each time."""
    odd = lambda lo, hi: int(rng.integers(lo, hi)) | 1  # noqa: E731
    return [
        (1, odd(1000, 5000), odd(1000, 5000)),
        (1, 1, odd(3000, 9000)),
        (1, odd(3000, 9000), 1),
        (3, odd(100, 700), odd(100, 700)),
        (1, 17, odd(2000, 4000)),
        (1, odd(2000, 4000), 15),
        (2, 5, 3),
        (1, odd(200, 400) + 1, odd(200, 400)),
    ]


def assert_views_at_every_offset(
    rng: Any,
    elem_bytes: int,
    dtype: Any,
    pick: Any,
    n_max: int | None = None,
    m_max: int | None = None,
) -> None:
    """transpose() with config `pick()` (a fresh pick per offset) from an input at every byte
    offset the element size allows (0-15) into an output at a random one, both rows of
    pitched views; the output's bytes around and between its rows stay as they were. With
    `n_max` (kernels for rows of at most that many elements, which must be contiguous), rows
    of 1 to `n_max` elements and an unpitched input; with `m_max` (kernels for at most that
    many rows, whose output rows must be contiguous), 4 bytes to `m_max` rows and an
    unpitched output."""
    import cupy
    import numpy as np

    import autotranspose as at

    s = elem_bytes
    for offset_in in range(0, 16, s):
        cfg = pick()
        offset_out = int(rng.integers(0, 16 // s)) * s
        m, n = int(rng.integers(300, 900)) | 1, int(rng.integers(300, 900)) | 1
        pin, pout = n + int(rng.integers(0, 9)), m + int(rng.integers(0, 9))  # row pitches
        if n_max is not None:
            m, n = int(rng.integers(2000, 9000)) | 1, int(rng.integers(1, n_max + 1))
            pin, pout = n, m + int(rng.integers(0, 9))
        if m_max is not None:
            m, n = int(rng.integers(-(-4 // s), m_max + 1)), int(rng.integers(2000, 9000)) | 1
            pin, pout = n + int(rng.integers(0, 9)), m
        host = rng.integers(0, 256, size=m * pin * s, dtype=np.uint8).view(dtype).reshape(m, pin)
        buf_in = cupy.zeros(m * pin * s + 32, np.uint8)
        buf_in[offset_in : offset_in + m * pin * s] = cupy.asarray(host.view(np.uint8).ravel())
        x = buf_in[offset_in : offset_in + m * pin * s].view(dtype).reshape(m, pin)[:, :n]
        fill = rng.integers(0, 256, size=n * pout * s + 64, dtype=np.uint8)
        buf_out = cupy.asarray(fill)
        out = buf_out[offset_out : offset_out + n * pout * s].view(dtype).reshape(n, pout)[:, :m]
        assert at.transpose(x, out, config=cfg) is out
        want = fill.copy()
        region = want[offset_out : offset_out + n * pout * s].view(dtype).reshape(n, pout)
        region[:, :m] = host[:, :n].T
        assert np.array_equal(cupy.asnumpy(buf_out), want), (cfg.key, offset_in, offset_out, m, n)


def assert_kind_matches_reference(rng: Any, elem_bytes: int, space: Any, default: Any) -> None:
    """One kernel kind on odd sizes, 1xN, Nx1 and batches (`odd_shapes`), fresh data, poisoned
    output and a guard region: 6 random non-persistent configs of `space(elem_bytes, limits)`,
    its `default` and the default on a persistent grid (where the kind has one)."""
    from autotranspose.runtime.compiler import activate, precompile

    state = activate(0)
    configs = [c for c in space(elem_bytes, state.info.limits) if not c.persistent]
    picks = [configs[i] for i in rng.choice(len(configs), 6, replace=False)]
    picks += [default] + ([] if default.kind == "direct" else [default.replace(persistent=2)])
    assert not precompile(state, picks)
    for shape in odd_shapes(rng):
        assert_match_reference(state, elem_bytes, shape, picks)


def assert_kind_at_every_offset(
    rng: Any, elem_bytes: int, dtype: Any, configs: list[Any], default: Any
) -> None:
    """`assert_views_at_every_offset` with, each time, a random config of `configs` or `default`
    (half and half)."""

    def pick():
        return configs[int(rng.integers(len(configs)))] if rng.random() < 0.5 else default

    assert_views_at_every_offset(rng, elem_bytes, dtype, pick)

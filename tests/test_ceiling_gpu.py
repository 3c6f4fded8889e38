"""`bench --ceiling` on a GPU: the pattern kernel of each kind's served launch compiles, runs
and is timed beside ours and the copy (a transpose of each kind, a permute's transpose pass
and box pass, a cast with and without its same-order output). Seconds in all."""

from __future__ import annotations

import pytest

from autotranspose.bench.runners import PATTERN, PATTERN_WIDE, bench_case, bench_permute_case
from autotranspose.dispatch import policy
from autotranspose.kernels import config as C

pytestmark = pytest.mark.gpu


def _regt(s: int, m: int, n: int):
    return policy.for_call(C.regt_default(s, m, n), m, n)


# (what, config, (batch, m, n), dtype): a served config of each kind on a call it takes
CASES = [
    ("tiled", lambda: C.default_config(4), (1, 1000, 1000), "float32"),
    ("tiled odd", lambda: C.default_config(1, max_vector=1), (2, 777, 555), "int8"),
    ("staged", lambda: C.staged_default(2), (1, 999, 1001), "float16"),
    ("prmt", lambda: C.prmt_default(1), (2, 777, 555), "int8"),
    ("prmt tall", lambda: C.tall_default(1, 7), (1, 20001, 7), "int8"),
    ("prmt wide", lambda: C.wide_default(2, 7), (1, 7, 20001), "float16"),
    ("flat", lambda: C.flat_default(8, 5), (1, 20001, 5), "float64"),
    ("direct", lambda: C.direct_default(8, 1000, 1000), (1, 1000, 1000), "float64"),
    ("direct narrow", lambda: C.narrow_default(4, 5, 3001), (1, 5, 3001), "float32"),
    ("regt", lambda: _regt(1, 9001, 3), (1, 9001, 3), "int8"),
    ("regt wide", lambda: _regt(1, 3, 9001), (1, 3, 9001), "int8"),
]


def _pattern(rows):
    (row,) = [r for r in rows if r.peer == PATTERN]
    return row


@pytest.mark.parametrize(("what", "config", "shape", "dtype"), CASES, ids=[c[0] for c in CASES])
def test_each_kinds_pattern_runs_and_is_timed(what, config, shape, dtype):
    cfg = config()
    assert cfg is not None and cfg.applies(shape[1], shape[2]), what
    rows = bench_case(shape, dtype, config=cfg, peers=("copy", "autotranspose"), repeats=3,
                      ceiling=True)  # fmt: skip
    ours = next(r for r in rows if r.peer == "autotranspose")
    assert ours.gbps is not None and ours.gbps > 0, ours.note
    row = _pattern(rows)
    assert row.us is not None and row.us > 0 and row.of_copy > 0, row.note
    assert row.read_per_byte >= 1.0 and row.written_per_byte >= 1.0
    # words under 16 bytes: the pattern in 16-byte words too, the same sectors, a row of its own
    wide = [r for r in rows if r.peer == PATTERN_WIDE]
    assert len(wide) <= 1 and all(r.us is not None and r.us > 0 for r in wide), wide
    assert all(
        (r.read_per_byte, r.written_per_byte) == (row.read_per_byte, row.written_per_byte)
        for r in wide
    )


def test_the_served_transpose_has_its_pattern():
    """No config given: what transpose() serves (a first call measures), and its pattern."""
    rows = bench_case((1, 1537, 2049), "bfloat16", peers=("copy", "autotranspose"), repeats=3,
                      ceiling=True)  # fmt: skip
    row = _pattern(rows)
    assert row.us is not None and row.us > 0, row.note


@pytest.mark.parametrize(
    ("shape", "axes", "dtype"),
    [((64, 33, 97), (0, 2, 1), "float16"), ((5, 7, 33, 65), (1, 0, 3, 2), "int8"),
     ((6, 40, 50, 3), (3, 1, 2, 0), "float32")],
)  # fmt: skip
def test_a_permutes_passes_have_their_pattern(shape, axes, dtype):
    """A transpose pass and box passes (the plan's, or the alternative a first call picked)."""
    rows = bench_permute_case(shape, axes, dtype, peers=("copy", "autotranspose"), repeats=3,
                              ceiling=True)  # fmt: skip
    row = _pattern(rows)
    assert row.us is not None and row.us > 0 and row.of_copy > 0, row.note
    # box passes also run their runs in 16-byte words: the same sectors, a row of its own
    wide = [r for r in rows if r.peer == PATTERN_WIDE]
    assert len(wide) <= 1 and all(r.us is not None and r.us > 0 for r in wide), wide


@pytest.mark.parametrize("both", [False, True])
def test_a_casts_pattern_runs_with_and_without_the_same_order_output(both):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")
    from autotranspose.bench import cast as bench_cast

    case = bench_cast.CastCase((1537, 1025), "bfloat16", "float8_e4m3fn", both)
    x = torch.randn(case.shape, device="cuda").to(torch.bfloat16)
    row = bench_cast._pattern_row(torch, case, x, 3, 1.0)
    assert row.peer == PATTERN and row.us is not None and row.us > 0, row.note
    assert row.read_per_byte >= 1.0 and row.written_per_byte >= 1.0

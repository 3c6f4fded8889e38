"""transpose_()'s arguments, its kind's parameters and kernel specs, checked without a GPU:
bad input raises an autotranspose error naming the fix before anything touches x."""

from __future__ import annotations

import numpy as np
import pytest

import autotranspose as at
from autotranspose import errors
from autotranspose.kernels import inplace as inplace_kernels
from autotranspose.kernels.inplace import (
    PIECES,
    InplaceKernel,
    cols_line,
    cols_piece,
    render_inplace,
)
from autotranspose.kinds import inplace as kind
from autotranspose.kinds.inplace import InplaceParams, parse


def test_transpose_underscore_is_public():
    assert "transpose_" in at.__all__
    assert callable(at.transpose_)


@pytest.mark.parametrize(
    "x, error, match",
    [
        (np.zeros(10), errors.ShapeError, "dimension"),
        (np.zeros((2, 2, 2, 2)), errors.ShapeError, "reshape"),
        (np.zeros((8, 6), order="F"), errors.LayoutError, "C-contiguous"),
        (np.zeros((8, 8))[:, ::2], errors.LayoutError, "C-contiguous"),
        (np.zeros((4, 4), dtype="U4"), errors.UnsupportedDtypeError, "convert"),
    ],
)
def test_bad_arrays_are_refused_untouched(x, error, match):
    before = x.copy()
    with pytest.raises(error, match=match):
        at.transpose_(x)
    np.testing.assert_array_equal(x, before)


def test_read_only_numpy_is_refused():
    x = np.arange(12.0).reshape(3, 4)
    x.flags.writeable = False
    with pytest.raises(errors.LayoutError, match="read-only"):
        at.transpose_(x)


def test_conjugate_of_a_real_array_is_refused():
    x = np.ones((4, 6), np.float32)
    with pytest.raises(errors.UnsupportedDtypeError, match="complex64 or complex128"):
        at.transpose_(x, conjugate=True)
    assert (x == 1).all()


def test_jax_arrays_are_immutable():
    jnp = pytest.importorskip("jax.numpy")
    with pytest.raises(errors.InputTypeError, match=r"immutable.*transpose\(x\)"):
        at.transpose_(jnp.zeros((4, 6)))


def test_params_key_round_trips_and_is_stable():
    p = InplaceParams(tile=64, threads=512, unroll=8, lane_bytes=4, blocks_per_sm=16)
    assert p.key == "t64.th512.u8.lb4.b16"
    assert parse(p.key) == p
    assert parse(InplaceParams().key) == kind.DEFAULT


@pytest.mark.parametrize(
    "field, value",
    [("tile", 48), ("threads", 100), ("unroll", 3), ("lane_bytes", 2), ("blocks_per_sm", 0)],
)
def test_params_are_validated(field, value):
    with pytest.raises(errors.ConfigError, match=field):
        InplaceParams(**{field: value})


@pytest.mark.parametrize("key", ["", "t32", "t32.th256.u4.lb16", "x", None, "t33.th256.u4.lb16.b8"])
def test_bad_keys_are_refused(key):
    with pytest.raises(errors.ConfigError):
        parse(key)


def test_defaults_fit_and_differ_by_size():
    for e in (1, 2, 4, 8, 16):
        p = kind.default(e)
        assert p.fits(e) and p.per_lane(e) >= 1
    assert kind.default(1).tile == 64 and kind.default(16).tile == 32


def test_kernel_specs_are_checked():
    with pytest.raises(errors.ShapeError, match="8- or 16-byte"):
        InplaceKernel("swap", 4, conjugate=True)
    with pytest.raises(errors.ShapeError, match="smaller tile"):
        InplaceKernel("swap", 16, params=InplaceParams(tile=64))
    with pytest.raises(errors.ShapeError, match="piece"):
        InplaceKernel("rotate", 4)
    with pytest.raises(errors.ShapeError, match="sizes"):
        InplaceKernel("swap", 3)


@pytest.mark.parametrize(
    "m, n, e, piece",
    [
        (40, 5003, 2, "cols_lines"),  # few rows off 4-byte words: 16-byte lines
        (64, 301, 1, "cols_lines"),
        (65, 301, 1, "cols_slide"),  # taller: rows as they lie in 8-byte words, windows
        (5003, 16381, 1, "cols_slide"),
        (3001, 5003, 2, "cols_slide"),
        (5811, 16381, 1, "cols_slide"),  # 5811 rows of 40 bytes: the most 227 KiB holds
        (5812, 16381, 1, "cols_slide"),  # past them: bands of 24 bytes (32 a row)
        (7264, 16381, 1, "cols_slide"),  # the most rows of 32 bytes 227 KiB holds
        (7265, 16381, 1, "cols_slide"),  # past them: bands of 16 bytes (24 a row)
        (9685, 5003, 2, "cols_slide"),  # the most rows of 24 bytes 227 KiB holds
        (9686, 16381, 1, "cols_slide"),  # past them: bands of 8 bytes (16 a row)
        (14528, 5003, 2, "cols_slide"),  # the most rows of 16 bytes 227 KiB holds
        (14529, 16381, 1, "cols"),  # past them (the plan stages such columns)
        (5003, 16384, 1, "cols_rule"),  # rows of whole 16-byte words: compiled per rule
        (3001, 5000, 2, "cols_rule"),
        (8, 48, 1, "cols_rule"),
        (5003, 16388, 1, "cols_slide"),  # whole 4-byte words, not 16-byte ones
        (3001, 5002, 2, "cols_slide"),
        (7300, 16388, 1, "cols_slide"),  # 7300 rows of 32 bytes pass 227 KiB: 16-byte bands
        (14529, 16388, 1, "cols"),  # 14529 rows of 16 bytes pass it too
        (3001, 5002, 4, "cols"),  # 4-byte elements: not in COLS_SLIDE_WHOLE
        (3001, 5003, 4, "cols"),
        (3001, 5000, 4, "cols"),  # 4-byte elements: not in COLS_RULE
    ],
)
def test_cols_takes_the_measured_word(m, n, e, piece):
    assert cols_piece(cols_line(m, n, e, 227 << 10), n, e) == piece


def test_cols_slide_serves_only_when_on(monkeypatch):
    """With COLS_SLIDE on a rectangle's program may run "cols_slide" and (rows past what its
    8-byte words fit) "cols_words", so a config's source names both; off, only the second."""
    from autotranspose.kinds.inplace import RECTANGLE

    def source_pieces(e: int) -> set[str]:
        return {k.piece for k in inplace_kernels.program_kernels(e, False, kind.DEFAULT, RECTANGLE)}

    assert {"cols_slide", "cols_words"} <= source_pieces(1)
    assert "cols_slide" not in source_pieces(4)
    monkeypatch.setattr(inplace_kernels, "COLS_SLIDE", False)
    assert cols_piece(cols_line(5003, 16381, 1, 227 << 10), 16381, 1) == "cols_words"
    assert cols_piece(cols_line(65, 301, 2, 227 << 10), 301, 2) == "cols_words"
    assert "cols_slide" not in source_pieces(2) and "cols_words" in source_pieces(2)
    # rows of whole 4-byte words: no "cols_slide" either while it is off
    assert cols_piece(cols_line(5003, 16388, 1, 227 << 10), 16388, 1) == "cols"
    monkeypatch.setattr(inplace_kernels, "COLS_SLIDE", True)
    monkeypatch.setattr(inplace_kernels, "COLS_SLIDE_WHOLE", ())
    assert cols_piece(cols_line(5003, 16388, 1, 227 << 10), 16388, 1) == "cols"


def test_cols_slide_narrows_only_when_on(monkeypatch):
    """COLS_SLIDE_NARROW: grids whose 32-byte band rows (40 bytes of shared memory) pass the
    opt-in run "cols_slide" in bands of 24 bytes; off, "cols_words" or "cols" in bands of 32."""
    optin, sms = 227 << 10, 132
    for m, n, e, off in ((6007, 8191, 1, "cols_words"), (6100, 7000, 1, "cols")):
        line = cols_line(m, n, e, optin)
        assert cols_piece(line, n, e) == "cols_slide"
        assert inplace_kernels.cols_width(m, n, 1, e, optin, sms, line) * e == 24
        monkeypatch.setattr(inplace_kernels, "COLS_SLIDE_NARROW", ())
        line = cols_line(m, n, e, optin)
        assert cols_piece(line, n, e) == off
        assert inplace_kernels.cols_width(m, n, 1, e, optin, sms, line) * e == 32
        monkeypatch.undo()


def test_cols_rule_serves_only_its_element_sizes(monkeypatch):
    monkeypatch.setattr(inplace_kernels, "COLS_RULE", ())
    assert cols_piece(0, 16384, 1) == "cols"
    monkeypatch.setattr(inplace_kernels, "COLS_RULE", (1, 2, 4))
    assert cols_piece(0, 5000, 4) == "cols_rule"


def test_every_piece_renders_one_named_kernel():
    with pytest.raises(errors.ShapeError, match="cols_lines"):
        InplaceKernel("cols_lines", 4)
    with pytest.raises(errors.ShapeError, match="cols_words moves 1- or 2-byte"):
        InplaceKernel("cols_words", 8)
    with pytest.raises(errors.ShapeError, match="cols_slide moves 1- or 2-byte"):
        InplaceKernel("cols_slide", 4)
    with pytest.raises(errors.ShapeError, match="cols_cluster takes one of"):
        InplaceKernel("cols_cluster", 4)  # a cluster's blocks are part of its name
    with pytest.raises(errors.ShapeError, match="cols_cluster takes one of"):
        InplaceKernel("cols", 4, cluster=4)
    with pytest.raises(errors.ShapeError, match="swap_lines moves elements of 1 to 8 bytes"):
        InplaceKernel("swap_lines", 16)
    with pytest.raises(errors.ShapeError, match="cols_rule moves elements of 1 to 8 bytes"):
        InplaceKernel("cols_rule", 16)
    for piece in PIECES:
        for e in (1, 2, 4, 8, 16):
            narrow = ("cols_lines", "cols_words", "cols_slide")
            if (piece == "conj" and e < 8) or (piece in narrow and e >= 4):
                continue
            if piece in ("swap_lines", "cols_rule") and e == 16:
                continue
            k = InplaceKernel(piece, e, piece == "conj", cluster=2 * (piece == "cols_cluster"))
            src = render_inplace(k)
            assert src.count(f"{k.name}(") == 1 and "at_inplace_args" in src


def test_bench_cases_are_seeded_and_mixed():
    from autotranspose.bench.inplace import MAX_BYTES, MIN_BYTES, inplace_cases

    cases = inplace_cases(60, 7)
    assert cases == inplace_cases(60, 7) and cases != inplace_cases(60, 8)
    assert {c.kind for c in cases} == {"square", "odd", "prime", "gcd", "skinny", "batched"}
    assert {c.elem_bytes for c in cases} == {1, 2, 4, 8, 16}
    assert all(MIN_BYTES // 2 <= c.nbytes <= 2 * MAX_BYTES for c in cases)
    assert any(len(c.shape) == 3 for c in cases)
    sides = [c.shape[0] for c in inplace_cases(200, 11) if c.kind == "square"]
    assert any(s % 32 == 0 for s in sides) and any(s % 16 for s in sides)  # and odd ones


def test_bench_inplace_draws_its_own_cases(capsys):
    from autotranspose.cli import main

    assert main(["bench", "--inplace", "2", "--random", "3"]) != 0
    assert "--inplace N draws its own" in capsys.readouterr().err


def test_bench_report_names_each_pass_against_copy():
    from autotranspose.bench.inplace import InplaceCase, InplaceRow, _line, markdown

    case = InplaceCase("gcd", (120, 84), 4)
    passes = [
        {"kind": "shuffle", "us": 10.0, "MB": 0.08, "of_copy": 0.81},
        {"kind": "permute_pieces", "us": 12.0, "MB": 0.08, "of_copy": 0.66},
    ]
    row = InplaceRow(case, 30.0, 0.25, 0.9, passes)
    text = markdown([row], "GPU")
    assert "120x84 4B gcd" in text and "shuffle:81%" in text and "permute_pieces:66%" in text
    assert "25.0%" in text and "90.0%" in text and "median 25.0%" in text
    assert "WRONG" not in _line(row)

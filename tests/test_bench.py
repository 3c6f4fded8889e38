"""The bench's reporting (tables, JSON rows, chart) on synthetic rows: no GPU needed. The timing
itself runs only on the device (`autotranspose bench`)."""

from __future__ import annotations

import builtins
import json
import types
from collections import Counter
from dataclasses import asdict

import numpy as np
import pytest

from autotranspose.bench import command
from autotranspose.bench.cases import (
    PERMUTE_DIMS,
    RANDOM_BYTES,
    RANDOM_DTYPES,
    RANDOM_KINDS,
    draw_dtypes,
    dtype_pool,
    random_cases,
    random_permute_cases,
)
from autotranspose.bench.peers import (
    PEERS,
    PERMUTE_PEERS,
    _torch_wrapper,
    compile_peer,
    numpy_typestr,
    peer_mask,
    torch_wrapping,
)
from autotranspose.bench.reports import (
    format_summary,
    format_table,
    markdown_table,
    plot,
    rows_from_json,
    summarize,
)
from autotranspose.bench.runners import Row
from autotranspose.kernels.shapes import parse_shape
from autotranspose.plans import dtypes

SHAPES = [(1, 8192, 8192), (64, 1024, 1024), (1, 4099, 6007)]
DTYPES = ["int8", "float32"]


def synthetic_rows(rng: np.random.Generator) -> list[Row]:
    """Every peer on every case with random speeds; geam only for float32 2-D, seed 2-D only."""
    rows = []
    for shape in SHAPES:
        for dtype in DTYPES:
            copy = float(rng.uniform(2000, 3000))
            nbytes = 2 * int(np.prod(shape)) * np.dtype(dtype).itemsize
            for peer in PEERS:
                skipped = (peer == "geam" and (dtype != "float32" or shape[0] > 1)) or (
                    peer == "seed" and shape[0] > 1
                )
                if skipped:
                    rows.append(Row(shape, dtype, peer, None, None, None, "not for this case"))
                    continue
                gbps = copy if peer == "copy" else float(rng.uniform(50, 3000))
                rows.append(Row(shape, dtype, peer, nbytes / gbps / 1e3, gbps, gbps / copy))
    return rows


def _md_row(table: str, shape: str, dtype: str) -> list[str]:
    (line,) = [ln for ln in table.splitlines() if ln.startswith(f"| {shape} | {dtype} |")]
    return [c.strip() for c in line.strip("|").split("|")]


def test_markdown_table_reports_every_case_against_the_same_runs_copy(rng):
    rows = synthetic_rows(rng)
    table = markdown_table(rows)
    assert len(table.splitlines()) == 2 + len(SHAPES) * len(DTYPES)
    by = {(r.shape, r.dtype, r.peer): r for r in rows}
    for shape in SHAPES:
        for dtype in DTYPES:
            text = "x".join(map(str, shape if shape[0] > 1 else shape[1:]))
            cells = _md_row(table, text, dtype)
            ours = by[(shape, dtype, "autotranspose")]
            assert cells[2] == f"{by[(shape, dtype, 'copy')].gbps:.0f}"
            assert cells[4] == f"**{100 * ours.of_copy:.1f}**"
            geam = by[(shape, dtype, "geam")]
            if geam.of_copy:
                assert cells[5] == f"{100 * geam.of_copy:.1f}"
                assert cells[-2] == f"{ours.of_copy / geam.of_copy:.3f}x"
            else:
                assert cells[5] == "-" and cells[-2] == "-"
            others = [by[(shape, dtype, p)].of_copy for p in ("geam", "cupy", "torch", "seed")]
            best = max(o for o in others if o)
            assert cells[-1] == f"{ours.of_copy / best:.2f}x"


def test_markdown_rows_of_permutes_keep_their_axes(rng):
    """Two permutes of one shape and dtype by different axes are two rows, each naming its
    axes (a random-permute mix can draw both)."""
    rows = []
    for axes in [(0, 2, 1), (2, 1, 0)]:
        for peer in ("copy", "autotranspose", "torch"):
            gbps = float(rng.uniform(500, 3000))
            rows.append(Row((1, 64, 96), "float16", peer, 1.0, gbps, gbps / 3000, axes=axes))
    table = markdown_table(rows)
    for axes in [(0, 2, 1), (2, 1, 0)]:
        ours = next(r for r in rows if r.axes == axes and r.peer == "autotranspose")
        cells = _md_row(table, "1x64x96/" + ",".join(map(str, axes)), "float16")
        assert cells[4] == f"**{100 * ours.of_copy:.1f}**"
    assert len(table.splitlines()) == 4


def test_text_table_shows_skipped_peers_with_their_reason(rng):
    rows = synthetic_rows(rng)
    text = format_table(rows)
    assert len(text.splitlines()) == 1 + len(rows)
    skipped = [ln for ln in text.splitlines() if "not for this case" in ln]
    assert len(skipped) == sum(r.us is None for r in rows) and all(" - " in ln for ln in skipped)
    r = next(r for r in rows if r.peer == "torch")
    assert f"{100 * r.of_copy:6.1f}%" in text


def test_json_rows_round_trip(rng):
    rows = synthetic_rows(rng)
    doc = json.loads(json.dumps({"rows": [asdict(r) for r in rows]}))
    assert rows_from_json(doc) == rows


def test_chart_has_a_panel_per_shape(rng, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench.png"
    assert plot(synthetic_rows(rng), path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > height  # three panels side by side, not one bar per case in a strip


def test_chart_without_matplotlib_says_so(rng, tmp_path, monkeypatch):
    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    assert plot(synthetic_rows(rng), tmp_path / "x.png") is False
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("text", ["8192", "0x5", "2x3x4x5", "axb"])
def test_bad_shapes_are_rejected(text):
    with pytest.raises(ValueError):
        parse_shape(text)


# --- bench --random ------------------------------------------------------------------------------
def test_random_cases_follow_the_stated_distribution(rng):
    seed = int(rng.integers(0, 2**31))
    cases = random_cases(400, seed)
    assert cases == random_cases(400, seed), "a seed must give the same cases"
    assert cases != random_cases(400, seed + 1)
    lo, hi = RANDOM_BYTES
    sizes, kinds, odd = set(), set(), 0
    for (b, m, n), dtype in cases:
        s = np.dtype(dtype).itemsize
        sizes.add(s)
        assert dtype in RANDOM_DTYPES[s]
        assert min(b, m, n) >= 1
        nbytes = b * m * n * s
        assert lo * 0.7 <= nbytes <= hi * 1.3, ((b, m, n), dtype)  # sides rounded to 64
        kinds.add(
            "batched"
            if b > 1
            else "skinny"
            if min(m, n) <= 200
            else "square"
            if m == n
            else "rectangular"
        )
        odd += m % 2 == 1 or n % 2 == 1
    assert sizes == set(RANDOM_DTYPES)
    assert kinds == set(RANDOM_KINDS)
    assert 0.2 * len(cases) < odd < 0.9 * len(cases)


def test_summary_counts_what_each_peer_won(rng):
    rows, ours_all, faster, faster1, faster2 = [], [], {}, {}, {}
    for i in range(int(rng.integers(5, 30))):
        shape, dtype = (1, int(rng.integers(1, 9999)), i + 1), "float32"
        ours = float(rng.uniform(0.2, 1.0))
        ours_all.append(ours)
        rows.append(Row(shape, dtype, "copy", 1.0, 1.0, 1.0))
        rows.append(Row(shape, dtype, "autotranspose", 1.0, 1.0, ours))
        for peer in ("geam", "seed"):
            if rng.random() < 0.3:
                rows.append(Row(shape, dtype, peer, None, None, None, "skipped"))
                continue
            theirs = ours * float(rng.choice([0.9, 1.005, 1.015, 1.2]))
            rows.append(Row(shape, dtype, peer, 1.0, 1.0, theirs))
            faster[peer] = faster.get(peer, 0) + (theirs > ours)
            faster1[peer] = faster1.get(peer, 0) + (theirs > 1.01 * ours)
            faster2[peer] = faster2.get(peer, 0) + (theirs > 1.02 * ours)
    s = summarize(rows)
    assert s["measured"] == len(ours_all)
    assert s["median"] == pytest.approx(float(np.median(ours_all)))
    assert s["p10"] == pytest.approx(float(np.percentile(ours_all, 10)))
    assert s["min"] == pytest.approx(min(ours_all))
    for peer in ("geam", "seed"):
        assert s[f"{peer}_faster"] == faster.get(peer, 0)
        assert s[f"{peer}_faster_1pct"] == faster1.get(peer, 0)
        assert s[f"{peer}_faster_2pct"] == faster2.get(peer, 0)
    text = format_summary(s)
    assert f"median {100 * np.median(ours_all):.1f}" in text
    for peer in ("geam", "seed"):
        line = next(x for x in text.splitlines() if x.strip().startswith(f"{peer} faster"))
        assert line.endswith(
            f"more than 1% faster in {faster1.get(peer, 0)}, more than 2% in {faster2.get(peer, 0)}"
        ), line


# --- bench --random-permute ----------------------------------------------------------------------
def test_random_permute_cases_follow_the_stated_distribution(rng):
    seed = int(rng.integers(0, 2**31))
    cases = random_permute_cases(300, seed)
    assert cases == random_permute_cases(300, seed), "a seed must give the same cases"
    assert cases != random_permute_cases(300, seed + 1)
    lo, hi = RANDOM_BYTES
    sizes, dims, multiples = set(), set(), 0
    for shape, axes, dtype in cases:
        s = np.dtype(dtype).itemsize
        sizes.add(s)
        dims.add(len(shape))
        assert dtype in RANDOM_DTYPES[s]
        assert len(axes) == len(shape) and sorted(axes) == list(range(len(shape)))
        assert axes != tuple(range(len(shape))), "the identity is a copy, not a permute"
        assert min(shape) >= 1 and all(type(v) is int for v in (*shape, *axes))
        nbytes = int(np.prod(shape)) * s
        assert lo * 0.7 <= nbytes <= hi * 1.3, (shape, dtype)
        multiples += all(v % 8 == 0 for v in shape if v >= 8)
    assert sizes == set(RANDOM_DTYPES)
    assert dims == set(range(PERMUTE_DIMS[0], PERMUTE_DIMS[1] + 1))
    assert 0.3 * len(cases) < multiples < 0.95 * len(cases)


def _permute_rows(rng, n: int) -> tuple[list[Row], list[float]]:
    rows, ours_all = [], []
    for i in range(n):
        shape, axes = (2, 3 + i, 5), (2, 0, 1) if i % 2 else (1, 0, 2)
        ours = float(rng.uniform(0.5, 1.0))
        ours_all.append(ours)
        rows += [
            Row(shape, "float16", "copy", 1.0, 1.0, 1.0, "", axes),
            Row(shape, "float16", "autotranspose", 1.0, 1.0, ours, "", axes),
            Row(shape, "float16", "cutensor", 1.0, 1.0, ours * 1.2, "", axes),
            Row(shape, "float16", "cupy", None, None, None, "CuPy not installed", axes),
        ]
    return rows, ours_all


def test_permute_summary_counts_cutensor_and_names_the_case(rng):
    rows, ours = _permute_rows(rng, int(rng.integers(3, 12)))
    s = summarize(rows)
    assert s["measured"] == len(ours) and s["min"] == pytest.approx(min(ours))
    assert s["cutensor_cases"] == s["cutensor_faster"] == len(ours) and s["cupy_cases"] == 0
    text = format_summary(s)
    assert "cutensor faster in" in text
    assert s["worst"].split()[1].split("/")[1] in ("2,0,1", "1,0,2")
    table = format_table(rows)
    assert "2x3x5/1,0,2" in table and "CuPy not installed" in table
    doc = json.loads(json.dumps({"rows": [asdict(r) for r in rows]}))
    assert rows_from_json(doc) == rows


def test_run_from_args_permutes_each_case_and_summarizes(monkeypatch, capsys, rng):
    seen = []

    def fake_case(shape, axes, dtype, *, device, repeats, warm):
        seen.append((shape, axes, dtype, device))
        return [
            Row(shape, dtype, "copy", 1.0, 1.0, 1.0, "", axes),
            Row(shape, dtype, "autotranspose", 1.0, 1.0, 0.9, "", axes),
        ]

    monkeypatch.setattr(command, "bench_permute_case", fake_case)
    from autotranspose import cli

    rc = cli.run(["bench", "--random-permute", "3", "--seed", "5", "--device", "0"])
    assert rc == 0 and [c[:3] for c in seen] == random_permute_cases(3, 5)
    assert "median 90.0" in capsys.readouterr().out
    seen.clear()
    rc = cli.run(
        [
            "bench",
            "--shapes",
            "64x256x56x56",
            "8x4x2x2",
            "--axes",
            "0,2,3,1",
            "--dtypes",
            "float16,float32",
        ]
    )
    assert rc == 0 and len(seen) == 4
    assert seen[0] == ((64, 256, 56, 56), (0, 2, 3, 1), "float16", 0)


# --- how peers wrap the buffers ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("dtype", "typestr", "name"),
    [
        ("bool", "|b1", "bool"),
        ("bfloat16", "<i2", "bfloat16"),
        ("float16", "<f2", "float16"),
        ("int8", "|i1", "int8"),
        ("uint16", "<u2", "uint16"),
        ("float32", "<f4", "float32"),
        ("f8", "<f8", "float64"),
        ("complex128", "<c16", "complex128"),
    ],
)
def test_the_torch_peer_wraps_each_dtype_as_a_typestr_torch_reads(dtype, typestr, name):
    """torch.as_tensor reads the typestr through NumPy: NumPy's own where it has one (bool
    '|b1'), the same-size integer for bfloat16 (no NumPy type), then viewed as the type."""
    assert torch_wrapping(dtype) == (typestr, name)


@pytest.mark.parametrize("dtype", dtypes.SUPPORTED_NAMES)
def test_every_supported_dtype_wraps_at_its_own_element_size(dtype):
    typestr, name = torch_wrapping(dtype)
    assert np.dtype(typestr).itemsize == dtypes.element_type(dtype).size
    assert np.dtype(typestr).kind in "biufc" and name == dtypes.element_type(dtype).name


class _FakeTorch:
    """As much of torch as the peer's wrapper uses: as_tensor of a CAI object, and .view."""

    class dtype:  # as torch.dtype
        def __init__(self, name: str) -> None:
            self.name = name

    __version__ = "0.0-fake"

    def __init__(self, *names: str) -> None:
        for n in names:
            setattr(self, n, _FakeTorch.dtype(n))
        self.made: list[dict] = []

    def as_tensor(self, obj, device):
        cai = dict(obj.__cuda_array_interface__)
        self.made.append(cai)
        return types.SimpleNamespace(cai=cai, device=device, view=lambda t: (cai, t))


@pytest.mark.parametrize(
    ("dtype", "typestr"), [("bfloat16", "<i2"), ("bool", "|b1"), ("int16", "<i2")]
)
def test_the_torch_peer_hands_torch_the_buffer_and_views_it_as_the_dtype(rng, dtype, typestr):
    torch = _FakeTorch("bfloat16", "bool", "int16")
    wrap, why = _torch_wrapper(torch, dtype)
    assert wrap is not None and why == ""
    ptr = int(rng.integers(1, 1 << 40)) * 256
    shape = tuple(int(v) for v in rng.integers(1, 500, int(rng.integers(2, 5))))
    cai, viewed_as = wrap(ptr, shape)
    assert cai == {
        "shape": shape,
        "typestr": typestr,
        "data": (ptr, False),
        "strides": None,
        "version": 3,
    }
    assert viewed_as is getattr(torch, dtype)


def test_a_dtype_this_torch_lacks_is_a_note_not_a_failure():
    wrap, why = _torch_wrapper(_FakeTorch("float32"), "bfloat16")
    assert wrap is None and why == "PyTorch 0.0-fake has no bfloat16"


def test_no_numpy_type_for_bfloat16():
    assert numpy_typestr("bfloat16") is None
    assert numpy_typestr("bool") == "|b1" and numpy_typestr("complex64") == "<c8"


def test_peers_that_move_values_are_checked_on_valid_bools(rng):
    """Random bytes are not bools (PyTorch's copy_ of them failed the check): bool peers get
    bytes 0 or 1, the rest finite floats; the fill ANDs every 32-bit word with the mask."""
    from autotranspose.tuner.measure import Bench

    words = rng.integers(0, 1 << 32, size=4096, dtype=np.uint64).astype(np.uint32)
    filled = (words & np.uint32(peer_mask("bool"))).view(np.uint8)
    assert set(np.unique(filled)) == {0, 1}
    assert np.array_equal(filled.view(np.bool_).astype(np.uint8), filled)  # valid bools
    for dtype in ("int8", "float16", "bfloat16", "float32", "complex128"):
        assert peer_mask(dtype) == Bench.FINITE_MASK


# --- --dtypes with the random draws --------------------------------------------------------------
def test_random_cases_of_given_dtypes_draw_only_those(rng):
    seed = int(rng.integers(0, 2**31))
    chosen = ["int8", "float16", "bfloat16", "bool", "uint16"]
    for draw in (random_cases, random_permute_cases):
        cases = draw(400, seed, chosen)
        assert cases == draw(400, seed, chosen), "a seed must give the same cases"
        assert {c[-1] for c in cases} == set(chosen)
        sizes = Counter(np.dtype("int16" if c[-1] == "bfloat16" else c[-1]).itemsize for c in cases)
        assert set(sizes) == {1, 2} and 0.4 < sizes[1] / len(cases) < 0.6  # a size, then a type
        assert draw(50, seed, ["complex128"]) != draw(50, seed)


def test_the_draw_without_dtypes_is_the_stated_one(rng):
    """No --dtypes: every type of RANDOM_DTYPES, drawn as before the filter existed (a seed
    of an earlier run draws the same cases); naming them all in that order is the same."""
    seed = int(rng.integers(0, 2**31))
    every = [d for size in sorted(RANDOM_DTYPES) for d in RANDOM_DTYPES[size]]
    assert dtype_pool(None) is RANDOM_DTYPES
    assert dtype_pool(every) == RANDOM_DTYPES
    assert random_cases(60, seed, every) == random_cases(60, seed)
    assert random_permute_cases(60, seed, every) == random_permute_cases(60, seed)


def test_draw_dtypes_names_the_accepted_ones():
    assert draw_dtypes(["f2", "float16", "bfloat16", "?"]) == ("float16", "bfloat16", "bool")
    for bad in ("float128", "object", "nonsense", "(-1,)i4"):
        with pytest.raises(dtypes.UnsupportedDtypeError, match="accepted: bool, int8, uint8"):
            draw_dtypes([bad])


def _fake_random_run(monkeypatch) -> list:
    seen: list = []

    def fake_case(shape, dtype, *, device, repeats, warm=False):
        seen.append((shape, dtype, warm) if warm else (shape, dtype))
        return [
            Row(shape, dtype, "copy", 1.0, 1.0, 1.0),
            Row(shape, dtype, "autotranspose", 1.0, 1.0, 0.9),
        ]

    def fake_permute(shape, axes, dtype, *, device, repeats, warm=False):
        seen.append((shape, axes, dtype, warm) if warm else (shape, axes, dtype))
        return [
            Row(shape, dtype, "copy", 1.0, 1.0, 1.0, "", axes),
            Row(shape, dtype, "autotranspose", 1.0, 1.0, 0.9, "", axes),
        ]

    monkeypatch.setattr(command, "bench_case", fake_case)
    monkeypatch.setattr(command, "bench_permute_case", fake_permute)
    monkeypatch.setattr(command, "host_costs", lambda: {})
    return seen


def test_the_command_draws_only_the_dtypes_given(monkeypatch, capsys, tmp_path):
    from autotranspose import cli

    seen = _fake_random_run(monkeypatch)
    path = tmp_path / "r.json"
    rc = cli.run(
        [
            "bench",
            "--random",
            "12",
            "--seed",
            "3",
            "--dtypes",
            "int8",
            "bfloat16",
            "--json",
            str(path),
        ]
    )
    assert rc == 0 and seen == random_cases(12, 3, ["int8", "bfloat16"])
    assert {d for _, d in seen} <= {"int8", "bfloat16"}
    assert json.loads(path.read_text())["dtypes"] == ["int8", "bfloat16"]
    assert "dtypes int8 bfloat16" in capsys.readouterr().out
    seen.clear()
    rc = cli.run(["bench", "--random-permute", "5", "--seed", "3", "--dtypes", "uint16,bool"])
    assert rc == 0
    assert seen == random_permute_cases(5, 3, ["uint16", "bool"])
    seen.clear()
    assert cli.run(["bench", "--random", "4", "--seed", "3"]) == 0  # no --dtypes: every type
    assert seen == random_cases(4, 3)
    seen.clear()
    assert cli.run(["bench", "--shapes", "64x64"]) == 0  # --shapes alone: float32 as before
    assert seen == [((1, 64, 64), "float32")]


def test_an_unknown_dtype_for_a_draw_is_one_line_naming_the_accepted_ones(capsys):
    from autotranspose import cli

    for option in ("--random", "--random-permute", "--small"):
        rc = cli.run(["bench", option, "3", "--dtypes", "int8", "float128"])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1
        assert err.startswith("autotranspose: error: argument --dtypes: 'float128' is not")
        assert "accepted: " + ", ".join(dtypes.SUPPORTED_NAMES) in err


# --- the torch.compile peer of --random-permute ---------------------------------------------------
class _CompilingTorch(_FakeTorch):
    """_FakeTorch with torch.compile (recording what it compiled, then calling it) and
    dynamo's reset."""

    def __init__(self, *names: str, fails: Exception | None = None) -> None:
        super().__init__(*names)
        self.compiled: list[tuple] = []
        self.resets = 0
        self.fails = fails
        self._dynamo = types.SimpleNamespace(reset=self._reset)

    def _reset(self) -> None:
        self.resets += 1

    def compile(self, fn, **kwargs):
        if self.fails:
            raise self.fails
        calls: list[tuple] = []
        self.compiled.append((fn, kwargs, calls))
        return lambda *args: calls.append(args)


class _Tensor:
    """What the compiled function is handed: records permute and copy_."""

    def __init__(self) -> None:
        self.done: list[tuple] = []

    def permute(self, order):
        return ("permuted", order)

    def copy_(self, src):
        self.done.append(src)


@pytest.mark.parametrize(
    ("dtype", "as_dtype", "pairs"),
    [
        ("float16", "float16", False),
        ("bool", "bool", False),
        ("complex64", "float32", True),
        ("complex128", "float64", True),
    ],
)
def test_the_compile_peer_compiles_the_permute_once_per_case(rng, dtype, as_dtype, pairs):
    torch = _CompilingTorch("float16", "bool", "float32", "float64")
    shape, axes = (3, 5, 7, 2), (2, 0, 3, 1)
    run, note = compile_peer(torch, shape, axes, dtype)
    assert run is not None and torch.resets == 1 and len(torch.compiled) == 1
    fn, kwargs, calls = torch.compiled[0]
    assert kwargs == {"fullgraph": True, "dynamic": False}
    assert note.startswith("torch.compile(out.copy_(a.permute(axes)))")
    assert note.endswith(f"as {as_dtype} pairs") is pairs
    src, dst = (int(v) * 256 for v in rng.integers(1, 1 << 30, 2))
    run(src, dst, None)
    run(src, dst, None)
    (x_cai, x_as), (out_cai, _) = calls[0]
    assert len(calls) == 2 and calls[1] == calls[0]  # wrapped once per buffer pair
    assert len(torch.made) == 2  # two tensors made, once
    out_shape = tuple(shape[a] for a in axes)
    assert x_cai["shape"] == ((*shape, 2) if pairs else shape)
    assert out_cai["shape"] == ((*out_shape, 2) if pairs else out_shape)
    assert (x_cai["data"][0], out_cai["data"][0]) == (src, dst)
    assert x_as is getattr(torch, as_dtype)
    x, out = _Tensor(), _Tensor()
    fn(x, out)  # what was compiled: out.copy_(x.permute(order)), a pair's halves kept innermost
    assert out.done == [("permuted", (*axes, 4) if pairs else axes)]


def test_a_compile_peer_that_cannot_run_is_a_note():
    run, note = compile_peer(_FakeTorch("float16"), (4, 5, 6), (2, 1, 0), "float16")
    assert run is None and note == "PyTorch 0.0-fake has no torch.compile"
    torch = _CompilingTorch("float16")
    run, note = compile_peer(torch, (4, 5, 6), (2, 1, 0), "bfloat16")
    assert run is None and note == "PyTorch 0.0-fake has no bfloat16"
    torch = _CompilingTorch("float16", fails=RuntimeError("no backend"))
    run, note = compile_peer(torch, (4, 5, 6), (2, 1, 0), "float16")
    assert run is None and note == "torch.compile: RuntimeError: no backend"


def test_permute_rows_show_compile_and_cutensor_and_count_them(rng):
    rows, _ = _permute_rows(rng, 4)
    rows += [
        Row(r.shape, r.dtype, "compile", 1.0, 1.0, r.of_copy * 0.9, "", r.axes)
        for r in rows
        if r.peer == "autotranspose"
    ]
    s = summarize(rows)
    assert s["compile_cases"] == 4 and s["compile_faster"] == 0
    assert "compile faster in 0 of 4" in format_summary(s)
    head = markdown_table(rows).splitlines()[0]
    assert "cutensor % copy" in head and "compile % copy" in head and "cupy % copy" in head
    assert "geam" not in head and "seed" not in head  # peers a permute run does not have
    assert PERMUTE_PEERS[-1] == "compile"


@pytest.mark.parametrize("draw", ["--random", "--random-permute"])
def test_warm_times_every_case_on_the_same_buffers_and_says_so(monkeypatch, capsys, tmp_path, draw):
    from autotranspose import cli

    seen = _fake_random_run(monkeypatch)
    path = tmp_path / "w.json"
    rc = cli.run([
        "bench", draw, "5", "--seed", str(np.random.default_rng().integers(1 << 30)),
        "--warm", "--json", str(path),
    ])  # fmt: skip
    assert rc == 0 and len(seen) == 5 and all(case[-1] is True for case in seen)
    assert "L2-warm" in capsys.readouterr().out
    assert json.loads(path.read_text())["warm"] is True


@pytest.mark.parametrize("argv", [["--small", "3"], ["--cast", "3"]])
def test_warm_is_refused_where_calls_repeat_on_the_same_buffers_already(capsys, argv):
    from autotranspose import cli

    assert cli.run(["bench", *argv, "--warm"]) == 2
    assert "leave out --warm" in capsys.readouterr().err

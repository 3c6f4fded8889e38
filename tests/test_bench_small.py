"""`bench --small`: the cases it draws, the summary's arithmetic, its tables and the command
line, on the CPU; one GPU test runs it end to end."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict

import numpy as np
import pytest

from autotranspose import cli
from autotranspose.bench import small
from autotranspose.bench.cases import SMALL_BYTES, SMALL_DTYPES, SmallCase, small_cases
from autotranspose.bench.small import SmallRow
from autotranspose.plans.dtypes import SUPPORTED_NAMES, element_type


def _run(*argv: str) -> tuple[int, str, str]:
    import io

    out, err = io.StringIO(), io.StringIO()
    rc = cli.run(list(argv), stdout=out, stderr=err)
    return rc, out.getvalue(), err.getvalue()


# --- the draw ------------------------------------------------------------------------------------
def test_small_cases_follow_the_stated_distribution(rng):
    seed = int(rng.integers(0, 2**31))
    cases = small_cases(3000, seed)
    assert cases == small_cases(3000, seed), "a seed must give the same cases"
    assert cases != small_cases(3000, seed + 1)
    lo, hi = SMALL_BYTES
    ranks, ops = Counter(), Counter()
    for c in cases:
        nd = len(c.shape)
        ranks[nd] += 1
        ops[c.op] += 1
        assert lo <= c.nbytes <= hi, c
        assert c.nbytes == math.prod(c.shape) * element_type(c.dtype).size
        assert all(type(v) is int and v >= 2 for v in c.shape), c
        assert sorted(c.axes) == list(range(nd)) and all(type(a) is int for a in c.axes)
        assert c.axes != tuple(range(nd)), "the identity is a copy, not a permute"
        if c.op == "transpose":  # what autotranspose.transpose() takes: the last two swapped
            assert nd in (2, 3) and c.axes == (*range(nd - 2), nd - 1, nd - 2)
        else:
            assert c.op == "permute"
        assert c.out_shape == tuple(c.shape[a] for a in c.axes)
    assert set(ranks) == set(range(2, 7))
    assert ops["transpose"] > 0.1 * len(cases) and ops["permute"] > 0.5 * len(cases)
    sides = Counter(v for c in cases for v in c.shape)
    assert {3, 7, 14, 197} <= set(sides) and {2, 4, 8, 16, 32, 64} <= set(sides)
    odd = sum(n for v, n in sides.items() if v % 2)
    assert 0.15 < odd / sum(sides.values()) < 0.6  # odd sides and powers of two, mixed
    # total bytes log-uniform: each quarter of the log range holds about a quarter
    logs = np.log([c.nbytes for c in cases])
    quarters, _ = np.histogram(logs, bins=4, range=np.log(SMALL_BYTES))
    assert all(0.17 * len(cases) < n < 0.33 * len(cases) for n in quarters), quarters


def test_small_cases_draw_every_dtype_and_the_narrow_ones_at_least_as_often(rng):
    cases = small_cases(3000, int(rng.integers(0, 2**31)))
    counts = Counter(c.dtype for c in cases)
    assert set(counts) == set(SMALL_DTYPES)
    narrow = [n for d, n in counts.items() if element_type(d).size <= 2]
    wide = [n for d, n in counts.items() if element_type(d).size > 2]
    assert len(narrow) == 6 and len(wide) == 6
    assert min(narrow) >= max(wide), counts
    assert {
        "float16",
        "bfloat16",
        "int8",
        "uint8",
        "bool",
        "int16",
        "float32",
        "float64",
        "int32",
        "int64",
        "complex64",
        "complex128",
    } == set(counts)


def test_small_cases_of_given_dtypes_draw_only_those(rng):
    seed = int(rng.integers(0, 2**31))
    cases = small_cases(400, seed, ["bool", "bfloat16", "f4"])
    assert {c.dtype for c in cases} == {"bool", "bfloat16", "float32"}
    assert small_cases(400, seed, ["bool", "bfloat16", "f4"]) == cases
    from autotranspose.errors import UnsupportedDtypeError

    with pytest.raises(UnsupportedDtypeError, match="accepted: bool, int8"):
        small_cases(3, seed, ["float128"])


def test_case_text_and_bytes():
    c = SmallCase("permute", (8, 12, 197, 64), (0, 2, 1, 3), "bfloat16")
    assert c.text() == "permute 8x12x197x64/0,2,1,3" and c.nbytes == 8 * 12 * 197 * 64 * 2
    t = SmallCase("transpose", (4, 197, 768), (0, 2, 1), "float32")
    assert t.text() == "transpose 4x197x768" and t.out_shape == (4, 768, 197)


def test_host_data_holds_valid_values_of_each_type(rng):
    for name in SUPPORTED_NAMES:
        case = SmallCase("permute", (3, 5, 7), (2, 0, 1), name)
        a = small.host_data(case, [1, 2])
        assert a.shape == case.shape and a.flags.c_contiguous
        assert a.dtype == np.dtype("float32" if name == "bfloat16" else name)
        if a.dtype.kind in "fc":
            assert np.all(np.isfinite(a))
        assert np.array_equal(a, small.host_data(case, [1, 2]))


# --- the summary ---------------------------------------------------------------------------------
def _rows(speedups: dict[str, list[float | None]], ours_us: float = 10.0) -> list[SmallRow]:
    """Rows whose peer us is ours us times the given speedup (None: ours failed); forms
    alternate out, new."""
    rows = []
    for peer, values in speedups.items():
        for i, s in enumerate(values):
            form = small.FORMS[i % 2]
            if s is None:
                note = "ours: wrong result: 3 of 20 bytes differ"
                rows.append(
                    SmallRow(
                        i // 2, "permute", (4, 5), (1, 0), "int8", form, 20, peer, None, 7.0, note
                    )
                )
            else:
                rows.append(
                    SmallRow(
                        i // 2,
                        "permute",
                        (4, 5),
                        (1, 0),
                        "int8",
                        form,
                        20,
                        peer,
                        ours_us,
                        ours_us * s,
                    )
                )
    return rows


def test_summary_arithmetic_on_made_up_timings(rng):
    torch_sp = [float(v) for v in rng.choice([0.5, 0.97, 0.99, 1.0, 1.3, 2.0], size=12)]
    torch_sp[5] = 0.25  # the least, a new-form call
    cupy_sp = [1.5, 0.979, 0.98, None, 3.0, 1.0]
    rows = _rows({"torch": torch_sp, "cupy": cupy_sp})
    s = small.summarize_small(rows)
    assert s["cases"] == 6
    t = s["peers"]["torch"]
    assert t["measured"] == 12 and t["ours_failed"] == 0
    assert t["median"] == pytest.approx(float(np.median(torch_sp)))
    assert t["min"] == pytest.approx(0.25) and t["worst"].endswith(" int8 new")
    assert t["slower"] == sum(v < 1.0 for v in torch_sp)
    assert t["slower_2pct"] == sum(v < 0.98 for v in torch_sp)
    c = s["peers"]["cupy"]
    assert c["measured"] == 5 and c["ours_failed"] == 1
    assert c["median"] == pytest.approx(1.0) and c["min"] == pytest.approx(0.979)
    assert (c["slower"], c["slower_2pct"]) == (2, 1)  # 0.979, 0.98 under 1; 0.979 under 0.98
    for form, picked in (("out", torch_sp[0::2]), ("new", torch_sp[1::2])):
        f = s["forms"][f"torch/{form}"]
        assert f["measured"] == 6 and f["median"] == pytest.approx(float(np.median(picked)))
        assert f["slower"] == sum(v < 1.0 for v in picked)
    text = small.format_small_summary(s)
    assert f"median {np.median(torch_sp):.2f}x, min 0.25x" in text
    assert "ours failed (not timed) in 1" in text


def test_a_skipped_peer_is_a_note_in_the_summary():
    rows = _rows({"torch": [1.2, 0.9]})
    rows += [
        SmallRow(
            0,
            "permute",
            (4, 5),
            (1, 0),
            "bfloat16",
            f,
            20,
            "cupy",
            None,
            None,
            "CuPy has no bfloat16",
        )
        for f in small.FORMS
    ]
    s = small.summarize_small(rows)
    skipped = {"measured": 0, "ours_failed": 0, "skipped": "CuPy has no bfloat16"}
    assert s["peers"]["cupy"] == skipped
    assert "cupy: not measured (CuPy has no bfloat16)" in small.format_small_summary(s)


def test_tables_show_every_call_and_round_trip_through_json(rng):
    rows = _rows({"torch": [1.5, 0.5, 1.1, 0.9], "cupy": [2.0, None, 1.0, 1.0]})
    text = small.format_small_table(rows)
    lines = text.splitlines()
    assert len(lines) == 1 + 4  # a header, then one line per case and form
    assert "ours/torch" in lines[0] and "cupy us" in lines[0]
    assert "0.50x" in lines[2] and "cupy: ours: wrong result" in lines[2]
    md = small.markdown_small_table(rows, small.summarize_small(rows))
    assert md.splitlines()[0].startswith("| # | case | dtype | form | bytes | ours us (torch) |")
    assert "**0.50x**" in md and "1.50x" in md and "torch:" in md
    doc = json.loads(json.dumps({"rows": [{**asdict(r), "speedup": r.speedup} for r in rows]}))
    assert small.small_rows_from_json(doc) == rows


# --- one case's checks and timing, on NumPy stand-ins ---------------------------------------------
class _Memory:
    """NumPy arrays as device memory: an address per array, bytes read and poisoned by it."""

    def __init__(self) -> None:
        self.arrays: dict[int, np.ndarray] = {}

    def ptr(self, a: np.ndarray) -> int:
        self.arrays[a.__array_interface__["data"][0]] = a
        return a.__array_interface__["data"][0]

    def read(self, ptr: int, nbytes: int) -> np.ndarray:
        return self.arrays[ptr].view(np.uint8).ravel()[:nbytes].copy()

    def memset(self, ptr: int, value: int, nbytes: int) -> None:
        self.arrays[ptr].view(np.uint8).ravel()[:nbytes] = value


def _numpy_peer(mem: _Memory, name: str, case: SmallCase, data: np.ndarray, wrong: str = ""):
    """A peer on NumPy arrays: its own calls are np.transpose; ours is right unless `wrong`
    names a form ("out": leaves out's poison; "new": returns the input unpermuted; "raise")."""
    x = data.copy()
    out = np.empty(case.out_shape, x.dtype)

    def ours_out():
        if wrong == "raise":
            raise ValueError("not for this case")
        if wrong != "out":
            np.copyto(out, np.transpose(x, case.axes))

    def ours_new():
        if wrong == "raise":
            raise ValueError("not for this case")
        return x.copy() if wrong == "new" else np.ascontiguousarray(np.transpose(x, case.axes))

    calls = {
        ("ours", "out"): ours_out,
        ("ours", "new"): ours_new,
        ("peer", "out"): lambda: np.copyto(out, np.transpose(x, case.axes)),
        ("peer", "new"): lambda: np.ascontiguousarray(np.transpose(x, case.axes)),
    }
    return small._Peer(name, x, out, lambda: None, mem.ptr, calls)


@pytest.mark.parametrize("wrong", ["", "out", "new", "raise"])
def test_a_case_is_checked_before_it_is_timed(monkeypatch, wrong):
    from autotranspose.runtime import driver as _driver

    mem = _Memory()
    monkeypatch.setattr(small, "_device_bytes", mem.read)
    monkeypatch.setattr(_driver, "memset_d8", mem.memset)
    monkeypatch.setattr(
        small,
        "_torch_peer",
        lambda _, case, data, dev: _numpy_peer(mem, "torch", case, data, wrong),
    )
    monkeypatch.setattr(
        small, "_cupy_peer", lambda _, case, data, dev, shared: _numpy_peer(mem, "cupy", case, data)
    )
    case = SmallCase("permute", (3, 14, 7, 4), (2, 0, 3, 1), "float16")
    rows = small.time_small_case(
        0, case, {"torch": object(), "cupy": object()}, seed=[1, 0], calls=7, repeats=3, warmup=2
    )
    assert [(r.peer, r.form) for r in rows] == [
        ("torch", "out"),
        ("torch", "new"),
        ("cupy", "out"),
        ("cupy", "new"),
    ]
    for r in rows:
        assert r.peer_us is not None and r.peer_us > 0 and r.nbytes == case.nbytes
        broken = r.peer == "torch" and wrong in (r.form, "raise")
        assert (r.ours_us is None) is broken, r
        if broken and wrong == "raise":
            assert r.note == "ours: ValueError: not for this case"
        elif broken:
            assert r.note.startswith("ours: ")
            assert ("wrong result" if wrong == "out" else "ours returned ndarray") in r.note
        else:
            assert r.note == "" and r.ours_us > 0
    s = small.summarize_small(rows)
    assert s["peers"]["cupy"]["measured"] == 2 and s["peers"]["cupy"]["ours_failed"] == 0
    assert s["peers"]["torch"]["ours_failed"] == {"": 0, "out": 1, "new": 1, "raise": 2}[wrong]


def test_a_missing_library_or_type_is_a_skipped_peer(monkeypatch):
    mem = _Memory()
    monkeypatch.setattr(small, "_device_bytes", mem.read)
    monkeypatch.setattr(
        small,
        "_torch_peer",
        lambda torch, case, data, device: _numpy_peer(mem, "torch", case, data),
    )
    case = SmallCase("transpose", (6, 5), (1, 0), "bfloat16")
    rows = small.time_small_case(
        0, case, {"torch": object(), "cupy": object()}, calls=3, repeats=1, warmup=1
    )
    cupy_rows = [r for r in rows if r.peer == "cupy"]
    assert all(r.note == "CuPy has no bfloat16" and r.ours_us is None for r in cupy_rows)
    rows = small.time_small_case(
        0, case, {"torch": "PyTorch not importable", "cupy": "x"}, calls=3, repeats=1, warmup=1
    )
    assert {r.note for r in rows if r.peer == "torch"} == {"PyTorch not importable"}


# --- the command line ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--small", "0"], "argument --small: 0 must be at least 1"),
        (["--small", "x"], "argument --small: 'x' is not an integer"),
        (["--small", "3", "--random", "3"], "not both --random and --small"),
        (["--small", "3", "--random-permute", "3"], "not both --random-permute and --small"),
        (["--small", "3", "--shapes", "4x5x6", "--axes", "2,1,0"], "leave out --small"),
        (["--small", "3", "--png", "x.png"], "--small writes --json and --markdown"),
        (["--small", "3", "--dtypes", "float128"], "accepted: bool, int8, uint8"),
        (["--small", "3", "--dtypes", "object"], "argument --dtypes: "),
    ],
)
def test_small_refusals_are_one_line_before_any_gpu_work(argv, says):
    rc, out, err = _run("bench", *argv)
    assert rc == 2 and out == ""
    assert err.startswith("autotranspose: error: ") and err.count("\n") == 1 and says in err


def test_small_options_parse(rng):
    n, seed = int(rng.integers(1, 100)), int(rng.integers(0, 2**31))
    args = cli.build_parser().parse_args(["bench", "--small", str(n), "--seed", str(seed)])
    assert (args.small, args.seed, args.dtypes) == (n, seed, None)
    assert cli.build_parser().parse_args(["bench"]).small is None


def test_run_small_times_each_case_and_writes_the_files(monkeypatch, capsys, tmp_path, rng):
    """The command's path on the CPU: the device start and the timing are stand-ins that
    record what they were asked."""
    seen = []

    def fake_time(index, case, libs, *, device, seed, repeats):
        seen.append((index, case, device, repeats))
        return [
            SmallRow(
                index,
                case.op,
                case.shape,
                case.axes,
                case.dtype,
                form,
                case.nbytes,
                peer,
                10.0,
                10.0 * (1.1 if peer == "torch" else 0.9),
            )
            for peer in small.SMALL_PEERS
            for form in small.FORMS
        ]

    monkeypatch.setattr(small, "_start", lambda device: {"torch": object(), "cupy": object()})
    monkeypatch.setattr(small, "time_small_case", fake_time)
    seed = int(rng.integers(0, 2**31))
    js, md = tmp_path / "s.json", tmp_path / "s.md"
    rc, _, err = _run(
        "bench",
        "--small",
        "4",
        "--seed",
        str(seed),
        "--repeat",
        "3",
        "--dtypes",
        "int8,bfloat16",
        "--json",
        str(js),
        "--markdown",
        str(md),
    )
    assert rc == 0, err
    assert [c for _, c, _, _ in seen] == small_cases(4, seed, ["int8", "bfloat16"])
    assert all(r == 3 and d == 0 for _, _, d, r in seen)
    printed = capsys.readouterr().out  # the bench prints as it goes, on sys.stdout
    assert "4 small cases" in printed and "dtypes int8 bfloat16" in printed
    doc = json.loads(js.read_text())
    assert doc["small"] == 4 and doc["seed"] == seed and doc["dtypes"] == ["int8", "bfloat16"]
    s = doc["summary"]
    assert s["peers"]["torch"]["slower"] == 0 and s["peers"]["cupy"]["slower_2pct"] == 8
    assert s["peers"]["torch"]["median"] == pytest.approx(1.1)
    assert len(small.small_rows_from_json(doc)) == 16
    assert md.read_text().startswith("| # | case |")


@pytest.mark.gpu
def test_small_runs_end_to_end_on_the_gpu(tmp_path, capsys):
    js = tmp_path / "small.json"
    rc, _, err = _run(
        "bench",
        "--small",
        "3",
        "--seed",
        "11",
        "--json",
        str(js),
        "--markdown",
        str(tmp_path / "small.md"),
    )
    assert rc == 0, err
    doc = json.loads(js.read_text())
    s = doc["summary"]
    assert s["cases"] == 3 and set(s) == {"cases", "peers", "forms"}
    assert set(s["peers"]) == set(small.SMALL_PEERS)
    for stats in s["peers"].values():
        if stats["measured"]:
            assert {"median", "min", "worst", "slower", "slower_2pct"} <= set(stats)
            assert stats["ours_failed"] == 0, doc["rows"]
        else:
            assert stats["skipped"]
    assert any(stats["measured"] for stats in s["peers"].values()), "no peer was timed"
    assert len(doc["rows"]) == 3 * len(small.SMALL_PEERS) * len(small.FORMS)
    assert "speedup median" in capsys.readouterr().out

"""`bench --ceiling`'s reports and command line (autotranspose/bench/reports.py, cast.py,
cli/bench.py): the pattern's row beside ours and copy, ours / pattern / copy and sectors per
byte in the text, Markdown and JSON, without a GPU."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest

from autotranspose.bench import cast as bench_cast
from autotranspose.bench.reports import (
    format_ceiling,
    format_summary,
    format_table,
    markdown_table,
    rows_from_json,
    summarize,
)
from autotranspose.bench.runners import PATTERN, Row


def ceiling_rows(rng, cases: int) -> list[Row]:
    """Random cases, 2-D and permutes: copy, ours, torch and the pattern (sectors per byte
    of at least 1), one case's pattern without a kernel."""
    rows = []
    for k in range(cases):
        nd = int(rng.integers(2, 5))
        shape = tuple(int(v) for v in rng.integers(2, 900, nd))
        axes = None if nd == 2 else tuple(int(a) for a in rng.permutation(nd))
        shape = (1, *shape) if axes is None else shape
        dtype = str(rng.choice(["int8", "float16", "float32"]))
        copy = float(rng.uniform(3000, 4000))
        for peer in ("copy", "autotranspose", "torch"):
            gbps = copy if peer == "copy" else float(rng.uniform(500, copy))
            rows.append(Row(shape, dtype, peer, 1e3 / gbps, gbps, gbps / copy, axes=axes))
        read, written = (float(v) for v in 1 + rng.uniform(0, 0.6, 2))
        if k == 1:
            rows.append(Row(shape, dtype, PATTERN, None, None, None, "box pass: no pattern kernel",
                            axes, None, None))  # fmt: skip
            continue
        gbps = float(rng.uniform(rows[-2].gbps, copy))
        rows.append(Row(shape, dtype, PATTERN, 1e3 / gbps, gbps, gbps / copy, "", axes, read, written))  # fmt: skip
    return rows


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


@pytest.mark.parametrize("seed", range(3))
def test_markdown_carries_ours_pattern_and_copy_per_case(seed):
    rng = np.random.default_rng(seed)
    rows = ceiling_rows(rng, int(rng.integers(3, 9)))
    table = markdown_table(rows).splitlines()
    head = _cells(table[0])
    assert head[-4:] == ["pattern % copy", "ours % pattern", "read sectors/B", "written sectors/B"]
    assert "pattern % copy" not in head[:-4]  # the pattern is no peer ours is compared with
    by = {(r.shape, r.axes, r.peer): r for r in rows}
    for line in table[2:]:
        cells = dict(zip(head, _cells(line), strict=True))
        key = next(k for k in by if k[2] == PATTERN and cells["shape"].startswith("x".join(map(str, k[0][1:] if k[1] is None else k[0]))))  # fmt: skip
        pat, ours = by[key], by[(key[0], key[1], "autotranspose")]
        if pat.of_copy is None:
            assert cells["pattern % copy"] == cells["ours % pattern"] == "-"
            assert cells["read sectors/B"] == "-"
            continue
        assert cells["pattern % copy"] == f"{100 * pat.of_copy:.1f}"
        assert cells["ours % pattern"] == f"{100 * ours.of_copy / pat.of_copy:.1f}"
        assert cells["read sectors/B"] == f"{pat.read_per_byte:.3f}"
        assert cells["written sectors/B"] == f"{pat.written_per_byte:.3f}"
        torch = by[(key[0], key[1], "torch")]
        assert cells["vs best other"] == f"{ours.of_copy / torch.of_copy:.2f}x"


def test_the_ceiling_table_and_summary_read_ours_against_the_pattern(rng):
    rows = ceiling_rows(rng, 6)
    text = format_ceiling(rows).splitlines()
    assert len(text) == 1 + 6 and "ours % pattern" in text[0]
    assert sum("box pass: no pattern kernel" in ln for ln in text) == 1
    summary = summarize(rows)
    pairs = [
        (o.of_copy, p.of_copy)
        for o in rows
        for p in rows
        if o.peer == "autotranspose" and p.peer == PATTERN and p.of_copy
        and (o.shape, o.axes, o.dtype) == (p.shape, p.axes, p.dtype)
    ]  # fmt: skip
    assert summary["pattern_cases"] == len(pairs) == 5
    assert summary["of_pattern_median"] == pytest.approx(np.median([o / p for o, p in pairs]))
    assert "pattern_faster" not in summary  # not counted as a peer
    assert "the access pattern alone" in format_summary(summary)
    table = format_table(rows)
    assert table.count("sectors/byte read") == 5


def test_rows_with_sectors_round_trip_through_json(rng):
    rows = ceiling_rows(rng, 4)
    doc = json.loads(json.dumps({"rows": [asdict(r) for r in rows]}))
    assert rows_from_json(doc) == rows
    old = {"rows": [{k: v for k, v in asdict(r).items() if "per_byte" not in k} for r in rows]}
    assert all(r.read_per_byte is None for r in rows_from_json(old))  # files from before


def test_cast_markdown_adds_the_pattern_columns(rng):
    case = bench_cast.CastCase((4097, 1025), "bfloat16", "float8_e4m3fn", True)
    rows = [
        bench_cast.CastRow(case, "autotranspose", 10.0, 2000.0, 0.6),
        bench_cast.CastRow(case, "torch.compile", 12.0, 1800.0, 0.5),
        bench_cast.CastRow(case, "eager", 30.0, 700.0, 0.2),
        bench_cast.CastRow(case, PATTERN, 8.0, 2500.0, 0.75, "", 1.031, 1.25),
    ]
    table = bench_cast.markdown(rows, "a GPU").splitlines()
    head, line = _cells(table[2]), _cells(table[4])
    assert head[-4:] == ["pattern % copy", "ours % pattern", "read sectors/B", "written sectors/B"]
    assert len(head) == len(line) == len(_cells(table[3]))
    assert line[-4:] == ["75.0", "80.0", "1.031", "1.250"]
    assert "80.0% of the" in table[-1]
    without = bench_cast.markdown(rows[:3], "a GPU").splitlines()
    assert "pattern % copy" not in without[2]


def test_ceiling_with_small_is_refused(capsys):
    from autotranspose import cli

    assert cli.run(["bench", "--small", "3", "--ceiling"]) == 2
    assert "leave out --ceiling" in capsys.readouterr().err


@pytest.mark.parametrize("draw", ["--random", "--random-permute"])
def test_the_command_asks_each_case_for_its_ceiling_and_prints_it(monkeypatch, capsys, tmp_path, draw):  # fmt: skip
    """--ceiling reaches every case's runner; the ceiling table, the summary's line and the
    JSON (its rows' sectors, "ceiling": true) follow. Without it the runners are not asked."""
    from autotranspose import cli
    from autotranspose.bench import command

    asked = []

    def fake(*case, device, repeats, warm, ceiling=False):
        asked.append(ceiling)
        shape, dtype = case[0], case[-1]
        axes = case[1] if len(case) == 3 else None
        rows = [Row(shape, dtype, "copy", 1.0, 3000.0, 1.0, "", axes),
                Row(shape, dtype, "autotranspose", 1.0, 2400.0, 0.8, "", axes)]  # fmt: skip
        if ceiling:
            rows.append(Row(shape, dtype, PATTERN, 1.0, 2700.0, 0.9, "", axes, 1.25, 1.125))
        return rows

    monkeypatch.setattr(command, "bench_case", fake)
    monkeypatch.setattr(command, "bench_permute_case", fake)
    monkeypatch.setattr(command, "host_costs", lambda: {})
    out = tmp_path / "run.json"
    assert cli.run(["bench", draw, "3", "--ceiling", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert asked == [True] * 3
    assert "the access pattern's ceiling" in text and "88.9" in text  # 0.8 / 0.9
    assert "the access pattern alone (--ceiling, 3 cases)" in text
    doc = json.loads(out.read_text())
    assert doc["ceiling"] is True
    assert [r["read_per_byte"] for r in doc["rows"] if r["peer"] == PATTERN] == [1.25] * 3
    asked.clear()
    assert cli.run(["bench", draw, "2"]) == 0
    assert asked == [False] * 2 and "access pattern" not in capsys.readouterr().out


def test_a_pattern_that_cannot_be_built_or_has_no_kernel_is_a_note():
    """The run goes on: a row with the reason, no time."""
    from autotranspose.bench.ceiling import Ceiling
    from autotranspose.bench.pattern import Traffic
    from autotranspose.bench.runners import ceiling_row

    def broken():
        raise ValueError("no access pattern for kernel kind 'new'")

    row = ceiling_row(None, broken, (1, 5, 7), "int8", 1.0, repeats=3, warm=False)
    assert row.peer == PATTERN and row.us is None
    assert row.note.startswith("no pattern: ValueError: no access pattern")
    none = Ceiling(None, Traffic(3, 4, 64, 64), "cast in two passes: no pattern kernel")
    row = ceiling_row(None, lambda: none, (1, 5, 7), "int8", 1.0, repeats=3, warm=False)
    assert row.us is None and row.note == none.note
    assert (row.read_per_byte, row.written_per_byte) == (1.5, 2.0)


def test_the_wide_pattern_is_a_row_of_its_own_and_a_column_of_the_table(rng):
    """A permute's wide pattern (box passes' runs in 16-byte words) is timed as a peer named
    PATTERN_WIDE: its row, and a column beside ours in the Markdown table."""
    from autotranspose.bench.ceiling import Ceiling
    from autotranspose.bench.pattern import Traffic
    from autotranspose.bench.reports import markdown_table
    from autotranspose.bench.runners import PATTERN_WIDE, Row, ceiling_row

    class Bench:  # times a run as every peer is timed: here a fixed half of the copy's time
        def time(self, run, repeats, warm):
            run()
            return 2.0

        def gbps(self, secs):
            return 1.0 / secs

    ran = []
    wide = Ceiling(
        lambda *a: ran.append(a), Traffic(64, 64, 64, 64), "packed runs in 16-byte words"
    )
    row = ceiling_row(Bench(), lambda: wide, (1, 6, 7), "bool", 1.0, repeats=3, warm=False, peer=PATTERN_WIDE)  # fmt: skip
    assert ran and row.peer == PATTERN_WIDE and row.of_copy == 0.5
    ours = Row((1, 6, 7), "bool", "autotranspose", 10.0, 100.0, float(rng.uniform(0.3, 0.9)), "")
    copy = Row((1, 6, 7), "bool", "copy", 5.0, 200.0, 1.0, "")
    table = markdown_table([copy, ours, row]).splitlines()
    head, line = _cells(table[0]), _cells(table[2])
    assert head[-1] == f"{PATTERN_WIDE} % copy" and line[-1] == "50.0"
    assert head.count(f"{PATTERN_WIDE} % copy") == 1  # a ceiling, not a peer column
    assert line[head.index("vs best other")] == "-"  # nor a peer ours is compared with
    from autotranspose.bench.reports import format_summary, summarize

    text = format_summary(summarize([copy, ours, row]))
    assert "16-byte words" in text and f"{PATTERN_WIDE} faster" not in text

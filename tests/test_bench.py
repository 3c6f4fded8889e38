"""The bench's reporting (tables, JSON rows, chart) on synthetic rows: no GPU needed. The timing
itself runs only on the device (`autotranspose bench`)."""

from __future__ import annotations

import builtins
import json
from dataclasses import asdict

import numpy as np
import pytest

from autotranspose import bench
from autotranspose.bench import Row

SHAPES = [(1, 8192, 8192), (64, 1024, 1024), (1, 4099, 6007)]
DTYPES = ["int8", "float32"]


def synthetic_rows(rng: np.random.Generator) -> list[Row]:
    """Every peer on every case with random speeds; geam only for float32 2-D, seed 2-D only."""
    rows = []
    for shape in SHAPES:
        for dtype in DTYPES:
            copy = float(rng.uniform(2000, 3000))
            nbytes = 2 * int(np.prod(shape)) * np.dtype(dtype).itemsize
            for peer in bench.PEERS:
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
    table = bench.markdown_table(rows)
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


def test_text_table_shows_skipped_peers_with_their_reason(rng):
    rows = synthetic_rows(rng)
    text = bench.format_table(rows)
    assert len(text.splitlines()) == 1 + len(rows)
    skipped = [ln for ln in text.splitlines() if "not for this case" in ln]
    assert len(skipped) == sum(r.us is None for r in rows) and all(" - " in ln for ln in skipped)
    r = next(r for r in rows if r.peer == "torch")
    assert f"{100 * r.of_copy:6.1f}%" in text


def test_json_rows_round_trip(rng):
    rows = synthetic_rows(rng)
    doc = json.loads(json.dumps({"rows": [asdict(r) for r in rows]}))
    assert bench.rows_from_json(doc) == rows


def test_chart_has_a_panel_per_shape(rng, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench.png"
    assert bench.plot(synthetic_rows(rng), path)
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
    assert bench.plot(synthetic_rows(rng), tmp_path / "x.png") is False
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("text", ["8192", "0x5", "2x3x4x5", "axb"])
def test_bad_shapes_are_rejected(text):
    with pytest.raises(ValueError):
        bench.parse_shape(text)

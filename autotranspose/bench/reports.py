"""What `autotranspose bench` prints and writes of its rows: the plain-text table, the
summary, the host-cost table, the Markdown table (BENCHMARKS.md), the JSON rows read back,
and the chart (matplotlib).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from .peers import HOST_COST_CASES, PEERS
from .runners import PATTERN, PATTERN_WIDE, Row

CEILINGS = (PATTERN, PATTERN_WIDE)  # the rows that are a call's ceilings, not its peers


def summarize(rows: Sequence[Row]) -> dict[str, Any]:
    """The random run's summary: autotranspose's median, 10th percentile and minimum share of
    copy, and per peer how often it was faster, more than 1% faster, and more than 2% faster
    (the margin a permute mix is judged by: no peer more than 2% faster on any call)."""
    cases: dict[tuple[Any, ...], dict[str, float]] = {}
    for r in rows:
        if r.of_copy:
            cases.setdefault((r.shape, r.dtype, r.axes), {})[r.peer] = r.of_copy
    ours = [c["autotranspose"] for c in cases.values() if "autotranspose" in c]
    out: dict[str, Any] = {"cases": len(cases), "measured": len(ours)}
    if ours:
        out.update(
            median=float(np.median(ours)), p10=float(np.percentile(ours, 10)), min=float(min(ours))
        )
        worst = min(cases.items(), key=lambda kv: kv[1].get("autotranspose", 9.0))
        (shape, dtype, axes), ratio = worst[0], worst[1]["autotranspose"]
        out["worst"] = f"{ratio * 100:.1f}% {_case_text(shape, axes)} {dtype}"
    ceiling = [(c["autotranspose"], c[PATTERN]) for c in cases.values() if PATTERN in c and "autotranspose" in c]  # fmt: skip
    if ceiling:  # `bench --ceiling`: how far the pattern is from copy, and ours from it
        out.update(
            pattern_cases=len(ceiling),
            pattern_median=float(np.median([p for _, p in ceiling])),
            of_pattern_median=float(np.median([o / p for o, p in ceiling])),
            of_pattern_p10=float(np.percentile([o / p for o, p in ceiling], 10)),
        )
    wide = [(c["autotranspose"], c[PATTERN_WIDE]) for c in cases.values() if PATTERN_WIDE in c and "autotranspose" in c]  # fmt: skip
    # the pattern in 16-byte words: the sectors' own ceiling where served words are narrower
    if wide:
        out.update(
            wide_cases=len(wide),
            wide_median=float(np.median([p for _, p in wide])),
            of_wide_median=float(np.median([o / p for o, p in wide])),
        )
    for peer in _peers(rows):
        if peer in ("copy", "autotranspose", *CEILINGS):
            continue
        both = [c for c in cases.values() if peer in c and "autotranspose" in c]
        out[f"{peer}_cases"] = len(both)
        out[f"{peer}_faster"] = sum(c[peer] > c["autotranspose"] for c in both)
        out[f"{peer}_faster_1pct"] = sum(c[peer] > 1.01 * c["autotranspose"] for c in both)
        out[f"{peer}_faster_2pct"] = sum(c[peer] > 1.02 * c["autotranspose"] for c in both)
    return out


def _peers(rows: Sequence[Row]) -> list[str]:
    """PEERS, then any other peer the rows name (permute's cuTENSOR), in order."""
    return [*PEERS, *(p for p in dict.fromkeys(r.peer for r in rows) if p not in PEERS)]


def format_summary(summary: dict[str, Any]) -> str:
    if not summary.get("measured"):
        return "no autotranspose measurement"
    lines = [
        f"autotranspose over {summary['measured']} cases, % of copy: median "
        f"{100 * summary['median']:.1f}, 10th percentile {100 * summary['p10']:.1f}, "
        f"min {100 * summary['min']:.1f} ({summary['worst']})"
    ]
    if summary.get("pattern_cases"):
        lines.append(
            f"  the access pattern alone (--ceiling, {summary['pattern_cases']} cases), % of copy: "
            f"median {100 * summary['pattern_median']:.1f}; ours % of the pattern: median "
            f"{100 * summary['of_pattern_median']:.1f}, 10th percentile "
            f"{100 * summary['of_pattern_p10']:.1f}"
        )
    if summary.get("wide_cases"):
        lines.append(
            f"  the pattern in 16-byte words ({PATTERN_WIDE}, {summary['wide_cases']} cases), "
            f"% of copy: median {100 * summary['wide_median']:.1f}; ours % of it: median "
            f"{100 * summary['of_wide_median']:.1f}"
        )
    peers = [k.removesuffix("_cases") for k in summary if k.endswith("_cases")]
    for peer in (p for p in peers if p not in ("pattern", "wide")):
        lines.append(
            f"  {peer:>8} faster in {summary[f'{peer}_faster']} of {summary[f'{peer}_cases']}"
            f" cases, more than 1% faster in {summary[f'{peer}_faster_1pct']}, more than 2%"
            f" in {summary.get(f'{peer}_faster_2pct', 0)}"
        )
    return "\n".join(lines)


def format_host_costs(costs: dict[str, float | None], shape: tuple[int, int] = (64, 64)) -> str:
    """The host-cost table: one line per (who, library), into out and into a new output."""
    lines = [
        f"host-timed {shape[0]}x{shape[1]} float32 call, us per call (best of 3 runs):",
        f"  {'':36} {'into out=':>10} {'new output':>11}",
    ]
    for who, lib in HOST_COST_CASES:
        label = (
            f"autotranspose.transpose({lib})"
            if who == "autotranspose"
            else {
                "cupy": "CuPy copyto / ascontiguousarray(a.T)",
                "torch": "PyTorch out.copy_(a.t()) / a.t().contiguous()",
            }.get(lib, lib)
        )
        vals = [costs.get(f"{who}/{lib}/{m}") for m in ("out", "new")]
        cells = ["-" if v is None else f"{v:.2f}" for v in vals]
        lines.append(f"  {label:36} {cells[0]:>10} {cells[1]:>11}")
    return "\n".join(lines)


def format_table(rows: Sequence[Row]) -> str:
    lines = [f"{'shape':>16} {'dtype':>10} {'peer':>13} {'us':>10} {'GB/s':>8} {'% copy':>7}  note"]
    for r in rows:
        shp = _case_text(r.shape, r.axes)
        if r.us is None:
            lines.append(
                f"{shp:>16} {r.dtype:>10} {r.peer:>13} {'-':>10} {'-':>8} {'-':>7}  {r.note}"
            )
        else:
            lines.append(
                f"{shp:>16} {r.dtype:>10} {r.peer:>13} {r.us:10.1f} {r.gbps:8.0f} "
                f"{100 * r.of_copy:6.1f}%  {_sectors(r)}{r.note}"
            )
    return "\n".join(lines)


def _sectors(r: Row) -> str:
    """A pattern row's sectors per byte, read and written ('' for other rows)."""
    if r.read_per_byte is None or r.written_per_byte is None:
        return ""
    return f"sectors/byte read {r.read_per_byte:.3f} written {r.written_per_byte:.3f}; "


def ceiling_cells(row: dict[str, Row]) -> dict[str, str]:
    """One case's ceiling figures (`bench --ceiling`), as text: ours and the pattern as % of
    copy, ours as % of the pattern, and the pattern's sectors per byte read and written."""
    ours, pat = row.get("autotranspose"), row.get(PATTERN)
    o = ours.of_copy if ours is not None else None
    p = pat.of_copy if pat is not None else None
    per = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    return {
        "ours % copy": "-" if o is None else f"{100 * o:.1f}",
        "pattern % copy": "-" if p is None else f"{100 * p:.1f}",
        "ours % pattern": "-" if o is None or p is None else f"{100 * o / p:.1f}",
        "read sectors/B": per(pat.read_per_byte if pat is not None else None),
        "written sectors/B": per(pat.written_per_byte if pat is not None else None),
    }


CEILING_COLUMNS = ("ours % copy", "pattern % copy", "ours % pattern", "read sectors/B", "written sectors/B")  # fmt: skip


def format_ceiling(rows: Sequence[Row]) -> str:
    """The ceiling table (`bench --ceiling`): per case ours / pattern / copy and the
    pattern's sectors per byte, and what the pattern differs in or why it has none."""
    cases = _by_case(rows)
    head = f"{'case':>24} {'dtype':>10} " + " ".join(f"{c:>17}" for c in CEILING_COLUMNS)
    lines = [head]
    for (shape, axes, dtype), row in cases.items():
        if PATTERN not in row:
            continue
        cells = ceiling_cells(row)
        note = row[PATTERN].note
        lines.append(
            f"{_case_text(shape, axes):>24} {dtype:>10} "
            + " ".join(f"{cells[c]:>17}" for c in CEILING_COLUMNS)
            + (f"  {note}" if note else "")
        )
    return "\n".join(lines)


def _by_case(rows: Sequence[Row]) -> dict[tuple[Any, ...], dict[str, Row]]:
    cells: dict[tuple[Any, ...], dict[str, Row]] = {}
    for r in rows:  # a permute case is its shape and its axes: one row each
        cells.setdefault((r.shape, r.axes, r.dtype), {})[r.peer] = r
    return cells


def _shape_text(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape if shape[0] > 1 else shape[1:]))


def _case_text(shape: Sequence[int], axes: Sequence[int] | None) -> str:
    """'8192x8192' for a transpose case, '64x256x56x56/0,2,3,1' for a permute case."""
    if axes is None:
        return _shape_text(shape)
    return "x".join(map(str, shape)) + "/" + ",".join(map(str, axes))


def markdown_table(rows: Sequence[Row]) -> str:
    """One Markdown row per (shape, dtype): copy and our GB/s, every peer as % of the same
    run's copy, and our speed over geam and over the best other peer (BENCHMARKS.md).
    The columns are the peers the rows name (a transpose run's PEERS, a permute run's
    cuTENSOR and compile too)."""
    named = {r.peer for r in rows}
    shown = [p for p in _peers(rows) if p not in ("copy", *CEILINGS) and p in named]
    wide = PATTERN_WIDE in named  # the pattern in 16-byte words: the last column
    cells = _by_case(rows)
    geam = "geam" in shown
    ceiling = PATTERN in named  # `bench --ceiling`: its columns last
    head = [
        "shape",
        "dtype",
        "copy GB/s",
        "autotranspose GB/s",
        *(f"{p} % copy" for p in shown),
        *(["vs geam"] if geam else []),
        "vs best other",
        *(CEILING_COLUMNS[1:] if ceiling else ()),
        *([f"{PATTERN_WIDE} % copy"] if wide else []),
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (shape, axes, dtype), row in cells.items():
        pct = {p: r.of_copy for p, r in row.items() if p in shown and r.of_copy}
        ours = pct.get("autotranspose")
        others = [v for p, v in pct.items() if p != "autotranspose"]
        gbps = {p: f"{r.gbps:.0f}" if r.gbps else "-" for p, r in row.items()}
        cols = [
            _case_text(shape, axes),
            dtype,
            gbps.get("copy", "-"),
            gbps.get("autotranspose", "-"),
            *(
                ("**{:.1f}**" if p == "autotranspose" else "{:.1f}").format(100 * pct[p])
                if p in pct
                else "-"
                for p in shown
            ),
            *([f"{ours / pct['geam']:.3f}x" if ours and "geam" in pct else "-"] if geam else []),
            f"{ours / max(others):.2f}x" if ours and others else "-",
            *((ceiling_cells(row)[c] for c in CEILING_COLUMNS[1:]) if ceiling else ()),
            *([_wide_cell(row)] if wide else []),
        ]
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)


def _wide_cell(row: dict[str, Row]) -> str:
    r = row.get(PATTERN_WIDE)
    return f"{100 * r.of_copy:.1f}" if r is not None and r.of_copy else "-"


def rows_from_json(doc: Any) -> list[Row]:
    """The rows of a `bench --json` file."""
    return [
        Row(
            **{
                **r,
                "shape": tuple(r["shape"]),
                "axes": tuple(r["axes"]) if r.get("axes") is not None else None,
            }
        )
        for r in doc["rows"]
    ]


def plot(rows: Sequence[Row], path: str | Path) -> bool:
    """A bar chart of % of copy per case and peer; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    shapes = list(dict.fromkeys(r.shape for r in rows))
    peers = [p for p in PEERS if p != "copy" and any(r.peer == p and r.of_copy for r in rows)]
    of_copy = {(r.shape, r.dtype, r.peer): 100 * r.of_copy for r in rows if r.of_copy}
    cols = min(3, len(shapes))
    nrows = -(-len(shapes) // cols)
    fig, axes = plt.subplots(
        nrows, cols, figsize=(4.2 * cols, 3.0 * nrows), squeeze=False, sharey=True
    )
    width = 0.8 / max(len(peers), 1)
    for ax, shape in zip(axes.flat, shapes, strict=False):  # spare panels stay blank
        dtypes = list(dict.fromkeys(r.dtype for r in rows if r.shape == shape))
        x = np.arange(len(dtypes))
        for i, peer in enumerate(peers):
            vals = [of_copy.get((shape, d, peer), 0.0) for d in dtypes]
            ax.bar(x + i * width, vals, width, label=peer, color=f"C{i}")
        ax.axhline(100, color="k", lw=0.8)
        ax.set_title(_shape_text(shape), fontsize=9)
        ax.set_xticks(x + 0.4 - width / 2)
        ax.set_xticklabels(dtypes, fontsize=7, rotation=30)
        ax.tick_params(axis="y", labelsize=7)
    for ax in axes.flat[len(shapes) :]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("% of device-to-device copy", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(peers), fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_reports(args: Any, table: str, rows: Sequence[Any]) -> None:
    """Print a run's Markdown `table`, and write it (--markdown) and its rows (--json) where
    the command line asks."""
    print()
    print(table)
    if getattr(args, "markdown", None):
        Path(args.markdown).write_text(table + "\n")
    if getattr(args, "json", None):
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")

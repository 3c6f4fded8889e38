"""Developer tool: turn `autotranspose bench --json` output into the Markdown table of
BENCHMARKS.md (one row per shape and dtype, every peer as % of the same run's copy).

    python tools/bench_table.py bench.json > table.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PEERS = ("autotranspose", "geam", "cupy", "torch", "seed")


def _shape(s: list[int]) -> str:
    return "x".join(map(str, s if s[0] > 1 else s[1:]))


def table(doc: dict) -> str:
    cells: dict[tuple[str, str], dict[str, dict]] = {}
    for r in doc["rows"]:
        cells.setdefault((_shape(r["shape"]), r["dtype"]), {})[r["peer"]] = r
    head = ["shape", "dtype", "copy GB/s", "autotranspose GB/s", *(f"{p} % copy" for p in PEERS), "vs geam", "vs best other"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (shape, dtype), row in cells.items():
        pct = {p: row[p]["of_copy"] for p in PEERS if p in row and row[p].get("of_copy")}
        ours = pct.get("autotranspose")
        others = [v for p, v in pct.items() if p != "autotranspose"]
        vs_geam = f"{ours / pct['geam']:.3f}x" if ours and "geam" in pct else "-"
        vs_best = f"{ours / max(others):.2f}x" if ours and others else "-"
        cols = [
            shape, dtype, f"{row['copy']['gbps']:.0f}",
            f"{row['autotranspose']['gbps']:.0f}" if ours else "-",
            *(f"**{100 * pct[p]:.1f}**" if p == "autotranspose" and p in pct
              else f"{100 * pct[p]:.1f}" if p in pct else "-" for p in PEERS),
            vs_geam, vs_best,
        ]  # fmt: skip
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(json.loads(Path(sys.argv[1]).read_text())))

"""Developer tool: the Markdown table of BENCHMARKS.md from a saved `autotranspose bench --json`
file (a live run writes the same with `--markdown PATH`).

    python dev/bench_table.py bench.json > table.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from autotranspose.bench.reports import markdown_table, rows_from_json

if __name__ == "__main__":
    print(markdown_table(rows_from_json(json.loads(Path(sys.argv[1]).read_text()))))

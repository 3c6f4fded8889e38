#!/usr/bin/env bash
# One device call: the same bench cases served by an older tree (.old/, made with
# `git archive REV autotranspose templates tuning_db | tar -x -C .old`, carried) and by this
# one, interleaved twice, so a restructuring is shown to change no figure beyond noise.
#   source .whl/activate && bash dev/before_after.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
ARGS=${ARGS:---shapes 8192x8192 4099x6007 7081411x20 --dtypes int8 float16 float32 complex128 --repeat 5}
for round in 1 2; do
  for tree in old new; do
    if [ $tree = old ]; then root=$PWD/.old; else root=$PWD; fi
    (cd "$root" && AUTOTRANSPOSE_DB=/tmp/at-$tree.db PYTHONPATH="$root:/tmp/site" timeout 200 python3 -m autotranspose bench $ARGS \
      --json "$OUT/$tree.$round.json") > "$OUT/$tree.$round.txt" 2>&1
    echo "== $tree round $round: $(grep -c '' "$OUT/$tree.$round.txt") lines"
  done
done
# One line a case: autotranspose's % of copy from each tree and round, and the config it ran.
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
runs = {}
for tree in ("old", "new"):
    for rnd in (1, 2):
        f = out / f"{tree}.{rnd}.json"
        if f.exists():
            for r in json.loads(f.read_text())["rows"]:
                if r["peer"] == "autotranspose" and r["of_copy"]:
                    key = ("x".join(map(str, r["shape"])), r["dtype"])
                    runs.setdefault(key, {})[f"{tree}{rnd}"] = (100 * r["of_copy"], r["note"])
print(f"{'case':26s} {'old 1':>7s} {'new 1':>7s} {'old 2':>7s} {'new 2':>7s}  same config")
for (shape, dtype), v in runs.items():
    cells = [f"{v[k][0]:6.1f}%" if k in v else "      -" for k in ("old1", "new1", "old2", "new2")]
    same = len({n.split(" ")[0] for _, n in v.values()}) == 1
    print(f"{shape + ' ' + dtype:26s} {' '.join(cells)}  {same}")
PY

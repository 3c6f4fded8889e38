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

#!/usr/bin/env bash
# One device call for a permute change: the GPU tests of TESTS (dev/device_diag.sh's groups,
# run at once), then the permutes of CASES (dtype:shape:axes) through dev/permute_ab.py from an
# older tree (.old/, made with `git archive REV autotranspose templates tuning_db | tar -x -C
# .old`, carried) and from this one, one process per tree and round, old / new / old / new;
# logs in $OUT. Timed as a user meets them: first call on, shipped results, no database.
#   run: source .whl/activate && TESTS="shard=0/2 tests/test_permute_gpu.py|shard=1/2 tests/test_permute_gpu.py" \
#        CASES="uint8:57x43x84x730:2,0,3,1 uint8:8x1080x1920x3:0,3,1,2" bash dev/device_permute_ab.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONWARNINGS=ignore
here=$PWD
if [ -n "${TESTS:-}" ]; then
  TESTS="$TESTS" bash dev/device_diag.sh
fi
for round in 1 2; do
  for tree in old new; do
    root=$here; [ $tree = old ] && root=$here/.old
    log="$OUT/ab.$tree.$round.txt"
    (cd "$root" && AUTOTRANSPOSE_DB=/tmp/at-ab-$tree.db PYTHONPATH="$root:${PYTHONPATH:-}" \
      timeout "${AB_TIMEOUT:-150}" python3 "$here/dev/permute_ab.py" --peers ${PEERS:-copy autotranspose torch} \
      --json "$OUT/ab.$tree.$round.json" $CASES) > "$log" 2>&1
    echo "== $tree, round $round (rc $?)"
    grep -E "%|autotranspose|Error" "$log" | tail -40
  done
done

#!/usr/bin/env bash
# One device call: the GPU tests in concurrent groups (TESTS as in dev/device_diag.sh), then
# optional benches (BENCH: commands separated by ';', each run with its output in $OUT).
#   run: source .whl/activate && TESTS="tests/test_cast_gpu.py|shard=0/2 tests" BENCH="python3 -m autotranspose bench --cast 24 --seed 5" bash dev/device_session.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
PROFILE= SWEEP= bash dev/device_diag.sh
if [ -n "${BENCH:-}" ]; then
  IFS=';' read -ra cmds <<< "$BENCH"
  for i in "${!cmds[@]}"; do
    timeout ${BENCH_TIMEOUT:-150} bash -c "${cmds[$i]}" > "$OUT/bench.$i.txt" 2>&1
    echo "bench $i rc=$?: ${cmds[$i]}"
    tail -${BENCH_TAIL:-30} "$OUT/bench.$i.txt"
  done
fi

#!/usr/bin/env bash
# One device call after a change: every GPU test, then `bench --random` on a new seed
# and on an earlier one (host costs included), logs in $OUT.
#   run: source .whl/activate && SEEDS="31337 77123" bash dev/device_final.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
timeout ${TEST_TIMEOUT:-560} python3 -m pytest -m gpu -q --timeout=200 -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest.txt" | tail -15
echo "pytest rc=${PIPESTATUS[0]}"
for seed in ${SEEDS:-31337}; do
  timeout ${BENCH_TIMEOUT:-120} python3 -m autotranspose bench --random "${N:-40}" --seed "$seed" --repeat 5 \
    --json "$OUT/random-$seed.json" --markdown "$OUT/random-$seed.md" > "$OUT/random-$seed.txt" 2>&1
  echo "bench $seed rc=$?"
  grep -A4 "^autotranspose over" "$OUT/random-$seed.txt"
done
tail -7 "$OUT/random-${SEEDS%% *}.txt"

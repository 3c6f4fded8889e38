#!/usr/bin/env bash
# One device call: GPU tests, then `bench --random` (host costs included), logs in $OUT.
#   run: source .whl/activate && N=40 SEED=... bash dev/device_random.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout 200 python3 -m pytest -m gpu -q --timeout=150 -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest.txt" | tail -15
  echo "pytest rc=${PIPESTATUS[0]}"
fi
timeout ${BENCH_TIMEOUT:-360} python3 -m autotranspose bench --random "${N:-40}" --seed "${SEED:-1}" --repeat 5 \
  --json "$OUT/random.json" --markdown "$OUT/random.md" > "$OUT/random.txt" 2>&1
echo "bench rc=$?"
tail -30 "$OUT/random.txt"

#!/usr/bin/env bash
# One device call: GPU tests, the skinny shapes of the fixed list, then `bench --random`.
#   run: source .whl/activate && SEED=... bash dev/device_skinny.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout 240 python3 -m pytest -m gpu -q --timeout=200 -p no:cacheprovider ${TESTS:-tests} 2>&1 | tee "$OUT/pytest.txt" | tail -15
  echo "pytest rc=${PIPESTATUS[0]}"
fi
timeout 150 python3 -m autotranspose bench --shapes 7081411x20 20x7081411 1048576x32 32x1048576 \
  --dtypes int8 float16 float32 float64 complex128 --repeat 5 --json "$OUT/skinny.json" \
  --markdown "$OUT/skinny.md" > "$OUT/skinny.txt" 2>&1
echo "skinny rc=$?"
grep -A12 "^autotranspose over" "$OUT/skinny.txt" | head -8
timeout ${BENCH_TIMEOUT:-200} python3 -m autotranspose bench --random "${N:-40}" --seed "${SEED:-1}" --repeat 5 \
  --json "$OUT/random.json" --markdown "$OUT/random.md" > "$OUT/random.txt" 2>&1
echo "random rc=$?"
grep -A12 "^autotranspose over" "$OUT/random.txt"

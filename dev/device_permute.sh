#!/usr/bin/env bash
# One device call: every GPU test (or TESTS; SKIP_TESTS=1 for none: the suite takes about
# 450 s, so a call runs it alone), then permute()'s target shapes and a random permute mix
# against the peers (PERMUTE_N cases), and/or each case's passes and alternatives against
# what permute() serves (PACKED_SEEDS, dev/packed_check.py); logs in $OUT.
#   run: source .whl/activate && SEED=7 bash dev/device_permute.sh
#   run: source .whl/activate && SKIP_TESTS=1 PACKED_SEEDS="7 23" bash dev/device_permute.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout ${TEST_TIMEOUT:-560} python3 -m pytest -m gpu -q --timeout=200 -p no:cacheprovider ${TESTS:-tests} 2>&1 | tee "$OUT/pytest.txt" | tail -15
  echo "pytest rc=${PIPESTATUS[0]}"
fi
B="timeout ${BENCH_TIMEOUT:-120} python3 -m autotranspose bench --repeat 5"
$B --shapes 64x256x56x56 32x64x224x224 --axes 0,2,3,1 --dtypes float16,float32 > "$OUT/nchw.txt" 2>&1; echo "nchw rc=$?"
$B --shapes 64x56x56x256 32x224x224x64 --axes 0,3,1,2 --dtypes float16,float32 > "$OUT/nhwc.txt" 2>&1; echo "nhwc rc=$?"
$B --shapes 8x4096x32x128 --axes 0,2,1,3 --dtypes bfloat16 > "$OUT/heads.txt" 2>&1; echo "heads rc=$?"
tail -n 14 "$OUT/nchw.txt" "$OUT/nhwc.txt" "$OUT/heads.txt"
if [ -n "${PERMUTE_N:-}" ]; then
  timeout ${PERMUTE_TIMEOUT:-300} python3 -m autotranspose bench --repeat 5 --random-permute "$PERMUTE_N" --seed "${SEED:-7}" --markdown "$OUT/permute.md" > "$OUT/permute.txt" 2>&1; echo "permute rc=$?"
  grep -A6 "over" "$OUT/permute.txt" | tail -8
fi
if [ -n "${PACKED_SEEDS:-}" ]; then
  timeout ${PACKED_TIMEOUT:-300} python3 dev/packed_check.py --seeds $PACKED_SEEDS --count "${PACKED_N:-40}" --budget $(( ${PACKED_TIMEOUT:-300} - 60 )) \
    --json "$OUT/packed.json" > "$OUT/packed.txt" 2>&1; echo "packed_check rc=$?"
  tail -4 "$OUT/packed.txt"
fi

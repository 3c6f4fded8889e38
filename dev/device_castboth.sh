#!/usr/bin/env bash
# One device call for the cast `both` store and the given-output fast path: the cast GPU
# tests, old vs new kernels (dev/cast_check.py, each against its own copy), host cost.
#   OLD=path/to/old/checkout bash dev/device_castboth.sh   (logs in $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
CASES=""
for p in bf16_e4m3 f16_e5m2 f32_e4m3; do
  for s in 8192x8192 4099x6007 2736x12288 16384x4096 3000x7001; do
    CASES="$CASES,$p:$s,$p:$s:both"
  done
done
CASES=${CASES#,}
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/checks.txt"
for tree in new old; do
  dir=$PWD; [ "$tree" = old ] && dir=$OLD
  echo "== $tree ($dir)" >> "$OUT/checks.txt"
  v=default; t=60; [ "$tree" = new ] && v=default,b0 && t=110
  PYTHONPATH=$dir:/tmp/site timeout $t python3 dev/cast_check.py --cases "$CASES" --variants $v --reps 10 >> "$OUT/checks.txt" 2>&1
  echo "rc=$?" >> "$OUT/checks.txt"
done
for tree in old new; do
  dir=$PWD; [ "$tree" = old ] && dir=$OLD
  echo "== host $tree" >> "$OUT/checks.txt"
  PYTHONPATH=$dir:/tmp/site timeout 15 python3 dev/cast_host.py >> "$OUT/checks.txt" 2>&1
done
timeout ${TEST_TIMEOUT:-80} python3 -m pytest -m gpu tests/test_cast_gpu.py -q -x --tb=short -p no:cacheprovider > "$OUT/tests.txt" 2>&1
echo "tests rc=$?" >> "$OUT/tests.txt"
tail -30 "$OUT/tests.txt"
cat "$OUT/checks.txt"

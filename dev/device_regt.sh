#!/usr/bin/env bash
# One device call for the register transposes (docs/perf-notes.md, "Register transposes"): their
# GPU tests and the tests whose serving they changed, then dev/regt_check.py (what the earlier
# code serves, from the repository one level up, then this code's timings), then Nsight Compute
# on PROFILE (dev/profile_kernels.py syntax). Run from a copy of this tree inside the earlier
# checkout:
#   source .whl/activate && cd .dev-regt && bash dev/device_regt.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
HERE=$PWD
EARLIER=$(cd .. && pwd)
CASES=${CASES:-"int8:5x20000003 int8:20000003x5 int8:3x33554431 uint8:12x8000001 bool:7x9999991 float16:3x16777216 float16:16777216x3 bfloat16:8x6000007 int8:16x4000000 int8:64x5x300001 int8:5x20000003@3,7 int8:20000003x5@5,9 float16:3x16777216@2,6 uint8:12x8000001@0,5"}
export PYTHONPATH="/tmp/site:$HERE"
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout ${TEST_TIMEOUT:-200} python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_regt.py > "$OUT/pytest_regt.txt" 2>&1 &
  p1=$!
  timeout ${TEST_TIMEOUT:-200} python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_direct.py tests/test_flat.py tests/test_tall.py -k "narrow or served or untuned or past or reference" > "$OUT/pytest_others.txt" 2>&1 &
  p2=$!
  wait $p1; echo "regt tests rc=$?: $(tail -1 "$OUT/pytest_regt.txt")"
  wait $p2; echo "other tests rc=$?: $(tail -1 "$OUT/pytest_others.txt")"
  grep -E "^(FAILED|ERROR)|Error" "$OUT/pytest_regt.txt" "$OUT/pytest_others.txt" | head -20
fi
# what the earlier code serves (its own package; a fresh database: shipped results, defaults and
# first calls only)
(cd "$EARLIER" && AUTOTRANSPOSE_DB=/tmp/at_earlier.db PYTHONPATH="/tmp/site:$EARLIER" \
  timeout ${TODAY_TIMEOUT:-150} python3 "$HERE/dev/regt_check.py" --served-json "$OUT/today.json" $CASES) \
  > "$OUT/today.txt" 2>&1; echo "today rc=$?"; tail -20 "$OUT/today.txt"
AUTOTRANSPOSE_DB=/tmp/at_now.db timeout ${CHECK_TIMEOUT:-200} python3 dev/regt_check.py \
  --today "$OUT/today.json" --out "$OUT" $CASES > "$OUT/check.txt" 2>&1; echo "check rc=$?"
cat "$OUT/check.txt" | cut -c1-600 | tail -40
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "${PROFILE:-}" ] && [ -n "$NCU" ]; then
  AUTOTRANSPOSE_DB=/tmp/at_now.db timeout ${NCU_TIMEOUT:-100} "$NCU" --clock-control none --profile-from-start off \
    --section SpeedOfLight --section Occupancy --section MemoryWorkloadAnalysis \
    --metrics lts__t_sectors_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum \
    python3 dev/profile_kernels.py $PROFILE > "$OUT/ncu.txt" 2>&1; echo "ncu rc=$?"
  grep -E '^case|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|L2 Cache Throughput|lts__t_|dram__bytes|smsp__inst_executed.sum|Theoretical Occupancy' "$OUT/ncu.txt" | cut -c1-200 | head -80
fi

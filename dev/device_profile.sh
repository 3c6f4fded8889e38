#!/usr/bin/env bash
# One device call: the GPU tests of TESTS, permute()'s head swap, then Nsight Compute on the
# kernels transpose() serves for CASES (dev/profile_kernels.py); logs in $OUT.
#   run: source .whl/activate && CASES="uint8:22785x22785" bash dev/device_profile.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
if [ -n "${TESTS:-}" ]; then
  timeout ${TEST_TIMEOUT:-200} python3 -m pytest -m gpu -q --timeout=150 -p no:cacheprovider $TESTS 2>&1 | tee "$OUT/pytest.txt" | tail -5
  echo "pytest rc=${PIPESTATUS[0]}"
fi
if [ -n "${HEADS:-1}" ]; then
  timeout 120 python3 -m autotranspose bench --repeat 5 --shapes 8x4096x32x128 --axes 0,2,1,3 --dtypes bfloat16,float32,int8 > "$OUT/heads.txt" 2>&1; echo "heads rc=$?"
  tail -n 8 "$OUT/heads.txt"
fi
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "${METRICS:-}" ] && [ -n "${CASES:-}" ] && [ -n "$NCU" ]; then
  # named counters only (e.g. shared-memory wavefronts, DRAM bytes read and written)
  timeout ${NCU_TIMEOUT:-300} "$NCU" --clock-control none --profile-from-start off --metrics "$METRICS" \
    python3 dev/profile_kernels.py $CASES > "$OUT/ncu_metrics.txt" 2>&1; echo "ncu metrics rc=$?"
  grep -E '^case|  autotranspose_|^    [a-z]' "$OUT/ncu_metrics.txt" | head -200
elif [ -n "${CASES:-}" ] && [ -n "$NCU" ]; then
  timeout ${NCU_TIMEOUT:-300} "$NCU" --clock-control none --profile-from-start off \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis --section InstructionStats \
    --section ComputeWorkloadAnalysis \
    python3 dev/profile_kernels.py $CASES > "$OUT/ncu.txt" 2>&1; echo "ncu rc=$?"
  grep -E '^case|at_[a-z0-9_]+|Memory Throughput|DRAM Throughput|Issue Slots Busy|Achieved Occupancy|Registers Per|Eligible Warps|Stall|No Eligible|Shared Memory|Block Limit' "$OUT/ncu.txt" | head -150
fi

#!/usr/bin/env bash
# One device call for diagnosis: the GPU tests of TESTS, then Nsight Compute on the cases of
# PROFILE (tools/profile_kernels.py syntax), then optional SWEEP (a command); logs in $OUT.
#   run: source .whl/activate && TESTS="tests/test_prmt.py" PROFILE="uint8:20x7081411" bash tools/device_diag.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
if [ -n "${TESTS:-}" ]; then
  timeout ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu -q -p no:cacheprovider $TESTS 2>&1 | tee "$OUT/pytest.txt" | tail -6
  echo "pytest rc=${PIPESTATUS[0]}"
fi
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "${PROFILE:-}" ] && [ -n "$NCU" ]; then
  timeout ${NCU_TIMEOUT:-150} "$NCU" --clock-control none --profile-from-start off \
    --section SpeedOfLight --section Occupancy --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section InstructionStats \
    --metrics lts__t_requests_srcunit_tex.sum,lts__t_sectors_srcunit_tex.sum,dram__bytes.sum,smsp__inst_executed.sum \
    python3 tools/profile_kernels.py $PROFILE > "$OUT/ncu.txt" 2>&1; echo "ncu rc=$?"
  grep -E '^case|at_[a-z0-9_]+|Duration|DRAM Throughput|Issue Slots Busy|Achieved Occupancy|Registers Per|L2 Cache Throughput|lts__t_|dram__bytes|smsp__inst_executed.sum' "$OUT/ncu.txt" | head -120
fi
if [ -n "${SWEEP:-}" ]; then
  timeout ${SWEEP_TIMEOUT:-200} bash -c "$SWEEP" > "$OUT/sweep.txt" 2>&1; echo "sweep rc=$?"
  grep -E '^===|%' "$OUT/sweep.txt" | head -80
fi

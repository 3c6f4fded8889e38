#!/usr/bin/env bash
# One device call for the byte-permute kernels: their GPU tests, dev/prmt_sweep.py (every
# non-persistent prmt config against what transpose() serves), then Nsight Compute on the
# configs of PROFILE (dev/profile_kernels.py cases); logs in $OUT.
#   run: source .whl/activate && bash dev/device_prmt.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
timeout ${TEST_TIMEOUT:-150} python3 -m pytest -m gpu -q -p no:cacheprovider ${TESTS:-tests/test_prmt.py} 2>&1 | tee "$OUT/pytest.txt" | tail -4
echo "pytest rc=${PIPESTATUS[0]}"
timeout ${SWEEP_TIMEOUT:-240} python3 dev/prmt_sweep.py --out "$OUT" --budget ${SWEEP_BUDGET:-200} > "$OUT/sweep.txt" 2>&1; echo "sweep rc=$?"
grep -vE '^\s*$' "$OUT/sweep.txt" | tail -n 60
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "${PROFILE:-}" ] && [ -n "$NCU" ]; then
  timeout ${NCU_TIMEOUT:-120} "$NCU" --clock-control none --profile-from-start off \
    --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section InstructionStats \
    python3 dev/profile_kernels.py $PROFILE > "$OUT/ncu.txt" 2>&1; echo "ncu rc=$?"
  grep -E '^case|at_[a-z0-9_]+|Duration|Memory Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit|Issue Slots Busy|Executed Ipc|Achieved Occupancy|Registers Per|No Eligible|Executed Instructions  |L1/TEX Cache Throughput|L2 Cache Throughput' "$OUT/ncu.txt" | head -60
fi

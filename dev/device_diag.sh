#!/usr/bin/env bash
# One device call for diagnosis: the GPU tests of TESTS (groups split by | run at once; a
# group "shard=k/N files" runs the k-th of N shards of them), then Nsight Compute on the cases of
# PROFILE (dev/profile_kernels.py syntax), then optional SWEEP (a command); logs in $OUT.
#   run: source .whl/activate && TESTS="tests/test_prmt.py" PROFILE="uint8:20x7081411" bash dev/device_diag.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
if [ -n "${TESTS:-}" ]; then
  # groups of test files separated by '|' run as concurrent pytest processes (the GPU tests
  # check results, not timings; nvcc is most of their time and the machine has 16 cores)
  IFS='|' read -ra groups <<< "$TESTS"
  pids=()
  for i in "${!groups[@]}"; do
    g=${groups[$i]}; shard=""
    if [[ $g == shard=* ]]; then shard=${g%% *}; shard=${shard#shard=}; g=${g#* }; fi  # "shard=k/N files"
    AUTOTRANSPOSE_TEST_SHARD=$shard timeout ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu -q -p no:cacheprovider $g > "$OUT/pytest.$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait ${pids[$i]}; rc=$?
    { echo "=== group $i: ${groups[$i]} (rc=$rc)"; cat "$OUT/pytest.$i.log"; } >> "$OUT/pytest.txt"
    rm -f "$OUT/pytest.$i.log"
    echo "pytest group $i rc=$rc: $(tail -1 "$OUT/pytest.txt")"
  done
fi
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "${PROFILE:-}" ] && [ -n "$NCU" ]; then
  timeout ${NCU_TIMEOUT:-150} "$NCU" --clock-control none --profile-from-start off \
    --section SpeedOfLight --section Occupancy --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section InstructionStats --section WarpStateStats \
    --metrics lts__t_requests_srcunit_tex.sum,lts__t_sectors_srcunit_tex.sum,dram__bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,smsp__inst_executed.sum \
    python3 dev/profile_kernels.py $PROFILE > "$OUT/ncu.txt" 2>&1; echo "ncu rc=$?"
  grep -E '^case|at_[a-z0-9_]+|Duration|DRAM Throughput|Issue Slots Busy|Achieved Occupancy|Registers Per|L2 Cache Throughput|lts__t_|dram__bytes|smsp__inst_executed.sum|Block Limit Registers|Theoretical Occupancy|Warp Cycles Per Issued|stalled' "$OUT/ncu.txt" | cut -c1-400 | head -220
fi
if [ -n "${SWEEP:-}" ]; then
  timeout ${SWEEP_TIMEOUT:-200} bash -c "$SWEEP" > "$OUT/sweep.txt" 2>&1; echo "sweep rc=$?"
  grep -E '^===|%' "$OUT/sweep.txt" | head -80 || true
fi

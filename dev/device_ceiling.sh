#!/usr/bin/env bash
# One device call: permutes of ML workloads (dev/ml_permutes.py) as a user gets them, against
# the copy, PyTorch and torch.compile, with every pass the plan could run; which first call
# serves the int8 weight (permute first, transpose first); a random permute mix against the
# peers (SEED, N); Nsight Compute on the plans' own kernels of PROFILE (comma-separated
# workload names), the random mix last in the time left before DEADLINE seconds; GPU tests
# (TESTS, TESTS_K a -k expression) first and the first call's race from an idle GPU (RACE:
# workload names). STEPS picks the parts (default: all). Logs in $OUT.
#   run: source .whl/activate && SEED=5150 N=24 bash dev/device_ceiling.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export AUTOTRANSPOSE_DB=/tmp/no-such-db.sqlite AUTOTRANSPOSE_FIRST_CALL_STORE=0
STEPS=${STEPS:-tests,race,ml,int8,random,profile}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/log.txt"
t0=$(date +%s)
if [[ $STEPS == *tests* && -n "${TESTS:-}" ]]; then
  timeout ${TEST_TIMEOUT:-150} python3 -m pytest -m gpu -q -p no:cacheprovider $TESTS ${TESTS_K:+-k "$TESTS_K"} > "$OUT/pytest.txt" 2>&1
  echo "pytest rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/log.txt"; tail -8 "$OUT/pytest.txt"
fi
if [[ $STEPS == *race* && -n "${RACE:-}" ]]; then
  timeout ${RACE_TIMEOUT:-90} python3 dev/ml_permutes.py --race "$RACE" --json "$OUT/race.json" >> "$OUT/log.txt" 2>&1
  echo "race rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/log.txt"
  python3 -c "
import json
for r in json.load(open('$OUT/race.json')):
    print(r['name'], 'steady', r['steady'])
    for x in r['races']: print('   race: best', x['best'], x['pct'])
    print('   curve', r['ramp_curve'][:12], '...', r['ramp_curve'][-4:])
" 2>&1 | tail -40
fi
if [[ $STEPS == *ml* ]]; then
  timeout ${ML_TIMEOUT:-150} python3 dev/ml_permutes.py ${ML_ARGS:-} --json "$OUT/ml.json" > "$OUT/ml.txt" 2>&1
  echo "ml rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/log.txt"
  grep -A40 "^case " "$OUT/ml.txt"
fi
if [[ $STEPS == *int8* ]]; then
  for order in permute transpose; do
    echo "== int8 weight, $order first" >> "$OUT/log.txt"
    timeout 60 python3 dev/ml_permutes.py --int8-order $order >> "$OUT/log.txt" 2>&1
  done
  AUTOTRANSPOSE_FIRST_CALL=0 timeout 60 python3 dev/ml_permutes.py --int8-order permute 2>&1 | sed 's/^/no first call: /' >> "$OUT/log.txt"
  echo "int8 done ($(( $(date +%s) - t0 )) s)"; grep -v "^   " "$OUT/log.txt" | tail -16
fi
if [[ $STEPS == *profile* && -n "${PROFILE:-}" ]]; then
  AUTOTRANSPOSE_FIRST_CALL=0 timeout ${PROFILE_TIMEOUT:-90} ncu --clock-control none --kernel-name regex:at_ --launch-count ${PROFILE_LAUNCHES:-8} \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
    --metrics smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum \
    python3 dev/ml_permutes.py --profile "$PROFILE" > "$OUT/ncu.txt" 2>&1
  echo "ncu rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/log.txt"
  grep -E "at_|Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|inst_executed|dram__bytes|lts__t_sectors|Theoretical Occ|Block Size|Grid Size" "$OUT/ncu.txt" | head -120
fi
if [[ $STEPS == *random* && -n "${N:-}" ]]; then
  timeout $(( ${DEADLINE:-385} - ($(date +%s) - t0) )) python3 -m autotranspose bench --repeat 5 --random-permute "$N" --seed "${SEED:-5150}" \
    --json "$OUT/random.json" > "$OUT/random.txt" 2>&1
  echo "random rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/log.txt"
  tail -n 12 "$OUT/random.txt"
fi

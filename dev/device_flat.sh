#!/usr/bin/env bash
# One device call for the flat kernels: their GPU tests, then dev/flat_sweep.py; logs in $OUT.
#   run: source .whl/activate && bash dev/device_flat.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
timeout ${TEST_TIMEOUT:-200} python3 -m pytest -m gpu -q --timeout=150 -p no:cacheprovider ${TESTS:-tests/test_flat.py} 2>&1 | tee "$OUT/pytest.txt" | tail -8
echo "pytest rc=${PIPESTATUS[0]}"
timeout ${SWEEP_TIMEOUT:-330} python3 dev/flat_sweep.py --out "$OUT" ${SIZES:+--sizes $SIZES} > "$OUT/flat_sweep.txt" 2>&1
echo "sweep rc=$?"
grep "^===" "$OUT/flat_sweep.txt"

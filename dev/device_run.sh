#!/usr/bin/env bash
# One device call: GPU tests, then the bench's host-cost table and a few cases, logs in $OUT.
#   run: source .whl/activate && bash dev/device_run.sh [pytest args...]
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -c "import torch, cupy, jax; print('torch', torch.__version__, 'cupy', cupy.__version__, 'jax', jax.__version__, jax.devices())" 2>&1 | tee "$OUT/env.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/env.txt"
timeout 420 python3 -m pytest -m gpu -q --timeout=300 -p no:cacheprovider "${@:-tests}" 2>&1 | tee "$OUT/pytest.txt" | tail -40
echo "pytest rc=${PIPESTATUS[0]}"
if [ -n "${BENCH:-}" ]; then
  timeout 150 python3 -m autotranspose bench --shapes ${BENCH} --dtypes float32 --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt" | tail -25
fi
if [ -n "${PROFILE:-}" ]; then
  python3 dev/host_profile.py 2>&1 | tee "$OUT/profile.txt"
fi

#!/usr/bin/env bash
# One device call: dev/space_check.py (the tuner and serving against the whole
# space), logs in $OUT.  run: source .whl/activate && MODE=tuner CASES=... bash dev/device_space.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
args=(--out "$OUT" --deadline "${DEADLINE:-450}")
[ -n "${CASES:-}" ] && args+=(--cases "$CASES")
[ -n "${RANDOM_N:-}" ] && args+=(--random "$RANDOM_N")
[ -n "${SEED:-}" ] && args+=(--seed "$SEED")
[ -n "${BASELINE:-}" ] && args+=(--baseline)
[ -n "${NO_SHIPPED:-}" ] && args+=(--no-shipped)
[ -n "${FINALISTS:-}" ] && args+=(--finalists "$FINALISTS")
timeout "${TIMEOUT:-560}" python3 dev/space_check.py "${MODE:-tuner}" "${args[@]}" 2>&1 | tee "$OUT/space.txt" | grep -v "^\s*$" | tail -40
echo "space_check rc=${PIPESTATUS[0]}"

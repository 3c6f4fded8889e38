#!/usr/bin/env bash
# One device call: tune TUNE_SHAPES x TUNE_DTYPES into a fresh database (exported to
# $OUT/tuned.json for tuning_db/), then, served from that database and the shipped results,
# `bench` on BENCH_SHAPES x BENCH_DTYPES and `bench --random N --seed SEED`; logs in $OUT.
#   run: source .whl/activate && TUNE_SHAPES="6007x4099" TUNE_DTYPES=int8 SEED=... bash dev/device_tune_bench.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export AUTOTRANSPOSE_DB="sqlite:///$OUT/tune.db"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
if [ -n "${TUNE_SHAPES:-}" ]; then
  timeout ${TUNE_WALL:-240} python3 -m autotranspose tune --shapes $TUNE_SHAPES --dtypes ${TUNE_DTYPES:-int8} \
    --trials ${TRIALS:-40} --timeout ${STUDY_TIMEOUT:-45} --seed ${TUNE_SEED:-13} > "$OUT/tune.txt" 2>&1; echo "tune rc=$?"
  grep -iE "best|stored|class" "$OUT/tune.txt" | tail -12
  python3 -m autotranspose export -o "$OUT/tuned.json" > /dev/null 2>&1; echo "export rc=$?"
fi
if [ -n "${BENCH_SHAPES:-}" ]; then
  timeout ${SHAPES_TIMEOUT:-150} python3 -m autotranspose bench --shapes $BENCH_SHAPES --dtypes ${BENCH_DTYPES:-int8} --repeat 5 \
    --json "$OUT/shapes.json" --markdown "$OUT/shapes.md" > "$OUT/shapes.txt" 2>&1; echo "bench shapes rc=$?"
  tail -n 25 "$OUT/shapes.txt"
fi
if [ -n "${SEED:-}" ]; then
  timeout ${BENCH_TIMEOUT:-240} python3 -m autotranspose bench --random "${N:-40}" --seed "$SEED" --repeat 5 \
    --json "$OUT/random.json" --markdown "$OUT/random.md" > "$OUT/random.txt" 2>&1
  echo "bench random rc=$?"
  tail -n 12 "$OUT/random.txt"
fi

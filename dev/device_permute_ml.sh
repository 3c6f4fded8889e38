#!/usr/bin/env bash
# One device call for the permute path's ML workloads: the GPU tests of the vector boxes and
# the first call's race; dev/ml_permutes.py on the K/V head swaps and uint8 images both ways
# (and the ViT patchify: no regression), the new package and the old one (OLD: a copy of an
# earlier commit's autotranspose/ and templates/, run in its own process) on the same machine;
# the host cost of a contiguous-copy call; a random permute mix (SEED, N). STEPS picks the parts; each part has
# a time budget so that the call ends within its limit. Logs in $OUT.
#   run: source .whl/activate && cd .dev-permute && export PYTHONPATH=/tmp/site:$PWD &&
#        OLD=old88 STEPS=tests,ml,old,host bash dev/device_permute_ml.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export AUTOTRANSPOSE_DB=/tmp/no-such-db.sqlite AUTOTRANSPOSE_FIRST_CALL_STORE=0
STEPS=${STEPS:-tests,ml,old,host,random}
ONLY=${ONLY:-gqa,img}
t0=$(date +%s)
log() { echo "$* ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/log.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/log.txt"
if [[ $STEPS == *tests* ]]; then
  timeout ${TEST_TIMEOUT:-90} python3 -m pytest -m gpu -q -x -p no:cacheprovider \
    ${TESTS:-tests/test_vbox_gpu.py tests/test_permute_gpu.py} ${TESTS_K:+-k "$TESTS_K"} > "$OUT/pytest.txt" 2>&1
  log "pytest rc=$?"; tail -30 "$OUT/pytest.txt"
fi
if [[ $STEPS == *ml* ]]; then
  python3 dev/ml_permutes.py --only "$ONLY" --no-compile ${ML_ARGS:-} --budget ${ML_BUDGET:-70} --json "$OUT/ml_new.json" > "$OUT/ml_new.txt" 2>&1
  log "ml new rc=$?"; grep -A40 "^case " "$OUT/ml_new.txt"
fi
if [[ $STEPS == *old* && -n "${OLD:-}" ]]; then
  PYTHONPATH=/tmp/site:$PWD/$OLD python3 dev/ml_permutes.py --only "${OLD_ONLY:-$ONLY}" --no-compile --no-passes \
    --budget ${OLD_BUDGET:-30} --json "$OUT/ml_old.json" > "$OUT/ml_old.txt" 2>&1
  log "ml old rc=$?"; grep -A40 "^case " "$OUT/ml_old.txt"
fi
if [[ $STEPS == *host* ]]; then
  timeout 30 python3 dev/ml_permutes.py --host > "$OUT/host.txt" 2>&1
  log "host rc=$?"; cat "$OUT/host.txt" | tail -3
fi
if [[ $STEPS == *random* && -n "${N:-}" ]]; then
  timeout $(( ${DEADLINE:-290} - ($(date +%s) - t0) )) python3 -m autotranspose bench --repeat 5 \
    --random-permute "$N" --seed "${SEED:-44017}" --dtypes uint8 int8 float16 bfloat16 \
    --json "$OUT/random.json" > "$OUT/random.txt" 2>&1
  log "random rc=$?"; tail -n 30 "$OUT/random.txt"
fi

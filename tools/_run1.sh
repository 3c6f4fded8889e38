#!/bin/bash
# session 21 run 1: GPU tests of the flat byte-permute kernels (ordered wide included), then the wide sweep
set -x
nvidia-smi --query-gpu=name,driver_version --format=csv
export AUTOTRANSPOSE_CACHE_DIR=/tmp/atcache
timeout 200 python -m pytest -q -m gpu tests/test_tall.py -p no:cacheprovider -x 2>&1 | tail -15 > $OUT/tests.log
cat $OUT/tests.log
timeout 370 python tools/flat_prmt_sweep.py --wide --out $OUT --budget 330 > $OUT/sweep.log 2>&1
grep -E "===|best wide" $OUT/sweep.log

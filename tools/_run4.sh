#!/bin/bash
# session 21 run 4 (final code): GPU tests, the few-rows rows of the targets, random mixes on a new seed
export AUTOTRANSPOSE_DB="sqlite:///$OUT/final.db"
timeout 150 python -m pytest -q -m gpu tests/test_tall.py tests/test_runtime_gpu.py tests/test_firstcall_gpu.py -p no:cacheprovider 2>&1 | tail -3
timeout 110 python -m autotranspose bench --shapes 20x7081411 21x7536398 15x16642555 --dtypes int8 float16 float32 --repeat 5 > $OUT/shapes.txt 2>&1
grep -E " autotranspose | seed " $OUT/shapes.txt | awk '{print $1, $2, $3, $6, $7, $8}'
grep -E "median|faster" $OUT/shapes.txt
timeout 220 python -m autotranspose bench --random 40 --seed 20262177 --repeat 5 --json $OUT/random.json --markdown $OUT/random.md > $OUT/random.txt 2>&1
grep -E "median|faster" $OUT/random.txt

#!/bin/bash
# session 21 run 3: re-tune the shipped few-rows classes, bench the targets' rows and a random mix, GPU tests
export OUT TUNE_SHAPES="20x7081411" TUNE_DTYPES="int8 float16 float32" TUNE_WALL=150 STUDY_TIMEOUT=40
export BENCH_SHAPES="20x7081411 43x618881 18x1267567 21x7536398" BENCH_DTYPES="int8 float16 float32 float64 complex64 complex128"
export SEED=20262121 SHAPES_TIMEOUT=170 BENCH_TIMEOUT=200
bash tools/device_tune_bench.sh
timeout 100 python -m pytest -q -m gpu tests/test_few_rows.py tests/test_firstcall_gpu.py -p no:cacheprovider -x 2>&1 | tail -4

#!/usr/bin/env bash
# The second device call: which z rows cost (`both` on odd shapes with z's or x's rows padded
# to aligned pitches), wider tiles against the defaults, then the cast bench mix.
#   bash dev/device_castboth2.sh   (logs in $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
B=bf16_e4m3; F=f32_e4m3
CASES="$B:4099x6007:both,$B:4099x6007:both:zpad,$B:4099x6007:both:xpad,$B:3000x7001:both"
CASES="$CASES,$B:8192x8192:both,$B:2736x12288:both,$B:16384x4096:both"
CASES="$CASES,$B:4099x6007,$B:3000x7001,$B:8192x8192"
CASES="$CASES,$F:4099x6007:both,$F:4099x6007:both:zpad,$F:3000x7001:both,$F:8192x8192:both"
CASES="$CASES,$F:16384x4096:both,$F:4099x6007"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/checks.txt"
timeout 90 python3 dev/cast_check.py --cases "$CASES" --variants default,m128n128,m64n128,n128 --reps 10 >> "$OUT/checks.txt" 2>&1
echo "rc=$?" >> "$OUT/checks.txt"
cat "$OUT/checks.txt"
timeout ${BENCH_TIMEOUT:-190} python3 -m autotranspose bench --cast 16 --seed 90321 > "$OUT/bench.txt" 2>&1
echo "bench rc=$?" >> "$OUT/bench.txt"
tail -40 "$OUT/bench.txt"

#!/usr/bin/env bash
# The wider byte-permute tiles' ceiling on odd 1- and 2-byte cases (dev/narrow_ceiling.py).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/log.txt"
timeout 250 python3 dev/narrow_ceiling.py --out "$OUT" --budget 190 \
  uint8:30073x30073 bfloat16:12445x12445 int8:46x342x16752 bool:988x207450 \
  bfloat16:1923444x97 float16:8351x8351 uint8:11199x11199 int16:21995x21995 \
  bool:18899x31269 uint16:77x2165x2165 int8:26085x26085 uint8:70784x6997 \
  bfloat16:15283x15283 uint16:5317x5317 2>&1 | tee -a "$OUT/log.txt"

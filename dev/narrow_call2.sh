#!/usr/bin/env bash
# Prefetching byte-permute walks against today's tiles on odd 1- and 2-byte cases, and the
# byte-permute GPU tests (dev/narrow_ceiling.py --tiles prefetch).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/log.txt"
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_prmt.py >"$OUT/pytest_prmt.log" 2>&1 &
timeout 200 python3 dev/narrow_ceiling.py --out "$OUT" --budget 150 --tiles prefetch \
  --no-geometries --no-patterns \
  uint8:30073x30073 bfloat16:12445x12445 int8:46x342x16752 bool:988x207450 \
  float16:8351x8351 uint8:11199x11199 int16:21995x21995 bool:18899x31269 \
  uint16:77x2165x2165 int8:26085x26085 uint8:70784x6997 bfloat16:15283x15283 \
  uint16:5317x5317 int8:9569x9569 uint8:4862x41353 2>&1 | tee -a "$OUT/log.txt"
wait
tail -5 "$OUT/pytest_prmt.log" | tee -a "$OUT/log.txt"

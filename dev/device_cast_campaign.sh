#!/usr/bin/env bash
# One device call of the cast-transpose campaign: a smoke test of `tune --cast` (GPU test),
# `bench --cast` of the served mix with the shipped file as it is, the campaign
# (dev/cast_campaign.py, into a database holding this GPU's shipped file, or cast_seed/<slug>.json
# where an earlier campaign left one), the export's cast entries merged into tuning_db/<slug>.json
# (also in $OUT/tuning_db), then the same bench, dev/cast_ab.py (served against default,
# kernels only) and the cast GPU tests with the new file.
#   run: source .whl/activate && bash dev/device_cast_campaign.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/tuning_db" /tmp/cast_export
BENCH=${BENCH:-"python3 -m autotranspose bench --cast 16 --seed 77801"}
export AUTOTRANSPOSE_DB=/tmp/none/user.db  # no user database: shipped results and defaults
LOG="$OUT/session.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$LOG"
slug=$(python3 -c "from autotranspose._compiler import activate; print(activate(0).info.slug)")
echo "slug $slug" | tee -a "$LOG"
timeout ${SMOKE_TIMEOUT:-45} python3 -m pytest -q -p no:cacheprovider -m gpu \
  tests/test_cast_tuning.py >> "$LOG" 2>&1
echo "smoke rc=$?: $(tail -1 "$LOG")"
if [ -z "${SKIP_BEFORE:-}" ]; then  # SKIP_BEFORE=1: no bench before the campaign
  timeout ${BENCH_TIMEOUT:-105} $BENCH > "$OUT/before.txt" 2>&1
  echo "before rc=$?: $(tail -1 "$OUT/before.txt")"
fi
DB="sqlite:////tmp/cast_campaign.db"
rm -f /tmp/cast_campaign.db*
seed="tuning_db/$slug.json"
[ -f "cast_seed/$slug.json" ] && seed="cast_seed/$slug.json"
[ -f "$seed" ] && python3 -m autotranspose import --db "$DB" "$seed" | tee -a "$LOG"
timeout ${TUNE_TIMEOUT:-195} python3 dev/cast_campaign.py tune --db "$DB" \
  --budget ${BUDGET:-165} ${CAMPAIGN_ARGS:-} > "$OUT/campaign.txt" 2>&1
echo "campaign rc=$?"
grep -v "^\[I" "$OUT/campaign.txt" | tail -25
python3 dev/campaign.py export --db "$DB" --out /tmp/cast_export >> "$LOG" 2>&1
if [ -f "tuning_db/$slug.json" ]; then
  python3 dev/cast_campaign.py merge --shipped "tuning_db/$slug.json" \
    --export "/tmp/cast_export/$slug.json" --out "$OUT/tuning_db/$slug.json"
else
  cp "/tmp/cast_export/$slug.json" "$OUT/tuning_db/$slug.json"
fi
cp "$OUT/tuning_db/$slug.json" "tuning_db/$slug.json"
timeout ${BENCH_TIMEOUT:-105} $BENCH > "$OUT/after.txt" 2>&1
echo "after rc=$?: $(tail -1 "$OUT/after.txt")"
grep -h "median" "$OUT"/before.txt "$OUT/after.txt" 2>/dev/null
timeout ${AB_TIMEOUT:-60} python3 dev/cast_ab.py --cast 16 --seed 77801 > "$OUT/ab.txt" 2>&1
echo "ab rc=$?"; tail -18 "$OUT/ab.txt"
timeout ${TEST_TIMEOUT:-80} python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cast_gpu.py \
  >> "$LOG" 2>&1
echo "cast gpu tests rc=$?: $(tail -1 "$LOG")"

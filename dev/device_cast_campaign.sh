#!/usr/bin/env bash
# One device call of the cast-transpose campaign: a smoke test of `tune --cast` (GPU test),
# `bench --cast` of the served mix before, the campaign (dev/cast_campaign.py into a database
# holding this GPU's shipped file first, so the export keeps every shipped result), the
# export into tuning_db/ (and $OUT/tuning_db), then the same bench after, in one call.
#   run: source .whl/activate && bash dev/device_cast_campaign.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/tuning_db"
BENCH=${BENCH:-"python3 -m autotranspose bench --cast 16 --seed 77801"}
export AUTOTRANSPOSE_DB=/tmp/none/user.db  # no user database: shipped results and defaults
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
slug=$(python3 -c "from autotranspose._compiler import activate; print(activate(0).info.slug)")
echo "slug $slug" | tee -a "$OUT/env.txt"
timeout ${SMOKE_TIMEOUT:-45} python3 -m pytest -q -p no:cacheprovider -m gpu \
  tests/test_cast_tuning.py > "$OUT/smoke.txt" 2>&1
echo "smoke rc=$?: $(tail -1 "$OUT/smoke.txt")"
timeout ${BENCH_TIMEOUT:-105} $BENCH > "$OUT/before.txt" 2>&1
echo "before rc=$?: $(tail -1 "$OUT/before.txt")"
DB="sqlite:////tmp/cast_campaign.db"
rm -f /tmp/cast_campaign.db*
if [ -f "tuning_db/$slug.json" ]; then
  python3 -m autotranspose import --db "$DB" "tuning_db/$slug.json" || exit 1
fi
timeout ${TUNE_TIMEOUT:-140} python3 dev/cast_campaign.py tune --db "$DB" \
  --budget ${BUDGET:-100} ${CAMPAIGN_ARGS:-} > "$OUT/campaign.txt" 2>&1
echo "campaign rc=$?"
cat "$OUT/campaign.txt" | grep -v "^\s*$" | tail -15
python3 dev/campaign.py export --db "$DB" --out "$OUT/tuning_db" && \
  cp "$OUT/tuning_db/$slug.json" "tuning_db/$slug.json"
timeout ${BENCH_TIMEOUT:-105} $BENCH > "$OUT/after.txt" 2>&1
echo "after rc=$?: $(tail -1 "$OUT/after.txt")"
grep -h "median" "$OUT/before.txt" "$OUT/after.txt"

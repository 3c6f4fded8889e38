#!/usr/bin/env bash
# One device call of the tuning campaign: the shipped file of this GPU is
# imported into a fresh database first (so nothing shipped is lost and the tuner warm-starts
# from it), then `dev/campaign.py tune` runs CASES, then the database is exported.
#   run: source .whl/activate && CASES=28-59 bash dev/device_campaign.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/tuning_db"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
DB="sqlite:///$OUT/campaign.db"
slug=$(python3 -c "from autotranspose._compiler import activate; print(activate(0).info.slug)")
if [ -f "tuning_db/$slug.json" ]; then
  python3 -m autotranspose import --db "$DB" "tuning_db/$slug.json" || exit 1
fi
timeout ${TUNE_TIMEOUT:-480} python3 dev/campaign.py tune --db "$DB" --cases "${CASES:-0-59}" --out "$OUT" 2>&1 | tee "$OUT/campaign.txt" | grep "of copy"
echo "campaign rc=${PIPESTATUS[0]}"
python3 dev/campaign.py export --db "$DB" --out "$OUT/tuning_db"
rm -f "$OUT"/campaign.db-*

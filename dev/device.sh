#!/usr/bin/env bash
# The GPU machine's runner: one named recipe a call, its logs under $OUT.
#
#   bash dev/device.sh RECIPE [args...]        (bash dev/device.sh help lists the recipes)
#
# A device call is `source .whl/activate && bash dev/device.sh RECIPE` run with
# `carry: [".whl"]` (.whl: a local virtual environment of the wheels the machine needs: torch,
# CuPy, jax[cuda], pycuda, pytest). $OUT is the folder whose files come back, at most 8 files
# and 2 folders deep: every recipe appends a summary to $OUT/log.txt and writes a few named
# files; where a call leaves more than 8, the runner packs the rest into $OUT/rest-RECIPE.tar.gz
# (log.txt and tuning_db/ stay out of it). Recipes chain within one call, each appending to
# the same log: `bash dev/device.sh tests; SEEDS=57191 bash dev/device.sh bench-random`.
# Every step has a wall limit (the variables named *_TIMEOUT) so that a call ends inside the
# machine's 600 s per command.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
T0=$(date +%s)
RECIPE=${1:-help}
[ $# -gt 0 ] && shift

log() { echo "$* ($(($(date +%s) - T0)) s)" | tee -a "$LOG"; }

gpu_env() {
  echo "== $RECIPE $*" >>"$LOG"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$LOG"
}

versions() {
  python3 -c "import torch, cupy, jax; print('torch', torch.__version__, 'cupy', cupy.__version__, 'jax', jax.__version__)" 2>&1 | tail -1 | tee -a "$LOG"
}

ncu_path() { command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1; }

slug() { python3 -c "from autotranspose.runtime.compiler import activate; print(activate(0).info.slug)"; }

# Pack what is past 8 files into one archive, so that everything comes back.
pack() {
  local n files=()
  cd "$OUT" || return
  mapfile -t files < <(find . -type f ! -name 'rest-*.tar.gz' ! -name log.txt ! -path './tuning_db/*' | sed 's|^\./||')
  n=$(find . -type f | wc -l)
  if [ "$n" -gt 8 ] && [ ${#files[@]} -gt 0 ]; then
    local tarball="rest-$RECIPE.tar.gz" i=1
    while [ -e "$tarball" ]; do # a recipe run twice in one call keeps both archives
      i=$((i + 1))
      tarball="rest-$RECIPE-$i.tar.gz"
    done
    tar -czf "$tarball" "${files[@]}" && rm -f "${files[@]}"
    find . -mindepth 1 -type d -empty -delete
    echo "packed ${#files[@]} files into $tarball (log.txt and tuning_db/ kept out)" >>"$LOG"
  fi
  cd - >/dev/null || return
}
trap pack EXIT

# The GPU tests, each argument a group run as its own pytest process, all at once (the tests
# check results, not timings; nvcc is most of their time and the machine has 16 cores). A
# group "shard=k/N files" runs the k-th of N shards of those files (tests/conftest.py).
# Default: the whole suite in SHARDS (4) shards. TESTS_K: a -k expression for every group.
recipe_tests() {
  local groups=("$@") pids=() i g shard rc
  if [ ${#groups[@]} -eq 0 ]; then
    for ((i = 0; i < ${SHARDS:-4}; i++)); do groups+=("shard=$i/${SHARDS:-4} tests"); done
  fi
  versions
  for i in "${!groups[@]}"; do
    g=${groups[$i]}
    shard=""
    if [[ $g == shard=* ]]; then
      shard=${g%% *}
      shard=${shard#shard=}
      g=${g#* }
    fi
    # shellcheck disable=SC2086  # a group is a list of files and options
    AUTOTRANSPOSE_TEST_SHARD=$shard timeout "${TEST_TIMEOUT:-420}" python3 -m pytest -m gpu -q \
      -p no:cacheprovider $g ${TESTS_K:+-k "$TESTS_K"} >"$OUT/pytest.$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    rc=$?
    { echo "=== group $i: ${groups[$i]} (rc=$rc)"; cat "$OUT/pytest.$i.log"; } >>"$OUT/pytest.txt"
    log "pytest group $i rc=$rc: $(tail -1 "$OUT/pytest.$i.log")"
    rm -f "$OUT/pytest.$i.log"
  done
  grep -E "^(FAILED|ERROR)" "$OUT/pytest.txt" | head -30 | tee -a "$LOG"
}

# A new user's machine: the README's main job (`tune`, then `bench`) into a fresh HOME's
# default tuning database, then the whole GPU suite with `pytest -n 8` (pytest-n8.txt), then
# serially (the `tests` recipe's shards, one serial process each). Both runs share one test run
# directory (AUTOTRANSPOSE_TEST_RUN_DIR): the second compiles nothing again, and its tests'
# database carries the first run's results.
recipe_user_machine() {
  export HOME=${USER_HOME:-/tmp/userhome} AUTOTRANSPOSE_TEST_RUN_DIR=${TEST_RUN_DIR:-/tmp/atrun}
  mkdir -p "$HOME" "$AUTOTRANSPOSE_TEST_RUN_DIR"
  versions
  timeout "${TUNE_TIMEOUT:-150}" python3 -m autotranspose tune --shapes 8192x8192 4099x6007 \
    --dtypes float32 float16 int8 >"$OUT/tune.txt" 2>&1
  log "tune rc=$?: $(tail -1 "$OUT/tune.txt")"
  timeout "${BENCH_TIMEOUT:-120}" python3 -m autotranspose bench --shapes 8192x8192 \
    --dtypes float32 float16 int8 >>"$OUT/tune.txt" 2>&1
  log "bench rc=$?"
  # the suite with -n 8 took over 330 s on an H200 once the in-place tests grew: the slowest
  # 25 are listed at the end of pytest-n8.txt, to split or shorten
  timeout "${N8_TIMEOUT:-400}" python3 -m pytest -m gpu -q -n 8 -p no:cacheprovider \
    --durations=25 >"$OUT/pytest-n8.txt" 2>&1
  log "pytest -n 8 rc=$?: $(tail -1 "$OUT/pytest-n8.txt")"
  grep -E "^(FAILED|ERROR)" "$OUT/pytest-n8.txt" | head -30 | tee -a "$LOG"
  # SERIAL=0 stops here: a second call on the still-warm machine runs the serial shards
  # (`tests` with the same USER_HOME and TEST_RUN_DIR) when both do not fit one call
  [ "${SERIAL:-1}" = 0 ] || SHARDS=${SHARDS:-8} recipe_tests
}

# One `autotranspose bench` run: NAME, then its arguments; NAME.txt, .json, .md in $OUT.
bench() {
  local name=$1
  shift
  timeout "${BENCH_TIMEOUT:-300}" python3 -m autotranspose bench "$@" \
    --json "$OUT/$name.json" --markdown "$OUT/$name.md" >"$OUT/$name.txt" 2>&1
  log "bench $name rc=$?: $*"
  grep -A8 "over" "$OUT/$name.txt" | head -12 | tee -a "$LOG"
}

# BENCHMARKS.md's fixed list (arguments replace its cases).
recipe_bench_fixed() {
  if [ $# -gt 0 ]; then
    bench fixed "$@"
  else
    bench fixed --shapes 8192x8192 16384x16384 4099x6007 6007x4099 7081411x20 20x7081411 \
      1048576x32 32x1048576 --dtypes int8 float16 float32 float64 complex64 complex128 \
      --repeat "${REPEAT:-5}"
  fi
}

# `bench --random N --seed S` for each seed of SEEDS; DTYPES narrows the element types
# (e.g. DTYPES="int8 uint8 bool float16 bfloat16 int16 uint16", the 1- and 2-byte mix).
recipe_bench_random() {
  local seed
  for seed in ${SEEDS:-1}; do
    # shellcheck disable=SC2086
    bench "random-$seed" --random "${N:-40}" --seed "$seed" --repeat "${REPEAT:-3}" \
      ${DTYPES:+--dtypes $DTYPES} "$@"
  done
}

# permute()'s fixed cases (NCHW <-> NHWC, the head swap), then `bench --random-permute N`
# for each seed of SEEDS where N is set.
recipe_bench_permute() {
  local seed
  bench nchw --shapes 64x256x56x56 32x64x224x224 --axes 0,2,3,1 --dtypes float16 float32 --repeat 5
  bench nhwc --shapes 64x56x56x256 32x224x224x64 --axes 0,3,1,2 --dtypes float16 float32 --repeat 5
  bench heads --shapes 8x4096x32x128 --axes 0,2,1,3 --dtypes bfloat16 --repeat 5
  if [ -n "${N:-}" ]; then
    for seed in ${SEEDS:-86243}; do
      bench "permute-$seed" --random-permute "$N" --seed "$seed" --repeat "${REPEAT:-3}" "$@"
    done
  fi
}

# `bench --cast N --seed S` for each seed of SEEDS (cast-transposes against torch.compile).
recipe_bench_cast() {
  local seed
  for seed in ${SEEDS:-61927}; do
    bench "cast-$seed" --cast "${N:-40}" --seed "$seed" --repeat "${REPEAT:-3}" "$@"
  done
}

# The access pattern's ceiling (`bench --ceiling`, BENCHMARKS.md "The access pattern's
# ceiling"): each case's served launches timed beside their pattern kernels, ours / pattern /
# copy and sectors per byte. PARTS: `random` (the 1- and 2-byte transposes of --random N
# --seed SEED), `permute` (--random-permute N --seed PSEED), `cast` (--cast NCAST --seed
# CSEED); each part is one bench of up to BENCH_TIMEOUT s, so a device call runs one or two.
recipe_ceiling() {
  local part
  for part in ${*:-random permute cast}; do
    case $part in
    random)
      bench "ceiling-random-${SEED:-1}" --random "${N:-40}" --seed "${SEED:-1}" \
        --dtypes int8 uint8 bool float16 bfloat16 int16 uint16 --repeat "${REPEAT:-3}" --ceiling
      ;;
    permute)
      bench "ceiling-permute-${PSEED:-86243}" --random-permute "${N:-40}" --seed "${PSEED:-86243}" \
        --repeat "${REPEAT:-3}" --ceiling
      ;;
    cast)
      bench "ceiling-cast-${CSEED:-61927}" --cast "${NCAST:-20}" --seed "${CSEED:-61927}" \
        --repeat "${REPEAT:-3}" --ceiling
      ;;
    *)
      log "ceiling: unknown part '$part' (random, permute or cast)"
      continue
      ;;
    esac
    grep -E "access pattern alone|% of the pattern|16-byte words" "$OUT"/ceiling-"$part"-*.txt | tee -a "$LOG"
  done
}

# In-place transposes: their GPU tests, then `bench --inplace N --seed S` for each of SEEDS
# (transpose_() against transpose() and copy, each pass timed).
recipe_inplace() {
  local seed
  recipe_tests "tests/test_inplace_gpu.py"
  for seed in ${SEEDS:-55}; do
    # PEER_DIR: a checkout of bryancatanzaro/inplace (carried, e.g. .devrun/peer from
    # `git archive` of a clone), built here and timed beside transpose_()
    bench "inplace-$seed" --inplace "${N:-24}" --seed "$seed" --repeat "${REPEAT:-5}" \
      ${PEER_DIR:+--inplace-peer "$PEER_DIR"} "$@"
  done
}

# COLS through the scratch against a block's band (dev/staged_ab.py; arguments go to it,
# default: its shapes, every variant), then ncu on one staged pass's first launches
# (PROFILE_CASE="M N dtype STAGE_MIB", default 8280 7320 float16 10: staged by default).
recipe_staged() {
  timeout "${AB_TIMEOUT:-200}" python3 dev/staged_ab.py --repeat "${REPEAT:-5}" \
    --out "$OUT/staged_ab.json" "$@" >"$OUT/staged_ab.txt" 2>&1
  log "staged_ab rc=$?"
  tail -80 "$OUT/staged_ab.txt" | tee -a "$LOG"
  local ncu
  ncu=$(ncu_path)
  [ -z "$ncu" ] && { log "no ncu on this machine"; return 0; }
  # shellcheck disable=SC2086  # the case is four words
  timeout "${NCU_TIMEOUT:-90}" "$ncu" --clock-control none --cache-control none \
    --profile-from-start off -k regex:cols_staged --launch-count 2 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,smsp__inst_executed.sum \
    python3 dev/staged_ab.py --profile ${PROFILE_CASE:-8280 7320 float16 10} >"$OUT/ncu-staged.txt" 2>&1
  log "ncu staged rc=$?"
  grep -E "at_inplace|Duration|DRAM Throughput|Achieved Occupancy|Theoretical Occ|dram__bytes|hit_rate|inst_exec|Warp Cycles" \
    "$OUT/ncu-staged.txt" | cut -c1-160 | head -60 | tee -a "$LOG"
}

# The in-place kernels served against the experiments (dev/cols_ab.py; arguments go to it,
# default: its cases, rule, the served kernels, against no-step), then Nsight Compute on the
# COLS passes of one call (PROFILE_CASE="M N dtype", default 6912 7104 uint8: a rotation and
# a table gather).
recipe_cols() {
  local args=("$@") ncu
  [ ${#args[@]} -eq 0 ] && args=(--variants rule no-step)
  timeout "${AB_TIMEOUT:-300}" python3 dev/cols_ab.py --repeat "${REPEAT:-5}" \
    --out "$OUT/cols_ab.json" "${args[@]}" >"$OUT/cols_ab.txt" 2>&1
  log "cols_ab rc=$?"
  grep -v "^\[" "$OUT/cols_ab.txt" | tail -80 | tee -a "$LOG"
  ncu=$(ncu_path)
  [ -z "$ncu" ] && { log "no ncu on this machine"; return 0; }
  # shellcheck disable=SC2086  # the case is three words
  timeout "${NCU_TIMEOUT:-90}" "$ncu" --cache-control none --profile-from-start off \
    -k regex:at_inplace_cols --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section MemoryWorkloadAnalysis \
    python3 dev/cols_ab.py --profile ${PROFILE_CASE:-6912 7104 uint8} >"$OUT/ncu-cols.txt" 2>&1
  log "ncu cols rc=$?"
  grep -E "at_inplace|Duration|DRAM Throughput|L1/TEX Cache|Achieved Occupancy|Warp Cycles Per Issued|Executed Instructions " \
    "$OUT/ncu-cols.txt" | cut -c1-160 | head -40 | tee -a "$LOG"
}

# `bench --small N --seed S`: small calls, host included, against PyTorch and CuPy.
recipe_bench_small() {
  bench "small-${SEED:-37110}" --small "${N:-40}" --seed "${SEED:-37110}" "$@"
}

# ML workloads through permute() on PyTorch tensors (BENCHMARKS.md, "Permute: ML workloads");
# arguments go to dev/ml_permutes.py (default: --no-passes --rounds 5).
recipe_ml() {
  local args=("$@")
  [ ${#args[@]} -eq 0 ] && args=(--no-passes --rounds 5)
  timeout "${ML_TIMEOUT:-400}" python3 dev/ml_permutes.py "${args[@]}" --json "$OUT/ml.json" >"$OUT/ml.txt" 2>&1
  log "ml rc=$?: ${args[*]}"
  grep -A40 "^case " "$OUT/ml.txt" | tee -a "$LOG"
}

# The tuning campaign behind tuning_db/: this GPU's shipped file imported into a fresh
# database (nothing shipped is lost; the tuner warm-starts from it), dev/campaign.py tune on
# CASES (0-59), then the export: $OUT/tuning_db/<slug>.json replaces the shipped file.
recipe_campaign() {
  local db="sqlite:////tmp/campaign.db" s
  rm -f /tmp/campaign.db*
  mkdir -p "$OUT/tuning_db"
  s=$(slug)
  if [ -f "tuning_db/$s.json" ]; then
    python3 -m autotranspose import --db "$db" "tuning_db/$s.json" >>"$LOG" 2>&1 || return 1
  fi
  timeout "${TUNE_TIMEOUT:-480}" python3 dev/campaign.py tune --db "$db" --cases "${CASES:-0-59}" \
    --out "$OUT" >"$OUT/campaign.txt" 2>&1
  log "campaign rc=$?"
  grep "of copy" "$OUT/campaign.txt" | tail -60 | tee -a "$LOG"
  python3 dev/campaign.py export --db "$db" --out "$OUT/tuning_db" >>"$LOG" 2>&1
}

# A campaign's database exported to EXPORT, its entries of a problem (casts, in-place
# transposes) merged into this GPU's shipped file (dev/cast_campaign.py merge: the
# transposes' entries as shipped), written to $OUT/tuning_db/SLUG.json and into tuning_db/.
ship_problems() {
  local db=$1 export=$2 s=$3
  python3 dev/campaign.py export --db "$db" --out "$export" >>"$LOG" 2>&1
  if [ -f "tuning_db/$s.json" ]; then
    python3 dev/cast_campaign.py merge --shipped "tuning_db/$s.json" \
      --export "$export/$s.json" --out "$OUT/tuning_db/$s.json" >>"$LOG" 2>&1
  else
    cp "$export/$s.json" "$OUT/tuning_db/$s.json"
  fi
  cp "$OUT/tuning_db/$s.json" "tuning_db/$s.json"
}

# The cast-transpose campaign: a smoke test of `tune --cast`, `bench --cast` before, the
# campaign (dev/cast_campaign.py, into a database holding this GPU's shipped file, or
# cast_seed/<slug>.json where an earlier campaign left one), its cast entries merged into
# the shipped file ($OUT/tuning_db/<slug>.json), the bench after, dev/cast_ab.py (served
# against default, kernels only) and the cast GPU tests with the new file.
recipe_cast_campaign() {
  local db="sqlite:////tmp/cast_campaign.db" s seed bench_args
  bench_args=(--cast "${N:-16}" --seed "${SEED:-77801}" --repeat 3)
  export AUTOTRANSPOSE_DB=/tmp/none/user.db # no user database: shipped results and defaults
  mkdir -p "$OUT/tuning_db" /tmp/cast_export
  rm -f /tmp/cast_campaign.db*
  s=$(slug)
  timeout "${SMOKE_TIMEOUT:-45}" python3 -m pytest -q -p no:cacheprovider -m gpu \
    tests/test_cast_tuning.py >"$OUT/pytest.txt" 2>&1
  log "smoke rc=$?: $(tail -1 "$OUT/pytest.txt")"
  [ -z "${SKIP_BEFORE:-}" ] && bench before "${bench_args[@]}"
  seed="tuning_db/$s.json"
  [ -f "cast_seed/$s.json" ] && seed="cast_seed/$s.json"
  [ -f "$seed" ] && python3 -m autotranspose import --db "$db" "$seed" >>"$LOG" 2>&1
  # shellcheck disable=SC2086
  timeout "${TUNE_TIMEOUT:-195}" python3 dev/cast_campaign.py tune --db "$db" \
    --budget "${BUDGET:-165}" ${CAMPAIGN_ARGS:-} >"$OUT/campaign.txt" 2>&1
  log "cast campaign rc=$?"
  grep -v "^\[I" "$OUT/campaign.txt" | tail -25 | tee -a "$LOG"
  ship_problems "$db" /tmp/cast_export "$s"
  bench after "${bench_args[@]}"
  timeout "${AB_TIMEOUT:-60}" python3 dev/cast_ab.py "${bench_args[@]:0:4}" >"$OUT/cast_ab.txt" 2>&1
  log "cast_ab rc=$?"
  tail -18 "$OUT/cast_ab.txt" | tee -a "$LOG"
  timeout "${TEST_TIMEOUT:-80}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cast_gpu.py \
    >>"$OUT/pytest.txt" 2>&1
  log "cast GPU tests rc=$?: $(tail -1 "$OUT/pytest.txt")"
}

# The in-place campaign: `bench --inplace` before (shipped results and defaults only),
# dev/inplace_campaign.py into a database holding this GPU's shipped file, its in-place
# entries merged into the shipped file ($OUT/tuning_db/<slug>.json), the bench after.
recipe_inplace_campaign() {
  local db="sqlite:////tmp/inplace_campaign.db" s bench_args
  bench_args=(--inplace "${N:-12}" --seed "${SEED:-60917}" --repeat 5)
  export AUTOTRANSPOSE_DB=/tmp/none/user.db # no user database: shipped results and defaults
  mkdir -p "$OUT/tuning_db" /tmp/inplace_export
  rm -f /tmp/inplace_campaign.db*
  s=$(slug)
  if [ -z "${SKIP_BEFORE:-}" ]; then bench inplace-before "${bench_args[@]}"; fi
  [ -f "tuning_db/$s.json" ] && python3 -m autotranspose import --db "$db" "tuning_db/$s.json" >>"$LOG" 2>&1
  # shellcheck disable=SC2086
  timeout "${TUNE_TIMEOUT:-300}" python3 dev/inplace_campaign.py tune --db "$db" \
    --budget "${BUDGET:-240}" ${CAMPAIGN_ARGS:-} >"$OUT/inplace_campaign.txt" 2>&1
  log "inplace campaign rc=$?"
  grep -v "^\[I" "$OUT/inplace_campaign.txt" | tail -30 | tee -a "$LOG"
  ship_problems "$db" /tmp/inplace_export "$s"
  if [ -z "${SKIP_AFTER:-}" ]; then bench inplace-after "${bench_args[@]}"; fi
}

# Tune TUNE_SHAPES x TUNE_DTYPES into a fresh database ($OUT/tuned.json, for tuning_db/),
# then `bench` served from it on the arguments given (e.g. --shapes 6007x4099 --dtypes int8).
recipe_tune_bench() {
  export AUTOTRANSPOSE_DB="sqlite:////tmp/tune_bench.db"
  rm -f /tmp/tune_bench.db*
  # shellcheck disable=SC2086
  timeout "${TUNE_TIMEOUT:-240}" python3 -m autotranspose tune --shapes ${TUNE_SHAPES:?TUNE_SHAPES} \
    --dtypes ${TUNE_DTYPES:-int8} --trials "${TRIALS:-40}" --timeout "${STUDY_TIMEOUT:-45}" \
    --seed "${TUNE_SEED:-13}" >"$OUT/tune.txt" 2>&1
  log "tune rc=$?"
  grep -iE "best|stored|class" "$OUT/tune.txt" | tail -12 | tee -a "$LOG"
  python3 -m autotranspose export -o "$OUT/tuned.json" >/dev/null 2>&1
  log "export rc=$?"
  [ $# -gt 0 ] && bench served "$@" --repeat 5
}

# dev/space_check.py: the tuner's pick (MODE=tuner) or what a call is served (MODE=serving)
# against the best config of the whole space; its JSON feeds dev/ship_best.py. Arguments go
# to space_check.py (e.g. --cases int8:4099x6007 or --random 12 --seed 5).
recipe_space() {
  timeout "${SPACE_TIMEOUT:-560}" python3 dev/space_check.py "${MODE:-tuner}" --out "$OUT" \
    --deadline "${DEADLINE:-450}" "$@" >"$OUT/space.txt" 2>&1
  log "space_check rc=$?"
  grep -v "^\s*$" "$OUT/space.txt" | tail -40 | tee -a "$LOG"
}

# Nsight Compute on dev/profile_kernels.py's cases (arguments: e.g. uint8:20x7081411
# float16:64x256x56x56@0,2,3,1); METRICS=a,b names counters instead of the sections.
recipe_profile() {
  local ncu
  ncu=$(ncu_path)
  [ -z "$ncu" ] && { log "no ncu on this machine"; return 1; }
  [ $# -eq 0 ] && { log "profile: name the cases (dev/profile_kernels.py syntax)"; return 2; }
  if [ -n "${METRICS:-}" ]; then
    timeout "${NCU_TIMEOUT:-300}" "$ncu" --clock-control none --profile-from-start off --metrics "$METRICS" \
      python3 dev/profile_kernels.py "$@" >"$OUT/ncu.txt" 2>&1
    log "ncu metrics rc=$?"
    grep -E '^case|  autotranspose_|^    [a-z]' "$OUT/ncu.txt" | head -200 | tee -a "$LOG"
  else
    timeout "${NCU_TIMEOUT:-300}" "$ncu" --clock-control none --profile-from-start off \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
      --section WarpStateStats --section MemoryWorkloadAnalysis --section InstructionStats \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,smsp__inst_executed.sum \
      python3 dev/profile_kernels.py "$@" >"$OUT/ncu.txt" 2>&1
    log "ncu rc=$?"
    grep -E '^case|at_[a-z0-9_]+|Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Achieved Occupancy|Theoretical Occupancy|Registers Per|No Eligible|Block Limit|lts__t_|dram__bytes|smsp__inst_executed.sum' \
      "$OUT/ncu.txt" | cut -c1-300 | head -200 | tee -a "$LOG"
  fi
}

# Before / after: the same cases served by an older tree (.old/, made with `git archive REV
# autotranspose templates tuning_db | tar -x -C .old` and carried) and by this one, in one
# process per tree and round, old / new / old / new, first calls on, no database. Arguments
# are `bench` arguments (default: a few transposes), or with CASES set (dtype:shape:axes ...)
# the permutes of dev/permute_ab.py. One line a case at the end: both trees, both rounds.
recipe_ab() {
  local here=$PWD round tree root args=("$@")
  [ -d .old ] || { log "ab: no .old/ tree (see the comment above recipe_ab)"; return 2; }
  [ ${#args[@]} -eq 0 ] && args=(--shapes 8192x8192 4099x6007 7081411x20 --dtypes int8 float16 float32 complex128 --repeat 3)
  for round in 1 2; do
    for tree in old new; do
      root=$here
      [ $tree = old ] && root=$here/.old
      if [ -n "${CASES:-}" ]; then
        # shellcheck disable=SC2086
        (cd "$root" && AUTOTRANSPOSE_DB=/tmp/at-ab-$tree.db PYTHONPATH="$root:${PYTHONPATH:-}" \
          timeout "${AB_TIMEOUT:-150}" python3 "$here/dev/permute_ab.py" --json "$OUT/$tree.$round.json" \
          $CASES) >"$OUT/$tree.$round.txt" 2>&1
      else
        (cd "$root" && AUTOTRANSPOSE_DB=/tmp/at-ab-$tree.db PYTHONPATH="$root:${PYTHONPATH:-}" \
          timeout "${AB_TIMEOUT:-200}" python3 -m autotranspose bench "${args[@]}" \
          --json "$OUT/$tree.$round.json") >"$OUT/$tree.$round.txt" 2>&1
      fi
      log "$tree, round $round rc=$?"
    done
  done
  [ -n "${CASES:-}" ] && { grep -hE "%|Error" "$OUT"/{old,new}.?.txt | tail -40 | tee -a "$LOG"; return; }
  python3 - "$OUT" <<'PY' | tee -a "$LOG"
import json, sys
from pathlib import Path

out, runs = Path(sys.argv[1]), {}
for tree in ("old", "new"):
    for rnd in (1, 2):
        f = out / f"{tree}.{rnd}.json"
        if f.exists():
            for r in json.loads(f.read_text())["rows"]:
                if r["peer"] == "autotranspose" and r["of_copy"]:
                    key = ("x".join(map(str, r["shape"])), r["dtype"])
                    runs.setdefault(key, {})[f"{tree}{rnd}"] = (100 * r["of_copy"], r["note"])
print(f"{'case':26s} {'old 1':>7s} {'new 1':>7s} {'old 2':>7s} {'new 2':>7s}  same config")
for (shape, dtype), v in runs.items():
    cells = [f"{v[k][0]:6.1f}%" if k in v else "      -" for k in ("old1", "new1", "old2", "new2")]
    same = len({n.split(" ")[0] for _, n in v.values()}) == 1
    print(f"{shape + ' ' + dtype:26s} {' '.join(cells)}  {same}")
PY
}

# Host cost of small calls: permute() and transpose() against PyTorch's own
# (dev/host_permute.py), and cast_transpose()'s (dev/cast_host.py).
recipe_host() {
  timeout "${HOST_TIMEOUT:-150}" python3 dev/host_permute.py >"$OUT/host.txt" 2>&1
  log "host_permute rc=$?"
  timeout 60 python3 dev/cast_host.py >>"$OUT/host.txt" 2>&1
  log "cast_host rc=$?"
  tee -a "$LOG" <"$OUT/host.txt" >/dev/null
  tail -30 "$OUT/host.txt"
}

# Anything else: each argument a shell command (a dev/ tool, a bench), run in turn with its
# output in $OUT/diag.N.txt, e.g.
#   bash dev/device.sh diag "python3 dev/cast_diag.py --seed 61927" "python3 dev/prmt_sweep.py --out \$OUT"
recipe_diag() {
  local i=0 cmd
  for cmd in "$@"; do
    OUT=$OUT timeout "${DIAG_TIMEOUT:-300}" bash -c "$cmd" >"$OUT/diag.$i.txt" 2>&1
    log "diag $i rc=$?: $cmd"
    tail -"${DIAG_TAIL:-30}" "$OUT/diag.$i.txt" | tee -a "$LOG"
    i=$((i + 1))
  done
}

usage() {
  sed -n '/^# The GPU tests/,$p' "$0" | grep -E '^recipe_[a-z_]+\(\)' | sed 's/^recipe_//; s/().*//; s/_/-/g' |
    tr '\n' ' '
  echo
  echo "bash dev/device.sh RECIPE [args]: dev/README.md describes each."
}

case $RECIPE in
help | -h | --help) usage ;;
*)
  fn="recipe_${RECIPE//-/_}"
  if ! declare -F "$fn" >/dev/null; then
    echo "unknown recipe '$RECIPE'; known: $(usage | head -1)" >&2
    exit 2
  fi
  gpu_env "$@"
  "$fn" "$@"
  ;;
esac

#!/usr/bin/env bash
# scripts/bench-models.sh [BUILD_DIR] [OUT_DIR] - the whole-model part of the main job: the rows
# of the fusion table for each built-in model (resnet50, mobilenet_v2, bert_layer; OPFUSE_MODELS
# picks a subset): naive, simd + fusion none, and fused + none / basic / advanced / full, at one
# thread and at all cores (naive is single-threaded: once). One `opfuse run --json` file per run
# in OUT_DIR (default reports/models), <model>_<stage>_<fusion>_t<threads>.json, which
# scripts/report.py tabulates; the peers (scripts/bench-peers.sh) run after this script. The
# simd + none and fused + full runs also time every node (--profile): the report explains the
# table from them. OPFUSE_QUICK=1 times one run each, without profiles. OPFUSE_ROUND=K makes this
# round K of several (scripts/bench.sh interleaves rounds of this script and bench-peers.sh so
# that the machine's drift over minutes spreads over every row alike; scripts/merge_rounds.py
# then pools each row's times): files get a .rK suffix, OUT_DIR is not emptied, and only round 1
# profiles.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
OUT_DIR=${2:-reports/models}
quick=${OPFUSE_QUICK:-0}
models=${OPFUSE_MODELS:-"resnet50 mobilenet_v2 bert_layer"}
round=${OPFUSE_ROUND:-}
suffix=""
if [ -n "$round" ]; then suffix=".r$round"; else rm -rf "$OUT_DIR"; fi
mkdir -p "$OUT_DIR"
repeat=${OPFUSE_REPEAT:-20}
cores=$(nproc)
threads="1"
[ "$cores" -gt 1 ] && threads="1 $cores"
run() {  # run MODEL STAGE FUSION THREADS [PROFILE]
  local model=$1 stage=$2 fusion=$3 t=$4 profile=${5:-}
  local reps
  if [ "$quick" -eq 1 ]; then
    reps=(--warmup 0 --repeat 1)
  elif [ "$stage" = naive ]; then
    [ "${round:-1}" = 1 ] || return 0  # the naive row is the same in every round: once
    reps=(--warmup 0 --repeat 3)
  else
    reps=(--warmup 3 --repeat "$repeat")
    [ -n "$profile" ] && [ "${round:-1}" = 1 ] && reps+=(--profile)
  fi
  echo "bench-models: opfuse run $model --stage $stage --fusion $fusion --threads $t ${reps[*]}" >&2
  "$BUILD_DIR/opfuse" run "$model" --stage "$stage" --fusion "$fusion" --threads "$t" "${reps[@]}" --json \
    >"$OUT_DIR/${model}_${stage}_${fusion}_t${t}${suffix}.json"
}
for model in $models; do
  run "$model" naive none 1
  for t in $threads; do
    run "$model" simd none "$t" profile
    for fusion in none basic advanced full; do
      p=""
      [ "$fusion" = full ] && p=profile
      run "$model" fused "$fusion" "$t" $p
    done
  done
done

#!/usr/bin/env bash
# scripts/bench-models.sh [BUILD_DIR] [OUT_DIR] - the whole-model part of the main job: each
# built-in model (resnet50, mobilenet_v2, bert_layer) at each stage, at one thread and at all
# cores (naive is single-threaded: once), one `opfuse run --json` file per run in OUT_DIR
# (default reports/models), which scripts/report.py tabulates. The simd and fused runs also time
# every node (--profile): on its own, and in place in whole runs. OPFUSE_QUICK=1 times one run each.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
OUT_DIR=${2:-reports/models}
quick=${OPFUSE_QUICK:-0}
rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR"
cores=$(nproc)
for model in resnet50 mobilenet_v2 bert_layer; do
  for stage in naive simd fused; do
    threads="1"
    if [ "$stage" != naive ] && [ "$cores" -gt 1 ]; then threads="1 $cores"; fi
    for t in $threads; do
      if [ "$quick" -eq 1 ]; then
        reps=(--warmup 0 --repeat 1)
      elif [ "$stage" = naive ]; then
        reps=(--warmup 0 --repeat 3)
      else
        reps=(--warmup 3 --repeat 20 --profile)
      fi
      echo "bench-models: opfuse run $model --stage $stage --threads $t ${reps[*]}" >&2
      "$BUILD_DIR/opfuse" run "$model" --stage "$stage" --threads "$t" "${reps[@]}" --json \
        >"$OUT_DIR/${model}_${stage}_t${t}.json"
    done
  done
done

#!/usr/bin/env bash
# The main job: install what is missing, build, run the stage-comparison benchmark on the
# built-in default suite (progress on stderr, about 10 minutes or less on 2 cores), run the
# built-in whole models (resnet50, mobilenet_v2, bert_layer) at every stage and fusion level with
# `opfuse run` and next to PyTorch and ONNX Runtime,
# and render reports/: the raw Google Benchmark JSON (bench.json), one JSON per model run
# (models/), REPORT.md and the PNG charts.
# Extra arguments go to opfuse-bench: its own options (--op gemm, --impl simd,fused, --quick,
# --cold-cache, --threads 1, ...) and Google Benchmark's flags (--benchmark_filter=REGEX, ...).
# OPFUSE_REPORT_DIR=DIR writes the JSON and the report there instead of reports/.
# --isa LEVEL (avx2, sse2, avx512) caps opfuse's kernels and both peers to that level
# (opfuse-bench --isa) and writes reports/LEVEL/ by default: the kernel suite only, since the
# whole-model peers (PyTorch, ONNX Runtime) have no such cap.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
BUILD_DIR=${OPFUSE_BUILD_DIR:-build}
quick=0
isa=
prev=
for a in "$@"; do
  [ "$a" = --quick ] && quick=1
  [ "$prev" = --isa ] && isa=$a
  case "$a" in --isa=*) isa=${a#--isa=} ;; esac
  prev=$a
done
REPORT_DIR=${OPFUSE_REPORT_DIR:-reports${isa:+/$isa}}
mkdir -p "$REPORT_DIR"
start=$(date +%s)
"$BUILD_DIR/opfuse-bench" --json "$REPORT_DIR/bench.json" --benchmark_counters_tabular=true "$@"
# Whole models: the fusion table's rows for each built-in model (scripts/bench-models.sh), then
# PyTorch and ONNX Runtime on the same ONNX files in the same run (scripts/bench-peers.sh).
if [ -n "$isa" ]; then
  echo "bench: --isa $isa: the kernel suite only (the whole-model peers cannot be capped)"
elif [ "$quick" -eq 1 ]; then
  OPFUSE_QUICK=1 ./scripts/bench-models.sh "$BUILD_DIR" "$REPORT_DIR/models"
  OPFUSE_QUICK=1 ./scripts/bench-peers.sh "$BUILD_DIR" "$REPORT_DIR/models"
else
  # Interleaved rounds: the machine's drift over minutes then slows every row alike.
  rm -rf "$REPORT_DIR/models"
  for round in 1 2 3; do
    OPFUSE_ROUND=$round OPFUSE_REPEAT=8 ./scripts/bench-models.sh "$BUILD_DIR" "$REPORT_DIR/models"
    OPFUSE_ROUND=$round OPFUSE_REPEAT=5 ./scripts/bench-peers.sh "$BUILD_DIR" "$REPORT_DIR/models"
  done
  python3 scripts/merge_rounds.py "$REPORT_DIR/models"
fi
# Debian's python3 has python3-matplotlib for the charts (a python3 earlier on PATH, such as a
# pyenv shim, may not); without matplotlib the report is still written, without charts.
PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || PYTHON=python3
"$PYTHON" scripts/report.py "$REPORT_DIR/bench.json" "$REPORT_DIR"
echo "bench: $(( $(date +%s) - start )) s; wrote $REPORT_DIR/bench.json and $REPORT_DIR/REPORT.md"

#!/usr/bin/env bash
# The main job: install what is missing, build, run the stage-comparison benchmark on the
# built-in default suite, and render reports/ (raw Google Benchmark JSON + a Markdown report).
# Extra arguments go to opfuse-bench (Google Benchmark flags such as --benchmark_filter=gemm).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
BUILD_DIR=${OPFUSE_BUILD_DIR:-build}
mkdir -p reports
"$BUILD_DIR/opfuse-bench" --benchmark_out=reports/bench.json --benchmark_out_format=json \
  --benchmark_counters_tabular=true "$@"
python3 scripts/report.py reports/bench.json reports/REPORT.md
echo "bench: wrote reports/bench.json and reports/REPORT.md"

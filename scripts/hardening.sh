#!/usr/bin/env bash
# Makes every figure of reports/HARDENING.md, then renders it (issue 19).
#
#   scripts/hardening.sh [--full] [--tsan] [FUZZ_SECONDS]
#
#  1. scripts/sanitize.sh --quick (with --full: the whole suite) under ASan + UBSan + LSan;
#     with --tsan also scripts/sanitize.sh --tsan;
#  2. scripts/fuzz.sh FUZZ_SECONDS (default 300) over the three fuzz targets;
#  3. the concurrency and resource-limit tests of the Release build (build/), as GoogleTest JSON;
#  4. the denormal slow-down per kernel (`opfuse denormals`);
#  5. scripts/hardening_report.py -> reports/HARDENING.md.
# Each step's failure is reported at the end; the report shows what each run found.
set -uo pipefail
cd "$(dirname "$0")/.."
full=0
tsan=0
fuzz_seconds=300
for a in "$@"; do
  case "$a" in
    --full) full=1 ;;
    --tsan) tsan=1 ;;
    [0-9]*) fuzz_seconds=$a ;;
    *) echo "hardening: unknown argument $a" >&2; exit 2 ;;
  esac
done
mkdir -p reports/hardening
failed=()
run() {
  echo
  echo "hardening: $*"
  "$@" || failed+=("$*")
}
if [ "$full" -eq 1 ]; then run ./scripts/sanitize.sh --full; else run ./scripts/sanitize.sh --quick; fi
[ "$tsan" -eq 1 ] && run ./scripts/sanitize.sh --tsan
run ./scripts/fuzz.sh "$fuzz_seconds"
run ./scripts/build.sh
# OPFUSE_LONG_TESTS=1: ResNet-50 too at 4 threads x 100 runs (the suite runs it at 4 x 25).
run env OPFUSE_LONG_TESTS=1 ./build/opfuse_tests --gtest_filter='Concurrency*' --gtest_output=json:reports/hardening/concurrency.json
run ./build/opfuse_tests --gtest_filter='Limits*' --gtest_output=json:reports/hardening/limits.json
run ./build/opfuse denormals --threads 1 --repeats 21 --json reports/hardening/denormals.json
run python3 scripts/hardening_report.py reports
if [ ${#failed[@]} -gt 0 ]; then
  echo
  echo "hardening: failed steps:"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
echo "hardening: all steps passed; reports/HARDENING.md"

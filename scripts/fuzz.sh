#!/usr/bin/env bash
# Fuzzes opfuse with libFuzzer under ASan + UBSan (+ LeakSanitizer).
#
#   scripts/fuzz.sh [SECONDS] [--build DIR] [--target model|tensor|ops]... [--seed N]
#
# SECONDS (default 60) is the total, split evenly over the targets:
#   model   ONNX bytes -> import -> compile -> one run, at a 64 MiB budget (fuzz/fuzz_model.cpp)
#   tensor  one TensorProto file, as `opfuse run --inputs` reads them (fuzz/fuzz_tensor.cpp)
#   ops     the single-op API with hostile descs and post-op chains (fuzz/fuzz_ops.cpp)
# Builds into build-fuzz/ (configured by scripts/clang-asan.sh, shared with sanitize.sh
# --quick): clang-14 (libFuzzer is clang's), ASan + UBSan and coverage instrumentation, and the
# naive stage only: what a file from a stranger reaches - the importer, the graph passes, the
# planner, the executor, the host ops, validation - is all there, the build takes minutes, and
# every input runs the readable reference kernels. (The simd and fused kernels are checked under
# ASan by scripts/sanitize.sh --full.)
# Seed corpora: the built-in models (their graphs with the weights replaced by ConstantOfShape,
# fuzz/make_seeds.cpp), ONNX's conformance models and their input_<i>.pb files (Debian's
# libonnx-testdata), one valid sample per op and stage. The working corpus lives in
# build-fuzz/corpus/<target> and grows across runs.
#
# A crash, a sanitizer report, a leak, a timeout (10 s for one input) or a 2 GiB RSS stops the
# target; its input is written to build-fuzz/findings/<target>/ and the script fails. Fix it,
# then commit the input to fuzz/regressions/<target>/ (ctest fuzz.replay.<target> replays it in
# every build). --seed N fixes libFuzzer's random seed (default: a new one each run): CI passes
# one, so that a red CI replays the same mutations on any machine and fails on a bug, not on the
# luck of the draw; the exploring runs (scripts/hardening.sh, a bare fuzz.sh) keep random seeds.
# The figures (executions, corpus size, coverage, findings per target) go to
# reports/hardening/fuzz.json for reports/HARDENING.md.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=60
build=build-fuzz
targets=()
seed_arg=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift ;;
    --target) targets+=("$2"); shift ;;
    --seed) seed_arg=("-seed=$2"); shift ;;
    [0-9]*) seconds=$1 ;;
    *) echo "fuzz: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ ${#targets[@]} -gt 0 ] || targets=(model tensor ops)
# shellcheck source=scripts/clang-asan.sh
. scripts/clang-asan.sh
configure_clang_asan "$build"
bins=(opfuse_fuzz_seeds)
for t in "${targets[@]}"; do bins+=("opfuse_fuzz_$t"); done
cmake --build "$build" -j "$(nproc)" --target "${bins[@]}"

# Seeds, once per build folder.
seeds=$build/seeds
if [ ! -d "$seeds/model" ]; then
  ./"$build"/fuzz/opfuse_fuzz_seeds "$seeds"
  data=/usr/share/libonnx-testdata/data
  if [ -d "$data" ]; then
    # Conformance models and inputs: names made unique by their test folder.
    find "$data" -name model.onnx -size -256k | while read -r f; do
      cp "$f" "$seeds/model/$(basename "$(dirname "$f")").onnx"
    done
    find "$data" -name 'input_*.pb' -size -64k | head -n 3000 | while read -r f; do
      cp "$f" "$seeds/tensor/$(basename "$(dirname "$(dirname "$f")")")_$(basename "$(dirname "$f")")_$(basename "$f")"
    done
  else
    echo "fuzz: $data is missing (libonnx-testdata): seeding with the built-in models only"
  fi
fi

export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$(pwd)/scripts/lsan.supp:print_suppressions=0
per=$(( seconds / ${#targets[@]} ))
[ "$per" -ge 1 ] || per=1
failed=0
summary=()
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t
  findings=$build/findings/$t
  mkdir -p "$corpus" "$findings"
  log=$build/fuzz-$t.log
  echo "fuzz: $t for $per s (corpus $corpus, seeds $seeds/$t)"
  set +e
  # -fork=0 and one job: two cores are all there is; -rss_limit_mb bounds what one input may
  # allocate (the library's budgets must refuse far earlier), -timeout catches hangs.
  ./"$build"/fuzz/opfuse_fuzz_"$t" "$corpus" "$seeds/$t" -max_total_time="$per" -timeout=10 -rss_limit_mb=2048 \
    -max_len=$([ "$t" = model ] && echo 262144 || echo 65536) -artifact_prefix="$findings/" \
    -print_final_stats=1 "${seed_arg[@]}" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n 1 | grep -Eo '[0-9]+' || echo 0)
  ft=$(grep -Eo 'ft: [0-9]+' "$log" | tail -n 1 | grep -Eo '[0-9]+' || echo 0)
  size=$(find "$corpus" -type f | wc -l)
  found=$(find "$findings" -type f | wc -l)
  echo "fuzz: $t exit $rc: $execs executions, coverage $cov edges / $ft features, corpus $size inputs, findings $found"
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    failed=1
    grep -E 'ERROR|SUMMARY|==[0-9]+==' "$log" | head -n 20
    echo "fuzz: $t: see $log and $findings/"
  fi
  summary+=("{\"target\": \"$t\", \"seconds\": $per, \"exit\": $rc, \"executions\": $execs, \"coverage_edges\": $cov, \"features\": $ft, \"corpus_inputs\": $size, \"findings\": $found}")
done
mkdir -p reports/hardening
{
  echo "{\"stages\": \"naive only\", \"compiler\": \"clang-14\", \"date\": \"$(date -u '+%Y-%m-%d %H:%M UTC')\", \"total_seconds\": $seconds,"
  echo " \"regressions\": {\"model\": $(find fuzz/regressions/model -type f ! -name README.md ! -name ".*" | wc -l), \"tensor\": $(find fuzz/regressions/tensor -type f ! -name README.md ! -name ".*" | wc -l), \"ops\": $(find fuzz/regressions/ops -type f ! -name README.md ! -name ".*" | wc -l)},"
  echo " \"targets\": [$(IFS=,; echo "${summary[*]}")]}"
} >reports/hardening/fuzz.json
exit "$failed"

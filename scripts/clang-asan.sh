# scripts/clang-asan.sh - sourced by scripts/fuzz.sh and scripts/sanitize.sh --quick: the one
# configuration of their shared build folder (build-fuzz/ by default), so that CI compiles the
# library under ASan once and both use it.
#
# clang-14 (libFuzzer is clang's), ASan + UBSan (LeakSanitizer at exit), libFuzzer's coverage
# instrumentation on everything, -O1 -g, and the naive stage only (OPFUSE_SIMD_ISAS empty):
# what a file from a stranger reaches - the importer, the graph passes, the planner, the
# executor, the host ops, validation, the CLI - is all there and builds in minutes; the simd and
# fused kernels are checked under ASan by scripts/sanitize.sh --full (g++; Debian 12's clang-14
# lacks a few C++20 constructs they use). The tests and the CLI are configured too; each script
# builds only the targets it runs.

# configure_clang_asan DIR: configures DIR (again, if it exists: a reconfigure takes seconds).
configure_clang_asan() {
  local dir=$1 tool
  for tool in clang-14 clang++-14; do
    command -v "$tool" >/dev/null || { echo "$tool is missing (scripts/setup.sh installs clang-14)" >&2; return 1; }
  done
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_C_FLAGS_SANITIZE="-O1 -g" -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -g" \
    -DOPFUSE_SANITIZE=ON -DOPFUSE_FUZZ=ON -DOPFUSE_SIMD_ISAS="" -DOPFUSE_BUILD_TESTS=ON \
    -DOPFUSE_BUILD_TOOLS=ON -DOPFUSE_BUILD_BENCH=OFF -DOPFUSE_BUILD_PYTHON=OFF >/dev/null
}

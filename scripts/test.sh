#!/usr/bin/env bash
# Builds opfuse and runs the whole test suite (GoogleTest under CTest, plus CLI checks).
# Extra arguments go to the cmake configure step (e.g. -DOPFUSE_SANITIZE=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh "$@"
BUILD_DIR=${OPFUSE_BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)"

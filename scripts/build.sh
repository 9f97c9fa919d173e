#!/usr/bin/env bash
# Installs what is missing, then configures and builds opfuse (Release) into build/.
# Extra arguments go to cmake's configure step, e.g. -DOPFUSE_SANITIZE=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
./scripts/setup.sh
setup_done=$(date +%s)
BUILD_DIR=${OPFUSE_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
echo "build: setup $(( setup_done - start )) s, configure + build $(( $(date +%s) - setup_done )) s ($(nproc) cores)"

#!/usr/bin/env bash
# Installs what opfuse needs to build, test and benchmark, from Debian 12 packages only.
# As root it runs apt-get; otherwise it prints the exact command to run and fails.
set -euo pipefail

PACKAGES=(
  g++ cmake ninja-build            # toolchain (CMake >= 3.25, C++20)
  libdnnl-dev                      # oneDNN: peer kernels and the reference for the naive stage
  libxsimd-dev                     # xsimd: the simd stage
  libeigen3-dev                    # Eigen: peer kernels
  libgtest-dev                     # GoogleTest
  libbenchmark-dev                 # Google Benchmark: opfuse-bench
  libcli11-dev nlohmann-json3-dev libfmt-dev   # CLI arguments, JSON, formatting
  python3 python3-matplotlib       # report rendering and its charts
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: missing packages: ${missing[*]}" >&2
  echo "setup: run this once, then retry:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

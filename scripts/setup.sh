#!/usr/bin/env bash
# Installs what opfuse needs from Debian 12 packages only. As root it runs apt-get; otherwise it
# prints the exact command to run and fails.
#
#   scripts/setup.sh             everything: the library, the CLI, the tests, the benchmark, the report
#   scripts/setup.sh --minimal   only what the library alone needs (-DOPFUSE_BUILD_TOOLS=OFF
#                                -DOPFUSE_BUILD_TESTS=OFF -DOPFUSE_BUILD_BENCH=OFF -DOPFUSE_BUILD_PYTHON=OFF)
#   scripts/setup.sh --list [--minimal]   print the package list, one a line, install nothing
#
# The lists below are the only place the project names its packages: scripts/fresh-check.sh
# installs from them on a bare Debian 12 root, and scripts/check-setup-deps.sh (run by CI) fails
# when the configure step uses a file from a package that is neither listed here nor pulled in
# by a listed package's Depends. Debian's Recommends are not installed (--no-install-recommends),
# so a package that a dependency only recommends must be listed by name.
set -euo pipefail

MINIMAL=(
  g++ cmake ninja-build            # toolchain (CMake >= 3.25, C++20); OpenMP is g++'s libgomp
  libxsimd-dev                     # xsimd: the simd and fused stages
  libfmt-dev                       # formatting of status messages
  libonnx-dev libprotobuf-dev      # ONNX import: the generated protobuf classes, checker, shape
  protobuf-compiler                # inference (ONNX's CMake package needs protobuf's, whose
                                   # find module looks for protoc too)
)
FULL=(
  "${MINIMAL[@]}"
  libdnnl-dev                      # oneDNN: peer kernels and the reference for the naive stage
  ocl-icd-opencl-dev               # oneDNN's CMake package calls find_package(OpenCL); Debian
                                   # only recommends it, and --no-install-recommends skips it
  libeigen3-dev                    # Eigen: peer kernels
  libgtest-dev libgmock-dev        # GoogleTest (GTest's CMake package also loads GMock's targets)
  libbenchmark-dev                 # Google Benchmark: opfuse-bench
  libcli11-dev nlohmann-json3-dev  # CLI arguments, JSON
  python3 python3-matplotlib       # report rendering and its charts
  qemu-user                        # the tests run on emulated CPUs without AVX-512 (Haswell, Nehalem)
  libonnx-testdata                 # ONNX's backend test models and data: the conformance tests
  python3-torch python3-torchvision  # PyTorch: a whole-model peer (scripts/bench-peers.sh)
  python3-onnx                     # the PyTorch peer reads the model's weights from the ONNX file
  libopenblas0-openmp              # PyTorch's BLAS (Debian's default libblas3 is the reference one)
  graphviz                         # `opfuse run --dot` renders the fused graph to SVG with dot
  pybind11-dev python3-dev         # the Python module (python/): pybind11 and Python's headers
  python3-numpy python3-pytest     # its arrays and its tests
  doxygen                          # the API documentation (docs/Doxyfile), built by the tests
  pkg-config                       # the examples' build against the installed opfuse.pc
  clang-14 libclang-rt-14-dev      # scripts/sanitize.sh and scripts/fuzz.sh: ASan, UBSan, libFuzzer
  libomp-14-dev                    # clang's OpenMP runtime for that build
)

minimal=0
list=0
for a in "$@"; do
  case "$a" in
    --minimal) minimal=1 ;;
    --list) list=1 ;;
    *) echo "setup: unknown argument $a (use --minimal, --list)" >&2; exit 2 ;;
  esac
done
if [ "$minimal" -eq 1 ]; then PACKAGES=("${MINIMAL[@]}"); else PACKAGES=("${FULL[@]}"); fi
if [ "$list" -eq 1 ]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

# ONNX Runtime, the other whole-model peer, comes from the npm registry (scripts/peers, after
# the Debian packages); Node.js and npm come from Debian unless the machine already has an npm.
if [ "$minimal" -eq 0 ] && ! command -v npm >/dev/null 2>&1; then PACKAGES+=(nodejs npm); fi
install_peers() {
  [ "$minimal" -eq 0 ] || return 0
  [ -d "$(dirname "$0")/peers/node_modules/onnxruntime-node" ] && return 0
  # Its install script only fetches optional GPU libraries. Without a network it is skipped.
  (cd "$(dirname "$0")/peers" && npm ci --ignore-scripts) ||
    echo "setup: warning: npm ci in scripts/peers failed; the ONNX Runtime peer will be skipped" >&2
}

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  install_peers
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  install_peers
else
  echo "setup: missing packages: ${missing[*]}" >&2
  echo "setup: run this once, then retry:" >&2
  echo "  sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

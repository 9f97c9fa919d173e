#!/bin/sh
# tests/install_examples.sh BUILD_DIR SOURCE_DIR WORK_DIR [CMAKE] [CC] [PYTHON]
#
# What a new user does with a build of opfuse (ctest: install.examples): install it to a
# prefix, build examples/ out of the tree against that prefix - once with CMake's
# find_package(opfuse), once with pkg-config - and run the programs on a built-in model:
#   - classify_c and classify_cpp print five top outputs and exit 0, and agree with each other
#     (the same generated input, so the same top-5);
#   - classify_c on a model file that does not exist exits non-zero with an error message;
#   - when the build made the Python module, PYTHON imports it from the prefix (not from the
#     build tree) and runs resnet50 and an error path, as the issue's one-liner does.
# WORK_DIR is removed first and, when everything passed, again at the end.
set -u
BUILD=$1
SRC=$2
W=$3
CMAKE=${4:-cmake}
CC=${5:-cc}
PYTHON=${6:-python3}
PREFIX=$W/prefix
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
step() { echo "== $*"; }

rm -rf "$W"
mkdir -p "$W"

step "install $BUILD to $PREFIX"
if ! "$CMAKE" --install "$BUILD" --prefix "$PREFIX" >"$W/install.log" 2>&1; then
  cat "$W/install.log"
  echo "FAIL: cmake --install"
  exit 1
fi

step "configure and build examples/ against the prefix (find_package)"
GEN=""
command -v ninja >/dev/null 2>&1 && GEN="-G Ninja"
# shellcheck disable=SC2086 # GEN is empty or two words
if ! "$CMAKE" -S "$SRC/examples" -B "$W/build" $GEN -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" \
  >"$W/configure.log" 2>&1; then
  cat "$W/configure.log"
  echo "FAIL: configuring examples/ against $PREFIX"
  exit 1
fi
if ! "$CMAKE" --build "$W/build" -j 2 >"$W/build.log" 2>&1; then
  cat "$W/build.log"
  echo "FAIL: building examples/ against $PREFIX"
  exit 1
fi

# run NAME EXPECTED_EXIT CMD...: runs CMD into $W/NAME.out and checks its exit code.
run() {
  name=$1
  want=$2
  shift 2
  "$@" >"$W/$name.out" 2>&1
  got=$?
  # A failure the program reports is a small exit code; a crash (128 + signal) is no answer.
  if [ "$want" = 0 ]; then
    [ "$got" -eq 0 ] && ok=1 || ok=0
    expected=0
  else
    [ "$got" -gt 0 ] && [ "$got" -lt 128 ] && ok=1 || ok=0
    expected="1 to 127"
  fi
  if [ "$ok" -ne 1 ]; then
    fail "$name: exit $got (expected $expected): $*"
    cat "$W/$name.out"
    return 1
  fi
  echo "ok (exit $got): $*"
  return 0
}

# top5 NAME: the program printed exactly five "  N: index I  score S" lines.
top5() {
  n=$(grep -c '^ *[1-5]: index [0-9][0-9]* *score ' "$W/$1.out")
  if [ "$n" -ne 5 ]; then
    fail "$1 printed $n top outputs, expected 5"
    cat "$W/$1.out"
    return 1
  fi
  sed -n '/^top-5/,$p' "$W/$1.out" | sed 's/^/    /'
  grep '^ *[1-5]: index ' "$W/$1.out" >"$W/$1.top5"
}

step "run the examples (find_package build)"
run classify_c 0 "$W/build/classify_c" --threads 1 mobilenet_v2 && top5 classify_c
run classify_cpp 0 "$W/build/classify_cpp" --threads 1 mobilenet_v2 && top5 classify_cpp
if [ -f "$W/classify_c.top5" ] && [ -f "$W/classify_cpp.top5" ]; then
  cmp -s "$W/classify_c.top5" "$W/classify_cpp.top5" || fail "the C and C++ examples disagree on the top-5:
$(cat "$W/classify_c.top5")
---
$(cat "$W/classify_cpp.top5")"
fi
if run classify_c_missing 1 "$W/build/classify_c" --threads 1 "$W/no_such_model.onnx"; then
  grep -q "no_such_model.onnx" "$W/classify_c_missing.out" || {
    fail "classify_c on a missing file did not name it"
    cat "$W/classify_c_missing.out"
  }
  sed 's/^/    /' "$W/classify_c_missing.out"
fi
if run classify_cpp_missing 1 "$W/build/classify_cpp" --threads 1 "$W/no_such_model.onnx"; then
  grep -q "no_such_model.onnx" "$W/classify_cpp_missing.out" || fail "classify_cpp on a missing file did not name it"
fi

step "run the examples on input files (.pb with raw_data, .pb with float_data, .raw)"
if command -v python3 >/dev/null 2>&1; then
  # The same numbers three ways; a TensorProto written by hand (wire format: a varint key
  # field << 3 | type, then a varint or a length and bytes): dims (1), data_type (2), name (8),
  # float_data (4, packed) or raw_data (9).
  python3 - "$W" <<'EOF_PY'
import struct, sys
w = sys.argv[1]
dims = [1, 3, 224, 224]
n = 3 * 224 * 224
raw = struct.pack("<%df" % n, *[((i * 7919) % 1000) / 500.0 - 1.0 for i in range(n)])
def varint(v):
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)
def key(field, wire):
    return varint(field << 3 | wire)
head = b"".join(key(1, 0) + varint(d) for d in dims) + key(2, 0) + varint(1) + key(8, 2) + varint(5) + b"input"
open(w + "/input.pb", "wb").write(head + key(9, 2) + varint(len(raw)) + raw)
open(w + "/input_floats.pb", "wb").write(head + key(4, 2) + varint(len(raw)) + raw)
open(w + "/input.raw", "wb").write(raw)
EOF_PY
  run classify_c_pb 0 "$W/build/classify_c" --threads 1 mobilenet_v2 "$W/input.pb" && top5 classify_c_pb
  run classify_c_floats 0 "$W/build/classify_c" --threads 1 mobilenet_v2 "$W/input_floats.pb" && top5 classify_c_floats
  run classify_c_raw 0 "$W/build/classify_c" --threads 1 mobilenet_v2 "$W/input.raw" && top5 classify_c_raw
  run classify_cpp_pb 0 "$W/build/classify_cpp" --threads 1 mobilenet_v2 "$W/input.pb" && top5 classify_cpp_pb
  run classify_cpp_raw 0 "$W/build/classify_cpp" --threads 1 mobilenet_v2 "$W/input.raw" && top5 classify_cpp_raw
  for name in classify_c_pb classify_c_floats classify_c_raw classify_cpp_pb classify_cpp_raw; do
    grep -q "^input: $W/input" "$W/$name.out" || fail "$name did not read its input file"
    [ -f "$W/$name.top5" ] && [ -f "$W/classify_c_pb.top5" ] && ! cmp -s "$W/$name.top5" "$W/classify_c_pb.top5" &&
      fail "$name disagrees with classify_c_pb on the top-5"
  done
  # A raw file of the wrong size is refused with both sizes named.
  head -c 1000 "$W/input.raw" >"$W/short.raw"
  run classify_c_short 1 "$W/build/classify_c" --threads 1 mobilenet_v2 "$W/short.raw" &&
    sed 's/^/    /' "$W/classify_c_short.out"
else
  echo "SKIPPED: python3 is not installed (it writes the input files)"
fi

step "build classify.c with pkg-config"
PC=$(find "$PREFIX" -name opfuse.pc 2>/dev/null | head -n 1)
if ! command -v pkg-config >/dev/null 2>&1; then
  echo "SKIPPED: pkg-config is not installed"
elif [ -z "$PC" ]; then
  echo "SKIPPED: the install has no opfuse.pc"
else
  export PKG_CONFIG_PATH="$(dirname "$PC")"
  libdir=$(pkg-config --variable=libdir opfuse)
  # The shared library when it is installed (found at run time through the rpath); the
  # archive and its private dependencies otherwise.
  static=""
  ls "$libdir"/libopfuse.so* >/dev/null 2>&1 || static="--static"
  # shellcheck disable=SC2046 # pkg-config's output is a list of flags
  if "$CC" -std=c99 -Wall -Wextra -o "$W/classify_c_pc" "$SRC/examples/classify.c" \
    $(pkg-config $static --cflags --libs opfuse) -Wl,-rpath,"$libdir" >"$W/pkgconfig.log" 2>&1; then
    echo "ok: $CC classify.c \$(pkg-config $static --cflags --libs opfuse) [$(pkg-config $static --cflags --libs opfuse)]"
    run classify_c_pc 0 "$W/classify_c_pc" --threads 1 mobilenet_v2 && top5 classify_c_pc &&
      { cmp -s "$W/classify_c.top5" "$W/classify_c_pc.top5" || fail "the pkg-config build disagrees on the top-5"; }
  else
    cat "$W/pkgconfig.log"
    fail "building classify.c with pkg-config ($PC)"
  fi
fi

step "import the installed Python module"
PYMOD=$(find "$PREFIX" -name 'opfuse*.so' -path '*-packages/*' 2>/dev/null | head -n 1)
if [ -z "$PYMOD" ]; then
  echo "SKIPPED: the build has no Python module (pybind11-dev or python3-dev missing, or OPFUSE_BUILD_PYTHON=OFF)"
elif ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "SKIPPED: $PYTHON is not installed"
else
  # -I: isolated mode, so neither the current directory nor PYTHONPATH from the caller (ctest's
  # python.pytest points it at build/python) can supply the module; only the prefix's folder.
  run python_import 0 "$PYTHON" -I -c "
import sys; sys.path.insert(0, '$(dirname "$PYMOD")')
import numpy as np, opfuse
assert opfuse.__file__.startswith('$PREFIX'), opfuse.__file__
s = opfuse.Session('resnet50', threads=1)
x = np.random.default_rng(0).random(s.inputs[0].shape, dtype=np.float32)
y = s.run({s.inputs[0].name: x})[s.outputs[0].name]
assert y.shape == (1, 1000) and np.isfinite(y).all(), y.shape
print('imported', opfuse.__file__, 'version', opfuse.__version__)
print('resnet50 output', y.shape, 'top-1 index', int(y.argmax()))
try:
    opfuse.Session('$W/no_such_model.onnx')
    sys.exit('a missing model file raised nothing')
except opfuse.Error as e:
    print('missing file:', e)
" && sed 's/^/    /' "$W/python_import.out"
fi

if [ "$fails" -ne 0 ]; then
  echo "$fails failure(s); the work directory is kept: $W"
  exit 1
fi
# OPFUSE_KEEP_WORK=1 keeps the prefix and the builds for a look.
[ -n "${OPFUSE_KEEP_WORK:-}" ] || rm -rf "$W"
echo "all passed"

#!/bin/sh
# tests/bench_isa.sh OPFUSE_BENCH WORKDIR [QEMU] - opfuse-bench --isa: a level that is not one, or
# one above the CPU (checked on an emulated AVX2 CPU when QEMU is given), exits 2 with a message;
# a lower level caps opfuse's kernels, oneDNN and Eigen alike, and the JSON says so. Run by CTest
# (bench.isa_cap).
set -u
B=$1
W=$2
QEMU=${3:-}
mkdir -p "$W"
fails=0
expect() {
  want=$1
  msg=$2
  shift 2
  "$@" >"$W/out.txt" 2>&1
  got=$?
  if [ "$got" -ne "$want" ] || ! grep -q "$msg" "$W/out.txt"; then
    echo "FAIL: exit $got (expected $want), output without '$msg': $*"
    cat "$W/out.txt"
    fails=$((fails + 1))
  else
    echo "ok (exit $want, '$msg'): $*"
  fi
}
expect 2 "is not a level" "$B" --isa avx1 --benchmark_list_tests
expect 2 "is not a level" "$B" --isa scalar --benchmark_list_tests
if [ -n "$QEMU" ]; then
  expect 2 "is above this CPU, which runs at most avx2" "$QEMU" -cpu Haswell "$B" --isa avx512 --benchmark_list_tests
fi
# One GEMM per impl at the SSE2 level (every x86-64 CPU has it): the kernels picked and the levels
# oneDNN and Eigen ran at are in the JSON context.
expect 0 "runs in" "$B" --isa sse2 --quick --op gemm --impl simd,fused,onednn,eigen --threads 1 \
  --benchmark_filter='^gemm/[a-z]+/64x256x128' --benchmark_min_time=0.001 --json "$W/isa.json"
python3 - "$W/isa.json" <<'PY' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
c = d["context"]
want = {"opfuse_isa_cap": "sse2", "opfuse_simd_isa": "sse2", "onednn_isa": "sse41", "eigen_isa": "sse2",
        "roofline.peer_isa": "sse2"}
bad = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
kernels = {b.get("label", "") for b in d["benchmarks"]}
bad.update({k: "not an sse2 kernel" for k in kernels if "__simd_" in k or "__fused_" in k if "_sse2" not in k})
print("ok: context and kernels at sse2" if not bad else f"FAIL: {bad}")
sys.exit(1 if bad else 0)
PY
[ "$fails" -eq 0 ] && echo "bench --isa: all ok" || echo "bench --isa: $fails failures"
[ "$fails" -eq 0 ]

#!/usr/bin/env bash
# Runs the whole test suite on emulated CPUs without AVX-512 (Debian's qemu-user), as a user
# with such a CPU runs it: every GoogleTest test, then `opfuse check` of every stage.
#
#   scripts/emulated-tests.sh [CPU...]    default: Haswell (AVX2 + FMA) Nehalem (SSE4.2, no AVX)
#
# Uses the binaries in ${OPFUSE_BUILD_DIR:-build} (run scripts/test.sh or scripts/build.sh first).
# Prints, per CPU, the pass / fail / skip counts and the skips grouped by reason, and fails if
# any test fails. At emulation speed: about 10-30 minutes per CPU on 2 cores. CTest runs a
# representative part of this on every run (the qemu.* tests, CMakeLists.txt).
#
# OPFUSE_EXPECT_CPU_ISA makes Isa.CpuLevelIsTheOneThisRunExpects fail unless cpu_isa() sees the
# emulated level. oneDNN, the naive stage's reference, is capped at AVX: QEMU 7.2 miscomputes
# its AVX2 JIT tanh (outputs above 1; the same code is right on real AVX2 CPUs).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${OPFUSE_BUILD_DIR:-build}
QEMU=$(command -v qemu-x86_64 || true)
if [ -z "$QEMU" ]; then
  echo "emulated-tests: qemu-x86_64 not found (scripts/setup.sh installs qemu-user)" >&2
  exit 2
fi
for b in opfuse_tests opfuse; do
  [ -x "$BUILD_DIR/$b" ] || { echo "emulated-tests: $BUILD_DIR/$b not built (run scripts/build.sh)" >&2; exit 2; }
done
cpus=("$@")
[ ${#cpus[@]} -gt 0 ] || cpus=(Haswell Nehalem)
PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || PYTHON=python3
log_dir=$(mktemp -d /tmp/opfuse-emulated.XXXXXX)
status=0
for cpu in "${cpus[@]}"; do
  case "$cpu" in
    Haswell | Broadwell | Skylake-Client | EPYC | EPYC-Rome | EPYC-Milan) level=avx2 ;;
    Nehalem | Westmere | Penryn | Conroe | core2duo | qemu64) level=sse2 ;;
    *) level="" ;;
  esac
  log="$log_dir/$cpu.log"
  echo "emulated-tests: $cpu (expects cpu_isa ${level:-unchecked}), log $log"
  start=$(date +%s)
  set +e
  env OPFUSE_EXPECT_CPU_ISA="$level" ONEDNN_MAX_CPU_ISA=AVX "$QEMU" -cpu "$cpu" "$BUILD_DIR/opfuse_tests" \
    >"$log" 2>&1
  rc=$?
  for stage in naive simd fused; do
    env ONEDNN_MAX_CPU_ISA=AVX "$QEMU" -cpu "$cpu" "$BUILD_DIR/opfuse" check --stage $stage --seed 11 \
      >"$log_dir/$cpu.check_$stage.log" 2>&1
    crc=$?
    echo "  opfuse check --stage $stage: exit $crc, $(tail -n 1 "$log_dir/$cpu.check_$stage.log")"
    [ "$crc" -eq 0 ] || rc=1
  done
  set -e
  summary_rc=0
  "$PYTHON" - "$log" "$cpu" "$(( $(date +%s) - start ))" <<'EOF' || summary_rc=$?
import re, sys, collections
log, cpu, secs = sys.argv[1], sys.argv[2], sys.argv[3]
lines = open(log, errors="replace").read().splitlines()
ok = sum(1 for l in lines if l.startswith("[       OK ]"))
failed = sorted({l.split("]", 1)[1].split(",")[0].strip().split(" (")[0] for l in lines if l.startswith("[  FAILED  ]") and "listed below" not in l and " ms)" in l})
skipped = sum(1 for l in lines if l.startswith("[  SKIPPED ]") and " ms)" in l)
reasons = collections.Counter()
for i, l in enumerate(lines):
    if l.endswith(": Skipped") and i + 1 < len(lines):
        why = re.sub(r"^\S+__\S+ needs", "<kernel> needs", lines[i + 1])
        reasons[why] += 1
crashed = not any(l.startswith("[==========]") and "ran." in l for l in lines)
print(f"  {cpu}: {ok} passed, {len(failed)} failed, {skipped} skipped ({secs} s)" + ("  CRASHED" if crashed else ""))
for why, n in reasons.most_common():
    print(f"    skipped {n:4d}: {why}")
for f in failed:
    print(f"    FAILED: {f}")
sys.exit(1 if failed or crashed else 0)
EOF
  [ "$summary_rc" -eq 0 ] && [ "$rc" -eq 0 ] || status=1
done
exit $status

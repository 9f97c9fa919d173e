#!/usr/bin/env bash
# Proves the README's set-up on a bare Debian 12 root, as a new user meets it.
#
#   sudo scripts/fresh-check.sh [--full] [--keep] [DIR]
#
# 1. builds a minimal Debian 12 root from Debian's packages (mmdebstrap --variant=apt bookworm:
#    apt and the Essential packages, nothing else) in DIR (default: a new folder under /tmp);
# 2. copies a clean `git archive` of HEAD into it (uncommitted changes are not part of the check);
# 3. in a chroot there, runs
#    a. the minimal library build (-DOPFUSE_BUILD_TOOLS=OFF -DOPFUSE_BUILD_TESTS=OFF
#       -DOPFUSE_BUILD_BENCH=OFF) with only the packages `scripts/setup.sh --minimal` installs,
#    b. the README's main job, `./scripts/bench.sh --quick` (`--full`: the whole default suite),
#    c. the README's test command, `./scripts/test.sh`,
#    d. the rest of CI (.ci/run): `scripts/sanitize.sh --quick` and half a minute of fuzzing,
#    printing each command's exit status and duration. It fails if any of them fails.
# Needs root (mmdebstrap, chroot, mounts) and Debian's package mirror; installs mmdebstrap on the
# host if it is missing. About 30 minutes on 2 cores: most of it is the first builds and the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$(pwd)

full=0
keep=0
root=""
for a in "$@"; do
  case "$a" in
    --full) full=1 ;;
    --keep) keep=1 ;;
    -*) echo "fresh-check: unknown option $a" >&2; exit 2 ;;
    *) root=$a ;;
  esac
done
if [ "$(id -u)" -ne 0 ]; then
  echo "fresh-check: needs root (mmdebstrap, chroot and mounts); run it with sudo" >&2
  exit 2
fi
if ! command -v mmdebstrap >/dev/null; then
  echo "fresh-check: installing mmdebstrap on the host"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi
[ -n "$root" ] || root=$(mktemp -d /tmp/opfuse-fresh.XXXXXX)
mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
  if [ "$keep" -eq 0 ]; then rm -rf "$root"; else echo "fresh-check: kept $root"; fi
}
trap cleanup EXIT

t0=$(date +%s)
echo "fresh-check: mmdebstrap --variant=apt bookworm $root"
rm -rf "$root" && mkdir -p "$root"
mmdebstrap --quiet --variant=apt bookworm "$root"
bare_pkgs=$(chroot "$root" dpkg-query -W | wc -l)
echo "fresh-check: Debian 12 root ready in $(( $(date +%s) - t0 )) s ($bare_pkgs packages)"
mkdir -p "$root/opfuse"
git archive --format=tar HEAD | tar -x -C "$root/opfuse"
echo "fresh-check: git archive of $(git rev-parse --short HEAD) in /opfuse"
cp /etc/resolv.conf "$root/etc/resolv.conf"
for m in proc sys dev dev/pts; do
  mkdir -p "$root/$m"
  case $m in
    proc) mount -t proc proc "$root/proc" ;;
    sys) mount -t sysfs sys "$root/sys" ;;
    *) mount --bind "/$m" "$root/$m" ;;
  esac
  mounted+=("$root/$m")
done

# Runs one command in the chroot with a clean environment; records its status and duration.
results=()
failed=0
step() {
  local name=$1 cmd=$2 start rc
  echo
  echo "fresh-check: [$name] $cmd"
  start=$(date +%s)
  set +e
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb \
    /bin/bash -c "cd /opfuse && $cmd"
  rc=$?
  set -e
  local secs=$(( $(date +%s) - start ))
  results+=("$(printf '%-34s exit %-3s %4d s' "$name" "$rc" "$secs")")
  echo "fresh-check: [$name] exit $rc after ${secs} s"
  [ "$rc" -eq 0 ] || failed=1
}

step "minimal library build" \
  "./scripts/setup.sh --minimal && cmake -S . -B build-minimal -G Ninja -DCMAKE_BUILD_TYPE=Release \
   -DOPFUSE_BUILD_TOOLS=OFF -DOPFUSE_BUILD_TESTS=OFF -DOPFUSE_BUILD_BENCH=OFF -DOPFUSE_BUILD_PYTHON=OFF >/dev/null \
   && cmake --build build-minimal -j \$(nproc) && ls -l build-minimal/libopfuse.a"
if [ "$full" -eq 1 ]; then
  step "main job: ./scripts/bench.sh" "./scripts/bench.sh"
else
  step "main job: ./scripts/bench.sh --quick" "./scripts/bench.sh --quick"
fi
step "tests: ./scripts/test.sh" "./scripts/test.sh"
# The rest of .ci/run: clang-14, its sanitizer runtimes and libFuzzer come from setup.sh too.
step "CI's ASan steps: sanitize.sh --quick, fuzz.sh 30 --seed 1" "./scripts/sanitize.sh --quick && ./scripts/fuzz.sh 30 --seed 1"

echo
echo "fresh-check: packages in the root: $(chroot "$root" dpkg-query -W | wc -l) (bare: $bare_pkgs)"
echo "fresh-check summary ($(git rev-parse --short HEAD), Debian 12 root, $(nproc) cores, $(( $(date +%s) - t0 )) s in all):"
printf '  %s\n' "${results[@]}"
if [ "$failed" -ne 0 ]; then
  echo "fresh-check: FAILED"
  exit 1
fi
echo "fresh-check: passed"

#!/usr/bin/env bash
# The symbols libopfuse.so exports, checked against the committed list (abi/exported-symbols.txt).
#
#   scripts/check_exports.sh build/libopfuse.so            compare; exit 1 on any difference
#   scripts/check_exports.sh build/libopfuse.so --update   rewrite the committed list
#
# The list holds the strong (non-weak) defined dynamic symbols, demangled: the C API and the
# C++ API the public headers mark OPFUSE_API. Weak symbols (inline functions and template
# instances the compiler chose to emit, e.g. std::vector<opfuse::ValueInfo> members) vary with
# the compiler's inlining and are not part of the contract, but they must still belong to the
# API's own types: a weak symbol that names none of opfuse's is reported as a leak.
set -euo pipefail
lib=${1:?usage: check_exports.sh LIBRARY [--update]}
list="$(dirname "$0")/../abi/exported-symbols.txt"
current=$(nm -D --defined-only --extern-only "$lib" | awk '$2 !~ /^[VWvwu]$/ {print $3}' | c++filt | LC_ALL=C sort -u)
weak_foreign=$(nm -D --defined-only --extern-only "$lib" | awk '$2 ~ /^[VWvwu]$/ {print $3}' | c++filt |
  grep -v 'opfuse' | LC_ALL=C sort -u || true)
if [ "${2:-}" = "--update" ]; then
  printf '%s\n' "$current" > "$list"
  echo "check_exports: wrote $(wc -l < "$list") symbols to $list"
  exit 0
fi
status=0
if ! diff -u "$list" <(printf '%s\n' "$current") > /tmp/check_exports.$$.diff; then
  echo "check_exports: $lib exports a different API than abi/exported-symbols.txt:" >&2
  cat /tmp/check_exports.$$.diff >&2
  echo "(if the change is intended: scripts/check_exports.sh $lib --update, and say so in CHANGELOG.md)" >&2
  status=1
fi
rm -f /tmp/check_exports.$$.diff
if [ -n "$weak_foreign" ]; then
  echo "check_exports: weak symbols that are none of opfuse's (a dependency leaking through):" >&2
  printf '%s\n' "$weak_foreign" | head -20 >&2
  status=1
fi
[ "$status" -eq 0 ] && echo "check_exports: $(printf '%s\n' "$current" | wc -l) exported symbols match abi/exported-symbols.txt"
exit "$status"

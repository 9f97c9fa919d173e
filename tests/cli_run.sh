#!/bin/sh
# tests/cli_run.sh OPFUSE WORKDIR - `opfuse run`'s exit codes and JSON, as a script sees them:
# 0 ok, 1 a --check mismatch, 2 an invalid model or input (or over the memory budget),
# 3 an unsupported op. Run by CTest (cli.run_exit_codes).
set -u
OPF=$1
W=$2
mkdir -p "$W"
D=/usr/share/libonnx-testdata/data/node
fails=0
expect() {
  want=$1
  shift
  "$@" >"$W/out.txt" 2>&1
  got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: exit $got, expected $want: $*"
    cat "$W/out.txt"
    fails=$((fails + 1))
  else
    echo "ok (exit $want): $*"
    sed -n '1,3p' "$W/out.txt" | sed 's/^/    /'
  fi
}
# The kernels this build has: a sanitizer build compiles the simd and fused stages for one ISA,
# or none (naive only), and then the plan undoes every fusion (no kernel above naive runs it).
KERNELS=$("$OPF" ops --json | sed -n 's/.*"kernel": "\([^"]*\)".*/\1/p')
HAS_FUSED=no
echo "$KERNELS" | grep -q '__fused_' && HAS_FUSED=yes
if [ -d "$D" ]; then
  T=$D/test_conv_with_strides_padding
  expect 0 "$OPF" run "$T/model.onnx" --inputs "$T/test_data_set_0" --check --warmup 0 --repeat 1 --stage simd
  # relu run on sigmoid's test data: the outputs differ
  expect 1 "$OPF" run "$D/test_relu/model.onnx" --inputs "$D/test_sigmoid/test_data_set_0" --check --repeat 1
  expect 3 "$OPF" run "$D/test_abs/model.onnx" --repeat 1
fi
expect 2 "$OPF" run "$W/no_such_file.onnx"
expect 2 "$OPF" run mobilenet_v2 --fusion turbo
expect 0 "$OPF" run mobilenet_v2 --fusion basic --stage simd --warmup 0 --repeat 1
if [ "$HAS_FUSED" = yes ]; then
  grep -q "fold_batchnorm_into_conv *x52" "$W/out.txt" || { echo "FAIL: --fusion basic folded no batch norm"; fails=$((fails + 1)); }
else
  grep -q "fallback: fold_batchnorm_into_conv" "$W/out.txt" || { echo "FAIL: naive only, no fallback reported"; fails=$((fails + 1)); }
fi
expect 0 "$OPF" fusions --json
grep -q '"level": "basic"' "$W/out.txt" || { echo "FAIL: opfuse fusions --json lacks the basic level"; fails=$((fails + 1)); }
expect 2 "$OPF" run resnet50 --stage turbo
expect 2 "$OPF" run mobilenet_v2 --exclude-kernel no_such_kernel --repeat 1
expect 2 "$OPF" run mobilenet_v2 --repeat 1 --save-optimized /nonexistent/dir/m.onnx
"$OPF" export mobilenet_v2 "$W/mobilenet_v2.onnx" >/dev/null || fails=$((fails + 1))
head -c 5000 "$W/mobilenet_v2.onnx" >"$W/truncated.onnx"
expect 2 "$OPF" run "$W/truncated.onnx"
printf 'not an onnx file at all' >"$W/junk.onnx"
expect 2 "$OPF" run "$W/junk.onnx"
# a declared (symbolic) dim bound so large the activations exceed the budget: refused up front
expect 2 "$OPF" run bert_layer --dim seq=10000000 --memory-budget 1000000000 --repeat 1
expect 0 "$OPF" run bert_layer --dim seq=16 --warmup 0 --repeat 2 --json --outputs "$W/bert_out"
for key in latency_ms latency_min_ms peak_bytes nodes stage fusion nodes_before nodes_after fused fallbacks; do
  grep -q "\"$key\"" "$W/out.txt" || { echo "FAIL: --json lacks $key"; fails=$((fails + 1)); }
done
# every fused group against its unfused nodes; the fused graph as DOT and as ONNX
expect 0 "$OPF" run bert_layer --dim seq=16 --warmup 0 --repeat 1 --verify-fusion --dot "$W/bert.dot" \
  --save-optimized "$W/bert_fused.onnx"
if [ "$HAS_FUSED" = yes ]; then
  grep -q "ok .*attention_subgraph" "$W/out.txt" || { echo "FAIL: --verify-fusion checked no attention group"; fails=$((fails + 1)); }
  grep -q "subgraph cluster_" "$W/bert.dot" || { echo "FAIL: --dot wrote no fused cluster"; fails=$((fails + 1)); }
fi
[ -s "$W/bert_fused.onnx" ] || { echo "FAIL: --save-optimized wrote nothing"; fails=$((fails + 1)); }
# every simd and fused inverted_residual kernel of this build excluded, so the fused block has
# only naive: the fusion falls back, the run succeeds
# shellcheck disable=SC2046 # one word per kernel
expect 0 "$OPF" run mobilenet_v2 --warmup 0 --repeat 1 \
  $(echo "$KERNELS" | grep -E '^inverted_residual__(simd|fused)_' | sed 's/^/--exclude-kernel /')
grep -q "fallback: inverted_residual_block" "$W/out.txt" || { echo "FAIL: no fallback reported"; fails=$((fails + 1)); }
[ -f "$W/bert_out/output_0.pb" ] || { echo "FAIL: --outputs wrote no output_0.pb"; fails=$((fails + 1)); }
if [ "$fails" -ne 0 ]; then
  echo "cli_run: $fails failures"
  exit 1
fi
echo "cli_run: all passed"

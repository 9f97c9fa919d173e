#!/usr/bin/env bash
# scripts/bench-peers.sh [BUILD_DIR] [OUT_DIR] - whole-model peers next to opfuse's own runs:
# each built-in model (resnet50, mobilenet_v2, bert_layer) is exported to ONNX with the build's
# `opfuse export`, and that same file is run by PyTorch (eager, and frozen: script + freeze +
# optimize_for_inference; weights loaded from the ONNX initializers) and by ONNX Runtime (CPU, at
# graph optimization levels disabled, basic, extended, all), at one thread and at all cores, each
# run in its own process. One JSON file per run in OUT_DIR (default reports/models):
#   peer_<model>_<peer>_<config>_t<threads>.json   (peer: pytorch or onnxruntime)
# holding the runner's record (median_ms, min_ms, times_ms, peak_rss_bytes, nodes, version, ...;
# see scripts/peers/*_run.*) plus "model", "config" and "threads". A peer that is not installed
# gives {"peer", "config", "model", "threads", "skipped": reason} and a run that fails gives
# {..., "failed": the tail of its stderr}; the script goes on either way and exits 0.
#
# Only the peer_*.json files of OUT_DIR are replaced, so this runs after scripts/bench-models.sh,
# which empties the folder. OPFUSE_QUICK=1 times one run each (no warm-up). The PyTorch peer
# needs Debian's python3-torch and python3-torchvision, run by /usr/bin/python3
# (OPFUSE_PEER_PYTHON overrides); the ONNX Runtime peer needs node and scripts/peers/node_modules
# (npm install --ignore-scripts there; scripts/setup.sh does it).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
OUT_DIR=${2:-reports/models}
quick=${OPFUSE_QUICK:-0}
PYTHON=${OPFUSE_PEER_PYTHON:-/usr/bin/python3}
JSON_PYTHON=/usr/bin/python3  # writes the records, so that a broken $PYTHON still gets them
[ -x "$JSON_PYTHON" ] || JSON_PYTHON=python3
PEERS=scripts/peers
RUN_TIMEOUT=${OPFUSE_PEER_TIMEOUT:-300}  # seconds; a hung peer becomes a "failed" record
start=$SECONDS

mkdir -p "$OUT_DIR"
# OPFUSE_ROUND=K: round K of several (see bench-models.sh): .rK files, nothing removed.
suffix=""
if [ -n "${OPFUSE_ROUND:-}" ]; then suffix=".r$OPFUSE_ROUND"; else rm -f "$OUT_DIR"/peer_*.json; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# record FILE MODEL PEER CONFIG THREADS ok|skipped|failed ARG - writes one JSON record: for ok,
# ARG is the runner's stdout (its JSON, extended with model/config/threads); otherwise ARG is
# the reason. A runner that exits 0 without printing one JSON object counts as failed.
record() {
  "$JSON_PYTHON" - "$@" <<'EOF'
import json, sys
out, model, peer, config, threads, kind, arg = sys.argv[1:]
common = {"peer": peer, "config": config, "model": model, "threads": int(threads)}
if kind == "ok":
    text = open(arg).read()
    try:
        rec = json.loads(text)
        rec.update(common)
    except ValueError:
        rec = dict(common, failed="no JSON on stdout: " + text[-2000:])
else:
    rec = dict(common, **{kind: arg})
with open(out, "w") as f:
    json.dump(rec, f)
    f.write("\n")
EOF
}

# Why a peer cannot run here, or nothing when it can.
torch_missing() {  # $1: model
  local mods="torch, onnx, numpy"
  [ "$1" = bert_layer ] || mods="$mods, torchvision"
  if ! [ -x "$PYTHON" ]; then echo "no $PYTHON"; return; fi
  if ! "$PYTHON" -c "import $mods" 2>"$tmp/import.err"; then
    local err
    err=$(tail -n 1 "$tmp/import.err")
    echo "$PYTHON cannot import $mods (Debian: python3-torch python3-torchvision python3-onnx)${err:+: $err}"
  fi
}
ort_missing() {
  if ! command -v node >/dev/null; then echo "node not found"; return; fi
  if ! [ -d "$PEERS/node_modules/onnxruntime-node" ]; then
    echo "onnxruntime-node not installed (cd $PEERS && npm install --ignore-scripts)"
    return
  fi
  if ! node -e "require('./$PEERS/node_modules/onnxruntime-node')" 2>"$tmp/import.err"; then
    local err
    err=$(tail -n 1 "$tmp/import.err")
    echo "onnxruntime-node does not load${err:+: $err}"
  fi
}

# run_peer MODEL PEER CONFIG THREADS WHY_NOT CMD... - one run in its own process, unless WHY_NOT
# ("skipped: reason" or "failed: reason") says why it cannot run.
run_peer() {
  local model=$1 peer=$2 config=$3 t=$4 why_not=$5
  shift 5
  local out="$OUT_DIR/peer_${model}_${peer}_${config}_t${t}${suffix}.json"
  if [ -n "$why_not" ]; then
    echo "bench-peers: $peer $config $model t$t $why_not" >&2
    record "$out" "$model" "$peer" "$config" "$t" "${why_not%%: *}" "${why_not#*: }"
    return
  fi
  echo "bench-peers: $peer $config $model t$t (elapsed $((SECONDS - start)) s)" >&2
  local rc=0
  timeout "$RUN_TIMEOUT" "$@" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
  if [ "$rc" -eq 0 ]; then
    record "$out" "$model" "$peer" "$config" "$t" ok "$tmp/stdout"
  else
    [ "$rc" -eq 124 ] && echo "timed out after ${RUN_TIMEOUT} s" >>"$tmp/stderr"
    echo "bench-peers:   failed (exit $rc): $(tail -n 1 "$tmp/stderr")" >&2
    record "$out" "$model" "$peer" "$config" "$t" failed "exit $rc: $(tail -c 2000 "$tmp/stderr")"
  fi
}

if [ "$quick" -eq 1 ]; then reps=(--warmup 0 --repeat 1); else reps=(--warmup 3 --repeat "${OPFUSE_REPEAT:-15}"); fi
cores=$(nproc)
threads="1"
if [ "$cores" -gt 1 ]; then threads="1 $cores"; fi
ort_why=$(ort_missing)
[ -z "$ort_why" ] || ort_why="skipped: $ort_why"

for model in ${OPFUSE_MODELS:-resnet50 mobilenet_v2 bert_layer}; do
  onnx="$tmp/$model.onnx"
  torch_why=$(torch_missing "$model")
  [ -z "$torch_why" ] || torch_why="skipped: $torch_why"
  ort_model_why=$ort_why
  if ! "$BUILD_DIR/opfuse" export "$model" "$onnx" >/dev/null 2>"$tmp/export.err"; then
    torch_why="failed: opfuse export $model: $(tail -n 1 "$tmp/export.err")"
    ort_model_why=$torch_why
  fi
  for t in $threads; do
    for mode in eager frozen; do
      run_peer "$model" pytorch "$mode" "$t" "$torch_why" \
        "$PYTHON" "$PEERS/torch_run.py" "$onnx" --model "$model" --mode "$mode" --threads "$t" "${reps[@]}"
    done
    for level in disabled basic extended all; do
      run_peer "$model" onnxruntime "$level" "$t" "$ort_model_why" \
        node "$PEERS/ort_run.js" "$onnx" --level "$level" --threads "$t" "${reps[@]}"
    done
  done
  rm -f "$onnx"
done
echo "bench-peers: done in $((SECONDS - start)) s, records in $OUT_DIR/peer_*.json" >&2

#!/usr/bin/env bash
# Runs each model through llama.cpp (llama_dump) and ferry (ferry_engine_probe with
# FERRY_TRACE_DIR) on the same prompt ids and greedy steps, and compares every intermediate
# tensor bit for bit (trace_compare.py). Outside the test suite; see README.md.
#   tools/llamacpp/trace_models.sh BUILD_DIR IDS N_GEN MODEL.gguf...
# Needs $LLAMA_DUMP (default /tmp/llama_dump; build_llama_dump.sh) and node-llama-cpp in $LLREF_DIR (/tmp/llref).
set -euo pipefail
build=${1:?build dir}; ids=${2:?ids}; n_gen=${3:?n_gen}; shift 3
llref=${LLREF_DIR:-/tmp/llref}
bins="$llref/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/ferry-trace.XXXXXX)
trap 'rm -rf "$work"' EXIT
for model in "$@"; do
  rm -rf "$work/l" "$work/f"; mkdir -p "$work/l" "$work/f"
  lout=$("${LLAMA_DUMP:-/tmp/llama_dump}" "$model" "$ids" "$work/l" "$n_gen" "${THREADS:-2}" "$bins" 2>/dev/null)
  fout=$(FERRY_TRACE_DIR="$work/f" "$build/bench/ferry_engine_probe" "$model" "$ids" "$n_gen" \
    "${THREADS:-2}" | sed -n 's/^greedy: //p')
  summary=$(python3 "$here/trace_compare.py" "$work/l" "$work/f" ${TRACE_ALL:+--all})
  echo "== $(basename "$model"): llama.cpp [$lout] ferry [$fout] $(echo "$summary" | tail -1)"
  echo "$summary" | grep -v "all .* tensors identical" | sed '$d' | head -"${TRACE_LINES:-4}"
done

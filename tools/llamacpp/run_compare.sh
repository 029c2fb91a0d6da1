#!/usr/bin/env bash
# Synthesizes models of each architecture and type with `ferry model synth` and compares ferry
# with llama.cpp on them (tools/llamacpp/compare.mjs). Outside the test suite.
#   tools/llamacpp/run_compare.sh BUILD_DIR [LLREF_DIR]
# LLREF_DIR (default /tmp/llref) holds `npm i -E node-llama-cpp@3.21.1`.
set -euo pipefail
build=${1:?build directory with gateway/ferry}
export LLREF_DIR=${2:-/tmp/llref}
ferry="$build/gateway/ferry"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/ferry-llcmp.XXXXXX)
trap 'rm -rf "$work"' EXIT
models=()
for arch in llama qwen2 qwen3; do
  for type in F16 Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K; do
    out="$work/$arch-$type.gguf"
    "$ferry" model synth --arch "$arch" --embd 512 --layers 4 --heads 8 --kv-heads 2 --ffn 1024 \
      --ctx 512 --type "$type" --seed 7 "$out" >/dev/null
    models+=("$out")
  done
done
node "$here/compare.mjs" --ferry "$ferry" --tokens 32 --threads 2 "${models[@]}"

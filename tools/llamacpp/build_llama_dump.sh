#!/usr/bin/env bash
# Builds tools/llamacpp/llama_dump (or another tool of this directory, e.g. llama_quant.cpp)
# against the prebuilt llama.cpp of node-llama-cpp@3.21.1 and the headers of its bundled source
# (extracted once to $LLSRC_DIR from the package's git bundle).
#   tools/llamacpp/build_llama_dump.sh [LLREF_DIR] [OUT] [SOURCE]
set -euo pipefail
llref=${1:-/tmp/llref}
out=${2:-/tmp/llama_dump}
source=${3:-llama_dump.cpp}
src=${LLSRC_DIR:-/tmp/llama-src}
bins="$llref/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
if [ ! -d "$src/include" ]; then
  git clone -q "$llref/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$src"
fi
here=$(cd "$(dirname "$0")" && pwd)
g++ -std=c++17 -O1 -o "$out" "$here/$source" -I"$src/include" -I"$src/ggml/include" \
  "$bins/libllama.v0.4.0.so" "$bins/libggml.v0.4.0.so" "$bins/libggml-base.so" \
  -Wl,-rpath,"$bins"
echo "$out (run with BACKEND_DIR $bins)"

#!/usr/bin/env bash
# Builds llama.cpp's own benchmark and quantizing tools natively (GGML_NATIVE: the kernels this
# CPU can run, as a user who builds llama.cpp gets them) from the source bundled in
# node-llama-cpp@3.21.1, for the same-run comparisons in bench/README.md.
#   tools/llamacpp/build_llama_tools.sh [LLREF_DIR] [OUT_DIR]
# LLREF_DIR holds node_modules/node-llama-cpp (default: tests/tokenizer/refs, where the test
# command installs it); OUT_DIR gets bin/llama-bench, bin/llama-batched-bench, bin/llama-quantize
# (default /tmp/llama-native). The source is cloned once to $LLSRC_DIR (default /tmp/llama-src).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
llref=${1:-$here/../../tests/tokenizer/refs}
out=${2:-/tmp/llama-native}
src=${LLSRC_DIR:-/tmp/llama-src}
bundle="$llref/node_modules/node-llama-cpp/llama/gitRelease.bundle"
if [ ! -f "$bundle" ]; then
  echo "build_llama_tools: no $bundle (install node-llama-cpp@3.21.1 under $llref first)" >&2
  exit 2
fi
if [ ! -f "$src/CMakeLists.txt" ]; then
  git clone -q "$bundle" "$src"
fi
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "$src" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF "${launcher[@]}" >/dev/null
cmake --build "$out" -j "${FERRY_JOBS:-2}" --target llama-bench llama-batched-bench llama-quantize
ls -l "$out/bin/llama-bench" "$out/bin/llama-batched-bench" "$out/bin/llama-quantize"

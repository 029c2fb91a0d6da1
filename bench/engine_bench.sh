#!/usr/bin/env bash
# ferry's local engine against llama.cpp, side by side in one run, on synthetic
# SmolLM2-360M-shaped models (Q8_0 and Q4_K_M). See bench/README.md ("Local engine").
#   bench/engine_bench.sh BUILD_DIR [THREADS] [LLREF_DIR]
set -euo pipefail
build=${1:?build directory with gateway/ferry}
threads=${2:-2}
export LLREF_DIR=${3:-/tmp/llref}
ferry="$build/gateway/ferry"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/ferry-engine-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
for type in Q8_0 Q4_K_M; do
  model="$work/smollm2-360m-$type.gguf"
  "$ferry" model synth --preset smollm2-360m --type "$type" --seed 1 "$model" >/dev/null
  echo "== $type ($(du -m "$model" | cut -f1) MiB)"
  "$ferry" engine bench --model "$model" --threads "$threads" -p 512 -n 128 -r 2
  if [ -d "$LLREF_DIR/node_modules/node-llama-cpp" ]; then
    node "$here/engine_llamacpp.mjs" "$model" "$threads" 512 128
  fi
done

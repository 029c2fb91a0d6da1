#!/usr/bin/env bash
# ferry's local engine against llama.cpp, side by side in one run, on synthetic
# SmolLM2-360M-shaped models (Q8_0 and Q4_K_M). See bench/README.md ("Local engine").
#   bench/engine_bench.sh BUILD_DIR [THREADS] [LLREF_DIR]
# Each model: REPEAT (default 3) back-to-back pairs of `ferry engine bench` and llama.cpp
# (node-llama-cpp's prebuilt, flash attention FA = auto|on|off, default auto: its fastest here),
# both run with `nice -n NICE` (default -5); a line of ratios per pair.
set -euo pipefail
build=${1:?build directory with gateway/ferry}
threads=${2:-2}
export LLREF_DIR=${3:-/tmp/llref}
repeat=${REPEAT:-3}
fa=${FA:-auto}
niceness=${NICE:--5}
ferry="$build/gateway/ferry"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/ferry-engine-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
for type in Q8_0 Q4_K_M; do
  model="$work/smollm2-360m-$type.gguf"
  "$ferry" model synth --preset smollm2-360m --type "$type" --seed 1 "$model" >/dev/null
  echo "== $type ($(du -m "$model" | cut -f1) MiB)"
  for ((i = 1; i <= repeat; i++)); do
    f=$(nice -n "$niceness" "$ferry" engine bench --model "$model" --threads "$threads" -p 512 -n 128 -r 2)
    echo "$f" | grep -E "^(pp|tg|rss)"
    if [ ! -d "$LLREF_DIR/node_modules/node-llama-cpp" ]; then continue; fi
    l=$(cd "$LLREF_DIR" && nice -n "$niceness" node "$here/engine_llamacpp.mjs" "$model" "$threads" 512 128 "$fa")
    echo "$l"
    fpp=$(echo "$f" | sed -n 's/^pp512: \([0-9.]*\).*/\1/p'); ftg=$(echo "$f" | sed -n 's/^tg128: \([0-9.]*\).*/\1/p')
    lpp=$(echo "$l" | sed -n 's/.*pp512: \([0-9.]*\).*/\1/p'); ltg=$(echo "$l" | sed -n 's/.*tg128: \([0-9.]*\).*/\1/p')
    awk -v a="$fpp" -v b="$lpp" -v c="$ftg" -v d="$ltg" -v i="$i" \
      'BEGIN { printf "pair %d: pp512 ferry/llama.cpp %.2fx  tg128 ferry/llama.cpp %.2fx\n", i, a / b, c / d }'
  done
done

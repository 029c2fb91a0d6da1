#!/usr/bin/env bash
# ferry's local engine against llama.cpp, side by side in one run, on synthetic
# SmolLM2-360M-shaped models (Q8_0 and Q4_K_M). See bench/README.md ("Local engine").
#   bench/engine_bench.sh BUILD_DIR [THREADS] [LLREF_DIR | LLAMA_BENCH]
# Each model: REPEAT (default 3) back-to-back pairs of `ferry engine bench` and llama.cpp, both
# run with `nice -n NICE` (default -5) and, when flock(1) is there, under the lock
# /tmp/ferry-bench.lock (so two benchmarks never overlap); a line of ratios per pair.
# llama.cpp is either
#   - a llama-bench executable (path ending in llama-bench, e.g. a native GGML_NATIVE build):
#     run with the same threads, -p 512 -n 128 -r LLAMA_REPS (default 2, like ferry's -r 2),
#     flash attention off and on (FA_LIST, default "0,1"); the best sample of each test over
#     both settings is the reference (ferry reports its best of 2 too), or
#   - node-llama-cpp's prebuilt in LLREF_DIR (default /tmp/llref) through
#     engine_llamacpp.mjs, flash attention FA = auto|on|off (default auto).
set -euo pipefail
build=${1:?build directory with gateway/ferry}
threads=${2:-2}
ref=${3:-/tmp/llref}
repeat=${REPEAT:-3}
fa=${FA:-auto}
fa_list=${FA_LIST:-0,1}
llama_reps=${LLAMA_REPS:-2}
niceness=${NICE:--5}
ferry="$build/gateway/ferry"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/ferry-engine-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

llama_bench=
if [ -f "$ref" ] && [ -x "$ref" ]; then
  llama_bench=$ref
else
  export LLREF_DIR=$ref
fi
locked() {
  if command -v flock >/dev/null; then flock /tmp/ferry-bench.lock "$@"; else "$@"; fi
}

# llama-bench's jsonl on stdin -> "pp512: X t/s (fa F)  tg128: Y t/s (fa F)", best samples.
best_of_llama_bench() {
  awk '
    function field(name,   m) {
      if (match($0, "\"" name "\": *[^,}]*")) {
        m = substr($0, RSTART, RLENGTH); sub(/^[^:]*: */, "", m); gsub(/"/, "", m); return m
      }
      return ""
    }
    {
      np = field("n_prompt") + 0; ng = field("n_gen") + 0; f = field("flash_attn")
      s = $0; sub(/.*"samples_ts": *\[/, "", s); sub(/\].*/, "", s)
      n = split(s, v, ","); best = 0
      for (i = 1; i <= n; i++) if (v[i] + 0 > best) best = v[i] + 0
      if (np > 0 && ng == 0 && best > pp) { pp = best; ppf = f; ppn = np }
      if (ng > 0 && np == 0 && best > tg) { tg = best; tgf = f; tgn = ng }
    }
    END { printf "llama-bench pp%d: %.2f t/s (fa %s)  tg%d: %.2f t/s (fa %s)\n", ppn, pp, ppf, tgn, tg, tgf }
  '
}

for type in Q8_0 Q4_K_M; do
  model="$work/smollm2-360m-$type.gguf"
  "$ferry" model synth --preset smollm2-360m --type "$type" --seed 1 "$model" >/dev/null
  echo "== $type ($(du -m "$model" | cut -f1) MiB)"
  for ((i = 1; i <= repeat; i++)); do
    echo "-- pair $i: $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
    f=$(locked nice -n "$niceness" "$ferry" engine bench --model "$model" --threads "$threads" -p 512 -n 128 -r 2)
    echo "$f" | grep -E "^(pp|tg|rss)"
    if [ -n "$llama_bench" ]; then
      l=$(locked nice -n "$niceness" "$llama_bench" -m "$model" -t "$threads" -p 512 -n 128 -r "$llama_reps" \
            -fa "$fa_list" -o jsonl 2>/dev/null | best_of_llama_bench)
    elif [ -d "$LLREF_DIR/node_modules/node-llama-cpp" ]; then
      l=$(cd "$LLREF_DIR" && locked nice -n "$niceness" node "$here/engine_llamacpp.mjs" "$model" "$threads" 512 128 "$fa")
    else
      continue
    fi
    echo "$l"
    fpp=$(echo "$f" | sed -n 's/^pp512: \([0-9.]*\).*/\1/p'); ftg=$(echo "$f" | sed -n 's/^tg128: \([0-9.]*\).*/\1/p')
    lpp=$(echo "$l" | sed -n 's/.*pp512: \([0-9.]*\).*/\1/p'); ltg=$(echo "$l" | sed -n 's/.*tg128: \([0-9.]*\).*/\1/p')
    awk -v a="$fpp" -v b="$lpp" -v c="$ftg" -v d="$ltg" -v i="$i" \
      'BEGIN { printf "pair %d: pp512 ferry/llama.cpp %.2fx  tg128 ferry/llama.cpp %.2fx\n", i, a / b, c / d }'
  done
done

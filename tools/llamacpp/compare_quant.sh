#!/usr/bin/env bash
# Compares `ferry model quantize` with llama-quantize (llama_model_quantize of the prebuilt
# libllama in node-llama-cpp, through tools/llamacpp/llama_quant) on synthetic F16 models whose
# rows are not whole 256-blocks (896 wide like Qwen2.5-0.5B, untied; 960 wide like
# SmolLM2-360M, tied): per mix, whether every tensor gets the same type, and the two file sizes.
# Outside the test suite; exits non-zero when a tensor's type differs.
#   tools/llamacpp/compare_quant.sh BUILD_DIR [LLREF_DIR] [KEEP_DIR]
# KEEP_DIR (optional) keeps the llama-quantize outputs (for compare.mjs).
set -euo pipefail
build=${1:?build directory with gateway/ferry}
llref=${2:-/tmp/llref}
ferry="$build/gateway/ferry"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/ferry-qcmp.XXXXXX)
trap 'rm -rf "$work"' EXIT
keep=${3:-}
[ -n "$keep" ] && mkdir -p "$keep"
quant="$work/llama_quant"
"$here/build_llama_dump.sh" "$llref" "$quant" llama_quant.cpp >/dev/null
types() { "$ferry" model info --tensors "$1" | awk '/^  [a-z]/ {print $1, $2}'; }
status=0
printf '| model | mix | same type | ferry bytes | llama-quantize bytes | ratio |\n'
printf '| --- | --- | --- | --- | --- | --- |\n'
for shape in "qwen2 896 14 2 4864 8 untied" "llama 960 15 5 2560 8 tied"; do
  read -r arch embd heads kv ffn layers tie <<<"$shape"
  src="$work/$arch-$embd-F16.gguf"
  "$ferry" model synth --arch "$arch" --embd "$embd" --heads "$heads" --kv-heads "$kv" \
    --head-dim 64 --ffn "$ffn" --layers "$layers" --ctx 512 --type F16 --seed 3 \
    $([ "$tie" = tied ] && echo --tied) "$src" >/dev/null
  for mix in Q4_K_M Q5_K_M Q6_K Q8_0 Q4_0; do
    "$ferry" model quantize "$src" "$work/ferry.gguf" "$mix" --threads 2 >/dev/null 2>&1
    "$quant" "$src" "$work/llama.gguf" "$mix" 2 >/dev/null 2>&1
    [ -n "$keep" ] && cp "$work/llama.gguf" "$keep/$arch-$embd-$mix.llama-quantize.gguf"
    total=$(types "$work/llama.gguf" | wc -l)
    same=$(comm -12 <(types "$work/ferry.gguf" | sort) <(types "$work/llama.gguf" | sort) | wc -l)
    if [ "$same" != "$total" ]; then
      status=1
      diff <(types "$work/ferry.gguf") <(types "$work/llama.gguf") | head -8 >&2 || true
    fi
    fb=$(stat -c %s "$work/ferry.gguf")
    lb=$(stat -c %s "$work/llama.gguf")
    printf '| %s-%s | %s | %s/%s | %s | %s | %s |\n' "$arch" "$embd" "$mix" "$same" "$total" \
      "$fb" "$lb" "$(awk -v a="$fb" -v b="$lb" 'BEGIN {printf "%.4f", a / b}')"
  done
done
exit $status

#!/usr/bin/env bash
# Synthesizes models of each architecture and type with `ferry model synth`, quantizes 896-wide
# F16 models of each architecture with llama-quantize (llama_model_quantize of the prebuilt
# libllama, tools/llamacpp/llama_quant.cpp: Q5_0 / Q8_0 fallbacks, as the files people download
# have), and compares ferry with llama.cpp on all of them (tools/llamacpp/compare.mjs: first
# divergence per prompt). Outside the test suite.
#   tools/llamacpp/run_compare.sh BUILD_DIR [LLREF_DIR]
# LLREF_DIR (default /tmp/llref) holds `npm i -E node-llama-cpp@3.21.1`.
# FERRY_COMPARE_TYPES overrides the synth types; FERRY_COMPARE_MIXES the llama-quantize mixes;
# FERRY_COMPARE_ARCHS the architectures (default all seven).
set -euo pipefail
build=${1:?build directory with gateway/ferry}
export LLREF_DIR=${2:-/tmp/llref}
ferry="$build/gateway/ferry"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/ferry-llcmp.XXXXXX)
trap 'rm -rf "$work"' EXIT
types=${FERRY_COMPARE_TYPES:-F16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K_M Q5_K_M Q6_K IQ4_NL IQ4_XS}
mixes=${FERRY_COMPARE_MIXES:-Q4_K_M Q5_K_M Q8_0}
archs=${FERRY_COMPARE_ARCHS:-llama qwen2 qwen3 smollm3 gemma2 gemma3 phi3}
# What each architecture's files exercise: smollm3's 4th layer has no RoPE; gemma windows of 16
# positions (the prompts and the 32 greedy tokens go past them; gemma3's 6th layer is global);
# phi3 partial rotary (48 of 64 dimensions) and LongRoPE's long factors (llama.cpp's context of
# 256 and ferry's of 512 both exceed the original 128).
layers() { [ "$1" = gemma3 ] && echo 6 || echo 4; }
arch_flags() {
  case $1 in
    gemma2) echo "--tied --sliding-window 16" ;;
    gemma3) echo "--sliding-window 16" ;;
    phi3) echo "--rope-dim 48 --longrope-orig-ctx 128" ;;
  esac
}
models=()
for arch in $archs; do
  for type in $types; do
    out="$work/$arch-$type.gguf"
    # shellcheck disable=SC2046
    "$ferry" model synth --arch "$arch" --embd 512 --layers "$(layers "$arch")" --heads 8 --kv-heads 2 --ffn 1024 \
      --ctx 512 --type "$type" --seed 7 $(arch_flags "$arch") "$out" >/dev/null
    models+=("$out")
  done
done
if [ -n "$mixes" ]; then
  "$here/build_llama_dump.sh" "$LLREF_DIR" "$work/llama_quant" llama_quant.cpp >/dev/null
  for arch in $archs; do
    f16="$work/$arch-896-F16.gguf"
    # shellcheck disable=SC2046
    "$ferry" model synth --arch "$arch" --embd 896 --layers "$(layers "$arch")" --heads 14 --kv-heads 2 \
      --head-dim 64 --ffn 1536 --ctx 512 --type F16 --seed 7 $(arch_flags "$arch") "$f16" >/dev/null
    for mix in $mixes; do
      out="$work/$arch-896-$mix-llama-quantize.gguf"
      "$work/llama_quant" "$f16" "$out" "$mix" 2 >/dev/null 2>&1
      models+=("$out")
    done
  done
fi
node "$here/compare.mjs" --ferry "$ferry" --tokens 32 --threads 2 "${models[@]}"

#!/usr/bin/env bash
# ctest: ferry's engine against llama.cpp (node-llama-cpp@3.21.1's prebuilt library, through
# tools/llamacpp/compare.mjs) on small synthetic models of every architecture: each prompt's
# 16 greedy tokens identical and the next-token log-probabilities within 0.01. Skips (77) when
# node or node-llama-cpp is absent.
#   tests/local_engine/llamacpp_agreement.sh FERRY_BIN SOURCE_DIR
set -euo pipefail
ferry=${1:?ferry binary}
src=${2:?source dir}
llref=${LLREF_DIR:-}
if [ -z "$llref" ]; then
  for dir in "$src/tests/tokenizer/refs" /tmp/llref; do
    if [ -d "$dir/node_modules/node-llama-cpp" ]; then llref=$dir; break; fi
  done
fi
if ! command -v node >/dev/null || [ -z "$llref" ] || [ ! -d "$llref/node_modules/node-llama-cpp" ]; then
  echo "node-llama-cpp not installed (tests/tokenizer/refs or LLREF_DIR): skipped"
  exit 77
fi
work=$(mktemp -d /tmp/ferry-llagree.XXXXXX)
trap 'rm -rf "$work"' EXIT
models=()
for arch in llama qwen2 qwen3 smollm3 gemma2 gemma3 phi3; do
  flags=(--embd 128 --layers 4 --heads 4 --kv-heads 2 --ffn 256 --ctx 256 --seed 3)
  case $arch in
    gemma2) flags+=(--tied --sliding-window 8) ;;
    gemma3) flags=(--embd 128 --layers 6 --heads 4 --kv-heads 2 --ffn 256 --ctx 256 --seed 3
                   --sliding-window 8) ;;
    phi3) flags+=(--rope-dim 24 --longrope-orig-ctx 64) ;;
  esac
  for type in F16 Q8_0; do
    out="$work/$arch-$type.gguf"
    "$ferry" model synth --arch "$arch" --type "$type" "${flags[@]}" "$out" >/dev/null
    models+=("$out")
  done
done
# The types whose float order llama.cpp picks by CPU or batch (Q2_K repacked on AVX-512, IQ4_XS
# in its IQ panel gemm from 8 tokens; the second prompt has 24): whole 256-blocks need 256 wide.
for type in Q2_K IQ4_XS; do
  out="$work/llama-256-$type.gguf"
  "$ferry" model synth --arch llama --type "$type" --embd 256 --layers 2 --heads 4 --kv-heads 2 \
    --ffn 512 --ctx 256 --seed 3 "$out" >/dev/null
  models+=("$out")
done
table=$(LLREF_DIR="$llref" node "$src/tools/llamacpp/compare.mjs" --ferry "$ferry" --tokens 16 \
  --threads 2 "${models[@]}")
echo "$table"
# | model | prompts | same/prompts | first divergences | same top-1 | max logprob diff |
echo "$table" | awk -F'|' '/\.gguf/ {
  split($4, same, "/"); diff = $7 + 0;
  if (same[1] + 0 != same[2] + 0 || diff > 0.01) { print "DISAGREES:" $2; bad = 1 }
} END { exit bad }'

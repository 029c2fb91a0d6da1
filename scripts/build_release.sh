#!/usr/bin/env bash
# The ferry binary to deploy: built profile-guided. ferry is built instrumented
# (-fprofile-generate), run through a training load that covers what a server spends its time
# on (the gateway's proxy and accounting paths under load, the in-process engine through the
# server and on its own), then built again with those counts (-fprofile-use; CMake option
# FERRY_PROFILE; the engine's kernels keep the ordinary build's code). The result,
# FERRY_RELEASE_DIR/ferry (default build-release/ferry), is the same source as build/gateway/ferry
# with the hot paths laid out and inlined by measurement: 11-13% fewer instructions a proxied
# request, 13-14% less CPU a request at 200 req/s (bench/README.md, issue 17 session 27). Code
# the training never ran is compiled as without a profile (-fprofile-partial-training), not
# shrunk for size.
#   scripts/build_release.sh [--check]
#   --check: then run the integration tests (tests/integration, the real binary) against it
#   (builds them in ./build first: several minutes the first time).
#   FERRY_RELEASE_DIR (default build-release), FERRY_JOBS (default: the number of CPUs),
#   FERRY_RELEASE_REBUILD=1: build even when the binary there is of this commit.
# Cost: ferry compiled twice more (instrumented, then optimized), the training ~2 minutes.
# Warnings are not errors here: g++ 12 warns falsely under -fprofile-use (-Warray-bounds).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
check=0
for arg in "$@"; do
  case $arg in
    --check) check=1 ;;
    *)
      echo "usage: scripts/build_release.sh [--check]" >&2
      exit 2
      ;;
  esac
done
out=$(realpath -m "${FERRY_RELEASE_DIR:-build-release}")
tree=$out/tree
jobs=${FERRY_JOBS:-$(nproc)}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
log() { echo "build_release: $*" >&2; }
# shellcheck source=bench/gateway_common.sh
source bench/gateway_common.sh  # wait_listening
work="" server="" pg_dir=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
  if [ -n "$pg_dir" ]; then scripts/pg_test.sh stop "$pg_dir" || true; fi
  if [ -n "$work" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT
# --check: the integration tests (the ordinary build's) against the release binary.
check_binary() {
  log "checking it: the integration tests against $out/ferry (PostgreSQL's among them)"
  FERRY_BUILD_TARGETS="" scripts/build.sh
  pg_dir=$(mktemp -d /tmp/ferry-pg.XXXXXX)  # stopped and removed by cleanup
  scripts/pg_test.sh start "$pg_dir"
  eval "$(scripts/pg_test.sh env "$pg_dir")"
  FERRY_BINARY=$out/ferry ctest --test-dir build -L integration -j "$jobs" --output-on-failure
}

scripts/setup.sh
# The commit the binary is built from is recorded beside it (when the checkout has no changes):
# a binary of the same commit is not built again (FERRY_RELEASE_REBUILD=1 builds it anyway).
source_id=""
if git -C "$src" rev-parse --verify -q HEAD >/dev/null &&
  [ -z "$(git -C "$src" status --porcelain)" ]; then
  source_id=$(git -C "$src" rev-parse HEAD)
fi
if [ -n "$source_id" ] && [ "${FERRY_RELEASE_REBUILD:-0}" != 1 ] && [ -x "$out/ferry" ] &&
  [ "$(cat "$out/ferry.source" 2>/dev/null)" = "$source_id" ]; then
  log "$out/ferry is built from this commit ($source_id): not built again"
  if [ "$check" = 1 ]; then check_binary; fi
  exit 0
fi
rm -f "$out/ferry.source"
# The training's other programs (the stub upstream, the load generator and the benchmark's
# helpers) come from the ordinary build.
helpers=(bench/ferry_loadgen bench/ferry_bench_relay bench/ferry_bench_fsync
  tests/integration/ferry_test_upstream)  # paths in a build; each target is named as its file
targets=$(for f in "${helpers[@]}"; do basename "$f"; done)
log "building the training's helpers in build/ ($(echo $targets))"
FERRY_BUILD_TARGETS="$(echo $targets)" scripts/build.sh
mkdir -p "$out/train/gateway" "$out/train/bench" "$out/train/tests/integration" "$tree"
for f in "${helpers[@]}"; do cp "build/$f" "$out/train/$f"; done

# build generate|use: ferry alone in the tree, instrumented or with the training's counts
# (CMake option FERRY_PROFILE).
build() {
  cmake -S "$src" -B "$tree" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_WERROR=OFF \
    -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_BENCH=OFF "-DFERRY_PROFILE=$1" >"$tree/cmake.log"
  ninja -C "$tree" -j "$jobs" gateway/ferry >"$tree/ninja.log" || {
    tail -30 "$tree/ninja.log" >&2
    exit 1
  }
}

started=$SECONDS
log "instrumented build ($tree)"
find "$tree" -name '*.gcda' -delete
build generate
cp "$tree/gateway/ferry" "$out/train/gateway/ferry"
ferry=$out/train/gateway/ferry

log "training: the gateway under load (bench/gateway_bench.sh: the pass-through and the full" \
  "accounting path)"
: >"$tree/training.log"
for scenario in "chat c=16" "chat stream c=16" "chat 200/s"; do
  # Each ferry writes its counts when it exits (gateway_bench.sh stops it with SIGTERM).
  FERRY_BUILD_DIR=$out/train BENCH_NGINX=off BENCH_RELAY=off bench/gateway_bench.sh \
    --duration 3 --warmup 0.5 --rounds 1 --only "$scenario" >>"$tree/training.log" 2>&1 || {
    tail -30 "$tree/training.log" >&2
    exit 1
  }
done

log "training: the in-process engine (the demo model through the server; synthetic Q8_0 and" \
  "Q4_K_M models on their own)"
work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-release.XXXXXX")
cat >"$work/local.yaml" <<EOF
server: { listen: 127.0.0.1:0 }
backends: [{ name: cpu, kind: local, model: $src/models/ferry-demo-1m.gguf, threads: 2 }]
models: [{ name: demo, backend: cpu }]
EOF
"$ferry" serve --config "$work/local.yaml" >"$work/serve.out" 2>>"$tree/training.log" &
server=$!
url=$(wait_listening "$work/serve.out" "the instrumented ferry on the demo model") || exit 1
for batch in 0 1 2; do  # 8 requests at a time, streamed and not
  asked=()
  for i in $(seq $((batch * 8 + 1)) $((batch * 8 + 8))); do
    stream=false
    [ $((i % 2)) = 0 ] && stream=true
    curl -sf "$url/v1/chat/completions" -H 'Content-Type: application/json' \
      -d "{\"model\":\"demo\",\"stream\":$stream,\"max_tokens\":48,\"seed\":$i,
           \"messages\":[{\"role\":\"system\",\"content\":\"You are terse.\"},
                         {\"role\":\"user\",\"content\":\"Tell me about the sea, $i.\"}]}" \
      >/dev/null &
    asked+=($!)
  done
  for pid in "${asked[@]}"; do
    wait "$pid" || {
      log "a chat completion from the demo model failed (log: $tree/training.log)"
      exit 1
    }
  done
done
kill -TERM "$server"
wait "$server" || true
server=""
for type in Q8_0 Q4_K_M; do
  # smollm2-360m's widths (960, 15 heads, 5 kv heads, ffn 2560: the engine's per-row loops as
  # long as a real model's; the kernels themselves are not profile-guided), two layers.
  "$ferry" model synth --arch llama --embd 960 --heads 15 --kv-heads 5 --ffn 2560 --layers 2 \
    --ctx 1024 --type "$type" "$work/synth-$type.gguf" >>"$tree/training.log" 2>&1
  "$ferry" engine bench --model "$work/synth-$type.gguf" -p 256 -n 64 --threads 2 \
    >>"$tree/training.log" 2>&1
done

profiles=$(find "$tree" -name '*.gcda' | wc -l)
if [ "$profiles" -eq 0 ]; then
  log "the training wrote no profile (log: $tree/training.log)"
  exit 1
fi
log "optimized build ($profiles profiles)"
build use
cp "$tree/gateway/ferry" "$out/ferry"
if [ -n "$source_id" ]; then echo "$source_id" >"$out/ferry.source"; fi
log "$out/ferry built in $((SECONDS - started)) s"
if [ "$check" = 1 ]; then check_binary; fi

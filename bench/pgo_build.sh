#!/usr/bin/env bash
# The profile-guided release binary (scripts/build_release.sh) laid out as a build directory for
# the gateway benchmarks: OUT_DIR/gateway/ferry and the benchmark's other programs, so that
# `FERRY_BUILD_DIR=OUT_DIR bench/gateway_bench.sh ...` measures it (BENCH_COMPARE=build/gateway/ferry
# puts the ordinary build in the same rounds).
#   bench/pgo_build.sh OUT_DIR   (the release build's own tree: OUT_DIR/release)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:?usage: bench/pgo_build.sh OUT_DIR}")
FERRY_RELEASE_DIR=$out/release scripts/build_release.sh
mkdir -p "$out/gateway"
cp -r "$out/release/train/bench" "$out/release/train/tests" "$out/"
cp "$out/release/ferry" "$out/gateway/ferry"
echo "pgo_build: $out/gateway/ferry" >&2

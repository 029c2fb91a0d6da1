#!/usr/bin/env bash
# A profile-guided build of the ferry binary, for the gateway benchmarks: ferry built
# instrumented (-fprofile-generate), run under gateway_bench.sh's scenarios `chat c=16`,
# `chat stream c=16` and `chat 200/s` (the pass-through ferry and ferry-full), then built again
# with that profile (-fprofile-use) and copied, with the benchmark's other binaries, into
# OUT_DIR: `FERRY_BUILD_DIR=OUT_DIR bench/gateway_bench.sh ...` measures it.
#   bench/pgo_build.sh OUT_DIR
#   FERRY_BUILD_DIR: the build whose loadgen, stub upstream, relay and fsync floor are copied
#   (default build); PGO_TREE: the build tree (default OUT_DIR/tree); FERRY_JOBS (default 2).
# Not the default build (scripts/build.sh): what it gains is in bench/README.md (issue 17,
# session 25). Warnings are not errors here: g++ 12 warns falsely under -fprofile-use.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
out=$(realpath -m "${1:?usage: bench/pgo_build.sh OUT_DIR}")
base=${FERRY_BUILD_DIR:-build}
tree=${PGO_TREE:-$out/tree}
jobs=${FERRY_JOBS:-2}
others=(bench/ferry_loadgen bench/ferry_bench_relay bench/ferry_bench_fsync
  tests/integration/ferry_test_upstream)
for f in "${others[@]}"; do
  if [ ! -x "$base/$f" ]; then
    echo "pgo_build: $base/$f is missing (build it first: scripts/build.sh)" >&2
    exit 2
  fi
done
mkdir -p "$out/gateway" "$out/bench" "$out/tests/integration" "$tree"
for f in "${others[@]}"; do cp "$base/$f" "$out/$f"; done

# build PROFILE_FLAGS LINK_FLAGS: ferry in the tree with these flags, copied to OUT_DIR.
build() {
  cmake -S "$src" -B "$tree" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_WERROR=OFF \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g -DNDEBUG $1" "-DCMAKE_EXE_LINKER_FLAGS=$2" \
    >"$tree/cmake.log"
  ninja -C "$tree" -j "$jobs" gateway/ferry >"$tree/ninja.log" || {
    tail -30 "$tree/ninja.log" >&2
    exit 1
  }
  cp "$tree/gateway/ferry" "$out/gateway/ferry"
}

echo "pgo_build: instrumented build" >&2
find "$tree" -name '*.gcda' -delete
build "-fprofile-generate -fprofile-update=atomic" "-fprofile-generate"
echo "pgo_build: training" >&2
for scenario in "chat c=16" "chat stream c=16" "chat 200/s"; do
  # Each ferry writes its counts when it exits (gateway_bench.sh stops it with SIGTERM).
  FERRY_BUILD_DIR=$out BENCH_NGINX=off BENCH_RELAY=off bench/gateway_bench.sh --duration 3 \
    --warmup 0.5 --rounds 1 --only "$scenario" >"$tree/training.log" 2>&1 || {
    tail -30 "$tree/training.log" >&2
    exit 1
  }
done
profiles=$(find "$tree" -name '*.gcda' | wc -l)
if [ "$profiles" -eq 0 ]; then
  echo "pgo_build: the training wrote no profile" >&2
  exit 1
fi
echo "pgo_build: optimized build ($profiles profiles)" >&2
build "-fprofile-use -fprofile-correction -Wno-missing-profile" ""
echo "pgo_build: $out/gateway/ferry"

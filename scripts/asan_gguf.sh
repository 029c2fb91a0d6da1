#!/usr/bin/env bash
# The GGUF reader tests (ferry_gguf_tests: hostile files truncated at every byte, overflowing
# sizes and offsets, wrong types, absurd shapes; the reader; the model tools) built with
# AddressSanitizer and UndefinedBehaviorSanitizer in their own build directory, then run.
# Any sanitizer report stops the run with a non-zero status.
#   scripts/asan_gguf.sh [BUILD_DIR] [gtest arguments...]   (BUILD_DIR default: build-asan)
# FERRY_JOBS sets the build's parallelism (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-asan}
shift || true
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFERRY_SANITIZE="address;undefined" \
  -DFERRY_BUILD_TESTS=ON -DFERRY_BUILD_BENCH=OFF >/dev/null
cmake --build "$dir" -j "${FERRY_JOBS:-1}" --target ferry_gguf_tests
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
"$dir/tests/gguf/ferry_gguf_tests" "$@"
echo "asan_gguf: ferry_gguf_tests clean under address,undefined ($dir)"

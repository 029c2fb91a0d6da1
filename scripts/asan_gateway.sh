#!/usr/bin/env bash
# The gateway's integration tests (the real ferry binary and test upstream on loopback:
# the API, hostile clients and upstreams, limits, TLS, upstream pools) with ferry built with
# AddressSanitizer and UndefinedBehaviorSanitizer in its own build directory.
#   scripts/asan_gateway.sh [BUILD_DIR]   (BUILD_DIR default: build-asan-gateway)
# FERRY_JOBS sets the build's parallelism (default 1; a Beast unit takes minutes under ASan).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-asan-gateway}
tests=(ferry_api_tests ferry_fault_tests ferry_limits_tests ferry_tls_tests ferry_upstream_tests)
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFERRY_SANITIZE="address;undefined" \
  -DFERRY_BUILD_TESTS=ON -DFERRY_BUILD_BENCH=OFF >/dev/null
cmake --build "$dir" -j "${FERRY_JOBS:-1}" --target ferry ferry_test_upstream "${tests[@]}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
status=0
for t in "${tests[@]}"; do
  log="$dir/$t.log"
  if ! "$dir/tests/integration/$t" >"$log" 2>&1; then status=1; fi
  reports=$(grep -c 'ERROR: AddressSanitizer\|runtime error:' "$log" || true)
  echo "$t: $(tail -n 1 "$log"); sanitizer reports: $reports"
  if [ "$reports" != 0 ]; then status=1; fi
done
exit "$status"

#!/usr/bin/env bash
# Runs the whole test suite: installs what is missing, builds, runs every ctest test
# (unit and integration tiers, and the conformance tests with the official openai client),
# then a short smoke pass of every fuzz target (scripts/fuzz.sh; FERRY_FUZZ_SECONDS per
# target, default 10; 0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
(cd "${FERRY_BUILD_DIR:-build}" && ctest --output-on-failure -j "${FERRY_JOBS:-$(nproc)}" --timeout 600 "$@")
if [ "${FERRY_FUZZ_SECONDS:-10}" != 0 ]; then scripts/fuzz.sh "${FERRY_FUZZ_SECONDS:-10}"; fi
